//! Model-based test of the timer core on the manual driver: random sequences of
//! schedule / cancel / advance, checked step by step against a plain list of
//! `(timeout, fire tick)` that follows Netty's arithmetic.
//!
//! With tick length `T`, a timeout created at manual time `s` with delay `d` has deadline
//! `s + d` (saturating) and `calculated = (s + d) / T`. The worker has processed every tick `t`
//! with `(t + 1) * T <= s`, so the first tick it processes after the creation is `t0 = s / T`;
//! that tick transfers the timeout, and it fires on tick `max(calculated, t0)`, during the
//! advance that moves the clock to `(fire_tick + 1) * T` or beyond. Within a tick, timeouts fire
//! in transfer order (creation order). A cancellation is processed at the start of the next
//! processed tick, which is when `pending_timeouts()` drops.
#![allow(clippy::mutable_key_type)] // `Timeout` hashes by identity, not by its mutable state

mod common;

use hashed_timer_wheel::{HashedWheelTimer, ManualDriver, Timeout, TimerError};
use proptest::prelude::*;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The tick length in nanoseconds.
const T: u64 = 10_000_000;

#[derive(Debug, Clone)]
enum Op {
    Schedule(Duration),
    /// `n` timeouts of one delay at once, and, if `thin`, all but one in 64 of them cancelled
    /// at once: the worker's slab grows past the pages a trim looks at, then empties, and is
    /// trimmed while the others wait.
    Burst {
        n: usize,
        delay: Duration,
        thin: bool,
    },
    /// Cancels the timeout at this index (modulo the number scheduled so far).
    Cancel(usize),
    Advance(Duration),
}

/// A duration of about `ticks` ticks, often exactly on a tick boundary or one nanosecond off it,
/// where off-by-one errors live.
fn near_ticks(max_ticks: u64) -> impl Strategy<Value = Duration> {
    common::near_ticks(T, max_ticks).prop_map(Duration::from_nanos)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => near_ticks(40).prop_map(Op::Schedule),
        1 => Just(Op::Schedule(Duration::MAX)),
        3 => any::<usize>().prop_map(Op::Cancel),
        5 => near_ticks(4).prop_map(Op::Advance),
        1 => near_ticks(100).prop_map(Op::Advance),
    ]
}

/// As [`op`], with timeouts up to hundreds of thousands of ticks away on a small wheel: tens of
/// thousands of rounds, so that they wait in the wheel's far slots, several levels up, and move
/// down as time passes.
fn far_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => near_ticks(40).prop_map(Op::Schedule),
        3 => near_ticks(300_000).prop_map(Op::Schedule),
        1 => Just(Op::Schedule(Duration::MAX)),
        3 => any::<usize>().prop_map(Op::Cancel),
        3 => near_ticks(4).prop_map(Op::Advance),
        2 => near_ticks(3_000).prop_map(Op::Advance),
        1 => near_ticks(100_000).prop_map(Op::Advance),
    ]
}

/// As [`op`], with bursts of thousands of timeouts and advances of seconds: the worker trims
/// its slab between and amid them.
fn burst_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => near_ticks(40).prop_map(Op::Schedule),
        // The wheel never empties, as a service's keep-alives keep it: only a trim gives a
        // burst's pages back.
        2 => near_ticks(100_000).prop_map(Op::Schedule),
        2 => (4_100..6_000usize, near_ticks(100), any::<bool>())
            .prop_map(|(n, delay, thin)| Op::Burst { n, delay, thin }),
        2 => any::<usize>().prop_map(Op::Cancel),
        2 => near_ticks(4).prop_map(Op::Advance),
        4 => near_ticks(150).prop_map(Op::Advance),
    ]
}

/// What the reference knows about one timeout.
#[derive(Debug)]
struct Expected {
    handle: Timeout,
    fire_tick: u64,
    fired: bool,
    cancelled: bool,
    cancel_processed: bool,
}

fn pending(model: &[Expected]) -> usize {
    model
        .iter()
        .filter(|e| {
            let ended = e.fired || (e.cancelled && e.cancel_processed);
            !ended
        })
        .count()
}

/// Schedules a timeout that logs its run (its index, the tick), and adds its expectation; or,
/// with `limit` timeouts pending already, checks that the timer refuses it.
fn schedule(
    timer: &HashedWheelTimer,
    driver: &ManualDriver,
    log: &Log,
    model: &mut Vec<Expected>,
    now: u64,
    delay: Duration,
    limit: Option<usize>,
) -> Result<bool, TestCaseError> {
    let id = model.len();
    let (log, d) = (Arc::clone(log), driver.clone());
    let scheduled = timer.new_timeout(
        move |_: &Timeout| log.lock().unwrap().push((id, d.current_tick())),
        delay,
    );
    let pending = pending(model);
    if let Some(max) = limit.filter(|&max| pending >= max) {
        let refusal = TimerError::TooManyPending { pending, max };
        prop_assert_eq!(scheduled.err(), Some(refusal));
        return Ok(false);
    }
    let handle = scheduled.map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;
    let delay = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
    let calculated = now.saturating_add(delay) / T;
    let t0 = now / T;
    model.push(Expected {
        handle,
        fire_tick: calculated.max(t0),
        fired: false,
        cancelled: false,
        cancel_processed: false,
    });
    Ok(true)
}

