//! Deadlines for an async service, kept by the wheel instead of the runtime's timers.
//!
//! A front sends 1 000 requests to an in-process backend (a tokio task per request) whose
//! latency varies: most answer fast, some too slowly, some never. Each call runs under
//! `timer.timeout(DEADLINE, call)`; `DeadlineError::Elapsed` becomes a timeout response. Beside
//! it, an idle-connection watchdog closes a connection after `IDLE` without a message (`Sleep`
//! and `reset_after` in a `tokio::select!` loop). The runtime is built without tokio's timer
//! driver: every sleep and deadline here is an entry of the wheel. The example checks its own
//! invariants (each request answered once, none "ok" after its deadline, no timeout early,
//! nothing left in the wheel) and panics if one fails.
//!
//! Run it with `cargo run --release --example async_timeouts`.

use hashed_timer_wheel::{DeadlineError, HashedWheelTimer, TimerHandle};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

const REQUESTS: u64 = 1_000;
const DEADLINE: Duration = Duration::from_millis(100);
const IDLE: Duration = Duration::from_millis(60);

/// What the backend does with request `id`: a fixed pseudo-random mix, the same on every run.
/// `None` never answers; fast answers take under 61 ms, slow ones 150 ms or more.
fn plan(id: u64) -> Option<Duration> {
    let h = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56; // 0..=255
    match h % 10 {
        0 => None,
        1 | 2 => Some(Duration::from_millis(150 + h % 150)),
        _ => Some(Duration::from_millis(1 + h % 60)),
    }
}

/// The backend: answers (with the time it did) after its planned latency, or gives up when
/// the caller does.
async fn backend(timer: TimerHandle, id: u64, mut reply: oneshot::Sender<Instant>) {
    let Some(latency) = plan(id) else {
        // Never answers: holds the reply until the caller stops waiting for it.
        reply.closed().await;
        return;
    };
    tokio::select! {
        slept = timer.sleep(latency) => {
            slept.expect("the timer outlives the service");
            let _ = reply.send(Instant::now());
        }
        // The caller timed out and dropped its receiver: stop working. Dropping the unfinished
        // `Sleep` cancels its wheel entry as well.
        () = reply.closed() => {}
    }
}

enum Outcome {
    Ok(Duration),
    TimedOut(Duration),
}

/// The front: one call to the backend under a deadline.
///
/// Tasks hold a `TimerHandle`, not the timer: it is a cheap clone, `Send + Sync` and
/// `'static`, and it does not keep the timer alive. The owner (in `main`) decides when the
/// wheel stops; a handle's futures then complete with `TimerError::Stopped` instead of hanging.
async fn front(timer: TimerHandle, id: u64) -> (u64, Outcome) {
    let (tx, rx) = oneshot::channel();
    let worker = tokio::spawn(backend(timer.clone(), id, tx));
    let started = Instant::now();
    let outcome = match timer.timeout(DEADLINE, rx).await {
        // The response won. Awaiting consumed the `Deadline`, and dropping it cancelled its
        // entry: the wheel frees it within a tick instead of holding it until the deadline
        // (at 10 000 requests a second, a thousand dead entries) only to expire it for nothing.
        Ok(Ok(sent_at)) => {
            assert!(
                sent_at < started + DEADLINE,
                "request {id}: ok after its deadline"
            );
            Outcome::Ok(started.elapsed())
        }
        Ok(Err(_)) => unreachable!("a backend answers or waits, it never drops the reply"),
        // The deadline won: the `Deadline` dropped the receiver, which the backend notices.
        Err(DeadlineError::Elapsed) => {
            let waited = started.elapsed();
            assert!(
                waited >= DEADLINE,
                "request {id}: timed out early, after {waited:?}"
            );
            Outcome::TimedOut(waited)
        }
        // `DeadlineError::Timer`: the timer was stopped or at its pending limit (neither here).
        Err(e) => panic!("request {id}: {e}"),
    };
    worker.await.expect("the backend does not panic");
    (id, outcome)
}

