//! The producers' fast clock: the TSC through `quanta`, anchored to the monotonic clock (see
//! the parent module, "The producers' clock"). Compiled where `cfg_tsc!` holds.

use super::duration_to_nanos;
use crate::sync::process::{Once, OnceLock, ThreadBuilder};
use std::cell::Cell;
use std::time::Instant;

/// An anchor older than this (in TSC units) is renewed from the monotonic clock.
const WINDOW_NS: u64 = 1_000_000;
/// Fixed part of the rounding up (cross-core TSC skew, the anchor's own read).
const MARGIN_NS: u64 = 512;

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

/// The fast clock, once calibrated, if the kernel keeps time with the TSC (so the TSC is
/// invariant and synchronised across CPUs: the kernel checks both before it uses it).
#[inline]
pub(super) fn get() -> Option<&'static Fast> {
    FAST.get()?.as_ref()
}

/// Whether the set-up has finished (with or without a usable fast clock).
#[cfg(test)]
pub(super) fn settled() -> bool {
    FAST.get().is_some()
}

fn calibrate() -> Option<Fast> {
    let source =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .ok()?;
    if source.trim() != "tsc" {
        return None;
    }
    let tsc = quanta::Clock::new();
    // TSC units per window, from quanta's calibration.
    let probe = 1u64 << 32;
    let probe_ns = tsc.delta_as_nanos(0, probe).max(1);
    let window_raw =
        u64::try_from(u128::from(probe) * u128::from(WINDOW_NS) / u128::from(probe_ns)).ok()?;
    let ns_per_2_32 = probe_ns + 1;
    // The interpolation below stays in 64 bits (checked once here, not per read).
    window_raw.checked_mul(ns_per_2_32)?;
    Some(Fast {
        tsc,
        window_raw,
        ns_per_2_32,
    })
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
