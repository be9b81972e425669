//! A `Sleep`'s waker hand-over (`src/timer/sleep.rs`) racing the end of its timeout.
//!
//! A `poll` stores its waker in the cell of its timeout's slot (cloned outside the cell's lock,
//! swapped in under it) and then reads the slot's state. Whoever ends the slot (the worker's
//! expiry walk, or `stop()`) moves the state first, then takes the waker under the cell's lock
//! and wakes it. A `reset` cancels the old slot and moves the waker to the new one; the
//! future's drop cancels its slot and takes the waker back. Each model
//! polls a `Sleep` on one thread, with a waker that counts its wake-ups, while the main thread
//! ends its timeout (a tick of the manual driver, or `stop()`), and checks:
//!
//! - no lost wake-up: a `poll` that returned `Pending` is woken, unless the future's own drop
//!   cancelled the timeout first (where the model waits for the wake-up it parks, so a lost
//!   one is a loom deadlock), and the re-poll is `Ready`;
//! - no double wake: at most one wake-up in all;
//! - the outcome: `Ok(())` for an expiry, `Err(Stopped)` for a stop;
//! - `pending_timeouts()` back to 0;
//! - the waker is not kept: once the timeout has ended and the poller has dropped its `Waker`,
//!   the strong count of the waker's `Arc` is 1 (the cell holds no clone), while the `Sleep`,
//!   and so its cell, may still be alive.
//!
//! The timer is a manual one: the worker's turn runs on the thread that calls
//! `ManualDriver::advance`.
#![cfg(loom)]

use hashed_timer_wheel::{HashedWheelTimer, Sleep, TimerError};
use loom::thread;
use loom_tests::{check, counting, manual_timer, Counting, TICK};
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// A `Sleep` dropped normally, but leaked when the model fails: its drop cancels its timeout,
/// which calls into loom again while loom's failure unwinds, and that double panic would
/// abort the whole test binary instead of reporting (as the harness's `Owned` for the timer).
struct Held(Option<Sleep>);

impl Held {
    fn new(sleep: Sleep) -> Held {
        Held(Some(sleep))
    }
}

impl Deref for Held {
    type Target = Sleep;
    fn deref(&self) -> &Sleep {
        self.0.as_ref().expect("present until dropped")
    }
}

impl DerefMut for Held {
    fn deref_mut(&mut self) -> &mut Sleep {
        self.0.as_mut().expect("present until dropped")
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if std::thread::panicking() {
            std::mem::forget(self.0.take());
        }
    }
}

fn poll(sleep: &mut Sleep, waker: &Waker) -> Poll<Result<(), TimerError>> {
    Pin::new(sleep).poll(&mut Context::from_waker(waker))
}

/// The poller's side: what the first poll returned, and the waker's count.
struct Polled {
    first: Poll<Result<(), TimerError>>,
    counting: Arc<Counting>,
}

impl Polled {
    fn wakes(&self) -> usize {
        self.counting.wakes.load(SeqCst)
    }

    /// The waker is not kept: only the model's own reference is left. Checked once the
    /// timeout has ended, while the `Sleep` (and so its waker cell) may still be alive:
    /// whoever ends the timeout empties the cell, or the future's own cancel does; not whoever
    /// frees the cell later.
    fn assert_waker_released(&self) {
        assert_eq!(
            Arc::strong_count(&self.counting),
            1,
            "a clone of the waker is still held (first poll {:?}, {} wake-ups)",
            self.first,
            self.wakes()
        );
    }

    /// The outcome for a task that waits on the sleep: a `Pending` poll was woken exactly once
    /// (the waker was in the slot when the end took it); a `Ready` one returned `expected`,
    /// and the end may have found the waker that poll stored meanwhile (at most one wake-up).
    fn assert_outcome(&self, expected: &Result<(), TimerError>) {
        let wakes = self.wakes();
        match &self.first {
            Poll::Pending => assert_eq!(wakes, 1, "pending, then {wakes} wake-ups"),
            Poll::Ready(r) => {
                assert_eq!(r, expected);
                assert!(wakes <= 1, "ready, and {wakes} wake-ups");
            }
        }
    }
}

/// Polls `sleep`; if `Pending`, waits (without spinning) until woken and polls again, which
/// must be `Ready(expected)`.
fn poll_until_woken(
    mut sleep: Held,
    expected: Result<(), TimerError>,
) -> impl FnOnce() -> (Held, Polled) {
    move || {
        let (counting, waker) = counting();
        let first = poll(&mut sleep, &waker);
        if first.is_pending() {
            counting.woken.wait(); // a lost wake-up: a loom deadlock
            assert_eq!(poll(&mut sleep, &waker), Poll::Ready(expected));
        }
        (sleep, Polled { first, counting })
    }
}

fn expired_and_cancelled(timer: &HashedWheelTimer) -> (u64, u64) {
    let stats = timer.stats();
    (stats.expired, stats.cancelled)
}

