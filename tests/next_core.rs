//! The new core (`hashed_timer_wheel::next`) on its own: Netty's contract on a manual clock,
//! then on the real thread.

use hashed_timer_wheel::next::{Boxed, Job, Timeout, Timer};
use hashed_timer_wheel::TimerError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A task that records the manual clock's tick it ran on.
fn record(log: &Arc<Mutex<Vec<u64>>>, tag: u64) -> Boxed {
    let log = Arc::clone(log);
    Boxed::new(move |_| log.lock().unwrap().push(tag))
}

fn manual(len: usize) -> Timer {
    Timer::manual(TICK, len, None)
}

#[test]
fn fires_on_its_tick_never_before() {
    let timer = manual(8);
    let log = Arc::new(Mutex::new(Vec::new()));
    for d in [0u64, 1, 5, 8, 9, 100, 5000] {
        timer.new_timeout(record(&log, d), ms(d)).unwrap();
    }
    assert_eq!(timer.pending_timeouts(), 7);
    for now in 0..=5002u64 {
        timer.advance_to(ms(now));
        // A deadline d (in ms, on a 1 ms tick) fires at the end of tick d: at time d + 1.
        let fired = log.lock().unwrap().clone();
        assert!(fired.iter().all(|&d| d < now), "early at {now}: {fired:?}");
        assert!(
            [0u64, 1, 5, 8, 9, 100, 5000]
                .iter()
                .all(|&d| d + 1 >= now || fired.contains(&d)),
            "late at {now}: {fired:?}"
        );
    }
    assert_eq!(log.lock().unwrap().len(), 7);
    assert_eq!(timer.pending_timeouts(), 0);
}

#[test]
fn one_tick_fires_in_scheduling_order() {
    let timer = manual(4);
    let log = Arc::new(Mutex::new(Vec::new()));
    // Scheduled over time for one deadline, from far (levels) to near (buckets).
    for i in 0..50u64 {
        timer.advance_to(ms(i * 30));
        timer
            .new_timeout(record(&log, i), ms(2000 - i * 30))
            .unwrap();
    }
    timer.advance_to(ms(2001));
    assert_eq!(*log.lock().unwrap(), (0..50).collect::<Vec<_>>());
}

