//! `DelayQueue` on the wheel: on the manual clock, polled by hand with counting wakers (never
//! early, at most a tick late, each item once; removed and reset keys; wake-ups; `peek` within
//! a tick; values whose drop panics; memory given back; far deadlines), one regression test
//! per tokio-util and downstream bug report, and driven for real by tokio (both flavours),
//! `futures`' `block_on` and smol. `tests/delay_queue_model.rs` checks the contract against a
//! model on random sequences.

use hashed_timer_wheel::delay_queue::{Expired, Key};
use hashed_timer_wheel::{DelayQueue, HashedWheelTimer, ManualDriver};
use std::collections::HashSet;
use std::future::poll_fn;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(1);

fn manual() -> (HashedWheelTimer, ManualDriver) {
    HashedWheelTimer::builder()
        .tick_duration(TICK)
        .ticks_per_wheel(64)
        .build_manual()
        .unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A waker that counts its wake-ups.
#[derive(Default)]
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn counter() -> (Arc<Counter>, Waker) {
    let c = Arc::new(Counter::default());
    (c.clone(), Waker::from(c))
}

fn wakes(c: &Counter) -> usize {
    c.0.load(SeqCst)
}

fn poll<T>(queue: &mut DelayQueue<T>, waker: &Waker) -> Poll<Option<Expired<T>>> {
    queue.poll_expired(&mut Context::from_waker(waker))
}

/// Everything the queue yields now, without waiting.
fn drain_ready<T>(queue: &mut DelayQueue<T>, waker: &Waker) -> Vec<T> {
    let mut out = vec![];
    while let Poll::Ready(Some(item)) = poll(queue, waker) {
        out.push(item.into_inner());
    }
    out
}

/// Advances the manual clock one tick at a time up to `to`.
fn step_to(driver: &ManualDriver, to: Duration) {
    while driver.now() < to {
        driver.advance(TICK.min(to - driver.now()));
    }
}

#[test]
fn never_early_at_most_a_tick_late_each_item_once() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    // Deadlines from 0 to 3 s, some far beyond the wheel's 64 buckets, some sharing a tick.
    let mut seed = 11u64;
    let mut due = vec![];
    for i in 0..2_000u64 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let at = Duration::from_micros((seed >> 33) % 3_000_000);
        queue.insert(i, at);
        due.push(at);
    }
    assert!(poll(&mut queue, &waker).is_pending());
    let mut seen = HashSet::new();
    let mut step = Duration::ZERO;
    while !queue.is_empty() {
        step += Duration::from_micros(250);
        step_to(&driver, step);
        let now = driver.now();
        for i in drain_ready(&mut queue, &waker) {
            let deadline = due[i as usize];
            assert!(now >= deadline, "item {i} early: {now:?} < {deadline:?}");
            assert!(
                now <= deadline + 2 * TICK,
                "item {i} late: {now:?}, due {deadline:?}"
            );
            assert!(seen.insert(i), "item {i} yielded twice");
        }
    }
    assert_eq!(seen.len(), 2_000);
    assert!(poll(&mut queue, &waker).is_ready());
}

#[test]
fn items_come_back_in_fire_tick_order_then_insertion_order() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    for (v, at) in [(3, 30), (1, 10), (4, 30), (2, 20), (0, 5), (5, 200)] {
        queue.insert(v, ms(at));
    }
    step_to(&driver, ms(300));
    assert_eq!(drain_ready(&mut queue, &waker), vec![0, 1, 2, 3, 4, 5]);
}

#[test]
fn a_removed_key_never_expires_and_names_nothing_after() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    let a = queue.insert("a", ms(10));
    queue.insert("b", ms(100));
    assert!(poll(&mut queue, &waker).is_pending());
    assert_eq!(queue.remove(&a).into_inner(), "a");
    step_to(&driver, ms(50));
    assert!(poll(&mut queue, &waker).is_pending(), "a is gone");
    assert!(queue.try_remove(&a).is_none());
    // Its slot is reused: the old key still names nothing.
    let c = queue.insert("c", ms(200));
    assert_ne!(a, c);
    assert!(queue.try_remove(&a).is_none());
    assert_eq!(queue.len(), 2);
    step_to(&driver, ms(250));
    assert_eq!(drain_ready(&mut queue, &waker), vec!["b", "c"]);
}

#[test]
fn a_key_used_on_another_queue_names_nothing_there() {
    let (timer, _driver) = manual();
    let mut first = DelayQueue::new(timer.handle());
    let mut second = DelayQueue::new(timer.handle());
    let key = first.insert("first's", ms(10));
    second.insert("second's", ms(10));
    assert!(second.try_remove(&key).is_none());
    assert_eq!(second.len(), 1);
    assert_eq!(first.remove(&key).into_inner(), "first's");
}

#[test]
fn a_reset_key_never_expires_under_its_old_deadline() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    let later = queue.insert("later", ms(10));
    let sooner = queue.insert("sooner", ms(80));
    assert!(poll(&mut queue, &waker).is_pending());
    queue.reset(&later, ms(50));
    queue.reset(&sooner, ms(5));
    step_to(&driver, ms(20));
    assert_eq!(drain_ready(&mut queue, &waker), vec!["sooner"]);
    step_to(&driver, ms(49));
    assert!(
        poll(&mut queue, &waker).is_pending(),
        "not at the old deadline"
    );
    step_to(&driver, ms(51));
    let item = poll(&mut queue, &waker);
    let Poll::Ready(Some(item)) = item else {
        panic!("due at 50 ms: {item:?}")
    };
    assert_eq!((item.key(), item.into_inner()), (later, "later"));
}

