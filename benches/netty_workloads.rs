//! The workloads of the Netty harness (`schedule`, `schedule_capture`, `schedule_cancel`,
//! `multi_producer`, `expire`, `expire_rate`, `memory`, `memory_capture`, `idle`, `held`), run on
//! this crate with its parameters and output lines, so that one run of both gives ratios; and
//! the same on a typed timer (`schedule_capture_typed`, `expire_typed`, `expire_rate_typed`) and
//! through `new_timeout_detached` (`schedule_detached`).
//!
//! ```text
//! cargo bench --bench netty_workloads                 # every workload, each in its own process
//! cargo bench --bench netty_workloads -- expire       # one
//! N=100000 REPS=3 cargo bench --bench netty_workloads # a quick run
//! ```
//!
//! `schedule_capture` is `schedule` with a task that captures 16 bytes (an id and a shared
//! `&'static AtomicU64`), so that boxing it allocates, as real tasks do. `held` keeps N timeouts
//! due evenly over [1 s, 1 h) and measures process CPU over `IDLE_S` seconds from 2 s after
//! scheduling (`cpu_ms_per_s`, as Netty); it also prints figures Netty does not: `late_p99_ms`
//! and `fired` (the timeouts that ran inside that window), `stop_ms` (`stop()` with the rest still
//! pending) and `drop_ms` (dropping the timeouts `stop()` hands back). Its tasks carry their
//! 8-byte deadline where Netty's share one no-op, so they cost an allocation each, freed in
//! `drop_ms`.
//!
//! `expire_rate` is the worker's capacity: for each rate R in `RATES` (millions of timeouts a
//! second, default `5,10,15,20,25,30,40`), N = R x 100 ms timeouts, all scheduled before the first
//! deadline (`LEAD_MS` = 2 500 after the start), due evenly over 100 ms, the `expire` task; the
//! median p99 of 3 runs after a warm-up per rate, and the highest rate whose p99 is at most
//! 2.5 ms (`capacity_per_s`).
//!
//! Environment overrides (Netty's system properties): `N` (1 000 000), `REPS` (5), `THREADS`
//! (2, for `multi_producer`), `IDLE_S` (5, `idle` and `held`), `RATES` and `LEAD_MS`
//! (`expire_rate`). See `benches/README.md`.
//! Diagnostics on stderr: `DEBUG_EXPIRE=1` (`expire`: when the scheduling loop ended),
//! `DEBUG_LATE=1` (`expire`, `expire_rate`: where in the window the timeouts more than 1.5 ms late
//! were, by percent of the window), `DEBUG_RATE=1` (`expire_rate`: each run's figures).

mod common;

use common::{
    expire_due_ns, far_delay, held_delay, held_due_ns, held_record, held_reset, held_runs, median,
    millis, nanos_per, process_cpu_time, report_expire, report_expire_as, report_held, result,
    selected_workload, Counting, CountingAlloc, Held, HeldWindow, Lateness, RateSweep,
};
use hashed_timer_wheel::{HashedWheelTimer, Timeout, TypedTask};
use std::hint::black_box;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const IMPL: &str = "hashed-timer-wheel";
const WORKLOADS: &[&str] = &[
    "schedule",
    "schedule_capture",
    "schedule_cancel",
    "multi_producer",
    "expire",
    "schedule_capture_typed",
    "schedule_detached",
    "expire_typed",
    "expire_rate",
    "expire_rate_typed",
    "memory",
    "memory_capture",
    "idle",
    "held",
    "rss_burst",
];

/// The no-op task: a closure capturing nothing, so boxing it allocates nothing.
fn noop(_: &Timeout) {}

/// Resident memory, after glibc has given back what its arenas hold free.
fn rss_after_trim() -> f64 {
    // SAFETY: malloc_trim only releases free memory of glibc's arenas.
    unsafe { libc::malloc_trim(0) };
    rss()
}

fn rss() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: f64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096.0
}

