//! The occupancy bitmap: a bit per non-empty bucket and far slot (`wheel` docs, "Occupancy").
//! Owns [`Wheel::clear_occupied`] (an insert sets its list's bit itself, where it links the
//! entry) and [`Wheel::next_fire_tick`]. Touches nothing of the crate.

use super::far::LEVEL_SLOTS;
use super::Wheel;

/// The most buckets whose bits one search for the next fire tick reads (4096 bitmap words).
/// A wheel of up to this many buckets is searched whole; on a larger one a search that finds
/// nothing before this many ticks answers the first tick past them, where the worker searches
/// again: a search after each tick with work stays short on a wheel of up to 2^30 buckets.
pub(super) const SEARCH_BUCKETS: u64 = 1 << 18;

impl<T> Wheel<T> {
    /// Clears list `b`'s bit: a bucket or far slot emptied.
    #[inline]
    pub(super) fn clear_occupied(&mut self, b: usize) {
        let (word, bit) = match b.checked_sub(self.buckets.len()) {
            None => (&mut self.occupied[b / 64], b % 64),
            Some(i) => (&mut self.far_occupied[i / LEVEL_SLOTS], i % LEVEL_SLOTS),
        };
        *word &= !(1 << bit);
    }

    /// The earliest tick `>= from` with work: an entry may fire, or far entries move down (done
    /// first by that tick's [`Wheel::expire`]). Every tick before `from` is processed. On a wheel
    /// of more than [`SEARCH_BUCKETS`] buckets it may be an earlier tick with no work, the
    /// first past the search, from which to search again; never a later one.
    #[inline]
    pub(crate) fn next_fire_tick(&self, from: u64) -> Option<u64> {
        self.next_fire_tick_by(from, from)
    }

    /// [`Wheel::next_fire_tick`], its search of the buckets reaching at least tick `until`: the
    /// answer is exact if no later than that. For a caller that goes on to every tick up to
    /// `until` (a turn catching up), which would otherwise search again at each answer.
    pub(crate) fn next_fire_tick_by(&self, from: u64, until: u64) -> Option<u64> {
        if self.nodes.live() == 0 {
            return None;
        }
        // A far slot's entries move down at the start of the round before the slot's first.
        let cascade = self
            .next_cascade_round()
            .map(|round| ((round - 1) << self.round_shift).max(from));
        let bucket = self.next_bucket_tick(from, until);
        match (bucket, cascade) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The earliest tick `>= from` on which an entry in a bucket may fire, or, past the buckets
    /// searched (up to `until`, and at least [`SEARCH_BUCKETS`]), the first tick past them.
    fn next_bucket_tick(&self, from: u64, until: u64) -> Option<u64> {
        let len = self.wheel_len();
        let start = from & self.mask;
        let reach = until.saturating_sub(from).saturating_add(1);
        let limit = len.min(reach.max(SEARCH_BUCKETS));
        let mut best = if limit < len {
            from.saturating_add(limit)
        } else {
            u64::MAX
        };
        // Occupied buckets in tick order: the one at offset k comes round at tick from + k, and
        // nothing in it fires earlier, so once from + k >= best we are done.
        let mut offset = 0u64;
        while offset < limit {
            let b = (start + offset) & self.mask;
            let word = self.occupied[(b / 64) as usize] >> (b % 64);
            if word == 0 {
                // Jump to the next word (or wrap to bucket 0).
                let to_next_word = 64 - (b % 64);
                let to_end = len - b;
                offset += to_next_word.min(to_end);
                continue;
            }
            let skip = u64::from(word.trailing_zeros());
            offset += skip;
            if offset >= limit || from.saturating_add(offset) >= best {
                break;
            }
            let bucket = self.buckets.get(((start + offset) & self.mask) as usize);
            best = best.min(bucket.min_fire.max(from + offset));
            offset += 1;
        }
        (best != u64::MAX).then_some(best)
    }
}
