//! The wheel driven from an async runtime's own threads: a future that runs the worker's turns
//! where the runtime polls it, so that the futures a tick wakes are woken from a runtime
//! thread (tokio queues them there, with no hand-off between threads) and the timer's own
//! thread stays asleep.
//!
//! Owns [`Drive`]. Uses the lifecycle (start, a turn of the worker under its lock) and the
//! shared state's driver slot (`Control::drivers`, `Control::driver_waker`), through which
//! producers whose deadline is earlier than the plan wake the driver instead of the thread.

use super::lifecycle;
use crate::shared::{Shared, AWAKE};
use crate::sync::{lock, Arc};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
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
    shared: Arc<Shared>,
    sleep_until: F,
    /// The runtime's sleep for the end of tick `armed`.
    sleep: Option<Pin<Box<S>>>,
    armed: u64,
}

impl<F, S> Drive<F, S>
where
    F: FnMut(Instant) -> S,
    S: Future<Output = ()>,
{
    pub(super) fn new(shared: &Arc<Shared>, sleep_until: F) -> Self {
        lock(&shared.control).drivers += 1;
        Drive {
            shared: Arc::clone(shared),
            sleep_until,
            sleep: None,
            armed: u64::MAX,
        }
    }

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
}

impl<F, S> Future for Drive<F, S>
where
    F: FnMut(Instant) -> S + Unpin,
    S: Future<Output = ()>,
{
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        {
            let mut control = lock(&this.shared.control);
            if !control
                .driver_waker
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                control.driver_waker = Some(cx.waker().clone());
            }
        }
        if super::start(&this.shared).is_err() {
            return Poll::Ready(());
        }
        loop {
            let Some(plan) = lifecycle::drive_turn(&this.shared) else {
                return Poll::Ready(());
            };
            let plan = if plan == AWAKE {
                // The thread's turn is under way: look again at the end of this tick.
                this.shared.worker_tick()
            } else {
                plan
            };
            if plan == u64::MAX {
                // Nothing pending: a producer wakes us (`Shared::unpark_worker`).
                this.sleep = None;
                this.armed = u64::MAX;
                return Poll::Pending;
            }
            if this.armed != plan || this.sleep.is_none() {
                let at = this.end_of(plan);
                let sleep = (this.sleep_until)(at);
                match &mut this.sleep {
                    Some(slot) => slot.set(sleep),
                    None => this.sleep = Some(Box::pin(sleep)),
                }
                this.armed = plan;
            }
            let sleep = this.sleep.as_mut().expect("armed just above");
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.armed = u64::MAX;
        }
    }
}

impl<F, S> Drop for Drive<F, S> {
    /// Hands the ticks back to the worker thread.
    fn drop(&mut self) {
        let mut control = lock(&self.shared.control);
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
        f.debug_struct("Drive")
            .field("armed_tick", &self.armed)
            .finish_non_exhaustive()
    }
}
