//! An adapter on a stopped timer says so: the handle of a dropped owner refuses every sleep,
//! which hyper would take for a timeout on every connection, and a tower stack for a failure
//! of every call. Each adapter logs an error naming itself and the likely cause, once per
//! process, the first time it is built on, or asks for a sleep or a deadline from, a stopped
//! timer; nothing while the timer runs.
//!
//! A binary of its own: the error is logged once per process, so no test that is not about it
//! may stop a timer under an adapter before the logger below is installed.

use hashed_timer_wheel::{DelayQueue, HashedWheelTimer, TimerHandle};
use std::sync::{Mutex, Once};
use std::time::Duration;

static RECORDS: Mutex<Vec<(log::Level, String)>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        RECORDS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((record.level(), record.args().to_string()));
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture;

fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_logger(&CAPTURE).unwrap();
        log::set_max_level(log::LevelFilter::Trace);
    });
}

/// The errors logged so far that name `adapter` as on a stopped timer.
fn errors_naming(adapter: &str) -> Vec<String> {
    let needle = format!("{adapter} on a stopped timer");
    RECORDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(level, message)| *level == log::Level::Error && message.contains(&needle))
        .map(|(_, message)| message.clone())
        .collect()
}

/// A running timer and a handle to it; the caller drops the owner to make the mistake.
fn timer() -> (HashedWheelTimer, TimerHandle) {
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    let handle = timer.handle();
    (timer, handle)
}

fn assert_logged_once_with_the_cause(adapter: &str) {
    let errors = errors_naming(adapter);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("HashedWheelTimer, was dropped"),
        "{}",
        errors[0]
    );
}

#[cfg(feature = "hyper")]
#[test]
fn hyper_timer_logs_a_dropped_owner_once() {
    use hashed_timer_wheel::HyperTimer;
    use hyper::rt::Timer;

    init();
    let (owner, handle) = timer();
    let hyper_timer = HyperTimer::new(handle);
    futures::executor::block_on(hyper_timer.sleep(Duration::from_millis(2)));
    assert!(errors_naming("HyperTimer").is_empty(), "a running timer");

    drop(owner);
    for _ in 0..3 {
        // Each completes at once: what hyper takes for a header-read timeout.
        futures::executor::block_on(hyper_timer.sleep(Duration::from_secs(60)));
    }
    assert_logged_once_with_the_cause("HyperTimer");
}

#[cfg(feature = "tower")]
#[test]
fn timeout_layer_logs_a_dropped_owner_once() {
    use hashed_timer_wheel::{TimeoutLayer, TimerError};
    use std::convert::Infallible;
    use tower::{service_fn, ServiceBuilder, ServiceExt};

    init();
    let (owner, handle) = timer();
    let service = ServiceBuilder::new()
        .layer(TimeoutLayer::new(handle, Duration::from_secs(60)))
        .service(service_fn(|_: ()| {
            std::future::pending::<Result<(), Infallible>>()
        }));
    assert!(errors_naming("TimeoutLayer").is_empty(), "a running timer");

    drop(owner);
    for _ in 0..3 {
        let error = futures::executor::block_on(service.clone().oneshot(())).unwrap_err();
        assert_eq!(
            error.downcast_ref::<TimerError>(),
            Some(&TimerError::Stopped)
        );
    }
    assert_logged_once_with_the_cause("TimeoutLayer");
}

#[test]
fn delay_queue_logs_a_stopped_timer_once() {
    init();
    let (owner, handle) = timer();
    let _running: DelayQueue<u32> = DelayQueue::new(handle.clone());
    assert!(errors_naming("DelayQueue").is_empty(), "a running timer");

    drop(owner);
    let _a: DelayQueue<u32> = DelayQueue::new(handle.clone());
    let _b: DelayQueue<u32> = DelayQueue::with_capacity(handle, 8);
    assert_logged_once_with_the_cause("DelayQueue");
}
