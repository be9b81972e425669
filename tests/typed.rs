//! Typed timers (`HashedWheelTimer<T>`, `T: TypedTask`): tasks stored in place, with the same
//! contract as the boxed timer's: each fires on its tick with its data, once; cancel, `stop()`
//! (the tasks that never ran are dropped, their timeouts returned), the pending limit, a task
//! rescheduling itself through its timeout's timer, an executor, a panicking task.

use hashed_timer_wheel::{HashedWheelTimer, ManualDriver, Timeout, TimerError, TypedTask};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TICK: Duration = Duration::from_millis(10);

/// A task that records (its id, the tick it ran on), and counts its drops.
struct Probe {
    id: u32,
    log: Arc<Mutex<Vec<(u32, u64)>>>,
    driver: Option<ManualDriver<Probe>>,
    drops: Arc<AtomicUsize>,
    /// Reschedule a copy of itself this many times, a tick apart.
    again: u32,
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
    }
}

impl TypedTask for Probe {
    fn run(mut self, timeout: &Timeout<Self>) {
        let tick = self
            .driver
            .as_ref()
            .map_or(u64::MAX, ManualDriver::current_tick);
        self.log.lock().unwrap().push((self.id, tick));
        assert!(timeout.is_expired());
        if self.again > 0 {
            self.again -= 1;
            let next = Probe {
                id: self.id + 1000,
                log: self.log.clone(),
                driver: self.driver.clone(),
                drops: self.drops.clone(),
                again: self.again,
            };
            timeout.timer().new_timeout(next, TICK).unwrap();
        }
    }
}

struct Setup {
    timer: HashedWheelTimer<Probe>,
    driver: ManualDriver<Probe>,
    log: Arc<Mutex<Vec<(u32, u64)>>>,
    drops: Arc<AtomicUsize>,
}

impl Setup {
    fn new(max_pending: usize) -> Setup {
        let (timer, driver) = HashedWheelTimer::builder()
            .tick_duration(TICK)
            .ticks_per_wheel(8)
            .max_pending_timeouts(max_pending)
            .build_manual_typed::<Probe>()
            .unwrap();
        Setup {
            timer,
            driver,
            log: Arc::default(),
            drops: Arc::default(),
        }
    }

    fn probe(&self, id: u32, again: u32) -> Probe {
        Probe {
            id,
            log: self.log.clone(),
            driver: Some(self.driver.clone()),
            drops: self.drops.clone(),
            again,
        }
    }

    fn log(&self) -> Vec<(u32, u64)> {
        self.log.lock().unwrap().clone()
    }
}

#[test]
fn typed_tasks_fire_on_their_ticks_with_their_data_once() {
    let s = Setup::new(0);
    // Delays of 0 to 200 ms on a 10 ms tick and an 8-bucket wheel: several rounds.
    let timeouts: Vec<Timeout<Probe>> = (0..40u32)
        .map(|id| s.timer.new_timeout(s.probe(id, 0), TICK / 2 * id).unwrap())
        .collect();
    assert_eq!(s.timer.pending_timeouts(), 40);
    let cancelled = timeouts[7].clone();
    assert!(cancelled.cancel());
    for _ in 0..25 {
        s.driver.advance(TICK);
    }
    let log = s.log();
    assert_eq!(log.len(), 39);
    for &(id, tick) in &log {
        assert_ne!(id, 7, "a cancelled task ran");
        // Due at id * 5 ms from 0: runs in the tick that holds its deadline.
        assert_eq!(tick, u64::from(id) * 5 / 10, "task {id}");
    }
    assert!(timeouts
        .iter()
        .enumerate()
        .all(|(i, t)| t.is_expired() == (i != 7)));
    assert_eq!(s.timer.pending_timeouts(), 0);
    assert_eq!(
        s.drops.load(SeqCst),
        40,
        "every task dropped once, the cancelled one too"
    );
}

