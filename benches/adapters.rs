//! The adapters against what they replace, side by side in one process, printing RESULT lines
//! as the other harnesses do (`impl=hashed-timer-wheel` against `impl=tokio-util`, `tower` or
//! `hyper-util`, and `impl=no-timer` where it says what the rest of a call costs).
//!
//! - `dq_churn`: N times `insert` (30 s + (i & 1023) ms) then `remove` on a `DelayQueue` that
//!   holds an item due in 10 s and has been polled once (its wake-up armed for that item, which
//!   no insert moves). `ns_per_op` per pair.
//! - `dq_held`: N inserts with deadlines evenly over [1 s, 1 h) into a new queue, then one poll.
//!   `ns_per_op` per insert; `bytes_per_item`: live heap bytes per item, the queue's own
//!   growth included (nothing reserved ahead).
//! - `dq_expire`: N items due evenly over [100, 200) ms, inserted up front; one task on a
//!   current-thread runtime loops on `poll_expired` and records each item's lateness
//!   (`late_p50_ms`, `late_p99_ms`, `late_max_ms`; `lag_ms`: the last deadline to the last
//!   item).
//! - `tower_ct`, `tower_mt`: N calls through `ServiceBuilder::new().layer(timeout 5 s)` on a
//!   service whose response is pending once (it wakes its own task) and then ready, from one
//!   task on a current-thread runtime, or two tasks on a two-worker multi-thread runtime.
//!   `ns_per_call`.
//! - `hyper_conn_ct`, `hyper_conn_mt`: a hello-world HTTP/1 server on 127.0.0.1 with the timer as
//!   hyper's timer and a 5 s header read timeout; C connections one after another, each one
//!   GET then closed. `us_per_conn`.
//! - `hyper_req_ct`, `hyper_req_mt`: the same server, one keep-alive connection, R requests one
//!   after another. `us_per_req`. With `DRIVEN=1` the wheel's ticks run on the runtime
//!   (`timer.drive`, as the README tells a tokio service), not on the timer's thread.
//!
//! Each figure is the median of REPS runs (after a warm-up of each), the two sides alternating
//! (ABBA: each side runs first in every other repetition). For profiles, `ONLY=<impl>` runs one
//! side alone.
//!
//! ```text
//! cargo bench --bench adapters --features hyper,tower              # everything
//! cargo bench --bench adapters --features hyper,tower -- tower_mt  # one workload
//! N=100000 C=500 R=5000 REPS=3 cargo bench --bench adapters --features hyper,tower
//! ```

mod common;

use bytes::Bytes;
use common::{median, nanos_per, result, Counting, CountingAlloc};
use hashed_timer_wheel::{DelayQueue, HashedWheelTimer, HyperTimer, TimeoutLayer, TimerHandle};
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::hint::black_box;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const OURS: &str = "hashed-timer-wheel";
const WORKLOADS: &[&str] = &[
    "dq_churn",
    "dq_held",
    "dq_expire",
    "tower_ct",
    "tower_mt",
    "hyper_conn_ct",
    "hyper_conn_mt",
    "hyper_req_ct",
    "hyper_req_mt",
];
const HOUR: Duration = Duration::from_secs(3600);
/// `dq_churn`'s resident item: due before every inserted one, so that no insert moves the
/// queue's wake-up (neither queue re-arms its timer).
const EARLIER: Duration = Duration::from_secs(10);

fn timer() -> HashedWheelTimer {
    HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(common::env_usize("TICK_MS", 1) as u64))
        .ticks_per_wheel(512)
        .build()
        .expect("a timer")
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

struct Noop;

impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

