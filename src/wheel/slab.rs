//! The crate's slab ([`Slab`], and the [`Vacancy`] a slot type gives it): values under `u32`
//! keys, in pages that never move (`docs/performance.md`, "Paged wheel slab"), free slots
//! linked through the slots themselves. Holds the wheel's nodes and the worker's chunk table.
//! Touches nothing else.
//!
//! Memory comes back when the owner asks: all of it by [`Slab::release`] or [`Slab::drain`]
//! (the wheel's, when it empties), and every page that holds no value by [`Slab::trim`]
//! (lanes; the worker's, idle after a burst: `docs/performance.md`, "Trim after a burst").

/// The crate's one "none" for keys, slots and ids (slab keys, chunk ids, a cell's wheel key).
pub(crate) const NO_INDEX: u32 = u32::MAX;

/// Pages a slab of lanes numbers at most: with pages of 2^10 nodes, keys stay below 2^27, the
/// wheel key's width. A lane past it takes another lane's free slot or room.
const LANE_PAGES: usize = 1 << 17;

/// `log2` of the default slots per page: 1024 (32 KB of 32-byte wheel nodes, the most a slab
/// holds beyond its high-water mark). Capacities double from 4 up to exactly a page.
pub(crate) const PAGE_BITS: u32 = 10;
#[cfg(test)]
pub(crate) const PAGE: usize = 1 << PAGE_BITS;

/// What a slot type tells its slab: how a free slot looks, and whether a slot is free.
pub(crate) trait Vacancy: Sized {
    /// A free slot, followed on the free list by `next` (`NO_INDEX`: none).
    fn vacant(next: u32) -> Self;
    /// The next free slot's key if this one is free; `None` if it holds a value.
    fn next_vacant(&self) -> Option<u32>;
    /// Moves this slot's value out, leaving it free and followed by `next`. A slot type may
    /// write only what marks it free.
    #[inline]
    fn vacate(&mut self, next: u32) -> Self {
        std::mem::replace(self, Self::vacant(next))
    }
}

/// Values under `u32` keys, in pages of `2^BITS` slots that never move: a growing slab neither
/// copies what it holds nor faults in twice the memory it keeps. A freed slot joins the free
/// list (last freed, first reused), written alone: nothing allocates as values leave.
///
/// A slab hands its keys out itself ([`Slab::insert`]) or takes its owner's ([`Slab::put`]),
/// one way only (taking its owner's, it still links the slots `remove` frees, which `put` may
/// overwrite: it never reads that list). Handing out its own, it may keep `LANES` lanes (a
/// power of two; [`Slab::next_key_in`]): page `p` is lane `p % LANES`'s, each lane has its own
/// free list, and a key names its lane (the wheel keeps a lane per task size class, so that a
/// class's task words span its pages only). [`Slab::release`] or [`Slab::drain`] alone empty a
/// slab of more than one lane.
#[derive(Debug)]
pub(crate) struct Slab<S, const BITS: u32 = PAGE_BITS, const LANES: usize = 1> {
    /// Pages by number; with lanes, the pages of lanes not yet grown that far, or given back
    /// by a trim, are empty.
    pages: Vec<Vec<S>>,
    /// Slots handed out so far (live or free).
    len: usize,
    live: usize,
    /// Per lane, the first free slot, or `NO_INDEX`.
    free: [u32; LANES],
    /// With more than one lane, per lane, its last page, where new slots go (`NO_INDEX`: none).
    growing: [u32; LANES],
    /// Per lane, the pages below its last that a trim gave back, lowest last: each is made
    /// again, all free, before the lane grows past its last page, so that trims never make
    /// the keys climb.
    holes: [Vec<u32>; LANES],
}

impl<S: Vacancy, const BITS: u32, const LANES: usize> Slab<S, BITS, LANES> {
    const PAGE: usize = {
        assert!(BITS >= 2 && BITS < 32 && LANES.is_power_of_two() && LANES <= 256);
        1 << BITS
    };

    pub(crate) const fn new() -> Self {
        Slab {
            pages: Vec::new(),
            len: 0,
            live: 0,
            free: [NO_INDEX; LANES],
            growing: [NO_INDEX; LANES],
            holes: [const { Vec::new() }; LANES],
        }
    }