#[test]
fn an_expired_item_not_yet_yielded_can_be_reset_or_removed() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    let a = queue.insert("a", ms(5));
    let b = queue.insert("b", ms(5));
    let c = queue.insert("c", ms(5));
    step_to(&driver, ms(10));
    let Poll::Ready(Some(first)) = poll(&mut queue, &waker) else {
        panic!("a is due")
    };
    assert_eq!(first.key(), a);
    // b and c have expired and wait to be yielded.
    queue.reset(&b, ms(20));
    assert_eq!(queue.remove(&c).into_inner(), "c");
    assert!(poll(&mut queue, &waker).is_pending());
    step_to(&driver, ms(31));
    assert_eq!(drain_ready(&mut queue, &waker), vec!["b"]);
    assert!(queue.is_empty());
}

/// Many expired items left the ready list by `remove` and `reset` before a poll (each in
/// constant time: a key left behind in the list goes stale and is passed over). The rest come
/// out in order, each once, with their deadlines; `peek` names each next one; the reset items
/// come back at their new deadlines, once, and one reset to the past comes back once too.
#[test]
fn expired_items_removed_or_reset_before_a_poll_leave_the_rest_in_order() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    let keys: Vec<Key> = (0..1_000u64).map(|i| queue.insert(i, ms(3))).collect();
    // The manual clock's instants count from each call: equal within a millisecond.
    let close = |a: Instant, b: Instant| a <= b + ms(1) && b <= a + ms(1);
    step_to(&driver, ms(5));
    let Poll::Ready(Some(first)) = poll(&mut queue, &waker) else {
        panic!("item 0 is due")
    };
    assert_eq!(first.into_inner(), 0);
    // Every other item has expired and waits to be yielded.
    for i in (1..1_000).step_by(2) {
        let due = queue.deadline(&keys[i]);
        let gone = queue.remove(&keys[i]);
        assert_eq!(gone.key(), keys[i]);
        assert!(close(gone.deadline(), due), "{i}: its deadline");
        assert_eq!(gone.into_inner(), i as u64);
    }
    assert_eq!(queue.peek(), Some(keys[2]));
    for i in (2..1_000).filter(|i| i % 10 == 2) {
        queue.reset(&keys[i], ms(50));
    }
    queue.reset(&keys[998], Duration::ZERO);
    let kept: Vec<u64> = (2..998).filter(|i| i % 2 == 0 && i % 10 != 2).collect();
    assert!(close(queue.deadline(&keys[4]), queue.deadline(&keys[6])));
    assert_eq!(queue.len(), kept.len() + 100 + 1);
    let mut out = vec![];
    while let Some(next) = queue.peek() {
        let Poll::Ready(Some(item)) = poll(&mut queue, &waker) else {
            panic!("{next:?} is due")
        };
        assert_eq!(item.key(), next, "peek names what comes next");
        out.push(item.into_inner());
        if out.len() > kept.len() {
            break;
        }
    }
    // Item 998, due again at once, comes back once, among or after the rest.
    let at = out
        .iter()
        .position(|&v| v == 998)
        .expect("998 is due again");
    out.remove(at);
    assert_eq!(out, kept);
    assert!(poll(&mut queue, &waker).is_pending());
    step_to(&driver, ms(56));
    let reset: Vec<u64> = (2..1_000).filter(|i| i % 10 == 2).collect();
    assert_eq!(drain_ready(&mut queue, &waker), reset);
    assert!(queue.is_empty());
}

/// An expired item's deadline lives in its slot: `deadline` and `remove` find it there. Its
/// wheel has emptied meanwhile; a new item in a freed slot far up the slab
/// goes into the wheel under that slot's index and expires on time.
#[test]
fn expired_items_keep_their_deadlines_while_the_wheel_is_empty() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    let keys: Vec<Key> = (0..3_000u32)
        .map(|i| queue.insert(i, ms(5) + Duration::from_nanos(u64::from(i))))
        .collect();
    step_to(&driver, ms(10));
    let Poll::Ready(Some(first)) = poll(&mut queue, &waker) else {
        panic!("the first item is due")
    };
    assert_eq!(first.key(), keys[0]);
    let last = keys[2_999];
    // A manual clock's instants count from each call (the deadlines are 1 ns apart).
    let due = queue.deadline(&last);
    let earlier = queue.deadline(&keys[1_500]);
    assert!(earlier.max(due) - earlier.min(due) < ms(1));
    let removed = queue.remove(&last);
    assert_eq!(*removed.get_ref(), 2_999);
    assert!(removed.deadline().max(due) - removed.deadline().min(due) < ms(1));
    // The freed slot at the top of the slab takes the next item.
    let again = queue.insert(7_777, ms(3));
    assert!(
        queue.try_remove(&last).is_none(),
        "the old key names nothing"
    );
    assert_eq!(drain_ready(&mut queue, &waker).len(), 2_998);
    assert!(poll(&mut queue, &waker).is_pending());
    step_to(&driver, ms(13));
    let Poll::Ready(Some(item)) = poll(&mut queue, &waker) else {
        panic!("the new item is due")
    };
    assert_eq!((item.key(), item.into_inner()), (again, 7_777));
    assert!(queue.is_empty());
}

#[test]
fn an_earlier_insert_wakes_the_waiting_task_on_time() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (count, waker) = counter();
    queue.insert("late", ms(500));
    assert!(poll(&mut queue, &waker).is_pending());
    queue.insert("early", ms(10));
    step_to(&driver, ms(9));
    assert_eq!(wakes(&count), 0, "never early");
    step_to(&driver, ms(12));
    assert_eq!(wakes(&count), 1);
    assert_eq!(drain_ready(&mut queue, &waker), vec!["early"]);
}

#[test]
fn the_queue_holds_one_pending_timeout_while_it_waits_and_none_when_empty() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    let keys: Vec<Key> = (0..100).map(|i| queue.insert(i, ms(10 + i))).collect();
    assert_eq!(timer.pending_timeouts(), 0, "nothing armed before a poll");
    assert!(poll(&mut queue, &waker).is_pending());
    assert_eq!(timer.pending_timeouts(), 1);
    for key in &keys {
        queue.remove(key);
    }
    driver.advance(TICK);
    assert_eq!(
        timer.pending_timeouts(),
        0,
        "emptied: its Sleep is cancelled"
    );
    drop(queue);
}

