//! The wheel driven from an async runtime: [`Drive`], whose sleep's waker (`Ticker`) runs the
//! turns. Who runs the turns, and the thread's watch over a `Drive`: `engine/lifecycle.rs`.

use crate::engine::{catch_user_panic, drop_caught};
use crate::engine::{Runner, TimerHandle, NEVER};
use crate::sync::{lock, Arc, Mutex};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

/// A future that runs a timer's worker on the runtime that polls it, sleeping between ticks on the
/// runtime's own timer. Made by [`TimerHandle::drive`]; spawn it on the runtime that serves the
/// timer's futures.
///
/// Why: the turn runs in the waker of the runtime's sleep, so the futures it wakes are queued
/// where they run, with no hand-off from the timer's thread. Tasks due meanwhile run there too
/// (unless an executor is set): keep them short.
///
/// The timer's thread stays as a watchdog: it runs the ticks until a `Drive` is first polled and
/// once the last is dropped, and takes over from one not polled at most 32 ticks (of 4 ms at
/// least) late. With several `Drive`s, the last polled is woken, and once it is dropped the one
/// polled before it. A timeout never fires early; driven, it fires at the runtime's first wake
/// past its deadline, as the runtime's own timers do: the `Drive` sleeps until the start of the
/// next tick with work, then until the earliest deadline its turn left there (a tick's timeouts
/// fire over those wakes, each wake's in the order a thread scheduled them). It completes when
/// the timer stops, and at once on a manual timer ([`Builder::build_manual`]).
///
/// A panic of the runtime's code (`sleep_until`, a sleep's poll or `Drop`, a waker; tokio's
/// `sleep_until` panics on a runtime without timers) is caught, counted in
/// [`TimerStats::panicked`](crate::TimerStats::panicked) and logged, and the `Drive` goes on with
/// the sleep it has armed. With none armed, nothing would wake it at its tick: it hands the ticks
/// back to the timer's thread and completes (spawn a new `Drive` to try again).
///
/// # Panics
/// A poll by a new task clones its context's waker (once: the `Drive`, the producers and `stop()`
/// share that copy) and unwinds with that clone's panic, as any future would; nothing has changed
/// then, and the `Drive` can be polled again. The first poll panics, as [`TimerHandle::start`]
/// does, if it cannot spawn the timer's thread.
///
/// [`Builder::build_manual`]: crate::Builder::build_manual
#[must_use = "a Drive does nothing unless spawned or polled"]
pub struct Drive<F, S> {
    timer: TimerHandle,
    sleep_until: F,
    /// The runtime's sleep, and when it ends (ns since the timer's origin).
    sleep: Option<(u64, Pin<Box<S>>)>,
    /// The task that polled last, and `waker`, which wakes it (the producers' and `stop()`'s).
    link: Arc<Link>,
    waker: Waker,
    /// The runtime's sleep's waker (`Ticker`).
    ticker: Waker,
    /// The `Drive` gave up (the runtime panicked), or the timer stopped.
    done: bool,
    /// The one `Drive` of a timer on a runtime's clock (`Builder::build_on_tokio`): its drop
    /// stops the timer, which nothing else would drive.
    sole: bool,
}

/// The waker of the task that polls a `Drive`: the one clone of it the `Drive` makes, woken by
/// reference, so that waking the `Drive` clones no runtime waker. Its own clone and drop run no
/// user code while the `Drive` holds it (it drops the task's waker itself).
struct Link(Mutex<Option<Arc<Waker>>>);

impl Wake for Link {
    fn wake(self: Arc<Self>) {
        // Out of the lock: the runtime's waker may call back into the timer.
        let task = lock(&self.0).clone();
        if let Some(task) = task {
            task.wake_by_ref();
        }
    }
}

/// The waker of the runtime's sleep: as the runtime's timer ends the tick, it runs the turn right
/// there (where the runtime fires its own timers), then wakes the `Drive`'s task to sleep on to
/// the next plan. A lone future the turn expires is woken by that task's turn (`Runner::Ticker`):
/// one task runnable after the runtime's park, as with the runtime's own timer, not two.
struct Ticker(TimerHandle, Arc<Link>);

