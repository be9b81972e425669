//! Soak: the timers under a mixed load for a while, then their books balanced.
//!
//! For `SOAK_SECS` seconds (3 by default, so that `cargo test` stays quick; CI runs 20, and
//! `SOAK_SECS=3600` runs an hour), after a warm-up of the same load:
//! - two producer threads schedule one-shot tasks (delays of 1 ms to 2 s, about 70 % cancelled
//!   before their deadline, the rest left to fire with their handle kept, dropped at once, or
//!   never taken), stored in place or boxed, and start short periodic tasks;
//! - periodic tasks live through each phase, at a fixed rate (each missed-runs policy) and
//!   with a fixed delay;
//! - on a tokio runtime, clients sleep, put deadlines on futures, reset sleeps and drop the
//!   losers of races, and one task churns a `DelayQueue` (insert, reset, remove,
//!   `poll_expired`); that runtime drives the futures' timer (`drive`);
//! - a few tasks panic when run, and a few panic in their `Drop`: after running, when
//!   cancelled, and when `stop()` returns them.
//!
//! Then it checks that every one-shot task fired, was cancelled or was returned by `stop()`,
//! exactly one of the three (by the test's own books, and against `stats()`); that every task
//! was dropped exactly once; that nothing ran before its deadline; that `pending_timeouts()`
//! comes back down; and that the live heap, counted by this binary's allocator, is no larger
//! once the load is over than it was after the warm-up. It prints one summary line
//! (`-- --nocapture` shows it).
//!
//! Tasks and futures run on two timers: the test sees the outcome of every task's timeout, so
//! the tasks' timer's counters must match its books exactly; a future's timeout can end either
//! way unseen (a deadline whose future finishes as it fires), so the futures' timer is checked
//! for what the futures saw, not for exact counts.
#![allow(clippy::mutable_key_type)] // `Timeout` hashes by identity, not by its mutable state

use hashed_timer_wheel::delay_queue::{Expired, Key};
use hashed_timer_wheel::{
    DeadlineError, DelayQueue, HashedWheelTimer, MissedRuns, PeriodicTimeout, Timeout, TimerHandle,
    TimerStats, TimerTask,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap};
use std::future::{poll_fn, Future};
use std::hint::black_box;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::thread;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// The counting allocator: live bytes, whatever the thread.

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: each method hands its arguments to `System` unchanged and returns what `System`
// returns, so `System`'s guarantees are the caller's; the count has no effect on the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, SeqCst);
        // SAFETY: the caller's layout, forwarded (see the impl).
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, SeqCst);
        // SAFETY: the caller's layout, forwarded (see the impl).
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, SeqCst);
        // SAFETY: a block this allocator handed out, with its layout (see the impl).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, SeqCst);
        // SAFETY: a block this allocator handed out, its layout and the caller's new size
        // (see the impl).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(SeqCst)
}

// ---------------------------------------------------------------------------------------------
// The books.

/// The ids an outcome took: how many, and the wrapping sum of their hashes. Two tallies agree
/// on both when they hold the same ids; a task counted twice and another not at all changes the
/// sum. No memory per task, so the soak can run for hours.
struct Tally {
    n: AtomicU64,
    sum: AtomicU64,
}

impl Tally {
    const fn new() -> Tally {
        Tally {
            n: AtomicU64::new(0),
            sum: AtomicU64::new(0),
        }
    }
    fn add(&self, id: u64) {
        self.n.fetch_add(1, SeqCst);
        self.sum.fetch_add(mix(id), SeqCst);
    }
    fn n(&self) -> u64 {
        self.n.load(SeqCst)
    }
    fn sum(&self) -> u64 {
        self.sum.load(SeqCst)
    }
}

/// splitmix64's finaliser: ids that differ give unrelated hashes.
fn mix(id: u64) -> u64 {
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn counter() -> AtomicU64 {
    AtomicU64::new(0)
}

/// Everything the test counts, from every thread.
struct Books {
    next_id: AtomicU64,
    /// Every task's guard made and dropped (one-shot and periodic tasks alike).
    guards_made: Tally,
    guards_dropped: Tally,
    /// One-shot tasks: accepted, and each outcome.
    scheduled: Tally,
    fired: Tally,
    cancelled: Tally,
    returned: Tally,
    refused: AtomicU64,
    /// Panics the hook saw with the test's own marker, and those the test caused.
    by_design_panics: AtomicU64,
    run_panics: AtomicU64,
    drop_panics_made: AtomicU64,
    drop_on_run: AtomicU64,
    drop_on_cancel: AtomicU64,
    drop_on_stop: AtomicU64,
    /// Runs of periodic tasks, their cancels from outside a run that returned true, and runs
    /// whose `runs()` disagreed with the task's own count.
    periodic_runs: AtomicU64,
    periodic_outside_cancels: AtomicU64,
    periodic_miscounts: AtomicU64,
    /// Runs or completions before their deadline, by kind.
    early_tasks: AtomicU64,
    early_periodic: AtomicU64,
    early_futures: AtomicU64,
    early_queue: AtomicU64,
    /// Futures: completed sleeps, deadlines met and elapsed, resets, races; errors (a sleep or
    /// a deadline the timer could not keep).
    sleeps: AtomicU64,
    deadlines_met: AtomicU64,
    deadlines_elapsed: AtomicU64,
    resets: AtomicU64,
    races: AtomicU64,
    future_errors: AtomicU64,
    /// The `DelayQueue`: items inserted, yielded, removed, reset; anything off (an item yielded
    /// twice or under another key, a remove that found nothing, one never yielded).
    queue_inserted: AtomicU64,
    queue_expired: AtomicU64,
    queue_removed: AtomicU64,
    queue_resets: AtomicU64,
    queue_errors: AtomicU64,
}

static BOOKS: OnceLock<Books> = OnceLock::new();

fn books() -> &'static Books {
    BOOKS.get_or_init(|| Books {
        next_id: AtomicU64::new(1),
        guards_made: Tally::new(),
        guards_dropped: Tally::new(),
        scheduled: Tally::new(),
        fired: Tally::new(),
        cancelled: Tally::new(),
        returned: Tally::new(),
        refused: counter(),
        by_design_panics: counter(),
        run_panics: counter(),
        drop_panics_made: counter(),
        drop_on_run: counter(),
        drop_on_cancel: counter(),
        drop_on_stop: counter(),
        periodic_runs: counter(),
        periodic_outside_cancels: counter(),
        periodic_miscounts: counter(),
        early_tasks: counter(),
        early_periodic: counter(),
        early_futures: counter(),
        early_queue: counter(),
        sleeps: counter(),
        deadlines_met: counter(),
        deadlines_elapsed: counter(),
        resets: counter(),
        races: counter(),
        future_errors: counter(),
        queue_inserted: counter(),
        queue_expired: counter(),
        queue_removed: counter(),
        queue_resets: counter(),
        queue_errors: counter(),
    })
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, SeqCst);
}

