//! Criterion benches of the hot paths: `new_timeout`, `new_timeout` + `cancel`, the worker's
//! tick expiring timeouts (manual clock), and two producer threads. See `benches/README.md`.
//!
//! ```text
//! cargo bench --bench hot_paths
//! cargo bench --bench hot_paths -- expire     # a filter, as usual with criterion
//! ```

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use hashed_timer_wheel::{HashedWheelTimer, ManualDriver, Timeout};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

fn noop(_: &Timeout) {}

/// The `netty_workloads` configuration: 1 ms tick, 512 slots, started by a timeout an hour away.
fn started_timer() -> HashedWheelTimer {
    let timer = HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .ticks_per_wheel(512)
        .build()
        .expect("valid configuration");
    timer
        .new_timeout(noop, Duration::from_secs(3600))
        .expect("accepted");
    timer
}

/// 30 s + (i & 1023) ms: never fires during a bench.
#[inline]
fn far_delay(i: u64) -> Duration {
    Duration::from_millis(30_000 + (i & 1023))
}

/// `new_timeout` alone. Timeouts pile up (nothing fires), so each sample gets a fresh timer,
/// stopped outside the measurement: memory stays bounded by one sample's count.
fn new_timeout(c: &mut Criterion) {
    let mut g = c.benchmark_group("new_timeout");
    g.throughput(Throughput::Elements(1));
    g.bench_function("1_thread", |b| {
        b.iter_custom(|iters| {
            let timer = started_timer();
            let t0 = Instant::now();
            for i in 0..iters {
                black_box(timer.new_timeout(noop, far_delay(i)).expect("accepted"));
            }
            let elapsed = t0.elapsed();
            drop(timer.stop());
            elapsed
        })
    });
    g.finish();
}

/// `new_timeout` then `cancel`: the request-timeout pattern. Cancelled timeouts are freed by the
/// worker within a tick, so one long-lived timer serves every sample.
fn new_timeout_cancel(c: &mut Criterion) {
    let mut g = c.benchmark_group("new_timeout_cancel");
    g.throughput(Throughput::Elements(1));
    let timer = started_timer();
    let mut i = 0u64;
    g.bench_function("1_thread", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            let t = timer.new_timeout(noop, far_delay(i)).expect("accepted");
            black_box(t.cancel())
        })
    });
    g.finish();
    drop(timer.stop());
}

/// The tick timeout `i` of `k` is due on, spread evenly over `span_ticks` ticks from tick 1.
fn spread(k: u64, span_ticks: u64) -> impl Fn(u64) -> u64 {
    move |i| 1 + i * span_ticks / k
}

/// Timeouts dealt to `ticks` ticks in turn, as a service's of several delays are: timeout `i`
/// on tick `1 + i % ticks`.
fn dealt_to(ticks: u64) -> impl Fn(u64) -> u64 + Copy {
    move |i| 1 + i % ticks
}

