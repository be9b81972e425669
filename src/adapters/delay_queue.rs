//! A queue of values that come back at their deadlines: tokio-util's `DelayQueue`, on this
//! crate's wheel, with the same method names where the meaning is the same.
//!
//! Owns [`DelayQueue`], [`Key`] and [`Expired`]. The queue keeps its values in a slab of its own
//! and their deadlines in a private `wheel::Wheel` whose keys are the slab's indices (the pure
//! wheel the timer's worker uses, driven here by the queue's owner, on the owner's task): a
//! waiting item's wheel entry is under its own index, so neither keeps the other's key. One [`Sleep`] on
//! the timer is armed for the wheel's next fire tick and wakes the task that polls the queue.
//! Touches the wheel, the timer's clock and tick (through its handle) and `Sleep`.
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

use super::StoppedTimer;
use crate::clock::{duration_to_nanos, instant_after, Clock};
use crate::wheel::{Wheel, MAX_ENTRIES, NO_INDEX};
use crate::{Sleep, TimerError, TimerHandle};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

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
    slots: Vec<Slot<T>>,
    /// Head of the vacant slots' list.
    free: u32,
    /// Items held: waiting in the wheel, or expired and not yet yielded.
    len: usize,
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

/// A slot of the slab: a stamp and a value, no wheel key (the wheel keys a waiting item's
/// entry by the slot's index); a waiting item's deadline is in the wheel's entry.
enum Slot<T> {
    Vacant {
        next: u32,
    },
    /// In the wheel, under the slot's index.
    Waiting {
        stamp: u32,
        value: T,
    },
    /// Expired, not yet yielded (its key is in `ready`).
    Ready {
        stamp: u32,
        value: T,
        deadline: u64,
    },
}

/// Names a value in a [`DelayQueue`], from its insertion until it is removed or yielded.
///
/// A key that no longer names a value (removed, yielded, cleared) names no other either:
/// [`DelayQueue::try_remove`] returns `None` for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    index: u32,
    stamp: u32,
}

/// A value whose deadline has passed, taken out of its [`DelayQueue`] (or removed from it).
///
/// ```
/// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
/// # use std::time::Duration;
/// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
/// let mut queue = DelayQueue::new(timer.handle());
/// let key = queue.insert(7, Duration::from_secs(60));
/// let removed = queue.remove(&key);
/// assert_eq!((removed.key(), *removed.get_ref()), (key, 7));
/// ```
pub struct Expired<T> {
    value: T,
    /// The deadline in the parts of `Clock::instant_parts`, added up by
    /// [`deadline`](Expired::deadline): most callers of `remove` never ask for it.
    deadline: (Instant, u64),
    key: Key,
}

impl<T> Expired<T> {
    /// The value.
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

    /// The deadline the value had.
    pub fn deadline(&self) -> Instant {
        instant_after(self.deadline.0, self.deadline.1)
    }

    /// The key the value had.
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
            slots: Vec::with_capacity(capacity),
            free: NO_INDEX,
            len: 0,
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

    /// Inserts `value`, due `timeout` from now, and returns its key.
    ///
    /// # Panics
    /// When the queue already holds 134 217 727 (2^27 - 1) items.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// queue.insert("never", Duration::MAX); // accepted; never fires
    /// assert_eq!(queue.len(), 1);
    /// ```
    #[inline]
    pub fn insert(&mut self, value: T, timeout: Duration) -> Key {
        let timeout = duration_to_nanos(timeout);
        if !self.burst {
            return self.insert_after_reading(value, timeout);
        }
        // In a burst the item goes in first, as if the clock read `slack` past the last
        // reading; the fresh reading only checks that this is not early (ground rules).
        let read = self.last_read.saturating_add(self.slack);
        let deadline = read.saturating_add(timeout);
        let key = self.insert_nanos(value, deadline, read);
        if self.raw_limit == 0 || self.timer.shared.clock.raw() > self.raw_limit {
            self.burst_checked(&key, timeout, deadline);
        }
        key
    }

    /// The item under `key`, just inserted in a burst at `deadline`, is checked against a
    /// full reading of the clock: it moves if its deadline would be early (and the burst ends),
    /// or the burst counts from this reading.
    #[inline(never)]
    fn burst_checked(&mut self, key: &Key, timeout: u64, deadline: u64) {
        let now = self.timer.shared.clock.now_upper();
        self.last_read = now;
        if now.saturating_add(timeout) > deadline {
            self.burst_ended(key, now, timeout);
        } else {
            self.renew_raw_limit();
        }
    }