/// A connection closed after `IDLE` without a message; returns the messages it received
/// and how long it was quiet before closing.
async fn connection(
    timer: TimerHandle,
    mut inbox: mpsc::Receiver<&'static str>,
) -> (u32, Duration) {
    let mut idle = timer.sleep(IDLE);
    let (mut received, mut last) = (0, Instant::now());
    loop {
        tokio::select! {
            message = inbox.recv() => {
                let Some(_) = message else { break }; // the peer hung up first
                (received, last) = (received + 1, Instant::now());
                // Pushes the deadline back: the old entry is cancelled, a new one scheduled.
                idle.reset_after(IDLE);
            }
            // `&mut idle`: `Sleep` is `Unpin`, so one sleep lives across iterations; a
            // `timer.sleep(IDLE)` here would schedule a fresh entry on every message.
            slept = &mut idle => {
                slept.expect("the timer outlives the service");
                break;
            }
        }
    }
    (received, last.elapsed())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let timer = HashedWheelTimer::new(Duration::from_millis(5), 512);
    // No `enable_time()`: tokio's own timers are off (`tokio::time::sleep` would panic), so
    // every wait below is the wheel's. Its worker thread wakes the futures.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()?;
    println!("{REQUESTS} requests under a {DEADLINE:?} deadline, on a 5 ms-tick wheel");

    let handle = timer.handle();
    let (outcomes, (received, quiet)) = runtime.block_on(async move {
        // The watchdog: a peer sends five messages 20 ms apart, then goes silent.
        let (peer, inbox) = mpsc::channel(8);
        let watchdog = tokio::spawn(connection(handle.clone(), inbox));
        let timer = handle.clone();
        let client = tokio::spawn(async move {
            for _ in 0..5 {
                timer
                    .sleep(Duration::from_millis(20))
                    .await
                    .expect("the timer outlives the service");
                peer.send("ping").await.expect("the connection is open");
            }
            peer.closed().await; // closed by the watchdog, not by us
        });
        let fronts: Vec<_> = (0..REQUESTS)
            .map(|id| tokio::spawn(front(handle.clone(), id)))
            .collect();
        let mut outcomes = Vec::with_capacity(fronts.len());
        for front in fronts {
            outcomes.push(front.await.expect("the front does not panic"));
        }
        client.await.expect("the client does not panic");
        (
            outcomes,
            watchdog.await.expect("the watchdog does not panic"),
        )
    });
    drop(runtime);

    let ids = outcomes.iter().map(|(id, _)| *id);
    assert!(ids.eq(0..REQUESTS), "every request answered exactly once");
    let (mut ok, mut slowest_ok, mut latest_timeout) = (0, Duration::ZERO, Duration::ZERO);
    for (id, outcome) in outcomes {
        let fast = plan(id).is_some_and(|latency| latency < DEADLINE);
        match outcome {
            Outcome::Ok(took) => {
                assert!(fast, "request {id}: a slow backend beat the deadline");
                (ok, slowest_ok) = (ok + 1, slowest_ok.max(took));
            }
            Outcome::TimedOut(took) => {
                assert!(!fast, "request {id}: a fast backend timed out");
                latest_timeout = latest_timeout.max(took);
            }
        }
    }
    let timed_out = REQUESTS - ok;
    let never = (0..REQUESTS).filter(|&id| plan(id).is_none()).count() as u64;
    println!("  ok:        {ok:>4}   (slowest {slowest_ok:.1?})");
    println!("  timed out: {timed_out:>4}   (latest {latest_timeout:.1?}; {never} never answered)");
    assert_eq!(received, 5);
    assert!(quiet >= IDLE, "the watchdog closed early, after {quiet:?}");
    println!("watchdog: {received} messages, then closed after {quiet:.1?} of silence");

    // The futures are gone; the wheel processes the last cancellations within about a tick,
    // and publishes its counts at the end of that tick.
    let drained = Instant::now();
    while timer.pending_timeouts() > 0 && drained.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(timer.tick_duration());
    }
    std::thread::sleep(timer.tick_duration());
    let stats = timer.stats();
    println!(
        "timer: {} expired, {} cancelled, late by at most {:.1?}; lateness in ticks {:?}",
        stats.expired, stats.cancelled, stats.late_max, stats.lateness
    );
    // Expired: the ok requests' backend latencies, every timed-out deadline, and the
    // connection's 6 sleeps. Cancelled: the ok requests' deadlines, the slow backends given
    // up on, and the 5 watchdog resets.
    assert_eq!(stats.expired, ok + timed_out + 6);
    assert_eq!(stats.cancelled, ok + (timed_out - never) + 5);
    println!("pending timeouts at the end: {}", timer.pending_timeouts());
    assert_eq!(timer.pending_timeouts(), 0, "no entry left behind");
    Ok(())
}
