//! The small guardian's allocator: size-class free lists in one anonymous mapping, so that a
//! forked guardian, and its zygote between two forks, write as few pages as they can.
//!
//! A forked guardian shares every page with its zygote until one of the two writes it, and each
//! page the zygote writes after a fork stays with that fork's guardian as its own. The C
//! library's allocator writes its arena header (in the C library's data), the headers of the
//! blocks around each block it frees, and the top of its heap: with it, each idle guardian
//! held two heap pages and two pages of the C library's data of its own. Here a block is taken
//! from the free list of its size class (or carved from the untouched end of the arena) and
//! put back on it when freed, so the zygote and each guardian allocate from the same few pages,
//! and the C library's allocator is reached only for what is too large or too aligned for a
//! class, or once the arena is used up (or could not be mapped). The arena is a mapping of its
//! own rather than a static: a static that large would push the image's other statics onto a
//! page of their own, which every guardian would write. For the same reason the allocator's
//! lock and free lists live at the start of the arena, not in the allocator (a static of the
//! image): written at every allocation, they made the page of the image's statics every
//! guardian's own, where the arena's first page, which they share, is written anyway.
//!
//! Invariants:
//! - A block of class `c` is `MIN_BLOCK << c` bytes at an offset of the arena that is a multiple
//!   of [`MIN_BLOCK`], which is also the largest alignment a class serves; a block is on at most
//!   one free list, and never both free and handed out.
//! - A pointer is the arena's exactly when it lies inside the arena: `dealloc` and `realloc`
//!   tell the two allocators' blocks apart by address alone, and never give one allocator's
//!   block to the other.
//! - The state is touched only under the lock, and nothing under the lock allocates; the lock
//!   is never held across a call to the C library's allocator.
//! - The allocator itself (its `base`, and the lock taken only to map the arena) is written only
//!   until the arena is mapped or found unmappable; every later allocation writes the arena's
//!   header and blocks alone.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The smallest block and the largest alignment a size class serves.
const MIN_BLOCK: usize = 16;

/// Size classes: 16, 32, ..., 32 768 bytes. Larger blocks come from the C library (which maps
/// anything over 128 KiB on its own, away from its heap).
const CLASSES: usize = 12;

/// The largest block a class serves.
const MAX_BLOCK: usize = MIN_BLOCK << (CLASSES - 1);

/// The arena's bytes: address space, of which only the pages written become memory. A guardian
/// allocates a few hundred bytes at a time; the zygote holds one request (at most
/// [`super::REQUEST_MAX`] of strings) until it has forked.
const ARENA_BYTES: usize = 256 * 1024;

/// What the allocator writes as it hands blocks out and takes them back: the first bytes of
/// its arena. `carved` is where the next fresh block is carved (from [`HEADER_BYTES`] on), and
/// `free` the head of each class's free list (an offset plus one; 0 is an empty list). A free
/// block's first word holds the next one's.
#[repr(C)]
struct Header {
    lock: AtomicBool,
    state: UnsafeCell<Lists>,
}

struct Lists {
    carved: usize,
    free: [usize; CLASSES],
}

/// The room the header takes at the arena's start: a multiple of [`MIN_BLOCK`], so that every
/// block after it keeps the alignment its offset gives.
const HEADER_BYTES: usize = std::mem::size_of::<Header>().next_multiple_of(MIN_BLOCK);

/// `base` when the arena could not be mapped: everything then goes to the C library. (A
/// mapping is page-aligned, so never at 1.)
const UNMAPPABLE: usize = 1;

/// The arena, under its lock: where it is mapped, and its lists.
struct State<'a> {
    base: usize,
    lists: &'a mut Lists,
}

/// The small guardian image's `#[global_allocator]`: size-class free lists (16 bytes to
/// 32 KiB) in one anonymous mapping of 256 KiB, so that a guardian forked by a zygote, and the
/// zygote between two forks, allocate from the same few pages and never write the C library's
/// heap or the image's statics; larger or more aligned blocks, and any once the arena is used
/// up, come from the C library's allocator. Meant for a single-threaded process: its lock
/// spins, it never sleeps.
pub struct GuardianAllocator {
    /// Where the arena is mapped: 0 until the first allocation maps it, [`UNMAPPABLE`] if that
    /// failed. Written once.
    base: AtomicUsize,
    /// Taken only while the arena is being mapped.
    mapping: AtomicBool,
}

