//! Edge cases of the contract (`netty-semantics.md`): invalid arguments, extreme delays,
//! cancel and stop in every awkward place, panicking tasks, dropping the owner at odd moments,
//! identity of `Timeout`s, and the `Timer` trait. Logical-time behaviour runs on the manual
//! driver; what is about the real worker thread (its name, its exit, stop from inside it) runs in
//! real time with generous timeouts.
#![allow(clippy::mutable_key_type)] // `Timeout` hashes by identity, not by its mutable state

mod common;
use common::{counting, ms, noop, NANO};
use hashed_timer_wheel::{
    BuildError, HashedWheelTimer, ManualDriver, NeverRan, Timeout, Timer, TimerError, TimerHandle,
    TimerTask, MAX_TICKS_PER_WHEEL,
};
use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Barrier, Mutex, Once};
use std::thread;
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Harness: a logger that keeps what the timer logs, and a panic hook that keeps the deliberate
// panics of these tests out of the output. Every test calls `init()` first, so the logger is in
// place before any timer of this binary exists (the "too many instances" error is logged once
// per process).

static RECORDS: Mutex<Vec<(log::Level, String)>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        RECORDS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((record.level(), record.args().to_string()));
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture;
const DELIBERATE: &str = "deliberate panic in a timer task";

fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_logger(&CAPTURE).unwrap();
        log::set_max_level(log::LevelFilter::Trace);
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() != Some(&DELIBERATE) {
                default(info);
            }
        }));
    });
}

/// Whether a record at `level` containing `needle` has been logged (by any test of this binary).
fn logged(level: log::Level, needle: &str) -> bool {
    RECORDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|(l, m)| *l == level && m.contains(needle))
}

fn manual(tick: Duration) -> (HashedWheelTimer, ManualDriver) {
    HashedWheelTimer::builder()
        .tick_duration(tick)
        .build_manual()
        .unwrap()
}

