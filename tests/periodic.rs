//! Periodic tasks on the manual clock: no drift, each missed-run policy across a stall of the
//! worker, fixed delay, cancelling, `stop()`, the pending count; and no overlapping runs with
//! an executor.

use hashed_timer_wheel::{HashedWheelTimer, ManualDriver, MissedRuns, PeriodicTimeout};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);

fn manual(tick: Duration) -> (HashedWheelTimer, ManualDriver) {
    HashedWheelTimer::builder()
        .tick_duration(tick)
        .ticks_per_wheel(64)
        .build_manual()
        .unwrap()
}

/// The ticks the task ran on, recorded by the task itself.
fn recorder(driver: &ManualDriver) -> (Arc<Mutex<Vec<u64>>>, impl FnMut(&PeriodicTimeout) + Send) {
    let ticks: Arc<Mutex<Vec<u64>>> = Arc::default();
    let (t, d) = (ticks.clone(), driver.clone());
    (ticks, move |_: &PeriodicTimeout| {
        t.lock().unwrap().push(d.current_tick())
    })
}

/// A million runs at a period that is not a whole number of ticks (1.5 ms on a 1 ms tick):
/// run `k` is due at `first + k * period` and fires on that deadline's tick, every time; the
/// schedule never drifts by the runs' own lateness.
#[test]
fn a_million_fixed_rate_runs_do_not_drift() {
    const RUNS: u64 = 1_000_000;
    const PERIOD_NS: u64 = 1_500_000;
    const FIRST_NS: u64 = 2_000_000;
    let (timer, driver) = manual(MS);
    let (runs, wrong) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (r, w, d) = (runs.clone(), wrong.clone(), driver.clone());
    let task = timer
        .schedule_at_fixed_rate(
            move |_: &PeriodicTimeout| {
                let k = r.fetch_add(1, SeqCst);
                let due_tick = (FIRST_NS + k * PERIOD_NS) / 1_000_000;
                if d.current_tick() != due_tick {
                    w.fetch_add(1, SeqCst);
                }
            },
            Duration::from_nanos(FIRST_NS),
            Duration::from_nanos(PERIOD_NS),
            MissedRuns::Burst,
        )
        .unwrap();
    // The clock moves a second at a time: the worker runs each due tick of the second in turn.
    let end = Duration::from_nanos(FIRST_NS + (RUNS - 1) * PERIOD_NS) + MS;
    while driver.now() < end {
        driver.advance_to((driver.now() + Duration::from_secs(1)).min(end));
    }
    assert_eq!(runs.load(SeqCst), RUNS);
    assert_eq!(wrong.load(SeqCst), 0, "runs off their deadline's tick");
    assert_eq!(timer.pending_timeouts(), 1);
    assert!(task.cancel());
}

/// Moves the clock a tick at a time, as a worker that keeps up would see it.
fn step_to(driver: &ManualDriver, to: Duration) {
    while driver.now() < to {
        driver.advance(MS);
    }
}

/// The worker stalls from 11 ms to 55 ms (the clock jumps; the worker catches up on the ticks
/// in between, with its clock at 55 ms), with runs due every 10 ms from 10 ms; then it keeps
/// up again.
fn across_a_stall(missed: MissedRuns) -> Vec<u64> {
    let (timer, driver) = manual(MS);
    let (ticks, task) = recorder(&driver);
    let _periodic = timer
        .schedule_at_fixed_rate(task, 10 * MS, 10 * MS, missed)
        .unwrap();
    step_to(&driver, 11 * MS); // the first run, on time
    driver.advance_to(55 * MS); // the stall
    step_to(&driver, 90 * MS);
    let seen = ticks.lock().unwrap().clone();
    seen
}

#[test]
fn burst_runs_the_missed_runs_and_keeps_the_schedule() {
    // Runs due at 20, 30, 40 and 50 ms fire during the catch-up, on their ticks; the schedule
    // goes on at 60, 70, 80.
    assert_eq!(
        across_a_stall(MissedRuns::Burst),
        vec![10, 20, 30, 40, 50, 60, 70, 80]
    );
}

#[test]
fn skip_drops_the_missed_runs_and_keeps_the_schedule() {
    // The run due at 20 ms finds the clock at 55 ms: 30, 40 and 50 are skipped, 60 is next.
    assert_eq!(across_a_stall(MissedRuns::Skip), vec![10, 20, 60, 70, 80]);
}

#[test]
fn delay_shifts_the_schedule_after_a_late_run() {
    // The run due at 20 ms finds the clock at 55 ms: the next is a period later, at 65 ms, and
    // the schedule goes on from there.
    assert_eq!(across_a_stall(MissedRuns::Delay), vec![10, 20, 65, 75, 85]);
}

