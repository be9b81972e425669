//! tokio-util's `DelayQueue` on this crate's wheel. Owns [`DelayQueue`], [`Key`], [`Expired`]:
//! each item under a slot id of the queue's own (`slots.rs`), waiting in a private
//! `engine::wheel::Wheel` under that id, or expired in `ready`; driven on the owner's task
//! (`insert.rs`, `poll.rs`), and one [`Sleep`] on the timer that wakes the polling task.
//!
//! # Ground rules
//! - The wheel ticks on the timer's grid: a `Sleep` armed for the start of tick `t` completes
//!   once the worker has passed the end of `t`. It is armed for the wheel's next tick with work
//!   (`Wheel::next_work`), so each wake-up finds work, if not always an item.
//! - Every tick before the wheel's has been processed; inserts go in at the wheel's tick.
//! - A key is a slot id and a stamp, a 32-bit count of inserts from the queue's own offset
//!   (`first_stamp`): a dead key names no later value, within the limits [`Key`] gives.
//! - Whatever empties the queue or makes an item due at once wakes the waiting task; a move to
//!   an earlier fire tick re-arms the `Sleep`.
//! - Never early: inserts read the timer's clock, which rounds up, and the wheel gives up an
//!   item only once the clock has reached its deadline.

mod insert;
mod poll;
mod slots;

use super::keep_alive;
use crate::engine::wheel::Wheel;
use crate::sync::{process, Ordering};
use crate::timer::KeepAlive;
use crate::{Sleep, TimerHandle};
use slots::Slot;
use std::collections::VecDeque;
use std::fmt;
use std::task::Waker;
use std::time::Instant;

/// Buckets of the queue's wheel: one far level's worth (further items wait in far slots).
const BUCKETS: usize = 64;
/// The most items a queue holds at once.
const MAX_ITEMS: usize = (1 << 27) - 1;
const UNARMED: u64 = u64::MAX;

/// A queue of values, each returned once its deadline has passed (tokio-util's `DelayQueue`,
/// on a [`HashedWheelTimer`](crate::HashedWheelTimer)'s clock).
///
/// [`poll_expired`](DelayQueue::poll_expired) (or the `Stream`, feature `stream`) yields each
/// value once, as an [`Expired`], never early and at most about a tick late (build the timer
/// with a 1 ms tick, as below). Items come back by deadline, equal ones in insertion (or last
/// reset) order. An instant before the timer was built counts as its start (tokio-util's
/// counts from the queue's).
///
/// - **Single-owner** (`&mut self`); while a task waits, the queue costs the timer one pending
///   timeout, which a pending limit does not refuse.
/// - **Any `Duration`** is accepted: one past 64-bit nanoseconds (584 years) never fires.
/// - **Empty:** `poll_expired` returns `Ready(None)`, and the next insert wakes the task that
///   saw it (as tokio-util's); `remove` or `clear` emptying the queue wakes the waiting task.
/// - **The timer runs while the queue exists**. Once it is stopped (`stop()`), `poll_expired`
///   returns what is due, then panics while items wait (as tokio-util's on a runtime that has
///   shut down).
/// - **Methods** are tokio-util's, but the queue is built with `DelayQueue::new(timer.handle())`,
///   not in a runtime, and [`shrink_to_fit`](DelayQueue::shrink_to_fit) stands for `compact`.
///
/// ```
/// use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
/// use std::time::Duration;
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
/// let mut queue = DelayQueue::new(timer.handle());
/// let idle = queue.insert("connection 7", Duration::from_millis(5));
/// queue.insert("connection 8", Duration::from_millis(2));
/// queue.reset(&idle, Duration::from_millis(10)); // traffic on connection 7
/// futures::executor::block_on(async {
///     let first = std::future::poll_fn(|cx| queue.poll_expired(cx)).await.unwrap();
///     assert_eq!(first.into_inner(), "connection 8");
///     let next = std::future::poll_fn(|cx| queue.poll_expired(cx)).await.unwrap();
///     assert_eq!(next.key(), idle);
///     assert!(std::future::poll_fn(|cx| queue.poll_expired(cx)).await.is_none()); // empty
/// });
/// ```
pub struct DelayQueue<T> {
    /// Per slot id below its length: free, waiting in the wheel, or expired in `ready`.
    slots: Vec<Slot>,
    /// The free ids below `slots.len()`, the next one to take last.
    free: Vec<u32>,
    stamp: u32,
    /// Waiting items, each under its slot id, by fire tick.
    wheel: Wheel<Item<T>>,
    tick_nanos: u64,
    /// Expired items in yield order, `None` where one left before its turn; never `None` at
    /// the front ([`DelayQueue::drop_stale_front`]).
    ready: VecDeque<Option<(Key, Item<T>)>>,
    /// The place in yield order of the front of `ready` (a count that wraps).
    ready_base: u32,
    /// Armed for the start of tick `armed`.
    sleep: Option<Sleep>,
    armed: u64,
    /// The task that last saw `Pending`, or `Ready(None)` on an empty queue.
    waker: Option<Waker>,
    timer: KeepAlive,
}

