//! The worker's side of the chunks: registering a batch's chunks, settling cells, lending a due
//! cell's state to its task's run, handing spare chunks back to a shard.
//!
//! Owns [`ChunkTable`] (a reference per chunk whose cells are in the wheel or queued, under the
//! ids [`CellId`]s carry, and the shards' spares) and [`Settling`] (a bucket's expiry as the
//! table sees it). Touches the chunks, the cursors (`spans.rs`) and `sync` (the shard count);
//! only the worker uses it. Its rules: `mod.rs`, "Chunks, spans and spares: the protocol".

use super::chunk::{MAX_CHUNK_IDS, SPARE_CHUNKS};
use super::{CellId, CellRef, ChunkRef, Expiry, ShardCursors, SpareChunk, CHUNK};
use crate::sync::SHARDS;
use crate::wheel::{Slab, Vacancy, NO_INDEX};
use std::sync::Once;

/// The chunks of the timeouts the worker holds, one reference each until every cell is settled;
/// a wheel entry names its chunk by its id (its slab key). Cells a stopped timer never handed
/// out keep their chunk until the worker is dropped. Settling allocates nothing (a freed id is
/// a free-list slot): the expiry loop never calls the allocator.
pub(crate) struct ChunkTable {
    chunks: Slab<Held>,
    /// Per queue shard and kind (tasks', futures'), the id of the cursor's chunk registered
    /// last: the only one a batch can name again (a cursor hands its chunks out one after the
    /// other, and the worker takes a shard's batches in order). Per kind too, as a batch may
    /// alternate between its shard's two chunks (test `interleaved_tasks_and_futures_...`).
    latest: [[u32; 2]; SHARDS],
    /// Per queue shard and kind (as `latest`), chunks let go of with nothing else holding them,
    /// for the shard's cursors to reuse (`SpareChunk`), handed over as the worker next takes the
    /// shard's batch.
    spares: [[Vec<SpareChunk>; 2]; SHARDS],
}

/// A slot of the table: a free id, or a chunk (out of the table while its cells are being
/// settled: [`ChunkTable::take`]) and the count of its cells not settled yet.
enum Held {
    Free(u32),
    Chunk {
        chunk: Option<ChunkRef>,
        unsettled: u32,
    },
}

impl Vacancy for Held {
    #[inline]
    fn vacant(next: u32) -> Self {
        Held::Free(next)
    }

    #[inline]
    fn next_vacant(&self) -> Option<u32> {
        match *self {
            Held::Free(next) => Some(next),
            Held::Chunk { .. } => None,
        }
    }
}

impl ChunkTable {
    pub(crate) fn new() -> ChunkTable {
        ChunkTable {
            chunks: Slab::new(),
            latest: [[NO_INDEX; 2]; SHARDS],
            spares: Default::default(),
        }
    }

    pub(crate) fn held(&self) -> usize {
        self.chunks.live()
    }

    /// Spare chunks kept for the shards: tasks' and futures'.
    #[cfg(test)]
    pub(crate) fn spare_counts(&self) -> (usize, usize) {
        let count = |kind: usize| self.spares.iter().map(|s| s[kind].len()).sum();
        (count(0), count(1))
    }

    /// Hands shard `shard`'s cursors their spare chunks (as the worker takes its batch).
    #[inline]
    pub(crate) fn lend_spares(&mut self, shard: usize, cursors: &mut ShardCursors) {
        let spares = &mut self.spares[shard];
        if spares.iter().any(|s| !s.is_empty()) {
            cursors.add_spares(spares);
        }
    }

    /// The state of cell `cell`, a new reference (for `stop()`).
    pub(crate) fn state(&self, cell: CellId) -> CellRef {
        self.get(cell.chunk()).state(cell.tag())
    }

    /// A chunk let go of by the worker: kept as a spare if that was its last reference.
    #[inline]
    pub(super) fn release(&mut self, chunk: ChunkRef) {
        let spares = &mut self.spares[chunk.shard()][usize::from(chunk.has_wakers())];
        if spares.len() < SPARE_CHUNKS {
            if let Some(spare) = chunk.into_spare() {
                spares.push(spare);
            }
        }
    }

