//! What producers and the worker share. Owns [`Shared`] (one per timer, behind an `Arc`: the
//! queues, the counters that [`TimerStats`] reads, the worker's plan, the run state), the timeout
//! states ([`cells`]), the queued batches ([`batch`]), and the producer's half of every protocol:
//! scheduling ([`Shared::schedule`]), cancelling ([`Shared::cancelled`]), the pending count and
//! waking the worker. Touches `sync`, `clock`, `wheel` (its key bounds) and `error`; never the
//! worker nor the owner above it, whose state here hides behind [`ErasedWorker`], [`Job`] and
//! [`Stored`]. All is generic over `J`, what a timer stores per timeout ([`BoxedTask`] by
//! default), held by value and never looked into. Each file opens with what it owns.
//!
//! # Ground rules
//! - Producers (`schedule`, `cancelled`) never touch the wheel: they push on one of two MPSC
//!   queues and, rarely, unpark the worker.
//! - `state` moves `INIT -> STARTED -> SHUTDOWN` or `INIT -> SHUTDOWN` under the `control` lock
//!   (the `timer` module moves it), so starting and stopping are serialised; the hot path loads
//!   it without the lock.
//!
//! | `state`    | entered by                        | meaning                                 |
//! |------------|-----------------------------------|-----------------------------------------|
//! | `INIT`     | construction                      | no worker yet; `new_timeout` starts it  |
//! | `STARTED`  | the first `start()`/`new_timeout` | the worker runs; work is accepted       |
//! | `SHUTDOWN` | `stop()`, or its last user gone   | permanent; nothing is accepted          |
//!
//! # User code
//! A task, its `Drop`, a waker, an executor and the process's logger may panic anywhere. Every
//! place on the timer's side that runs or drops one catches the panic and counts it
//! ([`catch_user_panic`], [`drop_caught`], `Counters::drop_task`, a task's own `Job::run`;
//! [`log_caught`] for the logger; `drop_each` in `wheel/slab.rs` for many values at once), and
//! a caught panic's payload, user code too, is dropped under a catch as well. No user code runs
//! under a lock a callback could need: a runtime's waker is shared under `control` and woken
//! and dropped after it (`Shared::wake_driver_with`); a future's waker is cloned and dropped
//! outside its slot's lock. The batch's drain keeps its word cursor in step when dropped early
//! (`batch`, `DrainFront`), and `small_task` states its `unsafe` invariants under unwinding.
//! A worker thread that unwinds anyway (a bug) stops the timer and logs it (`worker/thread.rs`).

pub(crate) mod batch;
pub(crate) mod cells;
mod counters;
mod pending;
mod plan;
mod schedule;
pub(crate) mod small_task;
mod task_storage;

pub use counters::TimerStats;
pub(crate) use counters::{Counters, LATENESS_CLASSES};
pub(crate) use plan::{AWAKE, DRIVEN_GRACE_TICKS};
pub(crate) use task_storage::{sealed, Enqueue, Fresh, Job};
pub use task_storage::{BoxedTask, Stored};

use crate::clock::Clock;
use crate::sync::{
    lock, thread, Arc, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, CachePadded, Mutex, Ordering,
    Queue, Weak,
};
use crate::wheel::MAX_ENTRIES;
use batch::{PendingBatch, ProducerShard};
use cells::CellRef;

const INIT: u8 = 0;
const STARTED: u8 = 1;
const SHUTDOWN: u8 = 2;

/// Timers live in this process: each counts from construction until it leaves
/// ([`Shared::leave_live_timer_count`]); `timer::lifecycle` warns past Netty's limit.
static LIVE_TIMERS: crate::sync::process::AtomicUsize = crate::sync::process::AtomicUsize::new(0);

/// Counts a new timer live; the timers now live.
pub(crate) fn enter_live_timer_count() -> usize {
    // Relaxed: a count for a log message; nothing is published with it.
    LIVE_TIMERS.fetch_add(1, Ordering::Relaxed) + 1
}

