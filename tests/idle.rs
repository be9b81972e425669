//! The worker never wakes for nothing: an idle timer (nothing due for an hour) does not tick,
//! and a producer whose timeout is due before the worker's planned wake-up wakes it.
//!
//! These run on the real worker thread (the point is its sleeping); the assertions are on
//! counts, not on timing, so a slow machine only makes them take longer, never fail.

use hashed_timer_wheel::{HashedWheelTimer, Timeout};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(10);

fn one_ms_timer() -> HashedWheelTimer {
    HashedWheelTimer::new(Duration::from_millis(1), 512)
}

/// Waits until the worker has gone to sleep: its wake-up count stops moving.
fn settle(timer: &HashedWheelTimer) -> u64 {
    let mut last = timer.stats().wakeups;
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = timer.stats().wakeups;
        if now == last {
            return now;
        }
        last = now;
    }
}

#[test]
fn a_timer_with_one_far_timeout_does_not_wake() {
    let timer = one_ms_timer();
    timer
        .new_timeout(|_: &Timeout| {}, Duration::from_secs(3600))
        .unwrap();
    let before = settle(&timer);
    // Netty's worker would wake about 300 times here (one wake-up per 1 ms tick).
    std::thread::sleep(Duration::from_millis(300));
    let after = timer.stats().wakeups;
    assert_eq!(after, before, "the worker woke while nothing was due");
}

#[test]
fn a_timer_with_nothing_pending_does_not_wake() {
    let timer = one_ms_timer();
    let (tx, rx) = mpsc::channel();
    timer
        .new_timeout(move |_: &Timeout| tx.send(()).unwrap(), Duration::ZERO)
        .unwrap();
    rx.recv_timeout(PATIENCE).unwrap();
    let before = settle(&timer);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(timer.stats().wakeups, before);
    assert_eq!(timer.pending_timeouts(), 0);
}

#[test]
fn an_earlier_deadline_wakes_a_sleeping_worker() {
    let timer = one_ms_timer();
    timer
        .new_timeout(|_: &Timeout| {}, Duration::from_secs(3600))
        .unwrap();
    settle(&timer);
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    timer
        .new_timeout(
            move |_: &Timeout| tx.send(start.elapsed()).unwrap(),
            Duration::from_millis(20),
        )
        .unwrap();
    let elapsed = rx
        .recv_timeout(PATIENCE)
        .expect("the sleeping worker was never woken for the earlier timeout");
    assert!(
        elapsed >= Duration::from_millis(20),
        "fired early: {elapsed:?}"
    );
}

#[test]
fn a_cancel_wakes_a_sleeping_worker_to_free_the_timeout() {
    let timer = one_ms_timer();
    let far = timer
        .new_timeout(|_: &Timeout| {}, Duration::from_secs(3600))
        .unwrap();
    let before = settle(&timer);
    assert_eq!(timer.pending_timeouts(), 1);
    assert!(far.cancel());
    // The worker was parked until the hour is up; the cancel must wake it to free the timeout
    // within about a tick (Netty #2541), not an hour later.
    let deadline = Instant::now() + PATIENCE;
    while timer.pending_timeouts() != 0 {
        assert!(
            Instant::now() < deadline,
            "cancelled timeout never processed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let after = settle(&timer);
    assert!(
        after - before <= 3,
        "processing one cancel took {} wake-ups",
        after - before
    );
}

#[test]
fn a_stop_wakes_a_parked_worker() {
    let timer = one_ms_timer();
    let (tx, rx) = mpsc::channel();
    timer
        .new_timeout(move |_: &Timeout| tx.send(()).unwrap(), Duration::ZERO)
        .unwrap();
    rx.recv_timeout(PATIENCE).unwrap();
    settle(&timer); // parked with no deadline
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let left = timer.stop().unwrap();
        done_tx.send(left.len()).unwrap();
    });
    assert_eq!(done_rx.recv_timeout(PATIENCE), Ok(0), "stop() hung");
}

/// A worker asleep until a far deadline (a timeout an hour away, on a tick of ten minutes) is
/// woken by `stop()`, which returns that timeout at once rather than at the end of the tick.
#[test]
fn a_stop_wakes_a_worker_sleeping_until_a_far_deadline() {
    let timer = HashedWheelTimer::new(Duration::from_secs(600), 8);
    let far = timer
        .new_timeout(|_: &Timeout| {}, Duration::from_secs(3600))
        .unwrap();
    settle(&timer); // asleep until the end of the tick, ten minutes away
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || done_tx.send(timer.stop().unwrap()).unwrap());
    let returned = done_rx.recv_timeout(PATIENCE).expect("stop() hung");
    assert_eq!(returned, [far]);
}