impl Wake for Ticker {
    fn wake(self: Arc<Self>) {
        // Woken by code a turn runs on this thread (a runtime that fires its timers there): the
        // turn under way sees the tick, and another would wait on its lock.
        let turns = !self.0 .0.in_turn();
        if turns {
            let _ = turn(&self.0, Runner::Ticker);
        }
        let woken = catch_user_panic(|| self.1.wake_by_ref());
        self.0 .0.counters.caught(woken, "a driver's task waker");
        if turns && (!woken || !self.0 .0.is_driven()) {
            // No `Drive`'s turn to come (its waker panicked, or it went): this wakes a lone future.
            let _ = turn(&self.0, Runner::Drive);
        }
    }
}

/// A `Drive`'s turn: the plan, with the watching thread told of it, and the earliest deadline
/// left in the current tick; `None` once stopped.
fn turn(timer: &TimerHandle, runner: Runner) -> Option<(u64, u64)> {
    let shared = &timer.0;
    let (plan, soonest) = shared.run_turn(shared.clock.passed(), runner)?;
    // A plan earlier than the one the thread watches (a producer pushed during the turn, and
    // woke nobody): it watches this one.
    shared.watch_plan(plan);
    Some((plan, soonest))
}

impl<F, S> Drive<F, S>
where
    F: FnMut(Instant) -> S + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    /// Runs turns until the plan lies ahead, then sleeps until it; `false` once done.
    fn run(&mut self) -> bool {
        loop {
            let Some((plan, soonest)) = turn(&self.timer, Runner::Drive) else {
                return false;
            };
            if plan == NEVER {
                // Nothing pending: a producer wakes the task.
                self.drop_sleep();
                return true;
            }
            let armed = self.arm(plan, soonest);
            match self.poll_sleep() {
                Some(false) => return true,
                // The runtime's clock runs ahead of the timer's: turning again would spin.
                Some(true) if self.runtime_ahead() => return false,
                // The tick ended: turn again.
                Some(true) if armed => {}
                // No sleep left that would wake the task.
                _ => return false,
            }
        }
    }

    /// Arms the sleep until the start of tick `plan` (the runtime's first wake after it expires
    /// what is due by then), or, once the start has passed, until `soonest` (the earliest
    /// deadline the turn left in the tick) or the tick's end, unless armed; whether one is. If
    /// `sleep_until` panics, the last sleep, if any, stays armed.
    fn arm(&mut self, plan: u64, soonest: u64) -> bool {
        let shared = &self.timer.0;
        let start = plan.saturating_mul(shared.tick_nanos);
        let next = soonest.clamp(start, start.saturating_add(shared.tick_nanos));
        let end = if start <= shared.clock.now() {
            next
        } else {
            start
        };
        if matches!(&self.sleep, Some((at, _)) if *at == end) {
            return true;
        }
        let at = shared.clock.instant_at(end);
        let sleep_until = &mut self.sleep_until;
        let mut made = None;
        let ok = catch_user_panic(|| made = Some(Box::pin(sleep_until(at))));
        shared.counters.caught(ok, "the runtime's sleep_until");
        let Some(sleep) = made else {
            return false;
        };
        let last = self.sleep.replace((end, sleep));
        self.drop_caught(last, "the runtime's sleep");
        true
    }

    /// The runtime's sleep ended before the timer's clock reached its end (a paused tokio
    /// runtime, for a timer on the system's clock; a runtime's timer that runs on real time
    /// never ends a sleep early, and the timer's clock reads no earlier than real time): the
    /// ticks go back to the timer's thread, which sleeps in real time.
    fn runtime_ahead(&self) -> bool {
        let now = self.timer.0.clock.now();
        let ahead = matches!(&self.sleep, Some((end, _)) if now < *end);
        if ahead {
            crate::engine::log_caught(
                log::Level::Warn,
                format_args!(
                    "the runtime's clock runs ahead of the timer's (a paused tokio runtime?): \
                     the timer's thread runs its ticks; build the timer with \
                     Builder::build_on_tokio to run it on the runtime's clock"
                ),
            );
        }
        ahead
    }

    /// Polls the sleep armed: whether it ended; `None` if none is armed, or its poll panicked
    /// (it is dropped).
    fn poll_sleep(&mut self) -> Option<bool> {
        let (_, sleep) = self.sleep.as_mut()?;
        let mut cx = Context::from_waker(&self.ticker);
        let mut ready = false;
        let ok = catch_user_panic(|| ready = sleep.as_mut().poll(&mut cx).is_ready());
        self.timer.0.counters.caught(ok, "the runtime's sleep");
        if !ok {
            self.drop_sleep();
            return None;
        }
        Some(ready)
    }

    /// Notes the task that polls. A new one's waker is cloned, once, before anything changes
    /// (a panic there unwinds the poll); the sleep armed for the last task is dropped: it may
    /// be another runtime's, whose timer never ends it.
    fn note_task(&mut self, waker: &Waker) {
        let same = lock(&self.link.0)
            .as_ref()
            .is_some_and(|task| task.will_wake(waker));
        if same {
            return;
        }
        let task = Arc::new(waker.clone());
        let last = lock(&self.link.0).replace(task);
        self.drop_caught(last, "a driver's task waker");
        self.drop_sleep();
    }
}

