//! The pending count: accepted less ended, two running totals that only grow (and wrap). Owns
//! `accepted` (producers: one CAS a timeout against `max_pending`, or with no limit batches of
//! credit kept in their shard), `ended` (the worker's total) and the credit. Touches the
//! wheel's `MAX_ENTRIES`, which bounds any count.
//!
//! `pending_timeouts()` is `accepted - ended` less the shards' unused credit (`Shared::count`),
//! exact when quiet: the path that wins a timeout's cell counts it ended once, on the worker
//! (transfer, unlink or expiry), in the total only the worker writes (`Shared::set_ended`).
//! Once `SHUTDOWN` is set it is 0.

use super::batch::ProducerShard;
use super::{Shared, Stored};
use crate::error::TimerError;
use crate::sync::Ordering;
use crate::wheel::MAX_ENTRIES;

/// Credit a shard takes at once with no pending limit; small under loom, so models cross refills.
const CREDIT_BATCH: usize = if cfg!(loom) { 2 } else { 256 };

impl<J: Stored> Shared<J> {
    /// With a pending limit, counts one more pending timeout if fewer than `bound` are, else
    /// refuses: `max_pending`, or for an exempt timeout the wheel's `MAX_ENTRIES` keys.
    #[inline]
    pub(super) fn reserve_below(&self, bound: usize) -> Result<(), TimerError> {
        // Relaxed: a pure counter; whoever needs it settled synchronises by other means (a
        // task's side effect, a join). A stale `ended` only refuses more eagerly.
        let mut cur = self.accepted.load(Ordering::Relaxed);
        loop {
            let pending = pending_between(cur, self.ended.load(Ordering::Relaxed));
            if pending >= bound {
                return Err(too_many(pending, bound));
            }
            match self.accepted.compare_exchange_weak(
                cur,
                cur.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => cur = actual,
            }
        }
    }

    /// As `reserve_below`, against the credit of `producer` (under its lock), refilled as needed.
    #[inline]
    pub(super) fn take_credit(&self, producer: &mut ProducerShard) -> Result<(), TimerError> {
        if producer.credit == 0 {
            producer.credit = self.refill_credit()?;
        }
        producer.credit -= 1;
        Ok(())
    }

    /// Undoes `reserve_below` for a timeout refused after all (shut down).
    #[inline]
    pub(super) fn unreserve(&self) {
        // Relaxed: see `reserve_below`.
        self.accepted.fetch_sub(1, Ordering::Relaxed);
    }

    /// Takes `CREDIT_BATCH` of `accepted` as shard credit: one write of the shared line per
    /// batch, not per timeout; the last batches shrink to the key space (`docs/performance.md`,
    /// "Pending-count credit per shard"). Called under the producer's shard lock; takes no other.
    #[cold]
    pub(super) fn refill_credit(&self) -> Result<usize, TimerError> {
        // Relaxed: see `reserve_below`.
        let mut cur = self.accepted.load(Ordering::Relaxed);
        loop {
            let pending = pending_between(cur, self.ended.load(Ordering::Relaxed));
            let keys_left = MAX_ENTRIES.saturating_sub(pending);
            if keys_left == 0 {
                // Key space full: refuse rather than overflow. The count reported includes the
                // shards' unused credit: `count` would lock every shard, and we hold one.
                return Err(TimerError::TooManyPending {
                    pending,
                    max: MAX_ENTRIES,
                });
            }
            let take = keys_left.min(CREDIT_BATCH);
            match self.accepted.compare_exchange_weak(
                cur,
                cur.wrapping_add(take),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(take),
                Err(actual) => cur = actual,
            }
        }
    }

    #[inline]
    pub(crate) fn pending_timeouts(&self) -> usize {
        if self.is_shutdown() {
            0
        } else {
            self.count(true)
        }
    }

    /// `pending_timeouts()` without waiting for a producer, for `Debug`: a shard whose lock is
    /// held keeps its unused credit in the count, which is then an upper bound.
    pub(crate) fn pending_without_waiting(&self) -> usize {
        if self.is_shutdown() {
            0
        } else {
            self.count(false)
        }
    }

    /// Pending less the shards' credit; off by what is in flight, as Netty's counter is. With
    /// `wait`, waits for each producer shard's lock: the count is exact (`pending_timeouts`).
    /// Without, leaves out the credit of a shard whose lock another thread holds: the count
    /// never blocks, and is an upper bound (`Debug`).
    fn count(&self, wait: bool) -> usize {
        // `ended`, credit, then `accepted`: each later read counts at least what the earlier
        // imply. Acquire: pairs with `set_ended`'s Release; the worker took those timeouts from
        // the queue under their shard locks, so their acceptance is seen below.
        let ended = self.ended.load(Ordering::Acquire);
        // A refill seen in a shard is seen in `accepted` too: made under the shard's lock. With
        // a pending limit no shard takes credit (`push`), so none is looked for. A shard passed
        // over keeps its credit counted as pending: the count can only be too high.
        let credit = if self.max_pending == 0 {
            self.timeouts
                .fold_data(wait, 0, |sum, p: &ProducerShard| sum + p.credit)
        } else {
            0
        };
        // Relaxed: see `reserve_below`.
        let accepted = self.accepted.load(Ordering::Relaxed);
        pending_between(accepted, ended).saturating_sub(credit)
    }

