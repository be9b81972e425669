//! `TimerStats`: the outcome counts and the lateness of fired timeouts, on the manual clock.

use hashed_timer_wheel::{DeadlineError, HashedWheelTimer, ManualDriver, Timeout, TimerError};
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

const TICK: Duration = Duration::from_millis(10);

fn manual(max_pending: usize) -> (HashedWheelTimer, ManualDriver) {
    HashedWheelTimer::builder()
        .tick_duration(TICK)
        .ticks_per_wheel(8)
        .max_pending_timeouts(max_pending)
        .build_manual()
        .unwrap()
}

fn noop(_: &Timeout) {}

/// Every outcome is counted once: expired, cancelled (queued or in the wheel), refused (at the
/// limit and after stop), panicked; a timeout `stop()` returns is none of them.
#[test]
fn each_outcome_is_counted_once() {
    let (timer, driver) = manual(3);
    let fires = timer.new_timeout(noop, Duration::from_millis(5)).unwrap();
    let queued = timer.new_timeout(noop, Duration::from_millis(50)).unwrap();
    assert!(queued.cancel(), "cancelled before its transfer");
    let panics = timer
        .new_timeout(|_: &Timeout| panic!("a task that fails"), Duration::ZERO)
        .unwrap();
    assert!(matches!(
        timer.new_timeout(noop, Duration::ZERO),
        Err(TimerError::TooManyPending { .. })
    ));
    driver.advance(TICK);
    assert!(fires.is_expired() && panics.is_expired());
    let in_wheel = timer.new_timeout(noop, Duration::from_secs(1)).unwrap();
    driver.advance(TICK); // transferred
    assert!(in_wheel.cancel(), "cancelled in the wheel");
    let _returned = timer.new_timeout(noop, Duration::from_secs(1)).unwrap();
    driver.advance(TICK); // the cancellation processed
    let stats = timer.stats();
    assert_eq!(stats.expired, 2, "{stats:?}");
    assert_eq!(stats.panicked, 1, "{stats:?}");
    assert_eq!(stats.cancelled, 2, "{stats:?}");
    assert_eq!(stats.refused, 1, "{stats:?}");
    // On the manual clock a task takes no time: none held the worker.
    assert_eq!((stats.slow_runs, stats.longest_run), (0, Duration::ZERO));
    assert_eq!(timer.stop().unwrap().len(), 1);
    assert_eq!(
        timer.new_timeout(noop, Duration::ZERO).unwrap_err(),
        TimerError::Stopped
    );
    let after = timer.stats();
    assert_eq!(after.refused, 2, "a refusal after stop counts too");
    assert_eq!(
        (after.expired, after.cancelled),
        (2, 2),
        "stop() returns, it does not cancel by count"
    );
}

/// Lateness is the worker's clock at the tick minus the deadline, in classes of ticks: under 1,
/// [1, 2), [2, 4), ... and 64 or more; `late_max` is the largest.
#[test]
fn lateness_falls_in_classes_of_ticks() {
    let (timer, driver) = manual(0);
    // Due at 5 ms; the clock jumps to 10 ms (on time: under a tick late), then due at 15 ms
    // with the clock jumping to 50 ms (35 ms late: 3.5 ticks, class [2, 4)), then due at 60 ms
    // with the clock at 1 s (940 ms: 94 ticks, the last class).
    timer.new_timeout(noop, Duration::from_millis(5)).unwrap();
    driver.advance_to(Duration::from_millis(10));
    timer.new_timeout(noop, Duration::from_millis(5)).unwrap();
    driver.advance_to(Duration::from_millis(50));
    timer.new_timeout(noop, Duration::from_millis(10)).unwrap();
    driver.advance_to(Duration::from_secs(1));
    let stats = timer.stats();
    assert_eq!(stats.expired, 3);
    assert_eq!(stats.lateness, [1, 0, 1, 0, 0, 0, 0, 1], "{stats:?}");
    assert_eq!(stats.late_max, Duration::from_millis(940));
}

/// A handle reads the owner's counters (a task's `timeout.timer()` included).
#[test]
fn a_handle_reads_the_same_stats_as_the_owner() {
    let (timer, driver) = manual(0);
    let handle = timer.handle();
    let (tx, rx) = std::sync::mpsc::channel();
    timer
        .new_timeout(
            move |t: &Timeout| tx.send(t.timer().stats().tick).unwrap(),
            Duration::from_millis(5),
        )
        .unwrap();
    handle
        .new_timeout(noop, Duration::from_millis(5))
        .unwrap()
        .cancel();
    driver.advance(TICK);
    assert_eq!(handle.stats(), timer.stats());
    assert_eq!((handle.stats().expired, handle.stats().cancelled), (1, 1));
    // The task read the tick it ran in; the worker has moved past it since.
    assert_eq!(rx.recv().unwrap() + 1, timer.stats().tick);
}

