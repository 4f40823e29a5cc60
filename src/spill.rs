//! Spill space: bytes a long-running writer must keep but seldom reads (the frames of settled
//! manifests, the journal's retained IDs), moved out of its heap into an unnamed file and read
//! back through read-only shared mappings. What a finished process costs the heap is then a few
//! words that say where its bytes are; the bytes themselves are page cache, which the kernel
//! writes back and drops under memory pressure, and which a process that reads none of them does
//! not even keep mapped ([`Spill::release_resident`]).
//!
//! The file is created with `O_TMPFILE` (`root::dir::Dir::unnamed_file`): it has no name, so no
//! other process opens it, recovery never sees it, and the kernel frees it when the writer exits
//! or crashes. It holds nothing durable: everything in it is also in the journal or a snapshot,
//! and it is never synced. Without such a file (a file system that refuses `O_TMPFILE`, a reader
//! that may not write in the root, a store built in memory) the same chunks live on the heap:
//! same layout, same answers, only the memory stays in the process.
//!
//! On top of it: [`Records`], fixed-size records read by number, which `crate::runs` keeps its
//! sorted runs in; [`Column`], fixed-size records that grow and change in place, which the
//! manifest store keeps one per process in, so that a finished process costs the heap nothing;
//! and [`BytesWriter`], bytes written in order, which a snapshot captures its frames into.
//!
//! A spill may also be made over a [`Backing`], bytes another owner keeps unchanged (the
//! mapping of the snapshot file a store was restored from): [`Spill::adopt`] then hands out
//! ranges inside them where they are, without a copy, and the spill holds the backing for as
//! long as it lives. A store restored from a snapshot of a large root so keeps no second copy
//! of its settled frames, on the heap or in a spill file.
//!
//! Invariants:
//! - Bytes are appended, each range once, in chunks that never move: a slice handed out stays
//!   valid and unchanged for as long as the `Spill` is borrowed. A [`Column`] writes its records
//!   again in place, and only through `&mut self`, so never while a slice is borrowed.
//! - An append lands whole or is refused (`ENOSPC`, `EIO`): a chunk's used length grows only
//!   after the whole write, so no refused append is ever read.
//! - A mapped chunk lies wholly inside the file, whose length is set before the chunk is mapped
//!   and never reduced: a read never faults past its end. Only ranges already written are read.
//! - A slice of a [`Spilled`] that this `Spill` did not hand out is empty or other bytes, never a
//!   fault: every range is checked against its chunk.
//! - A backing is a chunk of its own that nothing is appended to; an adopted range lies wholly
//!   inside it (checked by address), and its bytes never change while the spill holds it (the
//!   backing's contract: a snapshot file is never written in place, `journal::mmap`).
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use memmap2::{Mmap, MmapOptions, UncheckedAdvice};

use crate::aligned::StageBuf;
use crate::root::dir::Dir;

/// The size of a chunk: a multiple of any page size Linux uses, and large enough that the chunk
/// list stays short (25 chunks per 100 000 settled manifests of the workload's size).
const CHUNK: usize = 4 << 20;

/// Where appended bytes are: a range of one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spilled {
    chunk: u32,
    offset: u32,
    len: u32,
}

impl Spilled {
    /// Its 12 bytes, for a record that says where a range is.
    pub(crate) fn to_bytes(self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[..4].copy_from_slice(&self.chunk.to_le_bytes());
        b[4..8].copy_from_slice(&self.offset.to_le_bytes());
        b[8..].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// The range `to_bytes` wrote (any 12 bytes name some range; `Spill::get` checks it).
    pub(crate) fn from_bytes(b: [u8; 12]) -> Spilled {
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Spilled {
            chunk: word(0),
            offset: word(4),
            len: word(8),
        }
    }
}

/// An append refused: the bytes are not spilled, and the caller keeps them itself.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpillError {
    #[error("{0} bytes do not fit a chunk's 32-bit offsets")]
    TooLarge(usize),
    #[error("spill file: {0}")]
    Io(#[from] io::Error),
}

/// Bytes another owner keeps unchanged for as long as they are held (a snapshot file's
/// read-only mapping, or its bytes read onto the heap where mapping failed), which a spill made
/// over them hands out ranges of in place ([`Spill::adopt`]).
pub(crate) trait Backing: Send + Sync + std::fmt::Debug {
    fn bytes(&self) -> &[u8];

