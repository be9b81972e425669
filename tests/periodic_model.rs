//! Model-based test of periodic tasks on the manual driver: up to three schedules (fixed rate
//! under each `MissedRuns` policy, fixed delay) made, cancelled, ended by their own run, by a
//! panic or by an executor that drops their run, under random advances of the clock, checked
//! run by run against the rules that `MissedRuns` states. Half the cases run on the worker,
//! half on an executor that queues the runs until the test runs or drops them.
//!
//! An advance moves the clock to `F` first, then the worker takes the ticks that have ended,
//! in order. A run on the worker therefore reads `F` as its now. A run due at `d`, scheduled
//! when the worker's next tick is `k`, fires on tick `max(d / T, k)`: a run scheduled by the
//! run on tick `k` waits for tick `k + 1` at the earliest (one run a tick). A run on the
//! executor starts, counts and chooses its successor when the test runs it.

mod common;

use hashed_timer_wheel::{HashedWheelTimer, ManualDriver, MissedRuns, PeriodicTimeout};
use proptest::prelude::*;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The tick length in nanoseconds.
const T: u64 = 1_000_000;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Rate(u64, MissedRuns),
    Delay(u64),
}

#[derive(Debug, Clone)]
enum Op {
    /// A schedule, its first run this long from now; it cancels itself in its run `cancel_at`
    /// or panics in its run `panic_at`, if either comes.
    Create {
        kind: Kind,
        initial: u64,
        cancel_at: u64,
        panic_at: u64,
    },
    /// `cancel()` on the schedule at this index (modulo how many there are).
    Cancel(usize),
    /// Moves the clock by this many nanoseconds.
    Advance(u64),
    /// Runs the executor's queued runs, in order (none without an executor).
    RunJobs,
    /// Drops the executor's queued runs unrun, as a full pool may.
    DropJobs,
}

fn kind() -> impl Strategy<Value = Kind> {
    let period = || common::near_ticks(T, 4).prop_map(|p| p.max(1));
    let missed = prop_oneof![
        Just(MissedRuns::Burst),
        Just(MissedRuns::Skip),
        Just(MissedRuns::Delay)
    ];
    prop_oneof![
        3 => (period(), missed).prop_map(|(p, m)| Kind::Rate(p, m)),
        1 => period().prop_map(Kind::Delay),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (kind(), common::near_ticks(T, 6), 1..40u64, 1..60u64).prop_map(
            |(kind, initial, cancel_at, panic_at)| Op::Create { kind, initial, cancel_at, panic_at }
        ),
        1 => (0..3usize).prop_map(Op::Cancel),
        5 => common::near_ticks(T, 3).prop_map(Op::Advance),
        2 => common::near_ticks(T, 25).prop_map(Op::Advance),
        3 => Just(Op::RunJobs),
        1 => Just(Op::DropJobs),
    ]
}

/// One schedule as the model sees it.
struct Schedule {
    kind: Kind,
    handle: PeriodicTimeout,
    /// The (tick, now, whether its `cancel()` cancelled) of each run, as the run recorded it.
    seen: Arc<Mutex<Vec<(u64, u64, bool)>>>,
    expected: Vec<(u64, u64, bool)>,
    /// The pending run's deadline and tick, while the schedule goes on.
    due: u64,
    fire_tick: u64,
    /// Its run has fired and waits in the executor's queue.
    queued: bool,
    active: bool,
    cancel_at: u64,
    panic_at: u64,
}

impl Schedule {
    /// The deadline after a run due at `due` that returned at `now` (`MissedRuns`' rules).
    fn next(&self, now: u64) -> u64 {
        let due = self.due;
        match self.kind {
            Kind::Delay(delay) => now + delay,
            Kind::Rate(period, missed) => {
                let horizon = now.saturating_sub(T);
                if due + period > horizon {
                    return due + period;
                }
                match missed {
                    MissedRuns::Skip => due + ((horizon - due) / period + 1) * period,
                    MissedRuns::Delay => now + period,
                    _ => due + period,
                }
            }
        }
    }

    /// Runs the pending run at `now`, the worker's tick then being `tick`: the successor fires
    /// on `earliest` at the earliest. The successor of a run after `stop()` is refused.
    fn run(&mut self, tick: u64, now: u64, earliest: u64, stopped: bool) {
        let runs = self.expected.len() as u64 + 1;
        self.expected.push((tick, now, runs == self.cancel_at));
        if runs == self.cancel_at || runs == self.panic_at || stopped {
            self.active = false; // its own timeout has fired: nothing left to cancel
            return;
        }
        self.due = self.next(now);
        self.fire_tick = (self.due / T).max(earliest);
    }
}

type Job = Box<dyn FnOnce() + Send>;

struct Model {
    timer: HashedWheelTimer,
    driver: ManualDriver,
    /// The executor's queue, if the timer has one.
    jobs: Option<Arc<Mutex<VecDeque<Job>>>>,
    stopped: bool,
    schedules: Vec<Schedule>,
    now: u64,
    /// Cancelled timeouts the worker has not yet seen.
    unprocessed_cancels: usize,
}

