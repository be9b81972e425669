//! The public timer: [`HashedWheelTimer`], the methods of [`TimerHandle`], the [`Timer`] trait, and
//! in its files the [`Builder`], [`ManualDriver`], the `stats()` methods, periodic tasks, futures
//! and lifecycle. Uses every module below it. A method of both owner and handle is written once,
//! in a `macro_rules!` of its file that `for_owner_and_handle!` applies to both.

/// Implements `$methods!` for the owner and the handle; its second argument binds `t` in examples.
macro_rules! for_owner_and_handle {
    ($methods:ident) => {
        $methods!(HashedWheelTimer, "let t = &timer;");
        $methods!(TimerHandle, "let t = timer.handle();");
    };
}

mod builder;
mod deadline;
mod drive;
mod driver;
mod interval;
mod lifecycle;
mod periodic;
mod sleep;
mod stats;

pub use builder::Builder;
pub use deadline::Deadline;
pub use drive::Drive;
pub use driver::ManualDriver;
pub use interval::Interval;
pub(crate) use lifecycle::KeepAlive;
pub use lifecycle::INSTANCE_COUNT_LIMIT;
pub use periodic::{MissedRuns, PeriodicTimeout};
pub use sleep::Sleep;

use crate::shared::{BoxedTask, Enqueue, Fresh, Shared, Stored, TimerHandle};
use crate::sync::Arc;
use crate::{Timeout, TimerError, TimerTask, TypedTask};
use std::time::Duration;

/// The largest wheel: `ticks_per_wheel` above this is an error (as in Netty before 4.1.107).
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, MAX_TICKS_PER_WHEEL};
///
/// assert!(HashedWheelTimer::builder().ticks_per_wheel(MAX_TICKS_PER_WHEEL + 1).build().is_err());
/// ```
pub const MAX_TICKS_PER_WHEEL: usize = 1 << 30;

/// Loom only, with the clock held: moves the clock to `to` (never back) and, as an OS timer would,
/// wakes the worker and a runtime's driver if the planned tick has ended.
#[cfg(loom)]
pub fn advance_clock(timer: &HashedWheelTimer, to: Duration) {
    let shared = &timer.shared;
    let now = crate::clock::duration_to_nanos(to);
    shared.clock.advance_to(now);
    // Pairs with the fence in the worker's `sleep_until_end_of`.
    crate::sync::fence(crate::sync::Ordering::SeqCst);
    let planned = shared.plan();
    let ends = planned.saturating_add(1).saturating_mul(shared.tick_nanos);
    if planned < crate::shared::AWAKE && ends <= now {
        crate::sync::loom_hooks::unpark_worker();
        let driver = crate::sync::lock(&shared.control).driver_waker.clone();
        if let Some(driver) = driver {
            driver.wake_by_ref();
        }
    }
}

#[inline]
fn new_timeout<J: Stored>(
    shared: &Arc<Shared<J>>,
    job: impl Enqueue<J>,
    delay: Duration,
) -> Result<Timeout<J>, TimerError> {
    started(shared)?;
    shared.schedule(job, delay).map(Timeout::new)
}

#[inline]
fn new_timeout_detached<J: Stored>(
    shared: &Arc<Shared<J>>,
    job: impl Enqueue<J>,
    delay: Duration,
) -> Result<(), TimerError> {
    started(shared)?;
    shared.schedule_detached(job, delay)
}

#[inline]
fn start<J: Stored>(shared: &Arc<Shared<J>>) -> Result<(), TimerError> {
    if shared.is_started() {
        Ok(())
    } else {
        lifecycle::start_slow(shared)
    }
}

