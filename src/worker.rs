//! The worker: one Netty tick as a pure step (`Worker::advance(now)`), and the thread loop that
//! sleeps between the ticks that have work.
//!
//! # Ground rules
//! The `Worker` (and its wheel) is owned by exactly one thread at a time: the worker thread, or
//! a `ManualDriver`'s caller under the `idle_worker` lock, or `stop()` after the join. It reads
//! the queues and `Shared`'s atomics; it never blocks on a producer.
//!
//! # Sleeping (never wake for nothing)
//! Netty wakes on every tick. This worker computes the next tick that has work (the earliest
//! fire tick in the wheel, or the current tick if a queue is non-empty), publishes it in
//! `Shared::planned`, and sleeps until that tick's end, or parks with no timeout when nothing is
//! pending. Producers make up for what the worker cannot see:
//!
//! ```text
//! worker                                   producer (new_timeout / cancel)
//! planned.store(plan)                      lock shard; push x; unlock
//! if queues non-empty: plan = now-ish      p = planned.load()
//!   (each shard looked at under its lock)  if p > my tick: CAS p -> my tick, unpark
//! park until plan
//! ```
//!
//! The shard locks make it impossible for both sides to miss each other: if the worker's look
//! at the producer's shard comes after the push, it sees the push and does not sleep past the
//! current tick; if it comes before, the producer's lock acquires the worker's unlock, so the
//! producer's load sees the plan (or a later one) and unparks the worker (an unpark before the
//! park is remembered by the thread's park token). Only the producer whose compare-and-swap
//! lowers the plan unparks, so a burst costs one wake-up. (A lock-free queue would need a
//! `SeqCst` fence on each side instead; the loom models check that the locks suffice.)
//!
//! While producers are active (the ticks just run took something from the queues), the worker
//! also wakes at the end of the current tick even if the queues look empty at that instant: a
//! worker that parked there would be unparked by the very next `new_timeout` (a system call on
//! the producer's side), and would have given back the buffers the producers then regrow. So a
//! burst of scheduling ends with one wake-up that finds nothing; an idle timer never wakes.
//!
//! Observably this is the same as ticking every tick: the ticks skipped have empty buckets and
//! empty queues, and rounds are kept as absolute fire ticks (see `wheel`), so nothing about
//! them needs replaying.

#[cfg(loom)]
use crate::sync::fence;
use crate::sync::{thread, Arc, Batch, Ordering, SHARDS};
use crate::timeout::{ChunkRef, SpareChunk, TimeoutState, NO_SLOT, SPARE_CHUNKS};
use crate::timer::{Executor, PendingBatch, Shared, TRANSFER_CAP};
use crate::wheel::Wheel;
use crate::{Timeout, TimerTask};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// `Shared::planned` while the worker is awake: producers never unpark it then. (`u64::MAX`
/// means parked with no deadline; real ticks stay far below both.)
pub(crate) const AWAKE: u64 = u64::MAX - 1;

/// What the wheel holds per timeout: the task and the id of its state's chunk in the
/// [`ChunkTable`]; the wheel keeps the index of the state's cell in the node's tag, so that a
/// node is 40 bytes.
pub(crate) struct Entry {
    task: Box<dyn TimerTask>,
    chunk: u32,
}

/// The chunks of the timeouts the worker holds, one reference each.
///
/// A queued batch holds one reference per chunk, not one per timeout (see
/// `ChunkCursor::next_state`), and so does this table: the wheel's entries name their chunk by
/// its id here. A chunk stays until each of its cells has been settled once: taken from the
/// queue cancelled, or expired, or unlinked after a cancel. Cells a stopped timer never handed
/// out keep their chunk until the worker is dropped.
///
/// Settling allocates nothing (the free ids are linked through `meta`): the expiry loop frees
/// a task per timeout, and an allocation of a growing free list there made glibc consolidate
/// those frees at each doubling, ~1.3 ms at once with a million timeouts (the `expire`
/// workload's p99 went from 1.1 to 2.3 ms).
struct ChunkTable {
    chunks: Vec<Option<ChunkRef>>,
    /// Per id: the cells not settled yet while the id holds a chunk; the next free id (or
    /// `NONE`) while it is free. Separate from `chunks` to keep the two at 12 bytes per chunk,
    /// not 16.
    meta: Vec<u32>,
    /// The first free id, or `NONE`.
    free: u32,
    /// Ids holding a chunk.
    held: usize,
    /// Per queue shard, the id of the chunk of that shard registered last: the only one a batch
    /// can refer to again (a shard hands its chunks out one after the other, and the worker
    /// takes each shard's batches in order), so the only one to look for.
    latest: [u32; SHARDS],
    /// Per queue shard, chunks let go of with nothing else holding them, for the shard's
    /// cursor to use again (see `SpareChunk`); handed over when the worker next takes the
    /// shard's batch.
    spares: [Vec<SpareChunk>; SHARDS],
}

