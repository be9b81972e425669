// The crate root: docs, module list and public exports; ARCHITECTURE.md is the map.

//! A Rust port of Netty's `HashedWheelTimer`: the same contract and the same timing, with
//! Netty's known defects fixed.
//!
//! ```
//! use hashed_timer_wheel::{HashedWheelTimer, Timeout};
//! use std::time::Duration;
//!
//! let timer = HashedWheelTimer::new(Duration::from_millis(10), 512);
//! let t = timer.new_timeout(|_: &Timeout| println!("timed out"), Duration::from_millis(50))?;
//! t.cancel(); // the response came back in time
//! # Ok::<(), hashed_timer_wheel::TimerError>(())
//! ```
//!
//! # Design
//! Time is cut into *ticks* of `tick_duration`; the *wheel* is a ring of `ticks_per_wheel`
//! *buckets* (a power of two). A timeout due at `deadline` belongs to tick
//! `deadline / tick_duration`, in bucket `tick & mask`. At the end of each tick the worker, in
//! Netty's order, unlinks the cancelled timeouts, moves up to 100 000 new ones into their
//! buckets and runs the current bucket's due timeouts: never before its deadline, at most
//! about a tick after. `new_timeout` and `cancel` never touch the wheel: they push onto queues
//! sharded by thread and flip one atomic state per timeout, so exactly one of `cancel()`, the
//! expiry and `stop()` wins. States come in reused blocks of 64: no allocation per timeout (a
//! closure that captures data is one box, reused for the next of its type). The clock is
//! `quanta`'s counter anchored on `Instant`, rounded up. The worker thread starts at the first
//! `new_timeout` and sleeps until the next tick with work; tasks run on it one at a time (or on
//! the executor): keep them short. The protocols are model-checked with loom.
//!
//! # Differences from Netty
//! The worker never wakes for nothing (Netty's wakes every tick), and a timeout rounds away costs
//! nothing while it waits (levels of 64 rounds, as tokio's wheel; Netty walks every entry of a
//! bucket at each visit). `new_timeout` racing `stop()` is refused or returned by `stop()`, never
//! lost; `pending_timeouts()` is exact (Netty #14959); `Duration::MAX` never fires (Netty #7760);
//! `ticks_per_wheel` above 2^30 is an error; user code may panic anywhere (counted in
//! [`TimerStats::panicked`], logged, nothing lost or run twice); `stop()` on the worker thread
//! is an error. Firing ticks are Netty's, and so is the order within a tick of the timeouts one
//! thread scheduled; driven by a runtime ([`Drive`]), a timeout fires at the runtime's first wake
//! past its deadline instead, a tick's in as many turns. The rest, with Netty's code beside this
//! crate's: `docs/migrating-from-netty.md`.
//!
//! # Beyond Netty
//! - [`TimerHandle::new_timeout_detached`]: a timeout with no [`Timeout`] handle.
//! - **Futures**, on any executor and with no thread of their own: [`TimerHandle::sleep`]
//!   and [`sleep_until`](TimerHandle::sleep_until) give a [`Sleep`];
//!   [`TimerHandle::timeout`] a [`Deadline`] (failing with [`DeadlineError::Elapsed`]);
//!   [`TimerHandle::interval`] an [`Interval`]. Dropping one cancels its timeout.
//!
//!   ```
//!   use hashed_timer_wheel::HashedWheelTimer;
//!   use std::time::Duration;
//!
//!   let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
//!   let request = async {
//!       timer.sleep(Duration::from_millis(2)).await.unwrap();
//!       "pong"
//!   };
//!   let reply = futures::executor::block_on(timer.timeout(Duration::from_secs(1), request));
//!   assert_eq!(reply, Ok("pong"));
//!   ```
//! - **Typed timers** ([`Builder::build_typed`]): tasks of one type `T:`[`TypedTask`], stored
//!   whole, with no box. Periodic tasks, futures and [`drive`](TimerHandle::drive) (a
//!   runtime running the ticks) are on the default timer.
//! - **Periodic tasks**: [`TimerHandle::schedule_at_fixed_rate`] (with a [`MissedRuns`]
//!   policy) and [`TimerHandle::schedule_with_fixed_delay`], cancelled by one
//!   [`PeriodicTimeout`].
//! - **Counters**: [`TimerHandle::stats`] ([`TimerStats`]).
//!
//! # In the Rust service stack
//! Give a service's timer a 1 ms tick: limits round up to the tick (by default, 100 ms).
//! - [`DelayQueue`] ([`delay_queue`]): tokio-util's, on a wheel of its own. Any `Duration` is
//!   accepted; removing the last item, `clear` and a reset into the past wake the waiting task.
//! - `HyperTimer` (feature `hyper`): `hyper::rt::Timer` for hyper 1.x.
//! - `TimeoutLayer` (feature `tower`): `tower::timeout` (tower 0.5), failing with its `Elapsed`.
//!
//! ```
//! use hashed_timer_wheel::{DelayQueue, HashedWheelTimer};
//! use std::time::Duration;
//!
//! let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
//! let mut idle = DelayQueue::new(timer.handle());
//! let session = idle.insert("session 42", Duration::from_millis(3));
//! idle.reset(&session, Duration::from_millis(5)); // it was used: idle from now
//! let closed = futures::executor::block_on(std::future::poll_fn(|cx| idle.poll_expired(cx)));
//! assert_eq!(closed.unwrap().into_inner(), "session 42");
//! ```
//!
//! # Cargo features
//! None by default: `hyper` and `tower` (their adapters; `tower` builds tokio with `time` only,
//! no runtime) and `stream` (`futures_core::Stream` for [`DelayQueue`]).
//!
//! # Testing code that uses a timer
//! [`Builder::build_manual`]: a timer with no thread, whose [`ManualDriver`] moves its clock.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

