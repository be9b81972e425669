//! tokio's paused-clock tests, re-derived on the wheel: `sleep`, `timeout`, `Interval` with each
//! missed-tick behaviour, resets, and tokio-util's `DelayQueue`, under `start_paused`. Each body
//! is generic over a `Stack` and runs twice: on a timer built by `Builder::build_on_tokio`, and
//! on tokio's own timers (tokio-util's `DelayQueue`), so that what the wheel does under
//! `tokio::time::advance` and the paused runtime's auto-advance is checked against what tokio
//! does. Times are read from `tokio::time::Instant` and compared as offsets from a start.
//!
//! Also: a timer on tokio's clock starts no thread, is an error outside a runtime, and a `Drive`
//! of a timer on the system's clock does not spin under a paused runtime.
#![cfg(feature = "test-util")]

use hashed_timer_wheel::{BuildError, HashedWheelTimer, MissedRuns, Timeout, TimerHandle};
use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::time::{advance, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

thread_local! {
    /// The one timer of a wheel test: on the test's runtime, made by `Stack::setup`.
    static TIMER: RefCell<Option<HashedWheelTimer>> = const { RefCell::new(None) };
}

fn timer() -> TimerHandle {
    TIMER.with(|t| t.borrow().as_ref().expect("Stack::setup").handle())
}

/// Polls `f` once, from the calling task.
async fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    poll_fn(|cx| Poll::Ready(Pin::new(&mut *f).poll(cx))).await
}

/// Asserts that `elapsed` is `expected`, or at most a millisecond more (tokio rounds a sleep's
/// deadline up to its millisecond; the wheel fires at the runtime's first wake past it).
#[track_caller]
fn assert_elapsed(elapsed: Duration, expected: Duration) {
    assert!(
        elapsed >= expected && elapsed <= expected + ms(1),
        "elapsed {elapsed:?}, expected {expected:?}"
    );
}

/// What the bodies need of a timer stack.
trait Stack {
    type Sleep: Future<Output = ()> + Unpin + Send + 'static;
    type Interval;
    type Queue: Unpin;

    /// Called first, on the test's runtime.
    fn setup() {}
    fn sleep_until(at: Instant) -> Self::Sleep;
    fn reset(sleep: &mut Self::Sleep, at: Instant);
    fn timeout<F: Future + Send + 'static>(
        limit: Duration,
        future: F,
    ) -> Pin<Box<dyn Future<Output = Result<F::Output, ()>>>>;
    fn interval_at(start: Instant, period: Duration, missed: MissedRuns) -> Self::Interval;
    fn tick(interval: &mut Self::Interval) -> impl Future<Output = Instant> + '_;
    fn queue() -> Self::Queue;
    /// Inserts item `value` due at `at`; its key's index.
    fn insert_at(queue: &mut Self::Queue, value: u32, at: Instant) -> usize;
    fn remove(queue: &mut Self::Queue, key: usize) -> u32;
    fn reset_at(queue: &mut Self::Queue, key: usize, at: Instant);
    /// The next expired item, or `None` once the queue is empty.
    fn next(queue: &mut Self::Queue) -> impl Future<Output = Option<u32>> + '_;
}

struct Wheel;

/// A `DelayQueue` and the keys of its items, by index.
struct WheelQueue(
    hashed_timer_wheel::DelayQueue<u32>,
    Vec<hashed_timer_wheel::delay_queue::Key>,
);

impl Stack for Wheel {
    type Sleep = SleepOnWheel;
    type Interval = hashed_timer_wheel::Interval;
    type Queue = WheelQueue;

    fn setup() {
        let timer = HashedWheelTimer::builder()
            .tick_duration(ms(1))
            .build_on_tokio()
            .expect("inside the test's runtime");
        TIMER.with(|t| *t.borrow_mut() = Some(timer));
    }

    fn sleep_until(at: Instant) -> Self::Sleep {
        SleepOnWheel(timer().sleep_until(at.into_std()))
    }

    fn reset(sleep: &mut Self::Sleep, at: Instant) {
        sleep.0.reset(at.into_std());
    }

