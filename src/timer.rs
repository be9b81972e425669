//! The timer: its owner (`HashedWheelTimer`), its builder, cheap handles, lazy start and stop.
//!
//! # Ground rules
//! - Producers (`new_timeout`, `cancel`) never touch the wheel. They push on one of two MPSC
//!   queues in [`Shared`] and, rarely, unpark the worker.
//! - Only the worker (the thread, or a [`ManualDriver`] while it advances) owns the `Worker` and
//!   its wheel.
//! - `state` moves `INIT -> STARTED -> SHUTDOWN` or `INIT -> SHUTDOWN`, both under the `control`
//!   lock, so that starting and stopping are serialised; readers on the hot path load it without
//!   the lock.
//!
//! | `state`    | entered by                         | meaning                                   |
//! |------------|------------------------------------|-------------------------------------------|
//! | `INIT`     | construction                       | no worker yet; first `new_timeout` starts it |
//! | `STARTED`  | the first `start()`/`new_timeout`  | the worker runs; work is accepted         |
//! | `SHUTDOWN` | `stop()` or dropping the owner     | permanent; nothing is accepted            |

use crate::clock::{duration_to_nanos, Clock};
use crate::sync::{
    lock, thread, Arc, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Batch, CachePadded, Mutex,
    Ordering, Queue,
};
use crate::timeout::{ChunkCursor, ChunkRef, Run, RunCursor, TimeoutState};
use crate::wheel::{normalize_ticks_per_wheel, MAX_ENTRIES};
use crate::worker::{self, Worker, AWAKE};
use crate::{BuildError, Timeout, TimerError, TimerTask};
use std::fmt;
use std::time::Duration;

/// The largest wheel: `ticks_per_wheel` above this is an error (as in Netty before 4.1.107).
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, MAX_TICKS_PER_WHEEL};
///
/// assert!(HashedWheelTimer::builder().ticks_per_wheel(MAX_TICKS_PER_WHEEL + 1).build().is_err());
/// ```
pub const MAX_TICKS_PER_WHEEL: usize = 1 << 30;

/// Pending-count credit a producer's shard takes at once when there is no pending limit (see
/// `Shared::refill_credit`). Small under loom, so that the models cross refills.
#[cfg(not(loom))]
const CREDIT_BATCH: usize = 256;
#[cfg(loom)]
const CREDIT_BATCH: usize = 2;

/// Timeouts moved from the `timeouts` queue into buckets per tick, at most (Netty's cap).
pub(crate) const TRANSFER_CAP: u64 = 100_000;

/// Live timers in the process above which an error is logged once (Netty's
/// `INSTANCE_COUNT_LIMIT`). A timer counts from construction until it is stopped or dropped.
///
/// ```
/// assert_eq!(hashed_timer_wheel::INSTANCE_COUNT_LIMIT, 64);
/// ```
pub const INSTANCE_COUNT_LIMIT: usize = 64;

const INIT: u8 = 0;
const STARTED: u8 = 1;
const SHUTDOWN: u8 = 2;

/// Runs expired tasks somewhere other than the worker thread.
pub(crate) type Executor = Arc<dyn Fn(Box<dyn FnOnce() + Send>) + Send + Sync>;

static INSTANCES: crate::sync::process::AtomicUsize = crate::sync::process::AtomicUsize::new(0);
static WARNED_TOO_MANY: crate::sync::process::AtomicBool =
    crate::sync::process::AtomicBool::new(false);

/// Timeouts on their way from producers to the worker: task and deadline of each, in two
/// parallel vectors, and the runs of chunk cells their states are in (a timeout's cell follows
/// from its position: see [`Run`]).
///
/// Not one vector of structs: a 40-byte struct pushed into a `Vec` is built on the stack first
/// (its drop on unwinding needs an address) and then copied with 16-byte loads over 8-byte
/// stores, which the CPU cannot forward; that stall was about 5 ns of a 23 ns `new_timeout`
/// here. Each field of its own is pushed straight from registers.
#[derive(Default)]
pub(crate) struct PendingBatch {
    tasks: Vec<Box<dyn TimerTask>>,
    deadlines: Vec<u64>,
    /// The runs of the queued timeouts' cells, in order, one chunk reference each.
    runs: Vec<Run>,
    /// Timeouts the worker has taken from the front ([`PendingBatch::drain_front`]): positions
    /// in `runs` count them.
    drained: usize,
    /// The worker's: the chunk table's id of each run, given when it takes the batch.
    chunk_ids: Vec<u32>,
}

impl PendingBatch {
    pub(crate) fn with_capacity(n: usize) -> Self {
        PendingBatch {
            tasks: Vec::with_capacity(n),
            deadlines: Vec::with_capacity(n),
            ..PendingBatch::default()
        }
    }

    /// Queues a timeout: its task, its deadline, and a fresh state from `cursor` (returned,
    /// for the handle).
    #[inline]
    fn push(
        &mut self,
        cursor: &mut ChunkCursor,
        shared: &Arc<Shared>,
        shard: u8,
        task: Box<dyn TimerTask>,
        deadline: u64,
    ) -> TimeoutState {
        // A shard's batch is never partly taken: the worker swaps it out whole.
        debug_assert_eq!(self.drained, 0);
        let at = self.tasks.len();
        let state = cursor.next_state(shared, shard, &mut self.runs, at);
        self.tasks.push(task);
        self.deadlines.push(deadline);
        state
    }

    pub(crate) fn len(&self) -> usize {
        self.tasks.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.tasks.capacity()
    }

    /// Gives each run its chunk id, in push order (a chunk may recur), unless done already.
    /// The ids' vector keeps its room across the batch's uses: nothing is allocated.
    pub(crate) fn assign_chunk_ids(&mut self, mut id_of: impl FnMut(&ChunkRef) -> u32) {
        if self.chunk_ids.len() != self.runs.len() {
            debug_assert!(self.chunk_ids.is_empty());
            self.chunk_ids
                .extend(self.runs.iter().map(|run| id_of(&run.chunk)));
        }
    }

