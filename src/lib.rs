// The crate root: the crate's documentation, the list of its modules and the public names they
// export. It owns no code of its own; ARCHITECTURE.md is the map.

//! A Rust port of Netty's `HashedWheelTimer`: the same contract and the same timing, for Java
//! services moving to Rust, with Netty's known defects fixed.
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
//! Time is cut into *ticks* of `tick_duration`. The *wheel* is a ring of `ticks_per_wheel`
//! *buckets* (rounded up to a power of two, so the bucket of tick `t` is `t & mask`). A timeout
//! due at `deadline` (nanoseconds since the timer's origin) belongs to tick
//! `calculated = deadline / tick_duration` and waits in bucket `calculated & mask`; if that is
//! more than one turn of the wheel away it has `remaining_rounds > 0` and survives the bucket's
//! visits until its round comes. A deadline already in the past goes into the current bucket.
//! The firing ticks are Netty's; what differs is where a timeout waits while it is rounds away
//! (see "Differences from Netty").
//!
//! One worker thread runs the ticks. At the end of each tick it, in this order (Netty's):
//! 1. processes the cancellation queue (unlinks cancelled timeouts, frees them);
//! 2. moves up to 100 000 new timeouts from the `timeouts` queue into their buckets;
//! 3. expires the current bucket: every timeout whose round has come and whose deadline has
//!    passed runs its task;
//! 4. moves to the next tick.
//!
//! A timeout therefore never fires before its deadline, and at most about one tick after it.
//!
//! # Threading model
//! - `new_timeout` and `cancel` may be called from any thread. They never touch the wheel: they
//!   push onto MPSC queues (a short lock around a `Vec::push`, sharded by producer thread; the
//!   worker swaps the buffers out once per tick) and flip one atomic state per timeout. Only the
//!   worker touches buckets. A cancel of a timeout not yet moved into a bucket is that one
//!   atomic flip and nothing else.
//! - Timeout states are allocated 32 at a time per producer thread, and a task of up to 32
//!   bytes (a closure capturing an id, a deadline and a reference, say) is stored in place, so
//!   `new_timeout` does not call the allocator and the worker frees nothing when the task has
//!   run; a larger task is boxed. While producers are busy the worker hands the chunks of
//!   settled timeouts back to them for reuse, so the schedule-then-cancel pattern allocates
//!   nothing once warm.
//! - The time is read from the TSC where the kernel trusts it (see the `clock` module), rounded
//!   up so that a deadline is never early. The TSC is calibrated once per process, and the
//!   calibration checked over 20 ms, on a thread (`hashed-timer-wheel-tsc`) that the first timer
//!   built starts, so that building it does not wait; meanwhile `new_timeout` reads the
//!   monotonic clock. The thread ends there. A worker's turn reads the kernel's clock source
//!   again once a second has passed since the last read (so an idle process wakes for
//!   nothing): once the kernel no longer keeps time with the TSC (it found the TSC unstable,
//!   the VM moved to another host, the clock source was changed), `new_timeout` reads the
//!   monotonic clock for the rest of the process. The assumption: until that re-read, up to a
//!   second after the kernel's switch, or a tick after a pause (plus however long the kernel
//!   takes to decide, or a task holds up its worker), the TSC's skew between cores stays
//!   within the 512 ns the reading is rounded up by.
//! - A timeout moves `pending -> cancelled` or `pending -> expired` by compare-and-swap; exactly
//!   one of `cancel()`, the worker's expiry and `stop()` wins.
//! - Tasks run on the worker thread, one after another (or on the executor you configure), so a
//!   slow task delays the ones after it; hand heavy work to another thread.
//! - The worker starts lazily on the first `new_timeout` (or `start`), exactly once. It sleeps
//!   until the next tick that has work and parks when nothing is pending; a producer whose
//!   timeout is due sooner wakes it.
//! - The concurrent protocols (`new_timeout`, `cancel`, tick, `stop`, lazy start, the pending
//!   limit, sleeping and waking) are model-checked with loom (`loom-tests/`).
//!
//! # Differences from Netty
//! - **Never wakes for nothing.** Netty's worker wakes every tick even when idle (1 000
//!   wake-ups a second at a 1 ms tick). This one sleeps until the next tick with work; firing
//!   ticks are the same.
//! - **`new_timeout` racing `stop()` is never lost**: the timeout is either refused with
//!   [`TimerError::Stopped`] or returned by `stop()`. Netty can drop it.
//! - **`pending_timeouts()` is exact**: a refused call does not count (Netty counts +1 on a
//!   stopped timer), a timeout cancelled during its due tick is not counted twice (Netty #14959),
//!   and it is 0 after `stop()`.
//! - **`Duration::MAX` never fires** (Netty #7760 fired `Long.MAX_VALUE` delays at once):
//!   deadlines saturate.
//! - **More than 100 000 timeouts in one tick all fire**, the rest on the following ticks.
//! - **`ticks_per_wheel` above 2^30 is an error** (Netty 4.1.107+ throws
//!   `NegativeArraySizeException`).
//! - `stop()` from the worker thread is an error value, not an exception; dropping the last
//!   owner inside a task does not deadlock.
//! - **User code may panic anywhere**: a task (Netty catches its `Throwable` too), a task's
//!   `Drop` (when it is cancelled, or dropped by `stop()`), a future's waker, the executor.
//!   The timer catches each panic, counts it in [`TimerStats::panicked`] and logs it, and goes
//!   on: nothing is lost, nothing is run twice, nothing is run on another task's data, and
//!   `stop()` still returns every timeout that never ran. (A task that panics when run and
//!   again in its `Drop` while that panic unwinds aborts the process, as any such value does
//!   in Rust.)
//! - One timer holds at most 134 217 727 (2^27 - 1) pending timeouts (some 6 GB of them); beyond
//!   that `new_timeout` returns [`TimerError::TooManyPending`]. Netty has no such bound. It keeps
//!   a wheel node at 40 bytes.
//! - `stop()` returns the cancelled timeouts, but their tasks are dropped (a task is owned by the
//!   timer, not shared with the handle).
//! - The tick grid starts when the timer is built, not when its thread starts; this changes no
//!   guarantee (never early, at most about a tick late).
//! - `new_timeout` reads the time from the TSC (where, and while, the kernel itself uses it),
//!   rounded up by at most about a microsecond, where Netty calls `System.nanoTime()`: a
//!   deadline is never earlier than Netty's, and in rare cases (a deadline within that
//!   microsecond of a tick's end) it falls in the next tick.
//! - **A timeout rounds away costs nothing while it waits.** Netty keeps every timeout in its
//!   bucket and walks the whole bucket at each visit to decrement `remaining_rounds`: with
//!   millions of long idle-connection timeouts pending, that walk is most of a core. Here a
//!   bucket holds only what fires in the current or next round; later timeouts wait in far
//!   slots by round (levels of 64, as tokio's and Linux's wheels) and move into their bucket
//!   at the start of the round before theirs, before that tick's transfer, so firing ticks and
//!   the order within a tick are Netty's.
//! - `remaining_rounds` is not decremented in place: each entry keeps its deadline, and the
//!   worker compares `calculated <= tick` when the bucket comes round, which is Netty's
//!   `remaining_rounds == 0` (see the design notes in the source, `wheel/mod.rs`).
//!
//! # Beyond Netty
//! - **Timeouts without a handle**: [`HashedWheelTimer::new_timeout_detached`] schedules work
//!   nobody cancels with the same timing and no [`Timeout`] returned, so no reference is taken
//!   for one.
//! - **Futures on the same wheel**, for async code, with no runtime dependency and no thread
//!   of their own: [`HashedWheelTimer::sleep`] and [`sleep_until`](HashedWheelTimer::sleep_until)
//!   give a [`Sleep`]; [`HashedWheelTimer::timeout`] puts a deadline on any future
//!   ([`Deadline`], failing with [`DeadlineError::Elapsed`]). Any executor drives them (tokio,
//!   `futures`' `block_on`, smol); the timer's worker wakes them. Dropping one cancels its
//!   timeout; a stopped timer completes them with an error, so they never hang.
//!   [`HashedWheelTimer::interval`] gives an [`Interval`], ticks at a fixed rate awaited one by
//!   one, with the periodic tasks' [`MissedRuns`] policy.
//!
//!   ```
//!   use hashed_timer_wheel::{DeadlineError, HashedWheelTimer};
//!   use std::time::Duration;
//!
//!   let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
//!   let reply = futures::executor::block_on(async {
//!       let request = async {
//!           timer.sleep(Duration::from_millis(2)).await.unwrap();
//!           "pong"
//!       };
//!       timer.timeout(Duration::from_secs(1), request).await
//!   });
//!   assert_eq!(reply, Ok("pong"));
//!   # let _: Result<&str, DeadlineError> = reply;
//!   ```
//! - **Typed timers** for tasks that carry data at a high rate: a
//!   `HashedWheelTimer<T>` built by [`Builder::build_typed`] takes tasks of one type
//!   `T:`[`TypedTask`] and stores each whole in its queue and wheel, where the timer most code
//!   uses erases each task's type (stored in place up to 32 bytes, boxed beyond) and keeps its
//!   words aside while it waits. The same contract, handles and counters; periodic tasks and the
//!   futures are on the default timer.
//! - **Periodic tasks** on the same wheel: [`HashedWheelTimer::schedule_at_fixed_rate`] (Java's
//!   `scheduleAtFixedRate`: deadlines fixed from the first, no drift, and a [`MissedRuns`]
//!   policy for runs the worker could not make on time) and
//!   [`HashedWheelTimer::schedule_with_fixed_delay`]; one [`PeriodicTimeout`] cancels every
//!   future run, runs never overlap, and `pending_timeouts()` counts the task once.
//! - **Operational counters**: [`HashedWheelTimer::stats`] gives expired, cancelled, refused
//!   and panicked counts and how late timeouts fired ([`TimerStats`]), at no cost to
//!   `new_timeout` and `cancel`.
//!
//! # In the Rust service stack
//! The wheel plugs in where services reach for a timer, one timer serving all of them. Their
//! limits round up to the timer's tick (never early, up to about a tick late): build a
//! service's timer with a 1 ms tick (`HashedWheelTimer::new(Duration::from_millis(1), 512)`),
//! not the default timer's 100 ms, on which a 50 ms limit fires up to 150 ms after the call.
//! - [`DelayQueue`] ([`delay_queue`]): tokio-util's queue of values that come back at their
//!   deadlines, with its method names (`insert`, `remove`, `reset`, `peek`, `poll_expired`...),
//!   on a wheel of its own woken by one [`Sleep`]. Any `Duration` is accepted; an empty queue
//!   returns `Ready(None)`; `remove`, `clear` and a reset into the past wake the waiting task.
//! - `HyperTimer` (feature `hyper`): `hyper::rt::Timer` for hyper 1.x, so that hyper's
//!   connection timeouts (header read, keep-alive) are sleeps on the wheel.
//! - `TimeoutLayer` (feature `tower`): a tower 0.5 `Layer` in the shape of
//!   `tower::timeout`; a call past its limit fails with tower's own
//!   `tower::timeout::error::Elapsed` in a `tower::BoxError`, so that code ported from
//!   `tower::timeout` (`e.is::<tower::timeout::error::Elapsed>()`) matches it unchanged.
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
//! None is on by default, and the default build depends on none of their crates.
//! - `hyper`: `HyperTimer` and `HyperSleep` (depends on `hyper` 1.x, no features).
//! - `tower`: `TimeoutLayer`, `TimeoutService` and `TimeoutResponseFuture` (depends on `tower`
//!   0.5 with its `timeout` feature, for its `Elapsed` error, which builds `tokio` with `time`
//!   only: no runtime, no thread).
//! - `stream`: `futures_core::Stream` for [`DelayQueue`] (depends on `futures-core`).
//!
//! # Testing code that uses a timer
//! [`Builder::build_manual`] gives a timer with no thread and a [`ManualDriver`] that moves its
//! clock: tests run due tasks deterministically, with no sleeps.
#![warn(missing_docs)]
// The one exception allows it: `shared::small_task` (a task's words stored in place).
#![deny(unsafe_code)]

