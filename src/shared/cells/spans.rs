//! The producers' and the batch's interface to the cells. Owns a shard's [`ShardCursors`] and a
//! batch's [`BatchCells`] (spans, chunk ids), under `mod.rs`'s "Chunks, spans and spares: the
//! protocol". Touches the chunks through [`ChunkRef`], and the worker's table.

use super::chunk::SPARE_CHUNKS;
use super::{CellId, CellRef, ChunkRef, ChunkTable, ChunkTimer, SpareChunk, CHUNK};
use crate::shared::{Shared, Stored, TimerHandle};
use crate::sync::Arc;

/// A shard's current chunk and next free cell. It holds a handle on the timer, which holds the
/// shard: `stop()` breaks the cycle by clearing every cursor ([`ChunkCursor::clear`]), and a
/// producer never starts a chunk on a stopped timer.
#[derive(Default)]
pub(crate) struct ChunkCursor {
    chunk: Option<ChunkRef>,
    next: u8,
    /// This shard's [`SpareChunk`]s of this cursor's kind, used before allocating.
    spares: Vec<SpareChunk>,
    wakers: bool,
    /// The handle all this cursor's chunks share (made with the first, dropped by `clear`), so
    /// a new chunk costs one allocation.
    timer: Option<Arc<dyn ChunkTimer>>,
}

impl ChunkCursor {
    /// A fresh state for position `at` of the batch with `spans`. The batch takes this cursor's
    /// cells in order (same lock, every state pushed), so a cell follows from its position
    /// ([`CellSpan`]). The handle's is the one count per timeout: queued ones share their span's.
    /// Detached: `None`, no locked instruction but the last cell's hand-over.
    #[inline]
    fn next_state<J: Stored, const HANDLE: bool>(
        &mut self,
        shared: &Arc<Shared<J>>,
        shard: u8,
        spans: &mut Vec<CellSpan>,
        at: usize,
    ) -> Option<CellRef> {
        let (chunk, tag) = self.next_cell(shared, shard);
        CellSpan::push_if_new(spans, chunk, tag, at);
        if usize::from(tag) == CHUNK - 1 {
            // The last cell: hand the cursor's reference over instead of cloning it (detached:
            // drop it; the span holds the chunk).
            let chunk = self.chunk.take().expect("just inserted");
            HANDLE.then_some(chunk.into_state(tag))
        } else if HANDLE {
            Some(chunk.state(tag))
        } else {
            None
        }
    }

    /// The current chunk (started if none) and its next free cell's tag, which is taken.
    #[inline]
    fn next_cell<J: Stored>(&mut self, shared: &Arc<Shared<J>>, shard: u8) -> (&ChunkRef, u8) {
        if self.chunk.is_none() {
            self.start_chunk(shared, shard);
        }
        let tag = self.next;
        self.next += 1;
        (self.chunk.as_ref().expect("a chunk was just started"), tag)
    }

    /// A spare, else a new chunk: once in `CHUNK` pushes.
    fn start_chunk<J: Stored>(&mut self, shared: &Arc<Shared<J>>, shard: u8) {
        self.next = 0;
        let chunk = match self.spares.pop() {
            Some(spare) => spare.into_chunk(),
            None => {
                let timer = self.timer.get_or_insert_with(|| {
                    Arc::new(TimerHandle {
                        shared: Arc::clone(shared),
                    })
                });
                ChunkRef::new(timer, shard, self.wakers)
            }
        };
        self.chunk = Some(chunk);
    }

    /// Drops the current chunk (and its unused cells) and the spares.
    fn clear(&mut self) {
        self.chunk = None;
        self.timer = None;
        self.clear_spares();
    }

    /// Drops the spares (an idle timer gives their memory back).
    fn clear_spares(&mut self) {
        self.spares = Vec::new();
    }

