//! The pure wheel: buckets, mask indexing, rounds, expiry. No threads, no clock, no atomics.
//!
//! Owns the wheel's data structure and arithmetic (fire ticks, `remaining_rounds`); touches
//! nothing of the crate, and only the worker holds a `Wheel`. Here: the `Wheel`, its insertion,
//! removal, expiry and lookahead; nodes, lists and buckets in `buckets.rs`, far slots and their
//! cascade in `far.rs`, the occupancy bitmap and next fire tick in `occupancy.rs`, the slab in
//! `slab.rs`. Tested by unit tests and a model-based test against a sorted list.
//!
//! # Layout
//! Entries live in one slab whose pages never move (`slab.rs`), linked into their bucket by
//! `u32` indices: no allocation per entry, O(1) unlink on cancel, freed slots reused. A bucket
//! is a doubly linked list in insertion order (Netty's bucket order = transfer order). A wheel
//! of more than 4096 buckets allocates them in pages as entries land (`Buckets`): 2^30 buckets
//! cost what the timeouts touch, not 16 GiB up front.
//!
//! # Rounds without decrementing
//! Netty stores `remaining_rounds = (calculated - tick) / wheel_len`, decrements it at each
//! visit and expires the entry at 0: an entry placed at tick `T`, with `calculated` the deadline
//! over `tick_nanos`, expires on tick `max(calculated, T)`, its *fire tick*. This wheel keeps
//! the deadline and tests `calculated <= tick` at the visit: the same without a write per round,
//! and exact when the worker sleeps through ticks with no work. Netty's `deadline <= now` guard
//! is kept as well.
//!
//! # Occupancy
//! A bitmap of non-empty buckets and, per bucket, a lower bound of its fire ticks find the next
//! tick with work ([`Wheel::next_fire_tick`]) without visiting empty buckets or ones rounds away.
//!
//! # Far timeouts wait outside the buckets
//! A bucket holds only entries of rounds up to the *horizon* (the current round + 1). Later
//! ones wait in *far slots*: levels of 64 slots indexed by the fire round's base-64 digits
//! (tokio's and Linux's hierarchical layout), at the level of the highest digit in which the
//! round differs from the horizon. As the horizon reaches a slot's range, its entries move down
//! a level, or into their bucket once their round is the horizon. So a bucket is walked only
//! when something in it is due, and a far entry moves at most once per level: the worker's cost
//! follows what fires, not what waits. A move happens at the start of the round before the
//! entry's, before that tick's transfer: a round's entries are all in their bucket before any
//! entry of that round transferred later, so a bucket keeps transfer order.

mod buckets;
mod far;
mod occupancy;
mod slab;

pub(crate) use buckets::MAX_ENTRIES;
use buckets::{Buckets, List, Node, EMPTY_BUCKET, EMPTY_LIST};
use far::{FAR_LEVELS, LEVEL_SLOTS};
use slab::PAGE_BITS;
pub(crate) use slab::{Slab, Vacancy, NO_INDEX};

/// The lanes of a wheel's keys ([`Wheel::next_key_in`]): one per size class of the boxed
/// timer's tasks (three), rounded up to a power of two so that a lane is two bits of a page's.
pub(crate) const LANES: usize = 4;

#[derive(Debug)]
pub(crate) struct Wheel<T> {
    /// The entries, linked into lists by their keys, each in the lane its owner names.
    nodes: Slab<Node<T>, PAGE_BITS, LANES>,
    buckets: Buckets,
    /// A bit per non-empty bucket; allocated zeroed, so its memory is mapped only as written.
    occupied: Box<[u64]>,
    mask: u64,
    tick_nanos: u64,
    /// `log2(wheel_len)`: the round of tick `t` is `t >> round_shift`.
    round_shift: u32,
    /// The latest round whose entries are in the buckets (the current round + 1).
    horizon: u64,
    /// Per far level, `LEVEL_SLOTS` lists, allocated with its first entry, let go of when the
    /// wheel empties; slot `s` of level `l` is list `wheel_len + l * LEVEL_SLOTS + s`.
    far: [Box<[List]>; FAR_LEVELS],
    far_occupied: [u64; FAR_LEVELS],
}

