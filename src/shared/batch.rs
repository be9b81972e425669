//! Timeouts on their way from producers to the worker: the batches a queue shard holds, and
//! what each shard keeps for its producers.
//!
//! Owns [`PendingBatch`] (a shard's queued timeouts: jobs, deadlines, their cells) and
//! [`ProducerShard`] (a shard's pending-count credit and its chunk cursors). Touches `sync`
//! (the queue's `Batch` trait), and of the cells only their two interfaces in `spans.rs`
//! (`ShardCursors`, `BatchCells`); producers fill a batch under their shard's lock, the worker
//! takes it whole and drains it.

use super::cells::{
    BatchCells, CellId, CellRef, CellSlot, ChunkCursor, ChunkTable, FrontCells, ShardCursors,
};
use super::small_task::Word;
use super::{sealed, BoxedTask, Enqueue, Shared, Stored};
use crate::sync::{Arc, Batch};

/// Timeouts on their way from producers to the worker: task and deadline of each, in two
/// parallel vectors, and the cells their states are in ([`BatchCells`]).
///
/// Not one vector of structs: a struct pushed into a `Vec` is built on the stack first (its
/// drop on unwinding needs an address) and then copied with wide loads over narrower stores,
/// which the CPU cannot forward. Each field of its own is pushed straight from registers.
pub(crate) struct PendingBatch<J: crate::shared::sealed::TaskStorage = BoxedTask> {
    /// Per timeout, what the stored task queues (`sealed::TaskStorage::enqueue`): the task
    /// itself on a typed timer, its table on the default one, whose words follow in `words`.
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

    /// Queues a timeout: its task, its deadline, and a fresh state from `cursor` (returned,
    /// for the handle, when `HANDLE`).
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

    /// Gives the chunks of the batch's cells their ids in `table` (see
    /// [`BatchCells::register`]).
    pub(crate) fn register(&mut self, table: &mut ChunkTable) {
        self.cells.register(table);
    }

    /// Removes the first `n` timeouts, in order: cell, deadline and task of each.
    ///
    /// A batch the transfer's cap cuts (`n` short of its length) is turned back to front once,
    /// and each drain then takes its timeouts from the end: no drain shifts what it leaves (a
    /// batch of `m` timeouts drained `n` at a time would otherwise move `m^2 / 2n` of them).
    pub(crate) fn drain_front(&mut self, n: usize) -> DrainFront<'_, J> {
        let len = self.tasks.len();
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

    /// Turns the tasks and deadlines back to front, or back in order.
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

    /// The states, in order; the tasks are dropped, each once (a panic of its `Drop` caught
    /// and counted by its timer).
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

/// The front of a batch as the worker takes it, one timeout at a time
/// ([`PendingBatch::drain_front`]).
///
/// The tasks' words are read by a cursor, in push order (`small_task`, invariant 3), so each
/// task the drain takes out must move the cursor past its words, taken or not: a timeout's
/// task is taken from the batch straight into the wheel's entry
/// ([`DrainFront::take_entry`]), or as a task to drop ([`DrainFront::take_task`]), and one not
/// taken is dropped with the next timeout. Dropped before its end (only a bug of the crate's
/// own unwinds through the transfer: user code there runs under `catch_user_panic`), the drain
/// reads out the rest and drops them: no later task is ever read from another task's words.
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
    /// The next timeout's cell and deadline; its task is then taken with
    /// [`DrainFront::take_entry`] or [`DrainFront::take_task`].
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

    /// The current timeout's task, moved from the batch's words straight into the wheel's
    /// entry for cell `cell`, to be kept under wheel key `key` (see
    /// `sealed::TaskStorage::dequeue_entry`).
    #[inline]
    pub(crate) fn take_entry(&mut self, key: u32, cell: CellId, store: &mut J::Store) -> J::Entry {
        let queued = self.current.take().expect("a timeout's task, taken once");
        J::dequeue_entry(queued, self.words, self.words_read, key, cell, store)
    }

    /// The lane of the wheel's keys the current timeout's entry takes
    /// (`sealed::TaskStorage::lane`).
    #[inline]
    pub(crate) fn lane(&self) -> usize {
        J::lane(
            self.current
                .as_ref()
                .expect("a timeout's task, not yet taken"),
        )
    }

    /// The current timeout's task.
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
    /// A batch dropped with timeouts in it (a queue let go of whole) drops their tasks, each
    /// once, from its words; a panic of a `Drop` is caught, so that the others are dropped too.
    fn drop(&mut self) {
        if self.reversed {
            // In order again: the words are read in push order.
            self.tasks.reverse();
        }
        let (words, at) = (&self.words, &mut self.words_read);
        for queued in self.tasks.drain(..) {
            if !super::drop_caught(J::dequeue(queued, words, at)) {
                log::warn!("a task's Drop panicked as its timer's queue was dropped");
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
        // Only batches fresh from a shard are appended (`Queue::take_all`), and to one the
        // worker has not started on; positions carry over shifted by what is already here.
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
    /// Where the shard's timeouts get their states.
    pub(crate) cursors: ShardCursors,
}

#[cfg(test)]
mod tests {
    use crate::{HashedWheelTimer, Timeout};
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// Records the id of the task that drops it, and the id it was given as a check: a task
    /// read from another task's words records a pair that does not match. A probe made to
    /// panic does so in its `Drop`, after the record.
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

    /// Schedules `n` probes due `delay(id)` from now, their tasks capturing 24, 32 and 40 bytes
    /// in turn (4 words, 4 words, and a box: 2), so that a word cursor out of step reads a
    /// table with the wrong words; what they drop is recorded in the list returned. Those
    /// `panics` picks panic in their `Drop`.
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

    /// The worker's drain unwound after the first task: the tasks the drain took are read out
    /// and dropped, and the rest of the batch is read from its own words, each task once.
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
        // Of the rest, every other task is taken; the others are left to the drain, which
        // drops each as it moves on (or as it goes).
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
        assert_eq!(
            dropped.lock().unwrap().len(),
            7 + 2,
            "left tasks dropped by the drain"
        );
        drop(rest);
        let dropped = dropped.lock().unwrap();
        let mut ids: Vec<u64> = dropped.iter().map(|&(id, _)| id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..N).collect::<Vec<_>>(), "each task dropped once");
        assert!(dropped.iter().all(|&(id, check)| check == !id));
        drop(dropped);
        batch.clear(&mut table);
    }

    /// A batch the cap cuts is drained over several ticks: each drain gives the oldest
    /// timeouts left, in push order, and what no drain took (dropped with the batch, or
    /// returned by `stop()`) is read from its own words, each task once. Every fourth task
    /// panics in its `Drop`, left for the drain or the batch to drop: nothing is lost or
    /// dropped twice, and the order holds.
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
                    // A panicking one is left: the drain drops it, its panic caught.
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
            assert_eq!(
                ids,
                (0..N).collect::<Vec<_>>(),
                "{at_end}: in order, once each"
            );
            assert!(dropped.iter().all(|&(id, check)| check == !id), "{at_end}");
        }
    }
}
