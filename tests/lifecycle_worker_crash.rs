//! A worker thread that unwinds stops its timer, which leaves the process's live-timer count
//! then, once. Only a bug of the crate, or a logger that panics, unwinds the thread: here the
//! logger, which panics on the worker thread's report of a task's panic.
//!
//! A binary of its own: the logger is the process's, and the "too many instances" error it
//! checks for is logged once per process.

mod common;

use common::ms;
use hashed_timer_wheel::{HashedWheelTimer, Timeout, INSTANCE_COUNT_LIMIT};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The worker threads whose logger panics.
const CRASHING: &str = "crashing-worker";
/// What the logger panics on: the worker's report of a task's panic.
const TRIGGER: &str = "a TimerTask panicked";
const DELIBERATE: &str = "deliberate panic (a task, then the logger)";

static RECORDS: Mutex<Vec<(log::Level, String)>> = Mutex::new(Vec::new());

/// Keeps every record; panics on `TRIGGER` on a `CRASHING` thread.
struct PanickingLogger;

impl log::Log for PanickingLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let message = record.args().to_string();
        let crashing = std::thread::current().name() == Some(CRASHING);
        let panics = crashing && message.contains(TRIGGER);
        RECORDS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((record.level(), message));
        if panics {
            std::panic::panic_any(DELIBERATE);
        }
    }
    fn flush(&self) {}
}

static LOGGER: PanickingLogger = PanickingLogger;

fn init() {
    log::set_logger(&LOGGER).unwrap();
    log::set_max_level(log::LevelFilter::Trace);
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&DELIBERATE) {
            default(info);
        }
    }));
}

fn logged(level: log::Level, needle: &str) -> bool {
    RECORDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|(l, m)| *l == level && m.contains(needle))
}

/// Waits up to 30 s for `done`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(30), "{what}");
        std::thread::sleep(ms(1));
    }
}

/// A worker thread that unwound left the live-timer count raised for good: the timer was
/// marked stopped, so its `stop()` and its drop returned at once, as for a second stop, and
/// never counted it down. The count leaves with the thread, and the owner's drop counts
/// nothing more: exactly `INSTANCE_COUNT_LIMIT` other timers log nothing, one more the error.
#[test]
fn a_worker_thread_that_unwinds_leaves_the_live_timer_count_once() {
    init();
    let crashed = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .thread_name(CRASHING)
        .build()
        .unwrap();
    crashed
        .new_timeout(|_: &Timeout| std::panic::panic_any(DELIBERATE), ms(1))
        .unwrap();
    wait_until("the worker thread unwinds", || crashed.is_stopped());
    assert!(logged(log::Level::Error, "worker thread panicked"));

    let mut others: Vec<HashedWheelTimer> = (0..INSTANCE_COUNT_LIMIT)
        .map(|_| HashedWheelTimer::new(ms(100), 1))
        .collect();
    assert!(
        !logged(log::Level::Error, "shared resource"),
        "the stopped timer is still counted live"
    );
    // Its drop finds it stopped: nothing more leaves the count.
    drop(crashed);
    others.push(HashedWheelTimer::new(ms(100), 1));
    assert!(
        logged(log::Level::Error, "shared resource"),
        "the stopped timer left the count twice"
    );
}