    /// Removes the first `n` timeouts, in order: task, run index, cell index and deadline of
    /// each, with the runs and the chunk ids the run indexes refer to.
    #[allow(clippy::type_complexity)]
    pub(crate) fn drain_front(
        &mut self,
        n: usize,
    ) -> (
        impl Iterator<Item = (Box<dyn TimerTask>, (usize, u8), u64)> + '_,
        &[Run],
        &[u32],
    ) {
        let cells = RunCursor::new(&self.runs, self.drained);
        self.drained += n;
        let drained = self
            .tasks
            .drain(..n)
            .zip(cells)
            .zip(self.deadlines.drain(..n))
            .map(|((task, cell), deadline)| (task, cell, deadline));
        (drained, &self.runs, &self.chunk_ids)
    }

    /// Once every timeout is out: hands the runs' chunks to `release`, keeping the room.
    pub(crate) fn clear_runs(&mut self, release: impl FnMut(ChunkRef)) {
        debug_assert!(self.tasks.is_empty());
        self.runs.drain(..).map(|run| run.chunk).for_each(release);
        self.chunk_ids.clear();
        self.drained = 0;
    }

    /// The states, in order; the tasks are dropped.
    pub(crate) fn into_states(self) -> Vec<TimeoutState> {
        RunCursor::new(&self.runs, self.drained)
            .take(self.tasks.len())
            .map(|(run, idx)| self.runs[run].chunk.state(idx))
            .collect()
    }
}

impl Batch for PendingBatch {
    #[inline]
    fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }
    fn append(&mut self, other: &mut Self) {
        // Only batches fresh from a shard are appended (`Queue::take_all`), and to one the
        // worker has not started on; positions carry over shifted by what is already here.
        debug_assert!(
            other.drained == 0 && self.chunk_ids.is_empty() && other.chunk_ids.is_empty()
        );
        let offset = self.drained + self.tasks.len();
        self.tasks.append(&mut other.tasks);
        self.deadlines.append(&mut other.deadlines);
        self.runs.extend(other.runs.drain(..).map(|mut run| {
            run.first += offset;
            run
        }));
    }
}

/// What a shard of the `timeouts` queue keeps for its producers, under its lock.
#[derive(Default)]
pub(crate) struct ProducerShard {
    /// Pending-count credit (see `Shared::refill_credit`).
    credit: usize,
    /// Where the shard's timeouts get their states (and the spare chunks the worker hands
    /// back).
    pub(crate) cursor: ChunkCursor,
}

/// What the owner, the handles, the timeouts and the worker share.
pub(crate) struct Shared {
    /// Accepted timeouts not yet expired and whose cancellation is not processed yet. Written
    /// by every producer and the worker: on a cache line of its own, away from the read-mostly
    /// fields below and from the `Arc`'s reference counts.
    pub(crate) pending: CachePadded<AtomicUsize>,
    /// Each shard's data: its pending-count credit, its chunk of timeout states and spares.
    pub(crate) timeouts: Queue<PendingBatch, ProducerShard>,
    pub(crate) cancelled: Queue<Vec<TimeoutState>>,
    state: AtomicU8,
    /// The tick at whose end the worker will next wake by itself; `AWAKE` while it runs,
    /// `u64::MAX` when it parks with no deadline. See `worker::run`.
    pub(crate) planned: AtomicU64,
    /// The worker's current tick (diagnostics, and the cancel path's wake-up check).
    pub(crate) tick: AtomicU64,
    pub(crate) wakeups: AtomicU64,
    pub(crate) tick_nanos: u64,
    pub(crate) wheel_len: usize,
    pub(crate) max_pending: usize,
    thread_name: String,
    pub(crate) clock: Clock,
    manual: bool,
    control: Mutex<Control>,
    /// The worker while no thread runs it: before start, in manual mode, after stop.
    pub(crate) idle_worker: Mutex<Option<Worker>>,
    /// Set when the owner was dropped on the worker thread (inside a task): nobody will call
    /// `stop()` to take the worker, so a `ManualDriver` may drop it.
    drained: AtomicBool,
    counted: crate::sync::process::AtomicBool,
}

#[derive(Default)]
struct Control {
    join: Option<thread::JoinHandle<Worker>>,
    worker_thread: Option<thread::Thread>,
    /// The thread running the worker right now (the worker thread, or a driver's caller).
    worker_id: Option<thread::ThreadId>,
}

impl Shared {
    #[inline]
    pub(crate) fn is_shutdown(&self) -> bool {
        self.state.load(Ordering::Acquire) == SHUTDOWN
    }

    #[inline]
    pub(crate) fn new_timeout(
        self: &Arc<Self>,
        task: Box<dyn TimerTask>,
        delay: Duration,
    ) -> Result<Timeout, TimerError> {
        // Acquire: pairs with the Release that publishes STARTED in `start_slow`.
        if self.state.load(Ordering::Acquire) != STARTED {
            self.start_slow()?;
        }
        let now = self.clock.now_upper();
        let deadline = now.saturating_add(duration_to_nanos(delay));
        let limited = self.max_pending != 0;
        if limited {
            self.reserve_limited()?;
        }
        let state = {
            let mut shard = self.timeouts.my_shard();
            let shard_index = shard.index();
            let (producer, items) = shard.parts();
            // Relaxed, under the lock: `stop()` sets SHUTDOWN before it takes each shard and
            // clears its chunk, so once it has taken this one we see SHUTDOWN here, and push
            // nothing (it would never be drained) and start no chunk (see `ChunkCursor`).
            if self.state.load(Ordering::Relaxed) == SHUTDOWN {
                if limited {
                    self.pending.fetch_sub(1, Ordering::Relaxed);
                }
                return Err(TimerError::Stopped);
            }
            if !limited {
                if producer.credit == 0 {
                    producer.credit = self.refill_credit()?;
                }
                producer.credit -= 1;
            }
            items.push(&mut producer.cursor, self, shard_index, task, deadline)
        };
        // Nothing to re-check against `stop()`: it sets SHUTDOWN before it takes each shard,
        // so a push either came before its take (and `stop()` returns this timeout, cancelled,
        // as it does every timeout that never ran) or we saw SHUTDOWN under the lock above.
        // No fence before the worker's plan is read either: the worker publishes its plan
        // before it looks at the shards under their locks, so it sees our entry or we see its
        // plan (see `sync::Queue`).
        self.wake_by_end_of_tick_at(now);
        Ok(Timeout { state })
    }