// Bottom up, in the order of ARCHITECTURE.md's module table (`tests/architecture.rs` checks
// it). The comments between them keep rustfmt from sorting them.
// Concurrency primitives (std or loom).
mod sync;
// The error enums.
mod error;
// The engine: slots, shards, the wheel, the worker, who runs the turns, the lifecycle, the tasks.
mod engine;
// The owner, its handle's methods, the builder, the futures, the runtime's drive.
mod timer;
// Adapters to other crates' timer interfaces.
mod adapters;

/// What the loom models observe and drive beyond the public API (`--cfg loom` only).
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_hooks {
    pub use crate::sync::loom_hooks::{hold_clock, threads_spawned};

    /// With the clock held: moves the clock to `to` (never back) and, as an OS timer would,
    /// wakes the worker (or a runtime's driver) if the tick it planned to sleep to has ended.
    pub fn advance_clock(timer: &crate::HashedWheelTimer, to: std::time::Duration) {
        let shared = &timer.handle().0;
        let to = crate::engine::clock::nanos(to);
        shared.clock.loom_advance(to);
        // Pairs with the fence in the worker's `park_until` (loom treats SeqCst accesses as
        // AcqRel; its fences are SeqCst).
        crate::sync::fence(crate::sync::Ordering::SeqCst);
        let planned = shared.planned();
        let ends = planned.saturating_add(1).saturating_mul(shared.tick_nanos);
        // A plan of tick 0 reads as `AWAKE`: an unpark the worker does not need is harmless.
        if planned != crate::engine::NEVER && ends <= to {
            shared.unpark_worker();
        }
    }
}

pub use adapters::delay_queue::{self, DelayQueue};
// The hyper and tower adapters' types, flat (why: `adapters/mod.rs`).
#[cfg(feature = "hyper")]
pub use adapters::hyper::{HyperSleep, HyperTimer};
#[cfg(feature = "tower")]
pub use adapters::tower::{TimeoutLayer, TimeoutResponseFuture, TimeoutService};
pub use engine::{
    BoxedTask, NeverRan, Stored, Timeout, TimerStats, TimerTask, TypedTask, INSTANCE_COUNT_LIMIT,
};
pub use error::{BuildError, DeadlineError, TimerError};
pub use timer::{
    Builder, Deadline, Drive, HashedWheelTimer, Interval, ManualDriver, MissedRuns,
    PeriodicTimeout, Sleep, Timer, TimerHandle, MAX_TICKS_PER_WHEEL,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_clone<T: Clone>() {}

    #[test]
    fn public_types_are_thread_safe() {
        // A tuple is `Send`, `Sync` or `Clone` if each of its types is.
        assert_send_sync::<(HashedWheelTimer, TimerHandle, Timeout)>();
        assert_send_sync::<(ManualDriver, TimerError, BuildError)>();
        assert_clone::<(Timeout, TimerHandle)>();
    }
}

/// The migration guide's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/migrating-from-netty.md")]
pub struct MigratingFromNetty;

/// The README's Rust examples, compiled and run as doctests (those on the hyper and tower
/// adapters need their features).
#[cfg(all(doctest, feature = "hyper", feature = "tower"))]
#[doc = include_str!("../README.md")]
pub struct ReadMe;