/// Runs expired tasks somewhere other than the worker thread.
pub(crate) type Executor = Arc<dyn Fn(Box<dyn FnOnce() + Send>) + Send + Sync>;

/// Runs user code (a task's `Drop`, a waker, the executor), catching a panic; whether it
/// returned. The crate's rule: user code may panic anywhere, yet nothing is lost, run twice or
/// run on the wrong data. All user code runs through here (or `Job::run`) with no crate state
/// half-changed, so `AssertUnwindSafe` holds.
#[inline]
pub(crate) fn catch_user_panic(user_code: impl FnOnce()) -> bool {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(user_code)) {
        Ok(()) => true,
        Err(payload) => {
            drop_payload(payload);
            false
        }
    }
}

/// Drops a caught panic's payload, user code too (`panic_any` of a value whose `Drop` panics):
/// a second panic out of it is caught, and its own payload leaked rather than dropped, so that
/// nothing unwinds the worker.
#[cold]
fn drop_payload(payload: Box<dyn std::any::Any + Send>) {
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload)));
    if let Err(again) = dropped {
        std::mem::forget(again);
    }
}

/// Logs through the `log` facade, catching a panic of the logger: the process's logger is user
/// code too, and a report must not unwind the worker, or a `stop()` half-way.
#[cold]
pub(crate) fn log_caught(level: log::Level, message: std::fmt::Arguments<'_>) {
    // A panic here is not reported: the logger is what panicked.
    let _ = catch_user_panic(|| log::log!(level, "{message}"));
}

/// Drops a value holding user code (a task) under [`catch_user_panic`]; whether it returned.
#[inline]
pub(crate) fn drop_caught<T>(value: T) -> bool {
    !std::mem::needs_drop::<T>() || catch_user_panic(move || drop(value))
}

/// The worker between turns, type-erased: its type is the `worker` module's, which this one
/// does not import; `timer::lifecycle` takes it back as a `Worker`.
pub(crate) type ErasedWorker = Box<dyn std::any::Any + Send>;

