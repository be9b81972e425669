//! Stress tests on the real worker thread: several threads scheduling and cancelling while it
//! runs, and `new_timeout` racing `stop()`. Each checks ARCHITECTURE.md's invariant: every
//! accepted timeout ends in exactly one of "its task ran once", "it was cancelled (`cancel()`
//! returned true)", "it was returned by `stop()`"; and a refused one never runs.
//!
//! Sized to take a second or two on two busy cores; the races are repeated rather than made
//! long.
#![allow(clippy::mutable_key_type)] // `Timeout` hashes by identity, not by its mutable state

mod common;

use hashed_timer_wheel::{HashedWheelTimer, Timeout, TimerError};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// xorshift64*: a few random numbers per operation without a dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What the test knows about one attempted timeout, shared with its task.
#[derive(Default)]
struct Record {
    runs: AtomicUsize,
    /// `cancel()` returned true for it.
    cancelled: AtomicBool,
    /// It ran before its delay had elapsed since (just before) `new_timeout`.
    early: AtomicBool,
}

fn task(record: &Arc<Record>, delay: Duration) -> impl FnOnce(&Timeout) + Send + 'static {
    let record = Arc::clone(record);
    let created = Instant::now();
    move |_: &Timeout| {
        if created.elapsed() < delay {
            record.early.store(true, SeqCst);
        }
        record.runs.fetch_add(1, SeqCst);
    }
}

/// Timeouts a thread may cancel besides its own.
type Pool = Arc<Mutex<Vec<(Arc<Record>, Timeout)>>>;

const THREADS: u64 = 4;
const PER_THREAD: usize = 4_000;
const FAR: Duration = Duration::from_secs(60);

