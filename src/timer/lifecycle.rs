//! Starting and stopping: the worker thread's lazy start, `stop()`, the last user (the owner,
//! an adapter: `KeepAlive`) dropped, also on the worker thread, the warning of too many live
//! timers, and a runtime driver's turn. Owns the run state's moves (`INIT -> STARTED ->
//! SHUTDOWN`, under `control`) and the worker's place: `Shared::worker`, under the lock each
//! turn holds, taken out at `stop()`. It is kept there type-erased (`shared` is below
//! `worker`): the builder erases it, this module takes it back, and the thread's turn downcasts
//! it in place (`worker/thread.rs`). Uses the shared state, the worker and `Timeout`.

use crate::shared::cells::CellRef;
use crate::shared::{
    catch_user_panic, enter_live_timer_count, ErasedWorker, Shared, Stored, TimerHandle,
    DRIVEN_GRACE_TICKS,
};
use crate::sync::{lock, process, thread, try_lock, Arc, Ordering, Weak};
use crate::worker::{self, Worker};
use crate::{Timeout, TimerError};

/// Live timers above which an error is logged once (Netty's `INSTANCE_COUNT_LIMIT`). A timer counts
/// from construction until stopped or dropped.
///
/// ```
/// assert_eq!(hashed_timer_wheel::INSTANCE_COUNT_LIMIT, 64);
/// ```
pub const INSTANCE_COUNT_LIMIT: usize = 64;

static WARNED_TOO_MANY: process::AtomicBool = process::AtomicBool::new(false);

/// Counts a new timer; past [`INSTANCE_COUNT_LIMIT`] logs Netty's error, once per process.
pub(super) fn count_instance() {
    let live = enter_live_timer_count();
    if live > INSTANCE_COUNT_LIMIT && !WARNED_TOO_MANY.swap(true, Ordering::Relaxed) {
        // The logger is user code: its panic must not unwind `build` with the timer counted.
        crate::shared::log_caught(
            log::Level::Error,
            format_args!(
                "you are creating too many HashedWheelTimer instances ({live} live). \
                 HashedWheelTimer is a shared resource that must be reused across the \
                 process, so that only a few instances are created"
            ),
        );
    }
}

/// The worker back from `Shared::worker` (only the builder puts one there).
pub(super) fn worker_from<J: Stored>(idle: ErasedWorker) -> Worker<J> {
    *idle
        .downcast::<Worker<J>>()
        .expect("`Shared::worker` holds only this timer's worker")
}

pub(super) fn worker_mut<J: Stored>(idle: &mut ErasedWorker) -> &mut Worker<J> {
    idle.downcast_mut::<Worker<J>>()
        .expect("`Shared::worker` holds only this timer's worker")
}

/// Ends a timeout that never ran, for `stop()`, whose worker runs no more turns: its handle,
/// unless it had been cancelled (then counted as such) or is a future's.
fn end_at_stop<J: Stored>(state: CellRef) -> Option<Timeout<J>> {
    state.cancel_never_run().map(|state| Timeout::new(state))
}

/// Before the timer starts nothing is scheduled: the ticks the clock has passed ended empty, and
/// the worker goes on from the clock's tick (also what `stats().tick` reads before its first turn).
pub(super) fn start_at_clock_tick<J: Stored>(shared: &Shared<J>, idle: &mut ErasedWorker) {
    let tick = shared.clock.now() / shared.tick_nanos;
    worker_mut::<J>(idle).set_tick(tick);
    shared.set_tick(tick);
}

/// Starts the worker thread, once, unless a `ManualDriver` runs the worker.
#[cold]
pub(super) fn start_slow<J: Stored>(shared: &Arc<Shared<J>>) -> Result<(), TimerError> {
    let mut control = lock(&shared.control);
    if shared.is_started() {
        return Ok(());
    }
    if shared.is_shutdown() {
        return Err(TimerError::Stopped);
    }
    if !shared.manual {
        let mut held = lock(&shared.worker);
        let idle = held.as_mut().expect("an unstarted timer holds its worker");
        start_at_clock_tick(shared, idle);
        drop(held);
        let for_thread = Arc::clone(shared);
        let join = thread::Builder::new()
            .name(shared.thread_name.to_string())
            .spawn(move || worker::thread_main(for_thread))
            .unwrap_or_else(|e| panic!("hashed-timer-wheel: cannot spawn the worker thread: {e}"));
        control.worker_thread = Some(join.thread().clone());
        control.worker_id = Some(join.thread().id());
        control.join = Some(join);
    }
    shared.mark_started();
    Ok(())
}

