//! Timeout states: one atomic word per timeout, in reference-counted chunks, and their lifecycle.
//!
//! Owns the state machine (here), the chunks (`chunk.rs`), the producers' and batch's interface
//! (`spans.rs`) and the worker's (`table.rs`). Touches `sync`, the wheel's "no index" and slab,
//! and of `shared` only [`ChunkTimer`] (task type erased).
//!
//! # State table (`CellRef::state`)
//! | from                | to          | who                    | the winner owns                |
//! |---------------------|-------------|------------------------|--------------------------------|
//! | `QUEUED`            | `IN_WHEEL`  | the worker's transfer  | its place in the wheel         |
//! | `QUEUED`            | `CANCELLED` | `cancel()`, any thread | nothing; the transfer drops it |
//! | `IN_WHEEL`          | `CANCELLED` | `cancel()`, any thread | queueing it to be unlinked     |
//! | `QUEUED`/`IN_WHEEL` | `CANCELLED` | `stop()`               | returning it from `stop()`     |
//! | `IN_WHEEL`          | `EXPIRED`   | the worker, when due   | running the task               |
//!
//! `CANCELLED` and `EXPIRED` are terminal. Every move is a compare-and-swap: exactly one party
//! decides a timeout's fate, and exactly one counts it ended (the worker as it expires it, drops
//! it cancelled from the queue or unlinks it; or `stop()`). A queued timeout's cancel costs just
//! that CAS.
//!
//! The state shares its `u32` with the *wheel key* (slab key; `NO_INDEX` while queued or gone),
//! set by the worker's CAS to `IN_WHEEL`, cleared by its CAS to `EXPIRED` or, once `CANCELLED`,
//! by a plain store (nobody else writes a terminal word). `cancel()` keeps it for the unlink.
//!
//! # Chunks, spans and spares: the protocol
//! Carried out here, in `spans.rs` and `table.rs`; others see only [`ShardCursors`],
//! [`BatchCells`], [`ChunkTable`] and [`Settling`]. A chunk of [`CHUNK`] cells is counted whole:
//!
//! | holder                              | takes its reference            | lets go               |
//! |-------------------------------------|--------------------------------|-----------------------|
//! | a `Timeout` handle on a cell        | `new_timeout` (detached: none) | its drop              |
//! | its shard's [`ChunkCursor`]         | handing out its first cell     | handing out its last  |
//! | a batch, per span ([`BatchCells`])  | the span's first timeout       | `BatchCells::clear`   |
//! | the worker's [`ChunkTable`], per id | the first batch naming it      | its last cell settled |
//! | a running task's `Timeout`          | lent ([`Settling`]), no count  | after the run         |
//!
//! - **Spans.** A batch keeps per span, not per timeout, its first timeout's position (`first`,
//!   from the batch's start, taken ones included) and first cell (`start`): position `first + k`
//!   has cell `start + k`. A new chunk, or a switch of a shard's cursor (tasks', futures'),
//!   starts a span.
//! - **Ids.** Entries name their cell by a [`CellId`] (chunk id in the worker's table, tag). The
//!   table counts per id the cells not yet *settled* (taken from the queue cancelled, expired,
//!   or unlinked), from `CHUNK` at `BatchCells::register`. Only the last chunk per shard and
//!   kind recurs in a later batch.
//! - **Spares.** A chunk is freed with its last holder, unless that is the worker: it becomes a
//!   [`SpareChunk`], cells reset, handed back to its shard's cursor when the worker next takes
//!   that shard's batch; the only way a cell is reused. An idle worker, and `stop()`, let every
//!   spare go.

mod chunk;
mod spans;
mod table;

pub(crate) use chunk::{CellId, ChunkRef, ChunkTimer, SpareChunk, CHUNK};
pub(crate) use spans::{BatchCells, CellSlot, ChunkCursor, FrontCells, ShardCursors};
pub(crate) use table::{ChunkTable, Settling};

use crate::shared::{Stored, TimerHandle};
use crate::sync::{lock, Arc, AtomicU32, Mutex, Ordering};
use crate::wheel::NO_INDEX;
use chunk::Chunk;
use std::task::Waker;

const QUEUED: u8 = 0;
const IN_WHEEL: u8 = 1;
const CANCELLED: u8 = 2;
const EXPIRED: u8 = 3;

/// The key bits of a word with no wheel key (`NO_INDEX` shifted in: all ones).
const NO_KEY_BITS: u32 = NO_INDEX >> STATE_BITS;