/// Where the capturing tasks of `expire_capture` add their data.
static SINK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The capturing task of `expire_capture`: 24 bytes, as the `expire` workload's (an index, a
/// deadline and a reference), stored in place.
fn capture(i: u64) -> impl FnOnce(&Timeout) + Send + 'static {
    let sink = &SINK;
    let due = i.wrapping_mul(31);
    move |_: &Timeout| {
        // Relaxed: nothing reads it; the add gives the captured data a use.
        sink.fetch_add(i ^ due, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A task of 24 bytes that lends its captured words to code the compiler cannot see into, as
/// a task that calls a function on its captured state does (`capture` only loads them).
fn lend(i: u64) -> impl FnOnce(&Timeout) + Send + 'static {
    let words = [i, i.wrapping_mul(31), 7];
    move |_: &Timeout| {
        std::hint::black_box(&words);
    }
}

/// A manual timer in the `netty_workloads` configuration: 1 ms tick, 512 buckets.
fn manual_timer() -> (HashedWheelTimer, ManualDriver) {
    HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .ticks_per_wheel(512)
        .build_manual()
        .expect("valid configuration")
}

/// A manual timer holding `k` timeouts of `task(i)`, timeout `i` due on tick `tick_of(i)` (1 or
/// later), every one already moved into its bucket.
fn loaded_manual_timer<T: hashed_timer_wheel::TimerTask>(
    k: u64,
    tick_of: impl Fn(u64) -> u64,
    task: impl Fn(u64) -> T,
) -> (HashedWheelTimer, ManualDriver) {
    let (timer, driver) = manual_timer();
    for i in 0..k {
        let at = Duration::from_millis(tick_of(i));
        timer.new_timeout(task(i), at).expect("accepted");
    }
    // End of tick 0: transfers everything into buckets (the cap is 100 000 per tick, more for
    // the ticks covered), expires nothing.
    driver.advance(Duration::from_millis(1));
    debug_assert_eq!(timer.pending_timeouts() as u64, k);
    (timer, driver)
}

/// Benches `name`: the ticks up to `span_ticks` that expire every timeout of the timer `setup`
/// makes, `k` of them (made and dropped outside the measurement).
fn bench_expiry(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: String,
    (k, span_ticks): (u64, u64),
    setup: impl Fn() -> (HashedWheelTimer, ManualDriver),
) {
    g.throughput(Throughput::Elements(k));
    g.bench_function(name, |b| {
        b.iter_batched(
            &setup,
            |(timer, driver)| {
                driver.advance(Duration::from_millis(span_ticks + 1));
                debug_assert_eq!(timer.pending_timeouts(), 0);
                (timer, driver) // dropped outside the measurement
            },
            BatchSize::PerIteration,
        )
    });
}

/// The worker's tick on a manual clock: timeouts expired per second. Setup (scheduling, the
/// transfer into buckets) is outside the measurement; the measured `advance` runs the ticks
/// that expire every timeout and their (no-op) tasks.
fn expire(c: &mut Criterion) {
    let mut g = c.benchmark_group("expire");
    g.sample_size(20);
    // (timeouts, ticks they are spread over): one bucket; one wheel turn; four turns (so
    // three quarters of the visits find entries rounds away).
    for (k, span) in [(10_000u64, 1u64), (100_000, 512), (100_000, 2048)] {
        let setup = || loaded_manual_timer(k, spread(k, span), |_| noop);
        bench_expiry(&mut g, format!("{k}_over_{span}_ticks"), (k, span), setup);
    }
    // Timeouts as a service makes them: each due on another tick than the one made before it
    // (timeout i on tick 1 + i mod 500), so that the timeouts of one bucket sit in many blocks.
    // 500, not 512: a bucket's slots a power of two apart would put every node of a walk at
    // one offset of its page, which no service's schedule does.
    let (k, span, dealt) = (100_000u64, 512u64, 500u64);
    let setup = || loaded_manual_timer(k, dealt_to(dealt), |_| noop);
    bench_expiry(
        &mut g,
        format!("interleaved_{k}_over_{dealt}_ticks"),
        (k, span),
        setup,
    );
    // The same as in order with a task that captures 24 bytes (boxed), over one wheel turn; and
    // interleaved.
    let setup = || loaded_manual_timer(k, spread(k, span), capture);
    bench_expiry(
        &mut g,
        format!("capture_{k}_over_{span}_ticks"),
        (k, span),
        setup,
    );
    // Interleaved over 10 ticks too: a bucket's nodes 10 keys apart, within the TLB's reach
    // (over 500, each node of a walk is on a page of its own, whatever the layout).
    for (dealt, span) in [(10u64, 10u64), (dealt, span)] {
        let setup = move || loaded_manual_timer(k, dealt_to(dealt), capture);
        bench_expiry(
            &mut g,
            format!("interleaved_capture_{k}_over_{dealt}_ticks"),
            (k, span),
            setup,
        );
    }
    // Over 10 ticks with a task that lends its words (`lend`).
    let setup = move || loaded_manual_timer(k, dealt_to(10), lend);
    bench_expiry(
        &mut g,
        format!("interleaved_lend_{k}_over_10_ticks"),
        (k, 10),
        setup,
    );
    // The live window of `expire_rate` at 20 M/s: 2 * 10^6 timeouts due over 100 ticks, each
    // task capturing 24 bytes and doing nothing with them, run tick by tick: the worker's own
    // cost per expired timeout at a size no cache holds (the timeouts' memory, written at the
    // transfer, is read again at the expiry).
    let (k, span) = (2_000_000u64, 100u64);
    g.sample_size(10);
    g.throughput(Throughput::Elements(k));
    g.bench_function(format!("window_{k}_over_{span}_ticks_noop_24_bytes"), |b| {
        b.iter_batched(
            || window_timer(k, span),
            |(timer, driver)| {
                for _ in 0..=span {
                    driver.advance(Duration::from_millis(1));
                }
                debug_assert_eq!(timer.pending_timeouts(), 1);
                (timer, driver)
            },
            BatchSize::PerIteration,
        )
    });
    // Its floor: the same expiries as a bare walk over records that each hold what the worker
    // reads of a due timeout (links, deadline, state, the task's 24 bytes), side by side as
    // Netty's timeout and its lambda lie. `window` over `floor`, both from one sitting, is the
    // worker's own cost in a unit the host's speed cancels out of.
    g.bench_function(format!("floor_{k}_records_in_order"), |b| {
        b.iter_batched(
            || floor_records(k),
            |records| {
                walk_floor(&records);
                debug_assert!(records.iter().all(|r| r.state.load(Ordering::Relaxed) == 2));
                records // dropped outside the measurement
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

/// One due timeout as the floor's walk sees it: 64 bytes, the size of Netty's timeout beside
/// its 24-byte lambda.
#[repr(C, align(64))]
struct FloorRecord {
    state: AtomicU32,
    next: u32,
    deadline: u64,
    task: fn(&[u64; 3]),
    words: [u64; 3],
}

/// The task of the floor's records: reads its words and does nothing with them, as
/// [`idle_capture`]'s.
fn floor_task(words: &[u64; 3]) {
    black_box(words);
}

/// `k` records, each linked to the next, all due.
fn floor_records(k: u64) -> Vec<FloorRecord> {
    (0..k)
        .map(|i| FloorRecord {
            state: AtomicU32::new(1),
            next: u32::try_from(i + 1).expect("fewer than 2^32 records"),
            deadline: i,
            task: black_box(floor_task),
            words: [i, i.wrapping_mul(31), 7],
        })
        .collect()
}

/// Walks the records by their links: each due one's state is moved from waiting (1) to expired
/// (2) by a compare-and-swap, as a timeout that a handle may cancel must be, and its task runs
/// through its function pointer.
#[inline(never)]
fn walk_floor(records: &[FloorRecord]) {
    // Opaque to the compiler, as the walk's bound is: the comparison stays in the loop.
    let last_due = black_box(u64::MAX - 1);
    let mut cursor = 0;
    while let Some(record) = records.get(cursor) {
        if record.deadline <= last_due
            && record
                .state
                .compare_exchange(1, 2, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            (record.task)(&record.words);
        }
        cursor = record.next as usize;
    }
}

/// A manual timer holding `k` timeouts of [`idle_capture`] due evenly over `span_ticks` ticks
/// from `WINDOW_START` on, every one of them already moved into its bucket (the transfer takes
/// at most 100 000 a tick: `WINDOW_START` leaves room for 5 * 10^6), the clock just before the
/// first deadline; and one more an hour away, as `expire_rate`'s timers hold, so that the
/// wheel does not empty, and give its pages back, within the window.
fn window_timer(k: u64, span_ticks: u64) -> (HashedWheelTimer, ManualDriver) {
    const WINDOW_START: Duration = Duration::from_millis(1_000);
    let (timer, driver) = manual_timer();
    timer
        .new_timeout(idle_capture(k), Duration::from_secs(3600))
        .expect("accepted");
    for i in 0..k {
        let at = WINDOW_START + Duration::from_micros(i * span_ticks * 1_000 / k);
        timer.new_timeout(idle_capture(i), at).expect("accepted");
    }
    for _ in 0..WINDOW_START.as_millis() - 1 {
        driver.advance(Duration::from_millis(1));
    }
    debug_assert_eq!(timer.pending_timeouts() as u64, k + 1);
    (timer, driver)
}

/// A task of 24 bytes, as `expire_rate`'s, that does nothing with them: what expiring it costs
/// is the worker's alone.
fn idle_capture(i: u64) -> impl FnOnce(&Timeout) + Send + 'static {
    let sink = &SINK;
    let due = i.wrapping_mul(31);
    move |_: &Timeout| {
        black_box((i, due, sink));
    }
}

/// Runs `per_thread` operations on each of `threads` threads, all released at once; returns the
/// wall time from release to the last one finishing.
fn on_threads(threads: usize, per_thread: u64, op: impl Fn(u64) + Sync) -> Duration {
    let ready = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                ready.fetch_add(1, Ordering::SeqCst);
                while !go.load(Ordering::Acquire) {
                    thread::yield_now();
                }
                for i in 0..per_thread {
                    op(i);
                }
            });
        }
        while ready.load(Ordering::SeqCst) < threads {
            thread::yield_now();
        }
        let t0 = Instant::now();
        go.store(true, Ordering::Release);
        t0 // the scope joins the threads before returning
    })
    .elapsed()
}

