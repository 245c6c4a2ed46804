//! The ring's shared memory as both ends see it: the constants and
//! `#[repr(C)]` types of the header and slot descriptors (the wire format of
//! the crate documentation, checked at compile time), the validated
//! [`Geometry`] of a ring, its parsing from an untrusted header
//! ([`validate`]), and [`Ring`], a mapped ring with its geometry.

use std::fmt;
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::error::Error;
use crate::mapping::Mapping;
use crate::sys::futex_wake;

/// The eight bytes every ring file starts with.
pub const MAGIC: [u8; 8] = *b"MEMPIPE1";
/// Version of the layout described in the crate documentation.
pub const LAYOUT_VERSION: u32 = 1;
/// Size of the header at the start of the ring file.
pub const HEADER_SIZE: usize = 4096;
/// Size of one slot descriptor.
pub const SLOT_SIZE: usize = 64;
/// Chunk sizes must be multiples of this; the data area is aligned to it.
pub const PAGE_SIZE: usize = 4096;
/// Largest ring (header, slots and chunks) either end accepts: 16 GiB. The
/// consumer maps the whole ring and reads as far as the header says, so a
/// header that claims a larger one is refused before anything is mapped (a
/// hostile producer must not make the consumer take address space and
/// build page tables without bound).
pub const MAX_RING_LEN: usize = 16 << 30;

/// Slot `state`: free, the producer owns the chunk.
pub(crate) const SLOT_FREE: u32 = 0;
/// Slot `state`: published or claimed, the consumer owns the chunk.
pub(crate) const SLOT_FULL: u32 = 1;
/// Slot `state` bit: the producer sleeps waiting for the slot.
pub(crate) const SLOT_WAITER: u32 = 2;

#[repr(C, align(64))]
pub(crate) struct Ident {
    pub(crate) magic: [u8; 8],
    pub(crate) version: u32,
    pub(crate) header_size: u32,
    pub(crate) slot_size: u32,
    _reserved: u32,
    pub(crate) chunk_size: u64,
    pub(crate) chunk_count: u64,
    pub(crate) data_offset: u64,
    pub(crate) file_len: u64,
    pub(crate) producer_pid: u32,
    pub(crate) consumer_pid: AtomicU32,
}

#[repr(C, align(64))]
pub(crate) struct ProducerLine {
    pub(crate) published: AtomicU64,
    pub(crate) closed: AtomicU32,
}

#[repr(C, align(64))]
pub(crate) struct ConsumerLine {
    pub(crate) claimed: AtomicU64,
}

#[repr(C, align(64))]
pub(crate) struct WaitLine {
    pub(crate) wake: AtomicU32,
    pub(crate) sleepers: AtomicU32,
    pub(crate) consumer_gone: AtomicU32,
}

#[repr(C)]
pub(crate) struct Header {
    pub(crate) ident: Ident,
    pub(crate) producer: ProducerLine,
    pub(crate) consumer: ConsumerLine,
    pub(crate) wait: WaitLine,
}

#[repr(C, align(64))]
pub(crate) struct Slot {
    pub(crate) state: AtomicU32,
    _reserved: u32,
    pub(crate) seq: AtomicU64,
    pub(crate) len: AtomicU64,
}

// The documented wire format, checked at compile time.
const _: () = {
    assert!(size_of::<Header>() == 256 && size_of::<Header>() <= HEADER_SIZE);
    assert!(size_of::<Slot>() == SLOT_SIZE);
    assert!(offset_of!(Ident, version) == 8);
    assert!(offset_of!(Ident, header_size) == 12);
    assert!(offset_of!(Ident, slot_size) == 16);
    assert!(offset_of!(Ident, chunk_size) == 24);
    assert!(offset_of!(Ident, chunk_count) == 32);
    assert!(offset_of!(Ident, data_offset) == 40);
    assert!(offset_of!(Ident, file_len) == 48);
    assert!(offset_of!(Ident, producer_pid) == 56);
    assert!(offset_of!(Ident, consumer_pid) == 60);
    assert!(offset_of!(Header, producer) == 64);
    assert!(offset_of!(Header, consumer) == 128);
    assert!(offset_of!(Header, wait) == 192);
    assert!(offset_of!(WaitLine, sleepers) == 4);
    assert!(offset_of!(WaitLine, consumer_gone) == 8);
    assert!(offset_of!(ProducerLine, closed) == 8);
    assert!(offset_of!(Slot, seq) == 8);
    assert!(offset_of!(Slot, len) == 16);
};

