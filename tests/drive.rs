//! `Drive`: the timer's ticks run on an async runtime's threads, the worker thread kept as a
//! watchdog.

mod common;

use common::{calling_back_waker, ms, no_hook, once, within_30_s};
use hashed_timer_wheel::{HashedWheelTimer, Sleep, Timeout};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

const THREAD: &str = "drive-test-timer";

fn timer() -> HashedWheelTimer {
    HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .thread_name(THREAD)
        .build()
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("drive-test-runtime")
        .enable_all()
        .build()
        .unwrap()
}

/// The instants at which a driver ended its turns (it arms a sleep at the end of each), to tell
/// a watchdog that takes a turn of its own from a driver the host stalled past the grace.
#[derive(Clone, Default)]
struct Turns(Arc<Mutex<Vec<Instant>>>);

impl Turns {
    fn drive(&self, timer: &HashedWheelTimer) -> impl Future<Output = ()> + Send + 'static {
        let turns = self.clone();
        timer.drive(move |at| {
            turns.0.lock().unwrap().push(Instant::now());
            tokio::time::sleep_until(at.into())
        })
    }

    /// The longest time between `from` and `to` in which the driver ended no turn.
    fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let turns = self.0.lock().unwrap();
        let inside = turns.iter().copied().filter(|t| *t > from && *t < to);
        let mut last = from;
        let mut gap = Duration::ZERO;
        for t in inside.chain(std::iter::once(to)) {
            gap = gap.max(t - last);
            last = t;
        }
        gap
    }
}

/// The thread a task runs on, by name.
fn thread_of_task(timer: &HashedWheelTimer, delay: Duration) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    timer
        .new_timeout(
            move |_: &Timeout| {
                let name = std::thread::current().name().unwrap_or("").to_owned();
                tx.send(name).unwrap();
            },
            delay,
        )
        .unwrap();
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

/// Driven, the ticks run on the runtime's threads: tasks run there, sleeps complete never
/// early, and the worker thread wakes only as a watchdog.
#[test]
fn a_driven_timer_runs_its_ticks_on_the_runtime() {
    let timer = timer();
    let rt = runtime();
    let turns = Turns::default();
    rt.spawn(turns.drive(&timer));
    rt.block_on(async {
        for delay in [0, 1, 3, 10, 25] {
            let start = Instant::now();
            timer.sleep(ms(delay)).await.unwrap();
            assert!(start.elapsed() >= ms(delay), "never early");
        }
        let sleeps: Vec<_> = (0..200).map(|i| timer.sleep(ms(i % 40))).collect();
        for sleep in sleeps {
            sleep.await.unwrap();
        }
    });
    let start = Instant::now();
    let thread = thread_of_task(&timer, ms(5));
    // The watchdog's thread only if the host stalled the runtime for the grace.
    let gap = turns.longest_gap(start, Instant::now());
    assert!(
        thread == "drive-test-runtime" || (thread == THREAD && gap >= ms(62)),
        "the task ran on {thread:?}, the driver ending a turn at least every {gap:?}"
    );
    assert_eq!(timer.pending_timeouts(), 0);
    // Ticks handed back once the runtime (and so the driver) is gone.
    drop(rt);
    assert_eq!(thread_of_task(&timer, ms(5)), THREAD);
}

