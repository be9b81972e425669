//! [`ManualDriver`]: a timer's turns on the caller's thread, on a clock moved by hand.

use crate::engine::clock::nanos;
use crate::engine::{BoxedTask, Runner, Shared, Stored};
use crate::sync::Arc;
use std::fmt;
use std::time::Duration;

/// Drives a timer built with [`Builder::build_manual`](crate::Builder::build_manual) (which has an
/// example): moves its clock and runs due work on the calling thread. Clones drive the same timer.
///
/// Each advance runs every tick whose end it passes, in Netty's order. A task cannot advance its
/// own timer (see [`advance`](ManualDriver::advance)).
pub struct ManualDriver<J: Stored = BoxedTask> {
    shared: Arc<Shared<J>>,
}

impl<J: Stored> Clone for ManualDriver<J> {
    fn clone(&self) -> Self {
        ManualDriver {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<J: Stored> ManualDriver<J> {
    pub(super) fn new(shared: Arc<Shared<J>>) -> ManualDriver<J> {
        ManualDriver { shared }
    }

    /// Moves the clock forward by `by` and runs everything that became due. The tasks see the
    /// clock at the end of the advance, as they would a worker that many ticks late: one long
    /// advance runs a periodic task under `MissedRuns::Skip` or `Delay` once, where advancing
    /// a tick at a time runs it on each of its deadlines.
    ///
    /// # Panics
    /// From user code that an advance of this timer runs (a task, a task's `Drop`, a waker, the
    /// executor), on its thread: the advance under way holds the worker. The panic is caught
    /// there as any other.
    #[track_caller]
    pub fn advance(&self, by: Duration) {
        let by = nanos(by);
        // From the time the advance finds under the worker's lock: two threads advancing at
        // once each move the clock by their own `by`.
        self.advance_with(|now| now.saturating_add(by));
    }

    /// Moves the clock to `since_origin` (never backwards) and runs everything that became due.
    ///
    /// # Panics
    /// As [`advance`](ManualDriver::advance).
    #[track_caller]
    pub fn advance_to(&self, since_origin: Duration) {
        let to = nanos(since_origin);
        self.advance_with(|_| to);
    }

    /// Moves the clock to `to(now)` (never back) and runs a turn there. Panics on the thread
    /// advancing the timer; another thread's advance is waited for.
    #[track_caller]
    fn advance_with(&self, to: impl FnOnce(u64) -> u64) {
        if self.shared.in_turn() {
            panic!(
                "ManualDriver::advance called from user code that an advance of the same timer \
                 runs (a task, a task's drop, a waker, the executor): the advance under way \
                 holds the worker and would wait for itself; move the clock from the driving \
                 thread, or schedule the next step as a timeout"
            );
        }
        let clock = &self.shared.clock;
        clock.advance(to(clock.now()));
        let _ = self.shared.run_turn(clock.now(), Runner::Thread);
    }

    /// The manual clock's time since the timer's origin.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.shared.clock.now())
    }

    /// The tick being processed (inside a task) or the next one to process (between advances).
    pub fn current_tick(&self) -> u64 {
        self.shared.current_tick()
    }
}

impl<J: Stored> fmt::Debug for ManualDriver<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualDriver")
            .field("now", &self.now())
            .field("current_tick", &self.current_tick())
            .finish()
    }
}