    /// The id of `chunk`, registering it if it is new.
    pub(super) fn id_of(&mut self, chunk: &ChunkRef) -> u32 {
        let (shard, kind) = (chunk.shard(), usize::from(chunk.has_wakers()));
        let latest = self.latest[shard][kind];
        let known = matches!(
            self.chunks.get(latest),
            Some(Held::Chunk { chunk: Some(held), .. }) if held.same(chunk)
        );
        if known {
            return latest;
        }
        let id = self.chunks.insert(Held::Chunk {
            chunk: Some(chunk.clone()),
            unsettled: CHUNK_CELLS,
        });
        // Unreachable: a chunk in the table holds a pending timeout (`MAX_CHUNK_IDS`).
        assert!(id < MAX_CHUNK_IDS, "more chunk ids than a cell id holds");
        self.latest[shard][kind] = id;
        id
    }

    /// Chunk `id`'s slot: its chunk (`None` while taken out) and its unsettled count.
    #[inline]
    fn slot(&mut self, id: u32) -> (&mut Option<ChunkRef>, &mut u32) {
        match &mut self.chunks[id] {
            Held::Chunk { chunk, unsettled } => (chunk, unsettled),
            Held::Free(_) => panic!("chunk id {id} is free"),
        }
    }

    /// The table's reference to chunk `id`, taken out while its cells are settled one after
    /// another (a running task's `Timeout` borrows it); given back with
    /// [`ChunkTable::put_back_settled`] before the table is asked for the id again.
    #[inline]
    fn take(&mut self, id: u32) -> ChunkRef {
        self.slot(id)
            .0
            .take()
            .expect("a chunk with unsettled cells")
    }

    /// Gives back what [`ChunkTable::take`] took, with `settled` (at least 1) more of its cells
    /// settled meanwhile: the last lets the chunk go. Once per chunk out of a bucket walk (per
    /// timeout when a bucket's timeouts come from different chunks): one look at the slot.
    fn put_back_settled(&mut self, id: u32, chunk: ChunkRef, settled: u32) {
        let (held, unsettled) = self.slot(id);
        if count_settled(unsettled, settled, id) {
            self.let_go(id, chunk);
        } else {
            debug_assert!(held.is_none());
            *held = Some(chunk);
        }
    }

    /// Frees id `id`, its cells all settled, and lets its chunk go (once per 32 timeouts: out
    /// of the settling loop's way).
    fn let_go(&mut self, id: u32, chunk: ChunkRef) {
        self.release(chunk);
        self.chunks.remove(id);
    }

    #[inline]
    fn get(&self, id: u32) -> &ChunkRef {
        match &self.chunks[id] {
            Held::Chunk {
                chunk: Some(chunk), ..
            } => chunk,
            _ => panic!("chunk id {id} holds no chunk"),
        }
    }

    /// For an idle worker: lets the spares go, and the table's capacity if it holds no chunk (a
    /// busy worker would regrow it in the next tick).
    pub(crate) fn release_idle(&mut self) {
        if self.held() == 0 {
            *self = ChunkTable::new();
        } else {
            self.spares = Default::default();
        }
    }

    /// Cell `cell` is settled (its chunk in the table): the chunk's last lets it go.
    #[inline]
    pub(crate) fn settle(&mut self, cell: CellId) {
        let id = cell.chunk();
        let (held, unsettled) = self.slot(id);
        if count_settled(unsettled, 1, id) {
            let chunk = held.take().expect("a chunk with unsettled cells");
            self.let_go(id, chunk);
        }
    }

    /// Settles `state`, a timeout cancelled in the wheel whose entry named cell `cell`: if
    /// `cell` is not `state`'s (a stale chunk id, a bug), nothing is settled.
    pub(crate) fn settle_cancelled(&mut self, cell: CellId, state: &CellRef) {
        if state.is_in(self.get(cell.chunk())) {
            self.settle(cell);
        } else {
            stale_chunk_id(cell.chunk());
        }
    }

    /// As a [`Settling`] does: takes chunk `id` out, puts it back with `settled` settled.
    #[cfg(test)]
    pub(crate) fn settle_out(&mut self, id: u32, settled: u32) {
        let chunk = self.take(id);
        self.put_back_settled(id, chunk, settled);
    }

    #[inline]
    pub(crate) fn settling(&mut self) -> Settling<'_> {
        Settling {
            table: self,
            id: NO_INDEX,
            settled: 0,
            chunk: None,
        }
    }
}

const CHUNK_CELLS: u32 = CHUNK as u32;

/// A bucket's due cells, settled as the wheel's walk hands them out: each still in the wheel is
/// expired and its state lent to its task's run, each cancelled let go of. Their chunk stays
/// out of the table while the next cells are of it (timeouts mostly come a chunk at a time).
pub(crate) struct Settling<'a> {
    table: &'a mut ChunkTable,
    /// The id of the chunk out of the table (`NO_INDEX`: none yet), and how many of its cells
    /// were settled while out.
    id: u32,
    settled: u32,
    /// The table's reference to that chunk; `None` while lent to a task's run.
    chunk: Option<ChunkRef>,
}

