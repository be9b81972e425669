//! Model-based test of `DelayQueue` on the manual driver: random sequences of insert,
//! insert_at, remove, reset, reset_at, peek, poll, clear and clock moves, checked step by step
//! against a model built on a `BTreeMap` of the waiting items by (deadline, placement).
//!
//! The model is the queue's contract, with a tick of 1 ms and deadlines to the microsecond:
//! - An item's deadline is the manual time of its insert or reset plus its delay (an `Instant`
//!   in the past is now). Its placement is its insert or its last reset.
//! - `poll_expired` yields what is left of the last batch first; with nothing left it takes
//!   every waiting item whose deadline is at or before now, by deadline and then placement,
//!   as the next batch. With no batch: `Ready(None)` if the queue is empty, else `Pending`.
//! - `peek` names the front of the batch or, with none left, the waiting item with the least
//!   (deadline, placement): what `poll_expired` yields next, whenever it comes.
//! - A task that got `Pending` is woken, before its next poll, once any of these holds: the
//!   queue is empty (`remove`, `clear`); an item was placed with its deadline at or before the
//!   time of its placement (due at once); the clock has reached the end of the tick of a
//!   waiting item's deadline. Spare wake-ups are allowed.
//! - `len` counts the items held; a key that left names nothing (`try_remove` gives `None`).
//!
//! The clock moves by whole microseconds, or to 1 ns before a whole microsecond (where an item
//! yielded a nanosecond early shows), so it always reads a whole microsecond or 1 ns less, and
//! the deadlines of `insert`, `reset` and of `Instant`s in the past are such times too. A
//! manual clock reads an `Instant` against `Instant::now()` at the call, so `insert_at` and
//! `reset_at` with an `Instant` ahead land up to the call's own duration before it: those aim
//! at a whole microsecond plus `AHEAD_MARGIN`, and count only when the call took less than the
//! margin (else they are aimed again, and after `AHEAD_TRIES` the item is removed). The
//! deadline is then strictly between the whole microsecond and 1 ns before the next, where the
//! clock never reads and no other deadline lies, so every
//! comparison the queue makes (against the clock, against other deadlines, and the deadline's
//! tick) comes out as for the model's value. Two such deadlines never share their microsecond.

mod common;

use hashed_timer_wheel::delay_queue::Key;
use hashed_timer_wheel::{DelayQueue, HashedWheelTimer, ManualDriver, Timeout};
use proptest::prelude::*;
use proptest::sample::Index;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

const TICK_NANOS: u64 = 1_000_000;
const US: u64 = 1_000;
/// Past a whole microsecond, where an `Instant` ahead is aimed (see the module docs).
const AHEAD_MARGIN: u64 = 998;
/// Tries at an `Instant` ahead before the item is taken out instead.
const AHEAD_TRIES: usize = 100;

#[derive(Debug, Clone)]
enum Op {
    /// `insert` with this delay in µs.
    Insert(u64),
    /// `insert_at` this many µs from now (0 or less: an `Instant` in the past).
    InsertAt(i64),
    Remove(Index),
    /// `try_remove` of a key that names nothing any more.
    TryRemoveGone(Index),
    Reset(Index, u64),
    ResetAt(Index, i64),
    Peek,
    Poll,
    /// Moves the clock by this many µs.
    Advance(u64),
    /// Moves the clock to the next tick boundary.
    AdvanceToTick,
    /// Moves the clock to the least deadline waiting (or the first time the clock takes after
    /// it), if it is ahead; or to 1 ns before it, if that deadline is a whole µs.
    AdvanceToDeadline {
        just_before: bool,
    },
    Clear,
    /// `reserve` this many more items: the capacity then holds them beside the items held.
    Reserve(u16),
    /// `shrink_to_fit`: every key stays, and every item keeps its deadline.
    ShrinkToFit,
}

fn delay() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        6 => 0..5_000u64,
        // Past the queue's 64 buckets: far slots.
        1 => 0..300_000u64,
    ]
}

