//! The worker: one Netty tick as a pure step (`Worker::advance(now)`), and the thread loop that
//! sleeps between the ticks that have work ([`thread_main()`]).
//!
//! Owns the `Worker` (the wheel, the batches taken from the queue, the chunk table) and every
//! move a timeout makes once it leaves the producers: transfer into a bucket, unlink after a
//! cancel, expiry and the task's run. Touches the `shared` module (queues, counters, cells, the
//! plan), the wheel and `sync`; never the owner (`timer`), which starts, drives and stops it.
//! The `Worker` lives in `Shared::worker`: one thread at a time runs a turn of it under that
//! lock (the worker thread, a runtime's `Drive`, or a `ManualDriver`'s caller), `stop()` takes
//! it out after the join, and it never blocks on a producer.
//!
//! # Sleeping (never wake for nothing)
//! Netty wakes on every tick. This worker publishes the next tick with work (the earliest fire
//! tick, or the current tick if a queue is non-empty) in `Shared::planned`, and sleeps until
//! that tick's end, or parks with no timeout when nothing is pending. Producers make up for
//! what it cannot see:
//!
//! ```text
//! worker                                   producer (new_timeout / cancel)
//! planned.store(plan)                      lock shard; push x; unlock
//! if queues non-empty: plan = now-ish      p = planned.load()
//!   (each shard looked at under its lock)  if p > my tick: CAS p -> my tick, unpark
//! park until plan
//! ```
//!
//! The shard locks keep both sides from missing each other: a worker looking at the shard after
//! the push sees it and does not sleep past the current tick; before it, the producer's lock
//! acquires the worker's unlock, so its load sees the plan (or a later one) and it unparks the
//! worker (an unpark before the park is kept by the park token). Only the producer whose
//! compare-and-swap lowers the plan unparks: a burst costs one wake-up. (A lock-free queue
//! would need a `SeqCst` fence on each side; the loom models check that the locks suffice.)
//!
//! While producers are active (the last ticks took from the queues), the worker also wakes at
//! the end of the current tick, queues empty or not: parked, it would be unparked by the next
//! `new_timeout` (a system call for the producer), having given back buffers the producers then
//! regrow. A burst ends with one wake-up that finds nothing; an idle timer never wakes. On
//! Linux the thread asks for a timer slack of a thousandth of a tick (`thread.rs`). Observably
//! this is ticking every tick: skipped ticks have empty buckets and queues, and rounds are
//! absolute fire ticks (see `wheel`), so nothing needs replaying.

mod executor;
mod tally;
mod thread;
mod trim;

pub(crate) use thread::{thread_main, turn};

use crate::shared::batch::PendingBatch;
use crate::shared::cells::{CellRef, ChunkTable, Expiry, Settling};
use crate::shared::{
    catch_user_panic, drop_caught, log_caught, BoxedTask, Executor, Shared, Stored,
};
use crate::sync::{Arc, Batch};
use crate::wheel::{Wheel, NO_INDEX};
use executor::ExecutorJob;
use std::collections::VecDeque;
use tally::{RunTiming, Tally};
use trim::{trim_ticks, TrimSchedule, TrimStep, TurnEnd};

/// Timeouts moved from the `timeouts` queue into buckets per tick, at most (Netty's cap).
pub(crate) const TRANSFER_CAP: u64 = 100_000;

pub(crate) struct Worker<J: Stored = BoxedTask> {
    /// Per timeout, its task as a wheel entry, with its state's `CellId`.
    wheel: Wheel<J::Entry>,
    /// What the wheel's tasks keep outside it (a boxed timer's task words).
    tasks: J::Store,
    tick: u64,
    /// Batches taken from the queue, not yet in buckets (past the cap): oldest first, none empty.
    inbox: VecDeque<PendingBatch<J>>,
    /// Emptied batches, kept to trade with the shards for full ones: a steady state grows none.
    empty_batches: Vec<PendingBatch<J>>,
    cancellations: Vec<CellRef>,
    chunks: ChunkTable,
    tally: Tally,
    /// Owned by the worker, so that it is dropped with it when the timer stops.
    executor: Option<Executor>,
    /// The last ticks run took something from the queues: producers are active.
    busy: bool,
    /// Timeouts ended here (expired or cancelled), a wrapping total for `Shared::set_ended`.
    ended: usize,
    /// When a turn gives a drained burst's memory back (`trim.rs`).
    trims: TrimSchedule,
}

