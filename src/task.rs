//! The work a timeout runs: [`TimerTask`] (any closure, boxed on the default timer) and
//! [`TypedTask`] (a typed timer's tasks, stored whole); both reach the core as its `Stored`.

use crate::engine::{BoxedTask, Payload};
use crate::Timeout;

/// A task run once when its [`Timeout`] expires (Netty's `TimerTask`).
///
/// Every `FnOnce(&Timeout) + Send + 'static` closure is one. A closure that captures nothing
/// allocates nothing; one that captures data is boxed (see [`BoxedTask`]).
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, Timeout, TimerTask};
/// use std::time::Duration;
///
/// struct Retry { attempt: u32 }
///
/// impl TimerTask for Retry {
///     fn run(self: Box<Self>, timeout: &Timeout) {
///         if self.attempt < 3 {
///             let next = Retry { attempt: self.attempt + 1 };
///             let _ = timeout.timer().new_timeout(next, Duration::from_millis(10));
///         }
///     }
/// }
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(10), 64);
/// timer.new_timeout(Retry { attempt: 0 }, Duration::from_millis(10)).unwrap();
/// ```
pub trait TimerTask: Send + 'static {
    /// Runs the task: at most once, on the worker thread (or the executor).
    ///
    /// A panic, of the task or of its `Drop` when dropped unrun, is caught, counted in
    /// [`TimerStats::panicked`](crate::TimerStats::panicked) and logged.
    fn run(self: Box<Self>, timeout: &Timeout);

    /// Runs the task held by value: what the timer calls when the task's time comes. Closures
    /// run in place; the default boxes the task for [`TimerTask::run`]. A task type of your
    /// own can run here without that box.
    #[inline]
    fn run_unboxed(self, timeout: &Timeout)
    where
        Self: Sized,
    {
        TimerTask::run(Box::new(self), timeout)
    }
}

impl<F> TimerTask for F
where
    F: FnOnce(&Timeout) + Send + 'static,
{
    #[inline]
    fn run(self: Box<Self>, timeout: &Timeout) {
        (*self)(timeout)
    }

    #[inline]
    fn run_unboxed(self, timeout: &Timeout) {
        self(timeout)
    }
}

/// A boxed task is a task: what the [`Timer`](crate::Timer) trait passes.
impl TimerTask for Box<dyn TimerTask> {
    fn run(self: Box<Self>, timeout: &Timeout) {
        (*self).run(timeout)
    }

    fn run_unboxed(self, timeout: &Timeout) {
        self.run(timeout)
    }
}

/// A task of a typed timer (`HashedWheelTimer<T>`), stored in place: scheduling allocates nothing.
///
/// One type per timer (make it an enum for several kinds of work), built with
/// [`Builder::build_typed`](crate::Builder::build_typed).
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, Timeout, TypedTask};
/// use std::sync::mpsc;
/// use std::time::Duration;
///
/// struct RequestTimeout {
///     id: u64,
///     expired: mpsc::Sender<u64>,
/// }
///
/// impl TypedTask for RequestTimeout {
///     fn run(self, _: &Timeout<Self>) {
///         let _ = self.expired.send(self.id);
///     }
/// }
///
/// let timer: HashedWheelTimer<RequestTimeout> = HashedWheelTimer::builder()
///     .tick_duration(Duration::from_millis(1))
///     .build_typed()
///     .unwrap();
/// let (tx, rx) = mpsc::channel();
/// let answered = timer.new_timeout(RequestTimeout { id: 1, expired: tx.clone() }, Duration::from_secs(5))?;
/// timer.new_timeout(RequestTimeout { id: 2, expired: tx }, Duration::from_millis(5))?;
/// answered.cancel(); // request 1 was answered in time
/// assert_eq!(rx.recv()?, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait TypedTask: Send + Sized + 'static {
    /// Runs the task: at most once, on the worker thread (or the executor), as for [`TimerTask`].
    fn run(self, timeout: &Timeout<Self>);
}

impl<T: TypedTask> Payload for T {
    #[inline]
    fn run(self, timeout: &Timeout<Self>) {
        TypedTask::run(self, timeout)
    }
}

/// `task` as the default timer stores it: in the last spare box if one of its type is there.
#[inline]
pub(crate) fn boxed<T: TimerTask>(task: T, spares: &mut Vec<BoxedTask>) -> BoxedTask {
    BoxedTask::reusing(move |t: &Timeout| task.run_unboxed(t), spares)
}