impl std::fmt::Debug for GuardianAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardianAllocator").finish_non_exhaustive()
    }
}

impl Default for GuardianAllocator {
    fn default() -> Self {
        Self::new()
    }
}

/// The class serving `layout`, if one does.
fn class_of(layout: Layout) -> Option<usize> {
    if layout.align() > MIN_BLOCK || layout.size() > MAX_BLOCK {
        return None;
    }
    let blocks = layout.size().max(1).div_ceil(MIN_BLOCK).next_power_of_two();
    Some(blocks.trailing_zeros() as usize)
}

impl State<'_> {
    /// A block of class `class`, from its free list or carved fresh; `None` when the arena is
    /// used up.
    fn take(&mut self, class: usize) -> Option<*mut u8> {
        let head = self.lists.free[class];
        if head != 0 {
            let block = (self.base + head - 1) as *mut u8;
            // SAFETY: `head - 1` is the offset of a free block of this class, inside the
            // mapping and aligned to `MIN_BLOCK`; its first word holds the next free block's.
            #[allow(unsafe_code)]
            let next = unsafe { block.cast::<usize>().read() };
            self.lists.free[class] = next;
            return Some(block);
        }
        let end = self.lists.carved.checked_add(MIN_BLOCK << class)?;
        if end > ARENA_BYTES {
            return None;
        }
        let block = (self.base + self.lists.carved) as *mut u8;
        self.lists.carved = end;
        Some(block)
    }

    /// Puts the arena's block at `offset`, of class `class`, on its free list.
    fn give_back(&mut self, offset: usize, class: usize) {
        // SAFETY: the caller's block is the arena's, of this class, and no longer used by
        // anyone: its first word is free to hold the list's link.
        #[allow(unsafe_code)]
        unsafe {
            ((self.base + offset) as *mut usize).write(self.lists.free[class]);
        }
        self.lists.free[class] = offset + 1;
    }
}

/// A fresh private anonymous mapping of [`ARENA_BYTES`], or `None`. `mmap` itself, not a
/// wrapper that might allocate: it runs inside the allocator, under its lock.
fn map_arena() -> Option<usize> {
    // SAFETY: a new mapping at an address the kernel chooses, no file: it aliases nothing of
    // ours. It is unmapped only when its allocator is dropped (a `#[global_allocator]` static
    // never is), so the blocks the arena hands out stay valid while their allocator lives.
    #[allow(unsafe_code)]
    let mapped = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            ARENA_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (mapped != libc::MAP_FAILED).then_some(mapped as usize)
}

impl GuardianAllocator {
    /// An allocator whose arena is mapped at its first allocation.
    pub const fn new() -> GuardianAllocator {
        GuardianAllocator {
            base: AtomicUsize::new(0),
            mapping: AtomicBool::new(false),
        }
    }

    /// Where the arena is, mapping it first if no allocation has yet; `None` when it cannot be.
    fn arena(&self) -> Option<usize> {
        let base = match self.base.load(Ordering::Acquire) {
            0 => self.map_once(),
            base => base,
        };
        (base != UNMAPPABLE).then_some(base)
    }

    /// Maps the arena and writes its header, once, under the mapping lock; the base (or
    /// [`UNMAPPABLE`]).
    fn map_once(&self) -> usize {
        lock(&self.mapping);
        let mut base = self.base.load(Ordering::Acquire);
        if base == 0 {
            base = map_arena().unwrap_or(UNMAPPABLE);
            if base != UNMAPPABLE {
                // SAFETY: a fresh mapping of `ARENA_BYTES` (more than `HEADER_BYTES`),
                // page-aligned, that nothing else knows of until `base` is published below
                // (Release, read with Acquire): the header is written before anyone reads it.
                // The mapping is zeroes, so the lock is free and every list empty.
                #[allow(unsafe_code)]
                unsafe {
                    let header = base as *mut Header;
                    (*(*header).state.get()).carved = HEADER_BYTES;
                }
            }
            self.base.store(base, Ordering::Release);
        }
        self.mapping.store(false, Ordering::Release);
        base
    }