impl<J: Stored> Worker<J> {
    pub(crate) fn new(tick_nanos: u64, wheel_len: usize, executor: Option<Executor>) -> Worker<J> {
        Worker {
            wheel: Wheel::new(tick_nanos, wheel_len),
            tasks: J::Store::default(),
            tick: 0,
            inbox: VecDeque::new(),
            empty_batches: Vec::new(),
            cancellations: Vec::new(),
            chunks: ChunkTable::new(),
            tally: Tally::default(),
            executor,
            busy: false,
            ended: 0,
            trims: TrimSchedule::default(),
        }
    }

    pub(crate) fn tick(&self) -> u64 {
        self.tick
    }

    pub(crate) fn set_tick(&mut self, tick: u64) {
        self.tick = tick;
    }

    /// Runs every tick that has ended by `now`, each in Netty's order: cancellations, transfer
    /// (up to the cap), expiry; ticks with nothing to do are skipped. Whether a tick was due.
    pub(crate) fn advance(&mut self, shared: &Arc<Shared<J>>, now: u64) -> bool {
        let due = now / shared.tick_nanos; // ticks before `due` have ended
        if due <= self.tick {
            return false;
        }
        let last = due - 1;
        self.busy = false;
        // The first tick stands for every tick covered: Netty, catching up, would have
        // transferred up to the cap on each of them.
        let mut cap = TRANSFER_CAP.saturating_mul(due - self.tick);
        let mut tick = self.tick;
        loop {
            shared.set_tick(tick);
            self.process_cancelled(shared);
            // The transfer: up to `cap` queued timeouts, oldest first, into the buckets (chunks
            // and spans: `shared::cells`, "Chunks, spans and spares: the protocol").
            self.take_queued(shared);
            self.move_into_buckets(shared, tick, cap);
            cap = TRANSFER_CAP;
            self.expire(shared, tick, now);
            if shared.is_shutdown() {
                // As Netty checks its state after every tick: a stop (or the owner dropped by
                // a task) ends the turn after this tick.
                self.end_turn(shared, tick + 1);
                return true;
            }
            match self.next_tick_of_turn(shared, tick, last) {
                Some(next) if next <= last => tick = next,
                _ => break,
            }
        }
        self.end_turn(shared, due);
        true
    }

    /// The tick the turn goes on with after `tick` (`last`: the turn's last tick), if any.
    #[inline]
    fn next_tick_of_turn(&self, shared: &Shared<J>, tick: u64, last: u64) -> Option<u64> {
        // What was queued during this tick (a task's timeout or cancel, leftovers past the cap)
        // is taken on the next, as in Netty: it may be due before the wheel's next entry.
        let queued = tick < last
            && (!self.inbox.is_empty()
                || !shared.timeouts.is_empty()
                || !shared.cancellations.is_empty());
        if queued {
            Some(tick + 1)
        } else {
            self.wheel.next_fire_tick_by(tick + 1, last)
        }
    }

    #[inline]
    fn end_turn(&mut self, shared: &Shared<J>, next: u64) {
        self.tick = next;
        shared.set_tick(next);
        self.tally.publish(&shared.counters);
    }

    /// The tick at whose end the worker plans to wake (`u64::MAX`: only when unparked; past
    /// the current tick: idle): the next tick with work, or the current tick while producers
    /// are active even if the queues look empty (see the module docs, "Sleeping";
    /// `docs/performance.md`, "A look at the end of a busy tick").
    pub(crate) fn planned_tick(&self, shared: &Shared<J>) -> u64 {
        let next = self.next_work_tick(shared);
        if self.busy && next.is_none_or(|next| next > self.tick) {
            self.tick
        } else {
            next.unwrap_or(u64::MAX)
        }
    }

    fn next_work_tick(&self, shared: &Shared<J>) -> Option<u64> {
        // `self.cancellations` too: an idle worker takes late cancels with its buffers.
        let queued = !self.inbox.is_empty()
            || !self.cancellations.is_empty()
            || !shared.timeouts.is_empty()
            || !shared.cancellations.is_empty();
        if queued {
            return Some(self.tick);
        }
        self.wheel.next_fire_tick(self.tick)
    }

