//! User code may panic anywhere: a task, its `Drop`, a future's waker, the executor. Nothing is
//! then lost, run twice, or run on another task's data, and the worker goes on. One test per
//! place the crate runs or drops user code; `stats().panicked` counts each panic caught.

mod common;

use common::{ms, noop};
use hashed_timer_wheel::{DelayQueue, HashedWheelTimer, PeriodicTimeout, Timeout, TypedTask};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// Counts the drops of the tasks that carry it, and panics in its own `Drop` when `panics`.
struct DropProbe {
    drops: Arc<AtomicUsize>,
    panics: bool,
}

impl DropProbe {
    fn new(drops: &Arc<AtomicUsize>, panics: bool) -> DropProbe {
        DropProbe {
            drops: Arc::clone(drops),
            panics,
        }
    }
}

impl Drop for DropProbe {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
        if self.panics {
            panic!("a task's Drop panics (on purpose)");
        }
    }
}

/// What the data-checking tasks saw: runs with their own data, and with anything else.
#[derive(Default)]
struct Runs {
    own: AtomicUsize,
    foreign: AtomicUsize,
}

/// A task of two words that checks, when run, that its words are the ones it was given.
fn small_checker(runs: &'static Runs, id: u64) -> impl FnOnce(&Timeout) + Send + 'static {
    let check = !id;
    move |_: &Timeout| {
        let counter = if check == !id {
            &runs.own
        } else {
            &runs.foreign
        };
        counter.fetch_add(1, SeqCst);
    }
}

/// The same with four words, so that a misread pairs one type's table with another's words.
fn large_checker(runs: &'static Runs, id: u64) -> impl FnOnce(&Timeout) + Send + 'static {
    let (check, a, b) = (!id, id.rotate_left(7), id ^ 0x5555);
    move |_: &Timeout| {
        let ok = check == !id && a == id.rotate_left(7) && b == id ^ 0x5555;
        let counter = if ok { &runs.own } else { &runs.foreign };
        counter.fetch_add(1, SeqCst);
    }
}

fn manual_timer(tick: Duration) -> (HashedWheelTimer, hashed_timer_wheel::ManualDriver) {
    HashedWheelTimer::builder()
        .tick_duration(tick)
        .build_manual()
        .unwrap()
}

/// The burst: `n` checking tasks due in one tick (over the transfer cap of 100 000), with a
/// task whose `Drop` panics, cancelled while queued, every `every` of them.
fn burst(timer: &HashedWheelTimer, runs: &'static Runs, drops: &Arc<AtomicUsize>, n: u64) -> u64 {
    let mut panicking = 0;
    for id in 0..n {
        if id % 2 == 0 {
            timer.new_timeout(small_checker(runs, id), ms(100)).unwrap();
        } else {
            timer.new_timeout(large_checker(runs, id), ms(100)).unwrap();
        }
        if id % 25_000 == 7 {
            let probe = DropProbe::new(drops, true);
            let t = timer
                .new_timeout(move |_: &Timeout| drop(probe), ms(100))
                .unwrap();
            assert!(t.cancel());
            panicking += 1;
        }
    }
    panicking
}

/// A burst over the transfer cap with panicking drops among the cancelled: every task runs
/// once, on its own data; nothing stays pending.
#[test]
fn a_drop_that_panics_in_a_burst_over_the_transfer_cap_leaves_every_task_its_own_data() {
    static RUNS: Runs = Runs {
        own: AtomicUsize::new(0),
        foreign: AtomicUsize::new(0),
    };
    let (timer, driver) = manual_timer(ms(100));
    let drops = Arc::new(AtomicUsize::new(0));
    const N: u64 = 150_000;
    let panicking = burst(&timer, &RUNS, &drops, N);
    for _ in 0..4 {
        driver.advance(ms(100));
    }
    assert_eq!(RUNS.foreign.load(SeqCst), 0, "tasks run on another's data");
    assert_eq!(RUNS.own.load(SeqCst), N as usize);
    assert_eq!(drops.load(SeqCst), panicking as usize);
    assert_eq!(timer.pending_timeouts(), 0);
    let stats = timer.stats();
    assert_eq!(stats.panicked, panicking);
    assert_eq!(stats.expired, N);
    assert_eq!(stats.cancelled, panicking);
    // The worker goes on.
    let later = timer.new_timeout(noop, ms(100)).unwrap();
    driver.advance(ms(300));
    assert!(later.is_expired());
    assert!(timer.stop().unwrap().is_empty());
}

/// The same on a worker thread: every task runs on its own data, a later timeout fires, and
/// `stop()` returns nothing.
#[test]
fn a_drop_that_panics_in_a_burst_on_the_worker_thread_loses_nothing() {
    static RUNS: Runs = Runs {
        own: AtomicUsize::new(0),
        foreign: AtomicUsize::new(0),
    };
    let timer = HashedWheelTimer::builder()
        .tick_duration(ms(100))
        .build()
        .unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    const N: u64 = 150_000;
    let panicking = burst(&timer, &RUNS, &drops, N);
    wait_until(|| RUNS.own.load(SeqCst) + RUNS.foreign.load(SeqCst) == N as usize);
    assert_eq!(RUNS.foreign.load(SeqCst), 0, "tasks run on another's data");
    let fired = Arc::new(AtomicUsize::new(0));
    timer.new_timeout(common::counting(&fired), ms(10)).unwrap();
    wait_until(|| fired.load(SeqCst) == 1);
    wait_until(|| timer.pending_timeouts() == 0);
    assert_eq!(drops.load(SeqCst), panicking as usize);
    assert!(timer.stop().unwrap().is_empty());
    assert_eq!(timer.stats().panicked, panicking);
}

fn wait_until(mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not done within 30 s"
        );
        std::thread::sleep(ms(1));
    }
}

/// A task whose `Drop` panics, cancelled once in the wheel: the worker goes on, every other
/// due task runs, and the panic is counted.
#[test]
fn a_drop_that_panics_on_a_cancel_in_the_wheel_does_not_stop_the_worker() {
    for on_thread in [false, true] {
        let builder = HashedWheelTimer::builder().tick_duration(ms(1));
        let (timer, driver) = if on_thread {
            (builder.build().unwrap(), None)
        } else {
            let (t, d) = builder.build_manual().unwrap();
            (t, Some(d))
        };
        let drops = Arc::new(AtomicUsize::new(0));
        let probe = DropProbe::new(&drops, true);
        let doomed = timer
            .new_timeout(move |_: &Timeout| drop(probe), ms(500))
            .unwrap();
        let advance = |by: Duration| match &driver {
            Some(d) => d.advance(by),
            None => std::thread::sleep(by),
        };
        advance(ms(5)); // into the wheel
        assert!(doomed.cancel());
        advance(ms(5)); // the unlink drops the task
        let fired = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            timer.new_timeout(common::counting(&fired), ms(2)).unwrap();
        }
        match &driver {
            Some(d) => d.advance(ms(10)),
            None => wait_until(|| fired.load(SeqCst) == 100),
        }
        assert_eq!(fired.load(SeqCst), 100, "on a thread: {on_thread}");
        assert_eq!(drops.load(SeqCst), 1);
        if driver.is_none() {
            wait_until(|| timer.pending_timeouts() == 0);
        }
        assert_eq!(timer.pending_timeouts(), 0);
        assert!(timer.stop().unwrap().is_empty());
        assert_eq!(timer.stats().panicked, 1);
    }
}

/// A task whose `Drop` panics, cancelled in the very tick it is due (after the cancellations
/// were processed, by a task of the same bucket): dropped once, counted.
#[test]
fn a_drop_that_panics_when_cancelled_by_a_task_of_its_bucket_is_counted() {
    let (timer, driver) = manual_timer(ms(1));
    let drops = Arc::new(AtomicUsize::new(0));
    let probe = DropProbe::new(&drops, true);
    let victim: Arc<Mutex<Option<Timeout>>> = Arc::default();
    let v = Arc::clone(&victim);
    timer
        .new_timeout(
            move |_: &Timeout| {
                assert!(v.lock().unwrap().take().unwrap().cancel());
            },
            ms(3),
        )
        .unwrap();
    let t = timer
        .new_timeout(move |_: &Timeout| drop(probe), ms(3))
        .unwrap();
    *victim.lock().unwrap() = Some(t);
    let after = Arc::new(AtomicUsize::new(0));
    timer.new_timeout(common::counting(&after), ms(3)).unwrap();
    driver.advance(ms(10));
    assert_eq!(drops.load(SeqCst), 1);
    assert_eq!(after.load(SeqCst), 1);
    assert_eq!(timer.pending_timeouts(), 0);
    assert_eq!(timer.stats().panicked, 1);
}