#[test]
fn sleep_poll_races_expiry() {
    check("sleep_poll_races_expiry", || {
        let (timer, driver) = manual_timer(0);
        let sleep = Held::new(timer.sleep(TICK)); // due at 1 ms: expires in tick 1
        let poller = thread::spawn(poll_until_woken(sleep, Ok(())));
        driver.advance(TICK * 2); // ticks 0 and 1: transfer, then expiry and wake-up
        let (sleep, polled) = poller.join().unwrap();

        polled.assert_outcome(&Ok(()));
        assert!(sleep.is_elapsed());
        assert_eq!(expired_and_cancelled(&timer), (1, 0));
        polled.assert_waker_released();
        drop(sleep); // expired: the drop's cancel loses and takes nothing
        assert_eq!(timer.pending_timeouts(), 0);
    });
}

#[test]
fn sleep_drop_races_expiry() {
    check("sleep_drop_races_expiry", || {
        let (timer, driver) = manual_timer(0);
        let mut sleep = Held::new(timer.sleep(TICK));
        let poller = thread::spawn(move || {
            let (counting, waker) = counting();
            let first = poll(&mut sleep, &waker);
            drop(sleep); // cancels, unless expired, and then takes its waker back
            Polled { first, counting }
        });
        driver.advance(TICK * 2);
        let polled = poller.join().unwrap();
        // Ended, and the future gone: the cell is empty even if the worker has not processed
        // the cancellation yet (and so still holds the task, and the cell).
        polled.assert_waker_released();
        driver.advance(TICK); // processes a cancellation that landed in the wheel

        // Expired, or cancelled by the drop: counted once either way.
        let (expired, cancelled) = expired_and_cancelled(&timer);
        assert_eq!(
            expired + cancelled,
            1,
            "expired {expired}, cancelled {cancelled}"
        );
        let wakes = polled.wakes();
        match &polled.first {
            // Stored; then the expiry took and woke it, or the drop took it back (whether its
            // cancel won or lost): nobody waits on a dropped future. Never woken if cancelled.
            Poll::Pending => assert!(wakes as u64 <= expired, "pending, then {wakes} wake-ups"),
            Poll::Ready(r) => {
                assert_eq!(*r, Ok(()));
                assert_eq!(expired, 1);
                assert!(wakes <= 1, "ready, and {wakes} wake-ups");
            }
        }
        assert_eq!(timer.pending_timeouts(), 0);
    });
}

/// `stop()` racing a poll of a sleep still queued (`in_wheel` false) or transferred into the
/// wheel by a tick before the race.
fn sleep_poll_races_stop_model(in_wheel: bool) {
    let (timer, driver) = manual_timer(0);
    let sleep = Held::new(timer.sleep(TICK * 2)); // due at 2 ms: never expires here
    if in_wheel {
        driver.advance(TICK); // tick 0 transfers it
        assert_eq!(timer.pending_timeouts(), 1);
    }
    let poller = thread::spawn(poll_until_woken(sleep, Err(TimerError::Stopped)));
    let returned = timer.stop().unwrap();
    let (sleep, polled) = poller.join().unwrap(); // a lost wake-up deadlocks here

    assert!(returned.is_empty(), "stop() returned a future's timeout");
    polled.assert_outcome(&Err(TimerError::Stopped));
    assert!(!sleep.is_elapsed());
    polled.assert_waker_released();
    drop(sleep);
    assert_eq!(timer.pending_timeouts(), 0);
}

#[test]
fn sleep_poll_races_stop() {
    check("sleep_poll_races_stop", || {
        sleep_poll_races_stop_model(false)
    });
}

#[test]
fn sleep_poll_races_stop_in_wheel() {
    check("sleep_poll_races_stop_in_wheel", || {
        sleep_poll_races_stop_model(true)
    });
}

#[test]
fn sleep_reset_races_expiry() {
    check("sleep_reset_races_expiry", || {
        let (timer, driver) = manual_timer(0);
        let mut sleep = Held::new(timer.sleep(TICK));
        let poller = thread::spawn(move || {
            let (counting, waker) = counting();
            let first = poll(&mut sleep, &waker);
            // Due at 3 ms past the clock (at most 5 ms): after the race's advance, which
            // ends at 2 ms. The waker moves to the new timeout unless the old one's expiry
            // took it first.
            sleep.reset_after(TICK * 3);
            (sleep, Polled { first, counting })
        });
        driver.advance(TICK * 2); // the old timeout's tick
        let (mut sleep, polled) = poller.join().unwrap();
        assert!(!sleep.is_elapsed(), "the new timeout expired early");
        // The waker is in one slot at most (the new timeout's), not left in the old one too.
        assert!(
            Arc::strong_count(&polled.counting) <= 2,
            "the waker kept twice"
        );
        driver.advance_to(TICK * 8); // the new timeout's tick, and the old one's cancellation

        // One wake-up for a waiting task: from the old timeout's expiry (the reset then found
        // the slot empty), or from the new one's (the reset moved the waker there).
        polled.assert_outcome(&Ok(()));
        let (expired, cancelled) = expired_and_cancelled(&timer);
        assert_eq!(
            expired + cancelled,
            2,
            "expired {expired}, cancelled {cancelled}"
        );
        assert!(expired >= 1, "the new timeout did not expire");
        let waker = Waker::noop();
        assert_eq!(poll(&mut sleep, waker), Poll::Ready(Ok(())));
        polled.assert_waker_released();
        drop(sleep);
        assert_eq!(timer.pending_timeouts(), 0);
    });
}
