//! The adapters: the wheel where the Rust service stack expects a timer, built on the public
//! futures (`Sleep`) and, for `delay_queue`, the pure wheel. Nothing imports this module.
//!
//! Each adapter holds a `KeepAlive` (the timer runs while it exists). Built on a stopped timer,
//! an adapter panics; used once its timer is stopped, it fails with an error value where its
//! interface has one (tower), and otherwise panics, as tokio's own timer does.

// `hyper` and `tower` are private: a public module named after a crate would shadow that crate
// in a user's `use hashed_timer_wheel::*;`, so the crate root exports their types flat.
pub mod delay_queue;
#[cfg(feature = "hyper")]
pub(crate) mod hyper;
#[cfg(feature = "tower")]
pub(crate) mod tower;

use crate::timer::KeepAlive;
use crate::TimerHandle;

/// What keeps `timer` running for an adapter; panics if it is stopped.
#[track_caller]
pub(crate) fn keep_alive(adapter: &'static str, timer: TimerHandle) -> KeepAlive {
    KeepAlive::new(timer).unwrap_or_else(|_| stopped(adapter, "cannot be built"))
}

/// Panics: `adapter` on a stopped timer, which `effect`.
#[cold]
#[track_caller]
pub(crate) fn stopped(adapter: &'static str, effect: &'static str) -> ! {
    panic!(
        "{adapter} on a stopped timer {effect}: stop() was called on its HashedWheelTimer (or \
         a TimerHandle), or the timer's owner was dropped with no adapter left on it. Build \
         adapters while the timer runs, and stop it after they are done."
    )
}