    /// Drops this process's page-table entries for the bytes where they are mapped; the next
    /// read maps the same bytes again ([`Spill::release_resident`]).
    fn release_resident(&self) {}
}

impl Backing for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

enum Chunk {
    /// Bytes held by their owner, adopted in place, never appended to.
    Backed(std::sync::Arc<dyn Backing>),
    /// `used` bytes written through the file, read through `map`. Only the last chunk is
    /// appended to, and it is then the file's last `map.len()` bytes. It maps the file from
    /// byte `start` on.
    Mapped { map: Mmap, used: usize, start: u64 },
    /// Heap bytes, never more than `size` (what the chunk was made for, which its allocation
    /// may exceed): never grown past its capacity, so it never moves, and of the same size as a
    /// mapped chunk would be, which record arithmetic counts on.
    Heap { bytes: Vec<u8>, size: usize },
}

impl Chunk {
    fn bytes(&self) -> &[u8] {
        match self {
            Chunk::Backed(backing) => backing.bytes(),
            Chunk::Mapped { map, used, .. } => map.get(..*used).unwrap_or_default(),
            Chunk::Heap { bytes, .. } => bytes,
        }
    }

    fn room(&self) -> usize {
        match self {
            Chunk::Backed(_) => 0,
            Chunk::Mapped { map, used, .. } => map.len() - used,
            Chunk::Heap { bytes, size } => size.saturating_sub(bytes.len()),
        }
    }
}

/// Append-only spill space (module doc).
pub(crate) struct Spill {
    file: Option<File>,
    /// The least size of a chunk: [`CHUNK`], less in tests to cross chunks often.
    chunk_bytes: usize,
    /// The file's length: the end of its last chunk.
    file_len: u64,
    chunks: Vec<Chunk>,
}

impl Default for Spill {
    fn default() -> Self {
        Spill {
            file: None,
            chunk_bytes: CHUNK,
            file_len: 0,
            chunks: Vec::new(),
        }
    }
}

impl std::fmt::Debug for Spill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spill")
            .field("file", &self.file.is_some())
            .field("chunks", &self.chunks.len())
            .field("bytes", &self.bytes())
            .finish()
    }
}

/// A copy on the heap, each chunk at the same place: every [`Spilled`] of the original reads the
/// same bytes in the copy. A backing is shared, not copied: its bytes never change.
impl Clone for Spill {
    fn clone(&self) -> Self {
        let chunks = self
            .chunks
            .iter()
            .map(|c| {
                if let Chunk::Backed(backing) = c {
                    return Chunk::Backed(std::sync::Arc::clone(backing));
                }
                let size = c.bytes().len() + c.room();
                let mut bytes = Vec::with_capacity(size);
                bytes.extend_from_slice(c.bytes());
                Chunk::Heap { bytes, size }
            })
            .collect();
        Spill {
            chunks,
            ..Spill::default()
        }
    }
}

impl Spill {
    /// Spill space in `file`, an unnamed file of this process's own (`O_TMPFILE`), empty.
    pub(crate) fn in_file(file: File) -> Spill {
        Spill {
            file: Some(file),
            ..Spill::default()
        }
    }

    /// Spill space in a new unnamed file of `dir` (`Dir::unnamed_file`); on the heap, said, if
    /// the file system refuses one (no `O_TMPFILE`, no room for an inode).
    pub(crate) fn in_dir(dir: &Dir) -> Spill {
        match dir.unnamed_file() {
            Ok(file) => Spill::in_file(file),
            Err(e) => {
                tracing::warn!(
                    dir = %dir.path().display(),
                    "no spill file, what would go there stays on the heap: {e}"
                );
                Spill::default()
            }
        }
    }

    /// Spill space on the heap whose first chunk is `backing`, for [`Spill::adopt`] to hand out
    /// ranges of. A backing too large for a chunk's 32-bit offsets is not held: every range is
    /// then appended, as a copy.
    pub(crate) fn over(backing: std::sync::Arc<dyn Backing>) -> Spill {
        let mut spill = Spill::default();
        if u32::try_from(backing.bytes().len()).is_ok() {
            spill.chunks.push(Chunk::Backed(backing));
        }
        spill
    }

    /// Where `bytes` are when they lie wholly inside a backing of this spill: the same range,
    /// read in place, with nothing copied or appended. `None` for any other bytes.
    pub(crate) fn adopt(&self, bytes: &[u8]) -> Option<Spilled> {
        let len = u32::try_from(bytes.len()).ok()?;
        let start = bytes.as_ptr() as usize;
        self.chunks.iter().enumerate().find_map(|(at, chunk)| {
            let Chunk::Backed(backing) = chunk else {
                return None;
            };
            let held = backing.bytes();
            let offset = start.checked_sub(held.as_ptr() as usize)?;
            if offset.checked_add(bytes.len())? > held.len() {
                return None;
            }
            Some(Spilled {
                chunk: u32::try_from(at).ok()?,
                offset: u32::try_from(offset).ok()?,
                len,
            })
        })
    }

