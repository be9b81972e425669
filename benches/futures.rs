//! This crate's futures (`Sleep`, `Deadline`) against tokio's (`tokio::time::sleep`,
//! `tokio::time::timeout`) and pingora's two timeouts (`pingora_timeout::tokio_timeout` and
//! `fast_timeout`), in the same tokio runtime, printing RESULT lines as the other harnesses do
//! (`impl=hashed-timer-wheel`, `tokio`, `pingora-tokio-timeout`, `pingora-fast-timeout`).
//!
//! - `request_timeout` (current-thread runtime) and `request_timeout_mt` (multi-thread, two
//!   workers, two tasks): N calls of `timeout(5 s, response)`, where the response is pending
//!   once (it wakes its task, as a reply from another task would) and then ready, so that
//!   every timer registers the deadline on the first poll and cancels it when the response
//!   wins: the request-timeout pattern. `ns_per_call` is wall time per call; `cpu_ns_per_call`
//!   the process's CPU time per call (this crate's worker thread frees the cancelled entries
//!   off the caller's path; tokio does it inline); `allocs_per_call` the allocation calls. The
//!   same calls without a deadline run too (`impl=no-timer`): the executor's and the
//!   response's share of each call.
//! - `ready_timeout`, `ready_timeout_mt`: the same with a response that is there already
//!   (ready at the first poll): what a deadline costs when it is never needed.
//! - With `RUSTFLAGS="--cfg tokio_unstable"` the multi-thread workloads also run tokio's
//!   `timeout` on a runtime with tokio's alternative timer (`impl=tokio-alt-timer`).
//! - `deadline_timers`: one thread makes N deadlines on T timers taken in turn (T = 1, 2, 4,
//!   5, 8, 16, 64), polled by hand: `ready_ns_per_call` a deadline made and dropped unarmed,
//!   `armed_ns_per_call` one made, polled once pending (scheduled) and dropped (cancelled).
//!   The workload name carries T (`deadline_timers_T`); how a deadline finds its timer again
//!   across timers.
//! - `pending_sleeps`: N sleeps due in 30-31 s, each polled once (registered) and held in a
//!   `Vec<Pin<Box<_>>>`, as a service holding one per connection would; `bytes_per_sleep` is
//!   every byte live on the heap per sleep, the `Vec`'s slot and the box included, once this
//!   crate's worker has moved them into its wheel; `size_of` is the future's own size.
//! - `driven_lateness`: a two-worker runtime running this crate's timer (`timer.drive`) and
//!   `TASKS` (512) tasks on each stack, each sleeping a random 0-100 ms (`timer.sleep_until` or
//!   `tokio::time::sleep_until`) and then spinning `SPIN_US` (20 µs) of work, for `SECS` (4)
//!   seconds: `late_p50_ms`, `late_p99_ms` and `late_p999_ms` of the sleeps' wakes past their
//!   deadlines, both stacks under the same load; ours also `turns` (the timer's wake-ups).
//! - `burst_lateness`: a burst of `TASKS` (50 000) tasks on each stack, spawned at once on a
//!   two-worker runtime, each sleeping until a random instant within 200 ms of a common start,
//!   then racing a random deadline (`timeout`) against a random sleep (each within 200 ms):
//!   `late_p50_ms`, `late_p99_ms` and `late_p999_ms` of both wakes past their deadlines (the
//!   race's: past the earlier of the two), both stacks under the same load. The wheel is driven
//!   by the runtime (`timer.drive`), as the README tells a tokio service; `DRIVEN=0` leaves it
//!   on its own thread.
//!
//! The contenders run one after another within each repetition, and each figure is the
//! median of REPS.
//!
//! ```text
//! cargo bench --bench futures                          # everything, N = 1 000 000
//! cargo bench --bench futures -- request_timeout       # one workload
//! N=100000 REPS=3 cargo bench --bench futures          # a quick run
//! ```

mod common;

use common::{far_delay, median, nanos_per, result, Counting, CountingAlloc};
use hashed_timer_wheel::HashedWheelTimer;
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const OURS: &str = "hashed-timer-wheel";
const TOKIO: &str = "tokio";
const TOKIO_ALT: &str = "tokio-alt-timer";
const PINGORA_TOKIO: &str = "pingora-tokio-timeout";
const PINGORA_FAST: &str = "pingora-fast-timeout";
const NO_TIMER: &str = "no-timer";
const WORKLOADS: &[&str] = &[
    "request_timeout",
    "request_timeout_mt",
    "ready_timeout",
    "ready_timeout_mt",
    "pending_sleeps",
    "deadline_timers",
    "driven_lateness",
    "burst_lateness",
];
const LIMIT: Duration = Duration::from_secs(5);