/// A bound on a trim's pass, in nanoseconds per slot of the slab ([`Wheel::trim_cost`]), about
/// twice what it measures (`docs/performance.md`, "Trim after a burst"): a trim runs only if it
/// ends before the tick the worker plans to wake at.
const TRIM_NANOS_PER_SLOT: u64 = 5;

/// The fewest pages a slab needs for a trim to look at it: a small timer's are not worth a pass.
const TRIM_MIN_PAGES: usize = 4;

impl<T> Wheel<T> {
    pub(crate) fn new(tick_nanos: u64, wheel_len: usize) -> Self {
        assert!(wheel_len.is_power_of_two() && tick_nanos > 0);
        Wheel {
            nodes: Slab::new(),
            buckets: Buckets::new(wheel_len),
            occupied: vec![0; wheel_len.div_ceil(64)].into_boxed_slice(),
            mask: wheel_len as u64 - 1,
            tick_nanos,
            round_shift: wheel_len.trailing_zeros(),
            horizon: 1,
            far: std::array::from_fn(|_| Box::default()),
            far_occupied: [0; FAR_LEVELS],
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.nodes.live()
    }

    pub(crate) fn wheel_len(&self) -> u64 {
        self.mask + 1
    }

    /// Netty's `calculated`: the tick whose end the deadline falls before.
    #[inline]
    fn calculated(&self, deadline: u64) -> u64 {
        deadline / self.tick_nanos
    }

    /// Netty's `remaining_rounds` for this deadline at a visit on `tick`.
    #[cfg(test)]
    pub(crate) fn remaining_rounds(&self, deadline: u64, tick: u64) -> u64 {
        self.calculated(deadline).saturating_sub(tick) / self.wheel_len()
    }

    /// Puts an entry in the bucket of tick `max(deadline / tick_nanos, tick)`; returns its key.
    #[cfg(test)]
    pub(crate) fn insert(&mut self, item: T, deadline: u64, tick: u64) -> u32 {
        let key = self.next_key_in(0);
        self.insert_at(key, item, deadline, tick);
        key
    }

    /// `insert` under `key`: the [`Wheel::next_key_in`] of a lane, nothing inserted or removed
    /// since. Panics before anything changes if `key` is not below [`MAX_ENTRIES`] or not such
    /// a key (a bug of the owner's).
    #[inline]
    pub(crate) fn insert_at(&mut self, key: u32, item: T, deadline: u64, tick: u64) {
        // Unreachable: `new_timeout` refuses beyond MAX_ENTRIES (`Shared::refill_credit`).
        assert!(
            (key as usize) < MAX_ENTRIES,
            "more than 2^27 - 1 timeouts in one wheel"
        );
        self.catch_up(tick);
        let fire = self.calculated(deadline).max(tick);
        // Stored before it is linked: the slab checks the key first.
        let node = Node::new(item, deadline, NO_INDEX);
        self.nodes.insert_at(key, node);
        let tail = self.push_back(key, fire);
        if tail != NO_INDEX {
            self.nodes[tail].next = key;
            self.nodes[key].prev = tail;
        }
    }

    /// Appends `key` (firing on tick `fire`) to its bucket, or to its far slot past the horizon.
    #[inline]
    fn link(&mut self, key: u32, fire: u64) {
        let tail = self.push_back(key, fire);
        if tail != NO_INDEX {
            self.nodes[tail].next = key;
        }
        let node = &mut self.nodes[key];
        node.prev = tail;
        node.next = NO_INDEX;
    }

    /// Makes `key` the tail of its bucket or far slot (ends, occupancy, least fire tick);
    /// returns the old tail (`NO_INDEX`: none) for the caller to link with `key`.
    #[inline]
    fn push_back(&mut self, key: u32, fire: u64) -> u32 {
        let round = fire >> self.round_shift;
        if round <= self.horizon {
            let b = (fire & self.mask) as usize;
            let bucket = self.buckets.get_mut(b);
            bucket.min_fire = bucket.min_fire.min(fire);
            let tail = std::mem::replace(&mut bucket.ends.tail, key);
            if tail == NO_INDEX {
                bucket.ends.head = key;
                self.occupied[b / 64] |= 1 << (b % 64);
            }
            return tail;
        }
        self.push_back_far(key, round)
    }

    /// List `b`: a bucket's below `wheel_len`, a far slot's from there on.
    #[inline]
    fn list(&self, b: usize) -> &List {
        match b.checked_sub(self.buckets.len()) {
            None => &self.buckets.get(b).ends,
            Some(i) => &self.far[i / LEVEL_SLOTS][i % LEVEL_SLOTS],
        }
    }

    #[inline]
    fn list_mut(&mut self, b: usize) -> &mut List {
        match b.checked_sub(self.buckets.len()) {
            None => &mut self.buckets.get_mut(b).ends,
            Some(i) => &mut self.far[i / LEVEL_SLOTS][i % LEVEL_SLOTS],
        }
    }

    #[cfg(test)]
    pub(crate) fn next_key(&self) -> u32 {
        self.nodes.next_key()
    }

    /// The key of lane `lane`'s (below [`LANES`]) next entry: a lane's keys come from its own
    /// pages only, so what the owner keeps under one lane's keys spans that lane's pages.
    #[inline]
    pub(crate) fn next_key_in(&self, lane: usize) -> u32 {
        self.nodes.next_key_in(lane)
    }

    /// Unlinks the entry under `key`: it and its deadline; panics if it is not live (a worker
    /// bug).
    #[inline]
    pub(crate) fn remove(&mut self, key: u32) -> (T, u64) {
        let node = self.nodes.remove(key);
        let (prev, next, deadline) = (node.prev, node.next, node.deadline);
        let item = node.item.expect("the slab gives a live node");
        if prev != NO_INDEX {
            self.nodes[prev].next = next;
        }
        if next != NO_INDEX {
            self.nodes[next].prev = prev;
        }
        if prev == NO_INDEX || next == NO_INDEX {
            let b = self.bucket_of_end(key, deadline);
            let list = self.list_mut(b);
            if prev == NO_INDEX {
                list.head = next;
            }
            if next == NO_INDEX {
                list.tail = prev;
            }
            if list.head == NO_INDEX {
                *list = EMPTY_LIST;
                if b < self.buckets.len() {
                    self.buckets.get_mut(b).min_fire = u64::MAX;
                }
                self.clear_occupied(b);
            }
        }
        if self.nodes.live() == 0 {
            self.release_memory();
        }
        (item, deadline)
    }

    /// Nothing live: gives the slab and far slots back rather than keep a burst's worth.
    fn release_memory(&mut self) {
        self.nodes.release();
        self.clear_far();
    }

    /// What [`Wheel::trim`]'s pass takes, in nanoseconds at [`TRIM_NANOS_PER_SLOT`], if it may
    /// give pages back: a slab of [`TRIM_MIN_PAGES`] pages or more, under a quarter of whose
    /// slots hold an entry.
    pub(crate) fn trim_cost(&self) -> Option<u64> {
        let (slots, live) = (self.nodes.len(), self.nodes.live());
        let big = slots >= TRIM_MIN_PAGES << PAGE_BITS;
        let sparse = big && live * 4 < slots;
        sparse.then(|| (slots as u64).saturating_mul(TRIM_NANOS_PER_SLOT))
    }

    /// Gives back the slab's pages that hold no entry and relinks its free lists lowest key
    /// first ([`Slab::trim`], O(slots)): how many pages.
    pub(crate) fn trim(&mut self) -> usize {
        self.nodes.trim()
    }

    /// Bytes the slab's pages hold.
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node<T>>()
    }