/// Sends on a channel when dropped: shows that a task (or a thread's locals) went away.
struct OnDrop(mpsc::Sender<()>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

thread_local! {
    /// Dropped when the thread that set it exits.
    static EXIT_GUARD: RefCell<Option<OnDrop>> = const { RefCell::new(None) };
}

/// Arranges for `tx` to receive a message when the current thread exits.
fn notify_on_thread_exit(tx: mpsc::Sender<()>) {
    EXIT_GUARD.with(|g| *g.borrow_mut() = Some(OnDrop(tx)));
}

/// Threads of this process with this name (Linux: `/proc/self/task/*/comm`, 15 bytes at most).
#[cfg(target_os = "linux")]
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

// ---------------------------------------------------------------------------------------------
// Invalid arguments

#[test]
#[should_panic(expected = "tick duration must be greater than zero")]
fn new_panics_on_zero_tick() {
    init();
    let _ = HashedWheelTimer::new(Duration::ZERO, 512);
}

#[test]
#[should_panic(expected = "ticks per wheel must be greater than zero")]
fn new_panics_on_zero_ticks_per_wheel() {
    init();
    let _ = HashedWheelTimer::new(ms(100), 0);
}

#[test]
#[should_panic(expected = "ticks per wheel may not be greater than 2^30")]
fn new_panics_above_two_to_the_thirty_ticks_per_wheel() {
    init();
    let _ = HashedWheelTimer::new(ms(100), MAX_TICKS_PER_WHEEL + 1);
}

#[test]
#[should_panic(expected = "overflows 64-bit nanoseconds")]
fn new_panics_when_tick_times_wheel_overflows() {
    init();
    let _ = HashedWheelTimer::new(Duration::from_secs(u64::MAX / 2), 1024);
}

#[test]
fn build_reports_every_invalid_argument_as_an_error() {
    init();
    let build = |tick: Duration, ticks: usize| {
        HashedWheelTimer::builder()
            .tick_duration(tick)
            .ticks_per_wheel(ticks)
            .build()
            .map(|_| ())
    };
    assert_eq!(
        build(Duration::ZERO, 512),
        Err(BuildError::ZeroTickDuration)
    );
    assert_eq!(build(ms(100), 0), Err(BuildError::ZeroTicksPerWheel));
    for requested in [MAX_TICKS_PER_WHEEL + 1, usize::MAX] {
        assert_eq!(
            build(ms(100), requested),
            Err(BuildError::TooManyTicksPerWheel { requested })
        );
    }
    let huge = Duration::from_secs(u64::MAX / 2);
    assert_eq!(
        build(huge, 1024),
        Err(BuildError::TickOverflow {
            tick_duration: huge,
            wheel_len: 1024
        })
    );
    // The check is on the rounded length, and exact at the boundary.
    let widest = Duration::from_nanos(u64::MAX / 1024);
    assert_eq!(build(widest, 1000), Ok(()));
    assert_eq!(
        build(widest + NANO, 1000),
        Err(BuildError::TickOverflow {
            tick_duration: widest + NANO,
            wheel_len: 1024
        })
    );
    // A thread name no thread may have is refused here, not at the first timeout.
    let named = |name: &str| {
        HashedWheelTimer::builder()
            .thread_name(name)
            .build()
            .map(drop)
    };
    assert_eq!(named("timer\0one"), Err(BuildError::ThreadNameWithNul));
    assert_eq!(named(""), Ok(()));
    // `build_manual` checks the same way.
    let manual_err = HashedWheelTimer::builder()
        .ticks_per_wheel(0)
        .build_manual()
        .unwrap_err();
    assert_eq!(manual_err, BuildError::ZeroTicksPerWheel);

    // Errors are `std::error::Error`s with lowercase messages and no full stop.
    let errors: Vec<Box<dyn std::error::Error>> = vec![
        Box::new(BuildError::ZeroTickDuration),
        Box::new(BuildError::ZeroTicksPerWheel),
        Box::new(build(ms(1), usize::MAX).unwrap_err()),
        Box::new(build(huge, 1024).unwrap_err()),
        Box::new(BuildError::ThreadNameWithNul),
        Box::new(TimerError::Stopped),
        Box::new(TimerError::TooManyPending { pending: 2, max: 2 }),
        Box::new(TimerError::StopFromWorker),
    ];
    for e in errors {
        let msg = e.to_string();
        assert!(!msg.is_empty() && !msg.ends_with('.'), "{msg:?}");
        assert!(!msg.starts_with(char::is_uppercase), "{msg:?}");
    }
}

#[test]
fn ticks_per_wheel_rounds_up_to_a_power_of_two() {
    init();
    for (requested, len) in [(1, 1), (2, 2), (3, 4), (5, 8), (512, 512), (513, 1024)] {
        assert_eq!(HashedWheelTimer::new(ms(10), requested).wheel_len(), len);
        let built = HashedWheelTimer::builder()
            .ticks_per_wheel(requested)
            .build()
            .unwrap();
        assert_eq!(built.wheel_len(), len, "builder, {requested}");
    }
    assert_eq!(HashedWheelTimer::default().wheel_len(), 512);
    assert_eq!(HashedWheelTimer::default().tick_duration(), ms(100));
}

/// A tick below 1 ms becomes 1 ms, with a warning; timing then follows the 1 ms tick.
#[test]
fn tick_below_one_millisecond_is_clamped_with_a_warning() {
    init();
    assert_eq!(HashedWheelTimer::new(NANO, 8).tick_duration(), ms(1));
    assert_eq!(
        HashedWheelTimer::new(Duration::from_micros(999), 8).tick_duration(),
        ms(1)
    );
    assert_eq!(HashedWheelTimer::new(ms(1), 8).tick_duration(), ms(1));
    assert!(logged(log::Level::Warn, "smaller than 1 ms, using 1 ms"));

    // With a 10 µs tick, a 1 ms timeout would fire at 1.01 ms; with 1 ms ticks its deadline is
    // the end of tick 0, so it fires at the end of tick 1 (2 ms).
    let (timer, driver) = manual(Duration::from_micros(10));
    assert_eq!(timer.tick_duration(), ms(1));
    let runs = Arc::new(AtomicUsize::new(0));
    timer.new_timeout(counting(&runs), ms(1)).unwrap();
    driver.advance_to(ms(2) - NANO);
    assert_eq!(runs.load(SeqCst), 0);
    driver.advance_to(ms(2));
    assert_eq!(runs.load(SeqCst), 1);
}

/// Netty's INSTANCE_COUNT_LIMIT: more than 64 live timers log an error (once per process).
#[test]
fn too_many_live_timers_log_an_error() {
    init();
    let timers: Vec<HashedWheelTimer> =
        (0..70).map(|_| HashedWheelTimer::new(ms(100), 1)).collect();
    assert!(logged(log::Level::Error, "shared resource"));
    drop(timers);
}

// ---------------------------------------------------------------------------------------------
// Extreme delays

/// `Duration::ZERO` fires at the end of the current tick, never in the caller's thread; one
/// scheduled from inside a task fires on the next tick.
#[test]
fn zero_delay_fires_at_the_end_of_the_current_tick() {
    init();
    let (timer, driver) = manual(ms(10));
    let runs = Arc::new(AtomicUsize::new(0));
    timer.new_timeout(counting(&runs), Duration::ZERO).unwrap();
    assert_eq!(runs.load(SeqCst), 0, "not run by new_timeout itself");
    driver.advance_to(ms(10) - NANO);
    assert_eq!(runs.load(SeqCst), 0);
    driver.advance_to(ms(10));
    assert_eq!(runs.load(SeqCst), 1);

    driver.advance_to(ms(15)); // mid tick 1
    timer.new_timeout(counting(&runs), Duration::ZERO).unwrap();
    driver.advance_to(ms(20) - NANO);
    assert_eq!(runs.load(SeqCst), 1);
    driver.advance_to(ms(20));
    assert_eq!(runs.load(SeqCst), 2);

    let (tx, rx) = mpsc::channel();
    let d = driver.clone();
    timer
        .new_timeout(
            move |t: &Timeout| {
                tx.send(("outer", d.current_tick())).unwrap();
                let d = d.clone();
                t.timer()
                    .new_timeout(
                        move |_: &Timeout| tx.send(("inner", d.current_tick())).unwrap(),
                        Duration::ZERO,
                    )
                    .unwrap();
            },
            Duration::ZERO,
        )
        .unwrap();
    driver.advance(ms(10));
    driver.advance(ms(10));
    assert_eq!(
        rx.try_iter().collect::<Vec<_>>(),
        [("outer", 2), ("inner", 3)]
    );

    // And on the real worker.
    let timer = HashedWheelTimer::new(ms(1), 8);
    let (tx, rx) = mpsc::channel();
    timer
        .new_timeout(move |_: &Timeout| tx.send(()).unwrap(), Duration::ZERO)
        .unwrap();
    rx.recv_timeout(PATIENCE).unwrap();
}

/// `Duration::MAX` never fires, stays pending, does not disturb its neighbours, and can be
/// cancelled or returned by `stop()`.
#[test]
fn duration_max_is_pending_forever_without_blocking_others() {
    init();
    let (timer, driver) = manual(ms(10));
    timer.start().unwrap();
    driver.advance(ms(15)); // a clock past 0, so that an unsaturated deadline would wrap
    let fired = Arc::new(Mutex::new(Vec::new()));
    let f = Arc::clone(&fired);
    let forever = timer
        .new_timeout(
            move |_: &Timeout| f.lock().unwrap().push("MAX"),
            Duration::MAX,
        )
        .unwrap();
    let f = Arc::clone(&fired);
    timer
        .new_timeout(move |_: &Timeout| f.lock().unwrap().push("30 ms"), ms(30))
        .unwrap();
    let cancelled = timer.new_timeout(noop, Duration::MAX).unwrap();
    assert!(cancelled.cancel());
    driver.advance(ms(40));
    assert_eq!(*fired.lock().unwrap(), ["30 ms"]);
    driver.advance(Duration::from_secs(100 * 365 * 24 * 3600));
    assert_eq!(*fired.lock().unwrap(), ["30 ms"]);
    assert_eq!(timer.pending_timeouts(), 1);
    assert_eq!(timer.stop().unwrap(), [forever]);
}

// ---------------------------------------------------------------------------------------------
// cancel()

#[test]
fn cancel_twice_wins_once() {
    init();
    let (timer, driver) = manual(ms(10));
    let runs = Arc::new(AtomicUsize::new(0));
    let t = timer.new_timeout(counting(&runs), ms(20)).unwrap();
    assert!(t.cancel());
    assert!(!t.cancel());
    assert!(!t.clone().cancel(), "a clone is the same timeout");
    assert!(t.is_cancelled() && !t.is_expired());
    driver.advance(ms(100));
    assert_eq!(runs.load(SeqCst), 0);
    assert_eq!(timer.pending_timeouts(), 0, "counted down once, not twice");
    assert!(!t.cancel());
}

#[test]
fn cancel_after_expiry_returns_false() {
    init();
    let (timer, driver) = manual(ms(10));
    let runs = Arc::new(AtomicUsize::new(0));
    let t = timer.new_timeout(counting(&runs), ms(5)).unwrap();
    driver.advance(ms(10));
    assert_eq!(runs.load(SeqCst), 1);
    assert!(t.is_expired());
    assert!(!t.cancel());
    assert!(t.is_expired() && !t.is_cancelled(), "expiry is terminal");
    assert_eq!(timer.pending_timeouts(), 0);

    // Inside its own task, the timeout is already expired.
    let (tx, rx) = mpsc::channel();
    timer
        .new_timeout(
            move |t: &Timeout| tx.send((t.is_expired(), t.cancel())).unwrap(),
            Duration::ZERO,
        )
        .unwrap();
    driver.advance(ms(10));
    assert_eq!(rx.try_recv(), Ok((true, false)));
}

#[test]
fn cancel_from_other_threads() {
    init();
    let (timer, driver) = manual(ms(10));
    let runs = Arc::new(AtomicUsize::new(0));
    let t = timer.new_timeout(counting(&runs), ms(20)).unwrap();
    let t2 = t.clone();
    assert!(thread::spawn(move || t2.cancel()).join().unwrap());
    assert!(t.is_cancelled());
    driver.advance(ms(100));
    assert_eq!(runs.load(SeqCst), 0);
    assert_eq!(timer.pending_timeouts(), 0);

    // Several threads racing to cancel the same timeout: exactly one wins, every time.
    for _ in 0..50 {
        let t = timer.new_timeout(counting(&runs), ms(20)).unwrap();
        let barrier = Arc::new(Barrier::new(4));
        let winners: usize = (0..4)
            .map(|_| {
                let (t, barrier) = (t.clone(), Arc::clone(&barrier));
                thread::spawn(move || {
                    barrier.wait();
                    t.cancel()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| usize::from(h.join().unwrap()))
            .sum();
        assert_eq!(winners, 1);
    }
    driver.advance(ms(100));
    assert_eq!(runs.load(SeqCst), 0);
    assert_eq!(timer.pending_timeouts(), 0);
}

/// A timeout cancelled in the wheel, an hour before its bucket comes round, has its task dropped
/// on the next tick (Netty #2541: the memory does not wait for the bucket), and only then.
#[test]
fn a_timeout_cancelled_in_the_wheel_drops_its_task_on_the_next_tick() {
    init();
    let (timer, driver) = manual(ms(10));
    let (dropped_tx, dropped) = mpsc::channel();
    let guard = OnDrop(dropped_tx);
    let far = timer
        .new_timeout(move |_: &Timeout| drop(guard), Duration::from_secs(3600))
        .unwrap();
    driver.advance(ms(10)); // transferred into the wheel
    assert!(far.cancel());
    assert!(
        dropped.try_recv().is_err(),
        "the worker drops it, not cancel()"
    );
    driver.advance(ms(10) - NANO);
    assert!(dropped.try_recv().is_err(), "not before the tick ends");
    driver.advance(NANO);
    assert!(dropped.try_recv().is_ok(), "dropped on the next tick");
    assert_eq!(timer.pending_timeouts(), 0);
}

/// A tick processes the cancellations before it expires its bucket (Netty 4.1's order; 4.2
/// moved them after): a task of the tick no longer counts a timeout cancelled before the tick
/// began, in the wheel or still queued, nor its own.
#[test]
fn a_tick_processes_cancellations_before_its_tasks_run() {
    init();
    let (timer, driver) = manual(ms(10));
    let in_wheel = timer.new_timeout(noop, Duration::from_secs(3600)).unwrap();
    let _kept = timer.new_timeout(noop, Duration::from_secs(3600)).unwrap();
    let (tx, rx) = mpsc::channel();
    timer
        .new_timeout(
            move |t: &Timeout| tx.send(t.timer().pending_timeouts()).unwrap(),
            ms(15),
        )
        .unwrap();
    driver.advance(ms(10)); // tick 0: all three in the wheel
    let queued = timer.new_timeout(noop, Duration::from_secs(3600)).unwrap();
    assert!(in_wheel.cancel() && queued.cancel());
    assert_eq!(timer.pending_timeouts(), 4, "not processed yet");
    driver.advance(ms(10)); // tick 1: the task runs
    assert_eq!(rx.try_recv(), Ok(1), "only the kept timeout");
    assert_eq!(timer.pending_timeouts(), 1);
}

/// More than 100 000 cancellations before one tick: Netty caps only the transfer of new
/// timeouts (100 000 per tick), not the processing of cancellations, which all happen at the
/// start of the next tick; `pending_timeouts()` drops to 0 then, also when that tick is the
/// first of a catch-up covering several.
#[test]
fn a_flood_of_cancellations_is_processed_on_the_next_tick() {
    init();
    const N: usize = 150_000;
    let (timer, driver) = manual(ms(10));
    let timeouts: Vec<Timeout> = (0..N)
        .map(|_| timer.new_timeout(noop, Duration::from_secs(3600)).unwrap())
        .collect();
    driver.advance(ms(20)); // two ticks: all transferred into the wheel
    for t in &timeouts {
        assert!(t.cancel());
    }
    assert_eq!(timer.pending_timeouts(), N, "not processed yet");
    driver.advance(ms(50));
    assert_eq!(timer.pending_timeouts(), 0);
}

/// What the tasks of `queued_behind_a_first_batch` record: their index and their `Timeout`.
type Ran = Arc<Mutex<Vec<(usize, Timeout)>>>;

/// Queues `n` timeouts after a first batch of 5 has been taken by a tick (so the new
/// batch starts in the middle of a chunk of states), each task recording the `Timeout` it was
/// given; every 7th is cancelled while still queued.
fn queued_behind_a_first_batch(
    n: usize,
    delay: Duration,
) -> (HashedWheelTimer, ManualDriver, Vec<Timeout>, Ran) {
    let (timer, driver) = manual(ms(10));
    let first: Vec<Timeout> = (0..5)
        .map(|_| timer.new_timeout(noop, Duration::ZERO).unwrap())
        .collect();
    driver.advance(ms(10));
    assert!(first.iter().all(Timeout::is_expired));
    let ran = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<Timeout> = (0..n)
        .map(|i| {
            let ran = Arc::clone(&ran);
            let task = move |t: &Timeout| ran.lock().unwrap().push((i, t.clone()));
            timer.new_timeout(task, delay).unwrap()
        })
        .collect();
    for t in handles.iter().step_by(7) {
        assert!(t.cancel());
    }
    (timer, driver, handles, ran)
}

/// A queued timeout's state is found from its place in the queue (the cells of a batch follow
/// one another chunk by chunk). Across a batch that starts mid-chunk and transfers cut by the
/// 100 000-per-tick cap, every task receives its own `Timeout`, once, and every handle ends
/// in its own state.
#[test]
fn each_queued_timeout_keeps_its_own_state_through_capped_transfers() {
    init();
    const N: usize = 2 * 100_000 + 37;
    let (timer, driver, handles, ran) = queued_behind_a_first_batch(N, Duration::ZERO);
    for _ in 0..3 {
        driver.advance(ms(10)); // one tick each: 100 000, 100 000, the rest
    }
    let ran = std::mem::take(&mut *ran.lock().unwrap());
    let cancelled = handles.iter().step_by(7).count();
    assert_eq!(ran.len(), N - cancelled);
    let mut seen = vec![false; N];
    for (i, t) in &ran {
        assert_eq!(t, &handles[*i], "task {i} was given another timeout");
        assert!(
            !std::mem::replace(&mut seen[*i], true),
            "task {i} ran twice"
        );
    }
    for (i, t) in handles.iter().enumerate() {
        let was_cancelled = i % 7 == 0;
        assert_eq!(seen[i], !was_cancelled, "timeout {i}");
        assert_eq!(t.is_cancelled(), was_cancelled, "timeout {i}");
        assert_eq!(t.is_expired(), !was_cancelled, "timeout {i}");
    }
    assert_eq!(timer.pending_timeouts(), 0);
}

/// `stop()` with a batch the worker has only partly transferred (the cap cut it) returns
/// exactly the timeouts that never ran and were not cancelled: those in the wheel and those
/// still queued.
#[test]
fn stop_returns_exactly_the_live_timeouts_of_a_partly_transferred_batch() {
    init();
    const N: usize = 100_000 + 5_003;
    let (timer, driver, handles, ran) = queued_behind_a_first_batch(N, Duration::from_secs(3600));
    driver.advance(ms(10)); // transfers the first 100 000 (the cap); the rest stay queued
    let returned = common::stop_set(&timer);
    let live: HashSet<Timeout> = handles
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 7 != 0)
        .map(|(_, t)| t.clone())
        .collect();
    assert_eq!(returned.len(), live.len(), "no duplicates, nothing missing");
    assert!(returned == live, "stop() returned other timeouts");
    assert!(handles.iter().all(Timeout::is_cancelled));
    assert!(ran.lock().unwrap().is_empty());
}

/// `stop()` joins the queues of several producer threads (each thread has a queue shard of
/// its own) into one list: each timeout comes back once, as itself.
#[test]
fn stop_returns_the_queued_timeouts_of_every_producer_thread() {
    init();
    let (timer, _driver) = manual(ms(10));
    let handles: Vec<Timeout> = thread::scope(|s| {
        let producers: Vec<_> = (0..3)
            .map(|k| {
                let timer = &timer;
                s.spawn(move || {
                    (0..40 + 7 * k)
                        .map(|_| timer.new_timeout(noop, ms(50)).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        producers
            .into_iter()
            .flat_map(|p| p.join().unwrap())
            .collect()
    });
    let returned = timer.stop().unwrap();
    assert_eq!(returned.len(), handles.len());
    let returned: HashSet<Timeout> = returned.into_iter().map(Timeout::from).collect();
    assert!(returned == handles.iter().cloned().collect::<HashSet<_>>());
}

// ---------------------------------------------------------------------------------------------
// stop() and start()

#[test]
fn a_task_stop_returned_runs_on_another_timer() {
    init();
    let (old, _) = manual(ms(10));
    let (new, driver) = manual(ms(10));
    let (tx, rx) = mpsc::channel();
    let task = move |t: &Timeout| tx.send((t.is_expired(), t.is_cancelled())).unwrap();
    old.new_timeout(task, Duration::from_secs(60)).unwrap();
    let never_ran = old
        .stop()
        .unwrap()
        .pop()
        .expect("the pending timeout comes back");
    let moved = new.new_timeout(never_ran.into_task(), ms(20)).unwrap();
    driver.advance(ms(20));
    assert_eq!(
        rx.try_recv(),
        Err(mpsc::TryRecvError::Empty),
        "not before its tick ends"
    );
    driver.advance(ms(10));
    assert_eq!(
        rx.try_recv(),
        Ok((true, false)),
        "run once, with the new timer's timeout"
    );
    assert!(moved.is_expired());
    assert_eq!(new.pending_timeouts(), 0);
}

#[test]
fn stop_twice_returns_the_pending_then_nothing() {
    init();
    let timer = HashedWheelTimer::new(ms(10), 64);
    let t = timer.new_timeout(noop, Duration::from_secs(60)).unwrap();
    assert_eq!(timer.stop().unwrap(), std::slice::from_ref(&t));
    assert!(t.is_cancelled());
    assert_eq!(timer.stop(), Ok(vec![]));
    assert!(timer.is_stopped());
    assert_eq!(timer.pending_timeouts(), 0);
}

#[test]
fn stop_before_start_stops_for_good() {
    init();
    let timer = HashedWheelTimer::builder()
        .thread_name("htw-never")
        .build()
        .unwrap();
    assert_eq!(timer.stop(), Ok(vec![]));
    assert!(timer.is_stopped());
    assert_eq!(timer.start(), Err(TimerError::Stopped));
    assert_eq!(
        timer.new_timeout(noop, ms(1)).unwrap_err(),
        TimerError::Stopped
    );
    assert_eq!(timer.stop(), Ok(vec![]));
    assert_eq!(timer.stats().wakeups, 0);
    #[cfg(target_os = "linux")]
    assert_eq!(threads_named("htw-never"), 0, "no worker was ever started");
}

/// A timer without a thread (manual, or on a runtime's clock) refuses `start()` once stopped,
/// as one with a thread does.
#[test]
fn start_after_stop_is_refused_without_a_thread_too() {
    init();
    let (timer, _driver) = HashedWheelTimer::builder().build_manual().unwrap();
    assert_eq!(timer.start(), Ok(()));
    assert_eq!(timer.stop(), Ok(vec![]));
    assert_eq!(timer.start(), Err(TimerError::Stopped));
    assert_eq!(
        timer.new_timeout(noop, ms(1)).unwrap_err(),
        TimerError::Stopped
    );
}

#[test]
fn new_timeout_and_start_after_stop_are_refused() {
    init();
    let timer = HashedWheelTimer::new(ms(10), 64);
    timer.start().unwrap();
    timer.start().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    timer.new_timeout(counting(&runs), ms(10)).unwrap();
    let _ = timer.stop().unwrap();
    assert_eq!(timer.start(), Err(TimerError::Stopped));
    assert_eq!(
        timer.new_timeout(counting(&runs), ms(1)).unwrap_err(),
        TimerError::Stopped
    );
    assert_eq!(
        timer
            .handle()
            .new_timeout(counting(&runs), Duration::ZERO)
            .unwrap_err(),
        TimerError::Stopped
    );
    thread::sleep(ms(50));
    assert_eq!(runs.load(SeqCst), 0);
}

/// `stop()` from a task on the worker thread would wait for itself: it is an error, and the
/// timer keeps running. Same on the manual driver, whose caller is the worker while it advances.
#[test]
fn stop_from_inside_a_task_is_an_error_and_the_timer_keeps_running() {
    init();
    let timer = HashedWheelTimer::new(ms(1), 64);
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    timer
        .new_timeout(
            move |t: &Timeout| {
                tx.send(("stop", t.timer().stop().map(|v| v.len())))
                    .unwrap();
                let as_trait: &dyn Timer = t.timer();
                tx.send(("dyn stop", as_trait.stop().map(|v| v.len())))
                    .unwrap();
            },
            ms(2),
        )
        .unwrap();
    assert_eq!(
        rx.recv_timeout(PATIENCE).unwrap(),
        ("stop", Err(TimerError::StopFromWorker))
    );
    assert_eq!(
        rx.recv_timeout(PATIENCE).unwrap(),
        ("dyn stop", Err(TimerError::StopFromWorker))
    );
    assert!(!timer.is_stopped());
    timer
        .new_timeout(
            move |_: &Timeout| tx2.send(("after", Ok(0))).unwrap(),
            ms(2),
        )
        .unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), ("after", Ok(0)));
    assert!(timer.stop().unwrap().is_empty());

    let (timer, driver) = manual(ms(10));
    let (tx, rx) = mpsc::channel();
    timer
        .new_timeout(move |t: &Timeout| tx.send(t.timer().stop()).unwrap(), ms(5))
        .unwrap();
    driver.advance(ms(10));
    assert_eq!(rx.try_recv(), Ok(Err(TimerError::StopFromWorker)));
    assert!(!timer.is_stopped());
    let runs = Arc::new(AtomicUsize::new(0));
    timer.new_timeout(counting(&runs), ms(5)).unwrap();
    driver.advance(ms(10));
    assert_eq!(runs.load(SeqCst), 1);
}

/// Expiry counts the timeout down before its task runs, so a task can schedule its successor
/// with the pending limit full (a limit of 1: only the task's own timeout), inline and on an
/// executor, as Netty's self-rescheduling pattern needs.
#[test]
fn a_task_reschedules_itself_at_a_full_pending_limit() {
    init();
    fn again(ran: mpsc::Sender<(usize, Result<(), TimerError>)>) -> impl TimerTask {
        move |t: &Timeout| {
            let pending = t.timer().pending_timeouts();
            let next = t.timer().new_timeout(again(ran.clone()), ms(10));
            ran.send((pending, next.map(drop))).unwrap();
        }
    }
    let inline = HashedWheelTimer::builder().tick_duration(ms(10));
    let on_executor = HashedWheelTimer::builder()
        .tick_duration(ms(10))
        .executor(|job: Box<dyn FnOnce() + Send>| job());
    for (name, builder) in [("inline", inline), ("executor", on_executor)] {
        let (timer, driver) = builder.max_pending_timeouts(1).build_manual().unwrap();
        let (tx, rx) = mpsc::channel();
        timer.new_timeout(again(tx), ms(10)).unwrap();
        assert!(timer.new_timeout(noop, ms(10)).is_err(), "{name}: full");
        for _ in 0..10 {
            driver.advance(ms(10));
        }
        let runs: Vec<_> = rx.try_iter().collect();
        assert!(runs.len() >= 4, "{name}: {runs:?}");
        assert!(runs.iter().all(|r| *r == (0, Ok(()))), "{name}: {runs:?}");
        assert_eq!(timer.pending_timeouts(), 1, "{name}");
        assert_eq!(timer.stats().refused, 1, "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// Panicking tasks

#[test]
fn panicking_task_is_logged_and_later_tasks_still_run() {
    init();
    let timer = HashedWheelTimer::new(ms(1), 8);
    let (tx, rx) = mpsc::channel();
    let panicker = timer
        .new_timeout(|_: &Timeout| std::panic::panic_any(DELIBERATE), ms(3))
        .unwrap();
    for (name, delay) in [("same tick", 3), ("later", 10), ("much later", 40)] {
        let tx = tx.clone();
        timer
            .new_timeout(move |_: &Timeout| tx.send(name).unwrap(), ms(delay))
            .unwrap();
    }
    let got: Vec<_> = (0..3).map(|_| rx.recv_timeout(PATIENCE).unwrap()).collect();
    assert_eq!(got, ["same tick", "later", "much later"]);
    assert!(panicker.is_expired());
    let task_panic_logged = RECORDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|(l, m)| *l == log::Level::Warn && m.contains("panicked") && !m.contains("executor"));
    assert!(
        task_panic_logged,
        "a panicking task is logged at warn level"
    );

    // Several panics in one tick of the manual driver: the advance goes on.
    let (timer, driver) = manual(ms(10));
    let runs = Arc::new(AtomicUsize::new(0));
    for _ in 0..3 {
        timer
            .new_timeout(|_: &Timeout| std::panic::panic_any(DELIBERATE), ms(5))
            .unwrap();
        timer.new_timeout(counting(&runs), ms(5)).unwrap();
    }
    timer.new_timeout(counting(&runs), ms(25)).unwrap();
    driver.advance(ms(30));
    assert_eq!(runs.load(SeqCst), 4);
    assert_eq!(timer.pending_timeouts(), 0);
}

/// An executor that panics (Netty: rejects) is logged; the timeout stays expired and the timer
/// goes on handing it the next tasks.
#[test]
fn panicking_executor_is_logged_and_the_timer_goes_on() {
    init();
    let handed = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&handed);
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(10))
        .executor(move |job: Box<dyn FnOnce() + Send>| {
            if h.fetch_add(1, SeqCst) == 0 {
                std::panic::panic_any(DELIBERATE);
            }
            job();
        })
        .build_manual()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let refused = timer.new_timeout(counting(&runs), ms(5)).unwrap();
    let accepted = timer.new_timeout(counting(&runs), ms(5)).unwrap();
    driver.advance(ms(10));
    assert_eq!(handed.load(SeqCst), 2);
    assert_eq!(runs.load(SeqCst), 1);
    assert!(refused.is_expired() && !refused.is_cancelled());
    assert!(accepted.is_expired());
    assert!(logged(log::Level::Warn, "executor"));
    assert_eq!(timer.pending_timeouts(), 0);
}

/// An executor that refuses a job by dropping it unrun (Netty's `RejectedExecutionException`):
/// the refusal is logged, as Netty logs a rejected submission; the timeout stays expired and
/// its task is dropped once.
#[test]
fn an_executor_that_drops_a_job_unrun_is_logged() {
    init();
    let handed = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&handed);
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(10))
        .executor(move |job: Box<dyn FnOnce() + Send>| {
            h.fetch_add(1, SeqCst);
            drop(job);
        })
        .build_manual()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let (dropped_tx, dropped) = mpsc::channel();
    let guard = OnDrop(dropped_tx);
    let r = Arc::clone(&runs);
    let refused = timer
        .new_timeout(
            move |_: &Timeout| {
                let _guard = guard;
                r.fetch_add(1, SeqCst);
            },
            ms(5),
        )
        .unwrap();
    driver.advance(ms(10));
    assert_eq!(handed.load(SeqCst), 1);
    assert_eq!(runs.load(SeqCst), 0);
    assert!(dropped.try_recv().is_ok(), "the task was dropped");
    assert!(refused.is_expired() && !refused.is_cancelled());
    assert!(logged(
        log::Level::Warn,
        "dropped by the executor without running"
    ));
    assert_eq!(timer.stats().panicked, 0);
}

// ---------------------------------------------------------------------------------------------
// Dropping the owner, handles, the worker thread

/// The last owner dropped inside one of its own tasks, on the worker thread: no deadlock, the
/// timer is stopped, pending tasks are dropped without running, and the worker thread exits.
#[test]
fn dropping_the_owner_inside_a_task_does_not_deadlock() {
    init();
    let owner = Arc::new(Mutex::new(Some(HashedWheelTimer::new(ms(1), 8))));
    let handle = owner.lock().unwrap().as_ref().unwrap().handle();
    let (never_dropped_tx, never_dropped) = mpsc::channel();
    let guard = OnDrop(never_dropped_tx);
    let never_ran = Arc::new(AtomicUsize::new(0));
    let n = Arc::clone(&never_ran);
    handle
        .new_timeout(
            move |_: &Timeout| {
                let _guard = guard;
                n.fetch_add(1, SeqCst);
            },
            Duration::from_secs(3600),
        )
        .unwrap();

    let (tx, rx) = mpsc::channel();
    let (exit_tx, worker_exited) = mpsc::channel();
    let o = Arc::clone(&owner);
    handle
        .new_timeout(
            move |t: &Timeout| {
                notify_on_thread_exit(exit_tx);
                let timer = o.lock().unwrap().take().expect("the owner");
                drop(timer);
                tx.send(t.timer().is_stopped()).unwrap();
            },
            ms(2),
        )
        .unwrap();

    assert_eq!(
        rx.recv_timeout(PATIENCE),
        Ok(true),
        "deadlock or still running"
    );
    worker_exited
        .recv_timeout(PATIENCE)
        .expect("the worker thread exits");
    never_dropped
        .recv_timeout(PATIENCE)
        .expect("the pending task is dropped");
    assert_eq!(never_ran.load(SeqCst), 0);
    assert!(handle.is_stopped());
    assert_eq!(
        handle.new_timeout(noop, ms(1)).unwrap_err(),
        TimerError::Stopped
    );
    assert_eq!(handle.pending_timeouts(), 0);
}

/// The same on the manual driver: the owner dropped in a task while the driver advances, one
/// tick per advance. Nothing runs on later ticks.
#[test]
fn dropping_the_owner_inside_a_manual_task_does_not_deadlock() {
    init();
    let (timer, driver) = manual(ms(10));
    let handle = timer.handle();
    let owner = Arc::new(Mutex::new(Some(timer)));
    let o = Arc::clone(&owner);
    handle
        .new_timeout(move |_: &Timeout| drop(o.lock().unwrap().take()), ms(5))
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    handle.new_timeout(counting(&runs), ms(25)).unwrap();
    driver.advance(ms(10));
    assert!(owner.lock().unwrap().is_none());
    assert!(handle.is_stopped());
    driver.advance(ms(100));
    assert_eq!(runs.load(SeqCst), 0, "nothing runs after the owner is gone");
    assert_eq!(
        handle.new_timeout(noop, ms(1)).unwrap_err(),
        TimerError::Stopped
    );
}

/// Netty's worker checks its state after every tick, so once stopped during tick `k` it never
/// processes tick `k + 1`. Here the owner is dropped on tick 0 of an advance covering ticks 0
/// to 2 (as a late real worker also catches up several ticks in one go): the timeout due on
/// tick 2 must not run.
#[test]
fn dropping_the_owner_inside_a_task_ends_the_advance_after_that_tick() {
    init();
    let (timer, driver) = manual(ms(10));
    let handle = timer.handle();
    let owner = Arc::new(Mutex::new(Some(timer)));
    let o = Arc::clone(&owner);
    handle
        .new_timeout(move |_: &Timeout| drop(o.lock().unwrap().take()), ms(5))
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    handle.new_timeout(counting(&runs), ms(25)).unwrap();
    driver.advance(ms(30)); // ticks 0 to 2
    assert!(handle.is_stopped());
    assert_eq!(
        runs.load(SeqCst),
        0,
        "tick 2 ran after the owner was dropped on tick 0"
    );
}

/// A `stop()` from another thread is under way (the timer reads stopped, and the stop waits for
/// the turn) when a task drops the owner: the stop is the first, so it returns the timeout still
/// pending, cancelled, rather than an empty list while the turn drops that timeout's task.
#[test]
fn the_owner_dropped_in_a_task_during_a_stop_leaves_the_stop_its_timeouts() {
    init();
    let (timer, driver) = manual(ms(10));
    let (dropped_tx, dropped) = mpsc::channel();
    let far = {
        let probe = OnDrop(dropped_tx);
        timer
            .new_timeout(move |_: &Timeout| drop(probe), Duration::from_secs(3600))
            .unwrap()
    };
    let handle = timer.handle();
    let owner = Arc::new(Mutex::new(Some(timer)));
    let stopper = Arc::new(Mutex::new(None));
    let (o, s, h) = (Arc::clone(&owner), Arc::clone(&stopper), handle.clone());
    let task = move |_: &Timeout| {
        let for_stop = h.clone();
        *s.lock().unwrap() = Some(thread::spawn(move || for_stop.stop()));
        while !h.is_stopped() {
            thread::yield_now();
        }
        drop(o.lock().unwrap().take());
    };
    handle.new_timeout(task, ms(5)).unwrap();
    driver.advance(ms(10));
    let stop = stopper.lock().unwrap().take().unwrap();
    let returned = stop.join().unwrap().unwrap();
    assert_eq!(
        returned,
        vec![far.clone()],
        "the first stop() returns what is pending"
    );
    assert!(far.is_cancelled());
    drop(returned);
    assert_eq!(
        dropped.try_iter().count(),
        1,
        "the pending task is dropped once"
    );
}

/// Handles do not keep a timer alive: once the owner is dropped they are refused.
#[test]
fn handles_after_the_owner_is_dropped_are_stopped() {
    init();
    let timer = HashedWheelTimer::new(ms(10), 64);
    let handle = timer.handle();
    let timeout = timer.new_timeout(noop, Duration::from_secs(60)).unwrap();
    let from_timeout = timeout.timer().clone();
    assert!(!handle.is_stopped());
    drop(timer);
    for h in [&handle, &from_timeout] {
        assert!(h.is_stopped());
        assert_eq!(h.new_timeout(noop, ms(1)).unwrap_err(), TimerError::Stopped);
        assert_eq!(h.pending_timeouts(), 0);
        assert_eq!(h.stop(), Ok(vec![]));
    }
    assert!(timeout.is_cancelled(), "dropping the owner cancelled it");
}

/// The worker thread carries the configured name, idles without waking every tick, and is gone
/// once the owner is dropped, even while idle. The "before" checks make the "after" ones mean
/// something: the thread demonstrably existed and was idle when the timer was dropped.
#[test]
fn worker_thread_is_named_and_gone_after_drop() {
    init();
    const NAME: &str = "htw-idle-drop";
    let timer = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .thread_name(NAME)
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let (exit_tx, exited) = mpsc::channel();
    timer
        .new_timeout(
            move |_: &Timeout| {
                notify_on_thread_exit(exit_tx);
                tx.send(thread::current().name().map(str::to_owned))
                    .unwrap();
            },
            ms(1),
        )
        .unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap().as_deref(), Some(NAME));

    // Idle: nothing pending. The worker is alive and (almost) never wakes: a Netty-style worker
    // would wake about 200 times in 200 ms at a 1 ms tick.
    assert_eq!(timer.pending_timeouts(), 0);
    thread::sleep(ms(20));
    let before = timer.stats().wakeups;
    thread::sleep(ms(200));
    let idle_wakeups = timer.stats().wakeups - before;
    assert!(idle_wakeups <= 5, "{idle_wakeups} wake-ups while idle");
    assert!(
        exited.try_recv().is_err(),
        "the worker must still exist before the drop"
    );
    #[cfg(target_os = "linux")]
    assert_eq!(threads_named(NAME), 1);

    drop(timer);
    // Dropping joins the worker: its thread-locals are already destroyed.
    assert!(exited.try_recv().is_ok(), "the worker outlived its timer");
    #[cfg(target_os = "linux")]
    {
        let deadline = Instant::now() + PATIENCE;
        while threads_named(NAME) != 0 {
            assert!(Instant::now() < deadline, "a thread named {NAME} is left");
            thread::sleep(ms(1));
        }
    }
}

/// Many threads racing to be first to `new_timeout` start exactly one worker.
#[cfg(target_os = "linux")]
#[test]
fn lazy_start_races_start_one_worker() {
    init();
    const NAME: &str = "htw-lazy-race";
    let timer = Arc::new(
        HashedWheelTimer::builder()
            .tick_duration(ms(1))
            .thread_name(NAME)
            .build()
            .unwrap(),
    );
    assert_eq!(threads_named(NAME), 0, "construction starts no thread");
    let barrier = Arc::new(Barrier::new(8));
    let runs = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (timer, barrier, runs) = (timer.clone(), barrier.clone(), runs.clone());
            thread::spawn(move || {
                barrier.wait();
                timer.new_timeout(counting(&runs), ms(1)).unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let deadline = Instant::now() + PATIENCE;
    while runs.load(SeqCst) < 8 {
        assert!(Instant::now() < deadline, "only {} ran", runs.load(SeqCst));
        thread::sleep(ms(1));
    }
    // A thread names itself when it first runs: the worker has (it ran the tasks); give a
    // second one, if any was spawned, time to do so too.
    thread::sleep(ms(50));
    assert_eq!(threads_named(NAME), 1);
}

// ---------------------------------------------------------------------------------------------
// Identity and Debug

#[test]
fn timeouts_compare_by_identity_and_debug_shows_state() {
    init();
    let (timer, driver) = manual(ms(10));
    let a = timer.new_timeout(noop, ms(5)).unwrap();
    let b = timer.new_timeout(noop, ms(5)).unwrap();
    let c = timer.new_timeout(noop, ms(50)).unwrap();
    assert_eq!(a, a.clone());
    assert_ne!(a, b);
    let set: HashSet<Timeout> = [a.clone(), a.clone(), b.clone(), c.clone()]
        .into_iter()
        .collect();
    assert_eq!(set.len(), 3);
    assert!(set.contains(&a.clone()));

    // The task (a closure) is not `Debug`; the timeout is, showing its state.
    assert!(format!("{a:?}").contains("pending"), "{a:?}");
    assert!(c.cancel());
    assert!(format!("{c:?}").contains("cancelled"), "{c:?}");

    // Debug never blocks, even from inside a task while the driver holds the worker.
    let (tx, rx) = mpsc::channel();
    let (h, d) = (timer.handle(), driver.clone());
    timer
        .new_timeout(
            move |t: &Timeout| tx.send(format!("{t:?} {h:?} {d:?}")).unwrap(),
            ms(5),
        )
        .unwrap();
    driver.advance(ms(10));
    let inside = rx.try_recv().unwrap();
    assert!(inside.contains("expired"), "{inside}");
    assert!(format!("{a:?}").contains("expired"));
    for debug in [
        format!("{timer:?}"),
        format!("{:?}", timer.handle()),
        format!("{driver:?}"),
        format!("{:?}", HashedWheelTimer::builder()),
        format!("{:?}", timer.stats()),
    ] {
        assert!(!debug.is_empty());
    }
    assert!(format!("{timer:?}").contains("HashedWheelTimer"));
}

// ---------------------------------------------------------------------------------------------
// The `Timer` trait

/// Code written against Netty's `Timer` interface: arms a timeout per request, cancels it on
/// the response.
struct Requests<'a> {
    timer: &'a dyn Timer,
    timed_out: Arc<Mutex<Vec<u32>>>,
    armed: Vec<(u32, Timeout)>,
}

impl<'a> Requests<'a> {
    fn new(timer: &'a dyn Timer) -> Self {
        Requests {
            timer,
            timed_out: Arc::default(),
            armed: Vec::new(),
        }
    }
    fn send(&mut self, id: u32, timeout: Duration) {
        let timed_out = Arc::clone(&self.timed_out);
        let task: Box<dyn TimerTask> =
            Box::new(move |_: &Timeout| timed_out.lock().unwrap().push(id));
        let t = self.timer.new_timeout(task, timeout).unwrap();
        self.armed.push((id, t));
    }
    fn respond(&mut self, id: u32) -> bool {
        let i = self.armed.iter().position(|(i, _)| *i == id).unwrap();
        self.armed.remove(i).1.cancel()
    }
}

#[test]
fn timer_trait_through_dyn_timer() {
    init();
    let (timer, driver) = manual(ms(10));
    let handle: TimerHandle = timer.handle();
    let as_boxed: Box<dyn Timer> = Box::new(timer.handle());
    for (name, t) in [
        ("owner", &timer as &dyn Timer),
        ("handle", &handle as &dyn Timer),
        ("boxed", &*as_boxed),
    ] {
        let mut requests = Requests::new(t);
        requests.send(1, ms(30));
        requests.send(2, ms(30));
        assert_eq!(t.pending_timeouts(), 2, "{name}");
        assert!(requests.respond(2));
        driver.advance(ms(40));
        assert_eq!(*requests.timed_out.lock().unwrap(), [1], "{name}");
        assert!(!requests.respond(1), "{name}: already timed out");
        assert_eq!(t.pending_timeouts(), 0, "{name}");
    }
    assert_eq!((&handle as &dyn Timer).stop(), Ok(vec![]));
    assert!(timer.is_stopped());
}

/// A fake `Timer` for tests of code that takes `&dyn Timer`: records each delay asked for and
/// delegates to a manually driven timer.
struct RecordingTimer {
    inner: HashedWheelTimer,
    delays: Mutex<Vec<Duration>>,
}

impl Timer for RecordingTimer {
    fn new_timeout(
        &self,
        task: Box<dyn TimerTask>,
        delay: Duration,
    ) -> Result<Timeout, TimerError> {
        self.delays.lock().unwrap().push(delay);
        Timer::new_timeout(&self.inner, task, delay)
    }
    fn stop(&self) -> Result<Vec<NeverRan>, TimerError> {
        Timer::stop(&self.inner)
    }
    fn pending_timeouts(&self) -> usize {
        self.inner.pending_timeouts()
    }
}

#[test]
fn fake_timer_implementation_delegating_to_a_manual_timer() {
    init();
    let (inner, driver) = manual(ms(10));
    let fake = RecordingTimer {
        inner,
        delays: Mutex::new(Vec::new()),
    };
    let mut requests = Requests::new(&fake);
    requests.send(7, ms(250));
    requests.send(8, ms(100));
    requests.send(9, ms(100));
    assert!(requests.respond(9));
    assert_eq!(*fake.delays.lock().unwrap(), [ms(250), ms(100), ms(100)]);

    driver.advance(ms(110));
    assert_eq!(*requests.timed_out.lock().unwrap(), [8]);
    driver.advance(ms(150));
    assert_eq!(*requests.timed_out.lock().unwrap(), [8, 7]);
    assert_eq!(fake.pending_timeouts(), 0);
    assert_eq!(Timer::stop(&fake), Ok(vec![]));
}

/// A task that holds the worker for several ticks is counted (`slow_runs`, `longest_run`) and
/// warned about in the log.
#[test]
fn a_slow_task_is_counted_and_warned_about() {
    init();
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    let (tx, rx) = std::sync::mpsc::channel();
    let quick = tx.clone();
    timer
        .new_timeout(move |_: &Timeout| quick.send(()).unwrap(), Duration::ZERO)
        .unwrap();
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    timer
        .new_timeout(
            move |_: &Timeout| {
                std::thread::sleep(Duration::from_millis(8));
                tx.send(()).unwrap();
            },
            Duration::ZERO,
        )
        .unwrap();
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    // The worker publishes its counts when its run of ticks ends, just after the task.
    let started = std::time::Instant::now();
    while timer.stats().expired < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "counts never published"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let stats = timer.stats();
    // At least the slow one (on a loaded machine the quick one may be descheduled too).
    assert!(stats.slow_runs >= 1, "{stats:?}");
    assert!(stats.longest_run >= Duration::from_millis(8), "{stats:?}");
    assert!(logged(log::Level::Warn, "held the timer's worker"));
}

/// A `stop()` from another thread while a task runs: the timer reads stopped at once, so a
/// `new_timeout` meanwhile is refused with `Stopped`, not `TooManyPending`, though the pending
/// limit is full (the contract's order of checks) and counts nothing; the stop returns only once
/// the task has ended, with the timeouts still pending, cancelled, and nothing runs after.
#[test]
fn a_stop_from_another_thread_waits_for_the_running_task_and_refuses_with_stopped() {
    init();
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(10))
        .max_pending_timeouts(3)
        .build_manual()
        .unwrap();
    let (running_tx, running) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let task_ended = Arc::new(AtomicUsize::new(0));
    let ended = Arc::clone(&task_ended);
    timer
        .new_timeout(
            move |_: &Timeout| {
                running_tx.send(()).unwrap();
                go_rx.recv_timeout(PATIENCE).unwrap();
                ended.store(1, SeqCst);
            },
            ms(5),
        )
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let same_tick = timer.new_timeout(counting(&runs), ms(5)).unwrap();
    let later = timer.new_timeout(counting(&runs), ms(50)).unwrap();
    let ticker = {
        let driver = driver.clone();
        thread::spawn(move || driver.advance(ms(100)))
    };
    running.recv_timeout(PATIENCE).unwrap();
    // The running task's timeout has stopped counting: one more fills the limit.
    let last = timer.new_timeout(counting(&runs), ms(50)).unwrap();
    assert!(matches!(
        timer.new_timeout(noop, ms(1)),
        Err(TimerError::TooManyPending { pending: 3, max: 3 })
    ));
    let stopper = {
        let handle = timer.handle();
        thread::spawn(move || {
            let returned = handle.stop();
            (returned, task_ended.load(SeqCst))
        })
    };
    while !timer.is_stopped() {
        thread::yield_now();
    }
    assert_eq!(timer.pending_timeouts(), 0);
    for _ in 0..3 {
        assert_eq!(
            timer.new_timeout(counting(&runs), ms(1)).unwrap_err(),
            TimerError::Stopped
        );
    }
    go.send(()).unwrap();
    ticker.join().unwrap();
    let (returned, task_had_ended) = stopper.join().unwrap();
    assert_eq!(task_had_ended, 1, "stop() returned while the task ran");
    let returned: HashSet<Timeout> = returned.unwrap().into_iter().map(Timeout::from).collect();
    assert!(
        returned.contains(&later) && returned.contains(&last),
        "later ticks' timeouts are returned"
    );
    assert!(
        returned.iter().all(Timeout::is_cancelled),
        "returned timeouts are cancelled"
    );
    // Whether the rest of the running tick's walk expires `same_tick` is the worker's: either
    // it ran, or stop() returned it.
    assert_eq!(
        usize::from(returned.contains(&same_tick)) + runs.load(SeqCst),
        1,
        "the same tick's timeout ended once"
    );
    assert_eq!(
        returned.len(),
        2 + usize::from(returned.contains(&same_tick))
    );
    driver.advance(ms(1_000));
    assert!(later.is_cancelled() && !later.is_expired());
    assert!(last.is_cancelled() && !last.is_expired());
    assert_eq!(runs.load(SeqCst), usize::from(same_tick.is_expired()));
    assert_eq!(timer.pending_timeouts(), 0);
}

/// A second `stop()`, racing the first while the worker runs a long task, waits for that task
/// as the first does, and returns nothing.
#[test]
fn a_second_stop_waits_for_the_running_task_too() {
    init();
    let timer = HashedWheelTimer::new(ms(1), 64);
    let state = Arc::new(AtomicUsize::new(0));
    let s = Arc::clone(&state);
    timer
        .new_timeout(
            move |_: &Timeout| {
                s.store(1, SeqCst);
                thread::sleep(ms(300));
                s.store(2, SeqCst);
            },
            Duration::ZERO,
        )
        .unwrap();
    while state.load(SeqCst) == 0 {
        thread::sleep(ms(1));
    }
    let handle = timer.handle();
    let first = thread::spawn(move || handle.stop().map(|left| left.len()));
    thread::sleep(ms(50));
    let second = timer.stop();
    assert_eq!(
        state.load(SeqCst),
        2,
        "the second stop returned before the task ended"
    );
    assert_eq!(second, Ok(Vec::new()));
    assert_eq!(first.join().unwrap(), Ok(0));
}

/// A future's waker that panics as its timeout expires is logged as a future's waker, as
/// `stop()` logs one. It was logged as a panicking `TimerTask`: the worker named the culprit by
/// whether an executor ran it, and a future's wake-up is never handed to one.
#[test]
fn a_waker_that_panics_at_expiry_is_logged_as_a_waker() {
    use std::future::Future;
    use std::task::{Context, Wake, Waker};
    struct PanickingWaker;
    impl Wake for PanickingWaker {
        fn wake(self: Arc<Self>) {
            std::panic::panic_any(DELIBERATE);
        }
    }
    init();
    let (timer, driver) = manual(ms(1));
    let waker = Waker::from(Arc::new(PanickingWaker));
    let mut sleep = std::pin::pin!(timer.sleep(ms(2)));
    assert!(sleep
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    driver.advance(ms(5));
    assert_eq!(timer.stats().panicked, 1);
    assert!(logged(log::Level::Warn, "a future's waker panicked"));
}

/// The slow-run warning names what the worker times, user code that may be several tasks or a
/// future's waker, not one `TimerTask`: a waker that holds the worker for 8 ticks is warned
/// about as user code. The warning said a TimerTask, so a user hunting it looked for a task.
#[test]
fn a_slow_waker_is_warned_about_as_user_code() {
    use std::future::Future;
    use std::task::{Context, Wake, Waker};
    struct SlowWaker(Mutex<mpsc::Sender<()>>);
    impl Wake for SlowWaker {
        fn wake(self: Arc<Self>) {
            thread::sleep(ms(8));
            self.0.lock().unwrap().send(()).unwrap();
        }
    }
    init();
    let timer = HashedWheelTimer::new(ms(1), 64);
    let (tx, rx) = mpsc::channel();
    let waker = Waker::from(Arc::new(SlowWaker(Mutex::new(tx))));
    let mut sleep = std::pin::pin!(timer.sleep(ms(2)));
    assert!(sleep
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let started = Instant::now();
    while timer.stats().slow_runs == 0 {
        assert!(started.elapsed() < Duration::from_secs(10), "never counted");
        thread::sleep(ms(1));
    }
    let warning = "user code (tasks or futures' wakers, timed together) held the timer's worker";
    assert!(logged(log::Level::Warn, warning));
    assert!(!logged(log::Level::Warn, "TimerTask held"));
}
