//! The pure wheel (no threads, clock or atomics): buckets by fire tick, far levels for what lies
//! rounds away, occupancy bits so that an empty tick costs nothing; links, deadline and value
//! in paged arrays indexed by slot id.
//!
//! - `tick` is the next tick to expire. A timeout's fire tick is its deadline's tick, or the
//!   wheel's tick when it came in after that; every timeout in the wheel has `fire >= tick`, so
//!   the fire tick is `max(deadline's tick, tick)` all the while it is in (`Wheel::fire`), and
//!   its list the one `list_for` names: a node keeps neither.
//! - A bucket holds the timeouts whose fire round (`fire / len`) is the current round or the
//!   next (Netty's `remaining_rounds` is 0 or 1). One further away waits in a far list.
//! - The far lists form levels of 64 over rounds, as tokio's wheel does over ticks: with
//!   `window = current round + 1`, a timeout of round `r > window` waits at level
//!   `k = highest 6-bit group in which r and window differ`, list `(r >> 6k) & 63`. When the
//!   window moves to a round where a level's list begins, that list's timeouts are linked again,
//!   in order. So every timeout of one fire round is in one list at any time, and a bucket keeps
//!   transfer order within a tick.

/// A timeout's one name: block number times `BLOCK` plus its index in the block.
pub(crate) type SlotId = u32;
/// No node, or no list.
pub(crate) const NIL: u32 = u32::MAX;

mod lookup;

const LEVEL_BITS: u32 = 6;
const LEVEL_LISTS: usize = 1 << LEVEL_BITS;
const LEVELS: usize = 11;
/// Nodes a page of the node arrays holds (a page under glibc's 128 KiB mmap threshold).
const PAGE_BITS: u32 = 11;
const PAGE: usize = 1 << PAGE_BITS;

struct Node<T> {
    next: u32,
    prev: u32,
    /// In the unit of `tick_nanos` (nanoseconds since the origin, for a timer).
    deadline: u64,
    /// `Some` while the node is in the wheel.
    value: Option<T>,
}

fn set_bit(word: &mut u64, bit: u64, on: bool) {
    if on {
        *word |= bit;
    } else {
        *word &= !bit;
    }
}

impl<T> Node<T> {
    fn vacant() -> Node<T> {
        Node {
            next: NIL,
            prev: NIL,
            deadline: 0,
            value: None,
        }
    }
}

pub(crate) struct Wheel<T> {
    /// The nodes, by id; a page is empty (unallocated) while it holds none (`trim`).
    pages: Vec<Vec<Node<T>>>,
    /// Per page: nodes in the wheel.
    live: Vec<u32>,
    /// First and last node of each list: the buckets, then the far lists.
    heads: Vec<u32>,
    tails: Vec<u32>,
    /// Per parity of the fire round (`fire / len % 2`): one bit per bucket holding a node of a
    /// round of that parity, so that a bucket whose nodes are all a round away costs no wake-up.
    occupied: [Vec<u64>; 2],
    /// Per bucket: its nodes of each parity.
    counts: Vec<[u32; 2]>,
    /// One bit per far list that holds a node, a word per level.
    far_occupied: [u64; LEVELS],
    len_bits: u32,
    tick: u64,
    tick_nanos: u64,
    /// Nodes in the wheel.
    count: usize,
}

impl<T> Wheel<T> {
    /// A wheel of `len` buckets (a power of two) of `tick_nanos` each, at tick 0.
    pub(crate) fn new(len: usize, tick_nanos: u64) -> Wheel<T> {
        assert!(
            len.is_power_of_two(),
            "the wheel's length is a power of two"
        );
        let lists = len + LEVELS * LEVEL_LISTS;
        Wheel {
            pages: Vec::new(),
            live: Vec::new(),
            heads: vec![NIL; lists],
            tails: vec![NIL; lists],
            occupied: [vec![0; len.div_ceil(64)], vec![0; len.div_ceil(64)]],
            counts: vec![[0; 2]; len],
            far_occupied: [0; LEVELS],
            len_bits: len.trailing_zeros(),
            tick: 0,
            tick_nanos,
            count: 0,
        }
    }