/// A cheap, cloneable reference to a timer, as returned by [`Timeout::timer`] and
/// [`HashedWheelTimer::handle`].
///
/// A handle schedules and stops exactly like the owner, but does not keep the timer running:
/// once it is stopped, handles get [`TimerError::Stopped`]. Handles never keep a worker thread
/// alive.
///
/// # What keeps the timer running
/// The timer runs until [`stop()`](crate::HashedWheelTimer::stop) (the owner's or a handle's),
/// or until the last of these goes:
/// - the owner, the [`HashedWheelTimer`];
/// - each adapter on it: a [`DelayQueue`](crate::DelayQueue), and `HyperTimer`,
///   `TimeoutLayer` and `TimeoutService` under their features (each clone counts);
/// - each future an adapter hands out: `HyperSleep`, `TimeoutResponseFuture`.
///
/// A handle, a [`Timeout`], and the futures made from the timer or a handle ([`Sleep`],
/// [`Deadline`], [`Interval`]) do not keep it running: once it stops they end with
/// [`TimerError::Stopped`]. So the owner may be dropped once the adapters are built (in a
/// set-up function); an adapter built on a stopped timer panics, as does one that hyper or a
/// `DelayQueue`'s task uses after `stop()` (where no error value can be returned). An adapter
/// kept in one of the timer's own tasks keeps it running too, until that task has run.
///
/// [`Timeout`]: crate::Timeout
/// [`Sleep`]: crate::Sleep
/// [`Deadline`]: crate::Deadline
/// [`Interval`]: crate::Interval
///
/// # What a handle may do
/// - **Schedule** everything the owner schedules: `new_timeout`, periodic tasks, the futures.
/// - **Read** the timer's state: `pending_timeouts`, `is_stopped` and `stats`.
/// - **Stop** the timer, for everyone: `stop()`, and the [`Timer`](crate::Timer) trait's (as
///   Netty's `timeout.timer().stop()`; unlike tokio's `Handle`). Give a handle only to code you
///   trust to stop the timer; others can get an adapter on it (`DelayQueue`, and `HyperTimer`
///   and `TimeoutLayer` under their features).
/// - **Not** keep the timer running, start it early (`start`) or read its configuration
///   (`tick_duration`, `wheel_len`): those are the owner's.
///
/// ```
/// use hashed_timer_wheel::{DelayQueue, HashedWheelTimer, TimerError};
/// use std::time::Duration;
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(10), 64);
/// let handle = timer.handle();
/// let queue: DelayQueue<u32> = DelayQueue::new(timer.handle());
/// drop(timer); // the queue keeps the timer running
/// handle.new_timeout(|_: &_| {}, Duration::from_millis(5)).unwrap();
/// drop(queue); // the last user: the timer stops
/// assert_eq!(handle.new_timeout(|_: &_| {}, Duration::ZERO).unwrap_err(), TimerError::Stopped);
/// ```
///
/// (Defined here because every chunk of timeout states holds one; its methods are in `timer`.)
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
    /// Timeouts accepted by producers (and credit taken: `refill_credit`); wraps. Pending is this
    /// less `ended`. On its own cache line, away from read-mostly fields and the `Arc`'s counts.
    accepted: CachePadded<AtomicUsize>,
    /// Timeouts the worker ended; wraps. Only the worker writes it (see [`Shared::set_ended`]),
    /// a plain store of its running total: ending a timeout takes no locked instruction.
    ended: CachePadded<AtomicUsize>,
    /// Per shard: pending-count credit, chunk cursors and spares.
    pub(crate) timeouts: Queue<PendingBatch<J>, ProducerShard>,
    /// Timeouts cancelled while in the wheel, for the worker to unlink.
    pub(crate) cancellations: Queue<Vec<CellRef>>,
    state: AtomicU8,
    /// The tick at whose end the worker next wakes by itself (`plan.rs`).
    planned: AtomicU64,
    tick: AtomicU64,
    wakeups: AtomicU64,
    pub(crate) counters: Counters,
    pub(crate) tick_nanos: u64,
    pub(crate) wheel_len: usize,
    pub(crate) max_pending: usize,
    pub(crate) clock: Clock,
    pub(crate) control: Mutex<Control>,
    /// Whoever runs a turn (the worker thread, a runtime's `Drive`, a `ManualDriver`) holds
    /// this lock for the turn, tasks included; `stop()` takes the worker out.
    pub(crate) worker: Mutex<Option<ErasedWorker>>,
    /// The rest is `timer::lifecycle`'s bookkeeping.
    pub(crate) thread_name: Box<str>,
    /// Whether a `ManualDriver` runs the worker (no thread is ever started).
    pub(crate) manual: bool,
    /// The last user (see `users`) went in a task: nobody will `stop()` to take the worker, so
    /// a `ManualDriver` may drop it.
    owner_dropped_in_task: AtomicBool,
    /// What keeps the timer running: the owner, each adapter and each future an adapter hands
    /// out (`timer::KeepAlive`). Starts at 1, the owner; never rises from 0; the one that takes
    /// it to 0 stops the timer. On its own cache line: a tower call moves it twice.
    users: CachePadded<AtomicUsize>,
    in_live_timer_count: crate::sync::process::AtomicBool,
    /// This timer's slot in `timer::deadline`'s table of timers, in that module's encoding (0:
    /// none yet), set by the first deadline made on it: a deadline reads it here. (Under loom a
    /// deadline holds its timer.)
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) deadline_slot: crate::sync::process::AtomicU64,
}

/// An attached runtime driver (`timer::drive`), as `stop()` reaches it.
pub(crate) trait AttachedDriver: Send + Sync {
    /// The timer stopped: wakes the driver's task, which then completes.
    fn wake_stopped(&self);
}