fn offset() -> impl Strategy<Value = i64> {
    prop_oneof![
        1 => -5_000..=0i64,
        4 => 1..5_000i64,
        1 => 1..300_000i64,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => delay().prop_map(Op::Insert),
        2 => offset().prop_map(Op::InsertAt),
        2 => any::<Index>().prop_map(Op::Remove),
        1 => any::<Index>().prop_map(Op::TryRemoveGone),
        2 => (any::<Index>(), delay()).prop_map(|(i, d)| Op::Reset(i, d)),
        2 => (any::<Index>(), offset()).prop_map(|(i, o)| Op::ResetAt(i, o)),
        2 => Just(Op::Peek),
        7 => Just(Op::Poll),
        4 => prop_oneof![3 => 0..1_500u64, 1 => 0..100_000u64].prop_map(Op::Advance),
        1 => Just(Op::AdvanceToTick),
        2 => any::<bool>().prop_map(|just_before| Op::AdvanceToDeadline { just_before }),
        1 => Just(Op::Clear),
        1 => (0..3_000u16).prop_map(Op::Reserve),
        1 => Just(Op::ShrinkToFit),
    ]
}

#[derive(Debug, Clone, Copy)]
struct Item {
    value: u64,
    deadline: u64,
    placed: u64,
    /// Due at or before the time of its placement.
    due_at_once: bool,
}

/// What the queue should hold and do.
#[derive(Default)]
struct Model {
    now: u64,
    items: HashMap<Key, Item>,
    /// Items waiting (not in the batch), by (deadline, placement).
    waiting: BTreeMap<(u64, u64), Key>,
    /// What is left of the last batch, in order.
    batch: VecDeque<Key>,
    /// Keys that named an item once, and name none now.
    gone: Vec<Key>,
    /// Live keys, in the order they were handed out (what `Index` picks from).
    live: Vec<Key>,
    placements: u64,
    next_value: u64,
}

impl Model {
    fn place(&mut self, key: Key, value: u64, deadline: u64) {
        self.placements += 1;
        let item = Item {
            value,
            deadline,
            placed: self.placements,
            due_at_once: deadline <= self.now,
        };
        self.items.insert(key, item);
        self.waiting.insert((deadline, item.placed), key);
    }

    /// Takes the item under `key` out of the waiting map or the batch.
    fn unplace(&mut self, key: Key) -> Item {
        let item = self.items.remove(&key).expect("a live key");
        if self.waiting.remove(&(item.deadline, item.placed)).is_none() {
            let at = self
                .batch
                .iter()
                .position(|k| *k == key)
                .expect("in the batch");
            self.batch.remove(at);
        }
        item
    }

    fn forget(&mut self, key: Key) {
        self.live.retain(|k| *k != key);
        self.gone.push(key);
    }

    fn peek(&self) -> Option<Key> {
        self.batch
            .front()
            .or_else(|| self.waiting.values().next())
            .copied()
    }

    fn poll(&mut self) -> Poll<Option<(Key, u64)>> {
        if self.batch.is_empty() {
            while let Some((&(deadline, placed), &key)) = self.waiting.iter().next() {
                if deadline > self.now {
                    break;
                }
                self.waiting.remove(&(deadline, placed));
                self.batch.push_back(key);
            }
        }
        let Some(key) = self.batch.pop_front() else {
            return if self.items.is_empty() {
                Poll::Ready(None)
            } else {
                Poll::Pending
            };
        };
        let item = self.items.remove(&key).expect("a live key");
        self.forget(key);
        Poll::Ready(Some((key, item.value)))
    }

    /// Whether a task that got `Pending` must have been woken by now.
    fn must_have_woken(&self) -> bool {
        self.items.is_empty()
            || self.waiting.keys().any(|&(deadline, placed)| {
                let tick_end = (deadline / TICK_NANOS + 1) * TICK_NANOS;
                let key = self.waiting[&(deadline, placed)];
                tick_end <= self.now || self.items[&key].due_at_once
            })
    }

    /// A deadline about `micros` ahead for an `Instant` ahead: a whole microsecond no other
    /// such deadline holds, plus `AHEAD_MARGIN`.
    fn ahead(&self, micros: u64) -> u64 {
        let mut deadline = self.now.div_ceil(US) * US + micros * US + AHEAD_MARGIN;
        while self.items.values().any(|item| item.deadline == deadline) {
            deadline += US;
        }
        deadline
    }
}

struct Run {
    timer: HashedWheelTimer,
    driver: ManualDriver,
    queue: DelayQueue<u64>,
    model: Model,
    wakes: Arc<common::WakeCount>,
    waker: Waker,
    /// The wake count when the task last got `Pending`, while it waits.
    pending_at: Option<usize>,
    /// A timeout that holds the timer at its pending limit of 1, if the run has one.
    filler: Option<Timeout>,
}