    /// Counts one more pending timeout against `max_pending`, or refuses.
    #[inline]
    fn reserve_limited(&self) -> Result<(), TimerError> {
        // Relaxed: a pure counter; whoever needs to see it settle synchronises through its own
        // means (a task's side effect, a join).
        let mut cur = self.pending.load(Ordering::Relaxed);
        loop {
            if cur >= self.max_pending {
                return Err(self.too_many(cur));
            }
            match self.pending.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Without a pending limit, producers count their timeouts in `pending` by batches of
    /// `CREDIT_BATCH`, kept as credit in their shard of the queue: one shared read-modify-write
    /// per batch instead of one per timeout (on the line every producer and the worker write).
    /// The wheel's key space still bounds the count: the last batches shrink to what is left.
    #[cold]
    fn refill_credit(&self) -> Result<usize, TimerError> {
        // Relaxed: see `reserve_limited`.
        let mut cur = self.pending.load(Ordering::Relaxed);
        loop {
            let room = MAX_ENTRIES.saturating_sub(cur);
            if room == 0 {
                // The wheel's key space (2^27 - 1 entries, ~6 GB of them): never reached in
                // practice, but refused rather than overflowed.
                return Err(TimerError::TooManyPending {
                    pending: self.counted(),
                    max: MAX_ENTRIES,
                });
            }
            let take = room.min(CREDIT_BATCH);
            match self.pending.compare_exchange_weak(
                cur,
                cur + take,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(take),
                Err(actual) => cur = actual,
            }
        }
    }

    #[cold]
    fn too_many(&self, pending: usize) -> TimerError {
        TimerError::TooManyPending {
            pending,
            max: self.max_pending,
        }
    }

    /// A successful `cancel()`: queue the state for the worker and make sure it runs by the end
    /// of its current tick.
    #[inline]
    pub(crate) fn cancelled(&self, state: TimeoutState) {
        // No fence: as in `new_timeout`, the queue's lock orders the push before the load of
        // the worker's plan.
        self.cancelled.push(state);
        // Relaxed: a stale (lower) tick only makes us more eager to wake the worker.
        self.wake_by(self.tick.load(Ordering::Relaxed));
    }

    /// `wake_by` for the tick that contains `now`, without a division on the common path: the
    /// worker's plan `p` is past that tick exactly when `p * tick_nanos > now`.
    #[inline]
    fn wake_by_end_of_tick_at(&self, now: u64) {
        // SeqCst: as in `wake_by`, which this only screens for.
        let planned = self.planned.load(Ordering::SeqCst);
        if planned != AWAKE && planned.saturating_mul(self.tick_nanos) > now {
            self.wake_by(now / self.tick_nanos);
        }
    }

    /// Makes sure the worker wakes by the end of `tick`: if it plans to sleep past it, lower its
    /// plan and unpark it. Only the producer whose compare-and-swap lowers the plan unparks, so a
    /// burst of producers costs one wake-up.
    #[inline]
    fn wake_by(&self, tick: u64) {
        // SeqCst: the plan is one word that the worker and every producer write; keeping all
        // of its accesses in one total order keeps the reasoning simple (and costs nothing on
        // the load side on x86). The hand-over with the worker is ordered by the queue locks.
        let mut planned = self.planned.load(Ordering::SeqCst);
        while planned > tick && planned != AWAKE {
            match self.planned.compare_exchange_weak(
                planned,
                tick,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    self.unpark_worker();
                    return;
                }
                Err(actual) => planned = actual,
            }
        }
    }

    #[cold]
    fn unpark_worker(&self) {
        if let Some(t) = &lock(&self.control).worker_thread {
            t.unpark();
        }
    }

    #[cold]
    pub(crate) fn start_slow(self: &Arc<Self>) -> Result<(), TimerError> {
        let mut control = lock(&self.control);
        match self.state.load(Ordering::Acquire) {
            STARTED => return Ok(()),
            SHUTDOWN => return Err(TimerError::Stopped),
            _ => {}
        }
        if !self.manual {
            let mut worker = lock(&self.idle_worker)
                .take()
                .expect("an unstarted timer holds its worker");
            worker.set_tick(self.clock.now() / self.tick_nanos);
            let shared = Arc::clone(self);
            let join = thread::Builder::new()
                .name(self.thread_name.clone())
                .spawn(move || worker::run(worker, shared))
                .unwrap_or_else(|e| {
                    panic!("hashed-timer-wheel: cannot spawn the worker thread: {e}")
                });
            control.worker_thread = Some(join.thread().clone());
            control.worker_id = Some(join.thread().id());
            control.join = Some(join);
        }
        // Release: pairs with the Acquire in `new_timeout`.
        self.state.store(STARTED, Ordering::Release);
        Ok(())
    }

    pub(crate) fn on_worker_thread(&self) -> bool {
        lock(&self.control).worker_id == Some(thread::current().id())
    }

    pub(crate) fn set_worker_id(&self, id: Option<thread::ThreadId>) {
        lock(&self.control).worker_id = id;
    }

    pub(crate) fn stop(self: &Arc<Self>) -> Result<Vec<Timeout>, TimerError> {
        if self.on_worker_thread() {
            return Err(TimerError::StopFromWorker);
        }
        let (prev, join) = {
            let mut control = lock(&self.control);
            let prev = self.state.swap(SHUTDOWN, Ordering::SeqCst);
            (prev, control.join.take())
        };
        if prev == SHUTDOWN {
            return Ok(Vec::new());
        }
        self.uncount();
        let worker = match join {
            Some(join) => {
                join.thread().unpark();
                // The worker thread returns its wheel when it leaves its loop. It cannot panic
                // (tasks run under catch_unwind); if it did, its timeouts are lost with it.
                join.join().ok()
            }
            // Not started, or manual: waits for a driver that is advancing.
            None => lock(&self.idle_worker).take(),
        };
        let mut out = Vec::new();
        let mut give_back = |state: TimeoutState| {
            if state.try_cancel() {
                out.push(Timeout { state });
            }
        };
        if let Some(mut worker) = worker {
            for state in worker.drain() {
                give_back(state);
            }
        }
        // Take the buffers themselves, so that their memory goes too. A producer that locks a
        // shard after this take sees SHUTDOWN (set above) and pushes nothing: nothing stays
        // queued, where a task holding a handle would keep the timer alive.
        let queued = self.timeouts.take_all();
        // The shards' current and spare chunks hold handles on this timer: let them go (a
        // producer that locks a shard after this sees SHUTDOWN and starts no chunk; the worker,
        // handing spares over under the same lock, sees it too and hands none).
        self.timeouts.for_each_data(|p| p.cursor.clear());
        for state in queued.into_states() {
            give_back(state);
        }
        drop(self.cancelled.take_all());
        Ok(out)
    }

    /// Dropping the owner on the worker thread (inside a task): stop without waiting for
    /// ourselves. The worker leaves its loop after the running task and drops its wheel.
    fn shutdown_from_worker(&self) {
        let join = {
            let mut control = lock(&self.control);
            self.state.store(SHUTDOWN, Ordering::SeqCst);
            control.join.take()
        };
        // Release: pairs with the Acquires in `advance_to_nanos`.
        self.drained.store(true, Ordering::Release);
        self.uncount();
        // Detach: the thread's result (its wheel) is dropped when it finishes.
        drop(join);
        // Nobody will drain the queues: do it now, so that queued tasks holding a handle on
        // this timer do not keep it alive in a cycle.
        for state in self.timeouts.take_all().into_states() {
            state.try_cancel();
        }
        self.timeouts.for_each_data(|p| p.cursor.clear());
        drop(self.cancelled.take_all());
    }

    fn uncount(&self) {
        if self.counted.swap(false, Ordering::Relaxed) {
            INSTANCES.fetch_sub(1, Ordering::Relaxed);
        }
    }

    #[inline]
    pub(crate) fn pending_timeouts(&self) -> usize {
        if self.is_shutdown() {
            0
        } else {
            self.counted()
        }
    }

    /// Timeouts counted as pending: `pending` less the credit the queue's shards hold. Exact
    /// when nothing runs concurrently; under concurrent scheduling it can be off by what is in
    /// flight, as Netty's counter is.
    fn counted(&self) -> usize {
        // Credit first: a refill seen in a shard is then seen in `pending` too (the refill's
        // increment is made under the shard's lock, which our read took after it).
        let credit = self.timeouts.fold_data(0, |sum, p| sum + p.credit);
        // Relaxed: see `reserve_limited`.
        self.pending.load(Ordering::Relaxed).saturating_sub(credit)
    }
}

/// A cheap, cloneable reference to a timer, as returned by [`Timeout::timer`] and
/// [`HashedWheelTimer::handle`].
///
/// A handle schedules and stops exactly like the owner, but does not own the timer: when the
/// [`HashedWheelTimer`] is dropped the worker stops, and handles get [`TimerError::Stopped`].
/// Holding handles therefore never keeps a worker thread alive.
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, TimerError};
/// use std::time::Duration;
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(10), 64);
/// let handle = timer.handle();
/// handle.new_timeout(|_: &_| {}, Duration::from_millis(5)).unwrap();
/// drop(timer);
/// assert_eq!(handle.new_timeout(|_: &_| {}, Duration::ZERO).unwrap_err(), TimerError::Stopped);
/// ```
#[derive(Clone)]
pub struct TimerHandle {
    pub(crate) shared: Arc<Shared>,
}