/// tokio-rs/tokio#6751: removing the last item did not wake the task waiting in
/// `poll_expired`, which then slept until an unrelated wake-up.
#[test]
fn tokio_6751_removing_the_last_item_wakes_the_waiting_task() {
    let (timer, _driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (count, waker) = counter();
    let key = queue.insert("foo", Duration::from_secs(100));
    assert!(poll(&mut queue, &waker).is_pending());
    queue.remove(&key);
    assert_eq!(wakes(&count), 1);
    assert!(matches!(poll(&mut queue, &waker), Poll::Ready(None)));
}

/// tokio-rs/tokio#8320: `clear` left the task waiting in `poll_expired` asleep.
#[test]
fn tokio_8320_clear_wakes_the_waiting_task() {
    let (timer, _driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (count, waker) = counter();
    queue.insert(1, Duration::from_secs(100));
    queue.insert(2, Duration::from_secs(200));
    assert!(poll(&mut queue, &waker).is_pending());
    queue.clear();
    assert_eq!(wakes(&count), 1);
    assert!(matches!(poll(&mut queue, &waker), Poll::Ready(None)));
    assert_eq!(queue.len(), 0);
}

/// tokio-rs/tokio#8274: a reset to a deadline in the past made the item due without waking
/// the task waiting in `poll_expired`.
#[test]
fn tokio_8274_a_reset_to_the_past_wakes_the_waiting_task() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (count, waker) = counter();
    driver.advance(ms(50));
    let key = queue.insert("foo", Duration::from_secs(100));
    queue.insert("bar", Duration::from_secs(200));
    assert!(poll(&mut queue, &waker).is_pending());
    queue.reset_at(&key, Instant::now() - ms(20));
    assert_eq!(wakes(&count), 1);
    // Due without the clock moving.
    let Poll::Ready(Some(item)) = poll(&mut queue, &waker) else {
        panic!("foo is due")
    };
    assert_eq!(item.into_inner(), "foo");
}

/// An item made due inside the tick the queue's `Sleep` is armed for (here the current tick,
/// for an item due at 10.6 ms, polled at 10.2 ms) wakes the waiting task at once, by an insert
/// or a reset, relative or absolute; the next poll takes it without the clock moving, and
/// nothing else.
#[test]
fn an_item_made_due_within_the_armed_tick_wakes_the_waiting_task() {
    for how in ["insert", "insert_at", "reset", "reset_at"] {
        let (timer, driver) = manual();
        let mut queue = DelayQueue::new(timer.handle());
        let (count, waker) = counter();
        driver.advance(Duration::from_micros(10_200));
        queue.insert("this tick", Duration::from_micros(400));
        let other = queue.insert("other", ms(100));
        assert!(poll(&mut queue, &waker).is_pending());
        let expected = match how {
            "insert" => queue.insert("now", Duration::ZERO),
            "insert_at" => queue.insert_at("now", Instant::now() - ms(5)),
            "reset" => {
                queue.reset(&other, Duration::ZERO);
                other
            }
            _ => {
                queue.reset_at(&other, Instant::now() - ms(5));
                other
            }
        };
        assert_eq!(wakes(&count), 1, "{how}: the waiting task is woken");
        assert_eq!(
            queue.peek(),
            Some(expected),
            "{how}: the sooner of this tick"
        );
        let Poll::Ready(Some(item)) = poll(&mut queue, &waker) else {
            panic!("{how}: due without the clock moving")
        };
        assert_eq!(item.key(), expected, "{how}");
        assert!(
            poll(&mut queue, &waker).is_pending(),
            "{how}: 10.6 ms is not due"
        );
        assert_eq!(driver.now(), Duration::from_micros(10_200));
    }
}

/// tokio-rs/tokio#4161: `poll_expired` returned `Pending` on an empty queue, where
/// tokio-util's documentation says `Ready(None)` ("if no items are in the queue, i.e.
/// `is_empty()` returns `true`, then `poll` returns `Poll::Ready(None)`").
#[test]
fn tokio_4161_poll_expired_on_an_empty_queue_is_ready_none() {
    let (timer, _driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    assert!(matches!(poll(&mut queue, &waker), Poll::Ready(None)));
    let key = queue.insert(0, Duration::from_secs(10));
    assert!(poll(&mut queue, &waker).is_pending());
    queue.remove(&key);
    assert!(matches!(poll(&mut queue, &waker), Poll::Ready(None)));
    // And it yields again after an insert.
    queue.insert(1, Duration::ZERO);
    assert!(matches!(poll(&mut queue, &waker), Poll::Ready(Some(_))));
}

/// A task that saw `Ready(None)` on an empty queue is woken by the next insert, as
/// tokio-util's (its `poll_expired` keeps the waker of every poll, and an insert into an empty
/// queue wakes it). The queue kept no waker then, so a consumer that waits while the queue is
/// empty (a queue shared with a producer task, `None` taken as "nothing yet") was never woken
/// by the producer's insert, and hung.
#[test]
fn an_insert_into_an_empty_queue_wakes_the_task_that_saw_it_empty() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (count, waker) = counter();
    assert!(matches!(poll(&mut queue, &waker), Poll::Ready(None)));
    queue.insert("first", ms(5));
    assert_eq!(wakes(&count), 1, "the insert into the empty queue wakes");
    assert!(poll(&mut queue, &waker).is_pending());
    step_to(&driver, ms(6));
    assert_eq!(wakes(&count), 2);
    assert_eq!(drain_ready(&mut queue, &waker), vec!["first"]);
    assert!(matches!(poll(&mut queue, &waker), Poll::Ready(None)));
    let before = wakes(&count);
    queue.insert_at("second", Instant::now() + ms(5));
    assert_eq!(
        wakes(&count),
        before + 1,
        "emptied by a yield, then an insert_at"
    );
    // The shape of the report, for real: a consumer that waits while the queue is empty.
    let timer = real_timer();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let queue = Arc::new(std::sync::Mutex::new(DelayQueue::new(timer.handle())));
    rt.block_on(async move {
        let consumer = {
            let queue = queue.clone();
            tokio::spawn(async move {
                poll_fn(|cx| match queue.lock().unwrap().poll_expired(cx) {
                    Poll::Ready(None) => Poll::Pending,
                    other => other,
                })
                .await
            })
        };
        tokio::time::sleep(ms(20)).await;
        queue.lock().unwrap().insert("late", ms(1));
        let out = tokio::time::timeout(Duration::from_secs(5), consumer)
            .await
            .expect("woken by the insert, not hung")
            .unwrap();
        assert_eq!(out.map(Expired::into_inner), Some("late"));
    });
}

/// tokio-rs/tokio#8402: `peek` named the last inserted of two entries sharing a wheel slot
/// above level zero, not the earliest. Here: every pair of deadlines in 1..=90 ms, both
/// insertion orders, and pairs a few seconds out (far slots); `peek` names the key
/// `poll_expired` yields first.
#[test]
fn tokio_8402_peek_names_the_key_poll_expired_yields_next() {
    let (timer, _driver) = manual();
    let (_count, waker) = counter();
    let mut pairs: Vec<(u64, u64)> = vec![];
    for a in 1..=90 {
        for b in (1..=90).filter(|&b| b != a) {
            pairs.push((a, b));
        }
    }
    pairs.extend([(5_000, 5_020), (5_020, 5_000), (70, 4_000), (4_000, 70)]);
    for (a, b) in pairs {
        let mut queue = DelayQueue::new(timer.handle());
        let ka = queue.insert(a, ms(a));
        let kb = queue.insert(b, ms(b));
        let earliest = if a < b { ka } else { kb };
        assert_eq!(queue.peek(), Some(earliest), "pair ({a}, {b})");
        assert!(poll(&mut queue, &waker).is_pending());
        assert_eq!(queue.peek(), Some(earliest), "pair ({a}, {b}) after a poll");
    }
}

#[test]
fn tokio_8402_peek_agrees_with_poll_expired_end_to_end() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    for (i, at) in [130, 65, 64, 190, 100, 120, 2_000, 66]
        .into_iter()
        .enumerate()
    {
        queue.insert(i, ms(at));
    }
    let mut to = Duration::ZERO;
    while !queue.is_empty() {
        let peeked = queue.peek().expect("not empty");
        to += TICK;
        step_to(&driver, to);
        if let Poll::Ready(Some(item)) = poll(&mut queue, &waker) {
            assert_eq!(item.key(), peeked);
            for rest in drain_ready(&mut queue, &waker) {
                let _ = rest;
            }
        }
    }
}

