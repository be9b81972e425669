//! The `stats()` methods, which read [`TimerStats`] from the shared counters
//! (`shared/counters.rs`), and the `Debug` output of the owner and its handles (whose `pending`
//! is `pending_timeouts()`, read without waiting).

use super::HashedWheelTimer;
use crate::shared::{Stored, TimerHandle, TimerStats};
use std::fmt;
use std::time::Duration;

macro_rules! stats_methods {
    ($ty:ident, $example:literal) => {
        impl<J: Stored> $ty<J> {
            /// Counters about the worker and the timeouts' outcomes, read with relaxed loads. The
            /// worker publishes the outcomes (`expired`, `cancelled`, the lateness and run
            /// figures) once per turn, while `pending_timeouts()` moves with each timeout: a
            /// snapshot taken during a turn (from a task, or while one runs) lags by that turn.
            /// A cancel the worker has not processed when `stop()` runs, one racing `stop()`
            /// included, is counted by `stop()`; with the owner dropped inside a task, every
            /// timeout still pending counts as cancelled, as nothing returns it.
            ///
            /// ```
            /// use hashed_timer_wheel::{HashedWheelTimer, Timeout};
            /// use std::time::Duration;
            ///
            /// let (timer, driver) = HashedWheelTimer::builder()
            ///     .tick_duration(Duration::from_millis(10))
            ///     .build_manual()?;
            #[doc = $example]
            /// assert_eq!(t.stats().wakeups, 0, "not started: never woke");
            /// t.new_timeout(|_: &Timeout| {}, Duration::from_millis(5)).unwrap();
            /// t.new_timeout(|_: &Timeout| {}, Duration::from_millis(5)).unwrap().cancel();
            /// driver.advance(Duration::from_millis(10));
            /// let stats = t.stats();
            /// assert_eq!((stats.expired, stats.cancelled), (1, 1));
            /// assert_eq!(stats.lateness[0], 1, "fired within a tick of its deadline");
            /// # Ok::<(), hashed_timer_wheel::BuildError>(())
            /// ```
            pub fn stats(&self) -> TimerStats {
                self.shared.stats()
            }
        }

        /// Shows the state, the tick duration, the wheel's length, `pending` and `max_pending`,
        /// and never blocks: `pending` is [`pending_timeouts()`](Self::pending_timeouts) read
        /// without waiting for a producer, so while another thread schedules a timeout it can
        /// also count timeouts that thread has reserved and not yet used: an upper bound then
        /// (exact with a pending limit, which reserves none ahead).
        impl<J: Stored> fmt::Debug for $ty<J> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let s = &self.shared;
                f.debug_struct(stringify!($ty))
                    .field("state", &s.state_name())
                    .field("tick_duration", &Duration::from_nanos(s.tick_nanos))
                    .field("wheel_len", &s.wheel_len)
                    .field("pending", &s.pending_without_waiting())
                    .field("max_pending", &s.max_pending)
                    .finish_non_exhaustive()
            }
        }
    };
}

for_owner_and_handle!(stats_methods);