impl Model {
    fn create(&mut self, kind: Kind, initial: u64, cancel_at: u64, panic_at: u64) {
        let seen: Arc<Mutex<Vec<(u64, u64, bool)>>> = Arc::default();
        let (s, d) = (Arc::clone(&seen), self.driver.clone());
        let task = move |p: &PeriodicTimeout| {
            let runs = p.runs();
            let cancelled = runs == cancel_at && p.cancel();
            let now = u64::try_from(d.now().as_nanos()).unwrap();
            s.lock().unwrap().push((d.current_tick(), now, cancelled));
            if runs == panic_at {
                std::panic::panic_any(common::BY_DESIGN);
            }
        };
        let (initial_delay, t) = (Duration::from_nanos(initial), &self.timer);
        let handle = match kind {
            Kind::Rate(p, missed) => {
                t.schedule_at_fixed_rate(task, initial_delay, Duration::from_nanos(p), missed)
            }
            Kind::Delay(d) => {
                t.schedule_with_fixed_delay(task, initial_delay, Duration::from_nanos(d))
            }
        }
        .unwrap();
        let due = self.now + initial;
        self.schedules.push(Schedule {
            kind,
            handle,
            seen,
            expected: Vec::new(),
            due,
            fire_tick: (due / T).max(self.now / T),
            queued: false,
            active: true,
            cancel_at,
            panic_at,
        });
    }

    fn advance(&mut self, by: u64) {
        let to = self.now + by;
        let ticks = self.now / T..to / T;
        if !ticks.is_empty() {
            self.unprocessed_cancels = 0;
        }
        let on_executor = self.jobs.is_some();
        for tick in ticks {
            for s in &mut self.schedules {
                if s.active && !s.queued && s.fire_tick == tick {
                    if on_executor {
                        s.queued = true;
                    } else {
                        s.run(tick, to, tick + 1, false);
                    }
                }
            }
        }
        self.driver.advance(Duration::from_nanos(by));
        self.now = to;
    }

    /// Runs (or drops) the executor's queue, outside its lock: a run schedules its successor.
    fn take_jobs(&mut self, run: bool) {
        let Some(queue) = &self.jobs else { return };
        let jobs = std::mem::take(&mut *queue.lock().unwrap());
        for job in jobs {
            if run {
                job();
            }
        }
        let (tick, now, stopped) = (self.now / T, self.now, self.stopped);
        for s in self.schedules.iter_mut().filter(|s| s.queued) {
            s.queued = false;
            if !s.active {
                continue; // cancelled while queued: the run does not start
            }
            if run {
                s.run(tick, now, tick, stopped);
            } else {
                s.active = false; // dropped unrun: the schedule ends
            }
        }
    }

    fn check(&self, after: &Op) -> Result<(), TestCaseError> {
        let mut pending = self.unprocessed_cancels;
        for (i, s) in self.schedules.iter().enumerate() {
            prop_assert!(
                s.fire_tick >= self.now / T || !s.active || s.queued,
                "the model lags"
            );
            let seen = s.seen.lock().unwrap();
            prop_assert_eq!(
                &*seen,
                &s.expected,
                "schedule {} ({:?}) after {:?}",
                i,
                s.kind,
                after
            );
            prop_assert_eq!(s.handle.runs(), s.expected.len() as u64);
            prop_assert_eq!(s.handle.is_cancelled(), !s.active, "schedule {}", i);
            pending += usize::from(s.active && !s.queued);
        }
        prop_assert_eq!(self.timer.pending_timeouts(), pending, "after {:?}", after);
        Ok(())
    }
}

fn run(on_executor: bool, ops: Vec<Op>) -> Result<(), TestCaseError> {
    common::quiet_by_design_panics();
    let mut builder = HashedWheelTimer::builder()
        .tick_duration(Duration::from_nanos(T))
        .ticks_per_wheel(16);
    let jobs = on_executor.then(Arc::<Mutex<VecDeque<Job>>>::default);
    if let Some(queue) = &jobs {
        let queue = Arc::clone(queue);
        builder = builder.executor(move |job: Job| queue.lock().unwrap().push_back(job));
    }
    let (timer, driver) = builder.build_manual().unwrap();
    let mut model = Model {
        timer,
        driver,
        jobs,
        stopped: false,
        schedules: Vec::new(),
        now: 0,
        unprocessed_cancels: 0,
    };
    for op in &ops {
        match *op {
            Op::Create {
                kind,
                initial,
                cancel_at,
                panic_at,
            } if model.schedules.len() < 3 => {
                model.create(kind, initial, cancel_at, panic_at);
            }
            Op::Create { .. } => {}
            Op::Cancel(i) if !model.schedules.is_empty() => {
                let n = model.schedules.len();
                let s = &mut model.schedules[i % n];
                prop_assert_eq!(
                    s.handle.cancel(),
                    s.active,
                    "cancel() is true once, while it goes on"
                );
                // A queued run's timeout has fired: only a pending one is cancelled.
                if std::mem::replace(&mut s.active, false) && !s.queued {
                    model.unprocessed_cancels += 1;
                }
            }
            Op::Cancel(_) => {}
            Op::Advance(by) => model.advance(by),
            Op::RunJobs => model.take_jobs(true),
            Op::DropJobs => model.take_jobs(false),
        }
        model.check(op)?;
    }
    let pending = model.schedules.iter().filter(|s| s.active && !s.queued);
    let pending = pending.count();
    let left = model.timer.stop().unwrap();
    prop_assert_eq!(left.len(), pending, "stop() returns each pending run");
    model.stopped = true;
    model.unprocessed_cancels = 0; // a stopped timer counts nothing pending
    for s in model.schedules.iter_mut().filter(|s| !s.queued) {
        s.active = false;
    }
    // A run queued before the stop still runs; its successor is refused.
    model.take_jobs(true);
    model.check(&Op::RunJobs)?;
    Ok(())
}

proptest! {
    #![proptest_config(common::model_config(256))]

    /// Schedules made, cancelled, ended by their own run or a panic, under advances of every
    /// size: each run fires on the tick the policy's deadline gives (one a tick at most), sees
    /// the advance's clock, counts, and ends as the model says; the pending count is one per
    /// schedule going on, plus each cancelled run until the worker's next tick.
    #[test]
    fn periodic_runs_fire_on_their_policys_ticks(
        on_executor in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..50),
    ) {
        run(on_executor, ops)?;
    }
}