    /// Slots handed out so far (live or free); with one lane, the keys below this one.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    #[inline]
    pub(crate) fn next_key(&self) -> u32 {
        self.next_key_in(0)
    }

    /// The key of `lane`'s next value ([`Slab::insert_at`]): the slot the lane freed last, the
    /// next of its last page, or the first of its next page (a page a trim gave back, else
    /// one past its last); past [`LANE_PAGES`], another lane's free slot or room.
    #[inline]
    pub(crate) fn next_key_in(&self, lane: usize) -> u32 {
        if self.free[lane] != NO_INDEX {
            return self.free[lane];
        }
        if LANES == 1 {
            return u32::try_from(self.len).unwrap_or(NO_INDEX);
        }
        if let Some(key) = self.room(lane) {
            return key;
        }
        self.new_page_key(lane)
            .or_else(|| self.other_lanes_key())
            .unwrap_or(NO_INDEX)
    }

    /// The next slot of `lane`'s last page, if it has room.
    #[inline]
    fn room(&self, lane: usize) -> Option<u32> {
        let p = self.growing[lane] as usize;
        let page = self.pages.get(p)?;
        (page.len() < Self::PAGE).then(|| (p << BITS | page.len()) as u32)
    }

    /// The first key of `lane`'s next page, if it is below [`LANE_PAGES`]: its lowest hole, or
    /// the page after its last.
    #[inline]
    fn new_page_key(&self, lane: usize) -> Option<u32> {
        let p = match (self.holes[lane].last(), self.growing[lane]) {
            (Some(&hole), _) => hole as usize,
            (None, NO_INDEX) => lane,
            (None, last) => last as usize + LANES,
        };
        (p < LANE_PAGES).then(|| (p << BITS) as u32)
    }

    /// A free slot, room, or new page of any lane, for a lane out of keys of its own.
    #[cold]
    fn other_lanes_key(&self) -> Option<u32> {
        (0..LANES).find_map(|l| {
            Some(self.free[l])
                .filter(|&key| key != NO_INDEX)
                .or_else(|| self.room(l))
                .or_else(|| self.new_page_key(l))
        })
    }

    #[inline]
    fn lane_of(key: u32) -> usize {
        (key >> BITS) as usize & (LANES - 1)
    }

    /// # Panics
    /// When every `u32` but `NO_INDEX` is a key already.
    #[inline]
    pub(crate) fn insert(&mut self, value: S) -> u32 {
        let key = self.next_key();
        self.insert_at(key, value);
        key
    }

    /// [`Slab::insert`] in lane `lane` (below `LANES`).
    #[cfg(test)]
    pub(crate) fn insert_in(&mut self, lane: usize, value: S) -> u32 {
        let key = self.next_key_in(lane);
        self.insert_at(key, value);
        key
    }

    /// Stores `value` under `key`: the [`Slab::next_key_in`] of a lane, nothing stored or
    /// removed since. Panics otherwise, or when `key` is `NO_INDEX` (out of keys), before
    /// anything changes.
    #[inline]
    pub(crate) fn insert_at(&mut self, key: u32, value: S) {
        assert!(key != NO_INDEX, "slab: out of keys");
        let owner = Self::lane_of(key);
        if self.free[owner] == key {
            // A free slot: the common case.
            return self.take_free(owner, value);
        }
        if LANES == 1 {
            assert!(key as usize == self.len, "slab: {key} is not the next key");
            self.push(value);
        } else {
            self.push_in(owner, key, value);
        }
        // Counted once stored: a panic above leaves the count as it was.
        self.live += 1;
    }

    /// Stores `value` in the head of `lane`'s free list (there is one).
    #[inline]
    fn take_free(&mut self, lane: usize, value: S) {
        let key = self.free[lane];
        let slot = &mut self[key];
        let next = slot
            .next_vacant()
            .expect("slab: the free list's head is free");
        *slot = value;
        self.free[lane] = next;
        self.live += 1;
    }

    /// # Panics
    /// If `key` holds no value (before anything changes).
    #[inline]
    pub(crate) fn remove(&mut self, key: u32) -> S {
        self.remove_if(key, |_| true)
            .unwrap_or_else(|| panic!("slab: key {key} holds no value"))
    }