    fn timeout<F: Future + Send + 'static>(
        limit: Duration,
        future: F,
    ) -> Pin<Box<dyn Future<Output = Result<F::Output, ()>>>> {
        let deadline = timer().timeout(limit, future);
        Box::pin(async move { deadline.await.map_err(|_| ()) })
    }

    fn interval_at(start: Instant, period: Duration, missed: MissedRuns) -> Self::Interval {
        let mut interval = timer().interval_at(start.into_std(), period);
        interval.set_missed_runs(missed);
        interval
    }

    async fn tick(interval: &mut Self::Interval) -> Instant {
        Instant::from_std(interval.tick().await.expect("the timer runs"))
    }

    fn queue() -> Self::Queue {
        WheelQueue(hashed_timer_wheel::DelayQueue::new(timer()), Vec::new())
    }

    fn insert_at(queue: &mut Self::Queue, value: u32, at: Instant) -> usize {
        queue.1.push(queue.0.insert_at(value, at.into_std()));
        queue.1.len() - 1
    }

    fn remove(queue: &mut Self::Queue, key: usize) -> u32 {
        queue.0.remove(&queue.1[key]).into_inner()
    }

    fn reset_at(queue: &mut Self::Queue, key: usize, at: Instant) {
        queue.0.reset_at(&queue.1[key], at.into_std());
    }

    fn next(queue: &mut Self::Queue) -> impl Future<Output = Option<u32>> + '_ {
        poll_fn(|cx| queue.0.poll_expired(cx).map(|e| e.map(|e| e.into_inner())))
    }
}

/// A wheel `Sleep` whose output is `()`, as tokio's.
struct SleepOnWheel(hashed_timer_wheel::Sleep);

impl Future for SleepOnWheel {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.expect("the timer runs"))
    }
}

struct Tokio;

struct TokioQueue(
    tokio_util::time::DelayQueue<u32>,
    Vec<tokio_util::time::delay_queue::Key>,
);

impl Stack for Tokio {
    type Sleep = Pin<Box<tokio::time::Sleep>>;
    type Interval = tokio::time::Interval;
    type Queue = TokioQueue;

    fn sleep_until(at: Instant) -> Self::Sleep {
        Box::pin(tokio::time::sleep_until(at))
    }

    fn reset(sleep: &mut Self::Sleep, at: Instant) {
        sleep.as_mut().reset(at);
    }

    fn timeout<F: Future + Send + 'static>(
        limit: Duration,
        future: F,
    ) -> Pin<Box<dyn Future<Output = Result<F::Output, ()>>>> {
        let timeout = tokio::time::timeout(limit, future);
        Box::pin(async move { timeout.await.map_err(|_| ()) })
    }

    fn interval_at(start: Instant, period: Duration, missed: MissedRuns) -> Self::Interval {
        let mut interval = tokio::time::interval_at(start, period);
        interval.set_missed_tick_behavior(match missed {
            MissedRuns::Burst => tokio::time::MissedTickBehavior::Burst,
            MissedRuns::Delay => tokio::time::MissedTickBehavior::Delay,
            _ => tokio::time::MissedTickBehavior::Skip,
        });
        interval
    }

    fn tick(interval: &mut Self::Interval) -> impl Future<Output = Instant> + '_ {
        interval.tick()
    }

    fn queue() -> Self::Queue {
        TokioQueue(tokio_util::time::DelayQueue::new(), Vec::new())
    }

    fn insert_at(queue: &mut Self::Queue, value: u32, at: Instant) -> usize {
        queue.1.push(queue.0.insert_at(value, at));
        queue.1.len() - 1
    }

    fn remove(queue: &mut Self::Queue, key: usize) -> u32 {
        queue.0.remove(&queue.1[key]).into_inner()
    }

    fn reset_at(queue: &mut Self::Queue, key: usize, at: Instant) {
        queue.0.reset_at(&queue.1[key], at);
    }

    fn next(queue: &mut Self::Queue) -> impl Future<Output = Option<u32>> + '_ {
        poll_fn(|cx| queue.0.poll_expired(cx).map(|e| e.map(|e| e.into_inner())))
    }
}