#[test]
fn cancel_before_and_after_transfer() {
    let timer = manual(8);
    let ran = Arc::new(AtomicUsize::new(0));
    let task = |ran: &Arc<AtomicUsize>| {
        let ran = Arc::clone(ran);
        Boxed::new(move |_| {
            ran.fetch_add(1, Ordering::SeqCst);
        })
    };
    let queued = timer.new_timeout(task(&ran), ms(10)).unwrap();
    assert!(queued.cancel());
    assert!(!queued.cancel());
    assert!(queued.is_cancelled() && !queued.is_expired());
    let placed = timer.new_timeout(task(&ran), ms(10)).unwrap();
    timer.advance_to(ms(1));
    assert_eq!(timer.pending_timeouts(), 1);
    assert!(placed.cancel());
    // Counted ended once the worker has processed the cancellation, within a turn.
    assert_eq!(timer.pending_timeouts(), 1);
    timer.advance_to(ms(2));
    assert_eq!(timer.pending_timeouts(), 0);
    timer.advance_to(ms(50));
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    let fired = timer.new_timeout(task(&ran), ms(1)).unwrap();
    timer.advance_to(ms(60));
    assert!(fired.is_expired() && !fired.cancel());
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[test]
fn transfer_cap_leaves_the_rest_for_later_ticks_and_loses_none() {
    let timer = manual(512);
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..250_000 {
        timer
            .new_timeout_detached(record_count(&ran), ms(0))
            .unwrap();
    }
    timer.advance_to(ms(1));
    assert_eq!(ran.load(Ordering::Relaxed), 100_000);
    timer.advance_to(ms(2));
    assert_eq!(ran.load(Ordering::Relaxed), 200_000);
    timer.advance_to(ms(3));
    assert_eq!(ran.load(Ordering::Relaxed), 250_000);
    assert_eq!(timer.pending_timeouts(), 0);
}

#[test]
fn stop_returns_what_never_ran_queued_or_placed() {
    let timer = manual(8);
    let log = Arc::new(Mutex::new(Vec::new()));
    let placed = timer.new_timeout(record(&log, 1), ms(10_000)).unwrap();
    timer.advance_to(ms(1));
    let queued = timer.new_timeout(record(&log, 2), ms(5)).unwrap();
    let cancelled = timer.new_timeout(record(&log, 3), ms(5)).unwrap();
    cancelled.cancel();
    let returned = timer.stop().unwrap();
    assert_eq!(returned.len(), 2);
    assert!(returned.contains(&placed) && returned.contains(&queued));
    assert!(returned.iter().all(Timeout::is_cancelled));
    assert_eq!(timer.pending_timeouts(), 0);
    assert!(timer.stop().unwrap().is_empty());
    let refused = timer.new_timeout(record(&log, 4), ms(1));
    assert!(matches!(refused, Err(TimerError::Stopped)));
    assert_eq!(timer.pending_timeouts(), 0);
    assert!(log.lock().unwrap().is_empty());
}

#[test]
fn pending_limit_is_exact_and_frees_on_end() {
    let timer: Timer = Timer::manual(TICK, 8, Some(3));
    let t: Vec<_> = (0..3)
        .map(|_| timer.new_timeout(Boxed::new(|_| {}), ms(5)).unwrap())
        .collect();
    let refused = timer.new_timeout(Boxed::new(|_| {}), ms(5));
    assert!(matches!(
        refused,
        Err(TimerError::TooManyPending { pending: 3, max: 3 })
    ));
    assert_eq!(timer.pending_timeouts(), 3);
    t[0].cancel();
    timer.advance_to(ms(1));
    timer.new_timeout(Boxed::new(|_| {}), ms(5)).unwrap();
    assert!(timer.new_timeout(Boxed::new(|_| {}), ms(5)).is_err());
    timer.advance_to(ms(10));
    assert_eq!(timer.pending_timeouts(), 0);
    // A task may schedule even while the limit is full: its own slot is freed before it runs.
    let timer = Arc::new(Timer::manual(TICK, 8, Some(1)));
    let again = Arc::new(Mutex::new(None));
    let (t2, a2) = (Arc::clone(&timer), Arc::clone(&again));
    timer
        .new_timeout(
            Boxed::new(move |_| {
                *a2.lock().unwrap() = Some(t2.new_timeout(Boxed::new(|_| {}), ms(1)).is_ok())
            }),
            ms(1),
        )
        .unwrap();
    timer.advance_to(ms(3));
    assert_eq!(*again.lock().unwrap(), Some(true));
}

#[test]
fn a_panicking_task_or_drop_loses_nothing() {
    struct PanicOnDrop;
    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            panic!("a task's drop");
        }
    }
    let timer = manual(8);
    let ran = Arc::new(AtomicUsize::new(0));
    timer
        .new_timeout(Boxed::new(|_| panic!("a task")), ms(1))
        .unwrap();
    let guard = PanicOnDrop;
    let dropped = timer
        .new_timeout(Boxed::new(move |_| drop(guard)), ms(1))
        .unwrap();
    dropped.cancel();
    timer.new_timeout(record_count(&ran), ms(1)).unwrap();
    timer.advance_to(ms(5));
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert_eq!(timer.pending_timeouts(), 0);
}

#[test]
fn duration_max_never_fires() {
    let timer = manual(8);
    let t = timer
        .new_timeout(Boxed::new(|_| panic!("fired")), Duration::MAX)
        .unwrap();
    timer.advance_to(Duration::from_secs(86_400 * 365));
    assert!(!t.is_expired());
    assert_eq!(timer.stop().unwrap(), vec![t]);
}

#[test]
fn request_timeout_churn_ends_every_timeout() {
    let timer = manual(512);
    for round in 0..200u64 {
        for _ in 0..1000 {
            timer
                .new_timeout(Boxed::new(|_| {}), ms(30_000))
                .unwrap()
                .cancel();
        }
        timer.advance_to(ms(round));
    }
    assert_eq!(timer.pending_timeouts(), 0);
    assert!(timer.stop().unwrap().is_empty());
}