/// While the driver keeps up, the watchdog runs no turn of its own: a tick due every
/// millisecond for 300 ms runs every task on the runtime's threads, none on the timer's
/// (a watchdog that took a turn every grace would race the runtime's timer for the tick due
/// then, and wake the driver from its thread). A host that stalls the runtime's threads for
/// the grace (16 ticks of 4 ms: 64 ticks of 1 ms) lets the watchdog in rightly: a task on the
/// timer's thread is then a failure only if the driver ended a turn at least every 62 ms.
#[test]
fn a_driver_that_keeps_up_leaves_every_tick_to_the_runtime() {
    let timer = timer();
    let rt = runtime();
    let turns = Turns::default();
    rt.spawn(turns.drive(&timer));
    // Started by a sleep, so that the first tick is the driver's.
    rt.block_on(timer.sleep(ms(2))).unwrap();
    let threads = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    for i in 1..=300 {
        let threads = Arc::clone(&threads);
        timer
            .new_timeout(
                move |_: &Timeout| {
                    let name = std::thread::current().name().unwrap_or("").to_owned();
                    threads.lock().unwrap().push((name, Instant::now()));
                },
                ms(i),
            )
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while threads.lock().unwrap().len() < 300 {
        assert!(Instant::now() < deadline, "the tasks did not all run");
        std::thread::sleep(ms(10));
    }
    let threads = threads.lock().unwrap();
    let on_timer = threads.iter().filter(|(n, _)| n == THREAD).count();
    let end = threads.iter().map(|(_, at)| *at).max().unwrap();
    let gap = turns.longest_gap(start, end);
    assert!(
        on_timer == 0 || gap >= ms(62),
        "{on_timer} tasks run by the watchdog's own turns while the driver ended a turn at \
         least every {gap:?}"
    );
    if on_timer > 0 {
        eprintln!("the runtime stalled for {gap:?}: {on_timer} tasks run by the watchdog");
    }
}

/// A driver that is never polled again (a runtime that is blocked): the worker thread runs
/// the ticks itself, at most twice the grace late (128 ms on a 1 ms tick).
#[test]
fn the_worker_thread_takes_over_from_a_driver_that_stalls() {
    let timer = timer();
    let polls = Arc::new(AtomicUsize::new(0));
    let p = Arc::clone(&polls);
    // A runtime sleep that never completes, and a waker that does nothing: the driver runs
    // one turn here and is never polled again.
    let mut drive = Box::pin(timer.drive(move |_| {
        p.fetch_add(1, SeqCst);
        std::future::pending::<()>()
    }));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(drive.as_mut().poll(&mut cx).is_pending());
    let start = Instant::now();
    let fired = Arc::new(Mutex::new(None));
    let f = Arc::clone(&fired);
    timer
        .new_timeout(
            move |_: &Timeout| *f.lock().unwrap() = Some(Instant::now()),
            ms(5),
        )
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while fired.lock().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the watchdog never ran the tick");
        std::thread::sleep(ms(1));
    }
    let took = fired.lock().unwrap().unwrap() - start;
    assert!(took >= ms(5), "never early: {took:?}");
    assert!(
        took < ms(5 + 128 + 30),
        "within the watchdog's grace: {took:?}"
    );
    drop(drive);
}

/// `stop()` completes the driver; a driver of a manual timer completes at once.
#[test]
fn a_driver_completes_when_the_timer_stops() {
    let timer = timer();
    let rt = runtime();
    let driving = rt.spawn(timer.drive(|at| tokio::time::sleep_until(at.into())));
    rt.block_on(timer.sleep(ms(3))).unwrap();
    let pending = timer.new_timeout(|_: &Timeout| {}, ms(10_000)).unwrap();
    assert_eq!(timer.stop().unwrap(), vec![pending]);
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), driving)
            .await
            .expect("the driver completes")
            .unwrap();
    });
    let (manual, _driver) = HashedWheelTimer::builder().build_manual().unwrap();
    let mut drive = Box::pin(manual.drive(|_| std::future::pending::<()>()));
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(drive.as_mut().poll(&mut cx), Poll::Ready(()));
}

/// A task run by the driver that drops the timer's owner: no deadlock, the driver completes,
/// and the pending timeouts' tasks are dropped.
#[test]
fn dropping_the_owner_in_a_driven_task_does_not_deadlock() {
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let timer = timer();
    let rt = runtime();
    let driving = rt.spawn(timer.drive(|at| tokio::time::sleep_until(at.into())));
    let dropped = Arc::new(AtomicUsize::new(0));
    for _ in 0..10 {
        let c = Counted(Arc::clone(&dropped));
        timer
            .new_timeout(move |_: &Timeout| drop(c), ms(60_000))
            .unwrap();
    }
    let owner = Arc::new(Mutex::new(Some(timer)));
    let o = Arc::clone(&owner);
    let handle = owner.lock().unwrap().as_ref().unwrap().handle();
    handle
        .new_timeout(move |_: &Timeout| drop(o.lock().unwrap().take()), ms(5))
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), driving)
            .await
            .expect("the driver completes")
            .unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while dropped.load(SeqCst) < 10 {
        assert!(Instant::now() < deadline, "tasks not dropped");
        std::thread::sleep(ms(1));
    }
    assert!(owner.lock().unwrap().is_none());
}

/// A producer whose deadline is earlier than the driver's plan wakes the driver: a short
/// sleep scheduled while a long one is the only timeout pending is on time. Unwoken, every
/// sleep would wait for the watchdog (35 ms); a host that stalls the runtime makes a few late.
#[test]
fn an_earlier_deadline_wakes_the_driver() {
    let timer = timer();
    let rt = runtime();
    rt.spawn(timer.drive(|at| tokio::time::sleep_until(at.into())));
    let took = rt.block_on(async {
        let _long = timer.sleep(Duration::from_secs(60));
        tokio::time::sleep(ms(20)).await;
        let mut took = Vec::new();
        for _ in 0..20 {
            let start = Instant::now();
            timer.sleep(ms(3)).await.unwrap();
            took.push(start.elapsed());
        }
        took
    });
    assert!(took.iter().all(|t| *t >= ms(3)), "early: {took:?}");
    let late = took.iter().filter(|t| **t >= ms(3 + 25)).count();
    assert!(
        late <= 5,
        "{late} of 20 sleeps waited for the watchdog: {took:?}"
    );
}

