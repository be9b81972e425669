//! The state producers and the worker share: the two queues, the counters, the worker's plan,
//! the timer's run state, and the timeout states they hand to each other.
//!
//! Owns [`Shared`] (one per timer, behind an `Arc`), the timeout states ([`cells`]), the queued
//! batches ([`batch`]), and the producer's half of every protocol: scheduling
//! ([`Shared::schedule`]), cancelling ([`Shared::cancelled`]), the pending count and waking the
//! worker. Touches `sync`, `clock`, `wheel` (its key bounds) and `error`; never the worker nor
//! the owner, which sit above it: what they need to keep here (the worker, under the lock of
//! its turns, how to run a user's task) is kept behind types this module defines ([`ErasedWorker`],
//! [`Job`], [`Stored`]).
//!
//! Every type here is generic over `J`, what the timer stores per timeout: [`BoxedTask`] (a
//! boxed `Job`) for the timer most code uses, the default of every type parameter, or a typed
//! timer's own task type, stored in place (`task::TypedTask`). The queues and the wheel hold
//! `J` by value; nothing here looks inside it.
//!
//! # Ground rules
//! - Producers (`schedule`, `cancelled`) never touch the wheel. They push on one of two MPSC
//!   queues and, rarely, unpark the worker.
//! - `state` moves `INIT -> STARTED -> SHUTDOWN` or `INIT -> SHUTDOWN`, both under the `control`
//!   lock (the `timer` module makes those moves), so that starting and stopping are serialised;
//!   readers on the hot path load it without the lock.
//!
//! | `state`    | entered by                         | meaning                                   |
//! |------------|------------------------------------|-------------------------------------------|
//! | `INIT`     | construction                       | no worker yet; first `new_timeout` starts it |
//! | `STARTED`  | the first `start()`/`new_timeout`  | the worker runs; work is accepted         |
//! | `SHUTDOWN` | `stop()` or dropping the owner     | permanent; nothing is accepted            |

pub(crate) mod batch;
pub(crate) mod cells;
pub(crate) mod small_task;
pub(crate) mod spans;

use crate::clock::{duration_to_nanos, Clock};
use crate::error::TimerError;
use crate::sync::{
    lock, process, thread, Arc, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, CachePadded, Mutex,
    Ordering, Queue,
};
use crate::wheel::MAX_ENTRIES;
use batch::{PendingBatch, ProducerShard};
use cells::CellRef;
use small_task::{QueuedTask, SmallTask, TaskEntry, TaskSlabs, Word};
use std::time::Duration;

/// Pending-count credit a producer's shard takes at once when there is no pending limit (see
/// `Shared::refill_credit`). Small under loom, so that the models cross refills.
const CREDIT_BATCH: usize = if cfg!(loom) { 2 } else { 256 };

const INIT: u8 = 0;
const STARTED: u8 = 1;
const SHUTDOWN: u8 = 2;

/// The kinds of `push` (its const parameter, so that neither path tests it at run time): a
/// timeout with a handle, whose reference to its chunk the handle holds, or a detached one
/// (`new_timeout_detached`), which takes none.
const WITH_HANDLE: bool = true;
const DETACHED: bool = false;

/// `Shared::planned` while the worker is awake: producers never unpark it then. (`u64::MAX`
/// means parked with no deadline; real ticks stay far below both.)
pub(crate) const AWAKE: u64 = u64::MAX - 1;

/// Runs expired tasks somewhere other than the worker thread.
pub(crate) type Executor = Arc<dyn Fn(Box<dyn FnOnce() + Send>) + Send + Sync>;

/// A timeout's task as the queues and the worker carry it: the `timer` module turns a user's
/// `TimerTask` into one (`task.rs`), the worker runs it with its timeout's state, and nothing
/// in between needs to know what it is.
pub(crate) trait Job: Send + Sized + 'static {
    /// Runs the task of the timeout whose state this is, catching a panic; gives the state
    /// back, and whether the task returned (false: it panicked).
    fn run(self, state: CellRef) -> (CellRef, bool);

    /// As [`Job::run`], for a task too large to be stored in place.
    fn run_boxed(self: Box<Self>, state: CellRef) -> (CellRef, bool) {
        (*self).run(state)
    }
}

