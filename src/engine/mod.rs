//! The timer's engine: one name per timeout (its slot), the shards producers push onto, the
//! wheel and the worker (the design: the crate docs; the modules: `ARCHITECTURE.md`).
//!
//! Only the worker, under `Shared::worker`'s lock, touches the wheel and the per-slot arrays;
//! producers and cancellers reach it through the shards and the slot states.

pub(crate) mod clock;
mod lifecycle;
pub(crate) use lifecycle::count_instance;
pub use lifecycle::INSTANCE_COUNT_LIMIT;
mod shard;
pub(crate) mod slots;
mod stats;
mod task;
pub(crate) mod wheel;
pub(crate) mod worker;
pub(crate) use worker::Runner;

use crate::error::TimerError;
use crate::sync::{
    lock, thread, Arc, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, CachePadded, Mutex, Ordering,
};
use clock::Clock;
pub(crate) use shard::{segment_len, Entry, SHARDS};
use shard::{shard_index, Shard};
pub(crate) use slots::Kind;
use slots::{BlockIds, BLOCK};
pub use slots::{Timeout, TimerHandle};
pub use stats::TimerStats;
use std::time::Duration;
pub(crate) use task::{catch_user_panic, drop_caught, log_caught, wake_all, Executor};
pub use task::{BoxedTask, Stored, TimerTask, TypedTask};
use wheel::SlotId;
pub use worker::NeverRan;
use worker::Worker;

/// Slot ids a timer can name at once (blocks alive, handles included).
const MAX_PENDING: usize = slots::MAX_BLOCKS as usize * BLOCK;
/// At most this many timeouts move into buckets per tick (Netty's cap); the rest wait.
pub(crate) const TRANSFER_CAP: usize = 100_000;

const INIT: u8 = 0;
const STARTED: u8 = 1;
const SHUTDOWN: u8 = 2;

/// A future's new timeout or cancel may wait this long for the worker's look (a task's, to its
/// tick's end, as in Netty's worker): a stream of futures wakes the worker once in as many ticks.
const FUTURE_LOOK_NANOS: u64 = 16_000_000;

/// `planned` while the worker runs a turn: it will look at the queues before it sleeps.
pub(crate) const AWAKE: u64 = 0;
/// `planned` while the worker parks with nothing to wait for.
pub(crate) const NEVER: u64 = u64::MAX;

/// When a timeout is due: its deadline and the time it was asked at (ns since the origin),
/// whether it passes the pending limit (a future's wait that goes on), and what its slot holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct At {
    pub(crate) deadline: u64,
    pub(crate) now: u64,
    pub(crate) exempt: bool,
    pub(crate) kind: Kind,
}

/// A pushed timeout's handle (none if detached), and the tick past which the worker is woken.
type Pushed<J> = (Option<Timeout<J>>, u64);

/// A timer's options, checked by the builder.
pub(crate) struct Config {
    pub(crate) tick_nanos: u64,
    pub(crate) wheel_len: usize,
    pub(crate) max_pending: Option<usize>,
    pub(crate) thread_name: Box<str>,
    pub(crate) executor: Option<Executor>,
}

/// What producers, handles and the worker share.
pub(crate) struct Shared<J: Stored> {
    shards: Box<[CachePadded<Mutex<Shard<J>>>]>,
    state: AtomicU8,
    /// The tick at whose end the worker next looks at the queues (`AWAKE`, `NEVER`).
    planned: AtomicU64,
    /// The worker's tick when it last planned.
    worker_tick: AtomicU64,
    /// Timeouts the worker ended: only the worker writes it, on a cache line of its own (a
    /// store per end must not evict the fields every producer reads).
    ended: CachePadded<AtomicU64>,
    /// With a limit: the pending count the limit is held against.
    limited: Option<(usize, AtomicUsize)>,
    pub(crate) block_ids: Mutex<BlockIds>,
    pub(crate) tick_nanos: u64,
    /// By `Kind`, the ticks a new timeout or cancel may wait for the worker's look.
    paces: [u64; 2],
    pub(crate) wheel_len: usize,
    pub(crate) clock: Clock,
    pub(crate) executor: Option<Executor>,
    thread_name: Box<str>,
    /// The owner and the adapters that keep the timer running (`KeepAlive`): the last to go
    /// stops it.
    pub(crate) users: AtomicUsize,
    /// The `Drive`s running the turns, each by its own waker (whose clone and drop run no user
    /// code); the last polled is woken where the thread would be unparked, every one at stop.
    drivers: Mutex<Vec<std::task::Waker>>,
    /// The plan the thread last read as it watches a `Drive` (it sleeps until a grace past it,
    /// `GRACE_TICKS`, or for good at `NEVER`): a plan earlier by more than the grace unparks it.
    pub(crate) watching: AtomicU64,
    pub(crate) counters: stats::Counters,
    /// The worker between turns; whoever runs a turn holds this lock. `None` once stopped.
    pub(crate) worker: Mutex<Option<Worker<J>>>,
    /// The worker thread, once started.
    thread: Mutex<Option<thread::JoinHandle<()>>>,
    worker_thread: Mutex<Option<thread::Thread>>,
    /// The thread running a turn now: `stop()` there would wait for itself.
    turn_thread: Mutex<Option<thread::ThreadId>>,
    /// The owner went inside a turn (a task dropped it): the turn's runner ends everything.
    orphaned: AtomicBool,
}

