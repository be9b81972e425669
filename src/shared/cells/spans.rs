//! The producers' and the batch's interface to the cells: how a queue shard hands out cells
//! ([`ShardCursors`], each a [`ChunkCursor`] that gives each timeout the next cell of its
//! current chunk) and how a queued batch finds them again ([`BatchCells`]: spans that record
//! where each run of consecutive cells starts, so that nothing is kept per timeout).
//!
//! Owns the cursors (their current chunks, their spares) and a batch's spans and chunk ids;
//! the rules they follow are in `mod.rs` ("Chunks, spans and spares: the protocol"). Touches
//! the chunks through [`ChunkRef`], and the worker's table to register and release them.

use super::chunk::SPARE_CHUNKS;
use super::{CellId, CellRef, ChunkRef, ChunkTable, ChunkTimer, SpareChunk, CHUNK};
use crate::shared::{Shared, Stored, TimerHandle};
use crate::sync::Arc;

/// The chunk a queue shard's producers take their states from, and its next free cell: kept
/// in the shard, under its lock (see `Shared::schedule`).
///
/// The cursor holds a handle on its timer (the one its chunks share), as do its current chunk
/// and its spares, and the shard is part of the timer: from the cursor's first chunk on, the
/// two keep each other alive. `stop()` breaks the cycle by clearing every shard's cursor
/// ([`ChunkCursor::clear`]), and a producer never starts a chunk on a stopped timer.
#[derive(Default)]
pub(crate) struct ChunkCursor {
    chunk: Option<ChunkRef>,
    next: u8,
    /// Chunks of this shard the worker has finished with, their cells reset, to be used
    /// before allocating (see [`SpareChunk`]); of this cursor's kind (waker slots or none).
    spares: Vec<SpareChunk>,
    /// Whether this cursor's chunks carry waker slots (futures' timeouts).
    wakers: bool,
    /// The timer, as every chunk of this cursor names it: one handle for them all (made with
    /// the first chunk, let go of by `clear`), so that a new chunk costs one allocation.
    timer: Option<Arc<dyn ChunkTimer>>,
}

impl ChunkCursor {
    /// A cursor whose chunks carry waker slots, for futures' timeouts.
    fn with_wakers() -> ChunkCursor {
        ChunkCursor {
            wakers: true,
            ..ChunkCursor::default()
        }
    }

    /// A fresh state (QUEUED, no wheel key) for a timeout of `shared`'s timer, from the current
    /// chunk (a new one when it is used up), for the timeout at position `at` of the queued
    /// batch whose spans are `spans` (when a span starts: `CellSpan::push_if_new`). `shard` is
    /// the queue shard this cursor belongs to.
    ///
    /// The batch's timeouts take this cursor's cells one after another (the cursor and the
    /// batch are under the same shard lock, and every state handed out is pushed), so the cell
    /// of each queued timeout follows from its position ([`CellSpan`]).
    ///
    /// One reference count per timeout (the handle's), not two: the queued timeouts of a chunk
    /// share their span's one reference to it.
    ///
    /// With `HANDLE` false (a detached timeout: nobody holds a handle) no reference is taken
    /// for it: `None`, and no locked instruction but the chunk's last cell's hand-over.
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
            // The last cell: hand the cursor's reference over instead of cloning it (or, with
            // no handle to take it, let it go: the span holds the chunk).
            let chunk = self.chunk.take().expect("just inserted");
            HANDLE.then_some(chunk.into_state(tag))
        } else if HANDLE {
            Some(chunk.state(tag))
        } else {
            None
        }
    }

    /// The current chunk (started if there is none) and the tag of its next free cell, which
    /// is taken.
    #[inline(always)]
    fn next_cell<J: Stored>(&mut self, shared: &Arc<Shared<J>>, shard: u8) -> (&ChunkRef, u8) {
        if self.chunk.is_none() {
            self.start_chunk(shared, shard);
        }
        let tag = self.next;
        self.next += 1;
        (self.chunk.as_ref().expect("a chunk was just started"), tag)
    }

    /// Starts the next chunk: a spare, or a new one when there is none. Out of line, as it runs
    /// once in `CHUNK` pushes (`docs/performance.md`, "`inline(always)` / `inline(never)`
    /// placements").
    #[inline(never)]
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

    /// Lets go of the current chunk (its unused cells are freed with it) and of the spares.
    fn clear(&mut self) {
        self.chunk = None;
        self.timer = None;
        self.clear_spares();
    }

    /// Lets go of the spare chunks (an idle timer gives their memory back).
    fn clear_spares(&mut self) {
        self.spares = Vec::new();
    }

    /// Takes spare chunks from `from` (the worker's, all of this cursor's shard), up to
    /// [`SPARE_CHUNKS`] in all.
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