/// Any task, type-erased: what a timer of boxed tasks (the default, [`HashedWheelTimer`])
/// stores per timeout. A task of up to 32 bytes is stored in place (no allocation); a larger
/// one is boxed. Opaque; it appears only as that default type parameter.
///
/// [`HashedWheelTimer`]: crate::HashedWheelTimer
pub struct BoxedTask(SmallTask);

impl BoxedTask {
    /// Stores `task` (in place when it fits).
    #[inline]
    pub(crate) fn new<F: Job>(task: F) -> BoxedTask {
        BoxedTask(SmallTask::new(task))
    }
}

/// What a producer hands the queue: a stored task (`J` itself), or, on a boxed timer, the
/// caller's task as it was given ([`Fresh`]), written straight into the queue's words.
pub(crate) trait Enqueue<J: Stored> {
    /// Queues the task: what the batch holds for it, its words appended to `words`.
    fn enqueue(self, words: &mut Vec<Word>) -> J::Queued;
}

impl<J: Stored> Enqueue<J> for J {
    #[inline]
    fn enqueue(self, words: &mut Vec<Word>) -> J::Queued {
        sealed::TaskStorage::enqueue(self, words)
    }
}

/// A boxed timer's task as the caller gave it: queued without being built as a [`SmallTask`]
/// first (a task built on the caller's stack is copied with reads wider than its fields were
/// written, and each such read waits for the stores: see `SmallTask::enqueue_fresh`).
pub(crate) struct Fresh<F>(pub(crate) F);

impl<F: Job> Enqueue<BoxedTask> for Fresh<F> {
    #[inline]
    fn enqueue(self, words: &mut Vec<Word>) -> QueuedTask {
        SmallTask::enqueue_fresh(self.0, words)
    }
}

impl std::fmt::Debug for BoxedTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BoxedTask")
    }
}

/// What a timer stores per timeout: [`BoxedTask`] on the timer most code uses, or a typed
/// timer's own task type ([`TypedTask`](crate::TypedTask)), stored in place with no
/// allocation. Sealed: implemented by those two only.
pub trait Stored: sealed::TaskStorage + Send + 'static {}

pub(crate) mod sealed {
    use super::cells::CellRef;

    /// How the worker keeps and runs a stored task (the interface through which the `task`
    /// module's types are run without this module importing them).
    #[allow(unreachable_pub)]
    pub trait TaskStorage: Sized {
        /// What the wheel holds per timeout: the task (in place, or its words in the worker's store) and the worker's id of the
        /// chunk of its cell.
        type Entry: Send + 'static;
        /// Where the worker keeps what of a task its entry does not hold.
        type Store: Default + Send + 'static;
        /// What a queued batch holds per timeout (its words, if any, follow in the batch's
        /// vector of words).
        type Queued: Send + 'static;

        /// Queues the task: what the batch holds for it, its words appended to `words`.
        fn enqueue(self, words: &mut Vec<super::small_task::Word>) -> Self::Queued;

        /// The task `enqueue` queued; its words read at `*at`, which moves past them. Each
        /// queued task is taken out once, in push order.
        fn dequeue(queued: Self::Queued, words: &[super::small_task::Word], at: &mut usize)
            -> Self;

        /// Runs the task, catching a panic; gives the state back (the worker lent it), and
        /// whether the task returned (false: it panicked).
        fn run_stored(self, state: CellRef<Self>) -> (CellRef<Self>, bool);

        /// The wheel's entry for this task, whose cell is in chunk `chunk`.
        fn into_entry(self, chunk: u32, store: &mut Self::Store) -> Self::Entry;

        /// The task of an entry taken out of the wheel.
        fn from_entry(entry: Self::Entry, store: &mut Self::Store) -> Self;

        /// [`TaskStorage::from_entry`], then [`TaskStorage::run_stored`], without moving the task in
        /// between.
        fn run_entry(
            entry: Self::Entry,
            store: &mut Self::Store,
            state: CellRef<Self>,
        ) -> (CellRef<Self>, bool);

        /// The chunk id an entry was made with.
        fn chunk(entry: &Self::Entry) -> u32;
    }