    /// Whether appended bytes leave the heap.
    #[cfg(any(test, feature = "test-support"))]
    pub(crate) fn is_file(&self) -> bool {
        self.file.is_some()
            || self
                .chunks
                .iter()
                .any(|c| matches!(c, Chunk::Mapped { .. }))
    }

    /// Bytes this spill holds on the heap: appended, not adopted.
    #[cfg(any(test, feature = "test-support"))]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.chunks
            .iter()
            .filter(|c| matches!(c, Chunk::Heap { .. }))
            .map(|c| c.bytes().len())
            .sum()
    }

    /// Bytes held: those appended so far, and the whole of a backing.
    pub(crate) fn bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.bytes().len() as u64).sum()
    }

    /// Appends `bytes`; where they are, or why they were refused (then nothing changed that a
    /// read could see).
    pub(crate) fn append(&mut self, bytes: &[u8]) -> Result<Spilled, SpillError> {
        let len = u32::try_from(bytes.len()).map_err(|_| SpillError::TooLarge(bytes.len()))?;
        if self.chunks.last().is_none_or(|c| c.room() < bytes.len()) {
            self.add_chunk(bytes.len())?;
        }
        let at = self.chunks.len() - 1;
        let file = &self.file;
        let Some(chunk) = self.chunks.last_mut() else {
            return Err(SpillError::Io(io::Error::other(
                "no chunk after adding one",
            )));
        };
        let offset = chunk.bytes().len();
        match chunk {
            Chunk::Mapped { used, start, .. } => {
                file.as_ref()
                    .ok_or_else(|| io::Error::other("a mapped chunk without its file"))?
                    .write_all_at(bytes, *start + *used as u64)?;
                *used += bytes.len();
            }
            Chunk::Heap { bytes: v, .. } => v.extend_from_slice(bytes),
            Chunk::Backed(_) => {
                return Err(SpillError::Io(io::Error::other("an append to a backing")));
            }
        }
        Ok(Spilled {
            chunk: u32::try_from(at).map_err(|_| SpillError::TooLarge(bytes.len()))?,
            offset: u32::try_from(offset).map_err(|_| SpillError::TooLarge(bytes.len()))?,
            len,
        })
    }

    /// A new last chunk with room for `at_least` bytes: mapped from the file when there is one,
    /// else on the heap.
    fn add_chunk(&mut self, at_least: usize) -> Result<(), SpillError> {
        let size = at_least
            .max(self.chunk_bytes)
            .next_multiple_of(self.chunk_bytes);
        self.add_chunk_of(size)
    }

    /// A new last chunk of exactly `size` bytes (a multiple of the chunk size).
    fn add_chunk_of(&mut self, size: usize) -> Result<(), SpillError> {
        if u32::try_from(size).is_err() {
            return Err(SpillError::TooLarge(size));
        }
        let Some(file) = &self.file else {
            self.chunks.push(Chunk::Heap {
                bytes: Vec::with_capacity(size),
                size,
            });
            return Ok(());
        };
        let end = self.file_len + size as u64;
        // Sparse: the chunk's pages are allocated as they are written.
        file.set_len(end)?;
        // SAFETY: the file is this process's own unnamed file (`O_TMPFILE`: no name, so no other
        // process opens it short of root reaching into /proc/PID/fd), its length was just set to
        // cover the whole range mapped, and `Spill` never shortens it; so no access through the
        // mapping lies past its end. The mapping is read-only and writes go through the
        // descriptor into the same page cache: appends to ranges not yet handed out, and a
        // `Column`'s overwrites only through `&mut self`, while no slice of the mapping is
        // borrowed.
        let map = unsafe {
            MmapOptions::new()
                .offset(self.file_len)
                .len(size)
                .map(file)?
        };
        let start = self.file_len;
        self.file_len = end;
        self.chunks.push(Chunk::Mapped {
            map,
            used: 0,
            start,
        });
        Ok(())
    }

    /// This spill's bytes moved into `file` (an unnamed file of this process's own, empty),
    /// chunk by chunk at the same places: every [`Spilled`] it handed out reads the same bytes
    /// from the result. A backing stays where it is: it is not on this process's heap. On a
    /// refusal this spill is given back unchanged, with the error.
    pub(crate) fn into_file(self, file: File) -> Result<Spill, (Spill, SpillError)> {
        let mut moved = Spill {
            chunk_bytes: self.chunk_bytes,
            ..Spill::in_file(file)
        };
        for chunk in &self.chunks {
            if let Chunk::Backed(backing) = chunk {
                moved
                    .chunks
                    .push(Chunk::Backed(std::sync::Arc::clone(backing)));
                continue;
            }
            let bytes = chunk.bytes();
            let written = moved
                .add_chunk_of(bytes.len() + chunk.room())
                .and_then(|()| moved.append(bytes));
            if let Err(e) = written {
                return Err((self, e));
            }
        }
        Ok(moved)
    }

    /// The bytes of `at`: empty when this spill never handed `at` out.
    pub(crate) fn get(&self, at: Spilled) -> &[u8] {
        let start = at.offset as usize;
        self.chunks
            .get(at.chunk as usize)
            .and_then(|c| c.bytes().get(start..start + at.len as usize))
            .unwrap_or_default()
    }

    /// Writes `bytes` again over bytes already appended to chunk `chunk` at `offset`; an error,
    /// changing nothing, for a range that was not appended.
    fn overwrite(&mut self, chunk: usize, offset: usize, bytes: &[u8]) -> Result<(), SpillError> {
        let end = offset + bytes.len();
        let outside = || SpillError::Io(io::Error::other("an overwrite outside what was appended"));
        match self.chunks.get_mut(chunk).ok_or_else(outside)? {
            Chunk::Mapped { used, start, .. } if end <= *used => {
                let file = self.file.as_ref().ok_or_else(outside)?;
                file.write_all_at(bytes, *start + offset as u64)?;
            }
            Chunk::Heap { bytes: v, .. } if end <= v.len() => v[offset..end].copy_from_slice(bytes),
            _ => return Err(outside()),
        }
        Ok(())
    }

    /// The bytes of each chunk, in order: what a [`BytesWriter`] wrote, laid end to end.
    pub(crate) fn chunks(&self) -> impl Iterator<Item = &[u8]> {
        self.chunks.iter().map(Chunk::bytes)
    }

    /// Record `i` of `N`-byte records laid end to end over chunks that are all full but the
    /// last (as [`Records`] and [`Column`] write them; neither is ever made over a backing).
    fn record<const N: usize>(&self, i: usize) -> Option<[u8; N]> {
        let at = i.checked_mul(N)?;
        let chunk = self.chunks.get(at / self.chunk_bytes)?;
        let start = at % self.chunk_bytes;
        chunk.bytes().get(start..start + N)?.try_into().ok()
    }

    /// Unmaps the pages of the file that reads brought into this process (a snapshot reads every
    /// frame): they stay in the page cache, and a later read maps them again.
    pub(crate) fn release_resident(&self) {
        for chunk in &self.chunks {
            if let Chunk::Backed(backing) = chunk {
                backing.release_resident();
            }
            if let Chunk::Mapped { map, .. } = chunk {
                // SAFETY: the mapping is a read-only shared mapping of a file. `MADV_DONTNEED`
                // there drops only this process's page-table entries; the next access faults the
                // same bytes in from the page cache (or the file), so every slice borrowed from
                // it reads what it read before. No private or anonymous memory is discarded.
                let _ = unsafe { map.unchecked_advise(UncheckedAdvice::DontNeed) };
            }
        }
    }
}

