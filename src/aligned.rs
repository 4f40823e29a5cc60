//! Byte buffers that start on a cache line, for the bytes the kernel copies: a leaf.
//!
//! The kernel copies a pipe's bytes into its reader's buffer, a file's from the page cache, and
//! a writer's bytes into the page cache, with `rep movsb`. On this project's machines (AMD EPYC,
//! with fast short `rep movsb`) such a copy is slow when the buffer in user memory lies 8 or 16
//! bytes past the kernel page's offset (modulo the page): `pread` of 2 MiB of cached file in
//! 64 KiB blocks took 86 µs into a buffer at the same offset as the file's and 730 to 760 µs 8
//! or 16 bytes past it (32 bytes past, or 16 before: 87 to 91 µs); 1 GiB of zeros from `head`,
//! in 256 KiB reads, took 0.50 to 0.58 s into a buffer at offset 0 or 64 of a page and 0.99 to
//! 1.08 s at offset 16; written to a ring file from a buffer at offset 16, 0.96 to 1.21 s
//! against 0.46 to 0.80 from offset 0 (C programs, best of 100 or interleaved rounds). Kernel
//! pages mostly start where the bytes start (a pipe's, for writers of whole pages; a file's at
//! a page-aligned offset), and glibc puts a block of 128 KiB or more exactly 16 bytes into a
//! mapping of its own, behind its header, and a smaller one (or any, once it raised its mmap
//! threshold) 16-byte aligned wherever its heap has room. So a read buffer hit the slow case by
//! chance, and always in a daemon, which keeps large blocks mapped (`heap`): 1 GiB of zeros
//! through the daemon took 1.02 times the shell's file, and 0.69 with its read buffer on a
//! cache line. A buffer on a cache line is never 8 or 16 bytes past a page-aligned source.
//!
//! Invariants: the room a [`ReadBuf`] hands out, and the bytes a [`StageBuf`] holds, start at a
//! multiple of [`ALIGN`], except in a `ReadBuf` made [`From`] a `Vec` (bytes already read, never
//! read into again). Only where they start is chosen here: what they hold is what a `Vec` would.

/// The boundary a buffer starts on: a cache line.
pub const ALIGN: usize = 64;

/// How many bytes a block at `block` lies before the next multiple of [`ALIGN`] (none if it
/// starts on one).
fn lead(block: *const u8) -> usize {
    block.addr().wrapping_neg() % ALIGN
}

/// A zeroed buffer for reads, with its room on a cache line.
#[derive(Debug, Default)]
pub struct ReadBuf {
    vec: Vec<u8>,
    /// Where the room starts in `vec`.
    start: usize,
}

impl ReadBuf {
    /// A buffer that allocates nothing until it is read into (for a `thread_local!`).
    pub const fn new() -> ReadBuf {
        ReadBuf {
            vec: Vec::new(),
            start: 0,
        }
    }

    /// A buffer with `len` bytes of room, zeroed by the allocator: a large one is a fresh
    /// mapping, which costs only the pages its reads touch.
    pub fn zeroed(len: usize) -> ReadBuf {
        let vec = vec![0; len.saturating_add(ALIGN - 1)];
        let start = lead(vec.as_ptr());
        ReadBuf { vec, start }
    }

    /// `len` bytes to read into, on a cache line; a buffer with less room is replaced by a
    /// larger one first.
    pub fn room(&mut self, len: usize) -> &mut [u8] {
        if self.vec.len().saturating_sub(self.start) < len {
            *self = ReadBuf::zeroed(len);
        }
        let end = self.start.saturating_add(len);
        self.vec.get_mut(self.start..end).unwrap_or_default()
    }

    /// The first `len` bytes of the room (what a read of `len` bytes filled), or as many as
    /// it holds.
    pub fn bytes(&self, len: usize) -> &[u8] {
        let room = self.vec.get(self.start..).unwrap_or_default();
        room.get(..len).unwrap_or(room)
    }
}

impl From<Vec<u8>> for ReadBuf {
    /// Bytes already read, as they are (not moved onto a cache line).
    fn from(vec: Vec<u8>) -> ReadBuf {
        ReadBuf { vec, start: 0 }
    }
}

