//! The `schedule`, `schedule_cancel` and `expire` workloads of `netty_workloads` (plus `memory`
//! and `held`), run through the Rust timers a user would pick instead, printing the same RESULT
//! lines with their own `impl=` names. How each workload maps onto each API is in
//! `benches/README.md`.
//!
//! `held` runs on `tokio-delayqueue` and `hierarchical-hash-wheel-timer` only: on `tokio-sleep`
//! and `futures-timer` a timeout that records when it ran needs a task of its own polling it, so
//! N = 10 000 000 would measure the tasks more than the timer. Its `stop_ms` is whatever ends
//! the timer and frees what it holds (dropping the queue; shutting the thread down), to be read
//! against this crate's `stop_ms` + `drop_ms`.
//!
//! `held` also runs `wake-floor`: no timer, one thread that sleeps until each 1 ms tick on which
//! a `held` timeout falls due and does nothing else. It is the least any timer that fires within
//! a tick spends on `held`: the wake-ups themselves.
//!
//! ```text
//! cargo bench --bench peers                               # everything
//! cargo bench --bench peers -- schedule                   # one workload, every peer
//! cargo bench --bench peers -- expire tokio-sleep         # one workload, one peer
//! N=100000 REPS=3 IDLE_S=2 cargo bench --bench peers      # a quick run
//! ```

mod common;

use common::{
    expire_due_ns, far_delay, held_delay, held_due_ns, held_record, held_reset, held_runs, median,
    millis, nanos_per, report_expire, report_held, result, settle, Counting, CountingAlloc, Held,
    HeldWindow, Lateness,
};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const HOUR: Duration = Duration::from_secs(3600);

const WORKLOADS: &[&str] = &["schedule", "schedule_cancel", "expire", "memory", "held"];

/// One peer: its `impl=` name and a function per workload. `schedule_cancel` returns ns per
/// pair; `memory` (bytes, allocation calls) per pending timeout; `held` takes N and the window's
/// seconds, and is `None` where the peer does not run it.
struct Peer {
    name: &'static str,
    schedule: fn(usize) -> f64,
    schedule_cancel: fn(usize) -> f64,
    expire: fn(usize) -> [f64; 4],
    memory: fn(usize) -> (f64, f64),
    held: Option<fn(usize, u64) -> Held>,
}

const PEERS: &[Peer] = &[
    Peer {
        name: "tokio-delayqueue",
        schedule: delay_queue::schedule,
        schedule_cancel: delay_queue::schedule_cancel,
        expire: delay_queue::expire,
        memory: delay_queue::memory,
        held: Some(delay_queue::held),
    },
    Peer {
        name: "tokio-sleep",
        schedule: tokio_sleep::schedule,
        schedule_cancel: tokio_sleep::schedule_cancel,
        expire: tokio_sleep::expire,
        memory: tokio_sleep::memory,
        held: None,
    },
    Peer {
        name: "futures-timer",
        schedule: futures_timer::schedule,
        schedule_cancel: futures_timer::schedule_cancel,
        expire: futures_timer::expire,
        memory: futures_timer::memory,
        held: None,
    },
    Peer {
        name: "hierarchical-hash-wheel-timer",
        schedule: hhwt::schedule,
        schedule_cancel: hhwt::schedule_cancel,
        expire: hhwt::expire,
        memory: hhwt::memory,
        held: Some(hhwt::held),
    },
];

fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
}

/// `tokio_util::time::DelayQueue`: a single-owner queue on tokio's timer; `insert` returns a
/// key, `remove` cancels synchronously, `poll_expired` yields what is due.
mod delay_queue {
    use super::*;
    use std::future::{pending, poll_fn, Future};
    use std::pin::pin;
    use tokio_util::time::DelayQueue;

    /// A queue on a current-thread runtime, started by an entry an hour away.
    fn queue<T>(rt: &tokio::runtime::Runtime, hour: T) -> DelayQueue<T> {
        let _entered = rt.enter();
        let mut q = DelayQueue::new();
        q.insert(hour, HOUR);
        q
    }

    pub(crate) fn schedule(n: usize) -> f64 {
        let rt = current_thread_runtime();
        let _entered = rt.enter();
        let mut q = queue(&rt, ());
        let t0 = Instant::now();
        for i in 0..n {
            black_box(q.insert((), far_delay(i)));
        }
        nanos_per(t0.elapsed(), n)
    }

