//! The producer's half of scheduling and cancelling. Owns [`Shared::schedule`] and variants (a
//! timeout counted pending, pushed with its cell on this thread's shard, the worker woken if it
//! plans to sleep past its tick), [`Shared::cancelled`] (onto `cancellations`) and [`WakeJob`].
//! Touches `clock` and `error`; the count is `pending.rs`'s, the plan `plan.rs`'s.

use super::cells::CellRef;
use super::task_storage::{BoxedTask, Enqueue, Job, Stored};
use super::{Shared, SHUTDOWN};
use crate::clock::duration_to_nanos;
use crate::error::TimerError;
use crate::sync::{Arc, Ordering};
use crate::wheel::MAX_ENTRIES;
use std::time::Duration;

/// `push`'s const parameter, so neither path tests it at run time: with a handle (which holds
/// the chunk reference) or detached (`new_timeout_detached`: none taken).
const WITH_HANDLE: bool = true;
const DETACHED: bool = false;
/// `push`'s `exempt`: the timeout counts against a pending limit.
const LIMITED: bool = false;

/// `push`'s `wakers`: the kind of chunk the cell comes from, a task's or a future's (with waker
/// slots, for its expiry to wake).
const RUN_TASK: bool = false;
const WAKE_FUTURE: bool = true;

/// A future's job: wake it. Zero-sized, so it takes no words.
struct WakeJob;

impl Job for WakeJob {
    #[inline]
    fn run(self, state: CellRef) -> (CellRef, bool) {
        let woke = state.wake();
        (state, woke)
    }
}

impl<J: Stored> Shared<J> {
    /// Queues a started timer's timeout, due `delay` from now (`timer` starts the worker).
    #[inline]
    pub(crate) fn schedule(
        self: &Arc<Self>,
        job: impl Enqueue<J>,
        delay: Duration,
    ) -> Result<CellRef, TimerError> {
        let (deadline, now) = self.due_after(delay);
        self.schedule_at(job, deadline, now)
    }

    /// The deadline `delay` from now on the producers' clock (never early), and that now.
    #[inline]
    fn due_after(&self, delay: Duration) -> (u64, u64) {
        let now = self.clock.now_upper();
        (now.saturating_add(duration_to_nanos(delay)), now)
    }

    /// As [`Shared::schedule`], due at `deadline` (ns since the origin; `now` read by the caller).
    #[inline]
    pub(crate) fn schedule_at(
        self: &Arc<Self>,
        job: impl Enqueue<J>,
        deadline: u64,
        now: u64,
    ) -> Result<CellRef, TimerError> {
        self.push::<WITH_HANDLE>(job, deadline, now, RUN_TASK, LIMITED)
            .map(|state| state.expect("a state for the handle"))
    }

    /// As [`Shared::schedule`], with no handle: nothing can cancel or query the timeout, so no
    /// cell reference is taken (a locked instruction fewer here and at the handle's drop).
    #[inline]
    pub(crate) fn schedule_detached(
        self: &Arc<Self>,
        job: impl Enqueue<J>,
        delay: Duration,
    ) -> Result<(), TimerError> {
        let (deadline, now) = self.due_after(delay);
        self.push::<DETACHED>(job, deadline, now, RUN_TASK, LIMITED)
            .map(|_| ())
    }

    /// Queues a timeout, its cell from a chunk of kind `wakers`; its state, when `HANDLE`. An
    /// `exempt` timeout counts as pending but passes a pending limit (not the key space).
    #[inline]
    fn push<const HANDLE: bool>(
        self: &Arc<Self>,
        job: impl Enqueue<J>,
        deadline: u64,
        now: u64,
        wakers: bool,
        exempt: bool,
    ) -> Result<Option<CellRef>, TimerError> {
        let limited = self.max_pending != 0;
        if limited {
            let bound = if exempt {
                MAX_ENTRIES
            } else {
                self.max_pending
            };
            // Counted before `job` drops (at the return): its `Drop` is user code.
            self.reserve_below(bound).map_err(|e| self.refuse(e))?;
        }
        let state = self.push_in_shard::<HANDLE>(job, deadline, wakers, limited)?;
        // No re-check against `stop()`: it sets SHUTDOWN before taking each shard, so this push
        // preceded the take (`stop()` returns it) or saw SHUTDOWN. No fence before reading the
        // plan: the worker publishes it before looking at the shards under their locks, so it
        // sees our entry or we see its plan (`sync::Queue`).
        self.wake_by_end_of_tick_at(now);
        Ok(state)
    }

    /// The part of [`Shared::push`] under the lock of this thread's queue shard.
    #[inline]
    fn push_in_shard<const HANDLE: bool>(
        self: &Arc<Self>,
        job: impl Enqueue<J>,
        deadline: u64,
        wakers: bool,
        limited: bool,
    ) -> Result<Option<CellRef>, TimerError> {
        let mut shard = self.timeouts.my_shard();
        let shard_index = shard.index();
        let (producer, items) = shard.parts();
        // Relaxed, under the lock: once `stop()` has taken this shard and cleared its chunk we
        // see SHUTDOWN: push nothing (never drained), start no chunk (see `ChunkCursor`).
        if self.state.load(Ordering::Relaxed) == SHUTDOWN {
            if limited {
                self.unreserve();
            }
            return Err(self.refuse(TimerError::Stopped));
        }
        if !limited {
            self.take_credit(producer).map_err(|e| self.refuse(e))?;
        }
        let cursor = producer.cursors.of(wakers);
        Ok(items.push::<HANDLE>(cursor, self, shard_index, job, deadline))
    }

    /// Counts a refused timeout; called before its job drops (user code that may panic).
    #[cold]
    pub(crate) fn refuse(&self, e: TimerError) -> TimerError {
        // Relaxed: a statistic.
        self.counters.refused.fetch_add(1, Ordering::Relaxed);
        e
    }

    /// A successful `cancel()`: queues the state; the worker runs by the end of its tick. Once
    /// shut down, the state is dropped instead: whoever drains the wheel drops the task, and
    /// nobody drains this queue again (a state left there would keep the timer alive).
    #[inline]
    pub(crate) fn cancelled(&self, state: CellRef) {
        {
            let mut shard = self.cancellations.my_shard();
            // Relaxed, under the lock: `stop()` (or a shutdown in a task) sets SHUTDOWN before
            // it takes each shard, so this push precedes the take or sees SHUTDOWN.
            if self.state.load(Ordering::Relaxed) == SHUTDOWN {
                drop(shard);
                drop(state);
                return;
            }
            shard.parts().1.push(state);
        }
        // No fence: as in `push`, the queue's lock orders the push before the plan's load.
        // Relaxed: a stale (lower) tick only makes us more eager to wake the worker.
        self.wake_by(self.tick.load(Ordering::Relaxed));
    }
}

impl Shared {
    /// A future's timeout (`Sleep`), due as in [`Shared::schedule_at`]: its cell has a waker
    /// slot, which its expiry wakes (`cells::WakerSlots`); its job allocates nothing. An
    /// `exempt` one (a `DelayQueue`'s wake-up) passes a pending limit.
    #[inline]
    pub(crate) fn schedule_wake_at(
        self: &Arc<Self>,
        deadline: u64,
        now: u64,
        exempt: bool,
    ) -> Result<CellRef, TimerError> {
        let job = BoxedTask::new(WakeJob);
        self.push::<WITH_HANDLE>(job, deadline, now, WAKE_FUTURE, exempt)
            .map(|state| state.expect("a state for the handle"))
    }
}