    /// Removes the value under `key` if there is one and `wanted` says so, looking the slot up
    /// once: the value, or `None` (nothing changes).
    #[inline]
    pub(crate) fn remove_if(&mut self, key: u32, wanted: impl FnOnce(&S) -> bool) -> Option<S> {
        let lane = Self::lane_of(key);
        let next = self.free[lane];
        let key_usize = key as usize;
        let slot = self
            .pages
            .get_mut(key_usize >> BITS)?
            .get_mut(key_usize & (Self::PAGE - 1))?;
        if slot.next_vacant().is_some() || !wanted(slot) {
            return None;
        }
        let value = slot.vacate(next);
        self.free[lane] = key;
        self.live -= 1;
        Some(value)
    }

    #[inline]
    fn push(&mut self, value: S) {
        let p = self.len >> BITS;
        if p == self.pages.len() {
            self.add_page();
        }
        let page = &mut self.pages[p];
        if page.len() == page.capacity() {
            Self::grow_page(page);
        }
        page.push(value);
        self.len += 1;
    }

    /// Doubles a full page short of `PAGE` slots (at least 4), to at most `PAGE`: never past
    /// it, into slots that no key reaches.
    #[cold]
    fn grow_page(page: &mut Vec<S>) {
        let room = page.capacity().saturating_mul(2).clamp(4, Self::PAGE);
        page.reserve_exact(room - page.len());
    }

    /// Makes the slot `key` ([`Slab::next_key_in`] of `lane`, which holds no free slot) with
    /// `value`: the next of the lane's last page, or the first of its next page.
    #[inline]
    fn push_in(&mut self, lane: usize, key: u32, value: S) {
        let (p, i) = ((key >> BITS) as usize, key as usize & (Self::PAGE - 1));
        if self.growing[lane] as usize != p {
            // A new page: once per page, never on a page's fill.
            if self.holes[lane].last() == Some(&(p as u32)) && i == 0 {
                return self.fill_hole(lane, p, value);
            }
            self.add_lane_page(lane, p, i);
        }
        let page = &mut self.pages[p];
        assert!(page.len() == i, "slab: {key} is not the next key");
        page.push(value);
        self.len += 1;
    }

    /// Makes `lane`'s lowest hole, page `p`, again: `value` in its first slot, the others
    /// free, lowest first, at the head of the lane's free list (empty: the lane had no free
    /// slot nor room, or its next key would not be this page's).
    #[cold]
    fn fill_hole(&mut self, lane: usize, p: usize, value: S) {
        debug_assert_eq!(self.free[lane], NO_INDEX);
        let first = (p << BITS) as u32;
        let mut page = Vec::with_capacity(Self::PAGE);
        page.push(value);
        page.extend((1..Self::PAGE as u32).map(|i| S::vacant(first + i + 1)));
        if let Some(last) = page.last_mut() {
            *last = S::vacant(NO_INDEX);
        }
        self.pages[p] = page;
        self.holes[lane].pop();
        self.free[lane] = first + 1;
        self.len += Self::PAGE;
    }

    /// A page for a one-lane slab's next slots: the first doubles as it fills (4, 8, ... up
    /// to a page), so that a few values hold a few slots; the later ones come whole.
    #[cold]
    fn add_page(&mut self) {
        let capacity = if self.pages.is_empty() { 0 } else { Self::PAGE };
        self.pages.push(Vec::with_capacity(capacity));
    }

    /// Page `p`, `lane`'s next, made (as [`Slab::add_page`] makes them) and its last; `i`, the
    /// slot of it to be filled first.
    #[cold]
    fn add_lane_page(&mut self, lane: usize, p: usize, i: usize) {
        assert!(
            i == 0
                && self.room(lane).is_none()
                && self.new_page_key(lane) == Some((p << BITS) as u32),
            "slab: page {p} is not lane {lane}'s next"
        );
        debug_assert!(self.pages.get(p).is_none_or(|page| page.capacity() == 0));
        if self.pages.len() <= p {
            self.pages.resize_with(p + 1, Vec::new);
        }
        if self.growing[lane] != NO_INDEX {
            self.pages[p] = Vec::with_capacity(Self::PAGE);
        }
        self.growing[lane] = p as u32;
    }

