//! The builder: every option, checked once, and the two ways to build (a worker thread, or a
//! `ManualDriver`).
//!
//! Owns argument checking and defaults. Uses the shared state and the worker (to create them),
//! the clock and the wheel's size rule; nothing after `build`.

use super::{lifecycle, HashedWheelTimer, ManualDriver, MAX_TICKS_PER_WHEEL};
use crate::clock::Clock;
use crate::error::BuildError;
use crate::shared::{Executor, Shared, Stored};
use crate::sync::Arc;
use crate::wheel::normalize_ticks_per_wheel;
use crate::worker::Worker;
use crate::TypedTask;
use std::fmt;
use std::time::Duration;

/// Builds a [`HashedWheelTimer`]; every invalid argument is reported by
/// [`build`](Builder::build) as a [`BuildError`], never a panic.
///
/// ```
/// use hashed_timer_wheel::{BuildError, HashedWheelTimer};
/// use std::time::Duration;
///
/// let err = HashedWheelTimer::builder().ticks_per_wheel(0).build().unwrap_err();
/// assert_eq!(err, BuildError::ZeroTicksPerWheel);
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct Builder {
    tick: Duration,
    ticks_per_wheel: usize,
    max_pending: usize,
    thread_name: String,
    executor: Option<Executor>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// Netty's defaults: 100 ms tick, 512 buckets, no pending limit, tasks on the worker thread.
    ///
    /// ```
    /// let timer = hashed_timer_wheel::Builder::new().build().unwrap();
    /// assert_eq!(timer.wheel_len(), 512);
    /// ```
    pub fn new() -> Builder {
        Builder {
            tick: Duration::from_millis(100),
            ticks_per_wheel: 512,
            max_pending: 0,
            thread_name: "hashed-wheel-timer".to_owned(),
            executor: None,
        }
    }

    /// The duration of one tick: the timer's resolution. Below 1 ms it is raised to 1 ms.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = hashed_timer_wheel::HashedWheelTimer::builder().tick_duration(Duration::from_millis(1));
    /// ```
    pub fn tick_duration(mut self, tick: Duration) -> Builder {
        self.tick = tick;
        self
    }

    /// The number of buckets, rounded up to a power of two (1 to 2^30, as Netty).
    ///
    /// A bucket takes 16 bytes once used, plus a bit of an occupancy bitmap: up to 4096 buckets
    /// are allocated when the timer is built, a larger wheel's buckets 4096 at a time, as
    /// timeouts land among them (and kept until the timer stops). So a wheel of 2^30 buckets
    /// is built in about 132 MiB of address space, most of it the bitmap, mapped only as it is
    /// written, and grows towards 16 GiB only if timeouts reach every part of it.
    ///
    /// ```
    /// let b = hashed_timer_wheel::HashedWheelTimer::builder().ticks_per_wheel(1024);
    /// ```
    pub fn ticks_per_wheel(mut self, ticks: usize) -> Builder {
        self.ticks_per_wheel = ticks;
        self
    }

    /// At most this many timeouts pending at once; `new_timeout` refuses the next one with
    /// [`TimerError::TooManyPending`](crate::TimerError::TooManyPending). 0 (the default) means
    /// no limit of your own; a timer never holds more than 134 217 727 (2^27 - 1) pending
    /// timeouts, the size of its wheel's key space (some 6 GB of them).
    ///
    /// ```
    /// let b = hashed_timer_wheel::HashedWheelTimer::builder().max_pending_timeouts(10_000);
    /// ```
    pub fn max_pending_timeouts(mut self, max: usize) -> Builder {
        self.max_pending = max;
        self
    }

    /// The worker thread's name (default `hashed-wheel-timer`).
    ///
    /// ```
    /// let b = hashed_timer_wheel::HashedWheelTimer::builder().thread_name("idle-detector");
    /// ```
    pub fn thread_name(mut self, name: impl Into<String>) -> Builder {
        self.thread_name = name.into();
        self
    }

    /// Hands expired tasks to `executor` instead of running them on the worker thread. A panic
    /// in `executor` (a refusal) is caught, counted in `stats().panicked` and logged; the
    /// timeout stays expired, and the job, run or not, drops its task once. A task that panics
    /// on the executor is counted too.
    ///
    /// ```
    /// use hashed_timer_wheel::HashedWheelTimer;
    ///
    /// // Run every task on a thread of its own.
    /// let timer = HashedWheelTimer::builder()
    ///     .executor(|job: Box<dyn FnOnce() + Send>| {
    ///         std::thread::spawn(job);
    ///     })
    ///     .build()
    ///     .unwrap();
    /// ```
    pub fn executor<E>(mut self, executor: E) -> Builder
    where
        E: Fn(Box<dyn FnOnce() + Send>) + Send + Sync + 'static,
    {
        self.executor = Some(Arc::new(executor));
        self
    }

    /// Checks the arguments and builds the timer. No worker thread starts until the first
    /// `new_timeout` (or `start`).
    ///
    /// On x86-64 Linux, the first timer built in the process (by `build` or `build_typed`)
    /// starts the producers' clock thread, `hashed-timer-wheel-tsc`: it calibrates the TSC,
    /// which `new_timeout` then reads while the kernel keeps time with it, and ends. The
    /// worker's turns read the kernel's clock source again, at most once a second, so that
    /// producers go back to the monotonic clock once the kernel gives the TSC up (see the
    /// crate docs, "Threading model", for what holds until that re-read).
    ///
    /// # Errors
    /// A [`BuildError`] for a zero tick, a zero or above-2^30 `ticks_per_wheel`, or a tick times
    /// wheel length that overflows 64-bit nanoseconds.
    ///
    /// ```
    /// use hashed_timer_wheel::{BuildError, HashedWheelTimer};
    /// use std::time::Duration;
    ///
    /// assert_eq!(
    ///     HashedWheelTimer::builder().tick_duration(Duration::ZERO).build().unwrap_err(),
    ///     BuildError::ZeroTickDuration,
    /// );
    /// ```
    pub fn build(self) -> Result<HashedWheelTimer, BuildError> {
        self.threaded()
    }

    /// Builds a timer driven by hand, for deterministic tests: no worker thread, and time moves
    /// only when the returned [`ManualDriver`] advances it, running the due tasks on the
    /// caller's thread. The clock starts at zero.
    ///
    /// # Errors
    /// As [`build`](Builder::build).
    ///
    /// ```
    /// use hashed_timer_wheel::{HashedWheelTimer, Timeout};
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let (timer, driver) = HashedWheelTimer::builder()
    ///     .tick_duration(Duration::from_millis(10))
    ///     .build_manual()?;
    /// let fired = Arc::new(AtomicBool::new(false));
    /// let f = fired.clone();
    /// timer.new_timeout(move |_: &Timeout| f.store(true, Ordering::SeqCst), Duration::from_millis(25)).unwrap();
    /// driver.advance(Duration::from_millis(25));
    /// assert!(!fired.load(Ordering::SeqCst), "due at 25 ms, fires at the end of tick 2 (30 ms)");
    /// driver.advance(Duration::from_millis(5));
    /// assert!(fired.load(Ordering::SeqCst));
    /// # Ok::<(), hashed_timer_wheel::BuildError>(())
    /// ```
    pub fn build_manual(self) -> Result<(HashedWheelTimer, ManualDriver), BuildError> {
        self.manual()
    }

    /// Builds a typed timer: one whose tasks are all of type `T`, stored in place in its
    /// queue and wheel, so that scheduling one allocates nothing (see [`TypedTask`]). The same
    /// options, limits and errors as [`build`](Builder::build).
    ///
    /// # Errors
    /// As [`build`](Builder::build).
    ///
    /// ```
    /// use hashed_timer_wheel::{HashedWheelTimer, Timeout, TypedTask};
    /// use std::time::Duration;
    ///
    /// struct Expire(u64);
    /// impl TypedTask for Expire {
    ///     fn run(self, _: &Timeout<Self>) {
    ///         println!("lease {} expired", self.0);
    ///     }
    /// }
    ///
    /// let timer: HashedWheelTimer<Expire> = HashedWheelTimer::builder().build_typed()?;
    /// let lease = timer.new_timeout(Expire(7), Duration::from_secs(1800)).unwrap();
    /// lease.cancel();
    /// # Ok::<(), hashed_timer_wheel::BuildError>(())
    /// ```
    pub fn build_typed<T: TypedTask>(self) -> Result<HashedWheelTimer<T>, BuildError> {
        self.threaded()
    }

    /// A timer with a worker thread (started by its first timeout), on the system clock.
    fn threaded<J: Stored>(self) -> Result<HashedWheelTimer<J>, BuildError> {
        #[cfg(not(loom))]
        let clock = Clock::system();
        #[cfg(loom)]
        let clock = Clock::manual();
        self.build_with(clock, DrivenBy::WorkerThread)
            .map(|shared| HashedWheelTimer { shared })
    }

    /// [`build_manual`](Builder::build_manual) for a typed timer
    /// ([`build_typed`](Builder::build_typed)).
    ///
    /// # Errors
    /// As [`build`](Builder::build).
    pub fn build_manual_typed<T: TypedTask>(
        self,
    ) -> Result<(HashedWheelTimer<T>, ManualDriver<T>), BuildError> {
        self.manual()
    }

    fn manual<J: Stored>(self) -> Result<(HashedWheelTimer<J>, ManualDriver<J>), BuildError> {
        let shared = self.build_with(Clock::manual(), DrivenBy::ManualDriver)?;
        let driver = ManualDriver {
            shared: Arc::clone(&shared),
        };
        Ok((HashedWheelTimer { shared }, driver))
    }

    fn build_with<J: Stored>(
        self,
        clock: Clock,
        driven_by: DrivenBy,
    ) -> Result<Arc<Shared<J>>, BuildError> {
        let (tick_nanos, wheel_len) = self.tick_and_wheel_len()?;
        lifecycle::count_instance();
        let worker: Worker<J> = Worker::new(tick_nanos, wheel_len, self.executor);
        Ok(Arc::new(Shared::new(
            tick_nanos,
            wheel_len,
            self.max_pending,
            clock,
            lifecycle::erase_worker(worker),
            self.thread_name,
            driven_by == DrivenBy::ManualDriver,
        )))
    }

    /// The tick in nanoseconds (at least 1 ms) and the wheel's length, or why the settings make
    /// no timer.
    fn tick_and_wheel_len(&self) -> Result<(u64, usize), BuildError> {
        if self.tick.is_zero() {
            return Err(BuildError::ZeroTickDuration);
        }
        if self.ticks_per_wheel == 0 {
            return Err(BuildError::ZeroTicksPerWheel);
        }
        if self.ticks_per_wheel > MAX_TICKS_PER_WHEEL {
            return Err(BuildError::TooManyTicksPerWheel {
                requested: self.ticks_per_wheel,
            });
        }
        let wheel_len = normalize_ticks_per_wheel(self.ticks_per_wheel);
        let mut tick = self.tick;
        if tick < Duration::from_millis(1) {
            log::warn!("configured tick duration {tick:?} is smaller than 1 ms, using 1 ms");
            tick = Duration::from_millis(1);
        }
        let tick_nanos = u64::try_from(tick.as_nanos())
            .ok()
            .filter(|n| n.checked_mul(wheel_len as u64).is_some())
            .ok_or(BuildError::TickOverflow {
                tick_duration: tick,
                wheel_len,
            })?;
        Ok((tick_nanos, wheel_len))
    }
}

/// What runs a timer's worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DrivenBy {
    /// A thread of its own, started by the first timeout.
    WorkerThread,
    /// The caller's thread, through a [`ManualDriver`].
    ManualDriver,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("tick_duration", &self.tick)
            .field("ticks_per_wheel", &self.ticks_per_wheel)
            .field("max_pending_timeouts", &self.max_pending)
            .field("thread_name", &self.thread_name)
            .field("executor", &self.executor.is_some())
            .finish()
    }
}
