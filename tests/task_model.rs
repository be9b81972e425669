//! Model-based test of the forms a task takes, on the manual driver: timeouts of tasks small
//! enough to be stored in place and too big for it, with and without a handle, some that panic
//! when run or when dropped, on the boxed timer and on typed timers of three sizes, run by the
//! worker or handed to an executor that queues them (or panics); random schedules, cancels,
//! advances and executor steps, checked step by step against `tests/model.rs`' arithmetic
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
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The tick length in nanoseconds.
const T: u64 = 1_000_000;

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
    /// Runs the executor's queued jobs, in order (nothing without an executor).
    RunJobs,
    /// Drops the executor's queued jobs unrun, as a full pool may.
    DropJobs,
    /// Whether the executor panics (and drops its job) from now on.
    ExecutorPanics(bool),
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
        6 => (spec(), common::near_ticks(T, 20)).prop_map(|(s, d)| Op::Schedule(s, d)),
        1 => (spec(), common::near_ticks(T, 5_000)).prop_map(|(s, d)| Op::Schedule(s, d)),
        1 => (1..200usize, common::near_ticks(T, 20), any::<u64>())
            .prop_map(|(n, delay, seed)| Op::Burst { n, delay, seed }),
        3 => any::<usize>().prop_map(Op::Cancel),
        4 => common::near_ticks(T, 3).prop_map(Op::Advance),
        1 => common::near_ticks(T, 40).prop_map(Op::Advance),
        1 => common::near_ticks(T, 3_000).prop_map(Op::Advance),
        2 => Just(Op::RunJobs),
        1 => Just(Op::DropJobs),
        1 => any::<bool>().prop_map(Op::ExecutorPanics),
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
            std::panic::panic_any(common::BY_DESIGN);
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
            std::panic::panic_any(common::BY_DESIGN);
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
                std::panic::panic_any(common::BY_DESIGN);
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

/// What became of a timeout that fired.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fate {
    Ran,
    /// Waits in the executor's queue.
    Queued,
    /// Dropped unrun by the executor.
    Dropped,
    /// The executor panicked, dropping it as it unwound.
    ExecutorPanicked,
}

/// What the model knows about one timeout.
struct Expected<J: hashed_timer_wheel::Stored> {
    handle: Option<Timeout<J>>,
    spec: Spec,
    fire_tick: u64,
    fate: Option<Fate>,
    cancelled: bool,
    cancel_processed: bool,
}

impl<J: hashed_timer_wheel::Stored> Expected<J> {
    fn fired(&self) -> bool {
        self.fate.is_some()
    }

    fn pending(&self) -> bool {
        !(self.fired() || self.cancelled && self.cancel_processed)
    }

    /// Panics the timer has caught for this timeout: its run's, its drop's once dropped (not
    /// while an executor unwinds: the guard does not panic then), an executor's.
    fn panics(&self) -> u64 {
        let drop = u64::from(self.spec.panics_in_drop);
        match self.fate {
            Some(Fate::Ran) => u64::from(self.spec.panics_in_run) | drop,
            Some(Fate::Queued) => 0,
            Some(Fate::Dropped) => drop,
            Some(Fate::ExecutorPanicked) => 1,
            None if self.cancel_processed => drop,
            None => 0,
        }
    }

    /// Whether its task has been dropped (run or not), as far as the model knows for sure.
    fn dropped(&self) -> Option<bool> {
        match self.fate {
            Some(Fate::Queued) => Some(false),
            Some(_) => Some(true),
            None if self.cancel_processed => Some(true),
            None if self.cancelled => None, // dropped by the cancel or by the worker
            None => Some(false),
        }
    }
}

type ExecutorJob = Box<dyn FnOnce() + Send>;

/// An executor that queues its jobs for the test, or panics (dropping the job) when told to.
#[derive(Clone, Default)]
struct Executor {
    jobs: Arc<Mutex<VecDeque<ExecutorJob>>>,
    panics: Arc<AtomicBool>,
}

impl Executor {
    fn execute(&self, job: ExecutorJob) {
        if self.panics.load(SeqCst) {
            std::panic::panic_any(common::BY_DESIGN);
        }
        self.jobs.lock().unwrap().push_back(job);
    }
}

struct Model<J: hashed_timer_wheel::Stored> {
    timer: HashedWheelTimer<J>,
    driver: ManualDriver<J>,
    schedule: Scheduler<J>,
    executor: Option<Executor>,
    books: Arc<Books>,
    timeouts: Vec<Expected<J>>,
    /// The queued timeouts, in the order they fired.
    queue: VecDeque<usize>,
    now: u64,
}

