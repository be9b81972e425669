//! The far slots, where an entry waits while its round is past the horizon (`wheel` docs, "Far
//! timeouts wait outside the buckets"; `docs/performance.md`, "Far slots"). Owns the far
//! levels' arithmetic, the cascade down a level or into a bucket as the horizon advances, and
//! the lookups of the next far slot to move or peek at. Touches nothing of the crate.

use super::{Wheel, EMPTY_LIST, NO_INDEX};

/// Bits of a round number per far level (64 slots a level).
pub(super) const LEVEL_BITS: u32 = 6;
pub(super) const LEVEL_SLOTS: usize = 1 << LEVEL_BITS;
/// Far levels enough for any `u64` round (and the horizon one past it).
pub(super) const FAR_LEVELS: usize = 64usize.div_ceil(LEVEL_BITS as usize);

impl<T> Wheel<T> {
    /// [`Wheel::push_back`] past the horizon: `key` becomes the tail of `round`'s far slot (the
    /// level's slots allocated with its first entry); returns the old tail.
    #[inline]
    pub(super) fn push_back_far(&mut self, key: u32, round: u64) -> u32 {
        let (level, slot) = self.far_slot(round);
        let lists = &mut self.far[level];
        if lists.is_empty() {
            *lists = vec![EMPTY_LIST; LEVEL_SLOTS].into_boxed_slice();
        }
        let list = &mut lists[slot];
        let tail = std::mem::replace(&mut list.tail, key);
        if tail == NO_INDEX {
            list.head = key;
            self.far_occupied[level] |= 1 << slot;
        }
        tail
    }

    /// The list index of `round`'s far slot, relative to the current horizon.
    #[inline]
    pub(super) fn far_index(&self, round: u64) -> usize {
        let (level, slot) = self.far_slot(round);
        self.buckets.len() + level * LEVEL_SLOTS + slot
    }

    #[inline]
    pub(super) fn far_slot(&self, round: u64) -> (usize, usize) {
        debug_assert!(round > self.horizon);
        // The level of the highest base-64 digit in which the round differs from the horizon.
        let differs = (self.horizon ^ round) | (LEVEL_SLOTS as u64 - 1);
        let level = ((63 - differs.leading_zeros()) / LEVEL_BITS) as usize;
        let slot = (round >> (LEVEL_BITS * level as u32)) as usize & (LEVEL_SLOTS - 1);
        (level, slot)
    }

    /// Drops every far slot (the wheel is empty, or drained).
    pub(super) fn clear_far(&mut self) {
        self.far = std::array::from_fn(|_| Box::default());
        self.far_occupied = [0; FAR_LEVELS];
    }

    /// Moves the horizon to the round after `tick`'s, moving far entries down on the way.
    #[inline]
    pub(super) fn catch_up(&mut self, tick: u64) {
        let target = (tick >> self.round_shift).saturating_add(1);
        if self.horizon < target {
            self.advance_horizon(target);
        }
    }

    fn advance_horizon(&mut self, target: u64) {
        while self.horizon < target {
            match self.next_cascade_round() {
                Some(round) if round <= target => {
                    self.horizon = round;
                    self.cascade(round);
                }
                // No far slot starts before the target: every far entry keeps its place.
                _ => self.horizon = target,
            }
        }
    }

    /// The horizon has reached `round`: each far slot starting there moves its entries, in
    /// order, down a level or into their bucket. Nothing lands in a slot starting at `round` (it
    /// would differ from the horizon in a lower digit), so no slot is visited twice.
    fn cascade(&mut self, round: u64) {
        for level in (0..FAR_LEVELS).rev() {
            let shift = LEVEL_BITS * level as u32;
            if round & ((1 << shift) - 1) != 0 {
                continue;
            }
            let slot = (round >> shift) as usize & (LEVEL_SLOTS - 1);
            let b = self.buckets.len() + level * LEVEL_SLOTS + slot;
            if self.far_occupied[level] & (1 << slot) == 0 {
                continue;
            }
            let mut cursor = self.list(b).head;
            *self.list_mut(b) = EMPTY_LIST;
            self.clear_occupied(b);
            while cursor != NO_INDEX {
                let node = &self.nodes[cursor];
                let (next, fire) = (node.next, self.calculated(node.deadline));
                self.link(cursor, fire);
                cursor = next;
            }
        }
    }

    /// The next round at which a far slot's range starts, past the horizon, if any is occupied.
    pub(super) fn next_cascade_round(&self) -> Option<u64> {
        self.occupied_far_starts().map(|s| s.0).min()
    }

    /// Each occupied level's first occupied far slot: the round its range starts at, and its
    /// list index.
    fn occupied_far_starts(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        let occupied = self.far_occupied.iter().enumerate();
        occupied.filter(|w| *w.1 != 0).map(|(level, &word)| {
            let shift = LEVEL_BITS * level as u32;
            let digit = (self.horizon >> shift) & (LEVEL_SLOTS as u64 - 1);
            // Every occupied slot is ahead of the horizon's digit (an entry's round differs
            // from the horizon first at its level, upwards).
            debug_assert_eq!(word & (u64::MAX >> (63 - digit)), 0);
            let slot = word.trailing_zeros() as usize;
            let group = self
                .horizon
                .checked_shr(shift + LEVEL_BITS)
                .map_or(0, |g| g << (shift + LEVEL_BITS));
            let start = group + ((slot as u64) << shift);
            (start, self.buckets.len() + level * LEVEL_SLOTS + slot)
        })
    }
}