const STATE_BITS: u32 = 3;
const STATE_MASK: u32 = (1 << STATE_BITS) - 1;
// A wheel key fits in a cell's word beside its state.
const _: () = assert!(crate::wheel::MAX_ENTRIES < NO_KEY_BITS as usize);

#[inline]
const fn word(key: u32, state: u8) -> u32 {
    (key << STATE_BITS) | state as u32
}

#[inline]
const fn state_of(word: u32) -> u8 {
    (word & STATE_MASK) as u8
}

/// What the worker found in a due entry's cell ([`Cell::try_expire`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// Just expired: its task is the worker's to run.
    Expired,
    /// Cancelled: its task is dropped.
    Cancelled,
    /// The cell holds another key (or none): a stale chunk id. A bug: panics in debug builds;
    /// in release the entry is dropped and the cell left alone.
    NotItsCell,
}

/// What a `cancel()` found; unless the timeout had ended, the move to `CANCELLED` is the caller's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CancelOutcome {
    /// Expired, or cancelled before: nothing changed.
    AlreadyEnded,
    /// Cancelled while in the `timeouts` queue: the worker's transfer drops it.
    WasQueued,
    /// Cancelled in the wheel: the canceller queues it for the worker to unlink.
    WasInWheel,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum End {
    Expired,
    /// By `cancel()` or `stop()`.
    Cancelled,
}

/// One timeout's shared state: no task, no deadline. `(wheel key << 3) | state`.
pub(crate) struct Cell {
    word: AtomicU32,
}

impl Cell {
    #[inline]
    fn fresh() -> Cell {
        Cell {
            word: AtomicU32::new(word(NO_INDEX, QUEUED)),
        }
    }
}

/// A reference to a timeout's cell in its chunk (the module's state table; reuse: "Spares").
#[derive(Clone)]
#[allow(unreachable_pub)]
pub struct CellRef {
    chunk: Arc<Chunk>,
    tag: u8,
}

impl std::fmt::Debug for CellRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.cell().state_name())
    }
}

impl CellRef {
    #[inline]
    fn cell(&self) -> &Cell {
        &self.chunk.cells[usize::from(self.tag)]
    }

    pub(crate) fn same(&self, other: &CellRef) -> bool {
        Arc::ptr_eq(&self.chunk, &other.chunk) && self.tag == other.tag
    }

    #[inline]
    pub(crate) fn is_in(&self, chunk: &ChunkRef) -> bool {
        Arc::ptr_eq(&self.chunk, &chunk.0)
    }

    /// Where the state lives: equal for two references to the same timeout.
    pub(crate) fn address(&self) -> usize {
        self.cell() as *const Cell as usize
    }

    #[inline]
    pub(crate) fn into_chunk(self) -> ChunkRef {
        ChunkRef(self.chunk)
    }

    /// The timeout's timer, as the handle of task type `J`. Panics if `J` is not the timer's
    /// (a `Timeout<J>` is only made for its timer's `J`).
    #[inline]
    pub(crate) fn timer<J: Stored>(&self) -> &TimerHandle<J> {
        self.chunk
            .timer
            .as_any()
            .downcast_ref()
            .expect("a timeout's task type is its timer's")
    }

    #[inline]
    pub(crate) fn chunk_timer(&self) -> &dyn ChunkTimer {
        &*self.chunk.timer
    }