/// A paused test of `body` on each stack: `body_on_wheel` and `body_on_tokio`.
macro_rules! on_both {
    ($($body:ident),* $(,)?) => {
        mod on_wheel {
            $(
                #[tokio::test(start_paused = true)]
                async fn $body() {
                    <super::Wheel as super::Stack>::setup();
                    super::$body::<super::Wheel>().await;
                }
            )*
        }
        mod on_tokio {
            $(
                #[tokio::test(start_paused = true)]
                async fn $body() {
                    super::$body::<super::Tokio>().await;
                }
            )*
        }
    };
}

on_both!(
    sleep_for_each_delay,
    sleep_until_a_past_instant_is_due_at_once,
    a_long_sleep_is_auto_advanced_to,
    short_sleeps_back_to_back,
    advance_fires_what_is_due_before_the_next_poll,
    advance_short_of_the_deadline_fires_nothing,
    reset_before_it_fires_moves_the_deadline,
    reset_to_the_past_completes_at_the_next_poll,
    timeout_returns_the_output_of_a_future_in_time,
    timeout_elapses_at_its_deadline,
    interval_burst_catches_up_without_moving_the_schedule,
    interval_delay_shifts_the_schedule,
    interval_skip_drops_the_missed_ticks,
    delay_queue_yields_each_item_at_its_deadline,
    delay_queue_reset_and_remove,
);

async fn sleep_for_each_delay<S: Stack>() {
    for delay in [1, 10, 60, 1000] {
        let start = Instant::now();
        S::sleep_until(start + ms(delay)).await;
        assert_elapsed(start.elapsed(), ms(delay));
    }
}

async fn sleep_until_a_past_instant_is_due_at_once<S: Stack>() {
    advance(ms(5)).await;
    let start = Instant::now();
    S::sleep_until(start - ms(2)).await;
    assert_elapsed(start.elapsed(), ms(0));
}

async fn a_long_sleep_is_auto_advanced_to<S: Stack>() {
    let real = std::time::Instant::now();
    let start = Instant::now();
    S::sleep_until(start + Duration::from_secs(3600)).await;
    assert_elapsed(start.elapsed(), Duration::from_secs(3600));
    assert!(
        real.elapsed() < Duration::from_secs(5),
        "{:?}",
        real.elapsed()
    );
}

async fn short_sleeps_back_to_back<S: Stack>() {
    let start = Instant::now();
    for _ in 0..100 {
        S::sleep_until(Instant::now() + ms(1)).await;
    }
    let elapsed = start.elapsed();
    assert!(elapsed >= ms(100) && elapsed <= ms(200), "{elapsed:?}");
}

async fn advance_fires_what_is_due_before_the_next_poll<S: Stack>() {
    let start = Instant::now();
    let mut sleep = S::sleep_until(start + ms(10));
    assert!(poll_once(&mut sleep).await.is_pending());
    advance(ms(10)).await;
    assert!(poll_once(&mut sleep).await.is_ready());
    assert_eq!(
        start.elapsed(),
        ms(10),
        "advance moved the clock, nothing else did"
    );
}

async fn advance_short_of_the_deadline_fires_nothing<S: Stack>() {
    let start = Instant::now();
    let mut sleep = S::sleep_until(start + ms(10));
    assert!(poll_once(&mut sleep).await.is_pending());
    advance(ms(9)).await;
    assert!(poll_once(&mut sleep).await.is_pending(), "never early");
    advance(ms(1)).await;
    assert!(poll_once(&mut sleep).await.is_ready());
}

async fn reset_before_it_fires_moves_the_deadline<S: Stack>() {
    let start = Instant::now();
    let mut sleep = S::sleep_until(start + ms(100));
    assert!(poll_once(&mut sleep).await.is_pending());
    S::reset(&mut sleep, start + ms(200));
    advance(ms(150)).await;
    assert!(poll_once(&mut sleep).await.is_pending());
    (&mut sleep).await;
    assert_elapsed(start.elapsed(), ms(200));
    let mut earlier = S::sleep_until(start + ms(400));
    S::reset(&mut earlier, start + ms(250));
    earlier.await;
    assert_elapsed(start.elapsed(), ms(250));
}