/// Two deadlines in one tick, the later inserted first (100.6 ms, then 100.2 ms): `peek` names
/// the sooner, and `poll_expired` yields it first, whether the poll comes between the two
/// deadlines (only the sooner is due) or after both (both are, and come by deadline).
#[test]
fn peek_names_the_sooner_of_two_deadlines_in_one_tick() {
    for poll_at in [100_400, 101_000] {
        let (timer, driver) = manual();
        let mut queue = DelayQueue::new(timer.handle());
        let (_count, waker) = counter();
        let later = queue.insert("later", Duration::from_micros(100_600));
        let sooner = queue.insert("sooner", Duration::from_micros(100_200));
        assert_eq!(queue.peek(), Some(sooner), "{poll_at}: before any poll");
        assert!(poll(&mut queue, &waker).is_pending());
        step_to(&driver, Duration::from_micros(100_100));
        assert!(poll(&mut queue, &waker).is_pending());
        assert_eq!(queue.peek(), Some(sooner), "{poll_at}: nothing due yet");
        step_to(&driver, Duration::from_micros(poll_at));
        assert_eq!(queue.peek(), Some(sooner), "{poll_at}");
        let Poll::Ready(Some(first)) = poll(&mut queue, &waker) else {
            panic!("{poll_at}: sooner is due")
        };
        assert_eq!(first.key(), sooner, "{poll_at}");
        assert_eq!(queue.peek(), Some(later), "{poll_at}");
        step_to(&driver, ms(101));
        let Poll::Ready(Some(second)) = poll(&mut queue, &waker) else {
            panic!("{poll_at}: later is due")
        };
        assert_eq!(second.key(), later, "{poll_at}");
        assert_eq!(queue.peek(), None);
    }
}

/// tokio-rs/tokio#4170 (and #3590): a burst left the queue's slab at its high-water mark;
/// `shrink_to_fit` gives it back without changing any key, and a queue that empties starts
/// again from its first slot, so that `shrink_to_fit` then gives back all but what it holds.
#[test]
fn tokio_4170_shrink_to_fit_gives_back_a_burst() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    let keys: Vec<Key> = (0..100_000u32)
        .map(|i| queue.insert(i, ms(100 + u64::from(i % 1_000))))
        .collect();
    assert!(queue.capacity() >= 100_000);
    for key in &keys[10..] {
        queue.remove(key);
    }
    queue.shrink_to_fit();
    assert!(queue.capacity() <= 16, "capacity {}", queue.capacity());
    // Keys survive, and the items still expire on time.
    assert_eq!(*queue.remove(&keys[3]).get_ref(), 3);
    queue.reset(&keys[4], ms(50));
    step_to(&driver, ms(60));
    assert_eq!(drain_ready(&mut queue, &waker), vec![4]);
    step_to(&driver, ms(120));
    assert_eq!(
        drain_ready(&mut queue, &waker),
        vec![0, 1, 2, 5, 6, 7, 8, 9]
    );
    // Empty: the next burst starts from the first slot.
    assert!(queue.is_empty());
    queue.insert(0, ms(1));
    queue.shrink_to_fit();
    assert!(queue.capacity() <= 1);
}