    pub(crate) fn schedule_cancel(n: usize) -> f64 {
        let rt = current_thread_runtime();
        let _entered = rt.enter();
        let mut q = queue(&rt, ());
        let t0 = Instant::now();
        for i in 0..n {
            let key = q.insert((), far_delay(i));
            black_box(q.remove(&key));
        }
        nanos_per(t0.elapsed(), n)
    }

    /// The consumer task polls `poll_expired` and records each entry's lateness as it gets it.
    pub(crate) fn expire(n: usize) -> [f64; 4] {
        let rt = current_thread_runtime();
        let mut q = queue(&rt, usize::MAX);
        let run = Lateness::start(n);
        let end = rt.block_on(async {
            for i in 0..n {
                let due_ns = expire_due_ns(i, n);
                q.insert(i, Duration::from_nanos(due_ns.saturating_sub(run.now_ns())));
            }
            for _ in 0..n {
                let expired = poll_fn(|cx| q.poll_expired(cx))
                    .await
                    .expect("the hour-away entry keeps the queue non-empty");
                let i = expired.into_inner();
                run.record(i, expire_due_ns(i, n));
            }
            Instant::now()
        });
        run.summary(end)
    }

    pub(crate) fn memory(n: usize) -> (f64, f64) {
        let rt = current_thread_runtime();
        let _entered = rt.enter();
        let mut q = queue(&rt, ());
        let counting = Counting::start();
        for i in 0..n {
            q.insert((), far_delay(i));
        }
        let per = (
            counting.live_bytes() as f64 / n as f64,
            counting.calls() as f64 / n as f64,
        );
        drop(counting);
        per
    }

    /// Each entry's value is its deadline; a consumer polls `poll_expired` and records each
    /// entry's lateness as it gets it, while the measurement sleeps on the same runtime (one
    /// thread, as the other workloads). `stop_ms` is dropping the queue.
    pub(crate) fn held(n: usize, seconds: u64) -> Held {
        let rt = current_thread_runtime();
        let mut q = DelayQueue::with_capacity(n);
        held_reset();
        let mut figures = rt.block_on(async {
            for i in 0..n {
                let delay = held_delay(i, n);
                q.insert(held_due_ns(delay), delay);
            }
            let mut consume = pin!(async {
                while let Some(expired) = poll_fn(|cx| q.poll_expired(cx)).await {
                    held_record(expired.into_inner());
                }
                // Every entry has expired (only with N = 1 inside the window): nothing left to
                // record, and `measure` decides when the block ends.
                pending::<()>().await;
            });
            let mut measure = pin!(async {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let window = HeldWindow::open(seconds);
                tokio::time::sleep(Duration::from_secs(seconds)).await;
                window.close()
            });
            poll_fn(|cx| {
                // Never ready: it ends when `measure` does and the block drops it.
                let _ = consume.as_mut().poll(cx);
                measure.as_mut().poll(cx)
            })
            .await
        });
        assert_eq!(held_runs() + q.len(), n, "entries lost or yielded twice");
        let _entered = rt.enter();
        let t0 = Instant::now();
        drop(q);
        figures.stop_ms = Some(millis(t0.elapsed()));
        figures
    }
}

/// `tokio::time::sleep` on a current-thread runtime. A `Sleep` joins the timer wheel on its
/// first poll, so "schedule" is create + one poll (with a no-op waker, outside any task, so
/// tokio's cooperative budget does not step in), boxed so that it can be held; "cancel" is
/// dropping it. `expire` spawns a task per timeout that awaits `sleep_until(deadline)`.
mod tokio_sleep {
    use super::*;
    use std::future::{poll_fn, Future};
    use std::pin::Pin;
    use std::task::{Context, Wake, Waker};
    use tokio::time::{sleep, sleep_until, Sleep};

    /// A waker that does nothing (`Waker::noop` needs Rust 1.85; the crate's MSRV is 1.75).
    struct Noop;

    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    fn noop_waker() -> Waker {
        Waker::from(Arc::new(Noop))
    }

    fn registered(d: Duration, cx: &mut Context<'_>) -> Pin<Box<Sleep>> {
        let mut s = Box::pin(sleep(d));
        assert!(s.as_mut().poll(cx).is_pending());
        s
    }

