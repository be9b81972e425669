//! Where time comes from: the monotonic clock, or a manual clock that tests and loom models
//! move by hand; times are `u64` nanoseconds since the timer's origin. Owns the time base and
//! the producers' fast clock (`fast.rs`); imports only `sync`.
//!
//! # The producers' clock
//! Reading the monotonic clock is a large part of `new_timeout` (`docs/performance.md`, "TSC
//! clock for producers"), so where the kernel keeps time with the TSC, producers read the TSC
//! (through `quanta`), interpolate from a (monotonic, TSC) anchor at most 1 ms old, and round
//! *up* for calibration error, slewing and cross-core skew: never behind the monotonic clock,
//! which the worker reads to decide what has expired. Quanta's calibration runs once per
//! process, from the first reading on (building a timer starts no thread), on a thread of its
//! own, and is checked against our own ratio over 20 ms (the larger serves if they agree to
//! 1/4096, ours if not, neither if 1/16 apart), so that a preempted calibration cannot make a
//! deadline early. A worker's turn re-reads the kernel's clock source once a second has passed;
//! once the kernel gives the TSC up, so do producers, for good. Until then, never-early rests on
//! the cores' TSC skew staying within the 512 ns margin.

use crate::sync::{Arc, AtomicU64, Ordering};
use std::time::Instant;

#[derive(Clone, Debug)]
pub(crate) enum Clock {
    /// `Instant`-based; the origin is fixed when the timer is built.
    // Under loom every timer runs on a manual clock.
    #[cfg_attr(loom, allow(dead_code))]
    System {
        origin: Instant,
        /// The origin in the fast clock's time base (nanoseconds since its `base`).
        origin_from_base: u64,
    },
    /// Starts at 0 and moves only when told to.
    Manual(Arc<AtomicU64>),
}

impl Clock {
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn system() -> Clock {
        // The base (once per process) comes before any origin, so no origin precedes it.
        let base = fast::base();
        let origin = Instant::now();
        Clock::System {
            origin,
            origin_from_base: duration_to_nanos(origin.saturating_duration_since(base)),
        }
    }

    pub(crate) fn manual() -> Clock {
        Clock::Manual(Arc::new(AtomicU64::new(0)))
    }

    /// Nanoseconds since the origin, never behind [`Clock::now`] (at most a few microseconds
    /// ahead): what producers use for deadlines.
    #[inline]
    pub(crate) fn now_upper(&self) -> u64 {
        if let Clock::System {
            origin_from_base, ..
        } = self
        {
            if let Some(fast) = fast::get() {
                return fast.since_base_upper().saturating_sub(*origin_from_base);
            }
            // The first reading starts the calibration; until it ends, the monotonic clock.
            fast::prepare();
        }
        self.now()
    }

    /// A limit on [`Clock::raw`]: a reading up to it was taken by `upper`. `None` on a manual
    /// clock, without the fast clock, or past this thread's anchor (`now_upper` renews it).
    pub(crate) fn raw_limit(&self, upper: u64) -> Option<u64> {
        let Clock::System {
            origin_from_base, ..
        } = self
        else {
            return None;
        };
        fast::get()?.raw_limit(upper.checked_add(*origin_from_base)?)
    }

    /// The TSC, to compare with a [`Clock::raw_limit`]; `u64::MAX` without the fast clock, so
    /// that a limit given before the TSC was given up passes no reading.
    #[inline]
    pub(crate) fn raw(&self) -> u64 {
        fast::get().map_or(u64::MAX, fast::Fast::raw)
    }

    #[inline]
    pub(crate) fn now(&self) -> u64 {
        match self {
            Clock::System { origin, .. } => duration_to_nanos(origin.elapsed()),
            // Acquire, with `advance_to`'s Release: a reader sees what preceded the move.
            Clock::Manual(t) => t.load(Ordering::Acquire),
        }
    }

    /// `instant` in nanoseconds since the origin (0 before it); a manual clock's now is `now()`.
    pub(crate) fn nanos_at(&self, instant: Instant) -> u64 {
        match self {
            Clock::System { origin, .. } => {
                duration_to_nanos(instant.saturating_duration_since(*origin))
            }
            Clock::Manual(_) => self.now().saturating_add(duration_to_nanos(
                instant.saturating_duration_since(Instant::now()),
            )),
        }
    }