const NONE: u32 = u32::MAX;

impl ChunkTable {
    fn new() -> ChunkTable {
        ChunkTable {
            chunks: Vec::new(),
            meta: Vec::new(),
            free: NONE,
            held: 0,
            latest: [NONE; SHARDS],
            spares: std::array::from_fn(|_| Vec::new()),
        }
    }

    /// A chunk let go of by the worker: kept as a spare if that was its last reference.
    #[inline]
    fn release(&mut self, chunk: ChunkRef) {
        let spares = &mut self.spares[chunk.shard()];
        if spares.len() < SPARE_CHUNKS {
            if let Some(spare) = chunk.into_spare() {
                spares.push(spare);
            }
        }
    }

    /// The id of `chunk`, registering it if it is new.
    fn id_of(&mut self, chunk: &ChunkRef) -> u32 {
        let shard = chunk.shard();
        let latest = self.latest[shard];
        let known = self
            .chunks
            .get(latest as usize)
            .and_then(Option::as_ref)
            .is_some_and(|held| held.same(chunk));
        if known {
            return latest;
        }
        let id = if self.free == NONE {
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
        self.latest[shard] = id;
        id
    }

    #[inline]
    fn get(&self, id: u32) -> &ChunkRef {
        self.chunks[id as usize]
            .as_ref()
            .expect("a chunk with unsettled cells")
    }

    /// For an idle worker: lets the spares go, and the table's room too if it holds no chunk
    /// (a busy worker keeps it: it would regrow it in the next tick).
    fn release_idle(&mut self) {
        if self.held == 0 {
            *self = ChunkTable::new();
        } else {
            self.spares = std::array::from_fn(|_| Vec::new());
        }
    }

    /// One of the chunk's cells is settled: the last one lets the chunk go.
    #[inline]
    fn settle(&mut self, id: u32) {
        let unsettled = &mut self.meta[id as usize];
        *unsettled -= 1;
        if *unsettled == 0 {
            if let Some(chunk) = self.chunks[id as usize].take() {
                self.release(chunk);
            }
            self.meta[id as usize] = self.free;
            self.free = id;
            self.held -= 1;
        }
    }
}

const CHUNK_CELLS: u32 = crate::timeout::CHUNK as u32;

/// The worker's state: the wheel and the next tick to process.
pub(crate) struct Worker {
    wheel: Wheel<Entry>,
    tick: u64,
    /// Timeouts taken from the `timeouts` queue and not yet moved into buckets (beyond the
    /// per-tick cap): one batch per shard taken, oldest first, none empty.
    inbox: VecDeque<PendingBatch>,
    /// Emptied batches, kept with their room to hand to the queue's shards in exchange for
    /// full ones: in a steady state no buffer grows, and nothing is copied.
    spare: Vec<PendingBatch>,
    /// Reused buffer for the cancellation queue.
    cancelled: Vec<TimeoutState>,
    chunks: ChunkTable,
    /// Owned by the worker, so that it is dropped with it when the timer stops.
    executor: Option<Executor>,
    /// The last ticks run took something from the queues: producers are active.
    busy: bool,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("tick", &self.tick)
            .field("entries", &self.wheel.len())
            .finish()
    }
}

impl Worker {
    pub(crate) fn new(tick_nanos: u64, wheel_len: usize, executor: Option<Executor>) -> Worker {
        Worker {
            wheel: Wheel::new(tick_nanos, wheel_len),
            tick: 0,
            inbox: VecDeque::new(),
            spare: Vec::new(),
            cancelled: Vec::new(),
            chunks: ChunkTable::new(),
            executor,
            busy: false,
        }
    }

    pub(crate) fn tick(&self) -> u64 {
        self.tick
    }

    pub(crate) fn set_tick(&mut self, tick: u64) {
        self.tick = tick;
    }