#[allow(dead_code)]
fn assert_send<T: Send>(_: &T) {}

#[test]
fn a_drive_is_send_for_spawning() {
    let timer = timer();
    let drive = timer.drive(|at| tokio::time::sleep_until(at.into()));
    assert_send(&drive);
    let boxed: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(drive);
    drop(boxed);
}

/// A driver dropped while its runtime goes on (its task aborted) frees itself: the runtime's
/// sleeps it armed hold it as their waker, and it drops them, not leaving them to the far
/// deadline it armed last. (The runtime's timer may hold a clone of that waker for a moment,
/// as it fires one of them on its other thread.)
#[test]
fn a_dropped_driver_frees_itself() {
    let timer = timer();
    let rt = runtime();
    let token = Arc::new(());
    let t = Arc::clone(&token);
    let driving = rt.spawn(timer.drive(move |at| {
        let _keep = &t;
        tokio::time::sleep_until(at.into())
    }));
    rt.block_on(async {
        // Busy ticks, so that the driver arms sleeps ahead; then work pending far away.
        let sleeps: Vec<_> = (0..20).map(|i| timer.sleep(ms(i))).collect();
        for sleep in sleeps {
            sleep.await.unwrap();
        }
        let _pending = timer.sleep(Duration::from_secs(60));
        driving.abort();
        assert!(driving.await.unwrap_err().is_cancelled());
        let aborted = Instant::now();
        while Arc::strong_count(&token) > 1 {
            assert!(
                aborted.elapsed() < Duration::from_secs(10),
                "the driver outlived its task"
            );
            tokio::time::sleep(ms(1)).await;
        }
    });
    // The ticks are the thread's again.
    assert_eq!(thread_of_task(&timer, ms(5)), THREAD);
}

/// A driver that stalls while its plan is far away (one long timeout in the wheel): a new,
/// earlier deadline unparks the watching thread too, so it fires within the grace, not when the
/// long one would.
#[test]
fn a_stalled_driver_with_a_far_plan_leaves_an_earlier_deadline_within_the_grace() {
    let timer = timer();
    let mut drive = Box::pin(timer.drive(|_| std::future::pending::<()>()));
    assert!(drive
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_pending());
    let _far = timer.new_timeout(|_: &Timeout| {}, Duration::from_secs(5));
    // The watchdog's turn moves it into the wheel: the plan is 5 s away.
    std::thread::sleep(ms(100));
    let (tx, rx) = std::sync::mpsc::channel();
    let start = Instant::now();
    timer
        .new_timeout(move |_: &Timeout| tx.send(Instant::now()).unwrap(), ms(5))
        .unwrap();
    let fired = rx.recv_timeout(Duration::from_secs(30)).unwrap() - start;
    // 5 ms plus the watchdog's bound (128 ms), with room for a loaded host; the far plan would
    // be ~4.9 s.
    assert!(fired >= ms(5) && fired < ms(1000), "fired after {fired:?}");
    drop(drive);
}

/// One of two drivers dropped while the other goes on: the timer stays on time. Producers no
/// longer wake the dropped one's task; the thread runs the ticks until the other is polled.
#[test]
fn dropping_one_of_two_drivers_leaves_the_timer_on_time() {
    const TICK: u64 = 20;
    let timer = HashedWheelTimer::new(ms(TICK), 512);
    let rt = runtime();
    let _first = rt.spawn(timer.drive(|at| tokio::time::sleep_until(at.into())));
    std::thread::sleep(ms(50));
    let second = rt.spawn(timer.drive(|at| tokio::time::sleep_until(at.into())));
    std::thread::sleep(ms(50));
    rt.block_on(async {
        second.abort();
        assert!(second.await.unwrap_err().is_cancelled());
        for _ in 0..3 {
            let start = Instant::now();
            timer.sleep(ms(30)).await.unwrap();
            let took = start.elapsed();
            // Within 2 ticks and a loaded host's delays; not the watchdog's 16 ticks (320 ms).
            assert!(
                took >= ms(30) && took < ms(300),
                "a 30 ms sleep took {took:?}"
            );
        }
    });
}