async fn reset_to_the_past_completes_at_the_next_poll<S: Stack>() {
    let start = Instant::now();
    let mut sleep = S::sleep_until(start + ms(100));
    assert!(poll_once(&mut sleep).await.is_pending());
    S::sleep_until(start + ms(50)).await;
    S::reset(&mut sleep, start + ms(40));
    (&mut sleep).await;
    assert_elapsed(start.elapsed(), ms(50));
}

async fn timeout_returns_the_output_of_a_future_in_time<S: Stack>() {
    let start = Instant::now();
    let inner = S::sleep_until(start + ms(5));
    let inner = async move {
        inner.await;
        7
    };
    assert_eq!(S::timeout(ms(10), inner).await, Ok(7));
    assert_elapsed(start.elapsed(), ms(5));
}

async fn timeout_elapses_at_its_deadline<S: Stack>() {
    let start = Instant::now();
    let (_tx, rx) = tokio::sync::oneshot::channel::<()>();
    assert_eq!(S::timeout(ms(10), rx).await, Err(()));
    assert_elapsed(start.elapsed(), ms(10));
}

/// The offsets from `start` of the next `n` ticks.
async fn ticks<S: Stack>(interval: &mut S::Interval, start: Instant, n: usize) -> Vec<u64> {
    let mut at = Vec::new();
    for _ in 0..n {
        at.push((S::tick(interval).await - start).as_millis() as u64);
    }
    at
}

/// An interval of 10 ms whose task is busy for 35 ms after its first tick: the offsets of the
/// first five ticks, and when the fifth is taken.
async fn missed_ticks<S: Stack>(missed: MissedRuns) -> (Vec<u64>, u64) {
    let start = Instant::now();
    let mut interval = S::interval_at(start, ms(10), missed);
    let mut at = ticks::<S>(&mut interval, start, 1).await;
    advance(ms(35)).await; // busy: ticks 10, 20 and 30 are missed
    at.extend(ticks::<S>(&mut interval, start, 4).await);
    (at, start.elapsed().as_millis() as u64)
}

async fn interval_burst_catches_up_without_moving_the_schedule<S: Stack>() {
    assert_eq!(
        missed_ticks::<S>(MissedRuns::Burst).await,
        (vec![0, 10, 20, 30, 40], 40)
    );
}

async fn interval_delay_shifts_the_schedule<S: Stack>() {
    assert_eq!(
        missed_ticks::<S>(MissedRuns::Delay).await,
        (vec![0, 10, 45, 55, 65], 65)
    );
}

async fn interval_skip_drops_the_missed_ticks<S: Stack>() {
    assert_eq!(
        missed_ticks::<S>(MissedRuns::Skip).await,
        (vec![0, 10, 40, 50, 60], 60)
    );
}

/// Takes every item, with the offset from `start` at which it came.
async fn drain<S: Stack>(queue: &mut S::Queue, start: Instant) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    while let Some(value) = S::next(queue).await {
        out.push((value, start.elapsed().as_millis() as u64));
    }
    out
}

async fn delay_queue_yields_each_item_at_its_deadline<S: Stack>() {
    let start = Instant::now();
    let mut queue = S::queue();
    for (value, at) in [(1, 15), (2, 5), (3, 10), (4, 10), (5, 0)] {
        S::insert_at(&mut queue, value, start + ms(at));
    }
    let mut got = drain::<S>(&mut queue, start).await;
    got.sort_by_key(|&(value, at)| (at, value));
    assert_eq!(got, vec![(5, 0), (2, 5), (3, 10), (4, 10), (1, 15)]);
}