    /// Sets the raw limit for the burst counting from `last_read`.
    fn renew_raw_limit(&mut self) {
        let upper = self.last_read.saturating_add(self.slack / 2);
        self.raw_limit = self.timer.shared.clock.raw_limit(upper).unwrap_or(0);
    }

    /// [`insert`](DelayQueue::insert) out of a burst: the clock is read first.
    #[inline(never)]
    fn insert_after_reading(&mut self, value: T, timeout: u64) -> Key {
        let now = self.read_clock();
        self.insert_nanos(value, now.saturating_add(timeout), now)
    }

    /// The clock moved more than `slack` since the last reading: the item under `key`, just
    /// inserted at a deadline that would be early, moves to the one the reading `now` gives,
    /// and the next insert reads first.
    #[cold]
    #[inline(never)]
    fn burst_ended(&mut self, key: &Key, now: u64, timeout: u64) {
        self.burst = false;
        self.reset_nanos(key, now.saturating_add(timeout), now);
    }

    /// Inserts `value`, due at `when`, and returns its key. A `when` that has passed is due at
    /// once.
    ///
    /// # Panics
    /// When the queue already holds 134 217 727 (2^27 - 1) items.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::{Duration, Instant};
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// let at = Instant::now() + Duration::from_secs(30);
    /// let key = queue.insert_at("lease", at);
    /// assert!(queue.deadline(&key) >= at);
    /// ```
    pub fn insert_at(&mut self, value: T, when: Instant) -> Key {
        let deadline = self.timer.shared.clock.nanos_at(when);
        self.insert_nanos(value, deadline, NO_READING)
    }

    #[inline(always)]
    #[track_caller]
    fn insert_nanos(&mut self, value: T, deadline: u64, read: u64) -> Key {
        let stamp = self.stamp;
        let slot = Slot::Waiting { stamp, value };
        let index = if self.free == NO_INDEX {
            let index = self.new_index();
            self.slots.push(slot);
            index
        } else {
            // The free list's head.
            let index = self.free;
            let vacant = &mut self.slots[index as usize];
            if let Slot::Vacant { next } = *vacant {
                self.free = next;
            }
            *vacant = slot;
            index
        };
        self.stamp = stamp.wrapping_add(1);
        self.wait(index, deadline);
        self.len += 1;
        self.wake_for(deadline, read);
        Key { index, stamp }
    }

    /// Puts slot `index` in the wheel, due at `deadline`, under the key `index`.
    #[inline]
    fn wait(&mut self, index: u32, deadline: u64) {
        self.wheel
            .insert_keyed(index, index, 0, deadline, self.tick);
    }

    /// The index of a slot pushed at the end of the slab.
    ///
    /// # Panics
    /// Before anything changes, when the index would not be a wheel key.
    #[inline]
    #[track_caller]
    fn new_index(&self) -> u32 {
        let index = self.slots.len();
        assert!(
            index < MAX_ENTRIES,
            "DelayQueue: at most 2^27 - 1 items at once"
        );
        index as u32
    }

    /// Reads the producers' clock, and notes whether the reading is within `slack` of the
    /// last one (inserts come in a burst).
    fn read_clock(&mut self) -> u64 {
        let now = self.timer.shared.clock.now_upper();
        self.burst = now <= self.last_read.saturating_add(self.slack);
        self.last_read = now;
        if self.burst {
            self.renew_raw_limit();
        }
        now
    }

    /// The item under `key`, if it names one: its slot.
    fn slot_of(&self, key: &Key) -> Option<&Slot<T>> {
        match self.slots.get(key.index as usize)? {
            slot @ (Slot::Waiting { stamp, .. } | Slot::Ready { stamp, .. })
                if *stamp == key.stamp =>
            {
                Some(slot)
            }
            _ => None,
        }
    }

    /// Removes the item under `key` and returns it, whether or not its deadline has passed.
    ///
    /// # Panics
    /// If `key` names no item (it was removed, yielded or cleared), as tokio-util's does; see
    /// [`try_remove`](DelayQueue::try_remove).
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// let key = queue.insert("request 1", Duration::from_secs(5));
    /// assert_eq!(queue.remove(&key).into_inner(), "request 1"); // the reply came
    /// assert!(queue.is_empty());
    /// ```
    #[track_caller]
    pub fn remove(&mut self, key: &Key) -> Expired<T> {
        self.try_remove(key)
            .expect("DelayQueue::remove: the key names no item")
    }

