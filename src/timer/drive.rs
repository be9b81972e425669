//! The wheel driven from an async runtime: [`Drive`], a future that runs the worker's turns where
//! the runtime polls it (`docs/performance.md`, "Runtime-driven turns"). Uses the lifecycle
//! (start, a turn under the worker's lock) and the shared driver slot (`Control::drivers`,
//! `Control::driver_waker`), through which producers wake the driver.
//!
//! # Who runs the turns
//! The worker's turns run one at a time: the worker thread, a `Drive` and a `ManualDriver` each
//! run a turn under `Shared::worker`'s lock (`worker::turn`, `lifecycle::drive_turn`,
//! `ManualDriver::advance_with`, which reads the manual clock under that lock too). While a
//! driver is attached, producers wake it, else the thread (`Shared::unpark_worker`). The
//! thread then watches over the driver: parked with nothing pending, it is unparked by a
//! driver's turn that plans a tick (`Control::watchdog_parked`); else it sleeps until 32 ticks
//! past the driver's plan, to take over from a driver that stalls, and a producer whose
//! deadline, or a driver's turn whose plan, lies well before that unparks it
//! (`Control::watchdog_until`).
//! A dropped `Drive`, and one the runtime's panics leave with no sleep armed, leave
//! (`Driver::detach`): the producers' waker is cleared and the thread runs the ticks until a
//! driver is polled again. `stop()` wakes every attached `Drive` (`Control::drivers`), so that
//! each completes; a `Drive` polled by a new task (another runtime) arms its sleeps afresh.

use super::lifecycle;
use crate::shared::{catch_user_panic, drop_caught, AttachedDriver, Shared, AWAKE};
use crate::sync::{lock, try_lock, Arc, AtomicBool, AtomicU64, Mutex, Ordering, Weak};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

/// A future that runs a timer's worker on the runtime that polls it, sleeping between ticks on the
/// runtime's own timer. Made by [`HashedWheelTimer::drive`](crate::HashedWheelTimer::drive); spawn
/// it on the runtime that serves the timer's futures.
///
/// Why: the tick is processed on the thread the runtime's timer wakes anyway, and the futures it
/// wakes are queued where they run, with no hand-off from the timer's thread. Tasks
/// ([`TimerTask`](crate::TimerTask)) due meanwhile run there too (unless an executor is set): keep
/// them short.
///
/// The timer's thread stays as a watchdog: if the driver is not polled, it runs the ticks, at most
/// 32 ticks late; dropping the `Drive` hands them back. Until a `Drive` is first polled, and after
/// another `Drive` of the timer is dropped until one is polled again, the thread runs the ticks
/// itself. The timing contract is unchanged. It completes when the timer stops, at once on a
/// manual timer ([`Builder::build_manual`]).
///
/// The runtime's code may panic: `sleep_until`, a sleep's poll or `Drop`, a waker (tokio's
/// `sleep_until` does on a runtime without timers, a sleep's poll once its runtime shuts down).
/// Each panic is caught, counted in [`TimerStats::panicked`](crate::TimerStats::panicked) and
/// logged, and the `Drive` goes on with the sleeps it could arm. One is not: a clone of the
/// waker of the task that polls (see "Panics"). If it can arm none, nothing
/// would wake it at its tick: it hands the ticks back to the timer's thread, as dropping it
/// does, and completes, so that its task ends rather than wait unwoken while holding the
/// ticks (a failing runtime timer tends to fail again; spawn a new `Drive` to try again).
///
/// # Panics
///
/// A poll by a new task clones its context's waker (once: the `Drive`, the producers and
/// `stop()` share that copy) and unwinds with that clone's panic, as any future would. Nothing
/// has changed then: the `Drive` goes on with the task that polled it last, and can be polled
/// again. The first poll panics, as [`HashedWheelTimer::start`](crate::HashedWheelTimer::start)
/// does, if it cannot spawn the timer's thread.
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

/// What a `Drive` shares with the waker of the runtime's sleeps, whose wake-up runs the turn.
struct Driver<F, S> {
    shared: Arc<Shared>,
    state: Mutex<DriverState<F, S>>,
    /// A turn was asked for while another caller held `state`: that caller runs one more.
    again: AtomicBool,
    /// The last tick a sleep is armed for; a wake-up near it has the task arm more.
    armed_until: AtomicU64,
}

/// Sleeps armed at once while every tick has work: the task that arms them runs once every
/// `AHEAD - REFILL` ticks, not at each.
const AHEAD: u64 = 8;
const REFILL: u64 = 2;

