//! The worker's plan (`Shared::planned`): the tick at whose end it next wakes by itself,
//! published before it looks at the queues; a producer with work due sooner lowers it and
//! unparks whoever runs the turns (protocol: the `worker` module, "Sleeping"). Owns `planned`,
//! the published tick, the wake-up count and the unpark. Touches `sync`; a driver's waker is
//! user code, run under `catch_user_panic`.

use super::{catch_user_panic, Shared, Stored};
use crate::sync::{lock, Arc, Ordering};
use std::task::Waker;

/// `Shared::planned` while the worker is awake: producers never unpark it then. (`u64::MAX`
/// means parked with no deadline; real ticks stay far below both.)
pub(crate) const AWAKE: u64 = u64::MAX - 1;

/// Ticks the thread sleeps past a driver's plan before running a turn itself: how late
/// timeouts can be if the driver stops being polled (its runtime shut down or blocked).
pub(crate) const DRIVEN_GRACE_TICKS: u64 = 32;

impl<J: Stored> Shared<J> {
    /// `wake_by` for `now`'s tick, with no division on the common path: plan `p` is past that
    /// tick exactly when `p * tick_nanos > now`.
    #[inline]
    pub(super) fn wake_by_end_of_tick_at(&self, now: u64) {
        // SeqCst: as in `wake_by`, which this only screens for.
        let planned = self.planned.load(Ordering::SeqCst);
        if planned != AWAKE && planned.saturating_mul(self.tick_nanos) > now {
            self.wake_by(now / self.tick_nanos);
        }
    }

    /// Makes sure the worker wakes by the end of `tick`, lowering its plan and unparking it.
    #[inline]
    pub(super) fn wake_by(&self, tick: u64) {
        // SeqCst: one word the worker and every producer write; one total order keeps the
        // reasoning simple (loads cost nothing more on x86). The queue locks order the hand-over.
        let mut planned = self.planned.load(Ordering::SeqCst);
        while planned > tick && planned != AWAKE {
            match self.planned.compare_exchange_weak(
                planned,
                tick,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    self.unpark_worker(planned == u64::MAX, tick);
                    return;
                }
                Err(actual) => planned = actual,
            }
        }
    }

    /// Wakes an attached driver, else the worker thread, for a plan lowered to `tick`; the
    /// thread too if the worker was idle (`from_idle`), to watch over the driver again, or if
    /// it watches until more than the driver's grace past `tick` (a driver that is not polled
    /// then leaves the timeout no later than that grace).
    #[cold]
    pub(crate) fn unpark_worker(&self, from_idle: bool, tick: u64) {
        let control = lock(&self.control);
        let driver = control.driver_waker.clone();
        let thread = control.worker_thread.clone().filter(|_| {
            from_idle
                || driver.is_none()
                || tick.saturating_add(DRIVEN_GRACE_TICKS) < control.watchdog_until
        });
        drop(control);
        if let Some(thread) = thread {
            thread.unpark();
        }
        if let Some(waker) = driver {
            self.wake_driver_with(waker);
        }
    }

    /// Wakes a driver by its waker as `control` shares it, taken out of the lock: a runtime's
    /// waker is user code. The `Arc`'s drop may drop the waker (one that a poll replaced
    /// meanwhile): both under one catch.
    pub(crate) fn wake_driver_with(&self, waker: Arc<Waker>) {
        if !catch_user_panic(move || waker.wake_by_ref()) {
            self.counters.user_code_panicked("a driver's waker");
        }
    }

    /// Relaxed: for diagnostics and the cancel path, which a stale tick only makes more eager.
    #[inline]
    pub(crate) fn set_tick(&self, tick: u64) {
        self.tick.store(tick, Ordering::Relaxed);
    }

    pub(crate) fn publish_plan(&self, tick: u64) {
        self.planned.store(tick, Ordering::SeqCst);
    }

    /// Lowers the published plan to `tick` if it is later, waking nobody: the worker's own
    /// earlier look. SeqCst: as in `wake_by`, with which it races.
    pub(crate) fn lower_plan(&self, tick: u64) {
        self.planned.fetch_min(tick, Ordering::SeqCst);
    }

    /// The worker's plan, or lower if a producer lowered it since.
    pub(crate) fn plan(&self) -> u64 {
        self.planned.load(Ordering::SeqCst)
    }

    pub(crate) fn worker_tick(&self) -> u64 {
        // Relaxed: diagnostics.
        self.tick.load(Ordering::Relaxed)
    }

    pub(crate) fn wakeups(&self) -> u64 {
        // Relaxed: a statistic.
        self.wakeups.load(Ordering::Relaxed)
    }

    /// The worker runs (`AWAKE`): producers need not wake it. Counts a wake-up.
    pub(crate) fn mark_awake(&self) {
        self.planned.store(AWAKE, Ordering::SeqCst);
        // Relaxed: a statistic.
        self.wakeups.fetch_add(1, Ordering::Relaxed);
    }
}