    /// Removes the item under `key` and returns it, or `None` if `key` names no item.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// let key = queue.insert((), Duration::from_secs(5));
    /// assert!(queue.try_remove(&key).is_some());
    /// assert!(queue.try_remove(&key).is_none());
    /// ```
    pub fn try_remove(&mut self, key: &Key) -> Option<Expired<T>> {
        self.slot_of(key)?;
        let (value, deadline) = self.vacate(key);
        if self.len == 0 {
            self.emptied();
        }
        Some(Expired {
            value,
            deadline: self.timer.shared.clock.instant_parts(deadline),
            key: *key,
        })
    }

    /// Takes the item under `key` out of its (occupied) slot and, if it waits, the wheel (an
    /// expired item's key in `ready` goes stale); the slot joins the free list.
    fn vacate(&mut self, key: &Key) -> (T, u64) {
        match self.free_slot(key.index) {
            Slot::Waiting { value, .. } => {
                let deadline = self.wheel.deadline(key.index);
                self.wheel.remove(key.index);
                (value, deadline)
            }
            Slot::Ready {
                value, deadline, ..
            } => {
                self.drop_stale_front();
                (value, deadline)
            }
            Slot::Vacant { .. } => unreachable!("vacate: the caller checked the slot"),
        }
    }

    /// Puts occupied slot `index` on the free list; what it held.
    fn free_slot(&mut self, index: u32) -> Slot<T> {
        let slot = &mut self.slots[index as usize];
        let taken = std::mem::replace(slot, Slot::Vacant { next: self.free });
        self.free = index;
        self.len -= 1;
        taken
    }

    /// Whether `key` in `ready` names an expired item still there.
    fn is_ready(&self, key: &Key) -> bool {
        matches!(self.slots.get(key.index as usize),
            Some(Slot::Ready { stamp, .. }) if *stamp == key.stamp)
    }

    /// Drops the stale keys at the front of `ready` (their items left it otherwise), so that
    /// its front names the next item to yield.
    fn drop_stale_front(&mut self) {
        while let Some(key) = self.ready.front() {
            if self.is_ready(key) {
                break;
            }
            self.ready.pop_front();
        }
    }

    /// The queue has just become empty (`len` is 0; the slab holds values only if `clear`
    /// let go of them): its `Sleep` goes (its timeout is cancelled), the slab starts again
    /// from index 0 (keys' stamps keep old keys apart), and the task waiting on the queue is
    /// woken to see `Ready(None)`.
    fn emptied(&mut self) {
        self.sleep = None;
        self.armed = UNARMED;
        self.free = NO_INDEX;
        self.ready.clear();
        self.wheel.release_nodes();
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
        // Last, for a value's drop may panic: the queue is empty and whole already, and the
        // slab's length is 0 before the first value is dropped (the rest are dropped all the
        // same as the panic unwinds).
        self.slots.clear();
    }

    /// Moves the deadline of the item under `key` to `timeout` from now, whether or not it had
    /// expired (an expired item not yet yielded waits again). The old deadline no longer counts.
    ///
    /// # Panics
    /// If `key` names no item.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::{Duration, Instant};
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// let key = queue.insert("idle", Duration::from_secs(5));
    /// queue.reset(&key, Duration::from_secs(60)); // traffic: idle for another minute
    /// assert!(queue.deadline(&key) > Instant::now() + Duration::from_secs(59));
    /// ```
    #[track_caller]
    pub fn reset(&mut self, key: &Key, timeout: Duration) {
        // Never early: the producers' clock rounds up.
        let now = self.read_clock();
        self.reset_nanos(key, now.saturating_add(duration_to_nanos(timeout)), now);
    }

    /// Moves the deadline of the item under `key` to `when` (see
    /// [`reset`](DelayQueue::reset)); a `when` that has passed makes it due at once.
    ///
    /// # Panics
    /// If `key` names no item.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::{Duration, Instant};
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// let key = queue.insert("retry", Duration::from_secs(60));
    /// queue.reset_at(&key, Instant::now()); // due now
    /// let item = futures::executor::block_on(std::future::poll_fn(|cx| queue.poll_expired(cx)));
    /// assert_eq!(item.unwrap().into_inner(), "retry");
    /// ```
    #[track_caller]
    pub fn reset_at(&mut self, key: &Key, when: Instant) {
        let deadline = self.timer.shared.clock.nanos_at(when);
        self.reset_nanos(key, deadline, NO_READING);
    }