/// A typed task: stored in place.
struct Count(Arc<AtomicUsize>);

impl Job for Count {
    fn run(self, _: &Timeout<Count>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn real_thread_fires_within_a_few_ticks() {
    let timer: Timer<Count> = Timer::new(TICK, 512);
    let ran = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    for i in 0..1000u64 {
        timer
            .new_timeout(Count(Arc::clone(&ran)), ms(5 + i % 20))
            .unwrap();
    }
    while ran.load(Ordering::SeqCst) < 1000 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{} ran",
            ran.load(Ordering::SeqCst)
        );
        std::thread::sleep(ms(1));
    }
    assert!(start.elapsed() >= ms(24));
    assert_eq!(timer.pending_timeouts(), 0);
}

#[test]
fn real_thread_wakes_for_an_earlier_timeout_and_for_cancels() {
    let timer: Timer<Count> = Timer::new(TICK, 512);
    let ran = Arc::new(AtomicUsize::new(0));
    let far = timer
        .new_timeout(Count(Arc::clone(&ran)), Duration::from_secs(3600))
        .unwrap();
    std::thread::sleep(ms(20));
    // The worker sleeps toward the hour; this one must wake it.
    let start = Instant::now();
    timer.new_timeout(Count(Arc::clone(&ran)), ms(10)).unwrap();
    while ran.load(Ordering::SeqCst) == 0 {
        assert!(start.elapsed() < Duration::from_secs(2));
        std::thread::sleep(ms(1));
    }
    far.cancel();
    while timer.pending_timeouts() != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "a cancel waits for its bucket"
        );
        std::thread::sleep(ms(1));
    }
}

#[test]
fn producers_racing_stop_lose_nothing() {
    for _ in 0..20 {
        let timer = Arc::new(Timer::<Count>::new(TICK, 64));
        let ran = Arc::new(AtomicUsize::new(0));
        let producers: Vec<_> = (0..3)
            .map(|_| {
                let (timer, ran) = (Arc::clone(&timer), Arc::clone(&ran));
                std::thread::spawn(move || {
                    let mut accepted = 0;
                    let mut cancelled = 0;
                    for i in 0..20_000u64 {
                        match timer
                            .new_timeout(Count(Arc::clone(&ran)), Duration::from_micros(i % 3000))
                        {
                            Ok(t) => {
                                accepted += 1;
                                if i % 3 == 0 && t.cancel() {
                                    cancelled += 1;
                                }
                            }
                            Err(e) => {
                                assert_eq!(e, TimerError::Stopped);
                                break;
                            }
                        }
                    }
                    (accepted, cancelled)
                })
            })
            .collect();
        std::thread::sleep(ms(5));
        let returned = timer.stop().unwrap().len();
        let (accepted, cancelled) = producers
            .into_iter()
            .map(|p| p.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        assert_eq!(accepted, ran.load(Ordering::SeqCst) + cancelled + returned);
        assert_eq!(timer.pending_timeouts(), 0);
    }
}

#[test]
fn the_owner_dropped_in_a_task_ends_everything_without_deadlock() {
    let timer: Timer = Timer::new(TICK, 8);
    let owner = Arc::new(Mutex::new(None::<Timer>));
    let ran = Arc::new(AtomicUsize::new(0));
    let o = Arc::clone(&owner);
    let dropper = timer
        .new_timeout(Boxed::new(move |_| drop(o.lock().unwrap().take())), ms(1))
        .unwrap();
    let later = timer
        .new_timeout(record_count(&ran), Duration::from_secs(60))
        .unwrap();
    *owner.lock().unwrap() = Some(timer);
    let start = Instant::now();
    while !(later.is_cancelled() && dropper.is_expired()) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the worker did not end everything"
        );
        std::thread::sleep(ms(1));
    }
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[test]
fn stop_inside_a_task_is_refused() {
    let timer = Arc::new(manual(8));
    let t = Arc::clone(&timer);
    let refused = Arc::new(Mutex::new(None));
    let r = Arc::clone(&refused);
    timer
        .new_timeout(
            Boxed::new(move |_| *r.lock().unwrap() = Some(t.stop().unwrap_err())),
            ms(1),
        )
        .unwrap();
    timer.advance_to(ms(5));
    assert_eq!(*refused.lock().unwrap(), Some(TimerError::StopFromWorker));
    assert!(timer.stop().unwrap().is_empty());
}