fn get(c: &AtomicU64) -> u64 {
    c.load(SeqCst)
}

/// The test's own panics start with this; the hook counts them instead of printing them.
const BY_DESIGN: &str = "soak: by design:";
const RUN_PANIC: &str = "soak: by design: this task panics when run";
const DROP_PANIC: &str = "soak: by design: this task's Drop panics";

/// Counts the test's own panics (tasks that panic on purpose, by the hundred in a long soak)
/// rather than printing each; every other panic goes to the default hook, so a real failure is
/// reported as usual. The count is checked against the panics the test caused.
fn count_by_design_panics() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // The test's panics carry a `&'static str` (`panic_any`).
        let message = info.payload().downcast_ref::<&str>();
        if message.is_some_and(|m| m.starts_with(BY_DESIGN)) {
            bump(&books().by_design_panics);
        } else {
            report(info);
        }
    }));
}

/// Nanoseconds since the test started, on the monotonic clock the contract is stated against.
fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Lives in every task: counts its own drop in the books (exactly once per task, or the books
/// show it) and, in the tasks made so, panics in its `Drop` after counting. Its id and that
/// flag share one word, so that a task of a guard and a deadline is 16 bytes.
struct Guard(u64);

impl Guard {
    fn new(panics_on_drop: bool) -> Guard {
        let id = books().next_id.fetch_add(1, SeqCst);
        books().guards_made.add(id);
        if panics_on_drop {
            bump(&books().drop_panics_made);
        }
        Guard(id << 1 | u64::from(panics_on_drop))
    }
    fn id(&self) -> u64 {
        self.0 >> 1
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        books().guards_dropped.add(self.id());
        // Not while the thread unwinds already: a second panic would abort the process and
        // lose the report of the first.
        if self.0 & 1 == 1 && !thread::panicking() {
            std::panic::panic_any(DROP_PANIC);
        }
    }
}

/// A one-shot task's run: never before `due`, and counted as fired.
fn fire(guard: &Guard, due: u64) {
    if now_ns() < due {
        bump(&books().early_tasks);
    }
    books().fired.add(guard.id());
}

/// xorshift64*, seeded through splitmix: a few random numbers per operation, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(mix(seed) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A duration from `lo` to `hi`, both included.
    fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo, hi) = (lo.as_nanos() as u64, hi.as_nanos() as u64);
        Duration::from_nanos(lo + self.below(hi - lo + 1))
    }
}

const MS: Duration = Duration::from_millis(1);

// ---------------------------------------------------------------------------------------------
// The load's shape.

/// One-shot tasks a producer schedules a second (two producers), at most `BATCH` a
/// millisecond: a steady rate, whatever the machine, so that the wheel's occupancy has a known
/// ceiling (about 40 000 at once, see `HIGH_WATER`).
const RATE: f64 = 40_000.0;
const BATCH: u64 = 200;
const MIN_DELAY: Duration = MS;
const MAX_DELAY: Duration = Duration::from_secs(2);
/// Tasks left to fire with their handle dropped (or never taken) wait at most this, so that
/// the load winds down within a quarter second once the producers have cancelled what they
/// hold.
const SHORT_DELAY: Duration = Duration::from_millis(250);
/// Far timeouts, an hour away, pending all along: `stop()` returns them. Some panic in `Drop`.
const FAR_PLAIN: usize = 56;
const FAR_PANICKY: usize = 8;
const FAR: usize = FAR_PLAIN + FAR_PANICKY;
/// Timeouts the wheel holds once, before the baseline: what the worker keeps of a burst (its
/// queue buffers, its chunk table; each size class of task has pages of its own, so the set
/// holds both classes with data) is then past anything the load reaches, and its growth is not
/// mistaken for a leak. The worker's slab and task words keep no high-water mark at the
/// samples: idle before a long sleep, the worker gives back their pages that hold no timeout
/// (`docs/performance.md`, "Trim after a burst"). The load stays well under it: its pending count,
/// sampled every 100 ms, must stay below half (the wheel holds no more than is pending, and
/// half leaves room for a peak between samples, or a worker that fell behind on its
/// cancellations for a while).
const HIGH_WATER: usize = 1 << 18;
/// Sleeps the futures' timer holds once, for the same reason.
const HIGH_WATER_SLEEPS: usize = 4096;
/// Tokio clients of the futures' timer.
const CLIENTS: u64 = 48;
/// Items the `DelayQueue` holds at most.
const QUEUE_CAP: usize = 1000;
/// How long a phase may take to wind down before the test reports what is stuck.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// Bytes the live heap may hold at the end over what it held after the warm-up, both sampled
/// with the load stopped and the timers idle. What may legitimately differ between the two
/// samples, for each of the soak's three timers: the spare segments of new timeouts a queue
/// shard keeps (up to two of 32 KiB), the spare blocks of states (up to 32 of about 100 bytes
/// a shard) and boxes, the block each producing thread is filling, and the wheel's pages of
/// nodes that the timeouts still pending sit on (a page grows to 2 048 nodes, about 100 KiB);
/// and what the test harness's own threads allocate meanwhile (up to 1 KiB, as
/// `tests/memory.rs` measured). 256 KiB leaves room for them, and is far below any leak per
/// operation: the default 3-second soak schedules over 300 000 timeouts and runs some 15 000
/// futures and `DelayQueue` items, so a leak of even 4 bytes a timeout exceeds it.
const HEAP_TOLERANCE: isize = 256 << 10;

