//! The process's logger is user code too: one that panics on the timer's reports (a caught panic
//! of a task, of its `Drop`; a periodic task's run refused) goes unheard, and the timer goes on,
//! on its worker thread and in `stop()` alike.
//!
//! A binary of its own: the logger is the process's.

mod common;

use common::ms;
use hashed_timer_wheel::{Builder, HashedWheelTimer, MissedRuns, PeriodicTimeout, Timeout};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Once};
use std::time::Duration;

/// The threads on which the logger panics.
const LOUD: &str = "loud-logger";
/// What the logger panics on: the report of a caught panic of user code, of a periodic task's
/// run refused, of a tick clamped to 1 ms, and of too many live timers.
const TRIGGERS: [&str; 4] = [
    "panicked; the timer goes on",
    "its schedule ends",
    "is smaller than 1 ms",
    "too many HashedWheelTimer instances",
];
/// Indices into `TRIGGERS`.
const CAUGHT: usize = 0;
const REFUSED: usize = 1;
const CLAMPED: usize = 2;
const TOO_MANY: usize = 3;
const DELIBERATE: &str = "deliberate panic (user code, then the logger)";

/// Panics on `TRIGGERS` on a `LOUD` thread, counting each time it does, trigger by trigger.
struct PanickingLogger;

static LOGGER_PANICS: [AtomicUsize; TRIGGERS.len()] =
    [const { AtomicUsize::new(0) }; TRIGGERS.len()];

/// The logger's panics so far on the reports of `TRIGGERS[trigger]`.
fn logger_panics(trigger: usize) -> usize {
    LOGGER_PANICS[trigger].load(SeqCst)
}

impl log::Log for PanickingLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let loud = std::thread::current().name() == Some(LOUD);
        let message = record.args().to_string();
        let trigger = TRIGGERS.iter().position(|t| message.contains(t));
        if let Some(trigger) = trigger.filter(|_| loud) {
            LOGGER_PANICS[trigger].fetch_add(1, SeqCst);
            std::panic::panic_any(DELIBERATE);
        }
    }
    fn flush(&self) {}
}

static LOGGER: PanickingLogger = PanickingLogger;

fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_logger(&LOGGER).unwrap();
        log::set_max_level(log::LevelFilter::Trace);
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() != Some(&DELIBERATE) {
                default(info);
            }
        }));
    });
}

/// A timer of 1 ms ticks from `builder`, its worker thread `LOUD`, the logger installed.
fn loud_timer(builder: Builder) -> HashedWheelTimer {
    init();
    builder
        .tick_duration(ms(1))
        .thread_name(LOUD)
        .build()
        .unwrap()
}

/// A task's panic, reported by a logger that panics on the worker thread: the worker goes on.
/// The logger's panic unwound the worker thread, which stopped the timer and lost the timeouts
/// it held.
#[test]
fn a_logger_that_panics_on_the_worker_thread_does_not_stop_the_timer() {
    let timer = loud_timer(HashedWheelTimer::builder());
    let before = logger_panics(CAUGHT);
    let (tx, rx) = mpsc::channel();
    timer
        .new_timeout(|_: &Timeout| std::panic::panic_any(DELIBERATE), ms(1))
        .unwrap();
    timer
        .new_timeout(move |_: &Timeout| tx.send(()).unwrap(), ms(5))
        .unwrap();
    assert!(
        rx.recv_timeout(Duration::from_secs(30)).is_ok(),
        "the later timeout fires"
    );
    assert!(!timer.is_stopped());
    assert!(logger_panics(CAUGHT) > before, "the logger panicked");
    assert_eq!(timer.stats().panicked, 1);
}

/// Counts its drops, and panics in its `Drop`.
struct PanicsInDrop(Arc<AtomicUsize>);

impl Drop for PanicsInDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
        std::panic::panic_any(DELIBERATE);
    }
}

