//! The new core's timer facade: what its tests, loom models and benches drive until the public
//! types move onto the core.

use super::clock::Clock;
use super::{Boxed, Job, Shared, Timeout};
use crate::error::TimerError;
use crate::sync::Arc;
use std::time::Duration;

/// The new core's timer, for its own tests and benches until the public types move onto it.
pub struct Timer<J: Job = Boxed> {
    shared: Arc<Shared<J>>,
}

impl<J: Job> Timer<J> {
    /// A timer with the system clock; its thread starts with the first timeout.
    pub fn new(tick: Duration, ticks_per_wheel: usize) -> Timer<J> {
        Timer::build(tick, ticks_per_wheel, None, Clock::system())
    }

    /// A timer whose clock only `advance_to` moves, and whose turns only it runs.
    pub fn manual(tick: Duration, ticks_per_wheel: usize, max_pending: Option<usize>) -> Timer<J> {
        Timer::build(tick, ticks_per_wheel, max_pending, Clock::manual())
    }

    fn build(tick: Duration, len: usize, max: Option<usize>, clock: Clock) -> Timer<J> {
        let tick_nanos = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX).max(1);
        Timer {
            shared: Shared::new(tick_nanos, len.next_power_of_two(), max, clock, None),
        }
    }

    /// Schedules `task` to run once `delay` has passed.
    pub fn new_timeout(&self, task: J, delay: Duration) -> Result<Timeout<J>, TimerError> {
        self.start()?;
        match self.shared.schedule(task, delay, false) {
            Ok(handle) => Ok(handle.expect("a handle was asked for")),
            Err((e, _task)) => Err(e),
        }
    }

    /// Schedules `task` with no handle.
    pub fn new_timeout_detached(&self, task: J, delay: Duration) -> Result<(), TimerError> {
        self.start()?;
        self.shared
            .schedule(task, delay, true)
            .map(drop)
            .map_err(|(e, _)| e)
    }

    fn start(&self) -> Result<(), TimerError> {
        if self.shared.is_started() {
            return Ok(());
        }
        self.shared.start("wheel")
    }

    /// Timeouts accepted and not yet ended.
    pub fn pending_timeouts(&self) -> usize {
        self.shared.pending()
    }

    /// The timer's counters, as of the worker's last turn.
    pub fn stats(&self) -> crate::TimerStats {
        self.shared.stats()
    }

    /// Stops the timer; the timeouts that never ran, now cancelled.
    pub fn stop(&self) -> Result<Vec<Timeout<J>>, TimerError> {
        self.shared.stop()
    }

    /// A manual timer: moves its clock to `to` since its origin and runs a turn.
    pub fn advance_to(&self, to: Duration) {
        let to = u64::try_from(to.as_nanos()).unwrap_or(u64::MAX);
        if !self.shared.clock.advance(to) {
            return;
        }
        self.shared.run_turn(self.shared.clock.now());
    }
}

impl Timer<Boxed> {
    /// Schedules the closure `f`, in the box of an earlier closure of its type if one is spare.
    pub fn new_timeout_fn<F>(&self, f: F, delay: Duration) -> Result<Timeout<Boxed>, TimerError>
    where
        F: FnOnce(&Timeout<Boxed>) + Send + 'static,
    {
        self.start()?;
        let make = |spares: &mut Vec<Boxed>| Boxed::reusing(f, spares);
        match self.shared.schedule_with(make, delay, false) {
            Ok(handle) => Ok(handle.expect("a handle was asked for")),
            Err((e, _make)) => Err(e),
        }
    }

    /// `new_timeout_fn` with no handle.
    pub fn new_timeout_fn_detached<F>(&self, f: F, delay: Duration) -> Result<(), TimerError>
    where
        F: FnOnce(&Timeout<Boxed>) + Send + 'static,
    {
        self.start()?;
        let make = |spares: &mut Vec<Boxed>| Boxed::reusing(f, spares);
        self.shared
            .schedule_with(make, delay, true)
            .map(drop)
            .map_err(|(e, _)| e)
    }
}

impl<J: Job> Drop for Timer<J> {
    fn drop(&mut self) {
        self.shared.shutdown();
    }
}

impl<J: Job> std::fmt::Debug for Timer<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer")
            .field("pending", &self.pending_timeouts())
            .finish()
    }
}