/// `stop()` with pending tasks whose `Drop` panics: it returns every pending timeout with its
/// task, drops none of them, and does not panic; the caller drops each once.
#[test]
fn stop_returns_every_task_undropped_when_some_drops_panic() {
    for queued in [false, true] {
        let (timer, driver) = manual_timer(ms(1));
        let drops = Arc::new(AtomicUsize::new(0));
        for i in 0..1_000 {
            let probe = DropProbe::new(&drops, i % 100 == 0);
            timer
                .new_timeout(move |_: &Timeout| drop(probe), ms(1_000))
                .unwrap();
        }
        if !queued {
            driver.advance(ms(2)); // into the wheel
        }
        let returned = timer.stop().expect("stop() does not panic");
        assert_eq!(returned.len(), 1_000, "queued: {queued}");
        assert!(returned.iter().all(|never_ran| never_ran.is_cancelled()));
        assert_eq!(drops.load(SeqCst), 0, "the tasks are the caller's");
        assert_eq!(timer.stats().panicked, 0, "queued: {queued}");
        let panicked = returned
            .into_iter()
            .map(|never_ran| catch_unwind(AssertUnwindSafe(|| drop(never_ran))))
            .filter(Result::is_err)
            .count();
        assert_eq!(panicked, 10, "queued: {queued}");
        assert_eq!(drops.load(SeqCst), 1_000, "each task dropped once");
    }
}

/// Dropping the owner with pending tasks whose `Drop` panics: every task is dropped once, and
/// the drop does not panic.
#[test]
fn dropping_the_owner_drops_every_task_once_when_some_drops_panic() {
    for started in [false, true] {
        let timer = HashedWheelTimer::builder()
            .tick_duration(ms(1))
            .build()
            .unwrap();
        let drops = Arc::new(AtomicUsize::new(0));
        for i in 0..1_000 {
            let probe = DropProbe::new(&drops, i % 100 == 0);
            timer
                .new_timeout(move |_: &Timeout| drop(probe), ms(10_000))
                .unwrap();
        }
        if started {
            wait_until(|| timer.stats().wakeups > 3);
        }
        drop(timer);
        assert_eq!(drops.load(SeqCst), 1_000, "started: {started}");
    }
}

/// Dropping the owner inside a task, with pending tasks whose `Drop` panics: the worker drops
/// each once as it leaves.
#[test]
fn dropping_the_owner_in_a_task_drops_every_task_once_when_some_drops_panic() {
    let timer = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .build()
        .unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    for i in 0..100 {
        let probe = DropProbe::new(&drops, i % 10 == 0);
        timer
            .new_timeout(move |_: &Timeout| drop(probe), ms(10_000))
            .unwrap();
    }
    let owner = Arc::new(Mutex::new(Some(timer)));
    let o = Arc::clone(&owner);
    let handle = owner.lock().unwrap().as_ref().unwrap().handle();
    handle
        .new_timeout(move |_: &Timeout| drop(o.lock().unwrap().take()), ms(5))
        .unwrap();
    wait_until(|| drops.load(SeqCst) == 100);
    assert!(owner.lock().unwrap().is_none());
}

/// A task that panics when run and whose `Drop` panics too, on the executor and inline:
/// counted, the worker goes on.
#[test]
fn a_task_that_panics_when_run_is_counted_and_the_worker_goes_on() {
    let (timer, driver) = manual_timer(ms(1));
    let drops = Arc::new(AtomicUsize::new(0));
    let probe = DropProbe::new(&drops, false);
    timer
        .new_timeout(
            move |_: &Timeout| {
                let _keep = &probe;
                panic!("a task panics (on purpose)");
            },
            ms(2),
        )
        .unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    timer.new_timeout(common::counting(&fired), ms(2)).unwrap();
    driver.advance(ms(5));
    assert_eq!(fired.load(SeqCst), 1);
    assert_eq!(drops.load(SeqCst), 1);
    assert_eq!(timer.stats().panicked, 1);
}

/// An executor that panics (refuses the job): the task is dropped once, the panic counted,
/// and the worker goes on; a job whose task's `Drop` panics as the executor unwinds does not
/// abort the process.
#[test]
fn an_executor_that_panics_drops_the_task_once_and_is_counted() {
    let refusals = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&refusals);
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .executor(move |job: Box<dyn FnOnce() + Send>| {
            if r.fetch_add(1, SeqCst).is_multiple_of(2) {
                panic!("the executor refuses (on purpose)");
            }
            job();
        })
        .build_manual()
        .unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    for i in 0..10 {
        let probe = DropProbe::new(&drops, i % 3 == 0);
        let ran = Arc::clone(&ran);
        timer
            .new_timeout(
                move |_: &Timeout| {
                    ran.fetch_add(1, SeqCst);
                    drop(probe);
                },
                ms(2),
            )
            .unwrap();
    }
    driver.advance(ms(5));
    assert_eq!(refusals.load(SeqCst), 10);
    assert_eq!(ran.load(SeqCst), 5);
    assert_eq!(drops.load(SeqCst), 10, "each task dropped once");
    assert_eq!(timer.pending_timeouts(), 0);
    // Five refusals; of the refused tasks, two whose `Drop` panics (0 and 6); of the tasks
    // run, two that panic as they drop their probe (3 and 9).
    assert_eq!(timer.stats().panicked, 9);
}

/// A waker that panics when woken (expiry) or dropped: the worker goes on.
#[test]
fn a_waker_that_panics_does_not_stop_the_worker() {
    struct PanickingWaker;
    impl Wake for PanickingWaker {
        fn wake(self: Arc<Self>) {
            panic!("a waker panics (on purpose)");
        }
    }
    let (timer, driver) = manual_timer(ms(1));
    let waker = Waker::from(Arc::new(PanickingWaker));
    let mut sleep = timer.sleep(ms(2));
    let mut cx = Context::from_waker(&waker);
    assert!(std::pin::Pin::new(&mut sleep).poll(&mut cx).is_pending());
    let fired = Arc::new(AtomicUsize::new(0));
    timer.new_timeout(common::counting(&fired), ms(2)).unwrap();
    timer.new_timeout(common::counting(&fired), ms(6)).unwrap();
    driver.advance(ms(10));
    assert_eq!(fired.load(SeqCst), 2);
    assert!(std::pin::Pin::new(&mut sleep).poll(&mut cx).is_ready());
    assert_eq!(timer.pending_timeouts(), 0);
    assert_eq!(timer.stats().panicked, 1);
}

/// A typed timer's task whose `Drop` panics, cancelled queued and in the wheel, and returned
/// by `stop()`: the same guarantees as the default timer's.
#[test]
fn a_typed_timer_survives_drops_that_panic() {
    struct Task {
        _probe: DropProbe,
        ran: Arc<AtomicUsize>,
    }
    impl TypedTask for Task {
        fn run(self, _: &Timeout<Self>) {
            self.ran.fetch_add(1, SeqCst);
        }
    }
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .build_manual_typed::<Task>()
        .unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let task = |panics| Task {
        _probe: DropProbe::new(&drops, panics),
        ran: Arc::clone(&ran),
    };
    let queued = timer.new_timeout(task(true), ms(3)).unwrap();
    assert!(queued.cancel());
    let in_wheel = timer.new_timeout(task(true), ms(30)).unwrap();
    for _ in 0..10 {
        timer.new_timeout(task(false), ms(3)).unwrap();
    }
    driver.advance(ms(2));
    assert!(in_wheel.cancel());
    driver.advance(ms(5));
    assert_eq!(ran.load(SeqCst), 10);
    let left = timer.new_timeout(task(true), ms(100)).unwrap();
    driver.advance(ms(2));
    let returned = timer.stop().unwrap();
    assert_eq!(returned.len(), 1);
    assert!(left.is_cancelled());
    assert_eq!(drops.load(SeqCst), 12, "the returned task is the caller's");
    assert_eq!(timer.stats().panicked, 2);
    assert!(catch_unwind(AssertUnwindSafe(|| drop(returned))).is_err());
    assert_eq!(drops.load(SeqCst), 13);
}

