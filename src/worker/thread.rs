//! The worker thread: the loop that runs due ticks, publishes its plan and sleeps until the
//! next tick with work (see the `worker` module's docs, "Sleeping").
//!
//! Owns the thread's loop and its sleep; touches the worker ([`Worker`]), the `shared` module
//! (the plan, the queues, the clock) and `sync`. Never the owner: the `timer` module spawns
//! this loop and joins it.

use super::Worker;
use crate::shared::{Shared, Stored, AWAKE};
use crate::sync::{lock, thread, Arc};

/// Ticks the worker thread sleeps past a runtime driver's plan before it runs a turn itself:
/// while a driver keeps up, the thread wakes once every this many ticks and finds nothing
/// due; should the driver stop being polled (a runtime shut down or blocked), timeouts are at
/// most this many ticks late.
pub(crate) const DRIVEN_GRACE_TICKS: u64 = 32;

/// The worker thread's loop: a turn of the worker whenever one is due, under the worker's
/// lock, then a sleep until the plan's tick ends. While a runtime's driver is attached, the
/// driver runs the turns and the thread only watches over it (`DRIVEN_GRACE_TICKS`).
pub(crate) fn thread_main<J: Stored>(shared: Arc<Shared<J>>) {
    let _loud = StopOnUnwind(&shared);
    tighten_timer_slack(shared.tick_nanos);
    loop {
        if let Some(wake) = driver_keeping_up(&shared) {
            // A driver ran the turns due: nothing for the watchdog to do, nor to wake.
            sleep_until_end_of(&shared, wake);
            continue;
        }
        let Some(plan) = locked_turn(&shared) else {
            break;
        };
        if shared.is_shutdown() {
            break;
        }
        let Some(wake) = wake_tick(&shared, plan) else {
            continue; // a driver's turn planned a tick meanwhile: watch over it
        };
        sleep_until_end_of(&shared, wake);
        lock(&shared.control).watchdog_parked = false;
        if shared.is_shutdown() {
            break;
        }
    }
    if shared.owner_dropped_in_task() {
        // Nobody calls `stop()` to take the worker: drop it here (outside the lock), with what
        // it holds.
        let worker = lock(&shared.worker).take();
        drop(worker);
    }
}

/// While a runtime's driver keeps up (its plan is less than `DRIVEN_GRACE_TICKS` behind the
/// clock), the tick the watchdog sleeps until before it looks again; `None` when the thread
/// must run a turn: no driver, nothing planned (the turn parks the watchdog), a turn under
/// way, or a driver that fell behind.
fn driver_keeping_up<J: Stored>(shared: &Shared<J>) -> Option<u64> {
    if shared.is_shutdown() || !shared.is_driven() {
        return None;
    }
    let plan = shared.plan();
    if plan == u64::MAX || plan == AWAKE {
        // Nothing pending, or a turn under way: the thread's turn parks it, or waits for the
        // lock and looks after that turn.
        return None;
    }
    let now = shared.clock.now() / shared.tick_nanos;
    (plan.saturating_add(DRIVEN_GRACE_TICKS) > now).then(|| plan.max(now) + DRIVEN_GRACE_TICKS)
}

/// A [`turn`] under the worker's lock: its plan, or `None` once the thread's loop must end
/// (the worker taken by `stop()`, or the timer shut down).
fn locked_turn<J: Stored>(shared: &Arc<Shared<J>>) -> Option<u64> {
    let mut held = lock(&shared.worker);
    let worker = held.as_mut()?.downcast_mut::<Worker<J>>()?;
    if shared.is_shutdown() {
        return None;
    }
    Some(turn(worker, shared))
}

/// The tick whose end the thread sleeps until after a turn that planned `plan`; `None` if it
/// must not sleep but run another turn at once.
fn wake_tick<J: Stored>(shared: &Shared<J>, plan: u64) -> Option<u64> {
    if plan == u64::MAX {
        // Parked with no deadline, also while no driver is attached: one may attach, and
        // its turns then plan ticks the thread must watch over.
        return watch_parked(shared).then_some(plan);
    }
    if shared.is_driven() {
        // The driver may sleep past a plan this turn lowered: it is woken to plan again.
        shared.unpark_worker(false);
        return Some(plan.saturating_add(DRIVEN_GRACE_TICKS));
    }
    Some(plan)
}

/// The watchdog is about to park with no deadline: says so, for a driver whose turn plans a
/// tick to unpark it (`timer::drive`), then looks at the plan again. False if a turn has
/// planned a tick since (the watchdog must not park then: that turn's driver may have looked
/// before the flag was set).
fn watch_parked<J: Stored>(shared: &Shared<J>) -> bool {
    lock(&shared.control).watchdog_parked = true;
    // After the lock: a driver's turn that published its plan before it looked at the flag
    // (under the same lock) is seen here.
    if shared.plan() != u64::MAX {
        lock(&shared.control).watchdog_parked = false;
        return false;
    }
    true
}