/// Two producer threads at once; time per operation, all threads together (as Netty's
/// `multi_producer`): wall time / operations.
fn multi_producer(c: &mut Criterion) {
    const THREADS: usize = 2;
    let mut g = c.benchmark_group("multi_producer");
    g.throughput(Throughput::Elements(1));
    // A timer per sample: three threads share two cores here, and a worker that falls behind
    // would otherwise carry its backlog from sample to sample, up to the wheel's key bound.
    g.bench_function("2_threads_new_timeout_cancel", |b| {
        b.iter_custom(|iters| {
            let timer = started_timer();
            let per = iters.div_ceil(THREADS as u64);
            let elapsed = on_threads(THREADS, per, |i| {
                let t = timer.new_timeout(noop, far_delay(i)).expect("accepted");
                black_box(t.cancel());
            });
            drop(timer.stop());
            // Scale to `iters` operations (rounding up may have run a few more).
            elapsed.mul_f64(iters as f64 / (per * THREADS as u64) as f64)
        })
    });
    g.bench_function("2_threads_new_timeout", |b| {
        b.iter_custom(|iters| {
            let timer = started_timer();
            let per = iters.div_ceil(THREADS as u64);
            let elapsed = on_threads(THREADS, per, |i| {
                black_box(timer.new_timeout(noop, far_delay(i)).expect("accepted"));
            });
            drop(timer.stop());
            elapsed.mul_f64(iters as f64 / (per * THREADS as u64) as f64)
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    new_timeout,
    new_timeout_cancel,
    expire,
    multi_producer
);
criterion_main!(benches);
