//! The producer's half of scheduling and cancelling: a timeout is counted as pending, pushed
//! with its cell on this thread's shard of the `timeouts` queue (refused once the timer is shut
//! down), and the worker woken if it plans to sleep past its tick; a cancel in the wheel goes on
//! the `cancellations` queue.
//!
//! Owns [`Shared::schedule`] and its variants, [`Shared::cancelled`], and the job of a future's
//! timeout ([`WakeJob`]). Touches `clock` (the producers' clock) and `error`; the pending count
//! is kept in `pending.rs`, the worker's plan in `plan.rs`.

use super::cells::CellRef;
use super::task_storage::{BoxedTask, Enqueue, Job, Stored};
use super::{Shared, SHUTDOWN};
use crate::clock::duration_to_nanos;
use crate::error::TimerError;
use crate::sync::{Arc, Ordering};
use std::time::Duration;

/// The kinds of `push` (its const parameter, so that neither path tests it at run time): a
/// timeout with a handle, whose reference to its chunk the handle holds, or a detached one
/// (`new_timeout_detached`), which takes none.
const WITH_HANDLE: bool = true;
const DETACHED: bool = false;

/// What a timeout does when it expires, which decides the kind of chunk its cell comes from:
/// a future's cell has a waker slot (`cells::WakerSlots`).
#[derive(Clone, Copy)]
enum OnExpiry {
    RunTask,
    /// Wake a future (its job is a [`WakeJob`]).
    WakeFuture,
}

/// The job of a future's timeout: wake the future. Zero-sized: stored in no words at all.
struct WakeJob;

impl Job for WakeJob {
    #[inline]
    fn run(self, state: CellRef) -> (CellRef, bool) {
        let woke = state.wake();
        (state, woke)
    }
}

impl<J: Stored> Shared<J> {
    /// Queues a timeout of a started timer: its job, due `delay` from now. The producer's
    /// half of `new_timeout` (the `timer` module starts the worker first).
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

    /// As [`Shared::schedule`], due at `deadline` (nanoseconds since the origin; `now` is the
    /// producers' clock, read by the caller).
    #[inline]
    pub(crate) fn schedule_at(
        self: &Arc<Self>,
        job: impl Enqueue<J>,
        deadline: u64,
        now: u64,
    ) -> Result<CellRef, TimerError> {
        self.push::<WITH_HANDLE>(job, deadline, now, OnExpiry::RunTask)
            .map(|state| state.expect("a state for the handle"))
    }

    /// As [`Shared::schedule`], with no handle: nothing can cancel the timeout or ask after it,
    /// so no reference to its cell is taken (one locked instruction fewer here, and one fewer
    /// where the handle would have been dropped).
    #[inline]
    pub(crate) fn schedule_detached(
        self: &Arc<Self>,
        job: impl Enqueue<J>,
        delay: Duration,
    ) -> Result<(), TimerError> {
        let (deadline, now) = self.due_after(delay);
        self.push::<DETACHED>(job, deadline, now, OnExpiry::RunTask)
            .map(|_| ())
    }

    /// Queues a timeout, its cell from the cursor for `on_expiry`; its state for the handle when
    /// `HANDLE`.
    #[inline]
    fn push<const HANDLE: bool>(
        self: &Arc<Self>,
        job: impl Enqueue<J>,
        deadline: u64,
        now: u64,
        on_expiry: OnExpiry,
    ) -> Result<Option<CellRef>, TimerError> {
        let limited = self.max_pending != 0;
        if limited {
            self.reserve_limited()?;
        }
        let state = self.push_in_shard::<HANDLE>(job, deadline, on_expiry, limited)?;
        // Nothing to re-check against `stop()`: it sets SHUTDOWN before it takes each shard,
        // so a push either came before its take (and `stop()` returns this timeout, cancelled,
        // as it does every timeout that never ran) or we saw SHUTDOWN under the lock above.
        // No fence before the worker's plan is read either: the worker publishes its plan
        // before it looks at the shards under their locks, so it sees our entry or we see its
        // plan (see `sync::Queue`).
        self.wake_by_end_of_tick_at(now);
        Ok(state)
    }

    /// The part of [`Shared::push`] under the lock of this thread's queue shard.
    #[inline(always)]
    fn push_in_shard<const HANDLE: bool>(
        self: &Arc<Self>,
        job: impl Enqueue<J>,
        deadline: u64,
        on_expiry: OnExpiry,
        limited: bool,
    ) -> Result<Option<CellRef>, TimerError> {
        let mut shard = self.timeouts.my_shard();
        let shard_index = shard.index();
        let (producer, items) = shard.parts();
        // Relaxed, under the lock: `stop()` sets SHUTDOWN before it takes each shard and
        // clears its chunk, so once it has taken this one we see SHUTDOWN here, and push
        // nothing (it would never be drained) and start no chunk (see `ChunkCursor`).
        if self.state.load(Ordering::Relaxed) == SHUTDOWN {
            if limited {
                self.unreserve_limited();
            }
            return Err(TimerError::Stopped);
        }
        if !limited {
            self.take_credit(producer)?;
        }
        let cursor = producer
            .cursors
            .of(matches!(on_expiry, OnExpiry::WakeFuture));
        Ok(items.push::<HANDLE>(cursor, self, shard_index, job, deadline))
    }

    /// A successful `cancel()`: queue the state for the worker and make sure it runs by the end
    /// of its current tick.
    #[inline]
    pub(crate) fn cancelled(&self, state: CellRef) {
        // No fence: as in `new_timeout`, the queue's lock orders the push before the load of
        // the worker's plan.
        self.cancellations.push(state);
        // Relaxed: a stale (lower) tick only makes us more eager to wake the worker.
        self.wake_by(self.tick.load(Ordering::Relaxed));
    }
}

impl Shared {
    /// A future's timeout (the `timer` module's `Sleep`), due at `deadline` (as in
    /// [`Shared::schedule_at`]): its state has a waker slot, and its expiry wakes what the
    /// future left there (see `cells::WakerSlots`). Nothing is allocated for its job.
    #[inline]
    pub(crate) fn schedule_wake_at(
        self: &Arc<Self>,
        deadline: u64,
        now: u64,
    ) -> Result<CellRef, TimerError> {
        self.push::<WITH_HANDLE>(BoxedTask::new(WakeJob), deadline, now, OnExpiry::WakeFuture)
            .map(|state| state.expect("a state for the handle"))
    }
}