/// One turn of the worker, by whoever holds its lock (the worker thread, or a runtime's
/// driver): runs the due ticks, publishes the plan, then looks at the queues again under
/// their locks (see the module docs, "Sleeping"). Returns the plan: the tick at whose end the
/// next turn is due (`u64::MAX`: only when woken).
pub(crate) fn turn<J: Stored>(worker: &mut Worker<J>, shared: &Arc<Shared<J>>) -> u64 {
    shared.mark_awake();
    let now = shared.clock.now();
    shared.clock.recheck_source(now);
    worker.advance(shared, now);
    let mut plan = worker.planned_tick(shared);
    shared.publish_plan(plan);
    if plan > worker.tick && (!shared.timeouts.is_empty() || !shared.cancellations.is_empty()) {
        plan = worker.tick;
        shared.publish_plan(plan);
    }
    // A producer may have lowered the plan since: honour the lower of the two.
    plan = plan.min(shared.plan());
    if plan > worker.tick && !shared.is_shutdown() {
        // Idle until a later tick: nothing is queued.
        worker.release_idle_buffers(shared);
    }
    plan
}

/// Stops the timer if its worker thread unwinds. User code never unwinds it (every place that
/// runs or drops some catches its panic), so only a bug of the crate's own could: the failure
/// is then loud (logged, and `new_timeout` refused with `Stopped`), never a timer that accepts
/// timeouts and fires none.
struct StopOnUnwind<'a, J: Stored>(&'a Shared<J>);

impl<J: Stored> Drop for StopOnUnwind<'_, J> {
    fn drop(&mut self) {
        // Under loom a failing model unwinds through here: calling into loom again would turn
        // its report into an abort.
        if cfg!(loom) || !std::thread::panicking() {
            return;
        }
        log::error!(
            "the timer's worker thread panicked (a bug of hashed-timer-wheel): the timer is \
             stopped, and the timeouts it held are lost"
        );
        let _control = lock(&self.0.control);
        self.0.mark_shutdown();
    }
}

/// Asks the kernel to end this thread's sleeps within a thousandth of a tick of the time asked
/// for (1 µs at a 1 ms tick), never looser than the slack the thread already has. With Linux's
/// default slack of 50 µs, every tick's expiry would start up to a twentieth of a 1 ms tick
/// late. Best effort: a refusal (a seccomp filter, say) keeps the slack the thread has.
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
fn tighten_timer_slack(tick_nanos: u64) {
    const DEFAULT_SLACK_NANOS: u64 = 50_000;
    let wanted = (tick_nanos / 1000).clamp(1, DEFAULT_SLACK_NANOS);
    let current = rustix::thread::current_timer_slack().unwrap_or(DEFAULT_SLACK_NANOS);
    if wanted < current {
        if let Err(e) = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(wanted)) {
            log::debug!("the worker's timer slack stays at {current} ns: {e}");
        }
    }
}

/// Elsewhere the sleep's precision is the platform's.
#[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
fn tighten_timer_slack(_tick_nanos: u64) {}

/// Sleeps until the end of `tick` (`u64::MAX`: until unparked). May return early (unpark,
/// spurious wake-up); the loop re-plans.
#[cfg(not(loom))]
fn sleep_until_end_of<J: Stored>(shared: &Shared<J>, tick: u64) {
    if tick == u64::MAX {
        thread::park();
        return;
    }
    let wake_at = tick.saturating_add(1).saturating_mul(shared.tick_nanos);
    let now = shared.clock.now();
    if wake_at > now {
        thread::park_timeout(std::time::Duration::from_nanos(wake_at - now));
    }
}

/// Under loom time is a manual clock: a bounded sleep jumps the clock to its end; an unbounded
/// one is a real (loom) park, so a lost wake-up shows up as a deadlock.
///
/// A model that holds the clock (`loom_hooks::hold_clock`) moves time itself, and a bounded
/// sleep is then a park too, ended like an OS timer would end it: by the model's clock
/// (`loom_hooks::advance_clock`) once the planned tick is over. A wake-up the worker needed
/// earlier and did not get is then a deadlock as well.
#[cfg(loom)]
fn sleep_until_end_of<J: Stored>(shared: &Shared<J>, tick: u64) {
    if tick == u64::MAX {
        thread::park();
        return;
    }
    use crate::sync::{fence, Ordering};

    let wake_at = tick.saturating_add(1).saturating_mul(shared.tick_nanos);
    if crate::sync::loom_hooks::clock_held() {
        // The model's clock stands for real time, which no memory ordering hides from a sleeping
        // thread: this fence and the one in `advance_clock` make sure that either we see the
        // time or the clock sees our plan (and unparks us).
        fence(Ordering::SeqCst);
        if shared.clock.now() < wake_at {
            thread::park();
        }
        return;
    }
    shared.clock.advance_to(wake_at);
}
