//! The wheel driven from an async runtime's own threads: a future that runs the worker's turns
//! where the runtime polls it (see [`Drive`] for why).
//!
//! Owns [`Drive`]. Uses the lifecycle (start, a turn of the worker under its lock) and the
//! shared state's driver slot (`Control::drivers`, `Control::driver_waker`), through which
//! producers whose deadline is earlier than the plan wake the driver instead of the thread.

use super::lifecycle;
use crate::shared::{catch_user_panic, Shared, AWAKE};
use crate::sync::{lock, try_lock, Arc, AtomicBool, AtomicU64, Mutex, Ordering};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

/// A future that runs a timer's worker on the runtime that polls it: each due tick is
/// processed there, and between ticks it sleeps on the runtime's own timer, asked for one
/// sleep at a time. Made by [`HashedWheelTimer::drive`](crate::HashedWheelTimer::drive);
/// spawn it on the runtime that serves the timer's futures.
///
/// Why: on its own thread, the timer's worker wakes at each tick with work and wakes the
/// futures due from there, each wake-up a hand-off to a runtime thread. Driven from the
/// runtime, the tick is processed on the thread that the runtime's own timer wakes anyway,
/// and the woken futures are queued where they run. Tasks ([`TimerTask`](crate::TimerTask))
/// due meanwhile run there too (or on the executor, if one is set): keep them short, as any
/// code on a runtime thread.
///
/// The timer's thread stays as a watchdog: while a driver keeps up, it wakes once every 32
/// ticks and finds nothing due; if the driver is not polled (a runtime blocked or shut down),
/// the thread runs the ticks itself, at most 32 ticks late. Dropping the `Drive` (or the
/// runtime, which drops its tasks) hands the ticks back to the thread. Nothing about the
/// timer's contract changes: never early, Netty's order, at most about a tick late while the
/// runtime's timer is on time.
///
/// It completes when the timer stops. On a manual timer ([`Builder::build_manual`]) it
/// completes at once: its [`ManualDriver`](crate::ManualDriver) runs the ticks.
///
/// [`Builder::build_manual`]: crate::Builder::build_manual
///
/// ```
/// use hashed_timer_wheel::HashedWheelTimer;
/// use std::time::Duration;
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
/// let rt = tokio::runtime::Runtime::new().unwrap();
/// rt.block_on(async {
///     tokio::spawn(timer.drive(|at| tokio::time::sleep_until(at.into())));
///     timer.sleep(Duration::from_millis(5)).await.unwrap();
/// });
/// ```
#[must_use = "a Drive does nothing unless spawned or polled"]
pub struct Drive<F, S> {
    inner: Arc<Driver<F, S>>,
}

/// What a `Drive` shares with the waker it gives the runtime's sleeps, whose wake-up runs the
/// due turn itself (see `wake`).
struct Driver<F, S> {
    shared: Arc<Shared>,
    state: Mutex<DriverState<F, S>>,
    /// A turn was asked for while another caller held `state`: that caller runs one more.
    again: AtomicBool,
    /// The last tick a sleep is armed for: a wake-up that finds the worker near it has the
    /// task arm more.
    armed_until: AtomicU64,
}

/// Sleeps armed at once while every tick has work: the task that arms them runs once every
/// `AHEAD - REFILL` ticks, not at each.
const AHEAD: u64 = 8;
const REFILL: u64 = 2;

struct DriverState<F, S> {
    sleep_until: F,
    /// The runtime's sleeps, each for the end of its tick, in tick order: the next tick with
    /// work, and while every tick has work the ones after it (`AHEAD`).
    sleeps: VecDeque<(u64, Pin<Box<S>>)>,
    /// The timer stopped: the `Drive` completes.
    done: bool,
    /// The task that polls the `Drive`, woken when it completes.
    task: Option<Waker>,
}

impl<F, S> Drive<F, S>
where
    F: FnMut(Instant) -> S + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    pub(super) fn new(shared: &Arc<Shared>, sleep_until: F) -> Self {
        lock(&shared.control).drivers += 1;
        Drive {
            inner: Arc::new(Driver {
                shared: Arc::clone(shared),
                state: Mutex::new(DriverState {
                    sleep_until,
                    sleeps: VecDeque::new(),
                    done: false,
                    task: None,
                }),
                again: AtomicBool::new(false),
                armed_until: AtomicU64::new(0),
            }),
        }
    }
}

