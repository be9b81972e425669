//! Model-based test of an `Interval` on the manual driver: random polls, advances, resets and
//! changes of policy, checked step by step against the rules that `Interval` and `MissedRuns`
//! state.
//!
//! A tick due at `d` is taken by the first poll at or after `d` (the clock is exact on the
//! manual driver), which returns `d`'s `Instant` and chooses the next deadline as `MissedRuns`
//! says. The sleep behind it, armed at manual time `a` for `d`, fires on tick
//! `max(d / T, a / T)`: that is when a task that waits is woken. A re-arm cancels the timeout
//! it replaces (if that one has not fired), which counts as pending until the worker's next
//! tick. A manual clock maps its time to `Instant`s at the moment of the call (its now is the
//! real now), so a returned `Instant` is checked against the real clock's readings around the
//! poll.
//!
//! With a pending limit, other timeouts made and cancelled fill it: an arm that replaces no
//! live timeout is refused while the pending count is at the limit (one that replaces a
//! timeout passes), a poll that finds its tick not yet due then completes with the refusal,
//! and the next poll arms again; a tick already due is taken all the same.

mod common;

use hashed_timer_wheel::{HashedWheelTimer, MissedRuns, TimerError};
use proptest::prelude::*;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The tick length in nanoseconds.
const T: u64 = 1_000_000;

fn missed() -> impl Strategy<Value = MissedRuns> {
    prop_oneof![
        Just(MissedRuns::Burst),
        Just(MissedRuns::Skip),
        Just(MissedRuns::Delay)
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Poll,
    /// Moves the clock by this many nanoseconds.
    Advance(u64),
    Reset,
    SetMissed(MissedRuns),
    /// A step on the other timeouts of the same timer (they fill the pending limit).
    Other(common::OtherStep),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => Just(Op::Poll),
        4 => common::near_ticks(T, 3).prop_map(Op::Advance),
        1 => common::near_ticks(T, 20).prop_map(Op::Advance),
        1 => Just(Op::Reset),
        1 => missed().prop_map(Op::SetMissed),
    ]
}

/// As [`op`], with other timeouts that fill a pending limit and free it.
fn limited_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => op(),
        4 => common::other_step(T).prop_map(Op::Other),
    ]
}

struct Model {
    book: common::TimerBook,
    period: u64,
    missed: MissedRuns,
    /// The next tick's deadline, nanoseconds since the origin.
    due: u64,
    /// The interval's timeout in the book, unless its last arm was refused.
    armed: Result<usize, TimerError>,
}

impl Model {
    /// Arms the sleep for `due` at the present time (see `TimerBook::rearm`).
    fn arm(&mut self, due: u64) {
        self.due = due;
        self.armed = self.book.rearm(self.armed.clone().ok(), due);
    }

    /// The deadline after the tick due at `self.due`, taken now.
    fn next(&self) -> u64 {
        let (due, now, period, tick) = (self.due, self.book.now, self.period, T);
        let late = now - due > tick;
        let on_time = due + period > now.saturating_sub(tick);
        match self.missed {
            MissedRuns::Delay if late => now + period,
            _ if on_time => due + period,
            // The first of `due + k * period` later than `now - tick`.
            MissedRuns::Skip => due + ((now - tick - due) / period + 1) * period,
            _ => due + period,
        }
    }

    /// What a poll returns: the tick (its deadline), the refusal, or nothing yet.
    fn poll(&mut self) -> Poll<Result<u64, TimerError>> {
        if self.armed.is_err() {
            self.arm(self.due); // a poll arms again what the limit refused
        }
        if self.due <= self.book.now {
            let taken = self.due;
            let next = self.next();
            self.arm(next);
            return Poll::Ready(Ok(taken));
        }
        match &self.armed {
            Ok(_) => Poll::Pending,
            Err(refusal) => Poll::Ready(Err(refusal.clone())),
        }
    }

    fn interval_fired(&self) -> bool {
        self.armed.as_ref().is_ok_and(|&i| self.book.fired(i))
    }
}

