//! A boxed timer's tasks without a heap allocation: a task of up to 32 bytes is stored in place,
//! in the queue and then, while its timeout waits, in the worker's columns of task words under
//! its wheel key.
//!
//! Owns [`SmallTask`] (a task of any `Job` type, erased: its words and a table of the functions
//! that run and drop it) and [`TaskWords`] (the words of the tasks in the wheel, a column per
//! size class, so a wheel node stays 32 bytes). Touches the cells (`CellRef`, which a task runs
//! with) and nothing else. The crate's `unsafe` for tasks is here only, and no thread meets
//! another in it: a `SmallTask` is a `Send` value moved through the queue's locks, and the
//! columns belong to the worker.
//!
//! A column allocates a page of slots (1 024 keys, a page of the wheel's slab) as a key of it
//! first gets a task's words, and gives pages back when no key of them holds words: all of
//! them as the column empties, and each such page when the worker trims it, idle after a burst
//! ([`TaskWords::trim`]).
//!
//! # Invariants
//! 1. A `SmallTask`'s `words` hold one live value of the type its `vtable` was made for
//!    (`InPlace::<F>::VTABLE` or `Boxed::<F>::VTABLE`), written by [`SmallTask::new`]: a
//!    `Send + 'static` type of at most 32 bytes, aligned to at most 8 (a larger one is boxed,
//!    the box stored).
//! 2. The value is consumed exactly once: by `vtable.run` (which moves it out), by `vtable.drop`
//!    (the `SmallTask`'s `Drop`), or moved whole: into the queue's words ([`SmallTask::enqueue`],
//!    which forgets the `SmallTask`), into a column ([`TaskWords::insert_queued`]) and back out
//!    ([`TaskWords::remove`]). Only the words `vtable.words` counts are copied: the rest never
//!    held a byte of the value.
//! 3. Queued, a task is its table ([`QueuedTask`]) and its words in the batch's vector, in push
//!    order; the batch takes each out once, in that order, or drops it. A column's slot holds a
//!    value exactly while its key's bit is set and a [`TaskEntry`] names it: a held key takes no
//!    second value and a take clears the bit, so two entries never name one slot, whatever keys
//!    the worker passes; `remove` and `run_entry` take the entry by value, so a slot is read
//!    once. A `TaskEntry` dropped without `remove` leaks its value (never a double drop) and
//!    keeps its key held (a later insert under it panics): the worker removes every task it
//!    takes out of the wheel.
//! 4. Unwinding keeps them. Runs catch their panics (`Job::run`) and the worker drops tasks
//!    through `shared::drop_caught`, so user code does not unwind through here; if anything
//!    does, each path errs towards a leak, never a second read: a task's key is let go of, and
//!    the task moved out of its words (`ptr::read`), before its code runs, so an unwinding run
//!    leaves a stale copy no entry names; a `SmallTask` whose value's `Drop` panics counts as
//!    dropped (its `Drop` does not run again); a batch's drain reads out every task it took
//!    before it goes, even dropped early (`batch::DrainFront`), so invariant 3's cursor stays
//!    in step.
#![allow(unsafe_code)]

use super::cells::{CellId, CellRef};
use super::Job;
use std::marker::PhantomData;
use std::mem::{align_of, size_of, ManuallyDrop, MaybeUninit};
use std::ptr;

/// Bytes of a task stored in place; a larger task is boxed.
pub(crate) const INLINE_BYTES: usize = 32;

/// Eight-byte words: a task aligned to at most 8 is read and written in place.
pub(crate) type Word = MaybeUninit<u64>;
const WORDS: usize = INLINE_BYTES / size_of::<Word>();

/// How the task in a `SmallTask`'s words runs and drops: one table per task type.
pub(crate) struct VTable {
    /// Moves the task out of the words and runs it; gives the state back, and sets the flag if
    /// the task returned (not if it panicked). The state comes back alone, in registers: a
    /// returned `(CellRef, bool)` goes through memory, read back wider than it was written.
    run: unsafe fn(*const Word, CellRef, &mut bool) -> CellRef,
    drop: unsafe fn(*mut Word),
    /// The words the task occupies: 0, 2 or 4 (its size class).
    words: usize,
}

impl std::fmt::Debug for VTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VTable({} words)", self.words)
    }
}

