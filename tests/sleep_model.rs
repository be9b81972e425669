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
use hashed_timer_wheel::{HashedWheelTimer, TimerError};
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
    /// A step on the other timeouts of the same timer (they fill the pending limit).
    Other(common::OtherStep),
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
        4 => common::other_step(T).prop_map(Op::Other),
    ]
}

/// What the model knows: the timer's book, and the sleep's timeout in it (or its refusal).
struct Model {
    book: common::TimerBook,
    sleep: Result<usize, TimerError>,
}

impl Model {
    /// Arms the sleep `delay` from now (see `TimerBook::rearm`).
    fn arm(&mut self, delay: u64) {
        let deadline = self.book.now + delay;
        self.sleep = self.book.rearm(self.sleep.clone().ok(), deadline);
    }

    fn elapsed(&self) -> bool {
        self.sleep.as_ref().is_ok_and(|&i| self.book.fired(i))
    }

    /// What a poll returns.
    fn poll(&self) -> Poll<Result<(), TimerError>> {
        match &self.sleep {
            Ok(_) if self.elapsed() => Poll::Ready(Ok(())),
            Ok(_) => Poll::Pending,
            Err(refusal) => Poll::Ready(Err(refusal.clone())),
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
        book: common::TimerBook::new(T, 0, limit),
        sleep: Err(TimerError::Stopped), // none yet
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
                let now = model.book.now;
                prop_assert_eq!(&polled, &expected, "at {} ns", now);
                if let (Poll::Ready(Ok(())), Ok(i)) = (&polled, &model.sleep) {
                    prop_assert!(now >= model.book.accepted[*i].deadline, "early");
                }
                waiting_since = polled.is_pending().then(|| counter.0.load(SeqCst));
            }
            Op::Advance(by) => {
                let was_elapsed = model.elapsed();
                driver.advance(Duration::from_nanos(by));
                model.book.advance(by);
                if let Some(at) = waiting_since {
                    if model.elapsed() && !was_elapsed {
                        prop_assert!(counter.0.load(SeqCst) > at, "not woken at its tick");
                    }
                }
            }
            Op::Other(ref step) => model.book.other(&timer, step)?,
        }
        prop_assert_eq!(sleep.is_elapsed(), model.elapsed(), "after {:?}", op);
        let pending = model.book.pending();
        prop_assert_eq!(timer.pending_timeouts(), pending, "after {:?}", op);
    }
    model.book.cancel_others();
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
