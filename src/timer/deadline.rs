//! A deadline around any future (tokio's `Timeout`). Owns [`Deadline`], the timer's `timeout` and
//! `timeout_at`, and `TimerRef`, a process-wide table that finds an unarmed deadline's timer
//! without a reference count. Uses the [`Sleep`], the shared state's clock and `sync`'s lock.
//! A deadline counts from the call, as tokio's, and registers with the wheel at its first pending
//! poll only (`docs/performance.md`, "Lazy `Deadline`").

use super::sleep::Sleep;
use crate::clock::duration_to_nanos;
use crate::shared::{Shared, TimerHandle};
use crate::sync::Arc;
use crate::{DeadlineError, HashedWheelTimer, TimerError};
use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

pin_project_lite::pin_project! {
    /// A future with a deadline: its output, or [`DeadlineError::Elapsed`] if the deadline passes
    /// first (tokio's `Timeout`, named apart from the [`Timeout`](crate::Timeout) handle).
    ///
    /// Made by [`HashedWheelTimer::timeout`] and [`HashedWheelTimer::timeout_at`]. As with tokio's
    /// `timeout`, the deadline is fixed when the `Deadline` is made (`timeout(limit, future)`
    /// counts `limit` from the call) and never moves: a future first polled late has that much
    /// less time, and one first polled after its deadline completes with `Elapsed` at once
    /// unless it is ready. The error never comes before the deadline, at most about a tick after.
    ///
    /// Each poll polls the inner future first. **Nothing is scheduled until the inner future is
    /// pending**: a future ready at its first poll never reaches the timer (making the
    /// `Deadline` costs one clock read). Then the deadline is a [`Sleep`]: dropping the
    /// `Deadline` cancels it; a timer stopped, dropped or at its pending limit completes it with
    /// [`DeadlineError::Timer`].
    ///
    /// ```
    /// use hashed_timer_wheel::{DeadlineError, HashedWheelTimer};
    /// use std::time::Duration;
    ///
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// futures::executor::block_on(async {
    ///     let fast = async { 42 };
    ///     assert_eq!(timer.timeout(Duration::from_secs(1), fast).await, Ok(42));
    ///     // Ready at its first poll: that deadline was never scheduled.
    ///     assert_eq!(timer.pending_timeouts(), 0);
    ///     let slow = timer.sleep(Duration::from_secs(60));
    ///     let result = timer.timeout(Duration::from_millis(5), slow).await;
    ///     assert_eq!(result, Err(DeadlineError::Elapsed));
    /// });
    /// ```
    #[must_use = "a Deadline does nothing unless awaited"]
    pub struct Deadline<F> {
        #[pin]
        future: F,
        wait: Wait,
    }
}

enum Wait {
    /// The inner future has not been pending yet: nothing scheduled, nothing shared written.
    Unarmed {
        timer: TimerRef,
        /// Nanoseconds since the timer's origin, fixed when the `Deadline` is made.
        deadline: u64,
    },
    Armed(Sleep),
    /// The timer was stopped or dropped before the inner future was first pending.
    Gone,
}

/// An unarmed deadline's timer, unless dropped or stopped: a stopped one is gone, as its
/// deadlines find it on the thread that stopped it (which alone forgets it), not a refusal.
fn live_timer(timer: &TimerRef) -> Option<Arc<Shared>> {
    timer.upgrade().filter(|shared| !shared.is_shutdown())
}

/// What an unarmed deadline's first pending poll finds.
enum Armed<'a> {
    /// The deadline is scheduled: wait on its sleep.
    Sleep(&'a mut Sleep),
    /// The deadline had passed already (tokio's `Timeout` polled late): nothing scheduled.
    Passed,
    /// The timer was stopped or dropped.
    Gone,
}

