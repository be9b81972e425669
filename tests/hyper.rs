//! `HyperTimer` under a real hyper 1.x HTTP/1 server and client on 127.0.0.1 (hyper-util's
//! `TokioIo`), on both tokio runtime flavours: a client that sends half a request head and then
//! nothing is cut off by `header_read_timeout` close to its deadline and never before it;
//! keep-alive serves several requests on one connection; a stopped timer closes the waiting
//! connections at once, with no hang, and panics in new ones. Also `reset` (the same box, the
//! deadline moved) and `now`. Every network wait is bounded by a timeout.
#![cfg(feature = "hyper")]

use bytes::Bytes;
use hashed_timer_wheel::{HashedWheelTimer, HyperSleep, HyperTimer};
use http_body_util::{BodyExt, Full};
use hyper::rt::Timer;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const TICK: Duration = Duration::from_millis(1);
const BOUND: Duration = Duration::from_secs(10);

fn runtimes() -> [tokio::runtime::Runtime; 2] {
    [
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
    ]
}

/// What each served connection ended with: `Ok`, or whether its error was a timeout.
type Outcomes = mpsc::UnboundedReceiver<Result<(), bool>>;

/// A hello-world HTTP/1 server on 127.0.0.1 with `timer` as hyper's timer; returns its
/// address, the connections' outcomes and the number accepted.
async fn serve(
    timer: HyperTimer,
    header_timeout: Duration,
) -> (SocketAddr, Outcomes, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            count.fetch_add(1, SeqCst);
            let (timer, tx) = (timer.clone(), tx.clone());
            tokio::spawn(async move {
                let hello = hyper::service::service_fn(|_: Request<hyper::body::Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
                });
                let result = hyper::server::conn::http1::Builder::new()
                    .timer(timer)
                    .header_read_timeout(header_timeout)
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), hello)
                    .await;
                let _ = tx.send(result.map_err(|e| e.is_timeout()));
            });
        }
    });
    (addr, rx, accepted)
}

/// Connects, sends half a request head, and waits for the server to close: how long that took
/// from before the connect.
async fn half_a_head(addr: SocketAddr) -> Duration {
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: local")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(BOUND, stream.read_to_end(&mut buf))
        .await
        .expect("the server closes the connection");
    start.elapsed()
}

#[test]
fn a_half_sent_head_is_cut_off_at_header_read_timeout_never_before() {
    let timeout = Duration::from_millis(200);
    for rt in runtimes() {
        let timer = HashedWheelTimer::new(TICK, 512);
        rt.block_on(async {
            let (addr, mut outcomes, _) = serve(HyperTimer::new(timer.handle()), timeout).await;
            for _ in 0..3 {
                let took = half_a_head(addr).await;
                assert!(took >= timeout, "cut off early: {took:?}");
                assert!(
                    took < timeout + Duration::from_millis(250),
                    "late: {took:?}"
                );
                let outcome = tokio::time::timeout(BOUND, outcomes.recv()).await.unwrap();
                assert_eq!(outcome, Some(Err(true)), "a header read timeout");
            }
        });
    }
}

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    for rt in runtimes() {
        let timer = HashedWheelTimer::new(TICK, 512);
        rt.block_on(async {
            let hyper_timer = HyperTimer::new(timer.handle());
            let (addr, mut outcomes, accepted) =
                serve(hyper_timer, Duration::from_millis(500)).await;
            let stream = TcpStream::connect(addr).await.unwrap();
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .unwrap();
            let conn = tokio::spawn(conn);
            for i in 0..5 {
                let request = Request::get(format!("/{i}"))
                    .header("host", "local")
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                sender.ready().await.unwrap();
                let response = tokio::time::timeout(BOUND, sender.send_request(request))
                    .await
                    .expect("bounded")
                    .unwrap();
                assert_eq!(response.status(), 200);
                let body = response.into_body().collect().await.unwrap().to_bytes();
                assert_eq!(&body[..], b"hello");
                // Idle between requests for less than the header read timeout.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(accepted.load(SeqCst), 1, "one connection");
            drop(sender);
            let _ = tokio::time::timeout(BOUND, conn).await.expect("bounded");
            let outcome = tokio::time::timeout(BOUND, outcomes.recv()).await.unwrap();
            assert_eq!(outcome, Some(Ok(())));
        });
    }
}