/// The timeouts' runs, `(timeout index, tick it ran on)`, in firing order.
type Log = Arc<Mutex<Vec<(usize, u64)>>>;

fn run(ticks_per_wheel: usize, ops: Vec<Op>) -> Result<(), TestCaseError> {
    run_limited(ticks_per_wheel, None, ops)
}

/// [`run`] on a timer with a pending limit (`limit`), or none.
fn run_limited(
    ticks_per_wheel: usize,
    limit: Option<usize>,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let builder = HashedWheelTimer::builder()
        .tick_duration(Duration::from_nanos(T))
        .ticks_per_wheel(ticks_per_wheel);
    let builder = match limit {
        Some(max) => builder.max_pending_timeouts(max),
        None => builder,
    };
    let (timer, driver) = builder.build_manual().unwrap();
    timer.start().unwrap();
    let log: Log = Arc::default();
    let mut model: Vec<Expected> = Vec::new();
    let mut now: u64 = 0;
    let mut ever_fired = HashSet::new();

    for op in ops {
        match op {
            Op::Schedule(delay) => {
                schedule(&timer, &driver, &log, &mut model, now, delay, limit)?;
            }
            Op::Burst { n, delay, thin } => {
                for i in 0..n {
                    let accepted = schedule(&timer, &driver, &log, &mut model, now, delay, limit)?;
                    if accepted && thin && i % 64 != 0 {
                        let e = model.last_mut().expect("just scheduled");
                        prop_assert!(e.handle.cancel());
                        e.cancelled = true;
                    }
                }
            }
            Op::Cancel(i) => {
                if model.is_empty() {
                    continue;
                }
                let len = model.len();
                let e = &mut model[i % len];
                let wins = !e.fired && !e.cancelled;
                prop_assert_eq!(e.handle.cancel(), wins, "cancel of {:?}", e);
                e.cancelled |= wins;
            }
            Op::Advance(by) => {
                let to = now + u64::try_from(by.as_nanos()).unwrap();
                let (first, end) = (now / T, to / T); // ticks first..end get processed
                let mut expected: Vec<(usize, u64)> = Vec::new();
                if end > first {
                    for (id, e) in model.iter_mut().enumerate() {
                        if !e.fired && !e.cancelled && e.fire_tick < end {
                            prop_assert!(e.fire_tick >= first, "missed: {:?}", e);
                            e.fired = true;
                            expected.push((id, e.fire_tick));
                        }
                        e.cancel_processed |= e.cancelled;
                    }
                }
                expected.sort_by_key(|&(id, tick)| (tick, id));

                driver.advance(by);
                now = to;
                prop_assert_eq!(driver.now(), Duration::from_nanos(now));
                let fired: Vec<(usize, u64)> = std::mem::take(&mut *log.lock().unwrap());
                for &(id, _) in &fired {
                    prop_assert!(ever_fired.insert(id), "timeout {} fired twice", id);
                }
                prop_assert_eq!(fired, expected, "advance to {} ns", now);
            }
        }
        prop_assert_eq!(timer.pending_timeouts(), pending(&model), "after {:?}", op);
        for e in &model {
            prop_assert_eq!(e.handle.is_expired(), e.fired, "{:?}", e);
            prop_assert_eq!(e.handle.is_cancelled(), e.cancelled, "{:?}", e);
        }
    }

    let returned = common::stop_set(&timer);
    let never_ended: HashSet<Timeout> = model
        .iter()
        .filter(|e| !e.fired && !e.cancelled)
        .map(|e| e.handle.clone())
        .collect();
    prop_assert_eq!(returned.len(), never_ended.len());
    prop_assert!(returned == never_ended, "stop() returned the wrong set");
    prop_assert!(log.lock().unwrap().is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(common::model_config(256))]

    #[test]
    fn fires_on_nettys_tick_never_twice_and_counts_pending(
        ticks_per_wheel in 1usize..=16,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run(ticks_per_wheel, ops)?;
    }

    /// With a pending limit, a timeout is refused exactly while `limit` are pending: those
    /// cancelled count until the worker's next tick, those expired do not (Netty's
    /// `maxPendingTimeouts`), and one refused never runs.
    #[test]
    fn a_pending_limit_refuses_exactly_at_the_count(
        ticks_per_wheel in 1usize..=16,
        limit in 1usize..=6,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run_limited(ticks_per_wheel, Some(limit), ops)?;
    }

    #[test]
    fn far_timeouts_fire_on_nettys_tick_in_transfer_order(
        ticks_per_wheel in 1usize..=8,
        ops in proptest::collection::vec(far_op(), 1..120),
    ) {
        run(ticks_per_wheel, ops)?;
    }
}

proptest! {
    #![proptest_config(common::model_config(32))]

    /// Bursts of thousands, thinned or not, among single timeouts: the worker's slab grows
    /// and is trimmed as they drain, and nothing fires early, late or twice.
    #[test]
    fn bursts_and_trims_fire_on_nettys_tick(
        ticks_per_wheel in 1usize..=64,
        ops in proptest::collection::vec(burst_op(), 10..40),
    ) {
        run(ticks_per_wheel, ops)?;
    }
}