    /// Nodes in the wheel.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// The tick the wheel is in: the next to expire.
    pub(crate) fn tick(&self) -> u64 {
        self.tick
    }

    /// The fire tick of a node in the wheel due at `deadline`.
    fn fire(&self, deadline: u64) -> u64 {
        (deadline / self.tick_nanos).max(self.tick)
    }

    fn mask(&self) -> u64 {
        (1u64 << self.len_bits) - 1
    }

    fn node(&mut self, id: SlotId) -> &mut Node<T> {
        let id = id as usize;
        &mut self.pages[id >> PAGE_BITS][id & (PAGE - 1)]
    }

    fn node_ref(&self, id: SlotId) -> Option<&Node<T>> {
        let id = id as usize;
        self.pages.get(id >> PAGE_BITS)?.get(id & (PAGE - 1))
    }

    /// Places `value` under `id`, due at `deadline`, to fire on the later of its tick and the
    /// wheel's. `id` is not in the wheel.
    pub(crate) fn insert(&mut self, id: SlotId, deadline: u64, value: T) {
        let page = id as usize >> PAGE_BITS;
        if self.pages.len() <= page {
            self.pages.resize_with(page + 1, Vec::new);
            self.live.resize(page + 1, 0);
        }
        let nodes = &mut self.pages[page];
        let offset = id as usize & (PAGE - 1);
        if nodes.len() <= offset {
            // A page grows by doubling up to `PAGE`: a few timeouts hold a few nodes.
            let len = (offset + 1).next_power_of_two().clamp(16, PAGE);
            nodes.resize_with(len, Node::vacant);
        }
        self.live[page] += 1;
        let fire = self.fire(deadline);
        let node = self.node(id);
        debug_assert!(node.value.is_none(), "slot {id} is in the wheel already");
        (node.deadline, node.value) = (deadline, Some(value));
        self.count += 1;
        self.link(id, fire);
    }

    /// The list a node of tick `fire` belongs in now.
    fn list_for(&self, fire: u64) -> usize {
        let round = fire >> self.len_bits;
        let window = (self.tick >> self.len_bits) + 1;
        if round <= window {
            return (fire & self.mask()) as usize;
        }
        let level = ((63 - (round ^ window).leading_zeros()) / LEVEL_BITS) as usize;
        let index = (round >> (LEVEL_BITS * level as u32)) as usize & (LEVEL_LISTS - 1);
        self.buckets() + level * LEVEL_LISTS + index
    }

    fn buckets(&self) -> usize {
        1 << self.len_bits
    }

    /// Appends `id` to the list its fire tick belongs in.
    fn link(&mut self, id: SlotId, fire: u64) {
        let list = self.list_for(fire);
        self.link_back(list, id);
        self.count_in(list, fire, true);
    }

    /// Counts a node of tick `fire` in or out of `list`, keeping the occupancy bits.
    fn count_in(&mut self, list: usize, fire: u64, on: bool) {
        if list >= self.buckets() {
            let far = list - self.buckets();
            let bit = 1u64 << (far % LEVEL_LISTS);
            let on = self.heads[list] != NIL;
            set_bit(&mut self.far_occupied[far / LEVEL_LISTS], bit, on);
            return;
        }
        let parity = ((fire >> self.len_bits) & 1) as usize;
        let count = self.counts[list][parity];
        self.set_count(list, parity, if on { count + 1 } else { count - 1 });
    }

    /// Sets bucket `list`'s count of nodes of round parity `parity`, and its occupancy bit.
    fn set_count(&mut self, list: usize, parity: usize, count: u32) {
        self.counts[list][parity] = count;
        let bit = 1u64 << (list % 64);
        set_bit(&mut self.occupied[parity][list / 64], bit, count > 0);
    }

