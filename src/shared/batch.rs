//! Timeouts on their way to the worker. Owns [`PendingBatch`] (a shard's queued jobs, deadlines
//! and cells: producers fill it under the shard's lock, the worker takes it whole and drains
//! it) and [`ProducerShard`] (a shard's credit and chunk cursors). Touches `sync` (the queue's
//! `Batch`) and, of the cells, only `spans.rs`'s `ShardCursors` and `BatchCells`.

use super::cells::{
    BatchCells, CellId, CellRef, CellSlot, ChunkCursor, ChunkTable, FrontCells, ShardCursors,
};
use super::small_task::Word;
use super::{sealed, BoxedTask, Enqueue, Shared, Stored};
use crate::sync::{Arc, Batch};

/// Queued timeouts: tasks and deadlines in parallel vectors, and their cells ([`BatchCells`]).
/// Not a vector of structs: a pushed struct is built on the stack, then copied with wide loads
/// over narrower stores, which the CPU cannot forward; separate fields push from registers.
pub(crate) struct PendingBatch<J: crate::shared::sealed::TaskStorage = BoxedTask> {
    /// Per timeout, what `sealed::TaskStorage::enqueue` returned (its words, if any, in `words`).
    tasks: Vec<J::Queued>,
    /// The queued tasks' words, in push order (none on a typed timer).
    words: Vec<Word>,
    /// Where the next task taken from the front finds its words.
    words_read: usize,
    deadlines: Vec<u64>,
    cells: BatchCells,
    /// Whether `tasks` and `deadlines` are back to front (see [`PendingBatch::drain_front`]).
    reversed: bool,
}

impl<J: Stored> Default for PendingBatch<J> {
    fn default() -> Self {
        PendingBatch {
            tasks: Vec::new(),
            words: Vec::new(),
            words_read: 0,
            deadlines: Vec::new(),
            cells: BatchCells::default(),
            reversed: false,
        }
    }
}

impl<J: Stored> PendingBatch<J> {
    pub(crate) fn with_capacity(n: usize) -> Self {
        let mut batch = PendingBatch::default();
        batch.tasks.reserve_exact(n);
        batch.deadlines.reserve_exact(n);
        batch
    }

    /// Queues a timeout with a fresh state from `cursor`, returned when `HANDLE`.
    #[inline]
    pub(super) fn push<const HANDLE: bool>(
        &mut self,
        cursor: &mut ChunkCursor,
        shared: &Arc<Shared<J>>,
        shard: u8,
        task: impl Enqueue<J>,
        deadline: u64,
    ) -> Option<CellRef> {
        let queued = task.enqueue(&mut self.words);
        let state = self.cells.push::<J, HANDLE>(cursor, shared, shard);
        self.tasks.push(queued);
        self.deadlines.push(deadline);
        state
    }

    pub(crate) fn len(&self) -> usize {
        self.tasks.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.tasks.capacity()
    }

    /// See [`BatchCells::register`].
    pub(crate) fn register(&mut self, table: &mut ChunkTable) {
        self.cells.register(table);
    }

    /// Removes the first `n` timeouts, in order. A batch the transfer's cap cuts is turned back
    /// to front once, and each drain then takes from the end: no drain shifts what it leaves
    /// (`m` timeouts drained `n` at a time would otherwise move `m^2 / 2n`).
    pub(crate) fn drain_front(&mut self, n: usize) -> DrainFront<'_, J> {
        let len = self.tasks.len();
        // The cells' cursor moves by `n` too: a longer drain would leave them out of step.
        assert!(n <= len, "a drain of {n} from a batch of {len}");
        if n < len && !self.reversed {
            self.turn_round();
        }
        let from = if self.reversed { len - n } else { 0 };
        if self.reversed {
            // The oldest `n`, back in order.
            self.tasks[from..].reverse();
            self.deadlines[from..].reverse();
        }
        DrainFront {
            tasks: self.tasks.drain(from..),
            deadlines: self.deadlines.drain(from..),
            cells: self.cells.take_front(n),
            words: &self.words,
            words_read: &mut self.words_read,
            current: None,
        }
    }

    fn turn_round(&mut self) {
        self.tasks.reverse();
        self.deadlines.reverse();
        self.reversed = !self.reversed;
    }

    /// Once every timeout is out: hands the cells' chunks to `table`, keeping the capacity.
    pub(crate) fn clear(&mut self, table: &mut ChunkTable) {
        debug_assert!(self.tasks.is_empty());
        self.reversed = false;
        self.words.clear();
        self.words_read = 0;
        self.cells.clear(table);
    }

    /// The states, in order; each task dropped once (a `Drop` panic caught and counted).
    pub(crate) fn into_states(mut self) -> Vec<CellRef> {
        let states = self.cells.states();
        if self.reversed {
            self.turn_round();
        }
        let (words, at) = (&self.words, &mut self.words_read);
        for (queued, state) in self.tasks.drain(..).zip(&states) {
            state
                .chunk_timer()
                .counters()
                .drop_task(J::dequeue(queued, words, at));
        }
        states
    }
}

