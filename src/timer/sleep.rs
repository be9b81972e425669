//! A future on the wheel: [`Sleep`], and the timer's `sleep` and `sleep_until`. A `Sleep` is an
//! ordinary timeout whose task wakes the future: the task holds the sleep's waker cell, and its
//! run or its drop (when `stop()` ends it) takes the waker out and wakes it. The timeout's state
//! says how it ended. `Deadline`, `Interval` and the adapters build on it.

use super::nanos;
use crate::engine::{At, BoxedTask, TimerHandle};
use crate::sync::{lock, Arc, Mutex};
use crate::{Timeout, TimerError};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A future that completes at a deadline on a timer's wheel (tokio's `Sleep`).
///
/// Made by [`TimerHandle::sleep`] and [`TimerHandle::sleep_until`], and scheduled at once. It
/// completes with `Ok(())` never before its deadline, at most about a tick after; any executor
/// can poll it.
///
/// - **Dropping** it cancels its timeout.
/// - **Polled from another task**, it wakes that task (the last poll's waker is kept).
/// - **When the timer stops** (or its owner is dropped) it completes with
///   `Err(`[`TimerError::Stopped`]`)`: it never hangs.
/// - **At the pending limit** it takes a place as a new timeout does: made there, or reset there
///   once completed (or refused), it completes at once with
///   `Err(TimerError::TooManyPending { .. })`. Until it completes it keeps its place: a reset
///   re-arms it with a timeout that replaces its own and passes the limit.
/// - It is `Unpin` (`&mut sleep` is a future, for `select!` in a loop), and [`reset`](Sleep::reset)
///   moves its deadline.
///
/// It counts as a timeout in [`pending_timeouts()`](TimerHandle::pending_timeouts) and
/// [`stats()`](TimerHandle::stats); `stop()` does not return it.
#[must_use = "a Sleep does nothing unless awaited, and its drop cancels it"]
pub struct Sleep {
    timer: TimerHandle,
    /// The timeout whose end completes the future, or the error that refused it.
    armed: Result<Timeout, TimerError>,
    /// Where the task finds the waker; one per `Sleep`, shared by the timeouts it arms.
    cell: Arc<WakeCell>,
    /// Nanoseconds since the timer's origin.
    deadline: u64,
    /// The deadline of the armed timeout: before `deadline` after `extend_or_reset` moved it
    /// later, which schedules nothing; the poll after the expiry arms the rest.
    armed_for: u64,
    /// A `DelayQueue`'s wake-up: each of its timeouts passes a pending limit, since the queue
    /// could report a refusal only by polling again at once.
    exempt: bool,
}

/// What a `Sleep` shares with its timeout's task, under one lock.
#[derive(Default)]
struct WakeCell(Mutex<Cell>);

#[derive(Default)]
struct Cell {
    /// The generation of the sleep's armed timeout: the task of one it replaced wakes nobody.
    generation: u64,
    /// The `Sleep` is gone: a task dropped unrun wakes nobody.
    gone: bool,
    /// The waker of the task waiting on the `Sleep`.
    waker: Option<Waker>,
}

impl WakeCell {
    /// The stored waker, taken out.
    fn take(&self) -> Option<Waker> {
        lock(&self.0).waker.take()
    }

    /// Keeps `waker` for the task of `timeout` (unless the cell holds one that wakes the same
    /// task), then reads whether `timeout` has ended. The waker's clone and the drop of the one
    /// it replaces are user code, run outside the lock: they may stop the timer or move a manual
    /// clock, whose wake-ups take the lock. Either panics into the poll, with a waker kept.
    fn keep(&self, waker: &Waker, timeout: &Timeout) -> bool {
        if !lock(&self.0)
            .waker
            .as_ref()
            .is_some_and(|w| w.will_wake(waker))
        {
            let new = waker.clone();
            let old = lock(&self.0).waker.replace(new);
            drop(old);
        }
        ended(timeout)
    }
}

/// A sleep's timeout's task: wakes the waiting task when it runs (the timeout expired), or when
/// it is dropped unrun while the `Sleep` lives (`stop()` ended it).
struct Wake {
    cell: Arc<WakeCell>,
    generation: u64,
    ran: bool,
}

