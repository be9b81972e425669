//! The producers' fast clock: the TSC through `quanta`, anchored to the monotonic clock, and
//! trusted while the kernel's clock source is the TSC (the parent module's "The producers'
//! clock" says why). Compiled where `cfg_tsc!` holds; imports the parent and `sync`.

use super::duration_to_nanos;
use crate::sync::process::{AtomicBool, AtomicU64, Mutex, Once, OnceLock, ThreadBuilder};
use crate::sync::{try_lock, Ordering};
use std::cell::Cell;
use std::time::Instant;

/// An anchor older than this is renewed from the monotonic clock.
const WINDOW_NS: u64 = 1_000_000;
/// Fixed part of the rounding up (cross-core TSC skew, the anchor's own read).
const MARGIN_NS: u64 = 512;
const CHECK_NS: u64 = 20_000_000;
/// The most a checking pair's TSC readings may be apart: 1 µs per end, 100 ppm over `CHECK_NS`.
const PAIR_NS: u64 = 2_000;
/// The least time between re-reads of the kernel's clock source (nanoseconds).
const RECHECK: u64 = 1_000_000_000;
const CLOCKSOURCE: &str = "/sys/devices/system/clocksource/clocksource0/current_clocksource";

pub(super) struct Fast {
    tsc: quanta::Clock,
    window_raw: u64,
    /// TSC units in `PAIR_NS`: an anchor's readings may be at most this far apart.
    pair_raw: u64,
    /// Nanoseconds per 2^32 TSC units, rounded up; `window_raw * ns_per_2_32` is below 2^53.
    ns_per_2_32: u64,
}

std::thread_local! {
    /// (nanoseconds since `base`, TSC) read together by this thread; (0, 0) before the first.
    static ANCHOR: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

static BASE: OnceLock<Instant> = OnceLock::new();
/// Set once the calibration has run: `Some` if the fast clock is usable.
static FAST: OnceLock<Option<Fast>> = OnceLock::new();
static PREPARE: Once = Once::new();
/// Set if the TSC was there but its calibration was not used (for the tests).
static REFUSED: AtomicBool = AtomicBool::new(false);
/// Cleared, for good, once the kernel no longer keeps time with the TSC (see [`recheck`]).
static TRUSTED: AtomicBool = AtomicBool::new(true);
/// The last re-read, in nanoseconds since [`base`]; `u64::MAX` once the TSC is given up.
static READ_AT: AtomicU64 = AtomicU64::new(0);
static SOURCE: Mutex<ClockSource> = Mutex::new(ClockSource { file: None });

/// The instant every fast reading counts from: the first call's.
pub(super) fn base() -> Instant {
    *BASE.get_or_init(Instant::now)
}

/// Starts the set-up once per process, on its own thread: nobody waits for the calibration.
/// Called at the first reading of a producers' clock, not when a timer is built: building a
/// timer starts no thread.
#[inline]
pub(super) fn prepare() {
    if !PREPARE.is_completed() {
        start_set_up();
    }
}

#[cold]
#[inline(never)]
fn start_set_up() {
    PREPARE.call_once(|| {
        let spawned = ThreadBuilder::new()
            .name("hashed-timer-wheel-tsc".into())
            .spawn(|| {
                // Step aside: a new thread starts on its parent's CPU, and this one spins.
                std::thread::sleep(std::time::Duration::from_millis(1));
                FAST.get_or_init(calibrate);
            });
        if spawned.is_err() {
            // No thread to spare: stay on the monotonic clock.
            let _ = FAST.set(None);
        }
    });
}

/// The fast clock, once calibrated, while the kernel keeps time with the TSC.
#[inline]
pub(super) fn get() -> Option<&'static Fast> {
    trusted(FAST.get(), &TRUSTED)
}

#[inline]
fn trusted<'a>(set_up: Option<&'a Option<Fast>>, trust: &AtomicBool) -> Option<&'a Fast> {
    let fast = set_up?.as_ref()?;
    // Relaxed: the flag guards no data (the `Fast` stays valid); a producer that has not yet
    // seen the withdrawal reads the TSC as it would have just before it.
    trust.load(Ordering::Relaxed).then_some(fast)
}

/// Re-reads the kernel's clock source if [`RECHECK`] has passed (`now`: nanoseconds since
/// [`base`]), and gives the TSC up for good if the kernel has. Called at each worker's turn.
#[inline]
pub(super) fn recheck(now: u64) {
    reread_if_due(&READ_AT, now, &TRUSTED, || {
        // Nothing to read before the set-up ends, without a fast clock, or while another turn
        // reads (that read stands for both).
        get()?;
        try_lock(&SOURCE).map(|mut source| source.names_tsc())
    });
}

