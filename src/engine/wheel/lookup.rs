//! The wheel's passes beyond a tick's expiry: the `DelayQueue`'s lookups, the drain at
//! `stop()`, and the trim of the node pages a burst left empty.

use super::{Node, SlotId, Wheel, LEVEL_LISTS, PAGE_BITS};

impl<T> Wheel<T> {
    /// The value under `id`, if it is in the wheel.
    pub(crate) fn get(&self, id: SlotId) -> Option<&T> {
        self.node_ref(id)?.value.as_ref()
    }

    /// The least fire tick of the nodes in the wheel, and that tick's nodes (ids and values) in
    /// the order `expire` gives them up; `None` when the wheel is empty.
    pub(crate) fn first_tick(&self) -> Option<(u64, impl Iterator<Item = (SlotId, &T)> + '_)> {
        let (fire, list) = self.first_bucket().or_else(|| {
            // Every far node fires after every bucket's; the lowest level's lowest list holds
            // the lowest rounds (see the module docs).
            let level = self.far_occupied.iter().position(|&bits| bits != 0)?;
            let index = self.far_occupied[level].trailing_zeros() as usize;
            let list = self.buckets() + level * LEVEL_LISTS + index;
            Some((self.least_fire(list, 0)?, list))
        })?;
        let nodes = self
            .list_nodes(list)
            .filter(move |(_, n)| self.fire(n.deadline) == fire);
        Some((
            fire,
            nodes.filter_map(|(id, n)| Some((id, n.value.as_ref()?))),
        ))
    }

    /// The least fire tick of the buckets' nodes, and its bucket.
    fn first_bucket(&self) -> Option<(u64, usize)> {
        let mut first: Option<(u64, usize)> = None;
        for ahead in 0..self.buckets() as u64 {
            let visit = self.tick.saturating_add(ahead);
            if first.is_some_and(|(fire, _)| fire <= visit) {
                break;
            }
            let list = (visit & self.mask()) as usize;
            let Some(fire) = self.least_fire(list, visit) else {
                continue;
            };
            if first.is_none_or(|(least, _)| fire < least) {
                first = Some((fire, list));
            }
        }
        first
    }

    /// The least fire tick in list `list` (`floor` at the first node that has it).
    fn least_fire(&self, list: usize, floor: u64) -> Option<u64> {
        let mut least = None;
        for (_, node) in self.list_nodes(list) {
            let fire = self.fire(node.deadline);
            if fire <= floor {
                return Some(fire);
            }
            least = Some(least.map_or(fire, |l: u64| l.min(fire)));
        }
        least
    }

    fn list_nodes(&self, list: usize) -> impl Iterator<Item = (SlotId, &Node<T>)> + '_ {
        let mut id = self.heads[list];
        std::iter::from_fn(move || {
            let node = self.node_ref(id)?;
            let this = std::mem::replace(&mut id, node.next);
            Some((this, node))
        })
    }

    /// Takes every node out, page by page (in no particular order: in the order of their ids,
    /// which reads memory in order, where the lists jump about), and leaves the wheel empty at
    /// its tick.
    pub(crate) fn drain(&mut self, mut f: impl FnMut(SlotId, T)) {
        for (page, nodes) in self.pages.iter_mut().enumerate() {
            for (index, node) in nodes.iter_mut().enumerate() {
                if let Some(value) = node.value.take() {
                    f((page << PAGE_BITS | index) as SlotId, value);
                }
            }
        }
        *self = Wheel {
            tick: self.tick,
            ..Wheel::new(self.buckets(), self.tick_nanos)
        };
    }

    /// Frees up to `pages` of the pages that hold no node; whether more are left to free.
    pub(crate) fn trim(&mut self, pages: usize) -> bool {
        let mut freed = 0;
        for (page, live) in self.pages.iter_mut().zip(&self.live) {
            if *live == 0 && !page.is_empty() {
                if freed == pages {
                    return true;
                }
                *page = Vec::new();
                freed += 1;
            }
        }
        while self.pages.last().is_some_and(Vec::is_empty) {
            self.pages.pop();
            self.live.pop();
        }
        self.pages.shrink_to_fit();
        self.live.shrink_to_fit();
        false
    }
}
