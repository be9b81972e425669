//! The occupancy bitmap: a bit per non-empty bucket and far slot (`wheel` docs, "Occupancy").
//! Owns [`Wheel::set_occupied`] (an insert sets its list's bit itself, where it links the
//! entry) and [`Wheel::next_fire_tick`]. Touches nothing of the crate.

use super::far::LEVEL_SLOTS;
use super::Wheel;

impl<T> Wheel<T> {
    #[inline]
    pub(super) fn set_occupied(&mut self, b: usize, on: bool) {
        let (word, bit) = match b.checked_sub(self.buckets.len()) {
            None => (&mut self.occupied[b / 64], b % 64),
            Some(i) => (&mut self.far_occupied[i / LEVEL_SLOTS], i % LEVEL_SLOTS),
        };
        if on {
            *word |= 1 << bit;
        } else {
            *word &= !(1 << bit);
        }
    }

    /// The earliest tick `>= from` with work: an entry may fire, or far entries move down (done
    /// first by that tick's [`Wheel::expire`]). Every tick before `from` is processed.
    pub(crate) fn next_fire_tick(&self, from: u64) -> Option<u64> {
        if self.nodes.live() == 0 {
            return None;
        }
        // A far slot's entries move down at the start of the round before the slot's first.
        let cascade = self
            .next_cascade_round()
            .map(|round| ((round - 1) << self.round_shift).max(from));
        let bucket = self.next_bucket_tick(from);
        match (bucket, cascade) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The earliest tick `>= from` on which an entry in a bucket may fire.
    fn next_bucket_tick(&self, from: u64) -> Option<u64> {
        let len = self.wheel_len();
        let start = from & self.mask;
        let mut best = u64::MAX;
        // Occupied buckets in tick order: the one at offset k comes round at tick from + k, and
        // nothing in it fires earlier, so once from + k >= best we are done.
        let mut offset = 0u64;
        while offset < len {
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
            if offset >= len || from.saturating_add(offset) >= best {
                break;
            }
            let bucket = self.buckets.get(((start + offset) & self.mask) as usize);
            best = best.min(bucket.min_fire.max(from + offset));
            offset += 1;
        }
        (best != u64::MAX).then_some(best)
    }
}