#[test]
fn stop_returns_the_typed_timeouts_that_never_ran_with_their_tasks() {
    let s = Setup::new(0);
    let later: Vec<Timeout<Probe>> = (0..5)
        .map(|id| s.timer.new_timeout(s.probe(id, 0), TICK * 100).unwrap())
        .collect();
    s.driver.advance(TICK); // some in the wheel
    let queued = s.timer.new_timeout(s.probe(9, 0), TICK * 100).unwrap();
    let mut returned = s.timer.stop().unwrap();
    returned.sort_by_key(|t| later.iter().position(|l| *t == *l).unwrap_or(99));
    let mut expected = later.clone();
    expected.push(queued);
    assert_eq!(returned, expected);
    assert!(returned.iter().all(|never_ran| never_ran.is_cancelled()));
    assert_eq!(s.drops.load(SeqCst), 0, "the tasks are the caller's");
    let ids: Vec<u32> = returned
        .iter()
        .map(|never_ran| never_ran.task().id)
        .collect();
    assert_eq!(ids, [0, 1, 2, 3, 4, 9], "each timeout with its own task");
    drop(returned);
    assert_eq!(s.drops.load(SeqCst), 6);
    assert!(s.log().is_empty());
    assert_eq!(
        s.timer.new_timeout(s.probe(10, 0), TICK).unwrap_err(),
        TimerError::Stopped
    );
    assert_eq!(s.drops.load(SeqCst), 7, "a refused task is dropped");
}

#[test]
fn a_typed_task_reschedules_itself_at_the_pending_limit() {
    let s = Setup::new(1);
    s.timer.new_timeout(s.probe(1, 3), TICK).unwrap();
    assert_eq!(
        s.timer.new_timeout(s.probe(2, 0), TICK).unwrap_err(),
        TimerError::TooManyPending { pending: 1, max: 1 }
    );
    for _ in 0..10 {
        s.driver.advance(TICK);
    }
    let ids: Vec<u32> = s.log().iter().map(|&(id, _)| id).collect();
    assert_eq!(ids, vec![1, 1001, 2001, 3001]);
    let ticks: Vec<u64> = s.log().iter().map(|&(_, t)| t).collect();
    // Run in tick t, the clock at its end ((t + 1) ticks): one tick later is due in tick t + 2.
    assert_eq!(ticks, vec![1, 3, 5, 7]);
    assert_eq!(s.timer.pending_timeouts(), 0);
}

#[test]
fn typed_tasks_run_on_the_executor_and_a_panic_is_contained() {
    struct Job(Arc<AtomicUsize>, bool);
    impl TypedTask for Job {
        fn run(self, _: &Timeout<Self>) {
            assert!(!self.1, "a task that panics");
            self.0.fetch_add(1, SeqCst);
        }
    }
    let handed = Arc::new(AtomicUsize::new(0));
    let h = handed.clone();
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(TICK)
        .executor(move |job: Box<dyn FnOnce() + Send>| {
            h.fetch_add(1, SeqCst);
            job()
        })
        .build_manual_typed::<Job>()
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    timer.new_timeout(Job(ran.clone(), false), TICK).unwrap();
    timer.new_timeout(Job(ran.clone(), true), TICK).unwrap();
    timer.new_timeout(Job(ran.clone(), false), TICK).unwrap();
    driver.advance(TICK * 3);
    assert_eq!(handed.load(SeqCst), 3);
    assert_eq!(ran.load(SeqCst), 2);
    assert_eq!(timer.stats().expired, 3);
}

#[test]
fn a_typed_timer_on_its_own_thread() {
    struct Send1(std::sync::mpsc::Sender<u64>, u64);
    impl TypedTask for Send1 {
        fn run(self, _: &Timeout<Self>) {
            let _ = self.0.send(self.1);
        }
    }
    let timer: HashedWheelTimer<Send1> = HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .build_typed()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = timer.handle();
    let start = std::time::Instant::now();
    for i in 0..100 {
        handle
            .new_timeout(Send1(tx.clone(), i), Duration::from_millis(i % 5))
            .unwrap();
    }
    let mut got: Vec<u64> = (0..100).map(|_| rx.recv().unwrap()).collect();
    got.sort_unstable();
    assert_eq!(got, (0..100).collect::<Vec<_>>());
    assert!(start.elapsed() >= Duration::from_millis(4), "never early");
    drop(timer);
    assert_eq!(
        handle
            .new_timeout(Send1(tx, 0), Duration::ZERO)
            .unwrap_err(),
        TimerError::Stopped
    );
}
