//! A future on the wheel: [`Sleep`], and the timer's `sleep` and `sleep_until`. A `Sleep` is an
//! ordinary timeout whose job wakes the future, with its waker in a slot beside its state
//! (`shared::cells::WakerSlots` has the protocol; the loom model is
//! `loom-tests/tests/sleep_future.rs`). `Deadline` and `Interval` build on it. Uses the owner's
//! scheduling, the shared state's cells and clock.

use super::started;
use crate::clock::duration_to_nanos;
use crate::shared::cells::End;
use crate::shared::{Shared, TimerHandle};
use crate::sync::Arc;
use crate::{HashedWheelTimer, Timeout, TimerError};
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A future that completes at a deadline on a [`HashedWheelTimer`]'s wheel (tokio's `Sleep`).
///
/// Made by [`HashedWheelTimer::sleep`] and [`HashedWheelTimer::sleep_until`] (or a
/// [`TimerHandle`]'s), and scheduled at once. It completes with `Ok(())` never before its deadline,
/// at most about a tick after; any executor can poll it.
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
/// It counts as a timeout in [`pending_timeouts()`](HashedWheelTimer::pending_timeouts) and
/// [`stats()`](HashedWheelTimer::stats); `stop()` does not return it.
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
#[must_use = "a Sleep does nothing unless awaited, and its drop cancels it"]
pub struct Sleep {
    scheduled: Scheduled,
    /// Nanoseconds since the timer's origin.
    pub(super) deadline: u64,
    /// The deadline of the timeout in `scheduled`: before `deadline` after a reset to a later one,
    /// which schedules nothing; the expiry then arms the rest (as tokio's timer extends an entry),
    /// unless the rest has passed too (the poll then sets it to `deadline`).
    armed_for: u64,
    /// This future has stored a waker in the armed timeout's slot (which an end may have taken
    /// since): a poll then compares before it clones.
    waker_stored: bool,
    /// A `DelayQueue`'s wake-up: each of its timeouts passes a pending limit, since the queue
    /// could report a refusal only by polling again at once.
    exempt: bool,
}

/// What scheduling a sleep's timeout gave.
enum Scheduled {
    /// Accepted: the timeout whose end completes the future.
    Armed(Timeout),
    /// Refused when made (boxed: a cold path that should not grow every `Sleep`).
    Refused(Box<Refused>),
}

struct Refused {
    error: TimerError,
    /// For `reset`, which schedules again.
    shared: Arc<Shared>,
}

impl Sleep {
    /// A sleep due at `deadline`; `now` is the producers' clock, read by the caller.
    pub(crate) fn at(shared: &Arc<Shared>, deadline: u64, now: u64) -> Sleep {
        Sleep::armed(shared, deadline, now, false)
    }

    /// As [`Sleep::at`], passing a pending limit: a `DelayQueue`'s wake-up (see `exempt`).
    pub(crate) fn exempt_at(shared: &Arc<Shared>, deadline: u64, now: u64) -> Sleep {
        Sleep::armed(shared, deadline, now, true)
    }

    fn armed(shared: &Arc<Shared>, deadline: u64, now: u64, exempt: bool) -> Sleep {
        Sleep {
            scheduled: arm(shared, deadline, now, exempt),
            deadline,
            armed_for: deadline,
            waker_stored: false,
            exempt,
        }
    }

    /// Whether the timer refused this sleep's timeout at its pending limit: a refusal that a
    /// later arm may not meet.
    pub(super) fn refused_at_limit(&self) -> bool {
        matches!(
            &self.scheduled,
            Scheduled::Refused(refused) if matches!(refused.error, TimerError::TooManyPending { .. })
        )
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        match &self.scheduled {
            Scheduled::Armed(timeout) => &timeout.timer().shared,
            Scheduled::Refused(refused) => &refused.shared,
        }
    }

    /// When the sleep is due: as made, or by the last [`reset`](Sleep::reset). On a manual clock,
    /// an `Instant` counted from the call. A deadline past 2^64 ns (584 years) after the timer's
    /// start, which never fires, reads as that far.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::{Duration, Instant};
    /// let timer = HashedWheelTimer::default();
    /// let sleep = timer.sleep(Duration::from_secs(5));
    /// assert!(sleep.deadline() > Instant::now() + Duration::from_secs(4));
    /// ```
    pub fn deadline(&self) -> Instant {
        self.shared().clock.instant_at(self.deadline)
    }