/// The owner dropped on a thread whose logger panics on the report of a task's `Drop` that
/// panicked: the drop ends every timeout, in the wheel and still queued, each task dropped
/// once, and does not panic. The logger's panic unwound the report, not the drop.
#[test]
fn dropping_the_owner_drops_every_task_once_when_the_logger_panics_on_its_reports() {
    init();
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .build_manual()
        .unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let schedule = |timer: &HashedWheelTimer| {
        let probe = PanicsInDrop(Arc::clone(&drops));
        timer
            .new_timeout(
                move |_: &Timeout| {
                    let _probe = &probe;
                },
                Duration::from_secs(60),
            )
            .unwrap()
    };
    let mut scheduled = vec![schedule(&timer), schedule(&timer)];
    driver.advance(ms(1)); // those in the wheel
    scheduled.extend([schedule(&timer), schedule(&timer)]); // and those still queued
    let handle = timer.handle();
    let before = logger_panics(CAUGHT);
    let stopper = std::thread::Builder::new()
        .name(LOUD.to_owned())
        .spawn(move || std::panic::catch_unwind(move || drop(timer)).is_ok())
        .unwrap();
    assert!(stopper.join().unwrap(), "the owner's drop does not panic");
    assert_eq!(drops.load(SeqCst), 4, "each task dropped once");
    assert_eq!(handle.stats().panicked, 4);
    assert!(logger_panics(CAUGHT) > before, "the logger panicked");
    assert!(scheduled.iter().all(Timeout::is_cancelled));
}

/// A periodic task whose next run the pending limit refuses, on a worker thread whose logger
/// panics on that report: the schedule ends, as the report says, and nothing counts as a
/// panic of user code. The logger's panic unwound the run before the schedule noted its end.
#[test]
fn a_periodic_run_refused_with_a_logger_that_panics_ends_its_schedule() {
    let timer = loud_timer(HashedWheelTimer::builder().max_pending_timeouts(1));
    let before = logger_panics(REFUSED);
    let (tx, rx) = mpsc::channel();
    let periodic = timer
        .schedule_at_fixed_rate(
            move |p: &PeriodicTimeout| {
                // Fills the limit: the next run is refused.
                let held = p
                    .timer()
                    .new_timeout(|_: &Timeout| {}, Duration::from_secs(60));
                tx.send(held.is_ok()).unwrap();
            },
            ms(1),
            ms(1),
            MissedRuns::Skip,
        )
        .unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(30)), Ok(true));
    // The refused run's task is dropped before the report is logged, and its drop ends the
    // schedule: wait for both.
    let started = std::time::Instant::now();
    while !periodic.is_cancelled() || logger_panics(REFUSED) == before {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the schedule never ended (ended: {}), or the logger never panicked",
            periodic.is_cancelled()
        );
        std::thread::sleep(ms(1));
    }
    assert_eq!(periodic.runs(), 1);
    assert_eq!(timer.stats().panicked, 0, "no user code panicked");
}

/// Runs `f` on a thread named `LOUD`, where the logger panics; what it returns, or the panic
/// it unwound with.
fn on_loud_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::Result<T> {
    init();
    let loud = std::thread::Builder::new().name(LOUD.to_owned());
    loud.spawn(f).unwrap().join()
}

/// A tick under 1 ms, reported to a logger that panics: the timer is built, its tick 1 ms.
/// The logger's panic unwound `build`.
#[test]
fn a_clamped_tick_reported_to_a_logger_that_panics_still_builds_the_timer() {
    let before = logger_panics(CLAMPED);
    let built = on_loud_thread(|| {
        let builder = HashedWheelTimer::builder().tick_duration(Duration::from_micros(100));
        builder.build().map(|timer| timer.tick_duration())
    });
    assert_eq!(built.expect("build does not unwind"), Ok(ms(1)));
    assert!(logger_panics(CLAMPED) > before, "the logger panicked");
}

/// More live timers than Netty's limit, reported to a logger that panics: each is built. The
/// logger's panic unwound `build` with the timer counted and never uncounted. (The report
/// comes once per process, on whichever thread crosses the limit: another test's timer may
/// cross it first.)
#[test]
fn too_many_live_timers_reported_to_a_logger_that_panics_still_build() {
    let limit = hashed_timer_wheel::INSTANCE_COUNT_LIMIT;
    let built = on_loud_thread(move || {
        let timers: Vec<_> = (0..limit + 2)
            .map(|_| HashedWheelTimer::builder().build())
            .collect();
        timers.iter().filter(|t| t.is_ok()).count()
    });
    assert_eq!(built.expect("build does not unwind"), limit + 2);
    assert!(logger_panics(TOO_MANY) <= 1, "reported once");
}
