//! Memory: cancelled timeouts are freed within about a tick, so a long run of schedule + cancel
//! pairs (the request-timeout pattern) holds flat memory; and a stopped timer gives everything
//! back. Measured with a counting global allocator (this test binary only).

use hashed_timer_wheel::{HashedWheelTimer, Timeout};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Counts live heap bytes, and the allocations made by each thread.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    /// Allocations (and reallocations) made by this thread. Const-initialised, no destructor:
    /// usable from inside the allocator.
    static MINE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn count_mine() {
    // `try_with`: a thread being torn down has no slot any more; its allocations go uncounted.
    let _ = MINE.try_with(|n| n.set(n.get() + 1));
}

/// Allocations this thread has made so far.
fn mine() -> usize {
    MINE.with(std::cell::Cell::get)
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so `System`'s
// guarantees carry over; the counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        count_mine();
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        count_mine();
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_mine();
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The two tests share the counter: run them one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn wait_for_pending(timer: &HashedWheelTimer, target: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while timer.pending_timeouts() > target {
        assert!(
            Instant::now() < deadline,
            "cancellations were never processed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A started timer (1 ms tick, 512 buckets) whose worker has settled, and the bytes live then.
fn started_timer_and_baseline() -> (HashedWheelTimer, isize) {
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    timer.start().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let baseline = live();
    (timer, baseline)
}

/// Bytes held above `baseline` once they drop to `ceiling` or below, or after 5 s: what a timer
/// holds settles once its worker has moved everything into the wheel and, idle, given back the
/// queue buffers it kept. Polled rather than one fixed sleep.
fn held_once_settled(baseline: isize, ceiling: isize) -> isize {
    let started = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(10));
        let held = live() - baseline;
        if held <= ceiling || started.elapsed() > Duration::from_secs(5) {
            return held;
        }
    }
}

/// 10 million schedule + cancel pairs: memory held stays flat (bounded by about a tick's worth
/// of traffic), instead of growing with the number of pairs.
#[test]
fn ten_million_schedule_cancel_pairs_leave_memory_flat() {
    const PAIRS: usize = 10_000_000;
    const SAMPLE_EVERY: usize = 500_000;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    // Start the worker and let its allocations settle before the baseline.
    let keep = timer
        .new_timeout(|_: &Timeout| {}, Duration::from_secs(3600))
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let baseline = live();
    let mut peak_growth = 0isize;
    for i in 0..PAIRS {
        let t = timer
            .new_timeout(
                |_: &Timeout| {},
                Duration::from_millis(30_000 + (i & 1023) as u64),
            )
            .unwrap();
        assert!(t.cancel());
        if i % SAMPLE_EVERY == SAMPLE_EVERY - 1 {
            peak_growth = peak_growth.max(live() - baseline);
        }
    }
    wait_for_pending(&timer, 1);
    // Let the worker pass one more tick so that it frees what it dropped last.
    std::thread::sleep(Duration::from_millis(20));
    let end_growth = live() - baseline;
    // Were cancelled timeouts kept until their bucket came round (Netty #2541), 10 M pairs
    // would hold hundreds of megabytes. A tick's worth of queued pairs is well under this.
    assert!(
        peak_growth < 64 << 20,
        "memory grew by {peak_growth} bytes during the pairs"
    );
    assert!(
        end_growth < 1 << 20,
        "memory grew by {end_growth} bytes after the pairs were processed"
    );
    assert_eq!(timer.pending_timeouts(), 1);
    assert!(keep.cancel());
}

/// Pending timeouts cost a bounded number of bytes each, and stop() gives them all back.
#[test]
fn pending_timeouts_are_freed_by_stop() {
    const N: usize = 200_000;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (timer, baseline) = started_timer_and_baseline();
    for i in 0..N {
        timer
            .new_timeout(
                |_: &Timeout| {},
                Duration::from_millis(30_000 + (i & 1023) as u64),
            )
            .unwrap();
    }
    // Netty's cost for a no-op task (56 bytes), the floor this crate stays under. What a
    // pending timeout costs is tracked in benches/README.md (the `memory` row); this catches a
    // regression such as an allocation per timeout or a fatter node.
    const CEILING: f64 = 56.0;
    let held = held_once_settled(baseline, (CEILING * N as f64) as isize);
    let per_timeout = held as f64 / N as f64;
    assert!(
        per_timeout <= CEILING,
        "{per_timeout} bytes per pending timeout"
    );
    let returned = timer.stop().unwrap();
    assert_eq!(returned.len(), N);
    drop(returned);
    let left = live() - baseline;
    assert!(left < 64 << 10, "{left} bytes still held after stop");
}

/// Dropping the owner gives everything back, the timer's own bookkeeping included: the queue
/// shards keep the chunk their producers take states from, and a chunk holds a handle on its
/// timer, so a shard not cleared at stop would keep the timer (about 4.5 KiB with its worker's
/// wheel) alive for ever. Eight timers are built and dropped in turn: what the test harness's own
/// threads allocate meanwhile (a thread for the next test, about 1 KiB) stays below the bound,
/// while a timer kept alive per round would exceed it several times over.
#[test]
fn dropping_the_owner_frees_the_timer_itself() {
    const ROUNDS: usize = 8;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let round = || {
        let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
        for i in 0..1000u64 {
            let t = timer
                .new_timeout(|_: &Timeout| {}, Duration::from_millis(30_000 + i))
                .unwrap();
            if i % 2 == 0 {
                assert!(t.cancel());
            }
        }
        let handle = timer.handle();
        drop(timer);
        assert_eq!(
            handle
                .new_timeout(|_: &Timeout| {}, Duration::ZERO)
                .unwrap_err(),
            hashed_timer_wheel::TimerError::Stopped
        );
        drop(handle);
    };
    assert_rounds_hold_nothing(ROUNDS, round, "dropped timers");
}

/// A task dropped the owner, and a later task of the same tick cancels a timeout still in the
/// wheel: the cancel leaves nothing in a queue nobody drains any more (its state there would
/// hold the timer), so each such timer is freed.
#[test]
fn a_cancel_after_the_owner_was_dropped_in_a_task_leaves_the_timer_free() {
    const ROUNDS: usize = 8;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let round = || {
        let (timer, driver) = HashedWheelTimer::builder()
            .tick_duration(Duration::from_millis(1))
            .build_manual()
            .unwrap();
        let victim = timer
            .new_timeout(|_: &Timeout| {}, Duration::from_secs(10))
            .unwrap();
        let handle = timer.handle();
        let owner = Arc::new(Mutex::new(Some(timer)));
        let o = Arc::clone(&owner);
        let drop_owner = move |_: &Timeout| drop(o.lock().unwrap().take());
        handle
            .new_timeout(drop_owner, Duration::from_millis(5))
            .unwrap();
        let cancelled = Arc::new(AtomicBool::new(false));
        let c = Arc::clone(&cancelled);
        let cancel = move |_: &Timeout| c.store(victim.cancel(), Ordering::SeqCst);
        handle
            .new_timeout(cancel, Duration::from_millis(5))
            .unwrap();
        drop(handle);
        driver.advance(Duration::from_millis(10));
        assert!(owner.lock().unwrap().is_none());
        assert!(cancelled.load(Ordering::SeqCst), "cancelled in the wheel");
    };
    assert_rounds_hold_nothing(
        ROUNDS,
        round,
        "timers with a cancel after a shutdown in a task",
    );
}

/// Timers that made a `Deadline`, stopped and dropped: the process-wide table that finds a
/// deadline's timer lets go of each (a `Weak` there would keep its whole allocation, about
/// 0.8 KiB, until another timer took the slot).
#[test]
fn timers_that_made_a_deadline_are_freed_once_dropped() {
    const TIMERS: usize = 64;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let round = |n: usize| {
        let timers: Vec<_> = (0..n)
            .map(|_| HashedWheelTimer::new(Duration::from_millis(1), 64))
            .collect();
        for timer in &timers {
            let limited = timer.timeout(Duration::from_millis(10), async { 7 });
            assert_eq!(futures::executor::block_on(limited), Ok(7));
        }
        for timer in timers {
            drop(timer.stop());
        }
    };
    // Once first, for what the process sets up once (the clock, the table, the thread's slots).
    round(1);
    let baseline = live();
    round(TIMERS);
    // The table's own slots (16 bytes each) stay; the timers must not.
    let left = live() - baseline;
    assert!(
        left < 4096,
        "{left} bytes still held after {TIMERS} timers with a deadline were dropped"
    );
}

/// A slow producer's timeouts share a chunk of states across many ticks (one per tick here, so
/// each tick's queued batch refers to the same chunk again): once they have all expired, the
/// chunk is freed, not kept for each batch that referred to it.
#[test]
fn states_shared_across_ticks_are_freed_once_all_expired() {
    const TICKS: u64 = 3200; // a hundred chunks of states
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .ticks_per_wheel(64)
        .build_manual()
        .unwrap();
    let round = || {
        for _ in 0..TICKS {
            drop(
                timer
                    .new_timeout(|_: &Timeout| {}, Duration::from_millis(1))
                    .unwrap(),
            );
            driver.advance(Duration::from_millis(1));
        }
        driver.advance(Duration::from_millis(3));
        assert_eq!(timer.pending_timeouts(), 0);
    };
    assert_rounds_hold_nothing(1, round, "timeouts expired");
}

/// Runs `round` once, which sets up what stays (the worker's buffers), then `rounds` times
/// more, which must leave nothing more held. (What the test harness's own threads allocate
/// meanwhile, up to 1 KiB measured under load, is below the bound; a chunk of 32 states kept
/// per batch would hold over 15 KiB, a timer about 5 KiB.)
fn assert_rounds_hold_nothing(rounds: usize, round: impl Fn(), what: &str) {
    round();
    let baseline = live();
    for _ in 0..rounds {
        round();
    }
    let left = live() - baseline;
    assert!(
        left < 4096,
        "{left} bytes still held after {rounds} rounds of {what}"
    );
}

/// Detached timeouts (no handle): their chunks are let go of, or reused, once all their
/// timeouts ran, so rounds of them hold nothing more.
#[test]
fn detached_timeouts_leave_nothing_behind_once_run() {
    const TIMEOUTS: u64 = 3200; // a hundred chunks of states
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .ticks_per_wheel(64)
        .build_manual()
        .unwrap();
    let round = || {
        for i in 0..TIMEOUTS {
            timer
                .new_timeout_detached(|_: &Timeout| {}, Duration::from_millis(1 + i % 40))
                .unwrap();
            if i % 100 == 99 {
                driver.advance(Duration::from_millis(1));
            }
        }
        driver.advance(Duration::from_millis(50));
        assert_eq!(timer.pending_timeouts(), 0);
    };
    assert_rounds_hold_nothing(1, round, "detached timeouts");
}

/// A timer with a few timeouts pending holds a few hundred bytes for them, not a burst's worth:
/// the wheel's slab starts small (its first page grows as needed) and the worker gives its
/// queue buffers back once idle. Many services keep one timer per connection pool or client.
#[test]
fn a_few_pending_timeouts_hold_little_memory() {
    const CEILING: isize = 2048;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (timer, baseline) = started_timer_and_baseline();
    let pending: Vec<Timeout> = (0..3)
        .map(|i| {
            timer
                .new_timeout(|_: &Timeout| {}, Duration::from_secs(3600 + i))
                .unwrap()
        })
        .collect();
    let held = held_once_settled(baseline, CEILING);
    assert!(held <= CEILING, "{held} bytes held for 3 pending timeouts");
    assert_eq!(timer.stop().unwrap().len(), pending.len());
}

/// Under the request-timeout pattern (schedule, then cancel) the timer allocates next to
/// nothing once warm: the queue's segments go round between the producers and the worker, and
/// so do the blocks of timeout states (the worker hands those of settled timeouts back as
/// spares). A block a producer is still filling when its last timeout ends is freed instead (a
/// few a round, one per shard at most). On a manual timer everything runs on this thread, so its
/// own count is exact.
#[test]
fn schedule_cancel_pairs_allocate_next_to_nothing_once_warm() {
    const PAIRS: usize = 20_000; // a round: 625 chunks of states
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tick = Duration::from_millis(1);
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(tick)
        .build_manual()
        .unwrap();
    let round = || {
        for i in 0..PAIRS {
            let delay = Duration::from_millis(30_000 + (i & 1023) as u64);
            assert!(timer.new_timeout(|_: &Timeout| {}, delay).unwrap().cancel());
        }
        driver.advance(tick);
    };
    for _ in 0..3 {
        round(); // buffers and spares grow to a round's size
    }
    let before = mine();
    for _ in 0..20 {
        round();
    }
    let allocations = mine() - before;
    assert!(
        allocations * 1000 < 20 * PAIRS,
        "{allocations} allocations over 20 rounds of {PAIRS} pairs"
    );
    assert_eq!(timer.pending_timeouts(), 0);
}

/// A typed timer stores its tasks in place: scheduling and running tasks that carry data
/// allocates next to nothing once warm; on the default timer, a closure that captures data is
/// boxed, one allocation each at most.
#[test]
fn data_carrying_tasks_are_scheduled_and_run_without_allocating() {
    use hashed_timer_wheel::TypedTask;
    struct Carry {
        id: u64,
        sum: &'static std::sync::atomic::AtomicU64,
    }
    impl TypedTask for Carry {
        fn run(self, _: &Timeout<Self>) {
            self.sum.fetch_add(self.id, Ordering::Relaxed);
        }
    }
    static SUM: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    const TASKS: u64 = 20_000;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tick = Duration::from_millis(1);
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(tick)
        .build_manual_typed::<Carry>()
        .unwrap();
    let round = || {
        for id in 0..TASKS {
            let delay = Duration::from_millis(1 + (id & 7));
            timer.new_timeout(Carry { id, sum: &SUM }, delay).unwrap();
        }
        driver.advance(tick * 10); // all of them run
    };
    for _ in 0..3 {
        round();
    }
    let before = (mine(), SUM.load(Ordering::Relaxed));
    for _ in 0..20 {
        round();
    }
    assert_eq!(timer.pending_timeouts(), 0);
    let ran = SUM.load(Ordering::Relaxed) - before.1;
    assert_eq!(
        ran,
        20 * TASKS * (TASKS - 1) / 2,
        "every task ran once, with its data"
    );
    // What is left is the wheel's pages of 1 024 nodes, let go of as they empty.
    let typed = mine() - before.0;
    assert!(
        typed as u64 * 100 < 20 * TASKS,
        "{typed} allocations for {} tasks",
        20 * TASKS
    );

    // The same data in closures on the default timer: a closure that captures data is boxed,
    // one allocation each at most (its box is reused for the next closure of its type when one
    // is spare), never more.
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(tick)
        .build_manual()
        .unwrap();
    let round = || {
        for id in 0..TASKS {
            let delay = Duration::from_millis(1 + (id & 7));
            let sum = &SUM;
            timer
                .new_timeout(
                    move |_: &Timeout| {
                        sum.fetch_add(id, Ordering::Relaxed);
                    },
                    delay,
                )
                .unwrap();
        }
        driver.advance(tick * 10);
    };
    for _ in 0..3 {
        round();
    }
    let before = mine();
    for _ in 0..20 {
        round();
    }
    let boxed = mine() - before;
    assert!(
        boxed as u64 <= 20 * TASKS * 101 / 100,
        "{boxed} allocations for {} closures of 16 bytes",
        20 * TASKS
    );
}

/// Two threads schedule closures of two types on one timer, their timeouts sharing buckets:
/// once warm, each reuses the boxes of its own closures (the worker hands an ended task's box
/// back to the shard of the thread that made it), allocating next to nothing. A box handed to
/// the other thread would be of the wrong type there: freed, and a new one allocated.
#[test]
fn two_threads_with_closures_of_two_types_each_reuse_their_own_boxes() {
    use std::sync::atomic::AtomicU64;
    use std::sync::Barrier;
    const TASKS: u64 = 5_000;
    const ROUNDS: u64 = 12;
    static SUM: AtomicU64 = AtomicU64::new(0);
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tick = Duration::from_millis(1);
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(tick)
        .build_manual()
        .unwrap();
    let (scheduled, advanced) = (Barrier::new(3), Barrier::new(3));
    let counted = std::thread::scope(|scope| {
        let producer = |second: bool| {
            let (timer, scheduled, advanced) = (&timer, &scheduled, &advanced);
            scope.spawn(move || {
                let mut counted = 0;
                for round in 0..ROUNDS {
                    let before = mine();
                    for id in 0..TASKS {
                        let delay = Duration::from_millis(1 + (id & 7));
                        if second {
                            let pair = (id, round);
                            let task = move |_: &Timeout| {
                                SUM.fetch_add(pair.0 + pair.1, Ordering::Relaxed);
                            };
                            timer.new_timeout(task, delay).unwrap();
                        } else {
                            let task = move |_: &Timeout| {
                                SUM.fetch_add(id, Ordering::Relaxed);
                            };
                            timer.new_timeout(task, delay).unwrap();
                        }
                    }
                    if round >= 4 {
                        counted += mine() - before;
                    }
                    scheduled.wait();
                    advanced.wait();
                }
                counted
            })
        };
        let threads = [producer(false), producer(true)];
        for _ in 0..ROUNDS {
            scheduled.wait();
            driver.advance(tick * 10); // every timeout of the round runs
            advanced.wait();
        }
        threads.map(|t| t.join().unwrap())
    });
    assert_eq!(timer.pending_timeouts(), 0);
    for (thread, allocations) in counted.into_iter().enumerate() {
        assert!(
            (allocations as u64) * 100 < (ROUNDS - 4) * TASKS,
            "thread {thread}: {allocations} allocations for {} closures once warm",
            (ROUNDS - 4) * TASKS
        );
    }
}

/// A burst of 300 000 timeouts due in 1.6-3 s, all but the first and last 3 000 cancelled: more
/// than half of the burst's live heap comes back within two seconds of the cancels, while those
/// few still wait.
#[test]
fn a_burst_s_memory_comes_back_while_a_few_of_its_timeouts_wait() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (timer, baseline) = started_timer_and_baseline();
    let n = 300_000u64;
    let mut handles: Vec<Timeout> = (0..n)
        .map(|i| {
            let delay = Duration::from_millis(1_600 + i * 1_400 / n);
            timer.new_timeout(|_: &Timeout| {}, delay).unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50)); // into the wheel
    let mut kept = handles.split_off(handles.len() - 3_000);
    kept.extend(handles.drain(..3_000));
    for handle in handles.drain(..) {
        assert!(handle.cancel());
    }
    drop(handles);
    let burst = live() - baseline;
    let cancelled = Instant::now();
    let mut held = burst;
    while cancelled.elapsed() < Duration::from_secs(2) && held * 2 > burst {
        std::thread::sleep(Duration::from_millis(10));
        held = live() - baseline;
    }
    assert!(
        held * 2 <= burst,
        "{held} of the burst's {burst} bytes still held after 2 s"
    );
    drop(kept);
}

/// A drain that expires one timeout a tick while nobody schedules: each tick's spare box comes
/// back in a chunk of its own, and an idle timer gives the spares back by the box, a slice a
/// tick, not four chunks a tick whatever they hold.
#[test]
fn a_slow_drain_s_spare_boxes_come_back_once_idle() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .build_manual()
        .unwrap();
    let baseline = live();
    let n = 20_000u64;
    for i in 0..n {
        let payload = [i; 8]; // 64 bytes captured: a box each
        let task = move |_: &Timeout| {
            std::hint::black_box(payload);
        };
        timer
            .new_timeout(task, Duration::from_millis(1 + i))
            .unwrap();
    }
    driver.advance(Duration::from_millis(n + 1));
    assert_eq!(timer.pending_timeouts(), 0);
    let drained = live() - baseline;
    for _ in 0..40 {
        driver.advance(Duration::from_millis(1));
    }
    let held = live() - baseline;
    assert!(
        held * 10 < drained,
        "{held} of the drain's {drained} bytes still held after 40 idle ticks"
    );
}