    /// The bucket of which `key` (whose deadline this is) is the head or the tail.
    #[inline]
    fn bucket_of_end(&self, key: u32, deadline: u64) -> usize {
        let round = self.calculated(deadline) >> self.round_shift;
        if round > self.horizon {
            // Past the horizon an entry's fire tick is its calculated tick: a far slot.
            let b = self.far_index(round);
            debug_assert!(self.list(b).head == key || self.list(b).tail == key);
            return b;
        }
        let natural = (self.calculated(deadline) & self.mask) as usize;
        let b = &self.buckets.get(natural).ends;
        if b.head == key || b.tail == key {
            return natural;
        }
        // An entry placed past its deadline sits in its insertion tick's bucket and expires on
        // that tick: only a removal before then (which the worker never does) scans.
        self.buckets
            .position(|b| b.ends.head == key || b.ends.tail == key)
            .expect("wheel: live key in no bucket")
    }

    /// Visits the bucket of `tick`: each entry whose fire tick has come and whose deadline is
    /// `<= now` is unlinked and handed to `f` (entry, key, deadline) in bucket order, during the
    /// walk (`docs/performance.md`, "One-walk expiry, task run in place"). The others stay,
    /// relinked in order; a bucket whose entries are all rounds away is not walked (with
    /// absolute fire ticks there is no count to decrement).
    #[inline]
    pub(crate) fn expire(&mut self, tick: u64, now: u64, f: impl FnMut(T, u32, u64)) {
        self.catch_up(tick);
        let b = (tick & self.mask) as usize;
        if self.buckets.get(b).min_fire > tick {
            return;
        }
        let (kept, min_fire) = self.walk_bucket(b, tick, now, f);
        self.close_walked_bucket(b, kept, min_fire);
        if self.nodes.live() == 0 {
            self.release_memory();
        }
    }

