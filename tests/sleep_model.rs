//! Model-based test of a `Sleep` on the manual driver: random sequences of reset, poll and
//! advance, checked step by step against Netty's arithmetic (as `tests/model.rs` states it).
//!
//! A sleep made or reset at manual time `s` with delay `d` arms a timeout due at `s + d`, which
//! fires on tick `max((s + d) / T, s / T)`: the sleep is elapsed once the clock has reached the
//! end of that tick, and not before. A reset cancels the timeout it replaces (if that one has
//! not fired), which counts as pending until the worker's next tick.
//!
//! With a pending limit, other timeouts made and cancelled fill it: a sleep made, or reset
//! without replacing a live timeout (after it fired, or after a refusal), is refused while the
//! pending count is at the limit, and its polls complete with that refusal; a reset that
//! replaces a live timeout passes the limit.

mod common;

use common::ms;
use hashed_timer_wheel::{HashedWheelTimer, Timeout, TimerError};
use proptest::prelude::*;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// The tick length in nanoseconds.
const T: u64 = 1_000_000;

#[derive(Debug, Clone)]
enum Op {
    /// `reset_after` this many nanoseconds.
    Reset(u64),
    Poll,
    /// Moves the clock by this many nanoseconds.
    Advance(u64),
    /// Another timeout, of this delay, on the same timer (it fills the pending limit).
    AddOther(u64),
    /// Cancels the other timeout at this index (modulo how many were made).
    CancelOther(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => common::near_ticks(T, 20).prop_map(Op::Reset),
        4 => Just(Op::Poll),
        4 => common::near_ticks(T, 3).prop_map(Op::Advance),
        1 => common::near_ticks(T, 30).prop_map(Op::Advance),
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

/// A timeout the timer accepted: the sleep's or another.
struct Accepted {
    deadline: u64,
    fire_tick: u64,
    cancelled: bool,
    cancel_processed: bool,
}

/// What the model knows: every timeout the timer accepted, which one is the sleep's (or the
/// pending count its refusal reported), and the other timeouts' handles.
struct Model {
    now: u64,
    limit: Option<usize>,
    accepted: Vec<Accepted>,
    sleep: Result<usize, usize>,
    others: Vec<(Timeout, usize)>,
}

impl Model {
    fn fired(&self, i: usize) -> bool {
        let a = &self.accepted[i];
        !a.cancelled && a.fire_tick < self.now / T
    }

    fn pending(&self) -> usize {
        let ended = |i: usize| self.fired(i) || self.accepted[i].cancel_processed;
        (0..self.accepted.len()).filter(|&i| !ended(i)).count()
    }

    /// The pending count, if a timeout that replaces none would be refused now.
    fn refusal(&self) -> Option<usize> {
        let pending = self.pending();
        self.limit.filter(|&max| pending >= max).map(|_| pending)
    }

    fn accept(&mut self, delay: u64) -> usize {
        let deadline = self.now + delay;
        self.accepted.push(Accepted {
            deadline,
            fire_tick: (deadline / T).max(self.now / T),
            cancelled: false,
            cancel_processed: false,
        });
        self.accepted.len() - 1
    }

    /// Arms the sleep `delay` from now: cancels a timeout that has not fired, and is refused
    /// at the limit unless it replaced one.
    fn arm(&mut self, delay: u64) {
        let replaces = match self.sleep {
            Ok(i) if !self.fired(i) => {
                self.accepted[i].cancelled = true;
                true
            }
            _ => false,
        };
        self.sleep = match self.refusal() {
            Some(pending) if !replaces => Err(pending),
            _ => Ok(self.accept(delay)),
        };
    }

    fn elapsed(&self) -> bool {
        self.sleep.is_ok_and(|i| self.fired(i))
    }

    /// What a poll returns.
    fn poll(&self) -> Poll<Result<(), TimerError>> {
        match self.sleep {
            Ok(_) if self.elapsed() => Poll::Ready(Ok(())),
            Ok(_) => Poll::Pending,
            Err(pending) => Poll::Ready(Err(TimerError::TooManyPending {
                pending,
                max: self.limit.unwrap(),
            })),
        }
    }
}

fn run(first_delay: u64, limit: Option<usize>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let builder = HashedWheelTimer::builder().tick_duration(Duration::from_nanos(T));
    let builder = match limit {
        Some(max) => builder.max_pending_timeouts(max),
        None => builder,
    };
    let (timer, driver) = builder.build_manual().unwrap();
    let counter = Arc::new(common::WakeCount::default());
    let waker = Waker::from(Arc::clone(&counter));
    let mut model = Model {
        now: 0,
        limit,
        accepted: Vec::new(),
        sleep: Err(0),
        others: Vec::new(),
    };
    let mut sleep = timer.sleep(Duration::from_nanos(first_delay));
    model.arm(first_delay);
    // The wake-ups counted when the last poll returned `Pending`, if it did.
    let mut waiting_since: Option<usize> = None;
    for op in &ops {
        match *op {
            Op::Reset(delay) => {
                sleep.reset_after(Duration::from_nanos(delay));
                model.arm(delay);
            }
            Op::Poll => {
                let polled = Pin::new(&mut sleep).poll(&mut Context::from_waker(&waker));
                let expected = model.poll();
                prop_assert_eq!(&polled, &expected, "at {} ns", model.now);
                if let (Poll::Ready(Ok(())), Ok(i)) = (&polled, model.sleep) {
                    prop_assert!(model.now >= model.accepted[i].deadline, "early");
                }
                waiting_since = polled.is_pending().then(|| counter.0.load(SeqCst));
            }
            Op::Advance(by) => {
                let was_elapsed = model.elapsed();
                if (model.now + by) / T > model.now / T {
                    for a in &mut model.accepted {
                        a.cancel_processed |= a.cancelled;
                    }
                }
                driver.advance(Duration::from_nanos(by));
                model.now += by;
                if let Some(at) = waiting_since {
                    if model.elapsed() && !was_elapsed {
                        prop_assert!(counter.0.load(SeqCst) > at, "not woken at its tick");
                    }
                }
            }
            Op::AddOther(delay) => {
                let made = timer.new_timeout(|_: &Timeout| {}, Duration::from_nanos(delay));
                match model.refusal() {
                    None => {
                        let handle = made.map_err(|e| TestCaseError::fail(e.to_string()))?;
                        let i = model.accept(delay);
                        model.others.push((handle, i));
                    }
                    Some(pending) => {
                        let max = limit.unwrap();
                        let refusal = TimerError::TooManyPending { pending, max };
                        prop_assert_eq!(made.err(), Some(refusal));
                    }
                }
            }
            Op::CancelOther(i) if !model.others.is_empty() => {
                let (handle, a) = &model.others[i % model.others.len()];
                let wins = !model.fired(*a) && !model.accepted[*a].cancelled;
                prop_assert_eq!(handle.cancel(), wins);
                model.accepted[*a].cancelled |= wins;
            }
            Op::CancelOther(_) => {}
        }
        prop_assert_eq!(sleep.is_elapsed(), model.elapsed(), "after {:?}", op);
        prop_assert_eq!(timer.pending_timeouts(), model.pending(), "after {:?}", op);
    }
    for (handle, _) in &model.others {
        handle.cancel();
    }
    drop(sleep);
    driver.advance(ms(1));
    prop_assert_eq!(timer.pending_timeouts(), 0, "a dropped sleep is cancelled");
    Ok(())
}

proptest! {
    #![proptest_config(common::model_config(256))]

    /// Resets earlier and later, polls and advances in any order: the sleep completes on its
    /// deadline's tick (never early), wakes a task that waits, and counts as one pending
    /// timeout, plus each replaced one until the worker's next tick.
    #[test]
    fn a_sleep_completes_on_its_deadlines_tick(
        first_delay in common::near_ticks(T, 20),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        run(first_delay, None, ops)?;
    }

    /// As above, beside other timeouts that fill a pending limit (1 to 4) and free it: a sleep
    /// made or reset without replacing a live timeout is refused exactly at the limit and its
    /// polls complete with the refusal; a reset that replaces one passes.
    #[test]
    fn a_sleep_at_a_pending_limit_is_refused_exactly_at_the_count(
        first_delay in common::near_ticks(T, 20),
        limit in 1..=4usize,
        ops in proptest::collection::vec(limited_op(), 1..60),
    ) {
        run(first_delay, Some(limit), ops)?;
    }
}
