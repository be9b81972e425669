//! The concurrency primitives (std and crossbeam, or loom's), the sharded MPSC [`Queue`], and
//! loom's parking stand-in and `loom_hooks`. Imports nothing of the crate; no other module
//! names these types (loom would miss it), which `tests/architecture.rs` checks.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard, Weak};
#[cfg(not(loom))]
pub(crate) use std::thread;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
// std's `Arc` even under loom: loom's can be neither a method receiver nor an `Arc<dyn Fn ..>`.
// No protocol hangs on a reference count; only loom's leak check on `Arc`s is lost.
#[cfg(loom)]
pub(crate) use std::sync::{Arc, Weak};

/// Under loom: loom's threads, spawns counted, with std's park/unpark semantics. Loom's own
/// `unpark` also wakes a thread in a mutex or `join`, tripping loom (tokio-rs/loom#249); here
/// the token is std's futex parker on a loom atomic, and loom's unpark reaches only a thread
/// inside `park`. A lost wake-up is still a loom deadlock.
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
            *super::loom_hooks::WORKER.lock().unwrap() = Some(thread.clone());
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
        pub(super) static ref WORKER: std::sync::Mutex<Option<super::thread::Thread>> =
            std::sync::Mutex::new(None);
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

    /// Unparks the last spawned worker: the stand-in for a `park_timeout` running out.
    pub(crate) fn unpark_worker() {
        if let Some(worker) = WORKER.lock().unwrap().as_ref() {
            worker.unpark();
        }
    }
}

pub(crate) use std::sync::atomic::Ordering;

/// Keeps a hot atomic on a cache line of its own (not a primitive: the same under loom).
pub(crate) use crossbeam_utils::CachePadded;

/// Process-wide statics, outside every modelled protocol: plain std even under loom.
pub(crate) mod process {
    /// For statistics (`shared::Counters`): in no protocol, so loom need not explore them.
    pub(crate) use std::sync::atomic::AtomicU64;
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize};
    cfg_tsc! {
        pub(crate) use std::{
            sync::{Mutex, Once, OnceLock},
            thread::Builder as ThreadBuilder,
        };
    }
}

/// Locks, ignoring poisoning: every critical section leaves its data consistent before it can
/// panic (user code under the worker's lock runs under `catch_unwind`).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(not(loom))]
    {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }
    #[cfg(loom)]
    {
        m.lock().unwrap()
    }
}

/// Locks a mutex if no other thread holds it (poisoning ignored, as in [`lock`]).
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    #[cfg(not(loom))]
    {
        match m.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
    #[cfg(loom)]
    {
        m.try_lock().ok()
    }
}

/// What a [`Queue`] shard holds: a batch of items that the worker takes whole.
pub(crate) trait Batch: Default {
    fn is_empty(&self) -> bool;
    /// Moves every item of `other` to the end of `self`, in order.
    fn append(&mut self, other: &mut Self);
}

impl<T> Batch for Vec<T> {
    #[inline]
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
    #[inline]
    fn append(&mut self, other: &mut Self) {
        Vec::append(self, other)
    }
}

/// Whether a drain keeps the shards' buffers for the next pushes or frees them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Buffers {
    Keep,
    Free,
}

/// An unbounded multi-producer queue; its one consumer, the worker, takes everything at once
/// ([`Queue::take_into`]). Each shard is a mutex-guarded [`Batch`] `B` plus data `S` (the
/// pending-count credit: `Shared::refill_credit`); the worker swaps the buffers for empty ones,
/// so a steady state allocates nothing (`docs/performance.md`, "Sharded producer queue").
///
/// **The lock is part of the protocol.** A producer pushes, then reads a flag (`state`,
/// `planned`); the worker and `stop()` write it, then look at every shard under its lock
/// ([`Queue::is_empty`], [`Queue::take_all`]): whichever comes second sees what the first
/// did, so neither side needs a fence.
pub(crate) struct Queue<B, S = ()> {
    /// A producer thread pushes to one shard (its pushes stay in order), chosen round robin at
    /// its first push. Under loom, one: more would add contention, not behaviour.
    shards: Box<[PaddedShard<B, S>]>,
}

