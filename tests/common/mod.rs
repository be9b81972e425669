//! Helpers shared by the integration tests (each test binary uses a subset).
#![allow(dead_code)]

use hashed_timer_wheel::{Timeout, TimerError, TimerHandle};
use std::collections::HashSet;
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

/// `stop()` from outside the worker: the timeouts it hands back, their tasks dropped.
#[allow(clippy::mutable_key_type)] // a `Timeout` hashes by its slot, not by its state
pub(crate) fn stop_set(timer: &TimerHandle) -> HashSet<Timeout> {
    let returned = timer.stop().expect("stopped from outside the worker");
    returned.into_iter().map(Timeout::from).collect()
}

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

/// A step on the other timeouts a model test keeps beside the future it tests, to fill a
/// pending limit and free it.
#[derive(Debug, Clone)]
pub(crate) enum OtherStep {
    /// Another timeout, of this delay.
    Add(u64),
    /// Cancels the other timeout at this index (modulo how many were made).
    Cancel(usize),
}

/// Steps on the other timeouts of a timer whose tick is `tick` ns, made and cancelled alike.
pub(crate) fn other_step(tick: u64) -> impl proptest::strategy::Strategy<Value = OtherStep> {
    use proptest::prelude::*;
    prop_oneof![
        near_ticks(tick, 8).prop_map(OtherStep::Add),
        any::<usize>().prop_map(OtherStep::Cancel),
    ]
}

/// A timeout a manual timer accepted, as a model test sees it.
pub(crate) struct Accepted {
    pub(crate) deadline: u64,
    pub(crate) fire_tick: u64,
    pub(crate) cancelled: bool,
    pub(crate) cancel_processed: bool,
}

/// What a model test knows of a manual timer with ticks of `tick` ns and perhaps a pending
/// limit: every timeout it accepted (one per arm of the future under test, and other
/// timeouts that fill the limit), and the others' handles. A timeout fires on tick
/// `max(deadline / tick, armed / tick)` and ends then; a cancelled one ends at the start of
/// the next tick the worker processes.
pub(crate) struct TimerBook {
    pub(crate) tick: u64,
    pub(crate) now: u64,
    pub(crate) limit: Option<usize>,
    pub(crate) accepted: Vec<Accepted>,
    others: Vec<(Timeout, usize)>,
}

impl TimerBook {
    pub(crate) fn new(tick: u64, now: u64, limit: Option<usize>) -> TimerBook {
        TimerBook {
            tick,
            now,
            limit,
            accepted: Vec::new(),
            others: Vec::new(),
        }
    }

    pub(crate) fn fired(&self, i: usize) -> bool {
        let a = &self.accepted[i];
        !a.cancelled && a.fire_tick < self.now / self.tick
    }

    pub(crate) fn pending(&self) -> usize {
        let ended = |i: usize| self.fired(i) || self.accepted[i].cancel_processed;
        (0..self.accepted.len()).filter(|&i| !ended(i)).count()
    }

    /// The refusal a timeout that replaces none would meet now, if any.
    pub(crate) fn refusal(&self) -> Option<TimerError> {
        let pending = self.pending();
        let max = self.limit.filter(|&max| pending >= max)?;
        Some(TimerError::TooManyPending { pending, max })
    }

    /// A timeout due at `deadline`, accepted now: its index.
    pub(crate) fn accept(&mut self, deadline: u64) -> usize {
        self.accepted.push(Accepted {
            deadline,
            fire_tick: (deadline / self.tick).max(self.now / self.tick),
            cancelled: false,
            cancel_processed: false,
        });
        self.accepted.len() - 1
    }

    /// A future's arm for `deadline`, whose timeout was `current` (`None`: it has none): it
    /// cancels that timeout if it has not fired, and is refused at the limit unless it
    /// replaced one (a wait that goes on passes the limit).
    pub(crate) fn rearm(
        &mut self,
        current: Option<usize>,
        deadline: u64,
    ) -> Result<usize, TimerError> {
        let replaces = match current {
            Some(i) if !self.fired(i) => {
                self.accepted[i].cancelled = true;
                true
            }
            _ => false,
        };
        match self.refusal() {
            Some(refusal) if !replaces => Err(refusal),
            _ => Ok(self.accept(deadline)),
        }
    }

    /// The clock moved by `by`: a tick processed ends the cancelled timeouts.
    pub(crate) fn advance(&mut self, by: u64) {
        if (self.now + by) / self.tick > self.now / self.tick {
            for a in &mut self.accepted {
                a.cancel_processed |= a.cancelled;
            }
        }
        self.now += by;
    }

    /// Takes a step on the other timeouts.
    pub(crate) fn other(
        &mut self,
        timer: &hashed_timer_wheel::HashedWheelTimer,
        step: &OtherStep,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        match *step {
            OtherStep::Add(delay) => self.add_other(timer, delay),
            OtherStep::Cancel(i) => self.cancel_other(i),
        }
    }

    /// Another timeout of `delay` on `timer`, accepted or refused as the book says.
    fn add_other(
        &mut self,
        timer: &hashed_timer_wheel::HashedWheelTimer,
        delay: u64,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        let made = timer.new_timeout(noop, Duration::from_nanos(delay));
        match (self.refusal(), made) {
            (None, Ok(handle)) => {
                let i = self.accept(self.now + delay);
                self.others.push((handle, i));
            }
            (refusal, made) => proptest::prop_assert_eq!(made.err(), refusal),
        }
        Ok(())
    }

    /// Cancels the other timeout at `i` (modulo how many were made), if any.
    fn cancel_other(&mut self, i: usize) -> Result<(), proptest::test_runner::TestCaseError> {
        if self.others.is_empty() {
            return Ok(());
        }
        let (handle, a) = &self.others[i % self.others.len()];
        let wins = !self.fired(*a) && !self.accepted[*a].cancelled;
        proptest::prop_assert_eq!(handle.cancel(), wins);
        self.accepted[*a].cancelled |= wins;
        Ok(())
    }

    /// Cancels every other timeout, as a test's end does.
    pub(crate) fn cancel_others(&self) {
        for (handle, _) in &self.others {
            handle.cancel();
        }
    }
}