    /// Runs every tick whose end (`(tick + 1) * tick_nanos`) is at or before `now`, in Netty's
    /// order for each: process cancellations, transfer queued timeouts into buckets (at most
    /// 100 000 per tick), expire the tick's bucket. Ticks with nothing to do are skipped in O(1)
    /// each (via the wheel's occupancy bitmap). Returns whether any tick was due.
    pub(crate) fn advance(&mut self, shared: &Arc<Shared>, now: u64) -> bool {
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
            // Relaxed: diagnostics and a hint for `cancel`'s wake-up check (a stale value only
            // makes it wake the worker more eagerly).
            shared.tick.store(tick, Ordering::Relaxed);
            self.process_cancelled(shared);
            self.transfer(shared, tick, cap);
            cap = TRANSFER_CAP;
            self.expire(shared, tick, now);
            if shared.is_shutdown() {
                // Like Netty's loop, which checks its state after every tick: a stop (or the
                // owner dropped by a task) ends the run after the current tick.
                self.tick = tick + 1;
                shared.tick.store(self.tick, Ordering::Relaxed);
                return true;
            }
            match self.wheel.next_fire_tick(tick + 1) {
                Some(next) if next <= last => tick = next,
                _ => break,
            }
        }
        self.tick = due;
        shared.tick.store(due, Ordering::Relaxed);
        true
    }

    /// The next tick with work: the current one if a queue holds something, else the wheel's
    /// earliest fire tick; `None` when nothing is pending.
    pub(crate) fn next_work_tick(&self, shared: &Shared) -> Option<u64> {
        if !self.inbox.is_empty() || !shared.timeouts.is_empty() || !shared.cancelled.is_empty() {
            return Some(self.tick);
        }
        self.wheel.next_fire_tick(self.tick)
    }

    /// Whether the ticks last run took anything from the queues (producers are active).
    pub(crate) fn was_busy(&self) -> bool {
        self.busy
    }

    /// Unlinks the timeouts cancelled while in the wheel (a cancel of a queued timeout never
    /// comes here: the transfer accounts for it).
    fn process_cancelled(&mut self, shared: &Shared) {
        // Unbounded, as in Netty: each is an unlink, and the queue only holds cancellations of
        // timeouts already in the wheel.
        shared.cancelled.take_into(&mut self.cancelled);
        let n = self.cancelled.len();
        self.busy |= n > 0;
        for state in self.cancelled.drain(..) {
            let slot = state.slot();
            if slot != NO_SLOT {
                state.clear_slot();
                let (entry, _) = self.wheel.remove(slot);
                self.chunks.settle(entry.chunk);
            }
        }
        if n > 0 {
            // Relaxed: see `Shared::reserve_limited`.
            shared.pending.fetch_sub(n, Ordering::Relaxed);
        }
        recycle(&mut self.cancelled);
    }

    /// Moves up to `cap` queued timeouts, oldest first, into the buckets, as of `tick`.
    fn transfer(&mut self, shared: &Shared, tick: u64, cap: u64) {
        // What is queued now, taken once (after what an earlier tick left over). Netty polls
        // until the queue is empty, so it also takes what producers push while it transfers;
        // chasing them here had the worker touch the cells of the timeouts producers were
        // just then creating and cancelling, and the cache lines went back and forth (schedule
        // + cancel ran 1.5-2x slower). What arrives during the transfer waits for the next
        // tick, as if it had been pushed a moment later.
        let spare = &mut self.spare;
        let inbox = &mut self.inbox;
        let mut took = false;
        let chunk_spares = &mut self.chunks.spares;
        shared.timeouts.take_each(|items, producer, i| {
            // With no spare, room for as many as came this time (up to KEEP): a producer that
            // starts again from an empty `Vec` regrows it, copying and faulting pages in.
            let empty = spare
                .pop()
                .unwrap_or_else(|| PendingBatch::with_capacity(items.len().min(KEEP)));
            inbox.push_back(std::mem::replace(items, empty));
            took = true;
            // A spare holds a handle on the timer, so none may stay in a shard after `stop()`
            // clears the cursors. It does so after joining (or taking) the worker, so this runs
            // before; and should that ever change, the check under the same lock keeps it so:
            // once `stop()` has cleared this shard, we see SHUTDOWN here.
            if !chunk_spares[i].is_empty() && !shared.is_shutdown() {
                producer.cursor.add_spares(&mut chunk_spares[i]);
            }
        });
        self.busy |= took;
        self.register_new_batches();
        let mut left = usize::try_from(cap).unwrap_or(usize::MAX);
        let mut cancelled = 0;
        while left > 0 {
            let Some(batch) = self.inbox.front_mut() else {
                break;
            };
            let n = left.min(batch.len());
            left -= n;
            // Draining a prefix shifts what is left: only when the cap is hit.
            let (drained, runs, ids) = batch.drain_front(n);
            for (task, (run, idx), deadline) in drained {
                let id = ids[run];
                let key = self.wheel.next_key();
                if !runs[run].chunk.cell(idx).try_enter_wheel(key) {
                    // Cancelled while queued: account for it here, and drop the task now.
                    cancelled += 1;
                    self.chunks.settle(id);
                    continue;
                }
                let entry = Entry { task, chunk: id };
                let inserted = self.wheel.insert(entry, idx, deadline, tick);
                debug_assert_eq!(inserted, key);
            }
            if batch.is_empty() {
                let mut empty = self.inbox.pop_front().expect("the front batch");
                let chunks = &mut self.chunks;
                empty.clear_runs(|chunk| chunks.release(chunk));
                // Room for a burst is kept, a few batches' worth; beyond, memory goes back.
                if empty.capacity() <= KEEP && self.spare.len() < SPARE_BATCHES {
                    self.spare.push(empty);
                }
            }
        }
        if cancelled > 0 {
            // Relaxed: see `Shared::reserve_limited`.
            shared.pending.fetch_sub(cancelled, Ordering::Relaxed);
        }
    }

    fn expire(&mut self, shared: &Shared, tick: u64, now: u64) {
        let executor = self.executor.as_ref();
        let chunks = &mut self.chunks;
        self.wheel.expire(tick, now, |entry, idx, _deadline| {
            let chunk = chunks.get(entry.chunk);
            let cell = chunk.cell(idx);
            if cell.try_expire() {
                // Relaxed: see `Shared::reserve_limited`. Decremented before the task runs, so that a
                // task can schedule again even at the pending limit.
                shared.pending.fetch_sub(1, Ordering::Relaxed);
                let state = chunk.state(idx);
                chunks.settle(entry.chunk);
                run_task(executor, entry.task, state);
            } else {
                // Cancelled after this tick's cancellations were processed: its entry on the
                // cancellation queue decrements pending (finding NO_SLOT); the task is dropped
                // here.
                cell.clear_slot();
                chunks.settle(entry.chunk);
            }
        });
    }

    /// Gives the chunks of the batches just taken their ids (in the order the batches were
    /// pushed, so that a chunk a shard's earlier batch registered is found again).
    fn register_new_batches(&mut self) {
        let chunks = &mut self.chunks;
        for batch in self.inbox.iter_mut() {
            batch.assign_chunk_ids(|run| chunks.id_of(run));
        }
    }

    /// When nothing is queued, gives back the queue buffers kept for reuse, the spare chunks
    /// (the worker's and the shards') and the chunk table's room, so that an idle timer does
    /// not hold a past burst's worth of memory.
    pub(crate) fn release_idle_buffers(&mut self, shared: &Shared) {
        if !self.inbox.is_empty() {
            return;
        }
        self.spare = Vec::new();
        self.chunks.release_idle();
        shared.timeouts.for_each_data(|p| p.cursor.clear_spares());
        // Pushed since we looked, if anything: kept (in order) for the next transfer.
        let late = shared.timeouts.take_all();
        if !late.is_empty() {
            self.inbox.push_back(late);
            self.register_new_batches();
        }
        let mut cancelled = shared.cancelled.take_all();
        cancelled.append(&mut self.cancelled);
        self.cancelled = cancelled;
    }

    /// Empties the wheel and the inbox (for `stop`): the states of everything still in them.
    pub(crate) fn drain(&mut self) -> Vec<TimeoutState> {
        let chunks = &self.chunks;
        let mut out: Vec<TimeoutState> = self
            .wheel
            .drain()
            .into_iter()
            .map(|(e, idx)| chunks.get(e.chunk).state(idx))
            .collect();
        for batch in self.inbox.drain(..) {
            out.extend(batch.into_states());
        }
        out
    }
}