    /// Unlinks timeouts cancelled in the wheel (those cancelled while queued end in transfer).
    fn process_cancelled(&mut self, shared: &Shared<J>) {
        // Unbounded, as in Netty: each is one unlink.
        shared.cancellations.take_into(&mut self.cancellations);
        self.busy |= !self.cancellations.is_empty();
        let mut unlinked = 0;
        for state in self.cancellations.drain(..) {
            let key = state.wheel_key();
            // NO_INDEX: a bucket's walk dropped it, and ended it then.
            if key != NO_INDEX {
                state.clear_wheel_key();
                let (entry, _) = self.wheel.remove(key);
                self.chunks.settle_cancelled(J::cell(&entry), &state);
                shared
                    .counters
                    .drop_task(J::from_entry(entry, &mut self.tasks));
                unlinked += 1;
            }
        }
        if unlinked > 0 {
            self.end(shared, unlinked);
            self.tally.cancelled += unlinked as u64;
        }
        recycle(&mut self.cancellations);
    }

    /// Takes each shard's batch into the inbox, handing the shard an emptied batch and its
    /// spare chunks. Pushes after this wait for the next tick (Netty polls until the queue is
    /// empty: here the worker would touch the cells producers are creating and cancelling).
    fn take_queued(&mut self, shared: &Shared<J>) {
        let empty_batches = &mut self.empty_batches;
        let inbox = &mut self.inbox;
        let mut took = false;
        let chunks = &mut self.chunks;
        shared.timeouts.take_each(|items, producer, i| {
            // With no empty batch kept, room for as many as came (up to KEEP): no regrowth.
            let empty = empty_batches
                .pop()
                .unwrap_or_else(|| PendingBatch::with_capacity(items.len().min(KEEP)));
            inbox.push_back(std::mem::replace(items, empty));
            took = true;
            // A spare chunk holds a handle on the timer: none may stay in a shard after `stop()`
            // clears the cursors. `stop()` does so after joining or taking the worker, and should
            // that change, this check under the same lock sees SHUTDOWN once it has.
            if !shared.is_shutdown() {
                chunks.lend_spares(i, &mut producer.cursors);
            }
        });
        self.busy |= took;
        self.register_new_batches();
    }

    /// Moves up to `cap` inbox timeouts into their buckets; those cancelled while queued end here.
    fn move_into_buckets(&mut self, shared: &Shared<J>, tick: u64, cap: u64) {
        let mut left = usize::try_from(cap).unwrap_or(usize::MAX);
        let mut cancelled = 0;
        while left > 0 {
            let Some(batch) = self.inbox.front_mut() else {
                break;
            };
            let n = left.min(batch.len());
            left -= n;
            let mut drain = batch.drain_front(n);
            while let Some((cell, deadline)) = drain.next_timeout() {
                let lane = drain.lane();
                let key = self.wheel.next_key_in(lane);
                if !cell.try_enter_wheel(key) {
                    // Cancelled while queued.
                    cancelled += 1;
                    self.chunks.settle(cell.id());
                    shared.counters.drop_task(drain.take_task());
                    continue;
                }
                let entry = drain.take_entry(key, cell.id(), &mut self.tasks);
                self.wheel.insert_at(key, entry, deadline, tick);
            }
            drop(drain);
            if batch.is_empty() {
                self.retire_front_batch();
            }
        }
        if cancelled > 0 {
            self.end(shared, cancelled);
            self.tally.cancelled += cancelled as u64;
        }
    }

    /// Lets the empty front batch's chunks go; keeps the batch unless enough are kept or it is big.
    fn retire_front_batch(&mut self) {
        let mut empty = self.inbox.pop_front().expect("the front batch");
        empty.clear(&mut self.chunks);
        if empty.capacity() <= KEEP && self.empty_batches.len() < EMPTY_BATCHES {
            self.empty_batches.push(empty);
        }
    }

    #[inline]
    fn end(&mut self, shared: &Shared<J>, n: usize) {
        self.ended = self.ended.wrapping_add(n);
        shared.set_ended(self.ended);
    }

