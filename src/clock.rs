//! Where time comes from: the monotonic system clock, or a manual clock that tests and loom
//! models move by hand.
//!
//! All times inside the crate are nanoseconds since the timer's origin (`u64`, about 584 years).

use crate::sync::{Arc, AtomicU64, Ordering};
use std::time::Instant;

#[derive(Clone, Debug)]
pub(crate) enum Clock {
    /// `Instant`-based; the origin is fixed when the timer is built.
    // Under loom every timer runs on a manual clock.
    #[cfg_attr(loom, allow(dead_code))]
    System { origin: Instant },
    /// Starts at 0 and moves only when told to.
    Manual(Arc<AtomicU64>),
}

impl Clock {
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn system() -> Clock {
        Clock::System {
            origin: Instant::now(),
        }
    }

    pub(crate) fn manual() -> Clock {
        Clock::Manual(Arc::new(AtomicU64::new(0)))
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        match self {
            Clock::System { origin } => duration_to_nanos(origin.elapsed()),
            // Acquire: pairs with the Release in `advance_to`, so whoever reads a time also sees
            // what was done before the clock reached it.
            Clock::Manual(t) => t.load(Ordering::Acquire),
        }
    }

    /// Moves a manual clock forward to `nanos` (never backwards). No effect on the system clock.
    pub(crate) fn advance_to(&self, nanos: u64) {
        if let Clock::Manual(t) = self {
            // Release: pairs with the Acquire in `now`.
            t.fetch_max(nanos, Ordering::Release);
        }
    }
}

/// Saturating conversion: a `Duration` too large for 64-bit nanoseconds becomes `u64::MAX`.
#[inline]
pub(crate) fn duration_to_nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