    pub(crate) fn state_name(&self) -> &'static str {
        self.cell().state_name()
    }

    /// See [`Cell::cancel`].
    #[inline]
    pub(crate) fn cancel(&self) -> CancelOutcome {
        self.cell().cancel()
    }

    /// At shutdown, with the worker's turns over, cancels a timeout not yet ended: wakes its
    /// future if a future's, else gives it back for `stop()` to return. One that its handle
    /// cancelled first (before this, or racing it), whose cancel the worker never processed, is
    /// counted as cancelled here, as the worker would have: nothing expires at shutdown, so a
    /// timeout found ended was cancelled.
    pub(crate) fn cancel_never_run(self) -> Option<CellRef> {
        // Relaxed, here and below: a statistic.
        let counted = &self.chunk_timer().counters().cancelled_at_shutdown;
        if self.cancel() == CancelOutcome::AlreadyEnded {
            if self.is_cancelled() {
                counted.fetch_add(1, Ordering::Relaxed);
            }
            return None;
        }
        if self.has_waker() {
            // A future's timeout is not returned: its future completes with `Stopped`, and it
            // counts as cancelled, or no outcome would account for it.
            counted.fetch_add(1, Ordering::Relaxed);
            if !self.wake() {
                self.chunk_timer()
                    .counters()
                    .user_code_panicked("a future's waker");
            }
            None
        } else {
            Some(self)
        }
    }

    /// At a shutdown that returns nothing (the owner dropped inside a task), ends a timeout
    /// not yet ended as [`cancel_never_run`](Self::cancel_never_run) does; one it would give back
    /// counts as cancelled, as nobody returns it.
    pub(crate) fn end_unreturned(self) {
        if let Some(state) = self.cancel_never_run() {
            let counters = state.chunk_timer().counters();
            // Relaxed: a statistic.
            counters
                .cancelled_at_shutdown
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    #[inline]
    pub(crate) fn is_cancelled(&self) -> bool {
        state_of(self.cell().load()) == CANCELLED
    }

    #[inline]
    pub(crate) fn is_expired(&self) -> bool {
        state_of(self.cell().load()) == EXPIRED
    }

    /// Worker only: see [`Cell::wheel_key`].
    #[inline]
    pub(crate) fn wheel_key(&self) -> u32 {
        self.cell().wheel_key()
    }

    /// Worker only: see [`Cell::clear_wheel_key`].
    #[inline]
    pub(crate) fn clear_wheel_key(&self) {
        self.cell().clear_wheel_key()
    }

    #[inline]
    pub(crate) fn has_waker(&self) -> bool {
        self.chunk.wakers.is_some()
    }

    fn waker_slot(&self) -> Option<&Mutex<Option<Waker>>> {
        Some(&self.chunk.wakers.as_ref()?[usize::from(self.tag)])
    }

    /// A future's `poll`: how the timeout ended, if it has; else leaves `waker` in the slot
    /// (replacing one that would not wake the same task). `fresh`: the future has stored no
    /// waker in this slot, so that there is none to compare with (a hint: if wrong, the waker
    /// left there is replaced all the same). See [`WakerSlots`](chunk::WakerSlots).
    pub(crate) fn poll_end(&self, waker: &Waker, fresh: bool) -> Option<End> {
        if let Some(end) = self.end() {
            return Some(end);
        }
        let slot = self
            .waker_slot()
            .expect("a future's timeout has a waker slot");
        // A waker's clone and drop are user code, run outside the lock: they may call back into
        // the timer (`stop()` or an expiry wakes this very slot under its lock). Only the future's
        // owner stores, so nothing else fills the slot between the two locks.
        if fresh || !lock(slot).as_ref().is_some_and(|w| w.will_wake(waker)) {
            let clone = waker.clone();
            let replaced = lock(slot).replace(clone);
            drop(replaced);
        }
        // After the store (ordered by the lock): an end that took the slot first moved the
        // state before that, so we see it.
        let end = self.end()?;
        // Ended meanwhile, perhaps finding the slot empty: take our waker back, so that it does
        // not keep the task alive.
        let ours = lock(slot).take();
        drop(ours);
        Some(end)
    }

    #[inline]
    fn end(&self) -> Option<End> {
        match state_of(self.cell().load()) {
            EXPIRED => Some(End::Expired),
            CANCELLED => Some(End::Cancelled),
            _ => None,
        }
    }

    /// The waker a future left, taken out (a `Sleep` moving to a new timeout takes it along).
    pub(crate) fn take_waker(&self) -> Option<Waker> {
        lock(self.waker_slot()?).take()
    }

    /// Wakes an ended timeout's future, if it left a waker; false if the waker panicked.
    pub(crate) fn wake(&self) -> bool {
        let Some(slot) = self.waker_slot() else {
            return true;
        };
        // Taken under the lock, woken after it: a waker may take its time.
        let waker = lock(slot).take();
        waker.is_none_or(|waker| super::catch_user_panic(|| waker.wake()))
    }
}

impl Cell {
    #[inline]
    fn load(&self) -> u32 {
        // Acquire: a reader that sees a move also sees what its winner did before it.
        self.word.load(Ordering::Acquire)
    }

    #[inline]
    fn transition(&self, from: u32, to: u32) -> Result<(), u32> {
        // AcqRel: the winner's later work (the task run, the cancellation push) is ordered
        // after the win; the loser's Acquire sees the winner's move.
        self.word
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .map(drop)
    }

    /// QUEUED or IN_WHEEL -> CANCELLED (the wheel key kept), for `cancel()`; what it found.
    #[inline]
    fn cancel(&self) -> CancelOutcome {
        let mut cur = self.load();
        loop {
            let outcome = match state_of(cur) {
                QUEUED => CancelOutcome::WasQueued,
                IN_WHEEL => CancelOutcome::WasInWheel,
                _ => return CancelOutcome::AlreadyEnded,
            };
            match self.transition(cur, (cur & !STATE_MASK) | u32::from(CANCELLED)) {
                Ok(()) => return outcome,
                Err(actual) => cur = actual,
            }
        }
    }

    /// QUEUED -> IN_WHEEL at `key`; worker only. False if cancelled while queued.
    #[inline]
    pub(crate) fn try_enter_wheel(&self, key: u32) -> bool {
        // A load first: the request-timeout pattern's timeouts are mostly cancelled by transfer
        // time, and a failing compare-and-swap takes the line exclusively too.
        let cur = self.load();
        debug_assert!(matches!(state_of(cur), QUEUED | CANCELLED));
        cur == word(NO_INDEX, QUEUED) && self.transition(cur, word(key, IN_WHEEL)).is_ok()
    }

    /// IN_WHEEL at `key` -> EXPIRED (key cleared); worker only, for the entry under `key`. A cell
    /// holding another key belongs to another timeout (a stale chunk id) and is left alone.
    #[inline]
    pub(crate) fn try_expire(&self, key: u32) -> Expiry {
        let cur = self.load();
        if cur == word(key, IN_WHEEL) {
            match self.transition(cur, word(NO_INDEX, EXPIRED)) {
                Ok(()) => Expiry::Expired,
                // A cancel won the race (it keeps the key).
                Err(_) => Expiry::Cancelled,
            }
        } else if cur == word(key, CANCELLED) {
            Expiry::Cancelled
        } else {
            Expiry::NotItsCell
        }
    }

    /// Worker only: the entry's wheel key (`NO_INDEX` if none).
    #[inline]
    pub(crate) fn wheel_key(&self) -> u32 {
        // Relaxed: only the worker writes the key bits (a cancel copies them).
        match self.word.load(Ordering::Relaxed) >> STATE_BITS {
            NO_KEY_BITS => NO_INDEX,
            key => key,
        }
    }

    /// Worker only, on a CANCELLED state whose entry it has removed from the wheel.
    #[inline]
    pub(crate) fn clear_wheel_key(&self) {
        debug_assert_eq!(state_of(self.load()), CANCELLED);
        // Relaxed: a terminal word no other thread writes; readers look only at its state bits.
        self.word
            .store(word(NO_INDEX, CANCELLED), Ordering::Relaxed)
    }

    fn state_name(&self) -> &'static str {
        match state_of(self.word.load(Ordering::Relaxed)) {
            QUEUED | IN_WHEEL => "pending",
            CANCELLED => "cancelled",
            _ => "expired",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(word_now: u32) -> Cell {
        Cell {
            word: AtomicU32::new(word_now),
        }
    }

    /// A due entry expires its cell only if the cell holds its key: a cell reached through a
    /// stale chunk id (another timeout's, or a fresh one) is left alone.
    #[test]
    fn a_cell_expires_only_for_the_entry_whose_key_it_holds() {
        let in_wheel = cell(word(7, IN_WHEEL));
        assert_eq!(in_wheel.try_expire(8), Expiry::NotItsCell);
        assert_eq!(in_wheel.load(), word(7, IN_WHEEL), "untouched");
        assert_eq!(in_wheel.try_expire(7), Expiry::Expired);
        assert_eq!(in_wheel.load(), word(NO_INDEX, EXPIRED));
        assert_eq!(in_wheel.try_expire(7), Expiry::NotItsCell, "expired once");

        let cancelled = cell(word(7, CANCELLED));
        assert_eq!(cancelled.try_expire(7), Expiry::Cancelled);
        assert_eq!(cancelled.try_expire(9), Expiry::NotItsCell);
        let queued = || cell(word(NO_INDEX, QUEUED));
        assert_eq!(queued().try_expire(7), Expiry::NotItsCell);
        assert_eq!(queued().wheel_key(), NO_INDEX);
    }

    /// A cell id gives back its chunk id and tag at both ranges' ends; no two pairs share one.
    #[test]
    fn a_cell_id_keeps_its_chunk_and_tag_apart() {
        let (last_tag, last) = ((CHUNK - 1) as u8, chunk::MAX_CHUNK_IDS - 1);
        let mut seen = std::collections::HashSet::new();
        for chunk in [0, 1, 2, 1000, last - 1, last] {
            for tag in [0, 1, last_tag / 2, last_tag] {
                let id = CellId::new(chunk, tag);
                assert_eq!((id.chunk(), id.tag()), (chunk, tag));
                assert!(seen.insert(id), "{chunk}, {tag} share an id");
            }
        }
    }
}