/// `shrink_to_fit` rebuilds the queue's wheel, and items with equal deadlines keep their
/// insertion order through it, in a bucket and in a far slot (past the queue's 64 buckets). It
/// rebuilt the wheel in slab order: an item put in a slot a removal had freed came back before
/// the items inserted ahead of it.
#[test]
fn shrink_to_fit_keeps_the_order_of_equal_deadlines() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    for (base, delay) in [(0, ms(50)), (10, ms(500))] {
        let keys: Vec<Key> = (base..base + 5).map(|i| queue.insert(i, delay)).collect();
        queue.remove(&keys[1]); // its slot goes to the next insert
        queue.insert(base + 5, delay);
    }
    queue.shrink_to_fit();
    step_to(&driver, ms(60));
    assert_eq!(drain_ready(&mut queue, &waker), vec![0, 2, 3, 4, 5]);
    step_to(&driver, ms(510));
    assert_eq!(drain_ready(&mut queue, &waker), vec![10, 12, 13, 14, 15]);
}

/// A queue built with room for 1 000 items, or shrunk to 40 000, grew its first block of slots
/// by doubling past the block's size: slots no key could reach, counted in `capacity` and kept
/// through `shrink_to_fit`. Grown to 70 000 items, it holds no more room than a new queue does.
#[test]
fn room_grown_from_with_capacity_or_shrink_to_fit_is_all_usable() {
    let (timer, _driver) = manual();
    let grown = |mut queue: DelayQueue<u64>, items: u64| {
        for i in 0..items {
            queue.insert(i, ms(5));
        }
        queue
    };
    let fresh = grown(DelayQueue::new(timer.handle()), 70_000).capacity();
    let reserved = grown(DelayQueue::with_capacity(timer.handle(), 1_000), 70_000).capacity();
    assert!(reserved <= fresh, "with_capacity: {reserved} > {fresh}");
    let mut shrunk = grown(DelayQueue::new(timer.handle()), 40_000);
    shrunk.shrink_to_fit();
    let shrunk = grown(shrunk, 30_000);
    assert_eq!(shrunk.len(), 70_000);
    let shrunk = shrunk.capacity();
    assert!(shrunk <= fresh, "shrink_to_fit: {shrunk} > {fresh}");
}

/// `reserve` makes room for more items than the queue holds, as `Vec::reserve` does beyond its
/// length: the slots freed by removals are room, since inserts reuse them first. Reserving what
/// they cover grows nothing; reserving past them grows by the difference only.
#[test]
fn reserve_counts_freed_slots_as_room() {
    let (timer, _driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let keys: Vec<Key> = (0..5_000u32).map(|i| queue.insert(i, ms(100))).collect();
    for key in &keys[1_000..] {
        queue.remove(key);
    }
    let before = queue.capacity();
    queue.reserve(4_000);
    assert_eq!(
        queue.capacity(),
        before,
        "4 000 freed slots hold 4 000 more items"
    );
    queue.reserve(6_000);
    let grown = queue.capacity();
    assert!(
        grown >= 7_000,
        "room for 1 000 held and 6 000 more: {grown}"
    );
    assert!(
        grown < 5_000 + 6_000,
        "grew past the freed slots' room: {grown}"
    );
    for i in 0..6_000u32 {
        queue.insert(i, ms(100));
    }
    assert_eq!(
        queue.capacity(),
        grown,
        "the reserved room took every insert"
    );
}

/// kube-rs/kube#1772, restatedev/restate#5017: tokio-util's wheel panicked ("invalid
/// deadline") for a deadline more than 2^36 ms (about 2.2 years) ahead. Any `Duration` is
/// accepted here; one past 64-bit nanoseconds never fires.
#[test]
fn kube_1772_restate_5017_deadlines_past_2_pow_36_ms_are_accepted() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    let far = Duration::from_millis(1 << 36) + ms(5);
    let far_key = queue.insert("far", far);
    let never = queue.insert("never", Duration::MAX);
    let years = queue.insert("years", Duration::from_secs(1 << 40));
    queue.reset(&years, Duration::from_secs(u64::MAX));
    queue.insert_at(
        "instant",
        Instant::now() + Duration::from_secs(100 * 365 * 86_400),
    );
    assert!(poll(&mut queue, &waker).is_pending());
    assert_eq!(queue.peek(), Some(far_key));
    driver.advance(Duration::from_millis(1 << 36));
    assert!(poll(&mut queue, &waker).is_pending(), "never early");
    step_to(&driver, far + TICK);
    let Poll::Ready(Some(item)) = poll(&mut queue, &waker) else {
        panic!("due after 2^36 ms")
    };
    assert_eq!(item.into_inner(), "far");
    assert!(queue.deadline(&never) > Instant::now());
    assert_eq!(queue.remove(&never).into_inner(), "never");
    assert_eq!(queue.len(), 2);
}

/// A deadline past 64-bit nanoseconds (`Duration::MAX`, an `Instant` centuries ahead) is
/// stored as the clock's last nanosecond; a manual clock moved to its end reaches it, and the
/// item must still never fire, as the timer's own timeouts and sleeps do not.
#[test]
fn an_item_due_past_584_years_never_fires_even_with_the_clock_at_its_end() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    queue.insert("never", Duration::MAX);
    queue.insert_at("centuries", Instant::now() + Duration::from_secs(1 << 40));
    let reset = queue.insert("reset", ms(3));
    queue.reset(&reset, Duration::MAX);
    queue.insert("due", ms(2));
    driver.advance(Duration::MAX);
    assert_eq!(drain_ready(&mut queue, &waker), ["due"]);
    assert!(poll(&mut queue, &waker).is_pending(), "never fires");
    assert_eq!(queue.len(), 3);
}