/// Fixed delay counts from the end of each run: the clock at the run (the end of its tick on
/// the manual clock, advanced a tick at a time) plus the delay.
#[test]
fn fixed_delay_counts_from_the_end_of_each_run() {
    let (timer, driver) = manual(MS);
    let (ticks, task) = recorder(&driver);
    let _periodic = timer
        .schedule_with_fixed_delay(task, 10 * MS, 10 * MS)
        .unwrap();
    for _ in 0..45 {
        driver.advance(MS);
    }
    // Each run happens when the clock reaches the end of its tick, one tick after its
    // deadline's start: the next is due 10 ms after that.
    assert_eq!(*ticks.lock().unwrap(), vec![10, 21, 32, 43]);
}

/// One handle cancels every future run, from outside or from inside the task; the pending
/// count is one while scheduled and drops to zero once the cancellation is processed.
#[test]
fn cancel_ends_the_schedule_and_the_pending_count() {
    let (timer, driver) = manual(MS);
    let (ticks, task) = recorder(&driver);
    let periodic = timer
        .schedule_at_fixed_rate(task, 5 * MS, 5 * MS, MissedRuns::Burst)
        .unwrap();
    assert_eq!(timer.pending_timeouts(), 1);
    driver.advance_to(16 * MS); // runs at 5, 10, 15
    assert_eq!(periodic.runs(), 3);
    assert_eq!(timer.pending_timeouts(), 1, "counted once, not per run");
    assert!(periodic.cancel());
    assert!(!periodic.cancel(), "only the first cancel wins");
    assert!(periodic.clone().is_cancelled());
    driver.advance_to(100 * MS);
    assert_eq!(*ticks.lock().unwrap(), vec![5, 10, 15]);
    assert_eq!(timer.pending_timeouts(), 0);

    let own = timer
        .schedule_at_fixed_rate(
            |me: &PeriodicTimeout| {
                if me.runs() == 2 {
                    assert!(me.cancel());
                }
            },
            MS,
            MS,
            MissedRuns::Burst,
        )
        .unwrap();
    driver.advance_to(200 * MS);
    assert_eq!(own.runs(), 2, "cancelled from inside its second run");
    assert_eq!(timer.pending_timeouts(), 0);
}

/// `stop()` returns the pending run's timeout, cancelled; nothing runs or is scheduled after.
#[test]
fn stop_returns_the_pending_run() {
    let (timer, driver) = manual(MS);
    let (ticks, task) = recorder(&driver);
    let periodic = timer
        .schedule_at_fixed_rate(task, 3 * MS, 3 * MS, MissedRuns::Skip)
        .unwrap();
    step_to(&driver, 7 * MS); // runs at 3 and 6
    let returned = timer.stop().unwrap();
    assert_eq!(returned.len(), 1);
    assert!(returned[0].is_cancelled());
    driver.advance_to(100 * MS);
    assert_eq!(*ticks.lock().unwrap(), vec![3, 6]);
    assert_eq!(periodic.runs(), 2);
}

/// With an executor, a run that outlasts its period still does not overlap the next: the next
/// is scheduled only when it has returned.
#[test]
fn runs_never_overlap_on_an_executor() {
    let timer = HashedWheelTimer::builder()
        .tick_duration(MS)
        .executor(|job: Box<dyn FnOnce() + Send>| {
            std::thread::spawn(job);
        })
        .build()
        .unwrap();
    let active = Arc::new(AtomicUsize::new(0));
    let overlapped = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = Mutex::new(tx);
    let (a, o) = (active.clone(), overlapped.clone());
    let periodic = timer
        .schedule_at_fixed_rate(
            move |me: &PeriodicTimeout| {
                if a.fetch_add(1, SeqCst) > 0 {
                    o.fetch_add(1, SeqCst);
                }
                // Five periods' worth of work.
                std::thread::sleep(5 * MS);
                a.fetch_sub(1, SeqCst);
                if me.runs() == 5 {
                    me.cancel();
                    tx.lock().unwrap().send(()).unwrap();
                }
            },
            Duration::ZERO,
            MS,
            MissedRuns::Burst,
        )
        .unwrap();
    rx.recv_timeout(Duration::from_secs(10))
        .expect("five runs within ten seconds");
    assert_eq!(overlapped.load(SeqCst), 0);
    assert_eq!(periodic.runs(), 5);
}