/// `stop()` under a running server: the connection waiting on its header read timeout is
/// closed at once (no hang), and a connection made after it is closed too, its task panicking
/// as hyper asks the `HyperTimer` of a stopped timer for a sleep (formerly every connection
/// failed as timed out, which a dropped owner caused silently).
#[test]
fn a_stopped_timer_closes_the_waiting_connections_and_fails_new_ones_loudly() {
    for rt in runtimes() {
        let timer = HashedWheelTimer::new(TICK, 512);
        rt.block_on(async {
            let long = Duration::from_secs(30);
            let (addr, mut outcomes, _) = serve(HyperTimer::new(timer.handle()), long).await;
            // One connection waiting on its header read timeout when the timer stops...
            let waiting = tokio::spawn(half_a_head(addr));
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(timer.stop());
            let took = tokio::time::timeout(BOUND, waiting)
                .await
                .expect("no hang")
                .unwrap();
            assert!(
                took < Duration::from_secs(5),
                "closed at the stop, not at 30 s: {took:?}"
            );
            let outcome = tokio::time::timeout(BOUND, outcomes.recv()).await.unwrap();
            assert_eq!(outcome, Some(Err(true)));
            // ... and one made after it: its task panics, so it reports no outcome.
            let took = half_a_head(addr).await;
            assert!(took < Duration::from_secs(5), "{took:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(
                outcomes.try_recv().is_err(),
                "the connection's task panicked"
            );
        });
    }
}

#[test]
fn reset_moves_the_same_sleep() {
    let timer = HashedWheelTimer::new(TICK, 64);
    let hyper_timer = HyperTimer::new(timer.handle());
    let mut sleep = hyper_timer.sleep(Duration::from_secs(3600));
    let before: *const HyperSleep = sleep
        .as_mut()
        .downcast_mut_pin::<HyperSleep>()
        .map(|s| &*s as *const HyperSleep)
        .unwrap();
    let soon = Instant::now() + Duration::from_millis(5);
    hyper_timer.reset(&mut sleep, soon);
    let ours = sleep.as_mut().downcast_mut_pin::<HyperSleep>().unwrap();
    assert_eq!(&*ours as *const HyperSleep, before, "the same box");
    assert!(ours.get_ref().deadline() <= soon + TICK);
    let start = Instant::now();
    futures::executor::block_on(sleep);
    assert!(Instant::now() >= soon, "never early");
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(timer.pending_timeouts(), 0);
}

#[test]
fn reset_replaces_another_timers_sleep() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let timer = HashedWheelTimer::new(TICK, 64);
        let hyper_timer = HyperTimer::new(timer.handle());
        let mut foreign = hyper_util::rt::TokioTimer::new().sleep(Duration::from_secs(3600));
        hyper_timer.reset(&mut foreign, Instant::now() + Duration::from_millis(2));
        assert!(foreign.as_mut().downcast_mut_pin::<HyperSleep>().is_some());
        tokio::time::timeout(BOUND, foreign).await.expect("bounded");
    });
}

/// A `HyperSleep` made by a `HyperTimer` on another wheel is replaced too: `reset` moved it on
/// its own wheel, which this timer neither counts nor keeps running, so stopping that other
/// timer completed the sleep (hyper's connection timed out) long before its new deadline.
#[test]
fn reset_replaces_a_sleep_made_on_another_wheel() {
    let timer = HashedWheelTimer::new(TICK, 64);
    let other = HashedWheelTimer::new(TICK, 64);
    let hyper_timer = HyperTimer::new(timer.handle());
    let mut sleep = HyperTimer::new(other.handle()).sleep(Duration::from_secs(3600));
    let soon = Instant::now() + Duration::from_millis(20);
    hyper_timer.reset(&mut sleep, soon);
    assert_eq!(timer.pending_timeouts(), 1, "not on this timer's wheel");
    assert!(other.stop().unwrap().is_empty());
    futures::executor::block_on(sleep);
    assert!(
        Instant::now() >= soon,
        "completed by the other timer's stop"
    );
    assert_eq!(timer.pending_timeouts(), 0);
}

