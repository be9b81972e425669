//! The futures on the wheel (`Sleep`, `Deadline`): on the manual clock, polled by hand with
//! counting wakers (never early, at most a tick late, one wake-up; drop cancels; the last
//! poll's waker is the one woken; `stop()` and a dropped owner complete them with an error;
//! `reset`; refusals), mixed with tasks' timeouts in one queue; and driven for real by tokio
//! (current-thread and multi-thread), `futures`' `block_on` and smol.

mod common;

use common::{calling_back_waker, no_hook, once, within_30_s};
use hashed_timer_wheel::{
    DeadlineError, HashedWheelTimer, ManualDriver, Sleep, Timeout, TimerError,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(10);

fn manual() -> (HashedWheelTimer, ManualDriver) {
    HashedWheelTimer::builder()
        .tick_duration(TICK)
        .ticks_per_wheel(8)
        .build_manual()
        .unwrap()
}

/// A waker that counts its wake-ups.
use common::WakeCount as Counter;

fn counter() -> (Arc<Counter>, Waker) {
    let c = Arc::new(Counter::default());
    (c.clone(), Waker::from(c))
}

fn wakes(c: &Counter) -> usize {
    c.0.load(SeqCst)
}

fn poll<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}

/// Advances the manual clock one tick at a time up to `to`.
fn step_to(driver: &ManualDriver, to: Duration) {
    while driver.now() < to {
        driver.advance(TICK.min(to - driver.now()));
    }
}

#[test]
fn a_sleep_completes_at_its_deadline_with_one_wake_up() {
    let (timer, driver) = manual();
    let (count, waker) = counter();
    let mut sleep = timer.sleep(Duration::from_millis(35));
    assert_eq!(poll(&mut sleep, &waker), Poll::Pending);
    assert_eq!(timer.pending_timeouts(), 1);
    // Tick by tick: nothing before the deadline.
    while driver.now() < Duration::from_millis(35) {
        assert_eq!(wakes(&count), 0, "woken early, at {:?}", driver.now());
        assert_eq!(poll(&mut sleep, &waker), Poll::Pending);
        assert!(!sleep.is_elapsed());
        driver.advance(TICK);
    }
    // The tick that holds the deadline ends at 40 ms: Netty's firing tick.
    assert_eq!(driver.now(), Duration::from_millis(40));
    assert_eq!(wakes(&count), 1);
    assert!(sleep.is_elapsed());
    assert_eq!(poll(&mut sleep, &waker), Poll::Ready(Ok(())));
    assert_eq!(
        poll(&mut sleep, &waker),
        Poll::Ready(Ok(())),
        "ready stays ready"
    );
    driver.advance(TICK * 3);
    assert_eq!(wakes(&count), 1, "one wake-up only");
    assert_eq!(timer.pending_timeouts(), 0);
    assert_eq!(timer.stats().expired, 1);
    drop(sleep);
    assert_eq!(
        Arc::strong_count(&count),
        2,
        "the waker was not kept: ours and `waker`"
    );
}

#[test]
fn dropping_a_sleep_cancels_its_timeout_and_lets_go_of_its_waker() {
    let (timer, driver) = manual();
    let (count, waker) = counter();
    let mut in_wheel = timer.sleep(Duration::from_millis(50));
    assert_eq!(poll(&mut in_wheel, &waker), Poll::Pending);
    driver.advance(TICK); // transferred into the wheel
    let mut queued = timer.sleep(Duration::from_millis(50));
    assert_eq!(poll(&mut queued, &waker), Poll::Pending);
    assert_eq!(timer.pending_timeouts(), 2);
    assert_eq!(Arc::strong_count(&count), 4, "two slots hold the waker");
    drop(in_wheel);
    drop(queued);
    driver.advance(TICK);
    assert_eq!(timer.pending_timeouts(), 0, "freed within a tick");
    assert_eq!(timer.stats().cancelled, 2);
    assert_eq!(
        Arc::strong_count(&count),
        2,
        "the worker dropped both wakers"
    );
    driver.advance(TICK * 10);
    assert_eq!(wakes(&count), 0);
}

#[test]
fn the_last_poll_s_waker_is_the_one_woken() {
    let (timer, driver) = manual();
    let (first, first_waker) = counter();
    let (second, second_waker) = counter();
    let mut sleep = timer.sleep(TICK);
    assert_eq!(poll(&mut sleep, &first_waker), Poll::Pending);
    assert_eq!(poll(&mut sleep, &second_waker), Poll::Pending);
    assert_eq!(poll(&mut sleep, &second_waker), Poll::Pending);
    assert_eq!(
        Arc::strong_count(&first),
        2,
        "the replaced waker is dropped"
    );
    step_to(&driver, TICK * 3);
    assert_eq!((wakes(&first), wakes(&second)), (0, 1));
    assert_eq!(poll(&mut sleep, &first_waker), Poll::Ready(Ok(())));
}

#[test]
fn stop_completes_waiting_sleeps_with_stopped_and_does_not_return_them() {
    let (timer, driver) = manual();
    let (count, waker) = counter();
    let mut in_wheel = timer.sleep(Duration::from_secs(1));
    assert_eq!(poll(&mut in_wheel, &waker), Poll::Pending);
    driver.advance(TICK);
    let mut queued = timer.sleep(Duration::from_secs(1));
    assert_eq!(poll(&mut queued, &waker), Poll::Pending);
    let task = timer
        .new_timeout(|_: &Timeout| {}, Duration::from_secs(1))
        .unwrap();
    let returned = timer.stop().unwrap();
    assert_eq!(returned, vec![task], "only the task's timeout comes back");
    assert_eq!(wakes(&count), 2, "both sleeps woken");
    assert_eq!(
        poll(&mut in_wheel, &waker),
        Poll::Ready(Err(TimerError::Stopped))
    );
    assert_eq!(
        poll(&mut queued, &waker),
        Poll::Ready(Err(TimerError::Stopped))
    );
    assert_eq!(Arc::strong_count(&count), 2, "no slot keeps the waker");
    // Made after the stop: refused at once.
    let mut late = timer.sleep(Duration::ZERO);
    assert_eq!(
        poll(&mut late, &waker),
        Poll::Ready(Err(TimerError::Stopped))
    );
}

#[test]
fn dropping_the_owner_completes_waiting_sleeps_with_stopped() {
    let timer = HashedWheelTimer::new(TICK, 8);
    let handle = timer.handle();
    let (count, waker) = counter();
    let mut sleep = handle.sleep(Duration::from_secs(60));
    assert_eq!(poll(&mut sleep, &waker), Poll::Pending);
    drop(timer);
    assert_eq!(wakes(&count), 1);
    assert_eq!(
        poll(&mut sleep, &waker),
        Poll::Ready(Err(TimerError::Stopped))
    );
}