    /// Takes `id` out of the wheel, with its value; `None` if it is not in the wheel.
    pub(crate) fn remove(&mut self, id: SlotId) -> Option<T> {
        let page = self.pages.get_mut(id as usize >> PAGE_BITS)?;
        let node = page.get_mut(id as usize & (PAGE - 1))?;
        let value = node.value.take()?;
        let (prev, next, deadline) = (node.prev, node.next, node.deadline);
        let fire = self.fire(deadline);
        let list = self.list_for(fire);
        if prev == NIL {
            self.heads[list] = next;
        } else {
            self.node(prev).next = next;
        }
        if next == NIL {
            self.tails[list] = prev;
        } else {
            self.node(next).prev = prev;
        }
        self.count_in(list, fire, false);
        self.count -= 1;
        self.live[id as usize >> PAGE_BITS] -= 1;
        Some(value)
    }

    /// Expires the current tick: hands `f` each node of its bucket that is due (fire round this
    /// one, and deadline at most `by`), in bucket order, with its id and deadline. The others
    /// stay in order; the earliest of their deadlines comes back (`u64::MAX`: none).
    pub(crate) fn expire_by(&mut self, by: u64, mut f: impl FnMut(SlotId, u64, T)) -> u64 {
        let tick = self.tick;
        // The end of this tick: a node due before it fires in this round, not a round on.
        let ends = (tick + 1).saturating_mul(self.tick_nanos);
        let list = (tick & self.mask()) as usize;
        let parity = ((tick >> self.len_bits) & 1) as usize;
        let (mut taken, mut soonest) = (0, u64::MAX);
        if self.counts[list][parity] == 0 {
            return soonest;
        }
        let mut id = std::mem::replace(&mut self.heads[list], NIL);
        self.tails[list] = NIL;
        while id != NIL {
            let node = self.node(id);
            let (next, at) = (node.next, node.deadline);
            match (at < ends && at <= by).then(|| node.value.take()) {
                Some(Some(value)) => {
                    taken += 1;
                    self.live[id as usize >> PAGE_BITS] -= 1;
                    f(id, at, value);
                }
                _ => {
                    soonest = soonest.min(at);
                    self.link_back(list, id);
                }
            }
            id = next;
        }
        self.count -= taken as usize;
        self.set_count(list, parity, self.counts[list][parity] - taken);
        soonest
    }

    /// Appends `id`, still counted in `list`, to that list's end.
    fn link_back(&mut self, list: usize, id: SlotId) {
        let tail = self.tails[list];
        let node = self.node(id);
        node.prev = tail;
        node.next = NIL;
        if tail == NIL {
            self.heads[list] = id;
        } else {
            self.node(tail).next = id;
        }
        self.tails[list] = id;
    }

    /// Moves to tick `to`, linking again the far lists whose round begins on the way. Only ticks
    /// without work may be passed over: `to <= next_work()`, or the current bucket's expired.
    pub(crate) fn advance_to(&mut self, to: u64) {
        debug_assert!(to >= self.tick);
        // What `fire` and `remove` rest on: no node is left behind the wheel's tick.
        debug_assert!(to == self.tick || self.next_bucket_tick().is_none_or(|t| t >= to));
        while let Some(cascade) = self.next_cascade_tick() {
            if cascade > to {
                break;
            }
            self.tick = cascade;
            self.cascade();
        }
        self.tick = to;
    }

    /// The window moved to a new round: the far lists that begin there are linked again.
    fn cascade(&mut self) {
        let window = (self.tick >> self.len_bits) + 1;
        for level in (0..LEVELS).rev() {
            let shift = LEVEL_BITS * level as u32;
            if shift >= 64 || window & ((1u64 << shift) - 1) != 0 {
                continue;
            }
            let index = (window >> shift) as usize & (LEVEL_LISTS - 1);
            let list = self.buckets() + level * LEVEL_LISTS + index;
            let mut id = std::mem::replace(&mut self.heads[list], NIL);
            self.tails[list] = NIL;
            self.count_in(list, 0, false);
            while id != NIL {
                let node = self.node(id);
                let (next, deadline) = (node.next, node.deadline);
                self.link(id, self.fire(deadline));
                id = next;
            }
        }
    }