impl TimerHandle {
    /// Schedules `task` to run once after `delay`. See [`HashedWheelTimer::new_timeout`].
    ///
    /// # Errors
    /// [`TimerError::Stopped`] after `stop()` or once the owner is dropped;
    /// [`TimerError::TooManyPending`] at the pending limit.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::default();
    /// let t = timer.handle().new_timeout(|_: &_| {}, Duration::from_secs(1)).unwrap();
    /// t.cancel();
    /// ```
    #[inline]
    pub fn new_timeout<T: TimerTask>(
        &self,
        task: T,
        delay: Duration,
    ) -> Result<Timeout, TimerError> {
        self.shared.new_timeout(Box::new(task), delay)
    }

    /// Stops the timer. See [`HashedWheelTimer::stop`].
    ///
    /// # Errors
    /// [`TimerError::StopFromWorker`] when called from inside a task on the worker thread.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// let timer = HashedWheelTimer::default();
    /// assert!(timer.handle().stop().unwrap().is_empty());
    /// assert!(timer.is_stopped());
    /// ```
    pub fn stop(&self) -> Result<Vec<Timeout>, TimerError> {
        self.shared.stop()
    }

    /// Timeouts accepted and neither expired nor processed as cancelled. See
    /// [`HashedWheelTimer::pending_timeouts`].
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// let timer = HashedWheelTimer::default();
    /// assert_eq!(timer.handle().pending_timeouts(), 0);
    /// ```
    pub fn pending_timeouts(&self) -> usize {
        self.shared.pending_timeouts()
    }

    /// Whether the timer has been stopped (or its owner dropped).
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// let timer = HashedWheelTimer::default();
    /// let handle = timer.handle();
    /// drop(timer);
    /// assert!(handle.is_stopped());
    /// ```
    pub fn is_stopped(&self) -> bool {
        self.shared.is_shutdown()
    }
}

impl fmt::Debug for TimerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_shared(&self.shared, f.debug_struct("TimerHandle"))
    }
}

fn debug_shared(s: &Shared, mut d: fmt::DebugStruct<'_, '_>) -> fmt::Result {
    let state = match s.state.load(Ordering::Relaxed) {
        INIT => "not started",
        STARTED => "started",
        _ => "stopped",
    };
    d.field("state", &state)
        .field("tick_duration", &Duration::from_nanos(s.tick_nanos))
        .field("wheel_len", &s.wheel_len)
        .field("pending", &s.counted())
        .field("max_pending", &s.max_pending)
        .finish_non_exhaustive()
}

