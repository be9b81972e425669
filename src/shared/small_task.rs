//! A boxed timer's tasks without a heap allocation: a task of up to 32 bytes is stored in
//! place, in the queue and then, while its timeout waits in the wheel, in the worker's slabs of
//! task words.
//!
//! Owns [`SmallTask`] (a task of any `Job` type, erased: its words and a table of the
//! functions that run and drop it) and [`TaskSlabs`] (the worker's store of the words of the
//! tasks in the wheel, by size class, so that a wheel node stays 32 bytes whatever the task).
//! Touches the cells (`CellRef`, which a task runs with) and nothing else.
//!
//! The crate's `unsafe` for tasks is here and only here; no thread meets another in it: a
//! `SmallTask` is a value, moved between threads as any `Send` value is (through the queue's
//! locks), and the slabs belong to the worker.
//!
//! # Invariants
//! 1. A `SmallTask`'s `words` hold one live value of the type its `vtable` was made for
//!    (`VTable::of::<F>`), written by [`SmallTask::new`]; that type is `Send + 'static`, at
//!    most 32 bytes, aligned to at most 8 (a larger one is boxed, and the box is what is
//!    stored).
//! 2. The value is consumed exactly once: by `vtable.run` (which moves it out), or by
//!    `vtable.drop` (the `SmallTask`'s `Drop`), or moved whole: into the queue's words
//!    ([`SmallTask::enqueue`], which forgets the `SmallTask`), from there into a slab
//!    ([`TaskSlabs::insert_queued`]) and back out ([`TaskSlabs::remove`]). Only the words
//!    that `vtable.words` counts are copied: the rest never held any byte of the value.
//! 3. Queued, a task is its table ([`QueuedTask`]) and its words in the batch's vector of words,
//!    in push order; the batch takes each out once, in that order, or drops it.
//!    A slab slot holds a value exactly while a [`TaskEntry`] names it; `remove` takes the
//!    key by value, so a slot is read once. A `TaskEntry` dropped without `remove` leaks its
//!    value, never drops it twice: the worker removes every task it takes out of the wheel.
//! 4. Under unwinding the invariants hold too. A task's run catches its panic (`Job::run`),
//!    and the worker drops tasks through `shared::drop_caught`, so user code does not unwind
//!    through these functions; should anything unwind anyway, each path errs towards a leak,
//!    never a second read: a task is moved out of its words (`ptr::read`) before it runs, so a
//!    slot whose release an unwind skipped holds a stale copy that no key names any more; a
//!    `SmallTask` whose value's `Drop` panics counts as dropped (its own `Drop` is not run
//!    again); and a batch's drain reads out every task it took before it goes, even when
//!    dropped early (`batch::DrainFront`), so the cursor of invariant 3 stays in step.
#![allow(unsafe_code)]

use super::cells::{CellId, CellRef};
use super::Job;
use crate::wheel::NO_INDEX;
use std::marker::PhantomData;
use std::mem::{align_of, size_of, ManuallyDrop, MaybeUninit};
use std::ptr;

/// Bytes of a task stored in place; a larger task is boxed.
pub(crate) const INLINE_BYTES: usize = 32;

/// The place a task's words are kept: eight-byte words, so that a task aligned to at most 8
/// is read and written in place.
pub(crate) type Word = MaybeUninit<u64>;
const WORDS: usize = INLINE_BYTES / size_of::<Word>();

/// How the task in a `SmallTask`'s words runs and drops: one table per task type.
pub(crate) struct VTable {
    /// Moves the task out of the words and runs it with its timeout's state; gives the state
    /// back, and sets the flag if the task returned (it stays clear if the task panicked).
    /// The state comes back alone, in registers: a returned `(CellRef, bool)` would go
    /// through memory, which the caller reads back wider than it was written.
    run: unsafe fn(*const Word, CellRef, &mut bool) -> CellRef,
    /// Drops the task in the words.
    drop: unsafe fn(*mut Word),
    /// The words the task occupies: 0, 2 or 4 (its size class).
    words: usize,
}

impl std::fmt::Debug for VTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VTable({} words)", self.words)
    }
}