const fn class_words(bytes: usize) -> usize {
    match bytes {
        0 => 0,
        1..=16 => 2,
        _ => WORDS,
    }
}

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
    // SAFETY: the caller's: `words` holds a live `F`, aligned (invariant 1: `F` fits in
    // place), and nobody reads it again.
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

/// # Safety
/// As the table's `run`: `words` holds the live task `vtable` was made for, consumed here.
#[inline]
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

/// A task of any type, in place if it fits in 32 bytes, else boxed. Invariants: module docs.
pub(crate) struct SmallTask {
    vtable: &'static VTable,
    words: [Word; WORDS],
    /// `Send` (the task types are), not `Sync`: nothing is shared by reference.
    _send: PhantomData<Box<dyn Send>>,
}

impl SmallTask {
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

/// A task on its way through the queue: its table, its words following in the batch's vector
/// of words, in push order (see [`SmallTask::enqueue`]). 8 bytes.
#[derive(Debug)]
#[allow(unreachable_pub)]
pub struct QueuedTask(&'static VTable);

impl QueuedTask {
    /// The task's size class as a lane of the wheel's keys: 0, 1 or 2 for 0, 2 or 4 words.
    #[inline]
    pub(crate) fn lane(&self) -> usize {
        self.0.words / 2
    }
}

impl SmallTask {
    /// Appends the task's words (0, 2 or 4) and returns its table: a zero-sized task queues 8
    /// bytes, not 40.
    #[inline]
    pub(crate) fn enqueue(self, words: &mut Vec<Word>) -> QueuedTask {
        let task = ManuallyDrop::new(self);
        // The words move to `words` (invariant 2); `task` is never dropped. A fixed-length
        // copy per class, not one of a length read at run time.
        match task.words() {
            0 => {}
            2 => words.extend_from_slice(&task.words[..2]),
            _ => words.extend_from_slice(&task.words[..WORDS]),
        }
        QueuedTask(task.vtable)
    }

    /// As `SmallTask::new(task).enqueue(words)`, written straight into `words`: a task built on
    /// the stack first is copied with reads wider than its fields were written, each a failed
    /// store forward (see `docs/performance.md`, "Tasks of up to 32 bytes in place").
    #[inline]
    pub(crate) fn enqueue_fresh<F: Job>(task: F, words: &mut Vec<Word>) -> QueuedTask {
        if !InPlace::<F>::FITS {
            return SmallTask::new(task).enqueue(words);
        }
        let n = class_words(size_of::<F>());
        if n == 0 {
            // Nothing queued and `words` untouched (the worker's core may hold its header): the
            // task is forgotten and made again from no bytes where it runs or drops (invariant 2).
            std::mem::forget(task);
            return QueuedTask(&InPlace::<F>::VTABLE);
        }
        words.reserve(n);
        let len = words.len();
        // SAFETY: `n` more words are reserved, and `F` fits in them aligned to at most a word
        // (`FITS`, `class_words`): the write is in bounds and aligned. They now hold a live `F`
        // for `InPlace::<F>::VTABLE`, as `enqueue` would append them (invariants 1 and 3), and
        // the bytes `F` leaves unwritten are valid `MaybeUninit` words.
        unsafe {
            ptr::write(words.as_mut_ptr().add(len).cast::<F>(), task);
            words.set_len(len + n);
        }
        QueuedTask(&InPlace::<F>::VTABLE)
    }

    /// The task `enqueue` queued, its words read from `words` at `*at` (moved past them). Each
    /// queued task is taken out once, in push order, with the same `words`.
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

/// A task kept in [`TaskWords`] while its timeout waits: the wheel's entry for the timeout (16
/// bytes): its table, its wheel key (its words' key, if any) and its cell's chunk id.
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

/// Log2 of the keys a page of a column covers: a page of the wheel's slab (1 024 nodes).
const PAGE_BITS: u32 = 10;
const PAGE: usize = 1 << PAGE_BITS;

/// One size class's words under the keys of a page, and which of those keys hold a task's words.
struct Page<const N: usize> {
    slots: Box<[[Word; N]; PAGE]>,
    held: [u64; PAGE / 64],
}

/// The words of waiting tasks of one size class, `N` words a task, under their wheel keys, in
/// pages allocated as keys of the page get a task. A bit per key says whether its slot holds
/// words: a key is taken only while free, so two entries never name one slot (invariant 3).
struct WordColumn<const N: usize> {
    pages: Vec<Option<Page<N>>>,
    /// Keys holding a task's words.
    live: usize,
}

impl<const N: usize> WordColumn<N> {
    const fn new() -> Self {
        WordColumn {
            pages: Vec::new(),
            live: 0,
        }
    }

    /// # Panics
    /// If `key` holds words already (one key given to two tasks), before anything changes.
    #[inline]
    fn insert(&mut self, key: u32, words: &[Word]) {
        let (page, i) = (key >> PAGE_BITS, key as usize % PAGE);
        let page = match self.pages.get_mut(page as usize) {
            Some(Some(page)) => page,
            _ => self.add_page(page as usize),
        };
        let (w, bit) = (i / 64, 1u64 << (i % 64));
        assert!(page.held[w] & bit == 0, "two tasks' words under key {key}");
        page.held[w] |= bit;
        page.slots[i].copy_from_slice(words);
        self.live += 1;
    }

    #[cold]
    fn add_page(&mut self, page: usize) -> &mut Page<N> {
        if self.pages.len() <= page {
            self.pages.resize_with(page + 1, || None);
        }
        // On the heap: a page is 16 or 32 KB, more than a small stack (a loom model's) holds.
        let slots = vec![[Word::uninit(); N]; PAGE].into_boxed_slice();
        self.pages[page].insert(Page {
            slots: slots.try_into().expect("a page of slots"),
            held: [0; PAGE / 64],
        })
    }

    /// Lets go of the words under `key`, the caller's to read once (nothing writes the slot
    /// until the key is stored again). Panics, before any change, if `key` holds none.
    #[inline]
    fn take(&mut self, key: u32) -> &[Word; N] {
        let (page, i) = (key >> PAGE_BITS, key as usize % PAGE);
        let page = self.pages.get_mut(page as usize).and_then(Option::as_mut);
        let Some(page) = page.filter(|page| page.held[i / 64] & (1 << (i % 64)) != 0) else {
            panic!("no task's words under key {key}")
        };
        page.held[i / 64] ^= 1 << (i % 64);
        self.live -= 1;
        &page.slots[i]
    }

    /// Gives the pages back if no key holds a task's words, rather than keep a burst's worth.
    #[inline]
    fn release_if_empty(&mut self) {
        if self.live == 0 && !self.pages.is_empty() {
            self.pages = Vec::new();
        }
    }

    /// Gives back each page none of whose keys holds a task's words (its slots hold no value:
    /// invariant 3), if the pages are under a quarter full; `insert` makes one again on demand.
    /// Returns the pages given back.
    fn trim(&mut self) -> usize {
        let allocated = self.pages.iter().flatten().count();
        if self.live * 4 >= allocated * PAGE {
            return 0;
        }
        let mut given_back = 0;
        for slot in &mut self.pages {
            if slot
                .as_ref()
                .is_some_and(|page| page.held == [0; PAGE / 64])
            {
                *slot = None;
                given_back += 1;
            }
        }
        let used = self.pages.iter().rposition(Option::is_some);
        self.pages.truncate(used.map_or(0, |p| p + 1));
        self.pages.shrink_to_fit();
        given_back
    }

    /// Bytes of the page table and the pages' slots.
    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        let slots = self.pages.iter().flatten().count() * size_of::<[[Word; N]; PAGE]>();
        self.pages.capacity() * size_of::<Option<Page<N>>>() + slots
    }

    fn live(&self) -> usize {
        self.live
    }
}

/// The worker's store of waiting tasks' words (see [`TaskEntry`]): a column per size class
/// (`docs/performance.md`, "Task words in a column per size class").
#[allow(unreachable_pub)]
pub struct TaskWords {
    two: WordColumn<2>,
    four: WordColumn<WORDS>,
    /// `Send` (the tasks are), not `Sync`.
    _send: PhantomData<Box<dyn Send>>,
}

impl Default for TaskWords {
    fn default() -> Self {
        TaskWords {
            two: WordColumn::new(),
            four: WordColumn::new(),
            _send: PhantomData,
        }
    }
}

impl std::fmt::Debug for TaskWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskWords")
            .field("two_words", &self.two.live())
            .field("four_words", &self.four.live())
            .finish()
    }
}

