//! Lazy start.
//!
//! The worker thread starts on the first `new_timeout` (or `start()`), exactly once even when
//! two callers race to be first: both are accepted, the library spawns one thread, and both
//! tasks run on it (or are returned by the final `stop()`).
#![cfg(loom)]

use hashed_timer_wheel::{loom_hooks, Timeout};
use loom::sync::Mutex;
use loom::thread;
use loom_tests::{book_stopped, check, threaded_timer, Probe};
use std::sync::Arc;
use std::time::Duration;

/// A task that records the thread it ran on.
fn recording(
    probe: &Probe,
    ran_on: &Arc<Mutex<Vec<thread::ThreadId>>>,
) -> impl FnOnce(&Timeout) + Send + 'static {
    let ran_on = Arc::clone(ran_on);
    probe.task_then(move |_: &Timeout| ran_on.lock().unwrap().push(thread::current().id()))
}

#[test]
fn two_first_new_timeouts_start_one_worker() {
    check("two_first_new_timeouts_start_one_worker", || {
        let timer = threaded_timer(0);
        let ran_on = Arc::new(Mutex::new(Vec::new()));
        let (p1, p2) = (Probe::new(), Probe::new());
        let other = {
            let (h, task) = (timer.handle(), recording(&p2, &ran_on));
            thread::spawn(move || h.new_timeout(task, Duration::ZERO))
        };
        let t1 = timer.new_timeout(recording(&p1, &ran_on), Duration::ZERO);
        let t2 = other.join().unwrap();
        let (t1, t2) = (
            t1.expect("first caller accepted"),
            t2.expect("second caller accepted"),
        );

        assert_eq!(
            loom_hooks::threads_spawned(),
            1,
            "exactly one worker thread"
        );
        let returned = timer.stop().unwrap();
        book_stopped(&returned, &[(Some(&t1), &p1), (Some(&t2), &p2)]);
        p1.assert_ended_once(&t1, "t1");
        p2.assert_ended_once(&t2, "t2");
        let ran_on = ran_on.lock().unwrap();
        assert!(
            ran_on.windows(2).all(|w| w[0] == w[1]),
            "tasks ran on two threads"
        );
        assert!(
            !ran_on.contains(&thread::current().id()),
            "a task ran on a caller"
        );
        assert_eq!(loom_hooks::threads_spawned(), 1);
    });
}

#[test]
fn start_races_new_timeout() {
    check("start_races_new_timeout", || {
        let timer = Arc::new(threaded_timer(0));
        let probe = Probe::new();
        let starter = {
            let timer = Arc::clone(&timer);
            thread::spawn(move || timer.start())
        };
        let t = timer
            .new_timeout(probe.task(), Duration::ZERO)
            .expect("accepted");
        starter.join().unwrap().expect("start succeeds");

        assert_eq!(
            loom_hooks::threads_spawned(),
            1,
            "exactly one worker thread"
        );
        let returned = timer.stop().unwrap();
        book_stopped(&returned, &[(Some(&t), &probe)]);
        probe.assert_ended_once(&t, "t");
    });
}