/// Under `Shared::control`: `timer` starts and joins the thread and attaches drivers;
/// producers wake one or the other when their deadline is earlier than the plan.
#[derive(Default)]
pub(crate) struct Control {
    pub(crate) join: Option<thread::JoinHandle<()>>,
    pub(crate) worker_thread: Option<thread::Thread>,
    /// The thread running a turn now (a driver's caller), else the worker thread's.
    pub(crate) worker_id: Option<thread::ThreadId>,
    /// Attached drivers (`timer::drive`), each as the waker its sleeps wake: while any, they run
    /// the turns and the thread watches; `stop()` wakes each, so that every one completes.
    pub(crate) drivers: Vec<Weak<dyn AttachedDriver>>,
    /// The waker of the driver that polled last: what a producer wakes instead of the thread.
    /// Shared, so that taking it runs no user code under this lock: it is woken (and a last
    /// reference dropped) after the unlock, as a runtime's waker may call back into the timer.
    pub(crate) driver_waker: Option<Arc<std::task::Waker>>,
    /// The thread, watching over a driver, parks with no deadline (nothing was pending at its
    /// last turn): a driver whose turn plans a tick unparks it.
    pub(crate) watchdog_parked: bool,
    /// The tick at whose end the thread, watching over a driver, wakes: a producer lowering the
    /// plan well below it unparks the thread too (`Shared::unpark_worker`), and so does a
    /// driver's turn planning well below it (`timer::lifecycle::drive_turn`).
    pub(crate) watchdog_until: u64,
}

impl<J: Stored> Shared<J> {
    pub(crate) fn new(
        tick_nanos: u64,
        wheel_len: usize,
        max_pending: usize,
        clock: Clock,
        worker: ErasedWorker,
        thread_name: Box<str>,
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
            counters: Counters::default(),
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
            users: CachePadded::new(AtomicUsize::new(1)),
            in_live_timer_count: crate::sync::process::AtomicBool::new(true),
            deadline_slot: crate::sync::process::AtomicU64::new(0),
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

    /// Moves to SHUTDOWN, under the caller's `control` lock; whether it already was.
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

    /// Counts one more user, unless none is left (the timer stops, or has stopped, for want
    /// of one): whether it counted.
    pub(crate) fn enter_user(&self) -> bool {
        // Relaxed: a count, as `Arc`'s increment; `leave_user` orders the end.
        let mut users = self.users.load(Ordering::Relaxed);
        while users != 0 {
            match self.users.compare_exchange_weak(
                users,
                users + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => users = now,
            }
        }
        false
    }

    /// Counts one more user beside one the caller holds (never from 0).
    pub(crate) fn add_user(&self) {
        // Relaxed: as `Arc::clone`.
        self.users.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a user gone; whether it was the last, which must then stop the timer.
    pub(crate) fn leave_user(&self) -> bool {
        // AcqRel: as `Arc`'s drop, the last user sees what every other did before it left.
        self.users.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Leaves the process's live-timer count, once whoever calls: `stop()`, the owner dropped
    /// in a task, and a worker thread that unwinds (after which `stop()` finds the timer stopped).
    pub(crate) fn leave_live_timer_count(&self) {
        // Relaxed: a count for a log message; nothing is published with it.
        if self.in_live_timer_count.swap(false, Ordering::Relaxed) {
            LIVE_TIMERS.fetch_sub(1, Ordering::Relaxed);
        }
    }

    #[cfg(test)]
    pub(crate) fn in_live_timer_count(&self) -> bool {
        self.in_live_timer_count.load(Ordering::Relaxed)
    }

    pub(crate) fn state_name(&self) -> &'static str {
        match self.state.load(Ordering::Relaxed) {
            INIT => "not started",
            STARTED => "started",
            _ => "stopped",
        }
    }

    /// A driver is attached and can be woken: it has been polled since the last one went.
    pub(crate) fn is_driven(&self) -> bool {
        let control = lock(&self.control);
        !control.drivers.is_empty() && control.driver_waker.is_some()
    }

    pub(crate) fn on_worker_thread(&self) -> bool {
        lock(&self.control).worker_id == Some(thread::current().id())
    }

    pub(crate) fn set_worker_id(&self, id: Option<thread::ThreadId>) {
        lock(&self.control).worker_id = id;
    }
}
