//! Timeout slots: blocks of 64 atomic states, and the handle that names one.
//!
//! A timeout's one name is its slot: the handle holds the slot's block and its index there, and
//! the worker keeps the timeout's data in arrays indexed by the slot id (`block.id * BLOCK +
//! index`). A block's id is reused only once the block is dropped (all 64 slots ended and no
//! handle left), so a handle always reads its own timeout's state.
//!
//! # Waker cells
//! A future's slot (`Kind::Future`) has a waker cell. A poll stores its waker, then reads the
//! state; whoever ends the slot moves the state first, then takes the waker. The cell's lock
//! orders the two: one of them sees the other. A poll that then finds the slot ended takes its
//! waker back, so that no ended slot keeps one. Wakers are cloned, dropped and woken outside the
//! lock (user code may call back into the timer).
//!
//! # States
//! | state | moved to by | from |
//! |---|---|---|
//! | `QUEUED` | the producer that takes the slot | (fresh block) |
//! | `PLACED` | the worker, as it moves the timeout into the wheel | `QUEUED` |
//! | `CANCELLED` | `cancel()` on any thread, or `stop()` | `QUEUED` or `PLACED` |
//! | `EXPIRED` | the worker, before it runs the task | `PLACED` |
//!
//! One compare-and-swap leaves the pending states (`QUEUED`, `PLACED`) for good; its winner owns
//! the outcome. A `cancel()` that wins from `PLACED` queues the slot for the worker to unlink
//! (from `QUEUED`, the worker's move to `PLACED` fails). The worker ends every slot exactly once
//! whatever the winner: it drops or runs the task, and counts it ended.

use super::wheel::SlotId;
use super::{BoxedTask, Shared, Stored};
use crate::sync::{lock, Arc, AtomicU8, Mutex, Ordering};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::task::Waker;

/// Slots a block holds.
pub(crate) const BLOCK: usize = 64;
/// Blocks a timer may have at once: slot ids stay below `u32::MAX`.
pub(crate) const MAX_BLOCKS: u32 = (u32::MAX / BLOCK as u32) - 1;

const QUEUED: u8 = 0;
const PLACED: u8 = 1;
const CANCELLED: u8 = 2;
const EXPIRED: u8 = 3;

/// The block ids a timer hands out, and those given back by dropped blocks, lowest first: the
/// live slots crowd the low pages, and the worker can give the high ones back.
#[derive(Default)]
pub(crate) struct BlockIds {
    free: BinaryHeap<Reverse<u32>>,
    next: u32,
}

/// What a block's slots hold: a task each, or (a future's) a waker each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Task,
    Future,
}

/// 64 timeout states, shared by the handles, the producer that fills it and the worker.
pub(crate) struct Block<J: Stored> {
    id: u32,
    /// The shard that takes slots from it, and gets it back as a spare (beside `id`: a task's
    /// block stays as small as it was before futures' blocks had cells).
    shard: u32,
    states: [AtomicU8; BLOCK],
    /// `Kind::Future`: a waker cell per slot; `Kind::Task`: none (no allocation).
    wakers: Option<Box<[Mutex<Option<Waker>>; BLOCK]>>,
    timer: TimerHandle<J>,
}

impl<J: Stored> Block<J> {
    /// A fresh block, or `None` when the timer has `MAX_BLOCKS` alive.
    pub(crate) fn new(shared: &Arc<Shared<J>>, shard: usize, kind: Kind) -> Option<Arc<Block<J>>> {
        let id = {
            let mut ids = lock(&shared.block_ids);
            match ids.free.pop() {
                Some(Reverse(id)) => id,
                None if ids.next < MAX_BLOCKS => {
                    ids.next += 1;
                    ids.next - 1
                }
                None => return None,
            }
        };
        Some(Arc::new(Block {
            id,
            shard: shard as u32,
            states: std::array::from_fn(|_| AtomicU8::new(QUEUED)),
            wakers: (kind == Kind::Future)
                .then(|| Box::new(std::array::from_fn(|_| Mutex::new(None)))),
            timer: TimerHandle(Arc::clone(shared)),
        }))
    }

    pub(crate) fn shard(&self) -> usize {
        self.shard as usize
    }

    pub(crate) fn kind(&self) -> Kind {
        match self.wakers {
            Some(_) => Kind::Future,
            None => Kind::Task,
        }
    }