/// A periodic task whose `Drop` panics when its schedule ends (cancelled): counted, the worker
/// goes on.
#[test]
fn a_periodic_task_whose_drop_panics_is_dropped_once() {
    let (timer, driver) = manual_timer(ms(1));
    let drops = Arc::new(AtomicUsize::new(0));
    let probe = DropProbe::new(&drops, true);
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&runs);
    let periodic = timer
        .schedule_with_fixed_delay(
            move |_: &PeriodicTimeout| {
                let _keep = &probe;
                r.fetch_add(1, SeqCst);
            },
            ms(2),
            ms(2),
        )
        .unwrap();
    for _ in 0..7 {
        driver.advance(ms(1));
    }
    assert!(runs.load(SeqCst) >= 2);
    assert!(periodic.cancel());
    driver.advance(ms(5));
    assert_eq!(drops.load(SeqCst), 1);
    let fired = Arc::new(AtomicUsize::new(0));
    timer.new_timeout(common::counting(&fired), ms(2)).unwrap();
    driver.advance(ms(5));
    assert_eq!(fired.load(SeqCst), 1);
    assert_eq!(timer.pending_timeouts(), 0);
}

/// A fixed-rate task that panics in its third run, and whose `Drop` panics too: the panic ends
/// the schedule, the task is dropped once (both panics counted, no abort), no run came before
/// its due time, and the worker goes on.
#[test]
fn a_fixed_rate_task_that_panics_in_a_run_and_in_its_drop_ends_once() {
    let (timer, driver) = manual_timer(ms(1));
    let drops = Arc::new(AtomicUsize::new(0));
    let probe = DropProbe::new(&drops, true);
    let runs = Arc::new(Mutex::new(Vec::new()));
    let r = Arc::clone(&runs);
    // The manual clock's reading while a turn runs: set before each advance.
    let now_ms = Arc::new(AtomicUsize::new(0));
    let n = Arc::clone(&now_ms);
    timer
        .schedule_at_fixed_rate(
            move |_: &PeriodicTimeout| {
                let _keep = &probe;
                let mut runs = r.lock().unwrap();
                runs.push(n.load(SeqCst) as u64);
                if runs.len() == 3 {
                    drop(runs);
                    panic!("a periodic run panics (on purpose)");
                }
            },
            ms(2),
            ms(3),
            hashed_timer_wheel::MissedRuns::Delay,
        )
        .unwrap();
    for t in 1..=30 {
        now_ms.store(t, SeqCst);
        driver.advance(ms(1));
    }
    let runs = runs.lock().unwrap().clone();
    assert_eq!(
        runs.len(),
        3,
        "the panicking run ends the schedule: {runs:?}"
    );
    for (k, at) in runs.iter().enumerate() {
        assert!(*at >= 2 + 3 * k as u64, "run {k} early, at {at} ms");
    }
    assert_eq!(drops.load(SeqCst), 1);
    assert_eq!(timer.stats().panicked, 2);
    let fired = Arc::new(AtomicUsize::new(0));
    timer.new_timeout(common::counting(&fired), ms(2)).unwrap();
    driver.advance(ms(5));
    assert_eq!(fired.load(SeqCst), 1);
    assert_eq!(timer.pending_timeouts(), 0);
}

/// Runs `f` on a thread of its own and fails if it has not returned within 30 s (a deadlock:
/// the thread is left behind), rather than hanging the test binary.
fn within_30_s(f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let outcome = catch_unwind(AssertUnwindSafe(f));
        let _ = tx.send(outcome);
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(outcome) => outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        Err(_) => panic!("not done within 30 s: a deadlock"),
    }
}

/// A waker that panics when woken while `armed`; counts its wake-ups.
#[derive(Default)]
struct PanickingWaker {
    armed: AtomicBool,
    woken: AtomicUsize,
}

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        self.woken.fetch_add(1, SeqCst);
        if self.armed.load(SeqCst) {
            panic!("a waker panics (on purpose)");
        }
    }
}

/// A `DelayQueue`'s `clear()` whose waiting task's waker panics: the queue is empty and whole
/// (it takes and yields items again), every value is dropped once, the panic is counted.
#[test]
fn a_delay_queue_cleared_with_a_panicking_waker_stays_whole() {
    let (timer, driver) = manual_timer(ms(1));
    let drops = Arc::new(AtomicUsize::new(0));
    let mut queue = DelayQueue::new(timer.handle());
    queue.insert(DropProbe::new(&drops, false), ms(5));
    queue.insert(DropProbe::new(&drops, false), ms(10));
    let waiting = Arc::new(PanickingWaker::default());
    waiting.armed.store(true, SeqCst);
    let waker = Waker::from(Arc::clone(&waiting));
    assert!(queue
        .poll_expired(&mut Context::from_waker(&waker))
        .is_pending());
    queue.clear();
    assert_eq!(waiting.woken.load(SeqCst), 1);
    assert_eq!(drops.load(SeqCst), 2);
    assert!(queue.is_empty());
    assert_eq!(timer.stats().panicked, 1);
    let key = queue.insert(DropProbe::new(&drops, false), ms(3));
    driver.advance(ms(5));
    let ok = Waker::from(Arc::new(PanickingWaker::default()));
    let mut cx = Context::from_waker(&ok);
    match queue.poll_expired(&mut cx) {
        Poll::Ready(Some(item)) => assert_eq!(item.key(), key),
        other => panic!("the item inserted after the clear: {:?}", other.map(|_| ())),
    }
    assert!(matches!(queue.poll_expired(&mut cx), Poll::Ready(None)));
    assert_eq!(drops.load(SeqCst), 3);
}

/// The last item of a `DelayQueue` yielded while an earlier poll's waker, which panics, is
/// still stored: the item is yielded, not dropped by the panic.
#[test]
fn a_delay_queues_last_item_is_yielded_whatever_a_stored_waker_does() {
    let (timer, driver) = manual_timer(ms(1));
    let mut queue = DelayQueue::new(timer.handle());
    queue.insert("last", ms(3));
    let earlier = Arc::new(PanickingWaker::default());
    let waker = Waker::from(Arc::clone(&earlier));
    assert!(queue
        .poll_expired(&mut Context::from_waker(&waker))
        .is_pending());
    earlier.armed.store(true, SeqCst);
    driver.advance(ms(5));
    let now = Waker::from(Arc::new(PanickingWaker::default()));
    let polled = queue.poll_expired(&mut Context::from_waker(&now));
    match polled {
        Poll::Ready(Some(item)) => assert_eq!(item.into_inner(), "last"),
        _ => panic!("the last item is yielded"),
    }
    assert!(queue.is_empty());
}

/// A waker whose drop panics once its switch is set (its clones and wakes run no code of theirs),
/// and the switch, unset; a drop that panics unsets it.
fn waker_panicking_in_drop() -> (Arc<AtomicBool>, Waker) {
    let armed = Arc::new(AtomicBool::new(false));
    let switch = Arc::clone(&armed);
    let on_drop = move || {
        if switch.swap(false, SeqCst) {
            panic!("a waker panics in its drop (on purpose)");
        }
    };
    let waker = common::calling_back_waker(common::no_hook(), Box::new(on_drop));
    (armed, waker)
}

/// A `DelayQueue` emptied (its last item removed, or cleared) while its `Sleep` holds a waker
/// that panics in its drop: the panic is counted as a waker's, the removed item reaches the
/// caller and the cleared queue is empty and whole. The panic unwound out of the emptying: the
/// removed item was dropped unseen, and a cleared queue kept its items with no deadlines, never
/// to yield them (its next poll panicked).
#[test]
fn a_delay_queue_emptied_while_its_sleeps_waker_panics_in_drop_loses_nothing() {
    let (timer, driver) = manual_timer(ms(1));
    let drops = Arc::new(AtomicUsize::new(0));
    let (armed, waker) = waker_panicking_in_drop();
    let mut cx = Context::from_waker(&waker);
    let mut queue = DelayQueue::new(timer.handle());
    let last = queue.insert(DropProbe::new(&drops, false), ms(5));
    assert!(queue.poll_expired(&mut cx).is_pending());
    armed.store(true, SeqCst);
    let removed = catch_unwind(AssertUnwindSafe(|| queue.remove(&last)));
    assert!(removed.is_ok(), "the removed item reaches the caller");
    drop(removed);
    assert_eq!((drops.load(SeqCst), timer.stats().panicked), (1, 1));
    for at in [5, 10] {
        queue.insert(DropProbe::new(&drops, false), ms(at));
    }
    assert!(queue.poll_expired(&mut cx).is_pending());
    armed.store(true, SeqCst);
    assert!(catch_unwind(AssertUnwindSafe(|| queue.clear())).is_ok());
    assert_eq!((queue.len(), drops.load(SeqCst)), (0, 3));
    assert_eq!(timer.stats().panicked, 2);
    let key = queue.insert(DropProbe::new(&drops, false), ms(3));
    driver.advance(ms(5));
    match queue.poll_expired(&mut cx) {
        Poll::Ready(Some(item)) => assert_eq!(item.key(), key),
        other => panic!("the item inserted after the clear: {:?}", other.map(|_| ())),
    }
    assert!(matches!(queue.poll_expired(&mut cx), Poll::Ready(None)));
}

