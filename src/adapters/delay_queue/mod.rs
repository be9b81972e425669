//! A queue of values that come back at their deadlines: tokio-util's `DelayQueue`, on this
//! crate's wheel, with the same method names where the meaning is the same.
//!
//! Owns [`DelayQueue`], [`Key`] and [`Expired`]. The queue keeps its values in a slab of its
//! own and their deadlines in a private `wheel::Wheel` whose keys are the slab's indices (the
//! pure wheel the timer's worker uses, driven here by the queue's owner, on the owner's task):
//! a waiting item's wheel entry is under its own index, so neither keeps the other's key. One
//! [`Sleep`] on the timer is armed for the wheel's next fire tick and wakes the task that polls
//! the queue. Touches the wheel, the timer's clock and tick (through its handle) and `Sleep`.
//!
//! Its files, by concern: this one, the queue's state, its constants and construction;
//! `slab.rs`, the slab of values (slots, stamps, the free list; `remove`, `clear`, the
//! capacity); `insert.rs`, deadlines in (`insert`, `reset`, the burst's clock readings,
//! waking the task for a sooner item); `poll.rs`, expiry and polling (`peek`,
//! `poll_expired` and the `Stream`, due ticks moved to `ready`, the `Sleep`); `expired.rs`,
//! the [`Key`] and [`Expired`] types.
//!
//! # Ground rules
//! - The queue's wheel ticks on the timer's grid (same tick, same origin), so a `Sleep` armed
//!   for the start of fire tick `t` completes once the timer's worker has passed the end of
//!   `t`, when every entry firing on `t` is due: each wake-up finds work.
//! - Every tick before `tick` has been processed; inserts go in at `tick`.
//! - A key is a slab index and a stamp given at insertion (a 32-bit count of the queue's
//!   inserts): a removed or expired key never names a later value, even after its slot is
//!   reused, short of 2^32 inserts landing a new value in the same slot with the same stamp.
//! - Whatever makes the queue empty drops the `Sleep` (its timeout is cancelled) and wakes the
//!   task that waits on the queue, which then sees `Ready(None)`; whatever makes an item due
//!   at once wakes it too. A move to an earlier fire tick re-arms the `Sleep`, whose waker moves
//!   with it.
//! - A deadline is never early: an insert reads the producers' clock, which rounds up. In a
//!   burst (the last reading within `BURST_NANOS` of the one before, and no poll since) an
//!   insert goes into the wheel first, at the last reading plus `BURST_NANOS` (plus nothing on
//!   a manual clock), and its own reading, taken after, checks that this deadline is not
//!   early, moving the item if it is. So the wheel's work does not wait for the clock (a TSC
//!   read is slow to return), and a deadline is at most `BURST_NANOS` past the insert's own
//!   reading. The check is one TSC read against a limit (`Clock::raw_limit`) that stands for
//!   the last reading plus half of `BURST_NANOS`: past it, the insert reads the clock in full,
//!   and the burst counts from that reading.

mod expired;
mod insert;
mod poll;
mod slab;

pub use expired::{Expired, Key};

use super::StoppedTimer;
use crate::clock::Clock;
use crate::wheel::{Slab, Wheel};
use crate::{Sleep, TimerHandle};
use slab::Slot;
use std::collections::VecDeque;
use std::fmt;
use std::task::Waker;

/// Buckets of the queue's wheel: one far level's worth (entries further than 64 ticks wait in
/// far slots, moved down once per level). 1.5 KB per queue.
const BUCKETS: usize = 64;
/// No fire tick armed.
const UNARMED: u64 = u64::MAX;
/// No clock reading behind a deadline (one given as an `Instant`): see
/// [`DelayQueue::wake_for`].
const NO_READING: u64 = u64::MAX;
/// Inserts whose clock readings are within this long of each other come in a burst: each
/// goes in as if its reading were this long past the last one (see the ground rules). Of the
/// order of the producers' clock's own rounding up.
const BURST_NANOS: u64 = 1_000;

