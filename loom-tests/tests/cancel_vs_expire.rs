//! `cancel` racing the expiry of the same timeout.
//!
//! A due timeout is cancelled by two threads while a third runs its tick. Exactly one of the
//! three decides its fate, by a compare-and-swap on its slot's state (`src/engine/slots.rs`:
//! `Block::cancel` to `CANCELLED`, or the worker's `Block::place` to `PLACED`, then
//! `Block::expire` to `EXPIRED`): at most one `cancel()` returns true, and the task runs if and
//! only if no cancel won. The cancellation, wherever it lands (before the transfer, between
//! transfer and expiry, after expiry), is counted once: `pending_timeouts()` is 0.
#![cfg(loom)]

use loom::thread;
use loom_tests::{check, manual_timer, Probe, TICK};
use std::time::Duration;

#[test]
fn cancel_races_expiry() {
    check("cancel_races_expiry", || {
        let (timer, driver) = manual_timer(0);
        let probe = Probe::new();
        let t = timer.new_timeout(probe.task(), Duration::ZERO).unwrap();

        let canceller = {
            let (t, p) = (t.clone(), probe.clone());
            thread::spawn(move || p.cancel(&t))
        };
        let ticker = {
            let d = driver.clone();
            thread::spawn(move || d.advance(TICK)) // tick 0: transfer, then expire t
        };
        let main_won = probe.cancel(&t);
        let other_won = canceller.join().unwrap();
        ticker.join().unwrap();
        driver.advance(TICK); // processes a late cancellation

        assert!(!(main_won && other_won), "two cancels won");
        assert_eq!(
            probe.ran() == 1,
            !(main_won || other_won),
            "runs iff cancel lost"
        );
        probe.assert_ended_once(&t, "t");
        assert_eq!(timer.pending_timeouts(), 0);
    });
}
