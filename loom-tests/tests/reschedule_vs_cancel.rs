//! A task rescheduling itself from inside the tick while another thread cancels it.
//!
//! The task of `first` schedules `second` through `Timeout::timer()` while the worker is in the
//! middle of its tick, at the pending limit of 1 (the worker counts `first` ended before its
//! task runs, so the reschedule is accepted). Another thread cancels `first`, then whatever
//! `second` is by then. Every timeout that exists ends exactly once; `pending_timeouts()`
//! returns to 0.
//! Modelled with the tick called from the model (manual driver) and on the real worker thread.
#![cfg(loom)]

use hashed_timer_wheel::{Timeout, TimerError};
use loom::sync::Mutex;
use loom::thread;
use loom_tests::{book_stopped, check, manual_timer, threaded_timer, Probe, TICK};
use std::sync::Arc;

type Slot = Arc<Mutex<Option<Result<Timeout, TimerError>>>>;

/// `first`'s task: reschedule (the `second` timeout) and publish the result.
fn rescheduling(
    first: &Probe,
    second: &Probe,
    slot: &Slot,
) -> impl FnOnce(&Timeout) + Send + 'static {
    let (second, slot) = (second.clone(), Arc::clone(slot));
    first.task_then(move |t: &Timeout| {
        let r = t.timer().new_timeout(second.task(), TICK);
        *slot.lock().unwrap() = Some(r);
    })
}

/// Cancels `first`, then `second` if it exists yet.
fn canceller(
    first: &Timeout,
    p_first: &Probe,
    p_second: &Probe,
    slot: &Slot,
) -> thread::JoinHandle<()> {
    let (first, p_first, p_second, slot) = (
        first.clone(),
        p_first.clone(),
        p_second.clone(),
        Arc::clone(slot),
    );
    thread::spawn(move || {
        p_first.cancel(&first);
        let second = slot.lock().unwrap().clone();
        if let Some(Ok(second)) = second {
            p_second.cancel(&second);
        }
    })
}

/// Every timeout that exists ended once; `second` exists iff `first`'s task ran, and was
/// refused only if `allowed` says so (a racing `stop()`).
fn check_outcome(first: &Timeout, p1: &Probe, p2: &Probe, slot: &Slot, allowed: &[TimerError]) {
    p1.assert_ended_once(first, "first");
    let second = slot.lock().unwrap().take();
    assert_eq!(
        second.is_some(),
        p1.ran() == 1,
        "rescheduled iff the first task ran"
    );
    match second {
        Some(r) => p2.assert_outcome(&r, allowed, "second"),
        None => p2.assert_never_ran("second (never scheduled)"),
    }
}

#[test]
fn reschedule_in_tick_races_cancel() {
    check("reschedule_in_tick_races_cancel", || {
        let (timer, driver) = manual_timer(1);
        let (p1, p2) = (Probe::new(), Probe::new());
        let slot: Slot = Arc::new(Mutex::new(None));
        let first = timer
            .new_timeout(rescheduling(&p1, &p2, &slot), TICK)
            .unwrap();
        let c = canceller(&first, &p1, &p2, &slot);
        driver.advance(TICK * 2); // fires `first` (tick 1), which reschedules
        c.join().unwrap();
        driver.advance(TICK * 3); // fires or frees `second`
                                  // At the limit of 1 the reschedule is accepted: expiry frees the slot first.
        check_outcome(&first, &p1, &p2, &slot, &[]);
        assert_eq!(timer.pending_timeouts(), 0);
    });
}

#[test]
fn reschedule_on_worker_thread_races_cancel() {
    check("reschedule_on_worker_thread_races_cancel", || {
        let timer = threaded_timer(1);
        let (p1, p2) = (Probe::new(), Probe::new());
        let slot: Slot = Arc::new(Mutex::new(None));
        let first = timer
            .new_timeout(rescheduling(&p1, &p2, &slot), TICK)
            .unwrap();
        canceller(&first, &p1, &p2, &slot).join().unwrap();
        let returned = timer.stop().unwrap();
        let second = slot.lock().unwrap().clone().and_then(Result::ok);
        book_stopped(&returned, &[(Some(&first), &p1), (second.as_ref(), &p2)]);
        check_outcome(&first, &p1, &p2, &slot, &[TimerError::Stopped]);
        assert_eq!(timer.pending_timeouts(), 0);
    });
}