impl TaskWords {
    /// `SmallTask::dequeue` and a move into its class's column under `key` (its timeout's wheel
    /// key), with one copy of the words. Panics, the task leaked, if a waiting task of the
    /// class has its words under `key`.
    #[inline]
    pub(crate) fn insert_queued(
        &mut self,
        queued: QueuedTask,
        words: &[Word],
        at: &mut usize,
        key: u32,
        cell: CellId,
    ) -> TaskEntry {
        let vtable = queued.0;
        let start = *at;
        // The words move from the batch to the column (invariants 2 and 3). The cursor moves
        // past them first: should the store panic, the task leaks, and its words are never read
        // as the next task's (invariant 4).
        *at += vtable.words;
        match vtable.words {
            0 => {}
            2 => self.two.insert(key, &words[start..start + 2]),
            _ => self.four.insert(key, &words[start..start + WORDS]),
        }
        TaskEntry { vtable, key, cell }
    }

    /// As queued and then taken out.
    #[cfg(test)]
    fn insert(&mut self, task: SmallTask, key: u32, cell: CellId) -> TaskEntry {
        let mut words = Vec::new();
        let queued = task.enqueue(&mut words);
        self.insert_queued(queued, &words, &mut 0, key, cell)
    }

    #[inline]
    pub(crate) fn remove(&mut self, entry: TaskEntry) -> SmallTask {
        let mut words = [Word::uninit(); WORDS];
        match entry.vtable.words {
            0 => {}
            2 => {
                words[..2].copy_from_slice(self.two.take(entry.key));
                self.two.release_if_empty();
            }
            _ => {
                words.copy_from_slice(self.four.take(entry.key));
                self.four.release_if_empty();
            }
        }
        // The words are the ones `insert_queued` moved in under this key (invariant 3).
        SmallTask {
            vtable: entry.vtable,
            words,
            _send: PhantomData,
        }
    }

