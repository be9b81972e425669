//! The worker's cost per timeout on a manual clock, for callgrind: 10^5 timeouts (`N`) due on
//! one tick are transferred into the wheel by one turn (`transfer`), then fired tick by tick
//! (`expire`), after a warm-up round in which pages and buffers grow. A timeout an hour
//! away keeps the wheel's memory, and one due a few ticks after the window (`BUSY_TICK`) keeps
//! the worker busy, as under a steady load: an idle worker gives memory back a slice a tick,
//! which is not the expiry's cost. The instruction counts in `benches/README.md` come from this
//! program:
//!
//! ```text
//! cargo bench --bench worker_cost --no-run     # prints the binary's path
//! valgrind --tool=callgrind --toggle-collect='worker_cost::expire' <binary>
//! valgrind --tool=callgrind --toggle-collect='worker_cost::transfer' <binary>
//! ```
//!
//! The collected instructions over `N` are the cost per timeout. `TASK` picks the task: `noop`
//! (the default), `capture` (a closure of 24 bytes), `capture16` (16 bytes: an id and a
//! `&'static`, as `netty_workloads`' `schedule_capture`) or `typed` (a typed timer's 24-byte task).
//! `LATE=1` fires them by one advance over the expiry's ticks (each about 5 ticks late),
//! `CANCEL=1` cancels them once in the wheel and measures the turn that ends them (`cancel`,
//! for `--toggle-collect='worker_cost::cancel'`), and `TIME=1` prints nanoseconds per timeout
//! (wall clock, without valgrind).

use hashed_timer_wheel::{HashedWheelTimer, Timeout, TypedTask};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static SUM: AtomicU64 = AtomicU64::new(0);

const TICK: Duration = Duration::from_millis(1);
/// Ticks from the scheduling to the due tick, and the ticks `expire` covers: from 5 before the
/// due tick to 5 after it.
const DUE_TICK: u64 = 20;
const EXPIRY_TICKS: u64 = 11;
/// A round's last timeout: due within the idle trim's 10 ms of every tick of the window.
const BUSY_TICK: u64 = DUE_TICK + 8;

fn noop(_: &Timeout) {}

/// The typed timer's task: three words, as `capture`'s closure.
struct Words {
    a: u64,
    b: u64,
    c: u64,
}

impl TypedTask for Words {
    fn run(self, _: &Timeout<Words>) {
        SUM.fetch_add(self.a + self.b + self.c, Ordering::Relaxed);
    }
}

/// The timer under test, seen through what the phases need of it.
struct Subject {
    /// Schedules the task made of `i`, due after the `Duration`.
    schedule: Box<dyn Fn(u64, Duration)>,
    advance: Box<dyn Fn(Duration)>,
    pending: Box<dyn Fn() -> usize>,
    /// Cancels the timeouts scheduled since the last call (handles kept under `CANCEL=1`).
    cancel_all: Box<dyn Fn()>,
}

/// The cancels of the handles kept so far.
type Kept = Rc<RefCell<Vec<Box<dyn FnOnce()>>>>;

/// Keeps `timeout`'s cancel in `kept`, if `kept` is there.
fn keep<J: hashed_timer_wheel::Stored>(kept: &Option<Kept>, timeout: Timeout<J>) {
    if let Some(kept) = kept {
        kept.borrow_mut().push(Box::new(move || {
            timeout.cancel();
        }));
    }
}

/// Runs and forgets the cancels kept so far.
fn cancel_all(kept: &Option<Kept>) -> Box<dyn Fn()> {
    let kept = kept.clone();
    Box::new(move || {
        let cancels = kept.as_ref().map(|k| std::mem::take(&mut *k.borrow_mut()));
        cancels.into_iter().flatten().for_each(|cancel| cancel());
    })
}