    /// The wheel's entry for a task kept whole in the wheel (a typed timer's).
    #[allow(unreachable_pub, missing_debug_implementations)]
    pub struct Whole<T> {
        pub(crate) task: T,
        pub(crate) chunk: u32,
    }
}

impl Stored for BoxedTask {}

impl sealed::TaskStorage for BoxedTask {
    type Entry = TaskEntry;
    type Store = TaskSlabs;
    type Queued = QueuedTask;

    #[inline]
    fn enqueue(self, words: &mut Vec<Word>) -> QueuedTask {
        self.0.enqueue(words)
    }

    #[inline]
    fn dequeue(queued: QueuedTask, words: &[Word], at: &mut usize) -> BoxedTask {
        BoxedTask(SmallTask::dequeue(queued, words, at))
    }

    #[inline]
    fn run_stored(self, state: CellRef) -> (CellRef, bool) {
        self.0.run(state)
    }

    #[inline]
    fn into_entry(self, chunk: u32, store: &mut TaskSlabs) -> TaskEntry {
        store.insert(self.0, chunk)
    }

    #[inline]
    fn from_entry(entry: TaskEntry, store: &mut TaskSlabs) -> BoxedTask {
        BoxedTask(store.remove(entry))
    }

    #[inline]
    fn run_entry(entry: TaskEntry, store: &mut TaskSlabs, state: CellRef) -> (CellRef, bool) {
        store.run_entry(entry, state)
    }

    #[inline]
    fn chunk(entry: &TaskEntry) -> u32 {
        entry.chunk()
    }
}

/// What a timeout does when it expires, which decides the kind of chunk its cell comes from:
/// a future's cell has a waker slot (`cells::WakerSlots`).
#[derive(Clone, Copy)]
enum OnExpiry {
    /// Run a task.
    RunTask,
    /// Wake a future (its job is a [`WakeJob`]).
    WakeFuture,
}

/// The job of a future's timeout: wake the future. Zero-sized: stored in no words at all.
struct WakeJob;

impl Job for WakeJob {
    #[inline]
    fn run(self, state: CellRef) -> (CellRef, bool) {
        let woke = state.wake();
        (state, woke)
    }
}

/// Runs user code on the timer's side (a task's `Drop`, a future's waker, the executor),
/// catching a panic: returns whether it returned. The crate's rule: user code may panic
/// anywhere; nothing is lost, nothing is run twice, nothing is run on the wrong data. So every
/// place that runs or drops user code goes through here (or a task's own `Job::run`), and no
/// state of the crate is half-changed while user code runs: `AssertUnwindSafe` holds.
#[inline]
pub(crate) fn catch_user_panic(user_code: impl FnOnce()) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(user_code)).is_ok()
}

/// Drops a value that holds user code (a task), catching a panic of its `Drop`: returns
/// whether the drop returned. See [`catch_user_panic`].
#[inline]
pub(crate) fn drop_caught<T>(value: T) -> bool {
    !std::mem::needs_drop::<T>() || catch_user_panic(move || drop(value))
}

/// The worker, type-erased, as `Shared::worker` keeps it between turns. Its type belongs to the
/// `worker` module, which this one does not import; the `timer` module (`timer::lifecycle`),
/// which starts, drives and stops it, takes it back as a `Worker`.
pub(crate) type ErasedWorker = Box<dyn std::any::Any + Send>;

