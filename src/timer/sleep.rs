//! A future on the wheel: [`Sleep`], and the timer's `sleep` and `sleep_until`. A `Sleep`'s
//! timeout is a future's slot, which keeps the polling task's waker for whoever ends the slot
//! (the worker's expiry, `stop()`): nothing is allocated per sleep.

use crate::engine::{At, BoxedTask, Kind, TimerHandle};
use crate::{Timeout, TimerError};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A future that completes at a deadline on a timer's wheel (tokio's `Sleep`).
///
/// Made by [`TimerHandle::sleep`] and [`TimerHandle::sleep_until`], and scheduled at once. It
/// completes with `Ok(())` never before its deadline, at most about a tick after, on any executor.
///
/// - **Dropping** it cancels its timeout; the last poll's waker is the one woken.
/// - **When the timer stops** (or its owner is dropped) it completes with
///   `Err(`[`TimerError::Stopped`]`)`: it never hangs.
/// - **At the pending limit** it takes a place as a new timeout does: made there, or reset there
///   once completed (or refused), it completes at once with
///   `Err(TimerError::TooManyPending { .. })`. Until it completes, a reset keeps its place.
/// - It is `Unpin` (`&mut sleep` is a future, for `select!` in a loop).
///
/// It counts as a timeout in [`pending_timeouts()`](TimerHandle::pending_timeouts) and
/// [`stats()`](TimerHandle::stats); `stop()` does not return it.
#[must_use = "a Sleep does nothing unless awaited, and its drop cancels it"]
pub struct Sleep {
    /// The timeout whose end completes the future (its block holds the timer: no handle of
    /// its own, whose count every thread would share), or what refused it.
    armed: Result<Timeout, Refused>,
    /// Nanoseconds since the timer's origin.
    deadline: u64,
    /// The deadline of the armed timeout: before `deadline` once `extend_or_reset` moved it.
    armed_for: u64,
    /// A `DelayQueue`'s wake-up, whose timeouts pass a pending limit.
    exempt: bool,
    /// A poll stored a waker in the armed slot: the next compares it with its own.
    kept: bool,
}

/// A refused sleep: the timer, and the error.
struct Refused {
    timer: TimerHandle,
    error: TimerError,
}

impl Sleep {
    /// A sleep until `deadline` (ns since the origin), armed now.
    pub(crate) fn at(timer: &TimerHandle, deadline: u64, exempt: bool) -> Sleep {
        Sleep::new(timer, deadline, timer.0.clock.now(), exempt)
    }

    /// A sleep until `deadline`, armed now, `now` the clock's reading.
    pub(crate) fn new(timer: &TimerHandle, deadline: u64, now: u64, exempt: bool) -> Sleep {
        Sleep {
            armed: arm(timer, deadline, now, exempt),
            deadline,
            armed_for: deadline,
            exempt,
            kept: false,
        }
    }

    /// Whether the timer refused this sleep's timeout at its pending limit.
    pub(super) fn refused_at_limit(&self) -> bool {
        matches!(&self.armed, Err(r) if matches!(r.error, TimerError::TooManyPending { .. }))
    }

    /// The timer this sleep is on.
    pub(crate) fn timer(&self) -> &TimerHandle {
        self.armed
            .as_ref()
            .map_or_else(|r| &r.timer, Timeout::timer)
    }

    /// When the sleep is due: as made, or by the last [`reset`](Sleep::reset). On a manual clock,
    /// an `Instant` counted from the call.
    pub fn deadline(&self) -> Instant {
        self.timer().0.clock.instant_at(self.deadline)
    }

    /// Whether the timeout has expired: polling now returns `Ready(Ok(()))`.
    pub fn is_elapsed(&self) -> bool {
        matches!(&self.armed, Ok(timeout) if timeout.is_expired())
            && (self.deadline <= self.armed_for || self.deadline <= self.timer().0.clock.passed())
    }