/// Netty's `Timer` interface: code that takes "any timer" takes `&dyn Timer` or `impl Timer`.
///
/// Implemented by [`HashedWheelTimer`] and [`TimerHandle`]; implement it for a fake to test code
/// that schedules work. The task is boxed so that the trait stays object-safe; the inherent
/// `new_timeout` methods take any `TimerTask` unboxed.
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, Timeout, Timer, TimerError};
/// use std::time::Duration;
///
/// fn arm_idle_check(timer: &dyn Timer) -> Result<Timeout, TimerError> {
///     timer.new_timeout(Box::new(|_: &Timeout| println!("idle")), Duration::from_secs(60))
/// }
///
/// let timer = HashedWheelTimer::default();
/// arm_idle_check(&timer).unwrap().cancel();
/// ```
pub trait Timer: Send + Sync {
    /// Schedules `task` to run once after `delay`.
    ///
    /// # Errors
    /// As [`HashedWheelTimer::new_timeout`].
    fn new_timeout(&self, task: Box<dyn TimerTask>, delay: Duration)
        -> Result<Timeout, TimerError>;

    /// Stops the timer and returns the timeouts that never ran, now cancelled.
    ///
    /// # Errors
    /// As [`HashedWheelTimer::stop`].
    fn stop(&self) -> Result<Vec<Timeout>, TimerError>;

    /// Timeouts accepted and neither expired nor processed as cancelled.
    fn pending_timeouts(&self) -> usize;
}

impl Timer for TimerHandle {
    fn new_timeout(
        &self,
        task: Box<dyn TimerTask>,
        delay: Duration,
    ) -> Result<Timeout, TimerError> {
        self.shared.new_timeout(task, delay)
    }
    fn stop(&self) -> Result<Vec<Timeout>, TimerError> {
        self.shared.stop()
    }
    fn pending_timeouts(&self) -> usize {
        self.shared.pending_timeouts()
    }
}

impl Timer for HashedWheelTimer {
    fn new_timeout(
        &self,
        task: Box<dyn TimerTask>,
        delay: Duration,
    ) -> Result<Timeout, TimerError> {
        self.shared.new_timeout(task, delay)
    }
    fn stop(&self) -> Result<Vec<Timeout>, TimerError> {
        self.shared.stop()
    }
    fn pending_timeouts(&self) -> usize {
        self.shared.pending_timeouts()
    }
}

impl TimerTask for Box<dyn TimerTask> {
    fn run(self: Box<Self>, timeout: &Timeout) {
        (*self).run(timeout)
    }
}

/// Counters about the worker, for monitoring and for tests that check it sleeps when idle.
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, Timeout};
/// use std::time::Duration;
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
/// timer.new_timeout(|_: &Timeout| {}, Duration::from_secs(3600)).unwrap();
/// std::thread::sleep(Duration::from_millis(100));
/// // Netty's worker would have woken about 100 times by now; this one woke to move the timeout
/// // into its bucket, and sleeps until the hour is up.
/// assert!(timer.stats().wakeups < 10);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TimerStats {
    /// Times the worker thread woke from sleeping (timer elapsed or unparked).
    pub wakeups: u64,
    /// The worker's current tick: the next tick it will process (or the one it is processing).
    pub tick: u64,
}

/// A hashed wheel timer: Netty's `HashedWheelTimer`, with the same contract and timing.
///
/// The owner of the timer. It is `Send + Sync`: share it behind an `Arc`, or hand out cheap
/// [`TimerHandle`]s (which do not keep it alive). Dropping the owner stops the worker thread
/// and drops every task that never ran; no thread outlives the timer.
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, Timeout};
/// use std::sync::mpsc;
/// use std::time::Duration;
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(10), 512);
/// let (tx, rx) = mpsc::channel();
/// timer.new_timeout(move |_: &Timeout| tx.send("fired").unwrap(), Duration::from_millis(20))?;
/// assert_eq!(rx.recv().unwrap(), "fired");
/// # Ok::<(), hashed_timer_wheel::TimerError>(())
/// ```
pub struct HashedWheelTimer {
    pub(crate) shared: Arc<Shared>,
}

impl HashedWheelTimer {
    /// A timer with the given tick and wheel size, tasks run on its worker thread, no pending
    /// limit. `ticks_per_wheel` is rounded up to a power of two; a tick below 1 ms becomes 1 ms
    /// (with a warning in the log).
    ///
    /// # Panics
    /// On a zero tick, a zero or above-2^30 `ticks_per_wheel`, or a tick times wheel length that
    /// overflows 64-bit nanoseconds. Use [`HashedWheelTimer::builder`] to get these as errors.
    ///
    /// ```
    /// use hashed_timer_wheel::HashedWheelTimer;
    /// use std::time::Duration;
    ///
    /// let timer = HashedWheelTimer::new(Duration::from_millis(100), 500);
    /// assert_eq!(timer.wheel_len(), 512);
    /// ```
    pub fn new(tick_duration: Duration, ticks_per_wheel: usize) -> HashedWheelTimer {
        Builder::new()
            .tick_duration(tick_duration)
            .ticks_per_wheel(ticks_per_wheel)
            .build()
            .unwrap_or_else(|e| panic!("invalid HashedWheelTimer arguments: {e}"))
    }

