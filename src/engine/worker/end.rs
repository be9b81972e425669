//! How the worker ends a slot: the expiry walk (what of the current tick's bucket is due, ended
//! and run, or woken), and the slots that end without expiring (a cancel it finds, `stop()`).

use super::{split, Runner, Tally, Worker};
use crate::engine::shard::SPARE_CHUNK;
use crate::engine::slots::{Block, Kind, Timeout, BLOCK};
use crate::engine::task::{drop_unrun, run};
use crate::engine::wheel::{SlotId, Wheel};
use crate::engine::{wake_all, NeverRan, Shared, Stored};
use crate::sync::Arc;
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
    } else if Block::renew(&mut block) {
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
