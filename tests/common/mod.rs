//! Helpers shared by the integration tests (each test binary uses a subset).
#![allow(dead_code)]

use hashed_timer_wheel::Timeout;
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

/// Runs `f` on a thread of its own and fails if it has not returned within 30 s (a deadlock:
/// the thread is left behind), rather than hanging the test binary.
pub(crate) fn within_30_s(f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(outcome);
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(outcome) => outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        Err(_) => panic!("not done within 30 s: a deadlock"),
    }
}

pub(crate) type Hook = Box<dyn Fn() + Send + Sync>;

/// What a `calling_back_waker` runs in its clone and its drop (a `Wake` waker's clone and drop
/// run no code of its own).
struct Hooks {
    on_clone: Hook,
    on_drop: Hook,
}

/// A waker whose every clone runs `on_clone` and every drop `on_drop`: user code that calls
/// back into the timer while the crate may hold a lock.
pub(crate) fn calling_back_waker(on_clone: Hook, on_drop: Hook) -> std::task::Waker {
    use std::task::{RawWaker, RawWakerVTable};
    unsafe fn clone(data: *const ()) -> RawWaker {
        // SAFETY: `data` is an `Arc<Hooks>`'s, alive while a waker holds it.
        unsafe {
            ((*data.cast::<Hooks>()).on_clone)();
            Arc::increment_strong_count(data.cast::<Hooks>());
        }
        RawWaker::new(data, &VTABLE)
    }
    unsafe fn wake(data: *const ()) {
        // SAFETY: as in `clone`; the waker is consumed.
        unsafe { drop(data) }
    }
    fn wake_by_ref(_: *const ()) {}
    unsafe fn drop(data: *const ()) {
        // SAFETY: as in `clone`; this waker's count is given back once.
        unsafe {
            ((*data.cast::<Hooks>()).on_drop)();
            Arc::decrement_strong_count(data.cast::<Hooks>());
        }
    }
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop);
    let data = Arc::into_raw(Arc::new(Hooks { on_clone, on_drop })).cast::<()>();
    // SAFETY: every function of the vtable takes `data` as the `Arc<Hooks>` it is, keeps its
    // count, and may run on any thread (`Hooks` is `Send + Sync`).
    unsafe { std::task::Waker::from_raw(RawWaker::new(data, &VTABLE)) }
}

/// A hook that runs `f` the first time only.
pub(crate) fn once(f: impl FnOnce() + Send + 'static) -> Hook {
    let f = std::sync::Mutex::new(Some(f));
    Box::new(move || {
        let f = f.lock().unwrap().take();
        if let Some(f) = f {
            f();
        }
    })
}

pub(crate) fn no_hook() -> Hook {
    Box::new(|| {})
}

/// The model tests' proptest settings: `cases` random cases (`MODEL_CASES_SCALE` times that if
/// set, for a deep run), and no file of past failures (a failing case prints its minimal input
/// instead).
pub(crate) fn model_config(cases: u32) -> proptest::test_runner::Config {
    let scale = std::env::var("MODEL_CASES_SCALE").map_or(1, |s| {
        s.parse()
            .expect("MODEL_CASES_SCALE is a whole number of times the usual cases")
    });
    proptest::test_runner::Config {
        cases: cases.saturating_mul(scale),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}

/// About `max_ticks` ticks of `tick` nanoseconds, often on a tick boundary or a nanosecond off
/// it, where off-by-one errors live.
pub(crate) fn near_ticks(
    tick: u64,
    max_ticks: u64,
) -> impl proptest::strategy::Strategy<Value = u64> {
    use proptest::strategy::Strategy;
    (0..=max_ticks, 0..4u8, 0..tick).prop_map(move |(k, kind, r)| match kind {
        0 => k * tick,
        1 => k * tick + 1,
        2 => (k * tick).saturating_sub(1),
        _ => k * tick + r,
    })
}

/// A waker's inside that counts its wake-ups (`Waker::from(Arc<WakeCount>)`).
#[derive(Default)]
pub(crate) struct WakeCount(pub(crate) AtomicUsize);

impl std::task::Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// The payload of the panics a test causes on purpose (`std::panic::panic_any(BY_DESIGN)`).
pub(crate) const BY_DESIGN: &str = "a test's task panics here by design";

/// Leaves the panics with the [`BY_DESIGN`] payload unprinted (a model test causes hundreds);
/// every other panic is reported as usual.
pub(crate) fn quiet_by_design_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() != Some(&BY_DESIGN) {
                report(info);
            }
        }));
    });
}