    /// [`Wheel::expire`]'s walk of bucket `b`, which holds something due on `tick`: returns
    /// the last entry kept (`NO_INDEX`: none) and the least fire tick of those kept.
    #[inline]
    fn walk_bucket(
        &mut self,
        b: usize,
        tick: u64,
        now: u64,
        mut f: impl FnMut(T, u32, u64),
    ) -> (u32, u64) {
        // `calculated(deadline) <= tick` without a division: the deadline is before `tick`'s end.
        let tick_end = tick.saturating_add(1).saturating_mul(self.tick_nanos);
        // One comparison per entry: due by `tick` and `<= now`. A saturated end leaves
        // `u64::MAX`, "never", undue, even with the clock at its end.
        let last_due = (tick_end - 1).min(now);
        // The bucket holds something due: its page is allocated.
        let mut cursor = self.buckets.get(b).ends.head;
        let mut kept = NO_INDEX;
        let mut min_fire = u64::MAX;
        while cursor != NO_INDEX {
            let node = &self.nodes[cursor];
            let (next, deadline) = (node.next, node.deadline);
            if deadline <= last_due {
                let node = self.nodes.remove(cursor);
                f(
                    node.item.expect("the slab gives a live node"),
                    cursor,
                    deadline,
                );
            } else {
                min_fire = min_fire.min(self.survivor_fire(deadline, tick, tick_end));
                self.nodes[cursor].prev = kept;
                self.link_kept(b, kept, cursor);
                kept = cursor;
            }
            cursor = next;
        }
        (kept, min_fire)
    }

    /// The fire tick of an entry the walk of `tick` (which ends at `tick_end`) keeps: rounds
    /// away, or `tick` again if due by it but not yet by the clock (a clock that lags the tick).
    /// Inlined always (`docs/performance.md`, "`inline(always)` / `inline(never)` placements").
    #[inline(always)]
    fn survivor_fire(&self, deadline: u64, tick: u64, tick_end: u64) -> u64 {
        if deadline < tick_end || tick_end == u64::MAX {
            tick
        } else {
            deadline / self.tick_nanos
        }
    }

    /// Links `key`, kept by the walk of bucket `b`, after `kept` (`NO_INDEX`: as the head).
    #[inline]
    fn link_kept(&mut self, b: usize, kept: u32, key: u32) {
        if kept == NO_INDEX {
            self.buckets.get_mut(b).ends.head = key;
        } else {
            self.nodes[kept].next = key;
        }
    }

    /// Ends the walk of bucket `b`: `kept` is its tail and `min_fire` its bound, or it is empty.
    #[inline]
    fn close_walked_bucket(&mut self, b: usize, kept: u32, min_fire: u64) {
        if kept == NO_INDEX {
            *self.buckets.get_mut(b) = EMPTY_BUCKET;
            self.clear_occupied(b);
        } else {
            self.nodes[kept].next = NO_INDEX;
            let bucket = self.buckets.get_mut(b);
            bucket.ends.tail = kept;
            bucket.min_fire = min_fire;
        }
    }

    /// Removes every entry, in slot order (about insertion order): one pass over the slab's
    /// pages in memory order, not a walk of lists scattered across it.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        let mut out = Vec::with_capacity(self.nodes.live());
        out.extend(
            self.nodes
                .drain()
                .map(|node| node.item.expect("the slab drains live nodes")),
        );
        self.buckets.clear();
        if self.buckets.pages.len() == 1 {
            self.occupied.fill(0);
        } else {
            // A fresh zeroed bitmap: writing zeros over every word of the old one maps it all.
            self.occupied = vec![0; self.occupied.len()].into_boxed_slice();
        }
        self.clear_far();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::buckets::{Bucket, BUCKET_PAGE_BITS};
    use super::occupancy::SEARCH_BUCKETS;
    use super::slab::PAGE;
    use super::*;

