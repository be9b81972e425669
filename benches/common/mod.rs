//! What `netty_workloads` and `peers` share: the counting allocator, the RESULT line, medians,
//! the command line and the environment overrides.

// Each bench crate uses its own subset.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicIsize, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

/// `System`, counting live bytes and allocation calls while [`Counting::start`] is on.
///
/// Counting is off by default so that the timed workloads pay one relaxed load per allocation,
/// not a contended `fetch_add` (which would distort `multi_producer`). Bytes are counted as
/// requested (`Layout::size`), not as the allocator rounds them up; Netty's figure is the JVM
/// heap's, which includes object headers and padding.
pub(crate) struct CountingAlloc;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);
static CALLS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the counters
// never affect what is returned.
unsafe impl GlobalAlloc for CountingAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: statistics read after the workload has been joined or given time to settle.
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
            CALLS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `GlobalAlloc::alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `GlobalAlloc::dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
            CALLS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `GlobalAlloc::alloc_zeroed`, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
            CALLS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `GlobalAlloc::realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// A window in which allocations are counted. Bytes freed in the window that were allocated
/// before it count negative, which is what a "live bytes after minus before" figure wants.
pub(crate) struct Counting;

impl Counting {
    pub(crate) fn start() -> Counting {
        LIVE.store(0, Ordering::SeqCst);
        CALLS.store(0, Ordering::SeqCst);
        COUNTING.store(true, Ordering::SeqCst);
        Counting
    }

    /// Net bytes allocated since `start`.
    pub(crate) fn live_bytes(&self) -> isize {
        LIVE.load(Ordering::SeqCst)
    }

    /// Allocation calls (alloc, alloc_zeroed, realloc) since `start`.
    pub(crate) fn calls(&self) -> usize {
        CALLS.load(Ordering::SeqCst)
    }
}

impl Drop for Counting {
    fn drop(&mut self) {
        COUNTING.store(false, Ordering::SeqCst);
    }
}

/// Prints one figure in the shape the Netty harness prints (`benches/netty/NettyWorkloads.java`).
pub(crate) fn result(imp: &str, workload: &str, metric: &str, value: f64) {
    println!("RESULT impl={imp} workload={workload} metric={metric} value={value:.3}");
}

/// The upper median, as the Netty harness takes it (`sorted[length / 2]`).
pub(crate) fn median(xs: &[f64]) -> f64 {
    let mut c = xs.to_vec();
    c.sort_by(f64::total_cmp);
    c[c.len() / 2]
}

/// `name` from the environment, parsed, or `default` (Netty's `Integer.getInteger`).
pub(crate) fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// The workload named on the command line, or `"all"`. Flags (`--bench`, which cargo passes to
/// every `harness = false` target) are ignored.
pub(crate) fn selected_workload(known: &[&str]) -> String {
    let only = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_else(|| "all".to_owned());
    if only != "all" && !known.contains(&only.as_str()) {
        eprintln!("unknown workload {only:?}; expected all or one of {known:?}");
        std::process::exit(2);
    }
    only
}

pub(crate) fn nanos_per(d: Duration, n: usize) -> f64 {
    d.as_nanos() as f64 / n as f64
}

pub(crate) fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The delay of the `i`th timeout in the schedule workloads: 30 s + (i & 1023) ms, none fires.
#[inline]
pub(crate) fn far_delay(i: usize) -> Duration {
    Duration::from_millis(30_000 + (i & 1023) as u64)
}

/// Lateness percentiles in the shape of the Netty harness's `expire`: p50, p99, max, in ms.
/// Signed, as Netty's: a timer that fires early shows negative figures.
pub(crate) fn late_percentiles(late_ns: &mut [i64]) -> [f64; 3] {
    late_ns.sort_unstable();
    let n = late_ns.len();
    let ms = |ns: i64| ns as f64 / 1e6;
    [
        ms(late_ns[n / 2]),
        ms(late_ns[(n as f64 * 0.99) as usize]),
        ms(late_ns[n - 1]),
    ]
}

/// Per-timeout lateness, written by the tasks as they run, and a completion signal: the
/// `expire` workload's bookkeeping, shared by every implementation.
///
/// One process-wide instance, reset for each run, so that tasks refer to it as `&'static`: an
/// `Arc` cloned per timeout on the producer and dropped on the timer thread would bounce its
/// reference count between the two cores, a cost Netty's lambdas do not pay.
pub(crate) struct Lateness {
    /// Nanoseconds from `EPOCH` to this run's base.
    base_ns: AtomicU64,
    /// The same base on the raw monotonic clock ([`monotonic_ns`]), which the tasks read.
    base_mono: AtomicU64,
    /// Room for the largest run of the process; this run uses the first `n`.
    late_ns: Box<[AtomicI64]>,
    n: AtomicUsize,
    /// On its own cache line: written by the timer thread while the producer reads the rest.
    done: CacheLine<AtomicUsize>,
    waiter: Mutex<Option<Waiter>>,
}