    /// The slot under `key`, if the slab has one there (free or not).
    #[inline]
    pub(crate) fn get(&self, key: u32) -> Option<&S> {
        let key = key as usize;
        self.pages.get(key >> BITS)?.get(key & (Self::PAGE - 1))
    }

    /// Every slot, in key order.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = &S> {
        self.pages.iter().flatten()
    }

    /// Empties the slab and gives its memory back; the values are dropped in key order (as
    /// the slab's `Drop`).
    pub(crate) fn release(&mut self) {
        // Emptied first, so that a value's drop that panics leaves an empty slab behind.
        drop(std::mem::replace(self, Slab::new()));
    }

    /// Empties the slab and gives its memory back; the values, in key order.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = S> {
        let pages = std::mem::take(&mut self.pages);
        *self = Slab::new();
        pages
            .into_iter()
            .flatten()
            .filter(|slot| slot.next_vacant().is_none())
    }

    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.pages.iter().map(Vec::capacity).sum()
    }

    /// Gives back each page that holds no value,
    /// and each lane's free list relinked lowest key first, so that new values fill its low
    /// pages and its high ones empty for the next trim. Keys stay valid. O(slots). Returns the
    /// pages given back.
    pub(crate) fn trim(&mut self) -> usize {
        debug_assert!(LANES > 1, "a one-lane slab is not trimmed");
        let given_back = (0..LANES).map(|lane| self.trim_lane(lane)).sum();
        let used = self.growing.iter().filter(|&&p| p != NO_INDEX).max();
        self.pages.truncate(used.map_or(0, |&p| p as usize + 1));
        self.pages.shrink_to_fit();
        given_back
    }

    /// Gives back `lane`'s pages that hold no value and relinks its free list. Its last page
    /// becomes the last it keeps (none: `NO_INDEX`); those given back below it are its holes,
    /// made again whole before it grows past its last (`fill_hole`), so that a lane's keys stay
    /// as low as its values let them. The pages below the last stay full or holes, as a lane
    /// starts a page only when its last is full.
    fn trim_lane(&mut self, lane: usize) -> usize {
        self.free[lane] = NO_INDEX;
        self.holes[lane].clear();
        let last = std::mem::replace(&mut self.growing[lane], NO_INDEX);
        if last == NO_INDEX {
            return 0;
        }
        let mut given_back = 0;
        for p in (lane..last as usize + 1).step_by(LANES).rev() {
            let page = &mut self.pages[p];
            if page.iter().all(|slot| slot.next_vacant().is_some()) {
                given_back += usize::from(page.capacity() > 0);
                self.len -= page.len();
                *page = Vec::new();
                if self.growing[lane] != NO_INDEX {
                    // Below a page kept: a hole, pushed in descending order.
                    self.holes[lane].push(p as u32);
                }
                continue;
            }
            if self.growing[lane] == NO_INDEX {
                self.growing[lane] = p as u32;
            }
            self.relink_page(lane, p);
        }
        given_back
    }

    /// Puts page `p`'s free slots at the head of `lane`'s free list, lowest key first.
    fn relink_page(&mut self, lane: usize, p: usize) {
        for i in (0..self.pages[p].len()).rev() {
            let key = (p << BITS | i) as u32;
            if self[key].next_vacant().is_some() {
                self[key] = S::vacant(self.free[lane]);
                self.free[lane] = key;
            }
        }
    }
}

impl<S, const BITS: u32, const LANES: usize> Drop for Slab<S, BITS, LANES> {
    /// Drops every value, in key order, even if some drops panic; the first panic then goes on
    /// (dropped in one go, a second panicking value would abort the process).
    fn drop(&mut self) {
        let pages = std::mem::take(&mut self.pages);
        if let Err(panic) = drop_each(pages.into_iter().flatten()) {
            std::panic::resume_unwind(panic);
        }
    }
}

