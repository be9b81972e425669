//! How the worker ends a slot: the expiry walk (what of the current tick's bucket is due, ended
//! and run, or woken), and the slots that end without expiring (a cancel it finds, `stop()`,
//! which hands each one that never ran back as a `NeverRan`).

use super::{split, Runner, Tally, Worker};
use crate::engine::shard::SPARE_CHUNK;
use crate::engine::slots::{Block, Kind, Timeout, BLOCK};
use crate::engine::task::{drop_unrun, run};
use crate::engine::wheel::{SlotId, Wheel};
use crate::engine::{wake_all, BoxedTask, Shared, Stored};
use crate::sync::Arc;
use std::fmt;
use std::ops::Deref;
use std::task::Waker;

impl<J: Stored> Worker<J> {
    /// Expires what of the current tick's bucket is due by `by` (`Walk::end_due`); the wakers of
    /// futures are woken once the walk is done (a `Ticker`'s lone one as the next turn starts),
    /// so that a future sees what else became ready. The earliest deadline left comes back.
    pub(super) fn expire(&mut self, shared: &Shared<J>, by: u64) -> u64 {
        let mut walk = Walk {
            shared,
            tally: &mut self.tally,
            wakers: &mut self.wakers,
            now: self.now,
            tick_nanos: self.tick_nanos,
        };
        let mut none = Vec::new(); // the spares of a type that keeps none (`Payload::KEEPS`)
        let soonest = self.wheel.expire_by(by, |id, deadline, task| {
            let (bid, index) = split(id);
            let held = &mut self.blocks[bid];
            let block = held.0.take().expect("a slot in the wheel has its block");
            held.1 += 1;
            self.ended += 1;
            shared.set_ended(self.ended, 1);
            let kept = if J::KEEPS {
                kept(&mut self.task_spares[block.shard()])
            } else {
                &mut none
            };
            let block = walk.end_due(block, index, Due { task, deadline }, kept);
            put_back(held, block, &mut self.spares);
        });
        if !none.is_empty() {
            // Kept by a task whose type said it keeps none: they go back as any others do.
            self.task_spares[0].push(none);
        }
        // A `Ticker`'s lone future waits for the next turn (the `Drive`'s); two or more wake now.
        if self.runner != Runner::Ticker || self.wakers.len() > 1 {
            self.tally.panicked += wake_all(&mut self.wakers);
        }
        soonest
    }

    /// Ends a slot that is not in the wheel (or no longer), dropping its task.
    pub(super) fn end(&mut self, shared: &Shared<J>, id: SlotId, task: J) {
        let shard = self.end_slot(shared, id);
        let spares = kept(&mut self.task_spares[shard]);
        self.tally.panicked += u64::from(!drop_unrun(task, spares));
    }

    /// Counts a slot ended; the block goes with its last slot. Its shard.
    fn end_slot(&mut self, shared: &Shared<J>, id: SlotId) -> usize {
        let (bid, _) = split(id);
        let shard = self.blocks[bid].0.as_ref().map_or(0, |b| b.shard());
        self.ended += 1;
        shared.set_ended(self.ended, 1);
        self.blocks[bid].1 += 1;
        if let Some(block) = self.blocks[bid].0.take() {
            put_back(&mut self.blocks[bid], block, &mut self.spares);
        }
        shard
    }

    /// `stop()`: ends everything; the timeouts it cancels go to `returned` with their tasks.
    pub(crate) fn stop(&mut self, shared: &Shared<J>, returned: &mut Vec<NeverRan<J>>) {
        self.collect(shared);
        let inbox = std::mem::take(&mut self.inbox);
        let mut wheel = std::mem::replace(&mut self.wheel, Wheel::new(1, self.tick_nanos));
        let queued: usize = inbox.iter().map(|(_, segment)| segment.len()).sum();
        returned.reserve(queued + wheel.len());
        for entry in inbox.into_iter().flat_map(|(_, segment)| segment) {
            self.stop_slot(shared, entry.id, entry.task, returned);
        }
        wheel.drain(|id, task| self.stop_slot(shared, id, task, returned));
        self.tally.panicked += wake_all(&mut self.wakers);
        self.publish(shared);
    }