/// A `DelayQueue` dropped with a value whose `Drop` panics while its `Sleep` holds a waker that
/// panics in its drop: every value is dropped once, the value's panic reaches the caller and
/// the waker's is counted. The waker's drop ran as the value's panic unwound, which aborted the
/// process.
#[test]
fn a_delay_queue_dropped_with_a_panicking_value_and_waker_drop_does_not_abort() {
    let (timer, _driver) = manual_timer(ms(1));
    let drops = Arc::new(AtomicUsize::new(0));
    let (armed, waker) = waker_panicking_in_drop();
    let mut queue = DelayQueue::new(timer.handle());
    for panics in [true, false] {
        queue.insert(DropProbe::new(&drops, panics), ms(5));
    }
    assert!(queue
        .poll_expired(&mut Context::from_waker(&waker))
        .is_pending());
    armed.store(true, SeqCst);
    let dropped = catch_unwind(AssertUnwindSafe(move || drop(queue)));
    let payload = dropped.expect_err("the value's panic reaches the caller");
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"a task's Drop panics (on purpose)")
    );
    assert!(!armed.load(SeqCst), "the waker was dropped");
    assert_eq!((drops.load(SeqCst), timer.stats().panicked), (2, 1));
}

/// Values whose `Drop` panics, two of them, in a `DelayQueue` that is cleared, then in one that
/// is dropped: every value is dropped once, the first panic reaches the caller, no abort.
#[test]
fn a_delay_queue_drops_every_value_when_several_drops_panic() {
    let (timer, _driver) = manual_timer(ms(1));
    let drops = Arc::new(AtomicUsize::new(0));
    let fill = |queue: &mut DelayQueue<DropProbe>| {
        for panics in [true, false, true] {
            queue.insert(DropProbe::new(&drops, panics), ms(5));
        }
    };
    let mut queue = DelayQueue::new(timer.handle());
    fill(&mut queue);
    assert!(catch_unwind(AssertUnwindSafe(|| queue.clear())).is_err());
    assert_eq!(drops.load(SeqCst), 3);
    assert!(queue.is_empty());
    fill(&mut queue);
    assert!(catch_unwind(AssertUnwindSafe(move || drop(queue))).is_err());
    assert_eq!(drops.load(SeqCst), 6);
}

/// A runtime sleep that never completes and panics in its `Drop` once `bomb` is set.
struct PanickingSleep {
    bomb: Arc<AtomicBool>,
}

impl Future for PanickingSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
}

impl Drop for PanickingSleep {
    fn drop(&mut self) {
        if self.bomb.swap(false, SeqCst) {
            panic!("a runtime's sleep panics in its Drop (on purpose)");
        }
    }
}

/// A threaded timer of `tick_ms` ticks, started by a timeout ten minutes away.
fn started_timer(tick_ms: u64) -> HashedWheelTimer {
    let timer = HashedWheelTimer::builder()
        .tick_duration(ms(tick_ms))
        .build()
        .unwrap();
    timer.new_timeout(noop, Duration::from_secs(600)).unwrap();
    timer
}

/// A `Drive` dropped while its runtime sleep's `Drop` panics still hands the ticks back to the
/// worker thread: a timeout then fires about on time, not 32 ticks late (the watchdog's pace).
#[test]
fn a_drive_whose_sleep_panics_in_drop_hands_the_ticks_back() {
    const TICK: u64 = 50;
    let timer = started_timer(TICK);
    let bomb = Arc::new(AtomicBool::new(false));
    let b = Arc::clone(&bomb);
    let mut drive = Box::pin(timer.drive(move |_| PanickingSleep {
        bomb: Arc::clone(&b),
    }));
    let waker = Waker::from(Arc::new(PanickingWaker::default()));
    assert!(drive
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    bomb.store(true, SeqCst);
    // Counted and logged, as in the `Drive`'s poll; not raised again from the drop.
    drop(drive);
    assert!(!bomb.load(SeqCst), "the sleep was dropped");
    assert_eq!(timer.stats().panicked, 1);
    assert_ticks_handed_back(&timer, TICK);
}

/// Schedules a timeout one tick away and fails unless it fires about on time: the worker
/// thread runs the ticks (within 2 ticks, plus a loaded host's delays), not the watchdog (32
/// ticks late).
fn assert_ticks_handed_back(timer: &HashedWheelTimer, tick: u64) {
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    timer
        .new_timeout(
            move |_: &Timeout| tx.send(Instant::now()).unwrap(),
            ms(tick),
        )
        .unwrap();
    let fired = rx.recv_timeout(Duration::from_secs(30)).unwrap() - start;
    assert!(fired < ms(16 * tick), "fired after {fired:?}");
}

/// A runtime sleep whose poll panics, as tokio's does once its runtime shuts down.
struct SleepPanickingInPoll;

impl Future for SleepPanickingInPoll {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        panic!("a runtime's sleep panics in its poll (on purpose)");
    }
}