/// What a `Drive` does whatever its types: also from its `Drop`.
impl<F, S> Drive<F, S> {
    /// Drops what holds the runtime's code, catching and counting its panic.
    fn drop_caught<T>(&self, value: T, what: &str) {
        self.timer.0.counters.caught(drop_caught(value), what);
    }

    /// Drops the runtime's sleep, catching its panic.
    fn drop_sleep(&mut self) {
        let sleep = self.sleep.take();
        self.drop_caught(sleep, "the runtime's sleep");
    }

    /// Hands the ticks back (to another `Drive`, else the thread) and completes. The sole
    /// `Drive` of a timer on a runtime's clock stops the timer: nothing else can drive it.
    fn give_up(&mut self) {
        if !self.done {
            self.done = true;
            self.timer.0.detach_driver(&self.waker);
            if self.sole {
                self.timer.0.shutdown();
            }
        }
        self.drop_sleep();
    }
}

// The `Drive` never pins `F` (it calls it by `&mut`), and its sleeps are boxed.
impl<F, S> Unpin for Drive<F, S> {}

impl<F, S> Future for Drive<F, S>
where
    F: FnMut(Instant) -> S + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        // A timer on a manual clock, or on a runtime's (but for its own `Drive`), is driven
        // by its clock's owner.
        let other = !this.sole && !this.timer.0.clock.has_thread();
        if other && !this.done && !this.timer.0.clock.is_manual() {
            crate::engine::log_caught(
                log::Level::Warn,
                format_args!(
                    "a Drive of a timer built by build_on_tokio does nothing: its runtime \
                     drives it; drop the Drive"
                ),
            );
        }
        if this.done || other || this.timer.start().is_err() {
            this.give_up();
            return Poll::Ready(());
        }
        this.note_task(cx.waker());
        this.timer.0.attach_driver(&this.waker);
        if this.run() {
            Poll::Pending
        } else {
            this.give_up();
            Poll::Ready(())
        }
    }
}

impl<F, S> Drop for Drive<F, S> {
    /// Hands the ticks back first; then drops the runtime's sleep and waker, each caught.
    fn drop(&mut self) {
        self.give_up();
        let task = lock(&self.link.0).take();
        self.drop_caught(task, "a driver's task waker");
    }
}

impl<F, S> fmt::Debug for Drive<F, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drive").finish_non_exhaustive()
    }
}

impl TimerHandle {
    /// A future that runs this timer's ticks on the runtime that polls it, sleeping with
    /// `sleep_until` (tokio: `|at| tokio::time::sleep_until(at.into())`); see [`Drive`]. Its
    /// first poll starts the timer, thread included (the watchdog), as `start` does.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    /// rt.spawn(timer.drive(|at| tokio::time::sleep_until(at.into())));
    /// rt.block_on(timer.sleep(Duration::from_millis(3))).unwrap();
    /// ```
    pub fn drive<F, S>(&self, sleep_until: F) -> Drive<F, S>
    where
        F: FnMut(Instant) -> S + Send + 'static,
        S: Future<Output = ()> + Send + 'static,
    {
        self.driver(sleep_until, false)
    }

    /// A `Drive`; `sole`: a timer on a runtime's clock, driven by it alone.
    pub(crate) fn driver<F, S>(&self, sleep_until: F, sole: bool) -> Drive<F, S>
    where
        F: FnMut(Instant) -> S + Send + 'static,
        S: Future<Output = ()> + Send + 'static,
    {
        let link = Arc::new(Link(Mutex::new(None)));
        let ticker = Arc::new(Ticker(self.clone(), Arc::clone(&link)));
        Drive {
            timer: self.clone(),
            sleep_until,
            sleep: None,
            waker: Waker::from(Arc::clone(&link)),
            ticker: Waker::from(ticker),
            link,
            done: false,
            sole,
        }
    }
}