    /// Runs `f` on the arena's state under its lock; `None` when there is no arena.
    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> Option<T> {
        let base = self.arena()?;
        // SAFETY: `base` is the mapping `map_once` made and whose header it wrote before
        // publishing it; the mapping lives as long as `self`.
        #[allow(unsafe_code)]
        let header = unsafe { &*(base as *const Header) };
        lock(&header.lock);
        // SAFETY: the lock is held, so no other reference to the lists exists until it is
        // released below; nothing `f` runs allocates, so it cannot reach `with_state` again.
        #[allow(unsafe_code)]
        let lists = unsafe { &mut *header.state.get() };
        let out = f(&mut State { base, lists });
        header.lock.store(false, Ordering::Release);
        Some(out)
    }

    /// The offset of `ptr` in the arena, if it is the arena's. Reads `base` alone: no lock.
    fn offset_of(&self, ptr: *const u8) -> Option<usize> {
        let base = self.base.load(Ordering::Acquire);
        if base == 0 || base == UNMAPPABLE {
            return None;
        }
        let offset = (ptr as usize).checked_sub(base)?;
        (HEADER_BYTES..ARENA_BYTES)
            .contains(&offset)
            .then_some(offset)
    }

    /// Whether `ptr` is a block of this allocator's arena (not the C library's).
    pub fn owns(&self, ptr: *const u8) -> bool {
        self.offset_of(ptr).is_some()
    }

    /// How many bytes of the arena were ever carved into blocks.
    #[cfg(test)]
    fn carved(&self) -> usize {
        self.with_state(|state| state.lists.carved - HEADER_BYTES)
            .unwrap_or(0)
    }
}

/// Takes a spin lock: the allocator's process is single-threaded, so it is never contended
/// for long.
fn lock(flag: &AtomicBool) {
    while flag
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
}

/// A `#[global_allocator]` static is never dropped; an allocator of a test is, and gives its
/// mapping back.
impl Drop for GuardianAllocator {
    fn drop(&mut self) {
        let base = *self.base.get_mut();
        if base != 0 && base != UNMAPPABLE {
            // SAFETY: `base` is the mapping `map_arena` made, of `ARENA_BYTES`, and only this
            // allocator's blocks are in it; dropping the allocator ends them (`&mut self`).
            #[allow(unsafe_code)]
            unsafe {
                libc::munmap(base as *mut libc::c_void, ARENA_BYTES);
            }
        }
    }
}

