//! The concurrency primitives (std and crossbeam, or loom's), loom's parking stand-in and
//! `loom_hooks`. No other module names these types (`tests/architecture.rs` checks).

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
// std's `Arc` even under loom: loom's can be neither a method receiver nor an `Arc<dyn Fn ..>`.
// No protocol hangs on a reference count; only loom's leak check on `Arc`s is lost.
#[cfg(loom)]
pub(crate) use std::sync::Arc;

/// Under loom: loom's threads, spawns counted, with std's park/unpark semantics. Loom's own
/// `unpark` also wakes a thread in a mutex or `join` (tokio-rs/loom#249); here the token is a
/// loom atomic, and loom's unpark reaches only a thread inside `park`.
#[cfg(loom)]
pub(crate) mod thread {
    use super::Ordering::SeqCst;
    use std::cell::RefCell;
    use std::sync::Arc;

    pub(crate) use loom::thread::ThreadId;

    const EMPTY: u8 = 0;
    const NOTIFIED: u8 = 1;
    const PARKED: u8 = 2;

    /// `EMPTY -> PARKED` (park, no token) or `NOTIFIED -> EMPTY` (park, token consumed);
    /// `* -> NOTIFIED` (unpark; whoever swaps `PARKED` out owes the loom unpark).
    #[derive(Debug)]
    struct Token(loom::sync::atomic::AtomicU8);

    loom::thread_local! {
        static TOKEN: RefCell<Option<Arc<Token>>> = RefCell::new(None);
    }

    fn new_token() -> Arc<Token> {
        Arc::new(Token(loom::sync::atomic::AtomicU8::new(EMPTY)))
    }

    fn my_token() -> Arc<Token> {
        TOKEN.with(|t| Arc::clone(t.borrow_mut().get_or_insert_with(new_token)))
    }

    #[derive(Clone, Debug)]
    pub(crate) struct Thread {
        inner: loom::thread::Thread,
        token: Arc<Token>,
    }

    impl Thread {
        pub(crate) fn id(&self) -> ThreadId {
            self.inner.id()
        }

        pub(crate) fn unpark(&self) {
            if self.token.0.swap(NOTIFIED, SeqCst) == PARKED {
                self.inner.unpark();
            }
        }
    }

    pub(crate) fn current() -> Thread {
        Thread {
            inner: loom::thread::current(),
            token: my_token(),
        }
    }

    pub(crate) fn park() {
        let token = my_token();
        let state = &token.0;
        // EMPTY -> PARKED, or consume the token (NOTIFIED) and return. Read-modify-writes only:
        // loom orders plain stores only partially against them.
        if state
            .compare_exchange(EMPTY, PARKED, SeqCst, SeqCst)
            .is_err()
        {
            state.swap(EMPTY, SeqCst);
            return;
        }
        // Only `unpark` moves PARKED on, and it then unparks us: loom's park returns once it has.
        loop {
            loom::thread::park();
            if state
                .compare_exchange(NOTIFIED, EMPTY, SeqCst, SeqCst)
                .is_ok()
            {
                return;
            }
        }
    }

    pub(crate) struct JoinHandle<T> {
        inner: loom::thread::JoinHandle<T>,
        thread: Thread,
    }

    impl<T> JoinHandle<T> {
        pub(crate) fn thread(&self) -> &Thread {
            &self.thread
        }

        pub(crate) fn join(self) -> std::thread::Result<T> {
            self.inner.join()
        }
    }

    pub(crate) struct Builder(loom::thread::Builder);

    impl Builder {
        pub(crate) fn new() -> Builder {
            Builder(loom::thread::Builder::new())
        }

        pub(crate) fn name(self, name: String) -> Builder {
            Builder(self.0.name(name))
        }

        pub(crate) fn spawn<F, T>(self, f: F) -> std::io::Result<JoinHandle<T>>
        where
            F: FnOnce() -> T + Send + 'static,
            T: Send + 'static,
        {
            super::loom_hooks::SPAWNED.fetch_add(1, super::Ordering::Relaxed);
            let token = new_token();
            let theirs = Arc::clone(&token);
            let inner = self.0.spawn(move || {
                TOKEN.with(|t| *t.borrow_mut() = Some(theirs));
                f()
            })?;
            let thread = Thread {
                inner: inner.thread().clone(),
                token,
            };
            Ok(JoinHandle { inner, thread })
        }
    }
}

/// The hooks re-exported, with the owner's `advance_clock`, as `hashed_timer_wheel::loom_hooks`.
#[cfg(loom)]
pub(crate) mod loom_hooks {
    use super::Ordering;
    use std::sync::atomic::{AtomicBool, AtomicUsize};

    // Per loom execution; plain std inside (one OS thread per execution, in no protocol).
    loom::lazy_static! {
        pub(super) static ref SPAWNED: AtomicUsize = AtomicUsize::new(0);
        static ref CLOCK_HELD: AtomicBool = AtomicBool::new(false);
    }

    /// Threads the library has spawned (worker threads) in the current loom execution.
    pub fn threads_spawned() -> usize {
        SPAWNED.load(Ordering::Relaxed)
    }

    /// For the rest of this execution, a timer built with `build()` keeps its clock still until
    /// `advance_clock` moves it. Call before building the timer.
    pub fn hold_clock() {
        CLOCK_HELD.store(true, Ordering::Relaxed);
    }

    pub(crate) fn clock_held() -> bool {
        CLOCK_HELD.load(Ordering::Relaxed)
    }
}

pub(crate) use std::sync::atomic::Ordering;

/// Keeps a hot atomic on a cache line of its own (not a primitive: the same under loom).
pub(crate) use crossbeam_utils::CachePadded;

/// Process-wide statics, outside every modelled protocol: plain std even under loom.
pub(crate) mod process {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize};
}

/// Locks, ignoring poisoning: every critical section leaves its data consistent before it can
/// panic (user code under the worker's lock runs under `catch_unwind`).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
