//! The new core (`hashed_timer_wheel::next`) on the Netty harness's workloads, with its
//! parameters (1 ms tick, 512 buckets, started by a timeout an hour away): `impl=next`, to set
//! beside `benches/netty/run` and `netty_workloads` in one sitting.
//!
//! `cargo bench --bench next_core [workload]`; workloads: schedule, schedule_capture,
//! schedule_cancel, multi_producer, expire, expire_rate, memory, memory_capture, idle, held. Environment as
//! `netty_workloads`: N, REPS, THREADS, IDLE_S.

mod common;

use common::*;
use hashed_timer_wheel::next::{Boxed, Job, Timeout, Timer};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const IMPL: &str = "next";
const WORKLOADS: &[&str] = &[
    "schedule",
    "schedule_capture",
    "schedule_cancel",
    "multi_producer",
    "expire",
    "expire_rate",
    "expire_rate_typed",
    "memory",
    "memory_capture",
    "idle",
    "held",
    "rss_burst",
];

fn started<J: Job>(anchor: J) -> Timer<J> {
    let timer = Timer::new(Duration::from_millis(1), 512);
    timer
        .new_timeout(anchor, Duration::from_secs(3600))
        .unwrap();
    timer
}

fn noop() -> Boxed {
    Boxed::new(|_| {})
}

static SINK: AtomicU64 = AtomicU64::new(0);