fn record_count(ran: &Arc<AtomicUsize>) -> Boxed {
    let ran = Arc::clone(ran);
    Boxed::new(move |_| {
        ran.fetch_add(1, Ordering::SeqCst);
    })
}

#[test]
fn a_task_reschedules_itself_through_its_timeout() {
    fn again(left: Arc<AtomicUsize>) -> Boxed {
        Boxed::new(move |t| {
            if left.fetch_sub(1, Ordering::SeqCst) > 1 {
                t.timer().new_timeout_detached(again(left), ms(3)).unwrap();
            }
        })
    }
    let timer = manual(32);
    let left = Arc::new(AtomicUsize::new(5));
    timer
        .new_timeout_detached(again(Arc::clone(&left)), ms(3))
        .unwrap();
    for now in 0..40 {
        timer.advance_to(ms(now));
    }
    assert_eq!(left.load(Ordering::SeqCst), 0);
    assert_eq!(timer.pending_timeouts(), 0);
}

#[test]
fn stats_count_each_outcome_once() {
    let timer: Timer = Timer::manual(TICK, 8, Some(4));
    let fires = timer.new_timeout(Boxed::new(|_| {}), ms(1)).unwrap();
    let panics = timer
        .new_timeout(Boxed::new(|_| panic!("a task")), ms(1))
        .unwrap();
    let queued = timer.new_timeout(Boxed::new(|_| {}), ms(1)).unwrap();
    assert!(queued.cancel());
    let in_wheel = timer.new_timeout(Boxed::new(|_| {}), ms(50)).unwrap();
    assert!(timer.new_timeout(Boxed::new(|_| {}), ms(1)).is_err());
    // Deadlines at 1 ms, fired by the turn at 2 ms: a tick late.
    timer.advance_to(ms(2));
    assert!(in_wheel.cancel());
    // A deadline at 2 ms, fired by the turn at 942 ms.
    let late = timer.new_timeout(Boxed::new(|_| {}), ms(0)).unwrap();
    timer.advance_to(ms(942));
    let stats = timer.stats();
    assert!(fires.is_expired() && panics.is_expired() && late.is_expired());
    assert_eq!(
        (
            stats.expired,
            stats.panicked,
            stats.cancelled,
            stats.refused
        ),
        (3, 1, 2, 1)
    );
    assert_eq!(stats.late_max, ms(940));
    assert_eq!(stats.lateness, [0, 2, 0, 0, 0, 0, 0, 1]);
    assert_eq!(stats.tick, 942);
    assert_eq!(
        (stats.slow_runs, stats.longest_run, stats.wakeups),
        (0, Duration::ZERO, 0)
    );
}

#[test]
fn reused_boxes_run_each_closure_once_on_its_own_data() {
    let timer = manual(8);
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut next_id = 0u64;
    for wave in 0..3u64 {
        for _ in 0..200 {
            next_id += 1;
            let (log, id) = (Arc::clone(&log), next_id);
            if id % 3 == 0 {
                // Another closure type between them: its box is not reused for the first type.
                let extra = [id; 4];
                timer
                    .new_timeout_fn_detached(move |_| log.lock().unwrap().push(extra[3]), ms(1))
                    .unwrap();
            } else if id % 7 == 0 {
                let t = timer
                    .new_timeout_fn(move |_| log.lock().unwrap().push(id), ms(1))
                    .unwrap();
                assert!(t.cancel());
            } else {
                timer
                    .new_timeout_fn_detached(move |_| log.lock().unwrap().push(id), ms(1))
                    .unwrap();
            }
        }
        timer.advance_to(ms(wave * 10 + 5));
    }
    let mut ran = log.lock().unwrap().clone();
    ran.sort_unstable();
    let expected: Vec<u64> = (1..=next_id)
        .filter(|id| id % 3 == 0 || id % 7 != 0)
        .collect();
    assert_eq!(ran, expected);
    assert_eq!(timer.pending_timeouts(), 0);
}
