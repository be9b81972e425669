//! The pending count: `pending_timeouts()` is the timeouts producers accepted less those the
//! worker ended, two running totals that only grow (and wrap). Producers count what they accept
//! against `max_pending`, one compare-and-swap a timeout, or, with no limit, by batches of
//! credit kept in their queue shard; the worker stores its total of ended timeouts.
//!
//! Owns `accepted`, `ended` and every access to them, and the shards' credit. Touches the
//! wheel's key bounds (`MAX_ENTRIES`, which bounds any count).

use super::batch::ProducerShard;
use super::{Shared, Stored};
use crate::error::TimerError;
use crate::sync::Ordering;
use crate::wheel::MAX_ENTRIES;

/// Pending-count credit a producer's shard takes at once when there is no pending limit (see
/// `Shared::refill_credit`). Small under loom, so that the models cross refills.
const CREDIT_BATCH: usize = if cfg!(loom) { 2 } else { 256 };

impl<J: Stored> Shared<J> {
    /// Counts one more pending timeout against `max_pending`, or refuses.
    #[inline]
    pub(super) fn reserve_limited(&self) -> Result<(), TimerError> {
        // Relaxed: a pure counter; whoever needs to see it settle synchronises through its own
        // means (a task's side effect, a join). A stale `ended` only refuses more eagerly.
        let mut cur = self.accepted.load(Ordering::Relaxed);
        loop {
            let pending = pending_between(cur, self.ended.load(Ordering::Relaxed));
            if pending >= self.max_pending {
                return Err(self.too_many(pending));
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

    /// Counts one more pending timeout against the credit of the producer's shard (`producer`,
    /// under its lock), refilling it first when it is used up; or refuses.
    #[inline(always)]
    pub(super) fn take_credit(&self, producer: &mut ProducerShard) -> Result<(), TimerError> {
        if producer.credit == 0 {
            producer.credit = self.refill_credit()?;
        }
        producer.credit -= 1;
        Ok(())
    }

    /// Gives back the count `reserve_limited` took, for a timeout refused after all (the timer
    /// is shut down).
    #[inline]
    pub(super) fn unreserve_limited(&self) {
        // Relaxed: see `reserve_limited`.
        self.accepted.fetch_sub(1, Ordering::Relaxed);
    }

    /// Without a pending limit, producers count their timeouts in `accepted` by batches of
    /// `CREDIT_BATCH`, kept as credit in their shard of the queue: one shared read-modify-write
    /// per batch instead of one per timeout (on the line every producer and the worker write).
    /// The wheel's key space still bounds the count: the last batches shrink to what is left.
    /// Called under the producer's shard lock: it takes no other.
    #[cold]
    pub(super) fn refill_credit(&self) -> Result<usize, TimerError> {
        // Relaxed: see `reserve_limited`.
        let mut cur = self.accepted.load(Ordering::Relaxed);
        loop {
            let pending = pending_between(cur, self.ended.load(Ordering::Relaxed));
            let keys_left = MAX_ENTRIES.saturating_sub(pending);
            if keys_left == 0 {
                // The wheel's key space (2^27 - 1 entries, ~6 GB of them): refused rather than
                // overflowed. The count reported includes the shards' unused credit: `counted`
                // would lock every shard, and the caller holds one of them.
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

    #[cold]
    fn too_many(&self, pending: usize) -> TimerError {
        TimerError::TooManyPending {
            pending,
            max: self.max_pending,
        }
    }

    #[inline]
    pub(crate) fn pending_timeouts(&self) -> usize {
        if self.is_shutdown() {
            0
        } else {
            self.counted()
        }
    }

    /// Timeouts counted as pending: `accepted` less `ended` and less the credit the queue's
    /// shards hold. Exact when nothing runs concurrently; under concurrent scheduling it can be
    /// off by what is in flight, as Netty's counter is.
    pub(crate) fn counted(&self) -> usize {
        // `ended` first, then credit, then `accepted`, so that each later read counts at least
        // what the earlier ones imply. Acquire: pairs with the Release in `set_ended`; the
        // worker ended those timeouts after taking them from the queue under their shard locks,
        // so their acceptance is seen below.
        let ended = self.ended.load(Ordering::Acquire);
        // A refill seen in a shard is then seen in `accepted` too (the refill's increment is
        // made under the shard's lock, which our read took after it).
        let credit = self.timeouts.fold_data(0, |sum, p| sum + p.credit);
        // Relaxed: see `reserve_limited`.
        let accepted = self.accepted.load(Ordering::Relaxed);
        pending_between(accepted, ended).saturating_sub(credit)
    }

    /// The worker's running total of timeouts it has ended (expired, or cancelled and
    /// accounted for): stored before each task runs, so that a task can schedule again even at
    /// the pending limit. Called only by whoever holds the worker.
    #[inline]
    pub(crate) fn set_ended(&self, total: usize) {
        // Release: pairs with the Acquire in `counted`.
        self.ended.store(total, Ordering::Release);
    }
}

/// Timeouts accepted and not ended, from two running totals read one after the other: `ended`,
/// read after `accepted`, may have moved past it (timeouts accepted and ended in between). That
/// counts as none pending, not as a count wrapped to nearly `usize::MAX`.
fn pending_between(accepted: usize, ended: usize) -> usize {
    let pending = accepted.wrapping_sub(ended);
    if pending > usize::MAX / 2 {
        0
    } else {
        pending
    }
}

#[cfg(test)]
mod tests {
    use crate::{HashedWheelTimer, Timeout, TimerError};
    use std::sync::atomic::Ordering;
    use std::sync::mpsc;
    use std::time::Duration;

    /// At the wheel's key bound, with no pending limit, `new_timeout` refuses with the count it
    /// read, not the exact count, which locks every queue shard while the producer holds its own.
    #[test]
    fn the_key_bound_refuses_and_does_not_wait_on_its_own_shard() {
        let (timer, _driver) = HashedWheelTimer::builder().build_manual().unwrap();
        // As if 2^27 - 1 timeouts were pending (6 GB of them).
        let bound = super::MAX_ENTRIES;
        timer.shared.accepted.store(bound, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let producer = std::thread::spawn(move || {
            let refused = timer.new_timeout(|_: &Timeout| {}, Duration::from_secs(1));
            tx.send(refused.map(drop)).unwrap();
            timer
        });
        let refused = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("new_timeout returns at the key bound");
        assert_eq!(
            refused,
            Err(TimerError::TooManyPending {
                pending: bound,
                max: bound
            })
        );
        let timer = producer.join().unwrap();
        timer.shared.accepted.store(0, Ordering::Relaxed);
    }
}
