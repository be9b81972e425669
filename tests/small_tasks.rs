//! Tasks of every size on the default timer: a closure that captures nothing allocates nothing,
//! one that captures data is boxed (in a reused box when one of its type is spare). Whatever the
//! size, each task runs once with
//! its data intact, or is dropped once without running: cancelled while queued, cancelled in
//! the wheel, returned by `stop()`, or left when the timer is dropped. Driven by the manual
//! clock.

use hashed_timer_wheel::{HashedWheelTimer, ManualDriver, Timeout, TimerTask};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

const TICK: Duration = Duration::from_millis(10);

/// Counts the runs and drops of the tasks holding it, and checks their data when they run.
#[derive(Default)]
struct Ledger {
    runs: AtomicUsize,
    drops: AtomicUsize,
    bad: AtomicUsize,
}

/// Captured by every task: counts its drop.
struct Token(Arc<Ledger>);

impl Drop for Token {
    fn drop(&mut self) {
        self.0.drops.fetch_add(1, SeqCst);
    }
}

/// A task capturing a token and `W` words of data (`W = 0` is 8 bytes; up to 32 in place).
fn task<const W: usize>(ledger: &Arc<Ledger>, seed: u64) -> impl FnOnce(&Timeout) + Send {
    let token = Token(Arc::clone(ledger));
    let data: [u64; W] = std::array::from_fn(|k| seed.wrapping_mul(k as u64 + 3));
    move |_: &Timeout| {
        let expected: [u64; W] = std::array::from_fn(|k| seed.wrapping_mul(k as u64 + 3));
        if data != expected {
            token.0.bad.fetch_add(1, SeqCst);
        }
        token.0.runs.fetch_add(1, SeqCst);
    }
}

/// A task aligned to 16 bytes (so never in place, whatever its size).
#[repr(align(16))]
struct Aligned(u64);

fn aligned_task(ledger: &Arc<Ledger>, seed: u64) -> impl FnOnce(&Timeout) + Send {
    let token = Token(Arc::clone(ledger));
    let data = Aligned(seed);
    move |_: &Timeout| {
        assert_eq!(std::ptr::addr_of!(data) as usize % 16, 0);
        if data.0 != seed {
            token.0.bad.fetch_add(1, SeqCst);
        }
        token.0.runs.fetch_add(1, SeqCst);
    }
}

/// A `TimerTask` of its own type (run through `TimerTask::run`).
struct Named {
    token: Token,
    seed: u64,
    check: u64,
}

impl TimerTask for Named {
    fn run(self: Box<Self>, _: &Timeout) {
        if self.check != self.seed ^ 0xff {
            self.token.0.bad.fetch_add(1, SeqCst);
        }
        self.token.0.runs.fetch_add(1, SeqCst);
    }
}

fn manual() -> (HashedWheelTimer, ManualDriver) {
    HashedWheelTimer::builder()
        .tick_duration(TICK)
        .ticks_per_wheel(8)
        .build_manual()
        .unwrap()
}

/// Schedules one task of each kind with `schedule`, `k` times.
fn each_kind(
    ledger: &Arc<Ledger>,
    k: u64,
    mut schedule: impl FnMut(Box<dyn FnOnce(&HashedWheelTimer) -> Timeout + '_>),
) -> usize {
    let mut n = 0;
    for seed in 0..k {
        let mut add = |f: Box<dyn FnOnce(&HashedWheelTimer) -> Timeout + '_>| {
            schedule(f);
            n += 1;
        };
        let delay = TICK * (1 + seed as u32 % 20); // some in the wheel's far slots
        add(Box::new(move |t| {
            t.new_timeout(task::<0>(ledger, seed), delay).unwrap()
        }));
        add(Box::new(move |t| {
            t.new_timeout(task::<1>(ledger, seed), delay).unwrap()
        }));
        add(Box::new(move |t| {
            t.new_timeout(task::<2>(ledger, seed), delay).unwrap()
        }));
        add(Box::new(move |t| {
            t.new_timeout(task::<3>(ledger, seed), delay).unwrap()
        }));
        add(Box::new(move |t| {
            t.new_timeout(task::<4>(ledger, seed), delay).unwrap()
        }));
        add(Box::new(move |t| {
            t.new_timeout(task::<8>(ledger, seed), delay).unwrap()
        }));
        add(Box::new(move |t| {
            t.new_timeout(aligned_task(ledger, seed), delay).unwrap()
        }));
        add(Box::new(move |t| {
            let named = Named {
                token: Token(Arc::clone(ledger)),
                seed,
                check: seed ^ 0xff,
            };
            t.new_timeout(named, delay).unwrap()
        }));
        add(Box::new(move |t| {
            let boxed: Box<dyn TimerTask> = Box::new(task::<2>(ledger, seed));
            t.new_timeout(boxed, delay).unwrap()
        }));
        add(Box::new(move |t| {
            let zst = |_: &Timeout| {};
            // A zero-sized task next to the token's: its own timeout.
            t.new_timeout(zst, delay).unwrap();
            t.new_timeout(task::<0>(ledger, seed), delay).unwrap()
        }));
    }
    n
}