/// Four threads each schedule 4 000 timeouts (0 to 20 ms, one in 20 far away) on a 1 ms,
/// 16-bucket timer, and cancel random earlier ones (their own and a shared pool, so cancels
/// race expiry and each other); then, after letting everything near settle or not, `stop()`.
fn schedule_and_cancel_from_many_threads(settle_before_stop: bool) {
    let timer = Arc::new(
        HashedWheelTimer::builder()
            .tick_duration(Duration::from_millis(1))
            .ticks_per_wheel(16)
            .build()
            .unwrap(),
    );
    let shared_pool: Pool = Arc::default();
    let start = Arc::new(Barrier::new(THREADS as usize));
    let producers: Vec<_> = (0..THREADS)
        .map(|seed| {
            let (timer, pool, start) = (timer.clone(), shared_pool.clone(), start.clone());
            thread::spawn(move || {
                let mut rng = Rng::new(seed + 1);
                let mut mine: Vec<(Arc<Record>, Timeout, bool)> = Vec::new();
                start.wait();
                for _ in 0..PER_THREAD {
                    let far = rng.below(20) == 0;
                    let delay = if far {
                        FAR
                    } else {
                        Duration::from_nanos(rng.below(20_000_001))
                    };
                    let record = Arc::new(Record::default());
                    let t = timer.new_timeout(task(&record, delay), delay).unwrap();
                    if rng.below(8) == 0 {
                        pool.lock().unwrap().push((record.clone(), t.clone()));
                    }
                    mine.push((record, t, far));
                    match rng.below(6) {
                        0 | 1 => {
                            let (record, t, _) = &mine[rng.below(mine.len() as u64) as usize];
                            if t.cancel() {
                                record.cancelled.store(true, SeqCst);
                            }
                        }
                        2 => {
                            let pool = pool.lock().unwrap();
                            if !pool.is_empty() {
                                let (record, t) = &pool[rng.below(pool.len() as u64) as usize];
                                if t.cancel() {
                                    record.cancelled.store(true, SeqCst);
                                }
                            }
                        }
                        _ => {}
                    }
                    if rng.below(500) == 0 {
                        thread::sleep(Duration::from_millis(1));
                    }
                }
                mine
            })
        })
        .collect();
    let all: Vec<(Arc<Record>, Timeout, bool)> = producers
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(all.len(), THREADS as usize * PER_THREAD);

    if settle_before_stop {
        // Every near timeout runs or has its cancellation processed; what stays pending is
        // exactly the far ones nobody cancelled.
        let far_alive = all
            .iter()
            .filter(|(r, _, far)| *far && !r.cancelled.load(SeqCst))
            .count();
        let deadline = Instant::now() + Duration::from_secs(20);
        while timer.pending_timeouts() != far_alive {
            assert!(
                Instant::now() < deadline,
                "pending {} never settled to {far_alive}",
                timer.pending_timeouts()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    let returned = common::stop_set(&timer);
    let mut in_stop_list = 0;
    for (record, t, far) in &all {
        let ran = record.runs.load(SeqCst);
        let cancelled = record.cancelled.load(SeqCst);
        let stopped = returned.contains(t);
        in_stop_list += usize::from(stopped);
        assert!(ran <= 1, "a task ran {ran} times");
        assert_eq!(
            ran + usize::from(cancelled) + usize::from(stopped),
            1,
            "ran {ran}, cancelled {cancelled}, returned by stop {stopped}: {t:?}"
        );
        assert!(!record.early.load(SeqCst), "a task ran before its delay");
        assert_eq!(t.is_expired(), ran == 1);
        assert_eq!(t.is_cancelled(), cancelled || stopped);
        if settle_before_stop {
            assert_eq!(stopped, *far && !cancelled, "only far timeouts are left");
        }
    }
    assert_eq!(in_stop_list, returned.len(), "stop() returned a stranger");
    assert_eq!(timer.pending_timeouts(), 0);
}

#[test]
fn schedule_and_cancel_from_many_threads_then_stop_after_settling() {
    schedule_and_cancel_from_many_threads(true);
}

#[test]
fn schedule_and_cancel_from_many_threads_then_stop_in_flight() {
    schedule_and_cancel_from_many_threads(false);
}

/// Three threads keep calling `new_timeout` (0 to 2 ms, so the worker is busy expiring) while
/// the main thread calls `stop()`. Each `Ok` timeout ran or is in `stop()`'s list, never both
/// and never neither; each refusal is `Stopped`, is final, and its task never runs; every task
/// is released once the timer is gone. Repeated to hit the race at different points.
#[test]
fn new_timeout_racing_stop_never_loses_a_timeout() {
    const ROUNDS: u64 = 40;
    const PRODUCERS: usize = 3;
    for round in 0..ROUNDS {
        let timer = Arc::new(HashedWheelTimer::new(Duration::from_millis(1), 8));
        let dropped = Arc::new(AtomicUsize::new(0));
        let start = Arc::new(Barrier::new(PRODUCERS + 1));
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let (timer, start, dropped) = (timer.clone(), start.clone(), dropped.clone());
                thread::spawn(move || {
                    struct CountDrop(Arc<AtomicUsize>);
                    impl Drop for CountDrop {
                        fn drop(&mut self) {
                            self.0.fetch_add(1, SeqCst);
                        }
                    }
                    let mut rng = Rng::new(round * 31 + p as u64 + 7);
                    let mut accepted = Vec::new();
                    let mut refused = Vec::new();
                    start.wait();
                    let mut refusals_in_a_row = 0;
                    while refusals_in_a_row < 20 {
                        let delay = Duration::from_nanos(rng.below(2_000_001));
                        let record = Arc::new(Record::default());
                        let run = task(&record, delay);
                        let guard = CountDrop(dropped.clone());
                        let result = timer.new_timeout(
                            move |t: &Timeout| {
                                let _guard = guard;
                                run(t)
                            },
                            delay,
                        );
                        match result {
                            Ok(t) => {
                                assert_eq!(refusals_in_a_row, 0, "accepted after a refusal");
                                accepted.push((record, t));
                            }
                            Err(e) => {
                                assert_eq!(e, TimerError::Stopped);
                                refused.push(record);
                                refusals_in_a_row += 1;
                            }
                        }
                    }
                    (accepted, refused)
                })
            })
            .collect();

        start.wait();
        let mut rng = Rng::new(round);
        let spin = Instant::now() + Duration::from_micros(rng.below(3_000));
        while Instant::now() < spin {
            std::hint::spin_loop();
        }
        let returned = common::stop_set(&timer);

        let mut attempts = 0;
        let mut accepted_total = 0;
        for h in producers {
            let (accepted, refused) = h.join().unwrap();
            attempts += accepted.len() + refused.len();
            accepted_total += accepted.len();
            for (record, t) in &accepted {
                let ran = record.runs.load(SeqCst);
                let stopped = returned.contains(t);
                assert_eq!(
                    ran + usize::from(stopped),
                    1,
                    "round {round}: ran {ran}, returned by stop {stopped}: lost or doubled"
                );
                assert!(!record.early.load(SeqCst));
            }
            for record in &refused {
                assert_eq!(
                    record.runs.load(SeqCst),
                    0,
                    "round {round}: a refused task ran"
                );
            }
        }
        assert!(returned.len() <= accepted_total);
        assert_eq!(timer.pending_timeouts(), 0);
        drop(returned);
        drop(timer);
        assert_eq!(
            dropped.load(SeqCst),
            attempts,
            "round {round}: tasks still held after the timer and every handle are gone"
        );
    }
}

/// `cancel()` racing the expiry of the same timeout, from several threads at once: exactly one
/// party wins each timeout (one `cancel()` returns true, or the task runs), on the real worker.
#[test]
fn cancel_racing_expiry_has_exactly_one_winner() {
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 8);
    let mut rng = Rng::new(99);
    let mut batch = Vec::new();
    for _ in 0..2_000 {
        let delay = Duration::from_nanos(rng.below(3_000_001));
        let record = Arc::new(Record::default());
        let t = timer.new_timeout(task(&record, delay), delay).unwrap();
        batch.push((record, t, Duration::from_nanos(rng.below(3_000_001))));
    }
    let batch = Arc::new(batch);
    let wins: Arc<Vec<AtomicUsize>> = Arc::new((0..batch.len()).map(|_| 0.into()).collect());
    let cancellers: Vec<_> = (0..3)
        .map(|_| {
            let (batch, wins) = (batch.clone(), wins.clone());
            thread::spawn(move || {
                let started = Instant::now();
                let mut order: Vec<usize> = (0..batch.len()).collect();
                order.sort_by_key(|&i| batch[i].2);
                for i in order {
                    let (_, t, at) = &batch[i];
                    while started.elapsed() < *at {
                        std::hint::spin_loop();
                    }
                    if t.cancel() {
                        wins[i].fetch_add(1, SeqCst);
                    }
                }
            })
        })
        .collect();
    for h in cancellers {
        h.join().unwrap();
    }
    // Let any expiry in progress finish: the worker has nothing left after its next tick.
    let deadline = Instant::now() + Duration::from_secs(10);
    while timer.pending_timeouts() != 0 {
        assert!(Instant::now() < deadline, "pending never reached 0");
        thread::sleep(Duration::from_millis(2));
    }
    assert!(timer.stop().unwrap().is_empty());
    for (i, (record, t, _)) in batch.iter().enumerate() {
        let runs = record.runs.load(SeqCst);
        let won = wins[i].load(SeqCst);
        assert_eq!(runs + won, 1, "runs {runs}, successful cancels {won}");
        assert_eq!(t.is_expired(), runs == 1);
        assert_eq!(t.is_cancelled(), won == 1);
    }
}