/// Validated sizes of a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) chunk_size: usize,
    pub(crate) chunk_count: usize,
    pub(crate) data_offset: usize,
    pub(crate) file_len: usize,
}

impl Geometry {
    pub(crate) fn new(chunk_size: usize, chunk_count: usize) -> Result<Geometry, GeometryError> {
        if chunk_size < PAGE_SIZE || chunk_size & (PAGE_SIZE - 1) != 0 {
            return Err(GeometryError::ChunkSize(chunk_size));
        }
        if chunk_count < 2 || !chunk_count.is_power_of_two() {
            return Err(GeometryError::ChunkCount(chunk_count));
        }
        let too_large = |capped| GeometryError::TooLarge {
            chunk_size,
            chunk_count,
            capped,
        };
        let too_big = || too_large(false);
        let slots_end = chunk_count
            .checked_mul(SLOT_SIZE)
            .and_then(|s| s.checked_add(HEADER_SIZE))
            .ok_or_else(too_big)?;
        let data_offset = slots_end
            .checked_next_multiple_of(PAGE_SIZE)
            .ok_or_else(too_big)?;
        let file_len = chunk_size
            .checked_mul(chunk_count)
            .and_then(|d| d.checked_add(data_offset))
            .filter(|&l| l <= MAX_RING_LEN)
            .ok_or_else(|| too_large(true))?;
        Ok(Geometry {
            chunk_size,
            chunk_count,
            data_offset,
            file_len,
        })
    }
}

/// A mapped ring with its validated geometry. Both ends share this code.
pub(crate) struct Ring {
    pub(crate) map: Mapping,
    pub(crate) geo: Geometry,
    mask: u64,
}

impl Ring {
    pub(crate) fn new(map: Mapping, geo: Geometry) -> Ring {
        debug_assert!(map.len() >= geo.file_len);
        Ring {
            map,
            geo,
            mask: geo.chunk_count as u64 - 1,
        }
    }

    #[inline(always)]
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: the mapping is at least HEADER_SIZE (>= size_of::<Header>())
        // bytes long, page aligned (so aligned for Header), and lives as long as
        // `self`. Header fields other than atomics are only written before the
        // ring is shared (Producer::init) and never read through this reference.
        unsafe { &*(self.map.as_ptr() as *const Header) }
    }

    #[inline(always)]
    pub(crate) fn slot(&self, idx: usize) -> &Slot {
        debug_assert!(idx < self.geo.chunk_count);
        // SAFETY: idx < chunk_count, so the descriptor lies inside the slot array
        // [HEADER_SIZE, HEADER_SIZE + chunk_count * SLOT_SIZE) of the mapping,
        // which the validated geometry guarantees is mapped; it is 64-byte
        // aligned, and only its atomics are accessed through the reference.
        unsafe { &*(self.map.as_ptr().add(HEADER_SIZE + idx * SLOT_SIZE) as *const Slot) }
    }

    #[inline(always)]
    pub(crate) fn slot_index(&self, seq: u64) -> usize {
        (seq & self.mask) as usize
    }

    #[inline(always)]
    pub(crate) fn chunk_ptr(&self, idx: usize) -> *mut u8 {
        debug_assert!(idx < self.geo.chunk_count);
        // SAFETY: idx < chunk_count, so data_offset + idx * chunk_size + chunk_size
        // <= file_len <= the mapping's length: the result points into the mapping.
        unsafe {
            self.map
                .as_mut_ptr()
                .add(self.geo.data_offset + idx * self.geo.chunk_size)
        }
    }

    /// Increments the consumers' futex word and wakes up to `n` sleeping
    /// consumer threads.
    pub(crate) fn wake_consumers(&self, n: i32) {
        let wait = &self.header().wait;
        wait.wake.fetch_add(1, Ordering::SeqCst);
        futex_wake(&wait.wake, n);
    }
}