impl Wait {
    /// The sleep, scheduled now if it was not yet, unless the deadline has passed by the
    /// worker's clock or the timer is gone.
    fn armed(&mut self) -> Armed<'_> {
        if let Wait::Unarmed { timer, deadline } = self {
            let deadline = *deadline;
            let Some(shared) = live_timer(timer) else {
                *self = Wait::Gone;
                return Armed::Gone;
            };
            // The worker's clock: a deadline it has passed fires on no later tick (never early).
            if deadline <= shared.clock.now() {
                return Armed::Passed;
            }
            let now = shared.clock.now_upper();
            *self = Wait::Armed(Sleep::at(&shared, deadline.max(now), now));
        }
        match self {
            Wait::Armed(sleep) => Armed::Sleep(sleep),
            Wait::Unarmed { .. } => Armed::Passed,
            Wait::Gone => Armed::Gone,
        }
    }
}

#[cfg(not(loom))]
pub(super) use timer_ref::forget as forget_timer;
#[cfg(not(loom))]
use timer_ref::TimerRef;

/// Which timer an unarmed deadline belongs to, found again without a reference count.
///
/// A [`TimerHandle`] would cost every `Deadline` two locked instructions on a cache line that every
/// thread using the timer writes. A `TimerRef` is a slot and generation in a process-wide table of
/// `Weak`s (which keeps no timer alive), kept in the timer's shared state once its first deadline
/// takes the slot: making a deadline reads it there. Only the first pending poll upgrades a
/// `Weak`; each thread remembers the `Weak`s of its last few timers, so that the table's lock is
/// taken once per thread and timer among that few (`docs/performance.md`, "An unarmed `Deadline`
/// names its timer by a `TimerRef`").
#[cfg(not(loom))]
mod timer_ref {
    use crate::shared::Shared;
    use crate::sync::{lock, Arc, Mutex, Ordering, Weak};
    use std::cell::RefCell;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) struct TimerRef {
        index: u32,
        /// Bumped when the slot passes to another timer or is let go: an old deadline finds its
        /// timer gone. Of `GENERATION_BITS`, and never 0 in a slot, so that a key kept in
        /// `Shared::deadline_slot` is not 0.
        generation: u64,
    }

    /// A key packs the index below the generation: 2^24 live timers, 2^40 generations a slot.
    const INDEX_BITS: u32 = 24;
    const GENERATION_BITS: u32 = 64 - INDEX_BITS;

    struct Slot {
        generation: u64,
        timer: Weak<Shared>,
    }

    impl Slot {
        /// A new generation: the slot passes to another timer, or none.
        fn bump(&mut self) {
            self.generation = ((self.generation + 1) % (1 << GENERATION_BITS)).max(1);
        }
    }

    /// One slot per live timer that made a deadline; a dead or stopped timer's slot is reused.
    static SLOTS: Mutex<Vec<Slot>> = Mutex::new(Vec::new());

    /// Timers a thread remembers: arming a deadline of one of these few takes no lock.
    const REMEMBERED: usize = 4;

    type Remembered = [Option<(TimerRef, Weak<Shared>)>; REMEMBERED];

    std::thread_local! {
        /// This thread's last timers armed on, the latest first.
        static LAST: RefCell<Remembered> = const { RefCell::new([const { None }; REMEMBERED]) };
    }

    impl TimerRef {
        #[inline]
        pub(super) fn new(shared: &Arc<Shared>) -> TimerRef {
            // Relaxed: a number; `upgrade` checks it against the table under its lock.
            match shared.deadline_slot.load(Ordering::Relaxed) {
                0 => TimerRef::register(shared),
                key => TimerRef::unpack(key),
            }
        }

        /// As kept in `Shared::deadline_slot`: never 0, the generation being at least 1.
        fn pack(self) -> u64 {
            self.generation << INDEX_BITS | u64::from(self.index)
        }

        fn unpack(key: u64) -> TimerRef {
            TimerRef {
                index: (key % (1 << INDEX_BITS)) as u32,
                generation: key >> INDEX_BITS,
            }
        }

        /// Gives `shared` a slot: a dead or stopped timer's (under a new generation), or a new one.
        #[cold]
        fn register(shared: &Arc<Shared>) -> TimerRef {
            let mut slots = lock(&SLOTS);
            // Under the table's lock, which `forget` takes after the shutdown: a stopped timer
            // takes no slot (its deadlines find it gone, as stopped).
            if shared.is_shutdown() {
                return TimerRef::GONE;
            }
            // Another thread's first deadline may have given it one since.
            match shared.deadline_slot.load(Ordering::Relaxed) {
                0 => {}
                key => return TimerRef::unpack(key),
            }
            let weak = Arc::downgrade(shared);
            let index = match slots.iter().position(|slot| slot.timer.strong_count() == 0) {
                Some(index) => {
                    let slot = &mut slots[index];
                    slot.bump();
                    // The dead timer's `Weak` frees no more than its allocation: no user code.
                    slot.timer = weak;
                    index
                }
                None => {
                    slots.push(Slot {
                        generation: 1,
                        timer: weak,
                    });
                    slots.len() - 1
                }
            };
            let key = TimerRef {
                index: u32::try_from(index)
                    .ok()
                    .filter(|index| *index < 1 << INDEX_BITS)
                    .expect("fewer than 2^24 live timers with deadlines"),
                generation: slots[index].generation,
            };
            // Set under the table's lock: the slot is this timer's until `forget` bumps it.
            shared.deadline_slot.store(key.pack(), Ordering::Relaxed);
            key
        }

        /// Names no timer: a stopped one's.
        const GONE: TimerRef = TimerRef {
            index: u32::MAX,
            generation: 0,
        };

        /// The timer, if it lives and still holds its slot.
        pub(super) fn upgrade(self) -> Option<Arc<Shared>> {
            let local = LAST.try_with(|last| {
                let mut last = last.borrow_mut();
                let at = last
                    .iter()
                    .position(|e| e.as_ref().is_some_and(|(k, _)| *k == self))?;
                last[..=at].rotate_right(1);
                last[0].as_ref().map(|(_, timer)| timer.upgrade())
            });
            if let Ok(Some(found)) = local {
                return found;
            }
            let weak = {
                let slots = lock(&SLOTS);
                let slot = slots.get(usize::try_from(self.index).ok()?)?;
                (slot.generation == self.generation).then(|| slot.timer.clone())?
            };
            let shared = weak.upgrade()?;
            // Outside the table's lock: dropping the oldest `Weak` may free a dead timer's
            // allocation. (A thread whose locals are gone does not remember.)
            let _ = LAST.try_with(|last| {
                let mut last = last.borrow_mut();
                last.rotate_right(1);
                last[0] = Some((self, weak));
            });
            Some(shared)
        }
    }

    /// Lets go of a stopped timer, named by its address: its slot and this thread's memory of
    /// it no longer keep its allocation (a `Weak` does), and its deadlines find it gone.
    pub(in crate::timer) fn forget(timer: *const ()) {
        let is_it = |weak: &Weak<Shared>| std::ptr::eq(weak.as_ptr().cast::<()>(), timer);
        let slot_weak = {
            let mut slots = lock(&SLOTS);
            slots
                .iter_mut()
                .find(|slot| is_it(&slot.timer))
                .map(|slot| {
                    slot.bump();
                    std::mem::take(&mut slot.timer)
                })
        };
        // Outside the table's lock, as in `upgrade`.
        drop(slot_weak);
        let _ = LAST.try_with(|last| {
            let forgotten = last.borrow_mut().iter_mut().find_map(|entry| {
                entry
                    .as_ref()
                    .is_some_and(|(_, weak)| is_it(weak))
                    .then(|| entry.take())
            });
            drop(forgotten);
        });
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_key_survives_its_packing_and_a_generation_wraps_past_zero() {
            for (index, generation) in [(0, 1), (5, 7), ((1 << INDEX_BITS) - 1, 1 << 39)] {
                let key = TimerRef { index, generation };
                assert_ne!(key.pack(), 0);
                assert_eq!(TimerRef::unpack(key.pack()), key);
            }
            let mut slot = Slot {
                generation: (1 << GENERATION_BITS) - 1,
                timer: Weak::new(),
            };
            slot.bump();
            assert_eq!(slot.generation, 1, "wraps past 0");
        }

        #[test]
        fn a_timer_keeps_its_slot_and_lets_it_go_when_stopped() {
            let new_timer = || crate::HashedWheelTimer::new(std::time::Duration::from_millis(1), 8);
            let timers: Vec<_> = (0..6).map(|_| new_timer()).collect();
            let keys: Vec<_> = timers.iter().map(|t| TimerRef::new(&t.shared)).collect();
            for (timer, key) in timers.iter().zip(&keys) {
                assert_eq!(TimerRef::new(&timer.shared), *key, "one slot per timer");
                let found = key.upgrade().expect("a live timer");
                assert!(std::ptr::eq(&*found, &*timer.shared), "its own timer");
            }
            let stopped = &timers[2];
            drop(stopped.stop());
            assert!(keys[2].upgrade().is_none(), "let go when stopped");
            let again = TimerRef::new(&stopped.shared);
            assert!(again.upgrade().is_none(), "and not taken again");
            let next = new_timer();
            let reused = TimerRef::new(&next.shared);
            assert!(keys[2].upgrade().is_none(), "the old key names no timer");
            assert!(std::ptr::eq(&*reused.upgrade().unwrap(), &*next.shared));
        }
    }
}