    /// Whether the timeout has expired: polling now returns `Ready(Ok(()))`.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::default();
    /// assert!(!timer.sleep(Duration::from_secs(5)).is_elapsed());
    /// ```
    pub fn is_elapsed(&self) -> bool {
        matches!(&self.scheduled, Scheduled::Armed(timeout) if timeout.is_expired())
            && (self.deadline <= self.armed_for || self.deadline <= self.shared().clock.now())
    }

    /// Moves the deadline to `deadline` (earlier or later), whether or not the sleep had completed;
    /// a waiting task is woken at the new one. For idle detection: reset on every message. On a
    /// stopped timer the sleep completes with the error; at a pending limit, see [`Sleep`].
    ///
    /// # Panics
    /// If the waiting task's waker panics when cloned, as it moves to the new deadline, that
    /// panic goes on once the reset is done: the sleep is due at the new deadline all the same,
    /// and the task is woken to poll again.
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
        let shared = Arc::clone(self.shared());
        let now = shared.clock.now_upper();
        self.rearm(&shared, shared.clock.nanos_at(deadline).max(now), now);
    }

    /// [`reset`](Sleep::reset) to `delay` from now, on the timer's own clock (cheaper than
    /// `Instant::now()`).
    ///
    /// # Panics
    /// As [`reset`](Sleep::reset).
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let mut idle = timer.sleep(Duration::from_secs(3600));
    /// idle.reset_after(Duration::from_millis(10));
    /// futures::executor::block_on(&mut idle).unwrap();
    /// ```
    pub fn reset_after(&mut self, delay: Duration) {
        let shared = Arc::clone(self.shared());
        let now = shared.clock.now_upper();
        self.rearm(&shared, now.saturating_add(duration_to_nanos(delay)), now);
    }

    /// A reset for a caller that takes spurious wake-ups (hyper): a later deadline while the armed
    /// timeout is pending only moves `deadline`, and the poll after its expiry arms the rest. A
    /// timeout pushed back on every request touches the wheel once per period, not per reset.
    #[cfg_attr(not(feature = "hyper"), allow(dead_code))]
    pub(crate) fn extend_or_reset(&mut self, deadline: Instant) {
        let shared = Arc::clone(self.shared());
        let now = shared.clock.now_upper();
        let deadline = shared.clock.nanos_at(deadline).max(now);
        let pending = matches!(
            &self.scheduled,
            Scheduled::Armed(t) if !t.is_expired() && !t.is_cancelled()
        );
        if pending && deadline >= self.armed_for {
            self.deadline = deadline;
        } else {
            self.rearm(&shared, deadline, now);
        }
    }

    /// Arms a timeout due at `deadline` in place of the sleep's own, and moves its waker there.
    ///
    /// The pending limit's one rule for a sleep: a timeout that continues its wait passes the
    /// limit, since the sleep keeps its one place. The wait goes on while its timeout is pending
    /// (cancelled here and replaced; the cancel counts as ended at the worker's next tick, so
    /// the count stays exact) or has expired short of a deadline pushed back
    /// (`extend_or_reset`). A sleep that is new, completed or refused takes a place as a new
    /// timeout does, unless it is `exempt`.
    pub(crate) fn rearm(&mut self, shared: &Arc<Shared>, deadline: u64, now: u64) {
        let replaces = matches!(&self.scheduled, Scheduled::Armed(old) if old.cancel());
        let waiting = replaces || self.deadline > self.armed_for;
        let new = arm(shared, deadline, now, self.exempt || waiting);
        let old = std::mem::replace(&mut self.scheduled, new);
        self.deadline = deadline;
        self.armed_for = deadline;
        self.waker_stored = false;
        if let Scheduled::Armed(old) = old {
            // Whether or not the cancel won, the waker we left there is ours: the task waits on
            // the new timeout instead.
            if let Some(waker) = old.state.take_waker() {
                self.move_waker(waker);
            }
        }
    }

    /// Stores the waker taken from the replaced timeout in the new one's slot, or wakes it if
    /// the new one has ended or was refused (the sleep is complete: its task must hear so).
    fn move_waker(&mut self, waker: Waker) {
        let Scheduled::Armed(new) = &self.scheduled else {
            return waker.wake();
        };
        // The slot keeps a clone: the waker's, user code that may panic. The task is then
        // woken, to poll again, before the panic goes on.
        match catch_unwind(AssertUnwindSafe(|| new.state.poll_end(&waker, true))) {
            Ok(None) => self.waker_stored = true,
            Ok(Some(_)) => waker.wake(),
            Err(panic) => {
                waker.wake();
                resume_unwind(panic);
            }
        }
    }
}

