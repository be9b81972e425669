//! The pending limit under concurrent `new_timeout`.
//!
//! With `max_pending_timeouts(1)`, never more than one timeout is pending: of two racing
//! producers exactly one is accepted and the other is refused with
//! `TooManyPending { pending: 1, max: 1 }`, changing nothing (`Shared::reserve`). The place a
//! cancelled timeout held is reusable only once the worker has ended it (`Shared::set_ended`),
//! and then it is.
#![cfg(loom)]

use hashed_timer_wheel::{Timeout, TimerError};
use loom::thread;
use loom_tests::{check, manual_timer, Probe, TICK};

const FULL: TimerError = TimerError::TooManyPending { pending: 1, max: 1 };

#[test]
fn limit_holds_under_racing_producers() {
    check("limit_holds_under_racing_producers", || {
        let (timer, driver) = manual_timer(1);
        timer.start().unwrap();
        let (p1, p2) = (Probe::new(), Probe::new());
        let other = {
            let (h, p) = (timer.handle(), p2.clone());
            thread::spawn(move || {
                let r = h.new_timeout(p.task(), TICK);
                assert!(h.pending_timeouts() <= 1, "over the limit");
                r
            })
        };
        let r1 = timer.new_timeout(p1.task(), TICK);
        assert!(timer.pending_timeouts() <= 1, "over the limit");
        let r2 = other.join().unwrap();

        assert_eq!(
            [&r1, &r2].iter().filter(|r| r.is_ok()).count(),
            1,
            "exactly one accepted: {r1:?} {r2:?}"
        );
        assert_eq!(timer.pending_timeouts(), 1, "the refusal changed the count");
        driver.advance(TICK * 3);
        p1.assert_outcome(&r1, &[FULL], "t1");
        p2.assert_outcome(&r2, &[FULL], "t2");
        assert_eq!(timer.pending_timeouts(), 0);
    });
}

#[test]
fn slot_freed_by_cancel_is_reused_once_processed() {
    check("slot_freed_by_cancel_is_reused_once_processed", || {
        let (timer, driver) = manual_timer(1);
        let p0 = Probe::new();
        let t0 = timer.new_timeout(p0.task(), TICK * 2).unwrap();
        driver.advance(TICK); // t0 is in the wheel; the limit is reached

        let canceller = {
            let (t0, p0) = (t0.clone(), p0.clone());
            thread::spawn(move || assert!(p0.cancel(&t0)))
        };
        let p1 = Probe::new();
        let producer = {
            let (h, p) = (timer.handle(), p1.clone());
            thread::spawn(move || {
                let r = h.new_timeout(p.task(), TICK);
                assert!(h.pending_timeouts() <= 1, "over the limit");
                r
            })
        };
        driver.advance(TICK); // processes the cancellation if it is there
        assert!(timer.pending_timeouts() <= 1, "over the limit");
        canceller.join().unwrap();
        let r1 = producer.join().unwrap();

        // Once the cancellation is processed, the slot is free again.
        driver.advance(TICK * 3);
        let p2 = Probe::new();
        let r2 = timer.new_timeout(p2.task(), TICK);
        let accepted: Vec<&Timeout> = [&r1, &r2].into_iter().flatten().collect();
        assert!(!accepted.is_empty(), "the freed slot was never reusable");
        driver.advance(TICK * 3);

        p0.assert_ended_once(&t0, "t0");
        p1.assert_outcome(&r1, &[FULL], "t1");
        p2.assert_outcome(&r2, &[FULL], "t2");
        assert_eq!(timer.pending_timeouts(), 0);
    });
}