impl<J: hashed_timer_wheel::Stored> Model<J> {
    /// Schedules a task as `spec` says, and adds its expectation.
    fn add(&mut self, spec: Spec, delay: u64) -> Result<(), TestCaseError> {
        let id = self.timeouts.len();
        self.books.drops.lock().unwrap().push(0);
        let guard = Guard {
            books: Arc::clone(&self.books),
            id,
            panics: spec.panics_in_drop,
        };
        let handle = (self.schedule)(&self.timer, guard, spec, Duration::from_nanos(delay))
            .map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;
        let now = self.now;
        self.timeouts.push(Expected {
            handle,
            spec,
            fire_tick: ((now + delay) / T).max(now / T),
            fate: None,
            cancelled: false,
            cancel_processed: false,
        });
        Ok(())
    }

    fn cancel(&mut self, i: usize) -> Result<(), TestCaseError> {
        let Some(e) = self.timeouts.get_mut(i) else {
            return Ok(());
        };
        if let Some(handle) = &e.handle {
            let wins = !e.fired() && !e.cancelled;
            prop_assert_eq!(handle.cancel(), wins, "cancel of {}", i);
            e.cancelled |= wins;
        }
        Ok(())
    }

    fn advance(&mut self, by: u64) -> Result<(), TestCaseError> {
        let to = self.now + by;
        let (first, end) = (self.now / T, to / T);
        let mut fired = Vec::new();
        if end > first {
            for (id, e) in self.timeouts.iter_mut().enumerate() {
                if !e.fired() && !e.cancelled && e.fire_tick < end {
                    prop_assert!(e.fire_tick >= first, "the model missed {}", id);
                    fired.push((e.fire_tick, id));
                }
                e.cancel_processed |= e.cancelled;
            }
        }
        fired.sort_unstable();
        let executor_panics = self.executor.as_ref().map(|e| e.panics.load(SeqCst));
        let mut expected = Vec::new();
        for &(tick, id) in &fired {
            self.timeouts[id].fate = Some(match executor_panics {
                None => {
                    expected.push((id, tick, true));
                    Fate::Ran
                }
                Some(false) => {
                    self.queue.push_back(id);
                    Fate::Queued
                }
                Some(true) => Fate::ExecutorPanicked,
            });
        }
        self.driver.advance(Duration::from_nanos(by));
        self.now = to;
        let ran = std::mem::take(&mut *self.books.runs.lock().unwrap());
        prop_assert_eq!(ran, expected, "advance to {} ns", self.now);
        Ok(())
    }

    /// Runs or drops the executor's queue (outside its lock: a job may schedule).
    fn take_jobs(&mut self, run: bool) -> Result<(), TestCaseError> {
        let Some(executor) = &self.executor else {
            return Ok(());
        };
        let jobs = std::mem::take(&mut *executor.jobs.lock().unwrap());
        let mut expected = Vec::new();
        for id in self.queue.drain(..) {
            self.timeouts[id].fate = Some(if run { Fate::Ran } else { Fate::Dropped });
            expected.push((id, self.now / T, true));
        }
        for job in jobs {
            if run {
                job();
            }
        }
        if !run {
            expected.clear();
        }
        let ran = std::mem::take(&mut *self.books.runs.lock().unwrap());
        prop_assert_eq!(ran, expected, "jobs run at {} ns", self.now);
        Ok(())
    }

    fn check(&self, after: &Op) -> Result<(), TestCaseError> {
        let drops = self.books.drops.lock().unwrap();
        for (id, e) in self.timeouts.iter().enumerate() {
            let dropped = drops[id];
            match e.dropped() {
                Some(true) => prop_assert_eq!(
                    dropped,
                    1,
                    "task {} {:?} {:?} after {:?}",
                    id,
                    e.spec,
                    e.fate,
                    after
                ),
                Some(false) => {
                    prop_assert_eq!(dropped, 0, "task {} {:?} dropped while pending", id, e.spec)
                }
                None => prop_assert!(dropped <= 1, "task {} dropped twice", id),
            }
            if let Some(handle) = &e.handle {
                prop_assert_eq!(handle.is_expired(), e.fired(), "task {}", id);
                prop_assert_eq!(handle.is_cancelled(), e.cancelled, "task {}", id);
            }
        }
        let stats: TimerStats = self.timer.stats();
        let count =
            |f: &dyn Fn(&Expected<J>) -> bool| self.timeouts.iter().filter(|e| f(e)).count();
        let panicked: u64 = self.timeouts.iter().map(Expected::panics).sum();
        prop_assert_eq!(
            stats.expired,
            count(&|e| e.fired()) as u64,
            "expired, after {:?}",
            after
        );
        prop_assert_eq!(
            stats.cancelled,
            count(&|e| e.cancel_processed) as u64,
            "cancelled, after {:?}",
            after
        );
        prop_assert_eq!(stats.panicked, panicked, "panicked, after {:?}", after);
        prop_assert_eq!(
            self.timer.pending_timeouts(),
            count(&|e| e.pending()),
            "pending, after {:?}",
            after
        );
        Ok(())
    }