/// The size class of a task of `bytes` bytes: 0, 2 or 4 words.
const fn class_words(bytes: usize) -> usize {
    match bytes {
        0 => 0,
        1..=16 => 2,
        _ => WORDS,
    }
}

/// A task type `F` stored in place.
struct InPlace<F>(PhantomData<F>);

impl<F: Job> InPlace<F> {
    const FITS: bool = size_of::<F>() <= INLINE_BYTES && align_of::<F>() <= align_of::<Word>();
    const VTABLE: VTable = VTable {
        run: run_in_place::<F>,
        drop: drop_in_place::<F>,
        words: class_words(size_of::<F>()),
    };
}

/// A task type `F` too large (or too aligned) to store in place: its box is stored.
struct Boxed<F>(PhantomData<F>);

impl<F: Job> Boxed<F> {
    const VTABLE: VTable = VTable {
        run: run_boxed::<F>,
        drop: drop_in_place::<Box<F>>,
        words: class_words(size_of::<Box<F>>()),
    };
}

/// # Safety
/// `words` holds a live `F` (invariant 1), which this consumes (invariant 2).
unsafe fn run_in_place<F: Job>(words: *const Word, state: CellRef, ran: &mut bool) -> CellRef {
    // SAFETY: the caller's: `words` holds a live `F`, suitably aligned (invariant 1: `F`
    // fits in place), and nobody reads it again.
    let task = unsafe { ptr::read(words.cast::<F>()) };
    let (state, returned) = task.run(state);
    *ran = returned;
    state
}

/// # Safety
/// `words` holds a live `Box<F>`, which this consumes.
unsafe fn run_boxed<F: Job>(words: *const Word, state: CellRef, ran: &mut bool) -> CellRef {
    // SAFETY: as `run_in_place`, for the box.
    let task = unsafe { ptr::read(words.cast::<Box<F>>()) };
    let (state, returned) = task.run_boxed(state);
    *ran = returned;
    state
}

/// Calls a table's `run`: the state back, and whether the task returned.
///
/// # Safety
/// As the table's `run`: `words` holds the live task `vtable` was made for, consumed here.
#[inline(always)]
unsafe fn call_run(vtable: &VTable, words: *const Word, state: CellRef) -> (CellRef, bool) {
    let mut ran = false;
    // SAFETY: the caller's.
    let state = unsafe { (vtable.run)(words, state, &mut ran) };
    (state, ran)
}

/// # Safety
/// `words` holds a live `T`, which this drops; nobody reads it again.
unsafe fn drop_in_place<T>(words: *mut Word) {
    // SAFETY: the caller's.
    unsafe { ptr::drop_in_place(words.cast::<T>()) }
}

/// A task of any type, stored in place when it fits in 32 bytes (else boxed). See the module
/// docs for its invariants.
pub(crate) struct SmallTask {
    vtable: &'static VTable,
    words: [Word; WORDS],
    /// `Send` (the task types are), not `Sync`: nothing is shared by reference.
    _send: PhantomData<Box<dyn Send>>,
}

impl SmallTask {
    /// Stores `task`: in place if it fits, else in a box.
    #[inline]
    pub(crate) fn new<F: Job>(task: F) -> SmallTask {
        if InPlace::<F>::FITS {
            let mut words = [Word::uninit(); WORDS];
            // SAFETY: `F` fits in the words and is aligned to at most a word (`FITS`);
            // the words now hold a live `F` for `InPlace::<F>::VTABLE` (invariant 1).
            unsafe { ptr::write(words.as_mut_ptr().cast::<F>(), task) };
            SmallTask {
                vtable: &InPlace::<F>::VTABLE,
                words,
                _send: PhantomData,
            }
        } else {
            let mut words = [Word::uninit(); WORDS];
            // SAFETY: a box is one word, aligned to a word.
            unsafe { ptr::write(words.as_mut_ptr().cast::<Box<F>>(), Box::new(task)) };
            SmallTask {
                vtable: &Boxed::<F>::VTABLE,
                words,
                _send: PhantomData,
            }
        }
    }

