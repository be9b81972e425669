//! The public timer: [`HashedWheelTimer`] (the owner), the methods of [`TimerHandle`] (which
//! the owner derefs to, so each is written once), the [`Timer`] trait, and in its files the
//! [`Builder`], [`ManualDriver`], periodic tasks, the futures and the runtime's [`Drive`].

mod builder;
mod deadline;
mod drive;
mod driver;
mod interval;
mod keep_alive;
mod periodic;
mod sleep;

pub use crate::engine::TimerHandle;
pub use builder::Builder;
pub use deadline::Deadline;
pub use drive::Drive;
pub use driver::ManualDriver;
pub use interval::Interval;
pub(crate) use keep_alive::KeepAlive;
pub use periodic::{MissedRuns, PeriodicTimeout};
pub use sleep::Sleep;

use crate::engine::{BoxedTask, NeverRan, Stored};
use crate::{Timeout, TimerError, TimerStats, TimerTask, TypedTask};
use std::time::Duration;

/// The largest wheel: `ticks_per_wheel` above this is an error (as in Netty before 4.1.107).
pub const MAX_TICKS_PER_WHEEL: usize = 1 << 30;

/// Netty's `Timer` interface: code that takes "any timer" takes `&dyn Timer` or `impl Timer`.
///
/// Implemented by [`HashedWheelTimer`] and [`TimerHandle`]. The task is boxed to keep the trait
/// object-safe; the inherent `new_timeout` methods take any `TimerTask` unboxed.
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, Timeout, Timer, TimerError};
/// use std::time::Duration;
///
/// fn arm_idle_check(timer: &dyn Timer) -> Result<Timeout, TimerError> {
///     timer.new_timeout(Box::new(|_: &Timeout| println!("idle")), Duration::from_secs(60))
/// }
///
/// let timer = HashedWheelTimer::default();
/// arm_idle_check(&timer).unwrap().cancel();
/// ```
pub trait Timer: Send + Sync {
    /// Schedules `task` to run once after `delay`.
    ///
    /// # Errors
    /// As [`TimerHandle::new_timeout`].
    fn new_timeout(&self, task: Box<dyn TimerTask>, delay: Duration)
        -> Result<Timeout, TimerError>;

    /// Stops the timer and returns the timeouts that never ran, now cancelled, with their tasks.
    ///
    /// # Errors
    /// As [`TimerHandle::stop`].
    fn stop(&self) -> Result<Vec<NeverRan>, TimerError>;

    /// Timeouts accepted and neither expired nor processed as cancelled.
    fn pending_timeouts(&self) -> usize;
}

/// The same three calls on the handle and on the owner (through its `Deref`).
macro_rules! impl_timer {
    ($($ty:ty),*) => {$(
        impl Timer for $ty {
            fn new_timeout(&self, task: Box<dyn TimerTask>, delay: Duration)
                -> Result<Timeout, TimerError> {
                TimerHandle::<BoxedTask>::new_timeout(self, task, delay)
            }
            fn stop(&self) -> Result<Vec<NeverRan>, TimerError> {
                TimerHandle::stop(self)
            }
            fn pending_timeouts(&self) -> usize {
                TimerHandle::pending_timeouts(self)
            }
        }
    )*};
}
impl_timer!(TimerHandle, HashedWheelTimer);

impl TimerHandle {
    /// Schedules `task` to run once after `delay`, on the worker thread (or the executor): never
    /// earlier, at most about a tick later unless the worker is overloaded; `Duration::MAX`
    /// never runs. The first call starts the worker thread (a manual timer has none).
    ///
    /// # Errors
    /// [`TimerError::Stopped`] once the timer is stopped or its owner dropped;
    /// [`TimerError::TooManyPending`] at the pending limit. A refused call drops `task`
    /// and leaves `pending_timeouts()` unchanged; it counts in `stats().refused`.
    ///
    /// # Panics
    /// If the first call cannot spawn the worker thread.
    ///
    /// ```
    /// use hashed_timer_wheel::{HashedWheelTimer, Timeout};
    /// use std::time::Duration;
    ///
    /// let timer = HashedWheelTimer::new(Duration::from_millis(10), 64);
    /// let request_timeout = timer.new_timeout(
    ///     |_: &Timeout| eprintln!("request timed out"),
    ///     Duration::from_secs(5),
    /// )?;
    /// // The response arrived in time:
    /// request_timeout.cancel();
    /// # Ok::<(), hashed_timer_wheel::TimerError>(())
    /// ```
    #[inline]
    pub fn new_timeout<T: TimerTask>(
        &self,
        task: T,
        delay: Duration,
    ) -> Result<Timeout, TimerError> {
        let make = |spares: &mut Vec<BoxedTask>| BoxedTask::reusing(task, spares);
        let handle = self.0.schedule_with(make, delay, false)?;
        Ok(handle.expect("a handle was asked for"))
    }

