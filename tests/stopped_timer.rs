//! What keeps a timer running, adapter by adapter, with no logger installed: the owner built
//! and dropped in a set-up function, each adapter keeps its timer running (its sleeps, calls
//! and items wait their time, not fail at once), and the last one to go stops it. An adapter
//! built on a stopped timer panics, naming itself and the cause; one used after `stop()` fails
//! with an error value where it has one (tower), else panics (hyper, the `DelayQueue`).
//!
//! A binary of its own, with no logger: nothing here may depend on a log line being seen.

use hashed_timer_wheel::{DelayQueue, HashedWheelTimer, TimerHandle};
use std::future::poll_fn;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(1);

/// A timer built and dropped here, as in a set-up function: what `make` builds on its handle
/// outlives the owner, with a handle to watch the timer by.
fn set_up<T>(make: impl FnOnce(TimerHandle) -> T) -> (T, TimerHandle) {
    let owner = HashedWheelTimer::new(TICK, 512);
    let handle = owner.handle();
    (make(owner.handle()), handle)
}

/// A handle on a timer whose owner is gone, with nothing else on it: stopped.
fn stopped_handle() -> TimerHandle {
    let owner = HashedWheelTimer::new(TICK, 64);
    owner.handle()
}

/// The message `f` panicked with.
fn panic_message(f: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(f)).expect_err("panics");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

fn assert_names_the_cause(message: &str, adapter: &str) {
    assert!(
        message.contains(&format!("{adapter} on a stopped timer")),
        "{message}"
    );
    assert!(message.contains("stop() was called"), "{message}");
}

#[cfg(feature = "hyper")]
mod hyper_timer {
    use super::*;
    use hashed_timer_wheel::HyperTimer;
    use hyper::rt::Timer;

    #[test]
    fn a_hyper_timer_keeps_its_timer_running_after_the_owner_is_dropped() {
        let (hyper_timer, handle) = set_up(HyperTimer::new);
        assert!(!handle.is_stopped(), "the HyperTimer keeps it running");
        let start = Instant::now();
        futures::executor::block_on(hyper_timer.sleep(Duration::from_millis(20)));
        assert!(
            start.elapsed() >= Duration::from_millis(20),
            "a sleep, not a timeout at once"
        );
        // A sleep hyper holds keeps it running after its `HyperTimer` goes.
        let sleep = hyper_timer.sleep(Duration::from_millis(10));
        drop(hyper_timer);
        assert!(!handle.is_stopped(), "the HyperSleep keeps it running");
        let start = Instant::now();
        futures::executor::block_on(sleep);
        assert!(start.elapsed() >= Duration::from_millis(10));
        assert!(handle.is_stopped(), "the last user went: stopped");
    }

    #[test]
    fn a_hyper_timer_on_a_stopped_timer_panics() {
        let message = panic_message(|| drop(HyperTimer::new(stopped_handle())));
        assert_names_the_cause(&message, "HyperTimer");
        // Stopped under it: a waiting sleep completes (no connection hangs), a new one panics.
        let (hyper_timer, handle) = set_up(HyperTimer::new);
        let waiting = hyper_timer.sleep(Duration::from_secs(60));
        drop(handle.stop());
        futures::executor::block_on(waiting);
        let message = panic_message(|| drop(hyper_timer.sleep(Duration::from_secs(1))));
        assert_names_the_cause(&message, "HyperTimer");
    }
}

#[cfg(feature = "tower")]
mod timeout_layer {
    use super::*;
    use hashed_timer_wheel::{TimeoutLayer, TimeoutService, TimerError};
    use std::convert::Infallible;
    use std::future::Future;
    use tower::timeout::error::Elapsed;
    use tower::{service_fn, Service, ServiceBuilder, ServiceExt};

    fn never(_: u32) -> std::future::Pending<Result<u32, Infallible>> {
        std::future::pending()
    }

    #[test]
    fn a_timeout_layer_keeps_its_timer_running_after_the_owner_is_dropped() {
        let (layer, handle) = set_up(|h| TimeoutLayer::new(h, Duration::from_millis(20)));
        let slow = ServiceBuilder::new()
            .layer(layer)
            .service(service_fn(never));
        let start = Instant::now();
        // `oneshot` drops the service once called: the response keeps the timer running.
        let error = futures::executor::block_on(slow.oneshot(1)).unwrap_err();
        assert!(
            error.is::<Elapsed>(),
            "a timeout, not the timer stopped: {error}"
        );
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert!(handle.is_stopped(), "the last user went: stopped");
    }

