//! Time since a timer's origin, in nanoseconds. `Instant::now` costs about as much as the rest
//! of a `new_timeout`: where quanta reads the CPU's time-stamp counter, the system's clock reads
//! that, offset by `Instant` at most every `ANCHOR_NANOS` (quanta drifts by parts per million;
//! `SLACK` rounds every reading up by more). Elsewhere `Instant`; under loom, a clock that stands
//! still; a manual clock moves by hand; on `Builder::build_on_tokio`, the runtime's.

use crate::sync::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How old the offset may grow before a reading takes a new one.
#[cfg(all(not(loom), target_os = "linux", target_arch = "x86_64"))]
const ANCHOR_NANOS: u64 = 10_000_000;
/// Added to every counter reading: more than the drift over `ANCHOR_NANOS` at 100 ppm.
#[cfg(all(not(loom), target_os = "linux", target_arch = "x86_64"))]
const SLACK: u64 = 2_000;

/// `d` in nanoseconds, saturating past 2^64 (584 years).
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A timer's clock.
pub(crate) enum Clock {
    System(SystemClock),
    Manual(AtomicU64),
    #[cfg(all(feature = "tokio", not(loom)))]
    Tokio(TokioClock),
}

/// A tokio runtime's clock (`tokio::time::Instant`), paused or not, since an origin.
#[cfg(all(feature = "tokio", not(loom)))]
pub(crate) struct TokioClock {
    runtime: tokio::runtime::Handle,
    origin: tokio::time::Instant,
}

#[cfg(all(feature = "tokio", not(loom)))]
impl TokioClock {
    /// The runtime's time: read in its context from any thread (a paused clock is the
    /// runtime's own, not the thread's).
    fn now(&self) -> u64 {
        let _runtime = self.runtime.enter();
        nanos(tokio::time::Instant::now().saturating_duration_since(self.origin))
    }
}

impl Clock {
    /// The system's clock, its origin now.
    pub(crate) fn system() -> Clock {
        Clock::System(SystemClock::new())
    }

    /// A clock that only `advance` moves, at 0.
    pub(crate) fn manual() -> Clock {
        Clock::Manual(AtomicU64::new(0))
    }

    /// `runtime`'s clock, its origin now.
    #[cfg(all(feature = "tokio", not(loom)))]
    pub(crate) fn tokio(runtime: tokio::runtime::Handle) -> Clock {
        let origin = {
            let _runtime = runtime.enter();
            tokio::time::Instant::now()
        };
        Clock::Tokio(TokioClock { runtime, origin })
    }

    /// Whether the timer's own thread runs its turns (else a `ManualDriver` or the runtime's
    /// `Drive` does, on the clock's time).
    pub(crate) fn has_thread(&self) -> bool {
        matches!(self, Clock::System(_))
    }

    /// Nanoseconds since the origin: never less than the time that has passed.
    pub(crate) fn now(&self) -> u64 {
        match self {
            Clock::System(clock) => clock.now(),
            // Acquire: pairs with the Release in `advance`.
            Clock::Manual(now) => now.load(Ordering::Acquire),
            #[cfg(all(feature = "tokio", not(loom)))]
            Clock::Tokio(clock) => clock.now(),
        }
    }

    /// `delay` after [`Clock::now`].
    pub(crate) fn after(&self, delay: Duration) -> u64 {
        self.now().saturating_add(nanos(delay))
    }

    /// Nanoseconds since the origin that have certainly passed: `now` less twice its largest error
    /// (its rounding up, the anchor's window and drift). What decides that a deadline has come (the
    /// worker's tick, a future's or a queue's deadline): never early.
    pub(crate) fn passed(&self) -> u64 {
        self.passed_by(self.now())
    }

    /// [`Clock::passed`] for a reading `now` just taken by [`Clock::now`].
    pub(crate) fn passed_by(&self, now: u64) -> u64 {
        #[cfg(all(not(loom), target_os = "linux", target_arch = "x86_64"))]
        if let Clock::System(_) = self {
            return now.saturating_sub(4 * SLACK);
        }
        now
    }

    /// Nanoseconds since the origin by `Instant`, where the others are bounds of it.
    pub(crate) fn exact(&self) -> u64 {
        match self {
            #[cfg(not(loom))]
            Clock::System(clock) => clock.exact(),
            _ => self.now(),
        }
    }

    /// A manual clock: moves to `to` (never back).
    pub(crate) fn advance(&self, to: u64) {
        if let Clock::Manual(now) = self {
            // Release: pairs with the Acquire in `now`.
            now.fetch_max(to, Ordering::Release);
        }
    }

    /// The `Instant` and the clock's reading that stand for the same time: the origin and 0, or
    /// for a manual clock, the real now and the clock's now.
    fn pair(&self) -> (Instant, u64) {
        match self {
            Clock::System(clock) => (clock.origin, 0),
            Clock::Manual(_) => (Instant::now(), self.now()),
            // A paused runtime's `Instant`s run on its clock: its origin in that timeline.
            #[cfg(all(feature = "tokio", not(loom)))]
            Clock::Tokio(clock) => (clock.origin.into_std(), 0),
        }
    }

    /// The `Instant` `nanos` after the clock's origin (as far as `Instant` goes).
    pub(crate) fn instant_at(&self, nanos: u64) -> Instant {
        let (base, at) = self.pair();
        if nanos < at {
            let back = Duration::from_nanos(at - nanos);
            return base.checked_sub(back).unwrap_or(base);
        }
        let far = || base + Duration::from_secs(u64::from(u32::MAX));
        base.checked_add(Duration::from_nanos(nanos - at))
            .unwrap_or_else(far)
    }