#[test]
fn the_pending_limit_refuses_a_sleep_until_room_is_made() {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(TICK)
        .max_pending_timeouts(1)
        .build_manual()
        .unwrap();
    let (_, waker) = counter();
    let first = timer.sleep(Duration::from_secs(1));
    let mut refused = timer.sleep(Duration::from_secs(1));
    assert_eq!(
        poll(&mut refused, &waker),
        Poll::Ready(Err(TimerError::TooManyPending { pending: 1, max: 1 }))
    );
    assert_eq!(timer.stats().refused, 1);
    drop(first);
    driver.advance(TICK);
    // A reset schedules again: now there is room.
    refused.reset_after(TICK);
    assert_eq!(poll(&mut refused, &waker), Poll::Pending);
    step_to(&driver, TICK * 4);
    assert_eq!(poll(&mut refused, &waker), Poll::Ready(Ok(())));
}

/// At the pending limit, a reset replaces the sleep's own pending timeout rather than adding
/// one: it is not refused (idle detection resets on every message, and hyper's connection
/// timeouts would otherwise fire at once). A sleep with nothing pending is still refused.
#[test]
fn a_reset_at_the_pending_limit_replaces_its_own_timeout() {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(TICK)
        .max_pending_timeouts(2)
        .build_manual()
        .unwrap();
    let (count, waker) = counter();
    let mut idle = timer.sleep(Duration::from_secs(1));
    let _other = timer.sleep(Duration::from_secs(1));
    assert_eq!(poll(&mut idle, &waker), Poll::Pending);
    for step in 1..=4u32 {
        // Later, then earlier: each replaces the one before, all within one tick.
        idle.reset_after(Duration::from_millis(if step % 2 == 1 { 500 } else { 30 }));
        assert_eq!(
            poll(&mut idle, &waker),
            Poll::Pending,
            "reset {step} refused"
        );
    }
    // The cancels are counted by the worker's next tick; until then a new sleep is refused.
    let mut third = timer.sleep(Duration::from_secs(1));
    assert!(matches!(
        poll(&mut third, &waker),
        Poll::Ready(Err(TimerError::TooManyPending { max: 2, .. }))
    ));
    step_to(&driver, Duration::from_millis(29));
    assert_eq!(wakes(&count), 0, "fired before its last deadline");
    assert_eq!(timer.pending_timeouts(), 2);
    step_to(&driver, Duration::from_millis(40));
    assert_eq!(poll(&mut idle, &waker), Poll::Ready(Ok(())));
    // An elapsed sleep has nothing pending to replace: at the limit its reset is refused.
    let _fill = timer.sleep(Duration::from_secs(1));
    idle.reset_after(Duration::from_millis(10));
    assert!(matches!(
        poll(&mut idle, &waker),
        Poll::Ready(Err(TimerError::TooManyPending { max: 2, .. }))
    ));
    assert_eq!(timer.stats().refused, 2);
}

#[test]
fn reset_moves_the_deadline_and_the_waiting_waker_with_it() {
    let (timer, driver) = manual();
    let (count, waker) = counter();
    let mut sleep = timer.sleep(Duration::from_millis(15));
    assert_eq!(poll(&mut sleep, &waker), Poll::Pending);
    // Later: not at the old deadline, at the new one; no poll in between.
    sleep.reset_after(Duration::from_millis(55));
    step_to(&driver, Duration::from_millis(50));
    assert_eq!(wakes(&count), 0, "the old deadline fired");
    step_to(&driver, Duration::from_millis(60));
    assert_eq!(
        wakes(&count),
        1,
        "the new deadline did not wake the waiting task"
    );
    assert_eq!(poll(&mut sleep, &waker), Poll::Ready(Ok(())));
    // An elapsed sleep starts again; an earlier deadline fires earlier.
    sleep.reset_after(Duration::from_secs(5));
    assert_eq!(poll(&mut sleep, &waker), Poll::Pending);
    sleep.reset_after(Duration::ZERO);
    driver.advance(TICK);
    assert_eq!(wakes(&count), 2);
    assert_eq!(poll(&mut sleep, &waker), Poll::Ready(Ok(())));
    driver.advance(Duration::from_secs(6));
    assert_eq!(
        timer.pending_timeouts(),
        0,
        "each reset cancelled the timeout before it"
    );
    assert_eq!(wakes(&count), 2);
}

/// A reset the timer refuses completes the sleep with the error, and wakes the task waiting on
/// it: another task may be the one that reset it.
#[test]
fn a_reset_at_the_limit_wakes_nobody_and_on_a_stopped_timer_fails() {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(TICK)
        .max_pending_timeouts(1)
        .build_manual()
        .unwrap();
    let (count, waker) = counter();
    let mut sleep = timer.sleep(Duration::from_secs(1));
    assert_eq!(poll(&mut sleep, &waker), Poll::Pending);
    // At the limit, a reset replaces the sleep's own pending timeout: no refusal, no wake-up.
    sleep.reset_after(Duration::from_secs(2));
    assert_eq!(wakes(&count), 0);
    assert_eq!(poll(&mut sleep, &waker), Poll::Pending);
    driver.advance(TICK);
    assert_eq!(timer.pending_timeouts(), 1);
    // On a stopped timer the waiting task is woken, and a reset fails.
    timer.stop().unwrap();
    assert_eq!(wakes(&count), 1);
    sleep.reset_after(Duration::from_secs(2));
    assert_eq!(
        poll(&mut sleep, &waker),
        Poll::Ready(Err(TimerError::Stopped))
    );
    assert_eq!(Arc::strong_count(&count), 2, "no slot keeps the waker");
}

#[test]
fn deadlines_in_the_past_are_due_at_once_and_deadline_reports_the_instant() {
    let (timer, driver) = manual();
    let (count, waker) = counter();
    let mut past = timer.sleep_until(Instant::now() - Duration::from_secs(1));
    assert_eq!(poll(&mut past, &waker), Poll::Pending);
    driver.advance(TICK);
    assert_eq!(wakes(&count), 1);
    assert_eq!(poll(&mut past, &waker), Poll::Ready(Ok(())));
    let sleep = HashedWheelTimer::default().sleep(Duration::from_secs(30));
    let ahead = sleep.deadline() - Instant::now();
    assert!(
        ahead > Duration::from_secs(29) && ahead <= Duration::from_secs(30),
        "{ahead:?}"
    );
}

#[test]
fn deadline_yields_the_output_or_elapsed_and_cancels_its_timeout() {
    let (timer, driver) = manual();
    let (_, waker) = counter();
    // The inner future wins: its output, and the deadline's timeout is cancelled.
    let (tx, rx) = futures::channel::oneshot::channel::<u32>();
    let mut call = timer.timeout(Duration::from_secs(1), rx);
    assert_eq!(poll(&mut call, &waker), Poll::Pending);
    tx.send(7).unwrap();
    assert_eq!(poll(&mut call, &waker), Poll::Ready(Ok(Ok(7))));
    drop(call);
    driver.advance(TICK);
    assert_eq!(timer.pending_timeouts(), 0);
    assert_eq!(timer.stats().cancelled, 1);
    // The deadline wins.
    let (_tx, rx) = futures::channel::oneshot::channel::<u32>();
    let mut call = timer.timeout(Duration::from_millis(20), rx);
    assert_eq!(poll(&mut call, &waker), Poll::Pending);
    step_to(&driver, Duration::from_millis(40));
    assert_eq!(
        poll(&mut call, &waker),
        Poll::Ready(Err(DeadlineError::Elapsed))
    );
    // The timer stops first.
    let mut call = timer.timeout(Duration::from_secs(1), std::future::pending::<()>());
    assert_eq!(poll(&mut call, &waker), Poll::Pending);
    timer.stop().unwrap();
    assert_eq!(
        poll(&mut call, &waker),
        Poll::Ready(Err(DeadlineError::Timer(TimerError::Stopped)))
    );
}