/// A response that arrives after one trip through the executor: pending once (waking its own
/// task), then ready. `Response(true)` is there already: ready at the first poll.
#[derive(Clone, Copy)]
struct Response(bool);

impl Future for Response {
    type Output = u64;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u64> {
        if self.0 {
            Poll::Ready(1)
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

fn timer() -> HashedWheelTimer {
    HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .ticks_per_wheel(512)
        .build()
        .expect("a timer")
}

fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Whether a call's response beat its deadline.
trait Won {
    fn won(self) -> bool;
}

impl<E> Won for Result<u64, E> {
    fn won(self) -> bool {
        matches!(self, Ok(1))
    }
}

impl Won for u64 {
    fn won(self) -> bool {
        self == 1
    }
}

/// A task of `per_task` calls of `$call` (a future whose output is [`Won`]), with `$bind`
/// made once per task from `$init`: a call pays for its deadline and nothing else (no handle
/// cloned per call).
macro_rules! task {
    ($($bind:ident = $init:expr),* ; $call:expr) => {
        move |per_task: usize| {
            $(let $bind = $init;)*
            async move {
                let mut ok = 0usize;
                for _ in 0..per_task {
                    ok += usize::from(black_box(Won::won($call.await)));
                }
                ok
            }
        }
    };
}

/// (ns per call, CPU ns per call, allocations per call) of `tasks` tasks made by `task`, each
/// of `per_task` calls, spawned on `rt`.
fn calls<F, T>(rt: &tokio::runtime::Runtime, tasks: usize, per_task: usize, task: &F) -> [f64; 3]
where
    F: Fn(usize) -> T,
    T: Future<Output = usize> + Send + 'static,
{
    let n = tasks * per_task;
    rt.block_on(async {
        // Let the previous run's leftovers (a worker's cancellations) settle.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let counting = Counting::start();
        let (t0, c0) = (Instant::now(), process_cpu());
        let handles: Vec<_> = (0..tasks).map(|_| tokio::spawn(task(per_task))).collect();
        let mut ok = 0;
        for h in handles {
            ok += h.await.expect("a task");
        }
        let (wall, cpu) = (t0.elapsed(), process_cpu() - c0);
        assert_eq!(ok, n, "every response beats its deadline");
        let allocs = counting.calls() as f64 / n as f64;
        [nanos_per(wall, n), nanos_per(cpu, n), allocs]
    })
}

/// One contender: its name and a run of its calls.
type Contender<'a> = (&'static str, Box<dyn Fn() -> [f64; 3] + 'a>);

/// `timeout(5 s, response)` by every contender on `rt` (and tokio's alternative timer on
/// `alt`, a runtime of its own), alternating within each of `reps` repetitions.
fn request_timeout(
    rt: &tokio::runtime::Runtime,
    alt: Option<&tokio::runtime::Runtime>,
    tasks: usize,
    n: usize,
    reps: usize,
    name: &str,
) {
    let ready = name.starts_with("ready");
    let per_task = n / tasks;
    let timer = timer();
    let handle = timer.handle();
    let ours = task!(h = handle.clone(); h.timeout(LIMIT, Response(ready)));
    let tokio = task!(; tokio::time::timeout(LIMIT, Response(ready)));
    let pingora_tokio = task!(; pingora_timeout::tokio_timeout(LIMIT, Response(ready)));
    let pingora_fast = task!(; pingora_timeout::fast_timeout::fast_timeout(LIMIT, Response(ready)));
    // The same calls with no deadline: what the executor and the response cost by themselves.
    let bare = task!(; Response(ready));
    let mut contenders: Vec<Contender<'_>> = vec![
        (OURS, Box::new(|| calls(rt, tasks, per_task, &ours))),
        (TOKIO, Box::new(|| calls(rt, tasks, per_task, &tokio))),
        (
            PINGORA_TOKIO,
            Box::new(|| calls(rt, tasks, per_task, &pingora_tokio)),
        ),
        (
            PINGORA_FAST,
            Box::new(|| calls(rt, tasks, per_task, &pingora_fast)),
        ),
        (NO_TIMER, Box::new(|| calls(rt, tasks, per_task, &bare))),
    ];
    if let Some(alt) = alt {
        contenders.push((
            TOKIO_ALT,
            Box::new(move || calls(alt, tasks, per_task, &tokio)),
        ));
    }
    // For profiles: `ONLY=hashed-timer-wheel` (or another contender's name) runs that one
    // alone, printing nothing.
    if let Ok(only) = std::env::var("ONLY") {
        for (imp, run) in &contenders {
            if *imp == only {
                for _ in 0..reps {
                    black_box(run());
                }
            }
        }
        return;
    }
    // Warm-up, then alternate.
    for (_, run) in &contenders {
        run();
    }
    let mut runs = vec![Vec::new(); contenders.len()];
    for _ in 0..reps {
        for ((_, run), runs) in contenders.iter().zip(&mut runs) {
            runs.push(run());
        }
    }
    for ((imp, _), runs) in contenders.iter().zip(&runs) {
        for (k, metric) in ["ns_per_call", "cpu_ns_per_call", "allocs_per_call"]
            .iter()
            .enumerate()
        {
            let values: Vec<f64> = runs.iter().map(|r: &[f64; 3]| r[k]).collect();
            result(imp, name, metric, median(&values));
        }
    }
    drop(timer.stop());
}

struct Noop;

impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// Live heap bytes per pending sleep, `n` of them made by `make` and polled once.
fn pending<S: Future>(n: usize, settle: Duration, make: impl Fn(usize) -> S) -> (f64, f64) {
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let counting = Counting::start();
    let mut held: Vec<Pin<Box<S>>> = Vec::with_capacity(n);
    for i in 0..n {
        let mut sleep = Box::pin(make(i));
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        held.push(sleep);
    }
    // This crate's worker moves at most 100 000 a tick into the wheel.
    std::thread::sleep(settle);
    let per = (
        counting.live_bytes() as f64 / n as f64,
        counting.calls() as f64 / n as f64,
    );
    drop(counting);
    drop(held);
    per
}

/// `deadline_timers`: per timer count, the median over `reps` of ns per deadline made and
/// dropped unarmed, and made, armed and dropped, on timers taken in turn.
fn deadline_timers(n: usize, reps: usize) {
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    for count in [1, 2, 4, 5, 8, 16, 64] {
        let timers: Vec<HashedWheelTimer> = (0..count).map(|_| timer()).collect();
        let mut one = |armed: bool| {
            let t0 = Instant::now();
            for i in 0..n {
                let mut call = timers[i % count].timeout(LIMIT, std::future::pending::<()>());
                if armed {
                    let call = Pin::new(&mut call);
                    assert!(call.poll(&mut cx).is_pending());
                }
                drop(black_box(call));
            }
            nanos_per(t0.elapsed(), n)
        };
        one(false);
        one(true);
        let (mut ready, mut armed) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            ready.push(one(false));
            armed.push(one(true));
        }
        let workload = format!("deadline_timers_{count}");
        result(OURS, &workload, "ready_ns_per_call", median(&ready));
        result(OURS, &workload, "armed_ns_per_call", median(&armed));
        for timer in timers {
            drop(timer.stop());
        }
    }
}

fn pending_sleeps(n: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let _entered = rt.enter();
    // Both timers started (and their first allocations made) before counting.
    let _hour = Box::pin(tokio::time::sleep(Duration::from_secs(3600)));
    let timer = timer();
    let _first = timer.sleep(Duration::from_secs(3600));
    std::thread::sleep(Duration::from_millis(100));
    // tokio's first: this crate's worker frees what the other run held in the background,
    // which would count against whatever is measured next.
    let (tokio, tokio_allocs) = pending(n, Duration::ZERO, |i| tokio::time::sleep(far_delay(i)));
    let (ours, ours_allocs) = pending(n, Duration::from_millis(300), |i| timer.sleep(far_delay(i)));
    let size_ours = std::mem::size_of::<hashed_timer_wheel::Sleep>() as f64;
    let size_tokio = std::mem::size_of::<tokio::time::Sleep>() as f64;
    for (imp, bytes, allocs, size) in [
        (OURS, ours, ours_allocs, size_ours),
        (TOKIO, tokio, tokio_allocs, size_tokio),
    ] {
        result(imp, "pending_sleeps", "bytes_per_sleep", bytes);
        result(imp, "pending_sleeps", "allocs_per_sleep", allocs);
        result(imp, "pending_sleeps", "size_of", size);
    }
    drop(timer.stop());
}

/// A multi-thread runtime of two workers, with timers.
fn two_workers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a runtime")
}

