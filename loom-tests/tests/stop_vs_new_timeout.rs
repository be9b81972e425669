//! `stop()` racing `new_timeout` (the race Netty loses).
//!
//! A producer schedules while the main thread stops the timer. The producer reads `SHUTDOWN`
//! under its shard's lock, and `stop()` sets it and then takes every shard's lock once
//! (`src/engine/lifecycle.rs`), so the new timeout is either refused with `Stopped` (and never
//! runs) or accepted, and then it ran or `stop()` returned it; never lost. Modelled with the real
//! worker thread (`stop()` wakes and joins it, then `Worker::stop` drains the shards, the inbox
//! and the wheel), and with a manual driver ticking on a third thread (`stop()` takes the worker
//! once the driver's turn is over), where a timeout already in the wheel must also be returned.
#![cfg(loom)]

use hashed_timer_wheel::TimerError;
use loom::thread;
use loom_tests::{book_stopped, check, manual_timer, threaded_timer, Probe, TICK};
use std::time::Duration;

#[test]
fn stop_races_new_timeout_with_worker_thread() {
    check("stop_races_new_timeout_with_worker_thread", || {
        let timer = threaded_timer(0);
        timer.start().unwrap();
        let probe = Probe::new();
        let producer = {
            let (h, p) = (timer.handle(), probe.clone());
            thread::spawn(move || h.new_timeout(p.task(), Duration::ZERO))
        };
        let returned = timer.stop().unwrap();
        let result = producer.join().unwrap();

        book_stopped(&returned, &[(result.as_ref().ok(), &probe)]);
        probe.assert_outcome(&result, &[TimerError::Stopped], "new timeout");
        assert_eq!(timer.pending_timeouts(), 0);
        assert_eq!(
            timer
                .handle()
                .new_timeout(|_: &_| {}, Duration::ZERO)
                .unwrap_err(),
            TimerError::Stopped
        );
    });
}

#[test]
fn stop_races_new_timeout_and_manual_tick() {
    check("stop_races_new_timeout_and_manual_tick", || {
        let (timer, driver) = manual_timer(0);
        // Already in the wheel when the race starts: due in 4 ticks, transferred by tick 0.
        let old_probe = Probe::new();
        let old = timer.new_timeout(old_probe.task(), TICK * 4).unwrap();
        driver.advance(TICK);

        let probe = Probe::new();
        let producer = {
            let (h, p) = (timer.handle(), probe.clone());
            thread::spawn(move || h.new_timeout(p.task(), Duration::ZERO))
        };
        let ticker = {
            let d = driver.clone();
            thread::spawn(move || d.advance(TICK))
        };
        let returned = timer.stop().unwrap();
        let result = producer.join().unwrap();
        ticker.join().unwrap();

        book_stopped(
            &returned,
            &[(Some(&old), &old_probe), (result.as_ref().ok(), &probe)],
        );
        old_probe.assert_ended_once(&old, "timeout in the wheel");
        probe.assert_outcome(&result, &[TimerError::Stopped], "new timeout");
        assert_eq!(timer.pending_timeouts(), 0);
    });
}