/// Under loom (one thread for all, sharing thread locals) a deadline holds its timer.
#[cfg(loom)]
struct TimerRef(Arc<Shared>);

/// Under loom a deadline holds its timer: there is nothing to let go of.
#[cfg(loom)]
pub(super) fn forget_timer(_timer: *const ()) {}

#[cfg(loom)]
impl TimerRef {
    fn new(shared: &Arc<Shared>) -> TimerRef {
        TimerRef(Arc::clone(shared))
    }

    fn upgrade(&self) -> Option<Arc<Shared>> {
        Some(Arc::clone(&self.0))
    }
}

impl<F> Deadline<F> {
    /// The inner future, by reference.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let sleep = timer.sleep(Duration::from_secs(60));
    /// let at = sleep.deadline();
    /// let call = timer.timeout(Duration::from_secs(1), sleep);
    /// assert_eq!(call.get_ref().deadline(), at);
    /// ```
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// The inner future, mutably.
    ///
    /// ```
    /// # use futures::FutureExt;
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let (timer, driver) = HashedWheelTimer::builder().build_manual()?;
    /// let mut call = timer.timeout(Duration::from_secs(10), timer.sleep(Duration::from_secs(60)));
    /// call.get_mut().reset_after(Duration::from_secs(1)); // the inner sleep, sooner
    /// driver.advance(Duration::from_secs(2));
    /// assert_eq!(call.now_or_never(), Some(Ok(Ok(()))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.future
    }

    /// The inner future, taken out; the deadline is cancelled (if it was ever scheduled).
    ///
    /// ```
    /// # use futures::FutureExt;
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let (timer, driver) = HashedWheelTimer::builder().build_manual()?;
    /// let mut call = timer.timeout(Duration::from_secs(1), std::future::pending::<u32>());
    /// assert!((&mut call).now_or_never().is_none()); // pending: the deadline is scheduled
    /// assert_eq!(timer.pending_timeouts(), 1);
    /// let _inner: std::future::Pending<u32> = call.into_inner();
    /// driver.advance(Duration::from_millis(100)); // one tick: the cancellation is processed
    /// assert_eq!(timer.pending_timeouts(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn into_inner(self) -> F {
        self.future
    }

    /// When the deadline is, fixed when the `Deadline` was made ([`Sleep::deadline`] once
    /// scheduled); if the timer was stopped or dropped before the inner future was first
    /// pending, now (the next poll completes it).
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::{Duration, Instant};
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let before = Instant::now();
    /// let call = timer.timeout(Duration::from_secs(5), std::future::pending::<()>());
    /// assert!(call.deadline() >= before + Duration::from_secs(5)); // never early
    /// std::thread::sleep(Duration::from_millis(2));
    /// assert_eq!(call.deadline(), call.deadline()); // counted from the call: it never moves
    /// ```
    pub fn deadline(&self) -> Instant {
        match &self.wait {
            Wait::Armed(sleep) => sleep.deadline(),
            Wait::Unarmed { timer, deadline } => match live_timer(timer) {
                Some(shared) => shared.clock.instant_at(*deadline),
                None => Instant::now(),
            },
            Wait::Gone => Instant::now(),
        }
    }
}

