//! Owns the statistics `TimerStats` reports ([`Counters`]), written by the worker (its totals
//! after each turn), refusing producers, and whoever catches a panic of user code. Touches only
//! `sync`, and `shared`'s catching of a panic.

use crate::sync::{process, Ordering};

/// Lateness classes of fired timeouts, in ticks: under 1, 1 to 2, 2 to 4, ... 64 and more.
pub(crate) const LATENESS_CLASSES: usize = 8;

/// Only the worker writes its running totals; refusing producers count `refused`, and a shutdown
/// `cancelled_at_shutdown`. Every access is Relaxed: nothing is ordered by them.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) expired: process::AtomicU64,
    pub(crate) cancelled: process::AtomicU64,
    /// Timeouts a shutdown ends without returning them (`CellRef::cancel_never_run`), added by
    /// whichever thread shuts down: apart from `cancelled`, which the worker's turn overwrites
    /// with its total (a task that drops the owner shuts down within a turn).
    pub(crate) cancelled_at_shutdown: process::AtomicU64,
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