/// Bytes written in order into spill space, a block at a time (the last one part-full), so that
/// every chunk but the last is full: [`Spill::chunks`] laid end to end are the bytes written.
#[derive(Debug)]
pub(crate) struct BytesWriter {
    spill: Spill,
    /// On a cache line: a block written from 16 bytes past a page's start took the kernel
    /// several times as long to copy (`aligned`).
    pending: StageBuf,
}

impl BytesWriter {
    /// No bytes yet, written into `spill` (which must be empty).
    pub(crate) fn new(spill: Spill) -> Self {
        BytesWriter {
            spill,
            pending: StageBuf::new(),
        }
    }

    /// Appends `bytes`; the spill's error if a block could not be written.
    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<(), SpillError> {
        self.pending.extend_from_slice(bytes);
        if self.pending.len() >= BLOCK {
            let whole = self.pending.len() / BLOCK * BLOCK;
            for block in self.pending[..whole].chunks(BLOCK) {
                self.spill.append(block)?;
            }
            self.pending.drain_front(whole);
        }
        Ok(())
    }

    /// Writes out what is pending: the bytes, all in spill space.
    pub(crate) fn finish(self) -> Result<Spill, SpillError> {
        let mut spill = self.spill;
        if !self.pending.is_empty() {
            spill.append(&self.pending)?;
        }
        Ok(spill)
    }
}

/// Records of `N` bytes each in spill space, read by number: a sorted array that no longer lives
/// on the heap. Written by a [`RecordsWriter`] in blocks of [`BLOCK`] bytes (a multiple of `N`
/// that divides every chunk size), so every chunk but the last is full and record `i` lies at
/// byte `i * N` of the chunks laid end to end.
#[derive(Debug, Clone)]
pub(crate) struct Records<const N: usize> {
    spill: Spill,
    len: usize,
}

