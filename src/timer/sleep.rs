//! Futures on the wheel: a sleep for a delay or until an `Instant`, and a deadline around any
//! future, that any executor can drive (no runtime, no thread of their own).
//!
//! Owns [`Sleep`] and [`Deadline`]. A `Sleep` is an ordinary timeout of the timer whose job is
//! to wake the future: scheduled when the `Sleep` is made, cancelled when it is dropped, and
//! its waker left in a slot beside its state (`shared::cells::WakerSlots`, with the protocol;
//! the loom model `loom-tests/tests/sleep_future.rs`). Uses the owner's scheduling, the shared
//! state's cells and clock.

use super::{accepted, start};
use crate::clock::duration_to_nanos;
use crate::shared::cells::End;
use crate::shared::{Shared, TimerHandle};
use crate::sync::Arc;
use crate::{DeadlineError, HashedWheelTimer, Timeout, TimerError};
use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A future that completes at a deadline on a [`HashedWheelTimer`]'s wheel (tokio's `Sleep`).
///
/// Made by [`HashedWheelTimer::sleep`] and [`HashedWheelTimer::sleep_until`] (or the same
/// methods of a [`TimerHandle`]). It is scheduled at once, like a `new_timeout`, and completes
/// with `Ok(())` when its timeout expires: never before its deadline, at most about a tick
/// after it. Any executor can poll it (tokio, `futures`' `block_on`, smol...): the timer's own
/// worker thread wakes it.
///
/// - **Dropping** it cancels its timeout; the timer frees the entry within about a tick, as
///   for [`Timeout::cancel`].
/// - **Polled from another task**, it wakes that task (the last poll's waker is the one kept).
/// - **When the timer stops** (or its owner is dropped) before the deadline, it completes with
///   `Err(`[`TimerError::Stopped`]`)`: it never hangs. A timer at its pending limit refuses it:
///   it completes at once with `Err(TimerError::TooManyPending { .. })`.
/// - It is `Unpin`: `&mut sleep` is itself a future, for `select!` in a loop, and
///   [`reset`](Sleep::reset) moves its deadline.
///
/// It counts in [`pending_timeouts()`](HashedWheelTimer::pending_timeouts) while it waits, and
/// in [`stats()`](HashedWheelTimer::stats) as any timeout; `stop()` does not return it (nothing
/// can run it: its future completes with `Stopped` instead).
///
/// ```
/// use hashed_timer_wheel::HashedWheelTimer;
/// use std::time::{Duration, Instant};
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
/// let start = Instant::now();
/// futures::executor::block_on(async {
///     timer.sleep(Duration::from_millis(20)).await.unwrap();
/// });
/// assert!(start.elapsed() >= Duration::from_millis(20), "never early");
/// ```
#[must_use = "a Sleep does nothing unless awaited, and its drop cancels it"]
pub struct Sleep {
    scheduled: Scheduled,
    /// Nanoseconds since the timer's origin.
    pub(super) deadline: u64,
    /// The deadline of the timeout in `scheduled`: earlier than `deadline` after a `reset` to
    /// a later deadline, which schedules nothing; the timeout's expiry then arms one for the
    /// rest (tokio's timer extends an entry the same way).
    armed_for: u64,
}

/// What scheduling a sleep's timeout gave.
enum Scheduled {
    /// Accepted: the timeout whose end completes the future.
    Armed(Timeout),
    /// Refused when made (boxed: a cold path that should not grow every `Sleep`).
    Refused(Box<Refused>),
}

struct Refused {
    error: TimerError,
    /// For `reset`, which schedules again.
    timer: TimerHandle,
}

impl Sleep {
    /// Schedules a sleep on `shared`'s timer, due at `deadline` (nanoseconds since its
    /// origin); `now` is the producers' clock, read by the caller.
    pub(crate) fn at(shared: &Arc<Shared>, deadline: u64, now: u64) -> Sleep {
        Sleep {
            scheduled: arm(shared, deadline, now),
            deadline,
            armed_for: deadline,
        }
    }

