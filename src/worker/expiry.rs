//! A bucket's expiry as the worker settles it: each due entry, as the wheel's walk unlinks it,
//! is expired and its task run (inline or on the executor), or dropped if it was cancelled.
//!
//! Owns [`Worker::expire`], the settling of the due entries ([`Settle`]), the run of a task
//! ([`run_task`], [`ExecutorJob`]) and the report of a stale chunk id. Touches the `shared`
//! module (cells, counters, the pending count) and the worker's chunk table.

use super::chunks::ChunkTable;
use super::tally::{RunTiming, Tally};
use super::Worker;
use crate::shared::cells::{CellRef, ChunkRef, Expiry};
use crate::shared::{catch_user_panic, sealed, Executor, Shared, Stored};

impl<J: Stored> Worker<J> {
    /// Expires the bucket of `tick` in one walk: each due timeout is settled as the walk
    /// unlinks it.
    pub(super) fn expire(&mut self, shared: &Shared<J>, tick: u64, now: u64) {
        let mut settle = Settle {
            shared,
            now,
            executor: self.executor.as_ref(),
            chunks: &mut self.chunks,
            tasks: &mut self.tasks,
            tally: &mut self.tally,
            ended: self.ended,
            out: None,
            timing: RunTiming::new(self.executor.is_none()),
        };
        self.wheel.expire(tick, now, |entry, key, tag, deadline| {
            settle.due(entry, key, tag, deadline)
        });
        let (ended, mut timing) = settle.finish();
        // Every timeout this call ended, it expired.
        self.tally.expired += ended.wrapping_sub(self.ended) as u64;
        self.ended = ended;
        timing.finish(shared, &mut self.tally);
    }
}

/// The settling of a bucket's due entries, as the wheel's walk hands them out (see
/// [`Worker::expire`]): runs each task whose timeout is still in the wheel, drops the others.
struct Settle<'a, J: Stored> {
    shared: &'a Shared<J>,
    now: u64,
    executor: Option<&'a Executor>,
    chunks: &'a mut ChunkTable<J>,
    tasks: &'a mut J::Store,
    tally: &'a mut Tally,
    ended: usize,
    /// The chunk of the entries just settled, out of the table while the entries that follow
    /// are of the same chunk (a bucket's timeouts mostly come a chunk at a time): its id, and
    /// how many of its cells were settled meanwhile.
    out: Option<(u32, ChunkRef<J>, u32)>,
    timing: RunTiming,
}

impl<J: Stored> Settle<'_, J> {
    /// Settles one due entry, just unlinked.
    #[inline]
    fn due(&mut self, entry: J::Entry, key: u32, tag: u8, deadline: u64) {
        let id = J::chunk(&entry);
        let (chunk, settled) = self.take_chunk(id);
        let expiry = chunk.cell(tag).try_expire(key);
        if expiry == Expiry::NotItsCell {
            stale_chunk_id(id);
            self.shared.drop_task(J::from_entry(entry, self.tasks));
            self.out = Some((id, chunk, settled));
            return;
        }
        let chunk = if expiry == Expiry::Expired {
            self.run_expired(entry, chunk, tag, deadline)
        } else {
            // Cancelled since the walk reached it (by a task of this bucket, or after this
            // tick's cancellations were processed): its entry on the cancellation queue ends
            // it (finding NO_INDEX); the task is dropped here.
            chunk.cell(tag).clear_wheel_key();
            self.shared.drop_task(J::from_entry(entry, self.tasks));
            chunk
        };
        self.out = Some((id, chunk, settled + 1));
    }

    /// Chunk `id`, out of the table, and how many of its cells were settled since it was taken
    /// out: the chunk already out if it is that one, else taken from the table (the one out,
    /// if any, put back first).
    #[inline(always)]
    fn take_chunk(&mut self, id: u32) -> (ChunkRef<J>, u32) {
        match self.out.take() {
            Some((out_id, chunk, settled)) if out_id == id => (chunk, settled),
            Some((out_id, chunk, settled)) => {
                self.chunks.put_back_settled(out_id, chunk, settled);
                (self.chunks.take(id), 0)
            }
            None => (self.chunks.take(id), 0),
        }
    }

    /// Counts the timeout of `entry`, just expired (cell `tag` of `chunk`), as ended and fired,
    /// and runs its task; gives the chunk back.
    #[inline(always)]
    fn run_expired(
        &mut self,
        entry: J::Entry,
        chunk: ChunkRef<J>,
        tag: u8,
        deadline: u64,
    ) -> ChunkRef<J> {
        // Ended before the task runs, so that a task can schedule again even at the
        // pending limit.
        self.ended = self.ended.wrapping_add(1);
        self.shared.set_ended(self.ended);
        self.tally
            .fired(self.now.saturating_sub(deadline), self.shared.tick_nanos);
        // The task's `Timeout` borrows the table's reference to the chunk, which the
        // table takes back after the run: no reference count moves.
        let state = chunk.into_state(tag);
        // A future's wake-up runs here: handing it to an executor would cost more.
        let executor = self.executor.filter(|_| !state.has_waker());
        self.timing.before_run(self.shared, self.tally);
        let (state, ran) = run_task(executor, entry, self.tasks, state);
        if !ran {
            self.shared
                .counters
                .user_code_panicked(if executor.is_some() {
                    "the executor"
                } else {
                    "a TimerTask"
                });
        }
        state.into_chunk()
    }

    /// Ends the bucket's settling: the chunk still out goes back to the table, after the runs,
    /// so that a chunk whose timeouts all ran comes back as a spare (unless an executor or a
    /// task still holds a reference to it). The worker's new running total of ended
    /// timeouts, and the run timing to finish.
    fn finish(self) -> (usize, RunTiming) {
        if let Some((id, chunk, settled)) = self.out {
            self.chunks.put_back_settled(id, chunk, settled);
        }
        (self.ended, self.timing)
    }
}