    /// A builder for every option.
    ///
    /// ```
    /// use hashed_timer_wheel::HashedWheelTimer;
    /// use std::time::Duration;
    ///
    /// let timer = HashedWheelTimer::builder()
    ///     .tick_duration(Duration::from_millis(10))
    ///     .ticks_per_wheel(1024)
    ///     .max_pending_timeouts(100_000)
    ///     .thread_name("request-timeouts")
    ///     .build()?;
    /// # Ok::<(), hashed_timer_wheel::BuildError>(())
    /// ```
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// Schedules `task` to run once, on the worker thread (or the executor), after `delay`.
    ///
    /// The task runs no earlier than `delay` from now and, unless the worker is overloaded,
    /// at most about one tick later. `Duration::ZERO` runs it on the next tick;
    /// `Duration::MAX` never (the deadline saturates, it does not wrap). The first call starts
    /// the worker thread.
    ///
    /// # Errors
    /// [`TimerError::Stopped`] once the timer is stopped (checked first);
    /// [`TimerError::TooManyPending`] when `max_pending_timeouts` timeouts are pending. A refused
    /// call changes nothing.
    ///
    /// ```
    /// use hashed_timer_wheel::{HashedWheelTimer, Timeout};
    /// use std::time::Duration;
    ///
    /// let timer = HashedWheelTimer::new(Duration::from_millis(10), 64);
    /// let request_timeout = timer.new_timeout(
    ///     |_: &Timeout| eprintln!("request timed out"),
    ///     Duration::from_secs(5),
    /// )?;
    /// // The response arrived in time:
    /// request_timeout.cancel();
    /// # Ok::<(), hashed_timer_wheel::TimerError>(())
    /// ```
    #[inline]
    pub fn new_timeout<T: TimerTask>(
        &self,
        task: T,
        delay: Duration,
    ) -> Result<Timeout, TimerError> {
        self.shared.new_timeout(Box::new(task), delay)
    }

    /// Starts the worker thread now rather than on the first `new_timeout`. Starting a started
    /// timer does nothing.
    ///
    /// # Errors
    /// [`TimerError::Stopped`] once the timer is stopped.
    ///
    /// # Panics
    /// If the operating system refuses to create the thread.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// let timer = HashedWheelTimer::default();
    /// timer.start().unwrap();
    /// timer.start().unwrap();
    /// ```
    pub fn start(&self) -> Result<(), TimerError> {
        if self.shared.state.load(Ordering::Acquire) == STARTED {
            return Ok(());
        }
        self.shared.start_slow()
    }

    /// Stops the timer for good and returns every timeout that had neither expired nor been
    /// cancelled, each now cancelled (their tasks are dropped), in no particular order (as
    /// Netty's `Set`).
    ///
    /// Wakes the worker and waits for the task it is running, if any. Before start, or when
    /// already stopped, returns an empty list. Afterwards `new_timeout` and `start` return
    /// [`TimerError::Stopped`] and `pending_timeouts()` is 0.
    ///
    /// # Errors
    /// [`TimerError::StopFromWorker`] when called from a task running on the worker thread (it
    /// would wait for itself). The timer keeps running.
    ///
    /// ```
    /// use hashed_timer_wheel::HashedWheelTimer;
    /// use std::time::Duration;
    ///
    /// let timer = HashedWheelTimer::new(Duration::from_millis(10), 64);
    /// let t = timer.new_timeout(|_: &_| {}, Duration::from_secs(60)).unwrap();
    /// let never_ran = timer.stop().unwrap();
    /// assert_eq!(never_ran, vec![t.clone()]);
    /// assert!(t.is_cancelled());
    /// ```
    #[must_use = "the returned timeouts never ran; ignore them explicitly if that is intended"]
    pub fn stop(&self) -> Result<Vec<Timeout>, TimerError> {
        self.shared.stop()
    }

    /// Timeouts accepted that have neither expired nor had their cancellation processed: the
    /// memory the timer holds, which `max_pending_timeouts` bounds. 0 after `stop()`.
    ///
    /// Exact whenever no other thread is scheduling at that moment; while others are, it may
    /// count a few of their timeouts early or late (as Netty's counter may). Without a pending
    /// limit producers count in batches (see the performance notes in `benches/README.md`), so
    /// this call takes a lock per queue shard: a statistic, not a hot-path call.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::default();
    /// let t = timer.new_timeout(|_: &_| {}, Duration::from_secs(60)).unwrap();
    /// assert_eq!(timer.pending_timeouts(), 1);
    /// ```
    #[inline]
    pub fn pending_timeouts(&self) -> usize {
        self.shared.pending_timeouts()
    }

    /// A cheap handle that schedules on this timer without owning it.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// let timer = HashedWheelTimer::default();
    /// let handle = timer.handle();
    /// assert!(!handle.is_stopped());
    /// ```
    pub fn handle(&self) -> TimerHandle {
        TimerHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Whether the timer has been stopped.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// let timer = HashedWheelTimer::default();
    /// let _ = timer.stop();
    /// assert!(timer.is_stopped());
    /// ```
    pub fn is_stopped(&self) -> bool {
        self.shared.is_shutdown()
    }

    /// The tick duration in use (after the 1 ms clamp).
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_micros(10), 8);
    /// assert_eq!(timer.tick_duration(), Duration::from_millis(1));
    /// ```
    pub fn tick_duration(&self) -> Duration {
        Duration::from_nanos(self.shared.tick_nanos)
    }

    /// The number of buckets: `ticks_per_wheel` rounded up to a power of two.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// assert_eq!(HashedWheelTimer::new(Duration::from_millis(1), 3).wheel_len(), 4);
    /// ```
    pub fn wheel_len(&self) -> usize {
        self.shared.wheel_len
    }

    /// Counters about the worker (wake-ups, current tick).
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// let timer = HashedWheelTimer::default();
    /// assert_eq!(timer.stats().wakeups, 0, "not started: never woke");
    /// ```
    pub fn stats(&self) -> TimerStats {
        TimerStats {
            wakeups: self.shared.wakeups.load(Ordering::Relaxed),
            tick: self.shared.tick.load(Ordering::Relaxed),
        }
    }
}

impl Default for HashedWheelTimer {
    /// 100 ms tick, 512 buckets: Netty's defaults.
    fn default() -> Self {
        Builder::new().build().expect("the defaults are valid")
    }
}

impl Drop for HashedWheelTimer {
    fn drop(&mut self) {
        if self.shared.on_worker_thread() {
            self.shared.shutdown_from_worker();
        } else {
            // Cannot fail off the worker thread; what never ran is dropped.
            let _ = self.shared.stop();
        }
    }
}

impl fmt::Debug for HashedWheelTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_shared(&self.shared, f.debug_struct("HashedWheelTimer"))
    }
}