    fn after(shared: &Arc<Shared>, delay: Duration) -> Sleep {
        let now = shared.clock.now_upper();
        Sleep::at(shared, now.saturating_add(duration_to_nanos(delay)), now)
    }

    fn until(shared: &Arc<Shared>, deadline: Instant) -> Sleep {
        // Never early: a deadline at or before now is due at once, and the producers' clock
        // is never behind the worker's.
        let now = shared.clock.now_upper();
        Sleep::at(shared, shared.clock.nanos_at(deadline).max(now), now)
    }

    pub(super) fn shared(&self) -> &Arc<Shared> {
        match &self.scheduled {
            Scheduled::Armed(timeout) => &timeout.timer().shared,
            Scheduled::Refused(refused) => &refused.timer.shared,
        }
    }

    /// When the sleep is due: the deadline it was made with, or the last
    /// [`reset`](Sleep::reset). (On a timer with a manual clock, an `Instant` counted from the
    /// moment of the call.)
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::{Duration, Instant};
    /// let timer = HashedWheelTimer::default();
    /// let sleep = timer.sleep(Duration::from_secs(5));
    /// assert!(sleep.deadline() > Instant::now() + Duration::from_secs(4));
    /// ```
    pub fn deadline(&self) -> Instant {
        self.shared().clock.instant_at(self.deadline)
    }

    /// Whether the timeout has expired: polling now returns `Ready(Ok(()))`.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::default();
    /// assert!(!timer.sleep(Duration::from_secs(5)).is_elapsed());
    /// ```
    pub fn is_elapsed(&self) -> bool {
        self.deadline <= self.armed_for
            && matches!(&self.scheduled, Scheduled::Armed(timeout) if timeout.is_expired())
    }

    /// Moves the deadline to `deadline` (earlier or later), whether or not the sleep had
    /// completed: its timeout is cancelled and a new one scheduled. A task waiting on the sleep
    /// is woken at the new deadline (its waker moves with it). For idle detection: reset on
    /// every message, and the sleep completes only after a quiet period.
    ///
    /// On a stopped timer the sleep completes with `Stopped`; at the pending limit, with
    /// `TooManyPending`.
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::{Duration, Instant};
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let mut idle = timer.sleep(Duration::from_secs(3600));
    /// idle.reset(Instant::now() + Duration::from_millis(10));
    /// futures::executor::block_on(&mut idle).unwrap();
    /// ```
    pub fn reset(&mut self, deadline: Instant) {
        let shared = Arc::clone(self.shared());
        let now = shared.clock.now_upper();
        self.rearm(&shared, shared.clock.nanos_at(deadline).max(now), now);
    }

    /// [`reset`](Sleep::reset) to `delay` from now, read from the timer's own clock (cheaper
    /// than `Instant::now()` where the TSC is used).
    ///
    /// ```
    /// # use hashed_timer_wheel::HashedWheelTimer;
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let mut idle = timer.sleep(Duration::from_secs(3600));
    /// idle.reset_after(Duration::from_millis(10));
    /// futures::executor::block_on(&mut idle).unwrap();
    /// ```
    pub fn reset_after(&mut self, delay: Duration) {
        let shared = Arc::clone(self.shared());
        let now = shared.clock.now_upper();
        self.rearm(&shared, now.saturating_add(duration_to_nanos(delay)), now);
    }

    /// A reset for a caller that takes a spurious wake-up in its stride (hyper's timer): a
    /// later deadline than the armed timeout's, while that timeout is pending, only moves
    /// `deadline`; the timeout's expiry wakes the task, whose poll arms the rest of the wait.
    /// So a timeout pushed back on every request (hyper's header read timeout) touches the
    /// wheel once per period, not once per reset. [`Sleep::reset`] keeps its promise of no
    /// wake-up before the new deadline.
    #[cfg_attr(not(feature = "hyper"), allow(dead_code))]
    pub(crate) fn extend_or_reset(&mut self, deadline: Instant) {
        let shared = Arc::clone(self.shared());
        let now = shared.clock.now_upper();
        let deadline = shared.clock.nanos_at(deadline).max(now);
        let pending = matches!(
            &self.scheduled,
            Scheduled::Armed(t) if !t.is_expired() && !t.is_cancelled()
        );
        if pending && deadline >= self.armed_for {
            self.deadline = deadline;
        } else {
            self.rearm(&shared, deadline, now);
        }
    }