    pub(crate) fn schedule(n: usize) -> f64 {
        let rt = current_thread_runtime();
        let _entered = rt.enter();
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut held = Vec::with_capacity(n + 1);
        held.push(registered(HOUR, &mut cx));
        let t0 = Instant::now();
        for i in 0..n {
            held.push(registered(far_delay(i), &mut cx));
        }
        let elapsed = t0.elapsed();
        drop(held);
        nanos_per(elapsed, n)
    }

    pub(crate) fn schedule_cancel(n: usize) -> f64 {
        let rt = current_thread_runtime();
        let _entered = rt.enter();
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        let _hour = registered(HOUR, &mut cx);
        let t0 = Instant::now();
        for i in 0..n {
            drop(black_box(registered(far_delay(i), &mut cx)));
        }
        nanos_per(t0.elapsed(), n)
    }

    pub(crate) fn expire(n: usize) -> [f64; 4] {
        let rt = current_thread_runtime();
        let run = Lateness::start(n);
        let base = tokio::time::Instant::from_std(run.base());
        let end = rt.block_on(async {
            let _hour = registered(HOUR, &mut Context::from_waker(&noop_waker()));
            for i in 0..n {
                let due_ns = expire_due_ns(i, n);
                let at = base + Duration::from_nanos(due_ns);
                tokio::spawn(async move {
                    sleep_until(at).await;
                    run.record(i, due_ns);
                });
            }
            poll_fn(|cx| run.poll_done(cx)).await
        });
        run.summary(end)
    }

    pub(crate) fn memory(n: usize) -> (f64, f64) {
        let rt = current_thread_runtime();
        let _entered = rt.enter();
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut held = Vec::with_capacity(n + 1);
        held.push(registered(HOUR, &mut cx));
        let counting = Counting::start();
        for i in 0..n {
            held.push(registered(far_delay(i), &mut cx));
        }
        let per = (
            counting.live_bytes() as f64 / n as f64,
            counting.calls() as f64 / n as f64,
        );
        drop(counting);
        per
    }
}

/// `futures_timer::Delay`: one global timer thread (a binary heap); `Delay::new` registers at
/// once, dropping the `Delay` cancels. The thread digests registrations and removals in the
/// background, with no way to ask when it is done: each run ends by waiting for the process
/// to go quiet. `expire` awaits each `Delay` in a task on a current-thread tokio runtime.
mod futures_timer {
    use super::*;
    use ::futures_timer::Delay;
    use std::future::poll_fn;

    pub(crate) fn schedule(n: usize) -> f64 {
        let mut held = Vec::with_capacity(n + 1);
        held.push(Delay::new(HOUR));
        let t0 = Instant::now();
        for i in 0..n {
            held.push(Delay::new(far_delay(i)));
        }
        let elapsed = t0.elapsed();
        drop(held);
        settle();
        nanos_per(elapsed, n)
    }

    pub(crate) fn schedule_cancel(n: usize) -> f64 {
        let _hour = Delay::new(HOUR);
        let t0 = Instant::now();
        for i in 0..n {
            drop(black_box(Delay::new(far_delay(i))));
        }
        let elapsed = t0.elapsed();
        settle();
        nanos_per(elapsed, n)
    }

    pub(crate) fn expire(n: usize) -> [f64; 4] {
        let rt = current_thread_runtime();
        let _hour = Delay::new(HOUR);
        let run = Lateness::start(n);
        let end = rt.block_on(async {
            for i in 0..n {
                let due_ns = expire_due_ns(i, n);
                let delay = Delay::new(Duration::from_nanos(due_ns.saturating_sub(run.now_ns())));
                tokio::spawn(async move {
                    delay.await;
                    run.record(i, due_ns);
                });
            }
            poll_fn(|cx| run.poll_done(cx)).await
        });
        settle();
        run.summary(end)
    }

    pub(crate) fn memory(n: usize) -> (f64, f64) {
        let mut held = Vec::with_capacity(n + 1);
        held.push(Delay::new(HOUR));
        settle();
        let counting = Counting::start();
        for i in 0..n {
            held.push(Delay::new(far_delay(i)));
        }
        settle(); // the timer thread moves them into its heap
        let per = (
            counting.live_bytes() as f64 / n as f64,
            counting.calls() as f64 / n as f64,
        );
        drop(counting);
        drop(held);
        settle();
        per
    }
}

