//! The state producers and the worker share: the two queues, the counters, the worker's plan,
//! the timer's run state, and the timeout states they hand to each other.
//!
//! Owns [`Shared`] (one per timer, behind an `Arc`), the timeout states ([`cells`]), the queued
//! batches ([`batch`]), and the producer's half of every protocol: scheduling
//! ([`Shared::schedule`]), cancelling ([`Shared::cancelled`]), the pending count and waking the
//! worker. Touches `sync`, `clock`, `wheel` (its key bounds) and `error`; never the worker nor
//! the owner, which sit above it: what they need to keep here (the worker, under the lock of
//! its turns, how to run a user's task) is kept behind types this module defines
//! ([`ErasedWorker`], [`Job`], [`Stored`]).
//!
//! The files, a concern each: here, `Shared` itself, its lifecycle (the run state, the
//! worker's thread and drivers) and the handle; `schedule.rs`, the producer's half of
//! scheduling and cancelling; `pending.rs`, the pending count; `plan.rs`, the worker's plan and
//! waking the worker; `counters.rs`, the statistics; `task_storage.rs`, what a timer stores per
//! timeout; `cells/`, the timeout states and their chunks' lifecycle (a shard's cursors and a
//! batch's cells for the producers, the chunk table for the worker); `batch.rs`, the queued
//! batches; `small_task.rs`, tasks stored in place.
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
mod counters;
mod pending;
mod plan;
mod schedule;
pub(crate) mod small_task;
mod task_storage;

pub(crate) use counters::{Counters, LATENESS_CLASSES};
pub(crate) use plan::AWAKE;
pub(crate) use task_storage::{sealed, Enqueue, Fresh, Job};
pub use task_storage::{BoxedTask, Stored};

use crate::clock::Clock;
use crate::sync::{
    lock, thread, Arc, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, CachePadded, Mutex, Ordering,
    Queue,
};
use crate::wheel::MAX_ENTRIES;
use batch::{PendingBatch, ProducerShard};
use cells::CellRef;

const INIT: u8 = 0;
const STARTED: u8 = 1;
const SHUTDOWN: u8 = 2;

/// Runs expired tasks somewhere other than the worker thread.
pub(crate) type Executor = Arc<dyn Fn(Box<dyn FnOnce() + Send>) + Send + Sync>;

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
/// [`TimerError::Stopped`]: crate::TimerError::Stopped
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
    pub(crate) timeouts: Queue<PendingBatch<J>, ProducerShard>,
    /// Timeouts cancelled while in the wheel, for the worker to unlink.
    pub(crate) cancellations: Queue<Vec<CellRef>>,
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

    pub(crate) fn mark_owner_dropped_in_task(&self) {
        // Release: pairs with the Acquire in `owner_dropped_in_task`.
        self.owner_dropped_in_task.store(true, Ordering::Release);
    }

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
}