    const MS: u64 = 1_000_000;

    /// Expires `ticks` of `w` in turn, each with the clock at its end: `(tick, item)` for each
    /// entry handed out.
    fn expire_ticks<T>(w: &mut Wheel<T>, ticks: impl IntoIterator<Item = u64>) -> Vec<(u64, T)> {
        let mut fired = vec![];
        for tick in ticks {
            let now = (tick + 1) * w.tick_nanos;
            w.expire(tick, now, |item, _, _| fired.push((tick, item)));
        }
        fired
    }

    /// Expires each tick `next_fire_tick` names from `from` on, as the worker does, until none:
    /// the ticks visited, and `(tick, item)` for each entry handed out.
    fn run_to_empty<T>(w: &mut Wheel<T>, mut from: u64) -> (Vec<u64>, Vec<(u64, T)>) {
        let (mut visits, mut fired) = (vec![], vec![]);
        while let Some(tick) = w.next_fire_tick(from) {
            visits.push(tick);
            fired.extend(expire_ticks(w, [tick]));
            from = tick + 1;
        }
        (visits, fired)
    }

    /// A wheel of 8 ticks whose bucket 3 mixes entries due on tick 3 and a round later, and one
    /// entry in bucket 5; with the key of a survivor from the middle of the bucket, if any.
    fn mixed_bucket(later: impl Fn(u32) -> bool) -> (Wheel<u32>, Option<u32>) {
        let mut w = Wheel::new(MS, 8);
        let mut middle = None;
        for i in 0..40u32 {
            let tick = if later(i) { 11 } else { 3 };
            let key = w.insert(i, tick * MS + u64::from(i), 0);
            if later(i) && i >= 20 && middle.is_none() {
                middle = Some(key);
            }
        }
        w.insert(1000, 5 * MS, 0);
        (w, middle)
    }

    /// Expires tick 3 of `w`; then removes the survivor under `middle`, adds an entry due on
    /// tick 11, and expires the rest. Everything handed out, in order.
    fn expire_then_the_rest(mut w: Wheel<u32>, middle: Option<u32>) -> Vec<(u32, u64)> {
        let mut got = Vec::new();
        w.expire(3, 4 * MS, |i, _, d| got.push((i, d)));
        // The bucket is whole: from its head, each node is live and links back to the one before.
        let (mut at, mut before, mut walked) = (w.list(3).head, NO_INDEX, 0);
        while at != NO_INDEX {
            let node = &w.nodes[at];
            assert!(node.item.is_some() && node.prev == before);
            (before, at) = (at, node.next);
            walked += 1;
        }
        assert_eq!((w.list(3).tail, walked), (before, w.len() - 1));
        assert_eq!(w.occupied[0] & (1 << 3) != 0, walked > 0);
        // A survivor in the middle is cancelled (its neighbours relinked); a new entry joins.
        if let Some(key) = middle {
            let item = w.remove(key).0;
            got.push((item, 0));
        }
        w.insert(500, 11 * MS + 500, 4);
        for tick in 4..12 {
            w.expire(tick, (tick + 1) * MS, |i, _, d| got.push((i, d)));
        }
        assert_eq!(w.len(), 0);
        got
    }

    #[test]
    fn expiring_a_bucket_hands_out_the_due_entries_in_order_and_keeps_the_rest_linked() {
        // Due entries at the head, the tail, both, neither; survivors in between; none at all.
        let patterns: [fn(u32) -> bool; 4] = [
            |i| (i % 3 == 1 || i % 7 == 0) && (2..37).contains(&i),
            |i| i % 3 != 0,
            |i| i % 2 == 0 || i == 20,
            |_| false,
        ];
        for later in patterns {
            let (w, middle) = mixed_bucket(later);
            // By definition: tick 3's entries in order, the removed survivor, bucket 5's, the rest.
            let due = |i: u32, tick: u64| (i, tick * MS + u64::from(i));
            let removed = (20..40u32).find(|&i| later(i));
            let mut by_definition: Vec<_> =
                (0..40).filter(|&i| !later(i)).map(|i| due(i, 3)).collect();
            by_definition.extend(removed.map(|i| (i, 0)).into_iter().chain([(1000, 5 * MS)]));
            let rest = (0..40).filter(|&i| later(i) && Some(i) != removed);
            by_definition.extend(rest.map(|i| due(i, 11)).chain([due(500, 11)]));
            assert_eq!(expire_then_the_rest(w, middle), by_definition);
        }
    }

