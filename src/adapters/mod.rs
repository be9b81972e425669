//! The adapters: the wheel where the Rust service stack expects a timer. Each owns one public
//! type family and builds only on the public futures (`Sleep`) and, for `DelayQueue`, on the
//! pure wheel; nothing below looks up here.
//!
//! - `delay_queue`: [`DelayQueue`](crate::DelayQueue), tokio-util's queue of expiring values,
//!   on a `wheel::Wheel` of its own and one `Sleep` on the timer (always built; its `Stream`
//!   behind the `stream` feature).
//! - `tower` (feature `tower`): a timeout layer in the shape of `tower::timeout`.
//! - `hyper` (feature `hyper`): `hyper::rt::Timer` on the wheel.

// `delay_queue` is public (its `Key` and `Expired` live there); `hyper` and `tower` are not:
// a public module named after a crate would shadow that crate in a user's
// `use hashed_timer_wheel::*;`, so their types are exported flat from the crate root.
pub mod delay_queue;
#[cfg(feature = "hyper")]
pub(crate) mod hyper;
#[cfg(feature = "tower")]
pub(crate) mod tower;

use crate::sync::{process::AtomicBool, Ordering};
use crate::TimerHandle;

/// An adapter's error for a stopped timer, logged once per process and adapter. A handle does
/// not keep its timer alive, so an adapter built from the handle of an owner that was then
/// dropped (at the end of the function that set the server up, say) gets nothing but refusals:
/// without this log, hyper would close every connection as a timeout, or a tower stack fail
/// every call, with nothing said. Once: the mistake is one, and every connection repeats it.
pub(crate) struct StoppedTimer {
    adapter: &'static str,
    /// What the adapter does for its user while the timer is stopped.
    effect: &'static str,
    logged: AtomicBool,
}

impl StoppedTimer {
    pub(crate) const fn new(adapter: &'static str, effect: &'static str) -> StoppedTimer {
        StoppedTimer {
            adapter,
            effect,
            logged: AtomicBool::new(false),
        }
    }

    /// Logs the error, the first time, if `timer` is stopped: called where the adapter is
    /// built and where it asks the timer for a sleep or a deadline, which a stopped timer
    /// refuses. One load of the timer's state when it runs.
    #[inline]
    pub(crate) fn check(&self, timer: &TimerHandle) {
        if timer.is_stopped() {
            self.log();
        }
    }

    #[cold]
    fn log(&self) {
        // Relaxed: the flag orders nothing; at worst two threads both log.
        if !self.logged.swap(true, Ordering::Relaxed) {
            log::error!(
                "{} on a stopped timer: {}. The likely cause: the timer's owner, the \
                 HashedWheelTimer, was dropped (a TimerHandle does not keep it alive); keep it \
                 alive for as long as the {} is used, and stop it after the server. \
                 Logged once per process.",
                self.adapter,
                self.effect,
                self.adapter,
            );
        }
    }
}
