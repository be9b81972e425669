//! The worker thread: runs due ticks, publishes its plan, sleeps until the next tick with work
//! (`worker` docs, "Sleeping"). Owns the loop and its sleep; touches the worker ([`Worker`]),
//! `shared` (plan, queues, clock) and `sync`; never the owner (`timer` spawns and joins this).

use super::Worker;
use crate::shared::{log_caught, Shared, Stored, AWAKE, DRIVEN_GRACE_TICKS};
use crate::sync::{lock, thread, Arc};

/// A turn whenever one is due, then a sleep until the plan's tick ends. While a runtime's
/// driver is attached, it runs the turns and the thread only watches (`DRIVEN_GRACE_TICKS`).
pub(crate) fn thread_main<J: Stored>(shared: Arc<Shared<J>>) {
    let _loud = StopOnUnwind(&shared);
    tighten_timer_slack(shared.tick_nanos);
    loop {
        if let Some((plan, wake)) = driver_keeping_up(&shared) {
            // A driver ran the turns due: nothing to do.
            if watch_until(&shared, plan, wake) {
                sleep_until_end_of(&shared, wake);
            }
            continue;
        }
        let plan = match locked_turn(&shared) {
            Locked::Turned(plan) => plan,
            Locked::Watching => continue,
            Locked::End => break,
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
        // Nobody will `stop()` to take the worker: drop it here, outside the lock.
        let worker = lock(&shared.worker).take();
        drop(worker);
    }
}

/// While a driver keeps up (plan under `DRIVEN_GRACE_TICKS` behind the clock), its plan and the
/// tick the watchdog sleeps until: the grace past the plan, not past now, so that a driver that
/// stalls behind its plan leaves its tick no later than the grace; `None` when the thread must
/// run a turn: no driver, nothing planned (the turn parks the watchdog), a turn under way, or a
/// driver behind.
fn driver_keeping_up<J: Stored>(shared: &Shared<J>) -> Option<(u64, u64)> {
    if shared.is_shutdown() || !shared.is_driven() {
        return None;
    }
    let plan = shared.plan();
    if plan == u64::MAX || plan == AWAKE {
        // Nothing pending (the turn parks it), or a turn under way (wait for it, then look).
        return None;
    }
    let now = shared.clock.now() / shared.tick_nanos;
    let wake = plan.saturating_add(DRIVEN_GRACE_TICKS);
    (wake > now).then_some((plan, wake))
}

/// What the thread did under the worker's lock.
enum Locked {
    /// Ran a [`turn`], which planned this tick.
    Turned(u64),
    /// Ran none: the turn it waited for was a driver's, and that driver keeps up.
    Watching,
    /// Ran none, and the loop must end: the worker taken by `stop()`, or shut down.
    End,
}

/// A [`turn`] under the worker's lock, unless the driver keeps up once the lock is held: the
/// thread that found a driver's turn under way (`AWAKE`) waits for it and then only watches,
/// so that a watchdog woken late never runs a tick its driver is on time for.
fn locked_turn<J: Stored>(shared: &Arc<Shared<J>>) -> Locked {
    let mut held = lock(&shared.worker);
    let Some(worker) = held.as_mut().and_then(|w| w.downcast_mut::<Worker<J>>()) else {
        return Locked::End;
    };
    if shared.is_shutdown() {
        return Locked::End;
    }
    if driver_keeping_up(shared).is_some() {
        return Locked::Watching;
    }
    Locked::Turned(turn(worker, shared))
}

/// The tick whose end the thread sleeps until after planning `plan`; `None`: run another turn.
fn wake_tick<J: Stored>(shared: &Shared<J>, plan: u64) -> Option<u64> {
    if plan == u64::MAX {
        // Flag the park even with no driver: one may attach, and its turns plan ticks to watch.
        return watch_parked(shared).then_some(plan);
    }
    if shared.is_driven() {
        let wake = plan.saturating_add(DRIVEN_GRACE_TICKS);
        let watching = watch_until(shared, plan, wake);
        // The driver may sleep past a plan this turn lowered: it is woken to plan again.
        shared.unpark_worker(false, plan);
        return watching.then_some(wake);
    }
    Some(plan)
}

/// Notes that the thread, having seen the driver's `plan`, watches over it until the end of
/// tick `wake`, for producers that lower the plan well below that (`Shared::unpark_worker`);
/// then rechecks the plan: false (do not sleep) if a producer lowered it since, as it may have
/// looked before the note.
fn watch_until<J: Stored>(shared: &Shared<J>, plan: u64, wake: u64) -> bool {
    lock(&shared.control).watchdog_until = wake;
    // After the lock: a producer that lowered the plan before reading the note (under the same
    // lock) is seen here. (A turn's `AWAKE` or a later plan is no lowering.)
    shared.plan() >= plan
}

/// Flags the watchdog parked, for a driver whose turn plans a tick to unpark it, then rechecks
/// the plan: false (do not park) if a turn planned a tick since, as its driver may have looked
/// before the flag was set.
fn watch_parked<J: Stored>(shared: &Shared<J>) -> bool {
    lock(&shared.control).watchdog_parked = true;
    // After the lock: a driver's turn that published its plan before reading the flag (under
    // the same lock) is seen here.
    if shared.plan() != u64::MAX {
        lock(&shared.control).watchdog_parked = false;
        return false;
    }
    true
}

/// One turn, by whoever holds the worker's lock (`worker` docs, "Sleeping"). Returns the plan:
/// the tick at whose end the next turn is due (`u64::MAX`: only when woken).
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
    // Reads no atomic unless it trims (a turn during a `stop()` may too: harmless).
    if let Some(look) = worker.trim_if_due(shared, plan) {
        shared.lower_plan(look);
        plan = plan.min(look);
    }
    if plan > worker.tick && !shared.is_shutdown() {
        // Idle until a later tick: nothing is queued.
        worker.release_idle_buffers(shared);
    }
    plan
}