impl<F: Future> Future for Deadline<F> {
    type Output = Result<F::Output, DeadlineError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        let sleep = match this.wait.armed() {
            Armed::Sleep(sleep) => sleep,
            Armed::Passed => return Poll::Ready(Err(DeadlineError::Elapsed)),
            Armed::Gone => return Poll::Ready(Err(DeadlineError::Timer(TimerError::Stopped))),
        };
        match Pin::new(sleep).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => Poll::Ready(Err(DeadlineError::Elapsed)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(DeadlineError::Timer(e))),
        }
    }
}

impl<F: fmt::Debug> fmt::Debug for Deadline<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Deadline");
        d.field("future", &self.future);
        match &self.wait {
            Wait::Armed(sleep) => d.field("sleep", sleep),
            Wait::Unarmed { deadline, .. } => d.field("unarmed_deadline", deadline),
            Wait::Gone => d.field("timer", &"gone"),
        };
        d.finish()
    }
}

/// A deadline at `deadline` nanoseconds since the timer's origin, fixed now; nothing scheduled.
fn deadline<F: IntoFuture>(
    shared: &Arc<Shared>,
    deadline: u64,
    future: F,
) -> Deadline<F::IntoFuture> {
    Deadline {
        future: future.into_future(),
        wait: Wait::Unarmed {
            timer: TimerRef::new(shared),
            deadline,
        },
    }
}