    /// Stops the timer, then runs what the executor still holds: every task is dropped once.
    fn finish(mut self) -> Result<(), TestCaseError> {
        let returned = self.timer.stop().unwrap();
        let never_ended = self
            .timeouts
            .iter()
            .filter(|e| !e.fired() && !e.cancelled)
            .count();
        prop_assert_eq!(returned.len(), never_ended, "stop() returns what never ran");
        prop_assert!(returned.iter().all(Timeout::is_cancelled));
        drop(returned);
        for e in self.timeouts.iter_mut().filter(|e| !e.fired()) {
            e.cancelled = true;
            e.cancel_processed = true;
        }
        // A job queued before the stop still runs; its tick is not the model's to say.
        let queued: Vec<usize> = self.queue.iter().copied().collect();
        if let Some(executor) = &self.executor {
            let jobs = std::mem::take(&mut *executor.jobs.lock().unwrap());
            jobs.into_iter().for_each(|job| job());
        }
        for &id in &queued {
            self.timeouts[id].fate = Some(Fate::Ran);
        }
        let ran: Vec<(usize, bool)> = self
            .books
            .runs
            .lock()
            .unwrap()
            .drain(..)
            .map(|(id, _, intact)| (id, intact))
            .collect();
        let expected: Vec<(usize, bool)> = queued.iter().map(|&id| (id, true)).collect();
        prop_assert_eq!(ran, expected, "the queued jobs ran after stop()");
        let drops = self.books.drops.lock().unwrap().clone();
        prop_assert!(
            drops.iter().all(|&d| d == 1),
            "every task dropped once: {:?}",
            drops
        );
        let panicked: u64 = self.timeouts.iter().map(Expected::panics).sum();
        prop_assert_eq!(self.timer.stats().panicked, panicked, "panics caught");
        Ok(())
    }
}

fn run<J: hashed_timer_wheel::Stored>(
    builder: hashed_timer_wheel::Builder,
    build: fn(hashed_timer_wheel::Builder) -> (HashedWheelTimer<J>, ManualDriver<J>),
    schedule: Scheduler<J>,
    on_executor: bool,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    common::quiet_by_design_panics();
    let executor = on_executor.then(Executor::default);
    let builder = match &executor {
        Some(executor) => {
            let executor = executor.clone();
            builder.executor(move |job: ExecutorJob| executor.execute(job))
        }
        None => builder,
    };
    let (timer, driver) = build(builder);
    let d = driver.clone();
    let books = Arc::new(Books {
        runs: Mutex::default(),
        drops: Mutex::default(),
        current_tick: Box::new(move || d.current_tick()),
    });
    let mut model = Model {
        timer,
        driver,
        schedule,
        executor,
        books,
        timeouts: Vec::new(),
        queue: VecDeque::new(),
        now: 0,
    };
    for op in &ops {
        match *op {
            Op::Schedule(spec, delay) => model.add(spec, delay)?,
            Op::Burst { n, delay, seed } => {
                for i in 0..n {
                    let bits = seed.rotate_left(7 * i as u32) as u16;
                    model.add(spec_of(bits), delay)?;
                }
            }
            Op::Cancel(i) => model.cancel(i % model.timeouts.len().max(1))?,
            Op::Advance(by) => model.advance(by)?,
            Op::RunJobs => model.take_jobs(true)?,
            Op::DropJobs => model.take_jobs(false)?,
            Op::ExecutorPanics(panics) => {
                if let Some(executor) = &model.executor {
                    executor.panics.store(panics, SeqCst);
                }
            }
        }
        model.check(op)?;
    }
    model.finish()
}

fn manual() -> hashed_timer_wheel::Builder {
    HashedWheelTimer::builder()
        .tick_duration(Duration::from_nanos(T))
        .ticks_per_wheel(8)
}

fn boxed(builder: hashed_timer_wheel::Builder) -> (HashedWheelTimer, ManualDriver) {
    builder.build_manual().unwrap()
}

fn typed<J: TypedTask>(
    builder: hashed_timer_wheel::Builder,
) -> (HashedWheelTimer<J>, ManualDriver<J>) {
    builder.build_manual_typed().unwrap()
}

proptest! {
    #![proptest_config(common::model_config(256))]

    /// Closures stored in place and boxed, with and without a handle, some panicking when run
    /// or dropped, on the worker or an executor: each runs once, on its tick or when the
    /// executor runs it, with its own payload, or is dropped once, unrun.
    #[test]
    fn boxed_tasks_run_once_on_their_own_data(
        on_executor in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        run(manual(), boxed, schedule_boxed, on_executor, ops)?;
    }

    /// As for boxed tasks, on typed timers whose tasks are 32, 48 and 160 bytes.
    #[test]
    fn typed_tasks_run_once_on_their_own_data(
        size in 0..3u8,
        on_executor in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        assert_eq!([size_of::<Job<0>>(), size_of::<Job<2>>(), size_of::<Job<16>>()], [32, 48, 160]);
        match size {
            0 => run(manual(), typed, schedule_typed::<0>, on_executor, ops)?,
            1 => run(manual(), typed, schedule_typed::<2>, on_executor, ops)?,
            _ => run(manual(), typed, schedule_typed::<16>, on_executor, ops)?,
        }
    }
}
