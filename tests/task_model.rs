//! Model-based test of the forms a task takes, on the manual driver: timeouts of tasks small
//! enough to be stored in place and too big for it, with and without a handle, some that panic
//! when run or when dropped, some that cancel another timeout or schedule a new one when they
//! run, on the boxed timer and on typed timers of three sizes, run by the worker or handed to
//! an executor that queues them (or panics); random schedules, cancels, advances and executor
//! steps, checked step by step against `tests/model.rs`' arithmetic (Netty's).
//!
//! Each task carries a payload made from its own number and checks it when it runs: a task run
//! on another's data fails the test. Each counts its drops: a task dropped twice, or never,
//! fails it. `TimerStats` must count every expiry, processed cancel and panic.
//!
//! A task that cancels a timeout due on its own tick, later in the tick's order, ends it there:
//! that one never runs. A cancel of a later timeout is processed at the start of the next tick.
//! A task on the worker that schedules reads the advance's clock, and its timeout fires a tick
//! later at the earliest.

mod common;

use hashed_timer_wheel::{
    HashedWheelTimer, ManualDriver, Stored, Timeout, TimerError, TimerHandle, TimerStats, TypedTask,
};
use proptest::prelude::*;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
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
    /// When it runs: cancels the timeout numbered `seed % (timeouts made so far)`.
    cancels: Option<u16>,
    /// When it runs: schedules a task of this delay (as it is itself, less the panics and
    /// this), after its cancel.
    schedules: Option<u64>,
}

impl Spec {
    /// What a task schedules when it runs.
    fn child(self) -> Spec {
        Spec {
            panics_in_run: false,
            panics_in_drop: false,
            schedules: None,
            ..self
        }
    }
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
    any::<u64>().prop_map(spec_of)
}

