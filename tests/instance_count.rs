//! Netty's `INSTANCE_COUNT_LIMIT`: more than 64 live timers in one process log an error, once per
//! process; a timer leaves the count when it is stopped (started or not) or dropped. The count is
//! the process's, so this test is alone in its binary.

use hashed_timer_wheel::{HashedWheelTimer, INSTANCE_COUNT_LIMIT};
use std::sync::Mutex;
use std::time::Duration;

static ERRORS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if record.level() == log::Level::Error {
            let mut errors = ERRORS.lock().unwrap_or_else(|e| e.into_inner());
            errors.push(record.args().to_string());
        }
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture;

fn errors() -> usize {
    ERRORS.lock().unwrap_or_else(|e| e.into_inner()).len()
}

/// `n` timers of every kind: lazily started, started, manual.
fn timers(n: usize) -> Vec<HashedWheelTimer> {
    (0..n)
        .map(|i| match i % 3 {
            0 => HashedWheelTimer::new(Duration::from_millis(100), 8),
            1 => {
                let timer = HashedWheelTimer::new(Duration::from_millis(100), 8);
                timer.start().unwrap();
                timer
            }
            _ => HashedWheelTimer::builder().build_manual().unwrap().0,
        })
        .collect()
}

#[test]
fn live_timers_past_the_limit_log_once_and_stopped_or_dropped_ones_leave_the_count() {
    log::set_logger(&CAPTURE).unwrap();
    log::set_max_level(log::LevelFilter::Trace);

    for _ in 0..10 {
        let refused = HashedWheelTimer::builder().ticks_per_wheel(0).build();
        assert!(refused.is_err());
    }
    let stopped = timers(INSTANCE_COUNT_LIMIT);
    assert_eq!(
        errors(),
        0,
        "{INSTANCE_COUNT_LIMIT} live timers are fine, and a refused build is no timer"
    );
    for timer in &stopped {
        assert!(timer.stop().unwrap().is_empty());
    }
    let dropped = timers(INSTANCE_COUNT_LIMIT);
    assert_eq!(errors(), 0, "stopped timers left the count");
    drop(dropped);
    let mut live = timers(INSTANCE_COUNT_LIMIT);
    assert_eq!(errors(), 0, "dropped timers left the count");

    live.extend(timers(1));
    assert_eq!(errors(), 1, "one past the limit");
    assert!(ERRORS.lock().unwrap()[0].contains("shared resource"));
    live.extend(timers(10));
    drop(live);
    let again = timers(INSTANCE_COUNT_LIMIT + 5);
    assert_eq!(errors(), 1, "logged once per process");
    drop((stopped, again));
}
