//! What a timer stores per timeout: a `Job`, run once with its own `Timeout`. The boxed timer's
//! job, `Boxed`, is any closure in a box; the box it ran in goes back to the producers, who put
//! the next closure of the same type in it, so that a service scheduling one kind of closure
//! allocates nothing per timeout, and the worker frees nothing the producers allocated.

use super::Timeout;
use std::any::Any;
use std::fmt;

/// What a timer stores per timeout and runs when it expires.
pub trait Job: Send + Sized + 'static {
    /// Runs the task; `timeout` is its own handle.
    fn run(self, timeout: &Timeout<Self>);

    /// Runs the task, keeping in `spares` what a later task can reuse.
    fn run_keeping(self, timeout: &Timeout<Self>, spares: &mut Vec<Self>) {
        let _ = spares;
        self.run(timeout)
    }

    /// Drops the task unrun, keeping in `spares` what a later task can reuse.
    fn drop_keeping(self, spares: &mut Vec<Self>) {
        let _ = spares;
    }
}

/// The boxed timer's task: any closure, in a box (no allocation for one that captures nothing;
/// the box reused for the next closure of its type).
pub struct Boxed(Box<dyn Cell>);

/// A box holding a closure until it runs, then nothing (and ready for the next of its type).
trait Cell: Send {
    fn call(&mut self, timeout: &Timeout<Boxed>);
    fn clear(&mut self);
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

struct Holder<F>(Option<F>);

impl<F: FnOnce(&Timeout<Boxed>) + Send + 'static> Cell for Holder<F> {
    fn call(&mut self, timeout: &Timeout<Boxed>) {
        if let Some(f) = self.0.take() {
            f(timeout)
        }
    }

    fn clear(&mut self) {
        self.0 = None;
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

impl Boxed {
    /// Boxes `f`.
    pub fn new(f: impl FnOnce(&Timeout<Boxed>) + Send + 'static) -> Boxed {
        Boxed(Box::new(Holder(Some(f))))
    }

    /// `f` in the last spare box if it is of `f`'s type, else in a new one (the spare is freed
    /// here, on the producer's thread).
    pub(crate) fn reusing<F>(f: F, spares: &mut Vec<Boxed>) -> Boxed
    where
        F: FnOnce(&Timeout<Boxed>) + Send + 'static,
    {
        if std::mem::size_of::<F>() > 0 {
            if let Some(spare) = spares.pop() {
                if let Ok(mut holder) = spare.0.into_any().downcast::<Holder<F>>() {
                    holder.0 = Some(f);
                    return Boxed(holder);
                }
            }
        }
        Boxed::new(f)
    }
}

impl Job for Boxed {
    fn run(mut self, timeout: &Timeout<Boxed>) {
        self.0.call(timeout)
    }

    fn run_keeping(mut self, timeout: &Timeout<Boxed>, spares: &mut Vec<Boxed>) {
        self.0.call(timeout);
        spares.push(self);
    }

    fn drop_keeping(mut self, spares: &mut Vec<Boxed>) {
        self.0.clear();
        spares.push(self);
    }
}

impl fmt::Debug for Boxed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Boxed")
    }
}