    /// [`Clock::nanos_at`] without its clamp: `(nanos, 0)` for an instant it maps to `nanos`,
    /// `(0, before)` for one `before` nanoseconds ahead of what it maps to 0.
    pub(crate) fn nanos_or_before(&self, instant: Instant) -> (u64, u64) {
        let (zero, at_zero) = match self {
            Clock::System { origin, .. } => (*origin, 0),
            Clock::Manual(_) => (Instant::now(), self.now()),
        };
        match instant.checked_duration_since(zero) {
            Some(after) => (at_zero.saturating_add(duration_to_nanos(after)), 0),
            None => {
                let back = duration_to_nanos(zero - instant);
                (at_zero.saturating_sub(back), back.saturating_sub(at_zero))
            }
        }
    }

    /// The `Instant` of `nanos` since the origin ([`Clock::nanos_at`] inverted), or a far one.
    pub(crate) fn instant_at(&self, nanos: u64) -> Instant {
        match self {
            Clock::System { origin, .. } => instant_after(*origin, nanos),
            Clock::Manual(_) => {
                let now = self.now();
                let base = Instant::now();
                if nanos < now {
                    let back = std::time::Duration::from_nanos(now - nanos);
                    return base.checked_sub(back).unwrap_or(base);
                }
                instant_after(base, nanos - now)
            }
        }
    }

    /// [`Clock::instant_at`] in two parts for [`instant_after`], for callers that rarely sum.
    #[inline]
    pub(crate) fn instant_parts(&self, nanos: u64) -> (Instant, u64) {
        match self {
            Clock::System { origin, .. } => (*origin, nanos),
            Clock::Manual(_) => (self.instant_at(nanos), 0),
        }
    }

    /// At each worker's turn, re-reads the clock source once a second has passed (see "The
    /// producers' clock"). `now`: [`Clock::now`].
    #[inline]
    pub(crate) fn recheck_source(&self, now: u64) {
        if let Clock::System {
            origin_from_base, ..
        } = self
        {
            fast::recheck(now.saturating_add(*origin_from_base));
        }
    }

    /// Moves a manual clock forward to `nanos` (never backwards). No effect on the system clock.
    pub(crate) fn advance_to(&self, nanos: u64) {
        if let Clock::Manual(t) = self {
            // Release: pairs with the Acquire in `now`.
            t.fetch_max(nanos, Ordering::Release);
        }
    }
}

/// `base` plus `nanos`, or a far `Instant` if the platform cannot represent that one.
pub(crate) fn instant_after(base: Instant, nanos: u64) -> Instant {
    let mut ahead = std::time::Duration::from_nanos(nanos);
    // Halve what does not fit: the result is only ever compared with clock readings.
    loop {
        if let Some(at) = base.checked_add(ahead) {
            return at;
        }
        ahead /= 2;
    }
}

/// Saturating conversion: a `Duration` too large for 64-bit nanoseconds becomes `u64::MAX`.
#[inline]
pub(crate) fn duration_to_nanos(d: std::time::Duration) -> u64 {
    // In 64 bits (`as_nanos` is 128-bit): this is on `new_timeout`'s path.
    d.as_secs()
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(u64::from(d.subsec_nanos())))
        .unwrap_or(u64::MAX)
}

cfg_tsc! {
    mod fast;
}

cfg_not_tsc! {
    /// No fast clock on this target: producers read the monotonic clock.
    mod fast {
        use std::time::Instant;

        pub(super) enum Fast {}

        impl Fast {
            pub(super) fn since_base_upper(&self) -> u64 {
                match *self {}
            }

            pub(super) fn raw(&self) -> u64 {
                match *self {}
            }

            pub(super) fn raw_limit(&self, _upper: u64) -> Option<u64> {
                match *self {}
            }
        }

        pub(super) fn base() -> Instant {
            Instant::now()
        }

        pub(super) fn prepare() {}

        pub(super) fn recheck(_now: u64) {}

        pub(super) fn get() -> Option<&'static Fast> {
            None
        }
    }
}

/// A process logger that panics on every record logged on a thread named [`LOUD`]: user code,
/// which the crate's reports must survive. The unit tests' one logger (a process has one).
#[cfg(test)]
pub(crate) mod loud_logger {
    /// The name of the threads on which the logger panics.
    pub(crate) const LOUD: &str = "loud-logger";

