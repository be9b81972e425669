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

mod common;

use hashed_timer_wheel::{HashedWheelTimer, MissedRuns};
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

struct Model {
    /// Manual time, nanoseconds since the origin.
    now: u64,
    period: u64,
    missed: MissedRuns,
    /// The next tick's deadline, nanoseconds since the origin.
    due: u64,
    /// The tick on which the sleep's timeout fires.
    fire_tick: u64,
    unprocessed_cancels: usize,
}

impl Model {
    fn fired(&self) -> bool {
        self.fire_tick < self.now / T
    }

    /// Arms the sleep for `due` at the present time, cancelling a timeout that has not fired.
    fn arm(&mut self, due: u64) {
        if !self.fired() {
            self.unprocessed_cancels += 1;
        }
        self.due = due;
        self.fire_tick = fire_tick(due, self.now);
    }

    /// The deadline after the tick due at `self.due`, taken now.
    fn next(&self) -> u64 {
        let (due, now, period, tick) = (self.due, self.now, self.period, T);
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
}

fn fire_tick(due: u64, armed_at: u64) -> u64 {
    (due / T).max(armed_at / T)
}

fn run(pre: u64, period: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(Duration::from_nanos(T))
        .ticks_per_wheel(16)
        .build_manual()
        .unwrap();
    driver.advance(Duration::from_nanos(pre));
    let mut interval = timer.interval(Duration::from_nanos(period));
    let mut model = Model {
        now: pre,
        period,
        missed: MissedRuns::Burst,
        due: pre, // the first tick at once
        fire_tick: pre / T,
        unprocessed_cancels: 0,
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
                if model.due <= model.now {
                    let Poll::Ready(Ok(taken)) = polled else {
                        return Err(TestCaseError::fail(format!(
                            "at {} ns: {polled:?}",
                            model.now
                        )));
                    };
                    // The deadline's `Instant`, read between `before` and `after`.
                    let ago = Duration::from_nanos(model.now - model.due);
                    prop_assert!(
                        taken + ago >= before && taken + ago <= after,
                        "at {} ns: the tick due at {} ns returned {:?}, {:?} after the poll",
                        model.now,
                        model.due,
                        taken,
                        after.saturating_duration_since(taken)
                    );
                    let next = model.next();
                    model.arm(next);
                    waiting_since = None;
                } else {
                    prop_assert!(polled.is_pending(), "at {} ns: {:?}", model.now, polled);
                    waiting_since = Some(counter.0.load(SeqCst));
                }
            }
            Op::Advance(by) => {
                let was_fired = model.fired();
                let to = model.now + by;
                if to / T > model.now / T {
                    model.unprocessed_cancels = 0;
                }
                driver.advance(Duration::from_nanos(by));
                model.now = to;
                if let Some(since) = waiting_since {
                    if model.fired() && !was_fired {
                        prop_assert!(counter.0.load(SeqCst) > since, "not woken at its tick");
                    }
                }
            }
            Op::Reset => {
                interval.reset();
                // The task that waits is moved to the new timeout and stays waiting.
                model.arm(model.now + model.period);
            }
            Op::SetMissed(missed) => {
                interval.set_missed_runs(missed);
                model.missed = missed;
            }
        }
        let armed = usize::from(!model.fired());
        prop_assert_eq!(
            timer.pending_timeouts(),
            armed + model.unprocessed_cancels,
            "after {:?}",
            op
        );
    }
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
        run(pre, period, ops)?;
    }
}