    /// The clock's reading at `at` (0 before the origin).
    pub(crate) fn nanos_at(&self, at: Instant) -> u64 {
        self.nanos_or_before(at).0
    }

    /// [`Clock::nanos_at`] without its clamp: `(nanos, 0)` for an instant it maps to `nanos`,
    /// `(0, before)` for one `before` nanoseconds ahead of what it maps to 0.
    pub(crate) fn nanos_or_before(&self, at: Instant) -> (u64, u64) {
        let (base, at_base) = self.pair();
        match at.checked_duration_since(base) {
            Some(after) => (at_base.saturating_add(nanos(after)), 0),
            None => {
                let back = nanos(base - at);
                (at_base.saturating_sub(back), back.saturating_sub(at_base))
            }
        }
    }

    /// Under loom: moves the system clock to `to` (never back).
    #[cfg(loom)]
    pub(crate) fn loom_advance(&self, to: u64) {
        if let Clock::System(clock) = self {
            clock.loom_now.fetch_max(to, Ordering::SeqCst);
        }
    }

    /// Whether only `advance` moves this clock.
    pub(crate) fn is_manual(&self) -> bool {
        matches!(self, Clock::Manual(..))
    }
}

/// The system's monotonic clock since an origin.
pub(crate) struct SystemClock {
    origin: Instant,
    #[cfg(all(not(loom), target_os = "linux", target_arch = "x86_64"))]
    counter: Counter,
    /// Under loom, the time: the model (`loom_hooks::advance_clock`) or the worker's bounded
    /// sleep moves it.
    #[cfg(loom)]
    loom_now: AtomicU64,
}

impl SystemClock {
    fn new() -> SystemClock {
        let origin = Instant::now();
        SystemClock {
            origin,
            #[cfg(all(not(loom), target_os = "linux", target_arch = "x86_64"))]
            counter: Counter::new(origin),
            #[cfg(loom)]
            loom_now: AtomicU64::new(0),
        }
    }

    /// By `Instant`: the reference.
    #[cfg(not(loom))]
    fn exact(&self) -> u64 {
        nanos(self.origin.elapsed())
    }

    #[cfg(all(not(loom), not(all(target_os = "linux", target_arch = "x86_64"))))]
    fn now(&self) -> u64 {
        self.exact()
    }

    /// Under loom time moves only when the model or the worker's sleep moves it, so that every
    /// model is deterministic.
    #[cfg(loom)]
    fn now(&self) -> u64 {
        // SeqCst: with the worker's store of its plan (`loom_hooks::advance_clock`).
        self.loom_now.load(Ordering::SeqCst)
    }

    #[cfg(all(not(loom), target_os = "linux", target_arch = "x86_64"))]
    fn now(&self) -> u64 {
        let c = &self.counter;
        let raw = c.clock.raw();
        // Relaxed: each is a self-contained value; a reading that pairs an offset with the
        // other's anchor is off by the drift between two anchors, under `SLACK`.
        let anchor = c.anchor_raw.load(Ordering::Relaxed);
        if raw.wrapping_sub(anchor) > c.anchor_raw_span {
            return c.reanchor(|| self.exact());
        }
        let scaled = c.clock.delta_as_nanos(0, raw);
        scaled
            .wrapping_sub(c.offset.load(Ordering::Relaxed))
            .saturating_add(SLACK)
    }
}

/// quanta's counter, and the offset that turns its scaled readings into time since the origin.
#[cfg(all(not(loom), target_os = "linux", target_arch = "x86_64"))]
struct Counter {
    clock: quanta::Clock,
    /// Scaled counter less time since the origin, at the last anchor (wrapping).
    offset: AtomicU64,
    /// The raw counter at the last anchor.
    anchor_raw: AtomicU64,
    /// `ANCHOR_NANOS` in raw counter units.
    anchor_raw_span: u64,
}

#[cfg(all(not(loom), target_os = "linux", target_arch = "x86_64"))]
impl Counter {
    fn new(origin: Instant) -> Counter {
        let clock = quanta::Clock::new();
        // Raw units per ANCHOR_NANOS, from quanta's scale (1 when it has no counter).
        let per_ns = clock.delta_as_nanos(0, 1 << 32).max(1);
        let anchor_raw_span = ((ANCHOR_NANOS as u128) << 32) / u128::from(per_ns);
        let counter = Counter {
            clock,
            offset: AtomicU64::new(0),
            anchor_raw: AtomicU64::new(0),
            anchor_raw_span: u64::try_from(anchor_raw_span).unwrap_or(u64::MAX),
        };
        counter.reanchor(|| nanos(origin.elapsed()));
        counter
    }

    /// Takes a new offset from `exact()` (time since the origin by `Instant`), read between two
    /// readings of the counter; the time now. A thread preempted between them would take an
    /// offset off by the preemption, and every reading till the next anchor with it: a pair
    /// more than a microsecond apart is read again (or, after a few tries, the anchor waits
    /// for the next reading).
    #[cold]
    fn reanchor(&self, exact: impl Fn() -> u64) -> u64 {
        let window = (self.anchor_raw_span / 10_000).max(1);
        let mut now = 0;
        for _ in 0..4 {
            let raw = self.clock.raw();
            now = exact();
            if self.clock.raw().wrapping_sub(raw) <= window {
                let scaled = self.clock.delta_as_nanos(0, raw);
                self.offset
                    .store(scaled.wrapping_sub(now), Ordering::Relaxed);
                self.anchor_raw.store(raw, Ordering::Relaxed);
                break;
            }
        }
        now
    }
}
