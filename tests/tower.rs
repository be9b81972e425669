//! The tower timeout layer: in `ServiceBuilder` stacks and through `ServiceExt::oneshot`, on
//! the manual clock where time matters (the deadline wins, never early; a dropped response
//! cancels its timeout) and under tokio: the inner response wins, inner errors and
//! `poll_ready` pass through, a stopped timer fails the call. A timeout is tower's own
//! `Elapsed`: code ported from `tower::timeout` matches it unchanged.
#![cfg(feature = "tower")]

use hashed_timer_wheel::{
    HashedWheelTimer, ManualDriver, TimeoutLayer, TimeoutService, TimerError,
};
use std::convert::Infallible;
use std::future::{pending, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use tower::timeout::error::Elapsed;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};

const TICK: Duration = Duration::from_millis(1);

fn manual() -> (HashedWheelTimer, ManualDriver) {
    HashedWheelTimer::builder()
        .tick_duration(TICK)
        .ticks_per_wheel(64)
        .build_manual()
        .unwrap()
}

#[derive(Default)]
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn poll<F: Future>(f: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(waker))
}

fn never(_: u32) -> impl Future<Output = Result<u32, Infallible>> {
    pending()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap()
}

#[test]
fn the_deadline_wins_never_early() {
    let (timer, driver) = manual();
    let service = ServiceBuilder::new()
        .layer(TimeoutLayer::new(timer.handle(), Duration::from_millis(50)))
        .service(service_fn(never));
    let counter = Arc::new(Counter::default());
    let waker = Waker::from(counter.clone());
    let mut call = Box::pin(service.oneshot(1));
    assert!(poll(call.as_mut(), &waker).is_pending());
    driver.advance(Duration::from_millis(49));
    assert!(poll(call.as_mut(), &waker).is_pending(), "never early");
    assert_eq!(counter.0.load(SeqCst), 0);
    driver.advance(Duration::from_millis(2));
    assert_eq!(counter.0.load(SeqCst), 1, "woken once at the deadline");
    let Poll::Ready(Err(error)) = poll(call.as_mut(), &waker) else {
        panic!("the deadline passed")
    };
    assert!(error.is::<Elapsed>(), "{error}");
    assert_eq!(timer.pending_timeouts(), 0);
}

/// tower's meaning (`tower::timeout::Timeout::call` starts its sleep): the limit counts from
/// `call`. A response first polled 30 ms after a call with a 50 ms limit fails at 50 ms, not 80.
#[test]
fn the_limit_counts_from_call_as_towers() {
    let (timer, driver) = manual();
    let mut service = ServiceBuilder::new()
        .layer(TimeoutLayer::new(timer.handle(), Duration::from_millis(50)))
        .service(service_fn(never));
    let waker = Waker::from(Arc::new(Counter::default()));
    let mut call = Box::pin(service.call(1));
    driver.advance(Duration::from_millis(30));
    assert!(poll(call.as_mut(), &waker).is_pending());
    driver.advance(Duration::from_millis(19));
    assert!(poll(call.as_mut(), &waker).is_pending(), "never early");
    driver.advance(Duration::from_millis(2));
    let Poll::Ready(Err(error)) = poll(call.as_mut(), &waker) else {
        panic!("at 50 ms from the call, not 80")
    };
    assert!(error.is::<Elapsed>(), "{error}");
    // Polled first after its limit: it fails at that poll, scheduling nothing.
    let mut late = Box::pin(service.call(2));
    driver.advance(Duration::from_millis(60));
    let Poll::Ready(Err(error)) = poll(late.as_mut(), &waker) else {
        panic!("past its limit")
    };
    assert!(error.is::<Elapsed>(), "{error}");
}