/// A spec from random bits: a big task one time in 2, detached one in 4, panicking in its run
/// or its drop one in 8 each, cancelling another one in 8, scheduling one in 8.
fn spec_of(bits: u64) -> Spec {
    Spec {
        big: bits & 1 == 0,
        detached: bits >> 1 & 3 == 0,
        panics_in_run: bits >> 3 & 7 == 0,
        panics_in_drop: bits >> 6 & 7 == 0,
        cancels: (bits >> 9 & 7 == 0).then_some((bits >> 16) as u16),
        schedules: (bits >> 12 & 7 == 0).then_some((bits >> 32) % (6 * T)),
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

/// A timeout's handle, through closures: the books hold every handle whatever the task type.
struct Hooks {
    cancel: Box<dyn Fn() -> bool + Send + Sync>,
    /// `(is_expired, is_cancelled)`.
    state: Box<dyn Fn() -> (bool, bool) + Send + Sync>,
}

fn hooks<J: Stored>(timeout: Timeout<J>) -> Arc<Hooks> {
    let t = timeout.clone();
    Arc::new(Hooks {
        cancel: Box::new(move || timeout.cancel()),
        state: Box::new(move || (t.is_expired(), t.is_cancelled())),
    })
}

/// Makes a task of a spec and schedules it on the timer with this delay.
type Schedules = Box<dyn Fn(&Arc<Books>, Spec, u64) -> Result<(), TimerError> + Send + Sync>;

/// What the tasks report and share: their runs `(id, tick, payload intact)`, their cancels
/// `(id, target, won)`, drops by id, each one's spec and handle, and how to schedule one.
struct Books {
    runs: Mutex<Vec<(usize, u64, bool)>>,
    cancels: Mutex<Vec<(usize, usize, bool)>>,
    drops: Mutex<Vec<u32>>,
    tasks: Mutex<Vec<(Spec, Option<Arc<Hooks>>)>>,
    current_tick: Box<dyn Fn() -> u64 + Send + Sync>,
    schedule: OnceLock<Schedules>,
}

impl Books {
    /// A new task's number and its guard.
    fn register(self: &Arc<Books>, spec: Spec) -> Guard {
        self.drops.lock().unwrap().push(0);
        let mut tasks = self.tasks.lock().unwrap();
        tasks.push((spec, None));
        Guard {
            books: Arc::clone(self),
            id: tasks.len() - 1,
            panics: spec.panics_in_drop,
        }
    }

    fn hooks(&self, id: usize) -> Option<Arc<Hooks>> {
        self.tasks.lock().unwrap()[id].1.clone()
    }

    /// Cancels timeout `id` through its handle: false for a detached one.
    fn cancel(&self, id: usize) -> bool {
        self.hooks(id).is_some_and(|h| (h.cancel)())
    }
}

/// Schedules a task as `spec` says on `timer`, with `schedule`, keeping its handle's hooks.
fn add<J: Stored>(
    books: &Arc<Books>,
    timer: &TimerHandle<J>,
    schedule: Scheduler<J>,
    spec: Spec,
    delay: u64,
) -> Result<(), TimerError> {
    let guard = books.register(spec);
    let id = guard.id;
    if let Some(timeout) = schedule(timer, guard, spec, Duration::from_nanos(delay))? {
        books.tasks.lock().unwrap()[id].1 = Some(hooks(timeout));
    }
    Ok(())
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
    /// Records the run, then does what the task's spec says.
    fn ran(&self, payload: &[u64]) {
        let books = &self.books;
        let intact = payload
            .iter()
            .enumerate()
            .all(|(i, &w)| w == word(self.id, i));
        let tick = (books.current_tick)();
        books.runs.lock().unwrap().push((self.id, tick, intact));
        let (spec, made) = {
            let tasks = books.tasks.lock().unwrap();
            (tasks[self.id].0, tasks.len())
        };
        if let Some(seed) = spec.cancels {
            let target = usize::from(seed) % made;
            let won = books.cancel(target);
            books.cancels.lock().unwrap().push((self.id, target, won));
        }
        if let Some(delay) = spec.schedules {
            // Refused after `stop()`: the task is dropped, which the books count.
            let _ = (books.schedule.get().unwrap())(books, spec.child(), delay);
        }
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
    fn(&TimerHandle<J>, Guard, Spec, Duration) -> Result<Option<Timeout<J>>, TimerError>;

fn schedule_boxed(
    timer: &TimerHandle,
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
    timer: &TimerHandle<Job<N>>,
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
struct Expected {
    spec: Spec,
    fire_tick: u64,
    fate: Option<Fate>,
    cancelled: bool,
    /// The first tick whose start processes the cancel.
    cancel_from: u64,
    cancel_processed: bool,
}

impl Expected {
    fn new(spec: Spec, fire_tick: u64) -> Expected {
        Expected {
            spec,
            fire_tick,
            fate: None,
            cancelled: false,
            cancel_from: 0,
            cancel_processed: false,
        }
    }

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

/// Where a task runs: on the worker, in the turn of tick `tick` that an advance to `now`
/// runs, or on the executor at `now`.
#[derive(Clone, Copy)]
enum Place {
    Worker { tick: u64, now: u64 },
    Executor { now: u64 },
}

struct Model<J: Stored> {
    timer: HashedWheelTimer<J>,
    driver: ManualDriver<J>,
    schedule: Scheduler<J>,
    executor: Option<Executor>,
    books: Arc<Books>,
    timeouts: Vec<Expected>,
    /// The queued timeouts, in the order they fired.
    queue: VecDeque<usize>,
    /// What the tasks should have recorded since the last look.
    runs: Vec<(usize, u64, bool)>,
    cancels: Vec<(usize, usize, bool)>,
    now: u64,
    stopped: bool,
}

impl<J: Stored> Model<J> {
    /// Schedules a task as `spec` says, and adds its expectation.
    fn add(&mut self, spec: Spec, delay: u64) -> Result<(), TestCaseError> {
        add(
            &self.books,
            &self.timer.handle(),
            self.schedule,
            spec,
            delay,
        )
        .map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;
        let now = self.now;
        let fire_tick = ((now + delay) / T).max(now / T);
        self.timeouts.push(Expected::new(spec, fire_tick));
        Ok(())
    }

    /// A cancel of timeout `target`, processed at the start of tick `from`: whether it wins.
    fn cancel_in_model(&mut self, target: usize, from: u64) -> bool {
        let t = &mut self.timeouts[target];
        let wins = !t.spec.detached && !t.fired() && !t.cancelled;
        if wins {
            t.cancelled = true;
            t.cancel_from = from;
        }
        wins
    }

    fn cancel(&mut self, i: usize) -> Result<(), TestCaseError> {
        if i >= self.timeouts.len() {
            return Ok(());
        }
        let wins = self.cancel_in_model(i, self.now / T);
        prop_assert_eq!(self.books.cancel(i), wins, "cancel of {}", i);
        Ok(())
    }

    /// Runs timeout `id`'s task in the model.
    fn run(&mut self, id: usize, place: Place) {
        self.timeouts[id].fate = Some(Fate::Ran);
        let (recorded_tick, now, next_tick) = match place {
            Place::Worker { tick, now } => (tick, now, tick + 1),
            Place::Executor { now } => (now / T, now, now / T),
        };
        self.runs.push((id, recorded_tick, true));
        let spec = self.timeouts[id].spec;
        if let Some(seed) = spec.cancels {
            let target = usize::from(seed) % self.timeouts.len();
            let wins = self.cancel_in_model(target, next_tick);
            if let (true, Place::Worker { tick, .. }) = (wins, place) {
                // Due on this tick, later in its order: it ends when the walk reaches it.
                let t = &mut self.timeouts[target];
                t.cancel_processed |= t.fire_tick == tick;
            }
            self.cancels.push((id, target, wins));
        }
        if let Some(delay) = spec.schedules {
            let fire_tick = ((now + delay) / T).max(next_tick);
            let mut child = Expected::new(spec.child(), fire_tick);
            if self.stopped {
                // Refused: dropped at once, never counted.
                child.cancelled = true;
                child.cancel_processed = true;
            }
            self.timeouts.push(child);
        }
    }

    fn advance(&mut self, by: u64) -> Result<(), TestCaseError> {
        let to = self.now + by;
        let executor_panics = self.executor.as_ref().map(|e| e.panics.load(SeqCst));
        for tick in self.now / T..to / T {
            for t in &mut self.timeouts {
                t.cancel_processed |= t.cancelled && t.cancel_from <= tick;
            }
            // In the order they were made; those made now fire on a later tick.
            for id in 0..self.timeouts.len() {
                let t = &self.timeouts[id];
                if t.fired() || t.cancelled || t.fire_tick != tick {
                    continue;
                }
                prop_assert!(t.fire_tick >= self.now / T, "the model missed {}", id);
                match executor_panics {
                    None => self.run(id, Place::Worker { tick, now: to }),
                    Some(false) => {
                        self.timeouts[id].fate = Some(Fate::Queued);
                        self.queue.push_back(id);
                    }
                    Some(true) => self.timeouts[id].fate = Some(Fate::ExecutorPanicked),
                }
            }
        }
        self.driver.advance(Duration::from_nanos(by));
        self.now = to;
        self.compare_records(&format!("advance to {} ns", self.now))
    }

    fn compare_records(&mut self, at: &str) -> Result<(), TestCaseError> {
        let ran = std::mem::take(&mut *self.books.runs.lock().unwrap());
        prop_assert_eq!(ran, std::mem::take(&mut self.runs), "runs: {}", at);
        let cancels = std::mem::take(&mut *self.books.cancels.lock().unwrap());
        prop_assert_eq!(
            cancels,
            std::mem::take(&mut self.cancels),
            "cancels: {}",
            at
        );
        Ok(())
    }

    /// Runs or drops the executor's queue (outside its lock: a job may schedule).
    fn take_jobs(&mut self, run: bool) -> Result<(), TestCaseError> {
        let Some(executor) = &self.executor else {
            return Ok(());
        };
        let jobs = std::mem::take(&mut *executor.jobs.lock().unwrap());
        for job in jobs {
            if run {
                job();
            }
        }
        let now = self.now;
        while let Some(id) = self.queue.pop_front() {
            if run {
                self.run(id, Place::Executor { now });
            } else {
                self.timeouts[id].fate = Some(Fate::Dropped);
            }
        }
        self.compare_records(&format!("jobs run at {now} ns"))
    }

    fn check(&self, after: &Op) -> Result<(), TestCaseError> {
        prop_assert_eq!(self.books.tasks.lock().unwrap().len(), self.timeouts.len());
        let drops = self.books.drops.lock().unwrap().clone();
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
            if let Some(hooks) = self.books.hooks(id) {
                let state = (hooks.state)();
                prop_assert_eq!(
                    state,
                    (e.fired(), e.cancelled),
                    "task {} (expired, cancelled)",
                    id
                );
            }
        }
        let stats: TimerStats = self.timer.stats();
        let count = |f: &dyn Fn(&Expected) -> bool| self.timeouts.iter().filter(|e| f(e)).count();
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

    /// Stops the timer, drops the tasks it returns (each on its own: a drop may panic), then
    /// runs what the executor still holds: every task is dropped once.
    fn finish(mut self) -> Result<(), TestCaseError> {
        let returned = self.timer.stop().unwrap();
        let never_ended = self
            .timeouts
            .iter()
            .filter(|e| !e.fired() && !e.cancelled)
            .count();
        prop_assert_eq!(returned.len(), never_ended, "stop() returns what never ran");
        prop_assert!(returned.iter().all(|never_ran| never_ran.is_cancelled()));
        let dropped_here = returned
            .into_iter()
            .map(|never_ran| catch_unwind(AssertUnwindSafe(|| drop(never_ran))))
            .filter(Result::is_err)
            .count() as u64;
        self.stopped = true;
        for e in self.timeouts.iter_mut().filter(|e| !e.fired()) {
            e.cancelled = true;
            e.cancel_processed = true;
        }
        // A job queued before the stop still runs; its tasks' cancels find everything ended,
        // and what it schedules is refused.
        self.take_jobs(true)?;
        let drops = self.books.drops.lock().unwrap().clone();
        prop_assert!(
            drops.iter().all(|&d| d == 1),
            "every task dropped once: {:?}",
            drops
        );
        let panicked: u64 = self.timeouts.iter().map(Expected::panics).sum();
        prop_assert_eq!(
            self.timer.stats().panicked,
            panicked - dropped_here,
            "panics caught (less the drops of what stop() returned)"
        );
        Ok(())
    }
}

fn run<J: Stored>(
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
        cancels: Mutex::default(),
        drops: Mutex::default(),
        tasks: Mutex::default(),
        current_tick: Box::new(move || d.current_tick()),
        schedule: OnceLock::new(),
    });
    let handle = timer.handle();
    let schedules: Schedules =
        Box::new(move |books, spec, delay| add(books, &handle, schedule, spec, delay));
    let _ = books.schedule.set(schedules);
    let mut model = Model {
        timer,
        driver,
        schedule,
        executor,
        books,
        timeouts: Vec::new(),
        queue: VecDeque::new(),
        runs: Vec::new(),
        cancels: Vec::new(),
        now: 0,
        stopped: false,
    };
    for op in &ops {
        match *op {
            Op::Schedule(spec, delay) => model.add(spec, delay)?,
            Op::Burst { n, delay, seed } => {
                for i in 0..n {
                    let bits = seed.rotate_left(7 * i as u32);
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
    /// or dropped, some cancelling or scheduling, on the worker or an executor: each runs once,
    /// on its tick or when the executor runs it, with its own payload, or is dropped once,
    /// unrun.
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