/// The same accepted/cancelled/returned bookkeeping through cheap handles cloned into the
/// producer threads, with the owner dropped (not stopped) at the end: nothing may run after the
/// drop returns, and handles then refuse.
#[test]
fn producers_on_handles_then_owner_dropped() {
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 32);
    let records: Arc<Mutex<HashMap<usize, Arc<Record>>>> = Arc::default();
    let producers: Vec<_> = (0..3u64)
        .map(|p| {
            let (handle, records) = (timer.handle(), records.clone());
            thread::spawn(move || {
                let mut rng = Rng::new(1_000 + p);
                for i in 0..2_000 {
                    let delay = Duration::from_nanos(rng.below(5_000_001));
                    let record = Arc::new(Record::default());
                    let t = handle.new_timeout(task(&record, delay), delay).unwrap();
                    if rng.below(3) == 0 && t.cancel() {
                        record.cancelled.store(true, SeqCst);
                    }
                    records
                        .lock()
                        .unwrap()
                        .insert(p as usize * 1_000_000 + i, record);
                }
                handle
            })
        })
        .collect();
    let handles: Vec<_> = producers.into_iter().map(|h| h.join().unwrap()).collect();
    drop(timer);
    let snapshot: Vec<usize> = records
        .lock()
        .unwrap()
        .values()
        .map(|r| r.runs.load(SeqCst))
        .collect();
    thread::sleep(Duration::from_millis(20));
    let records = records.lock().unwrap();
    for (r, before) in records.values().zip(snapshot) {
        let runs = r.runs.load(SeqCst);
        assert_eq!(runs, before, "a task ran after the owner was dropped");
        assert!(runs <= 1);
        assert!(
            !(runs == 1 && r.cancelled.load(SeqCst)),
            "ran and cancelled"
        );
        assert!(!r.early.load(SeqCst));
    }
    for h in &handles {
        assert!(h.is_stopped());
        assert_eq!(
            h.new_timeout(|_: &Timeout| {}, Duration::ZERO).unwrap_err(),
            TimerError::Stopped
        );
    }
}

