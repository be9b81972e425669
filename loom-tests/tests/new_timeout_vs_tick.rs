//! `new_timeout` racing the worker's tick.
//!
//! Two producers push onto the shard while the model's main thread runs tick 0 through the
//! manual driver (the worker's real turn, `Worker::turn`: collect the shards' cancellations and
//! new timeouts, transfer them into the wheel, expire the tick's bucket). Each timeout is pushed
//! before, during or after the collect and must fire exactly once, never before its deadline;
//! `pending_timeouts()` returns to 0.
#![cfg(loom)]

use hashed_timer_wheel::TimerError;
use loom::thread;
use loom_tests::{check, manual_timer, Probe, TICK};
use std::time::Duration;

#[test]
fn new_timeout_races_transfer_and_expiry() {
    check("new_timeout_races_transfer_and_expiry", || {
        let (timer, driver) = manual_timer(0);
        timer.start().unwrap();
        let producers: Vec<_> = [Duration::ZERO, TICK]
            .into_iter()
            .map(|delay| {
                let probe = Probe::new();
                let (h, d, p) = (timer.handle(), driver.clone(), probe.clone());
                let join = thread::spawn(move || {
                    let earliest = d.now() + delay;
                    h.new_timeout(p.task_not_before(&d, earliest), delay)
                });
                (probe, join)
            })
            .collect();

        driver.advance(TICK); // tick 0, racing both pushes

        let results: Vec<(Probe, Result<_, TimerError>)> = producers
            .into_iter()
            .map(|(p, j)| (p, j.join().unwrap()))
            .collect();
        driver.advance(TICK * 3); // whatever is due has fired by now
        for (i, (probe, result)) in results.iter().enumerate() {
            probe.assert_outcome(result, &[], &format!("timeout {i}"));
        }
        assert_eq!(timer.pending_timeouts(), 0);
    });
}
