//! The one module that names the concurrency primitives: the bottom of the crate, importing
//! nothing of it.
//!
//! Owns the choice between std (and crossbeam) and loom, the multi-producer [`Queue`] the
//! producers and the worker meet in, the loom stand-ins for thread parking, and the hooks the
//! loom models read (`loom_hooks`).
//!
//! Normal builds get `std` atomics, threads and mutexes; under `--cfg loom` every type here
//! comes from loom, and [`Queue`] is the same code on loom's mutex. No other module names these
//! types: `tests/architecture.rs` fails if one does.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
// std's `Arc` even under loom: loom's `Arc` can be neither a method receiver
// (`self: &Arc<Self>`) nor coerced to `Arc<dyn Fn ..>` (the executor). No protocol here hangs
// on a reference count: every hand-over goes through a loom atomic, mutex or queue, which loom
// does see. (What is lost is loom's leak check on `Arc`s.)
#[cfg(loom)]
pub(crate) use std::sync::Arc;

/// Under loom: loom's threads, with spawns counted for the lazy-start model
/// (`loom_hooks::threads_spawned`), and std's park/unpark semantics.
///
/// Loom's own `Thread::unpark` makes its target runnable whatever it is blocked on: a thread
/// waiting for a mutex or in `JoinHandle::join` then resumes and trips loom's internal
/// assertions ("expected to be able to acquire lock"; tokio-rs/loom#249). With std an unpark
/// racing a lock or a join is harmless, and this crate does race them (`stop` unparks the
/// worker while a producer's `wake_by` may too). So the park token here is std's futex parker
/// on a loom atomic: an unpark before the park is remembered, and loom's unpark is called only
/// for a thread inside `park` (parked, or about to be with nothing else in between). A lost
/// wake-up is still a loom deadlock.
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

    /// A handle on a thread, as `std::thread::Thread`.
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
        // EMPTY -> PARKED; or a token is there (NOTIFIED, from an unpark before or just now):
        // consume it and return. Every access to the token is a read-modify-write: loom orders
        // plain stores only partially against them, and lets a later swap read around one.
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

    // Loom lazy statics live for one execution: each starts afresh. (Plain std types inside:
    // loom runs an execution on one OS thread, and these are not part of any protocol.)
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

    /// From now on in this execution, a timer built with `build()` keeps its clock still until
    /// `advance_clock` moves it: the worker's bounded sleeps become parks that only the clock
    /// (or a producer's wake-up) ends. Call before building the timer.
    pub fn hold_clock() {
        CLOCK_HELD.store(true, Ordering::Relaxed);
    }

    pub(crate) fn clock_held() -> bool {
        CLOCK_HELD.load(Ordering::Relaxed)
    }

    /// Unparks the worker thread last spawned in this execution, if any (the model's stand-in
    /// for an OS timer ending a `park_timeout`).
    pub(crate) fn unpark_worker() {
        if let Some(worker) = WORKER.lock().unwrap().as_ref() {
            worker.unpark();
        }
    }
}

pub(crate) use std::sync::atomic::Ordering;

/// Keeps a hot atomic on a cache line of its own (not a primitive: the same under loom).
pub(crate) use crossbeam_utils::CachePadded;

/// Process-wide state (the live-timer count, the fast clock's one-time set-up and the thread
/// that runs it): plain std even under loom, because it is static and outside every modelled
/// protocol.
pub(crate) mod process {
    /// For statistics (`shared::Counters`): outside every protocol, so not modelled by loom
    /// either (loom would explore their every store for nothing).
    pub(crate) use std::sync::atomic::AtomicU64;
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize};
    cfg_tsc! {
        pub(crate) use std::{
            sync::{Mutex, Once, OnceLock},
            thread::Builder as ThreadBuilder,
        };
    }
}

/// Locks a mutex, ignoring poisoning: every critical section in this crate leaves its data
/// consistent before it can panic (the user code run under the worker's lock, tasks, runs
/// under `catch_unwind`).
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

/// What a drain of every shard does with the shards' buffers: keeps them for the next pushes,
/// or lets them go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Buffers {
    Keep,
    Free,
}