    /// As [`new_timeout`](Self::new_timeout), returning no [`Timeout`]: for work nobody
    /// cancels. [`stop`](Self::stop) still returns the timeout if it never ran.
    ///
    /// # Errors
    /// As [`new_timeout`](Self::new_timeout); the task is dropped.
    #[inline]
    pub fn new_timeout_detached<T: TimerTask>(
        &self,
        task: T,
        delay: Duration,
    ) -> Result<(), TimerError> {
        let make = |spares: &mut Vec<BoxedTask>| BoxedTask::reusing(task, spares);
        self.0.schedule_with(make, delay, true).map(drop)
    }
}

/// A typed timer's scheduling: tasks of type `T`, stored whole (see [`TypedTask`]).
impl<T: TypedTask> TimerHandle<T> {
    /// Schedules `task` to run once after `delay`, with no allocation (contract as
    /// [`TimerHandle::new_timeout`]; [`TypedTask`] has an example).
    ///
    /// # Errors
    /// As [`TimerHandle::new_timeout`]; the task is dropped.
    #[inline]
    pub fn new_timeout(&self, task: T, delay: Duration) -> Result<Timeout<T>, TimerError> {
        let handle = self.0.schedule_with(|_| task, delay, false)?;
        Ok(handle.expect("a handle was asked for"))
    }

    /// As [`new_timeout`](Self::new_timeout), returning no handle.
    ///
    /// # Errors
    /// As [`new_timeout`](Self::new_timeout); the task is dropped.
    #[inline]
    pub fn new_timeout_detached(&self, task: T, delay: Duration) -> Result<(), TimerError> {
        self.0.schedule_with(|_| task, delay, true).map(drop)
    }
}

impl<J: Stored> TimerHandle<J> {
    /// Starts the worker thread now rather than at the first `new_timeout`; a no-op if started.
    ///
    /// # Errors
    /// [`TimerError::Stopped`] once the timer is stopped.
    ///
    /// # Panics
    /// If the operating system refuses to create the thread.
    pub fn start(&self) -> Result<(), TimerError> {
        self.0.start()
    }

    /// Stops the timer for good and returns the timeouts that never ran, now cancelled, each
    /// with its task ([`NeverRan`]: take, run or drop it, or schedule it on another timer), in no
    /// particular order. A future's timeout is not among them: the future completes with
    /// [`TimerError::Stopped`]. Waits for the task the worker is running, if any; then new work
    /// is refused with [`TimerError::Stopped`]. A second call (or one racing the first) returns
    /// nothing, once that task has ended.
    ///
    /// # Errors
    /// [`TimerError::StopFromWorker`] from a task (or other user code a turn runs); the timer
    /// keeps running.
    ///
    /// ```
    /// use hashed_timer_wheel::HashedWheelTimer;
    /// use std::time::Duration;
    ///
    /// let timer = HashedWheelTimer::new(Duration::from_millis(10), 64);
    /// let timeout = timer.new_timeout(|_: &_| {}, Duration::from_secs(60)).unwrap();
    /// let never_ran = timer.stop().unwrap();
    /// assert_eq!(never_ran, vec![timeout.clone()]);
    /// assert!(timeout.is_cancelled());
    /// assert!(timer.is_stopped());
    /// for never_ran in never_ran {
    ///     never_ran.run(); // or into_task(), or drop it
    /// }
    /// ```
    #[must_use = "the returned timeouts never ran; ignore them explicitly if that is intended"]
    pub fn stop(&self) -> Result<Vec<NeverRan<J>>, TimerError> {
        self.0.stop()
    }

    /// Timeouts accepted that have neither expired nor been ended by a processed cancel; 0
    /// after `stop()`. Exact unless other threads schedule meanwhile; it locks each queue
    /// shard: a statistic, not a hot-path call.
    pub fn pending_timeouts(&self) -> usize {
        self.0.pending()
    }

    /// Whether the timer has been stopped (or its owner dropped).
    pub fn is_stopped(&self) -> bool {
        self.0.is_shutdown()
    }

    /// The timer's counters, as of the worker's last turn.
    pub fn stats(&self) -> TimerStats {
        self.0.stats()
    }

    /// The tick duration in use (after the 1 ms clamp).
    pub fn tick_duration(&self) -> Duration {
        Duration::from_nanos(self.0.tick_nanos)
    }

    /// The number of buckets: `ticks_per_wheel` rounded up to a power of two.
    pub fn wheel_len(&self) -> usize {
        self.0.wheel_len
    }
}