/// A waker that panics in its `Drop` (when its last clone goes).
struct PanicsWhenDropped;

impl std::task::Wake for PanicsWhenDropped {
    fn wake(self: Arc<Self>) {}
}

impl Drop for PanicsWhenDropped {
    fn drop(&mut self) {
        panic!("a runtime's waker panics in its Drop (on purpose)");
    }
}

/// A `Drive` dropped whose task's waker panics in its `Drop`: the panic is caught and counted,
/// and the ticks are handed back to the thread (a timeout fires on time, not 32 ticks late).
#[test]
fn a_drive_dropped_with_a_waker_that_panics_in_drop_hands_the_ticks_back() {
    const TICK: u64 = 20;
    let timer = HashedWheelTimer::new(ms(TICK), 512);
    let mut drive = Box::pin(timer.drive(|_| std::future::pending::<()>()));
    let waker = Waker::from(Arc::new(PanicsWhenDropped));
    assert!(drive
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    drop(waker); // the drive holds the last clones
    drop(drive);
    assert_eq!(timer.stats().panicked, 1);
    let (tx, rx) = std::sync::mpsc::channel();
    let start = Instant::now();
    timer
        .new_timeout(
            move |_: &Timeout| tx.send(Instant::now()).unwrap(),
            ms(3 * TICK),
        )
        .unwrap();
    let fired = rx.recv_timeout(Duration::from_secs(30)).unwrap() - start;
    assert!(
        fired >= ms(3 * TICK) && fired < ms(16 * TICK),
        "fired after {fired:?}"
    );
}

/// A `Drive` first polled with a runtime waker whose clone schedules a timeout on the timer,
/// not started yet: the clone ran under the timer's `control` lock, and the timeout's lazy start
/// waited for that lock forever.
#[test]
fn a_drive_whose_wakers_clone_starts_the_timer_does_not_deadlock() {
    let timer = timer();
    let handle = timer.handle();
    let fired = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&fired);
    let waker = calling_back_waker(
        once(move || {
            let count = move |_: &Timeout| {
                counted.fetch_add(1, SeqCst);
            };
            handle.new_timeout(count, ms(1)).unwrap();
        }),
        no_hook(),
    );
    let mut drive = Box::pin(timer.drive(|_| std::future::pending::<()>()));
    // Everything that locks `control` when dropped goes with the call, so that a deadlock there
    // fails the test instead of hanging it.
    within_30_s(move || {
        assert!(drive
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        let start = Instant::now();
        while fired.load(SeqCst) == 0 && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(ms(1));
        }
        assert_eq!(fired.load(SeqCst), 1);
        drop((drive, timer));
    });
}

/// A producer waking a `Drive` whose runtime waker stops the timer in its clone: the clone ran
/// under the timer's `control` lock, which `stop()` takes first, and `new_timeout` never returned.
#[test]
fn a_drive_whose_wakers_clone_stops_the_timer_does_not_deadlock() {
    let timer = Arc::new(timer());
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (owner, armed_in_clone) = (Arc::clone(&timer), Arc::clone(&armed));
    let waker = calling_back_waker(
        Box::new(move || {
            if armed_in_clone.swap(false, SeqCst) {
                let owner = Arc::clone(&owner);
                // From another thread: `stop()` on this one may be the worker's, and refused.
                std::thread::spawn(move || drop(owner.stop()))
                    .join()
                    .unwrap();
            }
        }),
        no_hook(),
    );
    let mut drive = Box::pin(timer.drive(|_| std::future::pending::<()>()));
    assert!(drive
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    armed.store(true, SeqCst);
    // As above: whatever locks `control` when dropped goes with the call.
    within_30_s(move || {
        let _ = timer.new_timeout(|_: &Timeout| {}, ms(1));
        drop((drive, timer));
    });
}

/// A driver that stalls for good while the tick it planned has come within the watchdog's
/// grace: the watchdog, waking then, ran that tick only a grace after the time it woke, not
/// a grace after the tick planned, and so left the timeout up to twice the grace late.
#[test]
fn a_driver_that_stalls_behind_its_plan_leaves_a_timeout_within_the_grace() {
    const TICK: u64 = 10;
    let timer = HashedWheelTimer::new(ms(TICK), 512);
    let (block_tx, block_rx) = tokio::sync::oneshot::channel::<Instant>();
    let drive = timer.drive(|at| tokio::time::sleep_until(at.into()));
    // A current-thread runtime on a thread of its own, whose thread blocks when told to.
    let runtime = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            tokio::spawn(drive);
            let at = block_rx.await.unwrap();
            tokio::time::sleep_until(at.into()).await;
            std::thread::sleep(Duration::from_millis(1500));
        });
    });
    // The driver is polled, and the watchdog parked with nothing pending.
    std::thread::sleep(ms(5 * TICK));
    let start = Instant::now();
    // The first plan the watchdog watches: it wakes 16 ticks after this one.
    timer.new_timeout(|_: &Timeout| {}, ms(5 * TICK)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let late = ms(10 * TICK);
    timer
        .new_timeout(move |_: &Timeout| tx.send(Instant::now()).unwrap(), late)
        .unwrap();
    // The runtime blocks after the first has run and before the second is due.
    block_tx.send(start + ms(7 * TICK)).unwrap();
    let fired = rx.recv_timeout(Duration::from_secs(10)).unwrap() - start;
    assert!(fired >= late, "never early: {fired:?}");
    // The grace and a loaded host's delays; not twice the grace.
    assert!(
        fired < late + ms((32 + 10) * TICK),
        "fired after {fired:?}, more than the grace past {late:?}"
    );
    runtime.join().unwrap();
}