    /// Runs the task (see `Job::run`).
    #[inline]
    pub(crate) fn run(self, state: CellRef) -> (CellRef, bool) {
        let this = ManuallyDrop::new(self);
        // SAFETY: the words hold the live task the vtable was made for (invariant 1); `this`
        // is never dropped, so the task is consumed once, here (invariant 2).
        unsafe { call_run(this.vtable, this.words.as_ptr(), state) }
    }

    #[inline]
    fn words(&self) -> usize {
        self.vtable.words
    }
}

impl Drop for SmallTask {
    fn drop(&mut self) {
        // SAFETY: the words hold the live task (invariant 1), dropped once, here: `run` and
        // `enqueue` take the task without running this (invariant 2).
        unsafe { (self.vtable.drop)(self.words.as_mut_ptr()) }
    }
}

impl std::fmt::Debug for SmallTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmallTask")
            .field("words", &self.words())
            .finish()
    }
}

/// A task on its way through the queue: its table; its words follow, in the batch's vector of
/// words, in push order (see [`SmallTask::enqueue`]). 8 bytes.
#[derive(Debug)]
#[allow(unreachable_pub)]
pub struct QueuedTask(&'static VTable);

impl SmallTask {
    /// Appends the task's words (as many as its class has: 0, 2 or 4) to `words`, and returns
    /// its table: a zero-sized task queues 8 bytes, not 40.
    #[inline]
    pub(crate) fn enqueue(self, words: &mut Vec<Word>) -> QueuedTask {
        let task = ManuallyDrop::new(self);
        // The words move to `words` (invariant 2): `task` is forgotten, never dropped. One
        // copy of a fixed length per class, not a copy of a length read at run time.
        match task.words() {
            0 => {}
            2 => words.extend_from_slice(&task.words[..2]),
            _ => words.extend_from_slice(&task.words[..WORDS]),
        }
        QueuedTask(task.vtable)
    }

    /// As `SmallTask::new(task).enqueue(words)`, with the task written straight into `words`:
    /// a task built first on the stack is then copied with reads wider than its fields were
    /// written (a 16-byte load of two 8-byte fields), and each such read waits for the stores
    /// to reach the cache instead of taking its bytes from them (a failed store forward; see
    /// `docs/performance.md`, "Tasks of up to 32 bytes in place").
    #[inline]
    pub(crate) fn enqueue_fresh<F: Job>(task: F, words: &mut Vec<Word>) -> QueuedTask {
        if !InPlace::<F>::FITS {
            return SmallTask::new(task).enqueue(words);
        }
        let n = class_words(size_of::<F>());
        if n == 0 {
            // No bytes to queue, and `words` untouched (its header is a line the worker's
            // core may hold): the task is forgotten here and made again, from no bytes, where
            // it runs or is dropped (invariant 2, as `enqueue` does).
            std::mem::forget(task);
            return QueuedTask(&InPlace::<F>::VTABLE);
        }
        words.reserve(n);
        let len = words.len();
        // SAFETY: `words` has room for `n` more words (reserved), which `F` fits in, aligned
        // to at most a word (`FITS`, `class_words`), so the write stays in the allocation and
        // is aligned. The `n` words now hold a live `F` for `InPlace::<F>::VTABLE` (invariants
        // 1 and 3: what `enqueue` would have appended), and `Word` is `MaybeUninit`, so the
        // bytes `F` leaves unwritten are valid words.
        unsafe {
            ptr::write(words.as_mut_ptr().add(len).cast::<F>(), task);
            words.set_len(len + n);
        }
        QueuedTask(&InPlace::<F>::VTABLE)
    }

    /// The task `enqueue` queued, its words read from `words` at `*at` (moved on past them).
    /// Each queued task is taken out once, in push order, with the same `words`.
    #[inline]
    pub(crate) fn dequeue(queued: QueuedTask, words: &[Word], at: &mut usize) -> SmallTask {
        let n = queued.0.words;
        let mut own = [Word::uninit(); WORDS];
        match n {
            0 => {}
            2 => own[..2].copy_from_slice(&words[*at..*at + 2]),
            _ => own.copy_from_slice(&words[*at..*at + WORDS]),
        }
        *at += n;
        // The words `enqueue` moved out for this table (invariant 3).
        SmallTask {
            vtable: queued.0,
            words: own,
            _send: PhantomData,
        }
    }
}

/// A task kept in the worker's [`TaskSlabs`] while its timeout waits in the wheel: its table
/// and, if it has words, their key in the slab of its size class; with the chunk id of its
/// timeout's cell, this is the wheel's entry for the timeout. 16 bytes.
// `pub` in a crate-private module: the entry type of a public (sealed) trait's impl.
#[derive(Debug)]
#[allow(unreachable_pub)]
pub struct TaskEntry {
    vtable: &'static VTable,
    key: u32,
    cell: CellId,
}

impl TaskEntry {
    #[inline]
    pub(crate) fn cell(&self) -> CellId {
        self.cell
    }
}

/// Slots per page of a slab (the slabs grow by pages, never by copying what they hold).
const PAGE: usize = 1024;

/// A slab of `N`-word slots, by pages, the free ones linked through their first word (so that
/// freeing a slot writes only the slot, and nothing grows while tasks run).
struct WordSlab<const N: usize> {
    pages: Vec<Box<[[Word; N]; PAGE]>>,
    /// Slots handed out so far (live or free).
    len: usize,
    /// Slots holding a task's words.
    live: usize,
    /// The first free slot, or `NO_INDEX`; each free slot's first word holds the next.
    free: u32,
}

impl<const N: usize> WordSlab<N> {
    const fn new() -> Self {
        // A free slot links the next through its first word.
        const { assert!(N >= 1) };
        WordSlab {
            pages: Vec::new(),
            len: 0,
            live: 0,
            free: NO_INDEX,
        }
    }

    /// Stores `words` (`N` of them) in a free slot: its key.
    #[inline]
    fn insert(&mut self, words: &[Word]) -> u32 {
        let key = if self.free != NO_INDEX {
            let key = self.free;
            // SAFETY: a free slot's first word was written by `release`, as a whole `u64`.
            let next = unsafe { self.slot(key)[0].assume_init() };
            self.free = next as u32;
            key
        } else {
            if self.len.is_multiple_of(PAGE) {
                self.pages.push(Box::new([[Word::uninit(); N]; PAGE]));
            }
            self.len += 1;
            u32::try_from(self.len - 1).expect("fewer tasks than wheel keys")
        };
        self.live += 1;
        self.slot(key).copy_from_slice(words);
        key
    }

    #[inline]
    fn remove(&mut self, key: u32, into: &mut [Word; WORDS]) {
        into[..N].copy_from_slice(self.slot(key));
        self.release(key);
    }

    /// Frees slot `key` (its value moved out already).
    #[inline]
    fn release(&mut self, key: u32) {
        self.live -= 1;
        if self.live == 0 {
            // Nothing live: give the memory back rather than keep a burst's worth.
            *self = WordSlab::new();
            return;
        }
        let next = self.free;
        self.slot(key)[0] = Word::new(u64::from(next));
        self.free = key;
    }

    #[inline]
    fn slot(&mut self, key: u32) -> &mut [Word; N] {
        let key = key as usize;
        &mut self.pages[key / PAGE][key % PAGE]
    }

    fn live(&self) -> usize {
        self.live
    }
}

/// The worker's store of the words of waiting tasks (see [`TaskEntry`]), one slab per size
/// class; tasks of no words need none.
#[allow(unreachable_pub)]
pub struct TaskSlabs {
    two: WordSlab<2>,
    four: WordSlab<WORDS>,
    /// `Send` (the tasks are), not `Sync`.
    _send: PhantomData<Box<dyn Send>>,
}

impl Default for TaskSlabs {
    fn default() -> Self {
        TaskSlabs {
            two: WordSlab::new(),
            four: WordSlab::new(),
            _send: PhantomData,
        }
    }
}

impl std::fmt::Debug for TaskSlabs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskSlabs")
            .field("two_words", &self.two.live())
            .field("four_words", &self.four.live())
            .finish()
    }
}

