//! A runtime's `Drive` and the worker thread taking turns of the worker, with a producer whose
//! deadline is earlier than the plan.
//!
//! The runtime's sleep never ends here (a runtime whose timer is stalled), so the driver runs a
//! turn only when something wakes it: a producer whose deadline is earlier than the plan (or
//! the worker thread after a turn of its own, or `stop()`). The worker thread only watches
//! (`watch` in `src/engine/lifecycle.rs`): it sleeps until a grace past the plan (a bounded sleep
//! moves the clock to its end, as in every model) and then runs the turn the driver left;
//! with nothing planned it parks until a `Drive`'s turn plans a tick (`Shared::watch_plan`).
//! Both run turns under `Shared::worker`'s lock: each timeout ends exactly once, none early,
//! and `stop()` completes the driver (its runtime thread joins; a lost wake-up leaves it
//! parked, a loom deadlock).
#![cfg(loom)]

use loom::thread;
use loom_tests::{book_stopped, check_capped, threaded_timer, Probe, Signal, TICK};
use std::time::Duration;

#[test]
fn driver_and_worker_thread_share_the_turns() {
    // Capped at 2 preemptions: at 3 the three threads' interleavings (worker, runtime, model)
    // take well over ten minutes. At 2 the model finds the lost wake-up of a worker thread that
    // parked before the driver attached (iteration order aside, within its first minute).
    check_capped("driver_and_worker_thread_share_the_turns", 2, || {
        let timer = threaded_timer(0);
        let far_probe = Probe::new();
        // Pending three ticks away: the plan is finite, so a producer wakes the driver alone.
        let far = timer.new_timeout(far_probe.task(), TICK * 3).unwrap();
        let runtime = {
            let h = timer.handle();
            thread::spawn(move || {
                loom::future::block_on(h.drive(|_| std::future::pending::<()>()));
            })
        };
        // The model's thread is the producer: due at once, earlier than the plan.
        let fired = Signal::new();
        let probe = Probe::new();
        let f = fired.clone();
        let near = timer
            .new_timeout(probe.task_then(move |_| f.set()), Duration::ZERO)
            .unwrap();
        fired.wait();
        let returned = timer.stop().unwrap();
        runtime.join().unwrap(); // the driver completes once the timer stops
        book_stopped(&returned, &[(Some(&far), &far_probe)]);
        probe.assert_ended_once(&near, "near");
        far_probe.assert_ended_once(&far, "far");
        assert_eq!(timer.pending_timeouts(), 0);
    });
}
