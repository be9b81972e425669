//! The public [`Key`] and [`Expired`]; touches only the clock, to add up a deadline.

use crate::clock::instant_after;
use std::fmt;
use std::time::Instant;

/// Names a value in a [`DelayQueue`](super::DelayQueue) until it is removed or yielded, and
/// then no other: [`DelayQueue::try_remove`](super::DelayQueue::try_remove) returns `None`. (A
/// key holds a 32-bit count of the queue's inserts: one kept across exactly 2^32 later inserts
/// may name the value that took its slot. Each queue counts from its own offset, so a key
/// used on another queue names nothing there unless the two counts have met.)
///
/// ```
/// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
/// # use std::time::Duration;
/// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
/// let mut queue = DelayQueue::new(timer.handle());
/// let key = queue.insert("first", Duration::from_secs(60));
/// assert_eq!(queue.remove(&key).into_inner(), "first");
/// assert!(queue.try_remove(&key).is_none()); // removed: the key names nothing now
/// let next = queue.insert("second", Duration::from_secs(60)); // may reuse the slot
/// assert_ne!(next, key);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub(super) index: u32,
    pub(super) stamp: u32,
}

/// A value taken out of its [`DelayQueue`](super::DelayQueue), expired or removed.
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
    pub(super) value: T,
    /// `Clock::instant_parts`, summed only if asked: most callers of `remove` never ask.
    pub(super) deadline: (Instant, u64),
    pub(super) key: Key,
}

impl<T> Expired<T> {
    /// The value, by reference.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// let key = queue.insert(vec![1, 2], Duration::from_secs(60));
    /// assert_eq!(queue.remove(&key).get_ref().len(), 2);
    /// ```
    pub fn get_ref(&self) -> &T {
        &self.value
    }

    /// The value, mutably.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// let key = queue.insert(vec![1, 2], Duration::from_secs(60));
    /// let mut removed = queue.remove(&key);
    /// removed.get_mut().push(3);
    /// assert_eq!(removed.into_inner(), [1, 2, 3]);
    /// ```
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.value
    }

    /// The value, taken out.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::task::{Context, Poll, Waker};
    /// # use std::time::Duration;
    /// let (timer, driver) = HashedWheelTimer::builder().build_manual()?;
    /// let mut queue = DelayQueue::new(timer.handle());
    /// queue.insert(String::from("session 7"), Duration::from_secs(1));
    /// driver.advance(Duration::from_secs(2));
    /// let mut cx = Context::from_waker(Waker::noop());
    /// let expired = queue.poll_expired(&mut cx).map(|e| e.unwrap().into_inner());
    /// assert_eq!(expired, Poll::Ready(String::from("session 7")));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn into_inner(self) -> T {
        self.value
    }

    /// The deadline the value had (never before the one asked for).
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::{Duration, Instant};
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// let before = Instant::now();
    /// let key = queue.insert("idle", Duration::from_secs(60));
    /// assert!(queue.remove(&key).deadline() >= before + Duration::from_secs(60));
    /// ```
    pub fn deadline(&self) -> Instant {
        instant_after(self.deadline.0, self.deadline.1)
    }

    /// The key the value had, which names nothing in the queue any more.
    ///
    /// ```
    /// # use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let mut queue = DelayQueue::new(timer.handle());
    /// let key = queue.insert("idle", Duration::from_secs(60));
    /// assert_eq!(queue.remove(&key).key(), key);
    /// ```
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