impl<J: Stored> Shared<J> {
    /// A timer's shared state, its worker not started.
    pub(crate) fn new(config: Config, clock: Clock) -> Arc<Shared<J>> {
        let shared = Arc::new(Shared {
            shards: (0..SHARDS)
                .map(|i| CachePadded::new(Mutex::new(Shard::new(i))))
                .collect(),
            state: AtomicU8::new(INIT),
            // A manual timer has no thread to wake: its plan stays `AWAKE`.
            planned: AtomicU64::new(if clock.is_manual() { AWAKE } else { NEVER }),
            worker_tick: AtomicU64::new(0),
            ended: CachePadded::new(AtomicU64::new(0)),
            limited: config.max_pending.map(|max| (max, AtomicUsize::new(0))),
            block_ids: Mutex::new(BlockIds::default()),
            tick_nanos: config.tick_nanos,
            paces: [0, FUTURE_LOOK_NANOS / config.tick_nanos],
            wheel_len: config.wheel_len,
            clock,
            executor: config.executor,
            thread_name: config.thread_name,
            users: AtomicUsize::new(1),
            counters: stats::Counters::default(),
            worker: Mutex::new(None),
            thread: Mutex::new(None),
            worker_thread: Mutex::new(None),
            turn_thread: Mutex::new(None),
            orphaned: AtomicBool::new(false),
            drivers: Mutex::new(Vec::new()),
            watching: AtomicU64::new(NEVER),
        });
        *lock(&shared.worker) = Some(Worker::new(&shared));
        shared
    }

    pub(crate) fn is_shutdown(&self) -> bool {
        // Acquire: pairs with the SeqCst store in `stop`.
        self.state.load(Ordering::Acquire) == SHUTDOWN
    }

    /// Schedules the task `make` builds (under the shard lock, from the shard's spare tasks) at
    /// `delay` from now; the handle unless `detached`.
    #[inline]
    pub(crate) fn schedule_with<M: FnOnce(&mut Vec<J>) -> J>(
        self: &Arc<Self>,
        make: M,
        delay: Duration,
        detached: bool,
    ) -> Result<Option<Timeout<J>>, TimerError> {
        let now = self.clock.now();
        let at = At {
            deadline: now.saturating_add(clock::nanos(delay)),
            now,
            exempt: false,
            kind: Kind::Task,
        };
        self.schedule_at(make, at, detached)
    }

    /// Schedules the task `make` builds at `at.deadline` (ns since the origin). Refused, `make`
    /// is dropped here, outside every lock (it may hold a task whose `Drop` calls the timer).
    pub(crate) fn schedule_at<M: FnOnce(&mut Vec<J>) -> J>(
        self: &Arc<Self>,
        make: M,
        at: At,
        detached: bool,
    ) -> Result<Option<Timeout<J>>, TimerError> {
        // Stopped first, then the limit: the contract's order of checks.
        if let Err(e) = self.start().and_then(|()| self.reserve(at.exempt)) {
            self.counters.refused();
            return Err(e);
        }
        let pushed = self.push(make, at, detached);
        let (handle, needed) = pushed.map_err(|(e, _make)| {
            self.unreserve();
            self.counters.refused();
            e
        })?;
        // A push that asks its shard for a sooner look (a task's first since the worker took the
        // queues: by the next tick's end) wakes a worker that plans to look later, so that no
        // queue grows for long; the worker then plans those looks while pushes go on.
        self.wake_if_later_than(needed);
        Ok(handle)
    }

    /// Pushes a timeout onto this thread's shard; its handle, and whether the shard was empty.
    fn push<M: FnOnce(&mut Vec<J>) -> J>(
        self: &Arc<Self>,
        make: M,
        at: At,
        detached: bool,
    ) -> Result<Pushed<J>, (TimerError, M)> {
        let mut shard = lock(&self.shards[shard_index()]);
        // Under the shard lock: `stop` sets SHUTDOWN, then takes every shard's lock once, so
        // this timeout is either refused here or among what `stop` drains.
        if self.is_shutdown() {
            return Err((TimerError::Stopped, make));
        }
        let Some((block, index, first)) = shard.take_slot(self, at.kind) else {
            let max = MAX_PENDING;
            return Err((TimerError::TooManyPending { pending: max, max }, make));
        };
        let id = block.slot(index);
        let handle = (!detached).then(|| Timeout::new(Arc::clone(block), index));
        if first {
            let block = Arc::clone(block);
            shard.new_blocks.push(block);
        }
        let pace = self.paces[at.kind as usize];
        let needed = shard.ask(
            pace,
            at.now / self.tick_nanos,
            at.deadline / self.tick_nanos,
        );
        let task = make(shard.spare_tasks());
        let deadline = at.deadline;
        shard.push_entry(Entry { id, deadline, task });
        shard.accepted += 1;
        Ok((handle, needed))
    }