/// Writes a [`Records`], in order.
#[derive(Debug)]
pub(crate) struct RecordsWriter<const N: usize> {
    bytes: BytesWriter,
    len: usize,
}

/// Bytes written to a [`Records`]' spill at a time.
const BLOCK: usize = 64 << 10;

impl<const N: usize> RecordsWriter<N> {
    const FIT: () = assert!(
        N > 0 && BLOCK.is_multiple_of(N),
        "records must tile a block"
    );

    /// No records yet, written into `spill` (which must be empty) as they come.
    pub(crate) fn new(spill: Spill) -> Self {
        let () = Self::FIT;
        RecordsWriter {
            bytes: BytesWriter::new(spill),
            len: 0,
        }
    }

    /// Appends one record; the spill's error if a block of them could not be written.
    pub(crate) fn push(&mut self, record: [u8; N]) -> Result<(), SpillError> {
        self.bytes.write(&record)?;
        self.len += 1;
        Ok(())
    }

    /// Writes out the records still pending; then none of them lives on the heap.
    pub(crate) fn finish(self) -> Result<Records<N>, SpillError> {
        let mut spill = self.bytes.finish()?;
        // Nothing is appended any more: the mappings keep the file, and a root with many
        // sealed runs keeps no descriptor for each.
        spill.file = None;
        Ok(Records {
            spill,
            len: self.len,
        })
    }
}

impl<const N: usize> Records<N> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Record `i`, if there is one.
    pub(crate) fn get(&self, i: usize) -> Option<[u8; N]> {
        if i >= self.len {
            return None;
        }
        self.spill.record(i)
    }

    /// Whether the records left the heap.
    #[cfg(any(test, feature = "test-support"))]
    pub(crate) fn is_file(&self) -> bool {
        self.spill.is_file()
    }
}

/// Records of `N` bytes, one per position, that grow at the end and change in place: whole
/// blocks of them in spill space, the records after the last whole block on the heap. Record `i`
/// of the blocks lies at byte `i * N` of the chunks laid end to end, as in [`Records`].
///
/// A block the spill refuses stays on the heap (and is tried again with the next block's worth),
/// and a change the spill refuses is kept on the heap beside it: either costs memory, never an
/// answer.
#[derive(Debug, Clone)]
pub(crate) struct Column<const N: usize> {
    spill: Spill,
    /// Records in the spill: whole blocks.
    spilled: usize,
    /// The records after them.
    tail: Vec<[u8; N]>,
    /// Records in the spill whose change the spill refused, as they are now.
    changed: BTreeMap<usize, [u8; N]>,
}

impl<const N: usize> Default for Column<N> {
    fn default() -> Self {
        Column {
            spill: Spill::default(),
            spilled: 0,
            tail: Vec::new(),
            changed: BTreeMap::new(),
        }
    }
}

impl<const N: usize> Column<N> {
    const PER_BLOCK: usize = {
        assert!(
            N > 0 && BLOCK.is_multiple_of(N),
            "records must tile a block"
        );
        BLOCK / N
    };

    pub(crate) fn len(&self) -> usize {
        self.spilled + self.tail.len()
    }

    /// Record `i`, if there is one.
    pub(crate) fn get(&self, i: usize) -> Option<[u8; N]> {
        if let Some(r) = i.checked_sub(self.spilled) {
            return self.tail.get(r).copied();
        }
        match self.changed.get(&i) {
            Some(record) => Some(*record),
            None => self.spill.record(i),
        }
    }

    /// Appends a record; a whole block's worth of them goes to the spill.
    pub(crate) fn push(&mut self, record: [u8; N]) {
        self.tail.push(record);
        // After a refusal, tried again only once another block's worth has come.
        if self.tail.len().is_multiple_of(Self::PER_BLOCK) {
            self.spill_blocks();
        }
    }

    fn spill_blocks(&mut self) {
        while let Some(block) = self.tail.get(..Self::PER_BLOCK) {
            if let Err(e) = self.spill.append(block.as_flattened()) {
                tracing::warn!("{} records stay on the heap: {e}", self.tail.len());
                return;
            }
            self.tail.drain(..Self::PER_BLOCK);
            self.spilled += Self::PER_BLOCK;
        }
    }

    /// Changes record `i` (a position never pushed is left alone).
    pub(crate) fn set(&mut self, i: usize, record: [u8; N]) {
        if let Some(r) = i.checked_sub(self.spilled) {
            if let Some(held) = self.tail.get_mut(r) {
                *held = record;
            }
            return;
        }
        let at = i * N;
        let (chunk, offset) = (at / self.spill.chunk_bytes, at % self.spill.chunk_bytes);
        match self.spill.overwrite(chunk, offset, &record) {
            Ok(()) => {
                self.changed.remove(&i);
            }
            Err(e) => {
                tracing::warn!(record = i, "a changed record stays on the heap: {e}");
                self.changed.insert(i, record);
            }
        }
    }

