//! The timer's lifecycle on the shared state: the worker thread's lazy start, who runs the
//! turns, `stop()`, and the owner's drop (inside a turn too).
//!
//! The turns run on the worker thread, or on a runtime's `Drive`. While a `Drive` is attached,
//! producers wake it instead of the thread, and the thread only watches: it sleeps until
//! a grace past the plan (`GRACE_TICKS`) and runs the turn itself if nobody has.

use super::{catch_user_panic, drop_caught, NeverRan, Runner, Shared, Stored};
use super::{NEVER, SHUTDOWN, STARTED};
use crate::error::TimerError;
use crate::sync::{fence, lock, process, thread, Arc, Ordering};

/// Live timers above this many log an error once per process (Netty's `INSTANCE_COUNT_LIMIT`).
pub const INSTANCE_COUNT_LIMIT: usize = 64;

/// Timers built and not yet shut down, in this process.
static LIVE_TIMERS: process::AtomicUsize = process::AtomicUsize::new(0);
static WARNED: process::AtomicBool = process::AtomicBool::new(false);

/// Counts a new timer, warning once past [`INSTANCE_COUNT_LIMIT`].
pub(crate) fn count_instance() {
    // Relaxed: counts for a log message; nothing is published with them.
    let live = LIVE_TIMERS.fetch_add(1, Ordering::Relaxed) + 1;
    if live > INSTANCE_COUNT_LIMIT && !WARNED.swap(true, Ordering::Relaxed) {
        super::log_caught(
            log::Level::Error,
            format_args!(
                "you are creating too many HashedWheelTimer instances ({live} live). \
                 HashedWheelTimer is a shared resource that must be reused across the \
                 process, so that only a few instances are created"
            ),
        );
    }
}

impl<J: Stored> Shared<J> {
    /// Starts the worker thread, once; refused once the timer is shut down (with or without one).
    #[inline]
    pub(crate) fn start(self: &Arc<Self>) -> Result<(), TimerError> {
        // Acquire: pairs with the Release in `start_thread`.
        match self.state.load(Ordering::Acquire) {
            STARTED => Ok(()),
            SHUTDOWN => Err(TimerError::Stopped),
            _ if !self.clock.has_thread() => Ok(()),
            _ => self.start_thread(),
        }
    }

    #[cold]
    fn start_thread(self: &Arc<Self>) -> Result<(), TimerError> {
        let mut thread = lock(&self.thread);
        if self.is_shutdown() {
            return Err(TimerError::Stopped);
        }
        if self.is_started() {
            return Ok(());
        }
        let shared = Arc::clone(self);
        let handle = thread::Builder::new()
            .name(self.thread_name.to_string())
            .spawn(move || run_thread(&shared))
            .unwrap_or_else(|e| panic!("hashed-timer-wheel: cannot spawn the worker thread: {e}"));
        *lock(&self.worker_thread) = Some(handle.thread().clone());
        *thread = Some(handle);
        // Until the thread's first turn, the tick is the clock's.
        self.set_tick(self.clock.now() / self.tick_nanos);
        // Release: pairs with the Acquire in `is_started`.
        self.state.store(STARTED, Ordering::Release);
        Ok(())
    }

    pub(crate) fn is_started(&self) -> bool {
        self.state.load(Ordering::Acquire) == STARTED
    }

    /// Runs a turn at `now` for `runner` and publishes the plan; the plan, and the earliest
    /// deadline a `Drive`'s turn left in the tick (`NEVER`: none); `None` once shut down. If the
    /// owner went during the turn, this ends every timeout (`stop()` with nothing returned).
    pub(crate) fn run_turn(&self, now: u64, runner: Runner) -> Option<(u64, u64)> {
        let mut guard = lock(&self.worker);
        let worker = guard.as_mut()?;
        if self.is_shutdown() {
            return None;
        }
        *lock(&self.turn_thread) = Some(thread::current().id());
        worker.tally.wakeups += u64::from(!self.clock.is_manual());
        let pace = worker.turn(self, now, runner);
        let plan = (worker.plan(self, pace), worker.soonest);
        worker.publish(self);
        *lock(&self.turn_thread) = None;
        // Acquire: pairs with the Release in `shutdown`.
        if self.orphaned.load(Ordering::Acquire) {
            let mut worker = guard.take()?;
            drop(guard);
            let mut returned = Vec::new();
            worker.stop(self, &mut returned);
            // Nobody receives them: they count as cancelled.
            worker.tally.cancelled += returned.len() as u64;
            worker.publish(self);
            self.drop_tasks(returned);
            self.clear_shards();
            return None;
        }
        Some(plan)
    }