impl TaskSlabs {
    /// The task `enqueue` queued, its words moved from `words` at `*at` (moved on past them)
    /// straight into the slab of its class: `SmallTask::dequeue` and then a move into the slab,
    /// with one copy of the words. `cell` goes along with the key.
    #[inline]
    pub(crate) fn insert_queued(
        &mut self,
        queued: QueuedTask,
        words: &[Word],
        at: &mut usize,
        cell: CellId,
    ) -> TaskEntry {
        let vtable = queued.0;
        let start = *at;
        // The words move from the batch to the slab (invariants 2 and 3). The cursor moves
        // past them first: should the store panic, the task is leaked, and the batch never
        // reads its words again for the next task's table (invariant 4).
        *at += vtable.words;
        let key = match vtable.words {
            0 => 0,
            2 => self.two.insert(&words[start..start + 2]),
            _ => self.four.insert(&words[start..start + WORDS]),
        };
        TaskEntry { vtable, key, cell }
    }

    /// Moves `task`'s words into the slab of its class (as queued and then taken out).
    #[cfg(test)]
    fn insert(&mut self, task: SmallTask, cell: CellId) -> TaskEntry {
        let mut words = Vec::new();
        let queued = task.enqueue(&mut words);
        self.insert_queued(queued, &words, &mut 0, cell)
    }