/// A batch's front as the worker takes it ([`PendingBatch::drain_front`]). Task words are read
/// in push order (`small_task`, invariant 3), so every task passed moves the cursor past its
/// words: taken ([`DrainFront::take_entry`], [`DrainFront::take_task`]) or dropped with the
/// next. Dropped early (only a crate bug unwinds here: user code runs under
/// `catch_user_panic`), the drain drops the rest: no task is read from another's words.
pub(crate) struct DrainFront<'a, J: Stored> {
    tasks: std::vec::Drain<'a, J::Queued>,
    deadlines: std::vec::Drain<'a, u64>,
    cells: FrontCells<'a>,
    words: &'a [Word],
    words_read: &'a mut usize,
    /// The task of the timeout [`DrainFront::next_timeout`] gave last, until taken.
    current: Option<J::Queued>,
}

impl<'a, J: Stored> DrainFront<'a, J> {
    /// The next timeout's cell and deadline (its task is taken separately).
    #[inline]
    pub(crate) fn next_timeout(&mut self) -> Option<(CellSlot<'a>, u64)> {
        self.drop_current();
        self.current = Some(self.tasks.next()?);
        let cell = self.cells.next().expect("a cell per queued timeout");
        let deadline = self
            .deadlines
            .next()
            .expect("a deadline per queued timeout");
        Some((cell, deadline))
    }

    /// See `sealed::TaskStorage::dequeue_entry`.
    #[inline]
    pub(crate) fn take_entry(&mut self, key: u32, cell: CellId, store: &mut J::Store) -> J::Entry {
        let queued = self.current.take().expect("a timeout's task, taken once");
        J::dequeue_entry(queued, self.words, self.words_read, key, cell, store)
    }

    /// See `sealed::TaskStorage::lane`.
    #[inline]
    pub(crate) fn lane(&self) -> usize {
        J::lane(
            self.current
                .as_ref()
                .expect("a timeout's task, not yet taken"),
        )
    }

    #[inline]
    pub(crate) fn take_task(&mut self) -> J {
        let queued = self.current.take().expect("a timeout's task, taken once");
        J::dequeue(queued, self.words, self.words_read)
    }

    #[inline]
    fn drop_current(&mut self) {
        if let Some(queued) = self.current.take() {
            super::drop_caught(J::dequeue(queued, self.words, self.words_read));
        }
    }
}

impl<J: Stored> Drop for DrainFront<'_, J> {
    fn drop(&mut self) {
        self.drop_current();
        for queued in self.tasks.by_ref() {
            super::drop_caught(J::dequeue(queued, self.words, self.words_read));
        }
    }
}

impl<J: sealed::TaskStorage> Drop for PendingBatch<J> {
    /// Drops the tasks left, each once; a `Drop` panic is caught, so the others drop too.
    fn drop(&mut self) {
        if self.reversed {
            // In order again: the words are read in push order.
            self.tasks.reverse();
        }
        let (words, at) = (&self.words, &mut self.words_read);
        for queued in self.tasks.drain(..) {
            if !super::drop_caught(J::dequeue(queued, words, at)) {
                super::log_caught(
                    log::Level::Warn,
                    format_args!("a task's Drop panicked as its timer's queue was dropped"),
                );
            }
        }
    }
}

impl<J: Stored> Batch for PendingBatch<J> {
    #[inline]
    fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }
    fn append(&mut self, other: &mut Self) {
        // Only fresh batches are appended (`Queue::take_all`), to one not started on.
        debug_assert!(other.words_read == 0 && !self.reversed && !other.reversed);
        self.tasks.append(&mut other.tasks);
        self.words.append(&mut other.words);
        self.deadlines.append(&mut other.deadlines);
        self.cells.append(&mut other.cells);
    }
}

/// What a shard of the `timeouts` queue keeps for its producers, under its lock.
#[derive(Default)]
pub(crate) struct ProducerShard {
    /// Pending-count credit (see `Shared::refill_credit`).
    pub(super) credit: usize,
    pub(crate) cursors: ShardCursors,
}

