//! The chunks the cells live in: what a chunk holds ([`Chunk`]: its timer, type-erased, its
//! cells and waker slots), the references to it ([`ChunkRef`], [`SpareChunk`]), and how the
//! worker names a cell ([`CellId`]: the bit budget of ids and tags).
//!
//! Owns those; the cells' states and the references a handle holds are `mod.rs`'s. Touches
//! `sync`, and of `shared` what a chunk names its timer by.

use super::{Cell, CellRef};
use crate::shared::{Counters, Stored, TimerHandle};
use crate::sync::{Arc, Mutex};
use std::any::Any;
use std::sync::PoisonError;
use std::task::Waker;

/// Timeouts per allocation. States are handed out in chunks so that scheduling does not call
/// the allocator per timeout, and the worker's expiry walks states that sit side by side
/// (a chunk holds consecutive timeouts of one queue shard, in practice of one producer
/// thread). Under loom every timeout gets its own chunk, which keeps the models small.
pub(crate) const CHUNK: usize = if cfg!(loom) { 1 } else { 32 };

/// Bits of a cell's tag, its index in its chunk, in a [`CellId`].
const TAG_BITS: u32 = 5;
const _: () = assert!(CHUNK <= 1 << TAG_BITS);

/// Chunk ids the worker's table hands out at most: a [`CellId`] is `chunk id << TAG_BITS | tag`.
/// A chunk in the table holds a pending timeout, so `MAX_ENTRIES` bounds the ids in use.
pub(crate) const MAX_CHUNK_IDS: u32 = 1 << (32 - TAG_BITS);
const _: () = assert!(crate::wheel::MAX_ENTRIES < MAX_CHUNK_IDS as usize);

/// A cell as the worker names it in a wheel entry: its chunk's id in the worker's chunk table
/// and its tag, in one word.
// `pub` in a crate-private module: named by a sealed trait's methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(test, derive(Hash))]
#[allow(unreachable_pub)]
pub struct CellId(u32);

impl CellId {
    /// Cell `tag` of chunk `chunk` (below [`MAX_CHUNK_IDS`]).
    #[inline]
    pub(crate) const fn new(chunk: u32, tag: u8) -> CellId {
        debug_assert!(chunk < MAX_CHUNK_IDS && (tag as usize) < CHUNK);
        CellId((chunk << TAG_BITS) | tag as u32)
    }

    /// The id of the cell's chunk in the worker's table.
    #[inline]
    pub(crate) fn chunk(self) -> u32 {
        self.0 >> TAG_BITS
    }

    /// The cell's index in its chunk.
    #[inline]
    pub(crate) fn tag(self) -> u8 {
        (self.0 & ((1 << TAG_BITS) - 1)) as u8
    }
}

/// What a chunk knows of its timer without its task type: its counters, its cancellation
/// queue, and the handle itself (for a `Timeout<J>` to take back as `TimerHandle<J>`).
pub(crate) trait ChunkTimer: Send + Sync + 'static {
    /// The timer's statistics (a panic of user code is counted there).
    fn counters(&self) -> &Counters;
    /// A timeout cancelled in the wheel: queued for the worker to unlink (`Shared::cancelled`).
    fn cancelled(&self, state: CellRef);
    /// The handle, for [`CellRef::timer`] to downcast.
    fn as_any(&self) -> &dyn Any;
}

