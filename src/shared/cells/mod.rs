//! Timeout states: one atomic word per timeout, in reference-counted chunks, and the chunks'
//! lifecycle.
//!
//! Owns the state machine every `Timeout` handle, producer, canceller and the worker share
//! (here), the chunks the states live in, with their waker slots and spares (`chunk.rs`), the
//! producers' and the batch's interface (`spans.rs`) and the worker's (`table.rs`). Touches
//! `sync`, the wheel's "no index" and slab, and of the rest of `shared` only what a chunk names
//! its timer by ([`ChunkTimer`]: the handle, its counters, its cancellation queue), with the
//! timer's task type erased.
//!
//! # State table (`CellRef::state`)
//!
//! | from       | to          | who                                  | what the winner owns                    |
//! |------------|-------------|--------------------------------------|-----------------------------------------|
//! | `QUEUED`   | `IN_WHEEL`  | the worker, when it transfers it     | the entry's place in the wheel          |
//! | `QUEUED`   | `CANCELLED` | `cancel()` (any thread)              | nothing more: the transfer will see it, drop the task and decrement pending |
//! | `IN_WHEEL` | `CANCELLED` | `cancel()` (any thread)              | pushing the state on the cancellation queue (the worker then unlinks it and decrements pending) |
//! | `QUEUED` or `IN_WHEEL` | `CANCELLED` | `stop()` (the stopping thread) | returning the timeout in `stop()`'s list |
//! | `IN_WHEEL` | `EXPIRED`   | the worker, when the bucket comes round | decrementing pending, running the task |
//!
//! `CANCELLED` and `EXPIRED` are terminal. Every move is a compare-and-swap, so exactly one party
//! decides each timeout's fate, and exactly one decrements `pending`. A cancel of a timeout still
//! in the `timeouts` queue (the request-timeout pattern: schedule, then cancel on the response)
//! costs that one compare-and-swap and nothing else.
//!
//! The state shares one `u32` with the entry's *wheel key*, its key in the wheel's slab (`NO_INDEX`
//! while the entry is in the `timeouts` queue or gone): the worker sets the key in the same
//! compare-and-swap that moves the state to `IN_WHEEL`, and clears it in the one that moves it to
//! `EXPIRED` (or with a plain store once the state is the terminal `CANCELLED`: nobody else
//! writes a terminal word). A `cancel()` keeps the key, which the worker then reads to unlink
//! the entry. Four bytes per timeout.
//!
//! # Chunks, spans and spares: the protocol
//!
//! This section is the one statement of these rules. They are carried out here, in `spans.rs`
//! (a shard's cursors, a batch's cells) and in `table.rs` (the worker's table); the batch
//! and the worker see only those two files' interfaces: [`ShardCursors`] and [`BatchCells`]
//! for the producers and the batch, and [`ChunkTable`] (register, settle, lend) and
//! [`Settling`] for the worker.
//!
//! States live in chunks of [`CHUNK`] cells, reference-counted as a whole. Who holds a
//! reference to a chunk, from when to when:
//!
//! | holder | takes its reference | lets go |
//! |--------|---------------------|---------|
//! | a `Timeout` handle on one of its cells | `new_timeout` (detached timeouts take none) | the handle's drop |
//! | its shard's [`ChunkCursor`] | when it starts handing the chunk's cells out | when the last cell is handed out |
//! | a queued batch's cells ([`BatchCells`]), once per span | the span's first timeout | the batch, once the worker has taken every timeout out (`BatchCells::clear`) |
//! | the worker's [`ChunkTable`], under an id | the first batch naming the chunk, when the worker takes it | the last of its cells *settled*: taken from the queue cancelled, expired, or unlinked after a cancel |
//! | a task's `Timeout` while it runs | lent by the table ([`Settling`]; no count moves) | given back to the table after the run |
//!
//! - **Spans.** A batch records, per span, the position of its first timeout (`first`, counted
//!   from the batch's first timeout, including those already taken out) and its first cell
//!   (`start`): the timeout at position `first + k` has cell `start + k`. Nothing is kept per
//!   timeout. A shard has two cursors (tasks' chunks, and futures' with waker slots); a new
//!   chunk, or a switch between the two, starts a new span.
//! - **Ids.** The wheel's entries name their cell by a [`CellId`]: its chunk's id in the worker's
//!   table, which keeps per id the count of cells not yet settled (`CHUNK` when registered),
//!   and its tag. An id is registered when a batch is taken (`BatchCells::register`); only the
//!   last chunk registered per shard and kind can be named again by a later batch.
//! - **Spares.** A chunk is freed with its last holder, unless that holder is the worker: then it
//!   becomes a [`SpareChunk`], its cells reset, and the worker hands it back to its shard's
//!   cursor (when it next takes that shard's batch) to use instead of a new allocation. A cell
//!   is reused only that way, once nothing can refer to it (no handle, no batch, no table
//!   entry). An idle worker, and `stop()`, let every spare go.

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
    /// The timeout was in the wheel: it is expired now, and its task is the worker's to run.
    Expired,
    /// The timeout was cancelled: its task is dropped.
    Cancelled,
    /// The cell holds another entry's key (or none): the entry's chunk id is stale. A bug,
    /// which panics in debug builds; in release builds the entry is dropped and the cell left
    /// alone.
    NotItsCell,
}

