//! The wheel's nodes: one slab of fixed pages, indexed by `u32` keys, each node linked into a
//! list (a bucket's or a far slot's) by its neighbours' keys.
//!
//! Owns the node layout (32 bytes for the worker's entries: the `prev` link shares a word with
//! a 5-bit tag) and the slab's growth. Touches nothing of the crate.

/// No index: the crate's one sentinel for "no key, no slot, no id" (the wheel's and the
/// slabs' keys, the worker's chunk ids, a cell's wheel key).
pub(crate) const NO_INDEX: u32 = u32::MAX;

/// Bits of a key: keys are below `2^KEY_BITS - 1`, so that a node's `prev` link and a 5-bit tag
/// share one `u32` (keeping a node at 32 bytes for the worker's entries).
pub(super) const KEY_BITS: u32 = 27;
pub(super) const PREV_MASK: u32 = (1 << KEY_BITS) - 1;

/// Entries one wheel holds at most (134 217 727): `new_timeout` refuses beyond it (`Shared::refill_credit`).
pub(crate) const MAX_ENTRIES: usize = PREV_MASK as usize;

/// The largest tag a node carries (5 bits).
pub(crate) const MAX_TAG: u8 = (1 << (32 - KEY_BITS)) - 1;

#[derive(Debug)]
pub(super) struct Node<T> {
    /// `None` while the slot is on the free list.
    pub(super) item: Option<T>,
    pub(super) deadline: u64,
    /// The previous key in the bucket (low `KEY_BITS`; all ones for none) and the entry's tag
    /// (high bits).
    pub(super) prev_tag: u32,
    /// Next in the bucket, or next free slot while vacant.
    pub(super) next: u32,
}

impl<T> Node<T> {
    /// A live node, the last of its list, after `prev` (`NO_INDEX` for none).
    #[inline]
    pub(super) fn new(item: T, tag: u8, deadline: u64, prev: u32) -> Self {
        Node {
            item: Some(item),
            deadline,
            // `NO_INDEX & PREV_MASK` is `PREV_MASK`, the tag's "none".
            prev_tag: (u32::from(tag) << KEY_BITS) | (prev & PREV_MASK),
            next: NO_INDEX,
        }
    }

    #[inline]
    pub(super) fn prev(&self) -> u32 {
        match self.prev_tag & PREV_MASK {
            PREV_MASK => NO_INDEX,
            p => p,
        }
    }

    #[inline]
    pub(super) fn set_prev(&mut self, prev: u32) {
        let p = if prev == NO_INDEX { PREV_MASK } else { prev };
        self.prev_tag = (self.prev_tag & !PREV_MASK) | p;
    }

    #[inline]
    pub(super) fn tag(&self) -> u8 {
        (self.prev_tag >> KEY_BITS) as u8
    }
}

/// Nodes per slab page (32 KB for the worker's 32-byte nodes: room for one page is all a slab
/// holds beyond its high-water mark). A power of two (see `Slab::push`).
pub(super) const PAGE_BITS: u32 = 10;
pub(super) const PAGE: usize = 1 << PAGE_BITS;

/// A page's `Vec` must stop growing at exactly one page: capacities double from 4.
const _: () = assert!(PAGE.is_power_of_two() && PAGE >= 4);

/// The wheel's nodes, indexed by key: pages of `PAGE` nodes that never move once allocated.
#[derive(Debug)]
pub(super) struct Slab<T> {
    pub(super) pages: Vec<Vec<Node<T>>>,
    len: usize,
}

impl<T> Slab<T> {
    pub(super) const fn new() -> Self {
        Slab {
            pages: Vec::new(),
            len: 0,
        }
    }

    /// Slots handed out so far (live or free).
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(super) fn push(&mut self, node: Node<T>) {
        if self.len.is_multiple_of(PAGE) {
            // The first page grows as a `Vec` does (4, 8, ... `PAGE` nodes: a power of two, so
            // it never grows past a page), so that a wheel holding a few entries holds a few
            // nodes' worth; the later ones come whole.
            let capacity = if self.pages.is_empty() { 0 } else { PAGE };
            self.pages.push(Vec::with_capacity(capacity));
        }
        let page = self.pages.last_mut().expect("a page with room");
        debug_assert!(page.len() < PAGE);
        page.push(node);
        self.len += 1;
    }

    /// Writes `node` under `key` (vacant, or past the end: the nodes up to it are pushed
    /// vacant).
    #[inline]
    pub(super) fn put(&mut self, key: usize, node: Node<T>) {
        if key == self.len {
            self.push(node);
        } else if key < self.len {
            self[key] = node;
        } else {
            self.put_past_end(key, node);
        }
    }

    #[cold]
    #[inline(never)]
    fn put_past_end(&mut self, key: usize, node: Node<T>) {
        while self.len < key {
            self.push(Node {
                item: None,
                deadline: 0,
                prev_tag: PREV_MASK,
                next: NO_INDEX,
            });
        }
        self.push(node);
    }
}

impl<T> std::ops::Index<usize> for Slab<T> {
    type Output = Node<T>;
    #[inline]
    fn index(&self, key: usize) -> &Node<T> {
        &self.pages[key >> PAGE_BITS][key & (PAGE - 1)]
    }
}

impl<T> std::ops::IndexMut<usize> for Slab<T> {
    #[inline]
    fn index_mut(&mut self, key: usize) -> &mut Node<T> {
        &mut self.pages[key >> PAGE_BITS][key & (PAGE - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::Node;

    #[test]
    fn a_node_of_a_task_entry_is_32_bytes() {
        // A task entry is 16 bytes with a reference first (`Option` of it costs nothing).
        type Parked = (&'static u8, u32, u32);
        assert_eq!(std::mem::size_of::<Parked>(), 16);
        assert_eq!(std::mem::size_of::<Node<Parked>>(), 32);
    }
}