/// A hashed wheel timer: Netty's `HashedWheelTimer`, with the same contract and timing.
///
/// The owner, `Send + Sync`: share it behind an `Arc`, or hand out [`TimerHandle`]s (which do not
/// keep it running). Its methods are [`TimerHandle`]'s, which it derefs to. Dropping it stops the
/// timer as [`stop`](TimerHandle::stop) does (inside one of its tasks it waits for nothing: the
/// turn ends the rest after that task); but while an adapter on the timer (or a future an adapter
/// handed out) exists, the last of those stops it when it goes.
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, Timeout};
/// use std::sync::mpsc;
/// use std::time::Duration;
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(10), 512);
/// let (tx, rx) = mpsc::channel();
/// timer.new_timeout(move |_: &Timeout| tx.send("fired").unwrap(), Duration::from_millis(20))?;
/// assert_eq!(rx.recv().unwrap(), "fired");
/// # Ok::<(), hashed_timer_wheel::TimerError>(())
/// ```
pub struct HashedWheelTimer<J: Stored = BoxedTask> {
    handle: TimerHandle<J>,
}

impl HashedWheelTimer {
    /// A timer with the given tick and wheel size (rounded up to a power of two; a tick below
    /// 1 ms becomes 1 ms), tasks on its worker thread, no pending limit.
    ///
    /// # Panics
    /// On an argument that [`HashedWheelTimer::builder`] reports as an error instead.
    ///
    /// ```
    /// use hashed_timer_wheel::HashedWheelTimer;
    /// use std::time::Duration;
    ///
    /// let timer = HashedWheelTimer::new(Duration::from_millis(100), 500);
    /// assert_eq!(timer.wheel_len(), 512);
    /// ```
    pub fn new(tick_duration: Duration, ticks_per_wheel: usize) -> HashedWheelTimer {
        Builder::new()
            .tick_duration(tick_duration)
            .ticks_per_wheel(ticks_per_wheel)
            .build()
            .unwrap_or_else(|e| panic!("invalid HashedWheelTimer arguments: {e}"))
    }

    /// A builder for every option.
    ///
    /// ```
    /// use hashed_timer_wheel::HashedWheelTimer;
    /// use std::time::Duration;
    ///
    /// let timer = HashedWheelTimer::builder()
    ///     .tick_duration(Duration::from_millis(10))
    ///     .ticks_per_wheel(1024)
    ///     .max_pending_timeouts(100_000)
    ///     .thread_name("request-timeouts")
    ///     .build()?;
    /// # Ok::<(), hashed_timer_wheel::BuildError>(())
    /// ```
    pub fn builder() -> Builder {
        Builder::new()
    }

    // With the `Timer` trait in scope, a call on the owner would resolve to the trait's (boxed)
    // `new_timeout`, `stop` and `pending_timeouts` before deref finds these: inherent here too.
    /// As [`TimerHandle::new_timeout`].
    ///
    /// # Errors
    /// As [`TimerHandle::new_timeout`].
    #[inline]
    pub fn new_timeout<T: TimerTask>(
        &self,
        task: T,
        delay: Duration,
    ) -> Result<Timeout, TimerError> {
        self.handle.new_timeout(task, delay)
    }
}

impl<T: TypedTask> HashedWheelTimer<T> {
    /// As [`TimerHandle::new_timeout`].
    ///
    /// # Errors
    /// As [`TimerHandle::new_timeout`].
    #[inline]
    pub fn new_timeout(&self, task: T, delay: Duration) -> Result<Timeout<T>, TimerError> {
        self.handle.new_timeout(task, delay)
    }
}

impl<J: Stored> HashedWheelTimer<J> {
    /// As [`TimerHandle::stop`].
    ///
    /// # Errors
    /// As [`TimerHandle::stop`].
    #[must_use = "the returned timeouts never ran; ignore them explicitly if that is intended"]
    pub fn stop(&self) -> Result<Vec<NeverRan<J>>, TimerError> {
        self.handle.stop()
    }

    /// As [`TimerHandle::pending_timeouts`].
    pub fn pending_timeouts(&self) -> usize {
        self.handle.pending_timeouts()
    }

    pub(crate) fn from_handle(handle: TimerHandle<J>) -> HashedWheelTimer<J> {
        HashedWheelTimer { handle }
    }

    /// A cheap handle that schedules on this timer without owning it.
    pub fn handle(&self) -> TimerHandle<J> {
        self.handle.clone()
    }
}

impl<J: Stored> std::ops::Deref for HashedWheelTimer<J> {
    type Target = TimerHandle<J>;

    fn deref(&self) -> &TimerHandle<J> {
        &self.handle
    }
}

impl Default for HashedWheelTimer {
    /// 100 ms tick, 512 buckets: Netty's defaults.
    fn default() -> Self {
        Builder::new().build().expect("the defaults are valid")
    }
}

impl<J: Stored> Drop for HashedWheelTimer<J> {
    /// Stops the timer, unless an adapter still uses it (see [`HashedWheelTimer`]).
    fn drop(&mut self) {
        self.handle.0.release();
    }
}

impl<J: Stored> std::fmt::Debug for HashedWheelTimer<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashedWheelTimer")
            .field("tick_duration", &self.tick_duration())
            .field("wheel_len", &self.wheel_len())
            .field("pending", &self.pending_timeouts())
            .field("stopped", &self.is_stopped())
            .finish_non_exhaustive()
    }
}
