//! Expiry and polling: `peek`, `poll_expired`, the `Stream`, and the waking `Sleep`.

use super::{DelayQueue, Expired, Key, Slot, UNARMED};
use crate::engine::catch_user_panic;
use crate::{Sleep, TimerError};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

impl<T> DelayQueue<T> {
    /// The key of the item [`poll_expired`](DelayQueue::poll_expired) yields next, due or not.
    pub fn peek(&self) -> Option<Key> {
        if let Some(Some((key, _))) = self.ready.front() {
            return Some(*key);
        }
        // The least deadline of the first fire tick is the least of all (an item placed past
        // its deadline fires on the tick it was placed on); the first on a tie.
        let (_, items) = self.wheel.first_tick()?;
        let (index, _) = items.min_by_key(|(_, item)| item.deadline)?;
        match self.slots[index as usize] {
            Slot::Waiting { stamp } => Some(Key { index, stamp }),
            _ => unreachable!("peek: the wheel holds only waiting items"),
        }
    }

    /// Yields the next item whose deadline has passed; `Pending` (the task is woken when one
    /// is due) if none; `Ready(None)` when the queue is empty (the next insert wakes the task).
    ///
    /// # Panics
    /// If the timer is stopped (`stop()`) while items wait, once what was due has been yielded:
    /// nothing can wake the queue for them.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        loop {
            if let Some(item) = self.pop_ready() {
                return Poll::Ready(Some(item));
            }
            if self.is_empty() {
                // Kept, as tokio-util's: the next insert wakes the task that saw the end.
                self.keep_waker(cx.waker());
                return Poll::Ready(None);
            }
            if self.expire_due() {
                continue;
            }
            // Not `first_tick`, which walks a bucket of the next round's items at each poll.
            let Some(tick) = self.wheel.next_work() else {
                unreachable!("items held, none ready: the wheel holds them");
            };
            self.arm(tick);
            let Some(sleep) = self.sleep.as_mut() else {
                unreachable!("armed just now");
            };
            match Pin::new(sleep).poll(cx) {
                Poll::Pending => {
                    self.keep_waker(cx.waker());
                    return Poll::Pending;
                }
                Poll::Ready(Ok(())) => continue,
                Poll::Ready(Err(TimerError::Stopped)) => {
                    // Ending the stream here would drop the waiting items silently.
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

    /// A refused `Sleep` (only with the wheel's keys all taken): the next poll arms it again.
    #[cold]
    fn retry_refused(&mut self, waker: &Waker) {
        self.sleep = None;
        self.armed = UNARMED;
        waker.wake_by_ref();
    }

    /// Arms the `Sleep` for the start of tick `tick`: it completes once that tick ends.
    pub(super) fn arm(&mut self, tick: u64) {
        if self.sleep.is_some() && self.armed == tick {
            return;
        }
        let deadline = tick.saturating_mul(self.tick_nanos);
        match self.sleep.as_mut() {
            // A refused re-arm wakes the waiting task: user code, whose panic is counted.
            Some(sleep) => {
                let rearmed = catch_user_panic(|| sleep.rearm(deadline));
                let counters = &self.timer.0.counters;
                counters.caught(rearmed, "a DelayQueue's waker");
            }
            None => self.sleep = Some(Sleep::at(&self.timer, deadline, true)),
        }
        self.armed = tick;
    }

    /// Moves every due item from the wheel to `ready`, by deadline; whether any moved.
    fn expire_due(&mut self) -> bool {
        let now = self.timer.0.clock.passed();
        let now_tick = now / self.tick_nanos;
        // Sorted unless a tick's items went in unsorted.
        let start = self.ready.len();
        let mut last = 0;
        let mut sorted = true;
        while let Some(tick) = self.wheel.next_work().filter(|&t| t <= now_tick) {
            self.wheel.advance_to(tick);
            let (slots, ready) = (&self.slots, &mut self.ready);
            // A deadline past the clock's last nanosecond never comes, even with the clock there.
            let by = now.min(u64::MAX - 1);
            self.wheel.expire_by(by, |index, _, item| {
                let Slot::Waiting { stamp } = slots[index as usize] else {
                    unreachable!("the wheel holds only waiting items");
                };
                sorted &= item.deadline >= last;
                last = item.deadline;
                ready.push_back(Some((Key { index, stamp }, item)));
            });
            if tick == now_tick {
                // The current tick: what is not yet due stays for a later poll.
                break;
            }
            self.wheel.advance_to(tick + 1);
        }
        if self.wheel.tick() < now_tick {
            self.wheel.advance_to(now_tick);
        }
        if !sorted {
            // Stable: equal deadlines keep insertion order.
            self.ready.make_contiguous()[start..]
                .sort_by_key(|entry| entry.as_ref().map(|(_, item)| item.deadline));
        }
        self.mark_ready_from(start);
        self.ready.len() > start
    }

    /// Marks the items in `ready` from `start` on as expired, at their places in yield order.
    fn mark_ready_from(&mut self, start: usize) {
        for (at, entry) in (start..).zip(self.ready.range(start..)) {
            if let Some((key, _)) = entry {
                let seq = self.ready_base.wrapping_add(at as u32);
                self.slots[key.index as usize] = Slot::Ready {
                    stamp: key.stamp,
                    seq,
                };
            }
        }
    }

    fn pop_ready(&mut self) -> Option<Expired<T>> {
        let entry = self.ready.pop_front()?;
        self.ready_base = self.ready_base.wrapping_add(1);
        let (key, item) = entry.expect("the front of `ready` is never empty");
        self.drop_stale_front();
        Some(self.taken_out(key, item))
    }
}

#[cfg(feature = "stream")]
impl<T> futures_core::Stream for DelayQueue<T> {
    type Item = Expired<T>;

    /// [`DelayQueue::poll_expired`]: `None` while the queue is empty, until an insert.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        self.get_mut().poll_expired(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.len()))
    }
}