    /// Takes the worker's spares of this shard from `from`, up to [`SPARE_CHUNKS`] in all.
    fn add_spares(&mut self, from: &mut Vec<SpareChunk>) {
        let free = SPARE_CHUNKS.saturating_sub(self.spares.len());
        if self.spares.is_empty() && from.len() <= free {
            std::mem::swap(&mut self.spares, from);
        } else {
            let keep = from.len().saturating_sub(free);
            self.spares.extend(from.drain(keep..));
        }
    }
}

/// A queue shard's two cursors, indexed by `usize::from(wakers)`: its tasks' chunks, and its
/// futures' (with waker slots).
pub(crate) struct ShardCursors([ChunkCursor; 2]);

impl Default for ShardCursors {
    fn default() -> Self {
        ShardCursors([false, true].map(|wakers| ChunkCursor {
            wakers,
            ..ChunkCursor::default()
        }))
    }
}

impl ShardCursors {
    #[inline]
    pub(crate) fn of(&mut self, wakers: bool) -> &mut ChunkCursor {
        &mut self.0[usize::from(wakers)]
    }

    /// For `stop()`: the cursors hold handles on the timer.
    pub(crate) fn clear(&mut self) {
        self.0.iter_mut().for_each(ChunkCursor::clear);
    }

    /// Takes the worker's spares of this shard, of each kind, from `from`.
    pub(super) fn add_spares(&mut self, from: &mut [Vec<SpareChunk>; 2]) {
        for (cursor, from) in self.0.iter_mut().zip(from) {
            cursor.add_spares(from);
        }
    }

    pub(crate) fn clear_spares(&mut self) {
        self.0.iter_mut().for_each(ChunkCursor::clear_spares);
    }

    #[cfg(test)]
    pub(crate) fn spare_count(&self) -> usize {
        self.0.iter().map(|cursor| cursor.spares.len()).sum()
    }
}

/// A batch's cells, in push order: a [`CellSpan`] per run of consecutive cells of a chunk and,
/// once the worker takes the batch, each span's chunk id. All the batch knows of its cells.
#[derive(Default)]
pub(crate) struct BatchCells {
    spans: Vec<CellSpan>,
    /// Timeouts pushed, the drained ones included: the position of the next.
    pushed: usize,
    /// Timeouts the worker has taken from the front ([`BatchCells::take_front`]).
    drained: usize,
    /// The worker's: the chunk table's id of each span, given when it takes the batch.
    ids: Vec<u32>,
}

impl BatchCells {
    /// See [`ChunkCursor::next_state`].
    #[inline]
    pub(crate) fn push<J: Stored, const HANDLE: bool>(
        &mut self,
        cursor: &mut ChunkCursor,
        shared: &Arc<Shared<J>>,
        shard: u8,
    ) -> Option<CellRef> {
        // A shard's batch is never partly taken: the worker swaps it out whole.
        debug_assert_eq!(self.drained, 0);
        let at = self.pushed;
        self.pushed += 1;
        cursor.next_state::<J, HANDLE>(shared, shard, &mut self.spans, at)
    }

    /// Gives each span its chunk id (a chunk may recur), unless done; `ids` keeps its capacity.
    pub(crate) fn register(&mut self, table: &mut ChunkTable) {
        if self.ids.len() != self.spans.len() {
            debug_assert!(self.ids.is_empty());
            self.ids
                .extend(self.spans.iter().map(|span| table.id_of(&span.chunk)));
        }
    }

    #[inline]
    pub(crate) fn take_front(&mut self, n: usize) -> FrontCells<'_> {
        debug_assert_eq!(self.ids.len(), self.spans.len(), "a registered batch");
        let cursor = CellSpanCursor::new(&self.spans, self.drained);
        self.drained += n;
        FrontCells {
            cursor,
            ids: &self.ids,
        }
    }

    /// Once every timeout is out: hands the spans' chunks to `table`, keeping the capacity.
    pub(crate) fn clear(&mut self, table: &mut ChunkTable) {
        debug_assert_eq!(self.drained, self.pushed);
        self.spans
            .drain(..)
            .for_each(|span| table.release(span.chunk));
        self.ids.clear();
        (self.pushed, self.drained) = (0, 0);
    }

    /// The states of the timeouts not taken yet, in order.
    pub(crate) fn states(&self) -> Vec<CellRef> {
        CellSpanCursor::new(&self.spans, self.drained)
            .take(self.pushed - self.drained)
            .map(|(span, tag)| self.spans[span].chunk.state(tag))
            .collect()
    }

    /// Appends `other`'s cells, fresh from a shard, to these (not started on).
    pub(crate) fn append(&mut self, other: &mut BatchCells) {
        debug_assert!(other.drained == 0 && self.ids.is_empty() && other.ids.is_empty());
        let offset = self.pushed;
        self.pushed += std::mem::take(&mut other.pushed);
        self.spans.extend(other.spans.drain(..).map(|mut span| {
            span.first += offset;
            span
        }));
    }
}