// SAFETY: every block handed out is `MIN_BLOCK << class` bytes, at least `layout.size()`, at an
// offset that is a multiple of `MIN_BLOCK` in a page-aligned mapping (so aligned for any layout
// a class serves), and held by one caller until it is given back; everything else is the C
// library's allocator's, with the caller's own layout.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for GuardianAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if let Some(block) = class_of(layout).and_then(|c| self.with_state(|s| s.take(c))?) {
            return block;
        }
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(offset) = self.offset_of(ptr) else {
            // SAFETY: not the arena's, so `System` handed it out, with this layout.
            unsafe { System.dealloc(ptr, layout) };
            return;
        };
        // A block of the arena was handed out for a layout of a class; were this one not, the
        // block is kept rather than put on the wrong list.
        if let Some(class) = class_of(layout) {
            self.with_state(|state| state.give_back(offset, class));
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        let arenas = self.owns(ptr);
        match (arenas, class_of(new)) {
            (true, class) if class.is_some() && class == class_of(layout) => return ptr,
            // SAFETY: `System`'s block, staying with `System`: the caller's contract.
            (false, None) => return unsafe { System.realloc(ptr, layout, new_size) },
            _ => {}
        }
        // SAFETY: the caller's contract; the old block is copied up to the smaller size, then
        // given back to whichever allocator handed it out.
        unsafe {
            let moved = self.alloc(new);
            if !moved.is_null() {
                std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            moved
        }
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A live block of a test: where, its layout, and the byte it was filled with.
    struct Live {
        ptr: *mut u8,
        layout: Layout,
        fill: u8,
    }

    fn alloc(a: &GuardianAllocator, size: usize, align: usize, fill: u8) -> Live {
        let layout = Layout::from_size_align(size, align).unwrap();
        // SAFETY: a non-zero size (the strategies' and the callers' sizes start at 1).
        let ptr = unsafe { a.alloc(layout) };
        assert!(!ptr.is_null(), "{layout:?}");
        assert_eq!(ptr as usize % align, 0, "aligned for {layout:?}");
        // SAFETY: the block is ours and at least `size` bytes.
        unsafe { ptr.write_bytes(fill, size) };
        Live { ptr, layout, fill }
    }

    /// Asserts that `live` still holds its fill (no other block was carved over it).
    fn intact(live: &Live) {
        // SAFETY: a live block of `layout.size()` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(live.ptr, live.layout.size()) };
        assert!(
            bytes.iter().all(|&b| b == live.fill),
            "a block was written over"
        );
    }

    fn free(a: &GuardianAllocator, live: Live) {
        intact(&live);
        // SAFETY: handed out by `a` with this layout, and not freed before.
        unsafe { a.dealloc(live.ptr, live.layout) };
    }

    #[test]
    fn each_size_gets_the_smallest_class_that_holds_it() {
        let class = |size, align| class_of(Layout::from_size_align(size, align).unwrap());
        assert_eq!(class(1, 1), Some(0));
        assert_eq!(class(16, 16), Some(0));
        assert_eq!(class(17, 8), Some(1));
        assert_eq!(class(2048, 1), Some(7));
        assert_eq!(class(2049, 1), Some(8));
        assert_eq!(class(MAX_BLOCK, 1), Some(CLASSES - 1));
        assert_eq!(class(MAX_BLOCK + 1, 1), None, "larger: the C library's");
        assert_eq!(class(8, 32), None, "more aligned: the C library's");
    }

    #[test]
    fn freed_blocks_are_reused_so_the_arena_stops_growing() {
        let a = GuardianAllocator::new();
        let sizes = [24, 300, 5, 1500, 24, 9000, 64];
        for round in 0..100u8 {
            let live: Vec<Live> = sizes.iter().map(|&s| alloc(&a, s, 8, round)).collect();
            assert!(live.iter().all(|l| a.owns(l.ptr)));
            live.into_iter().for_each(|l| free(&a, l));
        }
        let first: usize = sizes
            .iter()
            .map(|&s| s.div_ceil(16).next_power_of_two() * 16)
            .sum();
        assert_eq!(
            a.carved(),
            first,
            "each size carved once, then taken from its list"
        );
    }

    #[test]
    fn past_the_arena_blocks_come_from_the_c_library_and_both_kinds_free() {
        let a = GuardianAllocator::new();
        let n = ARENA_BYTES / MAX_BLOCK + 3;
        let live: Vec<Live> = (0..n).map(|i| alloc(&a, MAX_BLOCK, 16, i as u8)).collect();
        let owned = live.iter().filter(|l| a.owns(l.ptr)).count();
        let room = ARENA_BYTES - HEADER_BYTES;
        assert_eq!(owned, room / MAX_BLOCK, "the arena, then the C library");
        assert!(live.iter().all(|l| l.layout.size() == MAX_BLOCK));
        live.into_iter().for_each(|l| free(&a, l));
        let again = alloc(&a, MAX_BLOCK - 100, 8, 7);
        assert!(
            a.owns(again.ptr),
            "a freed block serves its class's next allocation"
        );
        // What is left past the large blocks is carved into small ones; after that a small
        // block comes from the C library, though large ones are free: a block is not split.
        let mut small = Vec::new();
        while small.last().is_none_or(|l: &Live| a.owns(l.ptr)) {
            small.push(alloc(&a, 100, 8, 8));
        }
        assert_eq!(
            small.len() - 1,
            (room % MAX_BLOCK) / 128,
            "the rest, in blocks of 128"
        );
        let large = alloc(&a, MAX_BLOCK + 1, 8, 9);
        assert!(!a.owns(large.ptr));
        small
            .into_iter()
            .chain([again, large])
            .for_each(|l| free(&a, l));
    }

    /// Once the arena is mapped, allocating writes nothing of the allocator itself (a static
    /// of the image, on the page a forked guardian then shares with its zygote): its bytes
    /// stay as they are through any number of allocations and frees.
    #[test]
    fn allocating_writes_the_arena_and_never_the_allocator() {
        let a = GuardianAllocator::new();
        let bytes = |a: &GuardianAllocator| {
            let at = std::ptr::from_ref(a).cast::<u8>();
            // SAFETY: the allocator's own bytes, read while nothing writes them (this thread
            // holds the only reference, and is not allocating from it meanwhile).
            unsafe { std::slice::from_raw_parts(at, std::mem::size_of::<GuardianAllocator>()) }
                .to_vec()
        };
        let first = alloc(&a, 40, 8, 1);
        let before = bytes(&a);
        for round in 0..50u8 {
            let live: Vec<Live> = [24, 300, 5, 1500, 9000]
                .iter()
                .map(|&s| alloc(&a, s, 8, round))
                .collect();
            live.into_iter().for_each(|l| free(&a, l));
        }
        assert_eq!(bytes(&a), before, "an allocation wrote the allocator");
        assert!(a.carved() > 0);
        free(&a, first);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc { size: usize, align: usize },
        Free(usize),
        Realloc(usize, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let size = prop_oneof![1usize..64, 1usize..4096, 1usize..(MAX_BLOCK * 2)];
        let align = prop_oneof![Just(1usize), Just(8), Just(16), Just(64)];
        prop_oneof![
            3 => (size.clone(), align).prop_map(|(size, align)| Op::Alloc { size, align }),
            2 => any::<usize>().prop_map(Op::Free),
            1 => (any::<usize>(), size).prop_map(|(i, size)| Op::Realloc(i, size)),
        ]
    }

    /// Reallocates `live` to `size`: the old bytes are kept up to the smaller size.
    fn realloc(a: &GuardianAllocator, live: Live, size: usize, fill: u8) -> Live {
        intact(&live);
        // SAFETY: handed out by `a` with this layout; `size` is non-zero.
        let ptr = unsafe { a.realloc(live.ptr, live.layout, size) };
        assert!(!ptr.is_null());
        assert_eq!(ptr as usize % live.layout.align(), 0);
        let kept = live.layout.size().min(size);
        // SAFETY: the new block is ours and at least `size` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(ptr, kept) };
        assert!(
            bytes.iter().all(|&b| b == live.fill),
            "realloc kept the old bytes"
        );
        // SAFETY: as above.
        unsafe { ptr.write_bytes(fill, size) };
        let layout = Layout::from_size_align(size, live.layout.align()).unwrap();
        Live { ptr, layout, fill }
    }

    proptest! {
        /// Any mix of allocations, frees and reallocations, of any size and alignment: every
        /// block is aligned, keeps its bytes while it is held (no block is handed out twice or
        /// overlaps another), and is the arena's only if a class serves it.
        #[test]
        fn blocks_never_overlap_and_keep_their_bytes(ops in prop::collection::vec(op(), 1..300)) {
            let a = GuardianAllocator::new();
            let mut live: Vec<Live> = Vec::new();
            for (n, op) in ops.into_iter().enumerate() {
                let fill = n as u8;
                match op {
                    Op::Alloc { size, align } => live.push(alloc(&a, size, align, fill)),
                    Op::Free(i) if !live.is_empty() => free(&a, live.swap_remove(i % live.len())),
                    Op::Realloc(i, size) if !live.is_empty() => {
                        let old = live.swap_remove(i % live.len());
                        live.push(realloc(&a, old, size, fill));
                    }
                    _ => {}
                }
                for l in &live {
                    prop_assert!(!a.owns(l.ptr) || class_of(l.layout).is_some());
                }
            }
            live.iter().for_each(intact);
            live.into_iter().for_each(|l| free(&a, l));
        }
    }
}