impl Wake {
    /// The timeout expired: wakes the waiting task (as the drop at the end of this call).
    fn fire(mut self) {
        self.ran = true;
    }
}

impl Drop for Wake {
    fn drop(&mut self) {
        let waker = {
            let mut cell = lock(&self.cell.0);
            if cell.generation != self.generation || (cell.gone && !self.ran) {
                return;
            }
            cell.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl Sleep {
    /// A sleep until `deadline` (ns since the origin), armed now.
    pub(crate) fn at(timer: &TimerHandle, deadline: u64, exempt: bool) -> Sleep {
        let mut sleep = Sleep {
            timer: timer.clone(),
            armed: Err(TimerError::Stopped),
            cell: Arc::default(),
            deadline,
            armed_for: deadline,
            exempt,
        };
        sleep.armed = sleep.arm(deadline, exempt);
        sleep
    }

    /// Schedules the timeout for `deadline` under a new generation: its task wakes the waiter.
    fn arm(&self, deadline: u64, exempt: bool) -> Result<Timeout, TimerError> {
        let generation = {
            let mut cell = lock(&self.cell.0);
            cell.generation += 1;
            cell.generation
        };
        let wake = Wake {
            cell: Arc::clone(&self.cell),
            generation,
            ran: false,
        };
        let make = move |spares: &mut Vec<BoxedTask>| {
            BoxedTask::internal(move |_: &Timeout| wake.fire(), spares)
        };
        let now = self.timer.0.clock.now();
        let at = At {
            deadline,
            now,
            exempt,
        };
        match self.timer.0.schedule_at(make, at, false) {
            Ok(timeout) => Ok(timeout.expect("a handle was asked for")),
            Err((e, _make)) => Err(e),
        }
    }

    /// Whether the timer refused this sleep's timeout at its pending limit: a refusal that a
    /// later arm may not meet.
    pub(super) fn refused_at_limit(&self) -> bool {
        matches!(&self.armed, Err(TimerError::TooManyPending { .. }))
    }

    /// The timer this sleep is on.
    pub(crate) fn timer(&self) -> &TimerHandle {
        &self.timer
    }

    /// When the sleep is due: as made, or by the last [`reset`](Sleep::reset). On a manual clock,
    /// an `Instant` counted from the call. A deadline past 2^64 ns (584 years) after the timer's
    /// start, which never fires, reads as that far.
    pub fn deadline(&self) -> Instant {
        self.timer.0.clock.instant_at(self.deadline)
    }

    /// Whether the timeout has expired: polling now returns `Ready(Ok(()))`.
    pub fn is_elapsed(&self) -> bool {
        matches!(&self.armed, Ok(timeout) if timeout.is_expired())
            && (self.deadline <= self.armed_for || self.deadline <= self.timer.0.clock.passed())
    }

    /// Moves the deadline to `deadline` (earlier or later), whether or not the sleep had completed;
    /// a waiting task is woken at the new one, and no waker is cloned. For idle detection: reset
    /// on every message. On a stopped timer the sleep completes with the error; at a pending
    /// limit, see [`Sleep`].
    ///
    /// # Panics
    /// If the timer refuses the new timeout and the waiting task's waker panics as it is woken
    /// to hear so, that panic goes on once the reset is done: the sleep has completed with the
    /// refusal.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::{Duration, Instant};
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let mut idle = timer.sleep(Duration::from_secs(3600));
    /// idle.reset(Instant::now() + Duration::from_millis(10));
    /// futures::executor::block_on(&mut idle).unwrap();
    /// ```
    pub fn reset(&mut self, deadline: Instant) {
        let clock = &self.timer.0.clock;
        let deadline = clock.nanos_at(deadline).max(clock.now());
        self.rearm(deadline);
    }

    /// [`reset`](Sleep::reset) to `delay` from now, on the timer's own clock (cheaper than
    /// `Instant::now()`).
    ///
    /// # Panics
    /// As [`reset`](Sleep::reset).
    pub fn reset_after(&mut self, delay: Duration) {
        self.rearm(self.timer.0.clock.now().saturating_add(nanos(delay)));
    }

    /// A reset for a caller that takes spurious wake-ups (hyper): a later deadline while the armed
    /// timeout is pending only moves `deadline`, and the poll after its expiry arms the rest. A
    /// timeout pushed back on every request touches the wheel once per period, not per reset.
    #[cfg_attr(not(feature = "hyper"), allow(dead_code))]
    pub(crate) fn extend_or_reset(&mut self, deadline: Instant) {
        let clock = &self.timer.0.clock;
        let deadline = clock.nanos_at(deadline).max(clock.now());
        let pending = matches!(&self.armed, Ok(t) if !ended(t));
        if pending && deadline >= self.armed_for {
            self.deadline = deadline;
        } else {
            self.rearm(deadline);
        }
    }

    /// Arms a timeout due at `deadline` in place of the sleep's own. A timeout that continues
    /// the wait (the old one was pending, or expired short of a deadline pushed back) passes the
    /// pending limit: the sleep keeps its one place. A sleep that is new, completed or refused
    /// takes a place as a new timeout does, unless it is `exempt`.
    pub(crate) fn rearm(&mut self, deadline: u64) {
        let replaces = matches!(&self.armed, Ok(old) if old.cancel());
        let waiting = replaces || self.deadline > self.armed_for;
        self.armed = self.arm(deadline, self.exempt || waiting);
        self.deadline = deadline;
        self.armed_for = deadline;
        if self.armed.is_err() {
            // Complete (refused): a task waiting on the replaced timeout must hear so.
            let waker = self.cell.take();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

impl Future for Sleep {
    type Output = Result<(), TimerError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let timeout = match &self.armed {
            Ok(timeout) => timeout,
            Err(e) => return Poll::Ready(Err(e.clone())),
        };
        // The waker first, then the state: the worker sets the state, then takes the waker
        // under the cell's lock; one of the two sees the other.
        if !ended(timeout) {
            if !self.cell.keep(cx.waker(), timeout) {
                return Poll::Pending;
            }
            // Ended meanwhile: the waker stored is not the timer's to keep.
            drop(self.cell.take());
        }
        if timeout.is_cancelled() {
            // Only `stop()` cancels a sleep's timeout that is still polled.
            return Poll::Ready(Err(TimerError::Stopped));
        }
        if self.deadline > self.armed_for {
            // Pushed back meanwhile: done if that deadline has passed too, else the rest.
            if self.deadline <= self.timer.0.clock.passed() {
                self.armed_for = self.deadline;
                return Poll::Ready(Ok(()));
            }
            let deadline = self.deadline;
            self.rearm(deadline);
            return self.poll(cx);
        }
        Poll::Ready(Ok(()))
    }
}

/// Whether the timeout has expired or been cancelled.
fn ended(timeout: &Timeout) -> bool {
    timeout.is_expired() || timeout.is_cancelled()
}

impl Drop for Sleep {
    fn drop(&mut self) {
        // Gone first: a task dropped unrun from now on wakes nobody. A cancel that wins takes
        // the waker back; one that loses leaves it to the task that runs (the timeout expired).
        lock(&self.cell.0).gone = true;
        if !matches!(&self.armed, Ok(timeout) if !timeout.cancel()) {
            drop(self.cell.take());
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Sleep");
        d.field("deadline", &self.deadline());
        match &self.armed {
            Ok(timeout) => d.field("timeout", timeout),
            Err(e) => d.field("refused", e),
        };
        d.finish()
    }
}

impl TimerHandle {
    /// A future that completes `delay` from now (see [`Sleep`]); refusals show when polled.
    ///
    /// ```
    /// use hashed_timer_wheel::HashedWheelTimer;
    /// use std::time::{Duration, Instant};
    ///
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let start = Instant::now();
    /// futures::executor::block_on(async {
    ///     timer.sleep(Duration::from_millis(20)).await.unwrap();
    /// });
    /// assert!(start.elapsed() >= Duration::from_millis(20), "never early");
    /// ```
    pub fn sleep(&self, delay: Duration) -> Sleep {
        Sleep::at(self, self.0.clock.now().saturating_add(nanos(delay)), false)
    }

    /// A future that completes at `deadline` (see [`Sleep`]); when the current tick ends
    /// if it has passed.
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        Sleep::at(self, self.0.clock.nanos_at(deadline), false)
    }
}