    /// Expires the bucket of `tick`, settling each due timeout as the walk unlinks it.
    fn expire(&mut self, shared: &Shared<J>, tick: u64, now: u64) {
        let cancelled = self.tally.cancelled;
        let mut expiring = Expiring {
            shared,
            now,
            executor: self.executor.as_ref(),
            cells: self.chunks.settling(),
            tasks: &mut self.tasks,
            tally: &mut self.tally,
            ended: self.ended,
            timing: RunTiming::new(self.executor.is_none()),
        };
        self.wheel.expire(tick, now, |entry, key, deadline| {
            expiring.due(entry, key, deadline)
        });
        let (ended, mut timing) = expiring.finish();
        // Every timeout this call ended, it expired, or found cancelled (counted as such).
        let dropped = self.tally.cancelled - cancelled;
        self.tally.expired += ended.wrapping_sub(self.ended) as u64 - dropped;
        self.ended = ended;
        timing.finish(shared, &mut self.tally);
    }

    /// Gives the chunks of the batches just taken their ids, in push order, so that a chunk an
    /// earlier batch of the shard registered is found again.
    fn register_new_batches(&mut self) {
        for batch in self.inbox.iter_mut() {
            batch.register(&mut self.chunks);
        }
    }

    /// When nothing is queued, gives back the kept queue buffers, the spare chunks (the
    /// worker's and the shards') and the chunk table's capacity: an idle timer keeps no
    /// burst's. The wheel and the task words are trimmed apart ([`Worker::trim_if_due`]).
    pub(crate) fn release_idle_buffers(&mut self, shared: &Shared<J>) {
        if !self.inbox.is_empty() {
            return;
        }
        self.empty_batches = Vec::new();
        self.chunks.release_idle();
        shared.timeouts.for_each_data(|p| p.cursors.clear_spares());
        // Pushed since we looked: kept, in order, for the next transfer.
        let late = shared.timeouts.take_all();
        if !late.is_empty() {
            self.inbox.push_back(late);
            self.register_new_batches();
        }
        let mut cancellations = shared.cancellations.take_all();
        cancellations.append(&mut self.cancellations);
        self.cancellations = cancellations;
    }

    /// At the end of a turn that plans to wake at the end of tick `plan`: gives a drained
    /// burst's memory back while timeouts still wait, when [`TrimSchedule`] says so (`trim.rs`).
    /// `Some(tick)`: look again at the end of that tick.
    pub(crate) fn trim_if_due(&mut self, shared: &Shared<J>, plan: u64) -> Option<u64> {
        let turn = TurnEnd {
            tick: self.tick,
            plan,
            ended: self.ended,
            every: trim_ticks(shared.tick_nanos),
        };
        let wheel = &self.wheel;
        let has_time = || {
            let planned_end = plan.saturating_add(1).saturating_mul(shared.tick_nanos);
            // The clock is read only for a wheel that may give pages back.
            let cost = wheel.trim_cost();
            cost.is_some_and(|cost| cost <= planned_end.saturating_sub(shared.clock.now()))
        };
        match self.trims.step(&turn, has_time) {
            TrimStep::Skip => None,
            TrimStep::LookAgain => Some(self.tick + 1),
            TrimStep::Trim => {
                let given_back = self.wheel.trim() + J::trim(&mut self.tasks);
                self.trims.trimmed(&turn, given_back);
                None
            }
        }
    }

    /// Empties the wheel and the inbox (for `stop`): the states of what is in them. Their
    /// tasks are dropped, a panicking `Drop` caught and counted.
    pub(crate) fn drain(&mut self) -> Vec<CellRef> {
        let chunks = &self.chunks;
        let tasks = &mut self.tasks;
        let mut out: Vec<CellRef> = self
            .wheel
            .drain()
            .into_iter()
            .map(|entry| {
                let state = chunks.state(J::cell(&entry));
                state
                    .chunk_timer()
                    .counters()
                    .drop_task(J::from_entry(entry, tasks));
                state
            })
            .collect();
        for batch in self.inbox.drain(..) {
            out.extend(batch.into_states());
        }
        out
    }
}

impl<J: Stored> Drop for Worker<J> {
    /// Timeouts still in a dropped worker are a shutdown nobody drains (the owner dropped inside
    /// a task): they never run, and end cancelled, as those `stop()` returns do.
    fn drop(&mut self) {
        // A loom failure unwinding through here: calling loom again would abort the binary.
        #[cfg(loom)]
        if std::thread::panicking() {
            return;
        }
        for state in self.drain() {
            state.end_unreturned();
        }
        // The executor is user code: a `Drop` that panics must not unwind a `stop()` with
        // timeouts yet to end (`drain_queues`).
        if !drop_caught(self.executor.take()) {
            log_caught(
                log::Level::Warn,
                format_args!("the executor's Drop panicked; the timer goes on stopping"),
            );
        }
    }
}

