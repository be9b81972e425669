//! The work a timeout runs and how a timer stores it: [`TimerTask`] (any closure, boxed on the
//! default timer, the box reused for the next closure of its type) and [`TypedTask`] (a typed
//! timer's tasks, stored whole); both are a `Stored`, run once with its own `Timeout`. User code
//! runs here, caught.

use super::{Shared, Timeout};
use std::any::Any;
use std::fmt;

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

/// What a timer stores per timeout: [`BoxedTask`] on the default timer, a [`TypedTask`]'s `T`
/// on a typed one. Sealed: those two are all there is.
pub trait Stored: Payload {}

impl<J: Payload> Stored for J {}

/// The engine's view of what a timer stores (the seal of [`Stored`]).
#[allow(unreachable_pub)] // public only as `Stored`'s supertrait; its module is private
pub trait Payload: Send + Sized + 'static {
    /// Runs the task; `timeout` is its own handle.
    fn run(self, timeout: &Timeout<Self>);

    /// Runs the task, keeping in `spares` what a later task can reuse.
    fn run_keeping(self, timeout: &Timeout<Self>, _spares: &mut Vec<Self>) {
        self.run(timeout)
    }

    /// Drops the task unrun, keeping in `spares` what a later task can reuse.
    fn drop_keeping(self, _spares: &mut Vec<Self>) {}

    /// Whether `run_keeping` ever keeps a spare.
    const KEEPS: bool = false;
}

/// The boxed timer's task: any [`TimerTask`], in a box (no allocation for one of no size, such
/// as a closure that captures nothing; the box reused for the next task of its type).
pub struct BoxedTask(Box<dyn InBox>);

/// A task in its box. Run or dropped, a box that can hold the next task comes back empty.
trait InBox: Send {
    fn call(self: Box<Self>, timeout: &Timeout<BoxedTask>) -> Option<Box<dyn InBox>>;
    fn clear(self: Box<Self>) -> Option<Box<dyn InBox>>;
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

/// A task with data, until it runs.
struct Holder<T>(Option<T>);

/// A task of no size: its box allocates nothing, and none is kept.
struct Bare<T>(T);

impl<T: TimerTask> InBox for Holder<T> {
    fn call(mut self: Box<Self>, timeout: &Timeout<BoxedTask>) -> Option<Box<dyn InBox>> {
        if let Some(task) = self.0.take() {
            task.run_unboxed(timeout)
        }
        Some(self)
    }

    fn clear(mut self: Box<Self>) -> Option<Box<dyn InBox>> {
        self.0 = None;
        Some(self)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

impl<T: TimerTask> InBox for Bare<T> {
    fn call(self: Box<Self>, timeout: &Timeout<BoxedTask>) -> Option<Box<dyn InBox>> {
        self.0.run_unboxed(timeout);
        None
    }

    fn clear(self: Box<Self>) -> Option<Box<dyn InBox>> {
        None
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

impl BoxedTask {
    /// Boxes `task` (any closure taking a `&Timeout`, or a [`TimerTask`] of your own).
    pub fn new<T: TimerTask>(task: T) -> BoxedTask {
        if std::mem::size_of::<T>() == 0 {
            BoxedTask(Box::new(Bare(task)))
        } else {
            BoxedTask(Box::new(Holder(Some(task))))
        }
    }

    /// `task` in the last spare box if it is of `task`'s type, else in a new one.
    pub(crate) fn reusing<T: TimerTask>(task: T, spares: &mut Vec<BoxedTask>) -> BoxedTask {
        if std::mem::size_of::<T>() > 0 {
            if let Some(spare) = spares.pop() {
                if let Ok(mut holder) = spare.0.into_any().downcast::<Holder<T>>() {
                    holder.0 = Some(task);
                    return BoxedTask(holder);
                }
            }
        }
        BoxedTask::new(task)
    }
}

impl Payload for BoxedTask {
    const KEEPS: bool = true;

    fn run(self, timeout: &Timeout<BoxedTask>) {
        drop(self.0.call(timeout));
    }

    fn run_keeping(self, timeout: &Timeout<BoxedTask>, spares: &mut Vec<BoxedTask>) {
        spares.extend(self.0.call(timeout).map(BoxedTask));
    }

    fn drop_keeping(self, spares: &mut Vec<BoxedTask>) {
        spares.extend(self.0.clear().map(BoxedTask));
    }
}

/// A boxed task is a task: one that [`stop()`](crate::TimerHandle::stop) gave back
/// ([`NeverRan::into_task`](crate::NeverRan::into_task)) can be scheduled again, on another timer.
impl TimerTask for BoxedTask {
    fn run(self: Box<Self>, timeout: &Timeout) {
        Payload::run(*self, timeout)
    }

    fn run_unboxed(self, timeout: &Timeout) {
        Payload::run(self, timeout)
    }
}

impl fmt::Debug for BoxedTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BoxedTask")
    }
}

/// Runs user code (a task, its `Drop`, a waker, the executor), catching a panic; whether it
/// returned. All user code runs through here with no crate state half-changed, so
/// `AssertUnwindSafe` holds.
#[inline]
pub(crate) fn catch_user_panic(user_code: impl FnOnce()) -> bool {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(user_code)) {
        Ok(()) => true,
        Err(payload) => {
            // A payload whose own `Drop` panics (`panic_any` of such a value) is leaked.
            let dropped =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload)));
            if let Err(again) = dropped {
                std::mem::forget(again);
            }
            false
        }
    }
}

