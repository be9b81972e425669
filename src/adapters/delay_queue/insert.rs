//! Deadlines in: `insert`, `insert_at`, `reset` and `reset_at`, waking or re-arming as needed.

use super::{DelayQueue, Item, Key, Slot};
use std::time::{Duration, Instant};

impl<T> DelayQueue<T> {
    /// Inserts `value`, due `timeout` from now, and returns its key.
    ///
    /// # Panics
    /// When the queue already holds 2^27 - 1 items.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// queue.insert("never", Duration::MAX); // accepted; never fires
    /// ```
    #[inline]
    #[track_caller]
    pub fn insert(&mut self, value: T, timeout: Duration) -> Key {
        self.insert_nanos(value, self.timer.0.clock.after(timeout))
    }

    /// Inserts `value`, due at `when` (at once if it has passed), and returns its key.
    ///
    /// # Panics
    /// When the queue already holds 2^27 - 1 items.
    #[track_caller]
    pub fn insert_at(&mut self, value: T, when: Instant) -> Key {
        self.insert_nanos(value, self.nanos_at(when))
    }

    /// `when` on the timer's clock. On a manual clock, a past `when` is its now, so that items
    /// due at once come back in the order they were placed.
    fn nanos_at(&self, when: Instant) -> u64 {
        let clock = &self.timer.0.clock;
        let deadline = clock.nanos_at(when);
        if clock.is_manual() {
            deadline.max(clock.now())
        } else {
            deadline
        }
    }

    #[inline]
    #[track_caller]
    fn insert_nanos(&mut self, value: T, deadline: u64) -> Key {
        let stamp = self.stamp;
        let index = self.take_id(Slot::Waiting { stamp });
        self.stamp = stamp.wrapping_add(1);
        self.wait(index, Item { value, deadline });
        Key { index, stamp }
    }

    /// Places `item` in the wheel under `id`, and wakes the waiting task if it must hear of it.
    #[inline]
    fn wait(&mut self, id: u32, item: Item<T>) {
        let deadline = item.deadline;
        self.wheel.insert(id, deadline, item);
        self.wake_for(deadline);
    }

    /// Moves the item's deadline to `timeout` from now, expired or not (it then waits again).
    ///
    /// # Panics
    /// If `key` names no item.
    #[track_caller]
    pub fn reset(&mut self, key: &Key, timeout: Duration) {
        self.reset_nanos(key, self.timer.0.clock.after(timeout));
    }

    /// Moves the deadline of the item under `key` to `when`; a past `when` makes it due at once.
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
        self.reset_nanos(key, self.nanos_at(when));
    }

    #[track_caller]
    fn reset_nanos(&mut self, key: &Key, deadline: u64) {
        let Some(Item { value, .. }) = self.take_item(key) else {
            panic!("DelayQueue::reset: the key names no item");
        };
        self.slots[key.index as usize] = Slot::Waiting { stamp: key.stamp };
        self.wait(key.index, Item { value, deadline });
    }

    /// An item due at `deadline` was just placed: the waiting task hears of it by its tick's end.
    #[inline]
    fn wake_for(&mut self, deadline: u64) {
        if self.sleep.is_none() {
            // Nothing armed: a waiting task (one that saw the queue empty) polls to arm it.
            if self.waker.is_some() {
                self.wake_waiting();
            }
            return;
        }
        // Common case, no division or clock read: the item lies past the armed tick's end.
        let armed_end = self.armed.saturating_add(1).saturating_mul(self.tick_nanos);
        if deadline >= armed_end {
            return;
        }
        self.wake_sooner(deadline);
    }

    /// [`wake_for`](DelayQueue::wake_for) an item that may be due, or fires by the armed tick.
    #[cold]
    fn wake_sooner(&mut self, deadline: u64) {
        if deadline <= self.timer.0.clock.passed() {
            self.wake_waiting();
            return;
        }
        // At or after the armed tick, the `Sleep` completes once the item's tick has ended.
        let fire = (deadline / self.tick_nanos).max(self.wheel.tick());
        if fire < self.armed {
            self.arm(fire);
        }
    }
}