static NEXT_FIRST_STAMP: process::AtomicUsize = process::AtomicUsize::new(0);

/// A new queue's first stamp: successive queues start 2^32 / the golden ratio apart.
fn first_stamp() -> u32 {
    // Relaxed: a spread of values, in no protocol.
    NEXT_FIRST_STAMP.fetch_add(0x9E37_79B9, Ordering::Relaxed) as u32
}

/// An item's value and deadline, in the wheel or in `ready`.
struct Item<T> {
    value: T,
    deadline: u64,
}

/// Panics if `items` is more than a queue holds.
#[track_caller]
fn check_capacity(items: usize) {
    assert!(
        items <= MAX_ITEMS,
        "DelayQueue: capacity overflow ({items} items asked for, at most 2^27 - 1)"
    );
}

impl<T> DelayQueue<T> {
    /// An empty queue on `timer`'s clock, which it keeps running.
    ///
    /// # Panics
    /// If the timer is stopped (its owner dropped with no adapter left on it, or `stop()`).
    pub fn new(timer: TimerHandle) -> Self {
        DelayQueue::with_capacity(timer, 0)
    }

    /// An empty queue with room for `capacity` items before it allocates.
    ///
    /// # Panics
    /// If `capacity` is above 2^27 - 1, the most items a queue holds ("capacity overflow"); if
    /// the timer is stopped, as [`new`](DelayQueue::new).
    #[track_caller]
    pub fn with_capacity(timer: TimerHandle, capacity: usize) -> Self {
        check_capacity(capacity);
        let timer = keep_alive("DelayQueue", timer);
        let tick_nanos = timer.0.tick_nanos;
        let now = timer.0.clock.now();
        let mut wheel = Wheel::new(BUCKETS, tick_nanos);
        wheel.advance_to(now / tick_nanos);
        DelayQueue {
            slots: Vec::with_capacity(capacity),
            free: Vec::new(),
            stamp: first_stamp(),
            wheel,
            tick_nanos,
            ready: VecDeque::new(),
            ready_base: 0,
            sleep: None,
            armed: UNARMED,
            waker: None,
            timer,
        }
    }

    /// Items the queue holds (waiting, or expired and not yet yielded).
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether the queue holds no item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// Values are never pinned: the queue moves them in and out of its wheel.
impl<T> Unpin for DelayQueue<T> {}

impl<T> Drop for DelayQueue<T> {
    /// The wakers go first, their panics caught and counted (a panic while a value's panic
    /// unwinds would abort); every value is dropped, and the first panic of theirs goes on.
    fn drop(&mut self) {
        let (sleep, waker) = (self.sleep.take(), self.waker.take());
        self.drop_waker_caught(sleep);
        self.drop_waker_caught(waker);
        if let Err(panic) = self.drop_values() {
            std::panic::resume_unwind(panic);
        }
    }
}

impl<T> fmt::Debug for DelayQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayQueue")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .field("tick", &self.wheel.tick())
            .field("armed", &(self.armed != UNARMED).then_some(self.armed))
            .finish_non_exhaustive()
    }
}

/// Names a value in a [`DelayQueue`] until it is removed or yielded, and then no other. A key
/// holds a 32-bit count of the queue's inserts: one kept across exactly 2^32 later inserts may
/// name the value that took its slot. A key used on another queue names nothing there unless
/// the two queues' counts (each from its own offset) have met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    index: u32,
    stamp: u32,
}

/// A value taken out of its [`DelayQueue`], expired or removed.
pub struct Expired<T> {
    value: T,
    deadline: Instant,
    key: Key,
}

impl<T> Expired<T> {
    /// The value, by reference.
    pub fn get_ref(&self) -> &T {
        &self.value
    }

    /// The value, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.value
    }

    /// The value, taken out.
    pub fn into_inner(self) -> T {
        self.value
    }

    /// The deadline the value had (never before the one asked for).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The key the value had, which names nothing in the queue any more.
    pub fn key(&self) -> Key {
        self.key
    }
}

impl<T: fmt::Debug> fmt::Debug for Expired<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Expired")
            .field("value", &self.value)
            .field("deadline", &self.deadline())
            .field("key", &self.key)
            .finish()
    }
}
