//! The statistics `TimerStats` reports of the timeouts' outcomes ([`Counters`]), shared by the
//! worker (which stores its running totals after each turn), the producers that refuse a
//! timeout, and whoever catches a panic of user code.
//!
//! Owns the counters' atomics. Touches only `sync`, and `shared`'s catching of a panic (a task
//! dropped unrun).

use crate::sync::{process, Ordering};

/// Lateness classes of fired timeouts, in ticks: under 1, 1 to 2, 2 to 4, ... 64 and more.
pub(crate) const LATENESS_CLASSES: usize = 8;

/// What `TimerStats` reports of the timeouts' outcomes. The worker is the only writer of its
/// running totals; refusing producers count `refused`. Statistics: every access is Relaxed,
/// nothing is ordered by them.
pub(crate) struct Counters {
    pub(crate) expired: process::AtomicU64,
    pub(crate) cancelled: process::AtomicU64,
    pub(crate) panicked: process::AtomicU64,
    pub(crate) refused: process::AtomicU64,
    /// The largest lateness of a fired timeout, in nanoseconds.
    pub(crate) late_max: process::AtomicU64,
    /// The longest inline task run, in nanoseconds.
    pub(crate) longest_run: process::AtomicU64,
    /// Inline task runs longer than a tick.
    pub(crate) slow_runs: process::AtomicU64,
    pub(crate) lateness: [process::AtomicU64; LATENESS_CLASSES],
}

impl Counters {
    /// User code panicked on the timer's side (a task, its `Drop`, a future's waker, the
    /// executor) and the panic was caught: counted in `stats().panicked`, logged. Any thread
    /// may count one (a worker, `stop()`), hence the add.
    #[cold]
    pub(crate) fn user_code_panicked(&self, what: &str) {
        // Relaxed: a statistic.
        self.panicked.fetch_add(1, Ordering::Relaxed);
        log::warn!("{what} panicked; the timer goes on");
    }

    /// Drops a task the timer lets go of without running it (cancelled, or never run at a
    /// stop), counting a panic of its `Drop` in `stats().panicked`.
    #[inline]
    pub(crate) fn drop_task<T>(&self, task: T) {
        if !super::drop_caught(task) {
            self.user_code_panicked("a task's Drop");
        }
    }

    pub(super) fn new() -> Counters {
        let zero = || process::AtomicU64::new(0);
        Counters {
            expired: zero(),
            cancelled: zero(),
            panicked: zero(),
            refused: zero(),
            late_max: zero(),
            longest_run: zero(),
            slow_runs: zero(),
            lateness: std::array::from_fn(|_| zero()),
        }
    }
}
