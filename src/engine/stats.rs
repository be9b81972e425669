//! The counters a timer reports (`TimerStats`): the worker's tally and the producers' refusals.

use crate::sync::{AtomicU64, Ordering};
use std::time::Duration;

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
    /// Turns the worker ran: on its thread, one as it starts and one each time it wakes; on a
    /// [`Drive`](crate::Drive), each turn. A [`ManualDriver`](crate::ManualDriver)'s count none.
    pub wakeups: u64,
    /// The worker's current tick: the next tick it will process (or the one it is processing).
    pub tick: u64,
    /// Timeouts that expired: their tasks ran (or were handed to the executor).
    pub expired: u64,
    /// Cancellations the worker has processed, and the timeouts `stop()` ends without returning
    /// them (a cancel the worker had not processed, a future's timeout; with the owner dropped
    /// inside a task, every timeout still pending).
    pub cancelled: u64,
    /// Timeouts refused ([`TimerError::Stopped`](crate::TimerError::Stopped) or
    /// [`TimerError::TooManyPending`](crate::TimerError::TooManyPending)): `new_timeout` and
    /// detached calls, sleeps, interval ticks, periodic runs.
    pub refused: u64,
    /// Panics of user code caught and logged: tasks, a task's `Drop` when dropped unrun, a future's
    /// waker, the executor. Each is counted once; the timer goes on. (The executor's own `Drop`
    /// is caught and logged only.)
    pub panicked: u64,
    /// The latest a timeout fired after its deadline (by the worker's clock at its tick).
    pub late_max: Duration,
    /// Expired timeouts by lateness in ticks: under 1, 1 to 2, 2 to 4, ..., 64 and more. Netty's
    /// contract is the first two; the rest is a worker that fell behind.
    pub lateness: [u64; 8],
    /// The longest a tick's tasks held the worker thread (executor tasks are not timed).
    pub longest_run: Duration,
    /// Runs (a tick's tasks, see `longest_run`) that held the worker thread longer than a tick.
    pub slow_runs: u64,
}

/// Lateness classes in ticks: under 1, 1 to 2, 2 to 4, ..., 64 and more.
pub(crate) const CLASSES: usize = 8;
/// The worker's tally as published: expired, cancelled, panicked, wakeups, tick, `late_max`,
/// `longest_run` and `slow_runs` (nanoseconds), then the lateness classes.
pub(crate) type Published = [u64; 8 + CLASSES];

/// What `stats()` reads: the worker's tally as of its last turn, and the producers' refusals.
#[derive(Default)]
pub(crate) struct Counters {
    /// The tally's fields in declaration order, lateness classes last.
    published: [AtomicU64; 8 + CLASSES],
    refused: AtomicU64,
    /// Panics of user code caught off the worker's turn (a waker a producer wakes).
    caught: AtomicU64,
}

impl Counters {
    pub(crate) fn refused(&self) {
        // Relaxed: a count; nothing is published with it.
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts and logs a panic of user code (`what`) caught off the worker's turn, if any.
    pub(crate) fn caught(&self, returned: bool, what: &str) {
        if !returned {
            // Relaxed: a count.
            self.caught.fetch_add(1, Ordering::Relaxed);
            super::task::log_panicked(what);
        }
    }

    /// Publishes the worker's tally (only the worker calls this).
    pub(crate) fn publish(&self, values: Published) {
        for (slot, value) in self.published.iter().zip(values) {
            // Relaxed: counters for monitoring; a reader may see one turn's and not the next.
            slot.store(value, Ordering::Relaxed);
        }
    }

    pub(crate) fn read(&self) -> TimerStats {
        let v: Published = std::array::from_fn(|i| self.published[i].load(Ordering::Relaxed));
        let lateness = std::array::from_fn(|i| v[8 + i]);
        TimerStats {
            expired: v[0],
            cancelled: v[1],
            panicked: v[2] + self.caught.load(Ordering::Relaxed),
            wakeups: v[3],
            tick: v[4],
            late_max: Duration::from_nanos(v[5]),
            longest_run: Duration::from_nanos(v[6]),
            slow_runs: v[7],
            lateness,
            refused: self.refused.load(Ordering::Relaxed),
        }
    }
}
