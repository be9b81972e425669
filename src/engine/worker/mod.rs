//! The worker: a turn as a pure step over a given `now` (no sleeping, no clock read), and the
//! tally it keeps of what it ended.
//!
//! For every tick that ended by `now` and has work, in Netty's order: take the queues
//! (cancellations, new timeouts), move up to `TRANSFER_CAP` new timeouts into the wheel, expire
//! the tick's bucket. It ends every slot once, and counts it ended before the task runs.

use super::slots::{Block, BLOCK};
use super::stats::{Published, CLASSES};
use super::wheel::{SlotId, Wheel};
use super::{segment_len, wake_all, Entry, Shared, Stored, NEVER, SHARDS, TRANSFER_CAP};
use crate::sync::{lock, Arc};
use std::collections::VecDeque;
use std::task::Waker;
use std::time::Duration;

mod end;
pub use end::NeverRan;

/// The worker gives back what drained at most this often while busy, and before a sleep this long.
const TRIM_NANOS: u64 = 1_000_000_000;

/// The worker gives back a slice a tick while nothing is due for at least this long: a slice
/// (about 50 µs of frees) makes nothing late then, and a burst's memory comes back in ticks.
const IDLE_TRIM_NANOS: u64 = 10_000_000;

/// Empty node pages one trim frees (2 048 nodes each, about 50 µs for 16).
const TRIM_PAGES: usize = 16;

/// The most buckets the worker's wheel allocates (16 bytes each). A timeout's tick does not
/// depend on the wheel's length, so a larger `ticks_per_wheel` is only reported.
const MAX_BUCKETS: usize = 1 << 16;

/// Who runs a turn: the worker thread (or a manual advance), a `Drive`'s poll, or its `Ticker`.
/// A `Drive`'s turn also expires what of the current tick is due by `now`, as a runtime fires
/// its timers; a `Ticker`'s leaves a lone future it expires to the `Drive`'s turn (`wakers`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runner {
    Thread,
    Drive,
    Ticker,
}

/// The worker's state between turns: see the module docs.
pub(crate) struct Worker<J: Stored> {
    wheel: Wheel<J>,
    /// Per block id: the block, while it has slots the worker has not ended, and slots ended.
    blocks: Vec<(Option<Arc<Block<J>>>, u8)>,
    /// Segments taken from the shards, not yet all in the wheel (the cap), oldest first.
    inbox: VecDeque<(usize, Vec<Entry<J>>)>,
    /// The segments a `collect` takes, on their way to the inbox.
    taken: Vec<(usize, Vec<Entry<J>>)>,
    new_blocks: Vec<Arc<Block<J>>>,
    /// Emptied segments, for the shards.
    free_segments: Vec<Vec<Vec<Entry<J>>>>,
    cancels: Vec<SlotId>,
    /// Per shard: blocks to give back at the next `collect`.
    spares: Vec<Vec<Arc<Block<J>>>>,
    /// Per shard: what ended tasks left for the next ones (`Stored::run_keeping`), in chunks
    /// of at most `SPARE_CHUNK` (`kept`), handed to the shard that made the task.
    task_spares: Vec<Vec<Vec<J>>>,
    /// The wakers of the futures a walk expired, woken once it has marked every due slot; a
    /// `Ticker`'s lone one waits here for the next turn's start (`Runner`).
    wakers: Vec<Waker>,
    pub(crate) tally: Tally,
    /// The `now` of the current turn, and who runs it.
    now: u64,
    runner: Runner,
    /// The earliest deadline the last walk of a tick left there (`NEVER`: none): a `Drive`'s wake.
    pub(crate) soonest: u64,
    ended: u64,
    /// Transfers left in `budget_tick`.
    budget: usize,
    budget_tick: u64,
    tick_nanos: u64,
    /// When the worker last gave back memory (`trim`).
    trimmed_at: u64,
    /// The last trim left memory to give back.
    trimming: bool,
}