/// Builds a [`HashedWheelTimer`]; every invalid argument is reported by
/// [`build`](Builder::build) as a [`BuildError`], never a panic.
///
/// ```
/// use hashed_timer_wheel::{BuildError, HashedWheelTimer};
/// use std::time::Duration;
///
/// let err = HashedWheelTimer::builder().ticks_per_wheel(0).build().unwrap_err();
/// assert_eq!(err, BuildError::ZeroTicksPerWheel);
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct Builder {
    tick: Duration,
    ticks_per_wheel: usize,
    max_pending: usize,
    thread_name: String,
    executor: Option<Executor>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// Netty's defaults: 100 ms tick, 512 buckets, no pending limit, tasks on the worker thread.
    ///
    /// ```
    /// let timer = hashed_timer_wheel::Builder::new().build().unwrap();
    /// assert_eq!(timer.wheel_len(), 512);
    /// ```
    pub fn new() -> Builder {
        Builder {
            tick: Duration::from_millis(100),
            ticks_per_wheel: 512,
            max_pending: 0,
            thread_name: "hashed-wheel-timer".to_owned(),
            executor: None,
        }
    }

    /// The duration of one tick: the timer's resolution. Below 1 ms it is raised to 1 ms.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = hashed_timer_wheel::HashedWheelTimer::builder().tick_duration(Duration::from_millis(1));
    /// ```
    pub fn tick_duration(mut self, tick: Duration) -> Builder {
        self.tick = tick;
        self
    }

    /// The number of buckets, rounded up to a power of two (1 to 2^30).
    ///
    /// ```
    /// let b = hashed_timer_wheel::HashedWheelTimer::builder().ticks_per_wheel(1024);
    /// ```
    pub fn ticks_per_wheel(mut self, ticks: usize) -> Builder {
        self.ticks_per_wheel = ticks;
        self
    }

    /// At most this many timeouts pending at once; `new_timeout` refuses the next one with
    /// [`TimerError::TooManyPending`]. 0 (the default) means no limit of your own; a timer
    /// never holds more than 134 217 727 (2^27 - 1) pending timeouts, the size of its wheel's
    /// key space (some 6 GB of them).
    ///
    /// ```
    /// let b = hashed_timer_wheel::HashedWheelTimer::builder().max_pending_timeouts(10_000);
    /// ```
    pub fn max_pending_timeouts(mut self, max: usize) -> Builder {
        self.max_pending = max;
        self
    }

    /// The worker thread's name (default `hashed-wheel-timer`).
    ///
    /// ```
    /// let b = hashed_timer_wheel::HashedWheelTimer::builder().thread_name("idle-detector");
    /// ```
    pub fn thread_name(mut self, name: impl Into<String>) -> Builder {
        self.thread_name = name.into();
        self
    }

    /// Hands expired tasks to `executor` instead of running them on the worker thread. A panic
    /// in `executor` (a refusal) is logged; the timeout stays expired.
    ///
    /// ```
    /// use hashed_timer_wheel::HashedWheelTimer;
    ///
    /// // Run every task on a thread of its own.
    /// let timer = HashedWheelTimer::builder()
    ///     .executor(|job: Box<dyn FnOnce() + Send>| {
    ///         std::thread::spawn(job);
    ///     })
    ///     .build()
    ///     .unwrap();
    /// ```
    pub fn executor<E>(mut self, executor: E) -> Builder
    where
        E: Fn(Box<dyn FnOnce() + Send>) + Send + Sync + 'static,
    {
        self.executor = Some(Arc::new(executor));
        self
    }

    /// Checks the arguments and builds the timer. No thread starts until the first
    /// `new_timeout` (or `start`).
    ///
    /// # Errors
    /// A [`BuildError`] for a zero tick, a zero or above-2^30 `ticks_per_wheel`, or a tick times
    /// wheel length that overflows 64-bit nanoseconds.
    ///
    /// ```
    /// use hashed_timer_wheel::{BuildError, HashedWheelTimer};
    /// use std::time::Duration;
    ///
    /// assert_eq!(
    ///     HashedWheelTimer::builder().tick_duration(Duration::ZERO).build().unwrap_err(),
    ///     BuildError::ZeroTickDuration,
    /// );
    /// ```
    pub fn build(self) -> Result<HashedWheelTimer, BuildError> {
        #[cfg(not(loom))]
        let clock = Clock::system();
        #[cfg(loom)]
        let clock = Clock::manual();
        self.build_with(clock, false)
            .map(|shared| HashedWheelTimer { shared })
    }

    /// Builds a timer driven by hand, for deterministic tests: no worker thread, and time moves
    /// only when the returned [`ManualDriver`] advances it, running the due tasks on the
    /// caller's thread. The clock starts at zero.
    ///
    /// # Errors
    /// As [`build`](Builder::build).
    ///
    /// ```
    /// use hashed_timer_wheel::{HashedWheelTimer, Timeout};
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let (timer, driver) = HashedWheelTimer::builder()
    ///     .tick_duration(Duration::from_millis(10))
    ///     .build_manual()?;
    /// let fired = Arc::new(AtomicBool::new(false));
    /// let f = fired.clone();
    /// timer.new_timeout(move |_: &Timeout| f.store(true, Ordering::SeqCst), Duration::from_millis(25)).unwrap();
    /// driver.advance(Duration::from_millis(25));
    /// assert!(!fired.load(Ordering::SeqCst), "due at 25 ms, fires at the end of tick 2 (30 ms)");
    /// driver.advance(Duration::from_millis(5));
    /// assert!(fired.load(Ordering::SeqCst));
    /// # Ok::<(), hashed_timer_wheel::BuildError>(())
    /// ```
    pub fn build_manual(self) -> Result<(HashedWheelTimer, ManualDriver), BuildError> {
        let shared = self.build_with(Clock::manual(), true)?;
        let driver = ManualDriver {
            shared: Arc::clone(&shared),
        };
        Ok((HashedWheelTimer { shared }, driver))
    }

    fn build_with(self, clock: Clock, manual: bool) -> Result<Arc<Shared>, BuildError> {
        if self.tick.is_zero() {
            return Err(BuildError::ZeroTickDuration);
        }
        if self.ticks_per_wheel == 0 {
            return Err(BuildError::ZeroTicksPerWheel);
        }
        if self.ticks_per_wheel > MAX_TICKS_PER_WHEEL {
            return Err(BuildError::TooManyTicksPerWheel {
                requested: self.ticks_per_wheel,
            });
        }
        let wheel_len = normalize_ticks_per_wheel(self.ticks_per_wheel);
        let mut tick = self.tick;
        if tick < Duration::from_millis(1) {
            log::warn!("configured tick duration {tick:?} is smaller than 1 ms, using 1 ms");
            tick = Duration::from_millis(1);
        }
        let tick_nanos = u64::try_from(tick.as_nanos())
            .ok()
            .filter(|n| n.checked_mul(wheel_len as u64).is_some())
            .ok_or(BuildError::TickOverflow {
                tick_duration: tick,
                wheel_len,
            })?;

        let live = INSTANCES.fetch_add(1, Ordering::Relaxed) + 1;
        if live > INSTANCE_COUNT_LIMIT && !WARNED_TOO_MANY.swap(true, Ordering::Relaxed) {
            log::error!(
                "you are creating too many HashedWheelTimer instances ({live} live). \
                 HashedWheelTimer is a shared resource that must be reused across the process, \
                 so that only a few instances are created"
            );
        }

        Ok(Arc::new(Shared {
            pending: CachePadded::new(AtomicUsize::new(0)),
            timeouts: Queue::new(),
            cancelled: Queue::new(),
            state: AtomicU8::new(INIT),
            planned: AtomicU64::new(AWAKE),
            tick: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            tick_nanos,
            wheel_len,
            // The wheel's key space bounds any limit.
            max_pending: self.max_pending.min(MAX_ENTRIES),
            thread_name: self.thread_name,
            clock,
            manual,
            control: Mutex::new(Control::default()),
            idle_worker: Mutex::new(Some(Worker::new(tick_nanos, wheel_len, self.executor))),
            drained: AtomicBool::new(false),
            counted: crate::sync::process::AtomicBool::new(true),
        }))
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("tick_duration", &self.tick)
            .field("ticks_per_wheel", &self.ticks_per_wheel)
            .field("max_pending_timeouts", &self.max_pending)
            .field("thread_name", &self.thread_name)
            .field("executor", &self.executor.is_some())
            .finish()
    }
}