/// Drops each item under its own catch, so that every item is dropped whatever the others'
/// drops do (user code, which may panic); the first panic, for the caller to go on with.
pub(crate) fn drop_each<T>(items: impl IntoIterator<Item = T>) -> std::thread::Result<()> {
    let mut first = Ok(());
    if !std::mem::needs_drop::<T>() {
        items.into_iter().for_each(drop);
        return first;
    }
    for item in items {
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(item)));
        match dropped {
            Err(panic) if first.is_ok() => first = Err(panic),
            // A later panic's payload is user code too: one whose `Drop` panics is leaked.
            Err(panic) => {
                let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(panic)));
                std::mem::forget(again);
            }
            Ok(()) => {}
        }
    }
    first
}

impl<S, const BITS: u32, const LANES: usize> std::ops::Index<u32> for Slab<S, BITS, LANES> {
    type Output = S;
    #[inline]
    fn index(&self, key: u32) -> &S {
        let key = key as usize;
        &self.pages[key >> BITS][key & ((1 << BITS) - 1)]
    }
}

impl<S, const BITS: u32, const LANES: usize> std::ops::IndexMut<u32> for Slab<S, BITS, LANES> {
    #[inline]
    fn index_mut(&mut self, key: u32) -> &mut S {
        let key = key as usize;
        &mut self.pages[key >> BITS][key & ((1 << BITS) - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Clone)]
    enum Slot {
        Free(u32),
        Value(u64),
    }

    impl Vacancy for Slot {
        fn vacant(next: u32) -> Self {
            Slot::Free(next)
        }
        fn next_vacant(&self) -> Option<u32> {
            match *self {
                Slot::Free(next) => Some(next),
                Slot::Value(_) => None,
            }
        }
    }

    #[test]
    fn the_last_freed_slot_is_reused_first_across_pages() {
        let mut slab: Slab<Slot> = Slab::new();
        let keys: Vec<u32> = (0..2 * PAGE as u64 + 3)
            .map(|v| slab.insert(Slot::Value(v)))
            .collect();
        assert_eq!(keys[PAGE + 1], PAGE as u32 + 1);
        assert_eq!(slab.pages.len(), 3);
        assert_eq!(slab.remove(5), Slot::Value(5));
        assert_eq!(slab.remove(PAGE as u32 + 7), Slot::Value(PAGE as u64 + 7));
        assert_eq!(slab.live(), 2 * PAGE + 1);
        assert_eq!(slab.next_key(), PAGE as u32 + 7);
        assert_eq!(slab.insert(Slot::Value(100)), PAGE as u32 + 7);
        assert_eq!(slab.insert(Slot::Value(101)), 5);
        assert_eq!(
            slab.insert(Slot::Value(102)),
            2 * PAGE as u32 + 3,
            "then at the end"
        );
        assert_eq!(slab[5], Slot::Value(101));
    }

    /// `remove_if` takes a value only if it is there and wanted; otherwise nothing changes: not
    /// the count, not the free list.
    #[test]
    fn remove_if_takes_only_a_wanted_value() {
        let mut slab: Slab<Slot> = Slab::new();
        let (a, b) = (slab.insert(Slot::Value(1)), slab.insert(Slot::Value(2)));
        slab.remove(b);
        let unwanted = |slot: &Slot| *slot != Slot::Value(1);
        assert_eq!(slab.remove_if(a, unwanted), None, "not wanted");
        assert_eq!(slab.remove_if(b, |_| true), None, "a free slot");
        assert_eq!(
            slab.remove_if(PAGE as u32 * 5, |_| true),
            None,
            "past the pages"
        );
        assert_eq!((slab.live(), slab.next_key()), (1, b), "nothing changed");
        assert_eq!(slab.remove_if(a, |_| true), Some(Slot::Value(1)));
        assert_eq!(
            (slab.live(), slab.next_key()),
            (0, a),
            "freed last, reused first"
        );
    }

    /// Each lane's values are on pages of that lane, each lane reuses its own free slots, and
    /// a lane's first page grows as needed.
    #[test]
    fn lanes_keep_their_values_on_pages_of_their_own() {
        let mut slab: Slab<Slot, 2, 4> = Slab::new();
        let mut keys = [Vec::new(), Vec::new(), Vec::new()];
        for v in 0..30u64 {
            let lane = (v % 3) as usize;
            assert_eq!(slab.next_key_in(lane), {
                let key = slab.insert_in(lane, Slot::Value(v));
                keys[lane].push(key);
                key
            });
        }
        for (lane, keys) in keys.iter().enumerate() {
            for &key in keys {
                assert_eq!(
                    (key >> 2) % 4,
                    lane as u32,
                    "key {key}: page p is lane p % 4's"
                );
            }
        }
        assert_eq!(slab.live(), 30);
        let (k1, k2) = (keys[1][3], keys[2][5]);
        assert_eq!(slab.remove(k1), Slot::Value(10));
        assert_eq!(slab.remove(k2), Slot::Value(17));
        assert_eq!(
            slab.next_key_in(0),
            keys[0][9] + 1,
            "lane 0 has no free slot"
        );
        assert_eq!(slab.insert_in(2, Slot::Value(100)), k2);
        assert_eq!(slab.insert_in(1, Slot::Value(101)), k1);
        assert_eq!(slab[k2], Slot::Value(100));
        let values: Vec<Slot> = slab.drain().collect();
        assert_eq!(values.len(), 30);
        assert_eq!((slab.live(), slab.len()), (0, 0));
    }

    /// A lane out of pages of its own takes another lane's, and every key stays below the
    /// bound until each slot of each page is taken.
    #[test]
    fn a_lane_out_of_pages_takes_another_lanes() {
        let mut slab: Slab<Slot, 2, 4> = Slab::new();
        let own = (LANE_PAGES / 4) << 2;
        for v in 0..own as u64 {
            let key = slab.insert_in(0, Slot::Value(v));
            assert_eq!((key >> 2) % 4, 0, "key {key} on a page of lane 0");
        }
        let key = slab.insert_in(0, Slot::Value(0));
        assert_eq!(key, 4, "the first key of lane 1's first page");
        assert_eq!(slab.remove(key), Slot::Value(0));
        assert_eq!(slab.next_key_in(1), key, "freed to the lane of its page");
        assert_eq!(slab.next_key_in(0), key, "taken back by lane 0 first");
        let total = LANE_PAGES << 2;
        while slab.live() < total {
            let key = slab.insert_in(3, Slot::Value(1));
            assert!((key as usize) < total, "key {key}");
        }
        assert_eq!(slab.next_key_in(2), NO_INDEX, "out of keys");
    }

    /// Lane 1 of pages of 4 slots: pages 1, 5, 9, 13 (all but 9 full), the values `keep`
    /// left of them; lane 2 holds three values on page 2. The keys of lane 1's values.
    fn lanes_with(keep: &[u32]) -> (Slab<Slot, 2, 4>, Vec<u32>) {
        let mut slab: Slab<Slot, 2, 4> = Slab::new();
        let keys: Vec<u32> = (0..14).map(|v| slab.insert_in(1, Slot::Value(v))).collect();
        for v in 100..103 {
            slab.insert_in(2, Slot::Value(v));
        }
        for &key in keys.iter().filter(|key| !keep.contains(key)) {
            slab.remove(key);
        }
        (slab, keys)
    }

    /// Keys of a lane's free list, head first.
    fn free_list(slab: &Slab<Slot, 2, 4>, lane: usize) -> Vec<u32> {
        let mut keys = Vec::new();
        let mut key = slab.free[lane];
        while key != NO_INDEX {
            keys.push(key);
            key = slab[key].next_vacant().expect("free");
        }
        keys
    }

    /// A trim gives back every page of a lane that holds no value, at the end or below a
    /// page that does, keeps the values under their keys, and relinks the free list lowest
    /// key first; the other lanes keep theirs.
    #[test]
    fn trim_gives_back_empty_pages_and_relinks_lowest_first() {
        // Page 1 keeps key 6, page 9 key 37; pages 5 and 13 empty.
        let (mut slab, keys) = lanes_with(&[6, 37]);
        assert_eq!(keys[..5], [4, 5, 6, 7, 20]);
        assert_eq!(free_list(&slab, 1)[..3], [53, 52, 39], "last freed first");
        let lane2 = free_list(&slab, 2);
        assert_eq!(slab.trim(), 2);
        assert_eq!((slab.live(), slab.len()), (5, 4 + 4 + 3));
        assert_eq!(
            (slab[6].clone(), slab[37].clone()),
            (Slot::Value(2), Slot::Value(9))
        );
        assert_eq!(free_list(&slab, 1), [4, 5, 7, 36, 38, 39]);
        assert_eq!(free_list(&slab, 2), lane2);
        assert_eq!(slab.pages.len(), 10, "up to lane 1's last page, 9");
        assert_eq!(slab.capacity(), 4 + 4 + 4, "pages 1, 2 and 9");
        assert!(slab.get(20).is_none() && slab.get(52).is_none());
        assert_eq!(slab.holes[1], [5], "page 5, below page 9");
        // The free slots, then the hole made again (its first slot, then its free ones), and
        // only then a page past the last.
        for key in [4, 5, 7, 36, 38, 39, 20, 21, 22, 23, 52] {
            assert_eq!(slab.insert_in(1, Slot::Value(u64::from(key))), key);
        }
        assert!(slab.holes[1].is_empty());
        assert_eq!(
            slab.insert_in(2, Slot::Value(103)),
            11,
            "room on lane 2's page"
        );
        assert_eq!(slab.trim(), 0, "nothing empty");
    }

    /// A lane trimmed of every page starts again from its first page; one trimmed down to a
    /// page below a given-back one grows into that page again, first slot first.
    #[test]
    fn a_trimmed_lane_grows_again() {
        let (mut slab, _) = lanes_with(&[6]);
        assert_eq!(slab.trim(), 3, "pages 5, 9 and 13");
        assert_eq!(slab.growing[1], 1);
        assert_eq!(slab.pages.len(), 3);
        for key in [4, 5, 7, 20, 21, 22, 23, 36] {
            assert_eq!(slab.insert_in(1, Slot::Value(0)), key);
        }
        let (mut slab, _) = lanes_with(&[]);
        assert_eq!(slab.trim(), 4);
        assert_eq!((slab.live(), slab.len(), slab.growing[1]), (3, 3, NO_INDEX));
        assert_eq!(slab.insert_in(1, Slot::Value(1)), 4, "lane 1's first page");
        for v in 100..103 {
            slab.remove(8 + v as u32 - 100);
        }
        assert_eq!(slab.trim(), 1, "lane 2's page");
        assert_eq!((slab.live(), slab.len(), slab.pages.len()), (1, 1, 2));
        assert_eq!(slab.insert_in(2, Slot::Value(2)), 8);
        assert_eq!(slab.insert_in(3, Slot::Value(3)), 12);
    }

    /// Bursts that each leave a value on their last page do not make a lane's keys climb: the
    /// pages a trim gave back below it are made again, lowest first, before the lane grows.
    #[test]
    fn trims_after_bursts_with_a_survivor_on_top_keep_the_keys_low() {
        let mut slab: Slab<Slot, 2, 4> = Slab::new();
        let mut highest = 0;
        for burst in 0..20u64 {
            let keys: Vec<u32> = (0..12).map(|v| slab.insert_in(1, Slot::Value(v))).collect();
            let survivor = *keys.iter().max().expect("a burst");
            highest = highest.max(survivor);
            for &key in keys.iter().filter(|&&key| key != survivor) {
                slab.remove(key);
            }
            slab.trim();
            assert_eq!(slab.live() as u64, burst + 1, "one survivor a burst");
        }
        // 20 survivors and a burst of 12 fit in 8 pages of 4 (lane 1's: 1, 5, ... 29).
        assert!(highest < 32 * 4, "keys climbed to {highest}");
    }

    /// What the model test does to a slab of lanes.
    #[derive(Debug, Clone)]
    enum Op {
        Insert(usize),
        /// The live key at this position (mod the live count) in key order.
        Remove(usize),
        Trim,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            6 => (0..4usize).prop_map(Op::Insert),
            5 => any::<usize>().prop_map(Op::Remove),
            1 => Just(Op::Trim),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        })]

        /// Against a map: inserts, removes and trims in any order keep each value under its
        /// key and its lane, hand out no live key twice, and never let a lane's keys climb
        /// past the pages its most values at once needed (holes are made again first).
        #[test]
        fn lanes_with_trims_keep_values_and_keys_low(
            ops in proptest::collection::vec(op(), 1..300),
        ) {
            let mut slab: Slab<Slot, 2, 4> = Slab::new();
            let mut model = std::collections::BTreeMap::new();
            let (mut live, mut peak) = ([0usize; 4], [0usize; 4]);
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert(lane) => {
                        let key = slab.insert_in(lane, Slot::Value(n as u64));
                        proptest::prop_assert!(model.insert(key, n as u64).is_none());
                        proptest::prop_assert_eq!(Slab::<Slot, 2, 4>::lane_of(key), lane);
                        live[lane] += 1;
                        peak[lane] = peak[lane].max(live[lane]);
                        // The lane's pages are lane, lane + 4, ...: the key's is its `j`th.
                        let j = (key as usize >> 2) / 4;
                        proptest::prop_assert!(j <= (peak[lane] - 1) / 4, "key {} climbed", key);
                    }
                    Op::Remove(at) if !model.is_empty() => {
                        let key = *model.keys().nth(at % model.len()).unwrap();
                        let value = model.remove(&key).unwrap();
                        proptest::prop_assert_eq!(slab.remove(key), Slot::Value(value));
                        live[Slab::<Slot, 2, 4>::lane_of(key)] -= 1;
                    }
                    Op::Remove(_) => {}
                    Op::Trim => {
                        slab.trim();
                    }
                }
                proptest::prop_assert_eq!(slab.live(), model.len());
                for (&key, &value) in &model {
                    proptest::prop_assert_eq!(slab.get(key), Some(&Slot::Value(value)));
                }
            }
        }
    }

    /// A key that is not a lane's next (one holding a value, a free slot behind its list's
    /// head, one past the next, a page not the lane's next) panics before any change, in every
    /// build.
    #[test]
    fn a_key_not_handed_out_is_refused_and_changes_nothing() {
        let mut slab: Slab<Slot, 2, 4> = Slab::new();
        let keys: Vec<u32> = (0..12u64)
            .map(|v| slab.insert_in((v % 2) as usize, Slot::Value(v)))
            .collect();
        slab.remove(keys[2]);
        slab.remove(keys[4]);
        let next = slab.next_key_in(0);
        assert_eq!(next, keys[4]);
        let lane0_room = slab.next_key_in(1) - 4 * 4;
        for wrong in [keys[0], keys[2], next + 1, lane0_room + 1, 8 * 4] {
            let before = (
                slab.live(),
                slab.len(),
                slab.iter().cloned().collect::<Vec<_>>(),
            );
            let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                slab.insert_at(wrong, Slot::Value(99));
            }));
            assert!(refused.is_err(), "key {wrong} accepted");
            let after = (
                slab.live(),
                slab.len(),
                slab.iter().cloned().collect::<Vec<_>>(),
            );
            assert_eq!(before, after, "key {wrong} changed the slab");
        }
        slab.insert_at(next, Slot::Value(100));
        assert_eq!(slab[next], Slot::Value(100));
    }

    #[test]
    #[should_panic(expected = "holds no value")]
    fn removing_a_free_slot_panics() {
        let mut slab: Slab<Slot> = Slab::new();
        let key = slab.insert(Slot::Value(1));
        slab.remove(key);
        slab.remove(key);
    }

    #[test]
    fn the_first_page_grows_as_needed_and_later_pages_come_whole() {
        let mut slab: Slab<Slot> = Slab::new();
        slab.insert(Slot::Value(0));
        assert!(slab.capacity() < 16, "a few slots for a few values");
        for v in 1..=PAGE as u64 {
            slab.insert(Slot::Value(v));
        }
        assert_eq!(slab.pages.len(), 2);
        assert!(slab.pages.iter().all(|p| p.capacity() == PAGE));
    }

    /// A slab of pages of another size: the keys cross its pages the same way.
    #[test]
    fn pages_of_another_size() {
        let mut slab: Slab<Slot, 2> = Slab::new();
        let keys: Vec<u32> = (0..9).map(|v| slab.insert(Slot::Value(v))).collect();
        assert_eq!(keys, (0..9).collect::<Vec<u32>>());
        assert_eq!(slab.pages.len(), 3);
        assert_eq!(slab.remove(5), Slot::Value(5));
        assert_eq!(slab[6], Slot::Value(6));
        assert_eq!(slab.insert(Slot::Value(50)), 5);
    }
}