impl<J: Stored> Worker<J> {
    pub(crate) fn new(shared: &Shared<J>) -> Worker<J> {
        Worker {
            wheel: Wheel::new(shared.wheel_len.min(MAX_BUCKETS), shared.tick_nanos),
            blocks: Vec::new(),
            inbox: VecDeque::new(),
            taken: Vec::new(),
            new_blocks: Vec::new(),
            free_segments: (0..SHARDS).map(|_| Vec::new()).collect(),
            cancels: Vec::new(),
            spares: (0..SHARDS).map(|_| Vec::new()).collect(),
            task_spares: (0..SHARDS).map(|_| Vec::new()).collect(),
            wakers: Vec::new(),
            runner: Runner::Thread,
            tally: Tally::default(),
            now: 0,
            soonest: NEVER,
            ended: 0,
            budget: TRANSFER_CAP,
            budget_tick: 0,
            tick_nanos: shared.tick_nanos,
            trimmed_at: 0,
            trimming: false,
        }
    }

    /// Runs every tick that ended by `now`; the least pace of what it took from the queues
    /// (`NEVER`: it found nothing).
    pub(crate) fn turn(&mut self, shared: &Shared<J>, now: u64, runner: Runner) -> u64 {
        (self.now, self.runner) = (now, runner);
        self.tally.panicked += wake_all(&mut self.wakers);
        if now.saturating_sub(self.trimmed_at) >= TRIM_NANOS {
            self.trimmed_at = now;
            self.trim(shared);
        }
        let end = now / self.tick_nanos;
        // As Netty's worker, the queues are taken as a tick ends, not before.
        let taking = self.wheel.tick() < end;
        let mut pace = if taking { self.collect(shared) } else { NEVER };
        while self.wheel.tick() < end {
            let tick = self.wheel.tick();
            self.run_tick(shared, tick);
            if shared.is_shutdown() {
                // A task dropped the owner, or `stop()` waits: this tick was the last.
                return pace;
            }
            // What the tick's tasks scheduled goes in at the next tick, as in Netty's worker.
            if tick + 1 < end {
                pace = pace.min(self.collect(shared));
            }
            let next = if self.inbox.is_empty() {
                let work = self.wheel.next_work();
                work.map_or(end, |t| t.max(tick + 1)).min(end)
            } else {
                tick + 1
            };
            self.wheel.advance_to(next);
        }
        if runner != Runner::Thread {
            self.expire_timed(shared, now);
        }
        pace
    }

    /// Tick `tick`: transfers up to the cap, then expires its bucket, its tasks timed together.
    fn run_tick(&mut self, shared: &Shared<J>, tick: u64) {
        shared.set_tick(tick);
        self.transfer(shared);
        self.expire_timed(shared, u64::MAX);
    }

    /// Expires what of the current tick is due by `by`, its tasks timed together.
    fn expire_timed(&mut self, shared: &Shared<J>, by: u64) {
        let started = shared.clock.now();
        self.soonest = self.expire(shared, by);
        let ran = shared.clock.now().saturating_sub(started);
        self.tally.ran(ran, self.tick_nanos, self.now);
    }

    /// Publishes the plan, and returns it (`NEVER`: nothing to wait for): the next tick with
    /// work, or sooner `pace` ticks on while producers push (`pace`, the least of what the turn
    /// found: a task's 0, a look once a tick however many pushes; a future's 16).
    pub(crate) fn plan(&mut self, shared: &Shared<J>, pace: u64) -> u64 {
        let tick = self.wheel.tick();
        // What the cap left in the inbox goes in at this tick's end.
        let pace = if self.inbox.is_empty() { pace } else { 0 };
        let plan = self.wheel.next_work().unwrap_or(NEVER);
        let plan = plan.min(tick.saturating_add(pace)).max(tick);
        shared.set_plan(plan, tick);
        if plan == tick {
            return tick;
        }
        // Pushed while the producers saw the worker awake: the look they asked for, at the
        // latest their earliest fire tick.
        let queued = shared.queued_look();
        if queued < plan {
            let plan = queued.max(tick);
            shared.set_plan(plan, tick);
            return plan;
        }
        let idle = pace == NEVER && queued == NEVER;
        if idle && plan - tick >= (IDLE_TRIM_NANOS / self.tick_nanos).max(1) {
            self.trim(shared);
            if self.trimming {
                // Memory left to give back: a slice a tick. The plan published stays: a look
                // earlier than it costs nobody a wake-up.
                return tick;
            }
        }
        plan
    }