// The modules, bottom up by layer, in the order of ARCHITECTURE.md's module table: each
// imports only modules listed before it (`tests/architecture.rs` checks the table's order
// against the imports). `macros` comes first so that every module can use its `cfg_*!` macros.
#[macro_use]
mod macros;
// Concurrency primitives (std or loom) and the producers' queue.
mod sync;
// Time since a timer's origin.
mod clock;
// The error enums.
mod error;
// The pure wheel: buckets, far slots, its slab.
mod wheel;
// What producers and the worker share.
mod shared;
// The worker: one tick as a pure step, and its thread's loop.
mod worker;
// The `Timeout` handle.
mod timeout;
// The task traits.
mod task;
// The owner, its handles' methods, the builder, the futures, the lifecycle.
mod timer;
// Adapters to other crates' timer interfaces.
mod adapters;

/// What the loom models observe and drive beyond the public API. Compiled only under
/// `--cfg loom`.
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_hooks {
    pub use crate::sync::loom_hooks::{hold_clock, threads_spawned};
    pub use crate::timer::advance_clock;
}

pub use adapters::delay_queue::{self, DelayQueue};
// The hyper and tower adapters' types, flat (why: `adapters/mod.rs`).
#[cfg(feature = "hyper")]
pub use adapters::hyper::{HyperSleep, HyperTimer};
#[cfg(feature = "tower")]
pub use adapters::tower::{TimeoutLayer, TimeoutResponseFuture, TimeoutService};
pub use error::{BuildError, DeadlineError, TimerError};
pub use shared::{BoxedTask, Stored, TimerHandle};
pub use task::{TimerTask, TypedTask};
pub use timeout::Timeout;
pub use timer::{
    Builder, Deadline, Drive, HashedWheelTimer, Interval, ManualDriver, MissedRuns,
    PeriodicTimeout, Sleep, Timer, TimerStats, INSTANCE_COUNT_LIMIT, MAX_TICKS_PER_WHEEL,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_clone<T: Clone>() {}

    #[test]
    fn public_types_are_thread_safe() {
        assert_send_sync::<HashedWheelTimer>();
        assert_send_sync::<TimerHandle>();
        assert_send_sync::<Timeout>();
        assert_send_sync::<ManualDriver>();
        assert_send_sync::<TimerError>();
        assert_send_sync::<BuildError>();
        assert_clone::<Timeout>();
        assert_clone::<TimerHandle>();
    }
}

/// The migration guide's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/migrating-from-netty.md")]
pub struct MigratingFromNetty;