pub(super) fn stop<J: Stored>(shared: &Arc<Shared<J>>) -> Result<Vec<Timeout<J>>, TimerError> {
    if shared.on_worker_thread() {
        return Err(TimerError::StopFromWorker);
    }
    let (was_stopped, join) = {
        let mut control = lock(&shared.control);
        (shared.mark_shutdown(), control.join.take())
    };
    if was_stopped {
        // Another `stop()` is under way: wait, as it does, for the task the worker may be
        // running (a turn holds the worker's lock).
        drop(lock(&shared.worker));
        return Ok(Vec::new());
    }
    shared.leave_live_timer_count();
    super::deadline::forget_timer(Arc::as_ptr(shared).cast());
    // A runtime's driver completes once it sees SHUTDOWN: it may be waiting to be woken.
    wake_driver(shared);
    if let Some(join) = join {
        join.thread().unpark();
        // User code cannot unwind the thread (each place that runs or drops it catches its
        // panic); a crate bug that did has stopped the timer and logged it.
        let _ = join.join();
    }
    let mut out = drain_worker(shared);
    drain_queues(shared, &mut out);
    Ok(out)
}

/// Takes the worker out (waiting for a turn under way) and ends its wheel's timeouts: the handles
/// `stop()` returns.
fn drain_worker<J: Stored>(shared: &Shared<J>) -> Vec<Timeout<J>> {
    let worker = lock(&shared.worker).take();
    let mut out = Vec::new();
    if let Some(worker) = worker {
        let mut worker = worker_from::<J>(worker);
        let states = worker.drain();
        out.extend(states.into_iter().filter_map(end_at_stop));
    }
    out
}

/// Ends a stopped timer's queued timeouts (their handles into `out`) and frees the shards' chunks.
fn drain_queues<J: Stored>(shared: &Shared<J>, out: &mut Vec<Timeout<J>>) {
    // The buffers themselves, so that their memory goes too. A producer that locks a shard after
    // this sees SHUTDOWN and pushes nothing: no queued task's handle keeps the timer alive.
    let queued = shared.timeouts.take_all();
    // The chunks hold handles on this timer. A producer (or the worker handing spares over) that
    // locks a shard after this sees SHUTDOWN and adds none.
    shared.timeouts.for_each_data(|p| p.cursors.clear());
    out.extend(queued.into_states().into_iter().filter_map(end_at_stop));
    drop(shared.cancellations.take_all());
}

/// The last user (the owner, an adapter) dropped inside a task or a waker on the worker thread:
/// stop without joining; the worker drops its wheel itself.
/// Already stopped, a `stop()` from another thread is under way (it waits for this turn) and
/// returns what the wheel and the queues hold: they are left to it.
pub(super) fn shutdown_from_worker<J: Stored>(shared: &Shared<J>) {
    let (was_stopped, join) = {
        let mut control = lock(&shared.control);
        (shared.mark_shutdown(), control.join.take())
    };
    if was_stopped {
        return;
    }
    shared.mark_owner_dropped_in_task();
    shared.leave_live_timer_count();
    super::deadline::forget_timer(std::ptr::from_ref(shared).cast());
    wake_driver(shared);
    // Detached: the thread (or a driver, after its turn) drops the worker. Unparked, in case it
    // sleeps with no deadline.
    if let Some(join) = join {
        join.thread().unpark();
    }
    // Nobody else drains the queues: queued tasks holding a handle would keep the timer alive.
    for state in shared.timeouts.take_all().into_states() {
        state.end_unreturned();
    }
    shared.timeouts.for_each_data(|p| p.cursors.clear());
    drop(shared.cancellations.take_all());
}