#[repr(align(128))]
struct CacheLine<T>(T);

enum Waiter {
    Thread(thread::Thread),
    Task(Waker),
}

static EPOCH: OnceLock<Instant> = OnceLock::new();
static LATENESS: OnceLock<Lateness> = OnceLock::new();

fn epoch() -> Instant {
    *EPOCH.get_or_init(Instant::now)
}

/// The monotonic clock in nanoseconds, read as Netty's tasks read it (`System.nanoTime()` is
/// `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds): what each `expire` task records its
/// lateness with. (`Instant::now().elapsed()` and `as_nanos` cost 7-8 ns more a read here, in
/// every task: harness work Netty's tasks do not do.)
#[inline]
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec`; CLOCK_MONOTONIC is always available on the
    // Unix systems these benches run on.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Lateness {
    /// The bookkeeping for a run of `n` timeouts, reset; deadlines count from now. The previous
    /// run must have finished (every task ran). The first call fixes the room: no later run may
    /// be larger (`expire_rate` starts with its largest).
    pub(crate) fn start(n: usize) -> &'static Lateness {
        let run = LATENESS.get_or_init(|| Lateness {
            base_ns: AtomicU64::new(0),
            base_mono: AtomicU64::new(0),
            late_ns: (0..n).map(|_| AtomicI64::new(0)).collect(),
            n: AtomicUsize::new(n),
            done: CacheLine(AtomicUsize::new(0)),
            waiter: Mutex::new(None),
        });
        assert!(
            n <= run.late_ns.len(),
            "the first run of a process is its largest"
        );
        run.n.store(n, Ordering::SeqCst);
        for l in run.late_ns[..n].iter() {
            l.store(0, Ordering::Relaxed);
        }
        run.done.0.store(0, Ordering::SeqCst);
        *run.waiter.lock().unwrap() = None;
        let base = epoch().elapsed().as_nanos() as u64;
        run.base_mono.store(monotonic_ns(), Ordering::SeqCst);
        run.base_ns.store(base, Ordering::SeqCst);
        run
    }

    pub(crate) fn base(&self) -> Instant {
        epoch() + Duration::from_nanos(self.base_ns.load(Ordering::Relaxed))
    }

    /// Nanoseconds since `base`.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        // Relaxed: written before the run's timeouts are scheduled, which publishes it.
        monotonic_ns().wrapping_sub(self.base_mono.load(Ordering::Relaxed))
    }

    /// Timeout `i`, due at `due_ns` after `base`, has run now.
    ///
    /// `always`: part of the task that calls it, as Netty's JIT makes its own task's record.
    /// Left to rustc in this large binary, the boxed closure called it out of line (1.8 ns a
    /// timeout in `expire_rate`'s window, `perf`); `task_only_ns` is the same either way.
    #[inline(always)]
    pub(crate) fn record(&self, i: usize, due_ns: u64) {
        let late = self.now_ns() as i64 - due_ns as i64;
        // Relaxed: read after `done` reaches n (AcqRel there).
        self.late_ns[i].store(late, Ordering::Relaxed);
        // Relaxed: `n` is written before the run's timeouts are scheduled.
        if self.done.0.fetch_add(1, Ordering::AcqRel) + 1 == self.n.load(Ordering::Relaxed) {
            match self.waiter.lock().unwrap().take() {
                Some(Waiter::Thread(t)) => t.unpark(),
                Some(Waiter::Task(w)) => w.wake(),
                None => {}
            }
        }
    }

    fn all_done(&self) -> bool {
        self.done.0.load(Ordering::Acquire) == self.n.load(Ordering::Relaxed)
    }

    /// Every timeout's lateness in ns, in timeout order.
    fn late(&self) -> Vec<i64> {
        let n = self.n.load(Ordering::Relaxed);
        self.late_ns[..n]
            .iter()
            .map(|l| l.load(Ordering::Relaxed))
            .collect()
    }

    /// Blocks the calling thread until every timeout has run; returns when that was seen.
    pub(crate) fn wait(&self) -> Instant {
        while !self.all_done() {
            *self.waiter.lock().unwrap() = Some(Waiter::Thread(thread::current()));
            if self.all_done() {
                break;
            }
            thread::park_timeout(Duration::from_millis(10));
        }
        Instant::now()
    }

    /// As [`wait`](Lateness::wait), for a task on an async runtime.
    pub(crate) fn poll_done(&self, cx: &mut Context<'_>) -> Poll<Instant> {
        if !self.all_done() {
            *self.waiter.lock().unwrap() = Some(Waiter::Task(cx.waker().clone()));
            if !self.all_done() {
                return Poll::Pending;
            }
        }
        Poll::Ready(Instant::now())
    }

    /// [lag ms (last deadline at 200 ms to `end`), p50, p99, max lateness ms].
    pub(crate) fn summary(&self, end: Instant) -> [f64; 4] {
        let lag = end.saturating_duration_since(self.base() + Duration::from_millis(200));
        let mut late = self.late();
        debug_late(&late);
        let [p50, p99, max] = late_percentiles(&mut late);
        [millis(lag), p50, p99, max]
    }
}

impl Lateness {
    /// The p99 lateness of the run, in ms (`expire_rate`).
    pub(crate) fn late_p99_ms(&self) -> f64 {
        let mut late = self.late();
        debug_late(&late);
        late_percentiles(&mut late)[1]
    }
}

/// With `DEBUG_LATE` set, prints where in the window the timeouts more than 1.5 ms late were:
/// per percent of the window (one tick of `expire`), how many and the latest (0.1 ms).
fn debug_late(late: &[i64]) {
    if std::env::var_os("DEBUG_LATE").is_none() {
        return;
    }
    let mut hist = std::collections::BTreeMap::new();
    for (i, l) in late.iter().enumerate() {
        if *l > 1_500_000 {
            let (count, latest) = hist.entry(i * 100 / late.len()).or_insert((0, 0));
            *count += 1;
            *latest = (*latest).max(*l / 100_000);
        }
    }
    eprintln!("late>1.5ms by percent of the window (count, latest in 0.1 ms): {hist:?}");
}

/// The `expire_rate` workload's parameters: the rates (millions of timeouts a second, `RATES`,
/// default `5,10,15,20,25,30,40`) and the first deadline (`LEAD_MS` after the base, 2 500).
pub(crate) struct RateSweep {
    pub(crate) rates: Vec<f64>,
    pub(crate) lead_ns: u64,
    /// `INTERLEAVE` (1): how many ticks' worth of deadlines the schedule deals out in turn.
    pub(crate) interleave: u64,
}

/// The highest `expire_rate` p99 (ms) at which a rate counts as sustained: 2.5 ticks, as Netty's
/// harness (a timeout fires at the end of its tick, so about 2 ms p99 is on time at 1 ms).
pub(crate) const SUSTAINED_P99_MS: f64 = 2.5;

impl RateSweep {
    pub(crate) fn from_env() -> RateSweep {
        let rates = std::env::var("RATES")
            .unwrap_or_else(|_| "5,10,15,20,25,30,40".to_owned())
            .split(',')
            .map(|r| {
                r.trim()
                    .parse::<f64>()
                    .unwrap_or_else(|_| panic!("RATES: {r:?} is not a number"))
            })
            .collect();
        RateSweep {
            rates,
            lead_ns: env_usize("LEAD_MS", 2500) as u64 * 1_000_000,
            interleave: env_usize("INTERLEAVE", 1).max(1) as u64,
        }
    }

    /// Timeouts per run at `rate` (millions a second): 100 ms of them.
    pub(crate) fn n(rate: f64) -> usize {
        (rate * 1e6) as usize / 10
    }

    /// The deadline of timeout `i` of `n`: evenly over 100 ms from the lead, in ns after the base.
    /// With `INTERLEAVE` = k, the schedule deals the deadlines out as k hands, one after the
    /// other (timeout `i` at rank `(i % k) * ceil(n / k) + i / k`): two timeouts made one after
    /// the other fall 100 / k ms apart, as a service's timeouts of k different delays do.
    #[inline]
    pub(crate) fn due_ns(&self, i: usize, n: usize) -> u64 {
        let (i, n, k) = (i as u64, n as u64, self.interleave);
        let rank = (i % k) * n.div_ceil(k) + i / k;
        self.lead_ns + rank * 100_000_000 / n
    }

    /// Runs `run(n)` (which returns [p99 ms, ms after the first deadline when scheduling
    /// ended]) once to warm up and three times more at each rate, and prints Netty's lines: per
    /// rate the median p99 and the latest end of scheduling, then the capacity.
    pub(crate) fn report(&self, imp: &str, workload: &str, mut run: impl FnMut(usize) -> [f64; 2]) {
        // The bookkeeping's room is fixed by the first run: the largest.
        let largest = self.rates.iter().copied().fold(0.0, f64::max);
        Lateness::start(RateSweep::n(largest));
        let mut capacity = 0.0f64;
        for &rate in &self.rates {
            let n = RateSweep::n(rate);
            run(n);
            let runs: Vec<[f64; 2]> = (0..3).map(|_| run(n)).collect();
            if std::env::var_os("DEBUG_RATE").is_some() {
                eprintln!("{workload} at {rate} M/s, each run [p99 ms, scheduled ms]: {runs:?}");
            }
            let p99 = median(&runs.iter().map(|r| r[0]).collect::<Vec<_>>());
            let scheduled = runs.iter().map(|r| r[1]).fold(f64::NEG_INFINITY, f64::max);
            let label = if rate.fract() == 0.0 {
                format!("{rate:.0}")
            } else {
                format!("{rate}")
            };
            let name = format!("{workload}_{label}M");
            result(imp, &name, "late_p99_ms", p99);
            result(imp, &name, "scheduled_after_first_deadline_ms", scheduled);
            if p99 <= SUSTAINED_P99_MS {
                capacity = capacity.max(rate * 1e6);
            }
        }
        result(imp, workload, "capacity_per_s", capacity);
        let floor = task_only_ns(RateSweep::n(largest));
        result(imp, workload, "task_only_ns", floor);
        result(imp, workload, "task_only_rate_per_s", 1e9 / floor);
    }
}

/// The `expire` task's own cost, in ns a call: `Lateness::record` (a clock read, a store, a
/// locked add) called `n` times in a row on this thread, with no timer. A timer that runs its
/// tasks on one thread sustains at most `1e9 / task_only_ns` of them a second, whatever its own
/// cost: the ceiling for `capacity_per_s`.
fn task_only_ns(n: usize) -> f64 {
    let run = Lateness::start(n);
    let t0 = Instant::now();
    for i in 0..n {
        run.record(i, 0);
    }
    nanos_per(t0.elapsed(), n)
}

/// The deadline of timeout `i` of `n` in the `expire` workload: evenly over [100, 200) ms after
/// the base, in nanoseconds.
#[inline]
pub(crate) fn expire_due_ns(i: usize, n: usize) -> u64 {
    100_000_000 + (i as u64) * 100_000_000 / n as u64
}

/// Prints the four `expire` figures: the median of each over the runs.
pub(crate) fn report_expire(imp: &str, runs: &[[f64; 4]]) {
    report_expire_as(imp, "expire", runs)
}

/// [`report_expire`] under another workload name.
pub(crate) fn report_expire_as(imp: &str, workload: &str, runs: &[[f64; 4]]) {
    let col = |k: usize| median(&runs.iter().map(|x| x[k]).collect::<Vec<_>>());
    result(imp, workload, "lag_ms", col(0));
    result(imp, workload, "late_p50_ms", col(1));
    result(imp, workload, "late_p99_ms", col(2));
    result(imp, workload, "late_max_ms", col(3));
}

/// Process CPU time (user + system, all threads), from `getrusage(RUSAGE_SELF)`.
pub(crate) fn process_cpu_time() -> Duration {
    // SAFETY: `rusage` is plain old data, for which all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`; RUSAGE_SELF is a valid `who`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage failed");
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Waits until the process is quiet (under 5 ms of CPU in a 50 ms window, or 10 s passed):
/// for timers whose thread digests removals in the background, with no way to ask it whether
/// it is done, so that one run does not spill into the next.
pub(crate) fn settle() {
    let t0 = Instant::now();
    loop {
        let c0 = process_cpu_time();
        thread::sleep(Duration::from_millis(50));
        if process_cpu_time() - c0 < Duration::from_millis(5) || t0.elapsed().as_secs() >= 10 {
            return;
        }
    }
}

