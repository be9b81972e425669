//! A lone future a `Drive`'s `Ticker` expires (`Runner::Ticker`, `src/engine/worker/mod.rs`).
//!
//! As the runtime's timer ends the `Drive`'s sleep, the `Ticker` runs a turn; a turn that
//! expires exactly one future keeps its waker, wakes the `Drive`'s task instead, and the next
//! turn, whoever runs it, wakes the future first. If no `Drive`'s turn is to come (its task's
//! waker panicked, or the `Drive` went), the `Ticker` runs a second turn that wakes it.
//!
//! Each model holds the clock: a sleep due at 1.5 ms is moved into the wheel by the `Drive`'s
//! turn at 1 ms, the clock moves to 1.6 ms, and one thread calls the `Ticker`, as the runtime's
//! timer would, while the main thread polls the `Drive` (the runtime polls its task, then again
//! once the `Ticker` woke it) or drops it. The worker thread watches throughout, and runs turns
//! once the `Drive` is gone. Then the main thread waits for the sleep's wake-up: a lost one is a
//! loom deadlock. Exactly one wake-up, and the sleep is ready.
#![cfg(loom)]

use hashed_timer_wheel::loom_hooks;
use loom::thread;
use loom_tests::{check_capped, counting, threaded_timer, TICK};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// What the main thread does with the `Drive` while the `Ticker` runs.
#[derive(Clone, Copy)]
enum Meanwhile {
    /// Polls it, and again once the `Ticker` is done (it woke the task).
    Poll,
    /// Drops it.
    Drop,
}

/// Polls `future` with `waker`: it is pending.
fn pending<F: Future>(future: Pin<&mut F>, waker: &Waker) {
    assert!(future.poll(&mut Context::from_waker(waker)).is_pending());
}

fn model(meanwhile: Meanwhile) {
    loom_hooks::hold_clock();
    let timer = threaded_timer(0);
    let (sleep_wakes, sleep_waker) = counting();
    let mut sleep = Box::pin(timer.sleep(TICK + TICK / 2));
    let mut cx = Context::from_waker(&sleep_waker);
    assert!(sleep.as_mut().poll(&mut cx).is_pending());

    // The runtime's sleep: it never ends by itself, and keeps its waker (the `Ticker`).
    let stash: Arc<Mutex<Option<Waker>>> = Arc::default();
    let s = Arc::clone(&stash);
    let mut drive = Box::pin(timer.drive(move |_| {
        let s = Arc::clone(&s);
        std::future::poll_fn(move |cx| {
            *s.lock().unwrap() = Some(cx.waker().clone());
            Poll::<()>::Pending
        })
    }));
    let (_task, task_waker) = counting();
    pending(drive.as_mut(), &task_waker);
    // Tick 0 ends: its turn moves the sleep into the wheel.
    loom_hooks::advance_clock(&timer, TICK);
    pending(drive.as_mut(), &task_waker);
    loom_hooks::advance_clock(&timer, TICK + TICK * 6 / 10);

    let ticker = stash
        .lock()
        .unwrap()
        .clone()
        .expect("the Drive armed a sleep");
    let runtime = thread::spawn(move || ticker.wake());
    let kept = match meanwhile {
        Meanwhile::Poll => {
            pending(drive.as_mut(), &task_waker);
            Some(drive)
        }
        Meanwhile::Drop => {
            drop(drive);
            None
        }
    };
    runtime.join().unwrap();
    if let Some(mut drive) = kept {
        pending(drive.as_mut(), &task_waker);
    }
    sleep_wakes.woken.wait();
    assert_eq!(sleep_wakes.wakes.load(SeqCst), 1, "woken once");
    assert!(sleep.as_mut().poll(&mut cx).is_ready());
    assert!(timer.stop().unwrap().is_empty());
}

// Capped at 2 preemptions, as `drive.rs`'s model of three threads (main, the runtime's timer,
// the worker thread).
#[test]
fn a_lone_future_is_woken_by_the_drives_next_poll() {
    check_capped("a_lone_future_is_woken_by_the_drives_next_poll", 2, || {
        model(Meanwhile::Poll)
    });
}

#[test]
fn a_lone_future_is_woken_when_the_drive_goes() {
    check_capped("a_lone_future_is_woken_when_the_drive_goes", 2, || {
        model(Meanwhile::Drop)
    });
}