    #[track_caller]
    fn reset_nanos(&mut self, key: &Key, deadline: u64, read: u64) {
        match self.slot_of(key) {
            Some(Slot::Waiting { .. }) => {
                self.wheel.remove(key.index);
            }
            Some(Slot::Ready { .. }) => {
                // An expired item goes back into the wheel; its key in `ready` goes stale.
                let slot = &mut self.slots[key.index as usize];
                if let Slot::Ready { stamp, value, .. } =
                    std::mem::replace(slot, Slot::Vacant { next: NO_INDEX })
                {
                    *slot = Slot::Waiting { stamp, value };
                }
                self.drop_stale_front();
            }
            _ => panic!("DelayQueue::reset: the key names no item"),
        }
        self.wait(key.index, deadline);
        self.wake_for(deadline, read);
    }

    /// An item due at `deadline` has just been placed, its deadline counting from the clock
    /// reading `read` (`NO_READING` for a deadline given as an `Instant`): the task waiting on
    /// the queue must hear of it by the end of the item's fire tick, and at once if the item is
    /// due already (its next poll takes it).
    #[inline]
    fn wake_for(&mut self, deadline: u64, read: u64) {
        if self.sleep.is_none() && self.waker.is_none() {
            return; // nobody waits: the next poll looks at the wheel
        }
        // The common case, tested without a division or a clock reading: the item fires on the
        // tick armed for or after it (the `Sleep` comes first), and is not due yet, for its
        // deadline is past the reading it counts from or past the end of the armed tick (due
        // already, it would mean that tick has ended: the `Sleep` has woken the task, or is
        // about to).
        let armed_start = self.armed.saturating_mul(self.tick_nanos);
        if deadline >= armed_start
            && (deadline > read || deadline >= armed_start.saturating_add(self.tick_nanos))
        {
            return;
        }
        self.wake_sooner(deadline);
    }

    /// [`wake_for`](DelayQueue::wake_for) an item that may be due already, or fires before the
    /// tick armed for.
    #[cold]
    #[inline(never)]
    fn wake_sooner(&mut self, deadline: u64) {
        let shared = &self.timer.shared;
        // Nothing armed (no poll has waited yet, or a refusal is being retried), or the item
        // is due already: the waiting task looks at the wheel on its next poll.
        if self.sleep.is_none() || deadline <= shared.clock.now() {
            if let Some(waker) = self.waker.take() {
                waker.wake();
            }
            return;
        }
        let fire = (deadline / self.tick_nanos).max(self.tick);
        if fire >= self.armed {
            return; // the `Sleep` completes once the item's tick has ended
        }
        let Some(sleep) = self.sleep.as_mut() else {
            unreachable!("tested above");
        };
        sleep.rearm(
            shared,
            fire.saturating_mul(self.tick_nanos),
            shared.clock.now_upper(),
        );
        self.armed = fire;
    }

    /// When the item under `key` is due.
    ///
    /// # Panics
    /// If `key` names no item.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::{Duration, Instant};
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// let key = queue.insert((), Duration::from_secs(5));
    /// assert!(queue.deadline(&key) > Instant::now());
    /// ```
    #[track_caller]
    pub fn deadline(&self, key: &Key) -> Instant {
        let nanos = match self.slot_of(key) {
            Some(Slot::Waiting { .. }) => self.wheel.deadline(key.index),
            Some(Slot::Ready { deadline, .. }) => *deadline,
            _ => panic!("DelayQueue::deadline: the key names no item"),
        };
        self.timer.shared.clock.instant_at(nanos)
    }

    /// The key of the item [`poll_expired`](DelayQueue::poll_expired) yields next, if any,
    /// whenever it comes: the next left over from the last poll's batch of due items, or, with
    /// none left, the item with the earliest deadline (the first inserted, or last reset, on a
    /// tie), due or not. Until an insert, a reset or a removal, the next item yielded is the one
    /// named.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// let later = queue.insert("b", Duration::from_secs(120));
    /// let sooner = queue.insert("a", Duration::from_secs(100));
    /// assert_eq!(queue.peek(), Some(sooner));
    /// ```
    pub fn peek(&self) -> Option<Key> {
        if let Some(key) = self.ready.front() {
            return Some(*key);
        }
        let index = self.wheel.peek(self.tick)?;
        match self.slots[index as usize] {
            Slot::Waiting { stamp, .. } => Some(Key { index, stamp }),
            _ => unreachable!("peek: the wheel holds only waiting items"),
        }
    }