impl Settling<'_> {
    /// Settles cell `cell`, whose wheel entry under `key` is due and just unlinked: its state if
    /// it expired now, lent for the task's run (back through [`Settling::give_back`]); else why
    /// its task is to be dropped: cancelled since the walk reached it, or the entry names
    /// another cell (a stale chunk id, a bug: no cell is touched). Inlined always into the walk
    /// (`docs/performance.md`, "`Settling::due` inlined always").
    #[inline(always)]
    pub(crate) fn due(&mut self, cell: CellId, key: u32) -> Result<CellRef, Expiry> {
        let (id, tag) = (cell.chunk(), cell.tag());
        if id != self.id {
            self.put_back();
            (self.id, self.settled) = (id, 0);
            self.chunk = Some(self.table.take(id));
        }
        let chunk = self.chunk.take().expect("a lent state given back");
        match chunk.cell(tag).try_expire(key) {
            Expiry::Expired => {
                // The task's `Timeout` borrows the table's reference: no count moves.
                self.settled += 1;
                Ok(chunk.into_state(tag))
            }
            Expiry::Cancelled => {
                // Ended here, by the walk: its entry on the cancellation queue finds NO_INDEX.
                chunk.cell(tag).clear_wheel_key();
                self.settled += 1;
                self.chunk = Some(chunk);
                Err(Expiry::Cancelled)
            }
            Expiry::NotItsCell => {
                stale_chunk_id(id);
                self.chunk = Some(chunk);
                Err(Expiry::NotItsCell)
            }
        }
    }

    /// Takes back the state [`Settling::due`] lent, after the task's run.
    #[inline]
    pub(crate) fn give_back(&mut self, state: CellRef) {
        let lent = self.chunk.replace(state.into_chunk());
        debug_assert!(lent.is_none());
        // `due` lent the only reference the table had out: there is nothing to drop.
        std::mem::forget(lent);
    }

    #[inline]
    fn put_back(&mut self) {
        if let Some(chunk) = self.chunk.take() {
            self.table.put_back_settled(self.id, chunk, self.settled);
        }
    }
}

impl Drop for Settling<'_> {
    /// The chunk still out goes back after the runs, so that a chunk whose timeouts all ran
    /// comes back as a spare (unless an executor or a task still holds it).
    fn drop(&mut self) {
        self.put_back();
    }
}

/// Counts `settled` (at least 1) more of chunk `id`'s cells settled, `unsettled` its count of
/// cells not settled yet; whether they were its last. Over-settling is a bug: debug builds stop;
/// release builds log it once and keep the chunk for good (let go too early, it could be reused
/// under a live timeout).
#[inline]
fn count_settled(unsettled: &mut u32, settled: u32, id: u32) -> bool {
    debug_assert!(settled >= 1);
    match unsettled.checked_sub(settled) {
        Some(left) => {
            *unsettled = left;
            left == 0
        }
        None => {
            *unsettled = u32::MAX;
            over_settled(id);
            false
        }
    }
}

/// A wheel entry's chunk id names a chunk not holding the entry's cell: a bookkeeping bug. Both
/// chunks are left as they are (the entry is dropped, its cell never settled, so its chunk is
/// never reused): no other timeout's cell is touched.
#[cold]
fn stale_chunk_id(id: u32) {
    static LOGGED: Once = Once::new();
    bookkeeping_bug(
        &LOGGED,
        format_args!("a wheel entry named a stale chunk id ({id}); the entry was dropped unrun"),
    );
}

/// See [`count_settled`].
#[cold]
fn over_settled(id: u32) {
    static LOGGED: Once = Once::new();
    bookkeeping_bug(
        &LOGGED,
        format_args!("chunk {id} was settled more times than it has cells; it is kept for good"),
    );
}

/// A bug of the worker's bookkeeping, which leaves the state as it is: debug builds stop here;
/// release builds log it (once per kind: `logged`) and go on.
#[cold]
fn bookkeeping_bug(logged: &'static Once, message: std::fmt::Arguments<'_>) {
    debug_assert!(false, "{message}");
    logged.call_once(|| {
        crate::shared::log_caught(
            log::Level::Error,
            format_args!("hashed-timer-wheel: {message} (a bug: please report it)"),
        );
    });
}