impl<J: Stored> ChunkTimer for TimerHandle<J> {
    fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    #[inline]
    fn cancelled(&self, state: CellRef) {
        self.shared.cancelled(state)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

pub(super) struct Chunk {
    /// The timer every cell's timeout belongs to, its task type erased: a `Timeout` reaches its
    /// timer through its chunk, so handles cost one reference count between them, not one per
    /// timeout.
    pub(super) timer: Arc<dyn ChunkTimer>,
    /// The queue shard whose cursor hands the cells out (the worker's chunk table keeps it).
    pub(super) shard: u8,
    pub(super) cells: [Cell; CHUNK],
    /// A chunk of futures' timeouts (see [`WakerSlots`]); `None` for tasks' timeouts.
    pub(super) wakers: Option<Box<WakerSlots>>,
}

/// Where the futures of a chunk's timeouts leave their wakers (`Sleep` in the `timer` module):
/// one slot per cell, written by the future's `poll`, emptied by whoever ends the timeout:
/// the worker's expiry and `stop()` take the waker and wake it; the future's own cancel (its
/// drop, a `reset`) takes it back. So a slot is empty once its timeout has ended and its
/// future is gone, and the worker never touches the slot of a cancelled timeout: dropping a
/// waker there would move its task's reference count between the worker's thread and the
/// future's, once per cancelled timeout.
///
/// The protocol (the loom models of `loom-tests/tests/sleep_future.rs`): a `poll` stores its
/// waker under the slot's lock and then loads the cell's state; whoever ends the timeout moves
/// the state first and then takes the waker under the same lock. Whichever takes the lock
/// second sees the other's work: the waker stored (and wakes it), or the state moved (and
/// `poll` returns `Ready`). A `poll` that sees the state end before it stores anything stores
/// nothing.
///
/// Why per chunk and not per timeout: one allocation per 32 futures instead of one per future
/// (which the worker would free, across threads), and 24 bytes a future. Timeouts of tasks
/// never pay for it: their chunks have no slots, and a shard hands out futures' timeouts from
/// chunks of their own (`ShardCursors`).
pub(crate) type WakerSlots = [Mutex<Option<Waker>>; CHUNK];

impl ChunkRef {
    /// A new chunk of fresh cells, handed out by a cursor of queue shard `shard` of `timer`;
    /// with waker slots when `wakers` (see [`WakerSlots`]).
    pub(super) fn new(timer: &Arc<dyn ChunkTimer>, shard: u8, wakers: bool) -> ChunkRef {
        ChunkRef(Arc::new(Chunk {
            timer: Arc::clone(timer),
            shard,
            cells: fresh_cells(),
            wakers: wakers.then(|| Box::new(std::array::from_fn(|_| Mutex::new(None)))),
        }))
    }
}

/// A chunk's cells as they are handed out: QUEUED, no wheel key.
#[inline]
fn fresh_cells() -> [Cell; CHUNK] {
    std::array::from_fn(|_| Cell::fresh())
}

/// Spare chunks a shard's cursor keeps, at most, and as many the worker keeps for it. The
/// worker hands over once a tick what it let go of in the last one, so this covers a tick's
/// traffic of a producer that schedules and cancels as fast as one thread can (4 096 chunks
/// are 128 Ki timeouts, the same order as the queue's kept buffers, `worker::KEEP`). An idle
/// worker lets every spare go.
pub(crate) const SPARE_CHUNKS: usize = 4096;

/// A chunk nobody refers to any more, its cells reset: a cursor of its shard hands its cells
/// out again instead of allocating a new chunk.
///
/// Under the request-timeout pattern (schedule, then cancel) the worker lets go of about a
/// chunk per 32 timeouts while the producer needs as many: reusing them keeps the allocator,
/// and its passing of blocks between the two threads, out of that loop.
pub(crate) struct SpareChunk(Arc<Chunk>);

impl SpareChunk {
    /// The chunk, to hand its cells out again.
    #[inline]
    pub(super) fn into_chunk(self) -> ChunkRef {
        ChunkRef(self.0)
    }
}

/// A chunk of timeout states, as a queued batch and the worker's chunk table hold it.
pub(crate) struct ChunkRef(pub(super) Arc<Chunk>);

impl Clone for ChunkRef {
    fn clone(&self) -> Self {
        ChunkRef(Arc::clone(&self.0))
    }
}

impl ChunkRef {
    /// The queue shard the chunk's cells were handed out by.
    #[inline]
    pub(crate) fn shard(&self) -> usize {
        usize::from(self.0.shard)
    }

    #[inline]
    pub(crate) fn same(&self, other: &ChunkRef) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    #[inline]
    pub(crate) fn cell(&self, tag: u8) -> &Cell {
        &self.0.cells[usize::from(tag)]
    }

    /// The chunk as a spare, its cells fresh, if this was the last reference to it (no handle,
    /// no batch, no table holds it: nobody can see its cells any more).
    #[inline]
    pub(crate) fn into_spare(self) -> Option<SpareChunk> {
        let mut chunk = self.0;
        let inner = Arc::get_mut(&mut chunk)?;
        if let Some(wakers) = &mut inner.wakers {
            // Empty already (see `WakerSlots`); reset all the same, without taking a lock.
            for slot in wakers.iter_mut() {
                *slot.get_mut().unwrap_or_else(PoisonError::into_inner) = None;
            }
        }
        inner.cells = fresh_cells();
        Some(SpareChunk(chunk))
    }

    /// Whether the chunk's timeouts are futures' (their cells have waker slots).
    #[inline]
    pub(crate) fn has_wakers(&self) -> bool {
        self.0.wakers.is_some()
    }

    /// Cell `tag` as a timeout's state, holding this reference (see
    /// [`CellRef::into_chunk`] for the way back).
    #[inline]
    pub(crate) fn into_state(self, tag: u8) -> CellRef {
        CellRef { chunk: self.0, tag }
    }

    /// A handle's reference to cell `tag`.
    #[inline]
    pub(crate) fn state(&self, tag: u8) -> CellRef {
        CellRef {
            chunk: Arc::clone(&self.0),
            tag,
        }
    }
}
