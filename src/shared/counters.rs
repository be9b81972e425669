//! The statistics: [`TimerStats`], what a timer reports about itself, and the [`Counters`] it is
//! read from ([`Shared::stats`]), written by the worker (its tally, stored after each turn),
//! refusing producers, a shutdown, and whoever catches a panic of user code. Touches only
//! `sync`, and `shared`'s catching of a panic.

use super::{Shared, Stored};
use crate::sync::{process, Ordering};
use std::time::Duration;

/// Lateness classes of fired timeouts, in ticks: under 1, 1 to 2, 2 to 4, ... 64 and more.
pub(crate) const LATENESS_CLASSES: usize = 8;

// `TimerStats::lateness` has one field per class the worker counts.
const _: () = assert!(LATENESS_CLASSES == 8);

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

/// The atomics [`TimerStats`] is read from: one per field of the same name (durations in ns),
/// but `wakeups` and `tick`, which the worker's plan keeps. Every access is Relaxed: nothing is
/// ordered by them.
#[derive(Default)]
pub(crate) struct Counters {
    // The worker's running totals, which only it writes, after each turn (`Tally::publish`).
    pub(crate) expired: process::AtomicU64,
    pub(crate) cancelled: process::AtomicU64,
    pub(crate) late_max: process::AtomicU64,
    pub(crate) longest_run: process::AtomicU64,
    pub(crate) slow_runs: process::AtomicU64,
    pub(crate) lateness: [process::AtomicU64; LATENESS_CLASSES],
    /// Timeouts a shutdown ends without returning them (`CellRef::cancel_never_run`), added by
    /// whichever thread shuts down: apart from `cancelled`, which the worker's turn overwrites
    /// with its total (a task that drops the owner shuts down within a turn).
    pub(crate) cancelled_at_shutdown: process::AtomicU64,
    pub(crate) panicked: process::AtomicU64,
    pub(crate) refused: process::AtomicU64,
}

impl Counters {
    /// A caught panic of user code: counted in `stats().panicked` and logged. Any thread may
    /// count one (the worker, `stop()`), hence the add.
    #[cold]
    pub(crate) fn user_code_panicked(&self, what: &str) {
        // Relaxed: a statistic.
        self.panicked.fetch_add(1, Ordering::Relaxed);
        super::log_caught(
            log::Level::Warn,
            format_args!("{what} panicked; the timer goes on"),
        );
    }

    /// Counts a caught panic of user code unless it `returned` (as `catch_user_panic` and
    /// `drop_caught` report).
    #[inline]
    pub(crate) fn caught(&self, returned: bool, what: &str) {
        if !returned {
            self.user_code_panicked(what);
        }
    }

    /// Drops a task that will not run (cancelled, or left at a stop), counting a `Drop` panic.
    #[inline]
    pub(crate) fn drop_task<T>(&self, task: T) {
        if !super::drop_caught(task) {
            self.user_code_panicked("a task's Drop");
        }
    }
}

impl<J: Stored> Shared<J> {
    /// What `stats()` reports: the counters, the worker's wake-ups and its tick.
    pub(crate) fn stats(&self) -> TimerStats {
        let c = &self.counters;
        let load = |a: &process::AtomicU64| a.load(Ordering::Relaxed);
        TimerStats {
            wakeups: self.wakeups(),
            tick: self.worker_tick(),
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
}