    /// Takes a waiting task's words back out of its slab.
    #[inline]
    pub(crate) fn remove(&mut self, entry: TaskEntry) -> SmallTask {
        let mut words = [Word::uninit(); WORDS];
        match entry.vtable.words {
            0 => {}
            2 => self.two.remove(entry.key, &mut words),
            _ => self.four.remove(entry.key, &mut words),
        }
        // The words are the ones `insert_queued` moved in under this key (invariant 3).
        SmallTask {
            vtable: entry.vtable,
            words,
            _send: PhantomData,
        }
    }

    /// Runs a waiting task where its words are (`remove` then `SmallTask::run`, without copying
    /// the words out); the slot is free after.
    #[inline]
    pub(crate) fn run_entry(&mut self, entry: TaskEntry, state: CellRef) -> (CellRef, bool) {
        // One match on the class for the run and the release.
        let (vtable, key) = (entry.vtable, entry.key);
        match vtable.words {
            0 => {
                let zero: [Word; 0] = [];
                // SAFETY: a zero-sized task (invariant 3), whose read needs only an aligned
                // pointer, consumed here once (invariant 2): `entry` is gone.
                unsafe { call_run(vtable, zero.as_ptr(), state) }
            }
            2 => {
                // SAFETY: the slot holds the live task `entry` names (invariant 3), consumed
                // here once (invariant 2): `entry` is gone, and the slot is freed next
                // without being read.
                let out = unsafe { call_run(vtable, self.two.slot(key).as_ptr(), state) };
                self.two.release(key);
                out
            }
            _ => {
                // SAFETY: as for two words.
                let out = unsafe { call_run(vtable, self.four.slot(key).as_ptr(), state) };
                self.four.release(key);
                out
            }
        }
    }