#[inline]
fn reread_if_due(
    read_at: &AtomicU64,
    now: u64,
    trust: &AtomicBool,
    keeps_tsc: impl FnOnce() -> Option<bool>,
) {
    let last = read_at.load(Ordering::Relaxed);
    if now.saturating_sub(last) >= RECHECK {
        reread(read_at, last, now, trust, keeps_tsc);
    }
}

/// Of the turns that saw `last`, the one that moves `read_at` to `now` asks `keeps_tsc`; a
/// `false` withdraws `trust` for good (what made the kernel drop the TSC may still be there).
#[cold]
fn reread(
    read_at: &AtomicU64,
    last: u64,
    now: u64,
    trust: &AtomicBool,
    keeps_tsc: impl FnOnce() -> Option<bool>,
) {
    // Relaxed, here and below: see `trusted`.
    if read_at
        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    if keeps_tsc() == Some(false) {
        trust.store(false, Ordering::Relaxed);
        read_at.store(u64::MAX, Ordering::Relaxed);
        // The process's logger is user code: its panic must not unwind the worker's turn.
        let _ = std::panic::catch_unwind(|| {
            log::warn!(
                "the kernel no longer keeps time with the TSC: new timeouts read the \
                 monotonic clock from now on"
            );
        });
    }
}

#[cfg(test)]
pub(super) fn settled() -> bool {
    FAST.get().is_some()
}

/// Whether the set-up found a TSC clock source but refused its calibration.
#[cfg(test)]
pub(super) fn refused() -> bool {
    REFUSED.load(Ordering::Relaxed)
}

fn calibrate() -> Option<Fast> {
    // Only while the kernel keeps time with the TSC (so it is invariant and synchronised); its
    // clock source read without allocating: a process's memory may be being counted.
    if !ClockSource::default().names_tsc() {
        return None;
    }
    let tsc = quanta::Clock::new();
    // Checked: quanta's calibration stops at 200 ms whatever it found; a preemption skews it.
    let quanta_ns = quanta_ns_per_2_32(&tsc);
    let chosen = measured_ns_per_2_32(&tsc, quanta_ns)
        .and_then(|own_ns| chosen_ns_per_2_32(quanta_ns, own_ns));
    let Some(ns_per_2_32) = chosen else {
        REFUSED.store(true, Ordering::Relaxed);
        return None;
    };
    let window_raw = u64::try_from((u128::from(WINDOW_NS) << 32) / u128::from(ns_per_2_32)).ok()?;
    // The interpolation below stays in 64 bits (checked once here, not per read).
    window_raw.checked_mul(ns_per_2_32)?;
    Some(Fast {
        tsc,
        window_raw,
        pair_raw: pair_raw(ns_per_2_32)?,
        ns_per_2_32,
    })
}

/// `current_clocksource`, kept open: a read from offset 0 is cheaper than opening it again.
#[derive(Default)]
struct ClockSource {
    file: Option<std::fs::File>,
}

impl ClockSource {
    /// Whether the clock source is the TSC now; an unreadable file is not, and is reopened.
    fn names_tsc(&mut self) -> bool {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 64];
        let file = match self.file.take() {
            Some(file) => file,
            None => match std::fs::File::open(CLOCKSOURCE) {
                Ok(file) => file,
                Err(_) => return false,
            },
        };
        match file.read_at(&mut buf, 0) {
            Ok(read) => {
                self.file = Some(file);
                names_tsc(&buf[..read])
            }
            Err(_) => false,
        }
    }
}

fn names_tsc(source: &[u8]) -> bool {
    source.trim_ascii() == b"tsc"
}

/// Nanoseconds per 2^32 TSC units, from quanta's calibration.
fn quanta_ns_per_2_32(tsc: &quanta::Clock) -> u64 {
    tsc.delta_as_nanos(0, 1 << 32).max(1)
}

/// TSC units in `PAIR_NS`, by a roughly right ratio.
fn pair_raw(ns_per_2_32: u64) -> Option<u64> {
    u64::try_from((u128::from(PAIR_NS) << 32) / u128::from(ns_per_2_32)).ok()
}

/// Nanoseconds per 2^32 TSC units, measured over `CHECK_NS`; `None` without tight pairs.
fn measured_ns_per_2_32(tsc: &quanta::Clock, quanta_ns: u64) -> Option<u64> {
    let pair_raw = pair_raw(quanta_ns)?;
    let (t0, r0) = tight_pair(tsc, pair_raw)?;
    std::thread::sleep(std::time::Duration::from_nanos(CHECK_NS));
    let (t1, r1) = tight_pair(tsc, pair_raw)?;
    let ns = duration_to_nanos(t1.saturating_duration_since(t0));
    let raw = r1.checked_sub(r0).filter(|&raw| raw > 0)?;
    u64::try_from((u128::from(ns) << 32) / u128::from(raw)).ok()
}

