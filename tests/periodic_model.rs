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
//!
//! With a pending limit, other timeouts made and cancelled fill it: a first run is refused
//! exactly at the limit, and a successor refused there ends its schedule. Timeouts of one tick
//! fire in the order they were made, each ended before the next runs: the model keeps that
//! order, which decides who finds room.

mod common;

use hashed_timer_wheel::{
    HashedWheelTimer, ManualDriver, MissedRuns, PeriodicTimeout, Timeout, TimerError,
};
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
    /// Another timeout, of this delay, on the same timer (it fills the pending limit).
    AddOther(u64),
    /// Cancels the other timeout at this index (modulo how many were made).
    CancelOther(usize),
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

/// As [`op`], with other timeouts that fill a pending limit and free it.
fn limited_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => op(),
        2 => common::near_ticks(T, 8).prop_map(Op::AddOther),
        2 => any::<usize>().prop_map(Op::CancelOther),
    ]
}

/// Where a schedule's next run is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Next {
    /// A timeout due at `due`, firing on tick `fire_tick`, the `seq`th the timer accepted.
    Pending { due: u64, fire_tick: u64, seq: u64 },
    /// Fired, in the executor's queue: the run due at `due`.
    Queued { due: u64 },
    /// None: the schedule has ended.
    Ended,
}

/// One schedule as the model sees it.
struct Schedule {
    kind: Kind,
    handle: PeriodicTimeout,
    /// The (tick, now, whether its `cancel()` cancelled) of each run, as the run recorded it.
    seen: Arc<Mutex<Vec<(u64, u64, bool)>>>,
    expected: Vec<(u64, u64, bool)>,
    next: Next,
    /// Not cancelled nor ended (a queued run's schedule may be cancelled before it starts).
    active: bool,
    cancel_at: u64,
    panic_at: u64,
}

impl Schedule {
    /// The deadline after a run due at `due` that returned at `now` (`MissedRuns`' rules).
    fn after(&self, due: u64, now: u64) -> u64 {
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
}

/// Another timeout on the timer.
struct Other {
    handle: Timeout,
    fire_tick: u64,
    seq: u64,
    fired: bool,
    cancelled: bool,
    cancel_processed: bool,
}

type Job = Box<dyn FnOnce() + Send>;

struct Model {
    timer: HashedWheelTimer,
    driver: ManualDriver,
    limit: Option<usize>,
    /// The executor's queue, if the timer has one, and the schedules whose runs it holds.
    jobs: Option<Arc<Mutex<VecDeque<Job>>>>,
    queued: VecDeque<usize>,
    stopped: bool,
    schedules: Vec<Schedule>,
    others: Vec<Other>,
    now: u64,
    /// Timeouts accepted so far: the order of those that share a tick.
    seq: u64,
    /// Cancelled runs the worker has not yet seen.
    unprocessed_cancels: usize,
}

impl Model {
    fn pending(&self) -> usize {
        let runs = self
            .schedules
            .iter()
            .filter(|s| matches!(s.next, Next::Pending { .. }));
        let others = self
            .others
            .iter()
            .filter(|o| !o.fired && !o.cancel_processed);
        runs.count() + others.count() + self.unprocessed_cancels
    }

    /// The refusal a timeout made now would meet, if any.
    fn refusal(&self) -> Option<TimerError> {
        let pending = self.pending();
        let max = self.limit.filter(|&max| pending >= max)?;
        Some(TimerError::TooManyPending { pending, max })
    }

    /// A timeout due at `due`, made now, firing on `earliest` at the earliest.
    fn accept(&mut self, due: u64, earliest: u64) -> Next {
        self.seq += 1;
        Next::Pending {
            due,
            fire_tick: (due / T).max(earliest),
            seq: self.seq,
        }
    }

    fn create(
        &mut self,
        kind: Kind,
        initial: u64,
        cancel_at: u64,
        panic_at: u64,
    ) -> Result<(), TestCaseError> {
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
        let made = match kind {
            Kind::Rate(p, missed) => {
                t.schedule_at_fixed_rate(task, initial_delay, Duration::from_nanos(p), missed)
            }
            Kind::Delay(d) => {
                t.schedule_with_fixed_delay(task, initial_delay, Duration::from_nanos(d))
            }
        };
        if let Some(refusal) = self.refusal() {
            prop_assert_eq!(made.err(), Some(refusal), "the first run at the limit");
            return Ok(());
        }
        let handle = made.map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;
        let next = self.accept(self.now + initial, self.now / T);
        self.schedules.push(Schedule {
            kind,
            handle,
            seen,
            expected: Vec::new(),
            next,
            active: true,
            cancel_at,
            panic_at,
        });
        Ok(())
    }