    /// Moves the deadline to `deadline` (earlier or later), whether or not the sleep had completed;
    /// a waiting task is woken at the new one. For idle detection: reset on every message. On a
    /// stopped timer the sleep completes with the error; at a pending limit, see [`Sleep`].
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
        self.rearm(self.not_past(deadline));
    }

    /// `deadline` in nanoseconds since the origin, now if it has passed.
    fn not_past(&self, deadline: Instant) -> u64 {
        let clock = &self.timer().0.clock;
        clock.nanos_at(deadline).max(clock.now())
    }

    /// [`reset`](Sleep::reset) to `delay` from now, on the timer's own clock.
    ///
    /// # Panics
    /// As [`reset`](Sleep::reset).
    pub fn reset_after(&mut self, delay: Duration) {
        self.rearm(self.timer().0.clock.after(delay));
    }

    /// A reset for a caller that takes spurious wake-ups (hyper): a later deadline while the armed
    /// timeout is pending only moves `deadline`, and the poll after its expiry arms the rest.
    #[cfg_attr(not(feature = "hyper"), allow(dead_code))]
    pub(crate) fn extend_or_reset(&mut self, deadline: Instant) {
        let deadline = self.not_past(deadline);
        let pending = matches!(&self.armed, Ok(t) if !t.has_ended());
        if pending && deadline >= self.armed_for {
            self.deadline = deadline;
        } else {
            self.rearm(deadline);
        }
    }

    /// Arms a timeout due at `deadline` in place of the sleep's own. One that continues the wait
    /// (the old one was pending, or expired short of a deadline pushed back) passes the pending
    /// limit; otherwise it takes a place as a new timeout does, unless `exempt`.
    pub(crate) fn rearm(&mut self, deadline: u64) {
        let (replaces, waker) = match &self.armed {
            Ok(old) => (old.cancel(), old.take_waker()),
            Err(_) => (false, None),
        };
        let waiting = replaces || self.deadline > self.armed_for;
        let now = self.timer().0.clock.now();
        // The old timeout, kept until the new one is armed, lends its timer.
        self.armed = arm(self.timer(), deadline, now, self.exempt || waiting);
        self.kept = false;
        self.deadline = deadline;
        self.armed_for = deadline;
        let Some(waker) = waker else { return };
        match &self.armed {
            // The waiting task moves to the new slot; woken now if that one ended already.
            Ok(new) => {
                new.put_waker(waker);
                self.kept = true;
                if new.has_ended() {
                    if let Some(waker) = new.take_waker() {
                        waker.wake();
                    }
                }
            }
            // Complete (refused): a task waiting on the replaced timeout must hear so.
            Err(_) => waker.wake(),
        }
    }
}

impl Future for Sleep {
    type Output = Result<(), TimerError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let timeout = match &this.armed {
            Ok(timeout) => timeout,
            Err(refused) => return Poll::Ready(Err(refused.error.clone())),
        };
        // The waker first, then the state: whoever ends the slot sets the state, then takes
        // the waker (`engine::slots`).
        if !timeout.has_ended() {
            let pending = timeout.keep_waker(cx.waker(), this.kept);
            this.kept = true;
            if pending {
                return Poll::Pending;
            }
        }
        if timeout.is_cancelled() {
            // Only `stop()` cancels a sleep's timeout that is still polled.
            return Poll::Ready(Err(TimerError::Stopped));
        }
        if self.deadline > self.armed_for {
            // Pushed back meanwhile: done if that deadline has passed too, else the rest.
            if self.deadline <= self.timer().0.clock.passed() {
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

/// Schedules a future's timeout on `timer` for `deadline`: an empty closure (no allocation).
fn arm(timer: &TimerHandle, deadline: u64, now: u64, exempt: bool) -> Result<Timeout, Refused> {
    let at = At {
        deadline,
        now,
        exempt,
        kind: Kind::Future,
    };
    let make = |_: &mut Vec<BoxedTask>| BoxedTask::new(|_: &Timeout| {});
    let refused = |error| Refused {
        timer: timer.clone(),
        error,
    };
    let timeout = timer.0.schedule_at(make, at, false).map_err(refused)?;
    Ok(timeout.expect("a handle was asked for"))
}

impl Drop for Sleep {
    fn drop(&mut self) {
        // The cancel, won or lost, leaves the slot ended: the waker kept there is taken back
        // (whoever ended it first may have taken it already).
        if let Ok(timeout) = &self.armed {
            timeout.cancel();
            drop(timeout.take_waker());
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Sleep");
        d.field("deadline", &self.deadline());
        match &self.armed {
            Ok(timeout) => d.field("timeout", timeout),
            Err(refused) => d.field("refused", &refused.error),
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
        Sleep::at(self, self.0.clock.after(delay), false)
    }

    /// A future that completes at `deadline` (see [`Sleep`]), at the tick's end if it passed.
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        Sleep::at(self, self.0.clock.nanos_at(deadline), false)
    }
}