impl Drop for Worker {
    /// A worker dropped with timeouts still in it is a shutdown that nobody drains (the owner
    /// was dropped inside a task, so no `stop()` returns them): they will never run, and end
    /// cancelled, like the timeouts `stop()` returns. After a `stop()` this finds nothing.
    fn drop(&mut self) {
        // A loom failure unwinding through the worker: calling into loom again would turn the
        // report into an abort of the whole test binary.
        #[cfg(loom)]
        if std::thread::panicking() {
            return;
        }
        for state in self.drain() {
            state.try_cancel();
        }
    }
}

/// Items a drained buffer may keep room for.
const KEEP: usize = 128 * 1024;

/// Emptied batches the worker keeps for the queue's shards (one per producer thread, up to the
/// shard count, is what a steady state needs).
const SPARE_BATCHES: usize = 8;

/// Keeps a drained buffer's allocation for reuse unless a burst made it very large. (Buffers a
/// busy timer keeps are given back when it goes idle: `release_idle_buffers`.) Growing a buffer
/// again every tick showed up as page faults and copies on the producers.
fn recycle<T>(buf: &mut Vec<T>) {
    if buf.capacity() > KEEP {
        *buf = Vec::new();
    }
}

fn run_task(executor: Option<&Executor>, task: Box<dyn TimerTask>, state: TimeoutState) {
    let timeout = Timeout { state };
    match executor {
        None => {
            if catch_unwind(AssertUnwindSafe(|| task.run(&timeout))).is_err() {
                log::warn!("a TimerTask panicked; the timer goes on");
            }
        }
        Some(executor) => {
            let job: Box<dyn FnOnce() + Send> = Box::new(move || task.run(&timeout));
            if catch_unwind(AssertUnwindSafe(|| executor(job))).is_err() {
                log::warn!(
                    "the executor panicked (refused a TimerTask); the timeout stays expired"
                );
            }
        }
    }
}