impl<F, S> Driver<F, S>
where
    F: FnMut(Instant) -> S + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    /// The instant tick `tick` ends, on the runtime's clock (`Instant`).
    fn end_of(&self, tick: u64) -> Instant {
        let clock = &self.shared.clock;
        let nanos = tick
            .saturating_add(1)
            .saturating_mul(self.shared.tick_nanos);
        // The end of the tick, rounded up to the next microsecond: a runtime whose timer
        // rounds (tokio rounds a deadline up to its millisecond) never wakes the driver before
        // the tick is over.
        clock.instant_at(nanos.div_ceil(1_000).saturating_mul(1_000))
    }

    /// Runs the due turns and arms the runtime's sleep for the next, with this driver as its
    /// waker; one caller at a time (another caller meanwhile has this one run once more).
    /// Returns whether the timer has stopped.
    fn run(self: &Arc<Self>) -> bool {
        self.again.store(true, Ordering::SeqCst);
        loop {
            let Some(mut state) = try_lock(&self.state) else {
                // The holder runs once more after it sees `again` (set above, before its
                // last look at it, or it has not looked yet).
                return false;
            };
            while self.again.swap(false, Ordering::SeqCst) {
                if state.done || self.turn_and_arm(&mut state) {
                    state.done = true;
                    break;
                }
            }
            let done = state.done;
            let task = if done { state.task.take() } else { None };
            drop(state);
            if let Some(task) = task {
                self.wake_task(task);
            }
            // A caller that found `state` held after our last look: run again for it.
            if done || !self.again.load(Ordering::SeqCst) {
                return done;
            }
        }
    }

    /// Wakes the `Drive`'s task: user code (the runtime's waker), whose panic is caught and
    /// counted, as any (this may run inside the runtime's timer).
    fn wake_task(&self, task: Waker) {
        if !catch_user_panic(|| task.wake()) {
            self.shared
                .counters
                .user_code_panicked("a driver's task waker");
        }
    }

    /// One turn (if due), then the runtime's sleeps for the ticks planned. True once the
    /// timer has stopped.
    fn turn_and_arm(self: &Arc<Self>, state: &mut DriverState<F, S>) -> bool {
        loop {
            let Some(plan) = lifecycle::drive_turn(&self.shared) else {
                return true;
            };
            let current = self.shared.worker_tick();
            // `AWAKE`: the thread's turn is under way: look again at the end of this tick.
            let plan = if plan == AWAKE { current } else { plan };
            state.retire_sleeps(plan);
            if plan == u64::MAX {
                // Nothing pending: a producer wakes the task (`Shared::unpark_worker`).
                return false;
            }
            // While the next tick has work, the ones after it likely do too.
            let until = if plan <= current {
                plan + AHEAD - 1
            } else {
                plan
            };
            if !self.arm_sleeps(state, plan, until) {
                return false;
            }
        }
    }

    /// Arms the runtime's sleeps for the ticks from `plan` (or after the last armed) to
    /// `until`, each polled once, and notes the last tick armed. True if one has ended
    /// already: its tick is due, for another turn.
    fn arm_sleeps(self: &Arc<Self>, state: &mut DriverState<F, S>, plan: u64, until: u64) -> bool {
        let waker = Waker::from(Arc::clone(self));
        let mut cx = Context::from_waker(&waker);
        let mut ended = false;
        let mut tick = state.sleeps.back().map_or(plan, |&(last, _)| last + 1);
        while tick <= until {
            let mut sleep = Box::pin((state.sleep_until)(self.end_of(tick)));
            ended |= sleep.as_mut().poll(&mut cx).is_ready();
            state.sleeps.push_back((tick, sleep));
            tick += 1;
        }
        let last = state.sleeps.back().map_or(plan, |&(last, _)| last);
        self.armed_until.store(last, Ordering::SeqCst);
        ended
    }
}

impl<F, S> DriverState<F, S> {
    /// Drops the sleeps a turn that planned `plan` no longer needs: those for the ticks
    /// before it (ended, or not needed), and all of them if it plans nothing, or plans a tick
    /// before the first one armed.
    fn retire_sleeps(&mut self, plan: u64) {
        while self.sleeps.front().is_some_and(|&(tick, _)| tick < plan) {
            self.sleeps.pop_front();
        }
        if plan == u64::MAX {
            // Nothing pending.
            self.sleeps.clear();
        } else if self.sleeps.front().is_some_and(|&(tick, _)| tick > plan) {
            // A producer's deadline came before the sleeps armed: arm from the plan.
            self.sleeps.clear();
        }
    }
}

impl<F, S> Wake for Driver<F, S>
where
    F: FnMut(Instant) -> S + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    /// The runtime's sleep ended: the tick's turn runs here, where the runtime's timer wakes
    /// its own sleeps, so that the futures the tick wakes are queued as the runtime's own
    /// timers' are. The task arms the next sleep: a runtime may refuse a new timer from inside
    /// its timer's wake-ups (tokio does while it shuts down).
    fn wake(self: Arc<Self>) {
        let plan = lifecycle::drive_turn(&self.shared);
        let near_the_end =
            self.shared.worker_tick() + REFILL > self.armed_until.load(Ordering::SeqCst);
        if plan.is_none() || near_the_end {
            // Not `lock`: a runtime's sleep may wake us from inside its own poll, under
            // `state`; its holder then arms again (`again`).
            let Some(state) = try_lock(&self.state) else {
                self.again.store(true, Ordering::SeqCst);
                return;
            };
            let task = state.task.clone();
            drop(state);
            if let Some(task) = task {
                self.wake_task(task);
            }
        }
    }
}

impl<F, S> Future for Drive<F, S>
where
    F: FnMut(Instant) -> S + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let inner = &self.inner;
        {
            // Producers whose deadline is earlier than the plan wake this task.
            let mut control = lock(&inner.shared.control);
            if !control
                .driver_waker
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                control.driver_waker = Some(cx.waker().clone());
            }
        }
        {
            let mut state = lock(&inner.state);
            if state.done {
                return Poll::Ready(());
            }
            if !state.task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                state.task = Some(cx.waker().clone());
            }
        }
        if super::start(&inner.shared).is_err() || inner.run() {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl<F, S> Drop for Drive<F, S> {
    /// Hands the ticks back to the worker thread.
    fn drop(&mut self) {
        // The runtime's sleeps hold the driver as their waker: dropped here, or the driver
        // would keep itself alive.
        let sleeps = std::mem::take(&mut lock(&self.inner.state).sleeps);
        drop(sleeps);
        let mut control = lock(&self.inner.shared.control);
        control.drivers -= 1;
        if control.drivers == 0 {
            control.driver_waker = None;
            if let Some(thread) = &control.worker_thread {
                thread.unpark();
            }
        }
    }
}

impl<F, S> fmt::Debug for Drive<F, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drive").finish_non_exhaustive()
    }
}
