//! The worker's table of the chunks of timeout states it holds.
//!
//! Owns [`ChunkTable`]: one reference per chunk whose cells are in the wheel or queued, the
//! ids the wheel's entries name them by, and the spare chunks the worker hands back to the
//! producers' shards. Touches the `shared` module's cells and `sync` (the shard count); only the
//! worker uses it. The rules it keeps: `shared::cells`, "Chunks, spans and spares: the protocol".

use crate::shared::cells::{ChunkRef, SpareChunk, CHUNK, SPARE_CHUNKS};
use crate::shared::{BoxedTask, Stored};
use crate::sync::SHARDS;
use crate::wheel::NO_INDEX;

/// The chunks of the timeouts the worker holds, one reference each.
///
/// A queued batch holds one reference per chunk, not one per timeout (see
/// `ChunkCursor::next_state`), and so does this table: the wheel's entries name their chunk by
/// its id here. A chunk stays until each of its cells has been settled once: taken from the
/// queue cancelled, or expired, or unlinked after a cancel. Cells a stopped timer never handed
/// out keep their chunk until the worker is dropped.
///
/// Settling allocates nothing (the free ids are linked through `meta`), so that nothing in
/// the expiry loop calls the allocator.
pub(super) struct ChunkTable<J: crate::shared::sealed::TaskStorage = BoxedTask> {
    chunks: Vec<Option<ChunkRef<J>>>,
    /// Per id: the cells not settled yet while the id holds a chunk; the next free id (or
    /// `NO_INDEX`) while it is free. Separate from `chunks` to keep the two at 12 bytes per chunk,
    /// not 16.
    meta: Vec<u32>,
    /// The first free id, or `NO_INDEX`.
    free: u32,
    /// Ids holding a chunk.
    pub(super) held: usize,
    /// Per queue shard and kind (tasks', futures'), the id of the chunk of that cursor
    /// registered last: the only one a batch can refer to again (each of a shard's two cursors
    /// hands its chunks out one after the other, and the worker takes each shard's batches in
    /// order), so the only one to look for. Kept per kind as well as per shard because a batch
    /// can alternate between its shard's two chunks (see the regression test
    /// `interleaved_tasks_and_futures_settle_every_chunk`).
    latest: [[u32; 2]; SHARDS],
    /// Per queue shard, chunks let go of with nothing else holding them, for the shard's
    /// cursors to use again (see `SpareChunk`); handed over when the worker next takes the
    /// shard's batch. Tasks' chunks, and futures' (with waker slots).
    pub(super) spares: [Vec<SpareChunk<J>>; SHARDS],
    pub(super) wake_spares: [Vec<SpareChunk<J>>; SHARDS],
}

impl<J: Stored> ChunkTable<J> {
    pub(super) fn new() -> ChunkTable<J> {
        ChunkTable {
            chunks: Vec::new(),
            meta: Vec::new(),
            free: NO_INDEX,
            held: 0,
            latest: [[NO_INDEX; 2]; SHARDS],
            spares: std::array::from_fn(|_| Vec::new()),
            wake_spares: std::array::from_fn(|_| Vec::new()),
        }
    }

    /// A chunk let go of by the worker: kept as a spare if that was its last reference.
    #[inline]
    pub(super) fn release(&mut self, chunk: ChunkRef<J>) {
        let spares = if chunk.has_wakers() {
            &mut self.wake_spares[chunk.shard()]
        } else {
            &mut self.spares[chunk.shard()]
        };
        if spares.len() < SPARE_CHUNKS {
            if let Some(spare) = chunk.into_spare() {
                spares.push(spare);
            }
        }
    }

