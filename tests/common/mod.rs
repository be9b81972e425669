//! Helpers shared by the integration tests (each test binary uses a subset).
#![allow(dead_code)]

use hashed_timer_wheel::{HashedWheelTimer, Timeout};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

pub(crate) const NANO: Duration = Duration::from_nanos(1);

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A task that counts its runs.
pub(crate) fn counting(counter: &Arc<AtomicUsize>) -> impl FnOnce(&Timeout) + Send + 'static {
    let counter = Arc::clone(counter);
    move |_: &Timeout| {
        counter.fetch_add(1, SeqCst);
    }
}

pub(crate) fn noop(_: &Timeout) {}

/// The raw pending counter, as the timer's `Debug` shows it. `pending_timeouts()` reports 0 on
/// a stopped timer whatever the counter says, so only this can show a leak after `stop()`.
pub(crate) fn raw_pending(timer: &HashedWheelTimer) -> usize {
    let debug = format!("{timer:?}");
    let rest = debug
        .split("pending: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no pending field in {debug}"));
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}
