//! The wheel's buckets. Owns the list node ([`Node`]), the list ends of buckets and far slots
//! ([`List`]), the bucket ([`Bucket`]: list ends and a lower bound of its fire ticks) and its
//! pages ([`Buckets`]); the wheel (`mod.rs`) links the nodes, which live in the slab. Touches
//! nothing of the crate.

use super::slab::Vacancy;
use super::NO_INDEX;

/// Entries one wheel holds at most: `new_timeout` (`Shared::refill_credit`) refuses beyond.
/// Cells keep a key in under 32 bits (`shared::cells` checks).
pub(crate) const MAX_ENTRIES: usize = (1 << 27) - 1;

#[derive(Debug)]
pub(super) struct Node<T> {
    /// `None` while the slot is free.
    pub(super) item: Option<T>,
    pub(super) deadline: u64,
    /// The previous key in the list (`NO_INDEX` for none).
    pub(super) prev: u32,
    /// Next in the list, or next free slot while vacant.
    pub(super) next: u32,
}

impl<T> Node<T> {
    #[inline]
    pub(super) fn new(item: T, deadline: u64, prev: u32) -> Self {
        Node {
            item: Some(item),
            deadline,
            prev,
            next: NO_INDEX,
        }
    }
}

impl<T> Vacancy for Node<T> {
    #[inline]
    fn vacant(next: u32) -> Self {
        Node {
            item: None,
            deadline: 0,
            prev: NO_INDEX,
            next,
        }
    }

    #[inline]
    fn next_vacant(&self) -> Option<u32> {
        self.item.is_none().then_some(self.next)
    }

    /// Writes only the item and the link: a free node's deadline and `prev` are never read.
    #[inline]
    fn vacate(&mut self, next: u32) -> Self {
        let node = Node {
            item: self.item.take(),
            deadline: self.deadline,
            prev: self.prev,
            next: self.next,
        };
        self.next = next;
        node
    }
}

/// The ends of a doubly linked list of nodes: a bucket's, or a far slot's.
#[derive(Debug, Clone, Copy)]
pub(super) struct List {
    pub(super) head: u32,
    pub(super) tail: u32,
}

pub(super) const EMPTY_LIST: List = List {
    head: NO_INDEX,
    tail: NO_INDEX,
};

#[derive(Debug, Clone, Copy)]
pub(super) struct Bucket {
    pub(super) ends: List,
    /// No entry in the bucket fires before this tick (may be stale-low after a removal): the
    /// worker neither walks nor wakes for a bucket whose entries are a round away
    /// (`docs/performance.md`, "A bucket's least fire tick").
    pub(super) min_fire: u64,
}

pub(super) const EMPTY_BUCKET: Bucket = Bucket {
    ends: EMPTY_LIST,
    min_fire: u64::MAX,
};

/// A large wheel's buckets come in pages of `2^BUCKET_PAGE_BITS`, each allocated when an entry
/// first lands in it (`wheel` docs, "Layout"; `docs/performance.md`, "Bucket pages allocated as
/// entries land"); a smaller wheel is one page, allocated up front.
pub(super) const BUCKET_PAGE_BITS: u32 = 12;

/// The buckets in pages ([`BUCKET_PAGE_BITS`]). A page is kept until the wheel is drained: else
/// one `new_timeout` at a time into a large wheel would allocate and fill a page each.
#[derive(Debug)]
pub(super) struct Buckets {
    /// Empty for a page not allocated yet.
    pub(super) pages: Box<[Box<[Bucket]>]>,
    page_bits: u32,
    len: usize,
}

impl Buckets {
    /// `len` is a power of two.
    pub(super) fn new(len: usize) -> Self {
        let page_bits = len.trailing_zeros().min(BUCKET_PAGE_BITS);
        let mut pages = vec![Box::default(); len >> page_bits].into_boxed_slice();
        if let [only] = &mut *pages {
            *only = Buckets::new_page(len);
        }
        Buckets {
            pages,
            page_bits,
            len,
        }
    }

    #[cold]
    fn new_page(len: usize) -> Box<[Bucket]> {
        vec![EMPTY_BUCKET; len].into_boxed_slice()
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn page_mask(&self) -> usize {
        (1 << self.page_bits) - 1
    }

    /// Bucket `b`: an empty one if its page is not allocated.
    #[inline]
    pub(super) fn get(&self, b: usize) -> &Bucket {
        self.pages[b >> self.page_bits]
            .get(b & self.page_mask())
            .unwrap_or(&EMPTY_BUCKET)
    }

    /// Bucket `b`, allocating its page first if need be.
    #[inline]
    pub(super) fn get_mut(&mut self, b: usize) -> &mut Bucket {
        let (bits, i) = (self.page_bits, b & self.page_mask());
        let page = &mut self.pages[b >> bits];
        if page.is_empty() {
            *page = Buckets::new_page(1 << bits);
        }
        &mut page[i]
    }

    /// The first bucket, by index, for which `found` holds.
    pub(super) fn position(&self, found: impl Fn(&Bucket) -> bool) -> Option<usize> {
        self.pages.iter().enumerate().find_map(|(p, page)| {
            let i = page.iter().position(&found)?;
            Some((p << self.page_bits) + i)
        })
    }

    /// Every bucket empty again; a wheel of several pages lets go of them.
    pub(super) fn clear(&mut self) {
        match &mut *self.pages {
            [only] => only.fill(EMPTY_BUCKET),
            pages => pages.fill(Box::default()),
        }
    }

    #[cfg(test)]
    pub(super) fn allocated_bytes(&self) -> usize {
        self.pages.iter().map(|p| std::mem::size_of_val(&**p)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::Node;

    #[test]
    fn a_node_of_a_task_entry_is_32_bytes() {
        // A task entry is 16 bytes with a reference first (`Option` of it costs nothing).
        type Entry = (&'static u8, u32, u32);
        assert_eq!(std::mem::size_of::<Entry>(), 16);
        assert_eq!(std::mem::size_of::<Node<Entry>>(), 32);
    }
}
