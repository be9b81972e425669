//! Model-based test of `Deadline`s across several timers and two threads: timers made, stopped
//! and dropped (their table slots reused), deadlines made and first polled on either thread,
//! unarmed until their first pending poll, checked step by step against what each timer should
//! hold. A deadline is fixed when made (`timeout` counts from the call, as tokio's).
//!
//! An unarmed deadline names its timer by a slot in a process-wide table and each thread
//! remembers its last four timers: a deadline must arm on its own timer and no other, or find
//! it gone (stopped or dropped) and complete with `Stopped`. Made at manual time `m` with limit
//! `l` and first pending at `s`, it elapses at once if `m + l <= s`, else its sleep fires on tick
//! `(m + l) / T` (`tests/sleep_model.rs`).
//! Some timers have a pending limit, which other timeouts fill: a deadline first polled while
//! its timer is at the limit completes with the refusal.

mod common;

use hashed_timer_wheel::{Deadline, DeadlineError, HashedWheelTimer, ManualDriver, TimerError};
use proptest::prelude::*;
use std::future::{Future, Pending};
use std::pin::Pin;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// The tick length in nanoseconds.
const T: u64 = 1_000_000;

/// The most timers alive at once, past the four a thread remembers.
const LIVE: usize = 6;

type Call = Box<dyn FnOnce() + Send>;

/// Runs `f` on a second thread, the same one for every case: what it remembers of earlier
/// cases' timers (dropped since) stays, as it would in a service.
fn on_helper<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    static HELPER: OnceLock<Mutex<Sender<Call>>> = OnceLock::new();
    let helper = HELPER.get_or_init(|| {
        let (tx, rx) = channel::<Call>();
        std::thread::spawn(move || rx.into_iter().for_each(|call| call()));
        Mutex::new(tx)
    });
    let (tx, rx) = channel();
    let call: Call = Box::new(move || tx.send(f()).unwrap());
    helper.lock().unwrap().send(call).unwrap();
    rx.recv().unwrap()
}

#[derive(Debug, Clone)]
enum Op {
    /// A timer, with this pending limit if any.
    NewTimer(Option<usize>),
    /// Another timeout, of this delay, on a timer (it fills a pending limit).
    AddOther {
        timer: usize,
        delay: u64,
    },
    /// Drops the owner and driver of the timer at this index (modulo how many were made).
    DropTimer(usize),
    StopTimer(usize),
    /// A deadline of this limit on a timer, made on the helper thread if `helper`.
    Make {
        timer: usize,
        limit: u64,
        helper: bool,
    },
    /// Polls the deadline at this index (modulo how many are left), on the helper if `helper`.
    Poll {
        deadline: usize,
        helper: bool,
    },
    DropDeadline(usize),
    Advance {
        timer: usize,
        by: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => proptest::option::of(1..=3usize).prop_map(Op::NewTimer),
        2 => (any::<usize>(), common::near_ticks(T, 6))
            .prop_map(|(timer, delay)| Op::AddOther { timer, delay }),
        1 => any::<usize>().prop_map(Op::DropTimer),
        1 => any::<usize>().prop_map(Op::StopTimer),
        5 => (any::<usize>(), common::near_ticks(T, 10), any::<bool>())
            .prop_map(|(timer, limit, helper)| Op::Make { timer, limit, helper }),
        5 => (any::<usize>(), any::<bool>())
            .prop_map(|(deadline, helper)| Op::Poll { deadline, helper }),
        1 => any::<usize>().prop_map(Op::DropDeadline),
        3 => (any::<usize>(), common::near_ticks(T, 4)).prop_map(|(timer, by)| Op::Advance { timer, by }),
    ]
}

struct TimerModel {
    /// The owner and driver, until dropped.
    alive: Option<(HashedWheelTimer, ManualDriver)>,
    limit: Option<usize>,
    /// The fire ticks of other timeouts on it (never cancelled).
    others: Vec<u64>,
    stopped: bool,
    now: u64,
    /// Cancelled timeouts the worker has not yet seen.
    unprocessed_cancels: usize,
}