/// An insert into an empty queue wakes the task that saw it empty whatever the item's
/// deadline: one past 584 years too (which never fires, but the queue holds it). With nothing
/// armed, the queue compared that deadline with an armed tick of `u64::MAX` and woke nobody.
#[test]
fn an_insert_due_past_584_years_into_an_empty_queue_wakes_the_task_that_saw_it_empty() {
    let (timer, _driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (count, waker) = counter();
    assert!(matches!(poll(&mut queue, &waker), Poll::Ready(None)));
    queue.insert("never", Duration::MAX);
    assert_eq!(wakes(&count), 1, "the insert into the empty queue wakes");
    assert!(poll(&mut queue, &waker).is_pending(), "never fires");
    assert_eq!(queue.len(), 1);
}

/// Drop counts of a set of [`Bomb`]s, and which of them goes off.
struct Fuse {
    drops: Vec<AtomicUsize>,
    armed: AtomicUsize,
}

impl Fuse {
    /// Bomb `id`'s next drop panics (once).
    fn arm(&self, id: usize) {
        self.armed.store(id, SeqCst);
    }

    fn drop_counts(&self) -> Vec<usize> {
        self.drops.iter().map(|d| d.load(SeqCst)).collect()
    }
}

/// A value whose drops are counted, and that panics in its drop when its fuse is armed for
/// it.
struct Bomb {
    id: usize,
    fuse: Arc<Fuse>,
}

impl Drop for Bomb {
    fn drop(&mut self) {
        self.fuse.drops[self.id].fetch_add(1, SeqCst);
        let unarmed = usize::MAX;
        if (self.fuse.armed)
            .compare_exchange(self.id, unarmed, SeqCst, SeqCst)
            .is_ok()
        {
            panic!("bomb {} goes off", self.id);
        }
    }
}

/// Bombs `0..n`, none armed, and their fuse.
fn bombs(n: usize) -> (Vec<Bomb>, Arc<Fuse>) {
    let fuse = Arc::new(Fuse {
        drops: (0..n).map(|_| AtomicUsize::new(0)).collect(),
        armed: AtomicUsize::new(usize::MAX),
    });
    let bombs = (0..n)
        .map(|id| Bomb {
            id,
            fuse: fuse.clone(),
        })
        .collect();
    (bombs, fuse)
}

fn catch<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
}

/// A value's drop panics inside `clear`, with items waiting in the wheel and expired ones not
/// yet yielded: every value is dropped once, and the queue is empty and whole after the
/// unwind (no key names anything, nothing is yielded, the waiting task is woken, its `Sleep`
/// is cancelled, and new items come and go as usual).
#[test]
fn a_value_panicking_in_clear_leaves_the_queue_empty_and_whole() {
    for waiting in [false, true] {
        let (timer, driver) = manual();
        let mut queue = DelayQueue::new(timer.handle());
        let (count, waker) = counter();
        let (values, fuse) = bombs(5);
        let keys: Vec<Key> = values
            .into_iter()
            .zip([5, 5, 5, 5, 50])
            .map(|(bomb, at)| queue.insert(bomb, ms(at)))
            .collect();
        if waiting {
            drop(queue.remove(&keys[0]));
            drop(queue.remove(&keys[1]));
            assert!(poll(&mut queue, &waker).is_pending());
        } else {
            // 0 is yielded; 1, 2 and 3 wait to be, 4 waits in the wheel.
            step_to(&driver, ms(6));
            let Poll::Ready(Some(first)) = poll(&mut queue, &waker) else {
                panic!("due")
            };
            assert_eq!(first.key(), keys[0]);
            drop(first);
        }
        fuse.arm(2);
        assert!(catch(|| queue.clear()).is_err(), "bomb 2 went off");
        assert_eq!(fuse.drop_counts(), vec![1; 5], "each value dropped once");
        assert_eq!((queue.len(), queue.is_empty()), (0, true));
        assert_eq!(queue.peek(), None);
        assert!(keys.iter().all(|key| queue.try_remove(key).is_none()));
        assert_eq!(
            wakes(&count),
            usize::from(waiting),
            "the waiting task is woken"
        );
        assert!(matches!(poll(&mut queue, &waker), Poll::Ready(None)));
        driver.advance(TICK);
        assert_eq!(timer.pending_timeouts(), 0, "its Sleep is cancelled");
        let (values, fuse) = bombs(2);
        let new: Vec<Key> = values
            .into_iter()
            .map(|bomb| queue.insert(bomb, ms(3)))
            .collect();
        assert!(new.iter().all(|key| !keys.contains(key)));
        assert!(poll(&mut queue, &waker).is_pending());
        step_to(&driver, driver.now() + ms(4));
        let got: Vec<usize> = drain_ready(&mut queue, &waker)
            .into_iter()
            .map(|bomb| bomb.id)
            .collect();
        assert_eq!(got, vec![0, 1]);
        assert_eq!(fuse.drop_counts(), vec![1, 1]);
        assert!(queue.is_empty());
    }
}