fn run(pre: u64, period: u64, limit: Option<usize>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let builder = HashedWheelTimer::builder()
        .tick_duration(Duration::from_nanos(T))
        .ticks_per_wheel(16);
    let builder = match limit {
        Some(max) => builder.max_pending_timeouts(max),
        None => builder,
    };
    let (timer, driver) = builder.build_manual().unwrap();
    driver.advance(Duration::from_nanos(pre));
    let mut interval = timer.interval(Duration::from_nanos(period));
    let mut book = common::TimerBook::new(T, pre, limit);
    let first = book.accept(pre); // the first tick at once
    let mut model = Model {
        book,
        period,
        missed: MissedRuns::Burst,
        due: pre,
        armed: Ok(first),
    };
    let counter = Arc::new(common::WakeCount::default());
    let waker = Waker::from(Arc::clone(&counter));
    // The wake-ups counted when the last poll returned `Pending`, if it did.
    let mut waiting_since: Option<usize> = None;
    for op in &ops {
        match *op {
            Op::Poll => {
                let before = Instant::now();
                let polled = interval.poll_tick(&mut Context::from_waker(&waker));
                let after = Instant::now();
                waiting_since = None;
                match (model.poll(), polled) {
                    (Poll::Ready(Ok(due)), Poll::Ready(Ok(taken))) => {
                        // The deadline's `Instant`, read between `before` and `after`.
                        let ago = Duration::from_nanos(model.book.now - due);
                        prop_assert!(
                            taken + ago >= before && taken + ago <= after,
                            "at {} ns: the tick due at {} ns returned {:?}, {:?} after the poll",
                            model.book.now,
                            due,
                            taken,
                            after.saturating_duration_since(taken)
                        );
                    }
                    (Poll::Pending, Poll::Pending) => {
                        waiting_since = Some(counter.0.load(SeqCst));
                    }
                    (expected, polled) => {
                        let expected = expected.map_ok(|due| format!("the tick due at {due} ns"));
                        prop_assert_eq!(
                            format!("{polled:?}"),
                            format!("{expected:?}"),
                            "at {} ns",
                            model.book.now
                        );
                    }
                }
            }
            Op::Advance(by) => {
                let was_fired = model.interval_fired();
                driver.advance(Duration::from_nanos(by));
                model.book.advance(by);
                if let Some(since) = waiting_since {
                    if model.interval_fired() && !was_fired {
                        prop_assert!(counter.0.load(SeqCst) > since, "not woken at its tick");
                    }
                }
            }
            Op::Reset => {
                interval.reset();
                // The task that waits is moved to the new timeout and stays waiting.
                model.arm(model.book.now + model.period);
            }
            Op::SetMissed(missed) => {
                interval.set_missed_runs(missed);
                model.missed = missed;
            }
            Op::Other(ref step) => model.book.other(&timer, step)?,
        }
        let pending = model.book.pending();
        prop_assert_eq!(timer.pending_timeouts(), pending, "after {:?}", op);
    }
    model.book.cancel_others();
    drop(interval);
    driver.advance(Duration::from_nanos(T));
    prop_assert_eq!(
        timer.pending_timeouts(),
        0,
        "a dropped interval is cancelled"
    );
    Ok(())
}

proptest! {
    #![proptest_config(common::model_config(256))]

    /// Polls, advances, resets and policy changes in any order, from any start: each tick is
    /// taken at the first poll on or after its deadline (never before), returns that deadline,
    /// and sets the next as its policy says; a task that waits is woken on the sleep's tick; the
    /// interval counts one pending timeout, plus each replaced one until the worker's next tick.
    #[test]
    fn an_interval_ticks_as_its_policy_says(
        pre in common::near_ticks(T, 5),
        period in common::near_ticks(T, 4).prop_map(|p| p.max(1)),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        run(pre, period, None, ops)?;
    }

    /// As above, beside other timeouts that fill a pending limit (1 to 4) and free it: an arm
    /// that replaces no live timeout is refused exactly at the limit, a tick not yet due then
    /// completes with the refusal and the next poll arms again, and a tick already due is
    /// taken all the same.
    #[test]
    fn an_interval_at_a_pending_limit_is_refused_exactly_at_the_count(
        pre in common::near_ticks(T, 5),
        period in common::near_ticks(T, 4).prop_map(|p| p.max(1)),
        limit in 1..=4usize,
        ops in proptest::collection::vec(limited_op(), 1..60),
    ) {
        run(pre, period, Some(limit), ops)?;
    }
}
