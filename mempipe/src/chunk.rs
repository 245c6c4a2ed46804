//! A claimed chunk ([`Chunk`]) and the private copy of its bytes
//! ([`ChunkBuf`]).

use std::fmt;
use std::sync::atomic::Ordering;

use crate::layout::{Ring, SLOT_FREE, SLOT_WAITER};
use crate::shared_copy::copy_words;
use crate::sys::futex_wake;

/// A claimed chunk. Dropping it releases its slot back to the producer.
pub struct Chunk<'a> {
    /// The consumer's mapping of the ring (borrowed from the consumer, so
    /// the chunk cannot outlive it).
    pub(crate) ring: &'a Ring,
    pub(crate) seq: u64,
    pub(crate) idx: usize,
    pub(crate) len: usize,
    /// The slot broke the protocol: no data, and the slot is not ours.
    pub(crate) refused: bool,
}

impl Chunk<'_> {
    /// Sequence number of this chunk (0 for the first published).
    #[inline]
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Copies the published bytes (exactly the `len` given to `publish`)
    /// into `buf`, replacing what it held; nothing for a refused chunk.
    ///
    /// The chunk is shared memory the producer can write at any time (an
    /// honest one does not while the chunk is claimed; a hostile one can),
    /// so it is never handed out as a `&[u8]`: that would let safe code
    /// read memory that changes under it, which Rust's rules forbid. It is
    /// copied whole words at a time (the chunk is page-aligned and a whole
    /// number of pages long, so the last word read is inside it) by
    /// `shared_copy::copy_words`, which reads it as relaxed atomic loads
    /// would, only faster. What comes out is this process's own memory,
    /// still untrusted input: it may mix bytes from before and after a
    /// hostile producer's write.
    #[inline]
    pub fn copy_into(&self, buf: &mut ChunkBuf) {
        buf.words.clear();
        buf.len = 0;
        if self.refused {
            return;
        }
        let n = self.len.div_ceil(8);
        let src = self.ring.chunk_ptr(self.idx).cast::<u64>();
        buf.words.reserve(n);
        let dst = buf.words.spare_capacity_mut()[..n]
            .as_mut_ptr()
            .cast::<u64>();
        // SAFETY: n <= chunk_size / 8 (len <= chunk_size, checked when
        // claimed; chunk_size is a multiple of 4096), so the words are
        // inside this chunk, in the mapping, which outlives `self` (the
        // Consumer's ring is borrowed); they are 8-aligned (the data area
        // and chunk_size are page multiples); this process only ever reads
        // them atomically or through `copy_words`. `dst` is the buffer's
        // own spare room for n words, apart from the mapping.
        unsafe { copy_words(src, dst, n) };
        // SAFETY: the first n elements were just written.
        unsafe { buf.words.set_len(n) };
        buf.len = self.len;
    }

    /// [`Chunk::copy_into`] a new buffer.
    pub fn copy(&self) -> ChunkBuf {
        let mut b = ChunkBuf::new();
        self.copy_into(&mut b);
        b
    }

    /// Number of valid bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the chunk has no valid bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the consumer refused this chunk: its slot broke the protocol
    /// (see [`Consumer::violation`](crate::Consumer::violation)). It has no data, and it is the last
    /// chunk of the stream.
    #[inline]
    pub fn is_refused(&self) -> bool {
        self.refused
    }
}

/// A chunk's bytes, copied into this process's memory by
/// [`Chunk::copy_into`]: reuse one per worker to copy without allocating.
/// Stored as 64-bit words, so [`ChunkBuf::bytes`] is 8-byte aligned (the
/// decoder reads it as words in place).
#[derive(Debug, Clone, Default)]
pub struct ChunkBuf {
    words: Vec<u64>,
    /// Valid bytes (the last word may hold fewer).
    len: usize,
}

impl ChunkBuf {
    /// An empty buffer; it grows on first use.
    pub fn new() -> ChunkBuf {
        ChunkBuf::default()
    }

    /// The bytes, as the ring held them.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        debug_assert!(self.len <= self.words.len() * 8);
        // SAFETY: `words` holds at least `len` bytes (len <= 8 * words,
        // set together in copy_into), every byte of a u64 is an
        // initialised u8, and u8 needs no alignment; the borrow of `self`
        // keeps the Vec alive and unchanged.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }

    /// Number of valid bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl fmt::Debug for Chunk<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunk")
            .field("seq", &self.seq)
            .field("len", &self.len)
            .field("refused", &self.refused)
            .finish()
    }
}

impl Drop for Chunk<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.refused {
            // Not ours: the slot never held this chunk.
            return;
        }
        let slot = self.ring.slot(self.idx);
        // Release: our reads of the chunk happen before the producer (Acquire)
        // reuses it. The swap is ordered with the producer's waiter-bit CAS, so
        // either it sees the bit and wakes the producer or the CAS fails.
        let prev = slot.state.swap(SLOT_FREE, Ordering::Release);
        if prev & SLOT_WAITER != 0 {
            futex_wake(&slot.state, 1);
        }
    }
}