    /// Tasks kept (with words) right now.
    #[cfg(test)]
    fn live(&self) -> usize {
        self.two.live() + self.four.live()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CELL: CellId = CellId::new(0, 0);
    use crate::Timeout;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts its drops and runs.
    struct Probe<const PAD: usize> {
        runs: Arc<AtomicUsize>,
        drops: Arc<AtomicUsize>,
        _pad: [u8; PAD],
    }

    impl<const PAD: usize> Drop for Probe<PAD> {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn probe<const PAD: usize>() -> (Probe<PAD>, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let (runs, drops) = (Arc::default(), Arc::default());
        let p = Probe {
            runs: Arc::clone(&runs),
            drops: Arc::clone(&drops),
            _pad: [0; PAD],
        };
        (p, runs, drops)
    }

    fn as_task<const PAD: usize>(p: Probe<PAD>) -> impl FnOnce(&Timeout) + Send + 'static {
        move |_: &Timeout| {
            p.runs.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A state to run tasks with: one from a manual timer.
    fn state() -> (crate::HashedWheelTimer, CellRef) {
        let (timer, _driver) = crate::HashedWheelTimer::builder().build_manual().unwrap();
        let t = timer
            .new_timeout(|_: &Timeout| {}, std::time::Duration::from_secs(1))
            .unwrap();
        (timer, t.state)
    }

    /// A zero-sized task queued fresh adds no words, and runs once from none.
    #[test]
    fn a_zero_sized_task_queued_fresh_runs_from_no_words() {
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        let (_timer, st) = state();
        let mut queue = vec![Word::new(7)];
        let queued = SmallTask::enqueue_fresh(
            |_: &Timeout| {
                RUNS.fetch_add(1, Ordering::SeqCst);
            },
            &mut queue,
        );
        assert_eq!(queue.len(), 1, "no words for a zero-sized task");
        let mut at = 1;
        let (_st, ran) = SmallTask::dequeue(queued, &queue, &mut at).run(st);
        assert!(ran && at == 1);
        assert_eq!(RUNS.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn classes_by_size() {
        assert_eq!(class_words(0), 0);
        assert_eq!(class_words(1), 2);
        assert_eq!(class_words(16), 2);
        assert_eq!(class_words(17), 4);
        assert_eq!(class_words(32), 4);
        assert_eq!(size_of::<TaskEntry>(), 16);
        assert_eq!(size_of::<SmallTask>(), 40);
    }

    /// Every path a task takes, for a task of each class and a boxed one: run, dropped
    /// unrun, kept and run, kept and dropped, and dropped with the slabs.
    #[test]
    fn every_task_is_run_or_dropped_exactly_once() {
        fn check<const PAD: usize>(words: usize) {
            let (_timer, st) = state();
            // Run.
            let (p, runs, drops) = probe::<PAD>();
            let task = SmallTask::new(as_task(p));
            assert_eq!(task.words(), words);
            let (st, ran) = task.run(st);
            assert!(ran);
            assert_eq!(
                (runs.load(Ordering::SeqCst), drops.load(Ordering::SeqCst)),
                (1, 1)
            );
            // Dropped unrun.
            let (p, runs, drops) = probe::<PAD>();
            drop(SmallTask::new(as_task(p)));
            assert_eq!(
                (runs.load(Ordering::SeqCst), drops.load(Ordering::SeqCst)),
                (0, 1)
            );
            // Kept, then run; kept, then dropped; kept and left in the slabs.
            let mut slabs = TaskSlabs::default();
            let (p, runs, drops) = probe::<PAD>();
            let entry = slabs.insert(SmallTask::new(as_task(p)), CELL);
            let (p2, runs2, drops2) = probe::<PAD>();
            let entry2 = slabs.insert(SmallTask::new(as_task(p2)), CELL);
            let (p3, _, drops3) = probe::<PAD>();
            let entry3 = slabs.insert(SmallTask::new(as_task(p3)), CELL);
            assert_eq!(drops.load(Ordering::SeqCst), 0);
            let (st, ran) = slabs.remove(entry).run(st);
            assert!(ran);
            assert_eq!(
                (runs.load(Ordering::SeqCst), drops.load(Ordering::SeqCst)),
                (1, 1)
            );
            drop(slabs.remove(entry2));
            assert_eq!(
                (runs2.load(Ordering::SeqCst), drops2.load(Ordering::SeqCst)),
                (0, 1)
            );
            // Queued (table and words apart), then run.
            let mut queue = Vec::new();
            let (p5, runs5, drops5) = probe::<PAD>();
            let queued = SmallTask::new(as_task(p5)).enqueue(&mut queue);
            assert_eq!(queue.len(), words);
            let mut at = 0;
            let (st, ran) = SmallTask::dequeue(queued, &queue, &mut at).run(st);
            assert!(ran && at == queue.len());
            assert_eq!(
                (runs5.load(Ordering::SeqCst), drops5.load(Ordering::SeqCst)),
                (1, 1)
            );
            // Queued fresh (written straight into the words, after another task's), then
            // run; queued fresh, then dropped.
            let (p6, runs6, drops6) = probe::<PAD>();
            let (p7, runs7, drops7) = probe::<PAD>();
            let first = SmallTask::enqueue_fresh(as_task(p6), &mut queue);
            let second = SmallTask::enqueue_fresh(as_task(p7), &mut queue);
            assert_eq!(queue.len(), 3 * words);
            let (st, ran) = SmallTask::dequeue(first, &queue, &mut at).run(st);
            assert!(ran);
            drop(SmallTask::dequeue(second, &queue, &mut at));
            assert_eq!(at, queue.len());
            assert_eq!(
                (runs6.load(Ordering::SeqCst), drops6.load(Ordering::SeqCst)),
                (1, 1)
            );
            assert_eq!(
                (runs7.load(Ordering::SeqCst), drops7.load(Ordering::SeqCst)),
                (0, 1)
            );
            // Run where it is entry.
            let (p4, runs4, drops4) = probe::<PAD>();
            let entry4 = slabs.insert(SmallTask::new(as_task(p4)), CELL);
            let (_st, ran) = slabs.run_entry(entry4, st);
            assert!(ran);
            assert_eq!(
                (runs4.load(Ordering::SeqCst), drops4.load(Ordering::SeqCst)),
                (1, 1)
            );
            // A task entry dropped without `remove` leaks (invariant 3): never a double drop.
            // (Under Miri, which reports leaks, it is removed instead.)
            #[cfg(not(miri))]
            let _leaked: TaskEntry = entry3;
            #[cfg(miri)]
            drop(slabs.remove(entry3));
            drop(slabs);
            assert_eq!(drops3.load(Ordering::SeqCst), usize::from(cfg!(miri)));
        }
        // Probe: two Arcs (16 bytes) plus padding; the closure captures the probe.
        check::<0>(2);
        check::<8>(4);
        check::<16>(4);
        check::<17>(2); // boxed: the box's one word
    }

    /// A zero-sized task needs no slot; a slab gives its memory back when it empties, and
    /// reuses freed slots meanwhile.
    #[test]
    fn slabs_reuse_and_release() {
        let mut slabs = TaskSlabs::default();
        let zst = slabs.insert(SmallTask::new(|_: &Timeout| {}), CELL);
        assert_eq!(slabs.live(), 0);
        drop(slabs.remove(zst));
        let big = [7u64; 3];
        let entry: Vec<TaskEntry> = (0..PAGE + 1)
            .map(|_| {
                slabs.insert(
                    SmallTask::new(move |_: &Timeout| {
                        std::hint::black_box(big);
                    }),
                    CELL,
                )
            })
            .collect();
        assert_eq!(slabs.live(), PAGE + 1);
        assert_eq!(slabs.four.pages.len(), 2);
        let mut entry = entry.into_iter();
        let first = entry.next().unwrap();
        let key = first.key;
        drop(slabs.remove(first));
        let again = slabs.insert(
            SmallTask::new(move |_: &Timeout| {
                std::hint::black_box(big);
            }),
            CELL,
        );
        assert_eq!(again.key, key, "a freed slot is used first");
        drop(slabs.remove(again));
        for p in entry {
            drop(slabs.remove(p));
        }
        assert_eq!((slabs.live(), slabs.four.pages.len()), (0, 0));
    }

    /// A task run where its words are kept frees its slot (used again first), a panicking one too
    /// (dropped once, its state back), and the run that empties a slab gives its memory back.
    #[test]
    fn running_kept_tasks_frees_their_slots() {
        let (_timer, st) = state();
        let mut slabs = TaskSlabs::default();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = |runs: &Arc<AtomicUsize>| {
            let runs = Arc::clone(runs);
            move |_: &Timeout| {
                runs.fetch_add(1, Ordering::SeqCst);
            }
        };
        let first = slabs.insert(SmallTask::new(counted(&runs)), CELL);
        let second = slabs.insert(SmallTask::new(counted(&runs)), CELL);
        let zero_sized = slabs.insert(SmallTask::new(|_: &Timeout| {}), CELL);
        let first_key = first.key;
        let (st, ran) = slabs.run_entry(first, st);
        assert!(ran);
        assert_eq!(slabs.live(), 1);
        let again = slabs.insert(SmallTask::new(counted(&runs)), CELL);
        assert_eq!(again.key, first_key, "a freed slot is used first");
        let (p, _, drops) = probe::<0>();
        let panics = slabs.insert(
            SmallTask::new(move |_: &Timeout| {
                let _p = p;
                panic!("task panics");
            }),
            CELL,
        );
        let (st, ran) = slabs.run_entry(panics, st);
        assert!(!ran && !st.is_cancelled());
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        let (st, _) = slabs.run_entry(second, st);
        assert_eq!(slabs.two.pages.len(), 1);
        let (st, _) = slabs.run_entry(again, st);
        assert_eq!((slabs.live(), slabs.two.pages.len()), (0, 0));
        let (_st, ran) = slabs.run_entry(zero_sized, st);
        assert!(ran);
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }

    /// Counts its drops and panics in its `Drop`.
    struct PanicsOnDrop(Arc<AtomicUsize>);

    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
            panic!("a task's Drop panics (on purpose)");
        }
    }

    /// Queued tasks of every class, the middle one's `Drop` panicking as it is dropped (caught,
    /// as the worker does): the tasks after it are read from their own words, each once.
    #[test]
    fn a_drop_that_panics_in_a_queue_leaves_the_rest_in_step() {
        let (_timer, mut st) = state();
        let panicking = Arc::new(AtomicUsize::new(0));
        let (small, small_runs, small_drops) = probe::<0>();
        let (large, large_runs, large_drops) = probe::<16>();
        let mut queue = Vec::new();
        let p = PanicsOnDrop(Arc::clone(&panicking));
        let first = SmallTask::new(move |_: &Timeout| drop(p)).enqueue(&mut queue);
        let second = SmallTask::enqueue_fresh(as_task(small), &mut queue);
        let third = SmallTask::new(as_task(large)).enqueue(&mut queue);
        let mut at = 0;
        let first = SmallTask::dequeue(first, &queue, &mut at);
        assert!(!crate::shared::drop_caught(first));
        assert_eq!(panicking.load(Ordering::SeqCst), 1);
        for queued in [second, third] {
            let (back, ran) = SmallTask::dequeue(queued, &queue, &mut at).run(st);
            assert!(ran);
            st = back;
        }
        assert_eq!(at, queue.len());
        assert_eq!(small_runs.load(Ordering::SeqCst), 1);
        assert_eq!(large_runs.load(Ordering::SeqCst), 1);
        assert_eq!(small_drops.load(Ordering::SeqCst), 1);
        assert_eq!(large_drops.load(Ordering::SeqCst), 1);
        assert_eq!(panicking.load(Ordering::SeqCst), 1, "dropped once");
    }

    /// A kept task whose `Drop` panics as it is removed and dropped (a cancel): its slot
    /// is free, and the other kept tasks come back whole.
    #[test]
    fn a_drop_that_panics_after_a_remove_leaves_the_slabs_whole() {
        let (_timer, st) = state();
        let panicking = Arc::new(AtomicUsize::new(0));
        let mut slabs = TaskSlabs::default();
        let (before, before_runs, _) = probe::<8>();
        let (after, after_runs, _) = probe::<8>();
        let before = slabs.insert(SmallTask::new(as_task(before)), CELL);
        let p = PanicsOnDrop(Arc::clone(&panicking));
        let doomed = slabs.insert(SmallTask::new(move |_: &Timeout| drop((p, 0u64))), CELL);
        let after = slabs.insert(SmallTask::new(as_task(after)), CELL);
        assert!(!crate::shared::drop_caught(slabs.remove(doomed)));
        assert_eq!(panicking.load(Ordering::SeqCst), 1);
        assert_eq!(slabs.live(), 2);
        let (st, ran) = slabs.run_entry(after, st);
        assert!(ran);
        let (_st, ran) = slabs.run_entry(before, st);
        assert!(ran);
        assert_eq!(before_runs.load(Ordering::SeqCst), 1);
        assert_eq!(after_runs.load(Ordering::SeqCst), 1);
        assert_eq!(slabs.live(), 0);
    }

    /// A task that panics is caught by the job (its state comes back) and dropped once.
    #[test]
    fn a_panicking_task_gives_its_state_back() {
        let (_timer, st) = state();
        let (p, _, drops) = probe::<0>();
        let task = SmallTask::new(move |_: &Timeout| {
            let _p = p;
            panic!("task panics");
        });
        let (st, ran) = task.run(st);
        assert!(!ran);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        assert!(!st.is_cancelled());
    }
}