    /// A wheel of 2^30 buckets allocates bucket pages only where entries land, fires them as
    /// any wheel does, and frees the pages on a drain; a wheel of a page or less is whole.
    #[test]
    fn a_largest_wheel_allocates_the_pages_of_its_buckets_as_entries_land() {
        for len in [1, 8, 512, 1 << BUCKET_PAGE_BITS] {
            let w: Wheel<()> = Wheel::new(MS, len);
            let whole = len * std::mem::size_of::<Bucket>();
            assert_eq!(w.buckets.allocated_bytes(), whole, "{len} buckets");
        }
        let mut w = Wheel::new(MS, 1 << 30);
        assert_eq!(w.buckets.allocated_bytes(), 0);
        let page_bytes = (1 << BUCKET_PAGE_BITS) * std::mem::size_of::<Bucket>();
        let far = (1 << 29) + 7;
        for (item, tick) in [("near", 3), ("far", far), ("near too", 5)] {
            w.insert(item, tick * MS, 0);
        }
        assert_eq!(w.buckets.allocated_bytes(), 2 * page_bytes);
        assert_eq!(w.next_fire_tick(0), Some(3));
        // Searched `SEARCH_BUCKETS` buckets at a time: the ticks between have no work.
        let fired = run_to_empty(&mut w, 0).1;
        assert_eq!(fired, [(3, "near"), (5, "near too"), (far, "far")]);
        assert_eq!((w.len(), w.next_fire_tick(far)), (0, None));
        // An empty bucket whose page never came is read as empty, not allocated; pages are kept.
        assert_eq!(expire_ticks(&mut w, [far + 1]), []);
        assert_eq!(w.buckets.allocated_bytes(), 2 * page_bytes);
        w.insert("again", 9 * MS + far * MS, far);
        assert_eq!(w.drain().len(), 1);
        assert_eq!(w.buckets.allocated_bytes(), 0);
        assert!(w.occupied.iter().all(|&word| word == 0));
    }

    /// Regression: on the largest wheel, with one entry far ahead, a search for the next fire
    /// tick read the whole bitmap (2^24 words) and a worker fell behind. A search reads at most
    /// `SEARCH_BUCKETS` buckets and answers the first tick past them; the entry fires on time.
    #[test]
    fn a_search_for_the_next_fire_tick_on_the_largest_wheel_is_bounded() {
        let mut w = Wheel::new(MS, 1 << 30);
        let (s, due) = (SEARCH_BUCKETS, 3 * SEARCH_BUCKETS + 5);
        w.insert("far ahead", due * MS, 0);
        assert_eq!(w.next_fire_tick(0), Some(s));
        let (visits, fired) = run_to_empty(&mut w, 0);
        assert_eq!(fired, [(due, "far ahead")]);
        assert_eq!(visits, [s, 2 * s + 1, 3 * s + 2, due]);
    }

    /// Regression (the `wheeltimer` crate): of two entries a round apart in one bucket, both
    /// fire. The bucket is the fire tick masked; the rounds follow.
    #[test]
    fn same_bucket_one_round_apart_both_fire() {
        let mut w = Wheel::new(10 * MS, 8);
        // 55 ms: tick 5, bucket 5; 135 ms: tick 13, bucket 5 a round on.
        assert_eq!(w.remaining_rounds(55 * MS, 0), 0);
        assert_eq!(w.remaining_rounds(135 * MS, 0), 1);
        assert_eq!(w.remaining_rounds(135 * MS, 5), 1);
        assert_eq!(w.remaining_rounds(135 * MS, 13), 0);
        assert_eq!(w.remaining_rounds(5 * MS, 9), 0, "past deadlines: none");
        w.insert("a", 55 * MS, 0);
        w.insert("b", 135 * MS, 0);
        assert_eq!(expire_ticks(&mut w, 0..20), [(5, "a"), (13, "b")]);
        assert_eq!(w.len(), 0);
    }

