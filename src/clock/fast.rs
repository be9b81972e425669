//! The producers' fast clock: the TSC through `quanta`, anchored to the monotonic clock (see
//! the parent module, "The producers' clock"). Compiled where `cfg_tsc!` holds.
//!
//! The kernel's clock source decides whether the TSC is trusted: when the set-up starts, and
//! again in a worker's turn once [`RECHECK`] has passed since the last read, for the rest of
//! the process (the parent module says why).

use super::duration_to_nanos;
use crate::sync::process::{AtomicBool, AtomicU64, Mutex, Once, OnceLock, ThreadBuilder};
use crate::sync::{try_lock, Ordering};
use std::cell::Cell;
use std::time::Instant;

/// An anchor older than this (in TSC units) is renewed from the monotonic clock.
const WINDOW_NS: u64 = 1_000_000;
/// Fixed part of the rounding up (cross-core TSC skew, the anchor's own read).
const MARGIN_NS: u64 = 512;
/// The span over which quanta's calibration is checked against one of our own.
const CHECK_NS: u64 = 20_000_000;
/// The most a checking pair's two TSC readings may be apart, around its monotonic reading: each
/// end of the check is then known to 1 µs, so the check's own ratio to 100 ppm.
const PAIR_NS: u64 = 2_000;
/// How often, at most, the kernel's clock source is read again once the fast clock serves (in
/// nanoseconds): a TSC the kernel gives up is given up here within a second of the kernel, or
/// at the next turn of a worker idle since.
const RECHECK: u64 = 1_000_000_000;
/// Where the kernel names the clock source it keeps time with.
const CLOCKSOURCE: &str = "/sys/devices/system/clocksource/clocksource0/current_clocksource";

pub(super) struct Fast {
    tsc: quanta::Clock,
    window_raw: u64,
    /// Nanoseconds per 2^32 TSC units, rounded up: a delta of at most `window_raw` units
    /// is `delta * ns_per_2_32 >> 32` nanoseconds, in 64-bit arithmetic (the product is
    /// about `WINDOW_NS << 32`, below 2^53, whatever the TSC's frequency).
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
/// When the kernel's clock source was last read again, in nanoseconds since [`base`];
/// `u64::MAX` once the TSC is given up.
static READ_AT: AtomicU64 = AtomicU64::new(0);
/// The kernel's clock source, kept open between the re-reads.
static SOURCE: Mutex<ClockSource> = Mutex::new(ClockSource { file: None });

/// The instant every fast reading counts from: the first call's.
pub(super) fn base() -> Instant {
    *BASE.get_or_init(Instant::now)
}

/// Starts the fast clock's set-up, once per process, on a thread of its own: quanta's
/// calibration of the TSC against the monotonic clock can take a long while on a loaded
/// machine, and nobody waits for it (until it is done, the monotonic clock serves).
pub(super) fn prepare() {
    PREPARE.call_once(|| {
        let spawned = ThreadBuilder::new()
            .name("hashed-timer-wheel-tsc".into())
            .spawn(|| {
                // A new thread tends to start on its parent's CPU, and this one spins for
                // the whole calibration: step aside first, so that the thread building the
                // timer goes on rather than waiting for it.
                std::thread::sleep(std::time::Duration::from_millis(1));
                FAST.get_or_init(calibrate);
            });
        if spawned.is_err() {
            // No thread to spare: stay on the monotonic clock.
            let _ = FAST.set(None);
        }
    });
}

/// The fast clock, once calibrated, if the kernel keeps time with the TSC
/// ([`kernel_keeps_time_with_tsc`]) and has kept doing so at every re-read since.
#[inline]
pub(super) fn get() -> Option<&'static Fast> {
    trusted(FAST.get(), &TRUSTED)
}

/// The calibrated fast clock in `set_up`, unless `trust` has been withdrawn.
#[inline]
fn trusted<'a>(set_up: Option<&'a Option<Fast>>, trust: &AtomicBool) -> Option<&'a Fast> {
    let fast = set_up?.as_ref()?;
    // Relaxed: pairs with nothing. The flag guards no data (the `Fast` stays valid whatever
    // it says, and the monotonic clock read instead needs nothing from the re-read); a
    // producer that has not seen the withdrawal yet reads the TSC as it would have just
    // before it, and sees it within the time the store takes to reach its core.
    trust.load(Ordering::Relaxed).then_some(fast)
}

/// Reads the kernel's clock source again if [`RECHECK`] has passed since the last read (`now`:
/// nanoseconds since [`base`]), and gives the TSC up for good if the kernel no longer keeps
/// time with it. Called at each worker's turn: a process whose timers are idle reads nothing,
/// and a producer that reads the TSC after a pause wakes its worker within a tick.
#[inline]
pub(super) fn recheck(now: u64) {
    reread_if_due(&READ_AT, now, &TRUSTED, || {
        // Nothing to read before the set-up is done (it has just read the source), nor
        // without a fast clock; and a turn finding another one reading: that read stands
        // for both.
        get()?;
        try_lock(&SOURCE).map(|mut source| source.names_tsc())
    });
}