/// Nothing registers a deadline whose future is ready at its first poll: the timer never
/// hears of it (no timeout pending, none cancelled, none expired, the worker never woken).
#[test]
fn a_deadline_ready_at_its_first_poll_schedules_nothing() {
    let (timer, driver) = manual();
    let (count, waker) = counter();
    let mut ready = timer.timeout(Duration::from_secs(1), std::future::ready(7));
    assert_eq!(timer.pending_timeouts(), 0, "made: nothing scheduled");
    assert_eq!(poll(&mut ready, &waker), Poll::Ready(Ok(7)));
    let mut at = timer.timeout_at(
        Instant::now() + Duration::from_secs(1),
        std::future::ready(8),
    );
    assert_eq!(poll(&mut at, &waker), Poll::Ready(Ok(8)));
    // Made and dropped unpolled, or polled through a handle.
    drop(timer.timeout(Duration::from_secs(1), std::future::pending::<()>()));
    let handle = timer.handle();
    let mut through_handle = handle.timeout(Duration::from_millis(5), std::future::ready(9));
    assert_eq!(poll(&mut through_handle, &waker), Poll::Ready(Ok(9)));
    assert_eq!(timer.pending_timeouts(), 0);
    drop((ready, at, through_handle));
    driver.advance(Duration::from_secs(2));
    let stats = timer.stats();
    assert_eq!(timer.pending_timeouts(), 0);
    assert_eq!(
        (stats.cancelled, stats.expired, stats.refused),
        (0, 0, 0),
        "nothing scheduled, so nothing cancelled or expired: {stats:?}"
    );
    assert_eq!(wakes(&count), 0);
}

/// A deadline's limit counts from the call, as tokio's `timeout`: a future first polled 20 ms
/// after a 30 ms `timeout` is made fires never before 30 ms from the call, at most a tick after;
/// `timeout_at` keeps its instant.
#[test]
fn a_pending_deadline_fires_never_before_its_limit_from_the_call() {
    let (timer, driver) = manual();
    let (count, waker) = counter();
    let (_tx, rx) = futures::channel::oneshot::channel::<u32>();
    let made = driver.now();
    let mut call = timer.timeout(Duration::from_millis(30), rx);
    step_to(&driver, Duration::from_millis(20));
    assert_eq!(timer.pending_timeouts(), 0, "not scheduled before pending");
    assert_eq!(poll(&mut call, &waker), Poll::Pending);
    assert_eq!(timer.pending_timeouts(), 1, "scheduled when pending");
    let limit = made + Duration::from_millis(30);
    while wakes(&count) == 0 {
        assert!(
            driver.now() < limit + TICK,
            "not fired a tick after its limit"
        );
        assert_eq!(
            poll(&mut call, &waker),
            Poll::Pending,
            "early at {:?}",
            driver.now()
        );
        driver.advance(TICK);
    }
    assert!(driver.now() >= limit, "woken at {:?}", driver.now());
    assert_eq!(
        poll(&mut call, &waker),
        Poll::Ready(Err(DeadlineError::Elapsed))
    );
    // `timeout_at`: the instant it was given (on the manual clock, counted from the call),
    // even though its first pending poll comes later.
    let (_tx, rx) = futures::channel::oneshot::channel::<u32>();
    let made = driver.now();
    let mut call = timer.timeout_at(Instant::now() + Duration::from_millis(30), rx);
    driver.advance(Duration::from_millis(20));
    assert_eq!(poll(&mut call, &waker), Poll::Pending);
    let due = made + Duration::from_millis(30);
    while driver.now() < due {
        assert_eq!(poll(&mut call, &waker), Poll::Pending, "early");
        driver.advance(TICK);
    }
    driver.advance(TICK);
    assert_eq!(
        poll(&mut call, &waker),
        Poll::Ready(Err(DeadlineError::Elapsed)),
        "at most a tick after its instant"
    );
}

/// A manual timer with a 1 ms tick, for deadlines measured to the millisecond.
fn fine_manual() -> (HashedWheelTimer, ManualDriver) {
    HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .ticks_per_wheel(64)
        .build_manual()
        .unwrap()
}

/// Polls `call` each millisecond until it completes; the manual time it completed at.
fn ms_until_ready<F: Future + Unpin>(
    driver: &ManualDriver,
    call: &mut F,
    waker: &Waker,
) -> Duration {
    for _ in 0..1_000 {
        if poll(call, waker).is_ready() {
            return driver.now();
        }
        driver.advance(Duration::from_millis(1));
    }
    panic!("not ready within a second")
}

// tokio's own `timeout` tests (`tokio/tests/time_timeout.rs`), re-derived on the crate's types.

/// tokio: `simultaneous_deadline_future_completion`, `completed_future_past_deadline`. The inner
/// future is polled first: a ready one wins over a deadline now or past.
#[test]
fn tokio_a_ready_future_wins_over_a_deadline_now_or_past() {
    let (timer, _driver) = fine_manual();
    let (_, waker) = counter();
    let now = Instant::now();
    let mut at_now = timer.timeout_at(now, std::future::ready(1));
    assert_eq!(poll(&mut at_now, &waker), Poll::Ready(Ok(1)));
    let past = now.checked_sub(Duration::from_secs(1)).unwrap_or(now);
    let mut in_the_past = timer.timeout_at(past, std::future::ready(2));
    assert_eq!(poll(&mut in_the_past, &waker), Poll::Ready(Ok(2)));
    let mut zero = timer.timeout(Duration::ZERO, std::future::ready(3));
    assert_eq!(poll(&mut zero, &waker), Poll::Ready(Ok(3)));
}

/// tokio: `future_and_deadline_in_future`, `future_and_timeout_in_future`. A future that
/// completes before its deadline wins, also when it was pending first.
#[test]
fn tokio_a_future_completing_before_its_deadline_wins() {
    let (timer, driver) = fine_manual();
    let (count, waker) = counter();
    let (tx, rx) = futures::channel::oneshot::channel::<u32>();
    let mut by_instant = timer.timeout_at(Instant::now() + Duration::from_millis(100), rx);
    let (tx2, rx2) = futures::channel::oneshot::channel::<u32>();
    let mut by_limit = timer.timeout(Duration::from_millis(100), rx2);
    assert_eq!(poll(&mut by_instant, &waker), Poll::Pending);
    assert_eq!(poll(&mut by_limit, &waker), Poll::Pending);
    driver.advance(Duration::from_millis(90));
    assert_eq!(poll(&mut by_instant, &waker), Poll::Pending);
    assert_eq!(poll(&mut by_limit, &waker), Poll::Pending);
    assert_eq!(wakes(&count), 0);
    tx.send(1).unwrap();
    tx2.send(2).unwrap();
    assert_eq!(poll(&mut by_instant, &waker), Poll::Ready(Ok(Ok(1))));
    assert_eq!(poll(&mut by_limit, &waker), Poll::Ready(Ok(Ok(2))));
}

