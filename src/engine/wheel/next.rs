//! When the wheel next has work (`Wheel::next_work`, the worker's plan).

use super::{Wheel, LEVEL_BITS};

impl<T> Wheel<T> {
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
    pub(super) fn next_cascade_tick(&self) -> Option<u64> {
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