#[test]
fn tasks_of_every_size_run_once_with_their_data() {
    let (timer, driver) = manual();
    let ledger = Arc::new(Ledger::default());
    let n = each_kind(&ledger, 40, |f| {
        f(&timer);
    });
    driver.advance(TICK * 25);
    assert_eq!(timer.pending_timeouts(), 0);
    assert_eq!(ledger.runs.load(SeqCst), n);
    assert_eq!(ledger.drops.load(SeqCst), n);
    assert_eq!(ledger.bad.load(SeqCst), 0, "a task ran with other data");
}

#[test]
fn tasks_of_every_size_are_dropped_once_when_they_never_run() {
    let (timer, driver) = manual();
    let ledger = Arc::new(Ledger::default());
    // Cancelled while queued.
    let queued = each_kind(&ledger, 10, |f| assert!(f(&timer).cancel()));
    driver.advance(TICK);
    assert_eq!(ledger.drops.load(SeqCst), queued);
    // Cancelled in the wheel (buckets and far slots).
    let mut handles = Vec::new();
    let in_wheel = each_kind(&ledger, 10, |f| handles.push(f(&timer)));
    driver.advance(TICK); // moved into the wheel, none due
    for h in &handles {
        assert!(h.cancel());
    }
    driver.advance(TICK);
    assert_eq!(ledger.drops.load(SeqCst), queued + in_wheel);
    // Returned by `stop()`: some queued, some in the wheel.
    let in_wheel = each_kind(&ledger, 10, |f| {
        f(&timer);
    });
    driver.advance(TICK);
    let queued = each_kind(&ledger, 10, |f| {
        f(&timer);
    });
    let before = ledger.drops.load(SeqCst);
    let returned = timer.stop().unwrap();
    // Also returned: zero-sized tasks (no token) of the earlier phases not due yet.
    assert!(returned.len() >= in_wheel + queued);
    assert_eq!(
        ledger.drops.load(SeqCst),
        before,
        "the tasks are the caller's"
    );
    drop(returned);
    assert_eq!(ledger.drops.load(SeqCst) - before, in_wheel + queued);
    assert_eq!(ledger.runs.load(SeqCst), 0);
}

#[test]
fn tasks_left_in_a_dropped_timer_are_dropped_once() {
    let ledger = Arc::new(Ledger::default());
    let n;
    {
        let (timer, driver) = manual();
        let in_wheel = each_kind(&ledger, 10, |f| {
            f(&timer);
        });
        driver.advance(TICK);
        n = in_wheel
            + each_kind(&ledger, 10, |f| {
                f(&timer);
            });
    }
    assert_eq!(ledger.drops.load(SeqCst), n);
    assert_eq!(ledger.runs.load(SeqCst), 0);
}

/// A panicking task of each class: the worker goes on, and the task's data is dropped once.
#[test]
fn a_panicking_task_is_dropped_once_and_the_timer_goes_on() {
    let (timer, driver) = manual();
    let ledger = Arc::new(Ledger::default());
    let token = || Token(Arc::clone(&ledger));
    let (small, large, boxed) = (token(), (token(), [1u64; 2]), (token(), [1u64; 8]));
    timer
        .new_timeout(
            move |_: &Timeout| {
                let _t = small;
                panic!("small task panics");
            },
            TICK,
        )
        .unwrap();
    timer
        .new_timeout(
            move |_: &Timeout| {
                let _t = large;
                panic!("large task panics");
            },
            TICK,
        )
        .unwrap();
    timer
        .new_timeout(
            move |_: &Timeout| {
                let _t = boxed;
                panic!("boxed task panics");
            },
            TICK,
        )
        .unwrap();
    let after = timer.new_timeout(task::<4>(&ledger, 7), TICK).unwrap();
    driver.advance(TICK * 3);
    assert!(after.is_expired());
    assert_eq!(timer.stats().panicked, 3);
    assert_eq!(ledger.runs.load(SeqCst), 1);
    assert_eq!(ledger.drops.load(SeqCst), 4);
}

/// A box a closure ran in is reused for the next closure of its type: each closure still runs
/// once, on its own data, whatever the mix of types and cancels between them.
#[test]
fn reused_boxes_run_each_closure_once_on_its_own_data() {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(TICK)
        .build_manual()
        .unwrap();
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut next_id = 0u64;
    for wave in 0..3u64 {
        for _ in 0..200 {
            next_id += 1;
            let (log, id) = (Arc::clone(&log), next_id);
            let delay = Duration::from_millis(1);
            if id % 3 == 0 {
                // Another closure type between them: its box is not reused for the first type.
                let extra = [id; 4];
                timer
                    .new_timeout_detached(
                        move |_: &Timeout| log.lock().unwrap().push(extra[3]),
                        delay,
                    )
                    .unwrap();
            } else if id % 7 == 0 {
                let t = timer
                    .new_timeout(move |_: &Timeout| log.lock().unwrap().push(id), delay)
                    .unwrap();
                assert!(t.cancel());
            } else {
                timer
                    .new_timeout_detached(move |_: &Timeout| log.lock().unwrap().push(id), delay)
                    .unwrap();
            }
        }
        driver.advance_to(TICK * (wave as u32 * 2 + 1));
    }
    let mut ran = log.lock().unwrap().clone();
    ran.sort_unstable();
    let expected: Vec<u64> = (1..=next_id)
        .filter(|id| id % 3 == 0 || id % 7 != 0)
        .collect();
    assert_eq!(ran, expected);
    assert_eq!(timer.pending_timeouts(), 0);
}