/// A `Drive` polled on one runtime, then moved to another once the first is gone: the sleeps it
/// had armed ahead on the first never end, and it armed none on the second for their ticks, so
/// nothing woke it there and the watchdog ran those ticks 32 late.
#[test]
fn a_drive_moved_to_another_runtime_arms_its_sleeps_there() {
    const TICK: u64 = 10;
    let timer = HashedWheelTimer::new(ms(TICK), 512);
    let mut drive = Box::pin(timer.drive(|at| tokio::time::sleep_until(at.into())));
    // Work at every tick: the driver arms its sleeps ahead.
    let _busy: Vec<_> = (1..20)
        .map(|i| timer.new_timeout(|_: &Timeout| {}, ms(i * TICK)).unwrap())
        .collect();
    let first = runtime();
    first.block_on(poll_once(drive.as_mut()));
    std::thread::sleep(ms(TICK));
    first.block_on(poll_once(drive.as_mut()));
    drop(first);
    let second = runtime();
    second.spawn(drive);
    let (tx, rx) = std::sync::mpsc::channel();
    let start = Instant::now();
    let delay = ms(3 * TICK);
    timer
        .new_timeout(move |_: &Timeout| tx.send(Instant::now()).unwrap(), delay)
        .unwrap();
    let fired = rx.recv_timeout(Duration::from_secs(5)).unwrap() - start;
    assert!(fired >= delay, "never early: {fired:?}");
    // A tick and a loaded host's delays; not the watchdog's grace (160 ms).
    assert!(fired < delay + ms(10 * TICK), "fired after {fired:?}");
    // The first runtime's shutdown woke the sleeps it held: no sleep was armed from there.
    assert_eq!(timer.stats().panicked, 0);
}

/// Polls `future` once, on the runtime that awaits this.
async fn poll_once<F: Future>(mut future: Pin<&mut F>) {
    std::future::poll_fn(|cx| {
        let _ = future.as_mut().poll(cx);
        Poll::Ready(())
    })
    .await;
}

/// Two `Drive`s of one timer: `stop()` completes both. It woke only the one polled last (the
/// producers' waker), and the other, with no sleep armed, waited for ever.
#[test]
fn stop_completes_every_drive_of_the_timer() {
    let timer = timer();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let first = rt.spawn(timer.drive(|at| tokio::time::sleep_until(at.into())));
    let second = rt.spawn(timer.drive(|at| tokio::time::sleep_until(at.into())));
    // Both polled, then idle: nothing pending, no sleep armed.
    rt.block_on(timer.sleep(ms(3))).unwrap();
    rt.block_on(async { tokio::time::sleep(ms(10)).await });
    assert!(timer.stop().unwrap().is_empty());
    rt.block_on(async {
        for driving in [first, second] {
            tokio::time::timeout(Duration::from_secs(5), driving)
                .await
                .expect("the driver completes")
                .unwrap();
        }
    });
}