/// What a phase observed while it ran.
#[derive(Default, Clone, Copy)]
struct Load {
    peak_live: isize,
    peak_pending: usize,
}

// ---------------------------------------------------------------------------------------------
// One-shot tasks and periodic tasks, from the producer threads.

/// A handle kept until `at`: then cancelled (or, for `Keep`, let go of).
struct Planned {
    at: Instant,
    id: u64,
    timeout: Timeout,
}

impl PartialEq for Planned {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.id) == (other.at, other.id)
    }
}
impl Eq for Planned {}
impl PartialOrd for Planned {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Planned {
    /// Reversed: the earliest is the greatest, at the top of a `BinaryHeap`.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.at, other.id).cmp(&(self.at, self.id))
    }
}

/// What happens to a one-shot timeout's handle.
#[derive(Clone, Copy)]
enum Fate {
    /// Cancelled at this time (before its deadline).
    CancelAt(Instant),
    /// Cancelled at once.
    CancelNow,
    /// Kept until its deadline, then let go of: it fires.
    Keep,
    /// Let go of at once: it fires.
    Drop,
    /// Never taken (`new_timeout_detached`): it fires.
    Detached,
}

/// How a periodic task's runs are spaced.
#[derive(Clone, Copy)]
enum Cadence {
    Rate(MissedRuns),
    Delay,
}

/// A periodic task's body: each run checked against the earliest its deadline can be (run `k`
/// of a fixed rate is due no earlier than `first + k * period`, whatever the missed-runs policy
/// did; a fixed delay's run no earlier than `period` after the last one returned), and its
/// own schedule cancelled after `last` runs (0: never; something else cancels it).
fn periodic_body(
    guard: Guard,
    first_ns: u64,
    period_ns: u64,
    cadence: Cadence,
    last: u64,
) -> impl FnMut(&PeriodicTimeout) + Send + 'static {
    let mut runs = 0u64;
    let mut returned_ns = 0u64;
    move |periodic: &PeriodicTimeout| {
        let earliest = match cadence {
            Cadence::Delay if runs > 0 => returned_ns + period_ns,
            _ => first_ns + runs * period_ns,
        };
        if now_ns() < earliest {
            bump(&books().early_periodic);
        }
        runs += 1;
        bump(&books().periodic_runs);
        if periodic.runs() != runs {
            bump(&books().periodic_miscounts);
        }
        black_box(guard.id());
        if runs == last {
            periodic.cancel();
        }
        returned_ns = now_ns();
    }
}

/// Starts a periodic task on `timer`, its first run `initial` from now.
fn start_periodic(
    timer: &TimerHandle,
    initial: Duration,
    period: Duration,
    cadence: Cadence,
    last: u64,
) -> Option<PeriodicTimeout> {
    let guard = Guard::new(false);
    let first = now_ns() + initial.as_nanos() as u64;
    let body = periodic_body(guard, first, period.as_nanos() as u64, cadence, last);
    let started = match cadence {
        Cadence::Rate(missed) => timer.schedule_at_fixed_rate(body, initial, period, missed),
        Cadence::Delay => timer.schedule_with_fixed_delay(body, initial, period),
    };
    started.map_err(|_| bump(&books().refused)).ok()
}

fn cancel_periodic(periodic: &PeriodicTimeout) {
    if periodic.cancel() {
        bump(&books().periodic_outside_cancels);
    }
}

/// One producer thread's phase: what it holds, all let go of when the phase ends.
struct Producer<'a> {
    timer: &'a TimerHandle,
    rng: &'a mut Rng,
    cancels: BinaryHeap<Planned>,
    kept: BinaryHeap<Planned>,
    periodic: Vec<(Instant, PeriodicTimeout)>,
}

