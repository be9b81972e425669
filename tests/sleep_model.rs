//! Model-based test of a `Sleep` on the manual driver: random sequences of reset, poll and
//! advance, checked step by step against Netty's arithmetic (as `tests/model.rs` states it).
//!
//! A sleep made or reset at manual time `s` with delay `d` arms a timeout due at `s + d`, which
//! fires on tick `max((s + d) / T, s / T)`: the sleep is elapsed once the clock has reached the
//! end of that tick, and not before. A reset cancels the timeout it replaces (if that one has
//! not fired), which counts as pending until the worker's next tick.

mod common;

use common::ms;
use hashed_timer_wheel::HashedWheelTimer;
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
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => common::near_ticks(T, 20).prop_map(Op::Reset),
        4 => Just(Op::Poll),
        4 => common::near_ticks(T, 3).prop_map(Op::Advance),
        1 => common::near_ticks(T, 30).prop_map(Op::Advance),
    ]
}

/// What the model knows: the armed timeout's deadline and fire tick, and the cancelled
/// timeouts the worker has not yet seen.
struct Model {
    now: u64,
    deadline: u64,
    fire_tick: u64,
    unprocessed_cancels: usize,
}

impl Model {
    fn arm(&mut self, delay: u64) {
        self.deadline = self.now + delay;
        self.fire_tick = (self.deadline / T).max(self.now / T);
    }

    fn elapsed(&self) -> bool {
        (self.fire_tick + 1) * T <= self.now
    }
}

fn run(first_delay: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(Duration::from_nanos(T))
        .build_manual()
        .unwrap();
    let counter = Arc::new(common::WakeCount::default());
    let waker = Waker::from(Arc::clone(&counter));
    let mut model = Model {
        now: 0,
        deadline: 0,
        fire_tick: 0,
        unprocessed_cancels: 0,
    };
    let mut sleep = timer.sleep(Duration::from_nanos(first_delay));
    model.arm(first_delay);
    // The wake-ups counted when the last poll returned `Pending`, if it did.
    let mut waiting_since: Option<usize> = None;
    for op in ops {
        match op {
            Op::Reset(delay) => {
                if !model.elapsed() {
                    model.unprocessed_cancels += 1;
                }
                sleep.reset_after(Duration::from_nanos(delay));
                model.arm(delay);
            }
            Op::Poll => {
                let polled = Pin::new(&mut sleep).poll(&mut Context::from_waker(&waker));
                if model.elapsed() {
                    prop_assert_eq!(polled, Poll::Ready(Ok(())), "at {} ns", model.now);
                    prop_assert!(model.now >= model.deadline, "early");
                    waiting_since = None;
                } else {
                    prop_assert!(polled.is_pending(), "at {} ns: {:?}", model.now, polled);
                    waiting_since = Some(counter.0.load(SeqCst));
                }
            }
            Op::Advance(by) => {
                let was_elapsed = model.elapsed();
                let ticked = (model.now + by) / T > model.now / T;
                driver.advance(Duration::from_nanos(by));
                model.now += by;
                if ticked {
                    model.unprocessed_cancels = 0;
                }
                if let Some(at) = waiting_since {
                    if model.elapsed() && !was_elapsed {
                        prop_assert!(counter.0.load(SeqCst) > at, "not woken at its tick");
                    }
                }
            }
        }
        prop_assert_eq!(sleep.is_elapsed(), model.elapsed(), "after {:?}", op);
        let armed = usize::from(!model.elapsed());
        prop_assert_eq!(
            timer.pending_timeouts(),
            armed + model.unprocessed_cancels,
            "after {:?}",
            op
        );
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
        run(first_delay, ops)?;
    }
}