/// tokio's alternative timer (per-worker wheels), for the multi-thread runs: built only with
/// `RUSTFLAGS="--cfg tokio_unstable"` (tokio offers it nowhere else, and on multi-thread
/// runtimes only).
#[cfg(tokio_unstable)]
fn alt_runtime() -> Option<tokio::runtime::Runtime> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_alt_timer()
        .build()
        .expect("a runtime");
    Some(rt)
}

#[cfg(not(tokio_unstable))]
fn alt_runtime() -> Option<tokio::runtime::Runtime> {
    None
}

fn main() {
    let workload = common::selected_workload(WORKLOADS);
    let n = common::env_usize("N", 1_000_000);
    let reps = common::env_usize("REPS", 5);
    let picked = |w: &str| workload == "all" || workload == w;
    for name in ["request_timeout", "ready_timeout"] {
        if picked(name) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a runtime");
            request_timeout(&rt, None, 1, n, reps, name);
        }
    }
    for name in ["request_timeout_mt", "ready_timeout_mt"] {
        if picked(name) {
            let rt = two_workers();
            let alt = alt_runtime();
            request_timeout(&rt, alt.as_ref(), 2, n, reps, name);
        }
    }
    if picked("pending_sleeps") {
        pending_sleeps(n);
    }
    if picked("deadline_timers") {
        deadline_timers(n, reps);
    }
    if picked("driven_lateness") {
        driven_lateness();
    }
    if picked("burst_lateness") {
        burst_lateness();
    }
}