/// `hierarchical_hash_wheel_timer`'s thread timer: a four-level wheel on its own thread, fed
/// through a crossbeam channel; `schedule_action_once(id, delay, closure)` and `cancel(&id)`
/// are messages. Ids are `u64` counters (the crate's `Uuid` shorthand would add `Uuid::new_v4`
/// to every call). Each run ends with `shutdown()`, which joins the thread after it has
/// processed every queued message.
mod hhwt {
    use super::*;
    use hierarchical_hash_wheel_timer::thread_timer::{TimerRef, TimerWithThread};
    use hierarchical_hash_wheel_timer::{
        ClosureTimer, OneShotClosureState, PeriodicClosureState, Timer as _,
    };

    type Core = TimerWithThread<u64, OneShotClosureState<u64>, PeriodicClosureState<u64>>;
    type Ref = TimerRef<u64, OneShotClosureState<u64>, PeriodicClosureState<u64>>;

    fn timer() -> (Core, Ref) {
        let core = Core::new().expect("timer thread");
        let mut r = core.timer_ref();
        r.schedule_action_once(u64::MAX, HOUR, |_| {});
        (core, r)
    }

    fn shutdown(core: Core, r: Ref) {
        drop(r);
        core.shutdown().expect("timer thread joins");
    }

    pub(crate) fn schedule(n: usize) -> f64 {
        let (core, mut r) = timer();
        let t0 = Instant::now();
        for i in 0..n {
            r.schedule_action_once(i as u64, far_delay(i), |_| {});
        }
        let elapsed = t0.elapsed();
        shutdown(core, r);
        nanos_per(elapsed, n)
    }

    pub(crate) fn schedule_cancel(n: usize) -> f64 {
        let (core, mut r) = timer();
        let t0 = Instant::now();
        for i in 0..n {
            let id = i as u64;
            r.schedule_action_once(id, far_delay(i), |_| {});
            r.cancel(&id);
        }
        let elapsed = t0.elapsed();
        shutdown(core, r);
        nanos_per(elapsed, n)
    }

    pub(crate) fn expire(n: usize) -> [f64; 4] {
        let (core, mut r) = timer();
        let run = Lateness::start(n);
        for i in 0..n {
            let due_ns = expire_due_ns(i, n);
            let delay = Duration::from_nanos(due_ns.saturating_sub(run.now_ns()));
            r.schedule_action_once(i as u64, delay, move |_| run.record(i, due_ns));
        }
        let end = run.wait();
        shutdown(core, r);
        run.summary(end)
    }

    pub(crate) fn memory(n: usize) -> (f64, f64) {
        let (core, mut r) = timer();
        settle();
        let counting = Counting::start();
        for i in 0..n {
            r.schedule_action_once(i as u64, far_delay(i), |_| {});
        }
        settle(); // the timer thread moves them from the channel into its wheel
        let per = (
            counting.live_bytes() as f64 / n as f64,
            counting.calls() as f64 / n as f64,
        );
        drop(counting);
        shutdown(core, r);
        per
    }

    /// Each closure records its lateness; `stop_ms` is `shutdown()`, which joins the timer
    /// thread and drops the closures still pending. Its thread spins on `yield_now` whenever the
    /// first level of its wheel (the next 256 ms) holds an entry (`can_skip` is `Skip::None`),
    /// which here is nearly always: its CPU figure is mostly that spinning.
    pub(crate) fn held(n: usize, seconds: u64) -> Held {
        let core = Core::new().expect("timer thread");
        let mut r = core.timer_ref();
        held_reset();
        for i in 0..n {
            let delay = held_delay(i, n);
            let due_ns = held_due_ns(delay);
            r.schedule_action_once(i as u64, delay, move |_| held_record(due_ns));
        }
        std::thread::sleep(Duration::from_secs(2));
        let window = HeldWindow::open(seconds);
        std::thread::sleep(Duration::from_secs(seconds));
        let mut figures = window.close();
        let t0 = Instant::now();
        shutdown(core, r);
        figures.stop_ms = Some(millis(t0.elapsed()));
        figures
    }
}

/// Warm-up, then the median of `reps` runs.
fn measure(reps: usize, f: impl Fn() -> f64) -> f64 {
    f();
    median(&(0..reps).map(|_| f()).collect::<Vec<_>>())
}