    /// The worker's running total of ended timeouts, stored before each task runs so a task can
    /// schedule again even at the limit. Only whoever holds the worker calls it.
    #[inline]
    pub(crate) fn set_ended(&self, total: usize) {
        // Release: pairs with the Acquire in `count`.
        self.ended.store(total, Ordering::Release);
    }
}

/// Accepted and not ended. `ended`, read after `accepted`, may have passed it: that is none
/// pending, not a count wrapped to nearly `usize::MAX`.
fn pending_between(accepted: usize, ended: usize) -> usize {
    let pending = accepted.wrapping_sub(ended);
    if pending > usize::MAX / 2 {
        0
    } else {
        pending
    }
}

#[cold]
fn too_many(pending: usize, max: usize) -> TimerError {
    TimerError::TooManyPending { pending, max }
}

#[cfg(test)]
mod tests {
    use crate::{HashedWheelTimer, Timeout, TimerError};
    use std::sync::atomic::Ordering;
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    fn noop(_: &Timeout) {}

    /// A manual timer of `builder` with one timeout waiting a second.
    fn one_waiting(builder: crate::Builder) -> HashedWheelTimer {
        let (timer, _driver) = builder.build_manual().unwrap();
        timer.new_timeout(noop, Duration::from_secs(1)).unwrap();
        timer
    }

    /// At the key bound with no pending limit, `new_timeout` refuses with the count it read, not
    /// the exact count (which would lock every shard while the producer holds its own).
    #[test]
    fn the_key_bound_refuses_and_does_not_wait_on_its_own_shard() {
        let (timer, _driver) = HashedWheelTimer::builder().build_manual().unwrap();
        let bound = super::MAX_ENTRIES;
        timer.shared.accepted.store(bound, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let producer = std::thread::spawn(move || {
            let refused = timer.new_timeout(noop, Duration::from_secs(1));
            tx.send(refused.map(drop)).unwrap();
            timer
        });
        let refused = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("new_timeout returns at the key bound");
        let (pending, max) = (bound, bound);
        assert_eq!(refused, Err(TimerError::TooManyPending { pending, max }));
        let timer = producer.join().unwrap();
        timer.shared.accepted.store(0, Ordering::Relaxed);
    }

    /// Refusals racing `stop()` count a timeout down at most once: the counter after `stop()` is
    /// the number it returned; refusals after it leave it alone (Netty counts each, for good).
    #[test]
    fn refusal_racing_stop_is_counted_down_once() {
        use std::sync::Barrier;
        for round in 0..50u64 {
            let timer = Arc::new(HashedWheelTimer::new(Duration::from_millis(1), 8));
            let start = Arc::new(Barrier::new(4));
            let producers: Vec<_> = (0..3)
                .map(|_| {
                    let (timer, start) = (Arc::clone(&timer), Arc::clone(&start));
                    std::thread::spawn(move || {
                        start.wait();
                        while timer.new_timeout(noop, Duration::ZERO).is_ok() {}
                    })
                })
                .collect();
            start.wait();
            std::thread::sleep(Duration::from_micros(round * 40));
            let returned = timer.stop().unwrap().len();
            for producer in producers {
                producer.join().unwrap();
            }
            assert_eq!(timer.shared.count(true), returned, "round {round}");
            for _ in 0..100 {
                let refused = timer.new_timeout(noop, Duration::ZERO);
                assert_eq!(refused.unwrap_err(), TimerError::Stopped);
            }
            let count = timer.shared.count(true);
            assert_eq!(count, returned, "round {round}: refusals counted");
        }
    }

    /// `read(timer)` on another thread while this thread holds its producer shard's lock, for
    /// up to 10 s; the timer back, and what was read (`Err` if the read waited that long).
    fn read_while_my_shard_is_held<T: Send + 'static>(
        timer: HashedWheelTimer,
        read: fn(&HashedWheelTimer) -> T,
    ) -> (Arc<HashedWheelTimer>, Result<T, mpsc::RecvTimeoutError>) {
        let timer = Arc::new(timer);
        let held = timer.shared.timeouts.my_shard();
        let (tx, rx) = mpsc::channel();
        let reader = Arc::clone(&timer);
        let reader = std::thread::spawn(move || tx.send(read(&reader)).unwrap());
        let got = rx.recv_timeout(Duration::from_secs(10));
        drop(held);
        reader.join().unwrap();
        (timer, got)
    }

    /// With a pending limit no shard holds credit: `pending_timeouts` reads the two totals and
    /// waits for no producer's shard lock (only the count without a limit locks them).
    #[test]
    fn with_a_pending_limit_the_count_waits_for_no_shard() {
        let timer = one_waiting(HashedWheelTimer::builder().max_pending_timeouts(8));
        let (_, read) = read_while_my_shard_is_held(timer, |t| t.pending_timeouts());
        assert_eq!(read, Ok(1), "the count waited for a producer's shard");
    }

    /// With no pending limit, formatting the timer waits for no producer's shard lock: the held
    /// shard's unused credit stays in `pending`, an upper bound, until the lock is free again.
    #[test]
    fn debug_waits_for_no_shard() {
        let timer = one_waiting(HashedWheelTimer::builder());
        let (timer, shown) = read_while_my_shard_is_held(timer, |t| format!("{t:?}"));
        let shown = shown.expect("Debug waited for a producer's shard");
        let bound = format!("pending: {},", super::CREDIT_BATCH);
        assert!(shown.contains(&bound), "{shown}");
        assert!(format!("{timer:?}").contains("pending: 1,"), "{timer:?}");
    }
}
