//! The two patterns most Netty timer users port first:
//!
//! 1. **Request timeouts**: arm a timeout per request, cancel it when the response arrives.
//! 2. **A self-rescheduling task**: a lease watchdog (Redisson-style) that renews a lease every
//!    period by scheduling itself again from inside its own task.
//!
//! Run it with `cargo run --example request_timeouts`. It checks what the contract promises
//! whatever the host's load: each request either timed out or was answered, never both; the
//! watchdog renewed three times; `stop()` returned the one timeout that never ran.

use hashed_timer_wheel::{HashedWheelTimer, Timeout, TimerTask};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Renews a lease every `period` until it has done so `renewals_left` times.
struct LeaseWatchdog {
    period: Duration,
    renewals_left: u32,
    renewed: Arc<AtomicU32>,
    started: Instant,
    done: mpsc::Sender<()>,
}

impl TimerTask for LeaseWatchdog {
    fn run(mut self: Box<Self>, timeout: &Timeout) {
        let n = self.renewed.fetch_add(1, Ordering::SeqCst) + 1;
        println!(
            "  [{:>4} ms] watchdog: lease renewed ({n})",
            self.started.elapsed().as_millis()
        );
        self.renewals_left -= 1;
        if self.renewals_left == 0 {
            let _ = self.done.send(());
            return;
        }
        // Netty's pattern: reach the timer through the timeout and schedule the next round.
        let period = self.period;
        timeout
            .timer()
            .new_timeout(*self, period)
            .expect("the timer is running");
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 10 ms resolution, 512 buckets: a common request-timeout configuration.
    let timer = HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(10))
        .ticks_per_wheel(512)
        .thread_name("example-timer")
        .build()?;
    let started = Instant::now();

    println!("1. request timeouts (150 ms each); responses take 50, 100, 200 and 300 ms");
    let (timed_out_tx, timed_out_rx) = mpsc::channel();
    let mut requests = Vec::new();
    for (id, response_ms) in [(1, 50u64), (2, 100), (3, 200), (4, 300)] {
        let tx = timed_out_tx.clone();
        let timeout = timer.new_timeout(
            move |_: &Timeout| {
                println!(
                    "  [{:>4} ms] request {id}: timed out, failing it",
                    started.elapsed().as_millis()
                );
                let _ = tx.send(id);
            },
            Duration::from_millis(150),
        )?;
        requests.push((id, response_ms, timeout));
    }
    drop(timed_out_tx);
    // Responses arrive on another thread; each cancels its request's timeout.
    let responder = thread::spawn(move || {
        let mut answered = Vec::new();
        for (id, response_ms, timeout) in requests {
            let wait = Duration::from_millis(response_ms).saturating_sub(started.elapsed());
            thread::sleep(wait);
            if timeout.cancel() {
                answered.push(id);
                println!(
                    "  [{:>4} ms] request {id}: response in time, timeout cancelled",
                    started.elapsed().as_millis()
                );
            } else {
                println!(
                    "  [{:>4} ms] request {id}: response too late, the timeout already fired",
                    started.elapsed().as_millis()
                );
            }
        }
        answered
    });
    let mut answered = responder.join().expect("responder thread");
    let mut timed_out: Vec<i32> = timed_out_rx.iter().collect();
    timed_out.sort();
    println!("  timed out: {timed_out:?} (expected [3, 4])");
    answered.extend(&timed_out);
    answered.sort();
    assert_eq!(
        answered,
        [1, 2, 3, 4],
        "each request timed out or was answered, once"
    );

    println!("2. a lease watchdog renewing every 100 ms, three times");
    let renewed = Arc::new(AtomicU32::new(0));
    let (done_tx, done_rx) = mpsc::channel();
    let watchdog_start = Instant::now();
    timer.new_timeout(
        LeaseWatchdog {
            period: Duration::from_millis(100),
            renewals_left: 3,
            renewed: Arc::clone(&renewed),
            started: watchdog_start,
            done: done_tx,
        },
        Duration::from_millis(100),
    )?;
    done_rx.recv_timeout(Duration::from_secs(5))?;
    let renewals = renewed.load(Ordering::SeqCst);
    let took = watchdog_start.elapsed();
    println!("  renewed {renewals} times in {} ms", took.as_millis());
    assert_eq!(renewals, 3);
    assert!(took >= Duration::from_millis(300), "never early");

    println!("3. stop() returns what never ran");
    let forgotten = timer.new_timeout(|_: &Timeout| unreachable!(), Duration::from_secs(3600))?;
    let never_ran = timer.stop()?;
    println!(
        "  stop() returned {} timeout(s); the hour-long one is cancelled: {}",
        never_ran.len(),
        forgotten.is_cancelled()
    );
    assert!(never_ran.len() == 1 && never_ran[0] == forgotten && forgotten.is_cancelled());
    println!(
        "  worker wake-ups over the whole run: {}",
        timer.stats().wakeups
    );
    Ok(())
}