fn main() {
    // Positional arguments name workloads and/or peers; none means all. Flags (cargo's
    // `--bench`) are ignored.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for a in &args {
        if !WORKLOADS.contains(&a.as_str())
            && !PEERS.iter().any(|p| p.name == a)
            && a != wake_floor::NAME
        {
            let names: Vec<&str> = PEERS.iter().map(|p| p.name).collect();
            eprintln!("unknown argument {a:?}; workloads: {WORKLOADS:?}, peers: {names:?}");
            std::process::exit(2);
        }
    }
    let picked = |name: &str, list: &[&str]| {
        let named: Vec<&String> = args.iter().filter(|a| list.contains(&a.as_str())).collect();
        named.is_empty() || named.iter().any(|a| *a == name)
    };
    let mut peer_names: Vec<&str> = PEERS.iter().map(|p| p.name).collect();
    peer_names.push(wake_floor::NAME);
    let n = common::env_usize("N", 1_000_000);
    let reps = common::env_usize("REPS", 5);
    let idle_s = common::env_usize("IDLE_S", 5) as u64;

    for peer in PEERS.iter().filter(|p| picked(p.name, &peer_names)) {
        let imp = peer.name;
        // Memory first: futures-timer's global heap keeps the capacity earlier runs gave it.
        if picked("memory", WORKLOADS) {
            let (bytes, calls) = (peer.memory)(n);
            result(imp, "memory", "bytes_per_timeout", bytes);
            result(imp, "memory", "allocs_per_timeout", calls);
        }
        if picked("schedule", WORKLOADS) {
            let v = measure(reps, || (peer.schedule)(n));
            result(imp, "schedule", "ns_per_op", v);
        }
        if picked("schedule_cancel", WORKLOADS) {
            let v = measure(reps, || (peer.schedule_cancel)(n));
            result(imp, "schedule_cancel", "ns_per_op", v);
        }
        if picked("expire", WORKLOADS) {
            (peer.expire)(n);
            let runs: Vec<[f64; 4]> = (0..3).map(|_| (peer.expire)(n)).collect();
            report_expire(imp, &runs);
        }
        if let (true, Some(held)) = (picked("held", WORKLOADS), peer.held) {
            report_held(imp, held(n, idle_s));
        }
    }
    if picked("held", WORKLOADS) && picked(wake_floor::NAME, &peer_names) {
        report_held(wake_floor::NAME, wake_floor::held(n, idle_s));
    }
}

/// The wake-ups `held` needs and nothing else: what a timer that fires within a tick cannot
/// save. A thread sleeps (`park_timeout`, as this crate's worker does) until the end of each
/// 1 ms tick on which a `held` timeout falls due, and records each such timeout as run; no
/// wheel, no queue, no tasks.
mod wake_floor {
    use super::common::{held_delay, held_due_ns, held_record, held_reset, Held, HeldWindow};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::thread;
    use std::time::{Duration, Instant};

    pub(crate) const NAME: &str = "wake-floor";
    const TICK_NS: u64 = 1_000_000;

    pub(crate) fn held(n: usize, seconds: u64) -> Held {
        held_reset();
        let done = Arc::new(AtomicBool::new(false));
        let start = Instant::now();
        // The deadline of timeout `i`, in the epoch's ns, as `held`'s tasks carry it.
        let base_ns = held_due_ns(Duration::ZERO);
        let sleeper = {
            let done = Arc::clone(&done);
            thread::spawn(move || {
                let mut i = 0;
                while i < n && !done.load(Ordering::Relaxed) {
                    let delay = held_delay(i, n).as_nanos() as u64;
                    // The end of the tick the deadline falls in: when a timer would run it.
                    let tick_end = delay.div_ceil(TICK_NS) * TICK_NS;
                    let wake_at = start + Duration::from_nanos(tick_end);
                    loop {
                        let now = Instant::now();
                        if now >= wake_at || done.load(Ordering::Relaxed) {
                            break;
                        }
                        thread::park_timeout(wake_at - now);
                    }
                    // Every timeout due by the end of this tick, in one wake-up.
                    while i < n && held_delay(i, n).as_nanos() as u64 <= tick_end {
                        held_record(base_ns + held_delay(i, n).as_nanos() as u64);
                        i += 1;
                    }
                }
            })
        };
        thread::sleep(Duration::from_secs(2));
        let window = HeldWindow::open(seconds);
        thread::sleep(Duration::from_secs(seconds));
        let figures = window.close();
        done.store(true, Ordering::Relaxed);
        sleeper.thread().unpark();
        sleeper.join().expect("the sleeper does not panic");
        figures
    }
}
