//! Periodic tasks: [`PeriodicTimeout`], [`MissedRuns`] and `PeriodicRun`. Each run is an ordinary
//! timeout, the next scheduled once the run returns: runs never overlap.

use crate::engine::clock::nanos;
use crate::engine::{At, BoxedTask, TimerHandle};
use crate::sync::{lock, Arc, AtomicBool, AtomicU64, Mutex, Ordering};
use crate::{Timeout, TimerError, TimerTask};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

/// What a fixed-rate task or an [`Interval`](crate::Interval) does about a late run or tick:
/// tokio's `MissedTickBehavior`; Java's `scheduleAtFixedRate` is [`MissedRuns::Burst`].
///
/// Lateness of up to a tick counts as on time (tokio allows 5 ms): a period of one tick runs on
/// every tick under each policy. Past that, with a run or tick due at `due`, a period `period`
/// and the timer's tick `tick`, the policy chooses the next at `now`: when a run returns (a
/// fixed-rate task), or when a poll takes a tick (an `Interval`). A next `due + period` later
/// than `now - tick` missed no run: it is the next under every policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MissedRuns {
    /// Run the missed ones back to back until caught up: the next is always `due + period` (as
    /// tokio's `Burst`). Runs come at most one a tick: with a period shorter than the tick they
    /// never catch up, so use `Skip` or `Delay` there.
    #[default]
    Burst,
    /// Skip them: the next is the first of `due + k * period` later than `now - tick` (due at
    /// once if it lies within the last tick), and the schedule does not move. tokio's `Skip`
    /// takes the first later than `now`.
    Skip,
    /// Shift the schedule: the next is `now + period`. A fixed-rate task shifts it only once a
    /// run was missed (as Java's `scheduleWithFixedDelay`); an `Interval`, after any tick taken
    /// more than a tick late (as tokio's `Delay`).
    Delay,
}

/// The deadline after `due` on a fixed-rate schedule: `due + period` if still after
/// `now - slack` (`slack`: the lateness that misses no run), else what `missed` says.
pub(super) fn next_due(due: u64, period: u64, missed: MissedRuns, now: u64, slack: u64) -> u64 {
    let on_time = due.saturating_add(period);
    let horizon = now.saturating_sub(slack);
    match missed {
        _ if on_time > horizon => on_time,
        MissedRuns::Burst => on_time,
        // The first of `due + m * period` after the horizon.
        MissedRuns::Skip => {
            let m = (horizon - due) / period + 1;
            due.saturating_add(m.saturating_mul(period))
        }
        MissedRuns::Delay => now.saturating_add(period),
    }
}

#[derive(Debug, Clone, Copy)]
enum Schedule {
    Rate { period: u64, missed: MissedRuns },
    Delay { delay: u64 },
}

impl Schedule {
    /// The next run's deadline, after a run due at `due` that ended at `now`.
    fn next_after(self, due: u64, now: u64, tick: u64) -> u64 {
        match self {
            Schedule::Delay { delay } => now.saturating_add(delay),
            Schedule::Rate { period, missed } => next_due(due, period, missed, now, tick),
        }
    }
}

/// The handle on a periodic task: cancels every future run.
///
/// Clones refer to the same task, which receives one. Dropping the handle does not cancel the
/// task. A run that panics ends the schedule, as in Java; `stop()` returns the pending run
/// ([`NeverRan`](crate::NeverRan)), whose drop ends the schedule (scheduled on another timer, it
/// runs once there: it asks the stopped timer for the next run, which ends the schedule). Made
/// by [`TimerHandle::schedule_at_fixed_rate`] (which has an example) and
/// [`TimerHandle::schedule_with_fixed_delay`].
#[derive(Clone)]
pub struct PeriodicTimeout {
    inner: Arc<Periodic>,
}

struct Periodic {
    timer: TimerHandle,
    /// The timeout of the latest run scheduled (or of the one running), with that run's
    /// number (the first is 1). Its lock orders the storing of a run's timeout against
    /// `cancel()`: `cancelled` is written, and read by the runs, under it.
    current: Mutex<(u64, Option<Timeout>)>,
    cancelled: AtomicBool,
    runs: AtomicU64,
}