/// [`start`] for a new timeout: a refusal is counted (as `Shared::push` counts its own) before
/// the caller returns and drops the task, whose `Drop` is user code.
#[inline]
fn started<J: Stored>(shared: &Arc<Shared<J>>) -> Result<(), TimerError> {
    start(shared).map_err(|e| shared.refuse(e))
}

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
    /// As [`HashedWheelTimer::new_timeout`].
    ///
    /// ```
    /// # use hashed_timer_wheel::{HashedWheelTimer, Timeout, Timer};
    /// # use std::time::Duration;
    /// let (timer, driver) = HashedWheelTimer::builder().build_manual()?;
    /// let any: &dyn Timer = &timer;
    /// let timeout = any.new_timeout(Box::new(|_: &Timeout| {}), Duration::from_secs(1))?;
    /// driver.advance(Duration::from_secs(2));
    /// assert!(timeout.is_expired());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn new_timeout(&self, task: Box<dyn TimerTask>, delay: Duration)
        -> Result<Timeout, TimerError>;

    /// Stops the timer and returns the timeouts that never ran, now cancelled.
    ///
    /// # Errors
    /// As [`HashedWheelTimer::stop`].
    ///
    /// ```
    /// # use hashed_timer_wheel::{HashedWheelTimer, Timeout, Timer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::default();
    /// let any: &dyn Timer = &timer;
    /// let timeout = any.new_timeout(Box::new(|_: &Timeout| {}), Duration::from_secs(60))?;
    /// assert_eq!(any.stop()?, vec![timeout]);
    /// # Ok::<(), hashed_timer_wheel::TimerError>(())
    /// ```
    fn stop(&self) -> Result<Vec<Timeout>, TimerError>;

    /// Timeouts accepted and neither expired nor processed as cancelled (as
    /// [`HashedWheelTimer::pending_timeouts`]).
    ///
    /// ```
    /// # use hashed_timer_wheel::{HashedWheelTimer, Timeout, Timer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::default();
    /// let any: &dyn Timer = &timer;
    /// let _timeout = any.new_timeout(Box::new(|_: &Timeout| {}), Duration::from_secs(60))?;
    /// assert_eq!(any.pending_timeouts(), 1);
    /// # Ok::<(), hashed_timer_wheel::TimerError>(())
    /// ```
    fn pending_timeouts(&self) -> usize;
}