/// tokio: `very_large_timeout`. A limit past any clock neither overflows nor fires.
#[test]
fn tokio_a_very_large_timeout_never_fires() {
    let (timer, driver) = fine_manual();
    let (tx, rx) = futures::channel::oneshot::channel::<u32>();
    let (count, waker) = counter();
    let mut call = timer.timeout(Duration::MAX, rx);
    assert_eq!(poll(&mut call, &waker), Poll::Pending);
    driver.advance(Duration::from_secs(3600));
    assert_eq!(poll(&mut call, &waker), Poll::Pending);
    assert_eq!(wakes(&count), 0);
    tx.send(7).unwrap();
    assert_eq!(poll(&mut call, &waker), Poll::Ready(Ok(Ok(7))));
}

/// tokio: `deadline_now_elapses`. A pending future whose deadline is now elapses at its first
/// poll, scheduling nothing.
#[test]
fn tokio_a_deadline_now_elapses_at_the_first_poll() {
    let (timer, _driver) = fine_manual();
    let (_, waker) = counter();
    let mut call = timer.timeout_at(Instant::now(), std::future::pending::<()>());
    assert_eq!(
        poll(&mut call, &waker),
        Poll::Ready(Err(DeadlineError::Elapsed))
    );
    assert_eq!(timer.pending_timeouts(), 0, "nothing scheduled");
}

/// tokio: `deadline_future_elapses`. A deadline 300 ms ahead elapses then, never before; the
/// task is woken.
#[test]
fn tokio_a_deadline_in_the_future_elapses_then() {
    let (timer, driver) = fine_manual();
    let (count, waker) = counter();
    let mut call = timer.timeout_at(
        Instant::now() + Duration::from_millis(300),
        std::future::pending::<()>(),
    );
    assert_eq!(poll(&mut call, &waker), Poll::Pending);
    let done = ms_until_ready(&driver, &mut call, &waker);
    assert!(done >= Duration::from_millis(300), "early: {done:?}");
    assert!(done <= Duration::from_millis(301), "late: {done:?}");
    assert_eq!(wakes(&count), 1);
}

/// tokio's meaning, which the crate's `timeout` had not: a future first polled 30 ms after a
/// 50 ms `timeout` is made times out 50 ms after the call, not 80.
#[test]
fn tokio_a_timeout_first_polled_late_elapses_at_its_limit_from_the_call() {
    let (timer, driver) = fine_manual();
    let (_, waker) = counter();
    let mut call = timer.timeout(Duration::from_millis(50), std::future::pending::<()>());
    driver.advance(Duration::from_millis(30));
    let done = ms_until_ready(&driver, &mut call, &waker);
    assert!(done >= Duration::from_millis(50), "early: {done:?}");
    assert!(
        done <= Duration::from_millis(51),
        "at 50 ms, not 80: {done:?}"
    );
}

/// `deadline()` is fixed when the `Deadline` is made: the same before and after its first
/// pending poll, however late that comes (on the real clock, where an `Instant` is fixed).
#[test]
fn a_deadline_never_moves() {
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    let (_, waker) = counter();
    let before = Instant::now();
    let mut call = timer.timeout(Duration::from_secs(60), std::future::pending::<()>());
    let fixed = call.deadline();
    assert!(fixed >= before + Duration::from_secs(60), "never early");
    assert!(fixed <= Instant::now() + Duration::from_secs(60) + Duration::from_millis(1));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(call.deadline(), fixed, "unarmed");
    assert_eq!(poll(&mut call, &waker), Poll::Pending);
    assert_eq!(call.deadline(), fixed, "armed 20 ms later");
}

/// A pending future first polled after its deadline has passed elapses at that poll, as in
/// tokio, with nothing scheduled; a ready one still wins.
#[test]
fn a_timeout_first_polled_after_its_deadline_elapses_at_once() {
    let (timer, driver) = fine_manual();
    let (_, waker) = counter();
    let mut late = timer.timeout(Duration::from_millis(30), std::future::pending::<()>());
    let mut ready = timer.timeout(Duration::from_millis(30), std::future::ready(5));
    driver.advance(Duration::from_millis(50));
    assert_eq!(
        poll(&mut late, &waker),
        Poll::Ready(Err(DeadlineError::Elapsed))
    );
    assert_eq!(poll(&mut ready, &waker), Poll::Ready(Ok(5)));
    assert_eq!(timer.pending_timeouts(), 0, "nothing scheduled");
    assert_eq!(timer.stats().refused, 0);
}

/// A deadline made on one thread and first polled on another finds its timer; one whose timer
/// is gone before its future is pending completes with `Stopped`, and another timer made
/// since (perhaps at the same address) is not mistaken for it.
#[test]
fn a_deadline_finds_its_timer_from_any_thread_or_reports_it_gone() {
    let (timer, driver) = manual();
    let (_tx, rx) = futures::channel::oneshot::channel::<u32>();
    let mut call = timer.timeout(Duration::from_millis(20), rx);
    let moved = std::thread::spawn(move || {
        let (_, waker) = counter();
        assert_eq!(poll(&mut call, &waker), Poll::Pending);
        call
    })
    .join()
    .unwrap();
    assert_eq!(
        timer.pending_timeouts(),
        1,
        "scheduled from the other thread"
    );
    drop(moved);
    driver.advance(TICK);
    assert_eq!(timer.pending_timeouts(), 0);
    assert_eq!(timer.stats().cancelled, 1);

    let (_, waker) = counter();
    let orphan = timer.timeout(Duration::from_secs(1), std::future::pending::<()>());
    drop((timer, driver));
    let (other, _other_driver) = manual();
    let mut other_call = other.timeout(Duration::from_secs(1), std::future::pending::<()>());
    let mut orphan = orphan;
    assert_eq!(
        poll(&mut orphan, &waker),
        Poll::Ready(Err(DeadlineError::Timer(TimerError::Stopped)))
    );
    assert_eq!(
        other.pending_timeouts(),
        0,
        "not scheduled on the other timer"
    );
    assert_eq!(poll(&mut other_call, &waker), Poll::Pending);
    assert_eq!(other.pending_timeouts(), 1);
}