fn noop_cx<R>(f: impl FnOnce(&mut Context<'_>) -> R) -> R {
    let waker = Waker::from(Arc::new(Noop));
    f(&mut Context::from_waker(&waker))
}

/// Runs `ours` and `theirs` alternately `reps` times after a warm-up of each; prints the
/// median of each metric.
fn side_by_side<const M: usize>(
    workload: &str,
    metrics: [&str; M],
    reps: usize,
    theirs_name: &str,
    mut ours: impl FnMut() -> [f64; M],
    mut theirs: impl FnMut() -> [f64; M],
) {
    // For profiles: `ONLY=hashed-timer-wheel` (or the other side's name) runs that side alone.
    if let Ok(only) = std::env::var("ONLY") {
        let runs: Vec<[f64; M]> = (0..=reps)
            .map(|_| if only == OURS { ours() } else { theirs() })
            .collect();
        for (k, metric) in metrics.iter().enumerate() {
            let col: Vec<f64> = runs[1..].iter().map(|r| r[k]).collect();
            result(&only, workload, metric, median(&col));
        }
        return;
    }
    ours();
    theirs();
    let (mut a, mut b) = (vec![], vec![]);
    // ABBA: neither side always runs first.
    for rep in 0..reps {
        if rep % 2 == 0 {
            a.push(ours());
            b.push(theirs());
        } else {
            b.push(theirs());
            a.push(ours());
        }
    }
    for (imp, runs) in [(OURS, &a), (theirs_name, &b)] {
        for (k, metric) in metrics.iter().enumerate() {
            let col: Vec<f64> = runs.iter().map(|r| r[k]).collect();
            result(imp, workload, metric, median(&col));
        }
    }
}

// ---- DelayQueue ----------------------------------------------------------------------------

fn dq_churn(n: usize, reps: usize) {
    let rt = current_thread();
    let _entered = rt.enter();
    let timer = timer();
    let ours = || {
        let mut q = DelayQueue::new(timer.handle());
        q.insert(0usize, EARLIER);
        assert!(noop_cx(|cx| q.poll_expired(cx)).is_pending());
        let t0 = Instant::now();
        for i in 0..n {
            let key = q.insert(i, common::far_delay(i));
            black_box(q.remove(&key));
        }
        [nanos_per(t0.elapsed(), n)]
    };
    let theirs = || {
        let mut q = tokio_util::time::DelayQueue::new();
        q.insert(0usize, EARLIER);
        assert!(noop_cx(|cx| q.poll_expired(cx)).is_pending());
        let t0 = Instant::now();
        for i in 0..n {
            let key = q.insert(i, common::far_delay(i));
            black_box(q.remove(&key));
        }
        [nanos_per(t0.elapsed(), n)]
    };
    side_by_side("dq_churn", ["ns_per_op"], reps, "tokio-util", ours, theirs);
}

fn dq_held(n: usize, reps: usize) {
    let rt = current_thread();
    let _entered = rt.enter();
    let timer = timer();
    let _warm = timer.sleep(HOUR);
    let ours = || {
        let counting = Counting::start();
        let mut q = DelayQueue::new(timer.handle());
        let t0 = Instant::now();
        for i in 0..n {
            q.insert(i as u64, common::held_delay(i, n));
        }
        let took = t0.elapsed();
        assert!(noop_cx(|cx| q.poll_expired(cx)).is_pending());
        let bytes = counting.live_bytes() as f64 / n as f64;
        drop(counting);
        drop(q);
        [nanos_per(took, n), bytes]
    };
    let theirs = || {
        let counting = Counting::start();
        let mut q = tokio_util::time::DelayQueue::new();
        let t0 = Instant::now();
        for i in 0..n {
            q.insert(i as u64, common::held_delay(i, n));
        }
        let took = t0.elapsed();
        assert!(noop_cx(|cx| q.poll_expired(cx)).is_pending());
        let bytes = counting.live_bytes() as f64 / n as f64;
        drop(counting);
        drop(q);
        [nanos_per(took, n), bytes]
    };
    side_by_side(
        "dq_held",
        ["ns_per_op", "bytes_per_item"],
        reps,
        "tokio-util",
        ours,
        theirs,
    );
}

/// Lateness figures of one `dq_expire` run: [lag, p50, p99, max] in ms.
fn lateness(late_ns: &mut [i64], last_at: Instant, last_due: Instant) -> [f64; 4] {
    let [p50, p99, max] = common::late_percentiles(late_ns);
    let lag = last_at.saturating_duration_since(last_due);
    [common::millis(lag), p50, p99, max]
}

fn dq_expire(n: usize, reps: usize) {
    let rt = current_thread();
    let timer = timer();
    let due = |base: Instant, i: usize| base + Duration::from_nanos(common::expire_due_ns(i, n));
    let ours = || {
        rt.block_on(async {
            let mut q = DelayQueue::with_capacity(timer.handle(), n);
            let base = Instant::now();
            for i in 0..n {
                q.insert_at(i, due(base, i));
            }
            let mut late = vec![0i64; n];
            let mut last = base;
            while let Some(item) = poll_fn(|cx| q.poll_expired(cx)).await {
                last = Instant::now();
                let i = item.into_inner();
                late[i] = last.duration_since(due(base, i)).as_nanos() as i64;
            }
            lateness(&mut late, last, due(base, n - 1))
        })
    };
    let theirs = || {
        rt.block_on(async {
            let mut q = tokio_util::time::DelayQueue::with_capacity(n);
            let base = Instant::now();
            for i in 0..n {
                q.insert_at(i, due(base, i).into());
            }
            let mut late = vec![0i64; n];
            let mut last = base;
            while let Some(item) = poll_fn(|cx| q.poll_expired(cx)).await {
                last = Instant::now();
                let i = item.into_inner();
                late[i] = last.saturating_duration_since(due(base, i)).as_nanos() as i64;
            }
            lateness(&mut late, last, due(base, n - 1))
        })
    };
    side_by_side(
        "dq_expire",
        ["lag_ms", "late_p50_ms", "late_p99_ms", "late_max_ms"],
        reps,
        "tokio-util",
        ours,
        theirs,
    );
}

// ---- tower ---------------------------------------------------------------------------------

/// A response that arrives after one trip through the executor: pending once (waking its own
/// task), then ready.
struct Reply(bool);

impl Future for Reply {
    type Output = Result<u64, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.0 {
            Poll::Ready(Ok(1))
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// ns per call of `tasks` tasks each making `n / tasks` calls through a clone of `service`.
fn tower_calls<S>(rt: &tokio::runtime::Runtime, tasks: usize, n: usize, service: S) -> [f64; 1]
where
    S: Service<u64, Response = u64> + Clone + Send + 'static,
    S::Error: std::fmt::Debug,
    S::Future: Send,
{
    rt.block_on(async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t0 = Instant::now();
        let handles: Vec<_> = (0..tasks)
            .map(|_| {
                let mut service = service.clone();
                tokio::spawn(async move {
                    let mut sum = 0;
                    for i in 0..n / tasks {
                        let ready = service.ready().await.expect("ready");
                        sum += ready.call(i as u64).await.expect("in time");
                    }
                    sum
                })
            })
            .collect();
        let mut sum = 0;
        for h in handles {
            sum += h.await.expect("a task");
        }
        assert_eq!(sum as usize, n / tasks * tasks);
        [nanos_per(t0.elapsed(), n)]
    })
}

fn tower(rt: &tokio::runtime::Runtime, tasks: usize, name: &str, n: usize, reps: usize) {
    let timer = timer();
    let limit = Duration::from_secs(5);
    let inner = service_fn(|_: u64| Reply(false));
    let ours = ServiceBuilder::new()
        .layer(TimeoutLayer::new(timer.handle(), limit))
        .service(inner);
    let theirs = ServiceBuilder::new()
        .layer(tower::timeout::TimeoutLayer::new(limit))
        .service(inner);
    side_by_side(
        name,
        ["ns_per_call"],
        reps,
        "tower",
        || tower_calls(rt, tasks, n, ours.clone()),
        || tower_calls(rt, tasks, n, theirs.clone()),
    );
    let bare = (0..reps)
        .map(|_| tower_calls(rt, tasks, n, inner)[0])
        .collect::<Vec<_>>();
    result("no-timer", name, "ns_per_call", median(&bare));
    drop(timer.stop());
}

// ---- hyper ---------------------------------------------------------------------------------

/// A hello-world HTTP/1 server on 127.0.0.1 with `timer` as hyper's timer and a 5 s header
/// read timeout.
async fn server<Tm>(timer: Tm) -> (SocketAddr, tokio::task::JoinHandle<()>)
where
    Tm: hyper::rt::Timer + Clone + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let timer = timer.clone();
            tokio::spawn(async move {
                let hello = hyper::service::service_fn(|_: Request<hyper::body::Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(timer)
                    .header_read_timeout(Duration::from_secs(5))
                    .serve_connection(TokioIo::new(stream), hello)
                    .await;
            });
        }
    });
    (addr, task)
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> (Sender, tokio::task::JoinHandle<()>) {
    let stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    (sender, conn)
}

