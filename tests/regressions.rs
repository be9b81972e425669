//! One test per bug found in Netty or in the existing Rust ports, named after the bug. Each is
//! driven by the manual clock where the bug is about logical time, so it fails every time the
//! bug is present, never by luck.
#![allow(clippy::mutable_key_type)] // `Timeout` hashes by identity, not by its mutable state

mod common;
use common::{counting, ms, noop, NANO};
use hashed_timer_wheel::{HashedWheelTimer, ManualDriver, Timeout, TimerError};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// Netty's per-tick transfer cap.
const TRANSFER_CAP: usize = 100_000;

/// The `hashed_wheel_timer` crate computes the leftovers of the 100 000-per-tick transfer with
/// an underflowing subtraction and loses them. 300 000 zero-delay timeouts submitted within
/// one tick must all fire: 100 000 on each of three consecutive ticks (one tick per advance:
/// the first tick of an advance stands for every tick it covers and may transfer more).
#[test]
fn transfer_cap_leftovers_are_not_lost_hashed_wheel_timer_crate() {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(10))
        .build_manual()
        .unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    for _ in 0..3 * TRANSFER_CAP {
        timer.new_timeout(counting(&fired), Duration::ZERO).unwrap();
    }
    assert_eq!(timer.pending_timeouts(), 3 * TRANSFER_CAP);

    for tick in 1..=3 {
        driver.advance(ms(10));
        assert_eq!(
            fired.load(SeqCst),
            tick * TRANSFER_CAP,
            "{TRANSFER_CAP} more on tick {}",
            tick - 1
        );
        assert_eq!(timer.pending_timeouts(), (3 - tick) * TRANSFER_CAP);
    }
    driver.advance(ms(100));
    assert_eq!(fired.load(SeqCst), 3 * TRANSFER_CAP, "none fired twice");
}

/// The same, with one advance covering several ticks (Netty, catching up, runs the missed ticks
/// back to back and transfers up to the cap on each), and on the real worker thread.
#[test]
fn transfer_cap_leftovers_are_not_lost_when_catching_up_or_in_real_time() {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(10))
        .build_manual()
        .unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    for _ in 0..3 * TRANSFER_CAP {
        timer.new_timeout(counting(&fired), Duration::ZERO).unwrap();
    }
    driver.advance(ms(30));
    assert_eq!(fired.load(SeqCst), 3 * TRANSFER_CAP);
    assert_eq!(timer.pending_timeouts(), 0);

    let timer = HashedWheelTimer::new(ms(1), 512);
    let (tx, rx) = mpsc::channel();
    let fired = Arc::new(AtomicUsize::new(0));
    for _ in 0..3 * TRANSFER_CAP {
        let fired = Arc::clone(&fired);
        let tx = tx.clone();
        timer
            .new_timeout(
                move |_: &Timeout| {
                    if fired.fetch_add(1, SeqCst) + 1 == 3 * TRANSFER_CAP {
                        tx.send(()).unwrap();
                    }
                },
                Duration::ZERO,
            )
            .unwrap();
    }
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("only {} of 300 000 fired", fired.load(SeqCst)));
    assert!(timer.stop().unwrap().is_empty());
    assert_eq!(fired.load(SeqCst), 3 * TRANSFER_CAP);
}

/// Records the tick each task ran on.
fn record_tick(
    log: &Arc<Mutex<Vec<(&'static str, u64)>>>,
    driver: &ManualDriver,
    name: &'static str,
) -> impl FnOnce(&Timeout) + Send + 'static {
    let log = Arc::clone(log);
    let driver = driver.clone();
    move |_: &Timeout| log.lock().unwrap().push((name, driver.current_tick()))
}

/// The `wheeltimer` crate loses an entry one round away when it removes its expired neighbour
/// from the same bucket. On an 8-bucket, 10 ms wheel, 55 ms and 135 ms share bucket 5, one
/// round apart: both fire, on ticks 5 and 13, whichever was inserted first.
#[test]
fn same_bucket_one_round_apart_both_fire_wheeltimer_crate() {
    for order in [[55, 135], [135, 55]] {
        let (timer, driver) = HashedWheelTimer::builder()
            .tick_duration(ms(10))
            .ticks_per_wheel(8)
            .build_manual()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        for delay in order {
            let name = if delay == 55 { "55 ms" } else { "135 ms" };
            timer
                .new_timeout(record_tick(&log, &driver, name), ms(delay))
                .unwrap();
        }
        for _ in 0..20 {
            driver.advance(ms(10));
        }
        assert_eq!(
            *log.lock().unwrap(),
            vec![("55 ms", 5), ("135 ms", 13)],
            "inserted in the order {order:?}"
        );
        assert_eq!(timer.pending_timeouts(), 0);
    }
}