/// Each call racing `stop()` is accepted and ended once, or refused once ("exactly one party
/// decides each timeout's fate"): with no cancels, every accepted timeout ran or was returned by
/// `stop()`, and each producer's one refused call is counted as refused. Once stopped,
/// `pending_timeouts()` reads 0 whatever the counter holds: the counter's own balance after
/// this race is `shared::pending`'s unit test `refusal_racing_stop_is_counted_down_once`.
#[test]
fn a_call_racing_stop_is_ended_once_or_refused_once() {
    for round in 0..200u64 {
        let timer = Arc::new(HashedWheelTimer::new(Duration::from_millis(1), 8));
        let ran = Arc::new(AtomicUsize::new(0));
        let start = Arc::new(Barrier::new(4));
        let producers: Vec<_> = (0..3)
            .map(|_| {
                let (timer, start, ran) = (timer.clone(), start.clone(), ran.clone());
                thread::spawn(move || {
                    start.wait();
                    let mut accepted = 0;
                    loop {
                        let ran = ran.clone();
                        let task = move |_: &Timeout| {
                            ran.fetch_add(1, SeqCst);
                        };
                        match timer.new_timeout(task, Duration::ZERO) {
                            Ok(_) => accepted += 1,
                            Err(e) => return (accepted, e),
                        }
                    }
                })
            })
            .collect();
        start.wait();
        let spin = Instant::now() + Duration::from_micros(round % 2_000);
        while Instant::now() < spin {
            std::hint::spin_loop();
        }
        let returned = timer.stop().unwrap().len();
        let mut accepted = 0;
        for h in producers {
            let (a, refused) = h.join().unwrap();
            assert_eq!(refused, TimerError::Stopped, "round {round}");
            accepted += a;
        }
        let (ran, s) = (ran.load(SeqCst), timer.stats());
        assert_eq!(accepted, ran + returned, "round {round}: {s:?}");
        assert_eq!(s.expired, ran as u64, "round {round}: {s:?}");
        assert_eq!(s.refused, 3, "round {round}: {s:?}");
        assert_eq!(timer.pending_timeouts(), 0);
    }
}

/// Twelve threads (more than the queue has shards, so some share one and their pushes
/// interleave in one batch) schedule on a manual timer, more than the 100 000 one tick moves
/// (so the first tick stops partway through a batch), and cancel every third. Each task must
/// see its own timeout, and each cancel must hit its own.
#[test]
fn interleaved_producers_keep_each_timeout_its_own_state() {
    const THREADS: usize = 12;
    const EACH: usize = 10_000;
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .ticks_per_wheel(64)
        .build_manual()
        .unwrap();
    let barrier = Barrier::new(THREADS);
    // Each timeout: its handle, what its task saw, whether it was cancelled.
    type Tracked = (Timeout, Arc<Mutex<Option<Timeout>>>, bool);
    let handles: Vec<Vec<Tracked>> = thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|k| {
                let timer = timer.handle();
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    (0..EACH)
                        .map(|i| {
                            let seen = Arc::new(Mutex::new(None));
                            let mine = Arc::clone(&seen);
                            let t = timer
                                .new_timeout(
                                    move |t: &Timeout| {
                                        let mut seen = mine.lock().unwrap();
                                        assert!(seen.is_none(), "a task ran twice");
                                        *seen = Some(t.clone());
                                    },
                                    Duration::from_millis(((k + i) % 5) as u64),
                                )
                                .unwrap();
                            let cancel = (k + i) % 3 == 0;
                            if cancel {
                                assert!(t.cancel());
                            }
                            (t, seen, cancel)
                        })
                        .collect()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    // Two ticks move the 120 000 (100 000 in the first); the longest delay is 4 ms.
    driver.advance(Duration::from_millis(10));
    assert_eq!(timer.pending_timeouts(), 0);
    for (t, seen, cancelled) in handles.into_iter().flatten() {
        let seen = seen.lock().unwrap();
        if cancelled {
            assert!(t.is_cancelled() && !t.is_expired());
            assert!(seen.is_none(), "a cancelled timeout's task ran");
        } else {
            assert!(t.is_expired() && !t.is_cancelled());
            assert_eq!(seen.as_ref(), Some(&t), "a task saw another timeout");
        }
    }
}

/// Under a pending limit far above what is pending, `new_timeout` refused now and then with
/// `TooManyPending { pending: ~2^64, .. }`: it read the running total of accepted timeouts, then
/// that of ended ones, and when the worker had ended more in between than were pending, the
/// difference wrapped. Producers that schedule and cancel at once keep almost nothing pending,
/// so the worker's ends overtake a stale total often.
#[test]
fn a_pending_limit_never_refuses_below_it_while_the_worker_ends_timeouts() {
    let timer = HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .max_pending_timeouts(1_000_000)
        .build()
        .unwrap();
    let refused = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..200_000 {
                    match timer.new_timeout(|_: &Timeout| {}, Duration::ZERO) {
                        Ok(t) => {
                            t.cancel();
                        }
                        Err(e) => {
                            refused.fetch_add(1, SeqCst);
                            panic!("refused with {} pending: {e:?}", timer.pending_timeouts());
                        }
                    }
                }
            });
        }
    });
    assert_eq!(refused.load(SeqCst), 0);
    assert!(
        timer.stop().unwrap().is_empty(),
        "every timeout was cancelled"
    );
}