impl TimerModel {
    fn gone(&self) -> bool {
        self.stopped || self.alive.is_none()
    }

    fn others_pending(&self) -> usize {
        self.others
            .iter()
            .filter(|&&tick| tick >= self.now / T)
            .count()
    }
}

type Boxed = Pin<Box<Deadline<Pending<()>>>>;

struct DeadlineModel {
    future: Boxed,
    timer: usize,
    /// Its deadline on its timer's manual clock: made then, plus the limit.
    due: u64,
    /// The fire tick of its sleep, once armed.
    armed: Option<u64>,
}

struct Model {
    timers: Vec<TimerModel>,
    deadlines: Vec<DeadlineModel>,
}

impl Model {
    fn live(&self) -> usize {
        self.timers.iter().filter(|t| t.alive.is_some()).count()
    }

    /// What timer `i` counts pending (0 once stopped).
    fn pending(&self, i: usize) -> usize {
        let t = &self.timers[i];
        let mine = |d: &&DeadlineModel| d.timer == i && d.armed.is_some() && !self.elapsed(d);
        let armed = self.deadlines.iter().filter(mine).count();
        match t.stopped {
            true => 0,
            false => armed + t.others_pending() + t.unprocessed_cancels,
        }
    }

    fn add_other(&mut self, timer: usize, delay: u64) -> Result<(), TestCaseError> {
        let i = timer % self.timers.len();
        let pending = self.pending(i);
        let t = &mut self.timers[i];
        let Some((owner, _)) = &t.alive else {
            return Ok(());
        };
        let made = owner.new_timeout(common::noop, Duration::from_nanos(delay));
        match t.limit.filter(|&max| pending >= max) {
            _ if t.stopped => prop_assert_eq!(made.err(), Some(TimerError::Stopped)),
            Some(max) => {
                let refusal = TimerError::TooManyPending { pending, max };
                prop_assert_eq!(made.err(), Some(refusal));
            }
            None => {
                prop_assert!(made.is_ok(), "refused: {:?}", made);
                t.others.push(((t.now + delay) / T).max(t.now / T));
            }
        }
        Ok(())
    }

    fn elapsed(&self, d: &DeadlineModel) -> bool {
        d.armed
            .is_some_and(|tick| tick < self.timers[d.timer].now / T)
    }

    fn make(&mut self, timer: usize, limit: u64, helper: bool) {
        let i = timer % self.timers.len();
        let Some((owner, _)) = &self.timers[i].alive else {
            return;
        };
        let handle = owner.handle();
        let limit_d = Duration::from_nanos(limit);
        let make = move || Box::pin(handle.timeout(limit_d, std::future::pending::<()>()));
        let future = if helper { on_helper(make) } else { make() };
        self.deadlines.push(DeadlineModel {
            future,
            timer: i,
            due: self.timers[i].now + limit,
            armed: None,
        });
    }

    fn poll(&mut self, deadline: usize, helper: bool) -> Result<(), TestCaseError> {
        if self.deadlines.is_empty() {
            return Ok(());
        }
        let j = deadline % self.deadlines.len();
        let mut d = self.deadlines.swap_remove(j);
        let pending = self.pending(d.timer);
        let timer = &self.timers[d.timer];
        let refusal = timer.limit.filter(|&max| pending >= max).map(|max| {
            Poll::Ready(Err(DeadlineError::Timer(TimerError::TooManyPending {
                pending,
                max,
            })))
        });
        let expected = match d.armed {
            _ if self.elapsed(&d) => Poll::Ready(Err(DeadlineError::Elapsed)),
            _ if timer.gone() => Poll::Ready(Err(DeadlineError::Timer(TimerError::Stopped))),
            Some(_) => Poll::Pending,
            None if d.due <= timer.now => Poll::Ready(Err(DeadlineError::Elapsed)),
            None if refusal.is_some() => refusal.unwrap(),
            None => {
                d.armed = Some((d.due / T).max(timer.now / T));
                Poll::Pending
            }
        };
        let (future, polled) = if helper {
            on_helper(move || poll_once(d.future))
        } else {
            poll_once(d.future)
        };
        d.future = future;
        let pending = expected.is_pending();
        prop_assert_eq!(polled, expected, "deadline on timer {}", d.timer);
        if pending {
            self.deadlines.push(d);
            let last = self.deadlines.len() - 1;
            self.deadlines.swap(j, last);
        }
        Ok(())
    }