/// A queue of values, each returned once its deadline has passed (tokio-util's `DelayQueue`,
/// on a [`HashedWheelTimer`](crate::HashedWheelTimer)'s clock).
///
/// [`insert`](DelayQueue::insert) and [`insert_at`](DelayQueue::insert_at) give a [`Key`];
/// with it, [`remove`](DelayQueue::remove) takes the value back and
/// [`reset`](DelayQueue::reset) moves its deadline. [`poll_expired`](DelayQueue::poll_expired)
/// (or the `Stream` under the `stream` feature) yields each value once its deadline has passed,
/// as an [`Expired`]: never early, about a tick late at most (the timer's tick), each value
/// once. Deadlines round up to a tick: build the timer with a service-grade tick,
/// `HashedWheelTimer::new(Duration::from_millis(1), 512)` as below, not the default timer's
/// 100 ms (Netty's). Items come back by deadline, equal deadlines in the order of insertion (or
/// of the last reset): a poll with nothing left over from the one before takes every item then
/// due, sorted so, and yields them before it looks again (an item that an insert or a reset
/// makes due meanwhile comes after them). [`peek`](DelayQueue::peek) names the next.
///
/// The queue is single-owner (`&mut self`), as tokio-util's; any executor polls it. It costs
/// the timer one pending timeout (its `Sleep`) while it holds items and a task waits on it,
/// none when it is empty.
///
/// - **Any `Duration`** is accepted: a deadline past what 64-bit nanoseconds represent (about
///   584 years) never fires.
/// - **Empty:** `poll_expired` returns `Ready(None)`, and a task waiting on the queue is woken
///   when `remove` or `clear` empties it. An insert after that makes it yield again.
/// - **A stopped timer** ends the queue: `poll_expired` returns what is already due, then
///   `Ready(None)`; the values stay in the queue until removed. A [`TimerHandle`] does not
///   keep its timer alive: keep the owner ([`HashedWheelTimer`](crate::HashedWheelTimer)) for
///   as long as the queue is used. A queue built on a stopped timer (its owner already
///   dropped, say) logs an error (`log::error!`, naming `DelayQueue`), once per process.
///
/// Porting from tokio-util: build it with the timer's handle (`DelayQueue::new(timer.handle())`
/// instead of `DelayQueue::new()` in a runtime); the methods keep their names and meaning.
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
/// });
/// ```
pub struct DelayQueue<T> {
    /// The items held (waiting in the wheel, or expired and not yet yielded), under their
    /// keys' indices; in pages of 2^16 slots, so that a queue of up to 65 536 items is one
    /// page that grows as a `Vec` does, and a large one allocates a page per 65 536 inserts.
    slots: Slab<Slot<T>, 16>,
    /// The next key's stamp.
    stamp: u32,
    /// Waiting items' slab indices, by deadline, each under its own index.
    wheel: Wheel<u32>,
    /// Every tick before this one has been processed.
    tick: u64,
    tick_nanos: u64,
    /// The keys of expired items, in the order they are yielded. An item that leaves
    /// otherwise (removed, or reset into the wheel) leaves its key behind, stale: a key counts
    /// while its slot is `Ready` under its stamp. The front key is never stale
    /// ([`DelayQueue::drop_stale_front`]), so that `peek` needs no walk.
    ready: VecDeque<Key>,
    /// Armed for the start of fire tick `armed`.
    sleep: Option<Sleep>,
    armed: u64,
    /// The queue's last reading of the producers' clock.
    last_read: u64,
    /// Whether the last reading came within `slack` of the one before and no poll has come
    /// since: the next insert goes into the wheel before it reads the clock.
    burst: bool,
    /// In a burst, the fast clock's raw reading up to which an insert's time is before
    /// `last_read` plus half the slack (`Clock::raw_limit`); 0 for none (every insert reads
    /// the clock in full).
    raw_limit: u64,
    /// How far past `last_read` an insert in a burst takes its own reading to be:
    /// `BURST_NANOS`, or 0 on a manual clock (which moves only when told: its deadlines stay
    /// exact).
    slack: u64,
    /// The task that last saw `Pending`.
    waker: Option<Waker>,
    timer: TimerHandle,
}

static STOPPED: StoppedTimer = StoppedTimer::new(
    "DelayQueue",
    "its items stop expiring: poll_expired returns Ready(None) while they wait",
);

impl<T> DelayQueue<T> {
    /// An empty queue on `timer`'s clock: deadlines are measured, and the queue woken, by that
    /// timer.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let queue: DelayQueue<u64> = DelayQueue::new(timer.handle());
    /// assert!(queue.is_empty());
    /// ```
    pub fn new(timer: TimerHandle) -> Self {
        DelayQueue::with_capacity(timer, 0)
    }

    /// An empty queue with room for `capacity` items before it allocates.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let queue: DelayQueue<u64> = DelayQueue::with_capacity(timer.handle(), 1000);
    /// assert!(queue.capacity() >= 1000);
    /// ```
    pub fn with_capacity(timer: TimerHandle, capacity: usize) -> Self {
        STOPPED.check(&timer);
        let tick_nanos = timer.shared.tick_nanos;
        let now = timer.shared.clock.now();
        DelayQueue {
            slots: Slab::with_capacity(capacity),
            stamp: 0,
            wheel: Wheel::new_keyed(tick_nanos, BUCKETS),
            tick: now / tick_nanos,
            tick_nanos,
            ready: VecDeque::new(),
            sleep: None,
            armed: UNARMED,
            last_read: now,
            burst: false,
            raw_limit: 0,
            slack: if matches!(timer.shared.clock, Clock::Manual(_)) {
                0
            } else {
                BURST_NANOS
            },
            waker: None,
            timer,
        }
    }

    /// Items the queue holds (waiting, or expired and not yet yielded).
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// queue.insert((), Duration::from_secs(5));
    /// assert_eq!(queue.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.slots.live()
    }

    /// Whether the queue holds no item.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// assert!(DelayQueue::<()>::new(timer.handle()).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.slots.live() == 0
    }
}

// Values are never pinned: the queue moves them in and out of its slab.
impl<T> Unpin for DelayQueue<T> {}

impl<T> fmt::Debug for DelayQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayQueue")
            .field("len", &self.slots.live())
            .field("capacity", &self.slots.capacity())
            .field("tick", &self.tick)
            .field("armed", &(self.armed != UNARMED).then_some(self.armed))
            .finish_non_exhaustive()
    }
}
