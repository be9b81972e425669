//! The adapters: the wheel where the Rust service stack expects a timer. Each owns one public
//! type family, built on the public futures (`Sleep`) and, for `delay_queue`, the pure wheel;
//! `hyper` and `tower` are behind their features. Nothing imports this module.

// `hyper` and `tower` are private: a public module named after a crate would shadow that crate
// in a user's `use hashed_timer_wheel::*;`, so the crate root exports their types flat.
pub mod delay_queue;
#[cfg(feature = "hyper")]
pub(crate) mod hyper;
#[cfg(feature = "tower")]
pub(crate) mod tower;

use crate::shared::log_caught;
use crate::sync::{process::AtomicBool, Ordering};
use crate::TimerHandle;

/// An adapter's error for a stopped timer, logged once per process and adapter: a handle does
/// not keep its timer alive, and an adapter on a dropped owner's handle would otherwise fail
/// every connection or call silently.
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

    /// Logs the error, the first time, if `timer` is stopped: where the adapter is built and
    /// where it asks for a sleep or a deadline. One load of the timer's state when it runs.
    #[inline]
    pub(crate) fn check(&self, timer: &TimerHandle) {
        if timer.is_stopped() {
            self.log();
        }
    }

    #[cold]
    fn log(&self) {
        // Relaxed: the flag orders nothing; the swap lets one thread log.
        if !self.logged.swap(true, Ordering::Relaxed) {
            // Caught: a logger that panics would unwind the adapter's caller (a call, with its
            // request unserved) instead of its failing as documented.
            log_caught(
                log::Level::Error,
                format_args!(
                    "{} on a stopped timer: {}. The likely cause: the timer's owner, the \
                     HashedWheelTimer, was dropped (a TimerHandle does not keep it alive); keep \
                     it alive for as long as the {} is used, and stop it after the server. \
                     Logged once per process.",
                    self.adapter, self.effect, self.adapter,
                ),
            );
        }
    }
}