/// Schedules, with and without a handle, and cancels every other handle it got, until three
/// refusals in a row (the timer stopped): its attempts, its cancels won and the handles it kept.
fn schedule_and_cancel_until_stopped(
    timer: &HashedWheelTimer,
    seed: u64,
    runs: &Arc<AtomicUsize>,
) -> (usize, usize, Vec<Timeout>) {
    let mut rng = Rng::new(seed);
    let (mut attempts, mut won, mut refusals_in_a_row) = (0, 0, 0);
    let mut kept = Vec::new();
    while refusals_in_a_row < 3 {
        attempts += 1;
        let delay = Duration::from_nanos(rng.below(2_500_001));
        let runs = Arc::clone(runs);
        let task = move |_: &Timeout| {
            runs.fetch_add(1, SeqCst);
        };
        let accepted = if attempts % 3 == 0 {
            timer.new_timeout_detached(task, delay).is_ok()
        } else if let Ok(t) = timer.new_timeout(task, delay) {
            kept.push(t);
            true
        } else {
            false
        };
        refusals_in_a_row = if accepted { 0 } else { refusals_in_a_row + 1 };
        if attempts % 2 == 0 {
            won += kept.pop().map_or(0, |t| usize::from(t.cancel()));
        }
    }
    (attempts, won, kept)
}

/// Three threads schedule (some detached) and cancel on the real worker while the main thread
/// stops the timer: expired, cancelled, what `stop()` returned and refused add up to every
/// attempt, and `cancelled` to the cancels that won. A task that cancels a timeout of its own
/// bucket is not needed: the walk reaches a timeout cancelled since this tick's cancellations
/// whenever a producer cancels during the expiry, and such a cancel went uncounted if `stop()`
/// came before the next tick.
#[test]
fn stats_add_up_when_stop_races_schedules_and_cancels() {
    for round in 0..30u64 {
        let timer = Arc::new(HashedWheelTimer::new(Duration::from_millis(1), 8));
        let runs = Arc::new(AtomicUsize::new(0));
        let start = Arc::new(Barrier::new(4));
        let producers: Vec<_> = (0..3)
            .map(|p| {
                let (timer, start, runs) = (timer.clone(), start.clone(), runs.clone());
                thread::spawn(move || {
                    start.wait();
                    schedule_and_cancel_until_stopped(&timer, round * 7 + p, &runs)
                })
            })
            .collect();
        start.wait();
        thread::sleep(Duration::from_micros(round * 100));
        let returned = timer.stop().unwrap().len();
        let (mut attempts, mut won) = (0, 0);
        for h in producers {
            let (a, w, _kept) = h.join().unwrap();
            (attempts, won) = (attempts + a, won + w);
        }
        let s = timer.stats();
        let ended = s.expired + s.cancelled + s.refused + returned as u64;
        assert_eq!(
            ended, attempts as u64,
            "round {round}: {s:?}, {returned} returned"
        );
        assert_eq!(s.cancelled, won as u64, "round {round}: {s:?}");
        assert_eq!(s.expired, runs.load(SeqCst) as u64, "round {round}: {s:?}");
    }
}