    fn add_other(&mut self, delay: u64) -> Result<(), TestCaseError> {
        let made = self
            .timer
            .new_timeout(common::noop, Duration::from_nanos(delay));
        if let Some(refusal) = self.refusal() {
            prop_assert_eq!(made.err(), Some(refusal), "another timeout at the limit");
            return Ok(());
        }
        let handle = made.map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;
        let Next::Pending { fire_tick, seq, .. } = self.accept(self.now + delay, self.now / T)
        else {
            unreachable!()
        };
        self.others.push(Other {
            handle,
            fire_tick,
            seq,
            fired: false,
            cancelled: false,
            cancel_processed: false,
        });
        Ok(())
    }

    fn cancel(&mut self, i: usize) -> Result<(), TestCaseError> {
        let Some(s) = self.schedules.get_mut(i) else {
            return Ok(());
        };
        prop_assert_eq!(
            s.handle.cancel(),
            s.active,
            "cancel() is true once, while it goes on"
        );
        s.active = false;
        // A queued run's timeout has fired: only a pending one is cancelled.
        if let Next::Pending { .. } = std::mem::replace(&mut s.next, Next::Ended) {
            self.unprocessed_cancels += 1;
        }
        Ok(())
    }

    fn cancel_other(&mut self, i: usize) -> Result<(), TestCaseError> {
        let Some(o) = self.others.get_mut(i) else {
            return Ok(());
        };
        let wins = !o.fired && !o.cancelled;
        prop_assert_eq!(o.handle.cancel(), wins);
        o.cancelled |= wins;
        Ok(())
    }

    /// Runs schedule `i`'s run due at `due`, at `now`, the worker's tick then being `tick`:
    /// its successor fires on `earliest` at the earliest, unless refused (after `stop()`, or
    /// at the limit), which ends the schedule.
    fn run(&mut self, i: usize, due: u64, (tick, now, earliest): (u64, u64, u64)) {
        let s = &mut self.schedules[i];
        s.next = Next::Ended;
        let runs = s.expected.len() as u64 + 1;
        s.expected.push((tick, now, runs == s.cancel_at));
        if runs == s.cancel_at || runs == s.panic_at || self.stopped {
            s.active = false; // its own timeout has fired: nothing left to cancel
            return;
        }
        let next_due = s.after(due, now);
        if self.refusal().is_some() {
            self.schedules[i].active = false;
            return;
        }
        self.schedules[i].next = self.accept(next_due, earliest);
    }

    /// What fires on `tick`, in the order the timer accepted it: schedules by index (`Ok`),
    /// other timeouts (`Err`).
    fn firing(&self, tick: u64) -> Vec<Result<usize, usize>> {
        let mut firing: Vec<(u64, Result<usize, usize>)> = Vec::new();
        for (i, s) in self.schedules.iter().enumerate() {
            if let Next::Pending { fire_tick, seq, .. } = s.next {
                if fire_tick == tick {
                    firing.push((seq, Ok(i)));
                }
            }
        }
        for (i, o) in self.others.iter().enumerate() {
            if !o.fired && !o.cancelled && o.fire_tick == tick {
                firing.push((o.seq, Err(i)));
            }
        }
        firing.sort_unstable_by_key(|&(seq, _)| seq);
        firing.into_iter().map(|(_, what)| what).collect()
    }

