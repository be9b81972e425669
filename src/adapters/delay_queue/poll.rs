//! Expiry and polling: the due ticks' items moved from the wheel to `ready`, yielded in
//! deadline order, and the one `Sleep` that wakes the task polling the queue.
//!
//! Owns `peek`, `poll_expired` (and the `Stream` over it), the arming of the `Sleep` for the
//! wheel's next fire tick, and the waker of the task that last saw `Pending`. Touches the
//! slab (`slab.rs`) to take yielded items out, the wheel, the timer's clock and `Sleep`.

use super::{DelayQueue, Expired, Key, Slot, UNARMED};
use crate::wheel::NO_INDEX;
use crate::{Sleep, TimerError};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

impl<T> DelayQueue<T> {
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
        match self.slots[index] {
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
            if self.slots.live() == 0 {
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
                    // Nothing will wake the queue again; what was due has been yielded.
                    return Poll::Ready(None);
                }
                Poll::Ready(Err(_)) => {
                    self.retry_refused(cx.waker());
                    return Poll::Pending;
                }
            }
        }
    }

    /// The queue waits: `waker` is the task's to wake, unless the one kept already wakes the
    /// same task.
    fn keep_waker(&mut self, waker: &Waker) {
        if !self.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            self.waker = Some(waker.clone());
        }
    }

    /// A transient refusal of the `Sleep` (the timer's pending limit): it is dropped, to be
    /// armed again on the next poll, which `waker` makes come at once.
    #[cold]
    fn retry_refused(&mut self, waker: &Waker) {
        self.sleep = None;
        self.armed = UNARMED;
        waker.wake_by_ref();
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
        // The wheel hands a tick's entries out in the order they went in, and the ticks in
        // order, so the batch comes sorted unless deadlines within a tick went in out of order.
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

    /// Moves the items of fire tick `tick` due by `now` from the wheel to the back of `ready`.
    /// `last` is the deadline of the item this poll moved last, and is moved on; false if an
    /// item came with an earlier deadline than the one before it (the batch needs a sort).
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

    /// Sorts the keys in `ready` from `start` on (expired items, just moved) by deadline; a
    /// stable sort, so equal deadlines keep the order the wheel gave them in (the order they
    /// went in: an entry placed past its deadline fires on the tick it was placed on, and
    /// entries with the same deadline share a tick).
    #[cold]
    #[inline(never)]
    fn sort_ready_from(&mut self, start: usize) {
        let slots = &self.slots;
        self.ready.make_contiguous()[start..].sort_by_key(|key| match slots[key.index] {
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
        if self.slots.live() == 0 {
            self.emptied();
        }
        Some(Expired {
            value,
            deadline,
            key,
        })
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
        (0, Some(self.slots.live()))
    }
}