/// A queue shard's two cursors: its tasks' chunks, and its futures' (with waker slots).
pub(crate) struct ShardCursors {
    tasks: ChunkCursor,
    futures: ChunkCursor,
}

impl Default for ShardCursors {
    fn default() -> Self {
        ShardCursors {
            tasks: ChunkCursor::default(),
            futures: ChunkCursor::with_wakers(),
        }
    }
}

impl ShardCursors {
    /// The cursor of futures' timeouts (`wakers`) or of tasks'.
    #[inline]
    pub(crate) fn of(&mut self, wakers: bool) -> &mut ChunkCursor {
        if wakers {
            &mut self.futures
        } else {
            &mut self.tasks
        }
    }

    /// Lets go of both cursors' chunks and spares (`stop()`: they hold handles on the timer).
    pub(crate) fn clear(&mut self) {
        self.tasks.clear();
        self.futures.clear();
    }

    /// Takes the worker's spare chunks of this shard: tasks' and futures'.
    pub(super) fn add_spares(
        &mut self,
        tasks: &mut Vec<SpareChunk>,
        futures: &mut Vec<SpareChunk>,
    ) {
        self.tasks.add_spares(tasks);
        self.futures.add_spares(futures);
    }

    /// Lets go of both cursors' spare chunks (an idle timer gives their memory back).
    pub(crate) fn clear_spares(&mut self) {
        self.tasks.clear_spares();
        self.futures.clear_spares();
    }

    /// Spare chunks held by both cursors.
    #[cfg(test)]
    pub(crate) fn spare_count(&self) -> usize {
        self.tasks.spares.len() + self.futures.spares.len()
    }
}

/// The cells of a queued batch's timeouts, in push order: one [`CellSpan`] per run of
/// consecutive cells of a chunk, and, once the worker has taken the batch, each span's chunk
/// id in its table. What the batch knows of its cells is this and nothing more.
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
    /// A fresh state for the next timeout, from `cursor` (see [`ChunkCursor::next_state`]).
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

    /// Gives each span its chunk id, in push order (a chunk may recur), unless done already.
    /// The ids' vector keeps its capacity across the batch's uses: nothing is allocated.
    pub(crate) fn register(&mut self, table: &mut ChunkTable) {
        if self.ids.len() != self.spans.len() {
            debug_assert!(self.ids.is_empty());
            self.ids
                .extend(self.spans.iter().map(|span| table.id_of(&span.chunk)));
        }
    }

    /// The cells of the next `n` timeouts, taken from the front in order.
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

    /// Appends `other`'s cells, fresh from a shard, to these, which the worker has not started
    /// on: its positions shift by what is here.
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
    /// The name the wheel's entry keeps.
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

/// Consecutive timeouts of a queued batch whose cells are consecutive cells of one chunk: the
/// timeout at position `first + k` of the batch has cell `start + k` of `chunk`. Positions
/// count from the batch's first timeout, including those the worker has taken out since.
struct CellSpan {
    chunk: ChunkRef,
    first: usize,
    start: u8,
}

impl CellSpan {
    /// Makes the last of `spans` the span of cell `tag` of `chunk`, the cell of the timeout at
    /// position `at`: a new span starts on a chunk's first cell, in a batch with no span yet,
    /// and after a span of another chunk.
    #[inline(always)]
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

    /// The cell tag of the timeout at batch position `at` (within this span).
    #[inline]
    fn tag(&self, at: usize) -> u8 {
        debug_assert!(at >= self.first && at - self.first < CHUNK);
        // Below CHUNK (at most 32), so the cast keeps every bit.
        self.start + (at - self.first) as u8
    }
}

/// Walks a batch's positions from `at` on, one step per timeout: each step gives the index of
/// its span and its cell tag.
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