async fn get(sender: &mut Sender) {
    sender.ready().await.expect("the connection is ready");
    let request = Request::get("/")
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .expect("a request");
    let response = sender.send_request(request).await.expect("a response");
    let body = response.into_body().collect().await.expect("a body");
    assert_eq!(body.to_bytes().len(), 5);
}

/// µs per connection (one GET each) or per request (on one connection).
fn hyper_run<Tm>(rt: &tokio::runtime::Runtime, timer: Tm, per_conn: bool, count: usize) -> [f64; 1]
where
    Tm: hyper::rt::Timer + Clone + Send + Sync + 'static,
{
    rt.block_on(async {
        let (addr, server) = server(timer).await;
        let run = async {
            let t0 = Instant::now();
            if per_conn {
                for _ in 0..count {
                    let (mut sender, conn) = connect(addr).await;
                    get(&mut sender).await;
                    drop(sender);
                    conn.await.expect("the connection ends");
                }
            } else {
                let (mut sender, conn) = connect(addr).await;
                for _ in 0..count {
                    get(&mut sender).await;
                }
                drop(sender);
                conn.await.expect("the connection ends");
            }
            t0.elapsed()
        };
        let took = tokio::time::timeout(Duration::from_secs(120), run)
            .await
            .expect("bounded");
        server.abort();
        [nanos_per(took, count) / 1e3]
    })
}