impl Periodic {
    /// Counts a run as it starts; false if the schedule was cancelled first.
    fn start_run(&self) -> bool {
        let _current = lock(&self.current);
        // Relaxed: under the lock (see `Periodic::current`).
        if self.cancelled.load(Ordering::Relaxed) {
            return false;
        }
        self.runs.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Stores the timeout of run `nth` (`None`: refused, which ends the schedule), or cancels it
    /// if the task was cancelled first. A successor's stored already (on an executor) is kept.
    fn store(&self, nth: u64, timeout: Option<Timeout>) {
        let mut current = lock(&self.current);
        // Relaxed: under the lock (see `Periodic::current`).
        if self.cancelled.load(Ordering::Relaxed) {
            drop(current);
            if let Some(timeout) = timeout {
                timeout.cancel();
            }
        } else if current.0 < nth {
            if timeout.is_none() {
                self.cancelled.store(true, Ordering::Relaxed);
            }
            *current = (nth, timeout);
        }
    }
}

impl PeriodicTimeout {
    /// Cancels every future run (one under way finishes); `true` for the one call that cancelled.
    pub fn cancel(&self) -> bool {
        let inner = &self.inner;
        let mut current = lock(&inner.current);
        // Relaxed: read and written under the lock (see `Periodic::current`).
        if inner.cancelled.swap(true, Ordering::Relaxed) {
            return false;
        }
        // Under the lock: a run that has just returned stores its successor's timeout under it
        // too, so it either sees `cancelled` (and cancels that timeout) or stored it first.
        if let Some(current) = current.1.take() {
            current.cancel();
        }
        true
    }

    /// Whether the schedule has ended: [`cancel`](PeriodicTimeout::cancel) was called, a run
    /// panicked, or a run will never start (refused at the pending limit, the timer stopped, or
    /// dropped unrun by the executor).
    pub fn is_cancelled(&self) -> bool {
        // Relaxed: a snapshot (see `cancel`).
        self.inner.cancelled.load(Ordering::Relaxed)
    }

    /// Runs started so far (inside a run: counting this one).
    pub fn runs(&self) -> u64 {
        // Relaxed: a count; a run's own increment happens before it calls the task.
        self.inner.runs.load(Ordering::Relaxed)
    }

    /// The timer the task runs on, as a handle: a run may schedule more work through it.
    pub fn timer(&self) -> &TimerHandle {
        &self.inner.timer
    }
}

impl fmt::Debug for PeriodicTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeriodicTimeout")
            .field("runs", &self.runs())
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// The task of one run's timeout.
struct PeriodicRun<F> {
    periodic: EndsUnlessRun,
    task: F,
    /// This run's deadline, nanoseconds since the timer's origin.
    due: u64,
    nth: u64,
    schedule: Schedule,
}

/// A run's schedule, ended when the run is dropped unrun (cancelled, refused, returned by
/// `stop()`, or dropped by the executor).
struct EndsUnlessRun(Option<PeriodicTimeout>);

impl EndsUnlessRun {
    fn run(mut self) -> PeriodicTimeout {
        self.0.take().expect("a run's schedule, taken once")
    }
}

impl Drop for EndsUnlessRun {
    fn drop(&mut self) {
        if let Some(periodic) = self.0.take() {
            periodic.cancel();
        }
    }
}

impl<F> TimerTask for PeriodicRun<F>
where
    F: FnMut(&PeriodicTimeout) + Send + 'static,
{
    fn run(self: Box<Self>, _timeout: &Timeout) {
        let PeriodicRun {
            periodic,
            mut task,
            due,
            nth,
            schedule,
        } = *self;
        let periodic = periodic.run();
        if !periodic.inner.start_run() {
            return;
        }
        let shared = &periodic.inner.timer.0;
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| task(&periodic))) {
            // The panic ends the schedule. The task is dropped here, not by the unwind: a `Drop`
            // that panics while a panic unwinds would abort the process.
            periodic.cancel();
            let dropped = crate::engine::catch_user_panic(move || drop(task));
            shared.counters.caught(dropped, "a periodic task's drop");
            std::panic::resume_unwind(panic);
        }
        let next = schedule.next_after(due, shared.clock.now(), shared.tick_nanos);
        // Relaxed: a hint (`store` looks again under the lock).
        if !periodic.inner.cancelled.load(Ordering::Relaxed) {
            schedule_next(&periodic, task, next, nth + 1, schedule);
        }
    }
}

/// Schedules run `nth` and stores its timeout; a refusal (logged at the limit) ends the schedule.
fn schedule_next<F>(periodic: &PeriodicTimeout, task: F, due: u64, nth: u64, schedule: Schedule)
where
    F: FnMut(&PeriodicTimeout) + Send + 'static,
{
    let timeout = match schedule_run(periodic, task, due, nth, schedule) {
        Ok(timeout) => Some(timeout),
        Err(TimerError::Stopped) => None,
        Err(e) => {
            crate::engine::log_caught(
                log::Level::Warn,
                format_args!("a periodic task's next run was refused ({e}): its schedule ends"),
            );
            None
        }
    };
    periodic.inner.store(nth, timeout);
}