/// The worker thread's loop. Returns the worker (with whatever it still holds) at shutdown.
pub(crate) fn run(mut worker: Worker, shared: Arc<Shared>) -> Worker {
    loop {
        let now = shared.clock.now();
        worker.advance(&shared, now);

        // Publish the plan, then look at the queues again, under their locks (see the module
        // docs).
        let mut plan = worker.next_work_tick(&shared).unwrap_or(u64::MAX);
        if plan > worker.tick && worker.was_busy() {
            // The queues gave work in the ticks just run but are empty this instant (the
            // transfer ran them dry): producers are likely still at it. Look again at the end
            // of this tick, keeping the buffers, rather than park and have the next producer
            // unpark us (a system call on its side) and regrow the buffers we gave back. One
            // wake-up after a burst ends; an idle timer still never wakes.
            plan = worker.tick;
        }
        shared.planned.store(plan, Ordering::SeqCst);
        if plan > worker.tick && (!shared.timeouts.is_empty() || !shared.cancelled.is_empty()) {
            plan = worker.tick;
            shared.planned.store(plan, Ordering::SeqCst);
        }
        // A producer may have lowered the plan since: honour the lower of the two.
        plan = plan.min(shared.planned.load(Ordering::SeqCst));
        if shared.is_shutdown() {
            break;
        }
        if plan > worker.tick {
            // Idle until a later tick: nothing is queued.
            worker.release_idle_buffers(&shared);
        }
        sleep_until_end_of(&shared, plan);
        shared.planned.store(AWAKE, Ordering::SeqCst);
        // Relaxed: a statistic.
        shared.wakeups.fetch_add(1, Ordering::Relaxed);
        if shared.is_shutdown() {
            break;
        }
    }
    worker
}

/// Sleeps until the end of `tick` (`u64::MAX`: until unparked). May return early (unpark,
/// spurious wake-up); the loop re-plans.
#[cfg(not(loom))]
fn sleep_until_end_of(shared: &Shared, tick: u64) {
    if tick == u64::MAX {
        thread::park();
        return;
    }
    let wake_at = tick.saturating_add(1).saturating_mul(shared.tick_nanos);
    let now = shared.clock.now();
    if wake_at > now {
        thread::park_timeout(std::time::Duration::from_nanos(wake_at - now));
    }
}

/// Under loom time is a manual clock: a bounded sleep jumps the clock to its end; an unbounded
/// one is a real (loom) park, so a lost wake-up shows up as a deadlock.
///
/// A model that holds the clock (`loom_hooks::hold_clock`) moves time itself, and a bounded
/// sleep is then a park too, ended like an OS timer would end it: by the model's clock
/// (`loom_hooks::advance_clock`) once the planned tick is over. A wake-up the worker needed
/// earlier and did not get is then a deadlock as well.
#[cfg(loom)]
fn sleep_until_end_of(shared: &Shared, tick: u64) {
    if tick == u64::MAX {
        thread::park();
        return;
    }
    let wake_at = tick.saturating_add(1).saturating_mul(shared.tick_nanos);
    if crate::sync::loom_hooks::clock_held() {
        // The model's clock stands for real time, which no memory ordering hides from a sleeping
        // thread: this fence and the one in `advance_clock` make sure that either we see the
        // time or the clock sees our plan (and unparks us).
        fence(Ordering::SeqCst);
        if shared.clock.now() < wake_at {
            thread::park();
        }
        return;
    }
    shared.clock.advance_to(wake_at);
}