/// A cheap, cloneable reference to a timer, as returned by [`Timeout::timer`] and
/// [`HashedWheelTimer::handle`].
///
/// A handle schedules and stops exactly like the owner, but does not own the timer: when the
/// [`HashedWheelTimer`] is dropped the worker stops, and handles get [`TimerError::Stopped`].
/// Holding handles therefore never keeps a worker thread alive.
///
/// # What a handle may do
/// - **Schedule** everything the owner schedules: `new_timeout`, periodic tasks, the futures.
/// - **Read** the timer's state: `pending_timeouts`, `is_stopped` and `stats`, the same
///   counters as the owner's.
/// - **Stop** the timer, for everyone: `stop()`, and the [`Timer`](crate::Timer) trait's.
///   This is where a handle differs from tokio's `Handle`, which cannot shut its runtime down.
///   A handle is what Netty calls a `Timer`: a task's `Timeout::timer()` is one, Netty's
///   `Timer` interface has `stop()`, and Netty code calls `timeout.timer().stop()`; code ported
///   from Netty keeps doing so. Give a handle only to code you trust to stop the timer; code
///   that must not stop it can be given an adapter built on the handle instead (`DelayQueue`,
///   and `HyperTimer` and `TimeoutLayer` under their features), which never stops it.
/// - **Not** keep the timer alive, nor start it early (`start`) or read its configuration
///   (`tick_duration`, `wheel_len`): those are the owner's.
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
///
/// (Defined in this module because every chunk of timeout states holds one: a `Timeout` reaches
/// its timer through its chunk. Its methods are the owner's, in `timer`.)
///
/// [`Timeout::timer`]: crate::Timeout::timer
/// [`HashedWheelTimer`]: crate::HashedWheelTimer
/// [`HashedWheelTimer::handle`]: crate::HashedWheelTimer::handle
pub struct TimerHandle<J: crate::shared::sealed::TaskStorage = BoxedTask> {
    pub(crate) shared: Arc<Shared<J>>,
}

