//! What a timer stores per timeout, and how a task travels from the producer to its run,
//! without this module knowing the `task` module's types: the [`Job`] a boxed timer's task
//! becomes, the sealed [`sealed::TaskStorage`] interface through which the queues and the worker
//! keep and run a stored task ([`Stored`]), the default [`BoxedTask`], and what a producer
//! hands the queue ([`Enqueue`], [`Fresh`]).
//!
//! Owns those traits and `BoxedTask`'s storage through `small_task`. Touches nothing outside
//! `shared`.

use super::cells::{CellId, CellRef};
use super::small_task::{QueuedTask, SmallTask, TaskEntry, TaskWords, Word};

/// A timeout's task as the queues and the worker carry it: the `timer` module turns a user's
/// `TimerTask` into one (`task.rs`), the worker runs it with its timeout's state, and nothing
/// in between needs to know what it is.
pub(crate) trait Job: Send + Sized + 'static {
    /// Runs the task of the timeout whose state this is, catching a panic; gives the state
    /// back, and whether the task returned (false: it panicked).
    fn run(self, state: CellRef) -> (CellRef, bool);

    /// As [`Job::run`], for a task too large to be stored in place.
    fn run_boxed(self: Box<Self>, state: CellRef) -> (CellRef, bool) {
        (*self).run(state)
    }
}

/// Any task, type-erased: what a timer of boxed tasks (the default, [`HashedWheelTimer`])
/// stores per timeout. A task of up to 32 bytes is stored in place (no allocation); a larger
/// one is boxed. Opaque; it appears only as that default type parameter.
///
/// [`HashedWheelTimer`]: crate::HashedWheelTimer
pub struct BoxedTask(SmallTask);

impl BoxedTask {
    /// Stores `task` (in place when it fits).
    #[inline]
    pub(crate) fn new<F: Job>(task: F) -> BoxedTask {
        BoxedTask(SmallTask::new(task))
    }
}

/// What a producer hands the queue: a stored task (`J` itself), or, on a boxed timer, the
/// caller's task as it was given ([`Fresh`]), written straight into the queue's words.
pub(crate) trait Enqueue<J: Stored> {
    /// Queues the task: what the batch holds for it, its words appended to `words`.
    fn enqueue(self, words: &mut Vec<Word>) -> J::Queued;
}

impl<J: Stored> Enqueue<J> for J {
    #[inline]
    fn enqueue(self, words: &mut Vec<Word>) -> J::Queued {
        sealed::TaskStorage::enqueue(self, words)
    }
}

/// A boxed timer's task as the caller gave it: queued without being built as a [`SmallTask`]
/// first (why: `SmallTask::enqueue_fresh`).
pub(crate) struct Fresh<F>(pub(crate) F);

impl<F: Job> Enqueue<BoxedTask> for Fresh<F> {
    #[inline]
    fn enqueue(self, words: &mut Vec<Word>) -> QueuedTask {
        SmallTask::enqueue_fresh(self.0, words)
    }
}

impl std::fmt::Debug for BoxedTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BoxedTask")
    }
}

/// What a timer stores per timeout: [`BoxedTask`] on the timer most code uses, or a typed
/// timer's own task type ([`TypedTask`](crate::TypedTask)), stored in place with no
/// allocation. Sealed: implemented by those two only.
pub trait Stored: sealed::TaskStorage + Send + 'static {}

pub(crate) mod sealed {
    use crate::shared::cells::{CellId, CellRef};
    use crate::shared::small_task::Word;

    /// How the worker keeps and runs a stored task (the interface through which the `task`
    /// module's types are run without this module importing them).
    #[allow(unreachable_pub)]
    pub trait TaskStorage: Sized {
        /// What the wheel holds per timeout: the task (in place, or its words in the worker's
        /// store) and its cell's id.
        type Entry: Send + 'static;
        /// Where the worker keeps what of a task its entry does not hold.
        type Store: Default + Send + 'static;
        /// What a queued batch holds per timeout (its words, if any, follow in the batch's
        /// vector of words).
        type Queued: Send + 'static;

        /// Queues the task: what the batch holds for it, its words appended to `words`.
        fn enqueue(self, words: &mut Vec<Word>) -> Self::Queued;

        /// The task `enqueue` queued; its words read at `*at`, which moves past them. Each
        /// queued task is taken out once, in push order.
        fn dequeue(queued: Self::Queued, words: &[Word], at: &mut usize) -> Self;

        /// Runs the task, catching a panic; gives the state back (the worker lent it), and
        /// whether the task returned (false: it panicked).
        fn run_stored(self, state: CellRef) -> (CellRef, bool);

        /// The task `enqueue` queued, as [`TaskStorage::dequeue`] takes it out, moved straight
        /// into the wheel's entry for cell `cell`, to be kept under wheel key `key` (a boxed
        /// task's words go from the batch to the store, under that key).
        fn dequeue_entry(
            queued: Self::Queued,
            words: &[Word],
            at: &mut usize,
            key: u32,
            cell: CellId,
            store: &mut Self::Store,
        ) -> Self::Entry;

        /// The lane of the wheel's keys that a queued task's entry takes (below
        /// `wheel::LANES`): a boxed task's size class, so that the words of each class are
        /// kept under keys of its own pages.
        #[inline]
        fn lane(_queued: &Self::Queued) -> usize {
            0
        }

        /// The task of an entry taken out of the wheel.
        fn from_entry(entry: Self::Entry, store: &mut Self::Store) -> Self;

        /// [`TaskStorage::from_entry`], then [`TaskStorage::run_stored`], without moving the task in
        /// between.
        fn run_entry(
            entry: Self::Entry,
            store: &mut Self::Store,
            state: CellRef,
        ) -> (CellRef, bool);

        /// The cell an entry was made with.
        fn cell(entry: &Self::Entry) -> CellId;
    }

    /// The wheel's entry for a task kept whole in the wheel (a typed timer's).
    #[allow(unreachable_pub, missing_debug_implementations)]
    pub struct Whole<T> {
        pub(crate) task: T,
        pub(crate) cell: CellId,
    }
}

impl Stored for BoxedTask {}

impl sealed::TaskStorage for BoxedTask {
    type Entry = TaskEntry;
    type Store = TaskWords;
    type Queued = QueuedTask;

    #[inline]
    fn enqueue(self, words: &mut Vec<Word>) -> QueuedTask {
        self.0.enqueue(words)
    }

    #[inline]
    fn dequeue(queued: QueuedTask, words: &[Word], at: &mut usize) -> BoxedTask {
        BoxedTask(SmallTask::dequeue(queued, words, at))
    }

    #[inline]
    fn run_stored(self, state: CellRef) -> (CellRef, bool) {
        self.0.run(state)
    }

    #[inline]
    fn dequeue_entry(
        queued: QueuedTask,
        words: &[Word],
        at: &mut usize,
        key: u32,
        cell: CellId,
        store: &mut TaskWords,
    ) -> TaskEntry {
        store.insert_queued(queued, words, at, key, cell)
    }

    #[inline]
    fn lane(queued: &QueuedTask) -> usize {
        queued.lane()
    }

    #[inline]
    fn from_entry(entry: TaskEntry, store: &mut TaskWords) -> BoxedTask {
        BoxedTask(store.remove(entry))
    }

    #[inline]
    fn run_entry(entry: TaskEntry, store: &mut TaskWords, state: CellRef) -> (CellRef, bool) {
        store.run_entry(entry, state)
    }

    #[inline]
    fn cell(entry: &TaskEntry) -> CellId {
        entry.cell()
    }
}