/// A monotonic reading and the TSC at its moment: the midpoint of TSC readings before and
/// after, at most `pair_raw` apart (up to 100 tries).
fn tight_pair(tsc: &quanta::Clock, pair_raw: u64) -> Option<(Instant, u64)> {
    (0..100).find_map(|_| {
        let before = tsc.raw();
        let at = Instant::now();
        let after = tsc.raw();
        let apart = after.checked_sub(before)?;
        (apart <= pair_raw).then_some((at, before + apart / 2))
    })
}

/// The ratio to use, plus one for rounding: the larger if the two agree to 1/4096 (well inside
/// the 1/1024 each reading is rounded up by); else ours, whose error its pairs bound. `None`
/// beyond 1/16: our pairs, converted with quanta's ratio, no longer hold ours to 100 ppm.
fn chosen_ns_per_2_32(quanta_ns: u64, own_ns: u64) -> Option<u64> {
    let (low, high) = (quanta_ns.min(own_ns), quanta_ns.max(own_ns));
    let apart = high - low;
    if apart <= high >> 12 {
        Some(high + 1)
    } else if apart <= high >> 4 {
        Some(own_ns + 1)
    } else {
        None
    }
}

impl Fast {
    /// An upper bound of `base().elapsed()` in nanoseconds.
    #[inline]
    pub(super) fn since_base_upper(&self) -> u64 {
        let raw = self.tsc.raw();
        ANCHOR.with(|anchor| {
            let (ns, raw0) = anchor.get();
            let delta = raw.wrapping_sub(raw0);
            if raw0 != 0 && delta <= self.window_raw {
                // 64 bits suffice for a delta this short (see `ns_per_2_32`); quanta uses 128.
                let d = (delta * self.ns_per_2_32) >> 32;
                // Round up by 1/1024 (~1000 ppm of calibration error and slewing) and a margin.
                ns + d + (d >> 10) + MARGIN_NS
            } else {
                // The TSC was read first: interpolating from this anchor only overestimates, by
                // what passed between the readings. A preemption between them would carry into
                // every reading of the window: such a pair is not kept, the next read tries again.
                let ns = duration_to_nanos(base().elapsed());
                if self.tsc.raw().wrapping_sub(raw) <= self.pair_raw {
                    anchor.set((ns, raw));
                }
                ns
            }
        })
    }

    #[inline]
    pub(super) fn raw(&self) -> u64 {
        self.tsc.raw()
    }