#[test]
fn a_dropped_response_future_cancels_its_timeout() {
    let (timer, driver) = manual();
    let mut service = ServiceBuilder::new()
        .layer(TimeoutLayer::new(timer.handle(), Duration::from_secs(30)))
        .service(service_fn(never));
    let waker = Waker::from(Arc::new(Counter::default()));
    let mut calls: Vec<_> = (0..10).map(|i| Box::pin(service.call(i))).collect();
    assert_eq!(
        timer.pending_timeouts(),
        0,
        "nothing scheduled before a poll"
    );
    for call in &mut calls {
        assert!(poll(call.as_mut(), &waker).is_pending());
    }
    assert_eq!(timer.pending_timeouts(), 10);
    drop(calls);
    driver.advance(TICK);
    assert_eq!(timer.pending_timeouts(), 0);
}

#[test]
fn the_inner_response_wins_and_its_timeout_goes() {
    let timer = HashedWheelTimer::new(TICK, 512);
    let service = ServiceBuilder::new()
        .layer(TimeoutLayer::new(timer.handle(), Duration::from_secs(1)))
        .map_response(|x: u32| x * 2)
        .service(service_fn(
            |x: u32| async move { Ok::<_, Infallible>(x + 1) },
        ));
    let (handle, layer_handle) = (timer.handle(), timer.handle());
    let out = rt().block_on(async move {
        let slow_enough = service_fn(move |x: u32| {
            let sleep = handle.sleep(Duration::from_millis(5));
            async move {
                sleep.await.unwrap();
                Ok::<_, Infallible>(x)
            }
        });
        let delayed = ServiceBuilder::new()
            .layer(TimeoutLayer::new(layer_handle, Duration::from_secs(1)))
            .service(slow_enough);
        let a = tokio::time::timeout(Duration::from_secs(5), service.oneshot(20)).await;
        let b = tokio::time::timeout(Duration::from_secs(5), delayed.oneshot(7)).await;
        (a.expect("bounded").unwrap(), b.expect("bounded").unwrap())
    });
    assert_eq!(out, (42, 7));
    // The deadlines were cancelled when the responses won.
    let start = std::time::Instant::now();
    while timer.pending_timeouts() > 0 {
        assert!(start.elapsed() < Duration::from_secs(5));
        std::thread::sleep(TICK);
    }
}

#[test]
fn the_inner_errors_pass_through_boxed() {
    let timer = HashedWheelTimer::new(TICK, 64);
    let service = ServiceBuilder::new()
        .layer(TimeoutLayer::new(timer.handle(), Duration::from_secs(1)))
        .service(service_fn(|_: ()| async {
            Err::<(), _>(std::io::Error::other("backend down"))
        }));
    let error = futures::executor::block_on(service.oneshot(())).unwrap_err();
    let io = error
        .downcast_ref::<std::io::Error>()
        .expect("the inner error");
    assert_eq!(io.to_string(), "backend down");
    assert!(!error.is::<Elapsed>());
}

/// A service that is not ready once, then fails `poll_ready`.
struct Flaky(usize);

impl Service<()> for Flaky {
    type Response = ();
    type Error = BoxError;
    type Future = std::future::Ready<Result<(), BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0 += 1;
        match self.0 {
            1 => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            2 => Poll::Ready(Ok(())),
            _ => Poll::Ready(Err("overloaded".into())),
        }
    }

    fn call(&mut self, (): ()) -> Self::Future {
        std::future::ready(Ok(()))
    }
}

#[test]
fn poll_ready_passes_through() {
    let timer = HashedWheelTimer::new(TICK, 64);
    let mut service = TimeoutService::new(Flaky(0), timer.handle(), Duration::from_secs(1));
    let waker = Waker::from(Arc::new(Counter::default()));
    let mut cx = Context::from_waker(&waker);
    assert!(service.poll_ready(&mut cx).is_pending());
    assert!(matches!(service.poll_ready(&mut cx), Poll::Ready(Ok(()))));
    let Poll::Ready(Err(error)) = service.poll_ready(&mut cx) else {
        panic!("the inner service's error")
    };
    assert_eq!(error.to_string(), "overloaded");
    assert_eq!(service.get_ref().0, 3);
    assert_eq!(timer.pending_timeouts(), 0, "poll_ready schedules nothing");
}