    /// The waker cell of a future's slot `index`.
    fn waker_cell(&self, index: usize) -> &Mutex<Option<Waker>> {
        &self.wakers.as_ref().expect("a future's slot")[index]
    }

    /// The waker a future's poll left in slot `index`, taken out (none in a task's slot).
    pub(crate) fn take_waker(&self, index: usize) -> Option<Waker> {
        let cells = self.wakers.as_ref()?;
        lock(&cells[index]).take()
    }

    /// A block the worker holds alone, every slot ended: fresh again, for its shard's spares.
    pub(crate) fn reuse(block: &mut Arc<Block<J>>) -> bool {
        let Some(block) = Arc::get_mut(block) else {
            return false;
        };
        for state in &block.states {
            // Relaxed: the block is ours alone (`Arc::get_mut` ordered every earlier access).
            state.store(QUEUED, Ordering::Relaxed);
        }
        true
    }

    /// The slot id of `index` in this block.
    pub(crate) fn slot(&self, index: usize) -> SlotId {
        self.id * BLOCK as u32 + index as u32
    }

    fn state(&self, index: usize) -> u8 {
        // Acquire: pairs with the AcqRel of the move that set it.
        self.states[index].load(Ordering::Acquire)
    }

    /// `from` -> `to`; whether this call made the move.
    fn move_state(&self, index: usize, from: u8, to: u8) -> bool {
        // AcqRel: the winner sees everything before the slot was taken, and its outcome is
        // published to whoever reads the state after.
        self.states[index]
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The worker's transfer: whether the timeout goes into the wheel (else it was cancelled).
    pub(crate) fn place(&self, index: usize) -> bool {
        self.move_state(index, QUEUED, PLACED)
    }

    /// The worker's expiry: whether it won the slot (else it was cancelled).
    pub(crate) fn expire(&self, index: usize) -> bool {
        self.move_state(index, PLACED, EXPIRED)
    }

    /// Moves a pending slot to `CANCELLED`: the state it left, or `None` if it was not pending.
    pub(crate) fn cancel(&self, index: usize) -> Option<u8> {
        let mut state = self.state(index);
        while state == QUEUED || state == PLACED {
            if self.move_state(index, state, CANCELLED) {
                return Some(state);
            }
            state = self.state(index);
        }
        None
    }

    pub(crate) fn is_cancelled(&self, index: usize) -> bool {
        self.state(index) == CANCELLED
    }
}

impl<J: Stored> Drop for Block<J> {
    fn drop(&mut self) {
        lock(&self.timer.0.block_ids).free.push(Reverse(self.id));
    }
}

/// A cheap, cloneable reference to a timer, as returned by [`Timeout::timer`] and
/// [`HashedWheelTimer::handle`](crate::HashedWheelTimer::handle): the owner's methods, without
/// keeping the timer running. Once the owner's drop has stopped it (see
/// [`HashedWheelTimer`](crate::HashedWheelTimer)), a handle's calls fail with
/// [`TimerError::Stopped`](crate::TimerError::Stopped).
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, Timeout};
/// use std::time::Duration;
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(10), 64);
/// let handle = timer.handle();
/// handle.new_timeout(|_: &Timeout| {}, Duration::from_secs(1))?.cancel();
/// drop(timer);
/// assert!(handle.is_stopped());
/// # Ok::<(), hashed_timer_wheel::TimerError>(())
/// ```
pub struct TimerHandle<J: Stored = BoxedTask>(pub(crate) Arc<Shared<J>>);

impl<J: Stored> Clone for TimerHandle<J> {
    fn clone(&self) -> Self {
        TimerHandle(Arc::clone(&self.0))
    }
}

impl<J: Stored> fmt::Debug for TimerHandle<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerHandle")
            .field("pending", &self.0.pending())
            .field("stopped", &self.0.is_shutdown())
            .finish_non_exhaustive()
    }
}