    /// The last TSC reading this thread's anchor turns into at most `upper`: one up to it, on
    /// any core (the margin covers the skew), was taken by `upper`. `None` without an anchor,
    /// or if `upper` is before it.
    pub(super) fn raw_limit(&self, upper: u64) -> Option<u64> {
        let (ns, raw0) = ANCHOR.with(Cell::get);
        if raw0 == 0 {
            return None;
        }
        let budget = upper.checked_sub(ns.checked_add(MARGIN_NS)?)?;
        // Every `d <= most` has `d + (d >> 10) <= budget`.
        let most = budget - (budget >> 10);
        // Every `delta <= span` has `delta * ns_per_2_32 >> 32 <= most`, and stays in the window.
        let span = (u128::from(most) << 32) / u128::from(self.ns_per_2_32);
        let span = u64::try_from(span).unwrap_or(u64::MAX).min(self.window_raw);
        raw0.checked_add(span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_larger_ratio_is_used_if_both_agree_and_ours_if_not() {
        // Nanoseconds per 2^32 units of a 3 GHz TSC.
        let quanta = (1u64 << 32) / 3;
        assert_eq!(chosen_ns_per_2_32(quanta, quanta), Some(quanta + 1));
        // Within 1/4096, either way: the larger, rounded up.
        let near = quanta + (quanta >> 12) - 1;
        assert_eq!(chosen_ns_per_2_32(quanta, near), Some(near + 1));
        assert_eq!(chosen_ns_per_2_32(near, quanta), Some(near + 1));
        // 1 % apart, either way (a calibration cut short): ours.
        let off = quanta / 100 * 101;
        assert_eq!(chosen_ns_per_2_32(off, quanta), Some(quanta + 1));
        assert_eq!(chosen_ns_per_2_32(quanta, off), Some(off + 1));
        // 10 % apart: neither is trusted.
        let far = quanta / 10 * 11;
        assert_eq!(chosen_ns_per_2_32(far, quanta), None);
        assert_eq!(chosen_ns_per_2_32(quanta, far), None);
    }

    #[test]
    fn only_the_tsc_clock_source_is_the_tsc() {
        for source in ["tsc", "tsc\n", " tsc \n"] {
            assert!(names_tsc(source.as_bytes()), "{source:?}");
        }
        for source in [
            "",
            "\n",
            "hpet\n",
            "acpi_pm\n",
            "kvm-clock\n",
            "tsc-early\n",
            "ts",
        ] {
            assert!(!names_tsc(source.as_bytes()), "{source:?}");
        }
        if let Ok(source) = std::fs::read_to_string(CLOCKSOURCE) {
            let is_tsc = source.trim() == "tsc";
            assert_eq!(ClockSource::default().names_tsc(), is_tsc);
            let mut kept = ClockSource::default();
            for _ in 0..3 {
                assert_eq!(kept.names_tsc(), is_tsc);
            }
            assert!(kept.file.is_some(), "the file stays open between reads");
        }
    }

    #[test]
    fn trust_is_withdrawn_when_the_clock_source_is_no_longer_the_tsc() {
        let (tsc, _mock) = quanta::Clock::mock();
        let set_up = Some(Fast {
            tsc,
            window_raw: 1,
            pair_raw: 1,
            ns_per_2_32: 1,
        });
        let (trust, read_at) = (AtomicBool::new(true), AtomicU64::new(0));
        let mut reads = Vec::new();
        // A turn at `now`, the kernel's clock source being `source`.
        let mut turn = |now: u64, source: &'static str| {
            reread_if_due(&read_at, now, &trust, || {
                reads.push(now);
                Some(names_tsc(source.as_bytes()))
            });
            trusted(Some(&set_up), &trust).is_some()
        };
        const S: u64 = RECHECK;
        // (now, the clock source, trusted after the turn, why)
        let turns = [
            (
                S / 2,
                "hpet\n",
                true,
                "no read within a second of the start",
            ),
            (S, "tsc\n", true, "a read"),
            (
                S + S / 2,
                "hpet\n",
                true,
                "no read within a second of the last",
            ),
            (5 * S, "tsc\n", true, "a turn after a pause reads"),
            (
                6 * S,
                "hpet\n",
                false,
                "withdrawn at the first read of hpet",
            ),
            (9 * S, "tsc\n", false, "and for good"),
        ];
        for (now, source, trusted, why) in turns {
            assert_eq!(turn(now, source), trusted, "at {now}: {why}");
        }
        assert_eq!(reads, [S, 5 * S, 6 * S], "none after the withdrawal");
        assert_eq!(read_at.load(Ordering::Relaxed), u64::MAX);
        // Of two turns that saw the same last read, one reads; `None` withdraws nothing.
        let (trust, read_at) = (AtomicBool::new(true), AtomicU64::new(0));
        reread(&read_at, 0, S, &trust, || None);
        reread(&read_at, 0, S, &trust, || {
            unreachable!("the other turn reads")
        });
        assert!(trust.load(Ordering::Relaxed));
        // Nothing calibrated, or refused: nothing to trust either way.
        assert!(trusted(Some(&None), &AtomicBool::new(true)).is_none());
        assert!(trusted(None, &AtomicBool::new(true)).is_none());
    }

    /// The turn that finds the TSC given up reports it; a logger that panics on the report
    /// unwound the worker's turn, and so stopped the timer.
    #[test]
    fn a_logger_that_panics_on_the_tsc_report_does_not_unwind_the_turn() {
        use crate::clock::loud_logger;
        let withdrawn = std::sync::Arc::new(AtomicBool::new(true));
        let w = std::sync::Arc::clone(&withdrawn);
        let returned = loud_logger::on_a_loud_thread(move || {
            let read_at = AtomicU64::new(0);
            reread(&read_at, 0, 1_000_000_000, &w, || Some(false));
        });
        assert!(returned, "the turn went on");
        assert!(!withdrawn.load(Ordering::Relaxed), "given up all the same");
    }

    #[test]
    fn a_measured_ratio_matches_the_monotonic_clock() {
        if !ClockSource::default().names_tsc() {
            return; // no TSC clock source: nothing to measure
        }
        let tsc = quanta::Clock::new();
        let quanta_ns = quanta_ns_per_2_32(&tsc);
        // On a busy machine no tight pair may come: then there is nothing to compare.
        let Some(own) = measured_ns_per_2_32(&tsc, quanta_ns) else {
            return;
        };
        // It converts a span of TSC units to the monotonic clock's span, to 0.1 %.
        let pair_raw = pair_raw(quanta_ns).unwrap();
        let Some((t0, r0)) = tight_pair(&tsc, pair_raw) else {
            return;
        };
        std::thread::sleep(std::time::Duration::from_millis(30));
        let Some((t1, r1)) = tight_pair(&tsc, pair_raw) else {
            return;
        };
        let by_ratio = (u128::from(r1 - r0) * u128::from(own)) >> 32;
        let by_clock = t1.duration_since(t0).as_nanos();
        let off = by_ratio.abs_diff(by_clock);
        assert!(
            off * 1000 <= by_clock,
            "{by_ratio} ns by the measured ratio against {by_clock} by the clock"
        );
    }
}