    /// An entry placed past its deadline goes into the bucket of the tick it is placed on: a
    /// removal finds it there (either of two), and it fires there.
    #[test]
    fn past_deadline_goes_into_current_bucket() {
        let mut w = Wheel::new(10 * MS, 8);
        let (a, b) = (w.insert(2, 0, 5), w.insert(3, 0, 5));
        assert_eq!(w.remove(b).0, 3);
        assert_eq!(w.remove(a).0, 2);
        assert_eq!((w.len(), w.next_fire_tick(5)), (0, None));
        w.insert(1, 3 * MS, 6);
        assert_eq!(w.next_fire_tick(6), Some(6));
        assert_eq!(expire_ticks(&mut w, [6]), [(6, 1)]);
    }

    #[test]
    fn remove_from_middle_head_and_tail_keeps_order() {
        let mut w = Wheel::new(MS, 4);
        let keys: Vec<u32> = (0..5).map(|i| w.insert(i, 2 * MS, 0)).collect();
        for i in [2, 0, 4] {
            assert_eq!(w.remove(keys[i]).0, i);
        }
        assert_eq!(expire_ticks(&mut w, [2]), [(2, 1), (2, 3)]);
        assert_eq!(w.next_fire_tick(3), None);
    }

    #[test]
    fn next_fire_tick_skips_rounds_and_wraps() {
        let mut w = Wheel::new(MS, 512);
        w.insert((), 700 * MS, 0); // bucket 188, one round
        assert_eq!(w.next_fire_tick(0), Some(700));
        w.insert((), 600 * MS, 400); // bucket 88, behind the start: wraps
        assert_eq!(w.next_fire_tick(400), Some(600));
        assert_eq!(w.next_fire_tick(601), Some(700));
        // A wheel smaller than a bitmap word.
        let mut w = Wheel::new(MS, 4);
        w.insert((), 9 * MS, 2); // round 2, past the horizon (round 1): a far slot
        assert_eq!(w.next_fire_tick(2), Some(4), "moves down as round 1 starts");
        assert_eq!(expire_ticks(&mut w, [4]), [], "not due");
        assert_eq!(w.next_fire_tick(5), Some(9));
        assert_eq!(w.next_fire_tick(6), Some(9));
    }

    /// A timeout thousands of rounds away costs the worker one visit per far level it moves
    /// down (here three), not one per round, and fires on its own tick.
    #[test]
    fn a_far_entry_moves_down_a_few_times_and_fires_on_its_tick() {
        let mut w = Wheel::new(MS, 512);
        w.insert("hour", 3_600_000 * MS, 0); // round 7031
        let (visits, fired) = run_to_empty(&mut w, 0);
        assert_eq!(fired, [(3_600_000, "hour")]);
        // Down from level 2 when round 4096 nears, from level 1 when round 6976 does, into its
        // bucket at the start of the round before its own, then due.
        assert_eq!(visits, [4095 * 512, 6975 * 512, 7030 * 512, 3_600_000]);
        // An empty wheel keeps no far slots.
        assert!(w.far.iter().all(|level| level.is_empty()));
    }