    /// Whether this thread runs a turn of this timer now (user code it calls).
    pub(crate) fn in_turn(&self) -> bool {
        *lock(&self.turn_thread) == Some(thread::current().id())
    }

    /// Refuses every `new_timeout` from now on: SHUTDOWN, set under the `thread` lock, then
    /// every shard's lock taken once (a producer that saw it clear has pushed); the worker
    /// thread's handle, if any. `None` if it was shut down already.
    fn shut(&self) -> Option<Option<thread::JoinHandle<()>>> {
        let join = {
            let mut thread = lock(&self.thread);
            if self.state.swap(SHUTDOWN, Ordering::SeqCst) == SHUTDOWN {
                return None;
            }
            thread.take()
        };
        for shard in self.shards.iter() {
            drop(lock(shard));
        }
        // Relaxed: a count for a log message.
        LIVE_TIMERS.fetch_sub(1, Ordering::Relaxed);
        self.wake_driver();
        Some(join)
    }

    /// The last user (the owner, or the last adapter keeping the timer running) went.
    pub(crate) fn release(&self) {
        // AcqRel: the last user sees every other user's work done.
        if self.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shutdown();
        }
    }

    /// One more user keeps the timer running; refused once it is stopped or every user went.
    pub(crate) fn enter_user(&self) -> Result<(), TimerError> {
        let one_more = |users: usize| (users != 0 && !self.is_shutdown()).then_some(users + 1);
        let counted = self
            .users
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, one_more);
        counted.map(drop).map_err(|_| TimerError::Stopped)
    }

    /// Stops the timer: the timeouts that neither expired nor were cancelled, each now
    /// cancelled, with their tasks. Empty the second time.
    pub(crate) fn stop(&self) -> Result<Vec<NeverRan<J>>, TimerError> {
        if self.in_turn() {
            return Err(TimerError::StopFromWorker);
        }
        let Some(join) = self.shut() else {
            // Another stop is under way: wait, as it does, for the task a turn may be running.
            drop(lock(&self.worker));
            return Ok(Vec::new());
        };
        if let Some(join) = join {
            self.unpark_worker();
            // A task's panic never unwinds the worker; a join error would be the crate's bug.
            let _ = join.join();
        }
        let worker = lock(&self.worker).take();
        let mut returned = Vec::new();
        if let Some(mut worker) = worker {
            worker.stop(self, &mut returned);
        }
        self.clear_shards();
        Ok(returned)
    }

    /// The owner's drop: a stop whose returned timeouts are dropped. Inside a turn (a task
    /// dropped the owner) it only shuts the timer: the turn's runner ends the rest.
    pub(crate) fn shutdown(&self) {
        if !self.in_turn() {
            self.drop_tasks(self.stop().unwrap_or_default());
            return;
        }
        // The thread's handle goes: nobody joins a thread from itself. If a `stop()` shut the
        // timer first, it waits for this turn and takes the rest.
        if self.shut().is_some() {
            // Release: pairs with the Acquire in `run_turn`.
            self.orphaned.store(true, Ordering::Release);
        }
    }

    /// Drops the tasks of timeouts `stop()` returned to nobody, each on its own: a task's
    /// `Drop` that panics is caught, counted and logged, and the others are still dropped.
    fn drop_tasks(&self, returned: Vec<NeverRan<J>>) {
        for never_ran in returned {
            let dropped = drop_caught(never_ran.into_task());
            self.counters.caught(dropped, "a timer task's drop");
        }
    }

    /// The shards let go of their blocks and segments: no block keeps the timer alive.
    fn clear_shards(&self) {
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            shard.cursors = [None, None];
            shard.spares = [Vec::new(), Vec::new()];
            shard.free_segments.clear();
        }
    }

    /// Wakes whoever runs the turns: the `Drive` polled last, else the worker thread.
    #[cold]
    pub(crate) fn unpark_worker(&self) {
        let driver = lock(&self.drivers).last().cloned();
        match driver {
            Some(driver) => self.wake_caught(driver),
            None => self.unpark_thread(),
        }
    }

    /// Wakes a `Drive`: the runtime's code, caught as all user code is.
    fn wake_caught(&self, driver: std::task::Waker) {
        let woken = catch_user_panic(|| driver.wake());
        self.counters.caught(woken, "a driver's waker");
    }

    /// A `Drive` polled, by its own `waker`: producers wake it from now on.
    pub(crate) fn attach_driver(&self, waker: &std::task::Waker) {
        let mut drivers = lock(&self.drivers);
        if !drivers.last().is_some_and(|w| w.will_wake(waker)) {
            drivers.retain(|w| !w.will_wake(waker));
            drivers.push(waker.clone());
        }
    }

    /// A `Drive` went: the one polled before it, if any, is woken, else the worker thread.
    pub(crate) fn detach_driver(&self, waker: &std::task::Waker) {
        let gone: Vec<_> = lock(&self.drivers)
            .extract_if(.., |w| w.will_wake(waker))
            .collect();
        let dropped = drop_caught(gone);
        self.counters.caught(dropped, "a driver's waker");
        self.unpark_worker();
    }

    /// Whether a `Drive` runs the turns (the thread only watches).
    pub(crate) fn is_driven(&self) -> bool {
        !lock(&self.drivers).is_empty()
    }

    /// A `Drive`'s turn or a producer planned `plan`: a thread watching a plan later by more
    /// than the grace watches again.
    pub(crate) fn watch_plan(&self, plan: u64) {
        // SeqCst: with the thread's store of the plan it watches, before its last look at the
        // plan (`watch`): either it sees this plan, or this sees the one it sleeps on.
        fence(Ordering::SeqCst);
        if plan.saturating_add(self.grace()) < self.watching.load(Ordering::SeqCst) {
            self.unpark_thread();
        }
    }

    /// The watching thread's grace in ticks: `GRACE_TICKS`, each counted as 4 ms at least.
    fn grace(&self) -> u64 {
        GRACE_TICKS.saturating_mul(self.tick_nanos.max(4_000_000)) / self.tick_nanos
    }

    pub(crate) fn unpark_thread(&self) {
        if let Some(worker) = lock(&self.worker_thread).as_ref() {
            worker.unpark();
        }
    }

    /// Wakes every `Drive` for good: the timer shut down.
    pub(crate) fn wake_driver(&self) {
        let drivers = std::mem::take(&mut *lock(&self.drivers));
        for driver in drivers {
            self.wake_caught(driver);
        }
    }
}