/// Cancels the worker has not yet processed when `stop()` runs (one in the wheel, one still
/// queued) are counted as cancelled by `stop()`, which returns neither: after a stop, expired,
/// cancelled and returned add up to what was accepted.
#[test]
fn cancels_not_yet_processed_at_stop_are_counted() {
    let (timer, driver) = manual(0);
    let in_wheel = timer.new_timeout(noop, Duration::from_secs(1)).unwrap();
    driver.advance(TICK); // now in the wheel
    let queued = timer.new_timeout(noop, Duration::from_secs(1)).unwrap();
    let kept = timer.new_timeout(noop, Duration::from_secs(1)).unwrap();
    assert!(in_wheel.cancel());
    assert!(queued.cancel());
    let returned = timer.stop().unwrap();
    assert_eq!(returned, vec![kept]);
    let stats = timer.stats();
    assert_eq!((stats.expired, stats.cancelled), (0, 2), "{stats:?}");
}

/// A task cancels a timeout of its own bucket, which the bucket's walk then drops, and `stop()`
/// runs before the next tick: the cancel is counted as cancelled. It was counted by the worker
/// only when it processed the cancellation, which `stop()` dropped unprocessed, so expired,
/// cancelled and returned fell one short of what was accepted.
#[test]
fn a_cancel_of_a_timeout_its_bucket_dropped_is_counted_at_stop() {
    let (timer, driver) = manual(0);
    let victim = std::sync::Arc::new(std::sync::Mutex::new(None::<Timeout>));
    let v = std::sync::Arc::clone(&victim);
    let cancel = move |_: &Timeout| {
        let victim = v.lock().unwrap().take().unwrap();
        assert!(victim.cancel(), "cancelled before its turn in the walk");
    };
    timer.new_timeout(cancel, Duration::from_millis(5)).unwrap();
    let cancelled = timer.new_timeout(noop, Duration::from_millis(5)).unwrap();
    *victim.lock().unwrap() = Some(cancelled.clone());
    driver.advance(TICK);
    assert!(cancelled.is_cancelled());
    assert!(timer.stop().unwrap().is_empty());
    let stats = timer.stats();
    assert_eq!((stats.expired, stats.cancelled), (1, 1), "{stats:?}");
}

/// The owner dropped inside a task: no `stop()` returns the timeouts still pending (in the
/// wheel, or queued), so each counts as cancelled, and a cancel the worker had not processed
/// is not lost to the turn's own count. Every call adds up.
#[test]
fn timeouts_ended_by_the_owner_dropped_in_a_task_are_counted_as_cancelled() {
    let (timer, driver) = manual(0);
    let handle = timer.handle();
    let mut kept = vec![];
    for i in 0..5 {
        kept.push(
            timer
                .new_timeout(noop, Duration::from_millis(100 + i))
                .unwrap(),
        );
    }
    driver.advance(TICK); // in the wheel
    for i in 0..3 {
        kept.push(
            timer
                .new_timeout(noop, Duration::from_millis(100 + i))
                .unwrap(),
        );
    }
    assert!(kept[0].cancel(), "in the wheel, not yet processed");
    assert!(kept[5].cancel(), "queued, not yet transferred");
    let owner = std::sync::Mutex::new(Some(timer));
    let drops_owner = move |t: &Timeout| {
        drop(owner.lock().unwrap().take());
        let refused = t.timer().new_timeout(noop, Duration::ZERO);
        assert_eq!(refused.unwrap_err(), TimerError::Stopped);
    };
    handle.new_timeout(drops_owner, Duration::ZERO).unwrap();
    driver.advance(TICK);
    assert!(handle.is_stopped());
    assert!(kept.iter().all(Timeout::is_cancelled));
    let stats = handle.stats();
    // 8 kept, the task that dropped the owner, and the call it made after.
    assert_eq!((stats.expired, stats.cancelled, stats.refused), (1, 8, 1));
}

/// A sleep still waiting when `stop()` runs (one in the wheel, one still queued) completes with
/// `Stopped`, and `stop()` does not return its timeout: it was counted nowhere, so expired,
/// cancelled, returned and refused fell short of what was accepted by one per such sleep.
/// `stop()` counts each as cancelled.
#[test]
fn sleeps_ended_by_stop_are_counted_as_cancelled() {
    let (timer, driver) = manual(0);
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    let mut in_wheel = timer.sleep(Duration::from_secs(1));
    assert!(Pin::new(&mut in_wheel).poll(&mut cx).is_pending());
    driver.advance(TICK); // now in the wheel
    let mut queued = timer.sleep(Duration::from_secs(1));
    assert!(Pin::new(&mut queued).poll(&mut cx).is_pending());
    assert!(
        timer.stop().unwrap().is_empty(),
        "a sleep's timeout is not returned"
    );
    for sleep in [&mut in_wheel, &mut queued] {
        let ended = Pin::new(sleep).poll(&mut cx);
        assert_eq!(ended, Poll::Ready(Err(TimerError::Stopped)));
    }
    let stats = timer.stats();
    assert_eq!((stats.expired, stats.cancelled), (0, 2), "{stats:?}");
    assert_eq!(timer.pending_timeouts(), 0);
}