#[test]
fn now_agrees_with_the_timers_clock() {
    let timer = HashedWheelTimer::new(TICK, 64);
    let hyper_timer = HyperTimer::new(timer.handle());
    let before = Instant::now();
    let now = hyper_timer.now();
    let after = Instant::now();
    assert!(now >= before, "never behind the monotonic clock");
    assert!(now <= after + Duration::from_millis(1));
    // A deadline counted from it is one the timer's sleeps keep.
    let at = hyper_timer.now() + Duration::from_millis(3);
    futures::executor::block_on(hyper_timer.sleep_until(at));
    assert!(Instant::now() >= at);
}

/// hyper pushes its header read timeout back on every request: a reset to a later deadline
/// schedules nothing while the armed timeout is pending; the sleep completes at the new
/// deadline, never before, after at most one early wake-up of the task (the old deadline's).
#[test]
fn a_reset_to_a_later_deadline_touches_the_wheel_once_per_period() {
    use std::task::{Context, Poll, Waker};
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .build_manual()
        .unwrap();
    let hyper_timer = HyperTimer::new(timer.handle());
    let mut cx = Context::from_waker(Waker::noop());
    let mut sleep = hyper_timer.sleep(Duration::from_millis(15));
    assert!(sleep.as_mut().poll(&mut cx).is_pending());
    let start = Instant::now();
    for i in 4..=100u64 {
        // Each reset pushes the deadline on, from 16 ms to 40 ms on the manual clock.
        hyper_timer.reset(&mut sleep, start + Duration::from_millis(15 + i / 4));
    }
    let scheduled = timer.stats();
    assert_eq!(timer.pending_timeouts(), 1, "no timeout per reset");
    let mut ready_at = None;
    for ms in 1..=60u64 {
        driver.advance(Duration::from_millis(1));
        if sleep.as_mut().poll(&mut cx) == Poll::Ready(()) {
            ready_at = Some(ms);
            break;
        }
    }
    let ready_at = ready_at.expect("the sleep completes");
    assert!(
        ready_at >= 40,
        "never before the last reset's deadline: {ready_at} ms"
    );
    assert!(ready_at <= 42, "about a tick after it: {ready_at} ms");
    // One timeout for the first period, one for the rest.
    assert_eq!(timer.stats().expired - scheduled.expired, 2);
    assert_eq!(timer.pending_timeouts(), 0);
}

/// A sleep pushed back at a pending limit of 2, as hyper pushes one back: a 10 ms sleep, polled,
/// reset to `start + 100 ms`; then the first timeout expires (12 ticks) and two other sleeps
/// take the room it left. Returns what the tests go on with; `_others` must be kept.
struct PushedBack {
    /// The owner, kept alive.
    _timer: HashedWheelTimer,
    driver: hashed_timer_wheel::ManualDriver,
    hyper_timer: HyperTimer,
    sleep: std::pin::Pin<Box<dyn hyper::rt::Sleep>>,
    start: Instant,
    _others: [hashed_timer_wheel::Sleep; 2],
}

fn pushed_back_at_the_limit(cx: &mut std::task::Context<'_>) -> PushedBack {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .max_pending_timeouts(2)
        .build_manual()
        .unwrap();
    let hyper_timer = HyperTimer::new(timer.handle());
    let mut sleep = hyper_timer.sleep(Duration::from_millis(10));
    assert!(sleep.as_mut().poll(cx).is_pending());
    let start = Instant::now();
    hyper_timer.reset(&mut sleep, start + Duration::from_millis(100));
    for _ in 0..12 {
        driver.advance(Duration::from_millis(1));
    }
    let _others = [
        timer.sleep(Duration::from_secs(60)),
        timer.sleep(Duration::from_secs(60)),
    ];
    assert_eq!(timer.pending_timeouts(), 2);
    PushedBack {
        _timer: timer,
        driver,
        hyper_timer,
        sleep,
        start,
        _others,
    }
}