    fn drop_deadline(&mut self, deadline: usize) {
        if self.deadlines.is_empty() {
            return;
        }
        let d = self.deadlines.remove(deadline % self.deadlines.len());
        if d.armed.is_some() && !self.elapsed(&d) && !self.timers[d.timer].gone() {
            self.timers[d.timer].unprocessed_cancels += 1;
        }
    }

    fn advance(&mut self, timer: usize, by: u64) {
        let i = timer % self.timers.len();
        let t = &mut self.timers[i];
        let Some((_, driver)) = &t.alive else { return };
        driver.advance(Duration::from_nanos(by));
        if t.stopped {
            return; // its clock moves, and nothing fires: the model's time is its ticks'
        }
        if (t.now + by) / T > t.now / T {
            t.unprocessed_cancels = 0;
        }
        t.now += by;
    }

    fn end(&mut self, timer: usize, drop_it: bool) -> Result<(), TestCaseError> {
        let i = timer % self.timers.len();
        let t = &mut self.timers[i];
        if drop_it {
            t.alive = None;
        } else if let Some((owner, _)) = &t.alive {
            // A future's timeout is woken, not returned: only the others come back.
            let others = if t.stopped { 0 } else { t.others_pending() };
            prop_assert_eq!(owner.stop().map(|v| v.len()), Ok(others), "stop()");
        }
        t.stopped = true;
        t.others.clear();
        t.unprocessed_cancels = 0;
        Ok(())
    }

    fn check(&self, after: &Op) -> Result<(), TestCaseError> {
        for (i, t) in self.timers.iter().enumerate() {
            let Some((owner, _)) = &t.alive else { continue };
            let expected = self.pending(i);
            prop_assert_eq!(
                owner.pending_timeouts(),
                expected,
                "timer {} after {:?}",
                i,
                after
            );
        }
        Ok(())
    }
}

fn poll_once(mut future: Boxed) -> (Boxed, Poll<Result<(), DeadlineError>>) {
    let polled = future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()));
    (future, polled)
}

fn new_timer(limit: Option<usize>) -> TimerModel {
    let mut builder = HashedWheelTimer::builder()
        .tick_duration(Duration::from_nanos(T))
        .ticks_per_wheel(16);
    if let Some(max) = limit {
        builder = builder.max_pending_timeouts(max);
    }
    TimerModel {
        alive: Some(builder.build_manual().unwrap()),
        limit,
        others: Vec::new(),
        stopped: false,
        now: 0,
        unprocessed_cancels: 0,
    }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut model = Model {
        timers: vec![new_timer(None)],
        deadlines: Vec::new(),
    };
    for op in &ops {
        match *op {
            Op::NewTimer(limit) if model.live() < LIVE => model.timers.push(new_timer(limit)),
            Op::NewTimer(_) => {}
            Op::AddOther { timer, delay } => model.add_other(timer, delay)?,
            Op::DropTimer(i) => model.end(i, true)?,
            Op::StopTimer(i) => model.end(i, false)?,
            Op::Make {
                timer,
                limit,
                helper,
            } => model.make(timer, limit, helper),
            Op::Poll { deadline, helper } => model.poll(deadline, helper)?,
            Op::DropDeadline(i) => model.drop_deadline(i),
            Op::Advance { timer, by } => model.advance(timer, by),
        }
        model.check(op)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(common::model_config(256))]

    /// Timers made, stopped and dropped; deadlines made and polled on two threads: each arms on
    /// its own timer at its first poll (counted there and nowhere else), elapses on its tick,
    /// and completes with `Stopped` once its timer is gone.
    #[test]
    fn a_deadline_arms_on_its_own_timer_or_finds_it_gone(
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run(ops)?;
    }
}