    fn advance(&mut self, by: u64) {
        let to = self.now + by;
        let ticks = self.now / T..to / T;
        if !ticks.is_empty() {
            self.unprocessed_cancels = 0;
            for o in &mut self.others {
                o.cancel_processed |= o.cancelled;
            }
        }
        for tick in ticks {
            for what in self.firing(tick) {
                match what {
                    Err(o) => self.others[o].fired = true,
                    Ok(i) => {
                        let Next::Pending { due, .. } = self.schedules[i].next else {
                            unreachable!()
                        };
                        if self.jobs.is_some() {
                            self.schedules[i].next = Next::Queued { due };
                            self.queued.push_back(i);
                        } else {
                            self.run(i, due, (tick, to, tick + 1));
                        }
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
        let (tick, now) = (self.now / T, self.now);
        while let Some(i) = self.queued.pop_front() {
            let s = &mut self.schedules[i];
            let Next::Queued { due } = std::mem::replace(&mut s.next, Next::Ended) else {
                continue; // cancelled while queued: the run does not start
            };
            if run && s.active {
                self.run(i, due, (tick, now, tick));
            } else {
                s.active = false; // dropped unrun: the schedule ends
            }
        }
    }

    fn check(&self, after: &Op) -> Result<(), TestCaseError> {
        for (i, s) in self.schedules.iter().enumerate() {
            if let Next::Pending { fire_tick, .. } = s.next {
                prop_assert!(fire_tick >= self.now / T, "the model lags");
            }
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
        }
        for (i, o) in self.others.iter().enumerate() {
            prop_assert_eq!(o.handle.is_expired(), o.fired, "other {}", i);
        }
        prop_assert_eq!(
            self.timer.pending_timeouts(),
            self.pending(),
            "after {:?}",
            after
        );
        Ok(())
    }

    /// Stops the timer: it returns each pending timeout; a run queued before still runs, and
    /// its successor is refused.
    fn finish(mut self) -> Result<(), TestCaseError> {
        let runs = self
            .schedules
            .iter()
            .filter(|s| matches!(s.next, Next::Pending { .. }));
        let others = self.others.iter().filter(|o| !o.fired && !o.cancelled);
        let pending = runs.count() + others.count();
        let left = self.timer.stop().unwrap();
        prop_assert_eq!(left.len(), pending, "stop() returns each pending timeout");
        // Dropped unrun, a schedule's run ends its schedule.
        drop(left);
        self.stopped = true;
        self.unprocessed_cancels = 0; // a stopped timer counts nothing pending
        self.others.clear();
        for s in &mut self.schedules {
            if let Next::Pending { .. } = s.next {
                s.next = Next::Ended;
                s.active = false;
            }
        }
        self.take_jobs(true);
        self.check(&Op::RunJobs)
    }
}

fn run(on_executor: bool, limit: Option<usize>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    common::quiet_by_design_panics();
    let mut builder = HashedWheelTimer::builder()
        .tick_duration(Duration::from_nanos(T))
        .ticks_per_wheel(16);
    if let Some(max) = limit {
        builder = builder.max_pending_timeouts(max);
    }
    let jobs = on_executor.then(Arc::<Mutex<VecDeque<Job>>>::default);
    if let Some(queue) = &jobs {
        let queue = Arc::clone(queue);
        builder = builder.executor(move |job: Job| queue.lock().unwrap().push_back(job));
    }
    let (timer, driver) = builder.build_manual().unwrap();
    let mut model = Model {
        timer,
        driver,
        limit,
        jobs,
        queued: VecDeque::new(),
        stopped: false,
        schedules: Vec::new(),
        others: Vec::new(),
        now: 0,
        seq: 0,
        unprocessed_cancels: 0,
    };
    for op in &ops {
        match *op {
            Op::Create {
                kind,
                initial,
                cancel_at,
                panic_at,
            } if model.schedules.len() < 3 => model.create(kind, initial, cancel_at, panic_at)?,
            Op::Create { .. } => {}
            Op::Cancel(i) => model.cancel(i % model.schedules.len().max(1))?,
            Op::Advance(by) => model.advance(by),
            Op::RunJobs => model.take_jobs(true),
            Op::DropJobs => model.take_jobs(false),
            Op::AddOther(delay) => model.add_other(delay)?,
            Op::CancelOther(i) => model.cancel_other(i % model.others.len().max(1))?,
        }
        model.check(op)?;
    }
    model.finish()
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
        run(on_executor, None, ops)?;
    }
}

proptest! {
    // More cases: who finds room depends on two timeouts sharing a tick, which few cases make.
    #![proptest_config(common::model_config(1024))]

    /// As above, beside other timeouts that fill a pending limit (1 to 4) and free it: a first
    /// run is refused exactly at the limit, a successor refused there ends its schedule, and
    /// timeouts of one tick end in the order they were made.
    #[test]
    fn periodic_runs_at_a_pending_limit_end_when_refused(
        on_executor in any::<bool>(),
        limit in 1..=4usize,
        ops in proptest::collection::vec(limited_op(), 1..50),
    ) {
        run(on_executor, Some(limit), ops)?;
    }
}
