//! Expiry and polling: `peek`, `poll_expired`, the `Stream`, due items moved to `ready` in
//! deadline order, and the waking `Sleep`. Touches the slab, the wheel, the clock and `Sleep`.

use super::{DelayQueue, Expired, Key, Slot, UNARMED};
use crate::shared::catch_user_panic;
use crate::wheel::NO_INDEX;
use crate::{Sleep, TimerError};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

impl<T> DelayQueue<T> {
    /// The key of the item [`poll_expired`](DelayQueue::poll_expired) yields next, due or not,
    /// until an insert, a reset or a removal.
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
        match self.slots[index] {
            Slot::Waiting { stamp, .. } => Some(Key { index, stamp }),
            _ => unreachable!("peek: the wheel holds only waiting items"),
        }
    }

    /// Yields the next item whose deadline has passed; `Pending` (the task is woken when one
    /// is due) if none; `Ready(None)` when the queue is empty (the next insert wakes the task).
    ///
    /// # Panics
    /// If the timer is stopped (`stop()`) while items wait, once what was due has been yielded:
    /// nothing can wake the queue for them.
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
            if self.slots.live() == 0 {
                // Kept, as tokio-util's: the next insert wakes the task that saw the end.
                self.keep_waker(cx.waker());
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
                    self.keep_waker(cx.waker());
                    return Poll::Pending;
                }
                // Tick `fire` has ended on the timer's clock: expire it.
                Poll::Ready(Ok(())) => continue,
                Poll::Ready(Err(TimerError::Stopped)) => {
                    // Nothing will wake the queue again; what was due has been yielded. Ending
                    // the stream here would drop the waiting items silently.
                    crate::adapters::stopped("DelayQueue", "cannot expire the items it holds");
                }
                Poll::Ready(Err(_)) => {
                    self.retry_refused(cx.waker());
                    return Poll::Pending;
                }
            }
        }
    }

    fn keep_waker(&mut self, waker: &Waker) {
        if !self.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            self.waker = Some(waker.clone());
        }
    }

    /// A refused `Sleep` (it passes a pending limit, so only with the wheel's keys all taken):
    /// the next poll, made to come at once, arms it again.
    #[cold]
    fn retry_refused(&mut self, waker: &Waker) {
        self.sleep = None;
        self.armed = UNARMED;
        waker.wake_by_ref();
    }

    /// Arms the `Sleep` for the start of fire tick `fire`: it completes once that tick ends.
    pub(super) fn arm(&mut self, fire: u64) {
        if self.sleep.is_some() && self.armed == fire {
            return;
        }
        let shared = &self.timer.shared;
        let deadline = fire.saturating_mul(self.tick_nanos);
        let now = shared.clock.now_upper();
        // Exempt from a pending limit: refused, the queue could only poll again at once.
        match self.sleep.as_mut() {
            // The waiting task's waker moves to the new timeout as a clone, user code that may
            // panic; the queue's caller (an insert's, a reset's) is not its owner. The move has
            // woken the task to poll again, and the `Sleep` is armed: count the panic.
            Some(sleep) => {
                let rearmed = catch_user_panic(|| sleep.rearm(shared, deadline, now));
                shared.counters.caught(rearmed, "a DelayQueue's waker");
            }
            None => self.sleep = Some(Sleep::exempt_at(shared, deadline, now)),
        }
        self.armed = fire;
    }

    /// Moves every due item from the wheel to `ready`, by deadline; whether any moved.
    fn expire_due(&mut self) -> bool {
        let now = self.timer.shared.clock.now();
        self.burst = false; // a poll ends a burst: the next insert reads first
        let now_tick = now / self.tick_nanos;
        // Ticks come in order, each in insertion order: sorted unless a tick's went in unsorted.
        let start = self.ready.len();
        let (mut last, mut sorted) = (0, true);
        while let Some(tick) = self.wheel.next_fire_tick(self.tick) {
            if tick > now_tick {
                break;
            }
            sorted &= self.expire_tick(tick, now, &mut last);
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
        // Only this poll pushes to `ready` meanwhile: whatever it holds past `start` moved.
        self.ready.len() > start
    }

    /// Moves tick `tick`'s items due by `now` to `ready`; false if a deadline went below `*last`.
    fn expire_tick(&mut self, tick: u64, now: u64, last: &mut u64) -> bool {
        let mut sorted = true;
        let (slots, ready) = (&mut self.slots, &mut self.ready);
        self.wheel.expire(tick, now, |index, _, deadline| {
            let slot = &mut slots[index];
            if let Slot::Waiting { stamp, value } =
                std::mem::replace(slot, Slot::Vacant { next: NO_INDEX })
            {
                *slot = Slot::Ready {
                    stamp,
                    value,
                    deadline,
                };
                ready.push_back(Key { index, stamp });
                sorted &= deadline >= *last;
                *last = deadline;
            }
        });
        sorted
    }

    /// Sorts the keys in `ready` from `start` on by deadline; stable, so equal deadlines keep
    /// insertion order (they share a tick, unless the later went in past it, on a later tick).
    #[cold]
    fn sort_ready_from(&mut self, start: usize) {
        let slots = &self.slots;
        self.ready.make_contiguous()[start..].sort_by_key(|key| match slots[key.index] {
            Slot::Ready { deadline, .. } => deadline,
            _ => unreachable!("a key just moved to `ready` names an expired item"),
        });
    }

    fn pop_ready(&mut self) -> Option<Expired<T>> {
        let key = self.ready.pop_front()?;
        debug_assert!(self.is_ready(&key), "the front of `ready` is never stale");
        let Slot::Ready {
            value, deadline, ..
        } = self.slots.remove(key.index)
        else {
            unreachable!("the front of `ready` names an expired item");
        };
        self.drop_stale_front();
        Some(self.taken_out(key, value, deadline))
    }
}

#[cfg(feature = "stream")]
impl<T> futures_core::Stream for DelayQueue<T> {
    type Item = Expired<T>;

    /// [`DelayQueue::poll_expired`]: the stream ends (`None`) while the queue is empty, and
    /// yields again after an insert, which wakes the task that saw the end.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        self.get_mut().poll_expired(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.slots.live()))
    }
}