type PaddedShard<B, S> = CachePadded<Mutex<Shard<B, S>>>;

struct Shard<B, S> {
    items: B,
    data: S,
}

pub(crate) const SHARDS: usize = if cfg!(loom) { 1 } else { 8 };
// A shard's index travels as a `u8` (`ShardGuard::index`, a chunk's shard).
const _: () = assert!(SHARDS <= 256);

#[cfg(not(loom))]
#[inline]
fn my_shard() -> usize {
    use std::cell::Cell;
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    std::thread_local! {
        static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SHARD.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            i = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
            s.set(i);
        }
        i
    })
}

#[cfg(loom)]
fn my_shard() -> usize {
    0
}

impl<B: Batch, S: Default> Queue<B, S> {
    pub(crate) fn new() -> Self {
        Queue {
            shards: (0..SHARDS)
                .map(|_| {
                    CachePadded::new(Mutex::new(Shard {
                        items: B::default(),
                        data: S::default(),
                    }))
                })
                .collect(),
        }
    }
}

impl<B: Batch, S> Queue<B, S> {
    /// Locks this thread's shard: push through the guard, with the shard's data at hand.
    #[inline]
    pub(crate) fn my_shard(&self) -> ShardGuard<'_, B, S> {
        let i = my_shard();
        // Fits: `SHARDS <= 256`.
        ShardGuard(lock(&self.shards[i]), i as u8)
    }

    pub(crate) fn for_each_data(&self, mut f: impl FnMut(&mut S)) {
        for shard in self.shards.iter() {
            f(&mut lock(shard).data);
        }
    }

    /// Folds `f` over the shards' data, each under its lock: with `wait`, waiting for it; else
    /// passing over each shard whose lock another thread holds, so that the fold never waits.
    pub(crate) fn fold_data<A>(&self, wait: bool, init: A, mut f: impl FnMut(A, &S) -> A) -> A {
        let mut acc = init;
        for shard in self.shards.iter() {
            let held = if wait {
                Some(lock(shard))
            } else {
                try_lock(shard)
            };
            if let Some(shard) = held {
                acc = f(acc, &shard.data);
            }
        }
        acc
    }

    /// Whether every shard is empty, each looked at under its lock (see the type's docs).
    pub(crate) fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| lock(s).items.is_empty())
    }

    /// Moves every queued item to `buf`, each thread's in order; an empty `buf` is swapped in.
    #[inline]
    pub(crate) fn take_into(&self, buf: &mut B) {
        self.take(buf, Buffers::Keep)
    }

    /// Hands each non-empty shard's batch (to move out), data and index to `take`, under its lock.
    #[inline]
    pub(crate) fn take_each(&self, mut take: impl FnMut(&mut B, &mut S, usize)) {
        for (i, shard) in self.shards.iter().enumerate() {
            let shard = &mut *lock(shard);
            if !shard.items.is_empty() {
                take(&mut shard.items, &mut shard.data, i);
            }
        }
    }

    /// Every queued item, and the buffers with them, for `stop` and an idle worker.
    pub(crate) fn take_all(&self) -> B {
        let mut out = B::default();
        self.take(&mut out, Buffers::Free);
        out
    }

    fn take(&self, buf: &mut B, buffers: Buffers) {
        let free = buffers == Buffers::Free;
        for shard in self.shards.iter() {
            let items = &mut lock(shard).items;
            if items.is_empty() {
                if free {
                    *items = B::default();
                }
                continue;
            }
            if buf.is_empty() {
                std::mem::swap(items, buf);
            } else {
                buf.append(items);
            }
            if free {
                *items = B::default();
            }
        }
    }
}

/// This thread's shard of a [`Queue`], locked.
pub(crate) struct ShardGuard<'a, B, S>(MutexGuard<'a, Shard<B, S>>, u8);

impl<B, S> ShardGuard<'_, B, S> {
    #[inline]
    pub(crate) fn index(&self) -> u8 {
        self.1
    }
    #[inline]
    pub(crate) fn parts(&mut self) -> (&mut S, &mut B) {
        let shard = &mut *self.0;
        (&mut shard.data, &mut shard.items)
    }
}
