//! What a timer stores per timeout: a `Stored`, run once with its own `Timeout`. A `BoxedTask`'s
//! box goes back to the producers for the next closure of its type: no allocation per timeout.

use super::{Shared, Timeout};
use std::any::Any;
use std::fmt;
use std::ops::Deref;

/// What a timer stores per timeout: [`BoxedTask`] on the default timer, a [`TypedTask`]'s `T`
/// on a typed one. Sealed: those two are all there is.
///
/// [`TypedTask`]: crate::TypedTask
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

/// The boxed timer's task: any closure, in a box (no allocation for one that captures nothing;
/// the box reused for the next closure of its type).
pub struct BoxedTask(Box<dyn Closure>);

/// A closure in its box. Run or dropped, a box that can hold the next closure comes back empty.
trait Closure: Send {
    fn call(self: Box<Self>, timeout: &Timeout<BoxedTask>) -> Option<Box<dyn Closure>>;
    fn clear(self: Box<Self>) -> Option<Box<dyn Closure>>;
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

/// A closure that captures something, until it runs.
struct Holder<F>(Option<F>);

/// A closure that captures nothing: its box allocates nothing, and none is kept.
struct Bare<F>(F);

impl<F> Closure for Holder<F>
where
    F: FnOnce(&Timeout<BoxedTask>) + Send + 'static,
{
    fn call(mut self: Box<Self>, timeout: &Timeout<BoxedTask>) -> Option<Box<dyn Closure>> {
        if let Some(f) = self.0.take() {
            f(timeout)
        }
        Some(self)
    }

    fn clear(mut self: Box<Self>) -> Option<Box<dyn Closure>> {
        self.0 = None;
        Some(self)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

impl<F: FnOnce(&Timeout<BoxedTask>) + Send + 'static> Closure for Bare<F> {
    fn call(self: Box<Self>, timeout: &Timeout<BoxedTask>) -> Option<Box<dyn Closure>> {
        (self.0)(timeout);
        None
    }

    fn clear(self: Box<Self>) -> Option<Box<dyn Closure>> {
        None
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

impl BoxedTask {
    /// Boxes `f`.
    pub fn new<F: FnOnce(&Timeout<BoxedTask>) + Send + 'static>(f: F) -> BoxedTask {
        if std::mem::size_of::<F>() == 0 {
            BoxedTask(Box::new(Bare(f)))
        } else {
            BoxedTask(Box::new(Holder::<F>(Some(f))))
        }
    }

    /// `f` in the last spare box if it is of `f`'s type, else in a new one.
    pub(crate) fn reusing<F>(f: F, spares: &mut Vec<BoxedTask>) -> BoxedTask
    where
        F: FnOnce(&Timeout<BoxedTask>) + Send + 'static,
    {
        if std::mem::size_of::<F>() > 0 {
            if let Some(spare) = spares.pop() {
                if let Ok(mut holder) = spare.0.into_any().downcast::<Holder<F>>() {
                    holder.0 = Some(f);
                    return BoxedTask(holder);
                }
            }
        }
        BoxedTask::new(f)
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

impl fmt::Debug for BoxedTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BoxedTask")
    }
}

/// A timeout [`stop()`](crate::TimerHandle::stop) ended before it ran, with its task (Netty's
/// `timeout.task()`): a shutdown takes the task to complete what it stood for, runs it, or drops
/// it (its `Drop` runs then, once). It reads as its [`Timeout`], now cancelled.
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, Timeout, TypedTask};
/// use std::time::Duration;
///
/// struct RequestTimeout(u64);
///
/// impl TypedTask for RequestTimeout {
///     fn run(self, _: &Timeout<Self>) { /* answer request self.0 with a timeout */ }
/// }
///
/// let timer: HashedWheelTimer<RequestTimeout> = HashedWheelTimer::builder().build_typed()?;
/// timer.new_timeout(RequestTimeout(7), Duration::from_secs(30))?;
/// for never_ran in timer.stop()? {
///     assert!(never_ran.is_cancelled());
///     let RequestTimeout(id) = never_ran.into_task();
///     assert_eq!(id, 7); // fail request 7: the service is shutting down
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct NeverRan<J: Stored = BoxedTask> {
    timeout: Timeout<J>,
    task: J,
}

impl<J: Stored> NeverRan<J> {
    pub(crate) fn new(timeout: Timeout<J>, task: J) -> NeverRan<J> {
        NeverRan { timeout, task }
    }

    /// The task, by reference (a typed timer's `T`).
    pub fn task(&self) -> &J {
        &self.task
    }

    /// The task, taken out.
    pub fn into_task(self) -> J {
        self.task
    }

    /// The timeout and its task.
    pub fn into_parts(self) -> (Timeout<J>, J) {
        (self.timeout, self.task)
    }

    /// Runs the task now, on the calling thread, with its timeout (cancelled): Netty's
    /// `timeout.task().run(timeout)`. A panic of the task unwinds from here.
    pub fn run(self) {
        self.task.run(&self.timeout)
    }
}

impl<J: Stored> Deref for NeverRan<J> {
    type Target = Timeout<J>;

    fn deref(&self) -> &Timeout<J> {
        &self.timeout
    }
}

/// Its timeout; the task is dropped.
impl<J: Stored> From<NeverRan<J>> for Timeout<J> {
    fn from(never_ran: NeverRan<J>) -> Timeout<J> {
        never_ran.timeout
    }
}

/// Whether it is the timeout `other`.
impl<J: Stored> PartialEq<Timeout<J>> for NeverRan<J> {
    fn eq(&self, other: &Timeout<J>) -> bool {
        self.timeout == *other
    }
}

/// Whether both are the same timeout.
impl<J: Stored> PartialEq for NeverRan<J> {
    fn eq(&self, other: &Self) -> bool {
        self.timeout == other.timeout
    }
}

impl<J: Stored> Eq for NeverRan<J> {}

impl<J: Stored> fmt::Debug for NeverRan<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NeverRan")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
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
// half-changed (`task::catch_user_panic`): the timer stays unwind-safe with one set.
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