/// RSS after bursts: a warm-up of request timeouts, then `bursts` bursts of `n` timeouts due
/// within 300 ms from two threads, drained, 2 s idle: RSS against the warm-up's.
fn rss_burst(n: usize, bursts: usize) {
    let timer = std::sync::Arc::new(timer());
    for i in 0..100_000 {
        timer
            .new_timeout(noop, common::far_delay(i))
            .unwrap()
            .cancel();
    }
    std::thread::sleep(Duration::from_millis(1500));
    let warm = rss_after_trim();
    let mut peak: f64 = 0.0;
    for _ in 0..bursts {
        let producers: Vec<_> = (0..2)
            .map(|_| {
                let timer = std::sync::Arc::clone(&timer);
                std::thread::spawn(move || {
                    for i in 0..n / 2 {
                        let delay = Duration::from_micros(100_000 + (i % 200_000) as u64);
                        timer.new_timeout_detached(noop, delay).unwrap();
                    }
                })
            })
            .collect();
        producers.into_iter().for_each(|p| p.join().unwrap());
        peak = peak.max(rss());
        while timer.pending_timeouts() > 1 {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let after = rss_after_trim();
    result(IMPL, "rss_burst", "warm_mib", warm / 1048576.0);
    result(IMPL, "rss_burst", "peak_mib", peak / 1048576.0);
    result(IMPL, "rss_burst", "after_mib", after / 1048576.0);
    result(IMPL, "rss_burst", "after_over_warm", after / warm);
}

struct Params {
    n: usize,
    reps: usize,
}

/// 1 ms tick, 512 slots: Netty's bench configuration.
fn wheel() -> HashedWheelTimer {
    HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .ticks_per_wheel(512)
        .thread_name("wheel")
        .build()
        .expect("valid configuration")
}

/// [`wheel`], started outside the timed loop by a timeout one hour away.
fn timer() -> HashedWheelTimer {
    let timer = wheel();
    timer
        .new_timeout(noop, Duration::from_secs(3600))
        .expect("a fresh timer accepts work");
    timer
}

/// `new_timeout` on one thread, 30 s+ delays so none fires. ns per call.
fn schedule(p: &Params) -> f64 {
    let timer = timer();
    let t0 = Instant::now();
    for i in 0..p.n {
        black_box(timer.new_timeout(noop, far_delay(i)).expect("accepted"));
    }
    let elapsed = t0.elapsed();
    drop(timer.stop());
    nanos_per(elapsed, p.n)
}

/// As `schedule`, through `new_timeout_detached`: no handle (Netty's `schedule` ignores the
/// one it gets). ns per call.
fn schedule_detached(p: &Params) -> f64 {
    let timer = timer();
    let t0 = Instant::now();
    for i in 0..p.n {
        timer
            .new_timeout_detached(noop, far_delay(i))
            .expect("accepted");
    }
    let elapsed = t0.elapsed();
    drop(timer.stop());
    nanos_per(elapsed, p.n)
}

/// Where the `schedule_capture` tasks add their id, as Netty's static `SINK`.
static SINK: AtomicU64 = AtomicU64::new(0);

/// The `schedule_capture` task: 16 bytes (an id and a shared reference), so that boxing it
/// allocates, as it does for tasks that carry data.
fn capture_task(id: u64, sink: &'static AtomicU64) -> impl FnOnce(&Timeout) + Send + 'static {
    move |_: &Timeout| {
        // Relaxed: nothing reads the sink (and no task runs before `stop`); the add only gives the
        // captured data a use, as Netty's `addAndGet` does.
        sink.fetch_add(id, Ordering::Relaxed);
    }
}

/// As `schedule`, with a task that captures data. ns per call.
fn schedule_capture(p: &Params) -> f64 {
    assert_eq!(std::mem::size_of_val(&capture_task(0, &SINK)), 16);
    let timer = timer();
    let sink: &'static AtomicU64 = &SINK;
    let t0 = Instant::now();
    for i in 0..p.n {
        let task = capture_task(i as u64, sink);
        black_box(timer.new_timeout(task, far_delay(i)).expect("accepted"));
    }
    let elapsed = t0.elapsed();
    drop(timer.stop());
    nanos_per(elapsed, p.n)
}

/// The typed timer's `schedule_capture` task: the same 16 bytes, stored in place.
struct Capture {
    id: u64,
    sink: &'static AtomicU64,
}

/// The typed timer's `expire` task: the same 24 bytes as the closure's.
struct Record {
    i: usize,
    due_ns: u64,
    run: &'static Lateness,
}

impl TypedTask for Capture {
    fn run(self, _: &Timeout<Self>) {
        // Relaxed: as `capture_task`.
        self.sink.fetch_add(self.id, Ordering::Relaxed);
    }
}

impl TypedTask for Record {
    fn run(self, _: &Timeout<Self>) {
        self.run.record(self.i, self.due_ns)
    }
}

/// [`timer`] for tasks of type `T`, started by `hour`, an hour away.
fn typed_timer<T: TypedTask>(hour: T) -> HashedWheelTimer<T> {
    let timer: HashedWheelTimer<T> = HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .ticks_per_wheel(512)
        .thread_name("wheel")
        .build_typed()
        .expect("valid configuration");
    timer
        .new_timeout(hour, Duration::from_secs(3600))
        .expect("a fresh timer accepts work");
    timer
}

/// `schedule_capture` on a typed timer: the task stored in place, no allocation.
fn schedule_capture_typed(p: &Params) -> f64 {
    assert_eq!(std::mem::size_of::<Capture>(), 16);
    let timer = typed_timer(Capture { id: 0, sink: &SINK });
    let t0 = Instant::now();
    for i in 0..p.n {
        let task = Capture {
            id: i as u64,
            sink: &SINK,
        };
        black_box(timer.new_timeout(task, far_delay(i)).expect("accepted"));
    }
    let elapsed = t0.elapsed();
    drop(timer.stop());
    nanos_per(elapsed, p.n)
}

/// `expire` on a typed timer.
fn expire_typed(p: &Params) -> [f64; 4] {
    let n = p.n;
    let run = Lateness::start(n);
    let timer = typed_timer(Record {
        i: 0,
        due_ns: u64::MAX,
        run,
    });
    for i in 0..n {
        let due_ns = expire_due_ns(i, n);
        let delay = Duration::from_nanos(due_ns.saturating_sub(run.now_ns()));
        timer
            .new_timeout(Record { i, due_ns, run }, delay)
            .expect("accepted");
    }
    let end = run.wait();
    drop(timer.stop());
    run.summary(end)
}

/// `new_timeout` then `cancel`. (ns per pair, ms until pending is back to 1).
fn schedule_cancel(p: &Params) -> (f64, f64) {
    let timer = timer();
    let t0 = Instant::now();
    for i in 0..p.n {
        let t = timer.new_timeout(noop, far_delay(i)).expect("accepted");
        black_box(t.cancel());
    }
    let t1 = Instant::now();
    while timer.pending_timeouts() > 1 {
        std::hint::spin_loop();
    }
    let t2 = Instant::now();
    drop(timer.stop());
    (nanos_per(t1 - t0, p.n), millis(t2 - t1))
}

/// `threads` producers doing `new_timeout` + `cancel` at once. ns per pair, all threads
/// together (wall time / pairs).
fn multi_producer(p: &Params, threads: usize) -> f64 {
    let timer = timer();
    let per = p.n / threads;
    let ready = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    let elapsed = thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                ready.fetch_add(1, Ordering::SeqCst);
                while !go.load(Ordering::Acquire) {
                    thread::yield_now();
                }
                for i in 0..per {
                    let t = timer.new_timeout(noop, far_delay(i)).expect("accepted");
                    black_box(t.cancel());
                }
            });
        }
        while ready.load(Ordering::SeqCst) < threads {
            thread::yield_now();
        }
        let t0 = Instant::now();
        go.store(true, Ordering::Release);
        // The scope joins the producers before returning.
        t0
    })
    .elapsed();
    drop(timer.stop());
    nanos_per(elapsed, per * threads)
}