/// An unarmed deadline on a stopped timer, which its first poll completes with `Stopped`, reads
/// its deadline as now on every thread: also on one that still remembers the timer (the thread
/// that stops a timer alone forgets it).
#[test]
fn an_unarmed_deadline_on_a_stopped_timer_reads_now_on_every_thread() {
    let (timer, _driver) = manual();
    let handle = timer.handle();
    let (made_tx, made_rx) = std::sync::mpsc::channel();
    let (stopped_tx, stopped_rx) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || {
        // This thread remembers the timer from here on.
        let call = handle.timeout(Duration::from_secs(60), std::future::pending::<()>());
        made_tx.send(()).unwrap();
        stopped_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let read = call.deadline();
        (read, Instant::now(), call)
    });
    made_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    timer.stop().unwrap();
    stopped_tx.send(()).unwrap();
    let (read, after, mut call) = other.join().unwrap();
    assert!(
        read <= after,
        "now, as on the stopping thread, not a minute ahead"
    );
    let (_, waker) = counter();
    assert!(call.deadline() <= Instant::now());
    assert_eq!(
        poll(&mut call, &waker),
        Poll::Ready(Err(DeadlineError::Timer(TimerError::Stopped)))
    );
}

/// A thread that makes deadlines on more timers than it remembers, in turn: each deadline
/// schedules on its own timer.
#[test]
fn deadlines_on_many_timers_in_turn_each_schedule_on_their_own() {
    let timers: Vec<_> = (0..6).map(|_| manual()).collect();
    let (_, waker) = counter();
    let mut calls = Vec::new();
    for round in 0..3 {
        for (timer, _) in &timers {
            calls.push(timer.timeout(Duration::from_secs(1), std::future::pending::<()>()));
        }
        if round == 1 {
            // Polled from another thread, which remembers none of them.
            calls = std::thread::spawn(move || {
                let (_, here) = counter();
                for call in &mut calls {
                    assert_eq!(poll(call, &here), Poll::Pending);
                }
                calls
            })
            .join()
            .unwrap();
        }
    }
    for call in &mut calls {
        assert_eq!(poll(call, &waker), Poll::Pending);
    }
    for (timer, _) in &timers {
        assert_eq!(
            timer.pending_timeouts(),
            3,
            "one deadline per round on each timer"
        );
    }
}

/// Tasks' and futures' timeouts take their states from two chunk cursors of one queue shard,
/// interleaved in one batch: each still fires on its own tick, and the worker keeps the two
/// kinds apart (a task runs, a future is woken).
#[test]
fn tasks_and_sleeps_interleaved_in_one_batch_each_fire_on_their_tick() {
    let (timer, driver) = manual();
    let fired: Arc<Mutex<Vec<(usize, u64)>>> = Arc::default();
    let mut sleeps: Vec<(usize, Sleep, Arc<Counter>, Waker)> = Vec::new();
    let mut pattern = 0u32;
    for i in 0..200usize {
        let delay = TICK * (1 + (i % 13) as u32);
        // Runs of both kinds, of lengths 1 to 4, so that runs of cells start mid-chunk.
        pattern = pattern.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        if pattern >> 16 & 1 == 0 {
            let (f, d) = (fired.clone(), driver.clone());
            timer
                .new_timeout(
                    move |_: &Timeout| f.lock().unwrap().push((i, d.current_tick())),
                    delay,
                )
                .unwrap();
        } else {
            let (count, waker) = counter();
            let mut sleep = timer.sleep(delay);
            assert_eq!(poll(&mut sleep, &waker), Poll::Pending);
            sleeps.push((i, sleep, count, waker));
        }
    }
    for tick in 1..=15u64 {
        driver.advance(TICK);
        for (i, sleep, count, waker) in &mut sleeps {
            // Due on a tick boundary: the tick that starts there ends a tick later.
            let due = 2 + (*i % 13) as u64;
            assert_eq!(
                wakes(count),
                usize::from(tick >= due),
                "sleep {i} at tick {tick}"
            );
            assert_eq!(poll(sleep, waker).is_ready(), tick >= due, "sleep {i}");
        }
    }
    let fired = fired.lock().unwrap();
    assert_eq!(fired.len() + sleeps.len(), 200);
    for &(i, tick) in fired.iter() {
        // Run in the same tick as a sleep of the same delay is woken in: the tick numbered
        // one less than the count of advances that end it.
        assert_eq!(tick + 1, 2 + (i % 13) as u64, "task {i}");
    }
}

#[test]
fn an_executor_never_runs_a_sleep_s_wake_up() {
    let handed = Arc::new(AtomicUsize::new(0));
    let h = handed.clone();
    let timer = HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .executor(move |job: Box<dyn FnOnce() + Send>| {
            h.fetch_add(1, SeqCst);
            job()
        })
        .build()
        .unwrap();
    futures::executor::block_on(timer.sleep(Duration::from_millis(3))).unwrap();
    assert_eq!(handed.load(SeqCst), 0);
}

/// Real time: every sleep completes, none before its deadline.
async fn many_sleeps(timer: hashed_timer_wheel::TimerHandle, n: u64) -> Vec<Duration> {
    let mut early = Vec::new();
    for i in 0..n {
        let delay = Duration::from_micros(500 * (i % 7));
        let start = Instant::now();
        timer.sleep(delay).await.unwrap();
        if start.elapsed() < delay {
            early.push(start.elapsed());
        }
    }
    early
}

#[test]
fn tokio_current_thread_and_multi_thread_drive_the_futures() {
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let early = rt.block_on(many_sleeps(timer.handle(), 20));
    assert!(early.is_empty(), "{early:?}");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let tasks: Vec<_> = (0..50)
        .map(|_| rt.spawn(many_sleeps(timer.handle(), 8)))
        .collect();
    rt.block_on(async {
        for t in tasks {
            assert!(t.await.unwrap().is_empty());
        }
        // The request-timeout pattern: the response comes first.
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move { tx.send(5).unwrap() });
        assert_eq!(timer.timeout(Duration::from_secs(5), rx).await, Ok(Ok(5)));
        // A sleep polled from one task, then moved to another: the second is woken.
        let mut sleep = timer.sleep(Duration::from_millis(5));
        std::future::poll_fn(|cx| {
            assert!(Pin::new(&mut sleep).poll(cx).is_pending());
            Poll::Ready(())
        })
        .await;
        tokio::spawn(sleep).await.unwrap()
    })
    .unwrap();
}

#[test]
fn futures_block_on_and_smol_drive_the_futures() {
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    assert!(futures::executor::block_on(many_sleeps(timer.handle(), 20)).is_empty());
    assert!(smol::block_on(many_sleeps(timer.handle(), 20)).is_empty());
    let ex = smol::Executor::new();
    let tasks: Vec<_> = (0..20)
        .map(|_| ex.spawn(many_sleeps(timer.handle(), 5)))
        .collect();
    smol::block_on(ex.run(async {
        for t in tasks {
            assert!(t.await.is_empty());
        }
    }));
}

/// Polls `interval` after each step of the manual clock up to `to`; the clock times at which a
/// tick completed.
fn ticks_until(
    interval: &mut hashed_timer_wheel::Interval,
    driver: &ManualDriver,
    waker: &Waker,
    to: Duration,
) -> Vec<Duration> {
    let mut at = Vec::new();
    let mut cx = Context::from_waker(waker);
    loop {
        while let Poll::Ready(r) = interval.poll_tick(&mut cx) {
            r.unwrap();
            at.push(driver.now());
        }
        if driver.now() >= to {
            return at;
        }
        driver.advance(TICK);
    }
}