/// What a `cancel()` found: the move to `CANCELLED` is the caller's unless the timeout had
/// ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CancelOutcome {
    /// The timeout had already ended (expired, or cancelled before): nothing changed.
    AlreadyEnded,
    /// Cancelled while in the `timeouts` queue: the worker's transfer drops it.
    WasQueued,
    /// Cancelled in the wheel: the worker must unlink it (the canceller queues it for that).
    WasInWheel,
}

/// How a timeout ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum End {
    /// Its deadline came and the worker ran its task.
    Expired,
    /// A `cancel()` or `stop()` ended it.
    Cancelled,
}

/// One timeout's shared state: no task, no deadline. `(wheel key << 3) | state`.
pub(crate) struct Cell {
    word: AtomicU32,
}

impl Cell {
    /// A cell as its chunk hands it out: QUEUED, no wheel key.
    #[inline]
    fn fresh() -> Cell {
        Cell {
            word: AtomicU32::new(word(NO_INDEX, QUEUED)),
        }
    }
}

/// What a `Timeout` handle shares with the worker: a reference to one cell of a chunk, which
/// holds the timeout's state (see the module's state table; when a cell is reused: "Spares").
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

impl Clone for CellRef {
    fn clone(&self) -> Self {
        CellRef {
            chunk: Arc::clone(&self.chunk),
            tag: self.tag,
        }
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

    /// Whether this cell is one of `chunk`'s.
    #[inline]
    pub(crate) fn is_in(&self, chunk: &ChunkRef) -> bool {
        Arc::ptr_eq(&self.chunk, &chunk.0)
    }

    /// Where the state lives: equal for two references to the same timeout.
    pub(crate) fn address(&self) -> usize {
        self.cell() as *const Cell as usize
    }

    /// The reference to the timeout's chunk this state holds.
    #[inline]
    pub(crate) fn into_chunk(self) -> ChunkRef {
        ChunkRef(self.chunk)
    }

    /// The timer the timeout belongs to, as the handle of its task type `J`.
    ///
    /// # Panics
    /// If `J` is not the timer's task type (a `Timeout<J>` is only made for its timer's `J`).
    #[inline]
    pub(crate) fn timer<J: Stored>(&self) -> &TimerHandle<J> {
        self.chunk
            .timer
            .as_any()
            .downcast_ref()
            .expect("a timeout's task type is its timer's")
    }

    /// The timer the timeout belongs to, its task type erased.
    #[inline]
    pub(crate) fn chunk_timer(&self) -> &dyn ChunkTimer {
        &*self.chunk.timer
    }

    /// "pending", "cancelled" or "expired", from a relaxed load (for `Debug`).
    pub(crate) fn state_name(&self) -> &'static str {
        self.cell().state_name()
    }

    /// See [`Cell::cancel`].
    #[inline]
    pub(crate) fn cancel(&self) -> CancelOutcome {
        self.cell().cancel()
    }