/// A `Drive` whose task polls it while no tick is due (woken for something else), as a producer
/// on another thread schedules a timeout, and which is then not polled again (a runtime that
/// stalls). A producer that finds a turn under way wakes nobody; the turn plans the new tick,
/// but the watchdog slept on until the grace past the old, far plan, and the timeout fired
/// seconds late. The push lands inside the turn only in some attempts: each attempt is on time
/// with the turn waking the watchdog, and without it one of them is seconds late.
#[test]
fn a_timeout_scheduled_during_a_drivers_turn_fires_within_the_grace() {
    let timer = timer();
    let mut drive = Box::pin(timer.drive(|_| std::future::pending::<()>()));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(drive.as_mut().poll(&mut cx).is_pending());
    // Spare boxes beyond what a trim keeps: the idle turns trim them a tick apart, and that
    // look a tick later must not read as a plan that hides the push from the watchdog.
    for i in 0..200u64 {
        let boxed = move |_: &Timeout| assert_ne!(i, u64::MAX);
        timer
            .new_timeout(boxed, Duration::from_secs(1))
            .unwrap()
            .cancel();
    }
    // The only work is far away: the watchdog, once it has looked, sleeps until its grace.
    let _far = timer.new_timeout(|_: &Timeout| {}, Duration::from_secs(20));
    std::thread::sleep(ms(100));
    for attempt in 0..100 {
        let polling = std::sync::atomic::AtomicBool::new(true);
        let (tx, rx) = std::sync::mpsc::channel();
        let start = std::thread::scope(|s| {
            s.spawn(|| {
                let mut cx = Context::from_waker(Waker::noop());
                while polling.load(SeqCst) {
                    assert!(drive.as_mut().poll(&mut cx).is_pending());
                }
            });
            std::thread::sleep(ms(2));
            let start = Instant::now();
            timer
                .new_timeout(move |_: &Timeout| tx.send(Instant::now()).unwrap(), ms(3))
                .unwrap();
            polling.store(false, SeqCst);
            start
        });
        let fired = rx
            .recv_timeout(Duration::from_secs(2))
            .unwrap_or_else(|_| panic!("attempt {attempt}: not fired within 2 s"))
            - start;
        // 3 ms plus the watchdog's bound (128 ms), with room for a loaded host; the far plan is
        // 20 s.
        assert!(
            fired >= ms(3) && fired < ms(1000),
            "attempt {attempt}: fired after {fired:?}"
        );
    }
}

/// A runtime that fires its timers on a thread where a turn runs: the `Drive`'s sleep is woken
/// from a task the worker thread runs (it took over from a `Drive` whose runtime stalled). The
/// turn under way covers the tick; another, on the same thread, would wait on its own lock.
#[test]
fn a_sleep_woken_inside_a_turn_runs_no_second_turn() {
    type Stash = Arc<Mutex<Option<Waker>>>;
    /// The runtime's sleep: it never ends by itself, and keeps the waker it was polled with.
    struct Stashing(Stash);
    impl Future for Stashing {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            *self.0.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }
    let timer = timer();
    let stash: Stash = Arc::default();
    let for_sleeps = Arc::clone(&stash);
    let mut drive = Box::pin(timer.drive(move |_| Stashing(Arc::clone(&for_sleeps))));
    let (tx, rx) = std::sync::mpsc::channel();
    let woken = Arc::clone(&stash);
    timer
        .new_timeout(
            move |_: &Timeout| {
                let sleep_waker = woken.lock().unwrap().clone();
                sleep_waker.expect("the Drive armed a sleep").wake_by_ref();
                tx.send(()).unwrap();
            },
            ms(3),
        )
        .unwrap();
    // The Drive sleeps until the timeout's tick, and is not polled again.
    let mut cx = Context::from_waker(Waker::noop());
    assert!(drive.as_mut().poll(&mut cx).is_pending());
    rx.recv_timeout(Duration::from_secs(5))
        .expect("the task ran and returned: no turn waited on the turn under way");
    assert!(timer.stop().unwrap().is_empty());
}

/// A `Drive` of `timer` whose runtime's sleeps never end, and the instants they were asked to
/// end at.
fn asking_drive(
    timer: &HashedWheelTimer,
) -> (Pin<Box<impl Future<Output = ()>>>, Arc<Mutex<Vec<Instant>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let a = Arc::clone(&asked);
    let drive = Box::pin(timer.drive(move |at| {
        a.lock().unwrap().push(at);
        std::future::pending::<()>()
    }));
    (drive, asked)
}

