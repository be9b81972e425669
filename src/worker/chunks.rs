//! The worker's table of the chunks of timeout states it holds.
//!
//! Owns [`ChunkTable`]: one reference per chunk whose cells are in the wheel or queued, in the
//! crate's slab under the ids the wheel's entries name them by, and the spare chunks the worker
//! hands back to the producers' shards. Touches the `shared` module's cells and `sync` (the shard count); only the
//! worker uses it. The rules it keeps: `shared::cells`, "Chunks, spans and spares: the protocol".

use crate::shared::cells::{ChunkRef, SpareChunk, CHUNK, MAX_CHUNK_IDS, SPARE_CHUNKS};
use crate::sync::SHARDS;
use crate::wheel::{Slab, Vacancy, NO_INDEX};

/// The chunks of the timeouts the worker holds, one reference each.
///
/// A queued batch holds one reference per chunk, not one per timeout (see
/// `ChunkCursor::next_state`), and so does this table: the wheel's entries name their chunk by
/// its id here, its key in the table's slab. A chunk stays until each of its cells has been
/// settled once: taken from the queue cancelled, or expired, or unlinked after a cancel. Cells
/// a stopped timer never handed out keep their chunk until the worker is dropped.
///
/// Settling allocates nothing (a freed id is a slot on the slab's free list), so that nothing
/// in the expiry loop calls the allocator.
pub(super) struct ChunkTable {
    chunks: Slab<Held>,
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
    pub(super) spares: [Vec<SpareChunk>; SHARDS],
    pub(super) wake_spares: [Vec<SpareChunk>; SHARDS],
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
    pub(super) fn new() -> ChunkTable {
        ChunkTable {
            chunks: Slab::new(),
            latest: [[NO_INDEX; 2]; SHARDS],
            spares: std::array::from_fn(|_| Vec::new()),
            wake_spares: std::array::from_fn(|_| Vec::new()),
        }
    }

    /// Ids holding a chunk.
    pub(super) fn held(&self) -> usize {
        self.chunks.live()
    }

    /// A chunk let go of by the worker: kept as a spare if that was its last reference.
    #[inline]
    pub(super) fn release(&mut self, chunk: ChunkRef) {
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

    /// The table's reference to chunk `id`, taken out for its cells to be settled (a task's
    /// `Timeout` borrows it while the task runs), one after another while the entries being
    /// settled are of this chunk: given back with [`ChunkTable::put_back_settled`] before the
    /// table is asked for the id again (meanwhile the holder asks the chunk itself).
    #[inline]
    pub(super) fn take(&mut self, id: u32) -> ChunkRef {
        self.slot(id)
            .0
            .take()
            .expect("a chunk with unsettled cells")
    }

    /// Gives back what [`ChunkTable::take`] took, with `settled` (at least 1) more of its
    /// cells settled while it was out: the last one lets the chunk go.
    #[inline]
    pub(super) fn put_back_settled(&mut self, id: u32, chunk: ChunkRef, settled: u32) {
        if self.count_settled(id, settled) {
            self.let_go(id, chunk);
        } else {
            let held = self.slot(id).0;
            debug_assert!(held.is_none());
            *held = Some(chunk);
        }
    }

    /// Frees id `id`, whose cells are all settled, and lets its chunk go (once per chunk of
    /// 32 timeouts: out of the settling loop's way).
    #[inline(never)]
    fn let_go(&mut self, id: u32, chunk: ChunkRef) {
        self.release(chunk);
        self.chunks.remove(id);
    }

    #[inline]
    pub(super) fn get(&self, id: u32) -> &ChunkRef {
        match &self.chunks[id] {
            Held::Chunk {
                chunk: Some(chunk), ..
            } => chunk,
            _ => panic!("chunk id {id} holds no chunk"),
        }
    }

    /// For an idle worker: lets the spares go, and the table's capacity too if it holds no chunk
    /// (a busy worker keeps it: it would regrow it in the next tick).
    pub(super) fn release_idle(&mut self) {
        if self.held() == 0 {
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
        let unsettled = self.slot(id).1;
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