impl Producer<'_> {
    /// Schedules one-shot tasks at `RATE` until `until`, a few that panic every quarter
    /// second, and a short periodic task every 50 ms; then cancels what it still holds.
    fn run(timer: &TimerHandle, rng: &mut Rng, until: Instant) {
        let mut p = Producer {
            timer,
            rng,
            cancels: BinaryHeap::new(),
            kept: BinaryHeap::new(),
            periodic: Vec::new(),
        };
        let start = Instant::now();
        let (mut made, mut next_panicky, mut next_periodic) = (0u64, start, start);
        loop {
            let now = Instant::now();
            if now >= until {
                break;
            }
            p.settle(now);
            // Catch up with the rate, at most a batch at a time; a stall is not made up for.
            let target = (now.duration_since(start).as_secs_f64() * RATE) as u64;
            for _ in 0..target.saturating_sub(made).min(BATCH) {
                p.one_shot(now);
            }
            made = made.max(target);
            if now >= next_panicky {
                p.panicky(now);
                next_panicky += Duration::from_millis(250);
            }
            if now >= next_periodic {
                p.short_periodic(now);
                next_periodic += Duration::from_millis(50);
            }
            thread::sleep(MS);
        }
        for planned in p.cancels.drain().chain(p.kept.drain()) {
            if planned.timeout.cancel() {
                books().cancelled.add(planned.id);
            }
        }
        for (_, periodic) in p.periodic.drain(..) {
            cancel_periodic(&periodic);
        }
    }

    /// Cancels the planned cancels that are due, lets go of the kept handles whose deadline
    /// has passed, and cancels the periodic tasks whose time has come.
    fn settle(&mut self, now: Instant) {
        while self.cancels.peek().is_some_and(|p| p.at <= now) {
            let planned = self.cancels.pop().expect("peeked");
            if planned.timeout.cancel() {
                books().cancelled.add(planned.id);
            }
        }
        while self.kept.peek().is_some_and(|p| p.at <= now) {
            self.kept.pop();
        }
        self.periodic.retain(|(at, periodic)| {
            let due = *at <= now;
            if due {
                cancel_periodic(periodic);
            }
            !due
        });
    }

    /// One ordinary one-shot task: 70 % to be cancelled at a random point before its deadline,
    /// the rest to fire; 16 bytes (stored in place, in the two-word class), 32 (in place, four
    /// words) or 64 (boxed).
    fn one_shot(&mut self, now: Instant) {
        let roll = self.rng.below(100);
        let (fate, delay) = if roll < 70 {
            let delay = self.rng.between(MIN_DELAY, MAX_DELAY);
            let at = now + delay.mul_f64(self.rng.below(1000) as f64 / 1000.0);
            (Fate::CancelAt(at), delay)
        } else if roll < 85 {
            (Fate::Keep, self.rng.between(MIN_DELAY, MAX_DELAY))
        } else if roll < 95 {
            (Fate::Drop, self.rng.between(MIN_DELAY, SHORT_DELAY))
        } else {
            (Fate::Detached, self.rng.between(MIN_DELAY, SHORT_DELAY))
        };
        let guard = Guard::new(false);
        let id = guard.id();
        let due = now_ns() + delay.as_nanos() as u64;
        match self.rng.below(3) {
            0 => {
                let task = move |_: &Timeout| fire(&guard, due);
                assert_eq!(size_of_val(&task), 16);
                self.submit(task, id, delay, fate);
            }
            1 => {
                let pad = [id; 2];
                let task = move |_: &Timeout| {
                    black_box(&pad);
                    fire(&guard, due);
                };
                assert_eq!(size_of_val(&task), 32);
                self.submit(task, id, delay, fate);
            }
            _ => {
                let pad = [id; 6];
                let task = move |_: &Timeout| {
                    black_box(&pad);
                    fire(&guard, due);
                };
                assert_eq!(size_of_val(&task), 64);
                self.submit(task, id, delay, fate);
            }
        }
    }

    /// One task that panics when run, one whose `Drop` panics after it ran, and one whose
    /// `Drop` panics when it is cancelled (at once, so usually before the worker moved it into
    /// the wheel, or later, from the wheel).
    fn panicky(&mut self, now: Instant) {
        let delay = self.rng.between(MS, Duration::from_millis(100));
        let (guard, due) = (Guard::new(false), now_ns() + delay.as_nanos() as u64);
        let id = guard.id();
        let task = move |_: &Timeout| {
            fire(&guard, due);
            bump(&books().run_panics);
            std::panic::panic_any(RUN_PANIC);
        };
        self.submit(task, id, delay, Fate::Drop);

        let delay = self.rng.between(MS, Duration::from_millis(100));
        let (guard, due) = (Guard::new(true), now_ns() + delay.as_nanos() as u64);
        bump(&books().drop_on_run);
        let id = guard.id();
        self.submit(move |_: &Timeout| fire(&guard, due), id, delay, Fate::Drop);

        let delay = self
            .rng
            .between(Duration::from_millis(500), Duration::from_secs(2));
        let fate = if self.rng.below(2) == 0 {
            Fate::CancelNow
        } else {
            Fate::CancelAt(now + delay / 4)
        };
        let (guard, due) = (Guard::new(true), now_ns() + delay.as_nanos() as u64);
        bump(&books().drop_on_cancel);
        let id = guard.id();
        self.submit(move |_: &Timeout| fire(&guard, due), id, delay, fate);
    }

    /// A short periodic task: it cancels itself after up to 20 runs, or a third of them are
    /// cancelled from here within 200 ms.
    fn short_periodic(&mut self, now: Instant) {
        let initial = self.rng.between(Duration::ZERO, Duration::from_millis(20));
        let period = self.rng.between(MS, Duration::from_millis(20));
        let cadence = match self.rng.below(4) {
            0 => Cadence::Rate(MissedRuns::Burst),
            1 => Cadence::Rate(MissedRuns::Skip),
            2 => Cadence::Rate(MissedRuns::Delay),
            _ => Cadence::Delay,
        };
        if self.rng.below(3) == 0 {
            if let Some(periodic) = start_periodic(self.timer, initial, period, cadence, 0) {
                let at = now + self.rng.between(Duration::ZERO, Duration::from_millis(200));
                self.periodic.push((at, periodic));
            }
        } else {
            let last = 1 + self.rng.below(20);
            drop(start_periodic(self.timer, initial, period, cadence, last));
        }
    }

    fn submit<T: TimerTask>(&mut self, task: T, id: u64, delay: Duration, fate: Fate) {
        if let Fate::Detached = fate {
            match self.timer.new_timeout_detached(task, delay) {
                Ok(()) => books().scheduled.add(id),
                Err(_) => bump(&books().refused),
            }
            return;
        }
        let timeout = match self.timer.new_timeout(task, delay) {
            Ok(timeout) => timeout,
            Err(_) => {
                bump(&books().refused);
                return;
            }
        };
        books().scheduled.add(id);
        match fate {
            Fate::CancelAt(at) => self.cancels.push(Planned { at, id, timeout }),
            Fate::CancelNow => {
                if timeout.cancel() {
                    books().cancelled.add(id);
                }
            }
            Fate::Keep => self.kept.push(Planned {
                at: Instant::now() + delay,
                id,
                timeout,
            }),
            Fate::Drop | Fate::Detached => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Futures, on a tokio runtime.

/// Counts a future that completed `elapsed` after it started, due `due` after it.
fn completed(start: Instant, due: Duration) {
    if start.elapsed() < due {
        bump(&books().early_futures);
    }
}

/// A client: sleeps, deadlines (met or elapsed), resets of a sleep being awaited, and races of
/// two sleeps whose loser is dropped (cancelled), until `stop`.
async fn client(timer: TimerHandle, seed: u64, stop: Arc<AtomicBool>) {
    let mut rng = Rng::new(seed);
    let b = books();
    while !stop.load(SeqCst) {
        let d = rng.between(MS, Duration::from_millis(50));
        let start = Instant::now();
        match rng.below(4) {
            0 => match timer.sleep(d).await {
                Ok(()) => {
                    completed(start, d);
                    bump(&b.sleeps);
                }
                Err(_) => bump(&b.future_errors),
            },
            1 => {
                let inner = rng.between(MS, Duration::from_millis(50));
                match timer.timeout(d, timer.sleep(inner)).await {
                    Ok(Ok(())) => {
                        completed(start, inner);
                        bump(&b.deadlines_met);
                    }
                    Err(DeadlineError::Elapsed) => {
                        completed(start, d);
                        bump(&b.deadlines_elapsed);
                    }
                    Ok(Err(_)) | Err(_) => bump(&b.future_errors),
                }
            }
            2 => {
                let mut idle = timer.sleep(Duration::from_secs(3600));
                // Polled once first, so that the reset moves a registered waker.
                let ready = poll_fn(|cx| Poll::Ready(Pin::new(&mut idle).poll(cx).is_ready()));
                if ready.await {
                    bump(&b.future_errors);
                    continue;
                }
                let start = Instant::now();
                idle.reset_after(d);
                match idle.await {
                    Ok(()) => {
                        completed(start, d);
                        bump(&b.resets);
                    }
                    Err(_) => bump(&b.future_errors),
                }
            }
            _ => {
                let other = rng.between(MS, Duration::from_millis(50));
                let won = tokio::select! {
                    r = timer.sleep(d) => r.map(|()| d),
                    r = timer.sleep(other) => r.map(|()| other),
                };
                match won {
                    Ok(due) => {
                        completed(start, due);
                        bump(&b.races);
                    }
                    Err(_) => bump(&b.future_errors),
                }
            }
        }
    }
}

/// An item the queue yielded: one it holds, under its key, not before its deadline.
fn yielded(item: Expired<u64>, live: &mut HashMap<u64, (Key, Instant)>) {
    let b = books();
    match live.remove(item.get_ref()) {
        Some((key, at)) if key == item.key() => {
            if Instant::now() < at {
                bump(&b.early_queue);
            }
            bump(&b.queue_expired);
        }
        _ => bump(&b.queue_errors),
    }
}

/// Churns a `DelayQueue` on `timer` until `stop` (inserts of 1 to 300 ms, resets, removes,
/// every item yielded as it comes due), then drains it: every item comes out once, by its
/// deadline, or was removed.
async fn churn_queue(timer: TimerHandle, seed: u64, stop: Arc<AtomicBool>) {
    let b = books();
    let mut rng = Rng::new(seed);
    let mut queue: DelayQueue<u64> = DelayQueue::new(timer.clone());
    // Each item's key, and the earliest it may come out.
    let mut live: HashMap<u64, (Key, Instant)> = HashMap::new();
    let mut next = 0u64;
    while !stop.load(SeqCst) {
        if live.len() < QUEUE_CAP {
            for _ in 0..1 + rng.below(4) {
                let after = rng.between(MS, Duration::from_millis(300));
                let at = Instant::now() + after;
                live.insert(next, (queue.insert(next, after), at));
                next += 1;
                bump(&b.queue_inserted);
            }
        }
        if !live.is_empty() && rng.below(4) == 0 {
            let id = *live
                .keys()
                .nth(rng.below(live.len() as u64) as usize)
                .unwrap();
            let after = rng.between(MS, Duration::from_millis(300));
            let entry = live.get_mut(&id).unwrap();
            entry.1 = Instant::now() + after;
            queue.reset(&entry.0, after);
            bump(&b.queue_resets);
        }
        if !live.is_empty() && rng.below(6) == 0 {
            let id = *live
                .keys()
                .nth(rng.below(live.len() as u64) as usize)
                .unwrap();
            let (key, _) = live.remove(&id).unwrap();
            match queue.try_remove(&key) {
                Some(item) if *item.get_ref() == id => bump(&b.queue_removed),
                _ => bump(&b.queue_errors),
            }
        }
        let pause = rng.between(MS, 3 * MS);
        let first = tokio::select! {
            biased;
            item = poll_fn(|cx| queue.poll_expired(cx)) => item,
            _ = timer.sleep(pause) => None,
        };
        if let Some(item) = first {
            yielded(item, &mut live);
            // And whatever else is due already.
            while let Poll::Ready(Some(item)) =
                poll_fn(|cx| Poll::Ready(queue.poll_expired(cx))).await
            {
                yielded(item, &mut live);
            }
        }
    }
    loop {
        let limit = Duration::from_secs(10);
        match timer
            .timeout(limit, poll_fn(|cx| queue.poll_expired(cx)))
            .await
        {
            Ok(Some(item)) => yielded(item, &mut live),
            Ok(None) => break,
            Err(_) => {
                bump(&b.queue_errors);
                break;
            }
        }
    }
    b.queue_errors.fetch_add(live.len() as u64, SeqCst);
}

// ---------------------------------------------------------------------------------------------
// The phases.

/// What the watchdog names if the soak hangs.
static STAGE: AtomicUsize = AtomicUsize::new(0);
const STAGES: [&str; 7] = [
    "setting up",
    "warm-up",
    "settling after the warm-up",
    "soak",
    "settling after the soak",
    "stopping the timers",
    "checking",
];

fn stage(i: usize) {
    STAGE.store(i, SeqCst);
}

/// Ends the process if the soak runs past `budget`: a hung timer (a worker stuck, a future
/// never woken) must fail the run, not hold CI. Dropping the sender disarms it.
fn watchdog(budget: Duration) -> mpsc::Sender<()> {
    let (disarm, armed) = mpsc::channel::<()>();
    thread::Builder::new()
        .name("soak-watchdog".into())
        .spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = armed.recv_timeout(budget) {
                eprintln!(
                    "soak: still running after {budget:?}, while {}: a timer hung",
                    STAGES[STAGE.load(SeqCst)]
                );
                std::process::exit(3);
            }
        })
        .expect("the watchdog thread");
    disarm
}