/// A timer of the pool: its number (never reused) and a handle, while it lives.
type Slots = Arc<Mutex<Vec<(u64, hashed_timer_wheel::TimerHandle)>>>;

/// The pool's timers, owned (a handle does not keep its timer).
type Owners = Arc<Mutex<Vec<(HashedWheelTimer, hashed_timer_wheel::ManualDriver)>>>;

/// A new manual timer, owned by `owners`: a handle on it.
fn owned_timer(owners: &Owners) -> hashed_timer_wheel::TimerHandle {
    let (timer, driver) = HashedWheelTimer::builder().build_manual().unwrap();
    let handle = timer.handle();
    owners.lock().unwrap().push((timer, driver));
    handle
}

/// Three threads make deadlines on timers picked from a pool of 8 and poll each once, 256
/// deadlines later; every 100 deadlines or so a thread stops a pool timer and puts a new one
/// in its place (so the process-wide table hands its slot over). A deadline arms on the timer
/// it was made on, or finds it gone: each timer left at the end holds exactly the deadlines
/// armed on it (nothing expires: the timers are manual).
#[test]
fn deadlines_arm_on_their_own_timers_while_others_are_stopped_and_made() {
    const POOL: u64 = 8;
    const PER_THREAD: usize = 20_000;
    // Deadlines a thread holds unarmed, polling the oldest as it makes one.
    const WAITING: usize = 256;
    let owners: Owners = Arc::default();
    let slots: Slots = Arc::new(Mutex::new(
        (0..POOL).map(|k| (k, owned_timer(&owners))).collect(),
    ));
    let next_id = Arc::new(AtomicUsize::new(POOL as usize));
    let waker = std::task::Waker::noop();
    let workers: Vec<_> = (0..3u64)
        .map(|t| {
            let (slots, owners, next_id) = (slots.clone(), owners.clone(), next_id.clone());
            thread::spawn(move || {
                let mut rng = Rng::new(t + 11);
                let mut armed: Vec<(u64, _)> = Vec::new();
                let mut unarmed = std::collections::VecDeque::new();
                let (mut gone, mut replaced) = (0, 0);
                for i in 0..PER_THREAD + WAITING {
                    if rng.below(100) == 0 {
                        let handle = owned_timer(&owners);
                        let id = next_id.fetch_add(1, SeqCst) as u64;
                        let at = rng.below(POOL) as usize;
                        let old = std::mem::replace(&mut slots.lock().unwrap()[at], (id, handle));
                        drop(old.1.stop());
                        replaced += 1;
                    }
                    if i < PER_THREAD {
                        let at = rng.below(POOL) as usize;
                        let (id, handle) = slots.lock().unwrap()[at].clone();
                        let deadline = handle.timeout(FAR, std::future::pending::<()>());
                        unarmed.push_back((id, Box::pin(deadline)));
                        if unarmed.len() <= WAITING {
                            continue;
                        }
                    }
                    // The oldest, made some time ago: its timer may be gone, its slot another's.
                    let (id, mut deadline) = unarmed.pop_front().unwrap();
                    let mut cx = std::task::Context::from_waker(waker);
                    match deadline.as_mut().poll(&mut cx) {
                        std::task::Poll::Pending => armed.push((id, deadline)),
                        std::task::Poll::Ready(result) => {
                            assert!(result.is_err(), "an unfinished future");
                            gone += 1;
                        }
                    }
                }
                (armed, gone, replaced)
            })
        })
        .collect();
    let results: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let mut armed_on: HashMap<u64, usize> = HashMap::new();
    for (armed, _, _) in &results {
        for (id, _) in armed {
            *armed_on.entry(*id).or_default() += 1;
        }
    }
    for (id, handle) in slots.lock().unwrap().iter() {
        assert_eq!(
            handle.pending_timeouts(),
            armed_on.get(id).copied().unwrap_or(0),
            "timer {id} holds the deadlines armed on it, and no other's"
        );
    }
    let gone: usize = results.iter().map(|(_, gone, _)| gone).sum();
    let replaced: usize = results.iter().map(|(_, _, replaced)| replaced).sum();
    assert!(
        replaced > 100 && gone > 0,
        "the pool changed under the deadlines"
    );
    drop(results);
    drop(owners);
}