    /// The first tick, from the current one, with a bucket to expire or a far list to link again.
    pub(crate) fn next_work(&self) -> Option<u64> {
        self.next_bucket_tick()
            .into_iter()
            .chain(self.next_cascade_tick())
            .min()
    }

    /// The tick of the first bucket, from the current tick on, that holds a node due in its round.
    fn next_bucket_tick(&self) -> Option<u64> {
        let len = self.buckets();
        let start = (self.tick & self.mask()) as usize;
        let round_start = self.tick - start as u64;
        let parity = ((self.tick >> self.len_bits) & 1) as usize;
        if let Some(bucket) = first_set(&self.occupied[parity], start, len) {
            return Some(round_start + bucket as u64);
        }
        let bucket = first_set(&self.occupied[1 - parity], 0, len)?;
        Some(round_start + len as u64 + bucket as u64)
    }

    /// The tick whose round start links a far list again, the earliest.
    fn next_cascade_tick(&self) -> Option<u64> {
        let window = (self.tick >> self.len_bits) + 1;
        let mut first: Option<u64> = None;
        for (level, &bits) in self.far_occupied.iter().enumerate() {
            if bits == 0 {
                continue;
            }
            let shift = LEVEL_BITS * level as u32;
            let index = u64::from(bits.trailing_zeros());
            // The window's groups above this level, this list's index, zeros below.
            let above = shift + LEVEL_BITS;
            let high = window.checked_shr(above).map_or(0, |w| w << above);
            let round = high | (index << shift);
            let tick = (round - 1) << self.len_bits;
            first = Some(first.map_or(tick, |f| f.min(tick)));
        }
        first
    }
}

/// The first set bit of `bits` in `from..to`.
fn first_set(bits: &[u64], from: usize, to: usize) -> Option<usize> {
    let mut word = from / 64;
    let mut mask = u64::MAX << (from % 64);
    while word * 64 < to {
        let set = bits[word] & mask;
        if set != 0 {
            let bit = word * 64 + set.trailing_zeros() as usize;
            return (bit < to).then_some(bit);
        }
        word += 1;
        mask = u64::MAX;
    }
    None
}

#[cfg(test)]
mod tests {
    impl<T> Wheel<T> {
        fn expire(&mut self, mut f: impl FnMut(SlotId, T)) {
            self.expire_by(u64::MAX, |id, _, value| f(id, value));
        }

        fn contains(&self, id: SlotId) -> bool {
            self.get(id).is_some()
        }
    }

    use super::*;

    /// Bytes the node arrays hold.
    fn bytes<T>(wheel: &Wheel<T>) -> usize {
        wheel.pages.iter().map(Vec::len).sum::<usize>() * std::mem::size_of::<Node<T>>()
    }

    /// Runs the wheel from its tick to `until`, as the worker does, recording (tick, value).
    fn run(wheel: &mut Wheel<u64>, until: u64, fired: &mut Vec<(u64, u64)>) {
        while wheel.tick() <= until {
            let tick = wheel.tick();
            wheel.expire(|_, v| fired.push((tick, v)));
            let next = wheel.next_work().map_or(until + 1, |t| t.max(tick + 1));
            wheel.advance_to(next.min(until + 1));
        }
    }

    #[test]
    fn fires_on_its_tick_near_and_far() {
        let mut wheel = Wheel::new(8, 1);
        let fires = [
            0, 1, 7, 8, 9, 15, 16, 17, 100, 511, 512, 4095, 4096, 300_000, 70_000_000,
        ];
        for (id, &f) in fires.iter().enumerate() {
            wheel.insert(id as u32, f, f);
        }
        let mut fired = Vec::new();
        run(&mut wheel, 70_000_001, &mut fired);
        assert_eq!(fired.len(), fires.len());
        for (tick, v) in fired {
            assert_eq!(tick, v);
        }
        assert_eq!(wheel.len(), 0);
    }