/// A `Drive` fires a timeout at the runtime's first wake past its deadline, as the runtime fires
/// its own timers, not at the end of its tick; and sleeps until the start of the next tick with
/// work, not its end. On a 400 ms tick: a timeout due at 500 ms fires at a poll at 600 ms (its
/// tick ends at 800), and for one due at 1 300 ms the sleep ends at 1 200 (its tick's start).
#[test]
fn a_driven_timeout_fires_at_the_runtimes_first_wake_past_its_deadline() {
    const TICK: u64 = 400;
    let built = Instant::now();
    let timer = HashedWheelTimer::new(ms(TICK), 512);
    let fired = Arc::new(Mutex::new(None));
    let f = Arc::clone(&fired);
    timer
        .new_timeout(
            move |_: &Timeout| *f.lock().unwrap() = Some(Instant::now()),
            ms(500),
        )
        .unwrap();
    timer.new_timeout(|_: &Timeout| {}, ms(1300)).unwrap();
    let (mut drive, asked) = asking_drive(&timer);
    // One task throughout: a new task's poll drops the sleep armed for the last one.
    let waker = calling_back_waker(no_hook(), no_hook());
    let mut cx = Context::from_waker(&waker);
    assert!(drive.as_mut().poll(&mut cx).is_pending());
    std::thread::sleep((built + ms(600)).saturating_duration_since(Instant::now()));
    let polled = Instant::now();
    assert!(drive.as_mut().poll(&mut cx).is_pending());
    let fired = fired
        .lock()
        .unwrap()
        .expect("fired at the poll past its deadline");
    assert!(fired - built >= ms(500), "never early: {:?}", fired - built);
    assert!(
        fired - polled < ms(TICK / 2),
        "fired at that poll, not at its tick's end: {:?} after it",
        fired - polled
    );
    // That turn moved the queued timeouts in, and looks again at its tick's end; then plans.
    std::thread::sleep((built + ms(850)).saturating_duration_since(Instant::now()));
    assert!(drive.as_mut().poll(&mut cx).is_pending());
    let last = *asked.lock().unwrap().last().unwrap();
    let sleep_end = last - built;
    assert!(
        sleep_end >= ms(1200) && sleep_end < ms(1300),
        "the sleep ends at the start of the next tick with work: {sleep_end:?}"
    );
}

/// A `Drive` whose turn left a timeout of the current tick for later sleeps until that
/// timeout's deadline, not the tick's end, as the runtime would for a timer of its own. On a
/// 400 ms tick, a timeout due at 500 ms: the turn at 420 ms moves it into the wheel and arms the
/// sleep for 500 ms (its tick ends at 800).
#[test]
fn a_drive_sleeps_until_the_deadline_its_turn_left_in_the_tick() {
    const TICK: u64 = 400;
    let built = Instant::now();
    let timer = HashedWheelTimer::new(ms(TICK), 512);
    timer.new_timeout(|_: &Timeout| {}, ms(500)).unwrap();
    let (mut drive, asked) = asking_drive(&timer);
    let waker = calling_back_waker(no_hook(), no_hook());
    let mut cx = Context::from_waker(&waker);
    assert!(drive.as_mut().poll(&mut cx).is_pending());
    std::thread::sleep((built + ms(420)).saturating_duration_since(Instant::now()));
    assert!(drive.as_mut().poll(&mut cx).is_pending());
    let sleep_end = *asked.lock().unwrap().last().unwrap() - built;
    assert!(
        sleep_end >= ms(500) && sleep_end < ms(600),
        "the sleep ends at the deadline left in the tick: {sleep_end:?}"
    );
    assert_eq!(timer.pending_timeouts(), 1);
}

/// A waker that counts its wakes.
struct Counting(AtomicUsize);

impl std::task::Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn counting() -> (Arc<Counting>, Waker) {
    let count = Arc::new(Counting(AtomicUsize::new(0)));
    (Arc::clone(&count), Waker::from(count))
}

/// A `Drive` polled once, whose runtime's sleep keeps its waker (the `Ticker`) for the test to
/// call, as the runtime's timer would; the `Drive`'s task's waker counts its wakes.
fn stashing_drive(
    timer: &HashedWheelTimer,
) -> (Pin<Box<impl Future<Output = ()>>>, Waker, Arc<Counting>) {
    let stash: Arc<Mutex<Option<Waker>>> = Arc::default();
    let s = Arc::clone(&stash);
    let mut drive = Box::pin(timer.drive(move |_| {
        let s = Arc::clone(&s);
        std::future::poll_fn(move |cx| {
            *s.lock().unwrap() = Some(cx.waker().clone());
            Poll::<()>::Pending
        })
    }));
    let (task, task_waker) = counting();
    assert!(drive
        .as_mut()
        .poll(&mut Context::from_waker(&task_waker))
        .is_pending());
    let ticker = stash
        .lock()
        .unwrap()
        .clone()
        .expect("the Drive armed a sleep");
    (drive, ticker, task)
}