/// Checks the identity line of a ring (`ident`: a copy of the header's first
/// bytes) against the file's length `len`; returns its geometry and
/// producer pid. Messages never show the file's bytes, only numbers.
pub(crate) fn validate(
    ident: &[u8; size_of::<Ident>()],
    len: u64,
    what: &str,
) -> Result<(Geometry, u32), Error> {
    let u32_at = |o: usize| u32::from_ne_bytes(ident[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_ne_bytes(ident[o..o + 8].try_into().expect("8 bytes"));
    let magic = &ident[..8];
    let version = u32_at(offset_of!(Ident, version));
    let header_size = u32_at(offset_of!(Ident, header_size));
    let slot_size = u32_at(offset_of!(Ident, slot_size));
    let chunk_size = u64_at(offset_of!(Ident, chunk_size));
    let chunk_count = u64_at(offset_of!(Ident, chunk_count));
    let data_offset = u64_at(offset_of!(Ident, data_offset));
    let file_len = u64_at(offset_of!(Ident, file_len));
    let producer_pid = u32_at(offset_of!(Ident, producer_pid));
    if magic != MAGIC {
        return Err(Error::BadHeader(format!(
            "{what} does not start with the magic MEMPIPE1; it is not a ring made by \
             mempipe::Producer (or the producer had not finished creating it)"
        )));
    }
    if version != LAYOUT_VERSION {
        return Err(Error::BadHeader(format!(
            "{what} has layout version {version}, this build reads version {LAYOUT_VERSION}; \
             build the producer and the consumer from the same source"
        )));
    }
    if header_size as usize != HEADER_SIZE || slot_size as usize != SLOT_SIZE {
        return Err(Error::BadHeader(format!(
            "{what} declares a {header_size}-byte header and {slot_size}-byte slots, \
             expected {HEADER_SIZE} and {SLOT_SIZE}; the header is corrupted"
        )));
    }
    let (Ok(cs), Ok(cc)) = (usize::try_from(chunk_size), usize::try_from(chunk_count)) else {
        return Err(Error::BadHeader(format!(
            "{what} declares chunk_size {chunk_size} and chunk_count {chunk_count}, too large for this machine"
        )));
    };
    let geo = Geometry::new(cs, cc)
        .map_err(|m| Error::BadHeader(format!("{what} declares {m}; the header is corrupted")))?;
    if data_offset != geo.data_offset as u64 || file_len != geo.file_len as u64 {
        return Err(Error::BadHeader(format!(
            "{what} declares data_offset {data_offset} and file_len {file_len}, but {chunk_count} chunks of \
             {chunk_size} bytes need {} and {}; the header is corrupted",
            geo.data_offset, geo.file_len
        )));
    }
    if len != geo.file_len as u64 {
        return Err(Error::BadHeader(format!(
            "{what} is {len} bytes but its header describes {} bytes ({chunk_count} chunks of {chunk_size} bytes); \
             the file was truncated or extended",
            geo.file_len
        )));
    }
    Ok((geo, producer_pid))
}

/// Why ring sizes were refused (`Geometry::new`); carried as the message
/// of [`Error::InvalidArgument`] or [`Error::BadHeader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GeometryError {
    /// Not a whole number of pages, or less than one.
    ChunkSize(usize),
    /// Not a power of two, or less than 2.
    ChunkCount(usize),
    /// The ring's size overflows, or is over [`MAX_RING_LEN`] (`capped`).
    TooLarge {
        chunk_size: usize,
        chunk_count: usize,
        capped: bool,
    },
}

impl fmt::Display for GeometryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            GeometryError::ChunkSize(chunk_size) => write!(
                f,
                "chunk_size {chunk_size} must be a multiple of {PAGE_SIZE} and at least {PAGE_SIZE}"
            ),
            GeometryError::ChunkCount(chunk_count) => write!(
                f,
                "chunk_count {chunk_count} must be a power of two and at least 2"
            ),
            GeometryError::TooLarge {
                chunk_size,
                chunk_count,
                capped,
            } => {
                write!(
                    f,
                    "chunk_size {chunk_size} * chunk_count {chunk_count} is too large"
                )?;
                if capped {
                    write!(f, " (at most {MAX_RING_LEN} bytes)")?;
                }
                Ok(())
            }
        }
    }
}
