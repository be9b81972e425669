//! `new_timeout` and `cancel` from two producers while the worker ticks.
//!
//! Each producer schedules a timeout and cancels it at once; the main thread runs tick 0
//! meanwhile. The shard's new timeouts and its cancellation list interleave in every order with
//! the tick's steps: a cancel may win the slot while it is queued (the transfer's `Block::place`
//! then fails and ends it), after the transfer (the slot goes onto the cancellation list, and
//! the next collect ends it, or the expiry's compare-and-swap fails), or after the expiry (too
//! late). Every timeout ends once (ran, or its cancel won) and `pending_timeouts()` returns
//! to 0.
#![cfg(loom)]

use loom::thread;
use loom_tests::{check, manual_timer, Probe, TICK};
use std::time::Duration;

#[test]
fn producers_schedule_and_cancel_while_ticking() {
    check("producers_schedule_and_cancel_while_ticking", || {
        let (timer, driver) = manual_timer(0);
        timer.start().unwrap();
        let producers: Vec<_> = [Duration::ZERO, TICK]
            .into_iter()
            .map(|delay| {
                let probe = Probe::new();
                let (h, p) = (timer.handle(), probe.clone());
                let join = thread::spawn(move || {
                    let t = h.new_timeout(p.task(), delay).unwrap();
                    let won = p.cancel(&t);
                    (t, won)
                });
                (probe, join)
            })
            .collect();

        driver.advance(TICK); // tick 0, racing both producers

        let results: Vec<_> = producers
            .into_iter()
            .map(|(p, j)| (p, j.join().unwrap()))
            .collect();
        driver.advance(TICK * 2); // processes the cancellations, fires what is due
        for (i, (probe, (t, won))) in results.iter().enumerate() {
            let won = *won;
            assert_eq!(probe.ran() == 1, !won, "timeout {i}: runs iff cancel lost");
            probe.assert_ended_once(t, &format!("timeout {i}"));
        }
        assert_eq!(timer.pending_timeouts(), 0);
    });
}