/// A sleep polled once with a counting waker.
fn polled_sleep(timer: &HashedWheelTimer, delay: Duration) -> (Pin<Box<Sleep>>, Arc<Counting>) {
    let mut sleep = Box::pin(timer.sleep(delay));
    let (count, waker) = counting();
    assert!(sleep
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    (sleep, count)
}

/// The runtime's timer ends the `Drive`'s sleep past one future's deadline: the `Ticker`'s turn
/// expires it, and leaves its wake to the `Drive`'s task, which it wakes: one task runnable
/// after the runtime's park. That task's turn wakes the future. With two due, the `Ticker`
/// wakes both itself.
#[test]
fn a_lone_future_the_tickers_turn_expires_is_woken_by_the_drives_turn() {
    const TICK: u64 = 200;
    let timer = HashedWheelTimer::new(ms(TICK), 512);
    let (lone, lone_wakes) = polled_sleep(&timer, ms(300));
    let (mut drive, ticker, task) = stashing_drive(&timer);
    std::thread::sleep(lone.deadline().saturating_duration_since(Instant::now()) + ms(20));
    ticker.wake_by_ref();
    assert!(lone.is_elapsed(), "the Ticker's turn expired the sleep");
    assert_eq!(lone_wakes.0.load(SeqCst), 0, "its wake is the Drive's");
    assert_eq!(task.0.load(SeqCst), 1, "the Drive's task is woken");
    let task_waker = Waker::from(Arc::clone(&task));
    assert!(drive
        .as_mut()
        .poll(&mut Context::from_waker(&task_waker))
        .is_pending());
    assert_eq!(lone_wakes.0.load(SeqCst), 1, "the Drive's turn woke it");

    let due = Instant::now() + ms(300);
    let (a, a_wakes) = polled_sleep(&timer, due - Instant::now());
    let (b, b_wakes) = polled_sleep(&timer, due - Instant::now());
    std::thread::sleep(b.deadline().saturating_duration_since(Instant::now()) + ms(20));
    ticker.wake_by_ref();
    assert!(a.is_elapsed() && b.is_elapsed());
    assert_eq!((a_wakes.0.load(SeqCst), b_wakes.0.load(SeqCst)), (1, 1));
}

/// A `Drive` dropped before its task's turn leaves no future unwoken: the worker thread's turn
/// wakes the one the `Ticker` left it. A `Ticker` that runs once its `Drive` went wakes it at once
/// (its second turn, or the thread's if that tick ended first: either way, no wait).
#[test]
fn a_lone_future_left_to_a_drive_dropped_is_woken_by_the_thread() {
    const TICK: u64 = 200;
    let timer = HashedWheelTimer::new(ms(TICK), 512);
    let (lone, lone_wakes) = polled_sleep(&timer, ms(300));
    let (drive, ticker, _) = stashing_drive(&timer);
    std::thread::sleep(lone.deadline().saturating_duration_since(Instant::now()) + ms(20));
    ticker.wake_by_ref();
    assert_eq!(lone_wakes.0.load(SeqCst), 0, "its wake is the Drive's");
    drop(drive);
    within_30_s(move || {
        while lone_wakes.0.load(SeqCst) == 0 {
            std::thread::sleep(ms(1));
        }
    });

    let (late, late_wakes) = polled_sleep(&timer, ms(300));
    let (drive, ticker, _) = stashing_drive(&timer);
    drop(drive);
    std::thread::sleep(late.deadline().saturating_duration_since(Instant::now()) + ms(20));
    ticker.wake_by_ref();
    assert_eq!(
        late_wakes.0.load(SeqCst),
        1,
        "woken by the time the Ticker returns"
    );
    assert!(timer.stop().unwrap().is_empty());
}

/// A `Drive`'s task waker that panics when woken: the `Ticker` counts the panic, and its lone
/// future is not left waiting for a turn that nothing will run.
#[test]
fn a_lone_future_is_woken_when_the_drives_task_waker_panics() {
    struct PanicsOnWake;
    impl std::task::Wake for PanicsOnWake {
        fn wake(self: Arc<Self>) {
            std::panic::panic_any(common::BY_DESIGN);
        }
    }
    common::quiet_by_design_panics();
    let timer = HashedWheelTimer::new(ms(200), 512);
    let (lone, lone_wakes) = polled_sleep(&timer, ms(300));
    let (mut drive, ticker, _) = stashing_drive(&timer);
    let panicking = Waker::from(Arc::new(PanicsOnWake));
    // The Drive's task is now the one whose waker panics (it arms its sleep again).
    assert!(drive
        .as_mut()
        .poll(&mut Context::from_waker(&panicking))
        .is_pending());
    std::thread::sleep(lone.deadline().saturating_duration_since(Instant::now()) + ms(20));
    ticker.wake_by_ref();
    assert_eq!(
        lone_wakes.0.load(SeqCst),
        1,
        "woken by the Ticker's second turn"
    );
    assert_eq!(timer.stats().panicked, 1);
}