/// Ticks at `k * period` with no drift over 1 000 periods (25 ms on a 10 ms tick, so that
/// deadlines fall inside ticks and on their boundaries): each completes at the first clock
/// step at or after its deadline, never before.
#[test]
fn an_interval_ticks_on_schedule_without_drift() {
    let (timer, driver) = manual();
    let (count, waker) = counter();
    let mut interval = timer.interval(Duration::from_millis(25));
    let at = ticks_until(
        &mut interval,
        &driver,
        &waker,
        Duration::from_millis(25_000),
    );
    assert_eq!(at.len(), 1_001);
    for (k, t) in at.iter().enumerate() {
        let due = Duration::from_millis(25 * k as u64);
        let expected = TICK * (due.as_nanos().div_ceil(TICK.as_nanos()) as u32);
        assert_eq!(*t, expected, "tick {k}");
    }
    assert!(wakes(&count) >= 400, "the wheel woke the waiting task");
    drop(interval);
    driver.advance(TICK);
    assert_eq!(
        timer.pending_timeouts(),
        0,
        "dropping the interval cancels its timeout"
    );
}

/// `period()` is the period given, as tokio's, even past 2^64 ns (584 years), which the schedule
/// counts as that far: such an interval ticks once, at once. It read back as 584 years.
#[test]
fn an_interval_s_period_is_the_period_given() {
    let (timer, driver) = manual();
    let (_, waker) = counter();
    let mut interval = timer.interval(Duration::MAX);
    assert_eq!(interval.period(), Duration::MAX);
    let mut cx = Context::from_waker(&waker);
    assert!(interval.poll_tick(&mut cx).is_ready(), "the first, at once");
    driver.advance(Duration::from_secs(3600));
    assert!(
        interval.poll_tick(&mut cx).is_pending(),
        "the next never comes"
    );
}

/// The ticks, in ms, of an interval of 100 ms under `missed`, its first taken at once and the
/// next polled only after `stall_ms`, then at each tick until `until_ms`.
fn interval_ticks(
    missed: hashed_timer_wheel::MissedRuns,
    stall_ms: u64,
    until_ms: u64,
) -> Vec<u64> {
    let (timer, driver) = manual();
    let (_, waker) = counter();
    let mut interval = timer.interval(Duration::from_millis(100));
    interval.set_missed_runs(missed);
    let mut cx = Context::from_waker(&waker);
    assert!(interval.poll_tick(&mut cx).is_ready()); // the first, at once
    driver.advance(Duration::from_millis(stall_ms));
    let mut at = vec![Duration::ZERO];
    at.extend(ticks_until(
        &mut interval,
        &driver,
        &waker,
        Duration::from_millis(until_ms),
    ));
    at.iter().map(|d| d.as_millis() as u64).collect()
}

/// A stall of the task (no polls for 5.5 periods), under each policy.
#[test]
fn an_interval_catches_up_as_its_policy_says() {
    use hashed_timer_wheel::MissedRuns;
    for (missed, expected) in [
        // Burst: the missed ticks at once (at 550 ms), then the schedule as it was.
        (
            MissedRuns::Burst,
            vec![0, 550, 550, 550, 550, 550, 600, 700],
        ),
        // Skip: one at once, then the schedule's next deadline after now.
        (MissedRuns::Skip, vec![0, 550, 600, 700]),
        // Delay: one at once, then a period after it.
        (MissedRuns::Delay, vec![0, 550, 650, 750]),
    ] {
        assert_eq!(interval_ticks(missed, 550, 790), expected, "{missed:?}");
    }
}

/// A tick taken late by less than a period (polled 30 ms after its deadline, more than the tick
/// of slack): `Delay` counts the next from when the late tick is taken, as tokio's
/// `MissedTickBehavior::Delay` does whenever a tick is late; `Burst` and `Skip` keep the
/// schedule, as tokio's do, since no tick was missed.
#[test]
fn an_interval_delays_its_schedule_after_a_tick_taken_late() {
    use hashed_timer_wheel::MissedRuns;
    for (missed, expected) in [
        (MissedRuns::Burst, vec![0, 130, 200, 300]),
        (MissedRuns::Skip, vec![0, 130, 200, 300]),
        (MissedRuns::Delay, vec![0, 130, 230, 330]),
    ] {
        assert_eq!(interval_ticks(missed, 130, 390), expected, "{missed:?}");
    }
}

/// An interval refused at the pending limit arms its tick again at the next poll: once the
/// limit has room, that poll arms it, and it completes at its deadline. The poll after a
/// refusal returned the refusal its re-arm had made at once, a stale `TooManyPending` after
/// the limit had room.
#[test]
fn an_interval_refused_at_the_limit_arms_again_at_the_next_poll() {
    let (timer, driver) = limited_to_one();
    let (_, waker) = counter();
    let mut cx = Context::from_waker(&waker);
    let mut interval = timer.interval(Duration::from_millis(50));
    assert!(
        matches!(interval.poll_tick(&mut cx), Poll::Ready(Ok(_))),
        "the first, at once"
    );
    step_to(&driver, Duration::from_millis(60)); // the tick due at 50 ms has fired
    let filler = timer.new_timeout(|_: &Timeout| {}, Duration::from_secs(3600));
    let filler = filler.unwrap(); // the limit is full: the re-arm for 100 ms is refused
    assert!(matches!(interval.poll_tick(&mut cx), Poll::Ready(Ok(_))));
    let full = Poll::Ready(Err(TimerError::TooManyPending { pending: 1, max: 1 }));
    assert_eq!(interval.poll_tick(&mut cx), full);
    assert_eq!(
        interval.poll_tick(&mut cx),
        full,
        "still full: refused again"
    );
    assert!(filler.cancel());
    driver.advance(TICK); // the cancel is processed: room again
    assert_eq!(timer.pending_timeouts(), 0);
    assert!(interval.poll_tick(&mut cx).is_pending(), "armed for 100 ms");
    assert_eq!(timer.pending_timeouts(), 1);
    step_to(&driver, Duration::from_millis(90));
    assert!(interval.poll_tick(&mut cx).is_pending(), "never early");
    driver.advance(TICK);
    assert!(
        matches!(interval.poll_tick(&mut cx), Poll::Ready(Ok(_))),
        "due at 100 ms"
    );
    assert!(
        interval.poll_tick(&mut cx).is_pending(),
        "the next is due at 150 ms"
    );
}

/// A manual timer of `TICK` ticks whose pending limit is one timeout.
fn limited_to_one() -> (HashedWheelTimer, ManualDriver) {
    let builder = HashedWheelTimer::builder().tick_duration(TICK);
    builder.max_pending_timeouts(1).build_manual().unwrap()
}