/// Runs on a thread each while another thread moves the manual clock without pause (a run's
/// successor may then fire before the run that scheduled it has stored its timeout, which the
/// schedule allows for; rare, as the store follows at once). Runs never overlap; once
/// `cancel()` has returned and the runs under way have ended, no run starts; nothing stays
/// pending.
#[test]
fn runs_on_threads_of_their_own_under_a_moving_clock_end_with_cancel() {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(MS)
        .ticks_per_wheel(64)
        .executor(|job: Box<dyn FnOnce() + Send>| {
            std::thread::spawn(job);
        })
        .build_manual()
        .unwrap();
    let (active, overlapped, bodies) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let (a, o, b) = (active.clone(), overlapped.clone(), bodies.clone());
    let periodic = timer
        .schedule_at_fixed_rate(
            move |_: &PeriodicTimeout| {
                if a.fetch_add(1, SeqCst) > 0 {
                    o.fetch_add(1, SeqCst);
                }
                b.fetch_add(1, SeqCst);
                a.fetch_sub(1, SeqCst);
            },
            MS,
            MS,
            MissedRuns::Burst,
        )
        .unwrap();
    let moving = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let clock = {
        let (driver, moving) = (driver.clone(), moving.clone());
        std::thread::spawn(move || {
            while moving.load(SeqCst) {
                driver.advance(MS);
                std::thread::yield_now();
            }
        })
    };
    let start = std::time::Instant::now();
    while bodies.load(SeqCst) < 2000 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "2000 runs within a minute"
        );
        std::thread::sleep(MS);
    }
    assert!(periodic.cancel());
    // The runs under way end; then no run may start, however far the clock moves.
    let settled = || {
        let before = bodies.load(SeqCst);
        std::thread::sleep(20 * MS);
        active.load(SeqCst) == 0 && bodies.load(SeqCst) == before
    };
    while !settled() {}
    let after_cancel = bodies.load(SeqCst);
    std::thread::sleep(50 * MS);
    moving.store(false, SeqCst);
    clock.join().unwrap();
    driver.advance(10 * MS);
    std::thread::sleep(20 * MS);
    assert_eq!(
        bodies.load(SeqCst),
        after_cancel,
        "a run started after cancel()"
    );
    assert_eq!(overlapped.load(SeqCst), 0);
    assert_eq!(periodic.runs() as usize, after_cancel);
    assert_eq!(timer.pending_timeouts(), 0);
    assert!(timer.stop().unwrap().is_empty());
}

/// A run whose successor the pending limit refuses ends the schedule, and says so:
/// `is_cancelled()` turns true (and a warning is logged), rather than the task going quiet.
#[test]
fn a_successor_refused_at_the_pending_limit_ends_the_schedule_visibly() {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(10 * MS)
        .max_pending_timeouts(2)
        .build_manual()
        .unwrap();
    let handle = timer.handle();
    let renew = timer
        .schedule_at_fixed_rate(
            move |p: &PeriodicTimeout| {
                if p.runs() == 1 {
                    // Fills the limit (the run's own timeout has ended as it runs).
                    for _ in 0..2 {
                        let far = Duration::from_secs(60);
                        let _kept = handle.new_timeout(|_: &hashed_timer_wheel::Timeout| {}, far);
                    }
                }
            },
            10 * MS,
            10 * MS,
            MissedRuns::Burst,
        )
        .unwrap();
    driver.advance(120 * MS);
    assert_eq!(renew.runs(), 1);
    assert!(renew.is_cancelled(), "the schedule ended: it says so");
    assert!(!renew.cancel(), "already ended");
    assert_eq!(timer.stats().refused, 1);
    assert_eq!(timer.pending_timeouts(), 2);
}

/// A schedule that ends without a cancel (a run that panics, a run the executor drops unrun, a
/// run `stop()` returns) says so, as one whose successor is refused does: `is_cancelled()`
/// turns true and `cancel()` finds nothing left to cancel. It went quiet, claiming to go on.
#[test]
fn a_schedule_ended_by_a_panic_a_dropped_run_or_stop_says_so() {
    let (timer, driver) = manual(MS);
    let panics = timer
        .schedule_with_fixed_delay(
            |p: &PeriodicTimeout| assert!(p.runs() < 2, "the second run panics (on purpose)"),
            MS,
            MS,
        )
        .unwrap();
    for _ in 0..10 {
        driver.advance(MS);
    }
    assert_eq!(panics.runs(), 2);
    assert!(panics.is_cancelled(), "ended by the panic");
    assert!(!panics.cancel(), "nothing left to cancel");
    let stopped = timer
        .schedule_with_fixed_delay(|_: &PeriodicTimeout| {}, MS, MS)
        .unwrap();
    driver.advance(3 * MS);
    assert_eq!(timer.stop().unwrap().len(), 1);
    assert!(stopped.is_cancelled(), "ended by stop()");
    // An executor that drops every second job unrun (a full pool, say).
    let handed = Arc::new(AtomicUsize::new(0));
    let h = handed.clone();
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(MS)
        .executor(move |job: Box<dyn FnOnce() + Send>| {
            if h.fetch_add(1, SeqCst).is_multiple_of(2) {
                job();
            }
        })
        .build_manual()
        .unwrap();
    let dropped = timer
        .schedule_at_fixed_rate(|_: &PeriodicTimeout| {}, MS, MS, MissedRuns::Burst)
        .unwrap();
    for _ in 0..10 {
        driver.advance(MS);
    }
    assert_eq!((dropped.runs(), handed.load(SeqCst)), (1, 2));
    assert!(dropped.is_cancelled(), "ended by the executor");
    assert_eq!(timer.pending_timeouts(), 0);
}