impl Run {
    /// A run on a new timer; with `at_limit`, one whose pending limit of 1 another timeout
    /// fills for the whole run.
    fn new(at_limit: bool) -> Run {
        let builder = HashedWheelTimer::builder()
            .tick_duration(Duration::from_nanos(TICK_NANOS))
            .ticks_per_wheel(64);
        let builder = if at_limit {
            builder.max_pending_timeouts(1)
        } else {
            builder
        };
        let (timer, driver) = builder.build_manual().unwrap();
        let filler = at_limit.then(|| {
            let long = Duration::from_secs(1_000_000);
            timer.new_timeout(common::noop, long).unwrap()
        });
        let queue = DelayQueue::new(timer.handle());
        let wakes = Arc::new(common::WakeCount::default());
        Run {
            timer,
            driver,
            queue,
            model: Model::default(),
            waker: Waker::from(wakes.clone()),
            wakes,
            pending_at: None,
            filler,
        }
    }

    fn wakes(&self) -> usize {
        self.wakes.0.load(SeqCst)
    }

    fn value(&mut self) -> u64 {
        self.model.next_value += 1;
        self.model.next_value
    }

    fn pick(&self, index: &Index) -> Option<Key> {
        (!self.model.live.is_empty()).then(|| *index.get(&self.model.live))
    }

    /// Aims an item at `micros` ahead by an `Instant`: inserts `value` (`key` is `None`), or
    /// resets the item under `key`. Its key, and the deadline it got, or `None` if no try was
    /// quick enough to know it (the item is then taken out of the queue).
    fn aim_ahead(&mut self, mut key: Option<Key>, value: u64, micros: u64) -> (Key, Option<u64>) {
        let deadline = self.model.ahead(micros);
        let ahead = Duration::from_nanos(deadline - self.model.now);
        for _ in 0..AHEAD_TRIES {
            let start = Instant::now();
            match key {
                None => key = Some(self.queue.insert_at(value, start + ahead)),
                Some(key) => self.queue.reset_at(&key, start + ahead),
            }
            if start.elapsed() < Duration::from_nanos(AHEAD_MARGIN) {
                return (key.expect("placed"), Some(deadline));
            }
        }
        let key = key.expect("placed");
        self.queue.remove(&key);
        (key, None)
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let now = self.model.now;
        match *op {
            Op::Insert(micros) => {
                let value = self.value();
                let key = self.queue.insert(value, Duration::from_micros(micros));
                self.check_fresh(key)?;
                self.model.place(key, value, now + micros * US);
                self.model.live.push(key);
            }
            Op::InsertAt(micros) if micros <= 0 => {
                let value = self.value();
                let when = Instant::now() - Duration::from_micros(micros.unsigned_abs());
                let key = self.queue.insert_at(value, when);
                self.check_fresh(key)?;
                self.model.place(key, value, now);
                self.model.live.push(key);
            }
            Op::InsertAt(micros) => {
                let value = self.value();
                let (key, deadline) = self.aim_ahead(None, value, micros.unsigned_abs());
                self.check_fresh(key)?;
                match deadline {
                    Some(deadline) => {
                        self.model.place(key, value, deadline);
                        self.model.live.push(key);
                    }
                    None => self.model.gone.push(key),
                }
            }
            Op::Remove(ref index) => {
                let Some(key) = self.pick(index) else {
                    return Ok(());
                };
                let removed = self.queue.remove(&key);
                let item = self.model.unplace(key);
                self.model.forget(key);
                prop_assert_eq!(removed.key(), key);
                prop_assert_eq!(removed.into_inner(), item.value);
            }
            Op::TryRemoveGone(ref index) => {
                if !self.model.gone.is_empty() {
                    let key = *index.get(&self.model.gone);
                    prop_assert!(self.queue.try_remove(&key).is_none(), "{:?} is gone", key);
                }
            }
            Op::Reset(ref index, micros) => {
                let Some(key) = self.pick(index) else {
                    return Ok(());
                };
                self.queue.reset(&key, Duration::from_micros(micros));
                let item = self.model.unplace(key);
                self.model.place(key, item.value, now + micros * US);
            }
            Op::ResetAt(ref index, micros) => {
                let Some(key) = self.pick(index) else {
                    return Ok(());
                };
                let item = self.model.unplace(key);
                if micros <= 0 {
                    let when = Instant::now() - Duration::from_micros(micros.unsigned_abs());
                    self.queue.reset_at(&key, when);
                    self.model.place(key, item.value, now);
                } else {
                    match self.aim_ahead(Some(key), item.value, micros.unsigned_abs()) {
                        (_, Some(deadline)) => self.model.place(key, item.value, deadline),
                        (_, None) => self.model.forget(key),
                    }
                }
            }
            Op::Peek => {
                prop_assert_eq!(self.queue.peek(), self.model.peek());
            }
            Op::Poll => {
                let expected = self.model.peek();
                let got = self
                    .queue
                    .poll_expired(&mut Context::from_waker(&self.waker))
                    .map(|item| item.map(|item| (item.key(), item.into_inner())));
                prop_assert_eq!(got, self.model.poll(), "at {} ns", now);
                match got {
                    Poll::Pending => self.pending_at = Some(self.wakes()),
                    Poll::Ready(Some((key, _))) => {
                        prop_assert_eq!(Some(key), expected, "peek named the next");
                        self.pending_at = None;
                    }
                    Poll::Ready(None) => self.pending_at = None,
                }
            }
            Op::Advance(micros) => self.advance_to(now + micros * US),
            Op::AdvanceToTick => self.advance_to((now / TICK_NANOS + 1) * TICK_NANOS),
            Op::AdvanceToDeadline { just_before } => {
                if let Some(&(deadline, _)) = self.model.waiting.keys().next() {
                    if !just_before {
                        self.advance_to(clock_at_or_after(deadline));
                    } else if deadline % US == 0 && deadline > 0 {
                        self.advance_to(deadline - 1);
                    }
                }
            }
            Op::Clear => {
                self.queue.clear();
                for key in std::mem::take(&mut self.model.live) {
                    self.model.gone.push(key);
                }
                self.model.items.clear();
                self.model.waiting.clear();
                self.model.batch.clear();
            }
            Op::Reserve(more) => {
                self.queue.reserve(usize::from(more));
                let room = self.queue.capacity();
                prop_assert!(room >= self.queue.len() + usize::from(more));
            }
            Op::ShrinkToFit => self.queue.shrink_to_fit(),
        }
        prop_assert_eq!(self.queue.len(), self.model.items.len());
        prop_assert_eq!(self.queue.is_empty(), self.model.items.is_empty());
        if let Some(at) = self.pending_at {
            if self.model.must_have_woken() {
                prop_assert!(
                    self.wakes() > at,
                    "the waiting task is not woken at {} ns after {:?}",
                    self.model.now,
                    op
                );
            }
        }
        Ok(())
    }