/// Drives a timer built with [`Builder::build_manual`]: moves its clock and runs due work on the
/// calling thread. Cloneable; clones drive the same timer.
///
/// Each advance runs, for every tick whose end has been reached, Netty's tick in Netty's order:
/// process cancellations, move queued timeouts into buckets, expire the tick's bucket.
#[derive(Clone)]
pub struct ManualDriver {
    shared: Arc<Shared>,
}

impl ManualDriver {
    /// Moves the clock forward by `by` and runs everything that became due.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let (timer, driver) = HashedWheelTimer::builder().build_manual().unwrap();
    /// driver.advance(Duration::from_millis(250));
    /// assert_eq!(driver.now(), Duration::from_millis(250));
    /// ```
    pub fn advance(&self, by: Duration) {
        let to = self
            .shared
            .clock
            .now()
            .saturating_add(duration_to_nanos(by));
        self.advance_to_nanos(to);
    }

    /// Moves the clock to `since_origin` (never backwards) and runs everything that became due.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let (_timer, driver) = HashedWheelTimer::builder().build_manual().unwrap();
    /// driver.advance_to(Duration::from_secs(1));
    /// driver.advance_to(Duration::from_millis(1)); // no effect: time does not go back
    /// assert_eq!(driver.now(), Duration::from_secs(1));
    /// ```
    pub fn advance_to(&self, since_origin: Duration) {
        self.advance_to_nanos(duration_to_nanos(since_origin));
    }

    fn advance_to_nanos(&self, nanos: u64) {
        let mut slot = lock(&self.shared.idle_worker);
        self.shared.clock.advance_to(nanos);
        let Some(worker) = slot.as_mut() else {
            return; // stopped
        };
        if self.shared.is_shutdown() {
            // A `stop()` under way takes the worker next and returns what its wheel holds: leave
            // it. Only when nobody will (the owner was dropped inside a task) drop it here.
            // Acquire: pairs with the Release in `shutdown_from_worker`.
            if self.shared.drained.load(Ordering::Acquire) {
                drop(slot.take());
            }
            return;
        }
        if self.shared.state.load(Ordering::Acquire) != STARTED {
            return; // nothing scheduled yet
        }
        self.shared.set_worker_id(Some(thread::current().id()));
        let now = self.shared.clock.now();
        worker.advance(&self.shared, now);
        // As the worker thread does: buffers and spare chunks are kept while producers are at
        // work (the ticks just run took something from the queues), given back once idle.
        if worker.next_work_tick(&self.shared) != Some(worker.tick()) && !worker.was_busy() {
            worker.release_idle_buffers(&self.shared);
        }
        self.shared.set_worker_id(None);
        // Acquire: pairs with the Release in `shutdown_from_worker`.
        if self.shared.is_shutdown() && self.shared.drained.load(Ordering::Acquire) {
            // A task dropped the owner: nobody else will drop the worker, whose entries may
            // hold handles on this timer.
            drop(slot.take());
        }
    }

    /// The manual clock's time since the timer's origin.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// let (_timer, driver) = HashedWheelTimer::builder().build_manual().unwrap();
    /// assert_eq!(driver.now(), std::time::Duration::ZERO);
    /// ```
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.shared.clock.now())
    }

    /// The tick being processed (inside a task) or the next one to process (between advances).
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let (timer, driver) = HashedWheelTimer::builder()
    ///     .tick_duration(Duration::from_millis(10))
    ///     .build_manual()
    ///     .unwrap();
    /// timer.start().unwrap();
    /// driver.advance(Duration::from_millis(35));
    /// assert_eq!(driver.current_tick(), 3);
    /// ```
    pub fn current_tick(&self) -> u64 {
        self.shared.tick.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for ManualDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualDriver")
            .field("now", &self.now())
            .field("current_tick", &self.current_tick())
            .finish()
    }
}