    /// Yields the next item whose deadline has passed; `Pending` (and the task is woken when
    /// one is due) if none has yet; `Ready(None)` when the queue is empty, or its timer has
    /// stopped and nothing more is due.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// use std::future::poll_fn;
    ///
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// queue.insert(1, Duration::from_millis(3));
    /// futures::executor::block_on(async {
    ///     let item = poll_fn(|cx| queue.poll_expired(cx)).await.unwrap();
    ///     assert_eq!(item.into_inner(), 1);
    ///     assert!(poll_fn(|cx| queue.poll_expired(cx)).await.is_none(), "empty: None");
    /// });
    /// ```
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        loop {
            if let Some(item) = self.pop_ready() {
                return Poll::Ready(Some(item));
            }
            if self.len == 0 {
                return Poll::Ready(None);
            }
            if self.expire_due() {
                continue;
            }
            let Some(fire) = self.wheel.next_fire_tick(self.tick) else {
                unreachable!("items held, none ready: the wheel holds them");
            };
            self.arm(fire);
            let Some(sleep) = self.sleep.as_mut() else {
                unreachable!("armed just now");
            };
            match Pin::new(sleep).poll(cx) {
                Poll::Pending => {
                    if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        self.waker = Some(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
                // Tick `fire` has ended on the timer's clock: expire it.
                Poll::Ready(Ok(())) => continue,
                Poll::Ready(Err(TimerError::Stopped)) => {
                    // Nothing will wake the queue again; what was due has been yielded.
                    return Poll::Ready(None);
                }
                Poll::Ready(Err(_)) => {
                    // A transient refusal (the timer's pending limit): try again on the next
                    // poll, which comes at once.
                    self.sleep = None;
                    self.armed = UNARMED;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
        }
    }

    /// Arms the `Sleep` for the start of fire tick `fire` (it completes once the timer has
    /// passed the tick's end).
    fn arm(&mut self, fire: u64) {
        if self.sleep.is_some() && self.armed == fire {
            return;
        }
        let shared = &self.timer.shared;
        let deadline = fire.saturating_mul(self.tick_nanos);
        let now = shared.clock.now_upper();
        match self.sleep.as_mut() {
            Some(sleep) => sleep.rearm(shared, deadline, now),
            None => self.sleep = Some(Sleep::at(shared, deadline, now)),
        }
        self.armed = fire;
    }

    /// Moves every item now due from the wheel to `ready`, by deadline (equal ones in the
    /// order they went in); whether any moved.
    fn expire_due(&mut self) -> bool {
        let now = self.timer.shared.clock.now();
        self.burst = false; // a poll ends a burst: the next insert reads first
        let now_tick = now / self.tick_nanos;
        let mut moved = false;
        // The wheel hands a tick's entries out in the order they went in, and the ticks in
        // order, so the batch comes sorted unless deadlines within a tick went in out of order.
        let start = self.ready.len();
        let (mut last, mut sorted) = (0, true);
        while let Some(tick) = self.wheel.next_fire_tick(self.tick) {
            if tick > now_tick {
                break;
            }
            let (slots, ready) = (&mut self.slots, &mut self.ready);
            self.wheel.expire(tick, now, |index, _, _, deadline| {
                let slot = &mut slots[index as usize];
                if let Slot::Waiting { stamp, value } =
                    std::mem::replace(slot, Slot::Vacant { next: NO_INDEX })
                {
                    *slot = Slot::Ready {
                        stamp,
                        value,
                        deadline,
                    };
                    ready.push_back(Key { index, stamp });
                    moved = true;
                    sorted &= deadline >= last;
                    last = deadline;
                }
            });
            if tick == now_tick {
                // The current tick: what is not yet due stays for a later poll.
                self.tick = tick;
                break;
            }
            self.tick = tick + 1;
        }
        if !sorted {
            self.sort_ready_from(start);
        }
        moved
    }

    /// Sorts the keys in `ready` from `start` on (expired items, just moved) by deadline; a
    /// stable sort, so equal deadlines keep the order the wheel gave them in (the order they
    /// went in: an entry placed past its deadline fires on the tick it was placed on, and
    /// entries with the same deadline share a tick).
    #[cold]
    #[inline(never)]
    fn sort_ready_from(&mut self, start: usize) {
        let slots = &self.slots;
        self.ready.make_contiguous()[start..].sort_by_key(|key| match slots[key.index as usize] {
            Slot::Ready { deadline, .. } => deadline,
            _ => unreachable!("a key just moved to `ready` names an expired item"),
        });
    }

    /// Takes the first expired item out of `ready` and its slot.
    fn pop_ready(&mut self) -> Option<Expired<T>> {
        let key = self.ready.pop_front()?;
        debug_assert!(self.is_ready(&key), "the front of `ready` is never stale");
        let Slot::Ready {
            value, deadline, ..
        } = self.free_slot(key.index)
        else {
            unreachable!("the front of `ready` names an expired item");
        };
        self.drop_stale_front();
        let deadline = self.timer.shared.clock.instant_parts(deadline);
        if self.len == 0 {
            self.emptied();
        }
        Some(Expired {
            value,
            deadline,
            key,
        })
    }

    /// Drops every item. A task waiting on the queue is woken (it sees `Ready(None)`). If a
    /// value's drop panics, the queue is empty all the same, and the other values are dropped
    /// as the panic unwinds.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// let key = queue.insert(1, Duration::from_secs(5));
    /// queue.clear();
    /// assert!(queue.is_empty());
    /// assert!(queue.try_remove(&key).is_none());
    /// ```
    pub fn clear(&mut self) {
        if self.len == 0 {
            debug_assert!(self.slots.is_empty(), "emptied as `len` reached 0");
            return;
        }
        self.wheel = Wheel::new_keyed(self.tick_nanos, BUCKETS);
        self.len = 0;
        // Drops the values, last.
        self.emptied();
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
        self.len
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
        self.len == 0
    }

    /// Items the slab holds room for without allocating.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// assert_eq!(DelayQueue::<()>::with_capacity(timer.handle(), 16).capacity(), 16);
    /// ```
    pub fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// Makes room for at least `additional` more items.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let mut queue = DelayQueue::<()>::new(timer.handle());
    /// queue.reserve(100);
    /// assert!(queue.capacity() >= 100);
    /// ```
    pub fn reserve(&mut self, additional: usize) {
        self.slots.reserve(additional);
    }

    /// Gives back the memory a burst left: the slab is cut after its last item (keys stay
    /// valid; free slots below it stay, lowest reused first) and the wheel is rebuilt with only
    /// the waiting items, so its nodes shrink too. O(items). Items with equal deadlines may
    /// come back in slab order rather than insertion order. An empty queue holds no slab
    /// memory after it.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// let keys: Vec<_> = (0..10_000).map(|i| queue.insert(i, Duration::from_secs(5))).collect();
    /// for key in &keys[10..] {
    ///     queue.remove(key);
    /// }
    /// queue.shrink_to_fit();
    /// assert!(queue.capacity() < 100);
    /// assert_eq!(queue.remove(&keys[3]).into_inner(), 3);
    /// ```
    pub fn shrink_to_fit(&mut self) {
        while matches!(self.slots.last(), Some(Slot::Vacant { .. })) {
            self.slots.pop();
        }
        self.free = NO_INDEX;
        for (index, slot) in self.slots.iter_mut().enumerate().rev() {
            if let Slot::Vacant { next } = slot {
                *next = self.free;
                self.free = index as u32;
            }
        }
        self.slots.shrink_to_fit();
        self.ready.shrink_to_fit();
        let mut wheel = Wheel::new_keyed(self.tick_nanos, BUCKETS);
        for (index, slot) in self.slots.iter().enumerate() {
            if let Slot::Waiting { .. } = slot {
                let index = index as u32;
                wheel.insert_keyed(index, index, 0, self.wheel.deadline(index), self.tick);
            }
        }
        self.wheel = wheel;
    }
}

// Values are never pinned: the queue moves them in and out of its slab.
impl<T> Unpin for DelayQueue<T> {}

impl<T> fmt::Debug for DelayQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayQueue")
            .field("len", &self.len)
            .field("capacity", &self.slots.capacity())
            .field("tick", &self.tick)
            .field("armed", &(self.armed != UNARMED).then_some(self.armed))
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "stream")]
impl<T> futures_core::Stream for DelayQueue<T> {
    type Item = Expired<T>;

    /// [`DelayQueue::poll_expired`]: the stream ends (`None`) while the queue is empty, and
    /// yields again after an insert.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        self.get_mut().poll_expired(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.len))
    }
}