/// A value's drop panics when the caller drops what `remove`, `try_remove` or `poll_expired`
/// handed out, and inside the queue's own drop; `reset` and `shrink_to_fit` drop no value.
/// After each unwind the queue holds the rest and yields them once, every value is dropped
/// exactly once, no key gone names another value, and a queue dropped mid-panic cancels its
/// `Sleep`.
#[test]
fn a_value_panicking_in_its_drop_never_runs_twice_or_leaves_a_stale_key() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    let (values, fuse) = bombs(7);
    let mut values = values.into_iter();
    let keys: Vec<Key> = values
        .by_ref()
        .take(6)
        .map(|bomb| queue.insert(bomb, ms(10)))
        .collect();
    // `remove`: the caller drops the value.
    let removed = queue.remove(&keys[0]);
    fuse.arm(0);
    assert!(catch(move || drop(removed)).is_err());
    // A value yielded, then `try_remove` of an item expired and not yet yielded.
    step_to(&driver, ms(11));
    let Poll::Ready(Some(yielded)) = poll(&mut queue, &waker) else {
        panic!("due")
    };
    assert_eq!(yielded.key(), keys[1]);
    fuse.arm(1);
    assert!(catch(move || drop(yielded)).is_err());
    let taken = queue
        .try_remove(&keys[2])
        .expect("expired, not yet yielded");
    fuse.arm(2);
    assert!(catch(move || drop(taken)).is_err());
    assert_eq!(fuse.drop_counts(), vec![1, 1, 1, 0, 0, 0, 0]);
    // `reset` and `shrink_to_fit` move values, and drop none.
    queue.reset(&keys[3], ms(20));
    queue.shrink_to_fit();
    assert_eq!(fuse.drop_counts(), vec![1, 1, 1, 0, 0, 0, 0]);
    assert_eq!(queue.len(), 3);
    for key in &keys[..3] {
        assert!(queue.try_remove(key).is_none(), "a gone key names nothing");
    }
    let fresh = queue.insert(values.next().expect("bomb 6"), ms(5));
    assert!(!keys.contains(&fresh));
    let order: Vec<Key> = std::iter::from_fn(|| {
        let Poll::Ready(Some(item)) = poll(&mut queue, &waker) else {
            return None;
        };
        Some(item.key())
    })
    .collect();
    assert_eq!(order, vec![keys[4], keys[5]], "the rest of the first batch");
    assert_eq!(fuse.drop_counts(), vec![1, 1, 1, 0, 1, 1, 0]);
    assert!(poll(&mut queue, &waker).is_pending());
    // The queue's own drop: one value goes off, the others are dropped all the same, and the
    // queue's `Sleep` is cancelled.
    assert_eq!(queue.len(), 2);
    fuse.arm(6);
    assert!(catch(move || drop(queue)).is_err());
    assert_eq!(fuse.drop_counts(), vec![1; 7]);
    driver.advance(TICK);
    assert_eq!(timer.pending_timeouts(), 0);
}

/// `stop()` under a queue: what was due comes out, then the wait for the rest panics (the
/// queue formerly ended its stream with them inside, silently), and the items stay.
#[test]
fn a_stopped_timer_yields_what_is_due_then_panics_while_items_wait() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (count, waker) = counter();
    queue.insert("due", ms(5));
    queue.insert("later", ms(500));
    assert!(poll(&mut queue, &waker).is_pending());
    step_to(&driver, ms(10));
    drop(timer.stop());
    assert!(wakes(&count) >= 1);
    let Poll::Ready(Some(due)) = poll(&mut queue, &waker) else {
        panic!("what was due comes out first")
    };
    assert_eq!(due.into_inner(), "due");
    let waiting = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = poll(&mut queue, &waker);
    }));
    assert!(waiting.is_err(), "no silent end of the stream");
    assert_eq!(queue.len(), 1, "the rest stays in the queue");
}

#[test]
fn expired_items_carry_their_key_and_deadline() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    let key = queue.insert(9, ms(20));
    let deadline = queue.deadline(&key);
    step_to(&driver, ms(25));
    let Poll::Ready(Some(mut item)) = poll(&mut queue, &waker) else {
        panic!("due")
    };
    *item.get_mut() += 1;
    assert_eq!(item.key(), key);
    // The manual clock's instants count from the call: within a few ms of the first reading.
    assert!(item.deadline() <= deadline + ms(100));
    assert_eq!(item.into_inner(), 10);
}

/// Inserts in a burst go into the wheel before they read the clock, which then checks them:
/// one whose guessed deadline would be early (the clock moved mid-burst) moves to its own.
#[test]
fn an_insert_after_the_clock_moved_mid_burst_is_not_early() {
    let (timer, driver) = manual();
    let mut queue = DelayQueue::new(timer.handle());
    let (_count, waker) = counter();
    queue.insert("a", ms(10));
    queue.insert("b", ms(10)); // in a burst: the clock has not moved
    driver.advance(Duration::from_micros(2_500));
    queue.insert("c", ms(10)); // guessed at 10 ms, due at 12.5
    queue.insert("d", ms(10));
    assert!(poll(&mut queue, &waker).is_pending());
    step_to(&driver, ms(10));
    assert_eq!(drain_ready(&mut queue, &waker), vec!["a", "b"]);
    step_to(&driver, Duration::from_micros(12_499));
    assert!(
        drain_ready(&mut queue, &waker).is_empty(),
        "c and d are due at 12.5 ms"
    );
    step_to(&driver, Duration::from_micros(12_500));
    assert_eq!(drain_ready(&mut queue, &waker), vec!["c", "d"]);
}

/// Inserts in a tight loop on the real clock (a burst) get deadlines never before `timeout`
/// from the call and at most microseconds after it, and come back no earlier.
#[test]
fn a_burst_of_inserts_is_never_early() {
    let timer = real_timer();
    let mut queue = DelayQueue::new(timer.handle());
    let mut due = vec![];
    for i in 0..5_000u64 {
        let timeout = Duration::from_micros((i * 7_919) % 20_000);
        let before = Instant::now();
        let key = queue.insert(i, timeout);
        let after = Instant::now();
        let deadline = queue.deadline(&key);
        assert!(deadline >= before + timeout, "item {i} early");
        let late = deadline.saturating_duration_since(after + timeout);
        assert!(late < ms(1), "item {i} {late:?} late");
        due.push(before + timeout);
    }
    futures::executor::block_on(async {
        let mut n = 0;
        while let Some(item) = poll_fn(|cx| queue.poll_expired(cx)).await {
            let i = item.into_inner();
            assert!(Instant::now() >= due[i as usize], "item {i} yielded early");
            n += 1;
        }
        assert_eq!(n, 5_000);
    });
}