/// Netty #14959: a timeout cancelled while its bucket is being expired was unlinked (counted
/// down) by the expiry and counted down again when its queued cancellation was processed.
/// Here the first task of the due tick cancels its ten neighbours; each must be counted down
/// exactly once, which the pending limit makes visible: afterwards exactly the configured
/// number of timeouts is accepted again, no more.
#[test]
fn pending_not_double_decremented_when_cancelled_in_due_tick_netty_14959() {
    const MAX: usize = 12;
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(100))
        .max_pending_timeouts(MAX)
        .build_manual()
        .unwrap();
    let long = timer.new_timeout(noop, Duration::from_secs(3600)).unwrap();
    let victims: Arc<Mutex<Vec<Timeout>>> = Arc::default();
    let v = Arc::clone(&victims);
    timer
        .new_timeout(
            move |_: &Timeout| {
                for t in v.lock().unwrap().iter() {
                    assert!(
                        t.cancel(),
                        "not yet expired: this tick's bucket is mid-expiry"
                    );
                }
            },
            ms(200),
        )
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..10 {
        let t = timer.new_timeout(counting(&ran), ms(200)).unwrap();
        victims.lock().unwrap().push(t);
    }
    assert_eq!(timer.pending_timeouts(), MAX);

    driver.advance(ms(300)); // ticks 0..=2: all eleven are due on tick 2
    assert_eq!(ran.load(SeqCst), 0);
    assert_eq!(
        timer.pending_timeouts(),
        1,
        "only the long one: the walk that found the ten cancelled ended them"
    );
    driver.advance(ms(100));
    assert_eq!(
        timer.pending_timeouts(),
        1,
        "their queued cancellations end nothing more"
    );
    driver.advance(ms(1_000));
    assert_eq!(timer.pending_timeouts(), 1);

    for i in 1..MAX {
        timer
            .new_timeout(noop, Duration::from_secs(3600))
            .unwrap_or_else(|e| panic!("refused with {i} pending: {e}"));
    }
    assert_eq!(
        timer.new_timeout(noop, ms(1)).unwrap_err(),
        TimerError::TooManyPending {
            pending: MAX,
            max: MAX
        }
    );
    assert!(long.cancel());
}

/// Netty counts a refused `newTimeout` on a stopped timer as pending (+1 per call, never given
/// back). Refused calls, for being stopped or for the pending limit, must change nothing.
#[test]
fn refused_new_timeout_leaves_pending_unchanged_netty_stopped_leak() {
    let (timer, driver) = HashedWheelTimer::builder()
        .max_pending_timeouts(2)
        .build_manual()
        .unwrap();
    let a = timer.new_timeout(noop, ms(1_000)).unwrap();
    timer.new_timeout(noop, ms(1_000)).unwrap();
    for _ in 0..1_000 {
        assert!(matches!(
            timer.new_timeout(noop, ms(1)),
            Err(TimerError::TooManyPending { pending: 2, max: 2 })
        ));
    }
    assert_eq!(timer.pending_timeouts(), 2);
    assert!(a.cancel());
    driver.advance(ms(100));
    assert_eq!(timer.pending_timeouts(), 1);
    timer.new_timeout(noop, ms(1_000)).unwrap();
    assert!(
        timer.new_timeout(noop, ms(1_000)).is_err(),
        "exactly one slot was free"
    );

    // On a stopped timer `pending_timeouts()` is 0 by definition: each refusal is counted as
    // one (the counter itself is checked by `shared::pending`'s unit tests).
    let timer = HashedWheelTimer::new(ms(10), 64);
    timer.new_timeout(noop, Duration::from_secs(60)).unwrap();
    assert_eq!(timer.pending_timeouts(), 1);
    let stopped = timer.stop().unwrap();
    assert_eq!(stopped.len(), 1);
    let before = timer.stats().refused;
    for _ in 0..1_000 {
        assert_eq!(
            timer.new_timeout(noop, ms(1)).unwrap_err(),
            TimerError::Stopped
        );
        assert_eq!(
            timer.handle().new_timeout(noop, ms(1)).unwrap_err(),
            TimerError::Stopped
        );
    }
    assert_eq!(timer.stats().refused, before + 2_000);
    assert_eq!(timer.pending_timeouts(), 0);

    // And before the first start: stop, then refuse.
    let timer = HashedWheelTimer::new(ms(10), 64);
    assert!(timer.stop().unwrap().is_empty());
    for _ in 0..1_000 {
        assert_eq!(
            timer.new_timeout(noop, ms(1)).unwrap_err(),
            TimerError::Stopped
        );
    }
    assert_eq!(timer.stats().refused, 1_000);
    assert_eq!(timer.pending_timeouts(), 0);
}