/// [`recheck`] on given state: the re-read, once `RECHECK` has passed since `read_at`.
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

/// The re-read: of the turns that saw `last` in `read_at`, the one that moves it to `now` asks
/// `keeps_tsc` (`None`: nothing to read), and on a `false` withdraws `trust` and parks
/// `read_at` at `u64::MAX`, so that no turn reads again.
/// A kernel that goes back to the TSC later gets no second chance: what made it drop the TSC
/// (drift between cores, a host that differs) may still be there.
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
        log::warn!(
            "the kernel no longer keeps time with the TSC: new timeouts read the \
             monotonic clock from now on"
        );
    }
}

/// Whether the set-up has finished (with or without a usable fast clock).
#[cfg(test)]
pub(super) fn settled() -> bool {
    FAST.get().is_some()
}

/// Whether the set-up found a TSC clock source but did not use it: the machine was too busy to
/// read a tight pair, or quanta's ratio and ours were more than 1/16 apart.
#[cfg(test)]
pub(super) fn refused() -> bool {
    REFUSED.load(Ordering::Relaxed)
}

fn calibrate() -> Option<Fast> {
    if !kernel_keeps_time_with_tsc() {
        return None;
    }
    let tsc = quanta::Clock::new();
    // Quanta's ratio, checked against our own measurement: quanta's calibration ends after at
    // most 200 ms whatever it found, and a thread preempted between the two readings of its
    // last pair throws the ratio off.
    let quanta_ns = quanta_ns_per_2_32(&tsc);
    let chosen = measured_ns_per_2_32(&tsc, quanta_ns)
        .and_then(|own_ns| chosen_ns_per_2_32(quanta_ns, own_ns));
    let Some(ns_per_2_32) = chosen else {
        REFUSED.store(true, Ordering::Relaxed);
        return None;
    };
    // TSC units per window.
    let window_raw = u64::try_from((u128::from(WINDOW_NS) << 32) / u128::from(ns_per_2_32)).ok()?;
    // The interpolation below stays in 64 bits (checked once here, not per read).
    window_raw.checked_mul(ns_per_2_32)?;
    Some(Fast {
        tsc,
        window_raw,
        ns_per_2_32,
    })
}

/// Whether the kernel keeps time with the TSC (so the TSC is invariant and synchronised across
/// CPUs: the kernel checks both before it uses it). Read into a buffer on the stack: the
/// re-reads allocate nothing, in a process whose memory may be being counted.
fn kernel_keeps_time_with_tsc() -> bool {
    ClockSource::default().names_tsc()
}

/// The kernel's `current_clocksource`, kept open between the re-reads: a read from offset 0 of
/// an open sysfs file renders it again, and costs a tenth of opening it each time.
#[derive(Default)]
struct ClockSource {
    file: Option<std::fs::File>,
}

impl ClockSource {
    /// Whether the clock source is the TSC now; a file that cannot be read is opened again
    /// next time, and counts as not the TSC.
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

/// Whether the contents of the kernel's `current_clocksource` name the TSC.
fn names_tsc(source: &[u8]) -> bool {
    source.trim_ascii() == b"tsc"
}

/// Nanoseconds per 2^32 TSC units, from quanta's calibration.
fn quanta_ns_per_2_32(tsc: &quanta::Clock) -> u64 {
    tsc.delta_as_nanos(0, 1 << 32).max(1)
}

/// TSC units in `PAIR_NS`, by a ratio (nanoseconds per 2^32 units) that only has to be roughly
/// right.
fn pair_raw(ns_per_2_32: u64) -> Option<u64> {
    u64::try_from((u128::from(PAIR_NS) << 32) / u128::from(ns_per_2_32)).ok()
}

/// Nanoseconds per 2^32 TSC units, measured over `CHECK_NS` between two (monotonic, TSC)
/// pairs each read within `PAIR_NS` (converted with quanta's ratio). `None` if the machine is
/// too busy to read a tight pair.
fn measured_ns_per_2_32(tsc: &quanta::Clock, quanta_ns: u64) -> Option<u64> {
    let pair_raw = pair_raw(quanta_ns)?;
    let (t0, r0) = tight_pair(tsc, pair_raw)?;
    std::thread::sleep(std::time::Duration::from_nanos(CHECK_NS));
    let (t1, r1) = tight_pair(tsc, pair_raw)?;
    let ns = duration_to_nanos(t1.saturating_duration_since(t0));
    let raw = r1.checked_sub(r0).filter(|&raw| raw > 0)?;
    u64::try_from((u128::from(ns) << 32) / u128::from(raw)).ok()
}

/// A monotonic reading and the TSC at its moment: the midpoint of a TSC reading before it
/// and one after, taken at most `pair_raw` apart (in up to 100 tries).
fn tight_pair(tsc: &quanta::Clock, pair_raw: u64) -> Option<(Instant, u64)> {
    (0..100).find_map(|_| {
        let before = tsc.raw();
        let at = Instant::now();
        let after = tsc.raw();
        let apart = after.checked_sub(before)?;
        (apart <= pair_raw).then_some((at, before + apart / 2))
    })
}

/// The ratio the fast clock uses (nanoseconds per 2^32 TSC units), plus one for the rounding:
/// the larger of quanta's and ours if they agree to 1/4096 (quanta's error, our 100 ppm and
/// room, well inside the 1/1024 each reading is rounded up by); ours alone if they do not, as
/// its error is bounded by its pairs' and quanta's is not. `None` (the monotonic clock) if they
/// differ by more than 1/16: our pairs' bound, converted with quanta's ratio, would no longer
/// hold ours to 100 ppm.
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
    /// An upper bound of `base().elapsed()` in nanoseconds (see the module docs); every
    /// anchor counts from `base()`.
    #[inline]
    pub(super) fn since_base_upper(&self) -> u64 {
        let raw = self.tsc.raw();
        ANCHOR.with(|anchor| {
            let (ns, raw0) = anchor.get();
            let delta = raw.wrapping_sub(raw0);
            if raw0 != 0 && delta <= self.window_raw {
                // quanta's own conversion multiplies in 128 bits by a variable shift; a
                // delta this short needs only 64 (see `ns_per_2_32`).
                let d = (delta * self.ns_per_2_32) >> 32;
                // Round up by 1/1024 of the interval (covers up to ~1000 ppm of calibration
                // error and slewing) plus a fixed margin.
                ns + d + (d >> 10) + MARGIN_NS
            } else {
                // The TSC was read first, so this anchor's time is at or after the TSC
                // reading: interpolating from it can only overestimate.
                let ns = duration_to_nanos(base().elapsed());
                anchor.set((ns, raw));
                ns
            }
        })
    }