/// Polls, by hand, a `Drive` that can arm no sleep, keeps it, and checks that it completed,
/// counted the panic and handed the ticks back.
fn assert_an_unarmed_drive_completes<S>(sleep_until: impl FnMut(Instant) -> S + Send + 'static)
where
    S: Future<Output = ()> + Send + 'static,
{
    const TICK: u64 = 50;
    let timer = started_timer(TICK);
    let mut drive = Box::pin(timer.drive(sleep_until));
    let mut cx = Context::from_waker(Waker::noop());
    let polled = catch_unwind(AssertUnwindSafe(|| drive.as_mut().poll(&mut cx)));
    assert!(matches!(polled, Ok(Poll::Ready(()))), "the Drive completes");
    assert_eq!(timer.stats().panicked, 1);
    assert!(
        drive.as_mut().poll(&mut cx).is_ready(),
        "and stays complete"
    );
    // Kept, not dropped: the ticks are the thread's all the same.
    assert_ticks_handed_back(&timer, TICK);
    drop(drive);
    assert_eq!(timer.stats().panicked, 1);
}

/// A `Drive` whose `sleep_until` panics arms no sleep: the panic is counted, and the `Drive`
/// hands the ticks back to the worker thread and completes. The panic unwound the poll, and a
/// `Drive` kept after it stayed attached with no sleep: its ticks ran 32 ticks late.
#[test]
fn a_drive_whose_sleep_until_panics_hands_the_ticks_back_and_completes() {
    assert_an_unarmed_drive_completes(|_| -> PanickingSleep {
        panic!("a runtime's sleep_until panics (on purpose)")
    });
}

/// A `Drive` whose every new sleep panics in its first poll: as when `sleep_until` panics.
#[test]
fn a_drive_whose_sleeps_panic_in_their_first_poll_hands_the_ticks_back_and_completes() {
    assert_an_unarmed_drive_completes(|_| SleepPanickingInPoll);
}

/// A `Drive` whose `sleep_until` panics while it has a sleep armed (the turn after the first
/// tick plans another, and the call for it fails) goes on with that sleep, and its next poll
/// arms the new one. The panic unwound the poll.
#[test]
fn a_drive_whose_sleep_until_panics_after_arming_one_goes_on_with_it() {
    const TICK: u64 = 200;
    let timer = HashedWheelTimer::builder()
        .tick_duration(ms(TICK))
        .build()
        .unwrap();
    timer.new_timeout(noop, Duration::ZERO).unwrap();
    timer.new_timeout(noop, ms(3 * TICK)).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    let mut drive = Box::pin(timer.drive(move |_| {
        if c.fetch_add(1, SeqCst) == 1 {
            panic!("a runtime's sleep_until panics (on purpose)");
        }
        PanickingSleep {
            bomb: Arc::new(AtomicBool::new(false)),
        }
    }));
    // One task throughout (a new task's poll drops the sleep armed for the last one, and
    // `Waker::noop()`'s copies need not `will_wake` each other).
    let waker = Waker::from(Arc::new(PanickingWaker::default()));
    let mut cx = Context::from_waker(&waker);
    assert!(drive.as_mut().poll(&mut cx).is_pending());
    assert_eq!(calls.load(SeqCst), 1, "a sleep armed for the first tick");
    std::thread::sleep(ms(TICK + TICK / 4));
    let polled = catch_unwind(AssertUnwindSafe(|| drive.as_mut().poll(&mut cx)));
    assert!(matches!(polled, Ok(Poll::Pending)), "the Drive goes on");
    assert_eq!(timer.stats().panicked, 1);
    assert_eq!(
        calls.load(SeqCst),
        2,
        "the next tick's sleep_until panicked"
    );
    assert!(drive.as_mut().poll(&mut cx).is_pending());
    assert!(calls.load(SeqCst) > 2, "the next poll arms more");
}

/// A `Drive` spawned on a runtime without timers (tokio's `sleep_until` panics there) completes
/// (its task ends well, not with a panic), and the worker thread runs the ticks.
#[test]
fn a_drive_on_a_runtime_without_timers_completes_and_the_thread_runs_the_ticks() {
    const TICK: u64 = 50;
    let timer = started_timer(TICK);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let driving = rt.spawn(timer.drive(|at| tokio::time::sleep_until(at.into())));
    assert!(rt.block_on(driving).is_ok(), "the driver's task ends well");
    assert_eq!(timer.stats().panicked, 1);
    assert_ticks_handed_back(&timer, TICK);
}

/// A periodic task whose `Drop` cancels its own schedule, when its reschedule is refused (the
/// pending limit): the refused run's task is dropped without the schedule's lock held, so the
/// cancel does not wait for itself.
#[test]
fn a_periodic_task_whose_drop_cancels_it_when_its_reschedule_is_refused() {
    within_30_s(|| {
        let (timer, driver) = HashedWheelTimer::builder()
            .tick_duration(ms(1))
            .max_pending_timeouts(2)
            .build_manual()
            .unwrap();
        let me: Arc<Mutex<Option<PeriodicTimeout>>> = Arc::default();
        struct CancelOnDrop(Arc<Mutex<Option<PeriodicTimeout>>>);
        impl Drop for CancelOnDrop {
            fn drop(&mut self) {
                let periodic = self.0.lock().unwrap().clone();
                if let Some(periodic) = periodic {
                    periodic.cancel();
                }
            }
        }
        let guard = CancelOnDrop(Arc::clone(&me));
        let handle = timer.handle();
        let filler = Arc::new(Mutex::new(Vec::new()));
        let f = Arc::clone(&filler);
        let periodic = timer
            .schedule_with_fixed_delay(
                move |_: &PeriodicTimeout| {
                    let _keep = &guard;
                    // Takes the last place under the limit: the reschedule is refused.
                    while let Ok(t) = handle.new_timeout(noop, Duration::from_secs(60)) {
                        f.lock().unwrap().push(t);
                    }
                },
                ms(2),
                ms(2),
            )
            .unwrap();
        *me.lock().unwrap() = Some(periodic.clone());
        driver.advance(ms(5));
        assert_eq!(periodic.runs(), 1);
        assert!(periodic.is_cancelled());
        assert_eq!(timer.stats().refused, 2);
    });
}

/// A task's `Drop` that advances the manual clock, run as the driver drops the worker of a
/// timer whose owner a task dropped: the advance finds the timer stopped instead of waiting
/// for the lock its own driver holds.
#[test]
fn advancing_from_a_drop_as_the_driver_lets_the_worker_go_returns() {
    within_30_s(|| {
        let (timer, driver) = manual_timer(ms(1));
        struct AdvanceOnDrop(hashed_timer_wheel::ManualDriver, Arc<AtomicUsize>);
        impl Drop for AdvanceOnDrop {
            fn drop(&mut self) {
                self.0.advance(ms(1));
                self.1.fetch_add(1, SeqCst);
            }
        }
        let dropped = Arc::new(AtomicUsize::new(0));
        let probe = AdvanceOnDrop(driver.clone(), Arc::clone(&dropped));
        timer
            .new_timeout(move |_: &Timeout| drop(probe), Duration::from_secs(60))
            .unwrap();
        let handle = timer.handle();
        let owner = Arc::new(Mutex::new(Some(timer)));
        let o = Arc::clone(&owner);
        handle
            .new_timeout(move |_: &Timeout| drop(o.lock().unwrap().take()), ms(2))
            .unwrap();
        driver.advance(ms(5));
        assert_eq!(dropped.load(SeqCst), 1);
        assert!(owner.lock().unwrap().is_none());
    });
}

/// An executor whose own `Drop` panics, dropped as `stop()` lets the worker go: `stop()` still
/// returns every timeout that never ran (in the wheel, and queued), and drops each task once.
#[test]
fn stop_returns_every_timeout_when_the_executors_drop_panics() {
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("the executor's Drop panics (on purpose)");
        }
    }
    let captured = PanicsOnDrop;
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .executor(move |job: Box<dyn FnOnce() + Send>| {
            let _keep = &captured;
            job()
        })
        .build_manual()
        .unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let probe = DropProbe::new(&drops, false);
    timer
        .new_timeout(move |_: &Timeout| drop(probe), Duration::from_secs(60))
        .unwrap();
    driver.advance(ms(2)); // the first is in the wheel
    let probe = DropProbe::new(&drops, false);
    timer
        .new_timeout(move |_: &Timeout| drop(probe), Duration::from_secs(60))
        .unwrap();
    let stopped = timer.stop().unwrap();
    assert_eq!(stopped.len(), 2);
    assert!(stopped.iter().all(|never_ran| never_ran.is_cancelled()));
    assert_eq!(drops.load(SeqCst), 0, "the tasks are the caller's");
    drop(stopped);
    assert_eq!(drops.load(SeqCst), 2);
}

/// A refused timeout whose task's `Drop` panics: the refusal is counted before the task drops,
/// and the panic (the caller's own task) reaches the caller.
#[test]
fn a_refused_timeout_whose_drop_panics_is_counted() {
    let (timer, _driver) = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .max_pending_timeouts(1)
        .build_manual()
        .unwrap();
    timer.new_timeout(noop, ms(100)).unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    for detached in [false, true] {
        let probe = DropProbe::new(&drops, true);
        let task = move |_: &Timeout| drop(probe);
        let refused = catch_unwind(AssertUnwindSafe(|| {
            if detached {
                timer.new_timeout_detached(task, ms(100)).map(drop)
            } else {
                timer.new_timeout(task, ms(100)).map(drop)
            }
        }));
        assert!(refused.is_err());
    }
    assert_eq!(drops.load(SeqCst), 2);
    assert_eq!(timer.stats().refused, 2);
    assert_eq!(timer.pending_timeouts(), 1);
}

/// A waker's clone that panics while `armed` (once, if `once`), which a `Wake` waker's clone
/// cannot do; `woken` counts the wake-ups of every clone.
struct CloneBomb {
    armed: AtomicBool,
    once: bool,
    woken: AtomicUsize,
}

impl CloneBomb {
    const fn new(once: bool) -> CloneBomb {
        CloneBomb {
            armed: AtomicBool::new(false),
            once,
            woken: AtomicUsize::new(0),
        }
    }

    fn waker(&'static self) -> Waker {
        use std::task::{RawWaker, RawWakerVTable};
        fn bomb(data: *const ()) -> &'static CloneBomb {
            // SAFETY: every `RawWaker` of this vtable is made from a `&'static CloneBomb`.
            unsafe { &*data.cast::<CloneBomb>() }
        }
        fn clone(data: *const ()) -> RawWaker {
            let bomb = bomb(data);
            let fires = if bomb.once {
                bomb.armed.swap(false, SeqCst)
            } else {
                bomb.armed.load(SeqCst)
            };
            if fires {
                panic!("a waker panics in its clone (on purpose)");
            }
            RawWaker::new(data, &VTABLE)
        }
        fn wake(data: *const ()) {
            bomb(data).woken.fetch_add(1, SeqCst);
        }
        fn drop(_: *const ()) {}
        static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake, drop);
        let data = (self as *const CloneBomb).cast::<()>();
        // SAFETY: the data pointer is a `&'static CloneBomb`, which every function reads only
        // through shared atomics: safe from any thread any number of times, as `RawWaker`'s
        // contract asks.
        unsafe { Waker::from_raw(RawWaker::new(data, &VTABLE)) }
    }
}

/// Its next clone panics once armed.
static CLONE_BOMB: CloneBomb = CloneBomb::new(true);