async fn delay_queue_reset_and_remove<S: Stack>() {
    let start = Instant::now();
    let mut queue = S::queue();
    let a = S::insert_at(&mut queue, 1, start + ms(10));
    let b = S::insert_at(&mut queue, 2, start + ms(20));
    S::insert_at(&mut queue, 3, start + ms(30));
    S::reset_at(&mut queue, a, start + ms(25));
    assert_eq!(S::remove(&mut queue, b), 2);
    assert_eq!(drain::<S>(&mut queue, start).await, vec![(1, 25), (3, 30)]);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_task_runs_as_advance_passes_its_deadline() {
    let timer = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .build_on_tokio()
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ran);
    timer
        .new_timeout(
            move |_: &Timeout| {
                counted.fetch_add(1, SeqCst);
            },
            ms(30),
        )
        .unwrap();
    advance(ms(29)).await;
    assert_eq!(ran.load(SeqCst), 0, "never early");
    advance(ms(1)).await;
    assert_eq!(ran.load(SeqCst), 1);
    assert_eq!(timer.pending_timeouts(), 0);
    assert!(timer.stats().wakeups <= 10, "{:?}", timer.stats());
}

#[tokio::test(start_paused = true)]
async fn a_timer_on_tokio_s_clock_starts_no_thread_and_wakes_only_when_due() {
    let timer = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .thread_name("paused-wheel")
        .build_on_tokio()
        .unwrap();
    // Its own `Drive` runs it: another completes at once.
    timer.drive(|at| tokio::time::sleep_until(at.into())).await;
    let start = Instant::now();
    timer.sleep(Duration::from_secs(2)).await.unwrap();
    assert_elapsed(start.elapsed(), Duration::from_secs(2));
    let threads = std::fs::read_dir("/proc/self/task").map(|tasks| {
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .any(|name| name.trim() == "paused-wheel")
    });
    assert!(!threads.unwrap_or(false), "a thread of the timer's runs");
    assert!(timer.stats().wakeups <= 8, "{:?}", timer.stats());
}

#[test]
fn building_on_tokio_outside_a_runtime_or_without_timers_is_an_error() {
    let outside = HashedWheelTimer::builder().build_on_tokio().unwrap_err();
    assert_eq!(outside, BuildError::NoRuntime);
    assert!(outside.to_string().contains("inside a tokio runtime"));
    let no_timers = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _in = no_timers.enter();
    assert_eq!(
        HashedWheelTimer::builder().build_on_tokio().unwrap_err(),
        BuildError::NoRuntime
    );
}

#[tokio::test(start_paused = true)]
async fn a_drive_on_the_system_clock_under_a_paused_runtime_does_not_spin() {
    let timer = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .build()
        .unwrap();
    tokio::spawn(timer.drive(|at| tokio::time::sleep_until(at.into())));
    let real = std::time::Instant::now();
    timer.sleep(ms(200)).await.unwrap();
    assert!(real.elapsed() >= ms(200), "the system's clock: real time");
    let wakeups = timer.stats().wakeups;
    assert!(wakeups <= 16, "{wakeups} wake-ups for one 200 ms sleep");
}

/// The tower layer's deadline and hyper's sleeps follow the paused clock too.
#[cfg(all(feature = "tower", feature = "hyper"))]
#[tokio::test(start_paused = true)]
async fn tower_s_deadline_and_hyper_s_sleep_fire_as_advance_passes_them() {
    use hyper::rt::Timer as _;
    use tower::{service_fn, Layer, Service, ServiceExt};
    let timer = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .build_on_tokio()
        .unwrap();
    let never = service_fn(|_: ()| std::future::pending::<Result<(), std::convert::Infallible>>());
    let mut service = hashed_timer_wheel::TimeoutLayer::new(timer.handle(), ms(50)).layer(never);
    let mut call = Box::pin(service.ready().await.unwrap().call(()));
    let hyper_timer = hashed_timer_wheel::HyperTimer::new(timer.handle());
    let mut sleep = hyper_timer.sleep(ms(30));
    assert!(poll_once(&mut call).await.is_pending());
    assert!(poll_once(&mut sleep).await.is_pending());
    advance(ms(30)).await;
    assert!(poll_once(&mut sleep).await.is_ready());
    assert!(poll_once(&mut call).await.is_pending(), "never early");
    advance(ms(20)).await;
    match poll_once(&mut call).await {
        Poll::Ready(Err(e)) => assert!(e.is::<tower::timeout::error::Elapsed>(), "{e}"),
        other => panic!("the deadline elapsed at 50 ms: {other:?}"),
    }
}