    /// Ends a timeout that never ran and never will (the timer is shutting down), unless it has
    /// ended already: cancels it and wakes its future, if it is a future's; else gives it back
    /// (for `stop()` to return).
    pub(crate) fn cancel_never_run(self) -> Option<CellRef> {
        if self.cancel() == CancelOutcome::AlreadyEnded {
            return None;
        }
        if self.has_waker() {
            // A future's timeout is not returned: its future completes with `Stopped`.
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

    /// Whether this is a future's timeout (its cell has a waker slot).
    #[inline]
    pub(crate) fn has_waker(&self) -> bool {
        self.chunk.wakers.is_some()
    }

    fn waker_slot(&self) -> Option<&Mutex<Option<Waker>>> {
        Some(&self.chunk.wakers.as_ref()?[usize::from(self.tag)])
    }

    /// A future's `poll`: how the timeout ended, if it has (cancelled: by its future's drop,
    /// or `stop()`); else leaves `waker` to be woken when it ends (replacing one that would not
    /// wake the same task). See [`WakerSlots`](chunk::WakerSlots).
    pub(crate) fn poll_end(&self, waker: &Waker) -> Option<End> {
        if let Some(end) = self.end() {
            return Some(end);
        }
        let slot = self
            .waker_slot()
            .expect("a future's timeout has a waker slot");
        {
            let mut stored = lock(slot);
            if !stored.as_ref().is_some_and(|w| w.will_wake(waker)) {
                *stored = Some(waker.clone());
            }
        }
        // After the store (the lock orders it): an end that took the slot before we stored
        // moved the state before that, and we see it here.
        let end = self.end()?;
        // Ended meanwhile: whoever ended it may have found the slot empty; take back what we
        // left, so that it does not keep the task alive.
        drop(lock(slot).take());
        Some(end)
    }

    /// How the timeout ended, if it has.
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

    /// Wakes the future of an ended timeout (its expiry, or `stop()`), if it left a waker.
    /// A waker that panics is caught (`catch_user_panic`): returns false then.
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
        // AcqRel: the winner's later work (the task run, the push on the cancellation queue)
        // is ordered after the win; the loser's Acquire sees the winner's move.
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

    /// QUEUED -> IN_WHEEL at wheel key `key`; the worker only. False if it was cancelled while
    /// queued (the worker then accounts for it).
    #[inline]
    pub(crate) fn try_enter_wheel(&self, key: u32) -> bool {
        // A plain load first: most of what the request-timeout pattern queues is cancelled by
        // the time it is transferred, and a failing compare-and-swap costs as much as one that
        // succeeds (it too takes the line exclusively).
        let cur = self.load();
        debug_assert!(matches!(state_of(cur), QUEUED | CANCELLED));
        cur == word(NO_INDEX, QUEUED) && self.transition(cur, word(key, IN_WHEEL)).is_ok()
    }

    /// IN_WHEEL at wheel key `key` -> EXPIRED (the key cleared); the worker only, for the
    /// entry under `key`. A cell holding another key is not that entry's cell: a chunk id gone
    /// stale, which must not touch the timeout the cell belongs to.
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
        // Relaxed: the key bits are written only by the worker (a cancel copies them).
        match self.word.load(Ordering::Relaxed) >> STATE_BITS {
            NO_KEY_BITS => NO_INDEX,
            key => key,
        }
    }

    /// Worker only, on a CANCELLED state whose entry it has removed from the wheel.
    #[inline]
    pub(crate) fn clear_wheel_key(&self) {
        debug_assert_eq!(state_of(self.load()), CANCELLED);
        // Relaxed: the word is terminal, so no other thread writes it; readers only look at
        // the state bits, which do not change.
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

    /// The worker expires a due entry's cell only if the cell holds that entry's key: a cell
    /// reached through a stale chunk id (another timeout's, or a fresh one) is left alone.
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
        assert_eq!(
            cell(word(NO_INDEX, QUEUED)).try_expire(7),
            Expiry::NotItsCell
        );
        assert_eq!(cell(word(NO_INDEX, QUEUED)).wheel_key(), NO_INDEX);
    }

    /// A cell id gives back the chunk id and the tag it was made of, at the ends of both
    /// ranges, and no two pairs share an id.
    #[test]
    fn a_cell_id_keeps_its_chunk_and_tag_apart() {
        let last_tag = (CHUNK - 1) as u8;
        let chunks = [
            0,
            1,
            2,
            1000,
            chunk::MAX_CHUNK_IDS - 2,
            chunk::MAX_CHUNK_IDS - 1,
        ];
        let mut seen = std::collections::HashSet::new();
        for &chunk in &chunks {
            for tag in [0, 1, last_tag / 2, last_tag] {
                let id = CellId::new(chunk, tag);
                assert_eq!((id.chunk(), id.tag()), (chunk, tag));
                assert!(seen.insert(id), "{chunk}, {tag} share an id");
            }
        }
    }
}
