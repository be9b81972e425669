//! The counters a timer reports (`TimerStats`): the worker tallies its own in plain fields and
//! publishes them once a turn; producers count their refusals.

use crate::sync::{AtomicU64, Ordering};
use crate::TimerStats;
use std::time::Duration;

/// Lateness classes in ticks: under 1, 1 to 2, 2 to 4, ..., 64 and more.
const CLASSES: usize = 8;

/// The worker's running totals, its own.
#[derive(Default, Clone, Copy)]
pub(crate) struct Tally {
    pub(crate) expired: u64,
    pub(crate) cancelled: u64,
    pub(crate) panicked: u64,
    pub(crate) wakeups: u64,
    pub(crate) tick: u64,
    late_max: u64,
    lateness: [u64; CLASSES],
    longest_run: u64,
    slow_runs: u64,
}

impl Tally {
    /// A timeout fired `late` ns after its deadline, on a wheel of `tick_nanos` ticks.
    pub(crate) fn fired(&mut self, late: u64, tick_nanos: u64) {
        self.expired += 1;
        self.late_max = self.late_max.max(late);
        // Under a tick, 1 to 2 ticks, 2 to 4, ...: compares, not a division per timeout.
        let (mut class, mut bound) = (0, tick_nanos);
        while class < CLASSES - 1 && late >= bound {
            class += 1;
            bound = bound.saturating_mul(2);
        }
        self.lateness[class] += 1;
    }

    /// Tasks ran back to back for `nanos`: one run, for `longest_run` and `slow_runs`.
    pub(crate) fn ran(&mut self, nanos: u64, tick_nanos: u64) {
        self.longest_run = self.longest_run.max(nanos);
        self.slow_runs += u64::from(nanos > tick_nanos);
    }
}

/// What `stats()` reads: the worker's tally as of its last turn, and the producers' refusals.
#[derive(Default)]
pub(crate) struct Counters {
    /// The tally's fields in declaration order, lateness classes last.
    published: [AtomicU64; 8 + CLASSES],
    refused: AtomicU64,
}

impl Counters {
    pub(crate) fn refused(&self) {
        // Relaxed: a count; nothing is published with it.
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Publishes the worker's tally (only the worker calls this).
    pub(crate) fn publish(&self, t: &Tally) {
        let head = [
            t.expired,
            t.cancelled,
            t.panicked,
            t.wakeups,
            t.tick,
            t.late_max,
            t.longest_run,
            t.slow_runs,
        ];
        for (slot, value) in self.published.iter().zip(head.iter().chain(&t.lateness)) {
            // Relaxed: counters for monitoring; a reader may see one turn's and not the next.
            slot.store(*value, Ordering::Relaxed);
        }
    }

    pub(crate) fn read(&self) -> TimerStats {
        let v: Vec<u64> = self
            .published
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        let mut lateness = [0; CLASSES];
        lateness.copy_from_slice(&v[8..]);
        TimerStats {
            expired: v[0],
            cancelled: v[1],
            panicked: v[2],
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