    #[test]
    fn one_tick_keeps_insertion_order_across_levels() {
        let mut wheel = Wheel::new(4, 1);
        // Inserted far away, then nearer as time passes: all fire on tick 1000, in order.
        for i in 0..20u32 {
            let t = u64::from(i) * 40;
            while wheel.tick() < t {
                let next = wheel
                    .next_work()
                    .map_or(t, |w| w.clamp(wheel.tick() + 1, t));
                wheel.expire(|_, _| {});
                wheel.advance_to(next);
            }
            wheel.insert(i, 1000, u64::from(i));
        }
        let mut fired = Vec::new();
        run(&mut wheel, 1000, &mut fired);
        let order: Vec<u64> = fired.iter().map(|&(_, v)| v).collect();
        assert_eq!(order, (0..20).collect::<Vec<_>>());
        assert!(fired.iter().all(|&(t, _)| t == 1000));
    }

    #[test]
    fn remove_from_bucket_and_far_list() {
        let mut wheel = Wheel::new(8, 1);
        wheel.insert(1, 3, 1);
        wheel.insert(2, 3, 2);
        wheel.insert(3, 3, 3);
        wheel.insert(4, 10_000, 4);
        assert_eq!(wheel.remove(2), Some(2));
        assert_eq!(wheel.remove(2), None);
        assert_eq!(wheel.remove(4), Some(4));
        assert!(!wheel.contains(4));
        let mut fired = Vec::new();
        run(&mut wheel, 20_000, &mut fired);
        assert_eq!(fired, vec![(3, 1), (3, 3)]);
        assert_eq!(wheel.next_work(), None);
    }

    #[test]
    fn a_past_deadline_fires_now_and_keeps_its_deadline() {
        let mut wheel = Wheel::new(8, 1);
        wheel.advance_to(50);
        wheel.insert(0, 10, 7);
        wheel.insert(1, 12, 8);
        assert_eq!(
            wheel.remove(1),
            Some(8),
            "unlinked from the list of its fire tick"
        );
        let mut fired = Vec::new();
        wheel.expire_by(u64::MAX, |id, at, v| fired.push((id, at, v)));
        assert_eq!(fired, vec![(0, 10, 7)]);
        // More than 2^32 ticks past: it fires now, and keeps its deadline too.
        wheel.advance_to(1 << 40);
        wheel.insert(2, 5, 9);
        fired.clear();
        wheel.expire_by(u64::MAX, |id, at, v| fired.push((id, at, v)));
        assert_eq!(fired, vec![(2, 5, 9)]);
    }

    #[test]
    fn next_round_stays_in_its_bucket() {
        let mut wheel = Wheel::new(8, 1);
        wheel.insert(0, 9, 9); // bucket 1, the next round
        wheel.advance_to(1);
        let mut fired = Vec::new();
        wheel.expire(|_, v| fired.push(v));
        assert!(fired.is_empty());
        // The bucket holds a node of the next round only: no work before tick 9.
        assert_eq!(wheel.next_work(), Some(9));
    }

    #[test]
    fn next_work_skips_empty_ticks_and_finds_far_lists() {
        let mut wheel: Wheel<u64> = Wheel::new(512, 1);
        assert_eq!(wheel.next_work(), None);
        wheel.insert(0, 3_600_000, 0);
        let first = wheel.next_work().unwrap();
        assert!(first > 0 && first < 3_600_000);
        // Following the plan only, the wheel wakes a handful of times in an hour.
        let mut wakes = 0;
        let mut fired = Vec::new();
        while let Some(t) = wheel.next_work() {
            wheel.advance_to(t);
            wheel.expire(|_, v| fired.push((t, v)));
            wakes += 1;
            if wheel.next_work() == Some(t) {
                wheel.advance_to(t + 1);
            }
        }
        assert_eq!(fired, vec![(3_600_000, 0)]);
        assert!(wakes < 10, "{wakes} wake-ups");
    }