    fn advance_to(&mut self, to: u64) {
        if to > self.model.now {
            self.driver
                .advance(Duration::from_nanos(to - self.model.now));
            self.model.now = to;
        }
        assert_eq!(self.driver.now(), Duration::from_nanos(self.model.now));
    }

    fn check_fresh(&self, key: Key) -> Result<(), TestCaseError> {
        prop_assert!(
            !self.model.items.contains_key(&key) && !self.model.gone.contains(&key),
            "{:?} names an item already",
            key
        );
        Ok(())
    }
}

/// The first time at or after `nanos` the model's clock takes: a whole microsecond, or 1 ns
/// before one (see the module docs).
fn clock_at_or_after(nanos: u64) -> u64 {
    match nanos % US {
        0 | 999 => nanos,
        _ => nanos - nanos % US + 999,
    }
}

fn run(at_limit: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut run = Run::new(at_limit);
    for op in ops {
        run.step(op)?;
    }
    // The rest, all the way: each item comes out once, at its turn.
    run.step(&Op::Advance(400_000))?;
    while !run.model.items.is_empty() {
        run.step(&Op::Poll)?;
    }
    run.step(&Op::Poll)?;
    drop(run.queue);
    if let Some(filler) = &run.filler {
        prop_assert!(filler.cancel(), "the filler waited all along");
    }
    run.driver.advance(Duration::from_nanos(TICK_NANOS));
    prop_assert_eq!(run.timer.pending_timeouts(), 0, "the queue's Sleep is gone");
    Ok(())
}

proptest! {
    #![proptest_config(common::model_config(256))]

    #[test]
    fn the_queue_follows_its_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(false, &ops)?;
    }

    /// The same on a timer held at its pending limit: the queue's wake-ups pass the limit, so
    /// nothing it does is refused or late.
    #[test]
    fn the_queue_follows_its_model_at_a_full_pending_limit(
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run(true, &ops)?;
    }
}