    pub(crate) fn rearm(&mut self, shared: &Arc<Shared>, deadline: u64, now: u64) {
        let old = std::mem::replace(&mut self.scheduled, arm(shared, deadline, now));
        self.deadline = deadline;
        self.armed_for = deadline;
        if let Scheduled::Armed(old) = old {
            // Whether or not the cancel wins (the old timeout may have expired), the waker we
            // left there is ours to take: the task waiting on the old timeout now waits on the
            // new one.
            old.cancel();
            if let Some(waker) = old.state.take_waker() {
                let wait = match &self.scheduled {
                    Scheduled::Armed(new) => new.state.poll_end(&waker).is_none(),
                    // Refused: the sleep is complete (with the error), and its task must
                    // hear so.
                    Scheduled::Refused(_) => false,
                };
                if !wait {
                    waker.wake();
                }
            }
        }
    }
}

fn arm(shared: &Arc<Shared>, deadline: u64, now: u64) -> Scheduled {
    let scheduled = start(shared).and_then(|()| shared.schedule_wake_at(deadline, now));
    match accepted(shared, scheduled) {
        Ok(timeout) => Scheduled::Armed(timeout),
        Err(error) => Scheduled::Refused(Box::new(Refused {
            error,
            timer: TimerHandle {
                shared: Arc::clone(shared),
            },
        })),
    }
}

