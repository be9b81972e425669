//! What a timer reports about itself: [`TimerStats`], which [`HashedWheelTimer::stats`] (and
//! [`TimerHandle::stats`]) reads from the counters the worker publishes, and the `Debug` output
//! of the owner and its handles (whose `pending` is `pending_timeouts()`, read without waiting).

use super::HashedWheelTimer;
use crate::shared::{Shared, Stored, TimerHandle};
use crate::sync::Ordering;
use std::fmt;
use std::time::Duration;

// `TimerStats::lateness` has one field per class the worker counts.
const _: () = assert!(crate::shared::LATENESS_CLASSES == 8);

/// Counters about the worker, for monitoring and for tests that check it sleeps when idle.
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, Timeout};
/// use std::time::Duration;
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
/// timer.new_timeout(|_: &Timeout| {}, Duration::from_secs(3600)).unwrap();
/// std::thread::sleep(Duration::from_millis(100));
/// // Netty's worker would have woken about 100 times by now; this one woke to move the timeout
/// // into its bucket, and sleeps until the hour is up.
/// assert!(timer.stats().wakeups < 10);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TimerStats {
    /// Turns the worker ran: on its thread, one as the thread starts and one each time it wakes
    /// (its sleep elapsed, or it was unparked); on a runtime's [`Drive`](crate::Drive), each of
    /// the `Drive`'s turns. A [`ManualDriver`](crate::ManualDriver)'s advances count none.
    pub wakeups: u64,
    /// The worker's current tick: the next tick it will process (or the one it is processing).
    pub tick: u64,
    /// Timeouts that expired: their tasks ran (or were handed to the executor).
    pub expired: u64,
    /// Cancellations the worker has processed, and the timeouts `stop()` ends without returning
    /// them: a cancel the worker had not processed, a future's timeout (a timeout `stop()`
    /// returned is not counted). With the owner dropped inside a task, nothing is returned:
    /// every timeout still pending counts here.
    pub cancelled: u64,
    /// Timeouts refused ([`TimerError::Stopped`](crate::TimerError::Stopped) or
    /// [`TimerError::TooManyPending`](crate::TimerError::TooManyPending)): `new_timeout` and
    /// detached calls, sleeps, interval ticks, periodic runs. (A `Deadline` made before the
    /// timer stopped and first pending after asks for no timeout: not counted.)
    pub refused: u64,
    /// Panics of user code caught and logged: tasks, a task's `Drop` when dropped unrun, a future's
    /// waker, the executor. Each is counted once; the timer goes on. (The executor's own `Drop`,
    /// run as the stopped timer lets its worker go, is caught and logged only.)
    pub panicked: u64,
    /// The latest a timeout fired after its deadline (by the worker's clock at its tick).
    pub late_max: Duration,
    /// Expired timeouts by lateness in ticks: under 1, 1 to 2, 2 to 4, ..., 64 and more. Netty's
    /// contract is the first two; the rest is a worker that fell behind.
    pub lateness: [u64; 8],
    /// The longest a task held the worker thread (executor tasks are not timed), to tens of ns.
    /// After a burst of short tasks the worker times the next few together, with one clock read:
    /// tasks run back to back then count as one run, their total.
    pub longest_run: Duration,
    /// Runs that held the worker thread longer than a tick, delaying every timeout due meanwhile;
    /// four ticks or more is also logged, at most once every ten seconds. A run is a task, or
    /// tasks timed together after a burst of short ones (see `longest_run`).
    pub slow_runs: u64,
}

macro_rules! stats_methods {
    ($ty:ident, $example:literal) => {
        impl<J: Stored> $ty<J> {
            /// Counters about the worker and the timeouts' outcomes, read with relaxed loads. The
            /// worker publishes the outcomes (`expired`, `cancelled`, the lateness and run
            /// figures) once per turn, while `pending_timeouts()` moves with each timeout: a
            /// snapshot taken during a turn (from a task, or while one runs) lags by that turn.
            /// A cancel the worker has not processed when `stop()` runs, one racing `stop()`
            /// included, is counted by `stop()`; with the owner dropped inside a task, every
            /// timeout still pending counts as cancelled, as nothing returns it.
            ///
            /// ```
            /// use hashed_timer_wheel::{HashedWheelTimer, Timeout};
            /// use std::time::Duration;
            ///
            /// let (timer, driver) = HashedWheelTimer::builder()
            ///     .tick_duration(Duration::from_millis(10))
            ///     .build_manual()?;
            #[doc = $example]
            /// assert_eq!(t.stats().wakeups, 0, "not started: never woke");
            /// t.new_timeout(|_: &Timeout| {}, Duration::from_millis(5)).unwrap();
            /// t.new_timeout(|_: &Timeout| {}, Duration::from_millis(5)).unwrap().cancel();
            /// driver.advance(Duration::from_millis(10));
            /// let stats = t.stats();
            /// assert_eq!((stats.expired, stats.cancelled), (1, 1));
            /// assert_eq!(stats.lateness[0], 1, "fired within a tick of its deadline");
            /// # Ok::<(), hashed_timer_wheel::BuildError>(())
            /// ```
            pub fn stats(&self) -> TimerStats {
                stats(&self.shared)
            }
        }

        /// Shows the state, the tick duration, the wheel's length, `pending` and `max_pending`,
        /// and never blocks: `pending` is [`pending_timeouts()`](Self::pending_timeouts) read
        /// without waiting for a producer, so while another thread schedules a timeout it can
        /// also count timeouts that thread has reserved and not yet used: an upper bound then
        /// (exact with a pending limit, which reserves none ahead).
        impl<J: Stored> fmt::Debug for $ty<J> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let s = &self.shared;
                f.debug_struct(stringify!($ty))
                    .field("state", &s.state_name())
                    .field("tick_duration", &Duration::from_nanos(s.tick_nanos))
                    .field("wheel_len", &s.wheel_len)
                    .field("pending", &s.pending_without_waiting())
                    .field("max_pending", &s.max_pending)
                    .finish_non_exhaustive()
            }
        }
    };
}

for_owner_and_handle!(stats_methods);

fn stats<J: Stored>(shared: &Shared<J>) -> TimerStats {
    let c = &shared.counters;
    let load = |a: &crate::sync::process::AtomicU64| a.load(Ordering::Relaxed);
    TimerStats {
        wakeups: shared.wakeups(),
        tick: shared.worker_tick(),
        expired: load(&c.expired),
        cancelled: load(&c.cancelled) + load(&c.cancelled_at_shutdown),
        refused: load(&c.refused),
        panicked: load(&c.panicked),
        late_max: Duration::from_nanos(load(&c.late_max)),
        lateness: std::array::from_fn(|i| load(&c.lateness[i])),
        longest_run: Duration::from_nanos(load(&c.longest_run)),
        slow_runs: load(&c.slow_runs),
    }
}
