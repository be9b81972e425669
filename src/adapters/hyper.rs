//! `hyper::rt::Timer` (hyper 1.x) on the wheel: [`HyperTimer`] and [`HyperSleep`], hyper's
//! connection timeouts as [`Sleep`]s.

use super::{keep_alive, stopped};
use crate::sync::Arc;
use crate::timer::KeepAlive;
use crate::{Sleep, TimerHandle};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A `hyper::rt::Timer` whose sleeps are the timer's [`Sleep`]s: give it to hyper's connection
/// builders (`.timer(HyperTimer::new(timer.handle()))`). `sleep` boxes a [`HyperSleep`], `reset`
/// moves that sleep's deadline, `now` reads the timer's clock. A reset to a later deadline while
/// the sleep's timeout is pending schedules nothing (hyper pushes its header read timeout back on
/// every request): the task wakes once at the old deadline and the sleep waits on. Any other
/// reset is a [`Sleep::reset`]; another timer's sleep is replaced by one of this timer's. Sleeps
/// round up to the end of a tick: build the timer with a 1 ms tick, as below, not the default
/// 100 ms.
///
/// # The timer runs while a `HyperTimer` exists
/// Each clone, and each [`HyperSleep`] it gives hyper, keeps its timer running, though the owner
/// ([`HashedWheelTimer`]) is dropped. [`stop()`](crate::TimerHandle::stop) stops it for everyone:
/// the waiting sleeps complete at once, and the `HyperTimer` then panics when asked for a sleep
/// or a reset, as hyper's tokio timer does on a runtime that has shut down.
///
/// [`HashedWheelTimer`]: crate::HashedWheelTimer
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, HyperTimer};
/// use hyper::rt::Timer;
/// use std::time::Duration;
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
/// let hyper_timer = HyperTimer::new(timer.handle());
/// futures::executor::block_on(hyper_timer.sleep(Duration::from_millis(2)));
/// // With hyper: hyper::server::conn::http1::Builder::new().timer(hyper_timer)
/// ```
#[derive(Clone, Debug)]
pub struct HyperTimer {
    timer: KeepAlive,
}

impl HyperTimer {
    /// A hyper timer on `timer`, which keeps it running.
    ///
    /// # Panics
    /// If the timer is stopped (its owner dropped with no adapter left on it, or `stop()`).
    #[track_caller]
    pub fn new(timer: TimerHandle) -> Self {
        HyperTimer {
            timer: keep_alive("HyperTimer", timer),
        }
    }

    /// Panics if the timer is stopped: hyper would take each sleep for a timeout.
    fn check_running(&self) {
        if self.timer.is_stopped() {
            stopped("HyperTimer", "cannot time hyper's connections");
        }
    }

    fn boxed(&self, sleep: Sleep) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HyperSleep {
            sleep,
            _running: self.timer.clone(),
        })
    }
}

impl hyper::rt::Timer for HyperTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.check_running();
        self.boxed(self.timer.sleep(duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.check_running();
        self.boxed(self.timer.sleep_until(deadline))
    }

    fn now(&self) -> Instant {
        let clock = &self.timer.0.clock;
        clock.instant_at(clock.now())
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<HyperSleep>() {
            Some(ours) if Arc::ptr_eq(&ours.sleep.timer().0, &self.timer.0) => {
                self.check_running();
                ours.get_mut().sleep.extend_or_reset(new_deadline);
            }
            _ => *sleep = self.sleep_until(new_deadline),
        }
    }
}

/// The future [`HyperTimer`] gives hyper: a [`Sleep`] that completes with `()`, even refused.
#[derive(Debug)]
pub struct HyperSleep {
    sleep: Sleep,
    _running: KeepAlive,
}

impl HyperSleep {
    /// The crate's [`Sleep`] inside; [`HyperTimer`] boxes its sleeps as `dyn hyper::rt::Sleep`,
    /// so downcast one to reach it.
    ///
    /// ```
    /// # use hashed_timer_wheel::{HashedWheelTimer, HyperSleep, HyperTimer};
    /// # use hyper::rt::Timer;
    /// # use std::time::{Duration, Instant};
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let before = Instant::now();
    /// let mut sleep = HyperTimer::new(timer.handle()).sleep(Duration::from_secs(60));
    /// let ours = sleep.as_mut().downcast_mut_pin::<HyperSleep>().unwrap();
    /// assert!(ours.get_ref().deadline() >= before + Duration::from_secs(60));
    /// ```
    pub fn get_ref(&self) -> &Sleep {
        &self.sleep
    }
}

impl Future for HyperSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // Ok (the deadline) and Err (stopped, refused) alike: hyper's timeout fires.
        Pin::new(&mut self.sleep).poll(cx).map(|_| ())
    }
}

impl hyper::rt::Sleep for HyperSleep {}