#[cfg(test)]
mod tests {
    use crate::{HashedWheelTimer, Timeout};
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// Records its id and a check on drop: a task read from another's words records a pair
    /// that does not match. A panicking probe panics in `Drop`, after the record.
    struct Probe {
        id: u64,
        check: u64,
        panics: bool,
        dropped: Arc<Mutex<Vec<(u64, u64)>>>,
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            self.dropped.lock().unwrap().push((self.id, self.check));
            if self.panics {
                panic!("probe {} panics in its Drop (on purpose)", self.id);
            }
        }
    }

    /// `n` probes due `delay(id)`, capturing 24, 32 and 40 bytes in turn (4 words, 4, a box: 2)
    /// so an out-of-step word cursor reads wrong words; those `panics` picks panic in `Drop`.
    fn schedule_probes(
        timer: &HashedWheelTimer,
        n: u64,
        delay: impl Fn(u64) -> Duration,
        panics: impl Fn(u64) -> bool,
    ) -> Arc<Mutex<Vec<(u64, u64)>>> {
        let dropped: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
        for id in 0..n {
            let probe = Probe {
                id,
                check: !id,
                panics: panics(id),
                dropped: Arc::clone(&dropped),
            };
            let (pad, pads) = (id, [id; 2]);
            let _ = match id % 3 {
                0 => timer.new_timeout(move |_: &Timeout| drop(probe), delay(id)),
                1 => timer.new_timeout(move |_: &Timeout| drop((probe, pad)), delay(id)),
                _ => timer.new_timeout(move |_: &Timeout| drop((probe, pads)), delay(id)),
            }
            .unwrap();
        }
        dropped
    }

    /// A drain unwound after its first task: its tasks are read out and dropped, and the rest
    /// is read from its own words, each task once.
    #[test]
    fn a_drain_unwound_early_keeps_the_word_cursor_in_step() {
        let (timer, _driver) = HashedWheelTimer::builder().build_manual().unwrap();
        const N: u64 = 12;
        let dropped = schedule_probes(&timer, N, |_| Duration::from_secs(1), |_| false);
        let mut batch = timer.shared.timeouts.take_all();
        let mut table = crate::shared::cells::ChunkTable::new();
        batch.register(&mut table);
        assert_eq!(batch.len(), N as usize);
        let unwound = catch_unwind(AssertUnwindSafe(|| {
            let mut drain = batch.drain_front(7);
            assert!(drain.next_timeout().is_some());
            drop(drain.take_task());
            panic!("the worker unwinds mid-drain (on purpose)");
        }));
        assert!(unwound.is_err());
        assert_eq!(batch.len(), (N - 7) as usize);
        // Every other task is taken; the drain drops those left.
        let mut drain = batch.drain_front(5);
        let mut rest = Vec::new();
        let mut at = 0;
        while drain.next_timeout().is_some() {
            if at % 2 == 0 {
                rest.push(drain.take_task());
            }
            at += 1;
        }
        assert_eq!(at, 5);
        drop(drain);
        let by_the_drain = dropped.lock().unwrap().len();
        assert_eq!(by_the_drain, 7 + 2, "left tasks dropped by the drain");
        drop(rest);
        let dropped = dropped.lock().unwrap();
        let mut ids: Vec<u64> = dropped.iter().map(|&(id, _)| id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..N).collect::<Vec<_>>(), "each task dropped once");
        assert!(dropped.iter().all(|&(id, check)| check == !id));
        drop(dropped);
        batch.clear(&mut table);
    }

    /// A batch the cap cuts drains oldest first; what is left (dropped with the batch, or
    /// through `into_states`) is read from its own words. Every fourth task panics in `Drop`:
    /// none is lost or dropped twice, and the order holds.
    #[test]
    fn a_batch_cut_by_the_cap_comes_out_oldest_first() {
        for at_end in ["dropped", "states"] {
            let (timer, _driver) = HashedWheelTimer::builder().build_manual().unwrap();
            const N: u64 = 11;
            let panics = |id: u64| id % 4 == 1;
            let dropped = schedule_probes(&timer, N, |id| Duration::from_secs(1 + id), panics);
            let mut batch = timer.shared.timeouts.take_all();
            let mut table = crate::shared::cells::ChunkTable::new();
            batch.register(&mut table);
            let mut deadlines = Vec::new();
            for n in [3, 4, 1] {
                let mut drain = batch.drain_front(n);
                while let Some((_, deadline)) = drain.next_timeout() {
                    deadlines.push(deadline);
                    // A panicking one is left for the drain to drop.
                    if !panics(deadlines.len() as u64 - 1) {
                        drop(drain.take_task());
                    }
                }
            }
            assert_eq!(deadlines.len(), 8);
            assert!(deadlines.windows(2).all(|w| w[0] < w[1]), "{deadlines:?}");
            assert_eq!(batch.len(), 3);
            match at_end {
                "dropped" => drop(batch),
                _ => assert_eq!(batch.into_states().len(), 3),
            }
            let dropped = dropped.lock().unwrap();
            let ids: Vec<u64> = dropped.iter().map(|&(id, _)| id).collect();
            assert_eq!(ids, (0..N).collect::<Vec<_>>(), "{at_end}: in order, once");
            assert!(dropped.iter().all(|&(id, check)| check == !id), "{at_end}");
        }
    }
}