/// Netty #7760: a delay of `Long.MAX_VALUE` overflowed the deadline, which became negative and
/// fired at once. `Duration::MAX` (and anything past the clock's range) must saturate and never
/// fire: not on the first ticks, not after centuries of manual time, not on the real worker.
#[test]
fn duration_max_never_fires_netty_7760() {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .ticks_per_wheel(8)
        .build_manual()
        .unwrap();
    timer.start().unwrap();
    driver.advance(Duration::from_micros(1_500)); // past 0: an unsaturated deadline wraps
    let fired = Arc::new(AtomicUsize::new(0));
    let huge = [
        Duration::MAX,
        Duration::from_secs(u64::MAX),
        Duration::from_nanos(u64::MAX),
        Duration::from_millis(i64::MAX as u64), // Netty's Long.MAX_VALUE ms
    ];
    let timeouts: Vec<Timeout> = huge
        .iter()
        .map(|&d| timer.new_timeout(counting(&fired), d).unwrap())
        .collect();
    for _ in 0..20 {
        driver.advance(ms(1));
    }
    driver.advance(Duration::from_secs(500 * 365 * 24 * 3600));
    driver.advance_to(Duration::from_nanos(u64::MAX) - NANO);
    assert_eq!(fired.load(SeqCst), 0);
    assert_eq!(timer.pending_timeouts(), huge.len());
    assert!(timeouts.iter().all(|t| !t.is_expired()));

    let timer = HashedWheelTimer::new(ms(1), 8);
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    let never = timer
        .new_timeout(move |_: &Timeout| tx.send("MAX").unwrap(), Duration::MAX)
        .unwrap();
    // A neighbour proves the worker runs meanwhile.
    timer
        .new_timeout(move |_: &Timeout| tx2.send("5 ms").unwrap(), ms(5))
        .unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("5 ms"));
    assert!(rx.recv_timeout(ms(200)).is_err(), "Duration::MAX fired");
    assert_eq!(timer.stop().unwrap(), vec![never]);
}

/// A timeout of `Duration::MAX` holds the deadline `u64::MAX`, "never". On a tick that divides
/// 2^64 - 1 ns, the clock's last tick ends exactly there, and its walk took a deadline `<= now`
/// as due: with the clock at its end and a neighbour in that tick, the never-timeout fired.
#[test]
fn duration_max_never_fires_in_a_last_tick_that_ends_at_the_clocks_end() {
    // 42 007 935 ns = 3 * 5 * 17 * 257 * 641, a divisor of 2^64 - 1.
    let tick = Duration::from_nanos(42_007_935);
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(tick)
        .ticks_per_wheel(1)
        .build_manual()
        .unwrap();
    timer.start().unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    let never = timer.new_timeout(counting(&fired), Duration::MAX).unwrap();
    let last_tick_start = Duration::from_nanos(u64::MAX) - tick + NANO;
    driver.advance_to(last_tick_start);
    let neighbour = timer.new_timeout(noop, NANO).unwrap();
    driver.advance(Duration::MAX);
    assert!(
        neighbour.is_expired(),
        "the neighbour fires at the end of its tick"
    );
    assert_eq!(fired.load(SeqCst), 0, "Duration::MAX fired");
    assert!(!never.is_expired());
    assert_eq!(timer.pending_timeouts(), 1);
}

/// The message of a caught panic (`panic!` with arguments gives a `String`, without a `&str`).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

