//! How the worker ends a slot that did not expire: a cancel it finds, or `stop()`.

use super::expire::put_back;
use super::{kept, split, Worker};
use crate::engine::slots::{Block, Kind, Timeout};
use crate::engine::task::drop_unrun;
use crate::engine::wheel::{SlotId, Wheel};
use crate::engine::{wake_all, NeverRan, Shared, Stored};
use crate::sync::Arc;

impl<J: Stored> Worker<J> {
    /// Keeps a block whose first slot was taken.
    pub(super) fn register(&mut self, bid: usize, block: Arc<Block<J>>) {
        if self.blocks.len() <= bid {
            self.blocks.resize_with(bid + 1, || (None, 0));
        }
        self.blocks[bid] = (Some(block), 0);
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