/// Nanoseconds since the process-wide epoch: what the `held` tasks compare against.
fn epoch_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// The `held` workload's delay for timeout `i` of `n`: deadlines evenly over [1 s, 1 h), computed
/// as the Netty harness computes them (`1 s + span / n * i`, the division in integers first).
#[inline]
pub(crate) fn held_delay(i: usize, n: usize) -> Duration {
    const SECOND: u64 = 1_000_000_000;
    const SPAN: u64 = 3600 * SECOND - SECOND;
    Duration::from_nanos(SECOND + SPAN / n as u64 * i as u64)
}

/// Every `held` timeout that has run since [`held_reset`]: (ns since the epoch when it ran, ns
/// late). Tasks name this static rather than capture a reference to it, so each carries only its
/// deadline. A `Mutex` is cheap enough: a few thousand timeouts a second at most (about 2 800 at
/// N = 10 000 000), all on one timer thread.
static HELD_RUNS: Mutex<Vec<(u64, i64)>> = Mutex::new(Vec::new());

/// Forgets the runs of any earlier `held` run in this process.
pub(crate) fn held_reset() {
    HELD_RUNS.lock().unwrap().clear();
}

/// The deadline, in ns since the epoch, of a `held` timeout scheduled now with `delay`: what its
/// task carries. Read just before the timer reads its own clock, which puts the deadline a few ns
/// early: noise against the 1 ms tick.
#[inline]
pub(crate) fn held_due_ns(delay: Duration) -> u64 {
    epoch_ns() + delay.as_nanos() as u64
}