/// `ManualDriver::advance` (and `advance_to`) called from inside a task of the timer it drives
/// took the worker's lock (`worker`) again on the thread that held it, and hung for good.
/// Both now panic at once with a message naming the mistake; the task's panic is caught as any
/// task's, and the timer goes on. The scenario runs on a thread of its own, watched: a hang
/// fails the test instead of hanging it.
#[test]
fn advance_from_inside_its_own_task_panics_instead_of_hanging() {
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (timer, driver) = HashedWheelTimer::builder()
            .tick_duration(ms(10))
            .build_manual()
            .unwrap();
        let (seen_tx, seen_rx) = mpsc::channel();
        let inner = driver.clone();
        timer
            .new_timeout(
                move |_: &Timeout| {
                    let tries: [&dyn Fn(); 2] =
                        [&|| inner.advance(ms(10)), &|| inner.advance_to(ms(500))];
                    for attempt in tries {
                        let caught =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(attempt));
                        seen_tx
                            .send(caught.err().map(|p| panic_message(&*p)))
                            .unwrap();
                    }
                    // Reading the driver holds nothing: allowed inside a task.
                    seen_tx
                        .send(Some(format!("now {:?}", inner.now())))
                        .unwrap();
                },
                ms(10),
            )
            .unwrap();
        driver.advance(ms(20));
        // The timer goes on: the next timeout fires on the next advance.
        let fired = Arc::new(AtomicUsize::new(0));
        timer.new_timeout(counting(&fired), ms(10)).unwrap();
        driver.advance(ms(20));
        let seen: Vec<Option<String>> = seen_rx.try_iter().collect();
        done_tx
            .send((seen, fired.load(SeqCst), driver.now()))
            .unwrap();
    });
    let (seen, fired, now) = done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("ManualDriver::advance from inside its own task hung");
    assert_eq!(seen.len(), 3, "the task ran once, to its end: {seen:?}");
    for message in &seen[..2] {
        let message = message
            .as_deref()
            .expect("advance inside its own task returned");
        assert!(
            message.contains("ManualDriver::advance called from user code that an advance"),
            "{message}"
        );
    }
    assert_eq!(
        seen[2].as_deref(),
        Some("now 20ms"),
        "the clock did not move from inside the task"
    );
    assert_eq!(fired, 1);
    assert_eq!(now, ms(40));
}

/// The panic of `ManualDriver::advance` re-entered from user code said "from inside a task"
/// also when that code was a cancelled task's `Drop` or the executor, which the advance runs on
/// its thread as well: the message now names all the places. Each case runs on a thread of its
/// own, watched, and reports the message it caught.
#[test]
fn advance_from_a_tasks_drop_or_the_executor_says_where_it_was_called() {
    /// A task whose drop tries to advance the timer that drops it.
    struct AdvanceOnDrop(ManualDriver, mpsc::Sender<Option<String>>);
    impl Drop for AdvanceOnDrop {
        fn drop(&mut self) {
            let advance = std::panic::AssertUnwindSafe(|| self.0.advance(ms(10)));
            let caught = std::panic::catch_unwind(advance);
            self.1
                .send(caught.err().map(|p| panic_message(&*p)))
                .unwrap();
        }
    }
    let (seen_tx, seen_rx) = mpsc::channel();
    let tx = seen_tx.clone();
    std::thread::spawn(move || {
        let (timer, driver) = HashedWheelTimer::builder().build_manual().unwrap();
        let task = AdvanceOnDrop(driver.clone(), tx);
        let timeout = timer
            .new_timeout(move |_: &Timeout| drop(task), ms(100))
            .unwrap();
        assert!(timeout.cancel());
        driver.advance(ms(100)); // the worker drops the cancelled task
    });
    std::thread::spawn(move || {
        let slot: Arc<std::sync::OnceLock<ManualDriver>> = Arc::default();
        let inner = Arc::clone(&slot);
        let (timer, driver) = HashedWheelTimer::builder()
            .executor(move |job| {
                let advance = std::panic::AssertUnwindSafe(|| inner.get().unwrap().advance(ms(10)));
                let caught = std::panic::catch_unwind(advance);
                seen_tx
                    .send(caught.err().map(|p| panic_message(&*p)))
                    .unwrap();
                job();
            })
            .build_manual()
            .unwrap();
        slot.set(driver.clone()).ok().unwrap();
        timer.new_timeout(noop, ms(100)).unwrap();
        driver.advance(ms(200));
    });
    for _ in 0..2 {
        let message = seen_rx.recv_timeout(Duration::from_secs(10)).expect("hung");
        let message = message.expect("advance from inside an advance returned");
        assert!(
            message.contains("from user code that an advance"),
            "{message}"
        );
        assert!(!message.contains("inside a task"), "{message}");
    }
}