/// A real timer (1 ms tick) under an executor: `n` items due over 40 ms, each yielded once,
/// never before its deadline, in deadline order up to the tick.
async fn expire_for_real(timer: &HashedWheelTimer) {
    let mut queue = DelayQueue::new(timer.handle());
    let start = Instant::now();
    let mut due = vec![];
    for i in 0..200u64 {
        let at = start + Duration::from_micros((i * 7_919) % 40_000);
        queue.insert_at(i, at);
        due.push(at);
    }
    let mut seen = HashSet::new();
    let mut last_due = start;
    while let Some(item) = poll_fn(|cx| queue.poll_expired(cx)).await {
        let now = Instant::now();
        let i = item.into_inner();
        let at = due[i as usize];
        assert!(now >= at, "item {i} early");
        assert!(at + TICK >= last_due, "order holds to the tick");
        last_due = last_due.max(at);
        assert!(seen.insert(i));
    }
    assert_eq!(seen.len(), 200);
}

fn real_timer() -> HashedWheelTimer {
    HashedWheelTimer::new(TICK, 64)
}

#[test]
fn under_tokio_current_thread() {
    let timer = real_timer();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), expire_for_real(&timer))
            .await
            .expect("bounded")
    });
}

#[test]
fn under_tokio_multi_thread() {
    let timer = real_timer();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let handle = timer.handle();
    rt.block_on(async move {
        let task = tokio::spawn(async move {
            let timer = handle;
            let mut queue = DelayQueue::new(timer);
            for i in 0..50u64 {
                queue.insert(i, Duration::from_micros(i * 300));
            }
            let mut n = 0;
            while poll_fn(|cx| queue.poll_expired(cx)).await.is_some() {
                n += 1;
            }
            n
        });
        let n = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("bounded")
            .unwrap();
        assert_eq!(n, 50);
    });
    drop(timer);
}

#[test]
fn under_futures_block_on() {
    let timer = real_timer();
    futures::executor::block_on(expire_for_real(&timer));
}

#[test]
fn under_smol() {
    let timer = real_timer();
    smol::block_on(expire_for_real(&timer));
}

/// Another task removes the last item while the consumer waits (the shape of #6751's report,
/// for real): the consumer wakes and sees the end.
#[test]
fn a_remove_from_another_task_ends_the_wait_under_tokio() {
    let timer = real_timer();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let handle = timer.handle();
    rt.block_on(async move {
        let mut queue = DelayQueue::new(handle);
        let key = queue.insert("foo", Duration::from_secs(100));
        let queue = Arc::new(std::sync::Mutex::new(queue));
        let consumer = {
            let queue = queue.clone();
            tokio::spawn(async move { poll_fn(|cx| queue.lock().unwrap().poll_expired(cx)).await })
        };
        tokio::time::sleep(ms(20)).await;
        queue.lock().unwrap().remove(&key);
        let out = tokio::time::timeout(Duration::from_secs(5), consumer)
            .await
            .expect("woken, not hung")
            .unwrap();
        assert!(out.is_none());
    });
}

#[cfg(feature = "stream")]
#[test]
fn the_stream_yields_then_ends_when_empty() {
    use futures::StreamExt;
    let timer = real_timer();
    let mut queue = DelayQueue::new(timer.handle());
    for i in 0..5 {
        queue.insert(i, ms(5 - i));
    }
    let got: Vec<u64> =
        futures::executor::block_on((&mut queue).map(Expired::into_inner).collect::<Vec<_>>());
    assert_eq!(got, vec![4, 3, 2, 1, 0]);
    queue.insert(9, ms(1));
    assert_eq!(
        futures::executor::block_on(queue.next()).map(Expired::into_inner),
        Some(9)
    );
}

#[test]
fn a_queue_is_send_and_sync_and_its_types_debug() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<DelayQueue<String>>();
    let timer = HashedWheelTimer::default();
    let mut queue = DelayQueue::new(timer.handle());
    let key = queue.insert("x", Duration::from_secs(1));
    assert!(format!("{queue:?}").contains("len: 1"));
    assert!(format!("{key:?}").contains("Key"));
}

/// Room for more items than any queue holds is refused at once with a panic (tokio-util's
/// "capacity overflow"), not by the allocator aborting the process page after page.
#[test]
fn room_for_more_than_a_queue_holds_is_a_capacity_overflow_panic() {
    let (timer, _driver) = manual();
    let overflow = |f: &mut dyn FnMut()| {
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
        let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("capacity overflow"), "{msg:?}");
    };
    overflow(&mut || drop(DelayQueue::<u64>::with_capacity(timer.handle(), usize::MAX)));
    let mut queue: DelayQueue<u64> = DelayQueue::new(timer.handle());
    queue.insert(1, ms(5));
    overflow(&mut || queue.reserve(usize::MAX));
    overflow(&mut || queue.reserve((1 << 27) - 1));
    queue.reserve(1000);
    assert!(queue.capacity() >= 1001);
    assert_eq!(queue.len(), 1);
}

/// A timer at its pending limit still gives a waiting queue its wake-up (which the limit does
/// not refuse): the task waits for the item's tick instead of polling again at once.
#[test]
fn a_queue_on_a_timer_at_its_pending_limit_waits_without_spinning() {
    let (timer, driver) = HashedWheelTimer::builder()
        .tick_duration(ms(1))
        .max_pending_timeouts(1)
        .build_manual()
        .unwrap();
    let _full = timer
        .new_timeout(|_: &hashed_timer_wheel::Timeout| {}, ms(3_600_000))
        .unwrap();
    let mut queue = DelayQueue::new(timer.handle());
    queue.insert("x", ms(50));
    let (counter, waker) = counter();
    assert!(poll(&mut queue, &waker).is_pending());
    assert_eq!(wakes(&counter), 0, "no wake-up at once: the queue waits");
    assert_eq!(
        timer.pending_timeouts(),
        2,
        "the queue's wake-up counts, past the limit"
    );
    step_to(&driver, ms(51));
    assert_eq!(wakes(&counter), 1);
    assert!(matches!(poll(&mut queue, &waker), Poll::Ready(Some(item)) if *item.get_ref() == "x"));
    assert_eq!(timer.pending_timeouts(), 1);
}
