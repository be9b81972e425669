//! The wheel driven from an async runtime: [`Drive`], a future that runs the worker's turns where
//! the runtime polls it, sleeping on the runtime's timer until the tick the turn planned.
//!
//! # Who runs the turns
//! Turns run one at a time, under `Shared::worker`'s lock: the worker thread's, a `Drive`'s or a
//! `ManualDriver`'s. While a `Drive` has polled, its waker is the one producers wake
//! (`Shared::driver`), and the thread only watches: it sleeps until `GRACE_TICKS` past the
//! plan, and runs the turn itself if nobody has (`worker::run_thread`). A dropped `Drive`, or
//! one whose runtime panicked, takes its waker back and unparks the thread.

use crate::next::catch_user_panic;
use crate::next::TimerHandle;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// A future that runs a timer's worker on the runtime that polls it, sleeping between ticks on the
/// runtime's own timer. Made by [`TimerHandle::drive`]; spawn
/// it on the runtime that serves the timer's futures.
///
/// Why: the tick is processed on the thread the runtime's timer wakes anyway, and the futures it
/// wakes are queued where they run, with no hand-off from the timer's thread. Tasks
/// ([`TimerTask`](crate::TimerTask)) due meanwhile run there too (unless an executor is set): keep
/// them short.
///
/// The timer's thread stays as a watchdog: if the driver is not polled, it runs the ticks, at most
/// 32 ticks late; dropping the `Drive` hands them back. Until a `Drive` is first polled, the
/// thread runs the ticks itself; with several `Drive`s on one timer, the last polled is woken. The timing contract is unchanged. It completes when the timer stops, at once on a
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
/// again. The first poll panics, as [`TimerHandle::start`]
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
    timer: TimerHandle,
    sleep_until: F,
    /// The runtime's sleep until the end of the planned tick, and that tick.
    sleep: Option<(u64, Pin<Box<S>>)>,
    /// The `Drive` gave up (the runtime panicked), or the timer stopped.
    done: bool,
}

impl<F, S> Drive<F, S>
where
    F: FnMut(Instant) -> S + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    /// Runs turns until the plan lies ahead, then sleeps until it; `false` once done.
    fn run(&mut self, cx: &mut Context<'_>) -> bool {
        let timer = self.timer.clone();
        let shared = &timer.0;
        loop {
            let Some(plan) = shared.run_turn(shared.clock.now()) else {
                return false;
            };
            shared.watch_plan(plan);
            if plan == crate::next::NEVER {
                // Nothing pending: a producer wakes the task.
                self.drop_sleep();
                return true;
            }
            if !matches!(&self.sleep, Some((tick, _)) if *tick == plan) {
                let at = shared
                    .clock
                    .instant_at(plan.saturating_add(1).saturating_mul(shared.tick_nanos));
                let sleep_until = &mut self.sleep_until;
                let mut made = None;
                let ok = catch_user_panic(|| made = Some(Box::pin(sleep_until(at))));
                shared.counters.caught(ok, "the runtime's sleep");
                self.drop_sleep();
                match made {
                    Some(sleep) => self.sleep = Some((plan, sleep)),
                    None => return false,
                }
            }
            let (_, sleep) = self.sleep.as_mut().expect("armed above");
            let mut ready = false;
            let ok = catch_user_panic(|| ready = sleep.as_mut().poll(cx).is_ready());
            shared.counters.caught(ok, "the runtime's sleep");
            if !ok {
                return false;
            }
            if !ready {
                return true;
            }
        }
    }

    /// Drops the runtime's sleep, catching its panic.
    fn drop_sleep(&mut self) {
        if let Some(sleep) = self.sleep.take() {
            let ok = catch_user_panic(move || drop(sleep));
            self.timer.0.counters.caught(ok, "the runtime's sleep");
        }
    }

    /// Hands the ticks back to the thread and completes.
    fn give_up(&mut self) {
        self.done = true;
        self.drop_sleep();
        self.timer.0.detach_driver();
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
        if this.done || this.timer.0.clock.is_manual() || this.timer.start().is_err() {
            this.give_up();
            return Poll::Ready(());
        }
        this.timer.0.attach_driver(cx.waker());
        if this.run(cx) {
            Poll::Pending
        } else {
            this.give_up();
            Poll::Ready(())
        }
    }
}

impl<F, S> Drop for Drive<F, S> {
    fn drop(&mut self) {
        if let Some(sleep) = self.sleep.take() {
            let ok = catch_user_panic(move || drop(sleep));
            self.timer.0.counters.caught(ok, "the runtime's sleep");
        }
        if !self.done {
            self.timer.0.detach_driver();
        }
    }
}

impl<F, S> fmt::Debug for Drive<F, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drive").finish_non_exhaustive()
    }
}

impl TimerHandle {
    /// A future that runs this timer's ticks on the runtime that polls it, sleeping with
    /// `sleep_until` (tokio: `|at| tokio::time::sleep_until(at.into())`); see [`Drive`].
    /// Its first poll starts the timer, thread included (the watchdog), as `start` does,
    /// even with nothing scheduled. If `sleep_until` or its sleeps panic, the panic is counted
    /// in `stats().panicked`, and the `Drive` hands the ticks back to the timer's thread and
    /// completes.
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
        Drive {
            timer: self.clone(),
            sleep_until,
            sleep: None,
            done: false,
        }
    }
}