/// Set in the child process that [`largest_wheel_is_built_and_runs_in_little_memory`] starts.
const SMALL_ADDRESS_SPACE: &str = "HASHED_TIMER_WHEEL_TEST_SMALL_ADDRESS_SPACE";

/// `Builder::ticks_per_wheel(MAX_TICKS_PER_WHEEL)` was accepted, then the wheel allocated and
/// filled its 2^30 buckets at once (16 GiB): the process aborted on the allocation, or wrote 16
/// GiB of empty buckets before its first timeout. The buckets are now allocated a page at a
/// time, as timeouts land in them. The timer is built and driven in a child process limited to
/// 2 GiB of address space, so that the old allocation fails the test (the child aborts) rather
/// than take the machine's memory; the child's timeouts, in far-apart buckets, fire on their
/// ticks.
#[test]
fn largest_wheel_is_built_and_runs_in_little_memory() {
    use hashed_timer_wheel::MAX_TICKS_PER_WHEEL;
    if cfg!(target_os = "linux") && std::env::var_os(SMALL_ADDRESS_SPACE).is_none() {
        let name = "largest_wheel_is_built_and_runs_in_little_memory";
        let out = std::process::Command::new("sh")
            .args(["-c", r#"ulimit -v 2097152 && exec "$0" "$@""#])
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads=1", "--nocapture"])
            .env(SMALL_ADDRESS_SPACE, "1")
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "in 2 GiB of address space: {}\n{stdout}\n{stderr}",
            out.status
        );
        return;
    }
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .ticks_per_wheel(MAX_TICKS_PER_WHEEL)
        .build_manual()
        .unwrap();
    assert_eq!(timer.wheel_len(), MAX_TICKS_PER_WHEEL);
    let fired = Arc::new(Mutex::new(Vec::new()));
    let record = |what: &'static str| {
        let fired = Arc::clone(&fired);
        move |_: &Timeout| fired.lock().unwrap().push(what)
    };
    let hour = Duration::from_secs(3600);
    timer.new_timeout(record("an hour"), hour).unwrap();
    timer.new_timeout(record("5 ms"), ms(5)).unwrap();
    timer
        .new_timeout(record("a minute"), Duration::from_secs(60))
        .unwrap();
    driver.advance(ms(6));
    assert_eq!(*fired.lock().unwrap(), ["5 ms"]);
    driver.advance(Duration::from_secs(60));
    assert_eq!(*fired.lock().unwrap(), ["5 ms", "a minute"]);
    driver.advance_to(hour + ms(1));
    assert_eq!(*fired.lock().unwrap(), ["5 ms", "a minute", "an hour"]);
    assert_eq!(timer.pending_timeouts(), 0);
}

/// `ManualDriver::advance(by)` read the clock before it took the worker's lock: two threads
/// advancing at once, while a third's advance ran a task, both read the same time and moved the
/// clock to the same instant, and one `by` was lost (30 ms of advances moved the clock 20 ms).
/// The task holds the first advance until both others have read the clock and wait for the lock.
#[test]
fn advances_from_two_threads_at_once_each_move_the_clock() {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(10))
        .build_manual()
        .unwrap();
    let (running_tx, running_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    timer
        .new_timeout(
            move |_: &Timeout| {
                running_tx.send(()).unwrap();
                let _ = release_rx.recv_timeout(Duration::from_secs(10));
            },
            Duration::ZERO,
        )
        .unwrap();
    let first = driver.clone();
    let first = std::thread::spawn(move || first.advance(ms(10)));
    running_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let others: Vec<_> = (0..2)
        .map(|_| {
            let driver = driver.clone();
            std::thread::spawn(move || driver.advance(ms(10)))
        })
        .collect();
    // Long enough for both to read the clock and block on the advance under way.
    std::thread::sleep(Duration::from_millis(200));
    release_tx.send(()).unwrap();
    first.join().unwrap();
    for other in others {
        other.join().unwrap();
    }
    assert_eq!(driver.now(), ms(30), "three advances of 10 ms each");
}