fn hyper(rt: &tokio::runtime::Runtime, name: &str, per_conn: bool, count: usize, reps: usize) {
    let timer = timer();
    let handle: TimerHandle = timer.handle();
    if std::env::var("DRIVEN").is_ok_and(|v| v == "1") {
        rt.spawn(handle.drive(|at| tokio::time::sleep_until(at.into())));
    }
    let metric = if per_conn {
        "us_per_conn"
    } else {
        "us_per_req"
    };
    side_by_side(
        name,
        [metric],
        reps,
        "hyper-util",
        || hyper_run(rt, HyperTimer::new(handle.clone()), per_conn, count),
        || hyper_run(rt, TokioTimer::new(), per_conn, count),
    );
    // The timer's worker thread: how often it woke, per connection or request made.
    let made = (count * (reps + 1)) as f64;
    let per = if per_conn {
        "worker_wakeups_per_conn"
    } else {
        "worker_wakeups_per_req"
    };
    result(OURS, name, per, timer.stats().wakeups as f64 / made);
    drop(timer.stop());
}

fn main() {
    let workload = common::selected_workload(WORKLOADS);
    let n = common::env_usize("N", 1_000_000);
    let conns = common::env_usize("C", 2_000);
    let requests = common::env_usize("R", 20_000);
    let reps = common::env_usize("REPS", 5);
    let picked = |w: &str| workload == "all" || workload == w;
    if picked("dq_held") {
        dq_held(n, reps);
    }
    if picked("dq_churn") {
        dq_churn(n, reps);
    }
    if picked("dq_expire") {
        dq_expire(n, reps.min(3));
    }
    let (ct, mt) = (current_thread(), multi_thread());
    if picked("tower_ct") {
        tower(&ct, 1, "tower_ct", n, reps);
    }
    if picked("tower_mt") {
        tower(&mt, 2, "tower_mt", n, reps);
    }
    for (name, rt, per_conn, count) in [
        ("hyper_conn_ct", &ct, true, conns),
        ("hyper_conn_mt", &mt, true, conns),
        ("hyper_req_ct", &ct, false, requests),
        ("hyper_req_mt", &mt, false, requests),
    ] {
        if picked(name) {
            hyper(rt, name, per_conn, count, reps);
        }
    }
}