/// The 16-byte task of `schedule_capture`, typed: stored in place.
struct Capture(u64, &'static AtomicU64);

impl Job for Capture {
    fn run(self, _: &Timeout<Capture>) {
        self.1.fetch_add(self.0, Ordering::Relaxed);
    }
}

fn per_call<J: Job>(
    n: usize,
    reps: usize,
    anchor: impl Fn() -> J,
    f: impl Fn(&Timer<J>, usize),
) -> f64 {
    let mut runs = Vec::new();
    for _ in 0..=reps {
        let timer = started(anchor());
        let t0 = Instant::now();
        for i in 0..n {
            f(&timer, i);
        }
        runs.push(nanos_per(t0.elapsed(), n));
        drop(timer);
    }
    median(&runs[1..])
}

fn multi_producer(n: usize, reps: usize, threads: usize) -> f64 {
    let mut runs = Vec::new();
    for _ in 0..=reps {
        let timer = Arc::new(started(noop()));
        let barrier = Arc::new(Barrier::new(threads + 1));
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (timer, barrier) = (Arc::clone(&timer), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    for i in 0..n / threads {
                        timer.new_timeout(noop(), far_delay(i)).unwrap().cancel();
                    }
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        workers.into_iter().for_each(|w| w.join().unwrap());
        runs.push(nanos_per(t0.elapsed(), n));
    }
    median(&runs[1..])
}

/// The `expire` task, typed: records its lateness in the shared harness (`Lateness`).
struct Record {
    i: usize,
    due_ns: u64,
    run: &'static Lateness,
}

impl Job for Record {
    fn run(self, _: &Timeout<Record>) {
        self.run.record(self.i, self.due_ns);
    }
}

/// `expire` (boxed, or typed with `Record`): N timeouts due over [100, 200) ms.
fn expire(n: usize, typed: bool) -> [f64; 4] {
    let run = Lateness::start(n);
    if typed {
        let timer = started(Record {
            i: 0,
            due_ns: u64::MAX,
            run,
        });
        for i in 0..n {
            let due_ns = expire_due_ns(i, n);
            let delay = Duration::from_nanos(due_ns.saturating_sub(run.now_ns()));
            timer.new_timeout(Record { i, due_ns, run }, delay).unwrap();
        }
        let end = run.wait();
        drop(timer.stop());
        return run.summary(end);
    }
    let timer = started(noop());
    for i in 0..n {
        let due_ns = expire_due_ns(i, n);
        let delay = Duration::from_nanos(due_ns.saturating_sub(run.now_ns()));
        timer
            .new_timeout_fn(move |_| run.record(i, due_ns), delay)
            .unwrap();
    }
    if std::env::var_os("DEBUG_EXPIRE").is_some() {
        eprintln!("scheduled by {} ms", run.now_ns() / 1_000_000);
    }
    let end = run.wait();
    drop(timer.stop());
    run.summary(end)
}

/// `expire_rate` on a typed timer (`Record` stored in place).
fn expire_rate_typed(sweep: &RateSweep, n: usize) -> [f64; 2] {
    let run = Lateness::start(n);
    let timer = started(Record {
        i: 0,
        due_ns: u64::MAX,
        run,
    });
    for i in 0..n {
        let due_ns = sweep.due_ns(i, n);
        let delay = Duration::from_nanos(due_ns.saturating_sub(run.now_ns()));
        timer.new_timeout(Record { i, due_ns, run }, delay).unwrap();
    }
    let scheduled = (run.now_ns() as f64 - sweep.lead_ns as f64) / 1e6;
    run.wait();
    drop(timer.stop());
    [run.late_p99_ms(), scheduled]
}

/// `expire_rate` (boxed): R x 100 ms of timeouts scheduled ahead, due over 100 ms.
fn expire_rate(sweep: &RateSweep, n: usize) -> [f64; 2] {
    let run = Lateness::start(n);
    let timer = started(noop());
    for i in 0..n {
        let due_ns = sweep.due_ns(i, n);
        let delay = Duration::from_nanos(due_ns.saturating_sub(run.now_ns()));
        timer
            .new_timeout_fn(move |_| run.record(i, due_ns), delay)
            .unwrap();
    }
    let scheduled = (run.now_ns() as f64 - sweep.lead_ns as f64) / 1e6;
    run.wait();
    drop(timer.stop());
    [run.late_p99_ms(), scheduled]
}

fn memory<J: Job>(workload: &str, n: usize, task: impl Fn(usize) -> J, anchor: J) {
    let timer = started(anchor);
    std::thread::sleep(Duration::from_millis(100));
    let counting = Counting::start();
    for i in 0..n {
        timer.new_timeout_detached(task(i), far_delay(i)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let (bytes, calls) = (counting.live_bytes(), counting.calls());
    drop(counting);
    result(IMPL, workload, "bytes_per_timeout", bytes as f64 / n as f64);
    result(
        IMPL,
        workload,
        "allocs_per_timeout",
        calls as f64 / n as f64,
    );
}

fn idle(seconds: u64) {
    let _timer = started(noop());
    std::thread::sleep(Duration::from_millis(200));
    let c0 = process_cpu_time();
    std::thread::sleep(Duration::from_secs(seconds));
    result(
        IMPL,
        "idle",
        "cpu_ms_per_s",
        millis(process_cpu_time() - c0) / seconds as f64,
    );
}

fn held(n: usize, seconds: u64) {
    held_reset();
    let timer = started(noop());
    for i in 0..n {
        let delay = held_delay(i, n);
        let due = held_due_ns(delay);
        timer
            .new_timeout_fn_detached(move |_| held_record(due), delay)
            .unwrap();
    }
    std::thread::sleep(Duration::from_secs(2));
    let window = HeldWindow::open(seconds);
    std::thread::sleep(Duration::from_secs(seconds));
    let mut figures = window.close();
    let t0 = Instant::now();
    let returned = timer.stop().unwrap();
    figures.stop_ms = Some(millis(t0.elapsed()));
    black_box(returned.len());
    report_held(IMPL, figures);
}

/// Resident set size in bytes, after glibc has given back what it can (`malloc_trim`).
fn rss_after_trim() -> f64 {
    // SAFETY: malloc_trim only releases free memory of glibc's arenas.
    unsafe { libc::malloc_trim(0) };
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: f64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096.0
}

/// RSS after bursts: a warm-up of request timeouts, then `BURSTS` bursts of N timeouts due
/// within 300 ms from two threads, drained, 2 s idle: RSS against the warm-up's.
fn rss_burst(n: usize, bursts: usize) {
    let timer = Arc::new(started(noop()));
    for i in 0..100_000 {
        timer.new_timeout(noop(), far_delay(i)).unwrap().cancel();
    }
    std::thread::sleep(Duration::from_millis(1500));
    let warm = rss_after_trim();
    let mut peak: f64 = 0.0;
    for _ in 0..bursts {
        let producers: Vec<_> = (0..2)
            .map(|_| {
                let timer = Arc::clone(&timer);
                std::thread::spawn(move || {
                    for i in 0..n / 2 {
                        let delay = Duration::from_micros(100_000 + (i % 200_000) as u64);
                        timer.new_timeout_detached(noop(), delay).unwrap();
                    }
                })
            })
            .collect();
        producers.into_iter().for_each(|p| p.join().unwrap());
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: f64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        peak = peak.max(pages * 4096.0);
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

fn main() {
    let only = selected_workload(WORKLOADS);
    let run = |w: &str| only == "all" || only == w;
    let n = env_usize("N", 1_000_000);
    let reps = env_usize("REPS", 5);
    if run("schedule") {
        let ns = per_call(n, reps, noop, |t, i| {
            drop(black_box(t.new_timeout(noop(), far_delay(i))))
        });
        result(IMPL, "schedule", "ns_per_op", ns);
    }
    if run("schedule_capture") {
        let boxed = per_call(n, reps, noop, |t, i| {
            let task = Boxed::new(move |_| {
                SINK.fetch_add(i as u64, Ordering::Relaxed);
            });
            drop(black_box(t.new_timeout(task, far_delay(i))));
        });
        result(IMPL, "schedule_capture", "ns_per_op", boxed);
        let anchor = || Capture(0, &SINK);
        let typed = per_call(n, reps, anchor, |t, i| {
            drop(black_box(
                t.new_timeout(Capture(i as u64, &SINK), far_delay(i)),
            ));
        });
        result(IMPL, "schedule_capture_typed", "ns_per_op", typed);
    }
    if run("schedule_cancel") {
        let ns = per_call(n, reps, noop, |t, i| {
            t.new_timeout(noop(), far_delay(i)).unwrap().cancel();
        });
        result(IMPL, "schedule_cancel", "ns_per_op", ns);
    }
    if run("multi_producer") {
        let threads = env_usize("THREADS", 2);
        result(
            IMPL,
            "multi_producer",
            "ns_per_op",
            multi_producer(n, reps, threads),
        );
    }
    if run("expire") {
        let runs: Vec<_> = (0..reps.min(3)).map(|_| expire(n, false)).collect();
        report_expire(IMPL, &runs);
        let runs: Vec<_> = (0..reps.min(3)).map(|_| expire(n, true)).collect();
        report_expire_as(IMPL, "expire_typed", &runs);
    }
    if run("expire_rate") {
        let sweep = RateSweep::from_env();
        sweep.report(IMPL, "expire_rate", |n| expire_rate(&sweep, n));
    }
    if run("expire_rate_typed") {
        let sweep = RateSweep::from_env();
        sweep.report(IMPL, "expire_rate_typed", |n| expire_rate_typed(&sweep, n));
    }
    if run("memory") {
        memory("memory", n, |_| noop(), noop());
    }
    if run("memory_capture") {
        memory(
            "memory_capture",
            n,
            |i| Capture(i as u64, &SINK),
            Capture(0, &SINK),
        );
    }
    if run("idle") {
        idle(env_usize("IDLE_S", 5) as u64);
    }
    if run("held") {
        held(n, env_usize("IDLE_S", 5) as u64);
    }
    if run("rss_burst") {
        rss_burst(env_usize("BURST_N", 5_000_000), env_usize("BURSTS", 3));
    }
}
