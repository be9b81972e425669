//! `stop()` racing `cancel()`.
//!
//! Both move a timeout from `QUEUED` or `PLACED` to `CANCELLED` (`Block::cancel`); exactly one
//! wins. If `cancel()` returned true the timeout is not in `stop()`'s list, and is counted
//! cancelled once (by the worker's turn, or by `Worker::stop` if no turn ended it); otherwise
//! `stop()` returned it (or it had expired). Modelled with the real worker thread and with a
//! manual driver, with one timeout in the wheel and one still queued in its shard.
#![cfg(loom)]

use loom::thread;
use loom_tests::{book_stopped, check, manual_timer, threaded_timer, Probe, TICK};

#[test]
fn stop_races_cancel_with_worker_thread() {
    check("stop_races_cancel_with_worker_thread", || {
        let timer = threaded_timer(0);
        let probe = Probe::new();
        let t = timer.new_timeout(probe.task(), TICK * 2).unwrap();
        let canceller = {
            let (t, p) = (t.clone(), probe.clone());
            thread::spawn(move || p.cancel(&t))
        };
        let returned = timer.stop().unwrap();
        let won = canceller.join().unwrap();

        book_stopped(&returned, &[(Some(&t), &probe)]);
        if won {
            assert!(returned.is_empty(), "cancelled, yet returned by stop");
        }
        assert_eq!(
            timer.stats().cancelled,
            u64::from(won),
            "the cancel that won is counted"
        );
        probe.assert_ended_once(&t, "t");
        assert_eq!(timer.pending_timeouts(), 0);
    });
}

#[test]
fn stop_races_cancel_with_manual_driver() {
    check("stop_races_cancel_with_manual_driver", || {
        let (timer, driver) = manual_timer(0);
        let in_wheel = Probe::new();
        let a = timer.new_timeout(in_wheel.task(), TICK * 4).unwrap();
        driver.advance(TICK); // `a` is in the wheel
        let queued = Probe::new();
        let b = timer.new_timeout(queued.task(), TICK * 4).unwrap(); // `b` is in the queue

        let canceller = {
            let (a, b, pa, pb) = (a.clone(), b.clone(), in_wheel.clone(), queued.clone());
            thread::spawn(move || (pa.cancel(&a), pb.cancel(&b)))
        };
        let returned = timer.stop().unwrap();
        let (won_a, won_b) = canceller.join().unwrap();

        book_stopped(&returned, &[(Some(&a), &in_wheel), (Some(&b), &queued)]);
        assert_eq!(returned.iter().any(|r| *r == a), !won_a);
        assert_eq!(returned.iter().any(|r| *r == b), !won_b);
        assert_eq!(
            timer.stats().cancelled,
            u64::from(won_a) + u64::from(won_b),
            "each cancel that won is counted once"
        );
        in_wheel.assert_ended_once(&a, "a (in the wheel)");
        queued.assert_ended_once(&b, "b (in the queue)");
        assert_eq!(timer.pending_timeouts(), 0);
    });
}