/// N timeouts due evenly over [100, 200) ms; every task records how late it ran.
/// [lag ms (last deadline to last run), p50, p99, max lateness ms].
fn expire(p: &Params) -> [f64; 4] {
    let n = p.n;
    let timer = timer();
    let run = Lateness::start(n);
    for i in 0..n {
        let due_ns = expire_due_ns(i, n);
        let delay = Duration::from_nanos(due_ns.saturating_sub(run.now_ns()));
        timer
            .new_timeout(move |_: &Timeout| run.record(i, due_ns), delay)
            .expect("accepted");
    }
    if std::env::var_os("DEBUG_EXPIRE").is_some() {
        eprintln!("scheduled by {} ms", run.now_ns() / 1_000_000);
    }
    let end = run.wait();
    drop(timer.stop());
    run.summary(end)
}

/// One run of `expire_rate` at `n` timeouts (100 ms of them at the rate): all scheduled before
/// the first deadline, `sweep.lead_ns` after the base, deadlines evenly over 100 ms; the `expire`
/// task. [p99 late ms, ms after the first deadline when scheduling ended (negative: before)].
fn expire_rate(sweep: &RateSweep, n: usize) -> [f64; 2] {
    let timer = timer();
    let run = Lateness::start(n);
    for i in 0..n {
        let due_ns = sweep.due_ns(i, n);
        let delay = Duration::from_nanos(due_ns.saturating_sub(run.now_ns()));
        timer
            .new_timeout(move |_: &Timeout| run.record(i, due_ns), delay)
            .expect("accepted");
    }
    let scheduled = (run.now_ns() as f64 - sweep.lead_ns as f64) / 1e6;
    run.wait();
    drop(timer.stop());
    [run.late_p99_ms(), scheduled]
}