    #[test]
    fn a_timeout_service_fails_with_stopped_once_its_timer_is_stopped() {
        let message = panic_message(|| drop(TimeoutLayer::new(stopped_handle(), TICK)));
        assert_names_the_cause(&message, "TimeoutLayer");
        let message = panic_message(|| drop(TimeoutService::new((), stopped_handle(), TICK)));
        assert_names_the_cause(&message, "TimeoutService");
        // Stopped under it: an error value from `poll_ready`, and from a response in flight.
        let (mut service, handle) =
            set_up(|h| TimeoutService::new(service_fn(never), h, Duration::from_secs(60)));
        let mut in_flight = Box::pin(service.call(1));
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        assert!(in_flight.as_mut().poll(&mut cx).is_pending());
        drop(handle.stop());
        let std::task::Poll::Ready(Err(error)) = in_flight.as_mut().poll(&mut cx) else {
            panic!("stopped: no hang")
        };
        assert_eq!(
            error.downcast_ref::<TimerError>(),
            Some(&TimerError::Stopped)
        );
        let std::task::Poll::Ready(Err(error)) = service.poll_ready(&mut cx) else {
            panic!("not ready")
        };
        assert_eq!(
            error.downcast_ref::<TimerError>(),
            Some(&TimerError::Stopped)
        );
    }
}

#[test]
fn a_delay_queue_keeps_its_timer_running_after_the_owner_is_dropped() {
    let (mut queue, handle) = set_up(DelayQueue::new);
    let start = Instant::now();
    queue.insert("idle", Duration::from_millis(20));
    let item = futures::executor::block_on(poll_fn(|cx| queue.poll_expired(cx)));
    assert_eq!(
        item.map(|e| e.into_inner()),
        Some("idle"),
        "the stream goes on"
    );
    assert!(start.elapsed() >= Duration::from_millis(20));
    assert!(!handle.is_stopped());
    drop(queue);
    assert!(handle.is_stopped(), "the last user went: stopped");
}

#[test]
fn a_delay_queue_on_a_stopped_timer_panics() {
    let message = panic_message(|| drop(DelayQueue::<u32>::new(stopped_handle())));
    assert_names_the_cause(&message, "DelayQueue");
    // Stopped under it: what is due comes out, then the wait for the rest panics.
    let (mut queue, handle) = set_up(DelayQueue::new);
    queue.insert("due", Duration::ZERO);
    queue.insert("later", Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(5));
    drop(handle.stop());
    let due = futures::executor::block_on(poll_fn(|cx| queue.poll_expired(cx)));
    assert_eq!(due.map(|e| e.into_inner()), Some("due"));
    let message = panic_message(|| {
        futures::executor::block_on(poll_fn(|cx| queue.poll_expired(cx)));
    });
    assert_names_the_cause(&message, "DelayQueue");
    // Empty, it ends as any empty queue does.
    let (mut empty, handle) = set_up(DelayQueue::<u32>::new);
    drop(handle.stop());
    let waker = std::task::Waker::noop();
    let polled = empty.poll_expired(&mut std::task::Context::from_waker(waker));
    assert!(matches!(polled, std::task::Poll::Ready(None)));
}

/// The last user dropped in one of the timer's own tasks, on its worker thread: the timer
/// stops without waiting for itself (no deadlock), and the task runs to its end.
#[test]
fn the_last_adapter_dropped_in_a_task_stops_the_timer_without_deadlock() {
    let owner = HashedWheelTimer::new(TICK, 64);
    let handle = owner.handle();
    let queue: DelayQueue<u32> = DelayQueue::new(owner.handle());
    let (tx, rx) = std::sync::mpsc::channel();
    let task = move |_: &hashed_timer_wheel::Timeout| {
        drop(queue);
        tx.send(()).unwrap();
    };
    owner.new_timeout(task, Duration::from_millis(5)).unwrap();
    drop(owner);
    assert!(
        !handle.is_stopped(),
        "the queue, in the task, keeps it running"
    );
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the task ran to its end");
    assert!(handle.is_stopped());
}