    /// This column with its spilled blocks moved into `file` (as [`Spill::into_file`]); on a
    /// refusal it is given back unchanged, with the error.
    pub(crate) fn into_file(self, file: File) -> Result<Self, (Self, SpillError)> {
        let Column {
            spill,
            spilled,
            tail,
            changed,
        } = self;
        let (spill, outcome) = match spill.into_file(file) {
            Ok(moved) => (moved, Ok(())),
            Err((kept, e)) => (kept, Err(e)),
        };
        let mut column = Column {
            spill,
            spilled,
            tail,
            changed,
        };
        match outcome {
            Ok(()) => {
                column.spill_blocks();
                Ok(column)
            }
            Err(e) => Err((column, e)),
        }
    }

    /// How many records live on the heap: those after the last whole block, and any the spill
    /// refused.
    #[cfg(any(test, feature = "test-support"))]
    pub(crate) fn on_heap(&self) -> usize {
        self.tail.len() + self.changed.len()
    }

    /// Whether the spilled records left the heap.
    #[cfg(any(test, feature = "test-support"))]
    pub(crate) fn is_file(&self) -> bool {
        self.spill.is_file()
    }

    /// Unmaps the pages reads mapped (as [`Spill::release_resident`]).
    pub(crate) fn release_resident(&self) {
        self.spill.release_resident();
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A chunk size for tests: one of the largest pages Linux uses.
    const SMALL: usize = 64 << 10;

    fn unnamed_in(dir: &std::path::Path) -> File {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open(dir)
            .expect("O_TMPFILE")
    }

    fn unnamed() -> File {
        unnamed_in(&std::env::temp_dir())
    }

    proptest! {
        /// Every append reads back as it was written, in a file and on the heap alike, and so
        /// does a copy, and the heap's moved into a file; a release of the resident pages
        /// changes no answer.
        #[test]
        fn appended_bytes_read_back(sizes in prop::collection::vec(0usize..3 * SMALL / 2, 1..12)) {
            let small = |s: Spill| Spill { chunk_bytes: SMALL, ..s };
            let (mut file, mut heap) = (small(Spill::in_file(unnamed())), small(Spill::default()));
            let mut written = Vec::new();
            for (n, size) in sizes.iter().enumerate() {
                let bytes: Vec<u8> = (0..*size).map(|i| (i * 7 + n) as u8).collect();
                let (a, b) = (file.append(&bytes).unwrap(), heap.append(&bytes).unwrap());
                prop_assert_eq!(a, b);
                written.push((a, bytes));
            }
            file.release_resident();
            let copy = file.clone();
            let heap = heap.into_file(unnamed()).map_err(|(_, e)| e).unwrap();
            for (at, bytes) in &written {
                prop_assert_eq!(file.get(*at), &bytes[..]);
                prop_assert_eq!(heap.get(*at), &bytes[..]);
                prop_assert_eq!(copy.get(*at), &bytes[..]);
            }
            prop_assert_eq!(file.bytes(), sizes.iter().sum::<usize>() as u64);
            prop_assert!(file.is_file() && heap.is_file() && !copy.is_file());
        }
    }

    proptest! {
        /// A range inside a backing is adopted where it is, and reads back in place from the
        /// spill, its copy and the spill moved into a file, among appends before and after;
        /// bytes outside the backing, even by one, are never adopted, and appends never land
        /// in it.
        #[test]
        fn a_backing_is_read_in_place(
            len in 1usize..3 * SMALL,
            ranges in prop::collection::vec((0usize..3 * SMALL, 0usize..SMALL), 1..10),
            sizes in prop::collection::vec(0usize..SMALL, 0..4),
        ) {
            let held: Vec<u8> = (0..len).map(|i| (i * 13 + 1) as u8).collect();
            let backing: std::sync::Arc<dyn Backing> = std::sync::Arc::new(held.clone());
            let base = backing.bytes().as_ptr();
            let mut spill = Spill { chunk_bytes: SMALL, ..Spill::over(backing.clone()) };
            let mut appended = Vec::new();
            for size in &sizes {
                let bytes = vec![0xa5; *size];
                appended.push((spill.append(&bytes).unwrap(), bytes));
            }
            let mut adopted = Vec::new();
            for (start, n) in ranges {
                let (start, n) = (start % len, n % (len - start % len + 1));
                let inside = &backing.bytes()[start..start + n];
                let at = spill.adopt(inside);
                prop_assert!(at.is_some(), "{start}+{n} of {len}");
                adopted.push((at.unwrap(), start, n));
                // The same bytes elsewhere are not the backing's.
                prop_assert_eq!(spill.adopt(&held[start..start + n]), None);
            }
            // One byte past either end of the backing.
            let wider = [0u8; 2];
            prop_assert_eq!(spill.adopt(&wider), None);
            let copy = spill.clone();
            let moved = spill.into_file(unnamed()).map_err(|(_, e)| e).unwrap();
            for s in [&copy, &moved] {
                for (at, start, n) in &adopted {
                    let read = s.get(*at);
                    prop_assert_eq!(read, &held[*start..*start + *n]);
                    prop_assert!(*n == 0 || std::ptr::eq(read.as_ptr(), base.wrapping_add(*start)));
                }
                for (at, bytes) in &appended {
                    prop_assert_eq!(s.get(*at), &bytes[..]);
                }
            }
            prop_assert_eq!(copy.heap_bytes(), sizes.iter().sum::<usize>());
            prop_assert_eq!(moved.heap_bytes(), 0);
        }
    }

    /// A backing past a chunk's 32-bit offsets is not held: nothing is adopted from it, and
    /// its bytes are appended as copies instead. (A sparse file of 4 GiB and one byte, mapped
    /// and never read: no memory is spent on it.)
    #[test]
    fn a_backing_too_large_for_offsets_is_not_held() {
        #[derive(Debug)]
        struct Mapped(Mmap);
        impl Backing for Mapped {
            fn bytes(&self) -> &[u8] {
                &self.0
            }
        }
        let file = tempfile::tempfile().unwrap();
        file.set_len(u64::from(u32::MAX) + 1).unwrap();
        // SAFETY: the file is this test's own unnamed temporary file, its length set just above
        // and never changed while the read-only mapping lives.
        let map = unsafe { Mmap::map(&file).unwrap() };
        let huge: std::sync::Arc<dyn Backing> = std::sync::Arc::new(Mapped(map));
        let mut spill = Spill::over(huge.clone());
        let tail = &huge.bytes()[(u32::MAX as usize) - 8..];
        assert_eq!(spill.adopt(tail), None);
        let at = spill.append(tail).unwrap();
        assert_eq!(spill.get(at), tail);
        assert_eq!(spill.heap_bytes(), tail.len());
    }

    proptest! {
        /// Record `i` reads back as the `i`-th pushed, across chunks, in a file and on the heap.
        #[test]
        fn records_read_back_by_number(n in 0usize..3 * SMALL / 32 + 5) {
            let small = |s: Spill| Spill { chunk_bytes: SMALL, ..s };
            for spill in [small(Spill::in_file(unnamed())), small(Spill::default())] {
                let mut w = RecordsWriter::<32>::new(spill);
                let record = |i: usize| {
                    let mut r = [0u8; 32];
                    r[..8].copy_from_slice(&(i as u64).to_le_bytes());
                    r[31] = i as u8;
                    r
                };
                for i in 0..n {
                    w.push(record(i)).unwrap();
                }
                let records = w.finish().unwrap();
                prop_assert_eq!(records.len(), n);
                for i in 0..n {
                    prop_assert_eq!(records.get(i), Some(record(i)));
                }
                prop_assert_eq!(records.get(n), None);
            }
        }
    }

    proptest! {
        /// The chunks of what a bytes writer wrote, laid end to end, are the bytes written, in
        /// a file and on the heap alike, across blocks and chunks.
        #[test]
        fn written_bytes_read_back_laid_end_to_end(
            sizes in prop::collection::vec(0usize..3 * BLOCK, 0..40),
        ) {
            let small = |s: Spill| Spill { chunk_bytes: SMALL * 2, ..s };
            for spill in [small(Spill::in_file(unnamed())), small(Spill::default())] {
                let mut w = BytesWriter::new(spill);
                let mut want = Vec::new();
                for (n, size) in sizes.iter().enumerate() {
                    let bytes: Vec<u8> = (0..*size).map(|i| (i * 13 + n) as u8).collect();
                    w.write(&bytes).unwrap();
                    want.extend_from_slice(&bytes);
                }
                let spill = w.finish().unwrap();
                prop_assert_eq!(spill.chunks().collect::<Vec<_>>().concat(), want);
            }
        }
    }

    /// A record of a column for a test: its number and a mark.
    fn record(i: usize, mark: u8) -> [u8; 16] {
        let mut r = [mark; 16];
        r[..8].copy_from_slice(&(i as u64).to_le_bytes());
        r
    }

    proptest! {
        /// A column answers as a vector given the same pushes and changes, in a file and on
        /// the heap alike, across chunks, after its heap blocks move into a file and after its
        /// pages are released; and only the records after the last whole block stay on the heap.
        #[test]
        fn a_column_answers_as_a_vector(
            ops in prop::collection::vec((any::<bool>(), any::<usize>(), any::<u8>()), 0..3000),
            move_at in any::<usize>(),
        ) {
            let small = |s: Spill| Spill { chunk_bytes: SMALL, ..s };
            let columns = [
                Column::<16> { spill: small(Spill::in_file(unnamed())), ..Column::default() },
                Column::<16> { spill: small(Spill::default()), ..Column::default() },
            ];
            for mut column in columns {
                let mut model: Vec<[u8; 16]> = Vec::new();
                for (n, (push, at, mark)) in ops.iter().enumerate() {
                    if *push || model.is_empty() {
                        // Mostly pushes: enough to cross blocks and chunks.
                        for _ in 0..4 {
                            column.push(record(model.len(), *mark));
                            model.push(record(model.len(), *mark));
                        }
                    } else {
                        let i = at % model.len();
                        column.set(i, record(i, mark.wrapping_add(1)));
                        model[i] = record(i, mark.wrapping_add(1));
                    }
                    if n == move_at % ops.len().max(1) && !column.is_file() {
                        column = column.into_file(unnamed()).map_err(|(_, e)| e).unwrap();
                    }
                }
                column.release_resident();
                prop_assert_eq!(column.len(), model.len());
                for (i, r) in model.iter().enumerate() {
                    prop_assert_eq!(column.get(i), Some(*r));
                }
                prop_assert_eq!(column.get(model.len()), None);
                prop_assert_eq!(column.on_heap(), model.len() % Column::<16>::PER_BLOCK);
            }
        }
    }

    /// A change the spill refuses is kept on the heap and read from there.
    #[test]
    fn a_refused_change_is_kept_on_the_heap() {
        let mut column = Column::<16> {
            spill: Spill::in_file(unnamed()),
            ..Column::default()
        };
        let n = Column::<16>::PER_BLOCK + 3;
        for i in 0..n {
            column.push(record(i, 0));
        }
        assert_eq!(column.on_heap(), 3);
        // As a finished `Records` does: the mappings stay, the descriptor goes, so a write
        // into a spilled record fails.
        column.spill.file = None;
        column.set(7, record(7, 9));
        column.set(n - 1, record(n - 1, 9));
        assert_eq!(column.get(7), Some(record(7, 9)));
        assert_eq!(column.get(8), Some(record(8, 0)));
        assert_eq!(column.get(n - 1), Some(record(n - 1, 9)));
        assert_eq!(column.on_heap(), 4);
    }

    #[test]
    fn a_range_never_handed_out_reads_empty() {
        let mut s = Spill::in_file(unnamed());
        let at = s.append(b"abc").unwrap();
        let beyond = Spilled {
            offset: 2,
            len: 5,
            ..at
        };
        let other_chunk = Spilled { chunk: 1, ..at };
        assert_eq!(s.get(at), b"abc");
        assert_eq!(s.get(beyond), b"");
        assert_eq!(s.get(other_chunk), b"");
    }

    /// A full file system refuses the append, and the spill reads as before.
    #[test]
    fn a_refused_append_changes_nothing() {
        let Some(tmpfs) = testing::Tmpfs::mount("1m") else {
            return;
        };
        let mut s = Spill::in_file(unnamed_in(tmpfs.path()));
        let small = s.append(b"kept").unwrap();
        let refused = s.append(&vec![1u8; 2 << 20]);
        let after = s.append(b"after");
        assert!(matches!(refused, Err(SpillError::Io(_))), "{refused:?}");
        assert_eq!(s.get(small), b"kept");
        assert_eq!(s.get(after.unwrap()), b"after");
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use std::path::Path;

    /// A tmpfs of a given size on a new temporary directory, unmounted when dropped: a file
    /// system that fills for real.
    pub(crate) struct Tmpfs {
        dir: tempfile::TempDir,
    }

    impl Tmpfs {
        /// `None`, said on stderr, where mounting is not allowed (not root).
        pub(crate) fn mount(size: &str) -> Option<Tmpfs> {
            let dir = tempfile::tempdir().ok()?;
            let mounted = std::process::Command::new("mount")
                .args([
                    "-t",
                    "tmpfs",
                    "-o",
                    &format!("size={size},mode=0700"),
                    "tmpfs",
                ])
                .arg(dir.path())
                .status();
            if !mounted.is_ok_and(|s| s.success()) {
                eprintln!("skipped: cannot mount a {size} tmpfs here (needs root)");
                return None;
            }
            Some(Tmpfs { dir })
        }

        pub(crate) fn path(&self) -> &Path {
            self.dir.path()
        }
    }

    impl Drop for Tmpfs {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg(self.dir.path())
                .status();
        }
    }
}
