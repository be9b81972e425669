//! Where time comes from: the monotonic system clock, or a manual clock that tests and loom
//! models move by hand.
//!
//! All times inside the crate are nanoseconds since the timer's origin (`u64`, about 584 years).
//!
//! Owns the time base and the producers' fast clock (below). Touches only `sync`.
//!
//! # The producers' clock
//! `new_timeout` needs the time to compute a deadline, and reading the monotonic clock
//! (`clock_gettime` through the vDSO) is a large part of the call (`docs/performance.md`, "TSC
//! clock for producers"). Where the kernel itself keeps time with the TSC, producers read the TSC
//! instead (through `quanta`) and interpolate from an anchor: a pair (monotonic time, TSC) taken by
//! the same thread at most 1 ms earlier. The result is rounded *up* by a margin that covers the
//! TSC's calibration error, clock slewing and cross-core skew over such a short window, so it is
//! never earlier than the monotonic clock: a deadline computed from it is never early, and at most
//! about a microsecond later than one computed from `Instant::now()`. The worker, which decides
//! what has expired, always reads the monotonic clock. The TSC's calibration (quanta's, which can
//! take up to a few hundred milliseconds on a loaded machine) runs once per process on a thread of
//! its own, started by the first timer; until it is done, producers read the monotonic clock.
//! Quanta's ratio is then checked against one measured over 20 ms between two (monotonic, TSC)
//! pairs each read within 2 µs (so to 100 ppm): the larger of the two serves if they agree to
//! 1/4096, ours if they do not, so that a calibration thrown off by a preemption cannot make a
//! deadline early. A machine too busy to read such a pair, or a ratio 1/16 off ours, keeps
//! producers on the monotonic clock.
//!
//! The TSC is trusted because the kernel keeps time with it, and only while it does: a
//! worker's turn reads the kernel's clock source again once a second has passed since the last
//! read (process-wide, one read however many timers turn), and when the kernel has given the
//! TSC up (its watchdog marked it unstable, a VM moved to another host, the clock source was
//! changed by hand) producers read the monotonic clock from then on, for the rest of the
//! process. The set-up's thread ends with the calibration: an idle process wakes for nothing,
//! and a producer that reads the TSC after a pause has its worker turn within a tick. Until
//! the re-read, for up to a second after the kernel's switch, or a tick after a pause, or for
//! as long as a task holds up its worker's turns (and for as long as the kernel's own watchdog
//! takes to notice), producers still read the TSC: never-early then rests on the TSC's skew
//! between cores staying within the 512 ns margin, which is what the kernel checked before it
//! chose the TSC.

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
        // The fast clock's base is fixed (once per process) before any origin, so that an
        // origin is never before it; its calibration runs in the background.
        let base = fast::base();
        let origin = Instant::now();
        fast::prepare();
        Clock::System {
            origin,
            origin_from_base: duration_to_nanos(origin.saturating_duration_since(base)),
        }
    }

    pub(crate) fn manual() -> Clock {
        Clock::Manual(Arc::new(AtomicU64::new(0)))
    }

    /// Nanoseconds since the origin, never less than [`Clock::now`] would return at this
    /// moment (and at most a few microseconds more): what producers use for deadlines.
    #[inline]
    pub(crate) fn now_upper(&self) -> u64 {
        if let Clock::System {
            origin_from_base, ..
        } = self
        {
            // Until the fast clock is calibrated, or where it is unavailable, the monotonic clock.
            if let Some(fast) = fast::get() {
                // The origin is never before the fast clock's base (see `Clock::system`).
                return fast.since_base_upper().saturating_sub(*origin_from_base);
            }
        }
        self.now()
    }

    /// A limit on the fast clock's raw reading ([`Clock::raw`]): a reading at most the limit
    /// was taken no later than `upper` (nanoseconds since the origin). So a run of calls each
    /// checks that its time is before `upper` with one TSC read and a comparison, rather than
    /// a full [`now_upper`](Clock::now_upper). `None` on a manual clock, without the fast
    /// clock, or if `upper` is already past the limits this thread's anchor can give (call
    /// `now_upper` first: it renews the anchor).
    pub(crate) fn raw_limit(&self, upper: u64) -> Option<u64> {
        let Clock::System {
            origin_from_base, ..
        } = self
        else {
            return None;
        };
        fast::get()?.raw_limit(upper.checked_add(*origin_from_base)?)
    }

    /// The fast clock's raw reading (the TSC), to compare with a [`Clock::raw_limit`];
    /// `u64::MAX` without the fast clock, past every limit: a limit given before the kernel's
    /// TSC was given up (see "The producers' clock") no longer passes any reading.
    #[inline]
    pub(crate) fn raw(&self) -> u64 {
        fast::get().map_or(u64::MAX, fast::Fast::raw)
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        match self {
            Clock::System { origin, .. } => duration_to_nanos(origin.elapsed()),
            // Acquire: pairs with the Release in `advance_to`, so whoever reads a time also sees
            // what was done before the clock reached it.
            Clock::Manual(t) => t.load(Ordering::Acquire),
        }
    }

    /// `instant` in nanoseconds since the origin (0 before it). A manual clock has no
    /// `Instant` of its own: there, `instant` counts from the moment of the call, which is the
    /// manual clock's `now()`.
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

    /// The `Instant` of `nanos` since the origin (the inverse of [`Clock::nanos_at`]); the
    /// latest `Instant` the platform can represent if it cannot represent that one.
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

    /// [`Clock::instant_at`] in two parts that [`instant_after`] adds up, for a caller that
    /// may never need the sum: the origin and `nanos` on the system clock; on a manual clock,
    /// whose instants count from the call, the whole `Instant` and 0.
    #[inline]
    pub(crate) fn instant_parts(&self, nanos: u64) -> (Instant, u64) {
        match self {
            Clock::System { origin, .. } => (*origin, nanos),
            Clock::Manual(_) => (self.instant_at(nanos), 0),
        }
    }

    /// Reads the kernel's clock source again if a second has passed since the last read,
    /// process-wide (`now`: [`Clock::now`]'s reading), and gives up the producers' TSC if the
    /// kernel has (see "The producers' clock"). Each worker's turn calls it; nothing on a
    /// manual clock.
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