    /// Takes the shards' queues into the inbox, ending the cancelled; the least pace of what they
    /// held (`NEVER`: they were empty).
    fn collect(&mut self, shared: &Shared<J>) -> u64 {
        let pace = self.take_queues(shared);
        let mut blocks = std::mem::take(&mut self.new_blocks);
        for block in blocks.drain(..) {
            let bid = split(block.slot(0)).0;
            if self.blocks.len() <= bid {
                self.blocks.resize_with(bid + 1, || (None, 0));
            }
            self.blocks[bid] = (Some(block), 0);
        }
        self.new_blocks = blocks;
        let mut cancels = std::mem::take(&mut self.cancels);
        for &id in &cancels {
            self.cancelled(shared, id);
        }
        cancels.clear();
        self.cancels = cancels;
        self.inbox.extend(self.taken.drain(..));
        pace
    }

    /// Takes every shard's queues, and hands each shard its spare blocks, spare tasks and empty
    /// segments.
    fn take_queues(&mut self, shared: &Shared<J>) -> u64 {
        let mut pace = NEVER;
        let returns = self.spares.iter_mut().zip(&mut self.task_spares);
        let returns = returns.zip(&mut self.free_segments);
        for (i, (shard, ((spares, tasks), segments))) in
            shared.shards.iter().zip(returns).enumerate()
        {
            let mut shard = lock(shard);
            pace = pace.min(std::mem::replace(&mut shard.pace, NEVER));
            shard.look = NEVER;
            self.taken
                .extend(shard.timeouts.drain(..).map(|segment| (i, segment)));
            self.new_blocks.append(&mut shard.new_blocks);
            self.cancels.append(&mut shard.cancels);
            for block in spares.drain(..) {
                shard.spares[block.kind() as usize].push(block);
            }
            tasks.retain(|chunk| !chunk.is_empty());
            shard.task_chunks.append(tasks);
            shard.free_segments.append(segments);
        }
        pace
    }

    /// A slot `cancel()` won in the wheel: unlinks and ends it (a stale id, its block gone and
    /// the id reused, finds its slot pending, or out of the wheel).
    fn cancelled(&mut self, shared: &Shared<J>, id: SlotId) {
        let (bid, index) = split(id);
        let cancelled = self
            .blocks
            .get(bid)
            .and_then(|(block, _)| block.as_ref())
            .is_some_and(|b| b.is_cancelled(index));
        if !cancelled {
            return;
        }
        if let Some(task) = self.wheel.remove(id) {
            self.tally.cancelled += 1;
            self.end(shared, id, task);
        }
    }

    /// Moves up to this tick's budget of timeouts from the inbox into the wheel.
    fn transfer(&mut self, shared: &Shared<J>) {
        let tick = self.wheel.tick();
        if tick != self.budget_tick {
            self.budget_tick = tick;
            self.budget = TRANSFER_CAP;
        }
        while self.budget > 0 {
            let Some((shard, mut segment)) = self.inbox.pop_front() else {
                break;
            };
            let n = self.budget.min(segment.len());
            self.budget -= n;
            for entry in segment.drain(..n) {
                self.place(shared, entry);
            }
            if !segment.is_empty() {
                self.inbox.push_front((shard, segment));
            } else if segment.capacity() == segment_len::<J>() {
                self.free_segments[shard].push(segment);
            }
        }
    }

    fn place(&mut self, shared: &Shared<J>, entry: Entry<J>) {
        let Entry { id, deadline, task } = entry;
        let (bid, index) = split(id);
        let placed = self.blocks[bid].0.as_ref().is_some_and(|b| b.place(index));
        if !placed {
            // A `cancel()` won it while it was queued: it ends here.
            self.tally.cancelled += 1;
            self.end(shared, id, task);
        } else {
            self.wheel.insert(id, deadline, task);
        }
    }

