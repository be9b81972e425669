//! The worker's sleep and wake-up, with the real thread loop (`run_thread` in
//! `src/engine/lifecycle.rs`).
//!
//! With nothing pending the worker parks with no deadline (a loom park); a producer must wake
//! it. The worker stores its plan in `planned` (SeqCst, `Worker::plan`) and then looks at
//! every shard under its lock; a producer pushes under its shard's lock and then reads `planned`
//! (`Shared::wake_if_later_than`): either the worker sees the push before it parks, or the
//! producer sees the plan and unparks it. The model waits for the task with a loom park of its
//! own, so a lost wake-up is a loom deadlock. `stop()` must wake a parked worker too, or its
//! join never returns (a deadlock again).
//!
//! By default a *bounded* sleep (`park_until`) jumps the loom clock to the end of the planned
//! tick, so it never blocks (`earlier_deadline_lowers_a_bounded_plan` then checks only that a
//! deadline earlier than a finite plan keeps every timeout's fate right).
//! `earlier_deadline_wakes_a_sleeping_worker` holds the clock instead
//! (`loom_hooks::hold_clock`): time moves only when the model says, a bounded sleep is a park
//! that the clock ends when the planned tick is over (as an OS timer would), and a producer
//! whose deadline comes before the worker's planned wake-up must wake it, or the model
//! deadlocks waiting for the task.
#![cfg(loom)]

use hashed_timer_wheel::{loom_hooks, HashedWheelTimer, Timeout};
use loom::thread;
use loom_tests::{book_stopped, check, counting, threaded_timer, Owned, Probe, Signal, TICK};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

#[test]
fn producer_wakes_parked_worker() {
    check("producer_wakes_parked_worker", || {
        let timer = threaded_timer(0);
        timer.start().unwrap(); // the worker finds nothing to do and parks
        let fired = Signal::new();
        let probe = Probe::new();
        let producer = {
            let (h, p, fired) = (timer.handle(), probe.clone(), fired.clone());
            thread::spawn(move || {
                h.new_timeout(p.task_then(move |_| fired.set()), Duration::ZERO)
                    .unwrap()
            })
        };
        fired.wait(); // a lost wake-up leaves both threads parked: loom reports a deadlock
        let t = producer.join().unwrap();
        assert!(timer.stop().unwrap().is_empty());
        probe.assert_ended_once(&t, "t");
        assert_eq!(timer.pending_timeouts(), 0);
    });
}

#[test]
fn stop_wakes_parked_worker() {
    check("stop_wakes_parked_worker", || {
        let timer = threaded_timer(0);
        let probe = Probe::new();
        // Due at once: the worker runs it, then parks with nothing pending, racing the stop.
        let t = timer.new_timeout(probe.task(), Duration::ZERO).unwrap();
        let returned = timer.stop().unwrap(); // joins the worker: deadlock if it stays parked
        book_stopped(&returned, &[(Some(&t), &probe)]);
        probe.assert_ended_once(&t, "t");
        assert_eq!(timer.pending_timeouts(), 0);
    });
}

#[test]
fn earlier_deadline_lowers_a_bounded_plan() {
    check("earlier_deadline_lowers_a_bounded_plan", || {
        let timer = threaded_timer(0);
        let far_probe = Probe::new();
        let far = timer.new_timeout(far_probe.task(), TICK * 3).unwrap();
        let fired = Signal::new();
        let probe = Probe::new();
        let producer = {
            let (h, p, fired) = (timer.handle(), probe.clone(), fired.clone());
            thread::spawn(move || {
                h.new_timeout(p.task_then(move |_| fired.set()), Duration::ZERO)
                    .unwrap()
            })
        };
        fired.wait();
        let near = producer.join().unwrap();
        let returned = timer.stop().unwrap();
        book_stopped(&returned, &[(Some(&far), &far_probe)]);
        probe.assert_ended_once(&near, "near");
        far_probe.assert_ended_once(&far, "far");
        assert_eq!(timer.pending_timeouts(), 0);
    });
}

#[test]
fn earlier_deadline_wakes_a_sleeping_worker() {
    check("earlier_deadline_wakes_a_sleeping_worker", || {
        let (timer, far_probe, far) = planning_for_far();

        // Racing the worker's tick 0 and its planning: due at 1 ms (tick 1, fires at 2 ms).
        let fired = Signal::new();
        let probe = Probe::new();
        let producer = {
            let (h, p, fired) = (timer.handle(), probe.clone(), fired.clone());
            thread::spawn(move || {
                h.new_timeout(p.task_then(move |_| fired.set()), Duration::ZERO)
                    .unwrap()
            })
        };
        let near = producer.join().unwrap();
        loom_hooks::advance_clock(&timer, TICK * 2);
        // Not at 4 ms: a worker still planning for `far` would sleep on, and the model deadlock.
        fired.wait();
        assert_eq!(far_probe.ran(), 0, "fired 2 ticks early");
        stop_with_far(&timer, &far_probe, &far);
        probe.assert_ended_once(&near, "near");
    });
}

/// As `earlier_deadline_wakes_a_sleeping_worker`, for a future: its queue may wait 16 ms for the
/// worker's look (`Shard::ask`), so a push that races the worker's planning must still ask for
/// its fire tick, or be seen at it by the worker's look at the queues.
#[test]
fn an_earlier_future_wakes_a_sleeping_worker() {
    check("an_earlier_future_wakes_a_sleeping_worker", || {
        let (timer, far_probe, far) = planning_for_far();

        // Racing the worker's tick 0 and its planning: a sleep due at 2 ms (tick 2, over at 3 ms).
        let (counting, waker) = counting();
        let producer = {
            let h = timer.handle();
            thread::spawn(move || {
                let mut sleep = Box::pin(h.sleep(TICK));
                let first = sleep.as_mut().poll(&mut Context::from_waker(&waker));
                (sleep, first.is_pending())
            })
        };
        let (mut sleep, pending) = producer.join().unwrap();
        assert!(pending, "due a tick on: pending at its first poll");
        loom_hooks::advance_clock(&timer, TICK * 3);
        // Not at 4 ms: a worker still planning for `far` would sleep on, and the model deadlock.
        counting.woken.wait();
        assert_eq!(far_probe.ran(), 0, "fired a tick early");
        let waker = Waker::from(Arc::clone(&counting));
        let again = sleep.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(matches!(again, Poll::Ready(Ok(()))), "{again:?}");
        drop(sleep);
        stop_with_far(&timer, &far_probe, &far);
    });
}

/// The clock held, a timer whose worker, once it has transferred a timeout due at 3 ms (tick 0,
/// at 1 ms), plans to sleep to 4 ms; that timeout and its probe.
fn planning_for_far() -> (Owned<HashedWheelTimer>, Probe, Timeout) {
    loom_hooks::hold_clock();
    let timer = threaded_timer(0);
    let far_probe = Probe::new();
    let far = timer.new_timeout(far_probe.task(), TICK * 3).unwrap();
    loom_hooks::advance_clock(&timer, TICK);
    (timer, far_probe, far)
}

/// Stops the timer: the far timeout comes back unrun, ended once, and nothing stays pending.
fn stop_with_far(timer: &HashedWheelTimer, far_probe: &Probe, far: &Timeout) {
    let returned = timer.stop().unwrap();
    book_stopped(&returned, &[(Some(far), far_probe)]);
    far_probe.assert_ended_once(far, "far");
    assert_eq!(timer.pending_timeouts(), 0);
}
