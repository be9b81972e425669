//! The queue's values in the crate's slab, with the stamps that keep a key from naming a later
//! value: [`Slot`], lookup, removal, emptying, memory. Touches the wheel and the clock.

use super::{DelayQueue, Expired, Key, BUCKETS, UNARMED};
use crate::shared::{catch_user_panic, drop_caught};
use crate::wheel::{Vacancy, Wheel, MAX_ENTRIES};
use std::panic::AssertUnwindSafe;
use std::time::Instant;

/// A stamp and a value; a waiting item's deadline is in the wheel, under the slot's index.
pub(super) enum Slot<T> {
    Vacant {
        next: u32,
    },
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

impl<T> Vacancy for Slot<T> {
    #[inline]
    fn vacant(next: u32) -> Self {
        Slot::Vacant { next }
    }

    #[inline]
    fn next_vacant(&self) -> Option<u32> {
        match *self {
            Slot::Vacant { next } => Some(next),
            _ => None,
        }
    }
}

impl<T> DelayQueue<T> {
    /// Panics, before anything changes, unless the slab's next slot is a valid wheel key.
    #[inline]
    #[track_caller]
    pub(super) fn check_index(&self) {
        assert!(
            (self.slots.next_key() as usize) < MAX_ENTRIES,
            "DelayQueue: at most 2^27 - 1 items at once"
        );
    }

    pub(super) fn slot_of(&self, key: &Key) -> Option<&Slot<T>> {
        match self.slots.get(key.index)? {
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
    /// If `key` names no item, as tokio-util's; see [`try_remove`](DelayQueue::try_remove).
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
        let (value, deadline) = self.vacate(key)?;
        Some(self.taken_out(*key, value, deadline))
    }

    /// An item out of its slot, as returned: the queue emptied first if it was the last.
    #[inline]
    pub(super) fn taken_out(&mut self, key: Key, value: T, deadline: u64) -> Expired<T> {
        let deadline = self.timer.shared.clock.instant_parts(deadline);
        if self.slots.live() == 0 {
            self.emptied();
        }
        Expired {
            value,
            deadline,
            key,
        }
    }

    /// Frees the item's slot, if `key` names an item, and takes it out of the wheel or,
    /// expired, leaves a stale key: its value and deadline. One look at the slot, one at the
    /// wheel's node.
    fn vacate(&mut self, key: &Key) -> Option<(T, u64)> {
        let named = |slot: &Slot<T>| match slot {
            Slot::Waiting { stamp, .. } | Slot::Ready { stamp, .. } => *stamp == key.stamp,
            Slot::Vacant { .. } => false,
        };
        Some(match self.slots.remove_if(key.index, named)? {
            Slot::Waiting { value, .. } => (value, self.wheel.remove(key.index).1),
            Slot::Ready {
                value, deadline, ..
            } => {
                self.drop_stale_front();
                (value, deadline)
            }
            Slot::Vacant { .. } => unreachable!("vacate: `named` took a vacant slot"),
        })
    }

    /// Whether `key` in `ready` names an expired item still there.
    pub(super) fn is_ready(&self, key: &Key) -> bool {
        matches!(self.slots.get(key.index),
            Some(Slot::Ready { stamp, .. }) if *stamp == key.stamp)
    }

    /// Drops stale keys off the front of `ready`, so that it names the next item to yield.
    pub(super) fn drop_stale_front(&mut self) {
        while self.ready.front().is_some_and(|key| !self.is_ready(key)) {
            self.ready.pop_front();
        }
    }

    /// Emptied: drops the `Sleep`, restarts the slab at 0 (stamps keep keys apart), wakes the
    /// task. The queue is whole and empty before user code runs; every value is dropped even if
    /// some drops panic, and the first such panic goes on once the task is woken. Cold: a queue
    /// empties seldom, and this inlined would keep `taken_out` out of `remove` and
    /// `poll_expired` (`docs/performance.md`, "`DelayQueue::emptied` cold").
    #[cold]
    pub(super) fn emptied(&mut self) {
        let sleep = self.sleep.take();
        self.armed = UNARMED;
        self.ready.clear();
        self.wheel.release_nodes();
        self.drop_waker_caught(sleep);
        let dropped = std::panic::catch_unwind(AssertUnwindSafe(|| self.slots.clear()));
        self.wake_waiting();
        if let Err(panic) = dropped {
            std::panic::resume_unwind(panic);
        }
    }

    /// Wakes the task waiting on the queue, if any. A waker that panics is counted and logged,
    /// as the timer's own wakers are: the queue's caller (with an item in hand, maybe) is not
    /// the waker's owner.
    pub(super) fn wake_waiting(&mut self) {
        if let Some(waker) = self.waker.take() {
            let woken = catch_user_panic(|| waker.wake());
            let counters = &self.timer.shared.counters;
            counters.caught(woken, "a DelayQueue's waker");
        }
    }

    /// Drops what holds the waiting task's waker (the `Sleep`, or the waker itself), counting
    /// a panic of the waker's drop as `wake_waiting` counts its wake's.
    pub(super) fn drop_waker_caught<W>(&self, holder: W) {
        let counters = &self.timer.shared.counters;
        counters.caught(drop_caught(holder), "a DelayQueue's waker");
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

    /// Drops every item and wakes a waiting task (it sees `Ready(None)`). If values' drops
    /// panic, every item is dropped all the same and the queue is empty; the first panic then
    /// goes on.
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
        if self.slots.live() == 0 {
            debug_assert_eq!(self.slots.len(), 0, "emptied as the last item left");
            return;
        }
        self.wheel = Wheel::new_keyed(self.tick_nanos, BUCKETS);
        self.emptied();
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
    /// # Panics
    /// If the items held and `additional` come to more than a queue holds, 2^27 - 1.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let mut queue = DelayQueue::<()>::new(timer.handle());
    /// queue.reserve(100);
    /// assert!(queue.capacity() >= 100);
    /// ```
    #[track_caller]
    pub fn reserve(&mut self, additional: usize) {
        super::check_capacity(self.slots.live().saturating_add(additional));
        self.slots.reserve(additional);
    }

    /// Gives back the memory a burst left, in O(items); keys stay valid, and items keep their
    /// order (equal deadlines too).
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
        self.slots.shrink_to_fit();
        self.ready.shrink_to_fit();
        // The waiting items, each list in order: equal deadlines keep their order.
        let mut wheel = Wheel::new_keyed(self.tick_nanos, BUCKETS);
        self.wheel.for_each_by_list(|index, deadline| {
            wheel.insert_at(index, index, deadline, self.tick);
        });
        self.wheel = wheel;
    }
}