/// `burst_lateness`: see the module docs.
fn burst_lateness() {
    let tasks = common::env_usize("TASKS", 50_000);
    let driven = std::env::var("DRIVEN").map_or(true, |v| v != "0");
    let timer = timer();
    let rt = two_workers();
    if driven {
        rt.spawn(timer.drive(|at| tokio::time::sleep_until(at.into())));
    }
    let start = Instant::now() + Duration::from_millis(50);
    let spawned: Vec<_> = (0..tasks * 2)
        .map(|k| {
            let handle = timer.handle();
            rt.spawn(async move {
                let mut x = 0x9E37_79B9_7F4A_7C15 ^ (k as u64 / 2 * 7919);
                let mut next = |limit: u64| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    Duration::from_micros(x % limit)
                };
                let (first, limit, inner) = (next(200_000), next(200_000), next(200_000));
                let due = start + first;
                let raced = |at: Instant| at + limit.min(inner);
                let late = if k % 2 == 0 {
                    handle.sleep_until(due).await.expect("the timer runs");
                    let woke = Instant::now();
                    let raced_due = raced(woke);
                    let _ = handle.timeout(limit, handle.sleep(inner)).await;
                    [woke - due, Instant::now() - raced_due]
                } else {
                    tokio::time::sleep_until(due.into()).await;
                    let woke = Instant::now();
                    let raced_due = raced(woke);
                    let _ = tokio::time::timeout(limit, tokio::time::sleep(inner)).await;
                    [woke - due, Instant::now() - raced_due]
                };
                (k % 2, late)
            })
        })
        .collect();
    let mut late = [Vec::new(), Vec::new()];
    for task in spawned {
        let (stack, mine) = rt.block_on(task).expect("a task");
        late[stack].extend(mine.map(|d| d.as_nanos() as i64));
    }
    report_lateness("burst_lateness", late);
}

/// Prints the p50, p99 and p999 of each stack's lateness (ns): ours, then tokio's.
fn report_lateness(workload: &str, mut late: [Vec<i64>; 2]) {
    for (imp, late) in [OURS, TOKIO].into_iter().zip(&mut late) {
        late.sort_unstable();
        let at = |q: f64| late[((late.len() - 1) as f64 * q) as usize] as f64 / 1e6;
        for (metric, q) in [
            ("late_p50_ms", 0.5),
            ("late_p99_ms", 0.99),
            ("late_p999_ms", 0.999),
        ] {
            result(imp, workload, metric, at(q));
        }
    }
}

/// `driven_lateness`: see the module docs.
fn driven_lateness() {
    let (tasks, spin) = (
        common::env_usize("TASKS", 512),
        common::env_usize("SPIN_US", 20),
    );
    let secs = common::env_usize("SECS", 4) as u64;
    let timer = timer();
    let rt = two_workers();
    rt.spawn(timer.drive(|at| tokio::time::sleep_until(at.into())));
    let end = Instant::now() + Duration::from_secs(secs);
    let spawned: Vec<_> = (0..tasks * 2)
        .map(|k| {
            let handle = timer.handle();
            rt.spawn(async move {
                let (mut x, mut late) = (0x9E37_79B9_7F4A_7C15 ^ (k as u64 * 7919), Vec::new());
                while Instant::now() < end {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let due = Instant::now() + Duration::from_micros(x % 100_000);
                    match k % 2 {
                        0 => handle.sleep_until(due).await.expect("the timer runs"),
                        _ => tokio::time::sleep_until(due.into()).await,
                    }
                    late.push((Instant::now() - due).as_nanos() as i64);
                    let work = Instant::now();
                    while work.elapsed() < Duration::from_micros(spin as u64) {}
                }
                (k % 2, late)
            })
        })
        .collect();
    let mut late = [Vec::new(), Vec::new()];
    for task in spawned {
        let (stack, mine) = rt.block_on(task).expect("a task");
        late[stack].extend(mine);
    }
    report_lateness("driven_lateness", late);
    result(
        OURS,
        "driven_lateness",
        "turns",
        timer.stats().wakeups as f64,
    );
}
