//! One shard of the producers' queues, with its blocks and spares; a thread keeps to one shard.

use super::slots::{Block, Kind, BLOCK};
use super::wheel::SlotId;
use super::{Shared, Stored, NEVER};
#[cfg(not(loom))]
use crate::sync::Ordering;
use crate::sync::{lock, Arc};

/// The producers' shards: a thread keeps to one.
pub(crate) const SHARDS: usize = if cfg!(loom) { 2 } else { 8 };

/// Spare blocks and spare task boxes a shard keeps through a trim. While busy a shard keeps
/// every spare the worker gives back (freeing a burst's boxes on the worker made glibc
/// consolidate them mid-expiry, milliseconds late); the trim frees the rest, a slice at a time.
const IDLE_SPARES: usize = 32;
/// Spare task boxes the worker gives back in one vector at most.
pub(crate) const SPARE_CHUNK: usize = 1024;
/// Spares of each sort one trim frees at most per shard (about 0.1 ms of `free`).
const TRIM_SLICE: usize = 4096;
/// Empty segments a shard keeps.
pub(crate) const SPARE_SEGMENTS: usize = 2;
/// Bytes a segment of new timeouts holds at most.
pub(crate) const SEGMENT_BYTES: usize = 32 << 10;

/// Entries a segment holds.
pub(crate) fn segment_len<J: Stored>() -> usize {
    (SEGMENT_BYTES / std::mem::size_of::<Entry<J>>()).max(1)
}

/// A timeout on its way to the worker.
pub(crate) struct Entry<J: Stored> {
    pub(crate) id: SlotId,
    /// Nanoseconds since the timer's origin.
    pub(crate) deadline: u64,
    pub(crate) task: J,
}

/// One shard of the `timeouts` and cancellation queues, and its producers' block.
pub(crate) struct Shard<J: Stored> {
    /// New timeouts, in reused segments of `segment_len` entries (under glibc's mmap threshold).
    pub(crate) timeouts: Vec<Vec<Entry<J>>>,
    /// Empty segments the worker gave back.
    pub(crate) free_segments: Vec<Vec<Entry<J>>>,
    pub(crate) cancels: Vec<SlotId>,
    /// The tick at whose end the worker is to look at the queues, and the least `pace` of what
    /// they hold (`NEVER`: they are empty).
    pub(crate) look: u64,
    pub(crate) pace: u64,
    /// The blocks this shard takes slots from (a task's, a future's), each with its next index.
    pub(crate) cursors: [Option<(Arc<Block<J>>, usize)>; 2],
    /// Blocks first taken from since the worker took the queues: it keeps each until it has
    /// ended all 64 slots.
    pub(crate) new_blocks: Vec<Arc<Block<J>>>,
    /// Blocks the worker gave back, all their slots ended and no handle left, by kind.
    pub(crate) spares: [Vec<Arc<Block<J>>>; 2],
    /// What the worker kept of tasks that ended, for the next ones (`Stored::run_keeping`):
    /// the spares producers take from, then the rest in the chunks the worker gave back.
    pub(crate) task_spares: Vec<J>,
    pub(crate) task_chunks: Vec<Vec<J>>,
    /// Timeouts this shard accepted; pending is their sum less `ended`.
    pub(crate) accepted: u64,
    pub(crate) index: usize,
}

impl<J: Stored> Shard<J> {
    pub(crate) fn new(index: usize) -> Shard<J> {
        Shard {
            timeouts: Vec::new(),
            free_segments: Vec::new(),
            cancels: Vec::new(),
            look: NEVER,
            pace: NEVER,
            cursors: [None, None],
            new_blocks: Vec::new(),
            spares: [Vec::new(), Vec::new()],
            task_spares: Vec::new(),
            task_chunks: Vec::new(),
            accepted: 0,
            index,
        }
    }

    /// The spare tasks producers take from: the next chunk once the current one is used up.
    pub(crate) fn spare_tasks(&mut self) -> &mut Vec<J> {
        if self.task_spares.is_empty() {
            if let Some(chunk) = self.task_chunks.pop() {
                self.task_spares = chunk;
            }
        }
        &mut self.task_spares
    }

    /// A timeout or cancel queued in tick `tick`, due in tick `due`, that may wait `pace` ticks
    /// asks for a look by the end of the earlier. The tick a worker planned past is to be woken
    /// for: `due`, or by the tick after the look if that is sooner than the queues asked.
    pub(crate) fn ask(&mut self, pace: u64, tick: u64, due: u64) -> u64 {
        let look = tick.saturating_add(pace).min(due);
        self.pace = self.pace.min(pace);
        let sooner = look < self.look;
        self.look = self.look.min(look);
        due.min(if sooner { tick + pace + 1 } else { NEVER })
    }