    /// A TSC reading, for [`raw_limit`](Fast::raw_limit).
    #[inline]
    pub(super) fn raw(&self) -> u64 {
        self.tsc.raw()
    }

    /// The last TSC reading that [`since_base_upper`](Fast::since_base_upper) on this thread's
    /// anchor turns into at most `upper`: a reading up to it, on any thread, was taken at or
    /// before `upper` on the monotonic clock (the margin covers the skew between cores, as for
    /// a thread that moves to another core within its anchor's window). `None` without an
    /// anchor, or if `upper` is before it.
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
        // Quanta's ratio 1 % off ours, either way (a calibration cut short on a loaded
        // machine): ours.
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
        // The file as the kernel has it, read without an allocation, says what a plain read
        // says.
        if let Ok(source) = std::fs::read_to_string(CLOCKSOURCE) {
            assert_eq!(kernel_keeps_time_with_tsc(), source.trim() == "tsc");
            // Kept open, the file reads the same again and again (each read from offset 0).
            let mut kept = ClockSource::default();
            for _ in 0..3 {
                assert_eq!(kept.names_tsc(), source.trim() == "tsc");
            }
            assert!(kept.file.is_some(), "the file stays open between reads");
        }
    }

    /// The clock source changes from `tsc` after the set-up (a VM migrated, the kernel's
    /// watchdog marked the TSC unstable): the first re-read that sees it withdraws the trust,
    /// the calibrated clock no longer serves, and nothing is read again.
    #[test]
    fn trust_is_withdrawn_when_the_clock_source_is_no_longer_the_tsc() {
        let (tsc, _mock) = quanta::Clock::mock();
        let set_up = Some(Fast {
            tsc,
            window_raw: 1,
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
        assert!(
            turn(S / 2, "hpet\n"),
            "no read within a second of the start"
        );
        assert!(turn(S, "tsc\n"));
        assert!(
            turn(S + S / 2, "hpet\n"),
            "no read within a second of the last"
        );
        assert!(turn(5 * S, "tsc\n"), "a turn after a pause reads");
        assert!(
            !turn(6 * S, "hpet\n"),
            "withdrawn at the first read of hpet"
        );
        assert!(!turn(9 * S, "tsc\n"), "and for good");
        assert_eq!(
            reads,
            [S, 5 * S, 6 * S],
            "nothing read after the withdrawal"
        );
        assert_eq!(read_at.load(Ordering::Relaxed), u64::MAX);
        // Two turns that saw the same last read: one reads. A read under way elsewhere (`None`)
        // withdraws nothing.
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

    #[test]
    fn a_measured_ratio_matches_the_monotonic_clock() {
        if !kernel_keeps_time_with_tsc() {
            return; // no TSC clock source: nothing to measure
        }
        let tsc = quanta::Clock::new();
        let quanta_ns = quanta_ns_per_2_32(&tsc);
        // On a busy machine no tight pair may come: then there is nothing to compare.
        let Some(own) = measured_ns_per_2_32(&tsc, quanta_ns) else {
            return;
        };
        // Converting a span of TSC units with it gives the monotonic clock's span, to 0.1 %
        // (each end read within 2 µs: 0.007 % of the span each).
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