    /// `remove` then `SmallTask::run`, without copying the words out; the key is free after.
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
                let words = self.two.take(key).as_ptr();
                // SAFETY: the slot held the live task `entry` names (invariant 3), consumed
                // here once (invariant 2): `entry` is gone and the key free; the column's pages
                // stay until the release after the run (a trim, too, needs the store, which
                // this borrows).
                let out = unsafe { call_run(vtable, words, state) };
                self.two.release_if_empty();
                out
            }
            _ => {
                let words = self.four.take(key).as_ptr();
                // SAFETY: as for two words.
                let out = unsafe { call_run(vtable, words, state) };
                self.four.release_if_empty();
                out
            }
        }
    }

    /// Gives back the pages of each column that hold no task's words, when a column is under
    /// a quarter full (`WordColumn::trim`). Returns the pages given back.
    pub(crate) fn trim(&mut self) -> usize {
        self.two.trim() + self.four.trim()
    }

    /// Bytes the columns hold.
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> usize {
        self.two.held_bytes() + self.four.held_bytes()
    }

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

    /// A probe's task, and a reading of its (runs, drops).
    fn counted<const PAD: usize>() -> (impl FnOnce(&Timeout) + Send, impl Fn() -> (usize, usize)) {
        let (p, runs, drops) = probe::<PAD>();
        let seen = move || (runs.load(Ordering::SeqCst), drops.load(Ordering::SeqCst));
        (as_task(p), seen)
    }

    /// A task holding a probe that panics when run, and its probe's count of drops.
    fn panicking<const PAD: usize>() -> (impl FnOnce(&Timeout) + Send, Arc<AtomicUsize>) {
        let (p, _, drops) = probe::<PAD>();
        let task = move |_: &Timeout| {
            let _p = p;
            panic!("task panics (on purpose)");
        };
        (task, drops)
    }

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
        let task = |_: &Timeout| _ = RUNS.fetch_add(1, Ordering::SeqCst);
        let queued = SmallTask::enqueue_fresh(task, &mut queue);
        assert_eq!(queue.len(), 1, "no words for a zero-sized task");
        let mut at = 1;
        let (_st, ran) = SmallTask::dequeue(queued, &queue, &mut at).run(st);
        assert_eq!((ran, at, RUNS.load(Ordering::SeqCst)), (true, 1, 1));
    }

    #[test]
    fn classes_by_size() {
        for (bytes, words) in [(0, 0), (1, 2), (16, 2), (17, 4), (32, 4)] {
            assert_eq!(class_words(bytes), words, "{bytes} bytes");
        }
        assert_eq!((size_of::<TaskEntry>(), size_of::<SmallTask>()), (16, 40));
    }

    /// Every path a task takes, for a task of each class and a boxed one: run, dropped unrun,
    /// kept and run, kept and dropped, queued, queued fresh, run where it is kept, left in the
    /// store; and run when it panics (caught: dropped once, its state back).
    #[test]
    fn every_task_is_run_or_dropped_exactly_once() {
        fn check<const PAD: usize>(words: usize) {
            let (_timer, st) = state();
            // Run; dropped unrun.
            let ((task, seen), (unrun, unrun_seen)) = (counted::<PAD>(), counted::<PAD>());
            let task = SmallTask::new(task);
            assert_eq!(task.words(), words);
            let (st, ran) = task.run(st);
            drop(SmallTask::new(unrun));
            assert_eq!((ran, seen(), unrun_seen()), (true, (1, 1), (0, 1)));
            // Kept, then run; kept, then dropped; kept and left in the store.
            let mut store = TaskWords::default();
            let ((kept, seen), (removed, removed_seen)) = (counted::<PAD>(), counted::<PAD>());
            let (left, left_seen) = counted::<PAD>();
            let entry = store.insert(SmallTask::new(kept), 0, CELL);
            let entry2 = store.insert(SmallTask::new(removed), 1, CELL);
            let entry3 = store.insert(SmallTask::new(left), 2, CELL);
            assert_eq!(seen(), (0, 0));
            let (st, ran) = store.remove(entry).run(st);
            assert_eq!((ran, seen()), (true, (1, 1)));
            drop(store.remove(entry2));
            assert_eq!(removed_seen(), (0, 1));
            // Queued (table and words apart), then run.
            let mut queue = Vec::new();
            let (queued, seen) = counted::<PAD>();
            let queued = SmallTask::new(queued).enqueue(&mut queue);
            assert_eq!(queue.len(), words);
            let mut at = 0;
            let (st, ran) = SmallTask::dequeue(queued, &queue, &mut at).run(st);
            assert_eq!((ran, at, seen()), (true, queue.len(), (1, 1)));
            // Queued fresh after another task's words, then run; queued fresh, then dropped.
            let ((first, first_seen), (second, second_seen)) = (counted::<PAD>(), counted::<PAD>());
            let first = SmallTask::enqueue_fresh(first, &mut queue);
            let second = SmallTask::enqueue_fresh(second, &mut queue);
            assert_eq!(queue.len(), 3 * words);
            let (st, ran) = SmallTask::dequeue(first, &queue, &mut at).run(st);
            drop(SmallTask::dequeue(second, &queue, &mut at));
            assert_eq!((ran, at), (true, queue.len()));
            assert_eq!((first_seen(), second_seen()), ((1, 1), (0, 1)));
            // Run where it is kept.
            let (task, seen) = counted::<PAD>();
            let entry4 = store.insert(SmallTask::new(task), 0, CELL);
            let (st, ran) = store.run_entry(entry4, st);
            assert_eq!((ran, seen()), (true, (1, 1)));
            // Panics when run.
            let (task, drops) = panicking::<PAD>();
            let (st, ran) = SmallTask::new(task).run(st);
            assert_eq!((ran, drops.load(Ordering::SeqCst)), (false, 1));
            assert!(!st.is_cancelled());
            // A task entry dropped without `remove` leaks (invariant 3): never a double drop.
            // (Under Miri, which reports leaks, it is removed instead.)
            #[cfg(not(miri))]
            let _leaked: TaskEntry = entry3;
            #[cfg(miri)]
            drop(store.remove(entry3));
            drop(store);
            assert_eq!(left_seen(), (0, usize::from(cfg!(miri))));
        }
        // Probe: two Arcs (16 bytes) plus padding; the closure captures the probe.
        check::<0>(2);
        check::<8>(4);
        check::<16>(4);
        check::<17>(2); // boxed: the box's one word
    }

    /// A zero-sized task needs no slot; a column allocates the pages of the keys its tasks
    /// are under, frees a key as its task leaves, and gives its memory back when it empties.
    #[test]
    fn columns_hold_pages_of_used_keys_and_release_them() {
        let mut store = TaskWords::default();
        let zst = store.insert(SmallTask::new(|_: &Timeout| {}), 5, CELL);
        assert_eq!((store.live(), store.two.pages.len()), (0, 0));
        drop(store.remove(zst));
        let big = [7u64; 3];
        let task = move |_: &Timeout| _ = std::hint::black_box(big);
        let far = 3 * PAGE as u32 + 7;
        let entries: Vec<TaskEntry> = [0, 1, far]
            .into_iter()
            .map(|key| store.insert(SmallTask::new(task), key, CELL))
            .collect();
        assert_eq!(store.live(), 3);
        let allocated: Vec<bool> = store.four.pages.iter().map(Option::is_some).collect();
        assert_eq!(allocated, [true, false, false, true], "only the pages used");
        let mut entries = entries.into_iter();
        drop(store.remove(entries.next().unwrap()));
        let again = store.insert(SmallTask::new(task), 0, CELL);
        assert_eq!(again.key, 0, "a freed key holds a task again");
        drop(store.remove(again));
        for e in entries {
            drop(store.remove(e));
        }
        assert_eq!((store.live(), store.four.pages.len()), (0, 0));
    }

    /// A trim gives back the pages of a column none of whose keys holds words, and the page
    /// table past the last page kept; the words kept stay under their keys, and a key of a
    /// page given back takes a task again. A column a quarter full or more is not looked at.
    #[test]
    fn a_trim_gives_back_the_pages_that_hold_no_words() {
        let (_timer, st) = state();
        let mut store = TaskWords::default();
        let (p, runs, drops) = probe::<16>();
        let big = [7u64; 3];
        let task = move |_: &Timeout| {
            std::hint::black_box(big);
        };
        let kept = store.insert(SmallTask::new(as_task(p)), PAGE as u32 + 3, CELL);
        let gone: Vec<TaskEntry> = [0, 2 * PAGE as u32, 5 * PAGE as u32 + 9]
            .into_iter()
            .map(|key| store.insert(SmallTask::new(task), key, CELL))
            .collect();
        let held = store.held_bytes();
        for entry in gone {
            drop(store.remove(entry));
        }
        assert_eq!(store.held_bytes(), held, "kept until a trim");
        assert_eq!(store.trim(), 3);
        let allocated: Vec<bool> = store.four.pages.iter().map(Option::is_some).collect();
        assert_eq!(allocated, [false, true]);
        assert!(store.held_bytes() < held / 3);
        let again = store.insert(SmallTask::new(task), 5 * PAGE as u32 + 9, CELL);
        assert_eq!(store.four.pages.len(), 6);
        drop(store.remove(again));
        let (_st, ran) = store.run_entry(kept, st);
        assert!(ran);
        assert_eq!(
            (runs.load(Ordering::SeqCst), drops.load(Ordering::SeqCst)),
            (1, 1)
        );
        assert_eq!((store.live(), store.four.pages.len()), (0, 0));
        let full: Vec<TaskEntry> = (0..PAGE as u32 / 4)
            .map(|key| store.insert(SmallTask::new(task), key, CELL))
            .collect();
        assert_eq!(store.trim(), 0, "a quarter full");
        for entry in full {
            drop(store.remove(entry));
        }
    }

    /// A key that holds a task's words refuses a second task (the first runs whole); a key
    /// that holds none refuses a take. Either panics before anything changes.
    #[test]
    fn a_key_holds_one_task_at_a_time() {
        let (_timer, st) = state();
        let mut store = TaskWords::default();
        let (task, seen) = counted::<0>();
        let held = store.insert(SmallTask::new(task), 9, CELL);
        // The refused task leaks (invariant 3): one that owns no memory, for Miri.
        let words = [3u64; 2];
        let second = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let refused = move |_: &Timeout| _ = std::hint::black_box(words);
            store.insert(SmallTask::new(refused), 9, CELL)
        }));
        assert!(second.is_err(), "a second task under a held key");
        assert_eq!(store.live(), 1);
        let (st, ran) = store.run_entry(held, st);
        assert_eq!((ran, seen()), (true, (1, 1)));
        let stray = TaskEntry {
            vtable: &InPlace::<fn(&Timeout)>::VTABLE,
            key: 9,
            cell: CELL,
        };
        let take =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| store.run_entry(stray, st)));
        assert!(take.is_err(), "a take from a free key");
        assert_eq!(store.live(), 0);
    }

    /// Tasks run where their words are kept free their keys, a panicking one too (dropped
    /// once, its state back), and the run that empties a column gives its memory back.
    #[test]
    fn running_kept_tasks_frees_their_keys() {
        let (_timer, st) = state();
        let mut store = TaskWords::default();
        let ((first, first_seen), (second, second_seen)) = (counted::<0>(), counted::<0>());
        let (again, again_seen) = counted::<0>();
        let first = store.insert(SmallTask::new(first), 0, CELL);
        let second = store.insert(SmallTask::new(second), 1, CELL);
        let zero_sized = store.insert(SmallTask::new(|_: &Timeout| {}), 2, CELL);
        let (st, ran) = store.run_entry(first, st);
        assert_eq!((ran, store.live()), (true, 1));
        let again = store.insert(SmallTask::new(again), 0, CELL);
        let (task, drops) = panicking::<0>();
        let panics = store.insert(SmallTask::new(task), 3, CELL);
        let (st, ran) = store.run_entry(panics, st);
        assert!(!ran && !st.is_cancelled());
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        let (st, _) = store.run_entry(second, st);
        assert_eq!(store.two.pages.len(), 1);
        let (st, _) = store.run_entry(again, st);
        assert_eq!((store.live(), store.two.pages.len()), (0, 0));
        let (_st, ran) = store.run_entry(zero_sized, st);
        assert_eq!((ran, again_seen()), (true, (1, 1)));
        assert_eq!((first_seen(), second_seen()), ((1, 1), (1, 1)));
    }

    /// Counts its drops and panics in its `Drop`.
    struct PanicsOnDrop(Arc<AtomicUsize>);

    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
            panic!("a task's Drop panics (on purpose)");
        }
    }

    /// A task whose `Drop` panics as it is dropped (caught, as the worker does) leaves the
    /// others whole: queued tasks after it are read from their own words; kept tasks (it is
    /// removed, a cancel) stay under their keys, its slot free. Each is dropped once.
    #[test]
    fn a_drop_that_panics_leaves_the_other_tasks_whole() {
        let (_timer, st) = state();
        let panicking = Arc::new(AtomicUsize::new(0));
        let drops_panicking = || PanicsOnDrop(Arc::clone(&panicking));
        // Queued tasks of every class, the first one's `Drop` panicking.
        let ((small, small_seen), (large, large_seen)) = (counted::<0>(), counted::<16>());
        let mut queue = Vec::new();
        let p = drops_panicking();
        let first = SmallTask::new(move |_: &Timeout| drop(p)).enqueue(&mut queue);
        let second = SmallTask::enqueue_fresh(small, &mut queue);
        let third = SmallTask::new(large).enqueue(&mut queue);
        let mut at = 0;
        let first = SmallTask::dequeue(first, &queue, &mut at);
        assert!(!crate::shared::drop_caught(first));
        assert_eq!(panicking.load(Ordering::SeqCst), 1);
        let (st, ran_second) = SmallTask::dequeue(second, &queue, &mut at).run(st);
        let (st, ran_third) = SmallTask::dequeue(third, &queue, &mut at).run(st);
        assert_eq!((ran_second, ran_third, at), (true, true, queue.len()));
        assert_eq!((small_seen(), large_seen()), ((1, 1), (1, 1)));
        // Kept tasks, the middle one's `Drop` panicking as it is removed.
        let mut store = TaskWords::default();
        let ((before, before_seen), (after, after_seen)) = (counted::<8>(), counted::<8>());
        let before = store.insert(SmallTask::new(before), 0, CELL);
        let p = drops_panicking();
        let doomed = store.insert(SmallTask::new(move |_: &Timeout| drop((p, 0u64))), 1, CELL);
        let after = store.insert(SmallTask::new(after), 2, CELL);
        assert!(!crate::shared::drop_caught(store.remove(doomed)));
        assert_eq!((panicking.load(Ordering::SeqCst), store.live()), (2, 2));
        let (st, ran_after) = store.run_entry(after, st);
        let (_st, ran_before) = store.run_entry(before, st);
        assert_eq!((ran_after, ran_before, store.live()), (true, true, 0));
        assert_eq!((before_seen(), after_seen()), ((1, 1), (1, 1)));
        assert_eq!(panicking.load(Ordering::SeqCst), 2, "each dropped once");
    }
}