macro_rules! scheduling_methods {
    ($ty:ident, $example:literal) => {
        impl $ty {
            /// Schedules `task` to run once after `delay`, on the worker thread (or the executor).
            ///
            /// Never earlier than `delay`, at most about a tick later unless the worker is
            /// overloaded; `Duration::MAX` never runs. The first call starts the worker thread (a
            /// manual timer has none: its `ManualDriver` runs the ticks).
            ///
            /// # Errors
            /// [`TimerError::Stopped`] once the timer is stopped or its owner dropped;
            /// [`TimerError::TooManyPending`] at the pending limit. A refused call drops `task`
            /// and leaves `pending_timeouts()` unchanged; it counts in `stats().refused`.
            ///
            /// # Panics
            /// As [`HashedWheelTimer::start`], if the first call cannot spawn the worker thread.
            ///
            /// ```
            /// use hashed_timer_wheel::{HashedWheelTimer, Timeout};
            /// use std::time::Duration;
            ///
            /// let timer = HashedWheelTimer::new(Duration::from_millis(10), 64);
            #[doc = $example]
            /// let request_timeout = t.new_timeout(
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
                new_timeout(&self.shared, Fresh(task), delay)
            }

            /// Schedules `task` as [`new_timeout`](Self::new_timeout) does, but returns no
            /// [`Timeout`]: for work nobody cancels, it saves the handle's reference count.
            /// [`stop`](Self::stop) still returns the timeout if it never ran.
            ///
            /// # Errors
            /// As [`new_timeout`](Self::new_timeout); the task is dropped.
            ///
            /// ```
            /// use hashed_timer_wheel::{HashedWheelTimer, Timeout};
            /// use std::sync::mpsc;
            /// use std::time::Duration;
            ///
            /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
            #[doc = $example]
            /// let (tx, rx) = mpsc::channel();
            /// t.new_timeout_detached(
            ///     move |t: &Timeout| tx.send(t.is_expired()).unwrap(),
            ///     Duration::from_millis(5),
            /// )?;
            /// assert!(rx.recv().unwrap());
            /// # Ok::<(), hashed_timer_wheel::TimerError>(())
            /// ```
            #[inline]
            pub fn new_timeout_detached<T: TimerTask>(
                &self,
                task: T,
                delay: Duration,
            ) -> Result<(), TimerError> {
                // Built here, not queued `Fresh`: through `Fresh` this call is slower and bimodal
                // (`benches/README.md`, "Tried and dropped").
                new_timeout_detached(&self.shared, BoxedTask::new(task), delay)
            }

            /// A future that runs this timer's ticks on the runtime that polls it, sleeping with
            /// `sleep_until` (tokio: `|at| tokio::time::sleep_until(at.into())`); see [`Drive`].
            /// Its first poll starts the timer, thread included (the watchdog), as `start` does,
            /// even with nothing scheduled. If `sleep_until` or its sleeps panic so that no
            /// sleep is armed, the panic is counted in `stats().panicked`, and the `Drive` hands
            /// the ticks back to the timer's thread and completes.
            ///
            /// ```
            /// # use hashed_timer_wheel::HashedWheelTimer;
            /// # use std::time::Duration;
            /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
            #[doc = $example]
            /// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
            /// rt.spawn(t.drive(|at| tokio::time::sleep_until(at.into())));
            /// rt.block_on(t.sleep(Duration::from_millis(3))).unwrap();
            /// ```
            pub fn drive<F, S>(&self, sleep_until: F) -> Drive<F, S>
            where
                F: FnMut(std::time::Instant) -> S + Send + 'static,
                S: std::future::Future<Output = ()> + Send + 'static,
            {
                Drive::new(&self.shared, sleep_until)
            }
        }

        impl<J: Stored> $ty<J> {
            /// Stops the timer for good and returns the timeouts that never ran, now cancelled
            /// (their tasks dropped), in no particular order. Waits for the task the worker is
            /// running, if any; afterwards new work is refused with [`TimerError::Stopped`]. A
            /// second call (or one racing the first) returns nothing, once that task has ended.
            ///
            /// # Errors
            /// [`TimerError::StopFromWorker`] on the worker thread; the timer keeps running.
            ///
            /// ```
            /// use hashed_timer_wheel::HashedWheelTimer;
            /// use std::time::Duration;
            ///
            /// let timer = HashedWheelTimer::new(Duration::from_millis(10), 64);
            #[doc = $example]
            /// let timeout = t.new_timeout(|_: &_| {}, Duration::from_secs(60)).unwrap();
            /// let never_ran = t.stop().unwrap();
            /// assert_eq!(never_ran, vec![timeout.clone()]);
            /// assert!(timeout.is_cancelled());
            /// assert!(timer.is_stopped());
            /// ```
            #[must_use = "the returned timeouts never ran; ignore them explicitly if that is intended"]
            pub fn stop(&self) -> Result<Vec<Timeout<J>>, TimerError> {
                lifecycle::stop(&self.shared)
            }

            /// Timeouts accepted that have neither expired nor had their cancellation processed;
            /// 0 after `stop()`. At most `max_pending_timeouts`, save for the timeouts that pass
            /// the limit and may hold the count above it for a while (one that goes on with a
            /// `Sleep`'s wait, a `DelayQueue`'s wake-up: see
            /// [`Builder::max_pending_timeouts`](crate::Builder::max_pending_timeouts)). Exact
            /// unless other threads schedule meanwhile. Without a pending limit it locks each
            /// queue shard (see the performance ledger): a statistic, not a hot-path call.
            ///
            /// ```
            /// # use hashed_timer_wheel::HashedWheelTimer;
            /// # use std::time::Duration;
            /// let timer = HashedWheelTimer::default();
            #[doc = $example]
            /// assert_eq!(t.pending_timeouts(), 0);
            /// let _timeout = t.new_timeout(|_: &_| {}, Duration::from_secs(60)).unwrap();
            /// assert_eq!(t.pending_timeouts(), 1);
            /// ```
            #[inline]
            pub fn pending_timeouts(&self) -> usize {
                self.shared.pending_timeouts()
            }

            /// Whether the timer has been stopped (or its owner dropped).
            ///
            /// ```
            /// # use hashed_timer_wheel::HashedWheelTimer;
            /// let timer = HashedWheelTimer::default();
            #[doc = $example]
            /// assert!(!t.is_stopped());
            /// let _ = timer.stop();
            /// assert!(t.is_stopped());
            /// ```
            pub fn is_stopped(&self) -> bool {
                self.shared.is_shutdown()
            }
        }

        /// A typed timer's scheduling: tasks of type `T`, stored in place (see [`TypedTask`]).
        impl<T: TypedTask> $ty<T> {
            /// Schedules `task` to run once after `delay`, with no allocation (contract as
            /// [`HashedWheelTimer::new_timeout`]; [`TypedTask`] has an example).
            ///
            /// # Errors
            /// [`TimerError::Stopped`] after `stop()`; [`TimerError::TooManyPending`] at the
            /// pending limit. The task is dropped.
            ///
            /// ```
            /// # use hashed_timer_wheel::{HashedWheelTimer, Timeout, TypedTask};
            /// # use std::time::Duration;
            /// struct Close(u32);
            /// impl TypedTask for Close {
            ///     fn run(self, _: &Timeout<Self>) {}
            /// }
            ///
            /// let (timer, driver) = HashedWheelTimer::builder().build_manual_typed::<Close>()?;
            #[doc = $example]
            /// let timeout = t.new_timeout(Close(7), Duration::from_secs(1))?;
            /// driver.advance(Duration::from_secs(2));
            /// assert!(timeout.is_expired());
            /// # Ok::<(), Box<dyn std::error::Error>>(())
            /// ```
            #[inline]
            pub fn new_timeout(&self, task: T, delay: Duration) -> Result<Timeout<T>, TimerError> {
                new_timeout(&self.shared, task, delay)
            }

            /// As [`new_timeout`](Self::new_timeout), returning no handle.
            ///
            /// # Errors
            /// As [`new_timeout`](Self::new_timeout); the task is dropped.
            ///
            /// ```
            /// # use hashed_timer_wheel::{HashedWheelTimer, Timeout, TypedTask};
            /// # use std::sync::mpsc::{channel, Sender};
            /// # use std::time::Duration;
            /// struct Close(u32, Sender<u32>);
            /// impl TypedTask for Close {
            ///     fn run(self, _: &Timeout<Self>) {
            ///         let _ = self.1.send(self.0);
            ///     }
            /// }
            ///
            /// let (timer, driver) = HashedWheelTimer::builder().build_manual_typed::<Close>()?;
            #[doc = $example]
            /// let (tx, rx) = channel();
            /// t.new_timeout_detached(Close(7, tx), Duration::from_secs(1))?;
            /// driver.advance(Duration::from_secs(2));
            /// assert_eq!(rx.try_recv()?, 7);
            /// # Ok::<(), Box<dyn std::error::Error>>(())
            /// ```
            #[inline]
            pub fn new_timeout_detached(&self, task: T, delay: Duration) -> Result<(), TimerError> {
                new_timeout_detached(&self.shared, task, delay)
            }
        }

        impl Timer for $ty {
            fn new_timeout(
                &self,
                task: Box<dyn TimerTask>,
                delay: Duration,
            ) -> Result<Timeout, TimerError> {
                <$ty>::new_timeout(self, task, delay)
            }
            fn stop(&self) -> Result<Vec<Timeout>, TimerError> {
                <$ty>::stop(self)
            }
            fn pending_timeouts(&self) -> usize {
                <$ty>::pending_timeouts(self)
            }
        }
    };
}