/// `base` and `nanos` after it; the latest `Instant` the platform can represent if it cannot
/// represent that one.
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
        }

        pub(super) fn base() -> Instant {
            Instant::now()
        }

        pub(super) fn prepare() {}

        pub(super) fn recheck(_now: u64) {}

        pub(super) fn get() -> Option<&'static Fast> {
            None
        }

        impl Fast {
            pub(super) fn raw(&self) -> u64 {
                match *self {}
            }

            pub(super) fn raw_limit(&self, _upper: u64) -> Option<u64> {
                match *self {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The producers' clock is an upper bound of the monotonic clock, and a tight one.
    #[test]
    fn a_raw_reading_within_the_limit_was_taken_before_the_upper_bound() {
        let clock = Clock::system();
        assert_eq!(Clock::manual().raw_limit(u64::MAX / 2), None);
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            let started = Instant::now();
            while !fast::settled() {
                assert!(started.elapsed() < std::time::Duration::from_secs(10));
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
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
        let clock = Clock::system();
        // Test the fast clock itself, where there is one: wait for its calibration.
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            let started = Instant::now();
            while !fast::settled() {
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(10),
                    "the fast clock's calibration never finished"
                );
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let source = std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .unwrap_or_default();
            assert_eq!(
                fast::get().is_some(),
                source.trim() == "tsc" && !fast::refused(),
                "the fast clock is used exactly where the kernel keeps time with the TSC, and \
                 its calibration passed the check"
            );
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
                            std::thread::sleep(std::time::Duration::from_millis(2));
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
        use std::time::Duration;
        assert_eq!(duration_to_nanos(Duration::ZERO), 0);
        assert_eq!(duration_to_nanos(Duration::new(3, 7)), 3_000_000_007);
        let max = Duration::from_nanos(u64::MAX);
        assert_eq!(
            duration_to_nanos(max - Duration::from_nanos(1)),
            u64::MAX - 1
        );
        assert_eq!(duration_to_nanos(max), u64::MAX);
        assert_eq!(duration_to_nanos(max + Duration::from_nanos(1)), u64::MAX);
        assert_eq!(
            duration_to_nanos(Duration::new(u64::MAX / 1_000_000_000 + 1, 0)),
            u64::MAX
        );
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