/// A `Sleep` reset while its task waits, whose waker panics if cloned: the reset clones
/// nothing (the waker stays in the sleep's cell, where the new timeout's task finds it), so it
/// returns, and the task is woken at the new deadline, not at the old one.
#[test]
fn a_sleep_reset_whose_waker_panics_in_its_clone_wakes_the_task() {
    let (timer, driver) = manual_timer(ms(1));
    let waker = CLONE_BOMB.waker();
    let mut sleep = timer.sleep(ms(10));
    assert!(Pin::new(&mut sleep)
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    CLONE_BOMB.armed.store(true, SeqCst);
    sleep.reset_after(ms(20));
    assert!(Pin::new(&mut sleep)
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    assert!(CLONE_BOMB.armed.swap(false, SeqCst), "nothing cloned");
    driver.advance(ms(15));
    assert_eq!(CLONE_BOMB.woken.load(SeqCst), 0, "not at the old deadline");
    driver.advance(ms(10));
    assert_eq!(
        CLONE_BOMB.woken.load(SeqCst),
        1,
        "woken at the new deadline"
    );
    assert!(Pin::new(&mut sleep)
        .poll(&mut Context::from_waker(&waker))
        .is_ready());
    assert_eq!(timer.pending_timeouts(), 0);
}

/// Its next clone panics once armed: the interval's test's own, as tests run in parallel.
static INTERVAL_CLONE_BOMB: CloneBomb = CloneBomb::new(true);

/// An `Interval` reset while its task waits, whose waker panics if cloned: the reset clones
/// nothing (the waker stays in the sleep's cell), so it returns, and it holds: the next tick
/// is a period after it, and the task is woken then. (When the reset cloned the waker, the
/// interval kept its old deadline while its sleep waited on the new one, so that the next poll
/// past the old deadline ticked there: the reset was lost.)
#[test]
fn an_interval_reset_whose_waker_panics_in_its_clone_keeps_the_reset() {
    let (timer, driver) = manual_timer(ms(1));
    let waker = INTERVAL_CLONE_BOMB.waker();
    let mut cx = Context::from_waker(&waker);
    let mut interval = timer.interval(ms(100));
    assert!(interval.poll_tick(&mut cx).is_ready(), "the first, at once");
    assert!(
        interval.poll_tick(&mut cx).is_pending(),
        "the next at 100 ms"
    );
    driver.advance(ms(50));
    INTERVAL_CLONE_BOMB.armed.store(true, SeqCst);
    interval.reset();
    assert!(interval.poll_tick(&mut cx).is_pending());
    assert!(
        INTERVAL_CLONE_BOMB.armed.swap(false, SeqCst),
        "nothing cloned"
    );
    driver.advance(ms(70)); // 120 ms: past the deadline before the reset
    assert!(
        interval.poll_tick(&mut cx).is_pending(),
        "the reset holds: the next tick is at 150 ms"
    );
    assert_eq!(INTERVAL_CLONE_BOMB.woken.load(SeqCst), 0);
    driver.advance(ms(35)); // 155 ms
    assert!(
        INTERVAL_CLONE_BOMB.woken.load(SeqCst) >= 1,
        "woken at the new deadline"
    );
    assert!(matches!(interval.poll_tick(&mut cx), Poll::Ready(Ok(_))));
    assert!(
        interval.poll_tick(&mut cx).is_pending(),
        "the next at 250 ms"
    );
    assert_eq!(timer.pending_timeouts(), 1);
}

/// A panic payload whose own `Drop` panics (`panic_any` of such a value).
struct PanickingPayload;

impl Drop for PanickingPayload {
    fn drop(&mut self) {
        panic!("a panic payload's Drop panics (on purpose)");
    }
}

/// A task, a task's `Drop`, a typed task and the executor each panicking with a payload whose
/// `Drop` panics: the payload is dropped under a catch too. It unwound the worker: the worker
/// thread died (the timer stopped, every later timeout lost), and a manual advance left the
/// timer broken (the next advance aborted the process).
#[test]
fn a_panic_whose_payload_panics_in_its_drop_is_caught() {
    let (timer, driver) = manual_timer(ms(1));
    let fired = Arc::new(AtomicUsize::new(0));
    timer
        .new_timeout(|_: &Timeout| std::panic::panic_any(PanickingPayload), ms(2))
        .unwrap();
    struct PanicsInDrop;
    impl Drop for PanicsInDrop {
        fn drop(&mut self) {
            std::panic::panic_any(PanickingPayload);
        }
    }
    let doomed = PanicsInDrop;
    let cancelled = timer
        .new_timeout(move |_: &Timeout| drop(doomed), ms(2))
        .unwrap();
    assert!(cancelled.cancel());
    timer.new_timeout(common::counting(&fired), ms(2)).unwrap();
    driver.advance(ms(5));
    timer.new_timeout(common::counting(&fired), ms(2)).unwrap();
    driver.advance(ms(5));
    assert_eq!(fired.load(SeqCst), 2);
    assert_eq!(timer.stats().panicked, 2);
    assert_eq!(timer.pending_timeouts(), 0);

    struct Typed;
    impl TypedTask for Typed {
        fn run(self, _: &Timeout<Self>) {
            std::panic::panic_any(PanickingPayload);
        }
    }
    let (typed, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .executor(|job: Box<dyn FnOnce() + Send>| {
            job();
            std::panic::panic_any(PanickingPayload);
        })
        .build_manual_typed::<Typed>()
        .unwrap();
    typed.new_timeout(Typed, ms(2)).unwrap();
    driver.advance(ms(5));
    typed.new_timeout(Typed, ms(2)).unwrap();
    driver.advance(ms(5));
    assert_eq!(typed.stats().panicked, 4, "each run and each executor call");
    assert_eq!(typed.pending_timeouts(), 0);

    let timer = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .build()
        .unwrap();
    timer
        .new_timeout(|_: &Timeout| std::panic::panic_any(PanickingPayload), ms(1))
        .unwrap();
    let (tx, rx) = mpsc::channel();
    timer
        .new_timeout(move |_: &Timeout| tx.send(()).unwrap(), ms(20))
        .unwrap();
    assert!(
        rx.recv_timeout(Duration::from_secs(30)).is_ok(),
        "the worker thread goes on"
    );
    assert!(!timer.is_stopped());
}

/// A runtime's waker whose every clone panics once armed.
static DRIVER_BOMB: CloneBomb = CloneBomb::new(false);

/// A `Drive` whose runtime waker panics when cloned once it was stored: the worker thread runs
/// the ticks, and `stop()` returns what never ran. Producers, `stop()` and the worker thread
/// cloned it to wake the driver: the worker thread died of it (the timer stopped, every timeout
/// still in it lost), or `new_timeout` and `stop()` panicked. They now share the poll's clone.
#[test]
fn a_driver_waker_that_panics_in_its_clone_does_not_stop_the_worker() {
    let timer = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .build()
        .unwrap();
    let never_ran = timer.new_timeout(noop, Duration::from_secs(600)).unwrap();
    let mut drive = Box::pin(timer.drive(|_| std::future::pending::<()>()));
    let waker = DRIVER_BOMB.waker();
    assert!(drive
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    DRIVER_BOMB.armed.store(true, SeqCst);
    for _ in 0..3 {
        let (tx, rx) = mpsc::channel();
        timer
            .new_timeout(move |_: &Timeout| tx.send(()).unwrap(), ms(2))
            .expect("new_timeout does not panic");
        assert!(
            rx.recv_timeout(Duration::from_secs(30)).is_ok(),
            "the timeout fires"
        );
    }
    assert!(!timer.is_stopped());
    assert_eq!(
        timer.stats().panicked,
        0,
        "the stored waker is never cloned"
    );
    assert_eq!(timer.stop().unwrap(), vec![never_ran]);
    DRIVER_BOMB.armed.store(false, SeqCst);
    drop(drive);
}

/// A value that panics in its `Drop` with a payload that panics in its own.
struct PanicsWithAPanickingPayload(Arc<AtomicUsize>);

impl Drop for PanicsWithAPanickingPayload {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
        std::panic::panic_any(PanickingPayload);
    }
}

/// Values whose `Drop` panics with a payload that panics too, in a `DelayQueue` that is cleared
/// and in one that is dropped: every value is dropped once and the first panic reaches the
/// caller. The second value's payload, dropped in the crate, unwound it, and the values left
/// were dropped while it unwound: the process aborted.
#[test]
fn a_delay_queue_drops_every_value_when_their_panics_payloads_panic_too() {
    let (timer, _driver) = manual_timer(ms(1));
    let drops = Arc::new(AtomicUsize::new(0));
    let fill = |queue: &mut DelayQueue<PanicsWithAPanickingPayload>| {
        for _ in 0..3 {
            queue.insert(PanicsWithAPanickingPayload(Arc::clone(&drops)), ms(5));
        }
    };
    let mut queue = DelayQueue::new(timer.handle());
    fill(&mut queue);
    let first = catch_unwind(AssertUnwindSafe(|| queue.clear()));
    std::mem::forget(first); // its payload panics in its Drop
    assert_eq!(drops.load(SeqCst), 3);
    assert!(queue.is_empty());
    fill(&mut queue);
    let first = catch_unwind(AssertUnwindSafe(move || drop(queue)));
    std::mem::forget(first);
    assert_eq!(drops.load(SeqCst), 6);
}

/// A runtime sleep: tokio's, or a `PanickingSleep`.
enum RuntimeSleep {
    Tokio(Pin<Box<tokio::time::Sleep>>),
    Panicking(PanickingSleep),
}

impl Future for RuntimeSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.get_mut() {
            RuntimeSleep::Tokio(sleep) => sleep.as_mut().poll(cx),
            RuntimeSleep::Panicking(sleep) => Pin::new(sleep).poll(cx),
        }
    }
}

/// A `Drive` polled first by hand, with sleeps whose `Drop` panics, then spawned on a runtime:
/// the new task's poll drops the last task's sleeps, and the panic is caught and counted, the
/// poll goes on and arms the runtime's sleeps, and the ticks run on the runtime. The panic
/// unwound the poll: the runtime ended the task, and the worker thread took the ticks back.
#[test]
fn a_drive_polled_by_a_new_task_whose_old_sleep_panics_in_drop_goes_on() {
    const TICK: u64 = 10;
    const TIMER_THREAD: &str = "panic-safety-drive-timer";
    let timer = HashedWheelTimer::builder()
        .tick_duration(ms(TICK))
        .thread_name(TIMER_THREAD)
        .build()
        .unwrap();
    // Work far away: the driver arms one sleep, for it.
    timer.new_timeout(noop, Duration::from_secs(600)).unwrap();
    let bomb = Arc::new(AtomicBool::new(false));
    let b = Arc::clone(&bomb);
    let mut drive = Box::pin(timer.drive(move |at| {
        if tokio::runtime::Handle::try_current().is_ok() {
            RuntimeSleep::Tokio(Box::pin(tokio::time::sleep_until(at.into())))
        } else {
            let bomb = Arc::clone(&b);
            RuntimeSleep::Panicking(PanickingSleep { bomb })
        }
    }));
    assert!(drive
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_pending());
    bomb.store(true, SeqCst);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("panic-safety-runtime")
        .enable_all()
        .build()
        .unwrap();
    let driving = rt.spawn(drive);
    let (tx, rx) = mpsc::channel();
    timer
        .new_timeout(
            move |_: &Timeout| {
                let name = std::thread::current().name().unwrap_or("").to_owned();
                tx.send(name).unwrap();
            },
            ms(3 * TICK),
        )
        .unwrap();
    let ran_on = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(!bomb.load(SeqCst), "the old sleep was dropped");
    assert_eq!(timer.stats().panicked, 1);
    assert!(!driving.is_finished(), "the driver's task goes on");
    assert_eq!(
        ran_on, "panic-safety-runtime",
        "the ticks are the runtime's"
    );
}

/// A `Drive` whose turn retires a runtime sleep that panics in its `Drop` (an earlier deadline
/// comes before the sleep armed for the far plan): the panic is caught and counted, and the poll
/// goes on to arm the sleeps for the new plan. It unwound the poll before any was armed.
#[test]
fn a_drive_whose_turn_retires_a_sleep_that_panics_in_drop_arms_the_next() {
    const TICK: u64 = 10;
    let timer = started_timer(TICK);
    let bomb = Arc::new(AtomicBool::new(false));
    let armed = Arc::new(AtomicUsize::new(0));
    let (b, a) = (Arc::clone(&bomb), Arc::clone(&armed));
    let mut drive = Box::pin(timer.drive(move |_| {
        a.fetch_add(1, SeqCst);
        PanickingSleep {
            bomb: Arc::clone(&b),
        }
    }));
    let mut cx = Context::from_waker(Waker::noop());
    // Past the first tick, the first turn has taken the far timeout and plans its tick: the
    // sleep armed is the far plan's (before it, the plan is the first tick's end).
    std::thread::sleep(ms(TICK + 1));
    assert!(drive.as_mut().poll(&mut cx).is_pending());
    let armed_for_far = armed.load(SeqCst);
    bomb.store(true, SeqCst);
    timer.new_timeout(noop, ms(3 * TICK)).unwrap();
    let polled = catch_unwind(AssertUnwindSafe(|| drive.as_mut().poll(&mut cx)));
    assert!(matches!(polled, Ok(Poll::Pending)), "the poll goes on");
    assert!(!bomb.load(SeqCst), "the far plan's sleep was retired");
    assert_eq!(timer.stats().panicked, 1);
    assert!(
        armed.load(SeqCst) > armed_for_far,
        "a sleep armed for the new plan"
    );
}

/// A runtime's waker that panics when its last clone is dropped, once `armed`.
struct PanicsWhenLastDropped {
    armed: Arc<AtomicBool>,
}

impl Wake for PanicsWhenLastDropped {
    fn wake(self: Arc<Self>) {}
}

impl Drop for PanicsWhenLastDropped {
    fn drop(&mut self) {
        if self.armed.load(SeqCst) {
            panic!("a runtime's waker panics in its Drop (on purpose)");
        }
    }
}

/// A `Drive` polled by a new task whose last task's waker panics when dropped: the panic is
/// caught and counted, and the poll goes on to arm the new task's sleep. The producers' copy
/// of that waker, the last, was dropped outside any catch and unwound the poll.
#[test]
fn a_drive_polled_by_a_new_task_whose_old_waker_panics_in_drop_goes_on() {
    let timer = started_timer(10);
    let armed_sleeps = Arc::new(AtomicUsize::new(0));
    let a = Arc::clone(&armed_sleeps);
    let mut drive = Box::pin(timer.drive(move |_| {
        a.fetch_add(1, SeqCst);
        std::future::pending::<()>()
    }));
    let bomb = Arc::new(AtomicBool::new(false));
    let old = Waker::from(Arc::new(PanicsWhenLastDropped {
        armed: Arc::clone(&bomb),
    }));
    assert!(drive
        .as_mut()
        .poll(&mut Context::from_waker(&old))
        .is_pending());
    drop(old); // the drive holds the last clones
    bomb.store(true, SeqCst);
    let armed_for_old = armed_sleeps.load(SeqCst);
    let polled = catch_unwind(AssertUnwindSafe(|| {
        drive.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    }));
    assert!(matches!(polled, Ok(Poll::Pending)), "the poll goes on");
    assert_eq!(timer.stats().panicked, 1);
    assert!(
        armed_sleeps.load(SeqCst) > armed_for_old,
        "a sleep armed for the new task"
    );
    bomb.store(false, SeqCst);
}

/// The waker of a `Drive`'s task that panics in its clone once armed, and one that never does.
static STOPPED_DRIVE_BOMB: CloneBomb = CloneBomb::new(false);
static LATER_DRIVE_TASK: CloneBomb = CloneBomb::new(false);

/// `stop()` wakes each attached `Drive`'s task, so that it completes, here one whose waker now
/// panics in its clone, beside a `Drive` polled later (whose task the producers wake). It
/// cloned that waker to wake it: the panic was caught and counted, and the task was never
/// woken (its sleep ten minutes away). The `Drive` now wakes the copy it keeps.
#[test]
fn stop_wakes_a_drive_whose_task_waker_panics_in_its_clone() {
    let timer = started_timer(10);
    let never = |_: Instant| std::future::pending::<()>();
    let mut stopped = Box::pin(timer.drive(never));
    let mut later = Box::pin(timer.drive(never));
    for (drive, task) in [
        (&mut stopped, &STOPPED_DRIVE_BOMB),
        (&mut later, &LATER_DRIVE_TASK),
    ] {
        let waker = task.waker();
        assert!(drive
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
    }
    STOPPED_DRIVE_BOMB.armed.store(true, SeqCst);
    let woken = STOPPED_DRIVE_BOMB.woken.load(SeqCst);
    assert_eq!(timer.stop().unwrap().len(), 1);
    assert!(STOPPED_DRIVE_BOMB.woken.load(SeqCst) > woken, "woken");
    assert_eq!(timer.stats().panicked, 0, "nothing cloned");
    for drive in [&mut stopped, &mut later] {
        let polled = drive.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        assert!(polled.is_ready(), "completes once stopped");
    }
    STOPPED_DRIVE_BOMB.armed.store(false, SeqCst);
}

/// A `Drive` of `timer` on a runtime whose sleeps never end, polled once by a task whose waker
/// does nothing.
fn drive_polled_once(timer: &HashedWheelTimer) -> Pin<Box<impl Future<Output = ()> + use<>>> {
    let mut drive = Box::pin(timer.drive(|_| std::future::pending::<()>()));
    assert!(drive
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_pending());
    drive
}

/// Its next clone panics once armed.
static NEW_DRIVE_TASK_BOMB: CloneBomb = CloneBomb::new(true);

/// A `Drive` polled by a new task whose waker panics in its clone: the poll unwinds with the
/// panic, as any future's whose waker panics, having changed nothing. The `Drive` can be polled
/// again, and completes once the timer stops.
#[test]
fn a_drive_poll_whose_waker_panics_in_its_clone_unwinds_and_leaves_it_usable() {
    let timer = started_timer(10);
    let mut drive = drive_polled_once(&timer);
    let waker = NEW_DRIVE_TASK_BOMB.waker();
    NEW_DRIVE_TASK_BOMB.armed.store(true, SeqCst);
    let polled = catch_unwind(AssertUnwindSafe(|| {
        drive.as_mut().poll(&mut Context::from_waker(&waker))
    }));
    assert!(
        polled.is_err(),
        "the clone's panic reaches the poll's caller"
    );
    assert_eq!(timer.stats().panicked, 0, "not caught by the timer");
    // Polled again by the same task, whose clone now returns.
    assert!(drive
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    let woken = NEW_DRIVE_TASK_BOMB.woken.load(SeqCst);
    assert_eq!(timer.stop().unwrap().len(), 1);
    assert!(
        NEW_DRIVE_TASK_BOMB.woken.load(SeqCst) > woken,
        "woken at stop"
    );
    assert!(drive
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_ready());
}

/// A `Drive` polled by a new task whose waker panics in its second clone: the poll clones it
/// once, shared by the `Drive` and the producers, and goes on. It cloned it twice, the second
/// after giving back the sleeps armed for the last task: the poll unwound with the `Drive`
/// half-changed, its sleeps gone and the producers still waking the last task.
#[test]
fn a_drive_poll_clones_a_new_tasks_waker_once() {
    let timer = started_timer(10);
    let mut drive = drive_polled_once(&timer);
    let clones = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&clones);
    let waker = common::calling_back_waker(
        Box::new(move || {
            if counted.fetch_add(1, SeqCst) == 1 {
                panic!("a waker panics in its second clone (on purpose)");
            }
        }),
        Box::new(|| {}),
    );
    let polled = catch_unwind(AssertUnwindSafe(|| {
        drive.as_mut().poll(&mut Context::from_waker(&waker))
    }));
    assert!(matches!(polled, Ok(Poll::Pending)), "the poll goes on");
    assert_eq!(clones.load(SeqCst), 1);
    assert_eq!(timer.stop().unwrap().len(), 1);
    assert!(drive
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_ready());
}

/// Its next clone panics once armed.
static QUEUE_TASK_BOMB: CloneBomb = CloneBomb::new(true);

/// An insert that makes a `DelayQueue` wake sooner, while the waiting task's waker panics if
/// cloned: the queue's `Sleep` re-arms for the sooner item without cloning it (the waker stays
/// in the sleep's cell), so the insert returns its key with nothing to catch, and the task is
/// woken at the sooner deadline and gets the item on time. (When the re-arm cloned the waker,
/// the panic unwound out of the insert, whose caller lost the key of an item it had inserted.)
#[test]
fn a_delay_queue_insert_whose_waiting_wakers_clone_panics_returns_its_key() {
    let (timer, driver) = manual_timer(ms(1));
    let mut queue = DelayQueue::new(timer.handle());
    queue.insert("later", ms(50));
    let waker = QUEUE_TASK_BOMB.waker();
    let mut cx = Context::from_waker(&waker);
    assert!(queue.poll_expired(&mut cx).is_pending());
    QUEUE_TASK_BOMB.armed.store(true, SeqCst);
    let inserted = catch_unwind(AssertUnwindSafe(|| queue.insert("sooner", ms(5))));
    let key = inserted.expect("the insert returns the key of the item it inserted");
    assert_eq!(timer.stats().panicked, 0, "nothing panicked");
    assert!(QUEUE_TASK_BOMB.armed.swap(false, SeqCst), "nothing cloned");
    assert!(queue.poll_expired(&mut cx).is_pending());
    let woken = QUEUE_TASK_BOMB.woken.load(SeqCst);
    driver.advance(ms(6));
    assert!(
        QUEUE_TASK_BOMB.woken.load(SeqCst) > woken,
        "woken at the sooner deadline"
    );
    match queue.poll_expired(&mut cx) {
        Poll::Ready(Some(item)) => assert_eq!(item.key(), key),
        other => panic!("the sooner item: {:?}", other.map(|_| ())),
    }
    assert_eq!(queue.remove(&queue.peek().unwrap()).into_inner(), "later");
}

/// A task that panics as a `Drive`'s turn fires it early in its tick (what is due by the turn's
/// time) loses nothing and runs nothing twice: its neighbour due in the same tick runs once at
/// that turn, and the tick's end, turns later, runs neither again.
#[test]
fn a_task_panicking_in_a_drives_early_expiry_loses_nothing_and_runs_nothing_twice() {
    const TICK: u64 = 400;
    let timer = HashedWheelTimer::builder()
        .tick_duration(ms(TICK))
        .build()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let (r1, r2) = (Arc::clone(&runs), Arc::clone(&runs));
    let panicking = move |_: &Timeout| {
        r1.fetch_add(1, SeqCst);
        panic!("a task panics in an early expiry (on purpose)");
    };
    let first = timer.new_timeout(panicking, ms(450)).unwrap();
    let second = timer
        .new_timeout(
            move |_: &Timeout| {
                r2.fetch_add(1, SeqCst);
            },
            ms(500),
        )
        .unwrap();
    let mut drive = Box::pin(timer.drive(|_| std::future::pending::<()>()));
    // One task throughout: a new task's poll drops the sleep armed for the last one.
    let waker = Waker::from(Arc::new(PanickingWaker::default()));
    let mut cx = Context::from_waker(&waker);
    assert!(drive.as_mut().poll(&mut cx).is_pending());
    std::thread::sleep(ms(600));
    assert!(drive.as_mut().poll(&mut cx).is_pending());
    assert_eq!(runs.load(SeqCst), 2, "both ran at the early turn");
    assert!(first.is_expired() && second.is_expired());
    assert_eq!(timer.stats().panicked, 1);
    std::thread::sleep(ms(TICK + 50));
    assert!(drive.as_mut().poll(&mut cx).is_pending());
    assert_eq!(runs.load(SeqCst), 2, "the tick's end ran neither again");
    assert_eq!(timer.pending_timeouts(), 0);
}

/// Futures due in one tick, the first one's waker panicking as the walk wakes it: every other
/// future is still woken once, and the panic is counted once.
#[test]
fn a_waker_panicking_among_a_ticks_wake_ups_leaves_the_others_woken() {
    struct PanickingWaker;
    impl Wake for PanickingWaker {
        fn wake(self: Arc<Self>) {
            panic!("a waker panics (on purpose)");
        }
    }
    let (timer, driver) = manual_timer(ms(1));
    let panicking = Waker::from(Arc::new(PanickingWaker));
    let count = Arc::new(common::WakeCount::default());
    let counting = Waker::from(Arc::clone(&count));
    let mut first = timer.sleep(ms(2));
    let mut others: Vec<_> = (0..5).map(|_| timer.sleep(ms(2))).collect();
    let mut cx = Context::from_waker(&panicking);
    assert!(std::pin::Pin::new(&mut first).poll(&mut cx).is_pending());
    let mut cx = Context::from_waker(&counting);
    for sleep in &mut others {
        assert!(std::pin::Pin::new(sleep).poll(&mut cx).is_pending());
    }
    driver.advance(ms(5));
    assert_eq!(count.0.load(SeqCst), 5, "each other future woken once");
    assert_eq!(timer.stats().panicked, 1);
    for sleep in &mut others {
        assert!(std::pin::Pin::new(sleep).poll(&mut cx).is_ready());
    }
    assert_eq!(timer.pending_timeouts(), 0);
}
