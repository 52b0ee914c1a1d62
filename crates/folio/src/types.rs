//! Newtypes for the three axes folio computes on, so that they cannot be mixed up: a page
//! index within a file (`PageIndex`), a frame number within the arena (`FrameId`), and a
//! folio order (`Order`, log2 of its pages). Byte offsets stay `u64` named `*_bytes`.

/// Bytes in one page, the unit of the index and of the arena.
pub const PAGE_BYTES: usize = 4096;
pub const PAGE_SHIFT: u32 = 12;
/// The largest folio: order 9, 512 pages, 2 MiB.
pub const ORDER_MAX: u8 = 9;

/// A page's position in a file: byte offset / 4096.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PageIndex(pub u64);

impl PageIndex {
    /// Past the last page any file can have (a byte offset's 64 bits, in pages): the end
    /// of a range that means "the whole file".
    pub const END: PageIndex = PageIndex(u64::MAX >> PAGE_SHIFT);

    /// The page that holds byte `offset_bytes`.
    pub fn containing(offset_bytes: u64) -> Self {
        PageIndex(offset_bytes >> PAGE_SHIFT)
    }

    /// The first page at or after byte `offset_bytes` (the page count of a file of that
    /// length).
    pub fn ceil(offset_bytes: u64) -> Self {
        PageIndex(offset_bytes.div_ceil(PAGE_BYTES as u64))
    }

    pub fn offset_bytes(self) -> u64 {
        self.0 << PAGE_SHIFT
    }

    pub fn add(self, pages: u64) -> Self {
        PageIndex(self.0 + pages)
    }

    /// The head of the order-`order` folio that would contain this page.
    pub fn align_down(self, order: Order) -> Self {
        PageIndex(self.0 & !(order.pages() - 1))
    }
}

/// A frame's position in the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FrameId(pub u32);

impl FrameId {
    pub fn as_usize(self) -> usize {
        self.0 as usize
    }
}

/// log2 of a folio's page count, 0..=ORDER_MAX.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Order(u8);

impl Order {
    pub const ZERO: Order = Order(0);
    pub const MAX: Order = Order(ORDER_MAX);

    pub fn new(order: u8) -> Self {
        assert!(order <= ORDER_MAX, "folio order {order} above {ORDER_MAX}");
        Order(order)
    }

    /// An order from bits that may be stale (a racing read): at most `MAX`, never a
    /// panic; callers validate what it describes.
    #[inline]
    pub fn clamped(order: u8) -> Self {
        Order(order.min(ORDER_MAX))
    }

    pub fn get(self) -> u8 {
        self.0
    }

    pub fn pages(self) -> u64 {
        1 << self.0
    }

    pub fn bytes(self) -> usize {
        PAGE_BYTES << self.0
    }

    /// The largest order whose folio starts at `index` (aligned) and fits in `pages_max`
    /// pages, capped at `cap`.
    pub fn largest_fitting(index: PageIndex, pages_max: u64, cap: Order) -> Order {
        debug_assert!(pages_max > 0);
        let by_alignment = index.0.trailing_zeros().min(63) as u8;
        let by_length = (63 - pages_max.leading_zeros()) as u8;
        Order(by_alignment.min(by_length).min(cap.0))
    }
}

/// How a file's descriptor reads: around the kernel's page cache or through it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpenMode {
    /// O_DIRECT: the kernel's page cache is bypassed.
    Direct,
    /// Buffered, where the file system refuses O_DIRECT (tmpfs).
    Buffered,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_fitting_respects_alignment_length_and_cap() {
        let max = Order::MAX;
        assert_eq!(Order::largest_fitting(PageIndex(0), 1, max), Order(0));
        assert_eq!(Order::largest_fitting(PageIndex(0), 3, max), Order(1));
        assert_eq!(Order::largest_fitting(PageIndex(4), 100, max), Order(2));
        assert_eq!(Order::largest_fitting(PageIndex(0), 10_000, max), Order(9));
        assert_eq!(
            Order::largest_fitting(PageIndex(512), 10_000, Order(3)),
            Order(3)
        );
        assert_eq!(PageIndex(13).align_down(Order(2)), PageIndex(12));
        assert_eq!(PageIndex::ceil(4097), PageIndex(2));
    }
}