/// The runtime's sleeps in tick order, each for the end of its tick.
type Sleeps<S> = VecDeque<(u64, Pin<Box<S>>)>;

/// What a turn left the `Drive` with.
enum Turned {
    /// Sleeps armed for the plan (or nothing pending: a producer wakes the task).
    Waiting,
    /// The timer has stopped.
    Stopped,
    /// The runtime's code panicked arming a sleep, and none is left armed: nothing would wake
    /// the driver at its tick.
    Unarmed,
}

/// What arming the sleeps came to.
enum Armed {
    /// Up to the tick asked for, or fewer if the runtime's code panicked, but at least one.
    Waiting,
    /// One of them has ended already: turn again.
    Ended,
    /// None is armed: the runtime's code panicked on the first.
    Unarmed,
}

struct DriverState<F, S> {
    sleep_until: F,
    /// The runtime's sleeps in tick order, each for the end of its tick.
    sleeps: Sleeps<S>,
    /// The timer stopped: the `Drive` completes.
    done: bool,
    /// The waker of the task that polls the `Drive`, woken when it completes: the one clone of
    /// it the `Drive` makes, shared with the producers (`Control::driver_waker`), so that waking
    /// the task runs no clone of the runtime's.
    task: Option<Arc<Waker>>,
}

impl<F, S> Drive<F, S>
where
    F: FnMut(Instant) -> S + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    pub(super) fn new(shared: &Arc<Shared>, sleep_until: F) -> Self {
        let drive = Drive {
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
        };
        let attached: Weak<Driver<F, S>> = Arc::downgrade(&drive.inner);
        lock(&shared.control)
            .drivers
            .push(attached as Weak<dyn AttachedDriver>);
        drive
    }
}