/// Schedules run `nth`, due at `due`. Not under the schedule's lock: a refused run's task is
/// dropped in the call, and its `Drop` may cancel the schedule.
fn schedule_run<F>(
    periodic: &PeriodicTimeout,
    task: F,
    due: u64,
    nth: u64,
    schedule: Schedule,
) -> Result<Timeout, TimerError>
where
    F: FnMut(&PeriodicTimeout) + Send + 'static,
{
    let run = PeriodicRun {
        periodic: EndsUnlessRun(Some(periodic.clone())),
        task,
        due,
        nth,
        schedule,
    };
    let shared = &periodic.inner.timer.0;
    let at = At {
        deadline: due,
        now: shared.clock.now(),
        exempt: false,
        kind: crate::engine::Kind::Task,
    };
    let make = |spares: &mut Vec<BoxedTask>| BoxedTask::reusing(run, spares);
    let timeout = shared.schedule_at(make, at, false)?;
    Ok(timeout.expect("a handle was asked for"))
}

fn schedule_periodic<F>(
    timer: &TimerHandle,
    task: F,
    initial_delay: Duration,
    schedule: Schedule,
) -> Result<PeriodicTimeout, TimerError>
where
    F: FnMut(&PeriodicTimeout) + Send + 'static,
{
    let periodic = PeriodicTimeout {
        inner: Arc::new(Periodic {
            timer: timer.clone(),
            current: Mutex::new((0, None)),
            cancelled: AtomicBool::new(false),
            runs: AtomicU64::new(0),
        }),
    };
    let first = timer.0.clock.after(initial_delay);
    let timeout = schedule_run(&periodic, task, first, 1, schedule)?;
    periodic.inner.store(1, Some(timeout));
    Ok(periodic)
}

impl TimerHandle {
    /// Runs `task` first after `initial_delay`, then every `period` on deadlines fixed from
    /// the first (no drift), as Java's `scheduleAtFixedRate`, with a policy for missed runs
    /// ([`MissedRuns`]). Runs never overlap: `pending_timeouts()` counts the task once.
    ///
    /// # Errors
    /// As [`TimerHandle::new_timeout`], for the first run. A later refusal (the timer stopped,
    /// or at its pending limit, logged) ends the schedule: [`PeriodicTimeout::is_cancelled`].
    ///
    /// # Panics
    /// If `period` is zero.
    ///
    /// ```
    /// use hashed_timer_wheel::{HashedWheelTimer, MissedRuns, PeriodicTimeout};
    /// use std::time::Duration;
    ///
    /// let (timer, driver) = HashedWheelTimer::builder()
    ///     .tick_duration(Duration::from_millis(10))
    ///     .build_manual()?;
    /// let (first, every) = (Duration::from_millis(50), Duration::from_millis(100));
    /// let renew = |lease: &PeriodicTimeout| {
    ///     if lease.runs() == 3 {
    ///         lease.cancel(); // the third renewal is the last
    ///     }
    /// };
    /// let task = timer.schedule_at_fixed_rate(renew, first, every, MissedRuns::Burst)?;
    /// driver.advance(Duration::from_millis(160)); // due at 50 and 150 ms
    /// assert_eq!(task.runs(), 2);
    /// assert_eq!(timer.pending_timeouts(), 1, "one timeout pending per periodic task");
    /// driver.advance(Duration::from_secs(1));
    /// assert!(task.runs() == 3 && task.is_cancelled());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn schedule_at_fixed_rate<F>(
        &self,
        task: F,
        initial_delay: Duration,
        period: Duration,
        missed: MissedRuns,
    ) -> Result<PeriodicTimeout, TimerError>
    where
        F: FnMut(&PeriodicTimeout) + Send + 'static,
    {
        let period = nanos(period);
        assert!(period > 0, "the period of a periodic task must not be zero");
        let schedule = Schedule::Rate { period, missed };
        schedule_periodic(self, task, initial_delay, schedule)
    }

    /// Runs `task` first after `initial_delay`, then again `delay` after each run has
    /// returned. Like Java's `scheduleWithFixedDelay`.
    ///
    /// # Errors
    /// As [`schedule_at_fixed_rate`](Self::schedule_at_fixed_rate).
    ///
    /// # Panics
    /// If `delay` is zero (as Java's `scheduleWithFixedDelay`).
    pub fn schedule_with_fixed_delay<F>(
        &self,
        task: F,
        initial_delay: Duration,
        delay: Duration,
    ) -> Result<PeriodicTimeout, TimerError>
    where
        F: FnMut(&PeriodicTimeout) + Send + 'static,
    {
        let delay = nanos(delay);
        assert!(delay > 0, "the delay of a periodic task must not be zero");
        schedule_periodic(self, task, initial_delay, Schedule::Delay { delay })
    }
}