    /// Publishes the counters (`Shared::stats`).
    pub(crate) fn publish(&mut self, shared: &Shared<J>) {
        self.tally.tick = self.wheel.tick();
        shared.counters.publish(self.tally.published());
    }

    /// Gives back a slice of the memory of what drained (`trimming`: some is left).
    fn trim(&mut self, shared: &Shared<J>) {
        let spares = shared.trim_spares();
        self.trimming = self.wheel.trim(TRIM_PAGES) || spares;
        self.inbox.shrink_to_fit();
        self.taken.shrink_to_fit();
        self.cancels.shrink_to_fit();
        self.new_blocks.shrink_to_fit();
        self.wakers.shrink_to_fit();
        let returns = self.spares.iter_mut().zip(&mut self.task_spares);
        for ((blocks, tasks), segments) in returns.zip(&mut self.free_segments) {
            blocks.shrink_to_fit();
            tasks.shrink_to_fit();
            segments.shrink_to_fit();
        }
        while self.blocks.last().is_some_and(|(block, _)| block.is_none()) {
            self.blocks.pop();
        }
        self.blocks.shrink_to_fit();
    }
}

/// The worker's running totals, its own.
#[derive(Default, Clone, Copy)]
pub(crate) struct Tally {
    pub(crate) cancelled: u64,
    pub(crate) panicked: u64,
    pub(crate) wakeups: u64,
    pub(crate) tick: u64,
    late_max: u64,
    lateness: [u64; CLASSES],
    longest_run: u64,
    slow_runs: u64,
    /// When a slow run was last logged.
    warned_at: Option<u64>,
}

/// A slow run is logged at most this often.
const WARN_EVERY: u64 = 10_000_000_000;

impl Tally {
    /// A timeout expired `late` ns after its deadline, on a wheel of `tick_nanos` ticks.
    #[inline]
    pub(crate) fn expired(&mut self, late: u64, tick_nanos: u64) {
        self.late_max = self.late_max.max(late);
        // Under a tick, 1 to 2 ticks, 2 to 4, ...: compares, not a division per timeout.
        let (mut class, mut bound) = (0, tick_nanos);
        while class < CLASSES - 1 && late >= bound {
            class += 1;
            bound = bound.saturating_mul(2);
        }
        self.lateness[class] += 1;
    }

    /// Tasks ran back to back for `nanos`, at `now`; a run of four ticks or more is logged, at
    /// most once every ten seconds.
    pub(crate) fn ran(&mut self, nanos: u64, tick_nanos: u64, now: u64) {
        self.longest_run = self.longest_run.max(nanos);
        self.slow_runs += u64::from(nanos > tick_nanos);
        let quiet = self
            .warned_at
            .is_some_and(|at| now.saturating_sub(at) < WARN_EVERY);
        if nanos >= tick_nanos.saturating_mul(4) && !quiet {
            self.warned_at = Some(now);
            crate::engine::log_caught(
                log::Level::Warn,
                format_args!(
                    "user code (tasks or futures' wakers, timed together) held the timer's \
                     worker for {:?}, {} ticks: every timeout due meanwhile fires late",
                    Duration::from_nanos(nanos),
                    nanos / tick_nanos
                ),
            );
        }
    }

    /// The tally as `Counters::publish` takes it.
    fn published(&self) -> Published {
        let mut values = [0; 8 + CLASSES];
        values[..8].copy_from_slice(&[
            self.lateness.iter().sum(),
            self.cancelled,
            self.panicked,
            self.wakeups,
            self.tick,
            self.late_max,
            self.longest_run,
            self.slow_runs,
        ]);
        values[8..].copy_from_slice(&self.lateness);
        values
    }
}

fn split(id: SlotId) -> (usize, usize) {
    (id as usize / BLOCK, id as usize % BLOCK)
}