/// The timers and the runtime the phases share.
struct Rig {
    tasks: HashedWheelTimer,
    futures: HashedWheelTimer,
    runtime: tokio::runtime::Runtime,
}

impl Rig {
    /// Runs the load for `length`: the producers (started through `go`, finished through
    /// `done`), long-lived periodic tasks, the futures' clients and the `DelayQueue`; samples
    /// the heap and the pending count while it runs; then winds it all down and waits for
    /// the timers to settle.
    fn phase(
        &self,
        length: Duration,
        seed: u64,
        producers: &[(mpsc::Sender<Instant>, mpsc::Receiver<()>)],
    ) -> Load {
        let until = Instant::now() + length;
        for (go, _) in producers {
            go.send(until).expect("a producer thread is gone");
        }
        let handle = self.tasks.handle();
        let long_lived: Vec<PeriodicTimeout> = [
            (MS, Cadence::Rate(MissedRuns::Burst)),
            (3 * MS, Cadence::Rate(MissedRuns::Skip)),
            (7 * MS, Cadence::Rate(MissedRuns::Delay)),
            (2 * MS, Cadence::Delay),
        ]
        .into_iter()
        .filter_map(|(period, cadence)| start_periodic(&handle, period, period, cadence, 0))
        .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let mut joins = Vec::new();
        for c in 0..CLIENTS {
            let task = client(self.futures.handle(), seed * 1000 + c, stop.clone());
            joins.push(self.runtime.spawn(task));
        }
        let queue = churn_queue(self.futures.handle(), seed * 1000 + 999, stop.clone());
        joins.push(self.runtime.spawn(queue));

        let mut load = Load::default();
        loop {
            load.peak_live = load.peak_live.max(live());
            load.peak_pending = load.peak_pending.max(self.tasks.pending_timeouts());
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            thread::sleep(left.min(Duration::from_millis(100)));
        }
        for (_, done) in producers {
            done.recv_timeout(SETTLE_LIMIT)
                .expect("a producer thread did not finish its phase (or panicked)");
        }
        for periodic in long_lived {
            cancel_periodic(&periodic);
        }
        stop.store(true, SeqCst);
        self.runtime.block_on(async {
            let all = async {
                for join in joins {
                    join.await.expect("a task of the futures' load panicked");
                }
            };
            tokio::time::timeout(SETTLE_LIMIT, all)
                .await
                .expect("the futures' load did not wind down: a future never woken?");
        });
        load
    }

