//! The new core (`hashed_timer_wheel::next`) on the Netty harness's workloads, with its
//! parameters (1 ms tick, 512 buckets, started by a timeout an hour away): `impl=next`, to set
//! beside `benches/netty/run` and `netty_workloads` in one sitting.
//!
//! `cargo bench --bench next_core [workload]`; workloads: schedule, schedule_capture,
//! schedule_cancel, multi_producer, expire, memory, memory_capture, idle, held. Environment as
//! `netty_workloads`: N, REPS, THREADS, IDLE_S.

mod common;

use common::*;
use hashed_timer_wheel::next::{Boxed, Job, Timeout, Timer};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
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
    "memory",
    "memory_capture",
    "idle",
    "held",
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

fn expire(n: usize, reps: usize) {
    let mut runs = Vec::new();
    for _ in 0..reps.min(3) {
        let timer = started(noop());
        let late = Arc::new(Mutex::new(Vec::with_capacity(n)));
        let done = Arc::new(AtomicUsize::new(0));
        let base = Instant::now();
        for i in 0..n {
            let due = base + Duration::from_nanos(expire_due_ns(i, n));
            let (late, done) = (Arc::clone(&late), Arc::clone(&done));
            let task = Boxed::new(move |_| {
                late.lock()
                    .unwrap()
                    .push(Instant::now().duration_since(due).as_nanos() as i64);
                done.fetch_add(1, Ordering::Relaxed);
            });
            timer
                .new_timeout(task, due.saturating_duration_since(Instant::now()))
                .unwrap();
        }
        while done.load(Ordering::Relaxed) < n {
            std::thread::sleep(Duration::from_millis(1));
        }
        let last = base + Duration::from_nanos(expire_due_ns(n - 1, n));
        let lag = millis(Instant::now().duration_since(last));
        let [p50, p99, max] = late_percentiles(&mut late.lock().unwrap());
        runs.push([lag, p50, p99, max]);
    }
    report_expire(IMPL, &runs);
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
            .new_timeout_detached(Boxed::new(move |_| held_record(due)), delay)
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
            let task = Boxed::new(move |_| drop(SINK.fetch_add(i as u64, Ordering::Relaxed)));
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
        expire(n, reps);
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
}
