//! The builder: the options, their defaults and their checks; it creates the core's shared state.

use super::{HashedWheelTimer, ManualDriver, MAX_TICKS_PER_WHEEL};
use crate::engine::clock::Clock;
use crate::engine::{count_instance, Config, Executor, Shared, Stored, TimerHandle};
use crate::error::BuildError;
use crate::sync::Arc;
use crate::TypedTask;
use std::fmt;
use std::time::Duration;

/// Builds a [`HashedWheelTimer`]; every invalid argument is reported by
/// [`build`](Builder::build) as a [`BuildError`], never a panic.
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
    pub fn tick_duration(mut self, tick: Duration) -> Builder {
        self.tick = tick;
        self
    }

    /// The number of buckets, rounded up to a power of two (1 to 2^30, as Netty).
    pub fn ticks_per_wheel(mut self, ticks: usize) -> Builder {
        self.ticks_per_wheel = ticks;
        self
    }

    /// At most this many timeouts pending at once; `new_timeout` refuses the next one with
    /// [`TimerError::TooManyPending`](crate::TimerError::TooManyPending). 0 (the default) means no
    /// limit beyond the slots a timer can name, about 2^32. Two kinds of timeout pass the limit,
    /// and may hold the count above it for a while: one that goes on with a
    /// [`Sleep`](crate::Sleep)'s wait (an [`Interval`](crate::Interval)'s too): a reset before it
    /// completes (the old timeout counts until its cancel is processed), or the rest of a wait
    /// that hyper's reset pushed back; and a [`DelayQueue`](crate::DelayQueue)'s one wake-up.
    pub fn max_pending_timeouts(mut self, max: usize) -> Builder {
        self.max_pending = max;
        self
    }

    /// The worker thread's name (default `hashed-wheel-timer`).
    pub fn thread_name(mut self, name: impl Into<String>) -> Builder {
        self.thread_name = name.into();
        self
    }

    /// Hands expired tasks to `executor` instead of running them on the worker thread. A panic of
    /// `executor` or of a task it runs is caught, counted in `stats().panicked` and logged; the
    /// timeout stays expired, and its task is dropped once. A job the executor drops without
    /// running it (its refusal, as Netty's rejected submission) is logged, and drops the task.
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
        self.executor = Some(Executor::new(executor));
        self
    }

    /// Checks the arguments and builds the timer. Building starts no thread: the worker thread,
    /// the only thread a timer starts, starts with the first `new_timeout` (or `start`, or a
    /// [`Drive`](crate::Drive)'s first poll). On x86-64 Linux, the process's first timer built
    /// here or by `build_typed` calibrates quanta's time-stamp counter on the calling thread:
    /// usually 10 to 20 ms, at most 200 ms.
    ///
    /// # Errors
    /// A [`BuildError`] for a zero tick, a zero or above-2^30 `ticks_per_wheel`, a tick times
    /// wheel length that overflows 64-bit nanoseconds, or a thread name with a NUL byte.
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

    /// Builds a timer driven by hand, for deterministic tests: its clock starts at zero and moves
    /// only when the returned [`ManualDriver`] advances it, on the caller's thread.
    ///
    /// # Errors
    /// As [`build`](Builder::build).
    ///
    /// ```
    /// use hashed_timer_wheel::HashedWheelTimer;
    /// use std::time::Duration;
    ///
    /// let (timer, driver) = HashedWheelTimer::builder()
    ///     .tick_duration(Duration::from_millis(10))
    ///     .build_manual()?;
    /// let timeout = timer.new_timeout(|_: &_| {}, Duration::from_millis(25))?;
    /// driver.advance(Duration::from_millis(25));
    /// assert!(!timeout.is_expired(), "due at 25 ms, fires at the end of tick 2 (30 ms)");
    /// driver.advance(Duration::from_millis(5));
    /// assert!(timeout.is_expired());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn build_manual(self) -> Result<(HashedWheelTimer, ManualDriver), BuildError> {
        self.manual()
    }

    /// Builds a typed timer: its tasks are all of type `T`, stored in place, so scheduling
    /// allocates nothing ([`TypedTask`] has an example). Options and limits as
    /// [`build`](Builder::build).
    ///
    /// # Errors
    /// As [`build`](Builder::build).
    pub fn build_typed<T: TypedTask>(self) -> Result<HashedWheelTimer<T>, BuildError> {
        self.threaded()
    }

    /// Builds a timer on the current tokio runtime's clock (`tokio::time::Instant`), driven by
    /// that runtime: under a paused clock (`start_paused`, `tokio::time::pause`), `advance` fires
    /// what is due by then and auto-advance jumps to the wheel's next deadline, as for tokio's own
    /// timers. It starts no thread: its [`Drive`](crate::Drive) is spawned on the runtime here
    /// (another [`drive`](crate::TimerHandle::drive) of it completes at once), and the timer stops
    /// once the runtime drops it. Needs the `tokio` feature.
    ///
    /// # Errors
    /// As [`build`](Builder::build); [`BuildError::NoRuntime`] outside a tokio runtime with
    /// timers enabled.
    ///
    /// ```
    /// use hashed_timer_wheel::HashedWheelTimer;
    /// use std::time::Duration;
    ///
    /// # #[cfg(feature = "test-util")]
    /// #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// async fn main() {
    ///     let timer = HashedWheelTimer::builder().build_on_tokio().unwrap();
    ///     let start = tokio::time::Instant::now();
    ///     timer.sleep(Duration::from_secs(3600)).await.unwrap(); // no real hour: paused
    ///     assert!(start.elapsed() >= Duration::from_secs(3600));
    /// }
    /// # #[cfg(not(feature = "test-util"))]
    /// # fn main() {}
    /// ```
    #[cfg(feature = "tokio")]
    pub fn build_on_tokio(self) -> Result<HashedWheelTimer, BuildError> {
        let runtime = tokio_runtime()?;
        let shared = self.build_with(Clock::tokio(runtime.clone()))?;
        let timer = HashedWheelTimer::from_handle(TimerHandle(shared));
        runtime.spawn(timer.driver(|at| tokio::time::sleep_until(at.into()), true));
        Ok(timer)
    }

    fn threaded<J: Stored>(self) -> Result<HashedWheelTimer<J>, BuildError> {
        let shared = self.build_with(Clock::system())?;
        Ok(HashedWheelTimer::from_handle(TimerHandle(shared)))
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
        let shared = self.build_with(Clock::manual())?;
        let driver = ManualDriver::new(Arc::clone(&shared));
        Ok((HashedWheelTimer::from_handle(TimerHandle(shared)), driver))
    }

    fn build_with<J: Stored>(self, clock: Clock) -> Result<Arc<Shared<J>>, BuildError> {
        let (tick_nanos, wheel_len) = self.tick_and_wheel_len()?;
        count_instance();
        let config = Config {
            tick_nanos,
            wheel_len,
            max_pending: (self.max_pending > 0).then_some(self.max_pending),
            thread_name: self.thread_name.into_boxed_str(),
            executor: self.executor,
        };
        Ok(Shared::new(config, clock))
    }

    fn tick_and_wheel_len(&self) -> Result<(u64, usize), BuildError> {
        if self.thread_name.contains('\0') {
            // The thread would be refused at the first timeout: say so here.
            return Err(BuildError::ThreadNameWithNul);
        }
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
        let wheel_len = self.ticks_per_wheel.next_power_of_two(); // Netty's normalizeTicksPerWheel
        let mut tick = self.tick;
        if tick < Duration::from_millis(1) {
            crate::engine::log_caught(
                log::Level::Warn,
                format_args!("configured tick duration {tick:?} is smaller than 1 ms, using 1 ms"),
            );
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

/// The current tokio runtime, if it has timers.
#[cfg(feature = "tokio")]
fn tokio_runtime() -> Result<tokio::runtime::Handle, BuildError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| BuildError::NoRuntime)?;
    // A runtime without timers panics as a sleep is made: found here, not as a hang later.
    let probe = std::panic::catch_unwind(|| drop(tokio::time::sleep(Duration::ZERO)));
    probe.map(|()| runtime).map_err(|_| BuildError::NoRuntime)
}