/// Items a drained buffer may keep capacity for.
const KEEP: usize = 128 * 1024;

/// Emptied batches kept for the shards (a steady state needs one per producer thread;
/// `docs/performance.md`, "Emptied batches traded back to the shards").
const EMPTY_BATCHES: usize = 8;

/// Keeps a drained buffer's allocation unless a burst made it very large, so a steady load does
/// not regrow it every tick (`release_idle_buffers` gives it back when idle).
fn recycle<T>(buf: &mut Vec<T>) {
    if buf.capacity() > KEEP {
        *buf = Vec::new();
    }
}

/// The settling of a bucket's due entries as the wheel's walk hands them out (see
/// [`Worker::expire`]): runs each task still in the wheel, drops the others.
struct Expiring<'a, J: Stored> {
    shared: &'a Shared<J>,
    now: u64,
    executor: Option<&'a Executor>,
    cells: Settling<'a>,
    tasks: &'a mut J::Store,
    tally: &'a mut Tally,
    ended: usize,
    timing: RunTiming,
}

impl<J: Stored> Expiring<'_, J> {
    #[inline]
    fn due(&mut self, entry: J::Entry, key: u32, deadline: u64) {
        let state = match self.cells.due(J::cell(&entry), key) {
            Ok(state) => state,
            Err(dropped) => return self.drop_unrun(entry, dropped),
        };
        // Ended before the task runs: a task may schedule again even at the limit.
        self.ended = self.ended.wrapping_add(1);
        self.shared.set_ended(self.ended);
        // The walk hands out only deadlines `<= now`.
        self.tally
            .fired(self.now - deadline, self.shared.tick_nanos);
        self.timing.before_run(self.shared, self.tally);
        let (state, ran) = match self.executor {
            // Run where its words are kept: no copy.
            None => J::run_entry(entry, self.tasks, state),
            // A future's wake-up runs here: handing it to an executor would cost more.
            Some(_) if state.has_waker() => J::run_entry(entry, self.tasks, state),
            Some(executor) => run_on_executor::<J>(executor, entry, self.tasks, state),
        };
        if !ran {
            run_panicked(self.shared, self.executor.is_some(), &state);
        }
        self.cells.give_back(state);
    }

    /// Drops the task of an entry cancelled since the walk reached it (by a task of this bucket,
    /// or after this tick's cancellations), or of a stale entry. A cancelled one ends here: its
    /// entry on the cancellation queue, which `stop()` may drop unprocessed, finds NO_INDEX.
    #[cold]
    fn drop_unrun(&mut self, entry: J::Entry, dropped: Expiry) {
        if dropped == Expiry::Cancelled {
            self.ended = self.ended.wrapping_add(1);
            self.shared.set_ended(self.ended);
            self.tally.cancelled += 1;
        }
        self.shared
            .counters
            .drop_task(J::from_entry(entry, self.tasks));
    }

    /// Ends the settling (dropping `cells`: see [`Settling`]): the new total of ended timeouts,
    /// and the run timing to finish.
    fn finish(self) -> (usize, RunTiming) {
        (self.ended, self.timing)
    }
}

/// A task run inline, the executor it was handed to, or the waker of a future's timeout
/// panicked: counted and logged, naming which (a future's wake-up never goes to the executor).
#[cold]
fn run_panicked<J: Stored>(shared: &Shared<J>, has_executor: bool, state: &CellRef) {
    shared
        .counters
        .user_code_panicked(match (state.has_waker(), has_executor) {
            (true, _) => "a future's waker",
            (false, true) => "the executor",
            (false, false) => "a TimerTask",
        });
}

/// Hands an expired timeout's task to the executor, catching any panic: the state it was lent,
/// and false if the executor panicked on this thread.
fn run_on_executor<J: Stored>(
    executor: &Executor,
    entry: J::Entry,
    tasks: &mut J::Store,
    state: CellRef,
) -> (CellRef, bool) {
    // The executor's job outlives this call: it takes a reference of its own.
    let job = ExecutorJob(Some((J::from_entry(entry, tasks), state.clone())));
    let job: Box<dyn FnOnce() + Send> = Box::new(move || job.run());
    // A panicking executor drops the job it was given, run or not: the task is then dropped
    // once, by the job, and the timeout stays expired.
    let returned = catch_user_panic(|| executor(job));
    (state, returned)
}