    /// The id of `chunk`, registering it if it is new.
    pub(super) fn id_of(&mut self, chunk: &ChunkRef<J>) -> u32 {
        let (shard, kind) = (chunk.shard(), usize::from(chunk.has_wakers()));
        let latest = self.latest[shard][kind];
        let known = self
            .chunks
            .get(latest as usize)
            .and_then(Option::as_ref)
            .is_some_and(|held| held.same(chunk));
        if known {
            return latest;
        }
        let id = if self.free == NO_INDEX {
            self.chunks.push(Some(chunk.clone()));
            self.meta.push(CHUNK_CELLS);
            u32::try_from(self.chunks.len() - 1).expect("fewer chunks than timeouts")
        } else {
            let id = self.free;
            self.free = self.meta[id as usize];
            self.chunks[id as usize] = Some(chunk.clone());
            self.meta[id as usize] = CHUNK_CELLS;
            id
        };
        self.held += 1;
        self.latest[shard][kind] = id;
        id
    }

    /// The table's reference to chunk `id`, taken out for its cells to be settled (a task's
    /// `Timeout` borrows it while the task runs), one after another while the entries being
    /// settled are of this chunk: given back with [`ChunkTable::put_back_settled`] before the
    /// table is asked for the id again (meanwhile the holder asks the chunk itself).
    #[inline]
    pub(super) fn take(&mut self, id: u32) -> ChunkRef<J> {
        self.chunks[id as usize]
            .take()
            .expect("a chunk with unsettled cells")
    }

    /// Gives back what [`ChunkTable::take`] took, with `settled` (at least 1) more of its
    /// cells settled while it was out: the last one lets the chunk go.
    #[inline]
    pub(super) fn put_back_settled(&mut self, id: u32, chunk: ChunkRef<J>, settled: u32) {
        if self.count_settled(id, settled) {
            self.let_go(id, chunk);
        } else {
            debug_assert!(self.chunks[id as usize].is_none());
            self.chunks[id as usize] = Some(chunk);
        }
    }

    /// Frees id `id`, whose cells are all settled, and lets its chunk go (once per chunk of
    /// 32 timeouts: out of the settling loop's way).
    #[inline(never)]
    fn let_go(&mut self, id: u32, chunk: ChunkRef<J>) {
        self.release(chunk);
        self.meta[id as usize] = self.free;
        self.free = id;
        self.held -= 1;
    }

    #[inline]
    pub(super) fn get(&self, id: u32) -> &ChunkRef<J> {
        self.chunks[id as usize]
            .as_ref()
            .expect("a chunk with unsettled cells")
    }

    /// For an idle worker: lets the spares go, and the table's capacity too if it holds no chunk
    /// (a busy worker keeps it: it would regrow it in the next tick).
    pub(super) fn release_idle(&mut self) {
        if self.held == 0 {
            *self = ChunkTable::new();
        } else {
            self.spares = std::array::from_fn(|_| Vec::new());
            self.wake_spares = std::array::from_fn(|_| Vec::new());
        }
    }

    /// One of the chunk's cells is settled (with the chunk in the table): the last one lets the
    /// chunk go.
    #[inline]
    pub(super) fn settle(&mut self, id: u32) {
        if self.count_settled(id, 1) {
            let chunk = self.take(id);
            self.let_go(id, chunk);
        }
    }

    /// Counts `settled` (at least 1) more of chunk `id`'s cells settled; whether they were its
    /// last. More settled than the chunk has cells left is a bug: debug builds stop there;
    /// release builds log it once and keep the chunk for good, never letting it go (a chunk
    /// let go of too early could be reused under a live timeout).
    #[inline]
    fn count_settled(&mut self, id: u32, settled: u32) -> bool {
        debug_assert!(settled >= 1);
        let unsettled = &mut self.meta[id as usize];
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
}

const CHUNK_CELLS: u32 = CHUNK as u32;

/// See [`ChunkTable::count_settled`].
#[cold]
#[inline(never)]
fn over_settled(id: u32) {
    debug_assert!(false, "chunk {id} settled more times than it has cells");
    static LOGGED: std::sync::Once = std::sync::Once::new();
    LOGGED.call_once(|| {
        log::error!(
            "hashed-timer-wheel: chunk {id} was settled more times than it has cells; it is kept \
             for good (a bug: please report it)"
        )
    });
}
