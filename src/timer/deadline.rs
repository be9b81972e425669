//! A deadline around any future (tokio's `Timeout`): [`Deadline`], `timeout` and `timeout_at`.

use super::sleep::Sleep;
use crate::engine::TimerHandle;
use crate::{DeadlineError, TimerError};
use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

pin_project_lite::pin_project! {
    /// A future with a deadline: its output, or [`DeadlineError::Elapsed`] if the deadline passes
    /// first (tokio's `Timeout`, named apart from the [`Timeout`](crate::Timeout) handle).
    ///
    /// Made by [`TimerHandle::timeout`] and [`TimerHandle::timeout_at`]. As with tokio, the
    /// deadline is fixed when the `Deadline` is made: a future first polled after it completes
    /// with `Elapsed` at once unless it is ready. Never early, at most about a tick late.
    ///
    /// Each poll polls the inner future first. **Nothing is scheduled until the inner future is
    /// pending**; then the deadline is a [`Sleep`]: a timer stopped, dropped or at its pending
    /// limit completes it with [`DeadlineError::Timer`].
    #[must_use = "a Deadline does nothing unless awaited"]
    pub struct Deadline<F> {
        #[pin]
        future: F,
        wait: Wait,
    }
}

enum Wait {
    /// The inner future has not been pending yet: nothing scheduled, nothing shared written.
    Unarmed {
        timer: TimerHandle,
        /// Nanoseconds since the timer's origin, fixed when the `Deadline` is made.
        deadline: u64,
    },
    Armed(Sleep),
    /// The timer was stopped or dropped before the inner future was first pending.
    Gone,
}

impl Wait {
    /// The sleep, scheduled now if it was not yet; the error if the deadline has passed by the
    /// worker's clock (tokio's `Timeout` polled late: nothing scheduled) or the timer is gone.
    fn armed(&mut self) -> Result<&mut Sleep, DeadlineError> {
        if let Wait::Unarmed { timer, deadline } = self {
            let deadline = *deadline;
            if timer.is_stopped() {
                *self = Wait::Gone;
            } else {
                // The worker's clock: a deadline it has passed fires on no later tick.
                let now = timer.0.clock.now();
                if deadline <= timer.0.clock.passed_by(now) {
                    return Err(DeadlineError::Elapsed);
                }
                *self = Wait::Armed(Sleep::new(timer, deadline, now, false));
            }
        }
        match self {
            Wait::Armed(sleep) => Ok(sleep),
            _ => Err(DeadlineError::Timer(TimerError::Stopped)),
        }
    }
}

impl<F> Deadline<F> {
    /// The inner future, by reference.
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// The inner future, mutably.
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.future
    }

    /// The inner future, taken out; the deadline is cancelled (if it was ever scheduled).
    pub fn into_inner(self) -> F {
        self.future
    }

    /// When the deadline is, fixed when the `Deadline` was made; now if the timer was stopped or
    /// dropped before the inner future was first pending (the next poll completes it).
    pub fn deadline(&self) -> Instant {
        match &self.wait {
            Wait::Armed(sleep) => sleep.deadline(),
            Wait::Unarmed { timer, deadline } if !timer.is_stopped() => {
                timer.0.clock.instant_at(*deadline)
            }
            Wait::Unarmed { .. } | Wait::Gone => Instant::now(),
        }
    }
}

impl<F: Future> Future for Deadline<F> {
    type Output = Result<F::Output, DeadlineError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        let sleep = match this.wait.armed() {
            Ok(sleep) => sleep,
            Err(e) => return Poll::Ready(Err(e)),
        };
        match Pin::new(sleep).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => Poll::Ready(Err(DeadlineError::Elapsed)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(DeadlineError::Timer(e))),
        }
    }
}

impl<F: fmt::Debug> fmt::Debug for Deadline<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Deadline");
        d.field("future", &self.future);
        match &self.wait {
            Wait::Armed(sleep) => d.field("sleep", sleep),
            Wait::Unarmed { deadline, .. } => d.field("unarmed_deadline", deadline),
            Wait::Gone => d.field("timer", &"gone"),
        };
        d.finish()
    }
}

/// A deadline at `deadline` nanoseconds since the timer's origin, fixed now; nothing scheduled.
fn deadline<F: IntoFuture>(
    timer: &TimerHandle,
    deadline: u64,
    future: F,
) -> Deadline<F::IntoFuture> {
    Deadline {
        future: future.into_future(),
        wait: Wait::Unarmed {
            timer: timer.clone(),
            deadline,
        },
    }
}

impl TimerHandle {
    /// `future` with a deadline `limit` after this call (as `tokio::time::timeout`): its
    /// output, or [`DeadlineError::Elapsed`] (see [`Deadline`]).
    ///
    /// ```
    /// use hashed_timer_wheel::{DeadlineError, HashedWheelTimer};
    /// use std::time::Duration;
    ///
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// futures::executor::block_on(async {
    ///     let fast = async { 42 };
    ///     assert_eq!(timer.timeout(Duration::from_secs(1), fast).await, Ok(42));
    ///     // Ready at its first poll: that deadline was never scheduled.
    ///     assert_eq!(timer.pending_timeouts(), 0);
    ///     let slow = timer.sleep(Duration::from_secs(60));
    ///     let result = timer.timeout(Duration::from_millis(5), slow).await;
    ///     assert_eq!(result, Err(DeadlineError::Elapsed));
    /// });
    /// ```
    pub fn timeout<F: IntoFuture>(&self, limit: Duration, future: F) -> Deadline<F::IntoFuture> {
        deadline(self, self.0.clock.after(limit), future)
    }

    /// `future` with a deadline at `deadline` (see [`Deadline`]).
    pub fn timeout_at<F: IntoFuture>(
        &self,
        deadline: Instant,
        future: F,
    ) -> Deadline<F::IntoFuture> {
        self::deadline(self, self.0.clock.nanos_at(deadline), future)
    }
}
