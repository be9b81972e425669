//! Who runs the turns: the worker thread's loop, and the hand-off to a runtime's `Drive`. While
//! a `Drive` is attached, producers wake it instead of the thread, and the thread only watches:
//! it sleeps until `GRACE_TICKS` past the plan and runs the turn itself if nobody has.

use super::{catch_user_panic, drop_caught, Shared, Stored, NEVER};
use crate::sync::{fence, lock, thread, Arc, Ordering};

impl<J: Stored> Shared<J> {
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
        if plan.saturating_add(GRACE_TICKS) < self.watching.load(Ordering::SeqCst) {
            self.unpark_thread();
        }
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
    let mut planned = shared.run_turn(shared.clock.passed(), false);
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
        planned = shared.run_turn(shared.clock.passed(), false);
    }
}

/// A `Drive`'s turns lag by this many ticks past the plan the watching thread watches before
/// it runs one itself. A plan brought earlier by at most as many wakes nobody (each such wake
/// costs the runtime a thread's wake-up): the thread takes over at most twice this late.
const GRACE_TICKS: u64 = 16;

/// Watches a `Drive`: sleeps until `GRACE_TICKS` after its plan; whether the turn is overdue.
fn watch<J: Stored>(shared: &Shared<J>) -> bool {
    let plan = shared.planned();
    // SeqCst: with the `Drive`'s fence and look in `Shared::watch_plan`.
    shared.watching.store(plan, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    if shared.planned().saturating_add(GRACE_TICKS) < plan || !shared.is_driven() {
        // Planned earlier meanwhile (the `Drive` may have looked before the store): again.
        return false;
    }
    park_after(shared, plan, GRACE_TICKS)
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