#[cfg(test)]
mod tests {
    use super::Worker;
    use crate::shared::cells::CHUNK;
    use crate::{HashedWheelTimer, ManualDriver, Timeout};
    use std::future::Future;
    use std::time::Duration;

    fn noop(_: &Timeout) {}

    #[test]
    fn lateness_classes_are_powers_of_two_ticks() {
        const TICK: u64 = 1_000;
        // Class k >= 1 holds [2^(k-1), 2^k) ticks late, the last class everything beyond.
        let class_by_definition = |late: u64| {
            (1..crate::shared::LATENESS_CLASSES)
                .filter(|&k| late >= TICK << (k - 1))
                .max()
                .unwrap_or(0)
        };
        let beyond = [127 * TICK, 128 * TICK, 129 * TICK, u64::MAX / 2, u64::MAX];
        for late in (0..70 * TICK).step_by(7).chain(beyond) {
            let mut tally = super::Tally::default();
            tally.expired += 1;
            tally.fired(late, TICK);
            let classes = tally.classes();
            let class = classes.iter().position(|&n| n == 1);
            assert_eq!(class, Some(class_by_definition(late)), "{late} ns late");
            assert_eq!(classes.iter().sum::<u64>(), 1);
        }
    }

    /// `f` on the worker of a manual `timer`, under the worker's lock.
    pub(super) fn with_worker<R>(timer: &HashedWheelTimer, f: impl FnOnce(&mut Worker) -> R) -> R {
        let mut held = crate::sync::lock(&timer.shared.worker);
        let worker = held
            .as_mut()
            .and_then(|w| w.downcast_mut::<Worker>())
            .expect("a manual timer keeps its worker here");
        f(worker)
    }

    const TICK: Duration = Duration::from_millis(10);

    fn manual() -> (HashedWheelTimer, ManualDriver) {
        let builder = HashedWheelTimer::builder().tick_duration(TICK);
        builder.build_manual().unwrap()
    }

    /// A timeout of `timer` that waits a second.
    fn waiting(timer: &HashedWheelTimer) -> Timeout {
        timer.new_timeout(noop, Duration::from_secs(1)).unwrap()
    }

    /// Spare chunks the shards' cursors hold.
    fn handed(timer: &HashedWheelTimer) -> usize {
        let shards = &timer.shared.timeouts;
        shards.fold_data(true, 0, |n, p| n + p.cursors.spare_count())
    }

    /// Spare chunks: (the worker's, the shards' cursors').
    fn spares(timer: &HashedWheelTimer) -> (usize, usize) {
        let (tasks, futures) = with_worker(timer, |w| w.chunks.spare_counts());
        (tasks + futures, handed(timer))
    }

    /// A manual timer with `chunks` chunks' worth of timeouts cancelled and settled into spares,
    /// then one more timeout (returned) and a tick: the worker hands the spares to its shard.
    fn spares_handed_over(chunks: usize) -> (HashedWheelTimer, ManualDriver, Timeout) {
        let (timer, driver) = manual();
        cancelled_pairs(&timer, chunks * CHUNK);
        driver.advance(TICK);
        assert_eq!(spares(&timer), (chunks, 0));
        let first = waiting(&timer);
        driver.advance(TICK);
        assert_eq!(spares(&timer), (0, chunks));
        (timer, driver, first)
    }

    fn cancelled_pairs(timer: &HashedWheelTimer, n: usize) {
        for _ in 0..n {
            assert!(waiting(timer).cancel());
        }
    }

