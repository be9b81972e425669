//! The `Timeout` handle (Netty's `Timeout`), the public face of one timeout; the state machine
//! behind it is `shared::cells`'s. Imports `shared`, and reaches the owner's methods through
//! [`TimerHandle`] without importing `timer`.

use crate::shared::cells::{CancelOutcome, CellRef};
use crate::shared::{BoxedTask, Stored, TimerHandle};
use std::fmt;
use std::marker::PhantomData;

/// A handle on a scheduled task (Netty's `Timeout`).
///
/// Returned by [`new_timeout`](crate::HashedWheelTimer::new_timeout) and passed to the task when it
/// runs. Clones are cheap, refer to the same timeout and compare equal.
///
/// **Dropping a `Timeout` does not cancel it**: the task still runs when it is due. Nor does a
/// handle keep the timer alive: once the owner is dropped, [`timer()`](Timeout::timer) refuses new
/// work with [`TimerError::Stopped`](crate::TimerError::Stopped).
///
/// ```
/// use hashed_timer_wheel::HashedWheelTimer;
/// use std::time::Duration;
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(10), 64);
/// let timeout = timer.new_timeout(|_: &_| println!("too late"), Duration::from_secs(30)).unwrap();
/// assert!(timeout.cancel());
/// assert!(timeout.is_cancelled());
/// assert!(!timeout.cancel(), "only the first cancel wins");
/// ```
pub struct Timeout<J: Stored = BoxedTask> {
    pub(crate) state: CellRef,
    /// The timer's task type, which `timer()` gives the handle of.
    task: PhantomData<fn() -> J>,
}

impl<J: Stored> Clone for Timeout<J> {
    fn clone(&self) -> Self {
        Timeout::new(self.state.clone())
    }
}

impl<J: Stored> Timeout<J> {
    #[inline]
    pub(crate) fn new(state: CellRef) -> Self {
        Timeout {
            state,
            task: PhantomData,
        }
    }

    /// Cancels the timeout so that its task never runs.
    ///
    /// Returns `true` for the one call that cancelled it; `false` once cancelled, expired (the task
    /// ran or runs) or returned by `stop()`. The task is dropped within about a tick.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::default();
    /// let t = timer.new_timeout(|_: &_| {}, Duration::from_secs(5)).unwrap();
    /// assert!(t.cancel());
    /// ```
    #[inline]
    pub fn cancel(&self) -> bool {
        match self.state.cancel() {
            CancelOutcome::AlreadyEnded => false,
            CancelOutcome::WasQueued => true,
            CancelOutcome::WasInWheel => {
                self.state.chunk_timer().cancelled(self.state.clone());
                true
            }
        }
    }

    /// Whether the timeout was cancelled (by [`cancel`](Timeout::cancel) or by `stop()`).
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::default();
    /// let t = timer.new_timeout(|_: &_| {}, Duration::from_secs(5)).unwrap();
    /// assert!(!t.is_cancelled());
    /// t.cancel();
    /// assert!(t.is_cancelled());
    /// ```
    #[inline]
    pub fn is_cancelled(&self) -> bool {
        self.state.is_cancelled()
    }

    /// Whether the timeout has expired: its task has been started (or handed to the executor).
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 8);
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let t = timer
    ///     .new_timeout(move |t: &hashed_timer_wheel::Timeout| tx.send(t.is_expired()).unwrap(), Duration::ZERO)
    ///     .unwrap();
    /// assert!(rx.recv().unwrap(), "a running task sees its timeout expired");
    /// assert!(t.is_expired());
    /// ```
    #[inline]
    pub fn is_expired(&self) -> bool {
        self.state.is_expired()
    }

    /// The timer this timeout belongs to: schedule follow-up work through it.
    ///
    /// ```
    /// # use hashed_timer_wheel::{HashedWheelTimer, Timeout};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(10), 64);
    /// timer
    ///     .new_timeout(
    ///         |t: &Timeout| {
    ///             // Runs on the worker thread; schedule the next round from here.
    ///             let _ = t.timer().new_timeout(|_: &Timeout| {}, Duration::from_millis(10));
    ///         },
    ///         Duration::from_millis(10),
    ///     )
    ///     .unwrap();
    /// ```
    #[inline]
    pub fn timer(&self) -> &TimerHandle<J> {
        self.state.timer()
    }
}

impl<J: Stored> PartialEq for Timeout<J> {
    fn eq(&self, other: &Self) -> bool {
        self.state.same(&other.state)
    }
}

impl<J: Stored> Eq for Timeout<J> {}

impl<J: Stored> std::hash::Hash for Timeout<J> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.state.address().hash(state)
    }
}

impl<J: Stored> fmt::Debug for Timeout<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout")
            .field("state", &self.state.state_name())
            .finish_non_exhaustive()
    }
}