impl<F, S> Driver<F, S>
where
    F: FnMut(Instant) -> S + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    fn end_of(&self, tick: u64) -> Instant {
        let clock = &self.shared.clock;
        let nanos = tick
            .saturating_add(1)
            .saturating_mul(self.shared.tick_nanos);
        // Rounded up to the microsecond, so that a runtime whose timer rounds (tokio: up to the
        // millisecond) never wakes the driver before the tick is over.
        clock.instant_at(nanos.div_ceil(1_000).saturating_mul(1_000))
    }

    /// Runs the due turns and arms the next sleep, one caller at a time (a caller meanwhile has
    /// this one run once more). True once done: the timer has stopped, or no sleep could be
    /// armed (the ticks are then handed back to the worker thread).
    fn run(self: &Arc<Self>) -> bool {
        self.again.store(true, Ordering::SeqCst);
        loop {
            let Some(mut state) = try_lock(&self.state) else {
                // The holder runs once more: it has yet to read `again`, set above.
                return false;
            };
            let mut turned = Turned::Waiting;
            while !state.done && self.again.swap(false, Ordering::SeqCst) {
                turned = self.turn_and_arm(&mut state);
                state.done = !matches!(turned, Turned::Waiting);
            }
            let done = state.done;
            let task = if done { state.task.take() } else { None };
            drop(state);
            if matches!(turned, Turned::Unarmed) {
                self.detach();
            }
            if let Some(task) = task {
                self.wake_task(task);
            }
            // A caller that found `state` held after our last look: run again for it.
            if done || !self.again.load(Ordering::SeqCst) {
                return done;
            }
        }
    }

    /// The copy of `waker` noted for the task that polls, if any (`Some(None)`: a new task);
    /// `None` once done.
    fn noted_task(&self, waker: &Waker) -> Option<Option<Arc<Waker>>> {
        let state = lock(&self.state);
        if state.done {
            return None;
        }
        Some(state.task.as_ref().filter(|w| w.will_wake(waker)).cloned())
    }

    /// Notes a new task that polls. It may be on another runtime, whose timer does not end the
    /// sleeps the last one armed (that runtime may be gone): they are given back with the last
    /// task's waker, and the turn arms its own.
    fn note_task(&self, task: Arc<Waker>) -> (Option<Arc<Waker>>, Sleeps<S>) {
        let mut state = lock(&self.state);
        let last = state.task.replace(task);
        (last, std::mem::take(&mut state.sleeps))
    }

    /// Drops the last task's waker and the sleeps armed for it, outside `state`.
    fn drop_last_task(&self, (task, sleeps): (Option<Arc<Waker>>, Sleeps<S>)) {
        self.drop_sleeps(sleeps);
        self.shared
            .counters
            .caught(drop_caught(task), "a driver's task waker");
    }

    /// Wakes the `Drive`'s task and lets go of this copy; a panic of the runtime's waker (its
    /// wake, or its drop if the copy was the last) is caught and counted.
    fn wake_task(&self, task: Arc<Waker>) {
        // Both run: a waker whose wake panicked is still dropped under a catch.
        let woke = catch_user_panic(|| task.wake_by_ref());
        let returned = drop_caught(task) && woke;
        self.shared
            .counters
            .caught(returned, "a driver's task waker");
    }

    /// One turn (if due), then the sleeps for the ticks planned.
    fn turn_and_arm(self: &Arc<Self>, state: &mut DriverState<F, S>) -> Turned {
        loop {
            let Some(plan) = lifecycle::drive_turn(&self.shared) else {
                return Turned::Stopped;
            };
            let current = self.shared.worker_tick();
            // `AWAKE`: the thread's turn is under way: look again at the end of this tick.
            let plan = if plan == AWAKE { current } else { plan };
            self.retire_sleeps(state, plan);
            if plan == u64::MAX {
                // Nothing pending: a producer wakes the task (`Shared::unpark_worker`).
                return Turned::Waiting;
            }
            // While the next tick has work, the ones after it likely do too.
            let until = if plan <= current {
                plan + AHEAD - 1
            } else {
                plan
            };
            match self.arm_sleeps(state, plan, until) {
                Armed::Waiting => return Turned::Waiting,
                Armed::Unarmed => return Turned::Unarmed,
                Armed::Ended => {}
            }
        }
    }

    /// Drops the sleeps before `plan`, and all of them if it plans nothing or a tick before the
    /// first (a producer's deadline came before the sleeps armed: the turn arms from the plan).
    fn retire_sleeps(&self, state: &mut DriverState<F, S>, plan: u64) {
        let sleeps = &mut state.sleeps;
        let stale = sleeps.iter().take_while(|&&(tick, _)| tick < plan).count();
        let all = plan == u64::MAX || sleeps.get(stale).is_some_and(|&(tick, _)| tick > plan);
        let end = if all { sleeps.len() } else { stale };
        self.drop_sleeps(sleeps.drain(..end));
    }

    /// Arms and polls the sleeps up to `until` (fewer if the runtime's code panics), noting the
    /// last.
    fn arm_sleeps(self: &Arc<Self>, state: &mut DriverState<F, S>, plan: u64, until: u64) -> Armed {
        let waker = Waker::from(Arc::clone(self));
        let mut cx = Context::from_waker(&waker);
        let mut ended = false;
        let mut tick = state.sleeps.back().map_or(plan, |&(last, _)| last + 1);
        while tick <= until {
            let Some((sleep, ready)) = self.arm_one(state, tick, &mut cx) else {
                break;
            };
            ended |= ready;
            state.sleeps.push_back((tick, sleep));
            tick += 1;
        }
        let Some(&(last, _)) = state.sleeps.back() else {
            return Armed::Unarmed;
        };
        self.armed_until.store(last, Ordering::SeqCst);
        if ended {
            Armed::Ended
        } else {
            Armed::Waiting
        }
    }

    /// A sleep for the end of `tick`, polled once, and whether it has ended; `None` if the
    /// runtime's code panicked making or polling it (counted; tokio's does on a runtime without
    /// timers, or once it shuts down). Each step under a catch of its own, so that a sleep whose
    /// poll panicked is dropped outside the unwinding (its `Drop` may panic too).
    fn arm_one(
        &self,
        state: &mut DriverState<F, S>,
        tick: u64,
        cx: &mut Context<'_>,
    ) -> Option<(Pin<Box<S>>, bool)> {
        let at = self.end_of(tick);
        let mut made = None;
        if !catch_user_panic(|| made = Some(Box::pin((state.sleep_until)(at)))) {
            self.shared
                .counters
                .user_code_panicked("a driver's sleep_until");
            return None;
        }
        let mut sleep = made?;
        let mut ready = false;
        if catch_user_panic(|| ready = sleep.as_mut().poll(cx).is_ready()) {
            return Some((sleep, ready));
        }
        self.shared
            .counters
            .user_code_panicked("a driver's runtime sleep");
        self.drop_sleeps([(tick, sleep)]);
        None
    }
}

/// What a `Drive` does as it goes, whatever its types: also from its `Drop`.
impl<F, S> Driver<F, S> {
    /// Drops runtime sleeps, each under a catch: their `Drop` is the runtime's code, and a
    /// panic there is counted, not unwound through the `Drive`'s poll (the rest of the poll,
    /// the turn and the sleeps it arms, still runs).
    fn drop_sleeps(&self, sleeps: impl IntoIterator<Item = (u64, Pin<Box<S>>)>) {
        for (_, sleep) in sleeps {
            self.shared
                .counters
                .caught(drop_caught(sleep), "a driver's runtime sleep");
        }
    }