/// Logs through the `log` facade, catching a panic of the logger (user code too).
#[cold]
pub(crate) fn log_caught(level: log::Level, message: std::fmt::Arguments<'_>) {
    let _ = catch_user_panic(|| log::log!(level, "{message}"));
}

/// Drops a value holding user code under [`catch_user_panic`]; whether it returned.
#[inline]
pub(crate) fn drop_caught<T>(value: T) -> bool {
    !std::mem::needs_drop::<T>() || catch_user_panic(move || drop(value))
}

/// Runs an expired task inline, or hands it to the executor; a panic is caught and logged.
/// Whether it did not panic.
#[inline]
pub(crate) fn run<J: Stored>(
    shared: &Shared<J>,
    task: J,
    timeout: &Timeout<J>,
    spares: &mut Vec<J>,
) -> bool {
    let Some(executor) = &shared.executor else {
        let ran = catch_user_panic(|| task.run_keeping(timeout, spares));
        return logged(ran, "a timer task");
    };
    let handed = Handed(Some((task, timeout.clone())));
    let job: Job = Box::new(move || handed.run());
    let ran = catch_user_panic(|| executor.call(job));
    logged(ran, "the timer's executor")
}

/// `returned`; if false, logs that user code (`what`) panicked.
fn logged(returned: bool, what: &str) -> bool {
    if !returned {
        log_panicked(what);
    }
    returned
}

/// Logs that user code (`what`) panicked.
#[cold]
pub(crate) fn log_panicked(what: &str) {
    log_caught(
        log::Level::Warn,
        format_args!("{what} panicked; the timer goes on"),
    );
}

/// A task handed to the executor: run there, or, dropped unrun, reported.
struct Handed<J: Stored>(Option<(J, Timeout<J>)>);

impl<J: Stored> Handed<J> {
    fn run(mut self) {
        if let Some((task, timeout)) = self.0.take() {
            let ran = catch_user_panic(|| task.run(&timeout));
            let counters = &timeout.timer().0.counters;
            counters.caught(ran, "a timer task run by the executor");
        }
    }
}

impl<J: Stored> Drop for Handed<J> {
    fn drop(&mut self) {
        if let Some((task, timeout)) = self.0.take() {
            log_caught(
                log::Level::Warn,
                format_args!("a timeout's task was dropped by the executor without running"),
            );
            let counters = &timeout.timer().0.counters;
            counters.caught(drop_caught(task), "a timer task's drop");
        }
    }
}

/// Drops a task unrun, keeping in `spares` what a later task can reuse; a panic of its `Drop`
/// is caught and logged. Whether it did not panic.
pub(crate) fn drop_unrun<J: Stored>(task: J, spares: &mut Vec<J>) -> bool {
    let dropped = catch_user_panic(|| task.drop_keeping(spares));
    logged(dropped, "a timer task's drop")
}

/// Runs expired tasks somewhere other than the worker thread.
pub(crate) struct Executor(Option<Box<dyn Fn(Job) + Send + Sync>>);

impl Executor {
    pub(crate) fn new(f: impl Fn(Job) + Send + Sync + 'static) -> Executor {
        Executor(Some(Box::new(f)))
    }

    /// Hands `job` to the user's executor.
    pub(crate) fn call(&self, job: Job) {
        if let Some(f) = &self.0 {
            f(job)
        }
    }
}

/// The executor's own `Drop` is user code too: caught, and logged only.
impl Drop for Executor {
    fn drop(&mut self) {
        if !drop_caught(self.0.take()) {
            log_caught(
                log::Level::Warn,
                format_args!("the timer's executor panicked in its drop; the timer goes on"),
            );
        }
    }
}

/// What the executor runs: a task with its timeout.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

// A panic of the executor is caught where it is called, and leaves nothing of the timer's
// half-changed (`catch_user_panic`): the timer stays unwind-safe with one set.
impl std::panic::RefUnwindSafe for Executor {}
impl std::panic::UnwindSafe for Executor {}

/// Wakes the wakers of futures whose slots ended, catching panics; how many panicked.
pub(crate) fn wake_all(wakers: &mut Vec<std::task::Waker>) -> u64 {
    let mut panicked = 0;
    for waker in wakers.drain(..) {
        let woken = catch_user_panic(|| waker.wake());
        panicked += u64::from(!logged(woken, "a future's waker"));
    }
    panicked
}
