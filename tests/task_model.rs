//! Model-based test of the forms a task takes, on the manual driver: timeouts of tasks small
//! enough to be stored in place and too big for it, with and without a handle, some that panic
//! when run or when dropped, on the boxed timer and on typed timers of three sizes; random
//! schedules, cancels and advances, checked step by step against `tests/model.rs`' arithmetic
//! (Netty's).
//!
//! Each task carries a payload made from its own number and checks it when it runs: a task run
//! on another's data fails the test. Each counts its drops: a task dropped twice, or never,
//! fails it. `TimerStats` must count every expiry, processed cancel and panic.

mod common;

use hashed_timer_wheel::{
    HashedWheelTimer, ManualDriver, Timeout, TimerError, TimerStats, TypedTask,
};
use proptest::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The tick length in nanoseconds.
const T: u64 = 1_000_000;

/// The payload of the panics the test causes, which the panic hook leaves unprinted.
const BY_DESIGN: &str = "task_model: this task panics by design";

fn quiet_by_design_panics() {
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

/// About `ticks` ticks, often on a tick boundary or a nanosecond off it.
fn near_ticks(max_ticks: u64) -> impl Strategy<Value = u64> {
    (0..=max_ticks, 0..4u8, 0..T).prop_map(|(k, kind, r)| match kind {
        0 => k * T,
        1 => k * T + 1,
        2 => (k * T).saturating_sub(1),
        _ => k * T + r,
    })
}

/// How a task is made and what it does.
#[derive(Debug, Clone, Copy)]
struct Spec {
    /// Payload words (the boxed timer's closures: 0 is stored in place, 16 is not).
    big: bool,
    detached: bool,
    panics_in_run: bool,
    panics_in_drop: bool,
}

#[derive(Debug, Clone)]
enum Op {
    Schedule(Spec, u64),
    /// This many tasks of one delay at once, spanning the worker's chunks of 32, their specs
    /// drawn in turn from `seed`'s bits.
    Burst {
        n: usize,
        delay: u64,
        seed: u64,
    },
    /// Cancels the timeout at this index (modulo how many were scheduled).
    Cancel(usize),
    Advance(u64),
}

fn spec() -> impl Strategy<Value = Spec> {
    any::<u16>().prop_map(spec_of)
}

/// A spec from 10 random bits: a big task one time in 2, detached one in 4, panicking in its
/// run or its drop one in 8 each.
fn spec_of(bits: u16) -> Spec {
    Spec {
        big: bits & 1 == 0,
        detached: bits >> 1 & 3 == 0,
        panics_in_run: bits >> 3 & 7 == 0,
        panics_in_drop: bits >> 6 & 7 == 0,
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (spec(), near_ticks(20)).prop_map(|(s, d)| Op::Schedule(s, d)),
        1 => (spec(), near_ticks(5_000)).prop_map(|(s, d)| Op::Schedule(s, d)),
        1 => (1..200usize, near_ticks(20), any::<u64>())
            .prop_map(|(n, delay, seed)| Op::Burst { n, delay, seed }),
        3 => any::<usize>().prop_map(Op::Cancel),
        4 => near_ticks(3).prop_map(Op::Advance),
        1 => near_ticks(40).prop_map(Op::Advance),
        1 => near_ticks(3_000).prop_map(Op::Advance),
    ]
}

/// What the tasks report: their runs `(id, tick, payload intact)` and drops by id.
struct Books {
    runs: Mutex<Vec<(usize, u64, bool)>>,
    drops: Mutex<Vec<u32>>,
    current_tick: Box<dyn Fn() -> u64 + Send + Sync>,
}

/// The payload word `i` of task `id`.
fn word(id: usize, i: usize) -> u64 {
    (id as u64) << 8 | i as u64
}

/// Counts its drop; panics in it if asked to (not while unwinding: that would abort).
struct Guard {
    books: Arc<Books>,
    id: usize,
    panics: bool,
}

impl Guard {
    fn ran(&self, payload: &[u64]) {
        let intact = payload
            .iter()
            .enumerate()
            .all(|(i, &w)| w == word(self.id, i));
        let tick = (self.books.current_tick)();
        self.books
            .runs
            .lock()
            .unwrap()
            .push((self.id, tick, intact));
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.books.drops.lock().unwrap()[self.id] += 1;
        if self.panics && !std::thread::panicking() {
            std::panic::panic_any(BY_DESIGN);
        }
    }
}

/// A typed timer's task: `N` payload words.
struct Job<const N: usize> {
    guard: Guard,
    payload: [u64; N],
    panics: bool,
}

impl<const N: usize> TypedTask for Job<N> {
    fn run(self, _: &Timeout<Self>) {
        self.guard.ran(&self.payload);
        if self.panics {
            std::panic::panic_any(BY_DESIGN);
        }
    }
}

fn payload<const N: usize>(id: usize) -> [u64; N] {
    std::array::from_fn(|i| word(id, i))
}

/// Schedules a task as `spec` says, with its handle unless detached.
type Scheduler<J> =
    fn(&HashedWheelTimer<J>, Guard, Spec, Duration) -> Result<Option<Timeout<J>>, TimerError>;

fn schedule_boxed(
    timer: &HashedWheelTimer,
    guard: Guard,
    spec: Spec,
    delay: Duration,
) -> Result<Option<Timeout>, TimerError> {
    fn task<const N: usize>(guard: Guard, panics: bool) -> impl FnOnce(&Timeout) + Send {
        let payload: [u64; N] = payload(guard.id);
        move |_: &Timeout| {
            guard.ran(&payload);
            if panics {
                std::panic::panic_any(BY_DESIGN);
            }
        }
    }
    let panics = spec.panics_in_run;
    match (spec.big, spec.detached) {
        (false, false) => timer.new_timeout(task::<0>(guard, panics), delay).map(Some),
        (true, false) => timer
            .new_timeout(task::<16>(guard, panics), delay)
            .map(Some),
        (false, true) => timer
            .new_timeout_detached(task::<0>(guard, panics), delay)
            .map(|()| None),
        (true, true) => timer
            .new_timeout_detached(task::<16>(guard, panics), delay)
            .map(|()| None),
    }
}

fn schedule_typed<const N: usize>(
    timer: &HashedWheelTimer<Job<N>>,
    guard: Guard,
    spec: Spec,
    delay: Duration,
) -> Result<Option<Timeout<Job<N>>>, TimerError> {
    let job = Job {
        payload: payload(guard.id),
        guard,
        panics: spec.panics_in_run,
    };
    if spec.detached {
        timer.new_timeout_detached(job, delay).map(|()| None)
    } else {
        timer.new_timeout(job, delay).map(Some)
    }
}

/// What the model knows about one timeout.
struct Expected<J: hashed_timer_wheel::Stored> {
    handle: Option<Timeout<J>>,
    spec: Spec,
    fire_tick: u64,
    fired: bool,
    cancelled: bool,
    cancel_processed: bool,
}

impl<J: hashed_timer_wheel::Stored> Expected<J> {
    fn pending(&self) -> bool {
        !(self.fired || self.cancelled && self.cancel_processed)
    }

    /// Panics the timer catches for this timeout once it has ended.
    fn panics(&self) -> u64 {
        let ended = self.fired || self.cancelled;
        u64::from(ended && (self.spec.panics_in_drop || self.fired && self.spec.panics_in_run))
    }
}

fn run<J: hashed_timer_wheel::Stored>(
    (timer, driver): (HashedWheelTimer<J>, ManualDriver<J>),
    schedule: Scheduler<J>,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    quiet_by_design_panics();
    let d = driver.clone();
    let books = Arc::new(Books {
        runs: Mutex::default(),
        drops: Mutex::default(),
        current_tick: Box::new(move || d.current_tick()),
    });
    let mut model: Vec<Expected<J>> = Vec::new();
    let mut now = 0;
    for op in &ops {
        match *op {
            Op::Schedule(spec, delay) => {
                add(&timer, schedule, &books, &mut model, now, spec, delay)?
            }
            Op::Burst { n, delay, seed } => {
                for i in 0..n {
                    let bits = seed.rotate_left(7 * i as u32) as u16;
                    add(
                        &timer,
                        schedule,
                        &books,
                        &mut model,
                        now,
                        spec_of(bits),
                        delay,
                    )?;
                }
            }
            Op::Cancel(i) if !model.is_empty() => {
                let n = model.len();
                let e = &mut model[i % n];
                if let Some(handle) = &e.handle {
                    let wins = !e.fired && !e.cancelled;
                    prop_assert_eq!(handle.cancel(), wins, "cancel of {}", i % n);
                    e.cancelled |= wins;
                }
            }
            Op::Cancel(_) => {}
            Op::Advance(by) => {
                let to = now + by;
                let (first, end) = (now / T, to / T);
                let mut expected = Vec::new();
                if end > first {
                    for (id, e) in model.iter_mut().enumerate() {
                        if !e.fired && !e.cancelled && e.fire_tick < end {
                            prop_assert!(e.fire_tick >= first, "the model missed {}", id);
                            e.fired = true;
                            expected.push((id, e.fire_tick, true));
                        }
                        e.cancel_processed |= e.cancelled;
                    }
                }
                expected.sort_by_key(|&(id, tick, _)| (tick, id));
                driver.advance(Duration::from_nanos(by));
                now = to;
                let ran = std::mem::take(&mut *books.runs.lock().unwrap());
                prop_assert_eq!(ran, expected, "advance to {} ns", now);
            }
        }
        check(&timer, &books, &model, op)?;
    }
    let returned = timer.stop().unwrap();
    let never_ended = model.iter().filter(|e| !e.fired && !e.cancelled).count();
    prop_assert_eq!(returned.len(), never_ended, "stop() returns what never ran");
    prop_assert!(returned.iter().all(Timeout::is_cancelled));
    drop(returned);
    for e in &mut model {
        e.cancelled |= !e.fired;
        e.cancel_processed = true;
    }
    let drops = books.drops.lock().unwrap().clone();
    prop_assert!(
        drops.iter().all(|&d| d == 1),
        "every task dropped once: {:?}",
        drops
    );
    let panicked: u64 = model.iter().map(Expected::panics).sum();
    prop_assert_eq!(timer.stats().panicked, panicked, "panics caught");
    prop_assert!(
        books.runs.lock().unwrap().is_empty(),
        "nothing ran after stop()"
    );
    Ok(())
}

/// Schedules a task as `spec` says at manual time `now`, and adds its expectation.
fn add<J: hashed_timer_wheel::Stored>(
    timer: &HashedWheelTimer<J>,
    schedule: Scheduler<J>,
    books: &Arc<Books>,
    model: &mut Vec<Expected<J>>,
    now: u64,
    spec: Spec,
    delay: u64,
) -> Result<(), TestCaseError> {
    let id = model.len();
    books.drops.lock().unwrap().push(0);
    let guard = Guard {
        books: Arc::clone(books),
        id,
        panics: spec.panics_in_drop,
    };
    let handle = schedule(timer, guard, spec, Duration::from_nanos(delay))
        .map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;
    model.push(Expected {
        handle,
        spec,
        fire_tick: ((now + delay) / T).max(now / T),
        fired: false,
        cancelled: false,
        cancel_processed: false,
    });
    Ok(())
}

fn check<J: hashed_timer_wheel::Stored>(
    timer: &HashedWheelTimer<J>,
    books: &Books,
    model: &[Expected<J>],
    after: &Op,
) -> Result<(), TestCaseError> {
    let drops = books.drops.lock().unwrap();
    for (id, e) in model.iter().enumerate() {
        let dropped = drops[id];
        if e.fired || e.cancel_processed {
            prop_assert_eq!(dropped, 1, "task {} ({:?}) after {:?}", id, e.spec, after);
        } else if !e.cancelled {
            prop_assert_eq!(
                dropped,
                0,
                "task {} ({:?}) dropped while pending",
                id,
                e.spec
            );
        } else {
            prop_assert!(dropped <= 1, "task {} dropped twice", id);
        }
        if let Some(handle) = &e.handle {
            prop_assert_eq!(handle.is_expired(), e.fired, "task {}", id);
            prop_assert_eq!(handle.is_cancelled(), e.cancelled, "task {}", id);
        }
    }
    let stats: TimerStats = timer.stats();
    let fired = model.iter().filter(|e| e.fired).count() as u64;
    let processed = model.iter().filter(|e| e.cancel_processed).count() as u64;
    let panicked: u64 = model
        .iter()
        .filter(|e| e.fired || e.cancel_processed)
        .map(Expected::panics)
        .sum();
    prop_assert_eq!(stats.expired, fired, "expired, after {:?}", after);
    prop_assert_eq!(stats.cancelled, processed, "cancelled, after {:?}", after);
    prop_assert_eq!(stats.panicked, panicked, "panicked, after {:?}", after);
    let pending = model.iter().filter(|e| e.pending()).count();
    prop_assert_eq!(
        timer.pending_timeouts(),
        pending,
        "pending, after {:?}",
        after
    );
    Ok(())
}

fn manual() -> hashed_timer_wheel::Builder {
    HashedWheelTimer::builder()
        .tick_duration(Duration::from_nanos(T))
        .ticks_per_wheel(8)
}

proptest! {
    #![proptest_config(common::model_config(256))]

    /// Closures stored in place and boxed, with and without a handle, some panicking when run
    /// or dropped: each runs once on its tick with its own payload, or is dropped once, unrun.
    #[test]
    fn boxed_tasks_run_once_on_their_own_data(ops in proptest::collection::vec(op(), 1..60)) {
        run(manual().build_manual().unwrap(), schedule_boxed, ops)?;
    }

    /// As for boxed tasks, on typed timers whose tasks are 32, 48 and 160 bytes.
    #[test]
    fn typed_tasks_run_once_on_their_own_data(
        size in 0..3u8,
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        assert_eq!([size_of::<Job<0>>(), size_of::<Job<2>>(), size_of::<Job<16>>()], [32, 48, 160]);
        match size {
            0 => run(manual().build_manual_typed().unwrap(), schedule_typed::<0>, ops)?,
            1 => run(manual().build_manual_typed().unwrap(), schedule_typed::<2>, ops)?,
            _ => run(manual().build_manual_typed().unwrap(), schedule_typed::<16>, ops)?,
        }
    }
}