    /// Hands the ticks back to the worker thread, as dropping the `Drive` does: the driver
    /// leaves `Control::drivers`, the producers' waker is cleared (so producers wake the
    /// thread, until a driver is polled again) and the thread is unparked. Once only: a driver
    /// that left already does nothing (it clears no other driver's waker).
    fn detach(&self) {
        let shared = &self.shared;
        let mut control = lock(&shared.control);
        let me: *const Self = self;
        let attached = control.drivers.len();
        control
            .drivers
            .retain(|d| !std::ptr::addr_eq(d.as_ptr(), me));
        if control.drivers.len() == attached {
            return;
        }
        let waker = control.driver_waker.take();
        if let Some(thread) = &control.worker_thread {
            thread.unpark();
        }
        drop(control);
        // Outside `control`: the runtime's waker is user code.
        shared
            .counters
            .caught(drop_caught(waker), "a driver's waker");
    }
}

impl<F, S> Wake for Driver<F, S>
where
    F: FnMut(Instant) -> S + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    /// The sleep ended: the turn runs here, so that the futures it wakes are queued as the
    /// runtime's own timers' are. The task arms the next sleep: a runtime may refuse a timer from
    /// inside its wake-ups (tokio does while it shuts down).
    fn wake(self: Arc<Self>) {
        let plan = lifecycle::drive_turn(&self.shared);
        let near_the_end =
            self.shared.worker_tick() + REFILL > self.armed_until.load(Ordering::SeqCst);
        if plan.is_none() || near_the_end {
            self.wake_stopped();
        }
    }
}

impl<F, S> AttachedDriver for Driver<F, S>
where
    F: FnMut(Instant) -> S + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    /// Wakes the task, to arm more sleeps or to complete once the timer has stopped.
    fn wake_stopped(&self) {
        // Not `lock`: a runtime's sleep may wake us from inside its own poll, under `state`;
        // its holder then runs once more (`again`).
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

impl<F, S> Future for Drive<F, S>
where
    F: FnMut(Instant) -> S + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let inner = &self.inner;
        // Done (and, if unarmed, detached): its waker must not become the producers'. (Only
        // this poll's `run` makes it done.)
        let Some(noted) = inner.noted_task(cx.waker()) else {
            return Poll::Ready(());
        };
        let task = match noted {
            Some(task) => task,
            None => {
                // The poll's one clone of the runtime's waker, before it changes anything: a
                // clone that panics unwinds the poll, as any future's, and leaves the `Drive`
                // as it was. Outside the locks: user code, which may call back into the timer
                // (whose lazy start, or `stop()`, takes `control`).
                let task = Arc::new(cx.waker().clone());
                inner.drop_last_task(inner.note_task(Arc::clone(&task)));
                task
            }
        };
        // Producers whose deadline is earlier than the plan wake this task: the same copy. The
        // one it replaces is dropped outside `control` too.
        let stored = lock(&inner.shared.control)
            .driver_waker
            .as_ref()
            .is_some_and(|w| Arc::ptr_eq(w, &task));
        if !stored {
            let replaced = lock(&inner.shared.control).driver_waker.replace(task);
            // Under a catch, as the last task's waker: this copy may be the last.
            inner
                .shared
                .counters
                .caught(drop_caught(replaced), "a driver's waker");
        }
        if super::start(&inner.shared).is_err() || inner.run() {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl<F, S> Drop for Drive<F, S> {
    /// Hands the ticks back to the worker thread (unless done already). Other drivers, if any,
    /// run them again once polled: until then nothing wakes them, so the thread runs the turns.
    fn drop(&mut self) {
        // The sleeps hold the driver as their waker: drop them, or it keeps itself alive.
        let (sleeps, task) = {
            let mut state = lock(&self.inner.state);
            (std::mem::take(&mut state.sleeps), state.task.take())
        };
        self.inner.detach();
        // Last, each under a catch and counted, as in a poll: the runtime's waker and sleeps
        // are user code, and the ticks are handed back whatever their drops do.
        self.inner
            .shared
            .counters
            .caught(drop_caught(task), "a driver's waker");
        self.inner.drop_sleeps(sleeps);
    }
}

impl<F, S> fmt::Debug for Drive<F, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drive").finish_non_exhaustive()
    }
}
