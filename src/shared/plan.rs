//! The worker's plan and the producers' wake-up: the tick at whose end the worker will next
//! wake by itself (`Shared::planned`), which the worker publishes before it looks at the
//! queues, and which a producer whose timeout or cancellation is due sooner lowers, unparking
//! whoever runs the worker's turns (the protocol: the `worker` module, "Sleeping").
//!
//! Owns `planned`, the worker's published tick and its wake-up count, and the unpark. Touches
//! `sync` (the `control` lock, the threads); a driver's waker is user code, run under
//! `catch_user_panic`.

use super::{catch_user_panic, Shared, Stored};
use crate::sync::{lock, Ordering};

/// `Shared::planned` while the worker is awake: producers never unpark it then. (`u64::MAX`
/// means parked with no deadline; real ticks stay far below both.)
pub(crate) const AWAKE: u64 = u64::MAX - 1;

impl<J: Stored> Shared<J> {
    /// `wake_by` for the tick that contains `now`, without a division on the common path: the
    /// worker's plan `p` is past that tick exactly when `p * tick_nanos > now`.
    #[inline]
    pub(super) fn wake_by_end_of_tick_at(&self, now: u64) {
        // SeqCst: as in `wake_by`, which this only screens for.
        let planned = self.planned.load(Ordering::SeqCst);
        if planned != AWAKE && planned.saturating_mul(self.tick_nanos) > now {
            self.wake_by(now / self.tick_nanos);
        }
    }

    /// Makes sure the worker wakes by the end of `tick`: if it plans to sleep past it, lower its
    /// plan and unpark it.
    #[inline]
    pub(super) fn wake_by(&self, tick: u64) {
        // SeqCst: the plan is one word that the worker and every producer write; keeping all
        // of its accesses in one total order keeps the reasoning simple (and costs nothing on
        // the load side on x86). The hand-over with the worker is ordered by the queue locks.
        let mut planned = self.planned.load(Ordering::SeqCst);
        while planned > tick && planned != AWAKE {
            match self.planned.compare_exchange_weak(
                planned,
                tick,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    self.unpark_worker(planned == u64::MAX);
                    return;
                }
                Err(actual) => planned = actual,
            }
        }
    }

    /// Wakes whoever runs the worker's turns: a runtime's driver while one is attached, else
    /// the worker thread. With a driver, the thread is woken too when the worker was idle
    /// (`from_idle`): it then watches over the driver again, which it does not while nothing is
    /// pending.
    #[cold]
    pub(crate) fn unpark_worker(&self, from_idle: bool) {
        let control = lock(&self.control);
        let thread = control
            .worker_thread
            .clone()
            .filter(|_| from_idle || control.driver_waker.is_none());
        let driver = control.driver_waker.clone();
        drop(control);
        if let Some(thread) = thread {
            thread.unpark();
        }
        if let Some(waker) = driver {
            if !catch_user_panic(|| waker.wake()) {
                self.counters.user_code_panicked("a driver's waker");
            }
        }
    }

    /// The worker's current tick, as the worker publishes it (diagnostics, and the cancel
    /// path's wake-up check: a stale value only makes it wake the worker more eagerly).
    #[inline]
    pub(crate) fn set_tick(&self, tick: u64) {
        self.tick.store(tick, Ordering::Relaxed);
    }

    /// Publishes the worker's plan (see `Shared::planned`).
    pub(crate) fn publish_plan(&self, tick: u64) {
        self.planned.store(tick, Ordering::SeqCst);
    }

    /// The plan as it stands: the worker's, or lower if a producer lowered it since.
    pub(crate) fn plan(&self) -> u64 {
        self.planned.load(Ordering::SeqCst)
    }

    /// The tick the worker last published (see [`Shared::set_tick`]).
    pub(crate) fn worker_tick(&self) -> u64 {
        // Relaxed: diagnostics.
        self.tick.load(Ordering::Relaxed)
    }

    pub(crate) fn wakeups(&self) -> u64 {
        // Relaxed: a statistic.
        self.wakeups.load(Ordering::Relaxed)
    }

    /// The worker woke and runs (`AWAKE`): producers need not wake it. Counted as a wake-up.
    pub(crate) fn mark_awake(&self) {
        self.planned.store(AWAKE, Ordering::SeqCst);
        // Relaxed: a statistic.
        self.wakeups.fetch_add(1, Ordering::Relaxed);
    }
}