/// A wheel entry's chunk id names a chunk that does not hold the entry's cell: a bug of the
/// worker's bookkeeping. Debug builds stop there; release builds log it once and leave both
/// chunks as they are (the entry is dropped, its cell never settled: its chunk is never reused),
/// so that no other timeout's cell is touched.
#[cold]
#[inline(never)]
pub(super) fn stale_chunk_id(id: u32) {
    debug_assert!(false, "wheel entry with a stale chunk id {id}");
    static LOGGED: std::sync::Once = std::sync::Once::new();
    LOGGED.call_once(|| log::error!("hashed-timer-wheel: a wheel entry named a stale chunk id ({id}); the entry was dropped unrun (a bug: please report it)"));
}

/// Runs an expired timeout's task, inline or on the executor; a panic is caught, never
/// propagated. Returns the state it was lent, and false if the task (inline) or the executor
/// panicked on this thread.
fn run_task<J: Stored>(
    executor: Option<&Executor>,
    entry: J::Entry,
    tasks: &mut J::Store,
    state: CellRef<J>,
) -> (CellRef<J>, bool) {
    match executor {
        // Run from where its words are kept: no copy of the task's words.
        None => J::run_entry(entry, tasks, state),
        Some(executor) => {
            // The executor's job outlives this call: it takes a reference of its own.
            let job = ExecutorJob {
                task: Some(J::from_entry(entry, tasks)),
                state: Some(state.clone()),
            };
            let job: Box<dyn FnOnce() + Send> = Box::new(move || job.run());
            // A panicking executor drops the job it was given, run or not: the task is then
            // dropped once, by the job, and the timeout stays expired.
            let returned = catch_user_panic(|| executor(job));
            (state, returned)
        }
    }
}

/// An expired task handed to the executor with its timeout's state. Run, it counts a panic of
/// the task; dropped unrun (an executor that refuses it, or panics, or shuts down), it drops
/// the task catching a panic of its `Drop`, which may happen while the executor unwinds.
struct ExecutorJob<J: Stored> {
    task: Option<J>,
    state: Option<CellRef<J>>,
}

impl<J: Stored> ExecutorJob<J> {
    fn run(mut self) {
        let (Some(task), Some(state)) = (self.task.take(), self.state.take()) else {
            return;
        };
        let (state, ran) = sealed::TaskStorage::run_stored(task, state);
        if !ran {
            state
                .timer()
                .shared
                .counters
                .user_code_panicked("a TimerTask (on the executor)");
        }
    }
}

impl<J: Stored> Drop for ExecutorJob<J> {
    fn drop(&mut self) {
        if let (Some(task), Some(state)) = (self.task.take(), self.state.take()) {
            state.timer().shared.drop_task(task);
        }
    }
}