macro_rules! deadline_methods {
    ($ty:ty, $example:literal) => {
        impl $ty {
            /// `future` with a deadline `limit` after this call (as `tokio::time::timeout`): its
            /// output, or [`DeadlineError::Elapsed`] (see [`Deadline`]).
            ///
            /// ```
            /// # use hashed_timer_wheel::{DeadlineError, HashedWheelTimer};
            /// # use std::time::Duration;
            /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
            #[doc = $example]
            /// let slow = std::future::pending::<u32>();
            /// let result = futures::executor::block_on(t.timeout(Duration::from_millis(2), slow));
            /// assert_eq!(result, Err(DeadlineError::Elapsed));
            /// ```
            pub fn timeout<F: IntoFuture>(
                &self,
                limit: Duration,
                future: F,
            ) -> Deadline<F::IntoFuture> {
                // The producers' clock, never behind the worker's: never early.
                let now = self.shared.clock.now_upper();
                let at = now.saturating_add(duration_to_nanos(limit));
                deadline(&self.shared, at, future)
            }

            /// `future` with a deadline at `deadline`: its output, or [`DeadlineError::Elapsed`]
            /// (see [`Deadline`]).
            ///
            /// ```
            /// # use hashed_timer_wheel::HashedWheelTimer;
            /// # use std::time::{Duration, Instant};
            /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
            #[doc = $example]
            /// let at = Instant::now() + Duration::from_secs(1);
            /// assert_eq!(futures::executor::block_on(t.timeout_at(at, async { 7 })), Ok(7));
            /// ```
            pub fn timeout_at<F: IntoFuture>(
                &self,
                deadline: Instant,
                future: F,
            ) -> Deadline<F::IntoFuture> {
                let at = self.shared.clock.nanos_at(deadline);
                self::deadline(&self.shared, at, future)
            }
        }
    };
}

for_owner_and_handle!(deadline_methods);