impl Future for Sleep {
    type Output = Result<(), TimerError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &self.scheduled {
            Scheduled::Armed(timeout) => match timeout.state.poll_end(cx.waker()) {
                None => Poll::Pending,
                Some(End::Expired) if self.deadline > self.armed_for => {
                    // Reset to a later deadline meanwhile: the rest of the wait.
                    let shared = Arc::clone(self.shared());
                    let (deadline, now) = (self.deadline, shared.clock.now_upper());
                    self.rearm(&shared, deadline, now);
                    self.poll(cx)
                }
                Some(End::Expired) => Poll::Ready(Ok(())),
                // Only `stop()` cancels a sleep's timeout: the sleep's own drop and `reset`
                // are the only other cancels, and neither leaves it to be polled.
                Some(End::Cancelled) => Poll::Ready(Err(TimerError::Stopped)),
            },
            Scheduled::Refused(refused) => Poll::Ready(Err(refused.error.clone())),
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Scheduled::Armed(timeout) = &self.scheduled {
            // Expired already: nothing to do. Else the worker unlinks the entry within about
            // a tick, and the waker we may have left is ours to take back (see
            // `shared::cells::WakerSlots`).
            if timeout.cancel() {
                drop(timeout.state.take_waker());
            }
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Sleep");
        d.field("deadline", &self.deadline());
        match &self.scheduled {
            Scheduled::Armed(timeout) => d.field("timeout", timeout),
            Scheduled::Refused(refused) => d.field("refused", &refused.error),
        };
        d.finish()
    }
}

pin_project_lite::pin_project! {
    /// A future with a deadline: its output, or [`DeadlineError::Elapsed`] if the deadline
    /// passes first (tokio's `Timeout`; named apart from this crate's [`Timeout`] handle).
    ///
    /// Made by [`HashedWheelTimer::timeout`] and [`HashedWheelTimer::timeout_at`]. Each poll
    /// polls the inner future first, so a future that is ready by the deadline's poll wins.
    ///
    /// **Nothing is scheduled until the inner future is pending.** Making a `Deadline` reads
    /// no clock and writes nothing the timer's other users share (but for a thread's first
    /// deadline on a timer, which enters the timer in a process-wide table); a future that is
    /// ready at its first poll (a response already there) completes without the timer ever
    /// hearing of it. The first poll that finds the inner future pending schedules the
    /// deadline as a [`Sleep`], with all its guarantees: dropping the `Deadline` (the
    /// request-timeout pattern: the response came first) cancels its timeout; a stopped
    /// timer completes it with [`DeadlineError::Timer`], as does a timer at its pending limit
    /// or one dropped before the future was pending.
    ///
    /// **When the limit starts.** `timeout(limit, future)` counts `limit` from that first
    /// pending poll (pingora's lazy timeout), not from the call (tokio's `timeout`): the
    /// deadline is never earlier than tokio's for the same call, and later by the time
    /// between the call and the first poll plus the inner future's first poll, which for the
    /// usual `timer.timeout(limit, call).await` is the first poll's own work. `timeout_at`
    /// keeps its instant, wherever the first poll falls. Either way the error never comes
    /// before the deadline, and at most about a tick after it.
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

/// A deadline's timeout: not yet scheduled, or its [`Sleep`].
enum Wait {
    /// The inner future has not been pending yet: nothing scheduled, nothing shared written.
    Unarmed {
        timer: TimerRef,
        start: Start,
    },
    Armed(Sleep),
    /// The timer was dropped before the inner future was first pending.
    Gone,
}

/// Where an unarmed deadline's time comes from.
#[derive(Clone, Copy, Debug)]
enum Start {
    /// This many nanoseconds after the first poll that finds the inner future pending.
    After(u64),
    /// At this time, nanoseconds since the timer's origin (never before that first poll).
    At(u64),
}

impl Start {
    /// The deadline for a clock reading `now` (the producers' clock).
    fn due(self, now: u64) -> u64 {
        match self {
            Start::After(limit) => now.saturating_add(limit),
            Start::At(deadline) => deadline.max(now),
        }
    }
}

impl Wait {
    /// The sleep, scheduled now if it was not yet; `None` if the timer is gone.
    fn armed(&mut self) -> Option<&mut Sleep> {
        if let Wait::Unarmed { timer, start } = self {
            *self = match timer.upgrade() {
                Some(shared) => {
                    let now = shared.clock.now_upper();
                    Wait::Armed(Sleep::at(&shared, start.due(now), now))
                }
                None => Wait::Gone,
            };
        }
        match self {
            Wait::Armed(sleep) => Some(sleep),
            Wait::Unarmed { .. } | Wait::Gone => None,
        }
    }
}

#[cfg(not(loom))]
use timer_ref::TimerRef;

/// Which timer an unarmed deadline belongs to, found again without a reference count.
///
/// Holding a [`TimerHandle`] would cost every `Deadline` two locked instructions on the
/// timer's reference count, a cache line that every thread using the timer writes: the whole
/// cost of a deadline whose future is ready at once. A `TimerRef` is a slot of a process-wide
/// table of the timers that made deadlines (each held by a `Weak`, so the table keeps no timer
/// alive) and the slot's generation; each thread remembers the last few timers it made
/// deadlines for and their slots, so making one is a thread-local read and a pointer
/// comparison. The first pending poll upgrades that thread's `Weak` (or, on another thread,
/// the table's): the timer's count is touched only by a deadline that schedules anyway.
#[cfg(not(loom))]
mod timer_ref {
    use crate::shared::Shared;
    use crate::sync::{Arc, Mutex};
    use std::cell::RefCell;
    use std::sync::PoisonError;
    // The shim has no `Weak`; this module is not built under loom, where the shim's types
    // would differ from std's.
    use std::sync::Weak;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) struct TimerRef {
        index: u32,
        /// Bumped each time the slot is given to another timer: a deadline of the timer
        /// that had it finds its timer gone rather than the new one.
        generation: u64,
    }

    struct Slot {
        generation: u64,
        timer: Weak<Shared>,
    }

    /// One slot per live timer that made a deadline; a dead timer's slot is reused.
    static SLOTS: Mutex<Vec<Slot>> = Mutex::new(Vec::new());

    /// How many timers a thread remembers: a thread that makes deadlines on a few timers in
    /// turn takes the table's lock only when it moves to yet another.
    const REMEMBERED: usize = 4;

    type Remembered = [Option<(TimerRef, Weak<Shared>)>; REMEMBERED];

    std::thread_local! {
        /// The timers this thread last made deadlines for, the latest first. Each `Weak` keeps
        /// its timer's allocation, so an address here is that timer's while it is remembered:
        /// comparing addresses suffices.
        static LAST: RefCell<Remembered> = const { RefCell::new([const { None }; REMEMBERED]) };
    }

    impl TimerRef {
        #[inline]
        pub(super) fn new(shared: &Arc<Shared>) -> TimerRef {
            // The latest alone on this path: it is the one nearly every deadline names.
            let cached = LAST.try_with(|last| match &last.borrow()[0] {
                Some((key, timer)) if std::ptr::eq(timer.as_ptr(), Arc::as_ptr(shared)) => {
                    Some(*key)
                }
                _ => None,
            });
            match cached {
                Ok(Some(key)) => key,
                _ => TimerRef::recall(shared),
            }
        }

        /// One of the other timers remembered, moved to the front; or a new one.
        #[cold]
        fn recall(shared: &Arc<Shared>) -> TimerRef {
            let recalled = LAST.try_with(|last| {
                let mut last = last.borrow_mut();
                let at = last.iter().position(|entry| {
                    entry
                        .as_ref()
                        .is_some_and(|(_, timer)| std::ptr::eq(timer.as_ptr(), Arc::as_ptr(shared)))
                })?;
                last[..=at].rotate_right(1);
                last[0].as_ref().map(|(key, _)| *key)
            });
            match recalled {
                Ok(Some(key)) => key,
                _ => TimerRef::register(shared),
            }
        }

        #[cold]
        fn register(shared: &Arc<Shared>) -> TimerRef {
            let key = {
                let mut slots = SLOTS.lock().unwrap_or_else(PoisonError::into_inner);
                // A live timer's address is its own (a dead one's `Weak` keeps its
                // allocation), so a slot at this address is this timer's.
                let same = |slot: &Slot| std::ptr::eq(slot.timer.as_ptr(), Arc::as_ptr(shared));
                let index = match slots.iter().position(same) {
                    Some(index) => index,
                    None => match slots.iter().position(|slot| slot.timer.strong_count() == 0) {
                        Some(index) => {
                            let slot = &mut slots[index];
                            slot.generation += 1;
                            slot.timer = Arc::downgrade(shared);
                            index
                        }
                        None => {
                            slots.push(Slot {
                                generation: 0,
                                timer: Arc::downgrade(shared),
                            });
                            slots.len() - 1
                        }
                    },
                };
                TimerRef {
                    index: u32::try_from(index).expect("fewer than 2^32 live timers"),
                    generation: slots[index].generation,
                }
            };
            // Outside the table's lock: the oldest timer remembered goes, and dropping its `Weak`
            // may free a dead timer's allocation. (A thread whose locals are gone does not
            // remember.)
            let _ = LAST.try_with(|last| {
                let mut last = last.borrow_mut();
                last.rotate_right(1);
                last[0] = Some((key, Arc::downgrade(shared)));
            });
            key
        }

        /// The timer, if it is still alive.
        pub(super) fn upgrade(self) -> Option<Arc<Shared>> {
            let local = LAST.try_with(|last| {
                last.borrow()
                    .iter()
                    .flatten()
                    .find_map(|(key, timer)| (*key == self).then(|| timer.upgrade()))
            });
            if let Ok(Some(found)) = local {
                return found;
            }
            let slots = SLOTS.lock().unwrap_or_else(PoisonError::into_inner);
            let slot = slots.get(usize::try_from(self.index).ok()?)?;
            if slot.generation == self.generation {
                slot.timer.upgrade()
            } else {
                None
            }
        }
    }
}

/// Under loom (whose models run every thread on one, sharing thread locals) a deadline holds
/// its timer: the models check the protocol, not the cost.
#[cfg(loom)]
struct TimerRef(Arc<Shared>);

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
    /// The inner future.
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// The inner future.
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.future
    }

    /// The inner future; the deadline is cancelled (if it was ever scheduled).
    pub fn into_inner(self) -> F {
        self.future
    }

    /// When the deadline is ([`Sleep::deadline`]) once the inner future has been pending, or
    /// for `timeout_at`. Before that, a `timeout(limit, ..)` has no deadline yet: this is the
    /// one it would get if its first pending poll were now (`limit` from now). Now, if the
    /// timer was dropped before the future was pending (it completes at once).
    pub fn deadline(&self) -> Instant {
        match &self.wait {
            Wait::Armed(sleep) => sleep.deadline(),
            Wait::Unarmed { timer, start } => match timer.upgrade() {
                Some(shared) => shared.clock.instant_at(start.due(shared.clock.now_upper())),
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
        let Some(sleep) = this.wait.armed() else {
            return Poll::Ready(Err(DeadlineError::Timer(TimerError::Stopped)));
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
            Wait::Unarmed { start, .. } => d.field("unarmed", start),
            Wait::Gone => d.field("timer", &"gone"),
        };
        d.finish()
    }
}

fn deadline<F: IntoFuture>(
    shared: &Arc<Shared>,
    start: Start,
    future: F,
) -> Deadline<F::IntoFuture> {
    Deadline {
        future: future.into_future(),
        wait: Wait::Unarmed {
            timer: TimerRef::new(shared),
            start,
        },
    }
}

macro_rules! future_methods {
    ($ty:ty, $example:literal) => {
        impl $ty {
            /// A future that completes `delay` from now (see [`Sleep`]).
            ///
            /// The timeout is scheduled now (the worker thread starts with the first one), so
            /// a refusal shows when the future is polled: `Err(Stopped)` or
            /// `Err(TooManyPending { .. })`.
            ///
            /// ```
            /// # use hashed_timer_wheel::HashedWheelTimer;
            /// # use std::time::Duration;
            /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
            #[doc = $example]
            /// futures::executor::block_on(t.sleep(Duration::from_millis(2))).unwrap();
            /// ```
            pub fn sleep(&self, delay: Duration) -> Sleep {
                Sleep::after(&self.shared, delay)
            }

            /// A future that completes at `deadline` (see [`Sleep`]); at once (on the next
            /// tick) if it has passed.
            ///
            /// ```
            /// # use hashed_timer_wheel::HashedWheelTimer;
            /// # use std::time::{Duration, Instant};
            /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
            #[doc = $example]
            /// let at = Instant::now() + Duration::from_millis(2);
            /// futures::executor::block_on(t.sleep_until(at)).unwrap();
            /// assert!(Instant::now() >= at);
            /// ```
            pub fn sleep_until(&self, deadline: Instant) -> Sleep {
                Sleep::until(&self.shared, deadline)
            }

            /// `future` with a deadline `limit` after its first poll that finds it pending:
            /// its output, or [`DeadlineError::Elapsed`] (see [`Deadline`]).
            ///
            /// Nothing is scheduled, and no clock read, until that poll: a future ready at
            /// its first poll costs the timer nothing. The limit counts from then (pingora's
            /// lazy timeout), not from the call (tokio's `timeout`): the deadline is never
            /// earlier than tokio's, and later by the time from the call to that poll.
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
                deadline(&self.shared, Start::After(duration_to_nanos(limit)), future)
            }

            /// `future` with a deadline at `deadline`: its output, or
            /// [`DeadlineError::Elapsed`] (see [`Deadline`]). Scheduled, as `timeout`, only
            /// once the future is pending; the instant is kept wherever that falls.
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
                let at = Start::At(self.shared.clock.nanos_at(deadline));
                self::deadline(&self.shared, at, future)
            }
        }
    };
}

for_owner_and_handle!(future_methods);