    // Always inlined: called, it reads back the entry its caller has just stored (a stalled
    // store forward): `schedule` 24.5 ns against 20.9, `schedule_cancel` 26.6 against 24.0.
    #[inline(always)]
    pub(crate) fn push_entry(&mut self, entry: Entry<J>) {
        let full = segment_len::<J>();
        if let Some(segment) = self.timeouts.last_mut() {
            if segment.len() < full {
                if segment.len() == segment.capacity() {
                    // A new segment starts small and doubles up to `full`.
                    segment.reserve_exact(segment.len().max(8).min(full - segment.len()));
                }
                segment.push(entry);
                return;
            }
        }
        let mut segment = self.free_segments.pop().unwrap_or_default();
        segment.push(entry);
        self.timeouts.push(segment);
    }

    /// The next slot of `kind`: its block, its index, and whether the slot is its first.
    pub(crate) fn take_slot(
        &mut self,
        shared: &Arc<Shared<J>>,
        kind: Kind,
    ) -> Option<(&Arc<Block<J>>, usize, bool)> {
        let cursor = &mut self.cursors[kind as usize];
        if cursor.as_ref().is_none_or(|(_, next)| *next == BLOCK) {
            let spare = self.spares[kind as usize].pop();
            let block = spare.or_else(|| Block::new(shared, self.index, kind))?;
            *cursor = Some((block, 0));
        }
        let (block, next) = cursor.as_mut()?;
        let index = *next;
        *next += 1;
        Some((block, index, index == 0))
    }
}

/// This thread's shard (under loom, one: a process-wide counter differs between iterations).
#[cfg(loom)]
pub(crate) fn shard_index() -> usize {
    0
}

/// This thread's shard.
#[cfg(not(loom))]
pub(crate) fn shard_index() -> usize {
    use crate::sync::process::AtomicUsize;
    use std::cell::Cell;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SHARD.with(|s| {
        if s.get() == usize::MAX {
            // Relaxed: a round-robin spread, nothing ordered by it.
            s.set(NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS);
        }
        s.get()
    })
}

/// The worker's side of the shards beyond taking their queues (`Worker::take_queues`).
impl<J: Stored> Shared<J> {
    /// Frees a slice of the shards' spares beyond their bounds (the worker's `trim`), outside
    /// their locks (the spare boxes are empty: no user code runs); whether some are left.
    pub(crate) fn trim_spares(&self) -> bool {
        let mut more = false;
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            shard.timeouts.shrink_to_fit();
            shard.cancels.shrink_to_fit();
            shard.new_blocks.shrink_to_fit();
            let freed = (
                slice_beyond(&mut shard.task_chunks, 0, TRIM_SLICE, Vec::len),
                slice_beyond(&mut shard.task_spares, IDLE_SPARES, TRIM_SLICE, |_| 1),
                slice_beyond(&mut shard.spares[0], IDLE_SPARES, TRIM_SLICE, |_| 1),
                slice_beyond(&mut shard.spares[1], IDLE_SPARES, TRIM_SLICE, |_| 1),
                slice_beyond(&mut shard.free_segments, SPARE_SEGMENTS, TRIM_SLICE, |_| 1),
            );
            more |= !shard.task_chunks.is_empty()
                || shard.task_spares.len() > IDLE_SPARES
                || shard.spares.iter().any(|s| s.len() > IDLE_SPARES);
            drop(shard);
            drop(freed);
        }
        more
    }

    /// The earliest look the shards' queues ask for (`NEVER`: they are empty).
    pub(crate) fn queued_look(&self) -> u64 {
        self.shards.iter().fold(NEVER, |l, s| l.min(lock(s).look))
    }
}

/// Takes off the end of `pile` what lies beyond its first `keep`, until what it takes holds
/// `most` by `size` (spare boxes by the box: a slow drain's chunks hold one or two each); the pile
/// gives its buffer back once it is down to `keep`.
fn slice_beyond<T>(pile: &mut Vec<T>, keep: usize, most: usize, size: fn(&T) -> usize) -> Vec<T> {
    let mut held = 0;
    let from = pile.iter().rposition(|item| {
        held += size(item);
        held >= most
    });
    let slice = pile.split_off(from.unwrap_or(0).max(keep).min(pile.len()));
    if pile.len() <= keep {
        pile.shrink_to_fit();
    }
    slice
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BoxedTask;

    #[test]
    fn a_shard_asks_for_the_sooner_look_and_wakes_only_for_it() {
        let mut shard = Shard::<BoxedTask>::new(0);
        // A future queued in tick 10, due in tick 100, may wait 16 ticks: woken past tick 26.
        assert_eq!(shard.ask(16, 10, 100), 27);
        assert_eq!((shard.look, shard.pace), (26, 16));
        // Another, due later: the look it needs is asked already; it wakes only past its fire.
        assert_eq!(shard.ask(16, 11, 200), 200);
        assert_eq!(shard.look, 26);
        // One due in tick 12, sooner than the look: the look moves to its fire tick.
        assert_eq!(shard.ask(16, 11, 12), 12);
        assert_eq!(shard.look, 12);
        // A task (pace 0) in tick 11: the look at its tick's end, and the shard's pace 0.
        assert_eq!(shard.ask(0, 11, 500), 12);
        assert_eq!((shard.look, shard.pace), (11, 0));
        // A cancel (due never) that asks no sooner look wakes nobody.
        assert_eq!(shard.ask(16, 11, NEVER), NEVER);
    }
}