fn subject(task: &str, kept: Option<Kept>) -> Subject {
    let cancels = cancel_all(&kept);
    let builder = || {
        HashedWheelTimer::builder()
            .tick_duration(TICK)
            .ticks_per_wheel(512)
    };
    if task == "typed" {
        let (timer, driver) = builder().build_manual_typed::<Words>().expect("valid");
        let timer = std::rc::Rc::new(timer);
        let (t1, t2) = (timer.clone(), timer);
        return Subject {
            schedule: Box::new(move |i, delay| {
                let words = Words {
                    a: i,
                    b: i * 3,
                    c: i ^ 7,
                };
                keep(&kept, t1.new_timeout(words, delay).expect("accepted"));
            }),
            advance: Box::new(move |by| driver.advance(by)),
            pending: Box::new(move || t2.pending_timeouts()),
            cancel_all: cancels,
        };
    }
    let (timer, driver) = builder().build_manual().expect("valid");
    let timer = std::rc::Rc::new(timer);
    let (t1, t2) = (timer.clone(), timer);
    let task = task.to_owned();
    Subject {
        schedule: Box::new(move |i, delay| {
            let timeout = match task.as_str() {
                "capture" => {
                    let (a, b, c) = (i, i * 3, i ^ 7);
                    let task = move |_: &Timeout| {
                        SUM.fetch_add(a + b + c, Ordering::Relaxed);
                    };
                    t1.new_timeout(task, delay)
                }
                "capture16" => {
                    let sum: &'static AtomicU64 = &SUM;
                    let task = move |_: &Timeout| {
                        sum.fetch_add(i, Ordering::Relaxed);
                    };
                    t1.new_timeout(task, delay)
                }
                _ => t1.new_timeout(noop, delay),
            };
            keep(&kept, timeout.expect("accepted"));
        }),
        advance: Box::new(move |by| driver.advance(by)),
        pending: Box::new(move || t2.pending_timeouts()),
        cancel_all: cancels,
    }
}

/// The turn that moves the `N` queued timeouts into the wheel.
#[inline(never)]
fn transfer(s: &Subject) {
    (s.advance)(TICK);
}

/// The turn that ends the `N` timeouts cancelled in the wheel (`black_box`: a body of its own,
/// not folded into `transfer`'s).
#[inline(never)]
fn cancel(s: &Subject) {
    (s.advance)(std::hint::black_box(TICK));
}

/// The ticks that fire them: one by one, or in one advance when `late`.
#[inline(never)]
fn expire(s: &Subject, late: bool) {
    if late {
        (s.advance)(TICK * EXPIRY_TICKS as u32);
        return;
    }
    ticks(s, EXPIRY_TICKS);
}

/// Turns tick by tick, as a worker that wakes for each tick with work.
fn ticks(s: &Subject, n: u64) {
    for _ in 0..n {
        (s.advance)(TICK);
    }
}

fn main() {
    let n: u64 = std::env::var("N").map_or(100_000, |v| v.parse().expect("N: a count"));
    let task = std::env::var("TASK").unwrap_or_else(|_| "noop".into());
    assert!(
        ["noop", "capture", "capture16", "typed"].contains(&task.as_str()),
        "TASK: noop, capture, capture16 or typed"
    );
    let late = std::env::var("LATE").is_ok_and(|v| v == "1");
    let cancelling = std::env::var("CANCEL").is_ok_and(|v| v == "1");
    let kept = cancelling.then(Kept::default);
    let s = subject(&task, kept.clone());
    // Keeps the wheel's memory: an empty wheel gives its pages back. Its handle goes uncancelled.
    (s.schedule)(0, Duration::from_secs(3600));
    kept.iter().for_each(|k| k.borrow_mut().clear());
    let due = TICK * DUE_TICK as u32 + TICK / 2;
    let busy = TICK * BUSY_TICK as u32 + TICK / 2;
    let round = |s: &Subject| {
        (0..n).for_each(|i| (s.schedule)(i, due));
        (s.schedule)(n, busy);
    };
    round(&s);
    if cancelling {
        transfer(&s);
        (s.cancel_all)();
        cancel(&s);
    } else {
        ticks(&s, BUSY_TICK + 2);
    }
    assert_eq!((s.pending)(), 1, "the warm-up round ended");
    round(&s);
    let t0 = Instant::now();
    transfer(&s);
    let transferred = t0.elapsed();
    if !cancelling {
        // To 5 ticks before the due one (the transfer's tick and this make `DUE_TICK - 5`).
        ticks(&s, DUE_TICK - 6);
        let t1 = Instant::now();
        expire(&s, late);
        report(&task, transferred, t1.elapsed(), n);
        assert_eq!((s.pending)(), 2, "every timeout due in the window fired");
        return;
    }
    (s.cancel_all)();
    let t1 = Instant::now();
    cancel(&s);
    report(&task, transferred, t1.elapsed(), n);
    assert_eq!(
        (s.pending)(),
        1,
        "every timeout cancelled in the wheel ended"
    );
}

/// Under `TIME=1`, prints the transfer's and the expiry's (or the cancels') nanoseconds a timeout.
fn report(task: &str, transferred: Duration, ended: Duration, n: u64) {
    std::hint::black_box(SUM.load(Ordering::Relaxed));
    if std::env::var("TIME").is_ok_and(|v| v == "1") {
        let per = |d: Duration| d.as_nanos() as f64 / n as f64;
        println!(
            "RESULT impl=hashed-timer-wheel workload=worker_cost_{task} transfer_ns={:.1} end_ns={:.1}",
            per(transferred),
            per(ended)
        );
    }
}