    struct PanicsOnReport;

    impl log::Log for PanicsOnReport {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, _: &log::Record<'_>) {
            if std::thread::current().name() == Some(LOUD) {
                panic!("the logger panics (on purpose)");
            }
        }
        fn flush(&self) {}
    }

    /// Makes it the process's logger (once; later calls change nothing).
    pub(crate) fn install() {
        static LOGGER: PanicsOnReport = PanicsOnReport;
        if log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(log::LevelFilter::Warn);
        }
    }

    /// Runs `f` on a new thread named [`LOUD`]; whether it returned.
    pub(crate) fn on_a_loud_thread(f: impl FnOnce() + Send + 'static) -> bool {
        install();
        let thread = std::thread::Builder::new().name(LOUD.to_owned());
        thread.spawn(f).expect("a thread").join().is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A system clock, its fast clock's calibration (which the first reading starts) ended.
    fn calibrated() -> Clock {
        let clock = Clock::system();
        clock.now_upper();
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !fast::settled() {
                assert!(Instant::now() < deadline, "calibration never finished");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        clock
    }

    #[test]
    fn a_raw_reading_within_the_limit_was_taken_before_the_upper_bound() {
        let clock = calibrated();
        assert_eq!(Clock::manual().raw_limit(u64::MAX / 2), None);
        if fast::get().is_none() {
            return; // no fast clock: no limits
        }
        for round in 0..200u64 {
            let upper = clock.now_upper() + 500 + round * 20;
            let Some(limit) = clock.raw_limit(upper) else {
                continue; // the anchor's window ends before `upper`
            };
            assert_eq!(clock.raw_limit(0), None, "an upper bound before the anchor");
            let started = clock.now();
            loop {
                // The monotonic clock read before the TSC is at or before the TSC's moment.
                let before = clock.now();
                if clock.raw() > limit {
                    break;
                }
                assert!(before <= upper, "{before} > {upper}: the limit is too far");
                assert!(before - started < 1_000_000, "the limit never passes");
            }
        }
    }

    #[test]
    fn now_upper_is_never_behind_the_monotonic_clock() {
        // Test the fast clock itself, where there is one.
        let clock = calibrated();
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            let path = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
            let tsc = std::fs::read_to_string(path).is_ok_and(|source| source.trim() == "tsc");
            // The fast clock is used exactly where the kernel keeps time with the TSC, and its
            // calibration passed the check.
            assert_eq!(fast::get().is_some(), tsc && !fast::refused());
        }
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let clock = clock.clone();
                std::thread::spawn(move || {
                    let mut worst_lead = 0;
                    for i in 0..300_000u32 {
                        let before = clock.now();
                        let upper = clock.now_upper();
                        let after = clock.now();
                        assert!(upper >= before, "{upper} < {before}: the fast clock lags");
                        worst_lead = worst_lead.max(upper.saturating_sub(after));
                        if i % 50_000 == 0 {
                            // Let anchors go stale.
                            std::thread::sleep(Duration::from_millis(2));
                        }
                    }
                    worst_lead
                })
            })
            .collect();
        for t in threads {
            let lead = t.join().unwrap();
            assert!(lead < 100_000, "the fast clock ran {lead} ns ahead");
        }
    }

    #[test]
    fn durations_convert_exactly_and_saturate() {
        assert_eq!(duration_to_nanos(Duration::ZERO), 0);
        assert_eq!(duration_to_nanos(Duration::new(3, 7)), 3_000_000_007);
        let (max, ns) = (Duration::from_nanos(u64::MAX), Duration::from_nanos(1));
        let past_max = Duration::new(u64::MAX / 1_000_000_000 + 1, 0);
        assert_eq!(duration_to_nanos(max - ns), u64::MAX - 1);
        assert_eq!(duration_to_nanos(max), u64::MAX);
        assert_eq!(duration_to_nanos(max + ns), u64::MAX);
        assert_eq!(duration_to_nanos(past_max), u64::MAX);
        assert_eq!(duration_to_nanos(Duration::MAX), u64::MAX);
    }

    #[test]
    fn manual_clock_moves_only_forward() {
        let clock = Clock::manual();
        clock.advance_to(10);
        clock.advance_to(5);
        assert_eq!(clock.now(), 10);
        assert_eq!(clock.now_upper(), 10);
    }
}