/// The cells of timeouts being taken from the front of a batch ([`BatchCells::take_front`]).
pub(crate) struct FrontCells<'a> {
    cursor: CellSpanCursor<'a>,
    ids: &'a [u32],
}

impl<'a> Iterator for FrontCells<'a> {
    type Item = CellSlot<'a>;

    #[inline]
    fn next(&mut self) -> Option<CellSlot<'a>> {
        let (span, tag) = self.cursor.next()?;
        Some(CellSlot {
            chunk: &self.cursor.spans[span].chunk,
            id: CellId::new(self.ids[span], tag),
        })
    }
}

/// A queued timeout's cell as the worker's transfer finds it: its id, and the cell itself.
pub(crate) struct CellSlot<'a> {
    chunk: &'a ChunkRef,
    id: CellId,
}

impl CellSlot<'_> {
    #[inline]
    pub(crate) fn id(&self) -> CellId {
        self.id
    }

    /// See [`Cell::try_enter_wheel`](super::Cell::try_enter_wheel).
    #[inline]
    pub(crate) fn try_enter_wheel(&self, key: u32) -> bool {
        self.chunk.cell(self.id.tag()).try_enter_wheel(key)
    }
}

/// A run of a batch's timeouts on consecutive cells of `chunk` ("Spans" in `mod.rs`).
struct CellSpan {
    chunk: ChunkRef,
    first: usize,
    start: u8,
}

impl CellSpan {
    /// Makes the last span that of cell `tag` of `chunk` (position `at`): a new span starts on
    /// a chunk's first cell, in an empty batch, and after another chunk's span.
    #[inline]
    fn push_if_new(spans: &mut Vec<CellSpan>, chunk: &ChunkRef, tag: u8, at: usize) {
        if tag == 0 || spans.last().is_none_or(|span| !span.chunk.same(chunk)) {
            spans.push(CellSpan {
                chunk: chunk.clone(),
                first: at,
                start: tag,
            });
        }
        debug_assert!(spans.last().is_some_and(
            |span| span.chunk.same(chunk) && at - span.first == usize::from(tag - span.start)
        ));
    }

    #[inline]
    fn tag(&self, at: usize) -> u8 {
        debug_assert!(at >= self.first && at - self.first < CHUNK);
        // Below CHUNK (at most 32), so the cast keeps every bit.
        self.start + (at - self.first) as u8
    }
}

/// Walks a batch's positions from `at`, giving per timeout its span's index and its tag.
struct CellSpanCursor<'a> {
    spans: &'a [CellSpan],
    span: usize,
    at: usize,
}

impl<'a> CellSpanCursor<'a> {
    /// From position `at` (which must belong to one of `spans`).
    fn new(spans: &'a [CellSpan], at: usize) -> Self {
        let span = spans.partition_point(|r| r.first <= at).saturating_sub(1);
        CellSpanCursor { spans, span, at }
    }
}

impl Iterator for CellSpanCursor<'_> {
    type Item = (usize, u8);

    #[inline]
    fn next(&mut self) -> Option<(usize, u8)> {
        while self
            .spans
            .get(self.span + 1)
            .is_some_and(|r| r.first <= self.at)
        {
            self.span += 1;
        }
        let tag = self.spans.get(self.span)?.tag(self.at);
        self.at += 1;
        Some((self.span, tag))
    }
}