/// An unbounded multi-producer queue; the worker is its only consumer, and takes everything
/// queued at once ([`Queue::take_into`]). The items are held in a [`Batch`] `B` per shard (a
/// `Vec`, or the timeouts' parallel vectors), and each shard also keeps a little data of type
/// `S` that its producers update under the shard's lock (the timeouts queue keeps
/// pending-count credit there: see `Shared::refill_credit`).
///
/// Mutex-guarded batches, one per shard of producer threads, whose buffers the worker swaps for
/// empty ones of its own: a push is a lock, a `Vec::push` and an unlock, and in a steady state
/// the buffers are reused, so the queue allocates nothing per timeout.
///
/// **The lock is part of the protocol.** A producer pushes and then reads a flag (`state`,
/// `planned`); the worker and `stop()` write that flag and then look at the queue
/// ([`Queue::is_empty`], [`Queue::take_all`]), which locks every shard. Whichever of the two
/// critical sections on a shard comes second sees what the first did: the consumer sees the
/// item, or the producer (whose lock acquires the consumer's unlock) sees the flag. So neither
/// side needs a fence. (A lock-free queue would need a `SeqCst` fence on both sides. Under
/// loom the queue is the same code with loom's mutex, so the models check this argument.)
///
/// A lock-free queue that allocates blocks (crossbeam's `SegQueue`) has the producer allocate
/// what the worker frees, on another thread; these buffers move whole instead, and the locks
/// are held for a push (`docs/performance.md`, "Sharded producer queue"; `benches/README.md`,
/// "Tried and dropped", has `SegQueue`).
pub(crate) struct Queue<B, S = ()> {
    /// Each producer thread pushes to one shard (so its pushes stay in order), chosen round
    /// robin when the thread first pushes: producers on different threads rarely share a lock.
    /// (Under loom, one shard: more would add contention, not behaviour.)
    shards: Box<[PaddedShard<B, S>]>,
}

type PaddedShard<B, S> = CachePadded<Mutex<Shard<B, S>>>;

struct Shard<B, S> {
    items: B,
    data: S,
}

/// Shards per `Queue` (see `Queue::shards`).
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

impl<T, S> Queue<Vec<T>, S> {
    #[inline]
    pub(crate) fn push(&self, value: T) {
        lock(&self.shards[my_shard()]).items.push(value)
    }
}

impl<B: Batch, S> Queue<B, S> {
    /// Locks this thread's shard: push through the guard, with the shard's data at hand.
    #[inline]
    pub(crate) fn my_shard(&self) -> ShardGuard<'_, B, S> {
        let i = my_shard();
        // SHARDS is far below 256 (checked where it is defined).
        ShardGuard(lock(&self.shards[i]), i as u8)
    }

    /// Runs `f` on every shard's data, each under its lock.
    pub(crate) fn for_each_data(&self, mut f: impl FnMut(&mut S)) {
        for shard in self.shards.iter() {
            f(&mut lock(shard).data);
        }
    }

    /// Folds every shard's data, each read under its lock.
    pub(crate) fn fold_data<A>(&self, init: A, mut f: impl FnMut(A, &S) -> A) -> A {
        let mut acc = init;
        for shard in self.shards.iter() {
            acc = f(acc, &lock(shard).data);
        }
        acc
    }

    /// Whether every shard is empty, each looked at under its lock (see the type's docs).
    pub(crate) fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| lock(s).items.is_empty())
    }

    /// Moves every queued item to the end of `buf`, each thread's pushes in push order. When
    /// `buf` is empty the queue keeps its allocation for the next pushes.
    #[inline]
    pub(crate) fn take_into(&self, buf: &mut B) {
        self.take(buf, Buffers::Keep)
    }

    /// Hands each non-empty shard's batch to `take`, under the shard's lock, in shard order,
    /// with the shard's data and index: `take` moves the batch out (leaving an empty batch,
    /// ideally one with capacity, for the next pushes). Each thread's pushes are in one batch,
    /// in order.
    #[inline]
    pub(crate) fn take_each(&self, mut take: impl FnMut(&mut B, &mut S, usize)) {
        for (i, shard) in self.shards.iter().enumerate() {
            let shard = &mut *lock(shard);
            if !shard.items.is_empty() {
                take(&mut shard.items, &mut shard.data, i);
            }
        }
    }

    /// Every queued item, each thread's pushes in order, and the queue's buffers with them: the
    /// queue holds no memory afterwards (for `stop`, and an idle worker).
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
    /// Which shard this is (below [`SHARDS`]).
    #[inline]
    pub(crate) fn index(&self) -> u8 {
        self.1
    }
    /// The shard's data and its batch at once.
    #[inline]
    pub(crate) fn parts(&mut self) -> (&mut S, &mut B) {
        let shard = &mut *self.0;
        (&mut shard.data, &mut shard.items)
    }
}

impl<B, S> std::fmt::Debug for Queue<B, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").finish_non_exhaustive()
    }
}