#[cfg(test)]
mod tests {
    use crate::timeout::CHUNK;
    use crate::{HashedWheelTimer, Timeout};
    use std::time::Duration;

    fn noop(_: &Timeout) {}

    /// Spare chunks: (the worker's, the shards' cursors').
    fn spares(timer: &HashedWheelTimer) -> (usize, usize) {
        let shared = &timer.shared;
        let worker = crate::sync::lock(&shared.idle_worker);
        let worker = worker
            .as_ref()
            .expect("a manual timer keeps its worker here");
        let held = worker.chunks.spares.iter().map(Vec::len).sum();
        let handed = shared
            .timeouts
            .fold_data(0, |n, p| n + p.cursor.spare_count());
        (held, handed)
    }

    const TICK: Duration = Duration::from_millis(10);

    /// A manual timer, and `chunks` chunks' worth of timeouts scheduled and cancelled on it,
    /// their handles dropped, then a tick: the worker settles them and keeps their chunks as
    /// spares. Then one more timeout (returned) and a tick: the worker takes it from its shard
    /// and hands the spares over.
    fn spares_handed_over(chunks: usize) -> (HashedWheelTimer, crate::ManualDriver, Timeout) {
        let (timer, driver) = HashedWheelTimer::builder()
            .tick_duration(TICK)
            .build_manual()
            .unwrap();
        cancelled_pairs(&timer, chunks * CHUNK);
        driver.advance(TICK);
        assert_eq!(spares(&timer), (chunks, 0));
        let first = timer.new_timeout(noop, Duration::from_secs(1)).unwrap();
        driver.advance(TICK);
        assert_eq!(spares(&timer), (0, chunks));
        (timer, driver, first)
    }

    fn cancelled_pairs(timer: &HashedWheelTimer, n: usize) {
        for _ in 0..n {
            let t = timer.new_timeout(noop, Duration::from_secs(1)).unwrap();
            assert!(t.cancel());
        }
    }

    /// Chunks whose timeouts are all settled, with no handle left, come back to their shard as
    /// spares (the request-timeout pattern allocates nothing in a steady state), their cells
    /// fresh; an idle timer lets them go.
    #[test]
    fn chunks_let_go_by_the_worker_are_handed_out_again_fresh() {
        let (timer, driver, first) = spares_handed_over(2);
        // The rest of `first`'s chunk, then one cell of a spare.
        let more: Vec<Timeout> = (0..CHUNK)
            .map(|_| timer.new_timeout(noop, Duration::from_secs(1)).unwrap())
            .collect();
        assert_eq!(spares(&timer), (0, 1));
        assert!(more.iter().all(|t| !t.is_cancelled() && !t.is_expired()));
        assert_eq!(timer.pending_timeouts(), CHUNK + 1);
        driver.advance(Duration::from_secs(2));
        assert!(first.is_expired() && more.iter().all(Timeout::is_expired));
        assert_eq!(timer.pending_timeouts(), 0);
        driver.advance(TICK); // nothing taken: idle, the spares go
        assert_eq!(spares(&timer), (0, 0));
    }

    /// A spare chunk holds a handle on its timer: `stop()` lets go of every spare, the
    /// shards' and the worker's, or the timer would keep itself alive.
    #[test]
    fn stop_lets_go_of_the_spare_chunks() {
        let (timer, driver, first) = spares_handed_over(3);
        // The rest of `first`'s chunk, a spare whole, one cell of another: one spare left
        // in the cursor, and the whole one back to the worker as a spare.
        cancelled_pairs(&timer, 2 * CHUNK);
        driver.advance(TICK);
        assert_eq!(spares(&timer), (1, 1));
        assert_eq!(timer.stop().unwrap(), vec![first]);
        let handed = timer
            .shared
            .timeouts
            .fold_data(0, |n, p| n + p.cursor.spare_count());
        assert_eq!(handed, 0);
        // The owner and the driver: no chunk holds the timer any more.
        assert_eq!(std::sync::Arc::strong_count(&timer.shared), 2);
    }
}