    /// Counts one more pending against the limit, if there is one (an `exempt` timeout passes
    /// it, and counts).
    fn reserve(&self, exempt: bool) -> Result<(), TimerError> {
        if let Some((max, count)) = &self.limited {
            // Acquire: pairs with the Release in `set_ended`; the timeout itself is published
            // by the shard lock.
            let pending = count.fetch_add(1, Ordering::Acquire);
            if pending >= *max && !exempt {
                count.fetch_sub(1, Ordering::Relaxed);
                return Err(TimerError::TooManyPending { pending, max: *max });
            }
        }
        Ok(())
    }

    fn unreserve(&self) {
        if let Some((_, count)) = &self.limited {
            count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Queues a slot of `kind` a `cancel()` won, for the worker to end within about a tick (a
    /// future's: within `FUTURE_LOOK_NANOS`).
    pub(crate) fn push_cancel(&self, id: SlotId, kind: Kind) {
        // Relaxed: a hint; a stale tick only wakes the worker once more.
        let tick = self.worker_tick.load(Ordering::Relaxed);
        let needed = {
            let mut shard = lock(&self.shards[shard_index()]);
            // Under the shard lock, as in `push`: after a stop, nobody takes the queues.
            if self.is_shutdown() {
                return;
            }
            shard.cancels.push(id);
            shard.ask(self.paces[kind as usize], tick, NEVER)
        };
        self.wake_if_later_than(needed);
    }

    /// Unparks the worker if it plans to look at the queues after tick `needed`. With a `Drive`,
    /// the plan is lowered to `needed` and the watching thread told (`watch_plan`): a `Drive`
    /// that is not polled leaves the timeout no later than twice the grace.
    fn wake_if_later_than(&self, needed: u64) {
        // SeqCst: with the worker's SeqCst store of its plan before it locks the shards
        // (`Worker::plan`), either it sees this push or this load sees its plan.
        if needed < self.planned.load(Ordering::SeqCst) {
            if self.is_driven() {
                self.planned.fetch_min(needed, Ordering::SeqCst);
                self.watch_plan(needed);
            }
            self.unpark_worker();
        }
    }

    /// The worker thread is about to run a turn: producers need not wake it.
    pub(crate) fn mark_awake(&self) {
        // SeqCst: see `wake_if_later_than`.
        self.planned.store(AWAKE, Ordering::SeqCst);
    }

    /// The tick at whose end the worker next looks at the queues.
    pub(crate) fn planned(&self) -> u64 {
        self.planned.load(Ordering::SeqCst)
    }

    /// The worker processes tick `tick` (its tasks see it as the current tick).
    pub(crate) fn set_tick(&self, tick: u64) {
        // Relaxed: a figure for tests and monitoring.
        self.worker_tick.store(tick, Ordering::Relaxed);
    }

    /// The worker's tick: the one it processes, or the next one between turns.
    pub(crate) fn current_tick(&self) -> u64 {
        // Relaxed: a figure for tests and monitoring.
        self.worker_tick.load(Ordering::Relaxed)
    }

    /// The counters as of the worker's last turn; the tick as of now.
    pub(crate) fn stats(&self) -> crate::TimerStats {
        let mut stats = self.counters.read();
        stats.tick = self.current_tick();
        stats
    }

    /// Timeouts accepted and not yet ended.
    pub(crate) fn pending(&self) -> usize {
        if self.is_shutdown() {
            return 0;
        }
        // Acquire, and `ended` first: every ended timeout was accepted, so the difference
        // never goes below zero.
        let ended = self.ended.load(Ordering::Acquire);
        let accepted: u64 = self.shards.iter().map(|s| lock(s).accepted).sum();
        (accepted - ended) as usize
    }

    /// The worker counts `n` more timeouts ended, its running total `total`.
    pub(crate) fn set_ended(&self, total: u64, n: usize) {
        // Release: pairs with the Acquire in `pending`.
        self.ended.store(total, Ordering::Release);
        if let Some((_, count)) = &self.limited {
            // Release: a producer that takes the freed place (Acquire in `reserve`) sees this
            // end in `ended`, so its `pending()` never reads above the limit.
            count.fetch_sub(n, Ordering::Release);
        }
    }

    /// Publishes the worker's plan: it looks at the queues at the end of tick `planned`.
    pub(crate) fn set_plan(&self, planned: u64, tick: u64) {
        self.worker_tick.store(tick, Ordering::Relaxed);
        if self.clock.is_manual() {
            return;
        }
        // SeqCst: see `wake_if_later_than`.
        self.planned.store(planned, Ordering::SeqCst);
    }
}
