//! `new_timeout_detached` racing `stop()` and a tick. A detached timeout has no handle: only
//! its entry in the shard, then the worker (its wheel and block table), reach its slot, and
//! whoever ends the timeout (the expiry, or `stop()` draining the shards, the worker's inbox
//! and the wheel in `Worker::stop`) must find it. Checked: the call is refused with `Stopped`
//! and the task is dropped unrun, or accepted and then the task ran once or `stop()` returned
//! it once; never lost, never both; the task is dropped exactly once; pending is 0 at the end.
#![cfg(loom)]

use hashed_timer_wheel::{Timeout, TimerError};
use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::thread;
use loom_tests::{check, manual_timer, TICK};
use std::sync::Arc;
use std::time::Duration;

/// Counts its drops; the task holds one.
struct Guard(Arc<AtomicUsize>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

#[test]
fn detached_new_timeout_races_stop_and_manual_tick() {
    check("detached_new_timeout_races_stop_and_manual_tick", || {
        let (timer, driver) = manual_timer(0);
        // A detached timeout already in the wheel when the race starts (due in 4 ticks).
        let ran = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(AtomicUsize::new(0));
        let task = |ran: &Arc<AtomicUsize>, drops: &Arc<AtomicUsize>| {
            let (ran, guard) = (Arc::clone(ran), Guard(Arc::clone(drops)));
            move |t: &Timeout| {
                let _guard = &guard;
                assert!(t.is_expired());
                ran.fetch_add(1, SeqCst);
            }
        };
        timer
            .new_timeout_detached(task(&ran, &drops), TICK * 4)
            .unwrap();
        driver.advance(TICK);

        let producer = {
            let (h, t) = (timer.handle(), task(&ran, &drops));
            thread::spawn(move || h.new_timeout_detached(t, Duration::ZERO))
        };
        let ticker = {
            let d = driver.clone();
            thread::spawn(move || d.advance(TICK))
        };
        let returned = timer.stop().unwrap();
        let result = producer.join().unwrap();
        ticker.join().unwrap();

        assert!(returned.iter().all(|r| r.is_cancelled()));
        let accepted = match result {
            Ok(()) => 2,
            Err(e) => {
                assert_eq!(e, TimerError::Stopped);
                1
            }
        };
        // The one in the wheel was due in 4 ticks: never run. Each accepted timeout ran or
        // was returned, once.
        assert_eq!(
            ran.load(SeqCst) + returned.len(),
            accepted,
            "ran {} returned {}",
            ran.load(SeqCst),
            returned.len()
        );
        assert!(!returned.is_empty(), "the one in the wheel is returned");
        drop(returned);
        assert_eq!(drops.load(SeqCst), 2, "each task dropped once");
        assert_eq!(timer.pending_timeouts(), 0);
    });
}