/// A `Deadline` made before `stop()` and first pending after it asks for no timeout, and
/// `stats()` says it is not counted as refused. It was, on every thread but the one that called
/// `stop()` (which forgets the timer only in its own memory of recent timers): the deadline
/// found the stopped timer there and had its sleep refused.
#[test]
fn a_deadline_first_pending_after_stop_is_not_refused_on_any_thread() {
    let (timer, _driver) = manual(0);
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    let mut deadline = timer.timeout(TICK, std::future::pending::<()>());
    let timer = std::sync::Arc::new(timer);
    let stopper = std::sync::Arc::clone(&timer);
    std::thread::spawn(move || stopper.stop().map(|returned| returned.len()))
        .join()
        .unwrap()
        .unwrap();
    let ended = Pin::new(&mut deadline).poll(&mut cx);
    assert_eq!(
        ended,
        Poll::Ready(Err(DeadlineError::Timer(TimerError::Stopped)))
    );
    assert_eq!(timer.stats().refused, 0);
}

/// A timer's `Debug` shows the pending count `pending_timeouts()` reports, 0 after `stop()`, on
/// the owner and on a handle. It showed the raw counter, `pending: 1` after `stop()` with a
/// pending limit, where `pending_timeouts()` said 0.
#[test]
fn debug_shows_what_pending_timeouts_reports_after_stop_too() {
    let (timer, driver) = manual(4);
    timer.new_timeout(noop, Duration::from_secs(60)).unwrap();
    driver.advance(TICK);
    assert!(format!("{timer:?}").contains("pending: 1,"), "{timer:?}");
    assert_eq!(timer.stop().unwrap().len(), 1);
    assert_eq!(timer.pending_timeouts(), 0);
    for debug in [format!("{timer:?}"), format!("{:?}", timer.handle())] {
        assert!(debug.contains("pending: 0,"), "{debug}");
    }
}

/// A manual timer advanced before it starts reads the clock's tick at once, as a started one
/// does after each advance, and goes on from it. `stats().tick` read 0 until the first advance
/// after the start: an advance before it moved the clock and left the worker's tick behind.
#[test]
fn a_manual_timer_advanced_before_its_start_reads_the_clock_s_tick() {
    let (timer, driver) = manual(0);
    driver.advance(Duration::from_millis(1_005));
    assert_eq!(timer.stats().tick, 100);
    assert_eq!(driver.current_tick(), 100);
    timer.new_timeout(noop, Duration::from_millis(27)).unwrap(); // starts it; due at 1032 ms
    assert_eq!(timer.stats().tick, 100);
    driver.advance(Duration::from_millis(30));
    let stats = timer.stats();
    assert_eq!((stats.tick, stats.expired), (103, 0), "due in tick 103");
    driver.advance(Duration::from_millis(5));
    let stats = timer.stats();
    assert_eq!((stats.tick, stats.expired), (104, 1));
    assert_eq!(stats.lateness[0], 1, "fired within a tick of its deadline");
}

/// A threaded timer started late reads the clock's tick at once, as the worker does: not 0 until
/// its thread first has work.
#[test]
fn a_threaded_timer_started_late_reads_the_clock_s_tick_at_start() {
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    std::thread::sleep(Duration::from_millis(30));
    timer.start().unwrap();
    let tick = timer.stats().tick;
    assert!(tick >= 30, "tick {tick} after 30 ms of 1 ms ticks");
    assert!(timer.stop().unwrap().is_empty());
}

/// `wakeups` counts the worker's turns, not only its wake-ups from a sleep: a thread's first
/// turn, as it starts, counts though the thread never slept; a manual timer, which has no
/// thread, counts none. (Its doc said "times the worker thread woke from sleeping".)
#[test]
fn wakeups_count_the_worker_s_turns_from_its_start() {
    let (timer, driver) = manual(0);
    timer.new_timeout(noop, Duration::from_millis(5)).unwrap();
    driver.advance(TICK * 3);
    assert_eq!(timer.stats().expired, 1);
    assert_eq!(
        timer.stats().wakeups,
        0,
        "a manual timer's advances count none"
    );
    let timer = HashedWheelTimer::new(TICK, 8);
    timer.start().unwrap();
    let waited = std::time::Instant::now();
    while timer.stats().wakeups == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the first turn counts"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