/// A growable buffer of bytes staged for a write, starting on a cache line: appended at the end,
/// written and dropped from the front.
#[derive(Debug, Default)]
pub struct StageBuf {
    /// `start` bytes of padding, then the staged bytes.
    vec: Vec<u8>,
    start: usize,
}

impl StageBuf {
    /// An empty buffer that holds no memory.
    pub const fn new() -> StageBuf {
        StageBuf {
            vec: Vec::new(),
            start: 0,
        }
    }

    /// Appends `bytes`. Moves what is staged into a larger block, on a cache line, when the
    /// block is full (a `Vec`'s own growth would keep only its 16-byte alignment).
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        if self.vec.capacity() - self.vec.len() < bytes.len() {
            let len = self.len();
            let need = len.saturating_add(bytes.len());
            let mut vec =
                Vec::with_capacity(need.max(len.saturating_mul(2)).saturating_add(ALIGN - 1));
            let start = lead(vec.as_ptr());
            vec.resize(start, 0);
            vec.extend_from_slice(&self[..]);
            *self = StageBuf { vec, start };
        }
        self.vec.extend_from_slice(bytes);
    }

    /// Drops the first `n` staged bytes (all of them, if fewer), moving the rest to the front.
    pub fn drain_front(&mut self, n: usize) {
        let end = self.start.saturating_add(n).min(self.vec.len());
        self.vec.drain(self.start..end);
    }
}

impl std::ops::Deref for StageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.vec.get(self.start..).unwrap_or_default()
    }
}

impl std::ops::DerefMut for StageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.vec.get_mut(self.start..).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Rooms of every size start on a cache line, hold what was written into them, and grow
    /// when asked for more; a buffer from a `Vec` holds its bytes as they are.
    #[test]
    fn room_starts_on_a_cache_line_and_keeps_what_is_read() {
        // Many blocks alive at once, so that the allocator's own alignment varies among them.
        let mut kept = Vec::new();
        for len in [1, 15, 16, 100, 4096, 70_000, 256 * 1024] {
            for _ in 0..8 {
                let mut buf = ReadBuf::zeroed(len);
                let room = buf.room(len);
                assert_eq!(room.len(), len);
                assert_eq!(room.as_ptr().addr() % ALIGN, 0, "{len}");
                assert!(room.iter().all(|&b| b == 0));
                room[len - 1] = 7;
                assert_eq!(buf.bytes(len).last(), Some(&7));
                assert!(
                    buf.bytes(len + ALIGN).len() < len + ALIGN,
                    "only what it holds"
                );
                kept.push(buf);
            }
        }
        let mut lazy = ReadBuf::new();
        assert_eq!(lazy.bytes(10), b"");
        assert_eq!(lazy.room(10).as_ptr().addr() % ALIGN, 0);
        lazy.room(10)[..3].copy_from_slice(b"abc");
        assert_eq!(lazy.bytes(3), b"abc", "a room as large keeps its bytes");
        let grown = lazy.room(1 << 20);
        assert_eq!(grown.len(), 1 << 20);
        assert_eq!(grown.as_ptr().addr() % ALIGN, 0);

        let read = ReadBuf::from(b"written".to_vec());
        assert_eq!(read.bytes(3), b"wri");
        assert_eq!(read.bytes(100), b"written");
    }

    proptest! {
        /// Whatever appends and drops a writer makes, a stage holds what a `Vec` would, and
        /// starts on a cache line whenever it holds a byte.
        #[test]
        fn a_stage_holds_what_a_vec_would_on_a_cache_line(
            ops in proptest::collection::vec((any::<bool>(), 0usize..70_000, any::<u8>()), 1..40)
        ) {
            let mut stage = StageBuf::new();
            let mut model: Vec<u8> = Vec::new();
            for (append, n, byte) in ops {
                if append {
                    stage.extend_from_slice(&vec![byte; n]);
                    model.extend(std::iter::repeat_n(byte, n));
                } else {
                    stage.drain_front(n);
                    model.drain(..n.min(model.len()));
                }
                prop_assert_eq!(&*stage, &model[..]);
                prop_assert_eq!(stage.is_empty(), model.is_empty());
                if !stage.is_empty() {
                    prop_assert_eq!(stage.as_ptr().addr() % ALIGN, 0);
                }
            }
        }
    }
}
