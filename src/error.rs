//! The public error types: [`BuildError`], [`TimerError`] and [`DeadlineError`].

use std::fmt;
use std::time::Duration;

/// Why a [`HashedWheelTimer`](crate::HashedWheelTimer) could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// The tick duration was zero.
    ZeroTickDuration,
    /// `ticks_per_wheel` was zero.
    ZeroTicksPerWheel,
    /// `ticks_per_wheel` was above [`MAX_TICKS_PER_WHEEL`](crate::MAX_TICKS_PER_WHEEL) (2^30).
    TooManyTicksPerWheel {
        /// The value asked for.
        requested: usize,
    },
    /// `tick_duration * wheel length` does not fit in 64-bit nanoseconds (about 584 years).
    TickOverflow {
        /// The tick duration asked for (after the 1 ms clamp).
        tick_duration: Duration,
        /// The wheel length, after rounding up to a power of two.
        wheel_len: usize,
    },
    /// The worker thread's name holds a NUL byte, which no thread name may.
    ThreadNameWithNul,
    /// `Builder::build_on_tokio` (feature `tokio`) was called outside a tokio runtime, or on one
    /// without timers.
    NoRuntime,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::ZeroTickDuration => f.write_str("tick duration must be greater than zero"),
            BuildError::ZeroTicksPerWheel => {
                f.write_str("ticks per wheel must be greater than zero")
            }
            BuildError::TooManyTicksPerWheel { requested } => write!(
                f,
                "ticks per wheel may not be greater than 2^30: {requested}"
            ),
            BuildError::TickOverflow {
                tick_duration,
                wheel_len,
            } => write!(
                f,
                "tick duration {tick_duration:?} times wheel length {wheel_len} overflows 64-bit nanoseconds"
            ),
            BuildError::ThreadNameWithNul => f.write_str("the thread name may not hold a NUL byte"),
            BuildError::NoRuntime => f.write_str(
                "a timer on tokio's clock is built inside a tokio runtime with timers enabled \
                 (in #[tokio::test] or #[tokio::main], or after Runtime::enter)",
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// Why a timer operation was refused.
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, Timeout, TimerError};
/// use std::time::Duration;
///
/// let timer = HashedWheelTimer::builder().max_pending_timeouts(1).build().unwrap();
/// let _first = timer.new_timeout(|_: &Timeout| {}, Duration::from_secs(60)).unwrap();
/// let refused = timer.new_timeout(|_: &Timeout| {}, Duration::from_secs(60)).unwrap_err();
/// assert_eq!(refused, TimerError::TooManyPending { pending: 1, max: 1 });
/// let _ = timer.stop();
/// let refused = timer.new_timeout(|_: &Timeout| {}, Duration::ZERO).unwrap_err();
/// assert_eq!(refused, TimerError::Stopped);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimerError {
    /// The timer has been stopped (or its owner dropped). Permanent.
    Stopped,
    /// The pending limit is reached; transient (an expiry or a processed cancel frees a place).
    TooManyPending {
        /// Timeouts pending when the call was refused.
        pending: usize,
        /// The bound the call was refused against: the configured limit, or the most slots a
        /// timer can name at once (about 2^32) with no limit or for a timeout that passes it.
        max: usize,
    },
    /// [`stop`](crate::TimerHandle::stop) was called on the timer's own worker thread, which
    /// would wait for itself: stop it from another thread, or drop it.
    StopFromWorker,
}

impl fmt::Display for TimerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimerError::Stopped => f.write_str("timer has been stopped"),
            TimerError::TooManyPending { pending, max } => write!(
                f,
                "number of pending timeouts ({pending}) is greater than or equal to maximum allowed pending timeouts ({max})"
            ),
            TimerError::StopFromWorker => {
                f.write_str("stop() cannot be called from the timer's worker thread")
            }
        }
    }
}

impl std::error::Error for TimerError {}

/// Why a future run under a deadline ([`TimerHandle::timeout`](crate::TimerHandle::timeout)) did
/// not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadlineError {
    /// The deadline passed first (tokio's `Elapsed`).
    Elapsed,
    /// The timer was stopped or dropped, or at its pending limit; the future is left unfinished
    /// in the `Deadline` (dropped with it, or given back by `into_inner`).
    Timer(TimerError),
}

impl fmt::Display for DeadlineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeadlineError::Elapsed => f.write_str("deadline has elapsed"),
            DeadlineError::Timer(e) => write!(f, "deadline cannot be kept: {e}"),
        }
    }
}

impl std::error::Error for DeadlineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DeadlineError::Elapsed => None,
            DeadlineError::Timer(e) => Some(e),
        }
    }
}

impl From<TimerError> for DeadlineError {
    fn from(e: TimerError) -> Self {
        DeadlineError::Timer(e)
    }
}