/// A `held` timeout due at `due_ns` has run now.
#[inline]
pub(crate) fn held_record(due_ns: u64) {
    let now = epoch_ns();
    HELD_RUNS
        .lock()
        .unwrap()
        .push((now, now as i64 - due_ns as i64));
}

/// How many `held` timeouts have run since [`held_reset`].
pub(crate) fn held_runs() -> usize {
    HELD_RUNS.lock().unwrap().len()
}

/// The figures of one `held` run.
pub(crate) struct Held {
    /// Process CPU per second over the window.
    pub(crate) cpu_ms_per_s: f64,
    /// How late each timeout that ran inside the window was, in ns.
    pub(crate) late_ns: Vec<i64>,
    /// Stopping the timer with its pending timeouts still held.
    pub(crate) stop_ms: Option<f64>,
    /// Dropping what `stop` handed back, where that is a separate step.
    pub(crate) drop_ms: Option<f64>,
}

/// The measured window of a `held` run: process CPU and the runs of the timeouts between `open`
/// and `close`.
pub(crate) struct HeldWindow {
    cpu: Duration,
    start_ns: u64,
    seconds: u64,
}

impl HeldWindow {
    /// Opens a window the caller keeps open for `seconds` (the figure is per nominal second, as
    /// Netty's).
    pub(crate) fn open(seconds: u64) -> HeldWindow {
        let start_ns = epoch_ns();
        HeldWindow {
            cpu: process_cpu_time(),
            start_ns,
            seconds,
        }
    }

    pub(crate) fn close(self) -> Held {
        let cpu = process_cpu_time();
        let end_ns = epoch_ns();
        let late_ns = HELD_RUNS
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, _)| (self.start_ns..end_ns).contains(at))
            .map(|&(_, late)| late)
            .collect();
        Held {
            cpu_ms_per_s: millis(cpu - self.cpu) / self.seconds as f64,
            late_ns,
            stop_ms: None,
            drop_ms: None,
        }
    }
}

/// Prints the `held` figures. `late_p99_ms` is left out when no timeout ran in the window.
pub(crate) fn report_held(imp: &str, mut held: Held) {
    result(imp, "held", "cpu_ms_per_s", held.cpu_ms_per_s);
    if !held.late_ns.is_empty() {
        let [_, p99, _] = late_percentiles(&mut held.late_ns);
        result(imp, "held", "late_p99_ms", p99);
    }
    result(imp, "held", "fired", held.late_ns.len() as f64);
    if let Some(ms) = held.stop_ms {
        result(imp, "held", "stop_ms", ms);
    }
    if let Some(ms) = held.drop_ms {
        result(imp, "held", "drop_ms", ms);
    }
}
