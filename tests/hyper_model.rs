//! Model-based test of `HyperTimer`'s sleeps on the manual driver: random resets (earlier and
//! later: a later one only moves the deadline, and the sleep re-arms when its timeout fires),
//! polls, advances and a stop, checked against the contract rather than the mechanism. A sleep
//! never completes before its deadline; polled whenever it wakes its task (as hyper's
//! connections are), it has completed by the end of its deadline's tick; it holds one timeout
//! plus those its resets replaced until the worker's next tick; once the timer stops, it
//! completes at once (and is reset no more: hyper's reset then panics, `tests/stopped_timer.rs`).
//!
//! hyper names deadlines by `Instant`, which a manual clock maps at the moment of the call (its
//! now is the real now), a few nanoseconds off. The clock therefore moves in quarter ticks and
//! every deadline falls half a quarter between two of them: nothing the model says depends on
//! those nanoseconds. A reset whose call took longer than an eighth of a quarter (the host
//! preempted it) is made again.
#![cfg(feature = "hyper")]

mod common;

use hashed_timer_wheel::{HashedWheelTimer, HyperTimer};
use hyper::rt::Timer;
use proptest::prelude::*;
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

/// The tick length in nanoseconds, and a quarter of it.
const T: u64 = 10_000_000;
const Q: u64 = T / 4;

/// How many times a reset slower than its margin is made again.
const RESET_TRIES: usize = 20;

#[derive(Debug, Clone)]
enum Op {
    /// `reset` to now plus this many quarter ticks and a half.
    Reset(u64),
    Poll,
    /// Moves the clock by this many quarter ticks.
    Advance(u64),
    Stop,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..40u64).prop_map(Op::Reset),
        3 => Just(Op::Poll),
        5 => (0..12u64).prop_map(Op::Advance),
        1 => (0..200u64).prop_map(Op::Advance),
        1 => Just(Op::Stop),
    ]
}

struct Harness {
    sleep: Pin<Box<dyn hyper::rt::Sleep>>,
    waker: Waker,
    counter: Arc<common::WakeCount>,
    /// Wake-ups counted when the last poll returned `Pending`, if it did and the sleep has not
    /// completed since.
    waiting_since: Option<usize>,
    completed: bool,
    /// Manual time; the deadline, in the same nanoseconds (a few off: see the header).
    now: u64,
    deadline: u64,
    stopped: bool,
    /// Resets since the worker's last tick: each may have replaced a timeout that still counts.
    resets_since_tick: usize,
}

impl Harness {
    fn poll(&mut self) -> Result<(), TestCaseError> {
        let polled = self
            .sleep
            .as_mut()
            .poll(&mut Context::from_waker(&self.waker));
        let tick_end = (self.deadline / T + 1) * T;
        prop_assert!(
            polled.is_ready() || self.now < tick_end,
            "pending at {} ns, past the end of its deadline's tick ({} ns)",
            self.now,
            tick_end
        );
        if polled.is_ready() {
            prop_assert!(
                self.stopped || self.now > self.deadline,
                "completed at {} ns, before its deadline at {} ns",
                self.now,
                self.deadline
            );
            self.completed = true;
            self.waiting_since = None;
        } else {
            prop_assert!(!self.stopped, "pending on a stopped timer");
            self.waiting_since = Some(self.counter.0.load(SeqCst));
        }
        Ok(())
    }

    /// Polls as a task does: whenever it was woken since it last waited.
    fn poll_if_woken(&mut self) -> Result<(), TestCaseError> {
        while let Some(since) = self.waiting_since {
            if self.counter.0.load(SeqCst) == since {
                break;
            }
            self.poll()?;
        }
        Ok(())
    }
}

fn run(first: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(Duration::from_nanos(T))
        .ticks_per_wheel(16)
        .build_manual()
        .unwrap();
    let hyper_timer = HyperTimer::new(timer.handle());
    let first = first * Q + Q / 2;
    let counter = Arc::new(common::WakeCount::default());
    let mut h = Harness {
        sleep: hyper_timer.sleep(Duration::from_nanos(first)),
        waker: Waker::from(Arc::clone(&counter)),
        counter,
        waiting_since: None,
        completed: false,
        now: 0,
        deadline: first,
        stopped: false,
        resets_since_tick: 0,
    };
    for op in &ops {
        match *op {
            // After `stop()` a reset panics, by design (`tests/stopped_timer.rs`).
            Op::Reset(_) if h.stopped => {}
            Op::Reset(quarters) => {
                let by = quarters * Q + Q / 2;
                // The deadline lands up to the call's own duration early: a call that took a
                // quarter of the margin (the host preempted the test) is made again.
                for _ in 0..RESET_TRIES {
                    let before = Instant::now();
                    hyper_timer.reset(&mut h.sleep, hyper_timer.now() + Duration::from_nanos(by));
                    h.resets_since_tick += 1;
                    if before.elapsed() < Duration::from_nanos(Q / 8) {
                        break;
                    }
                }
                h.deadline = h.now + by;
                h.completed = false;
            }
            Op::Poll => h.poll()?,
            Op::Advance(quarters) => {
                let to = h.now + quarters * Q;
                if to / T > h.now / T {
                    h.resets_since_tick = 0;
                }
                driver.advance(Duration::from_nanos(quarters * Q));
                h.now = to;
                h.poll_if_woken()?;
                let tick_end = (h.deadline / T + 1) * T;
                if h.waiting_since.is_some() && h.now >= tick_end {
                    return Err(TestCaseError::fail(format!(
                        "waiting at {} ns, past the end of its deadline's tick ({} ns)",
                        h.now, tick_end
                    )));
                }
            }
            Op::Stop => {
                let _ = timer.stop();
                h.stopped = true;
                h.resets_since_tick = 0;
                h.poll_if_woken()?;
                prop_assert!(h.waiting_since.is_none(), "a stop wakes the waiting task");
            }
        }
        let most = if h.stopped {
            0
        } else {
            1 + h.resets_since_tick
        };
        let pending = timer.pending_timeouts();
        prop_assert!(pending <= most, "{} pending after {:?}", pending, op);
        if h.completed || h.stopped {
            prop_assert!(h
                .sleep
                .as_mut()
                .poll(&mut Context::from_waker(Waker::noop()))
                .is_ready());
        }
    }
    drop(h.sleep);
    driver.advance(Duration::from_nanos(T));
    prop_assert_eq!(timer.pending_timeouts(), 0, "a dropped sleep is cancelled");
    Ok(())
}

proptest! {
    #![proptest_config(common::model_config(256))]

    /// Resets earlier and later, polls, advances and a stop in any order: never early, done by
    /// the end of its deadline's tick when polled on each wake-up, one timeout held (plus those
    /// replaced since the last tick), done at once after a stop.
    #[test]
    fn a_hyper_sleep_completes_in_its_deadlines_tick(
        first in 0..40u64,
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        run(first, ops)?;
    }
}