fn arm(shared: &Arc<Shared>, deadline: u64, now: u64, exempt: bool) -> Scheduled {
    let scheduled = started(shared).and_then(|()| shared.schedule_wake_at(deadline, now, exempt));
    match scheduled.map(Timeout::new) {
        Ok(timeout) => Scheduled::Armed(timeout),
        Err(error) => Scheduled::Refused(Box::new(Refused {
            error,
            shared: Arc::clone(shared),
        })),
    }
}

impl Future for Sleep {
    type Output = Result<(), TimerError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fresh = !self.waker_stored;
        match &self.scheduled {
            Scheduled::Armed(timeout) => match timeout.state.poll_end(cx.waker(), fresh) {
                None => {
                    self.waker_stored = true;
                    Poll::Pending
                }
                Some(End::Expired) if self.deadline > self.armed_for => {
                    let shared = Arc::clone(self.shared());
                    // Reset to a later deadline meanwhile, which has passed too (pushed back
                    // within the armed tick, or polled late): done, by the worker's clock. A
                    // timeout armed for it now would fire a tick after it.
                    if self.deadline <= shared.clock.now() {
                        self.armed_for = self.deadline;
                        return Poll::Ready(Ok(()));
                    }
                    // Else the rest of the wait, which passes a pending limit as the wait goes
                    // on (`rearm`).
                    let (deadline, now) = (self.deadline, shared.clock.now_upper());
                    self.rearm(&shared, deadline, now);
                    self.poll(cx)
                }
                Some(End::Expired) => Poll::Ready(Ok(())),
                // Only `stop()` cancels a sleep's timeout: the sleep's own drop and `reset`
                // are the only other cancels, and neither leaves it to be polled.
                Some(End::Cancelled) => Poll::Ready(Err(TimerError::Stopped)),
            },
            Scheduled::Refused(refused) => Poll::Ready(Err(refused.error.clone())),
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Scheduled::Armed(timeout) = &self.scheduled {
            // Expired already: nothing to do. Else the waker we may have left is ours to take back
            // (see `shared::cells::WakerSlots`).
            if timeout.cancel() {
                drop(timeout.state.take_waker());
            }
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Sleep");
        d.field("deadline", &self.deadline());
        match &self.scheduled {
            Scheduled::Armed(timeout) => d.field("timeout", timeout),
            Scheduled::Refused(refused) => d.field("refused", &refused.error),
        };
        d.finish()
    }
}

macro_rules! sleep_methods {
    ($ty:ty, $example:literal) => {
        impl $ty {
            /// A future that completes `delay` from now (see [`Sleep`]); refusals show when polled.
            ///
            /// ```
            /// # use hashed_timer_wheel::HashedWheelTimer;
            /// # use std::time::Duration;
            /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
            #[doc = $example]
            /// futures::executor::block_on(t.sleep(Duration::from_millis(2))).unwrap();
            /// ```
            pub fn sleep(&self, delay: Duration) -> Sleep {
                let now = self.shared.clock.now_upper();
                let deadline = now.saturating_add(duration_to_nanos(delay));
                Sleep::at(&self.shared, deadline, now)
            }

            /// A future that completes at `deadline` (see [`Sleep`]); when the current tick ends
            /// if it has passed.
            ///
            /// ```
            /// # use hashed_timer_wheel::HashedWheelTimer;
            /// # use std::time::{Duration, Instant};
            /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
            #[doc = $example]
            /// let at = Instant::now() + Duration::from_millis(2);
            /// futures::executor::block_on(t.sleep_until(at)).unwrap();
            /// assert!(Instant::now() >= at);
            /// ```
            pub fn sleep_until(&self, deadline: Instant) -> Sleep {
                // Never early: a deadline passed is due at once, and the producers' clock is
                // never behind the worker's.
                let now = self.shared.clock.now_upper();
                let deadline = self.shared.clock.nanos_at(deadline).max(now);
                Sleep::at(&self.shared, deadline, now)
            }
        }
    };
}

for_owner_and_handle!(sleep_methods);
