//! An async interval on the wheel (tokio's `Interval`): [`Interval`], a [`Sleep`] re-armed at
//! each next deadline (`periodic::next_due`, but for `MissedRuns::Delay`, which follows tokio's).

use super::periodic::next_due;
use super::sleep::Sleep;
use crate::engine::clock::nanos;
use crate::engine::TimerHandle;
use crate::{MissedRuns, TimerError};
use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Ticks at a fixed rate on a timer's wheel (tokio's `Interval`): deadlines at
/// `start + k * period`, never early, at most about a tick late, no drift. Made by
/// [`TimerHandle::interval`] and [`TimerHandle::interval_at`].
///
/// A tick taken late follows the [`MissedRuns`] policy, [`MissedRuns::Burst`] by default.
/// [`tick`](Interval::tick) is cancel-safe. Dropping the interval cancels its timeout; once the
/// timer stops, `tick` completes with `Err(`[`TimerError::Stopped`]`)`.
#[must_use = "an Interval does nothing unless its ticks are awaited"]
pub struct Interval {
    sleep: Sleep,
    /// The next tick's deadline on the schedule's time: the clock's, plus `before_origin`.
    due: u64,
    /// How far before the clock's origin a schedule started by `interval_at` began (else 0).
    before_origin: u64,
    period: Duration,
    missed: MissedRuns,
    at_once: bool,
}

impl Interval {
    /// Starts at `start` nanoseconds since the clock's origin, or `before_origin` before it;
    /// `at_once`: the first tick is due at the first poll.
    fn new(
        timer: &TimerHandle,
        (start, before_origin): (u64, u64),
        period: Duration,
        at_once: bool,
    ) -> Interval {
        assert!(
            !period.is_zero(),
            "the period of an interval must not be zero"
        );
        Interval {
            sleep: Sleep::at(timer, start, false),
            due: start,
            before_origin,
            period,
            missed: MissedRuns::Burst,
            at_once,
        }
    }

    /// Completes at the next tick's deadline (at once if it has passed), with that deadline.
    ///
    /// ```
    /// use futures::FutureExt;
    /// use hashed_timer_wheel::HashedWheelTimer;
    /// use std::time::Duration;
    ///
    /// let (timer, driver) = HashedWheelTimer::builder().build_manual()?;
    /// let mut interval = timer.interval(Duration::from_secs(1));
    /// assert!(interval.tick().now_or_never().is_some()); // the first tick: at once
    /// assert!(interval.tick().now_or_never().is_none()); // the second: a period on
    /// driver.advance(Duration::from_secs(1));
    /// assert!(interval.tick().now_or_never().unwrap().is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`TimerError::Stopped`] once the timer has stopped; [`TimerError::TooManyPending`] if the
    /// timer refuses a tick not yet due at its pending limit (the next call tries again). A tick
    /// already due completes though the limit is full: it needs no timeout.
    pub async fn tick(&mut self) -> Result<Instant, TimerError> {
        poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// [`tick`](Interval::tick) as a poll, for hand-written futures and streams.
    ///
    /// # Errors
    /// As [`tick`](Interval::tick).
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Result<Instant, TimerError>> {
        let due = self.due;
        if self.sleep.refused_at_limit() {
            // The limit may have room now: a poll never returns an earlier poll's refusal.
            self.arm(due);
        }
        match Pin::new(&mut self.sleep).poll(cx) {
            Poll::Ready(Ok(())) => {}
            // Due by the clock before the wheel's tick; a refusal at the limit does not hold
            // back a tick that is due.
            Poll::Pending | Poll::Ready(Err(TimerError::TooManyPending { .. }))
                if self.at_once || due <= self.now() => {}
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
        }
        self.at_once = false;
        let next = self.next_after(due);
        // Armed first: a refusal whose wake-up panics unwinds with `due` kept.
        self.arm(next);
        self.due = next;
        let at = self.sleep.timer().0.clock.instant_at(due);
        let before = Duration::from_nanos(self.before_origin);
        Poll::Ready(Ok(at.checked_sub(before).unwrap_or(at)))
    }

    /// The deadline of the tick after the one due at `due`, taken now (see [`MissedRuns`]).
    fn next_after(&self, due: u64) -> u64 {
        let tick = self.sleep.timer().0.tick_nanos;
        let period = nanos(self.period);
        let now = self.now();
        match self.missed {
            // tokio's `Delay`: a tick taken more than a tick late moves the schedule to now.
            MissedRuns::Delay if now.saturating_sub(due) > tick => now.saturating_add(period),
            missed => next_due(due, period, missed, now, tick),
        }
    }

    /// The clock's now on the schedule's time, short of `u64::MAX` (a saturated deadline never
    /// comes).
    fn now(&self) -> u64 {
        let now = self.sleep.timer().0.clock.passed();
        now.saturating_add(self.before_origin).min(u64::MAX - 1)
    }

    /// Arms the sleep for the tick due at `due` on the schedule's time; the caller keeps `due`.
    fn arm(&mut self, due: u64) {
        self.sleep.rearm(due.saturating_sub(self.before_origin));
    }

    /// Starts the schedule again: the next tick a period from now.
    ///
    /// # Panics
    /// As [`Sleep::reset`]; the next tick is a period from now all the same.
    pub fn reset(&mut self) {
        let due = self.sleep.timer().0.clock.after(self.period);
        let due = due.saturating_add(self.before_origin);
        // Kept before the sleep is armed: the arm may unwind with a waker's panic.
        self.due = due;
        self.at_once = false;
        self.arm(due);
    }

    /// The period, as given.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// What a tick taken late does to the schedule ([`MissedRuns::Burst`] by default).
    pub fn missed_runs(&self) -> MissedRuns {
        self.missed
    }

    /// Sets the policy for missed ticks (see [`MissedRuns`]).
    pub fn set_missed_runs(&mut self, missed: MissedRuns) {
        self.missed = missed;
    }
}

impl fmt::Debug for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interval")
            .field("period", &self.period())
            .field("missed_runs", &self.missed)
            .field("next", &self.sleep)
            .finish()
    }
}

impl TimerHandle {
    /// Ticks every `period`, the first at once (see [`Interval`]).
    ///
    /// # Panics
    /// If `period` is zero.
    ///
    /// ```
    /// use hashed_timer_wheel::HashedWheelTimer;
    /// use std::time::{Duration, Instant};
    ///
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let start = Instant::now();
    /// let mut heartbeat = timer.interval(Duration::from_millis(5));
    /// futures::executor::block_on(async {
    ///     for _ in 0..3 {
    ///         heartbeat.tick().await.unwrap(); // at once, then 5 and 10 ms after the start
    ///     }
    /// });
    /// assert!(start.elapsed() >= Duration::from_millis(10));
    /// ```
    pub fn interval(&self, period: Duration) -> Interval {
        Interval::new(self, (self.0.clock.exact(), 0), period, true)
    }

    /// Ticks every `period`, the first at `start` (see [`Interval`]).
    ///
    /// # Panics
    /// If `period` is zero.
    pub fn interval_at(&self, start: Instant, period: Duration) -> Interval {
        Interval::new(self, self.0.clock.nanos_or_before(start), period, false)
    }
}
