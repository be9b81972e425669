//! Owns the chunks cells live in ([`Chunk`]: the timer, type-erased, the cells and waker
//! slots), the references to them ([`ChunkRef`], [`SpareChunk`]), and how the worker names a
//! cell ([`CellId`]: the bit budget of ids and tags); states and handles are `mod.rs`'s.
//! Touches `sync`, and of `shared` what a chunk names its timer by.

use super::{Cell, CellRef};
use crate::shared::{Counters, Stored, TimerHandle};
use crate::sync::{Arc, Mutex};
use std::any::Any;
use std::sync::PoisonError;
use std::task::Waker;

/// Timeouts per allocation; expiry walks states side by side (a chunk holds consecutive
/// timeouts of one shard; `docs/performance.md`, "Chunks of 32 cells per shard"). Under loom
/// each timeout gets its own chunk, to keep models small.
pub(crate) const CHUNK: usize = if cfg!(loom) { 1 } else { 32 };

/// Bits of a cell's tag, its index in its chunk, in a [`CellId`].
const TAG_BITS: u32 = 5;
const _: () = assert!(CHUNK <= 1 << TAG_BITS);

/// Chunk ids at most: a [`CellId`] is `chunk id << TAG_BITS | tag`. A chunk in the table holds
/// a pending timeout, so `MAX_ENTRIES` bounds the ids in use.
pub(crate) const MAX_CHUNK_IDS: u32 = 1 << (32 - TAG_BITS);
const _: () = assert!(crate::wheel::MAX_ENTRIES < MAX_CHUNK_IDS as usize);

/// A cell as a wheel entry names it: its chunk's id in the worker's table, and its tag, in one
/// `u32` (`docs/performance.md`, "32-byte nodes, 4-byte states").
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

    #[inline]
    pub(crate) fn chunk(self) -> u32 {
        self.0 >> TAG_BITS
    }

    #[inline]
    pub(crate) fn tag(self) -> u8 {
        (self.0 & ((1 << TAG_BITS) - 1)) as u8
    }
}

/// What a chunk knows of its timer without its task type.
pub(crate) trait ChunkTimer: Send + Sync + 'static {
    fn counters(&self) -> &Counters;
    /// A timeout cancelled in the wheel, queued for the worker to unlink (`Shared::cancelled`).
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
    /// A `Timeout` reaches its timer through its chunk: one reference count per chunk, not one
    /// per timeout.
    pub(super) timer: Arc<dyn ChunkTimer>,
    /// The queue shard whose cursor hands the cells out.
    pub(super) shard: u8,
    pub(super) cells: [Cell; CHUNK],
    /// A chunk of futures' timeouts (see [`WakerSlots`]); `None` for tasks' timeouts.
    pub(super) wakers: Option<Box<WakerSlots>>,
}

/// Where futures (`Sleep`) leave wakers: a slot per cell, one allocation per futures' chunk.
/// Written by `poll`, emptied by whoever ends the timeout (expiry and `stop()` take and wake the
/// waker; the future's cancel, its drop or a `reset`, takes it back): a slot is empty once its
/// timeout ended and its future is gone, and the worker never touches a cancelled timeout's
/// slot (a waker dropped there would move its task's reference count across threads).
///
/// The protocol (loom models: `loom-tests/tests/sleep_future.rs`): `poll` stores its waker
/// under the slot's lock, then loads the state; an ender moves the state, then takes the waker
/// under that lock. Whoever locks second sees the other's work: the waker (and wakes it), or
/// the moved state (`poll` returns `Ready`). A `poll` that sees the end first stores nothing.
pub(crate) type WakerSlots = [Mutex<Option<Waker>>; CHUNK];

impl ChunkRef {
    /// A chunk of fresh cells for a cursor of shard `shard`; with [`WakerSlots`] when `wakers`.
    pub(super) fn new(timer: &Arc<dyn ChunkTimer>, shard: u8, wakers: bool) -> ChunkRef {
        ChunkRef(Arc::new(Chunk {
            timer: Arc::clone(timer),
            shard,
            cells: fresh_cells(),
            wakers: wakers.then(|| Box::new(std::array::from_fn(|_| Mutex::new(None)))),
        }))
    }
}

#[inline]
fn fresh_cells() -> [Cell; CHUNK] {
    std::array::from_fn(|_| Cell::fresh())
}

/// Spare chunks a shard's cursor, and the worker for it, keep at most: a tick's worth for one
/// thread scheduling and cancelling flat out (the order of `worker::KEEP`).
pub(crate) const SPARE_CHUNKS: usize = 4096;

/// A chunk nobody refers to, cells reset, for its shard's cursor to reuse: under the
/// request-timeout pattern, reuse keeps the allocator (passing blocks between threads) out
/// (`docs/performance.md`, "Spare chunks handed back to their shard").
pub(crate) struct SpareChunk(Arc<Chunk>);

impl SpareChunk {
    #[inline]
    pub(super) fn into_chunk(self) -> ChunkRef {
        ChunkRef(self.0)
    }
}

/// A chunk of timeout states, as a queued batch and the worker's chunk table hold it.
#[derive(Clone)]
pub(crate) struct ChunkRef(pub(super) Arc<Chunk>);

impl ChunkRef {
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

    /// The chunk as a spare, cells fresh, if this was the last reference (nobody sees its cells).
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

    #[inline]
    pub(crate) fn has_wakers(&self) -> bool {
        self.0.wakers.is_some()
    }

    /// Cell `tag` as a state holding this reference (way back: [`CellRef::into_chunk`]).
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