    /// Waits until the load has ended: the tasks' timer holds only the far timeouts, the
    /// futures' timer nothing, every other task has been dropped and the books balance.
    fn settle(&self, what: &str) {
        let b = books();
        let started = Instant::now();
        loop {
            // Saturating: a task dropped twice shows in the final check, not as an overflow.
            let alive = b.guards_made.n().saturating_sub(b.guards_dropped.n());
            let ended = b.fired.n() + b.cancelled.n();
            let settled = self.tasks.pending_timeouts() == FAR
                && self.futures.pending_timeouts() == 0
                && alive == FAR as u64
                && b.scheduled.n() == ended + FAR as u64;
            if settled {
                return;
            }
            assert!(
                started.elapsed() < SETTLE_LIMIT,
                "{what}: not settled after {SETTLE_LIMIT:?}: the tasks' timer has {} pending \
                 (expected {FAR}, the far ones) and is at tick {} (a worker killed by a \
                 task's panicking Drop stops ticking), the futures' timer {} pending; {alive} \
                 tasks alive (expected {FAR}); scheduled {}, fired {}, cancelled {}",
                self.tasks.pending_timeouts(),
                self.tasks.stats().tick,
                self.futures.pending_timeouts(),
                b.scheduled.n(),
                b.fired.n(),
                b.cancelled.n(),
            );
            thread::sleep(5 * MS);
        }
    }

    /// The live heap once the timers have gone idle (each gives its kept buffers back when it
    /// has nothing to do) and it holds still: two readings 20 ms apart that agree, or the last
    /// reading after a second.
    fn settled_live(&self) -> isize {
        thread::sleep(Duration::from_millis(50));
        let mut last = live();
        for _ in 0..50 {
            thread::sleep(Duration::from_millis(20));
            let now = live();
            if now == last {
                break;
            }
            last = now;
        }
        last
    }
}

fn soak_length() -> Duration {
    let secs = match std::env::var("SOAK_SECS") {
        Ok(s) => s
            .trim()
            .parse::<f64>()
            .unwrap_or_else(|e| panic!("SOAK_SECS={s:?}: {e}")),
        Err(_) => 3.0,
    };
    Duration::from_secs_f64(secs.max(0.5))
}

/// The timers' stats in a line.
fn describe(s: &TimerStats) -> String {
    format!(
        "expired {}, cancelled {}, panicked {}, refused {}, late_max {:?}",
        s.expired, s.cancelled, s.panicked, s.refused, s.late_max
    )
}