/// `expire_rate` on a typed timer.
fn expire_rate_typed(sweep: &RateSweep, n: usize) -> [f64; 2] {
    let run = Lateness::start(n);
    let timer = typed_timer(Record {
        i: 0,
        due_ns: u64::MAX,
        run,
    });
    for i in 0..n {
        let due_ns = sweep.due_ns(i, n);
        let delay = Duration::from_nanos(due_ns.saturating_sub(run.now_ns()));
        timer
            .new_timeout(Record { i, due_ns, run }, delay)
            .expect("accepted");
    }
    let scheduled = (run.now_ns() as f64 - sweep.lead_ns as f64) / 1e6;
    run.wait();
    drop(timer.stop());
    [run.late_p99_ms(), scheduled]
}

/// Bytes held per pending timeout (zero-sized task, handle dropped, after the worker has moved
/// them into buckets), and allocation calls per timeout.
fn memory(p: &Params) -> (f64, f64) {
    let timer = timer();
    thread::sleep(Duration::from_millis(200));
    let counting = Counting::start();
    for i in 0..p.n {
        drop(timer.new_timeout(noop, far_delay(i)).expect("accepted"));
    }
    // Let the worker move them into buckets (at most 100 000 per 1 ms tick).
    thread::sleep(Duration::from_millis(200));
    let bytes = counting.live_bytes() as f64 / p.n as f64;
    let calls = counting.calls() as f64 / p.n as f64;
    drop(counting);
    drop(timer.stop());
    (bytes, calls)
}

/// As [`memory`], with the `schedule_capture` task (an id and a reference, 16 bytes).
fn memory_capture(p: &Params) -> (f64, f64) {
    let timer = timer();
    thread::sleep(Duration::from_millis(200));
    let counting = Counting::start();
    for i in 0..p.n {
        let task = capture_task(i as u64, &SINK);
        drop(timer.new_timeout(task, far_delay(i)).expect("accepted"));
    }
    thread::sleep(Duration::from_millis(200));
    let bytes = counting.live_bytes() as f64 / p.n as f64;
    let calls = counting.calls() as f64 / p.n as f64;
    drop(counting);
    drop(timer.stop());
    (bytes, calls)
}

/// Allocation calls per `new_timeout` of `schedule_capture`, from one more run with the
/// allocator counting (outside the timed runs: counting costs a shared increment per call).
fn schedule_capture_allocs(p: &Params) -> f64 {
    let timer = timer();
    let counting = Counting::start();
    for i in 0..p.n {
        let task = capture_task(i as u64, &SINK);
        black_box(timer.new_timeout(task, far_delay(i)).expect("accepted"));
    }
    let calls = counting.calls() as f64 / p.n as f64;
    drop(counting);
    drop(timer.stop());
    calls
}

/// Process CPU ms per second while the timer holds one timeout an hour away.
fn idle(seconds: u64) -> f64 {
    let timer = timer();
    thread::sleep(Duration::from_millis(200));
    let c0 = process_cpu_time();
    thread::sleep(Duration::from_secs(seconds));
    let c1 = process_cpu_time();
    drop(timer.stop());
    millis(c1 - c0) / seconds as f64
}

/// N timeouts due evenly over [1 s, 1 h), none cancelled; 2 s after scheduling, process CPU over
/// `seconds` and the lateness of the timeouts that run meanwhile; then `stop()` with the rest
/// still pending, and dropping what it hands back. No hour-away timeout: Netty's `held` has none.
fn held(n: usize, seconds: u64) -> Held {
    let timer = wheel();
    held_reset();
    for i in 0..n {
        let delay = held_delay(i, n);
        let due_ns = held_due_ns(delay);
        timer
            .new_timeout(move |_: &Timeout| held_record(due_ns), delay)
            .expect("accepted");
    }
    thread::sleep(Duration::from_secs(2));
    let window = HeldWindow::open(seconds);
    thread::sleep(Duration::from_secs(seconds));
    let mut figures = window.close();
    let t0 = Instant::now();
    let pending = timer.stop().expect("stopped from outside the worker");
    let t1 = Instant::now();
    // The worker has been joined: every timeout has either run or been handed back.
    assert_eq!(held_runs() + pending.len(), n, "timeouts lost or run twice");
    drop(pending);
    let t2 = Instant::now();
    figures.stop_ms = Some(millis(t1 - t0));
    figures.drop_ms = Some(millis(t2 - t1));
    figures
}