for_owner_and_handle!(scheduling_methods);

/// A hashed wheel timer: Netty's `HashedWheelTimer`, with the same contract and timing.
///
/// The owner, `Send + Sync`: share it behind an `Arc`, or hand out [`TimerHandle`]s (which do not
/// keep it running). Dropping it stops the timer as [`stop`](HashedWheelTimer::stop) does,
/// waiting for the task the worker is running (inside one of its tasks it waits for nothing: the
/// worker ends after that task), and drops every task that never ran; unless an adapter on the
/// timer (or a future an adapter handed out) still exists: then the last of those stops it when
/// it goes ([`TimerHandle`], "What keeps the timer running").
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
    pub(crate) shared: Arc<Shared<J>>,
}

impl HashedWheelTimer {
    /// A timer with the given tick and wheel size, tasks on its worker thread, no pending limit.
    /// `ticks_per_wheel` is rounded up to a power of two; a tick below 1 ms becomes 1 ms.
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
}

impl<J: Stored> HashedWheelTimer<J> {
    /// Starts the worker thread now rather than at the first `new_timeout`; a no-op if started.
    ///
    /// # Errors
    /// [`TimerError::Stopped`] once the timer is stopped.
    ///
    /// # Panics
    /// If the operating system refuses to create the thread.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// let timer = HashedWheelTimer::default();
    /// timer.start().unwrap();
    /// timer.start().unwrap();
    /// ```
    pub fn start(&self) -> Result<(), TimerError> {
        start(&self.shared)
    }

    /// A cheap handle that schedules on this timer without owning it.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// let timer = HashedWheelTimer::default();
    /// let handle = timer.handle();
    /// assert!(!handle.is_stopped());
    /// ```
    pub fn handle(&self) -> TimerHandle<J> {
        TimerHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The tick duration in use (after the 1 ms clamp).
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_micros(10), 8);
    /// assert_eq!(timer.tick_duration(), Duration::from_millis(1));
    /// ```
    pub fn tick_duration(&self) -> Duration {
        Duration::from_nanos(self.shared.tick_nanos)
    }

    /// The number of buckets: `ticks_per_wheel` rounded up to a power of two.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// assert_eq!(HashedWheelTimer::new(Duration::from_millis(1), 3).wheel_len(), 4);
    /// ```
    pub fn wheel_len(&self) -> usize {
        self.shared.wheel_len
    }
}

impl Default for HashedWheelTimer {
    /// 100 ms tick, 512 buckets: Netty's defaults.
    fn default() -> Self {
        Builder::new().build().expect("the defaults are valid")
    }
}

impl<J: Stored> Drop for HashedWheelTimer<J> {
    /// Stops the timer unless an adapter (or a future an adapter handed out) still uses it: the
    /// last of those stops it when it goes (see [`TimerHandle`], "What keeps the timer
    /// running").
    fn drop(&mut self) {
        lifecycle::release(&self.shared);
    }
}
