//! `new_timeout_detached`: the same contract as `new_timeout` with no handle returned. Each
//! fires on the tick `new_timeout`'s would, once, with an expired `Timeout` to look at; `stop()`
//! returns the ones that never ran; the pending limit and a stopped timer refuse them (counted
//! as refused); the typed timer has it too; and chunks of detached timeouts are freed or reused
//! once they all ran (no reference is left behind for want of a handle).

use hashed_timer_wheel::{HashedWheelTimer, Timeout, TimerError, TypedTask};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TICK: Duration = Duration::from_millis(10);

/// What each task records: (id, detached?, the tick it ran on, expired when it ran).
type Log = Arc<Mutex<Vec<(u32, bool, u64, bool)>>>;

#[test]
fn detached_timeouts_fire_on_the_same_ticks_as_handled_ones_once() {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(TICK)
        .ticks_per_wheel(8)
        .build_manual()
        .unwrap();
    let log: Log = Arc::default();
    let mut handles = Vec::new();
    // Delays of 0 to 195 ms on a 10 ms tick and an 8-bucket wheel (several rounds), each twice:
    // once detached, once with a handle, interleaved in the same batches.
    for id in 0..40u32 {
        for detached in [true, false] {
            let (log, d) = (log.clone(), driver.clone());
            let task = move |t: &Timeout| {
                log.lock()
                    .unwrap()
                    .push((id, detached, d.current_tick(), t.is_expired()))
            };
            let delay = TICK / 2 * id;
            if detached {
                timer.new_timeout_detached(task, delay).unwrap();
            } else {
                handles.push(timer.new_timeout(task, delay).unwrap());
            }
        }
    }
    assert_eq!(timer.pending_timeouts(), 80);
    for _ in 0..25 {
        driver.advance(TICK);
    }
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 80, "each ran once");
    for id in 0..40u32 {
        let ticks: Vec<u64> = log.iter().filter(|e| e.0 == id).map(|e| e.2).collect();
        assert_eq!(ticks.len(), 2, "timeout {id}: {log:?}");
        assert_eq!(
            ticks[0], ticks[1],
            "timeout {id}: detached and handled differ"
        );
        // Due at id * 5 ms: runs in the tick that holds its deadline.
        assert_eq!(ticks[0], u64::from(id) * 5 / 10, "timeout {id}");
    }
    assert!(log.iter().all(|e| e.3), "each saw its timeout expired");
    assert!(handles.iter().all(Timeout::is_expired));
    assert_eq!(timer.pending_timeouts(), 0);
    assert_eq!(timer.stats().expired, 80);
}

#[test]
fn stop_returns_detached_timeouts_that_never_ran() {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(TICK)
        .ticks_per_wheel(8)
        .build_manual()
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    struct CountDrop(Arc<AtomicUsize>);
    impl Drop for CountDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let schedule = |delay: Duration| {
        let (ran, guard) = (ran.clone(), CountDrop(dropped.clone()));
        timer
            .new_timeout_detached(
                move |_: &Timeout| {
                    let _guard = &guard;
                    ran.fetch_add(1, SeqCst);
                },
                delay,
            )
            .unwrap();
    };
    for _ in 0..3 {
        schedule(TICK); // runs
    }
    for _ in 0..70 {
        schedule(TICK * 100); // in the wheel when stopped (more than a chunk of 32)
    }
    driver.advance(TICK * 2);
    for _ in 0..5 {
        schedule(TICK * 100); // still queued when stopped
    }
    assert_eq!(ran.load(SeqCst), 3);
    let returned = timer.stop().unwrap();
    assert_eq!(returned.len(), 75);
    assert!(returned.iter().all(|t| t.is_cancelled()));
    drop(returned);
    assert_eq!(dropped.load(SeqCst), 78, "every task dropped once");
    assert_eq!(timer.pending_timeouts(), 0);
    assert_eq!(
        timer
            .new_timeout_detached(|_: &Timeout| {}, TICK)
            .unwrap_err(),
        TimerError::Stopped
    );
}

#[test]
fn the_pending_limit_refuses_detached_timeouts_and_counts_them() {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(TICK)
        .max_pending_timeouts(2)
        .build_manual()
        .unwrap();
    timer.new_timeout_detached(|_: &Timeout| {}, TICK).unwrap();
    let handle = timer.handle();
    handle.new_timeout_detached(|_: &Timeout| {}, TICK).unwrap();
    assert_eq!(
        timer
            .new_timeout_detached(|_: &Timeout| {}, TICK)
            .unwrap_err(),
        TimerError::TooManyPending { pending: 2, max: 2 }
    );
    assert_eq!(timer.stats().refused, 1);
    driver.advance(TICK * 2); // due at 10 ms: in tick 1, run at its end

    assert_eq!(timer.pending_timeouts(), 0);
    timer.new_timeout_detached(|_: &Timeout| {}, TICK).unwrap();
    assert_eq!(timer.pending_timeouts(), 1);
}

#[test]
fn a_typed_timer_runs_detached_tasks_with_their_data() {
    struct Add(u64, Arc<Mutex<Vec<u64>>>);
    impl TypedTask for Add {
        fn run(self, timeout: &Timeout<Self>) {
            assert!(timeout.is_expired());
            self.1.lock().unwrap().push(self.0);
        }
    }
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(TICK)
        .build_manual_typed::<Add>()
        .unwrap();
    let out: Arc<Mutex<Vec<u64>>> = Arc::default();
    for i in 0..100 {
        timer
            .new_timeout_detached(Add(i, out.clone()), TICK * (1 + i as u32 % 3))
            .unwrap();
    }
    timer
        .handle()
        .new_timeout_detached(Add(1000, out.clone()), TICK)
        .unwrap();
    driver.advance(TICK * 4);
    let mut got = out.lock().unwrap().clone();
    got.sort_unstable();
    let mut want: Vec<u64> = (0..100).collect();
    want.push(1000);
    assert_eq!(got, want);
    assert_eq!(timer.pending_timeouts(), 0);
}

#[test]
fn a_threaded_timer_runs_detached_timeouts() {
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    let (tx, rx) = std::sync::mpsc::channel();
    for i in 0..1000u32 {
        let tx = tx.clone();
        timer
            .new_timeout_detached(
                move |t: &Timeout| tx.send((i, t.is_expired())).unwrap(),
                Duration::from_millis(u64::from(i % 5)),
            )
            .unwrap();
    }
    drop(tx);
    let mut got: Vec<(u32, bool)> = rx.iter().collect();
    got.sort_unstable();
    assert_eq!(got, (0..1000).map(|i| (i, true)).collect::<Vec<_>>());
    assert!(timer.stop().unwrap().is_empty());
}