/// An interval made with the pending limit full: its first tick completes at once, as tokio's
/// does, and so does each tick already due, though the timer refuses its timeout; a tick not
/// yet due is refused until the limit has room.
#[test]
fn an_interval_at_a_full_limit_still_takes_the_ticks_already_due() {
    let (timer, driver) = limited_to_one();
    let (_, waker) = counter();
    let mut cx = Context::from_waker(&waker);
    let filler = timer
        .new_timeout(|_: &Timeout| {}, Duration::from_secs(3600))
        .unwrap();
    let mut interval = timer.interval(Duration::from_millis(50));
    assert!(
        matches!(interval.poll_tick(&mut cx), Poll::Ready(Ok(_))),
        "the first, at once"
    );
    let full = Poll::Ready(Err(TimerError::TooManyPending { pending: 1, max: 1 }));
    assert_eq!(interval.poll_tick(&mut cx), full, "the second, not yet due");
    step_to(&driver, Duration::from_millis(50));
    assert!(
        matches!(interval.poll_tick(&mut cx), Poll::Ready(Ok(_))),
        "the second, due at 50 ms"
    );
    assert_eq!(
        interval.poll_tick(&mut cx),
        full,
        "the third, due at 100 ms"
    );
    assert!(filler.cancel());
    driver.advance(TICK);
    assert!(interval.poll_tick(&mut cx).is_pending(), "armed for 100 ms");
    step_to(&driver, Duration::from_millis(110));
    assert!(matches!(interval.poll_tick(&mut cx), Poll::Ready(Ok(_))));
}

#[test]
fn an_interval_ends_with_stopped_when_the_timer_stops() {
    let (timer, driver) = manual();
    let (count, waker) = counter();
    let mut interval = timer.handle().interval(Duration::from_millis(50));
    let mut cx = Context::from_waker(&waker);
    assert!(interval.poll_tick(&mut cx).is_ready());
    assert!(interval.poll_tick(&mut cx).is_pending());
    driver.advance(TICK);
    assert!(timer.stop().unwrap().is_empty());
    assert_eq!(wakes(&count), 1);
    assert_eq!(
        interval.poll_tick(&mut cx),
        Poll::Ready(Err(TimerError::Stopped))
    );
    assert_eq!(
        interval.poll_tick(&mut cx),
        Poll::Ready(Err(TimerError::Stopped))
    );
    // Stopped with a deadline already passed on the clock: no tick after the stop.
    let (timer, driver) = manual();
    let mut interval = timer.interval(Duration::from_millis(50));
    assert!(interval.poll_tick(&mut cx).is_ready());
    timer.stop().unwrap();
    driver.advance(Duration::from_millis(100));
    assert_eq!(
        interval.poll_tick(&mut cx),
        Poll::Ready(Err(TimerError::Stopped))
    );
}

#[test]
fn an_interval_in_tokio_is_never_early() {
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let start = Instant::now();
        let mut interval = timer.interval_at(start, Duration::from_millis(3));
        for k in 0..10u32 {
            let due = interval.tick().await.unwrap();
            assert!(due >= start + Duration::from_millis(3) * k);
            assert!(
                Instant::now() >= start + Duration::from_millis(3) * k,
                "tick {k} early"
            );
        }
    });
}

/// An interval whose start came before the timer was built keeps `start + k * period`: the
/// ticks before the timer's start are due at once (`Burst`) and report their own instants, and
/// the first after it comes on time, not shifted by how much earlier the start was.
#[test]
fn an_interval_started_before_the_timer_keeps_its_schedule() {
    let period = Duration::from_millis(200);
    let start = Instant::now() - Duration::from_millis(500);
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    let mut interval = timer.interval_at(start, period);
    let ticks = futures::executor::block_on(async {
        let mut ticks = Vec::new();
        for _ in 0..4 {
            let due = interval.tick().await.unwrap();
            ticks.push((due, Instant::now()));
        }
        ticks
    });
    for (k, &(due, at)) in ticks.iter().enumerate() {
        let want = start + period * k as u32;
        assert_eq!(due, want, "tick {k} reports its own instant");
        assert!(at >= want, "tick {k} early");
    }
    // The fourth, 100 ms after the timer's start: on time (not 500 ms later), with room for a
    // loaded host.
    let late = ticks[3].1 - (start + period * 3);
    assert!(late < Duration::from_millis(250), "tick 3 {late:?} late");
}

/// An interval's first tick is ready at once, as documented and as tokio's, though the
/// producers' clock reads a little ahead of the monotonic one: its first poll finds it due, not
/// pending until the end of the timer's tick (100 ms by default).
#[test]
fn an_interval_s_first_tick_is_ready_at_the_first_poll() {
    let timer = HashedWheelTimer::default();
    let mut cx = Context::from_waker(Waker::noop());
    let pending = (0..50)
        .filter(|_| {
            let mut interval = timer.interval(Duration::from_secs(1));
            interval.poll_tick(&mut cx).is_pending()
        })
        .count();
    assert_eq!(pending, 0, "first ticks not ready at once, of 50");
    let start = Instant::now();
    let mut interval = timer.interval(Duration::from_secs(1));
    let first = futures::executor::block_on(interval.tick()).unwrap();
    assert!(first >= start && first <= Instant::now());
}

/// An interval whose next tick lies past 64-bit nanoseconds (a period of `Duration::MAX`, or a
/// start centuries ahead) holds the saturated deadline `u64::MAX`, as a `Sleep` does, and never
/// ticks again, even on a manual clock moved to its end (its poll compared that deadline with
/// the clock and found it due).
#[test]
fn an_interval_tick_due_past_584_years_never_comes_even_with_the_clock_at_its_end() {
    let (timer, driver) = manual();
    let mut cx = Context::from_waker(Waker::noop());
    let mut endless = timer.interval(Duration::MAX);
    assert!(endless.poll_tick(&mut cx).is_ready(), "the first, at once");
    let mut unborn = timer.interval_at(
        Instant::now() + Duration::from_secs(1 << 40),
        Duration::from_secs(1),
    );
    let mut sleep = timer.sleep(Duration::MAX);
    driver.advance(Duration::MAX);
    assert!(poll(&mut sleep, Waker::noop()).is_pending());
    assert!(endless.poll_tick(&mut cx).is_pending(), "never ticks again");
    assert!(unborn.poll_tick(&mut cx).is_pending(), "never starts");
}

/// A `Sleep` polled with a waker whose clone stops the timer: the clone ran under the waker
/// slot's lock, and `stop()`, waking that slot's future, waited for the lock forever.
#[test]
fn a_sleep_whose_wakers_clone_stops_the_timer_does_not_deadlock() {
    let (timer, _driver) = manual();
    let timer = Arc::new(timer);
    let mut sleep = timer.sleep(TICK * 2);
    let owner = Arc::clone(&timer);
    let waker = calling_back_waker(once(move || drop(owner.stop())), no_hook());
    within_30_s(move || {
        let polled = Pin::new(&mut sleep).poll(&mut Context::from_waker(&waker));
        assert!(matches!(polled, Poll::Ready(Err(TimerError::Stopped))));
    });
    assert_eq!(timer.pending_timeouts(), 0);
}