#[test]
fn nested_layers_the_tighter_limit_fires() {
    let timer = HashedWheelTimer::new(TICK, 512);
    let service = ServiceBuilder::new()
        .layer(TimeoutLayer::new(timer.handle(), Duration::from_secs(10)))
        .layer(TimeoutLayer::new(timer.handle(), Duration::from_millis(20)))
        .service(service_fn(never));
    let start = std::time::Instant::now();
    let error = rt()
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(5), service.oneshot(0))
                .await
                .expect("bounded")
        })
        .unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(20), "never early");
    assert!(error.is::<Elapsed>());
}

#[test]
fn a_stopped_timer_fails_the_call_with_its_error() {
    let (timer, _driver) = manual();
    let service = ServiceBuilder::new()
        .layer(TimeoutLayer::new(timer.handle(), Duration::from_secs(1)))
        .service(service_fn(never));
    let waker = Waker::from(Arc::new(Counter::default()));
    let mut call = Box::pin(service.clone().oneshot(0));
    assert!(poll(call.as_mut(), &waker).is_pending());
    drop(timer.stop());
    let Poll::Ready(Err(error)) = poll(call.as_mut(), &waker) else {
        panic!("stopped: no hang")
    };
    assert_eq!(
        error.downcast_ref::<TimerError>(),
        Some(&TimerError::Stopped)
    );
    // A call made after the stop fails at once: its service is not ready.
    let error = futures::executor::block_on(service.oneshot(0)).unwrap_err();
    assert!(error.is::<TimerError>());
}

/// What a service ported from `tower::timeout` does with a call's error: a timeout is a 504,
/// anything else a 500.
fn status(error: &BoxError) -> u16 {
    if error.is::<tower::timeout::error::Elapsed>() {
        504
    } else {
        500
    }
}

#[test]
fn a_timeout_is_towers_own_elapsed_as_with_towers_layer() {
    let timer = HashedWheelTimer::new(TICK, 512);
    let ours = ServiceBuilder::new()
        .layer(TimeoutLayer::new(timer.handle(), Duration::from_millis(5)))
        .service(service_fn(never));
    let theirs = ServiceBuilder::new()
        .layer(tower::timeout::TimeoutLayer::new(Duration::from_millis(5)))
        .service(service_fn(never));
    let (ours, theirs) = rt().block_on(async {
        let ours = tokio::time::timeout(Duration::from_secs(5), ours.oneshot(0)).await;
        let theirs = tokio::time::timeout(Duration::from_secs(5), theirs.oneshot(0)).await;
        (ours.expect("bounded"), theirs.expect("bounded"))
    });
    let (ours, theirs) = (ours.unwrap_err(), theirs.unwrap_err());
    assert_eq!((status(&ours), status(&theirs)), (504, 504));
    assert_eq!(ours.to_string(), theirs.to_string());
}

/// A response ready when polled wins even once the timer is stopped (the inner response is
/// polled first, as `tower::timeout` does); a dropped owner no longer stops the timer under the
/// layer, which formerly made every slow call fail.
#[test]
fn a_stopped_timer_still_returns_a_ready_response() {
    let (timer, _driver) = manual();
    let mut service = ServiceBuilder::new()
        .layer(TimeoutLayer::new(timer.handle(), Duration::from_secs(1)))
        .service(service_fn(|x: u32| async move { Ok::<_, Infallible>(x) }));
    let handle = timer.handle();
    drop(timer);
    assert!(!handle.is_stopped(), "the layer keeps the timer running");
    let response = service.call(5);
    drop(handle.stop());
    assert_eq!(futures::executor::block_on(response).unwrap(), 5);
}
