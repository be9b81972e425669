//! The last owner dropped inside a task, racing a producer.
//!
//! Dropping the owner inside a turn cannot wait for the turn (it runs in it), so it only shuts
//! the timer (`shutdown` in `src/engine/lifecycle.rs`: `SHUTDOWN` set, every shard's lock taken
//! once), and the turn's runner ends the rest when the turn is over (`Shared::run_turn`): a stop
//! whose returned timeouts are dropped. A producer racing it through a handle is refused with
//! `Stopped`, or accepted and then its timeout ends like any timeout of a stopped timer: it
//! ran, or it is cancelled. Modelled with the turn run from the model (manual driver); on the
//! real thread the same turn ends the rest, but nobody joins that thread, so the model could not
//! wait for it through the public API.
#![cfg(loom)]

use hashed_timer_wheel::{HashedWheelTimer, Timeout, TimerError};
use loom::sync::Mutex;
use loom::thread;
use loom_tests::{check, manual_timer, Owned, Probe, TICK};
use std::sync::Arc;
use std::time::Duration;

type Owner = Arc<Mutex<Option<Owned<HashedWheelTimer>>>>;

/// A task that drops the timer's last owner.
fn dropping(probe: &Probe, owner: &Owner) -> impl FnOnce(&Timeout) + Send + 'static {
    let owner = Arc::clone(owner);
    probe.task_then(move |_: &Timeout| drop(owner.lock().unwrap().take()))
}

/// The producer's timeout ended: refused, ran, or cancelled by the shutdown.
fn assert_ended(probe: &Probe, result: &Result<Timeout, TimerError>, what: &str) {
    match result {
        Ok(t) => {
            let (ran, cancelled) = (probe.ran(), t.is_cancelled());
            assert!(
                (ran == 1) != cancelled,
                "{what}: ran {ran} times, cancelled {cancelled}: {t:?}"
            );
            assert!(
                !t.cancel(),
                "{what}: still cancellable after the shutdown: {t:?}"
            );
        }
        Err(e) => {
            assert_eq!(*e, TimerError::Stopped, "{what}");
            probe.assert_never_ran(what);
        }
    }
}

#[test]
fn owner_dropped_in_manual_tick_races_new_timeout() {
    check("owner_dropped_in_manual_tick_races_new_timeout", || {
        let (timer, driver) = manual_timer(0);
        let handle = timer.handle();
        let owner: Owner = Arc::new(Mutex::new(Some(timer)));
        let p1 = Probe::new();
        let t1 = handle
            .new_timeout(dropping(&p1, &owner), Duration::ZERO)
            .unwrap();

        let p2 = Probe::new();
        let producer = {
            let (h, p) = (handle.clone(), p2.clone());
            thread::spawn(move || h.new_timeout(p.task(), TICK))
        };
        driver.advance(TICK); // tick 0: t1 drops the owner
        let r2 = producer.join().unwrap();
        driver.advance(TICK * 3); // the driver drops the worker

        assert!(owner.lock().unwrap().is_none());
        p1.assert_ended_once(&t1, "t1");
        assert_ended(&p2, &r2, "t2");
        assert!(handle.is_stopped());
        assert_eq!(handle.pending_timeouts(), 0);
    });
}
