//! A periodic task's run, storing the next run's timeout under the task's lock, racing a
//! `cancel()` of the schedule from another thread.
//!
//! The worker (the manual driver) runs the first run of a fixed-rate task, which schedules the
//! second when it returns; another thread cancels the schedule. (Not on the real worker thread:
//! under loom its sleeps jump the clock, so a schedule not yet cancelled runs without end.)
//! Whatever the interleaving: once `cancel()` has returned, no later run starts (the store
//! either sees the cancel and cancels the new timeout, or comes first and the cancel cancels
//! it), and nothing stays scheduled: `pending_timeouts()` returns to 0.
#![cfg(loom)]

use hashed_timer_wheel::{MissedRuns, PeriodicTimeout};
use loom::thread;
use loom_tests::{check, manual_timer, TICK};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

fn counting(runs: &Arc<AtomicUsize>) -> impl FnMut(&PeriodicTimeout) + Send + 'static {
    let runs = Arc::clone(runs);
    move |_: &PeriodicTimeout| {
        runs.fetch_add(1, SeqCst);
    }
}

#[test]
fn periodic_cancel_races_its_reschedule_with_manual_driver() {
    check(
        "periodic_cancel_races_its_reschedule_with_manual_driver",
        || {
            let (timer, driver) = manual_timer(0);
            let runs = Arc::new(AtomicUsize::new(0));
            let periodic = timer
                .schedule_at_fixed_rate(counting(&runs), TICK, TICK, MissedRuns::Burst)
                .unwrap();
            let p = periodic.clone();
            let canceller = thread::spawn(move || assert!(p.cancel()));
            driver.advance(TICK * 2); // the first run (tick 1), which reschedules for tick 2
            canceller.join().unwrap();
            let before = runs.load(SeqCst);
            assert!(before <= 1);
            driver.advance(TICK * 3); // the cancellation processed; a second run would be due
            assert_eq!(runs.load(SeqCst), before, "a run after the cancel returned");
            assert_eq!(periodic.runs() as usize, before);
            assert_eq!(timer.pending_timeouts(), 0, "a run left scheduled");
        },
    );
}