/// A handle on a scheduled task (Netty's `Timeout`).
///
/// Returned by [`new_timeout`](crate::TimerHandle::new_timeout) and passed to the task when it
/// runs. Clones are cheap, refer to the same timeout and compare equal.
///
/// **Dropping a `Timeout` does not cancel it**: the task still runs when it is due. Nor does a
/// handle keep the timer alive: once the owner is dropped, [`timer()`](Timeout::timer) refuses new
/// work with [`TimerError::Stopped`](crate::TimerError::Stopped).
///
/// ```
/// use hashed_timer_wheel::HashedWheelTimer;
/// use std::time::Duration;
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(10), 64);
/// let timeout = timer.new_timeout(|_: &_| println!("too late"), Duration::from_secs(30)).unwrap();
/// assert!(timeout.cancel());
/// assert!(timeout.is_cancelled());
/// assert!(!timeout.cancel(), "only the first cancel wins");
/// ```
pub struct Timeout<J: Stored = BoxedTask> {
    block: Arc<Block<J>>,
    // A `u8`: `new_timeout` measured slower with a `usize` here (benches/README.md).
    index: u8,
}

impl<J: Stored> Timeout<J> {
    pub(crate) fn new(block: Arc<Block<J>>, index: usize) -> Timeout<J> {
        Timeout {
            block,
            index: index as u8,
        }
    }

    /// The block, given back (the worker lends its reference for a task's run).
    pub(crate) fn into_block(self) -> Arc<Block<J>> {
        self.block
    }

    pub(crate) fn slot(&self) -> SlotId {
        self.block.slot(usize::from(self.index))
    }

    /// Cancels the timeout if it is still pending: true only for the call that did it.
    pub fn cancel(&self) -> bool {
        let block = &self.block;
        match block.cancel(usize::from(self.index)) {
            Some(PLACED) => block.timer.0.push_cancel(self.slot(), block.kind()),
            Some(_) => {}
            None => return false,
        }
        true
    }

    /// The timer the timeout belongs to.
    pub fn timer(&self) -> &TimerHandle<J> {
        &self.block.timer
    }

    /// Whether the timeout was cancelled (by `cancel()` or `stop()`).
    pub fn is_cancelled(&self) -> bool {
        self.block.state(usize::from(self.index)) == CANCELLED
    }

    /// Whether the timeout expired: its task ran, or is running.
    pub fn is_expired(&self) -> bool {
        self.block.state(usize::from(self.index)) == EXPIRED
    }

    /// Whether the timeout has ended: expired or cancelled.
    pub(crate) fn has_ended(&self) -> bool {
        self.block.state(usize::from(self.index)) >= CANCELLED
    }

    /// A future's slot: keeps `waker` (unless the cell holds one that wakes the same task, which
    /// is looked for only if the caller stored one: `stored`); whether the slot is still pending
    /// after. Ended, the waker is taken back (see the module docs).
    pub(crate) fn keep_waker(&self, waker: &Waker, stored: bool) -> bool {
        let cell = self.block.waker_cell(usize::from(self.index));
        let same = stored && lock(cell).as_ref().is_some_and(|w| w.will_wake(waker));
        if !same {
            self.put_waker(waker.clone());
        }
        if self.has_ended() {
            drop(self.take_waker());
            return false;
        }
        true
    }

    /// A future's slot: stores `waker` in place of the one it held (dropped outside the lock).
    pub(crate) fn put_waker(&self, waker: Waker) {
        let old = lock(self.block.waker_cell(usize::from(self.index))).replace(waker);
        drop(old);
    }

    /// A future's slot: its waker, taken out.
    pub(crate) fn take_waker(&self) -> Option<Waker> {
        self.block.take_waker(usize::from(self.index))
    }
}

impl<J: Stored> Clone for Timeout<J> {
    fn clone(&self) -> Self {
        Timeout::new(Arc::clone(&self.block), usize::from(self.index))
    }
}

impl<J: Stored> fmt::Debug for Timeout<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.block.state(usize::from(self.index)) {
            QUEUED | PLACED => "pending",
            CANCELLED => "cancelled",
            _ => "expired",
        };
        f.debug_struct("Timeout")
            .field("slot", &self.slot())
            .field("state", &state)
            .finish()
    }
}

/// Whether `a` and `b` name the same timeout.
impl<J: Stored> PartialEq for Timeout<J> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.block, &other.block) && self.index == other.index
    }
}

impl<J: Stored> Eq for Timeout<J> {}

impl<J: Stored> std::hash::Hash for Timeout<J> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.block).hash(state);
        self.index.hash(state);
    }
}