/// A runtime driver's turn (see `timer::drive`), unless another is under way, with the caller as
/// the worker's thread meanwhile (a task that stops the timer is then on it). The plan, as
/// `worker::turn` returns it; `None` once stopped (or manual).
pub(super) fn drive_turn<J: Stored>(shared: &Arc<Shared<J>>) -> Option<u64> {
    if shared.manual || shared.is_shutdown() {
        return None;
    }
    let Some(mut held) = try_lock(&shared.worker) else {
        // Another turn is under way (the worker thread's): its plan, once published.
        return Some(shared.plan());
    };
    let idle = held.as_mut()?;
    let me = thread::current().id();
    let thread_id = lock(&shared.control).worker_id.replace(me);
    let plan = worker::turn(worker_mut::<J>(idle), shared);
    end_drive_turn(shared, thread_id, plan);
    if shared.is_shutdown() {
        if shared.owner_dropped_in_task() {
            // A task dropped the owner: nobody calls `stop()` to take the worker.
            let worker = held.take();
            drop(held);
            drop(worker);
        }
        return None;
    }
    Some(plan)
}

/// Ends a driver's turn that planned `plan`: the worker's thread is `thread_id` again, and the
/// watchdog is unparked to watch this plan if it parked (nothing was pending), or if it sleeps
/// until more than the grace past it. A producer that found the turn under way (`AWAKE`) woke
/// nobody, and the plan may now be well before the one the watchdog last saw.
fn end_drive_turn<J: Stored>(shared: &Shared<J>, thread_id: Option<thread::ThreadId>, plan: u64) {
    let mut control = lock(&shared.control);
    control.worker_id = thread_id;
    if plan == u64::MAX {
        return;
    }
    let watching_past = plan.saturating_add(DRIVEN_GRACE_TICKS) < control.watchdog_until;
    if control.watchdog_parked || watching_past {
        control.watchdog_parked = false;
        if let Some(thread) = &control.worker_thread {
            thread.unpark();
        }
    }
}

/// Wakes every runtime's driver, so that each sees the timer stopped and completes: the one
/// producers wake, and each attached `Drive` through its turn's waker (it wakes its task).
fn wake_driver<J: Stored>(shared: &Shared<J>) {
    let (waker, drivers) = {
        let control = lock(&shared.control);
        (control.driver_waker.clone(), control.drivers.clone())
    };
    if let Some(waker) = waker {
        shared.wake_driver_with(waker);
    }
    for driver in drivers.iter().filter_map(Weak::upgrade) {
        // The task's waker is the runtime's code; so is the drop of a `Drive` gone meanwhile
        // (the last reference may be ours).
        let woken = catch_user_panic(move || driver.wake_stopped());
        shared.counters.caught(woken, "a driver's waker");
    }
}

/// Counts a user of the timer gone (the owner, an adapter, an adapter's future): the last one
/// stops it, as `stop()` does, with what never ran dropped; on the worker thread (in a task, a
/// waker) without waiting for it, which would deadlock.
pub(super) fn release<J: Stored>(shared: &Arc<Shared<J>>) {
    if !shared.leave_user() {
        return;
    }
    if shared.on_worker_thread() {
        shutdown_from_worker(shared);
    } else {
        // Cannot fail off the worker thread; what never ran is dropped.
        let _ = stop(shared);
    }
}

/// A [`TimerHandle`] that keeps its timer running: what the adapters hold, and the futures
/// they hand out. While any exists the owner's drop does not stop the timer; the last of them
/// (or the owner, if it goes last) stops it. `stop()` still stops it for everyone.
pub(crate) struct KeepAlive {
    handle: TimerHandle,
}

impl KeepAlive {
    /// Keeps `handle`'s timer running; [`TimerError::Stopped`] if it is stopped, or stops now
    /// for want of a user.
    pub(crate) fn new(handle: TimerHandle) -> Result<KeepAlive, TimerError> {
        if handle.shared.is_shutdown() || !handle.shared.enter_user() {
            return Err(TimerError::Stopped);
        }
        Ok(KeepAlive { handle })
    }
}

impl std::ops::Deref for KeepAlive {
    type Target = TimerHandle;

    fn deref(&self) -> &TimerHandle {
        &self.handle
    }
}

impl Clone for KeepAlive {
    fn clone(&self) -> Self {
        self.handle.shared.add_user();
        KeepAlive {
            handle: self.handle.clone(),
        }
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        release(&self.handle.shared);
    }
}

impl std::fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.handle.fmt(f)
    }
}