/// The worker thread: turns, and sleeps to the planned tick, until the timer stops.
pub(crate) fn run_thread<J: Stored>(shared: &Arc<Shared<J>>) {
    let mut planned = shared.run_turn(shared.clock.passed(), Runner::Thread);
    while let Some((plan, _)) = planned {
        if shared.is_shutdown() {
            return;
        }
        if shared.is_driven() {
            // A `Drive` that went while watched leaves `plan` stale: a turn plans afresh.
            if !watch(shared) && shared.is_driven() {
                continue;
            }
        } else {
            park_after(shared, plan, 0);
        }
        shared.mark_awake();
        planned = shared.run_turn(shared.clock.passed(), Runner::Thread);
    }
}

/// The watching thread's grace: a `Drive`'s turns may lag this many ticks (of 4 ms at least)
/// past its plan before the thread runs one; a plan earlier by at most as much wakes nobody, so
/// it takes over at most twice this late. It wakes once a grace while a `Drive` keeps up: 30 µs
/// of CPU a wake under KVM, where 16 ticks of 1 ms cost a service 5 % of its CPU at low load.
const GRACE_TICKS: u64 = 16;

/// Watches a `Drive`: sleeps until the grace after its plan; whether the turn is overdue.
fn watch<J: Stored>(shared: &Shared<J>) -> bool {
    let plan = shared.planned();
    // SeqCst: with the `Drive`'s fence and look in `Shared::watch_plan`.
    shared.watching.store(plan, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    let grace = shared.grace();
    if shared.planned().saturating_add(grace) < plan || !shared.is_driven() {
        // Planned earlier meanwhile (the `Drive` may have looked before the store): again.
        return false;
    }
    park_after(shared, plan, grace)
}

/// Parks until `grace` ticks after the end of tick `plan` (for good at `NEVER`), or until
/// unparked; whether that time had passed already. Under loom the clock jumps there instead,
/// unless the model holds the clock (`loom_hooks::advance_clock`).
fn park_after<J: Stored>(shared: &Shared<J>, plan: u64, grace: u64) -> bool {
    if plan == NEVER {
        thread::park();
        return false;
    }
    let wake_at = plan
        .saturating_add(1 + grace)
        .saturating_mul(shared.tick_nanos);
    // The plan was stored before this look at the clock; an OS timer (loom: `advance_clock`,
    // which moves the clock, fences, then reads the plan) sees one or the other.
    fence(Ordering::SeqCst);
    let now = shared.clock.passed();
    if wake_at <= now {
        return true;
    }
    #[cfg(not(loom))]
    thread::park_timeout(std::time::Duration::from_nanos(wake_at - now));
    #[cfg(loom)]
    if crate::sync::loom_hooks::clock_held() {
        thread::park();
    } else {
        shared.clock.loom_advance(wake_at);
    }
    false
}