    /// Ends slot `id` at `stop()`: a task's timeout goes to `returned` with its task, unless a
    /// `cancel()` won it first; a future's is ended (the future sees it cancelled).
    fn stop_slot(
        &mut self,
        shared: &Shared<J>,
        id: SlotId,
        task: J,
        returned: &mut Vec<NeverRan<J>>,
    ) {
        let (bid, index) = split(id);
        match self.blocks[bid].0.clone() {
            Some(block) if block.kind() == Kind::Future => {
                let _ = block.cancel(index);
                self.wakers.extend(block.take_waker(index));
                self.tally.cancelled += 1;
            }
            Some(block) if block.cancel(index).is_some() => {
                self.end_slot(shared, id);
                returned.push(NeverRan::new(Timeout::new(block, index), task));
                return;
            }
            // A cancel() won it, and the worker had not ended it yet.
            _ => self.tally.cancelled += 1,
        }
        self.end(shared, id, task);
    }
}

/// A block back in the worker's table while it has slots not ended, else (no handle left) a
/// spare for its shard; with a handle left, it goes with the last one.
#[inline]
fn put_back<J: Stored>(
    (held, ended_in): &mut (Option<Arc<Block<J>>>, u8),
    mut block: Arc<Block<J>>,
    spares: &mut [Vec<Arc<Block<J>>>],
) {
    if usize::from(*ended_in) < BLOCK {
        *held = Some(block);
    } else if Block::reuse(&mut block) {
        spares[block.shard()].push(block);
    }
}

/// A due timeout's task, and its deadline (ns since the origin) for the lateness counters.
struct Due<J> {
    task: J,
    deadline: u64,
}

/// What the expiry walk carries from one due timeout to the next.
struct Walk<'a, J: Stored> {
    shared: &'a Shared<J>,
    tally: &'a mut Tally,
    wakers: &'a mut Vec<Waker>,
    now: u64,
    tick_nanos: u64,
}

impl<J: Stored> Walk<'_, J> {
    /// A due timeout: runs its task (or keeps its waker) if the worker wins its slot, else drops
    /// the task (a `cancel()` won). The block, lent to the task's `Timeout`, comes back.
    #[inline]
    fn end_due(
        &mut self,
        block: Arc<Block<J>>,
        index: usize,
        due: Due<J>,
        kept: &mut Vec<J>,
    ) -> Arc<Block<J>> {
        let Due { task, deadline } = due;
        if !block.expire(index) {
            self.tally.cancelled += 1;
            self.tally.panicked += u64::from(!drop_unrun(task, kept));
            return block;
        }
        self.tally
            .expired(self.now.saturating_sub(deadline), self.tick_nanos);
        if block.kind() == Kind::Future {
            // The crate's own empty closure: nothing to run, nothing to drop but its handle.
            drop(task);
            self.wakers.extend(block.take_waker(index));
            return block;
        }
        let timeout = Timeout::new(block, index);
        let ran = run(self.shared, task, &timeout, kept);
        self.tally.panicked += u64::from(!ran);
        timeout.into_block()
    }
}

/// The chunk to keep an ended task's spares in: the last, or a new one once it is full.
fn kept<J>(chunks: &mut Vec<Vec<J>>) -> &mut Vec<J> {
    if chunks.last().is_none_or(|c| c.len() >= SPARE_CHUNK) {
        chunks.push(Vec::new());
    }
    chunks.last_mut().expect("a chunk was just pushed")
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

    /// The task, taken out: a typed timer's `T`, or the default timer's [`BoxedTask`], which
    /// another timer's `new_timeout` takes.
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
