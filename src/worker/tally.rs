//! What the worker counts for `TimerStats`: running totals and lateness classes ([`Tally`]),
//! the timing of inline task runs ([`RunTiming`]). Owns those counts and their publication in
//! `Shared::counters` after each turn (no shared write per timeout); touches the `shared`
//! module's counters and clock.

use crate::shared::{Counters, Shared, Stored, LATENESS_CLASSES};
use crate::sync::Ordering;

/// The worker's running totals for `TimerStats`: per expiry a comparison or two, no shared write.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) expired: u64,
    pub(super) cancelled: u64,
    late_max: u64,
    /// Per lateness class from 1 on; class 0 (on time) is the rest of `expired`.
    lateness: [u64; LATENESS_CLASSES],
    /// The longest inline task run, in ns.
    longest_run: u64,
    /// Inline task runs longer than a tick.
    slow_runs: u64,
    /// Runs of at least `SLOW_WARNING_TICKS` since the last warning, and when that was.
    unreported: u64,
    warned_at: Option<u64>,
}

/// A run of user code (a task, a waker, or several timed together: see [`RunTiming`]) holding
/// the worker this many ticks or more is logged (Netty's most common misuse: a slow task delays
/// every timeout after it), at most once per `WARNING_INTERVAL_NS`.
const SLOW_WARNING_TICKS: u64 = 4;
const WARNING_INTERVAL_NS: u64 = 10_000_000_000;

impl Tally {
    /// A timeout fired `late` ns after its deadline (the caller counts `expired` per batch).
    #[inline]
    pub(super) fn fired(&mut self, late: u64, tick_nanos: u64) {
        self.late_max = self.late_max.max(late);
        // Class 0 (under a tick, the common path) counts nothing (`docs/performance.md`,
        // "On-time expiries count nothing"); class k holds [2^(k-1), 2^k) ticks late, the last
        // class the rest.
        if late >= tick_nanos {
            let class = (u64::BITS - (late / tick_nanos).leading_zeros()) as usize;
            self.lateness[class.min(LATENESS_CLASSES - 1)] += 1;
        }
    }

    pub(super) fn classes(&self) -> [u64; LATENESS_CLASSES] {
        let mut classes = self.lateness;
        classes[0] = self.expired - self.lateness[1..].iter().sum::<u64>();
        classes
    }

    /// An inline task run took `took` nanoseconds; the clock read `now` at its end.
    #[inline]
    fn ran(&mut self, took: u64, now: u64, tick_nanos: u64) {
        self.longest_run = self.longest_run.max(took);
        if took > tick_nanos {
            self.slow_runs += 1;
            if took >= tick_nanos.saturating_mul(SLOW_WARNING_TICKS) {
                self.slow_run_warning(took, now, tick_nanos);
            }
        }
    }

    #[cold]
    fn slow_run_warning(&mut self, took: u64, now: u64, tick_nanos: u64) {
        self.unreported += 1;
        if self
            .warned_at
            .is_some_and(|at| now.saturating_sub(at) < WARNING_INTERVAL_NS)
        {
            return;
        }
        crate::shared::log_caught(
            log::Level::Warn,
            format_args!(
                "user code (tasks or futures' wakers, timed together) held the timer's worker \
                 for {:?} ({} ticks; {} such runs since the last warning): every timeout due \
                 meanwhile fires late. Hand slow work to another thread, or configure an \
                 executor for the tasks",
                std::time::Duration::from_nanos(took),
                took / tick_nanos,
                self.unreported,
            ),
        );
        self.unreported = 0;
        self.warned_at = Some(now);
    }

    pub(super) fn publish(&self, counters: &Counters) {
        // Relaxed: statistics (see `Counters`).
        let r = Ordering::Relaxed;
        counters.expired.store(self.expired, r);
        counters.cancelled.store(self.cancelled, r);
        counters.late_max.store(self.late_max, r);
        counters.longest_run.store(self.longest_run, r);
        counters.slow_runs.store(self.slow_runs, r);
        for (total, count) in counters.lateness.iter().zip(self.classes()) {
            total.store(count, r);
        }
    }
}

/// Times the inline task runs (`TimerStats::longest_run`, `slow_runs`) with one clock read per
/// stretch of consecutive tasks: a stretch is one task after a long one, and doubles (up to
/// `MAX_STRETCH`) while stretches stay under `tick / 64`. A burst of short tasks costs a read
/// per 128; a slow task is timed with the other tasks of its stretch, and tasks of one stretch
/// that are each under a tick may together count as a slow run (as `TimerStats` says;
/// `docs/performance.md`, "Run timing in stretches").
pub(super) struct RunTiming {
    on: bool,
    /// When the open stretch started, if one is open.
    start: Option<u64>,
    /// Runs the open stretch has yet to take (0: the next run ends it and starts the next).
    left: u32,
    stretch: u32,
}

const MAX_STRETCH: u32 = 128;

impl RunTiming {
    pub(super) fn new(on: bool) -> RunTiming {
        RunTiming {
            on,
            start: None,
            // Off, a boundary comes once every 2^32 runs, and does nothing.
            left: if on { 0 } else { u32::MAX },
            stretch: 1,
        }
    }

    /// A task is about to run: one count, and a clock read at the edge of a stretch.
    #[inline]
    pub(super) fn before_run<J: Stored>(&mut self, shared: &Shared<J>, tally: &mut Tally) {
        if self.left == 0 {
            self.boundary(shared, tally);
        }
        self.left -= 1;
    }

    /// Ends the open stretch, if any, and starts the next: `stretch` runs from now.
    fn boundary<J: Stored>(&mut self, shared: &Shared<J>, tally: &mut Tally) {
        if !self.on {
            self.left = u32::MAX;
            return;
        }
        let now = shared.clock.now_upper();
        self.close(now, shared.tick_nanos, tally);
        self.start = Some(now);
        self.left = self.stretch;
    }

    /// Ends a stretch left open at the end of a bucket.
    pub(super) fn finish<J: Stored>(&mut self, shared: &Shared<J>, tally: &mut Tally) {
        if self.on && self.start.is_some() {
            self.close(shared.clock.now_upper(), shared.tick_nanos, tally);
        }
    }

    fn close(&mut self, end: u64, tick_nanos: u64, tally: &mut Tally) {
        let Some(start) = self.start.take() else {
            return;
        };
        let took = end.saturating_sub(start);
        tally.ran(took, end, tick_nanos);
        self.stretch = if took < tick_nanos / 64 {
            (self.stretch * 2).min(MAX_STRETCH)
        } else {
            1
        };
    }
}