    /// Far entries removed anywhere in their slot's list leave the others in order, on time.
    #[test]
    fn far_entries_can_be_removed_anywhere_in_their_slot() {
        let mut w = Wheel::new(MS, 4);
        // Rounds 100 to 103, five entries each: level 1 slots, then level 0.
        let fire = |i: u64| 400 + (i % 4) * 4 + i / 4 % 4;
        let keys: Vec<u32> = (0..20u64).map(|i| w.insert(i, fire(i) * MS, 0)).collect();
        let mut expected = vec![];
        for (i, &key) in (0..).zip(&keys) {
            if key % 3 == 1 {
                w.remove(key);
            } else {
                expected.push((fire(i), i));
            }
        }
        expected.sort();
        assert_eq!(run_to_empty(&mut w, 0).1, expected);
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn deadline_guard_holds_when_now_lags() {
        let mut w = Wheel::new(10 * MS, 8);
        w.insert((), 55 * MS, 0);
        let mut n = 0;
        w.expire(5, 54 * MS, |_, _, _| n += 1);
        assert_eq!(n, 0, "not before the deadline");
        w.expire(5, 55 * MS, |_, _, _| n += 1);
        assert_eq!(n, 1);
    }

    #[test]
    fn next_key_is_what_insert_returns() {
        let mut w = Wheel::new(MS, 8);
        for i in 0..4 {
            let k = w.next_key();
            assert_eq!(w.insert(i, 100 * MS, 0), k);
        }
        w.remove(1);
        let k = w.next_key();
        assert_eq!(k, 1, "a freed slot is reused first");
        assert_eq!(w.insert(9, 100 * MS, 0), k);
    }

    /// A key not handed out (a live one, one past the next) panics before the wheel changes:
    /// its entries fire as before.
    #[test]
    fn a_key_not_handed_out_panics_before_the_wheel_changes() {
        let mut w = Wheel::new(MS, 8);
        let a = w.insert('a', 3 * MS, 0);
        for wrong in [a, w.next_key_in(0) + 1] {
            let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                w.insert_at(wrong, 'x', 3 * MS, 0);
            }));
            assert!(refused.is_err(), "key {wrong} accepted");
        }
        w.insert('b', 3 * MS, 0);
        assert_eq!(expire_ticks(&mut w, 0..5), [(3, 'a'), (3, 'b')]);
        assert_eq!(w.len(), 0);
    }

    /// Entries on several slab pages keep their items and links: lists run across pages,
    /// removals relink across pages, freed slots are reused, an emptied wheel frees its pages.
    #[test]
    fn entries_across_slab_pages_keep_links_and_items() {
        let mut w = Wheel::new(MS, 8);
        let n = 3 * PAGE as u64 + 5;
        // Eight buckets, so each bucket's list alternates between pages.
        let keys: Vec<u32> = (0..n).map(|i| w.insert(i, (i % 8) * MS, 0)).collect();
        // The first page grew to exactly a page, the others came whole.
        assert_eq!(w.nodes.capacity(), 4 * PAGE);
        for (i, &k) in (0..).zip(&keys).filter(|(i, _)| i % 3 == 0) {
            assert_eq!(w.remove(k).0, i);
        }
        // Freed slots are reused before the slab grows, last freed first.
        let last_freed = keys[(n as usize - 1) / 3 * 3];
        assert_eq!(w.insert(n, 7 * MS, 0), last_freed);
        assert_eq!(w.nodes.capacity(), 4 * PAGE);
        let mut fired = expire_ticks(&mut w, 0..8);
        let mut expected: Vec<(u64, u64)> = (0..n)
            .filter(|i| i % 3 != 0)
            .map(|i| (i % 8, i))
            .chain([(7, n)])
            .collect();
        expected.sort();
        fired.sort();
        assert_eq!(fired, expected, "each entry fires once, on its tick");
        assert_eq!(w.len(), 0);
        assert_eq!(w.nodes.capacity(), 0, "an empty wheel keeps no page");
    }

    /// A sparse wheel's trim costs its slots at `TRIM_NANOS_PER_SLOT`, and is looked at only
    /// while it holds a few pages.
    #[test]
    fn a_trim_is_priced_by_slot_and_only_for_a_few_pages() {
        let mut w = Wheel::new(1_000_000, 512);
        let keys: Vec<u32> = (0..4 * PAGE as u32)
            .map(|i| w.insert(i, 5_000_000, 0))
            .collect();
        assert_eq!(w.trim_cost(), None, "full: nothing to give back");
        for &key in &keys[1..] {
            w.remove(key);
        }
        let slots = w.nodes.len() as u64;
        assert_eq!(w.trim_cost(), Some(slots * TRIM_NANOS_PER_SLOT));
        assert_eq!(w.trim(), 3, "the pages past the first");
        assert_eq!(w.remove(keys[0]).0, 0);
        assert_eq!(
            w.trim_cost(),
            None,
            "one page: below the least a trim looks at"
        );
    }

    #[test]
    fn drain_returns_everything() {
        let mut w = Wheel::new(MS, 8);
        for i in 0..20u64 {
            w.insert(i, i * 3 * MS, 0);
        }
        let mut all: Vec<u64> = w.drain();
        all.sort();
        assert_eq!(all, (0..20).collect::<Vec<_>>());
        assert_eq!(w.len(), 0);
        assert_eq!(w.next_fire_tick(0), None, "no bucket left marked occupied");
        // The drained wheel works as a new one.
        w.insert(100, 5 * MS, 0);
        assert_eq!(w.next_fire_tick(0), Some(5));
        assert_eq!(expire_ticks(&mut w, 0..8), [(5, 100)]);
    }
}