/// Runs every workload, each in a process of its own: this binary again, given the workload's
/// name, with the same environment and output. In one process a workload measures differently
/// after another (`benches/README.md`), and `Lateness` keeps the room of its first run, which
/// `expire_rate`'s largest rate outgrows after `expire`; the published figures are taken one
/// workload a process (`benches/side_by_side.sh`).
fn run_each_in_own_process() -> ExitCode {
    let exe = std::env::current_exe().expect("the path of the running bench binary");
    let mut failed = Vec::new();
    for &w in WORKLOADS {
        let status = Command::new(&exe)
            .arg(w)
            .status()
            .unwrap_or_else(|e| panic!("cannot start {} {w}: {e}", exe.display()));
        if !status.success() {
            eprintln!("workload {w} failed ({status})");
            failed.push(w);
        }
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("failed workloads: {failed:?}");
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let only = selected_workload(WORKLOADS);
    if only == "all" {
        return run_each_in_own_process();
    }
    let p = Params {
        n: common::env_usize("N", 1_000_000),
        reps: common::env_usize("REPS", 5),
    };
    let runs = |w: &str| only == w;

    if runs("schedule") {
        schedule(&p); // warm-up
        let r: Vec<f64> = (0..p.reps).map(|_| schedule(&p)).collect();
        result(IMPL, "schedule", "ns_per_op", median(&r));
    }
    if runs("schedule_detached") {
        schedule_detached(&p);
        let r: Vec<f64> = (0..p.reps).map(|_| schedule_detached(&p)).collect();
        result(IMPL, "schedule_detached", "ns_per_op", median(&r));
    }
    if runs("schedule_capture") {
        schedule_capture(&p);
        let r: Vec<f64> = (0..p.reps).map(|_| schedule_capture(&p)).collect();
        result(IMPL, "schedule_capture", "ns_per_op", median(&r));
        let allocs = schedule_capture_allocs(&p);
        result(IMPL, "schedule_capture", "allocs_per_timeout", allocs);
    }
    if runs("schedule_cancel") {
        schedule_cancel(&p);
        let (ns, drain): (Vec<f64>, Vec<f64>) = (0..p.reps).map(|_| schedule_cancel(&p)).unzip();
        result(IMPL, "schedule_cancel", "ns_per_op", median(&ns));
        result(IMPL, "schedule_cancel", "drain_ms", median(&drain));
    }
    if runs("multi_producer") {
        let threads = common::env_usize("THREADS", 2);
        multi_producer(&p, threads);
        let r: Vec<f64> = (0..p.reps).map(|_| multi_producer(&p, threads)).collect();
        result(IMPL, "multi_producer", "ns_per_op", median(&r));
    }
    if runs("expire") {
        expire(&p);
        let runs: Vec<[f64; 4]> = (0..3).map(|_| expire(&p)).collect();
        report_expire(IMPL, &runs);
    }
    if runs("schedule_capture_typed") {
        schedule_capture_typed(&p);
        let r: Vec<f64> = (0..p.reps).map(|_| schedule_capture_typed(&p)).collect();
        result(IMPL, "schedule_capture_typed", "ns_per_op", median(&r));
    }
    if runs("expire_typed") {
        expire_typed(&p);
        let runs: Vec<[f64; 4]> = (0..3).map(|_| expire_typed(&p)).collect();
        report_expire_as(IMPL, "expire_typed", &runs);
    }
    if runs("expire_rate") {
        let sweep = RateSweep::from_env();
        sweep.report(IMPL, "expire_rate", |n| expire_rate(&sweep, n));
    }
    if runs("expire_rate_typed") {
        let sweep = RateSweep::from_env();
        sweep.report(IMPL, "expire_rate_typed", |n| expire_rate_typed(&sweep, n));
    }
    if runs("memory") {
        let (bytes, calls) = memory(&p);
        result(IMPL, "memory", "bytes_per_timeout", bytes);
        result(IMPL, "memory", "allocs_per_timeout", calls);
    }
    if runs("memory_capture") {
        let (bytes, calls) = memory_capture(&p);
        result(IMPL, "memory_capture", "bytes_per_timeout", bytes);
        result(IMPL, "memory_capture", "allocs_per_timeout", calls);
    }
    if runs("idle") {
        let seconds = common::env_usize("IDLE_S", 5) as u64;
        result(IMPL, "idle", "cpu_ms_per_s", idle(seconds));
    }
    if runs("held") {
        let seconds = common::env_usize("IDLE_S", 5) as u64;
        report_held(IMPL, held(p.n, seconds));
    }
    if runs("rss_burst") {
        rss_burst(p.n, common::env_usize("BURSTS", 3));
    }
    ExitCode::SUCCESS
}
