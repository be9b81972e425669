//! The new core's protocols (`hashed_timer_wheel::next`): a producer against the worker's turn,
//! `cancel()` against expiry, `stop()` against `new_timeout` with the real worker thread. Each
//! accepted timeout ends exactly once: it ran, its `cancel()` won, or `stop()` returned it.
#![cfg(loom)]

use hashed_timer_wheel::next::{Boxed, Timer};
use hashed_timer_wheel::TimerError;
use loom::thread;
use loom_tests::check;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

const TICK: Duration = Duration::from_millis(1);

fn counting(ran: &Arc<AtomicUsize>) -> Boxed {
    let ran = Arc::clone(ran);
    Boxed::new(move |_| {
        ran.fetch_add(1, SeqCst);
    })
}

#[test]
fn next_new_timeout_vs_turn() {
    check("next_new_timeout_vs_turn", || {
        let timer = Arc::new(Timer::manual(TICK, 4, None));
        let ran = Arc::new(AtomicUsize::new(0));
        let producer = {
            let (timer, ran) = (Arc::clone(&timer), Arc::clone(&ran));
            thread::spawn(move || timer.new_timeout(counting(&ran), Duration::ZERO).unwrap())
        };
        timer.advance_to(TICK);
        let timeout = producer.join().unwrap();
        timer.advance_to(TICK * 2);
        assert_eq!(ran.load(SeqCst), 1);
        assert!(timeout.is_expired());
        assert_eq!(timer.pending_timeouts(), 0);
    });
}

#[test]
fn next_cancel_vs_expire() {
    check("next_cancel_vs_expire", || {
        let timer = Arc::new(Timer::manual(TICK, 4, Some(1)));
        let ran = Arc::new(AtomicUsize::new(0));
        let timeout = timer.new_timeout(counting(&ran), Duration::ZERO).unwrap();
        let canceller = {
            let timeout = timeout.clone();
            thread::spawn(move || timeout.cancel())
        };
        timer.advance_to(TICK);
        let cancelled = canceller.join().unwrap();
        timer.advance_to(TICK * 2);
        assert_eq!(usize::from(!cancelled), ran.load(SeqCst));
        assert_eq!(cancelled, timeout.is_cancelled());
        assert_eq!(timer.pending_timeouts(), 0);
        // The limit's count went back too.
        timer.new_timeout(counting(&ran), Duration::ZERO).unwrap();
    });
}

#[test]
fn next_stop_vs_new_timeout_with_worker_thread() {
    check("next_stop_vs_new_timeout_with_worker_thread", || {
        let timer = Arc::new(Timer::new(TICK, 4));
        let ran = Arc::new(AtomicUsize::new(0));
        // Starts the worker thread.
        let first = timer
            .new_timeout(counting(&ran), Duration::from_secs(60))
            .unwrap();
        let producer = {
            let (timer, ran) = (Arc::clone(&timer), Arc::clone(&ran));
            thread::spawn(move || timer.new_timeout(counting(&ran), Duration::from_secs(60)))
        };
        let returned = timer.stop().unwrap();
        let result = producer.join().unwrap();
        assert!(returned.contains(&first));
        match result {
            Ok(t) => assert!(returned.contains(&t) && t.is_cancelled()),
            Err(e) => assert_eq!(e, TimerError::Stopped),
        }
        assert_eq!(ran.load(SeqCst), 0);
        assert_eq!(timer.pending_timeouts(), 0);
    });
}

#[test]
fn next_pending_limit_under_racing_producers() {
    check("next_pending_limit_under_racing_producers", || {
        let timer = Arc::new(Timer::manual(TICK, 4, Some(1)));
        let ran = Arc::new(AtomicUsize::new(0));
        let producers: Vec<_> = (0..2)
            .map(|_| {
                let (timer, ran) = (Arc::clone(&timer), Arc::clone(&ran));
                thread::spawn(move || timer.new_timeout(counting(&ran), Duration::ZERO).is_ok())
            })
            .collect();
        let accepted = producers.into_iter().map(|p| p.join().unwrap());
        assert_eq!(accepted.filter(|&ok| ok).count(), 1);
        assert_eq!(timer.pending_timeouts(), 1);
        timer.advance_to(TICK);
        assert_eq!(ran.load(SeqCst), 1);
        assert_eq!(timer.pending_timeouts(), 0);
    });
}

#[test]
fn next_two_first_new_timeouts_start_one_worker() {
    check("next_two_first_new_timeouts_start_one_worker", || {
        let before = hashed_timer_wheel::loom_hooks::threads_spawned();
        let timer = Arc::new(Timer::<Boxed>::new(TICK, 4));
        let ran = Arc::new(AtomicUsize::new(0));
        let other = {
            let (timer, ran) = (Arc::clone(&timer), Arc::clone(&ran));
            thread::spawn(move || {
                timer
                    .new_timeout(counting(&ran), Duration::from_secs(60))
                    .unwrap()
            })
        };
        let mine = timer
            .new_timeout(counting(&ran), Duration::from_secs(60))
            .unwrap();
        let theirs = other.join().unwrap();
        assert_eq!(
            hashed_timer_wheel::loom_hooks::threads_spawned() - before,
            1
        );
        let returned = timer.stop().unwrap();
        assert!(returned.contains(&mine) && returned.contains(&theirs));
    });
}

#[test]
fn next_stop_vs_cancel() {
    check("next_stop_vs_cancel", || {
        let timer = Arc::new(Timer::manual(TICK, 4, None));
        let ran = Arc::new(AtomicUsize::new(0));
        let placed = timer.new_timeout(counting(&ran), TICK * 10).unwrap();
        timer.advance_to(TICK);
        let queued = timer.new_timeout(counting(&ran), TICK * 10).unwrap();
        let canceller = {
            let (placed, queued) = (placed.clone(), queued.clone());
            thread::spawn(move || (placed.cancel(), queued.cancel()))
        };
        let returned = timer.stop().unwrap();
        let (placed_won, queued_won) = canceller.join().unwrap();
        // Exactly one of cancel() and stop() wins each timeout.
        assert_ne!(placed_won, returned.contains(&placed));
        assert_ne!(queued_won, returned.contains(&queued));
        assert!(placed.is_cancelled() && queued.is_cancelled());
        assert_eq!(ran.load(SeqCst), 0);
        assert_eq!(timer.pending_timeouts(), 0);
    });
}