impl<J: Stored> Clone for TimerHandle<J> {
    fn clone(&self) -> Self {
        TimerHandle {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// Lateness classes of fired timeouts, in ticks: under 1, 1 to 2, 2 to 4, ... 64 and more.
pub(crate) const LATENESS_CLASSES: usize = 8;

/// What `TimerStats` reports of the timeouts' outcomes. The worker keeps its own running totals
/// and stores them here after each turn (it is their only writer); refusing producers
/// count `refused`. Statistics: every access is Relaxed, nothing is ordered by them.
pub(crate) struct Counters {
    pub(crate) expired: process::AtomicU64,
    pub(crate) cancelled: process::AtomicU64,
    pub(crate) panicked: process::AtomicU64,
    pub(crate) refused: process::AtomicU64,
    /// The largest lateness of a fired timeout, in nanoseconds.
    pub(crate) late_max: process::AtomicU64,
    /// The longest inline task run, in nanoseconds; runs longer than a tick.
    pub(crate) longest_run: process::AtomicU64,
    pub(crate) slow_runs: process::AtomicU64,
    pub(crate) lateness: [process::AtomicU64; LATENESS_CLASSES],
}

impl Counters {
    /// User code panicked on the timer's side (a task, its `Drop`, a future's waker, the
    /// executor) and the panic was caught: counted in `stats().panicked`, logged. Any thread
    /// may count one (a worker, `stop()`), hence the add.
    #[cold]
    pub(crate) fn user_code_panicked(&self, what: &str) {
        // Relaxed: a statistic.
        self.panicked.fetch_add(1, Ordering::Relaxed);
        log::warn!("{what} panicked; the timer goes on");
    }

    fn new() -> Counters {
        let zero = || process::AtomicU64::new(0);
        Counters {
            expired: zero(),
            cancelled: zero(),
            panicked: zero(),
            refused: zero(),
            late_max: zero(),
            longest_run: zero(),
            slow_runs: zero(),
            lateness: std::array::from_fn(|_| zero()),
        }
    }
}

/// What the owner, the handles, the timeouts and the worker share.
pub(crate) struct Shared<J: crate::shared::sealed::TaskStorage = BoxedTask> {
    /// Timeouts accepted (and credit taken for more: see `refill_credit`), counted by the
    /// producers; wraps. Pending is this less `ended`. On a cache line of its own, away from
    /// the read-mostly fields below and from the `Arc`'s reference counts.
    accepted: CachePadded<AtomicUsize>,
    /// Timeouts ended by the worker (expired, or their cancellation processed); wraps. Only the
    /// worker writes it (see [`Shared::set_ended`]), with a plain store of its own running
    /// total: ending a timeout takes no locked instruction.
    ended: CachePadded<AtomicUsize>,
    /// Each shard's data: its pending-count credit, its chunk of timeout states and spares.
    pub(crate) timeouts: Queue<PendingBatch<J>, ProducerShard<J>>,
    /// Timeouts cancelled while in the wheel, for the worker to unlink.
    pub(crate) cancellations: Queue<Vec<CellRef<J>>>,
    state: AtomicU8,
    /// The tick at whose end the worker will next wake by itself; `AWAKE` while it runs,
    /// `u64::MAX` when it parks with no deadline. See `worker::thread_main`.
    planned: AtomicU64,
    /// The worker's current tick (diagnostics, and the cancel path's wake-up check).
    tick: AtomicU64,
    /// The worker's wake-ups so far (a statistic).
    wakeups: AtomicU64,
    pub(crate) counters: Counters,
    pub(crate) tick_nanos: u64,
    pub(crate) wheel_len: usize,
    pub(crate) max_pending: usize,
    pub(crate) clock: Clock,
    /// The thread that runs the worker, and the runtimes' drivers (see [`Control`]).
    pub(crate) control: Mutex<Control>,
    /// The worker. Whoever runs a turn of it (the worker thread, a runtime's `Drive`, a
    /// `ManualDriver`) holds this lock for the turn, tasks included; `stop()` takes it out.
    pub(crate) worker: Mutex<Option<ErasedWorker>>,
    /// The rest is the `timer` module's bookkeeping (`timer::lifecycle`). The worker thread's
    /// name.
    pub(crate) thread_name: String,
    /// Whether a `ManualDriver` runs the worker (no thread is ever started).
    pub(crate) manual: bool,
    /// Set when the owner was dropped on the worker thread (inside a task): nobody will call
    /// `stop()` to take the worker, so a `ManualDriver` may drop it.
    owner_dropped_in_task: AtomicBool,
    /// Whether the timer still counts in the process's live-timer count.
    in_live_timer_count: crate::sync::process::AtomicBool,
}

/// The worker's thread and the runtimes' drivers, kept under `Shared::control`: the `timer`
/// module starts and joins the thread and attaches the drivers; producers wake one or the
/// other when their deadline is earlier than the plan.
#[derive(Default)]
pub(crate) struct Control {
    pub(crate) join: Option<thread::JoinHandle<()>>,
    pub(crate) worker_thread: Option<thread::Thread>,
    /// The thread running a turn of the worker right now (a driver's caller), else the worker
    /// thread's.
    pub(crate) worker_id: Option<thread::ThreadId>,
    /// Runtime drivers attached (`timer::drive`): while there is one, it runs the turns and
    /// the worker thread only watches over it.
    pub(crate) drivers: usize,
    /// The waker of the driver that polled last: what a producer wakes instead of the thread.
    pub(crate) driver_waker: Option<std::task::Waker>,
    /// The worker thread, watching over a driver, parks with no deadline (nothing was pending
    /// at its last turn): a driver whose turn plans a tick again unparks it.
    pub(crate) watchdog_parked: bool,
}

impl<J: Stored> Shared<J> {
    /// Drops a task the timer lets go of without running it (cancelled, or never run at a
    /// stop), counting a panic of its `Drop` in `stats().panicked`.
    #[inline]
    pub(crate) fn drop_task<T>(&self, task: T) {
        if !drop_caught(task) {
            self.counters.user_code_panicked("a task's Drop");
        }
    }

    /// A timer's shared state, not started.
    pub(crate) fn new(
        tick_nanos: u64,
        wheel_len: usize,
        max_pending: usize,
        clock: Clock,
        worker: ErasedWorker,
        thread_name: String,
        manual: bool,
    ) -> Shared<J> {
        Shared {
            accepted: CachePadded::new(AtomicUsize::new(0)),
            ended: CachePadded::new(AtomicUsize::new(0)),
            timeouts: Queue::new(),
            cancellations: Queue::new(),
            state: AtomicU8::new(INIT),
            planned: AtomicU64::new(AWAKE),
            tick: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            counters: Counters::new(),
            tick_nanos,
            wheel_len,
            // The wheel's key space bounds any limit.
            max_pending: max_pending.min(MAX_ENTRIES),
            clock,
            control: Mutex::new(Control::default()),
            worker: Mutex::new(Some(worker)),
            thread_name,
            manual,
            owner_dropped_in_task: AtomicBool::new(false),
            in_live_timer_count: crate::sync::process::AtomicBool::new(true),
        }
    }

    #[inline]
    pub(crate) fn is_shutdown(&self) -> bool {
        self.state.load(Ordering::Acquire) == SHUTDOWN
    }

    #[inline]
    pub(crate) fn is_started(&self) -> bool {
        // Acquire: pairs with the Release in `mark_started`.
        self.state.load(Ordering::Acquire) == STARTED
    }

    /// INIT -> STARTED, under the `control` lock (held by the caller).
    pub(crate) fn mark_started(&self) {
        // Release: pairs with the Acquire in `is_started`.
        self.state.store(STARTED, Ordering::Release);
    }

    /// Moves to SHUTDOWN, under the `control` lock (held by the caller); whether it already
    /// was.
    pub(crate) fn mark_shutdown(&self) -> bool {
        self.state.swap(SHUTDOWN, Ordering::SeqCst) == SHUTDOWN
    }

    /// The owner was dropped on the worker thread (inside a task): nobody will call `stop()`.
    pub(crate) fn mark_owner_dropped_in_task(&self) {
        // Release: pairs with the Acquire in `owner_dropped_in_task`.
        self.owner_dropped_in_task.store(true, Ordering::Release);
    }

    /// Whether the owner was dropped on the worker thread: then nobody will take the worker
    /// out of `worker`, and a `ManualDriver` drops it.
    pub(crate) fn owner_dropped_in_task(&self) -> bool {
        // Acquire: pairs with the Release in `mark_owner_dropped_in_task`.
        self.owner_dropped_in_task.load(Ordering::Acquire)
    }

    /// Takes the timer out of the process's live-timer count; true for the one call that does
    /// (the timer counts from construction until stopped or dropped).
    pub(crate) fn leave_live_timer_count(&self) -> bool {
        // Relaxed: a count for a log message; nothing is published with it.
        self.in_live_timer_count.swap(false, Ordering::Relaxed)
    }

    /// "not started", "started" or "stopped", from a relaxed load (for `Debug`).
    pub(crate) fn state_name(&self) -> &'static str {
        match self.state.load(Ordering::Relaxed) {
            INIT => "not started",
            STARTED => "started",
            _ => "stopped",
        }
    }

    /// Queues a timeout of a started timer: its job, due `delay` from now. The producer's
    /// half of `new_timeout` (the `timer` module starts the worker first).
    #[inline]
    pub(crate) fn schedule(
        self: &Arc<Self>,
        job: impl Enqueue<J>,
        delay: Duration,
    ) -> Result<CellRef<J>, TimerError> {
        let (deadline, now) = self.due_after(delay);
        self.schedule_at(job, deadline, now)
    }

    /// The deadline `delay` from now on the producers' clock (never early), and that now.
    #[inline]
    fn due_after(&self, delay: Duration) -> (u64, u64) {
        let now = self.clock.now_upper();
        (now.saturating_add(duration_to_nanos(delay)), now)
    }

    /// As [`Shared::schedule`], due at `deadline` (nanoseconds since the origin; `now` is the
    /// producers' clock, read by the caller).
    #[inline]
    pub(crate) fn schedule_at(
        self: &Arc<Self>,
        job: impl Enqueue<J>,
        deadline: u64,
        now: u64,
    ) -> Result<CellRef<J>, TimerError> {
        self.push::<WITH_HANDLE>(job, deadline, now, OnExpiry::RunTask)
            .map(|state| state.expect("a state for the handle"))
    }

    /// As [`Shared::schedule`], with no handle: nothing can cancel the timeout or ask after it,
    /// so no reference to its cell is taken (one locked instruction fewer here, and one fewer
    /// where the handle would have been dropped).
    #[inline]
    pub(crate) fn schedule_detached(
        self: &Arc<Self>,
        job: impl Enqueue<J>,
        delay: Duration,
    ) -> Result<(), TimerError> {
        let (deadline, now) = self.due_after(delay);
        self.push::<DETACHED>(job, deadline, now, OnExpiry::RunTask)
            .map(|_| ())
    }

    /// Queues a timeout, its cell from the cursor for `on_expiry`; its state for the handle when
    /// `HANDLE`.
    #[inline]
    fn push<const HANDLE: bool>(
        self: &Arc<Self>,
        job: impl Enqueue<J>,
        deadline: u64,
        now: u64,
        on_expiry: OnExpiry,
    ) -> Result<Option<CellRef<J>>, TimerError> {
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
                    self.accepted.fetch_sub(1, Ordering::Relaxed);
                }
                return Err(TimerError::Stopped);
            }
            if !limited {
                if producer.credit == 0 {
                    producer.credit = self.refill_credit()?;
                }
                producer.credit -= 1;
            }
            let cursor = match on_expiry {
                OnExpiry::RunTask => &mut producer.cursor,
                OnExpiry::WakeFuture => &mut producer.wake_cursor,
            };
            items.push::<HANDLE>(cursor, self, shard_index, job, deadline)
        };
        // Nothing to re-check against `stop()`: it sets SHUTDOWN before it takes each shard,
        // so a push either came before its take (and `stop()` returns this timeout, cancelled,
        // as it does every timeout that never ran) or we saw SHUTDOWN under the lock above.
        // No fence before the worker's plan is read either: the worker publishes its plan
        // before it looks at the shards under their locks, so it sees our entry or we see its
        // plan (see `sync::Queue`).
        self.wake_by_end_of_tick_at(now);
        Ok(state)
    }

    /// Counts one more pending timeout against `max_pending`, or refuses.
    #[inline]
    fn reserve_limited(&self) -> Result<(), TimerError> {
        // Relaxed: a pure counter; whoever needs to see it settle synchronises through its own
        // means (a task's side effect, a join). A stale `ended` only refuses more eagerly.
        let mut cur = self.accepted.load(Ordering::Relaxed);
        loop {
            let pending = pending_between(cur, self.ended.load(Ordering::Relaxed));
            if pending >= self.max_pending {
                return Err(self.too_many(pending));
            }
            match self.accepted.compare_exchange_weak(
                cur,
                cur.wrapping_add(1),
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
        let mut cur = self.accepted.load(Ordering::Relaxed);
        loop {
            let pending = pending_between(cur, self.ended.load(Ordering::Relaxed));
            let keys_left = MAX_ENTRIES.saturating_sub(pending);
            if keys_left == 0 {
                // The wheel's key space (2^27 - 1 entries, ~6 GB of them): never reached in
                // practice, but refused rather than overflowed.
                return Err(TimerError::TooManyPending {
                    pending: self.counted(),
                    max: MAX_ENTRIES,
                });
            }
            let take = keys_left.min(CREDIT_BATCH);
            match self.accepted.compare_exchange_weak(
                cur,
                cur.wrapping_add(take),
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
    pub(crate) fn cancelled(&self, state: CellRef<J>) {
        // No fence: as in `new_timeout`, the queue's lock orders the push before the load of
        // the worker's plan.
        self.cancellations.push(state);
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
                    self.unpark_worker(planned == u64::MAX);
                    return;
                }
                Err(actual) => planned = actual,
            }
        }
    }

    /// Wakes whoever runs the worker's turns: a runtime's driver while one is attached, else
    /// the worker thread. With a driver, the thread is woken too when the worker was idle
    /// (`from_idle`): it then watches over the driver again, which it does not while nothing is
    /// pending.
    #[cold]
    pub(crate) fn unpark_worker(&self, from_idle: bool) {
        let control = lock(&self.control);
        let thread = control
            .worker_thread
            .clone()
            .filter(|_| from_idle || control.driver_waker.is_none());
        let driver = control.driver_waker.clone();
        drop(control);
        if let Some(thread) = thread {
            thread.unpark();
        }
        if let Some(waker) = driver {
            if !catch_user_panic(|| waker.wake()) {
                self.counters.user_code_panicked("a driver's waker");
            }
        }
    }

    /// Whether a runtime's driver runs the worker's turns.
    pub(crate) fn is_driven(&self) -> bool {
        lock(&self.control).drivers > 0
    }

    pub(crate) fn on_worker_thread(&self) -> bool {
        lock(&self.control).worker_id == Some(thread::current().id())
    }

    pub(crate) fn set_worker_id(&self, id: Option<thread::ThreadId>) {
        lock(&self.control).worker_id = id;
    }

    #[inline]
    pub(crate) fn pending_timeouts(&self) -> usize {
        if self.is_shutdown() {
            0
        } else {
            self.counted()
        }
    }

    /// Timeouts counted as pending: `accepted` less `ended` and less the credit the queue's
    /// shards hold. Exact when nothing runs concurrently; under concurrent scheduling it can be
    /// off by what is in flight, as Netty's counter is.
    pub(crate) fn counted(&self) -> usize {
        // `ended` first, then credit, then `accepted`, so that each later read counts at least
        // what the earlier ones imply. Acquire: pairs with the Release in `set_ended`; the
        // worker ended those timeouts after taking them from the queue under their shard locks,
        // so their acceptance is seen below.
        let ended = self.ended.load(Ordering::Acquire);
        // A refill seen in a shard is then seen in `accepted` too (the refill's increment is
        // made under the shard's lock, which our read took after it).
        let credit = self.timeouts.fold_data(0, |sum, p| sum + p.credit);
        // Relaxed: see `reserve_limited`.
        let accepted = self.accepted.load(Ordering::Relaxed);
        pending_between(accepted, ended).saturating_sub(credit)
    }

    /// The worker's running total of timeouts it has ended (expired, or cancelled and
    /// accounted for): stored before each task runs, so that a task can schedule again even at
    /// the pending limit. Called only by whoever holds the worker.
    #[inline]
    pub(crate) fn set_ended(&self, total: usize) {
        // Release: pairs with the Acquire in `counted`.
        self.ended.store(total, Ordering::Release);
    }

    /// The worker's current tick, as the worker publishes it (diagnostics, and the cancel
    /// path's wake-up check: a stale value only makes it wake the worker more eagerly).
    #[inline]
    pub(crate) fn set_tick(&self, tick: u64) {
        self.tick.store(tick, Ordering::Relaxed);
    }

    /// The worker's plan: it will next wake by itself at the end of `tick` (`u64::MAX`: only
    /// when unparked). See `worker::thread_main`.
    pub(crate) fn publish_plan(&self, tick: u64) {
        self.planned.store(tick, Ordering::SeqCst);
    }

    /// The plan as it stands: the worker's, or lower if a producer lowered it since.
    pub(crate) fn plan(&self) -> u64 {
        self.planned.load(Ordering::SeqCst)
    }

    /// The tick the worker last published (see [`Shared::set_tick`]).
    pub(crate) fn worker_tick(&self) -> u64 {
        // Relaxed: diagnostics.
        self.tick.load(Ordering::Relaxed)
    }

    /// The worker's wake-ups so far.
    pub(crate) fn wakeups(&self) -> u64 {
        // Relaxed: a statistic.
        self.wakeups.load(Ordering::Relaxed)
    }

    /// The worker woke and runs (`AWAKE`): producers need not wake it. Counted as a wake-up.
    pub(crate) fn mark_awake(&self) {
        self.planned.store(AWAKE, Ordering::SeqCst);
        // Relaxed: a statistic.
        self.wakeups.fetch_add(1, Ordering::Relaxed);
    }
}

impl Shared {
    /// A future's timeout (the `timer` module's `Sleep`), due at `deadline` (as in
    /// [`Shared::schedule_at`]): its state has a waker slot, and its expiry wakes what the
    /// future left there (see `cells::WakerSlots`). Nothing is allocated for its job.
    #[inline]
    pub(crate) fn schedule_wake_at(
        self: &Arc<Self>,
        deadline: u64,
        now: u64,
    ) -> Result<CellRef, TimerError> {
        self.push::<WITH_HANDLE>(BoxedTask::new(WakeJob), deadline, now, OnExpiry::WakeFuture)
            .map(|state| state.expect("a state for the handle"))
    }
}

/// Timeouts accepted and not ended, from two running totals read one after the other: `ended`,
/// read after `accepted`, may have moved past it (timeouts accepted and ended in between). That
/// counts as none pending, not as a count wrapped to nearly `usize::MAX`.
fn pending_between(accepted: usize, ended: usize) -> usize {
    let pending = accepted.wrapping_sub(ended);
    if pending > usize::MAX / 2 {
        0
    } else {
        pending
    }
}