#[test]
fn soak() {
    let length = soak_length();
    let warm_up = (length / 10).clamp(Duration::from_secs(1), Duration::from_secs(10));
    now_ns();
    count_by_design_panics();
    let disarm = watchdog(warm_up + length + 4 * SETTLE_LIMIT);
    let b = books();

    let timer = |name: &str| {
        HashedWheelTimer::builder()
            .tick_duration(MS)
            .ticks_per_wheel(512)
            .thread_name(name)
            .build()
            .unwrap()
    };
    let rig = Rig {
        tasks: timer("soak-tasks"),
        futures: timer("soak-futures"),
        runtime: tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("soak-tokio")
            .enable_time()
            .build()
            .unwrap(),
    };
    rig.tasks.start().unwrap();
    rig.futures.start().unwrap();
    // The futures' timer runs its turns on the runtime, as the README tells a tokio service to;
    // its thread watches. `stop()` completes the `Drive`.
    let _drive = rig
        .runtime
        .spawn(rig.futures.drive(|at| tokio::time::sleep_until(at.into())));

    // The far timeouts, pending throughout: `stop()` returns them. Their tasks are due at the
    // end of time, so one that ran would count as early.
    let mut far: HashMap<Timeout, u64> = HashMap::new();
    for i in 0..FAR {
        let panics = i < FAR_PANICKY;
        let guard = Guard::new(panics);
        if panics {
            bump(&b.drop_on_stop);
        }
        let id = guard.id();
        let t = rig
            .tasks
            .new_timeout(
                move |_: &Timeout| fire(&guard, u64::MAX),
                Duration::from_secs(3600),
            )
            .unwrap();
        b.scheduled.add(id);
        far.insert(t, id);
    }

    // The high-water marks (see `HIGH_WATER`), in tasks of both size classes with data (the
    // wheel keeps each class on pages of its own).
    let many: Vec<(u64, Timeout)> = (0..HIGH_WATER)
        .map(|i| {
            let guard = Guard::new(false);
            let id = guard.id();
            let hour = Duration::from_secs(3600);
            let t = if i % 2 == 0 {
                rig.tasks
                    .new_timeout(move |_: &Timeout| fire(&guard, u64::MAX), hour)
            } else {
                let pad = [0u64; 3];
                rig.tasks.new_timeout(
                    move |_: &Timeout| {
                        std::hint::black_box(pad);
                        fire(&guard, u64::MAX)
                    },
                    hour,
                )
            }
            .unwrap();
            b.scheduled.add(id);
            (id, t)
        })
        .collect();
    let sleeps: Vec<_> = (0..HIGH_WATER_SLEEPS)
        .map(|_| rig.futures.sleep(Duration::from_secs(3600)))
        .collect();
    // Until the worker has moved them into its wheel (100 000 a tick): a task queued after
    // them on the same shard is moved after them, so once it has run they are all in.
    let moved = Arc::new(AtomicBool::new(false));
    let (guard, flag) = (Guard::new(false), moved.clone());
    b.scheduled.add(guard.id());
    let marker = move |_: &Timeout| {
        fire(&guard, 0);
        flag.store(true, SeqCst);
    };
    rig.tasks
        .new_timeout_detached(marker, Duration::ZERO)
        .unwrap();
    let started = Instant::now();
    while !moved.load(SeqCst) {
        assert!(
            started.elapsed() < SETTLE_LIMIT,
            "the marker task never ran"
        );
        thread::sleep(MS);
    }
    for (id, t) in many {
        assert!(t.cancel());
        b.cancelled.add(id);
    }
    drop(sleeps);
    rig.settle("the high-water marks");

    let (baseline, end, warm_load, load) = thread::scope(|s| {
        let producers: Vec<(mpsc::Sender<Instant>, mpsc::Receiver<()>)> = (0..2u64)
            .map(|i| {
                let (go, phases) = mpsc::channel::<Instant>();
                let (finished, done) = mpsc::channel::<()>();
                let handle = rig.tasks.handle();
                thread::Builder::new()
                    .name(format!("soak-producer-{i}"))
                    .spawn_scoped(s, move || {
                        let mut rng = Rng::new(100 + i);
                        for until in phases {
                            Producer::run(&handle, &mut rng, until);
                            if finished.send(()).is_err() {
                                return;
                            }
                        }
                    })
                    .expect("a producer thread");
                (go, done)
            })
            .collect();
        stage(1);
        let warm_load = rig.phase(warm_up, 1, &producers);
        stage(2);
        rig.settle("after the warm-up");
        let baseline = rig.settled_live();
        stage(3);
        let load = rig.phase(length, 2, &producers);
        stage(4);
        rig.settle("after the soak");
        let end = rig.settled_live();
        (baseline, end, warm_load, load)
    });

    stage(5);
    // The worker publishes its counts after each run of ticks, a little after the timeouts
    // have ended: read once they reach at least what the books say ended (counts only grow,
    // so the checks below still see any excess).
    let floor = b.fired.n() + b.cancelled.n() + get(&b.periodic_runs);
    let started = Instant::now();
    let mut tasks_stats = rig.tasks.stats();
    while tasks_stats.expired + tasks_stats.cancelled < floor
        && started.elapsed() < Duration::from_secs(5)
    {
        thread::sleep(MS);
        tasks_stats = rig.tasks.stats();
    }
    let seen = get(&b.sleeps)
        + get(&b.deadlines_met)
        + get(&b.deadlines_elapsed)
        + get(&b.resets)
        + get(&b.races);
    let mut futures_stats = rig.futures.stats();
    while futures_stats.expired < seen && started.elapsed() < Duration::from_secs(5) {
        thread::sleep(MS);
        futures_stats = rig.futures.stats();
    }
    let stopped = catch_unwind(AssertUnwindSafe(|| rig.tasks.stop()));
    let returned = match stopped {
        Ok(returned) => returned.expect("stop() from the test thread"),
        Err(_) => panic!(
            "stop() let a panic out of a returned task's Drop: the panics of tasks stop() \
             drops must stay inside it"
        ),
    };
    let returned_count = returned.len();
    let mut strangers = 0;
    let mut dropped_here_panicked = 0;
    for t in returned {
        match far.remove(&t) {
            Some(id) => b.returned.add(id),
            None => strangers += 1,
        }
        // The task is ours now: dropped here, each on its own (some panic by design).
        dropped_here_panicked +=
            u64::from(catch_unwind(AssertUnwindSafe(move || drop(t))).is_err());
    }
    let futures_returned = rig.futures.stop().unwrap().len();
    let panicked_after_stop = rig.tasks.stats().panicked;
    let pending_after_stop = (rig.tasks.pending_timeouts(), rig.futures.pending_timeouts());
    drop(far);

    stage(6);
    let (scheduled, fired, cancelled, returned) = (
        b.scheduled.n(),
        b.fired.n(),
        b.cancelled.n(),
        b.returned.n(),
    );
    let growth = end - baseline;
    // The load's own share cancelled: without the set-up's timeouts (the high-water set, all
    // cancelled; the far ones; the marker).
    let load_cancelled = 100.0 * (cancelled - HIGH_WATER as u64) as f64
        / (scheduled - HIGH_WATER as u64 - FAR as u64 - 1) as f64;
    let mib = |bytes: isize| bytes as f64 / (1 << 20) as f64;
    println!(
        "soak summary: {:.0} s after a {:.0} s warm-up: scheduled {scheduled} = fired {fired} \
         + cancelled {cancelled} (the high-water set's {HIGH_WATER} among them; \
         {load_cancelled:.1} % of the load) + returned {returned}; periodic runs {}; futures: {} sleeps, \
         {} deadlines met, {} elapsed, {} resets, {} races, {} errors; delay queue: {} \
         inserted = {} expired + {} removed, {} resets; panics by design {} (run {}, drop \
         after run {}, on cancel {}, on stop {}); drops {} of {} tasks; early {}/{}/{}/{}; \
         heap {} B after warm-up, {} B at the end ({:+} B, bound {} B), peak {:.1} MiB under \
         load (warm-up {:.1}); peak pending {}; tasks' timer: {}",
        length.as_secs_f64(),
        warm_up.as_secs_f64(),
        get(&b.periodic_runs),
        get(&b.sleeps),
        get(&b.deadlines_met),
        get(&b.deadlines_elapsed),
        get(&b.resets),
        get(&b.races),
        get(&b.future_errors),
        get(&b.queue_inserted),
        get(&b.queue_expired),
        get(&b.queue_removed),
        get(&b.queue_resets),
        get(&b.by_design_panics),
        get(&b.run_panics),
        get(&b.drop_on_run),
        get(&b.drop_on_cancel),
        get(&b.drop_on_stop),
        b.guards_dropped.n(),
        b.guards_made.n(),
        get(&b.early_tasks),
        get(&b.early_periodic),
        get(&b.early_futures),
        get(&b.early_queue),
        baseline,
        end,
        growth,
        HEAP_TOLERANCE,
        mib(load.peak_live),
        mib(warm_load.peak_live),
        load.peak_pending.max(warm_load.peak_pending),
        describe(&tasks_stats),
    );

    // Every one-shot task ended exactly one way, and the same ones (see `Tally`).
    assert_eq!(strangers, 0, "stop() returned timeouts never scheduled");
    assert_eq!(returned_count, FAR, "stop() returns the far timeouts");
    assert_eq!(
        scheduled,
        fired + cancelled + returned,
        "scheduled = fired + cancelled + returned"
    );
    assert_eq!(
        b.scheduled.sum(),
        b.fired
            .sum()
            .wrapping_add(b.cancelled.sum())
            .wrapping_add(b.returned.sum()),
        "the counts balance but not the tasks: one ended twice, another never"
    );
    assert_eq!(get(&b.refused), 0, "no new_timeout was refused");
    // Every task dropped exactly once.
    assert_eq!(
        (b.guards_dropped.n(), b.guards_dropped.sum()),
        (b.guards_made.n(), b.guards_made.sum()),
        "every task is dropped exactly once"
    );
    // Every panic the test caused happened, once, and no other.
    assert_eq!(
        get(&b.by_design_panics),
        get(&b.run_panics) + get(&b.drop_panics_made),
        "the tasks' panics: each once"
    );
    // None early.
    assert_eq!(get(&b.early_tasks), 0, "a task ran before its deadline");
    assert_eq!(get(&b.early_periodic), 0, "a periodic run came early");
    assert_eq!(get(&b.early_futures), 0, "a future completed early");
    assert_eq!(get(&b.early_queue), 0, "the DelayQueue yielded early");
    assert_eq!(get(&b.periodic_miscounts), 0, "PeriodicTimeout::runs");
    assert_eq!(get(&b.future_errors), 0, "a future failed");
    assert_eq!(get(&b.queue_errors), 0, "the DelayQueue's items");
    assert_eq!(
        get(&b.queue_inserted),
        get(&b.queue_expired) + get(&b.queue_removed),
        "every DelayQueue item yielded or removed"
    );
    // The pending counts came back down.
    assert_eq!(pending_after_stop, (0, 0), "pending after stop()");
    assert_eq!(futures_returned, 0, "stop() returns no future's timeout");

    // The tasks' timer's counters against the books. Each periodic run is a timeout that
    // expired; a periodic task cancelled from outside may end one more (its pending run's
    // timeout, cancelled, or expired and then skipped), and a task that cancels itself none.
    let runs = get(&b.periodic_runs);
    let outside = get(&b.periodic_outside_cancels);
    let s = &tasks_stats;
    assert_eq!(s.refused, 0, "the tasks' timer refused nothing");
    assert!(
        s.expired >= fired + runs,
        "stats: expired {} < fired {fired} + periodic runs {runs}",
        s.expired
    );
    assert!(
        s.cancelled >= cancelled,
        "stats: cancelled {} < cancelled {cancelled}",
        s.cancelled
    );
    let ended = s.expired + s.cancelled;
    assert!(
        (fired + cancelled + runs..=fired + cancelled + runs + outside).contains(&ended),
        "stats: expired + cancelled = {ended}, the books {fired} fired + {cancelled} cancelled \
         + {runs} periodic runs (+ up to {outside} periodic tasks cancelled from outside)"
    );
    // Every panic of the test's tasks is the tasks' timer's to catch and count (when run, in
    // `Drop` after a run or when cancelled) but the far ones' that `stop()` returned: those are
    // the test's, dropped after it.
    let on_stop = get(&b.drop_on_stop);
    assert_eq!(
        dropped_here_panicked, on_stop,
        "the far tasks' drops that panic"
    );
    assert_eq!(
        (s.panicked, panicked_after_stop),
        (
            get(&b.by_design_panics) - on_stop,
            get(&b.by_design_panics) - on_stop
        ),
        "stats: panicked (before stop(), after it); the by-design panics, {on_stop} of them \
         in the drops of what stop() returned"
    );
    // What the futures saw, against their timer: each sleep, deadline, reset and race ended
    // with an expiry.
    assert!(
        futures_stats.expired >= seen,
        "the futures' timer: {}; the futures saw {seen} expiries",
        describe(&futures_stats)
    );
    assert_eq!(
        (futures_stats.refused, futures_stats.panicked),
        (0, 0),
        "the futures' timer: {}",
        describe(&futures_stats)
    );
    // The heap, flat: see `HEAP_TOLERANCE`. The load stays under the high-water mark set
    // before the baseline, or the comparison would count the worker's buffers' growth.
    let peak_pending = load.peak_pending.max(warm_load.peak_pending);
    assert!(
        peak_pending < HIGH_WATER / 2,
        "the load reached {peak_pending} pending timeouts: raise HIGH_WATER"
    );
    assert!(
        growth <= HEAP_TOLERANCE,
        "the live heap grew by {growth} bytes over the soak ({baseline} after the warm-up, \
         {end} at the end)"
    );
    drop(disarm);
}