/// A period of one tick, with a worker that keeps up: each run fires a tick after its deadline
/// (a deadline on a tick's boundary waits for the next), which is no missed run, so every policy
/// runs on every tick.
#[test]
fn a_period_of_one_tick_misses_no_run_under_any_policy() {
    for missed in [MissedRuns::Burst, MissedRuns::Skip, MissedRuns::Delay] {
        let (timer, driver) = manual(10 * MS);
        let (ticks, task) = recorder(&driver);
        let periodic = timer
            .schedule_at_fixed_rate(task, 10 * MS, 10 * MS, missed)
            .unwrap();
        for _ in 0..20 {
            driver.advance(10 * MS);
        }
        assert_eq!(
            *ticks.lock().unwrap(),
            (1..20).collect::<Vec<u64>>(),
            "{missed:?}"
        );
        assert_eq!(periodic.runs(), 19, "{missed:?}");
    }
}

/// A fixed delay of zero panics, as a fixed rate's period of zero does (Java's
/// `scheduleWithFixedDelay` refuses it too), on the owner and on a handle, and schedules
/// nothing. It was accepted and ran the task on every tick.
#[test]
fn a_fixed_delay_of_zero_panics_as_a_period_of_zero_does() {
    let (timer, driver) = manual(MS);
    let handle = timer.handle();
    let message = |outcome: std::thread::Result<_>| -> String {
        let payload = outcome.map(|_: Result<PeriodicTimeout, _>| ()).unwrap_err();
        payload.downcast_ref::<&str>().unwrap().to_string()
    };
    let calls: [Box<dyn Fn() -> _>; 4] = [
        Box::new(|| timer.schedule_with_fixed_delay(|_: &PeriodicTimeout| {}, MS, Duration::ZERO)),
        Box::new(|| handle.schedule_with_fixed_delay(|_: &PeriodicTimeout| {}, MS, Duration::ZERO)),
        Box::new(|| {
            timer.schedule_at_fixed_rate(
                |_: &PeriodicTimeout| {},
                MS,
                Duration::ZERO,
                MissedRuns::Burst,
            )
        }),
        Box::new(|| {
            handle.schedule_at_fixed_rate(
                |_: &PeriodicTimeout| {},
                MS,
                Duration::ZERO,
                MissedRuns::Skip,
            )
        }),
    ];
    let messages: Vec<String> = calls
        .iter()
        .map(|call| message(std::panic::catch_unwind(std::panic::AssertUnwindSafe(call))))
        .collect();
    assert_eq!(messages[0], "the delay of a periodic task must not be zero");
    assert_eq!(messages[1], messages[0]);
    assert_eq!(
        messages[2],
        "the period of a periodic task must not be zero"
    );
    assert_eq!(messages[3], messages[2]);
    driver.advance(10 * MS);
    assert_eq!(timer.pending_timeouts(), 0, "nothing was scheduled");
    assert_eq!(timer.stats().expired, 0);
}

/// A pending run `stop()` gave back, scheduled on another timer, runs there once; it asks the
/// stopped timer for the next run, which ends the schedule.
#[test]
fn a_pending_run_stop_returned_runs_once_on_another_timer() {
    let (old, old_driver) = manual(MS);
    let (new, driver) = manual(MS);
    let (ticks, task) = recorder(&driver);
    let periodic = old
        .schedule_at_fixed_rate(task, 10 * MS, 10 * MS, MissedRuns::Burst)
        .unwrap();
    old_driver.advance(5 * MS);
    let pending = old
        .stop()
        .unwrap()
        .pop()
        .expect("the pending run comes back");
    assert!(
        !periodic.is_cancelled(),
        "the run it gave back may still run"
    );
    new.new_timeout(pending.into_task(), 20 * MS).unwrap();
    driver.advance(40 * MS);
    assert_eq!(
        *ticks.lock().unwrap(),
        vec![20],
        "once, at its new deadline's tick"
    );
    assert_eq!(periodic.runs(), 1);
    assert!(
        periodic.is_cancelled(),
        "the stopped timer refused the next run"
    );
    assert_eq!(new.pending_timeouts(), 0);
}