    /// A chunk settled more times than it has cells (a bookkeeping bug): debug builds panic;
    /// release builds keep the chunk for good rather than let it be reused under a live timeout.
    #[test]
    fn a_chunk_settled_too_often_panics_in_debug_and_is_kept_in_release() {
        let (timer, driver) = manual();
        let t = waiting(&timer);
        driver.advance(TICK);
        with_worker(&timer, |worker| {
            assert_eq!(worker.chunks.held(), 1);
            let over = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                worker.chunks.settle_out(0, CHUNK as u32 + 1);
            }));
            assert_eq!(over.is_err(), cfg!(debug_assertions));
            if over.is_ok() {
                assert_eq!(worker.chunks.held(), 1, "kept, not let go");
            }
        });
        // The table is broken on purpose: nothing may look at it again.
        std::mem::forget((t, driver, timer));
    }

    /// Chunks all settled with no handle left come back to their shard as spares, cells fresh
    /// (a steady request-timeout load allocates nothing); an idle timer lets them go.
    #[test]
    fn chunks_let_go_by_the_worker_are_handed_out_again_fresh() {
        let (timer, driver, first) = spares_handed_over(2);
        // The rest of `first`'s chunk, then one cell of a spare.
        let more: Vec<Timeout> = (0..CHUNK).map(|_| waiting(&timer)).collect();
        assert_eq!(spares(&timer), (0, 1));
        assert!(more.iter().all(|t| !t.is_cancelled() && !t.is_expired()));
        assert_eq!(timer.pending_timeouts(), CHUNK + 1);
        driver.advance(Duration::from_secs(2));
        assert!(first.is_expired() && more.iter().all(Timeout::is_expired));
        assert_eq!(timer.pending_timeouts(), 0);
        driver.advance(TICK); // nothing taken: idle, the spares go
        assert_eq!(spares(&timer), (0, 0));
    }

    /// Tasks' and futures' timeouts interleaved in one batch (spans alternating between a chunk
    /// of each kind): once all end, the table holds no chunk, and each is a spare of its kind.
    #[test]
    fn interleaved_tasks_and_futures_settle_every_chunk() {
        let (timer, driver) = manual();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut sleeps = Vec::new();
        // Whole chunks of each kind (a cursor's current chunk stays held until used up).
        for i in 0..4 * CHUNK {
            timer.new_timeout(noop, TICK).unwrap();
            if i % 2 == 0 {
                let mut sleep = timer.sleep(TICK);
                assert!(std::pin::Pin::new(&mut sleep).poll(&mut cx).is_pending());
                sleeps.push(sleep);
            }
        }
        driver.advance(TICK * 3);
        assert_eq!(timer.pending_timeouts(), 0);
        // (chunks held, (tasks' spares, futures' spares))
        let table = || with_worker(&timer, |w| (w.chunks.held(), w.chunks.spare_counts()));
        assert_eq!(table().0, 0, "chunks still held by the table");
        drop(sleeps);
        // Futures dropped before the worker is done with their chunks: futures' spares.
        for _ in 0..2 * CHUNK {
            drop(timer.sleep(TICK));
        }
        driver.advance(TICK);
        assert_eq!(table(), (0, (0, 2)));
    }

    /// A cancel that lands as an idle worker gives its buffers back is taken along with them:
    /// the worker's plan still covers it (the current tick), so that a worker thread does not
    /// sleep until the next fire tick (an hour here) with the task held and counted pending.
    #[test]
    fn a_cancel_taken_with_the_idle_buffers_is_planned_for_at_once() {
        let (timer, driver) = manual();
        let _later = timer.new_timeout(noop, Duration::from_secs(3600)).unwrap();
        let cancelled = timer.new_timeout(noop, Duration::from_secs(3600)).unwrap();
        driver.advance(TICK); // both in the wheel
        driver.advance(TICK); // and the worker idle
        let shared = &timer.shared;
        with_worker(&timer, |worker| {
            assert!(worker.planned_tick(shared) > worker.tick(), "idle");
            // The race: the cancel comes after the worker has found the queues empty.
            assert!(cancelled.cancel());
            worker.release_idle_buffers(shared);
            assert_eq!(worker.planned_tick(shared), worker.tick());
        });
        driver.advance(TICK);
        assert_eq!(timer.pending_timeouts(), 1);
    }

    /// A spare chunk holds a handle on its timer: `stop()` lets go of every spare, the
    /// shards' and the worker's, or the timer would keep itself alive.
    #[test]
    fn stop_lets_go_of_the_spare_chunks() {
        let (timer, driver, first) = spares_handed_over(3);
        // The rest of `first`'s chunk, a whole spare, one cell of another: one spare stays in
        // the cursor, and the whole one goes back to the worker.
        cancelled_pairs(&timer, 2 * CHUNK);
        driver.advance(TICK);
        assert_eq!(spares(&timer), (1, 1));
        assert_eq!(timer.stop().unwrap(), vec![first]);
        assert_eq!(handed(&timer), 0);
        // The owner and the driver: no chunk holds the timer any more.
        assert_eq!(std::sync::Arc::strong_count(&timer.shared), 2);
    }
}
