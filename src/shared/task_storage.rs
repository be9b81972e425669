//! What a timer stores per timeout, and how a task travels from producer to run without this
//! module knowing the `task` module's types. Owns [`Job`], the sealed [`sealed::TaskStorage`]
//! behind [`Stored`], the default [`BoxedTask`] (stored through `small_task`), and what a
//! producer hands the queue ([`Enqueue`], [`Fresh`]). Touches nothing outside `shared`.

use super::cells::{CellId, CellRef};
use super::small_task::{QueuedTask, SmallTask, TaskEntry, TaskWords, Word};

/// A task as the queues and the worker carry it, opaque: `task.rs` makes one of a user's
/// `TimerTask`, and the worker runs it with its timeout's state.
pub(crate) trait Job: Send + Sized + 'static {
    /// Runs the task, catching a panic; gives the state back, and whether the task returned.
    fn run(self, state: CellRef) -> (CellRef, bool);

    /// As [`Job::run`], for a task too large to be stored in place.
    fn run_boxed(self: Box<Self>, state: CellRef) -> (CellRef, bool) {
        (*self).run(state)
    }
}

/// Any task, type-erased: what the default timer ([`HashedWheelTimer`]) stores per timeout. Up
/// to 32 bytes in place, larger boxed. Opaque; it appears only as that default type parameter.
///
/// ```
/// use hashed_timer_wheel::{BoxedTask, HashedWheelTimer, Timeout};
/// use std::time::Duration;
///
/// let timer: HashedWheelTimer<BoxedTask> = HashedWheelTimer::default(); // the same type
/// let timeout: Timeout<BoxedTask> = timer.new_timeout(|_: &Timeout| {}, Duration::from_secs(60))?;
/// assert!(timeout.cancel());
/// # Ok::<(), hashed_timer_wheel::TimerError>(())
/// ```
///
/// [`HashedWheelTimer`]: crate::HashedWheelTimer
pub struct BoxedTask(SmallTask);

impl BoxedTask {
    #[inline]
    pub(crate) fn new<F: Job>(task: F) -> BoxedTask {
        BoxedTask(SmallTask::new(task))
    }
}

/// What a producer hands the queue: a stored task (`J` itself), or, on a boxed timer, the
/// caller's task as given ([`Fresh`]), written straight into the queue's words.
pub(crate) trait Enqueue<J: Stored> {
    fn enqueue(self, words: &mut Vec<Word>) -> J::Queued;
}

impl<J: Stored> Enqueue<J> for J {
    #[inline]
    fn enqueue(self, words: &mut Vec<Word>) -> J::Queued {
        sealed::TaskStorage::enqueue(self, words)
    }
}

/// A boxed timer's task, queued without first becoming a [`SmallTask`] (see `enqueue_fresh`).
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

/// What a timer stores per timeout: [`BoxedTask`] by default, or a typed timer's own task type
/// ([`TypedTask`](crate::TypedTask)), stored in place (`docs/performance.md`, "A typed timer's
/// task stored as itself"). Sealed: implemented by those two only.
///
/// Code that takes either kind of timer is generic over it:
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, Stored};
///
/// fn is_idle<J: Stored>(timer: &HashedWheelTimer<J>) -> bool {
///     timer.pending_timeouts() == 0
/// }
///
/// assert!(is_idle(&HashedWheelTimer::default()));
/// ```
pub trait Stored: sealed::TaskStorage + Send + 'static {}

pub(crate) mod sealed {
    use crate::shared::cells::{CellId, CellRef};
    use crate::shared::small_task::Word;

    /// How the worker keeps and runs a stored task without this module importing `task`'s types.
    #[allow(unreachable_pub)]
    pub trait TaskStorage: Sized {
        /// Per timeout in the wheel: the task (in place, or its words in the store), its cell id.
        type Entry: Send + 'static;
        /// Where the worker keeps what of a task its entry does not hold.
        type Store: Default + Send + 'static;
        /// What a queued batch holds per timeout (its words, if any, in the batch's words).
        type Queued: Send + 'static;

        /// Queues the task: what the batch holds for it, its words appended to `words`.
        fn enqueue(self, words: &mut Vec<Word>) -> Self::Queued;

        /// The task `enqueue` queued, its words read at `*at` (moved past them). Each queued
        /// task is taken out once, in push order.
        fn dequeue(queued: Self::Queued, words: &[Word], at: &mut usize) -> Self;

        /// As `Job::run`; the worker lent the state.
        fn run_stored(self, state: CellRef) -> (CellRef, bool);

        /// [`TaskStorage::dequeue`] straight into the wheel's entry for `cell`, under wheel key
        /// `key` (a boxed task's words go from the batch to the store under that key).
        fn dequeue_entry(
            queued: Self::Queued,
            words: &[Word],
            at: &mut usize,
            key: u32,
            cell: CellId,
            store: &mut Self::Store,
        ) -> Self::Entry;

        /// The lane of wheel keys a queued task's entry takes (below `wheel::LANES`): a boxed
        /// task's size class, so each class's words sit under keys of its own pages.
        #[inline]
        fn lane(_queued: &Self::Queued) -> usize {
            0
        }

        fn from_entry(entry: Self::Entry, store: &mut Self::Store) -> Self;

        /// [`TaskStorage::from_entry`], then [`TaskStorage::run_stored`], not moving the task.
        fn run_entry(
            entry: Self::Entry,
            store: &mut Self::Store,
            state: CellRef,
        ) -> (CellRef, bool);

        fn cell(entry: &Self::Entry) -> CellId;

        /// Gives back what `store` keeps beyond its waiting tasks' needs (the worker's, idle
        /// after a burst); the pages given back.
        #[inline]
        fn trim(_store: &mut Self::Store) -> usize {
            0
        }
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

    fn trim(store: &mut TaskWords) -> usize {
        store.trim()
    }
}