/// A sleep pushed back by hyper's `reset` keeps its deadline at the pending limit: the rest of
/// the wait, armed once the first timeout has expired, continues the sleep's own timeout and is
/// not refused. Refused, the sleep completed at the old deadline, long before the new one, and
/// hyper closed the connection as timed out.
#[test]
fn a_reset_to_a_later_deadline_is_kept_at_the_pending_limit() {
    use std::task::{Context, Poll, Waker};
    let mut cx = Context::from_waker(Waker::noop());
    let mut at = pushed_back_at_the_limit(&mut cx);
    assert_eq!(
        at.sleep.as_mut().poll(&mut cx),
        Poll::Pending,
        "completed at the old deadline, 88 ms early"
    );
    let mut ready_at = None;
    for ms in 13..=120u64 {
        at.driver.advance(Duration::from_millis(1));
        if at.sleep.as_mut().poll(&mut cx) == Poll::Ready(()) {
            ready_at = Some(ms);
            break;
        }
    }
    let ready_at = ready_at.expect("the sleep completes");
    assert!((100..=102).contains(&ready_at), "{ready_at} ms");
}

/// As above, with hyper's next reset coming after the first timeout expired and before the
/// sleep was polled again: the sleep, pushed back, has not completed, and the reset that
/// re-arms it continues its own wait at the pending limit; refused, it completed at once.
#[test]
fn a_second_reset_after_the_first_timeout_expired_is_kept_at_the_pending_limit() {
    use std::task::{Context, Poll, Waker};
    let mut cx = Context::from_waker(Waker::noop());
    let mut at = pushed_back_at_the_limit(&mut cx);
    let later = at.start + Duration::from_millis(150);
    at.hyper_timer.reset(&mut at.sleep, later);
    assert_eq!(
        at.sleep.as_mut().poll(&mut cx),
        Poll::Pending,
        "completed at once, long before its deadline"
    );
}

/// A sleep pushed back by hyper's `reset` to a deadline in the tick its timeout was armed for:
/// completed at the end of that tick, as a sleep made for the new deadline would be. The
/// timeout that expired at the end of that tick armed the rest of the wait, a deadline passed
/// already, which the wheel took at the next tick: the sleep completed a tick later.
#[test]
fn a_reset_to_a_later_deadline_in_the_armed_tick_completes_at_that_ticks_end() {
    use std::task::{Context, Poll, Waker};
    let tick = Duration::from_millis(10);
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(tick)
        .build_manual()
        .unwrap();
    let hyper_timer = HyperTimer::new(timer.handle());
    let mut cx = Context::from_waker(Waker::noop());
    let mut sleep = hyper_timer.sleep(Duration::from_millis(100));
    assert!(sleep.as_mut().poll(&mut cx).is_pending());
    // Pushed back within tick 10, [100 ms, 110 ms).
    hyper_timer.reset(&mut sleep, Instant::now() + Duration::from_millis(105));
    for _ in 0..10 {
        driver.advance(tick);
        assert_eq!(sleep.as_mut().poll(&mut cx), Poll::Pending, "never early");
    }
    driver.advance(tick);
    assert_eq!(driver.now(), Duration::from_millis(110));
    let elapsed = |sleep: &mut std::pin::Pin<Box<dyn hyper::rt::Sleep>>| {
        let ours = sleep.as_mut().downcast_mut_pin::<HyperSleep>().unwrap();
        ours.get_ref().is_elapsed()
    };
    assert!(elapsed(&mut sleep), "polling now completes it");
    assert_eq!(
        sleep.as_mut().poll(&mut cx),
        Poll::Ready(()),
        "complete at the end of its deadline's tick, not a tick later"
    );
    assert!(elapsed(&mut sleep));
    driver.advance(tick);
    assert_eq!(timer.pending_timeouts(), 0);
}