/// Stops the timer if the thread unwinds (only a crate bug can: user code's panics are caught):
/// the failure is loud (logged, `new_timeout` refused), never a timer that fires nothing. The
/// timer leaves the live-timer count here: a `stop()` finds it stopped and returns at once.
struct StopOnUnwind<'a, J: Stored>(&'a Shared<J>);

impl<J: Stored> Drop for StopOnUnwind<'_, J> {
    fn drop(&mut self) {
        // A failing loom model unwinds here: calling into loom would make its report an abort.
        if cfg!(loom) || !std::thread::panicking() {
            return;
        }
        // Out of the live count first: a caller that sees the timer stopped sees it left too.
        self.0.leave_live_timer_count();
        {
            let _control = lock(&self.0.control);
            self.0.mark_shutdown();
        }
        // Last, and caught: a logger's panic out of a `Drop` during the unwind aborts.
        log_caught(
            log::Level::Error,
            format_args!(
                "the timer's worker thread panicked (a bug of hashed-timer-wheel): the timer is \
                 stopped, and the timeouts it held are lost"
            ),
        );
    }
}

/// Asks the kernel to end this thread's sleeps within a thousandth of a tick, never looser than
/// its current slack (Linux's default, 50 µs, is a twentieth of a 1 ms tick;
/// `docs/performance.md`, "Worker timer slack"). Best effort: a refusal (a seccomp filter, say)
/// keeps the current slack.
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
fn tighten_timer_slack(tick_nanos: u64) {
    const DEFAULT_SLACK_NANOS: u64 = 50_000;
    let wanted = (tick_nanos / 1000).clamp(1, DEFAULT_SLACK_NANOS);
    let current = rustix::thread::current_timer_slack().unwrap_or(DEFAULT_SLACK_NANOS);
    if wanted < current {
        if let Err(e) = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(wanted)) {
            log_caught(
                log::Level::Debug,
                format_args!("the worker's timer slack stays at {current} ns: {e}"),
            );
        }
    }
}

/// Elsewhere the sleep's precision is the platform's.
#[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
fn tighten_timer_slack(_tick_nanos: u64) {}

/// Sleeps until the end of `tick` (`u64::MAX`: until unparked); may return early.
///
/// Under loom a bounded sleep jumps the manual clock to its end; an unbounded one parks, so a
/// lost wake-up deadlocks. If the model holds the clock (`loom_hooks::hold_clock`), a bounded
/// sleep parks too, until `loom_hooks::advance_clock` ends the planned tick as an OS timer would.
fn sleep_until_end_of<J: Stored>(shared: &Shared<J>, tick: u64) {
    if tick == u64::MAX {
        thread::park();
        return;
    }
    let wake_at = tick.saturating_add(1).saturating_mul(shared.tick_nanos);
    #[cfg(not(loom))]
    {
        let now = shared.clock.now();
        if wake_at > now {
            thread::park_timeout(std::time::Duration::from_nanos(wake_at - now));
        }
    }
    #[cfg(loom)]
    if crate::sync::loom_hooks::clock_held() {
        // The model's clock is real time, which no memory ordering hides from a sleeper: this
        // fence and `advance_clock`'s make sure we see the time or the clock sees our plan.
        crate::sync::fence(crate::sync::Ordering::SeqCst);
        if shared.clock.now() < wake_at {
            thread::park();
        }
    } else {
        shared.clock.advance_to(wake_at);
    }
}

#[cfg(test)]
mod tests {
    use super::StopOnUnwind;
    use crate::clock::loud_logger;
    use crate::sync::Arc;
    use crate::HashedWheelTimer;
    use std::time::Duration;

    /// A worker thread that unwinds (a bug of the crate's) stops its timer and leaves the
    /// live-timer count, also under a logger that panics on the report. The timer stayed counted
    /// for good, and the report's panic escaped the guard's `Drop` and aborted the process.
    #[test]
    fn a_worker_thread_that_unwinds_stops_its_timer_and_leaves_the_live_timer_count() {
        for loud in [false, true] {
            let timer = HashedWheelTimer::new(Duration::from_millis(100), 1);
            let shared = Arc::clone(&timer.shared);
            let unwind = move || {
                let _loud = StopOnUnwind(&shared);
                panic!("a bug of the worker thread (simulated)");
            };
            let returned = if loud {
                loud_logger::on_a_loud_thread(unwind)
            } else {
                std::thread::spawn(unwind).join().is_ok()
            };
            assert!(!returned, "loud logger: {loud}");
            assert!(timer.is_stopped(), "loud logger: {loud}");
            assert!(!timer.shared.in_live_timer_count(), "loud logger: {loud}");
        }
    }
}