/// A `Sleep` polled with a waker whose clone advances the manual clock past its deadline: the
/// clone ran under the waker slot's lock, and the expiry, waking that slot, waited forever.
#[test]
fn a_sleep_whose_wakers_clone_expires_it_does_not_deadlock() {
    let (timer, driver) = manual();
    let mut sleep = timer.sleep(TICK * 2);
    let waker = calling_back_waker(once(move || driver.advance(TICK * 4)), no_hook());
    within_30_s(move || {
        let polled = Pin::new(&mut sleep).poll(&mut Context::from_waker(&waker));
        assert!(matches!(polled, Poll::Ready(Ok(()))));
        assert_eq!(timer.pending_timeouts(), 0);
    });
}

/// A `Sleep` polled again with another task's waker, the one it replaces stopping the timer
/// in its drop: the drop ran under the waker slot's lock, and `stop()` waited on it forever.
#[test]
fn a_sleep_whose_replaced_waker_stops_the_timer_in_its_drop_does_not_deadlock() {
    let (timer, _driver) = manual();
    let timer = Arc::new(timer);
    let mut sleep = timer.sleep(TICK * 2);
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (owner, armed_in_drop) = (Arc::clone(&timer), Arc::clone(&armed));
    let first = calling_back_waker(
        no_hook(),
        Box::new(move || {
            if armed_in_drop.swap(false, SeqCst) {
                drop(owner.stop());
            }
        }),
    );
    assert!(Pin::new(&mut sleep)
        .poll(&mut Context::from_waker(&first))
        .is_pending());
    drop(first);
    armed.store(true, SeqCst);
    let (_, second) = counter();
    within_30_s(move || {
        let polled = Pin::new(&mut sleep).poll(&mut Context::from_waker(&second));
        assert!(matches!(polled, Poll::Ready(Err(TimerError::Stopped))));
    });
    assert_eq!(timer.pending_timeouts(), 0);
}

/// A `Deadline` that fails with `DeadlineError::Timer` leaves its future unfinished in itself,
/// as `DeadlineError::Timer` says: `into_inner` gives it back, and it drops with the `Deadline`.
#[test]
fn a_deadline_failing_on_a_stopped_timer_keeps_its_future() {
    struct Alive(Arc<AtomicUsize>);
    impl Drop for Alive {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let (timer, _driver) = manual();
    let drops = Arc::new(AtomicUsize::new(0));
    let alive = Alive(Arc::clone(&drops));
    let inner = Box::pin(async move {
        let _alive = alive;
        std::future::pending::<()>().await
    });
    let mut deadline = timer.timeout(Duration::from_secs(60), inner);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(Pin::new(&mut deadline).poll(&mut cx).is_pending());
    timer.stop().unwrap();
    assert_eq!(
        Pin::new(&mut deadline).poll(&mut cx),
        Poll::Ready(Err(DeadlineError::Timer(TimerError::Stopped)))
    );
    assert_eq!(drops.load(SeqCst), 0, "the poll does not drop the future");
    let inner = deadline.into_inner();
    assert_eq!(drops.load(SeqCst), 0);
    drop(inner);
    assert_eq!(drops.load(SeqCst), 1);
}

/// An interval of one tick polled only when the wheel wakes it: each wake-up comes a tick after
/// the deadline (one on a tick's boundary waits for the next), which misses no tick, so every
/// policy yields a tick per period.
#[test]
fn an_interval_of_one_tick_woken_by_the_wheel_misses_no_tick() {
    use hashed_timer_wheel::MissedRuns;
    for missed in [MissedRuns::Burst, MissedRuns::Skip, MissedRuns::Delay] {
        let (timer, driver) = manual();
        let (count, waker) = counter();
        let mut cx = Context::from_waker(&waker);
        let mut interval = timer.interval(TICK);
        interval.set_missed_runs(missed);
        let mut ticks = 0;
        let mut seen = 0; // poll once at the start
        for _ in 0..20 {
            if wakes(&count) >= seen {
                seen = wakes(&count) + 1;
                while interval.poll_tick(&mut cx).is_ready() {
                    ticks += 1;
                }
            }
            driver.advance(TICK);
        }
        assert_eq!(ticks, 19, "{missed:?}");
    }
}

type DeadlineOutput = Result<Result<(), TimerError>, DeadlineError>;
type BoxedDeadline = Pin<Box<dyn Future<Output = DeadlineOutput> + Send>>;

/// A waker that polls its deadline the moment it is woken (as a runtime's other worker may,
/// while the turn that woke it goes on), and records what that poll returned.
#[derive(Default)]
struct PollOnWake {
    deadline: Mutex<Option<BoxedDeadline>>,
    seen: Mutex<Option<Poll<DeadlineOutput>>>,
}

impl std::task::Wake for PollOnWake {
    fn wake(self: Arc<Self>) {
        let waker = Waker::from(Arc::clone(&self));
        let mut deadline = self.deadline.lock().unwrap();
        if let Some(deadline) = deadline.as_mut() {
            let polled = deadline.as_mut().poll(&mut Context::from_waker(&waker));
            self.seen.lock().unwrap().get_or_insert(polled);
        }
    }
}

/// Polls `deadline` once (pending) with a `PollOnWake` waker that then owns it.
fn poll_on_wake(mut deadline: BoxedDeadline) -> Arc<PollOnWake> {
    let probe = Arc::new(PollOnWake::default());
    let waker = Waker::from(Arc::clone(&probe));
    let first = deadline.as_mut().poll(&mut Context::from_waker(&waker));
    assert!(first.is_pending());
    *probe.deadline.lock().unwrap() = Some(deadline);
    probe
}

#[test]
fn a_deadline_whose_inner_sleep_is_due_in_the_same_turn_returns_the_inner_output() {
    let (timer, driver) = manual();
    let at = Instant::now() + Duration::from_millis(25);
    // The inner sleep scheduled before the deadline's sleep (made as the argument)...
    let inner_first = timer.timeout_at(at, timer.sleep_until(at));
    // ... and after it (made at the inner future's first poll, which comes before the
    // deadline's own sleep is armed, so a second, later one: the inner polls itself ready only
    // through its second sleep, made at its second poll).
    let handle = timer.handle();
    let mut inner: Option<Sleep> = None;
    let mut polls = 0;
    let later = std::future::poll_fn(move |cx| {
        polls += 1;
        if polls == 2 {
            inner = Some(handle.sleep_until(at));
        }
        match inner.as_mut() {
            Some(sleep) => Pin::new(sleep).poll(cx),
            None => Poll::Pending,
        }
    });
    let mut deadline_first = Box::pin(timer.timeout_at(at, later));
    let (_, waker) = counter();
    assert!(poll(&mut deadline_first, &waker).is_pending());
    let probes = [
        poll_on_wake(Box::pin(inner_first)),
        poll_on_wake(deadline_first),
    ];
    step_to(&driver, Duration::from_millis(40));
    for (order, probe) in ["inner first", "deadline first"].iter().zip(probes) {
        let seen = probe.seen.lock().unwrap();
        assert!(
            matches!(*seen, Some(Poll::Ready(Ok(Ok(()))))),
            "{order}: the poll at the wake-up returns the inner output, not Elapsed: {seen:?}"
        );
    }
}