    /// Random inserts, removals and runs against a plain map: each node fires on
    /// `max(deadline, tick at insert)` (a tick of 1), and `next_work` never passes a due node.
    #[test]
    fn matches_a_plain_model() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut rand = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for len in [1usize, 2, 8, 64] {
            let mut wheel = Wheel::new(len, 1);
            let mut model = std::collections::BTreeMap::new();
            for _ in 0..20_000 {
                match rand(10) {
                    0..=5 => {
                        let id = rand(500) as u32;
                        if let std::collections::btree_map::Entry::Vacant(vacant) = model.entry(id)
                        {
                            let far = [4, 64, 5_000, 300_000][rand(4) as usize];
                            let deadline = (wheel.tick() + rand(far)).saturating_sub(rand(8));
                            let fire = deadline.max(wheel.tick());
                            wheel.insert(id, deadline, fire);
                            vacant.insert(fire);
                        }
                    }
                    6 => {
                        let id = rand(500) as u32;
                        assert_eq!(wheel.remove(id), model.remove(&id));
                    }
                    _ => {
                        let until = wheel.tick() + rand(2_000);
                        let first_due = model.values().min().copied();
                        let next = wheel.next_work();
                        if let Some(due) = first_due {
                            assert!(next.is_some_and(|n| n <= due && n >= wheel.tick()));
                        }
                        while wheel.tick() <= until {
                            let tick = wheel.tick();
                            wheel.expire(|id, fire| {
                                assert_eq!(fire, tick, "slot {id}");
                                assert_eq!(model.remove(&id), Some(fire));
                            });
                            assert!(model.values().all(|&f| f > tick));
                            let next = wheel.next_work().map_or(until + 1, |t| t.max(tick + 1));
                            wheel.advance_to(next.min(until + 1));
                        }
                    }
                }
            }
            assert_eq!(wheel.len(), model.len());
        }
    }

    #[test]
    fn expire_by_leaves_the_nodes_not_due_in_order_and_names_the_earliest() {
        let mut wheel = Wheel::new(8, 10); // ticks of 10: tick 3 holds deadlines 30 to 39
        for (id, deadline) in [31, 38, 32, 36, 33, 39].into_iter().enumerate() {
            wheel.insert(id as u32, deadline, deadline);
        }
        wheel.insert(6, 110, 110); // the same bucket, the next round: not this tick's
        wheel.advance_to(3);
        let mut fired = Vec::new();
        let soonest = wheel.expire_by(34, |id, at, v| fired.push((id, at, v)));
        assert_eq!(fired, [(0, 31, 31), (2, 32, 32), (4, 33, 33)]);
        assert_eq!(soonest, 36, "the earliest deadline left in this round");
        wheel.insert(7, 35, 35);
        let mut rest = Vec::new();
        wheel.expire(|_, v| rest.push(v));
        assert_eq!(rest, [38, 36, 39, 35]);
        assert_eq!(wheel.next_work(), Some(11), "the next round's node stays");
    }

    fn first(wheel: &Wheel<u64>) -> Option<(u64, Vec<(SlotId, u64)>)> {
        let (tick, nodes) = wheel.first_tick()?;
        Some((tick, nodes.map(|(id, &v)| (id, v)).collect()))
    }

    #[test]
    fn first_tick_names_the_least_fire_tick_and_its_nodes_in_order() {
        let mut wheel = Wheel::new(8, 1);
        assert_eq!(first(&wheel), None);
        wheel.insert(1, 5_000, 10); // far
        wheel.insert(2, 5_001, 11);
        wheel.insert(3, 5_000, 12);
        assert_eq!(first(&wheel), Some((5_000, vec![(1, 10), (3, 12)])));
        wheel.insert(4, 12, 13); // bucket 4, the next round: visited at tick 4 first
        assert_eq!(first(&wheel), Some((12, vec![(4, 13)])));
        wheel.insert(5, 6, 14); // this round
        assert_eq!(first(&wheel), Some((6, vec![(5, 14)])));
        assert_eq!((wheel.get(4), wheel.get(6)), (Some(&13), None));
        wheel.remove(5);
        assert_eq!(wheel.get(5), None);
        assert_eq!(first(&wheel), Some((12, vec![(4, 13)])));
    }

    #[test]
    fn first_tick_is_the_next_to_fire_as_the_wheel_turns() {
        let mut wheel = Wheel::new(8, 1);
        let fires = [
            0, 1, 7, 8, 9, 15, 16, 17, 100, 511, 512, 4095, 4096, 300_000, 70_000_000,
        ];
        for (id, &f) in fires.iter().enumerate().rev() {
            wheel.insert(id as u32, f, f);
        }
        for (id, &f) in fires.iter().enumerate() {
            assert_eq!(first(&wheel), Some((f, vec![(id as u32, f)])));
            let mut fired = Vec::new();
            run(&mut wheel, f, &mut fired);
            assert_eq!(fired, [(f, f)]);
        }
        assert_eq!(first(&wheel), None);
    }

    #[test]
    fn drain_takes_every_node_by_id_and_leaves_the_wheel_empty_at_its_tick() {
        let mut wheel = Wheel::new(8, 1);
        for (id, fire) in [(3_000u32, 4u64), (0, 3), (5, 9), (70, 5_000)] {
            wheel.insert(id, fire, fire);
        }
        wheel.advance_to(2);
        wheel.remove(5);
        let mut drained = Vec::new();
        wheel.drain(|id, v| drained.push((id, v)));
        assert_eq!(drained, [(0, 3), (70, 5_000), (3_000, 4)]);
        assert_eq!((wheel.len(), wheel.next_work(), wheel.tick()), (0, None, 2));
        wheel.insert(1, 4, 4);
        let mut fired = Vec::new();
        run(&mut wheel, 10, &mut fired);
        assert_eq!(fired, [(4, 4)]);
    }

    #[test]
    fn trim_frees_the_pages_that_hold_nothing() {
        let mut wheel = Wheel::new(512, 1);
        for id in 0..20_000u32 {
            wheel.insert(id, 100, 0u64);
        }
        for id in 0..20_000u32 {
            if id != 7 {
                wheel.remove(id);
            }
        }
        let before = bytes(&wheel);
        assert!(wheel.trim(2), "more than two pages to free");
        assert!(!wheel.trim(usize::MAX));
        let after = bytes(&wheel);
        assert!(after * 5 < before, "{after} of {before} bytes");
        assert!(wheel.contains(7) && !wheel.contains(19_999));
        wheel.insert(19_999, 3, 9);
        assert_eq!(wheel.remove(19_999), Some(9));
        assert_eq!(wheel.remove(7), Some(0));
        assert!(!wheel.trim(usize::MAX));
        assert_eq!(bytes(&wheel), 0);
    }

    #[test]
    fn a_node_holds_its_links_deadline_and_value_only() {
        // A boxed task's node: two links, the deadline and the box; its list and fire tick follow.
        assert_eq!(std::mem::size_of::<Node<Box<dyn FnOnce() + Send>>>(), 32);
    }

    #[test]
    fn memory_grows_by_pages() {
        let mut wheel = Wheel::new(512, 1);
        for id in 0..10_000u32 {
            wheel.insert(id, u64::from(id), 0u64);
        }
        let per = bytes(&wheel) / 10_000;
        assert!(
            per <= 2 * std::mem::size_of::<Node<u64>>(),
            "{per} bytes a node"
        );
    }
}
