//! The queue's slot ids and their stamps ([`Slot`]): lookup, removal, emptying, memory.

use super::{check_capacity, DelayQueue, Expired, Item, Key, MAX_ITEMS, UNARMED};
use crate::engine::{catch_user_panic, drop_caught};
use std::panic::AssertUnwindSafe;
use std::time::Instant;

/// What a slot id holds; a waiting item's value and deadline are in the wheel under the id, an
/// expired one's in `ready`, at place `seq` in yield order.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    Free,
    Waiting { stamp: u32 },
    Ready { stamp: u32, seq: u32 },
}

impl<T> DelayQueue<T> {
    /// A slot id for `slot`: the last freed, or a new one. Panics when the queue is full.
    #[inline]
    #[track_caller]
    pub(super) fn take_id(&mut self, slot: Slot) -> u32 {
        if let Some(id) = self.free.pop() {
            self.slots[id as usize] = slot;
            return id;
        }
        assert!(
            self.slots.len() < MAX_ITEMS,
            "DelayQueue: at most 2^27 - 1 items at once"
        );
        self.slots.push(slot);
        (self.slots.len() - 1) as u32
    }

    /// What the id of `key` holds, if `key` names an item there.
    pub(super) fn slot_of(&self, key: &Key) -> Option<Slot> {
        let slot = *self.slots.get(key.index as usize)?;
        match slot {
            Slot::Waiting { stamp } | Slot::Ready { stamp, .. } if stamp == key.stamp => Some(slot),
            _ => None,
        }
    }

    /// Where the expired item at place `seq` in yield order is in `ready`.
    pub(super) fn ready_index(&self, seq: u32) -> usize {
        seq.wrapping_sub(self.ready_base) as usize
    }

    /// Takes the item under `key` out of the wheel or `ready`; its id stays taken.
    pub(super) fn take_item(&mut self, key: &Key) -> Option<Item<T>> {
        match self.slot_of(key)? {
            Slot::Waiting { .. } => self.wheel.remove(key.index),
            Slot::Ready { seq, .. } => {
                let at = self.ready_index(seq);
                let (_, item) = self.ready[at].take()?;
                self.drop_stale_front();
                Some(item)
            }
            Slot::Free => None,
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
    /// assert!(queue.try_remove(&key).is_none()); // the key names nothing now
    /// ```
    #[track_caller]
    pub fn remove(&mut self, key: &Key) -> Expired<T> {
        self.try_remove(key)
            .expect("DelayQueue::remove: the key names no item")
    }

    /// Removes the item under `key` and returns it, or `None` if `key` names no item.
    pub fn try_remove(&mut self, key: &Key) -> Option<Expired<T>> {
        let item = self.take_item(key)?;
        Some(self.taken_out(*key, item))
    }

    /// An item out of the queue, as returned: its id freed, the queue emptied if it was the last.
    #[inline]
    pub(super) fn taken_out(&mut self, key: Key, item: Item<T>) -> Expired<T> {
        self.slots[key.index as usize] = Slot::Free;
        self.free.push(key.index);
        if self.is_empty() {
            self.emptied();
        }
        Expired {
            value: item.value,
            deadline: self.timer.0.clock.instant_at(item.deadline),
            key,
        }
    }

    /// Drops the places left by items gone from the front of `ready`.
    pub(super) fn drop_stale_front(&mut self) {
        while let Some(None) = self.ready.front() {
            self.ready.pop_front();
            self.ready_base = self.ready_base.wrapping_add(1);
        }
    }

    /// Emptied: drops the `Sleep`, restarts the slot ids at 0 (stamps keep keys apart), wakes
    /// the task. Cold, so that `taken_out` inlines (`docs/performance.md`).
    #[cold]
    pub(super) fn emptied(&mut self) {
        let sleep = self.sleep.take();
        self.armed = UNARMED;
        self.ready.clear();
        self.slots.clear();
        self.free.clear();
        self.drop_waker_caught(sleep);
        self.wake_waiting();
    }

    /// Wakes the task waiting on the queue, if any; a waker's panic is counted and logged.
    pub(super) fn wake_waiting(&mut self) {
        if let Some(waker) = self.waker.take() {
            let woken = catch_user_panic(|| waker.wake());
            let counters = &self.timer.0.counters;
            counters.caught(woken, "a DelayQueue's waker");
        }
    }

    /// Drops what holds the waiting task's waker (the `Sleep`, or the waker), a panic counted.
    pub(super) fn drop_waker_caught<W>(&self, holder: W) {
        let counters = &self.timer.0.counters;
        counters.caught(drop_caught(holder), "a DelayQueue's waker");
    }

    /// Drops every value, each under its own catch (two panics in one unwind would abort).
    pub(super) fn drop_values(&mut self) -> std::thread::Result<()> {
        let mut first = Ok(());
        let mut drop_one = |item: Item<T>| {
            if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(move || drop(item))) {
                match first {
                    Ok(()) => first = Err(panic),
                    Err(_) => drop(drop_caught(panic)),
                }
            }
        };
        self.wheel.drain(|_, item| drop_one(item));
        self.ready
            .drain(..)
            .flatten()
            .for_each(|(_, item)| drop_one(item));
        first
    }

    /// When the item under `key` is due.
    ///
    /// # Panics
    /// If `key` names no item.
    #[track_caller]
    pub fn deadline(&self, key: &Key) -> Instant {
        let item = match self.slot_of(key) {
            Some(Slot::Waiting { .. }) => self.wheel.get(key.index),
            Some(Slot::Ready { seq, .. }) => {
                self.ready[self.ready_index(seq)].as_ref().map(|e| &e.1)
            }
            _ => None,
        };
        let item = item.expect("DelayQueue::deadline: the key names no item");
        self.timer.0.clock.instant_at(item.deadline)
    }

    /// Drops every item and wakes a waiting task (it sees `Ready(None)`). If values' drops
    /// panic, every item is dropped all the same; the first panic then goes on.
    pub fn clear(&mut self) {
        if self.is_empty() {
            return;
        }
        let dropped = self.drop_values();
        self.emptied();
        if let Err(panic) = dropped {
            std::panic::resume_unwind(panic);
        }
    }

    /// Items the queue has slot ids for without growing its table of them.
    pub fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// Makes room for at least `additional` more items; the ids that removals freed count.
    ///
    /// # Panics
    /// If the items held and `additional` come to more than a queue holds, 2^27 - 1.
    #[track_caller]
    pub fn reserve(&mut self, additional: usize) {
        check_capacity(self.len().saturating_add(additional));
        self.slots
            .reserve(additional.saturating_sub(self.free.len()));
    }

    /// Gives back the memory a burst left, in O(items); keys stay valid and items keep their order.
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
        let used = self.slots.iter().rposition(|s| *s != Slot::Free);
        self.slots.truncate(used.map_or(0, |last| last + 1));
        self.slots.shrink_to_fit();
        // The lowest free id taken first.
        let slots = &self.slots;
        self.free.clear();
        self.free.extend(
            (0..slots.len() as u32)
                .rev()
                .filter(|&id| slots[id as usize] == Slot::Free),
        );
        self.free.shrink_to_fit();
        self.ready.shrink_to_fit();
        self.wheel.trim(usize::MAX);
    }
}
