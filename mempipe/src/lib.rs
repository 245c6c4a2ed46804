//! `mempipe`: a shared-memory ring of fixed-size chunks from one
//! producer thread (in one process) to one consumer process, in which several
//! threads may take chunks concurrently.
//!
//! The producer (inside QEMU) creates an anonymous, sealed ring with
//! [`Producer::create_memfd`] (or [`Producer::create_memfd_at`]), tells the
//! consumer where its fd is ([`Producer::proc_path`]: its pid and fd number)
//! over some control channel, then loops [`Producer::acquire`] / write /
//! [`Producer::publish`]. The consumer (the analysis client) attaches with
//! [`Consumer::open_proc`] (or [`Consumer::from_fd`] given the fd itself),
//! then any number of its threads call [`Consumer::recv`]. Each published
//! chunk gets the next sequence number (0, 1, 2, ...) and is handed to exactly
//! one `recv` caller, in increasing order of sequence number. Dropping the
//! returned [`Chunk`] gives its slot back to the producer; chunks may be
//! released in any order and from any thread.
//!
//! Why memfd: a ring that is a file in `/dev/shm` outlives a producer that is
//! killed before its consumer unlinks it, and a consumer that opens a path
//! the producer names can be pointed at any file of its user. A memfd has no
//! name, disappears with the last fd and mapping, and is sealed against
//! shrinking and growing, so no one can truncate it under the consumer
//! (which would kill the consumer with `SIGBUS`). The older path API
//! ([`Producer::create`], [`Consumer::open`]) is still here for existing
//! callers; it cannot offer that guarantee.
//!
//! There is strict backpressure: when every slot is in use the producer waits
//! in `acquire`; nothing is ever dropped. Waiting (on either side) is a short
//! bounded spin, then `futex(2)` waits in slices of at most 100 ms. Sleepers
//! announce themselves, so the fast path (nobody asleep) makes no system call.
//! The producer's `acquire`/`publish` never allocate and never take locks.
//!
//! # Trust
//!
//! The consumer does not trust the producer: another process of the same
//! user (or a buggy QEMU) can write anything into the shared memory at any
//! time. The consumer copies the geometry once and checks it against the
//! file, keeps its claim counter in its own memory (so the sequence numbers
//! it hands out are always 0, 1, 2, ... each once), checks every slot it
//! claims (the slot must be full, hold that sequence number and a length of
//! at most the chunk size) and bounds what it maps. A slot that fails the
//! check is handed out as a refused, empty chunk ([`Chunk::is_refused`]),
//! counted in [`Consumer::refused_chunks`], described by
//! [`Consumer::violation`], and ends the stream. The bytes of a chunk can
//! still change while the consumer reads them, so they are never handed
//! out as a slice of the shared mapping: [`Chunk::copy_into`] reads them
//! with atomic loads into the consumer's own memory ([`ChunkBuf`]), which
//! the caller then parses as untrusted input.
//!
//! The [`table`] module holds the other shared file QEMU's side hands the
//! client: a process's block table ([`TableWriter`], [`TableReader`]), a
//! sealed, sparse memfd laid out as `wire::blocks` says.
//!
//! Only Linux is supported (the implementation uses `futex(2)` and
//! `memfd_create(2)`).
//!
//! # Wire format (layout version 1)
//!
//! The ring file (a memfd, or a file in `/dev/shm` for the path API) and its
//! mapping, which starts at file offset 0, look like this. All integers are native-endian (both ends run on the same host);
//! offsets are in bytes.
//!
//! ```text
//! 0       header            4096 bytes (HEADER_SIZE), see below
//! 4096    slot descriptors  chunk_count * 64 bytes (SLOT_SIZE), one per slot
//! D       data area         chunk_count * chunk_size bytes; D = data_offset =
//!                           round_up(4096 + chunk_count * 64, 4096)
//! D + chunk_count * chunk_size = file length
//! ```
//!
//! Header, one 64-byte cache line per group; bytes 256..4096 are reserved and zero:
//!
//! ```text
//! -- line 0: identity, written by the producer before the path is shared ----
//!   0  [u8; 8]  magic          b"MEMPIPE1" (MAGIC)
//!   8  u32      version        1 (LAYOUT_VERSION)
//!  12  u32      header_size    4096
//!  16  u32      slot_size      64
//!  20  u32      reserved       0
//!  24  u64      chunk_size     multiple of 4096, >= 4096
//!  32  u64      chunk_count    power of two, >= 2
//!  40  u64      data_offset    see above
//!  48  u64      file_len       data_offset + chunk_count * chunk_size
//!  56  u32      producer_pid   pid of the creating process
//!  60  u32      consumer_pid   0 until Consumer::open stores its pid (atomic CAS 0 -> pid)
//! -- line 1: producer state, written only by the producer -------------------
//!  64  u64      published      number of chunks published = next sequence number
//!  72  u32      closed         1 once the producer called close()
//! -- line 2: consumer state, written only by the consumer threads -----------
//! 128  u64      claimed        how many sequence numbers the consumer handed out
//!                              (informational: the consumer's own counter lives in
//!                              its private memory, where the producer cannot change it)
//! -- line 3: wake-up control ------------------------------------------------
//! 192  u32      wake           futex word the sleeping consumer threads wait on;
//!                              incremented (then FUTEX_WAKE) by whoever wakes them
//! 196  u32      sleepers       number of consumer threads about to sleep or asleep
//! 200  u32      consumer_gone  1 once the consumer called close() / was dropped
//! ```
//!
//! Slot descriptor `i` (at `4096 + 64 * i`; slot `i` holds sequence numbers
//! `s` with `s % chunk_count == i`, its chunk is at `data_offset + i * chunk_size`):
//!
//! ```text
//!   0  u32      state          futex word: 0 = free (producer owns the chunk),
//!                              1 = published or claimed (consumer owns it);
//!                              bit 1 (value 2) = the producer sleeps waiting for it
//!   4  u32      reserved
//!   8  u64      seq            sequence number of the chunk last published here
//!  16  u64      len            its valid length in bytes (<= chunk_size)
//!  24  ...      reserved up to 64
//! ```
//!
//! # Protocol
//!
//! * Producer, seq `s`, slot `i = s % chunk_count`: wait until `state == 0`
//!   (Acquire), write the chunk, store `len`, `seq`, `state = 1`, then
//!   `published = s + 1` (SeqCst, which includes Release), then if
//!   `sleepers != 0` increment `wake` and futex-wake one consumer thread.
//! * Consumer thread: `c = claimed` (the consumer's private counter); if
//!   `c < published` (Acquire) CAS `claimed` from `c` to `c + 1`; the winner
//!   owns seq `c`, after checking that slot `c % chunk_count` is full (bit 0
//!   of `state`), holds `seq == c` and `len <= chunk_size`. Releasing it
//!   swaps `state` to 0 (Release) and futex-wakes the producer only if the
//!   waiter bit was set.
//! * A producer that must wait sets the waiter bit with a CAS `1 -> 3` and
//!   futex-waits on `state` for value 3. A consumer thread that must wait
//!   increments `sleepers`, reads `wake`, re-checks `published`/`closed`, and
//!   futex-waits on `wake` for the value it read.
//! * Futexes are the shared (not `_PRIVATE`) kind, since two processes use them.
//! * The producer treats the consumer as gone when `consumer_gone == 1` or
//!   when `kill(consumer_pid, 0)` fails with `ESRCH` (checked between wait
//!   slices). Note that an exited but not yet reaped child still exists for
//!   `kill`. Both ends must be in the same pid namespace for this check.
//! * The consumer learns that the producer died from outside the ring (the
//!   control channel's end of file) and calls [`Consumer::abandon`]; it then
//!   drains what was published up to that moment and stops. It never waits
//!   on the ring alone: without `abandon` a producer that dies without
//!   closing leaves `recv` waiting.
//! * Once the consumer saw `closed == 1` (or abandoned the ring), the
//!   `published` it read then is final: it hands out nothing beyond it.
//!
//! # Memfd rings
//!
//! [`Producer::create_memfd`] makes the ring with
//! `memfd_create("cannoli-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING)`, sizes it,
//! allocates its memory (`fallocate`) and seals it with `F_SEAL_SHRINK |
//! F_SEAL_GROW | F_SEAL_SEAL`. [`Consumer::from_fd`] maps only a regular
//! file of its own user that carries at least the shrink and grow seals,
//! whose memory is allocated (no holes: mapping it allocates nothing on the
//! consumer's side), whose size is what the header's geometry says, and at
//! most [`MAX_RING_LEN`] bytes.

#![deny(unsafe_op_in_unsafe_fn)]

use std::cell::Cell;
use std::ffi::OsString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::marker::PhantomData;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr::{self, addr_of, addr_of_mut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
pub use wire::FdPlace;

use memmap2::MmapOptions;

mod mapping;
use mapping::Mapping;
pub mod table;
pub use table::{TableReader, TableWriter};

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
/// Directory ring files are created in when `MEMPIPE_DIR` is not set.
pub const DEFAULT_DIR: &str = "/dev/shm";
/// Environment variable naming the directory for ring files.
pub const DIR_ENV: &str = "MEMPIPE_DIR";
/// Largest ring (header, slots and chunks) either end accepts: 16 GiB. The
/// consumer maps and populates the whole ring, so a header that claims a
/// larger one is refused before anything is mapped (a hostile producer must
/// not make the consumer build page tables without bound).
pub const MAX_RING_LEN: usize = 16 << 30;
/// The name memfd rings get (it shows in `/proc/<pid>/fd` as
/// `/memfd:cannoli-ring (deleted)`; it is not a path anyone can open).
pub const MEMFD_NAME: &str = "cannoli-ring";

/// Longest single futex sleep; liveness and flags are re-checked between slices.
/// Unit tests use a long slice so that a lost wake-up shows as a timing failure.
const MAX_SLICE: Duration = if cfg!(test) {
    Duration::from_secs(2)
} else {
    Duration::from_millis(100)
};
/// Spin rounds before sleeping; round `r` spins `2^min(r, 6)` times (~190 hints in all).
const SPIN_ROUNDS: u32 = 8;

const SLOT_FREE: u32 = 0;
const SLOT_FULL: u32 = 1;
const SLOT_WAITER: u32 = 2;

// ---------------------------------------------------------------------------
// Shared-memory layout
// ---------------------------------------------------------------------------

#[repr(C, align(64))]
struct Ident {
    magic: [u8; 8],
    version: u32,
    header_size: u32,
    slot_size: u32,
    _reserved: u32,
    chunk_size: u64,
    chunk_count: u64,
    data_offset: u64,
    file_len: u64,
    producer_pid: u32,
    consumer_pid: AtomicU32,
}

#[repr(C, align(64))]
struct ProducerLine {
    published: AtomicU64,
    closed: AtomicU32,
}

#[repr(C, align(64))]
struct ConsumerLine {
    claimed: AtomicU64,
}

#[repr(C, align(64))]
struct WaitLine {
    wake: AtomicU32,
    sleepers: AtomicU32,
    consumer_gone: AtomicU32,
}

#[repr(C)]
struct Header {
    ident: Ident,
    producer: ProducerLine,
    consumer: ConsumerLine,
    wait: WaitLine,
}

#[repr(C, align(64))]
struct Slot {
    state: AtomicU32,
    _reserved: u32,
    seq: AtomicU64,
    len: AtomicU64,
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
struct Geometry {
    chunk_size: usize,
    chunk_count: usize,
    data_offset: usize,
    file_len: usize,
}

impl Geometry {
    fn new(chunk_size: usize, chunk_count: usize) -> Result<Geometry, String> {
        if chunk_size < PAGE_SIZE || chunk_size & (PAGE_SIZE - 1) != 0 {
            return Err(format!(
                "chunk_size {chunk_size} must be a multiple of {PAGE_SIZE} and at least {PAGE_SIZE}"
            ));
        }
        if chunk_count < 2 || !chunk_count.is_power_of_two() {
            return Err(format!(
                "chunk_count {chunk_count} must be a power of two and at least 2"
            ));
        }
        let too_big =
            || format!("chunk_size {chunk_size} * chunk_count {chunk_count} is too large");
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
            .ok_or_else(|| format!("{} (at most {MAX_RING_LEN} bytes)", too_big()))?;
        Ok(Geometry {
            chunk_size,
            chunk_count,
            data_offset,
            file_len,
        })
    }
}

/// A mapped ring with its validated geometry. Both ends share this code.
struct Ring {
    map: Mapping,
    geo: Geometry,
    mask: u64,
}

impl Ring {
    fn new(map: Mapping, geo: Geometry) -> Ring {
        debug_assert!(map.len() >= geo.file_len);
        Ring {
            map,
            geo,
            mask: geo.chunk_count as u64 - 1,
        }
    }

    #[inline(always)]
    fn header(&self) -> &Header {
        // SAFETY: the mapping is at least HEADER_SIZE (>= size_of::<Header>())
        // bytes long, page aligned (so aligned for Header), and lives as long as
        // `self`. Header fields other than atomics are only written before the
        // ring is shared (Producer::init) and never read through this reference.
        unsafe { &*(self.map.as_ptr() as *const Header) }
    }

    #[inline(always)]
    fn slot(&self, idx: usize) -> &Slot {
        debug_assert!(idx < self.geo.chunk_count);
        // SAFETY: idx < chunk_count, so the descriptor lies inside the slot array
        // [HEADER_SIZE, HEADER_SIZE + chunk_count * SLOT_SIZE) of the mapping,
        // which the validated geometry guarantees is mapped; it is 64-byte
        // aligned, and only its atomics are accessed through the reference.
        unsafe { &*(self.map.as_ptr().add(HEADER_SIZE + idx * SLOT_SIZE) as *const Slot) }
    }

    #[inline(always)]
    fn slot_index(&self, seq: u64) -> usize {
        (seq & self.mask) as usize
    }

    #[inline(always)]
    fn chunk_ptr(&self, idx: usize) -> *mut u8 {
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
    fn wake_consumers(&self, n: i32) {
        let wait = &self.header().wait;
        wait.wake.fetch_add(1, Ordering::SeqCst);
        futex_wake(&wait.wake, n);
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Errors of this crate.
#[derive(Debug)]
pub enum Error {
    /// A system call failed; the message says what was being done, on which file.
    Io(io::Error),
    /// The file is not a usable ring (wrong magic, version or sizes).
    BadHeader(String),
    /// The consumer closed the ring or its process exited.
    ConsumerGone,
    /// An argument to [`Producer::create`] is out of range.
    InvalidArgument(String),
    /// [`Producer::acquire`] / [`Producer::publish`] after [`Producer::close`].
    Closed,
    /// [`Producer::publish`] without a preceding [`Producer::acquire`].
    NotAcquired,
    /// [`Producer::publish`] with a length larger than the chunk size.
    TooLong { len: usize, chunk_size: usize },
    /// [`Consumer::open`] on a ring that another consumer already opened.
    AlreadyOpened { pid: u32 },
    /// [`Consumer::from_fd`] / [`Consumer::open_proc`] refused the file
    /// before mapping it: not a regular file of this user, not sealed, not
    /// allocated, or an invalid pid/fd. The message says which.
    Refused(String),
    /// [`TableReader::from_fd`] / [`TableReader::open_proc`] refused the
    /// file: not a sealed regular file of this user of the block table's
    /// size, or not a block table (magic, version, sizes). The message
    /// says which.
    TableRefused(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "mempipe: {e}"),
            Error::BadHeader(msg) => write!(f, "mempipe: bad ring file: {msg}"),
            Error::ConsumerGone => write!(
                f,
                "mempipe: the consumer closed the ring or its process exited; \
                 no more chunks can be delivered (see the analysis client's output for why it stopped)"
            ),
            Error::InvalidArgument(msg) => write!(f, "mempipe: invalid ring parameters: {msg}"),
            Error::Closed => write!(
                f,
                "mempipe: the producer already closed this ring; create a new ring to send more chunks"
            ),
            Error::NotAcquired => {
                write!(f, "mempipe: publish() without a chunk; call acquire() before each publish()")
            }
            Error::TooLong { len, chunk_size } => write!(
                f,
                "mempipe: publish() of {len} bytes exceeds the chunk size of {chunk_size} bytes; \
                 publish at most chunk_size bytes per chunk or create the ring with larger chunks"
            ),
            Error::AlreadyOpened { pid } => write!(
                f,
                "mempipe: the ring was already opened by consumer process {pid}; \
                 a ring has exactly one consumer process"
            ),
            Error::Refused(msg) => write!(f, "mempipe: refused the ring: {msg}"),
            Error::TableRefused(msg) => write!(f, "mempipe: refused the block table: {msg}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => e.source(),
            _ => None,
        }
    }
}

/// Wraps an `io::Error` with what was being done, keeping its kind.
fn io_error(context: impl fmt::Display, e: io::Error) -> Error {
    Error::Io(io::Error::new(e.kind(), format!("{context}: {e}")))
}

// ---------------------------------------------------------------------------
// System helpers
// ---------------------------------------------------------------------------

/// `FUTEX_WAIT` (shared) on `word` while it equals `expected`, for at most `timeout`.
/// Spurious returns (EINTR, EAGAIN, ETIMEDOUT) are fine: callers re-check.
/// Returns true if the sleep ran out its time instead of being woken
/// (ETIMEDOUT): counted, so that tests see a lost wake-up by count.
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, 4-byte aligned u32 (in the shared mapping),
    // which the kernel only reads; `ts` outlives the call; the remaining
    // arguments are unused by FUTEX_WAIT.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            ptr::null::<u32>(),
            0u32,
        )
    };
    r == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT)
}

/// `FUTEX_WAKE` (shared) of up to `n` waiters on `word`.
fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE does not access it
    // beyond using its address as the key; other arguments are unused.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            ptr::null::<libc::timespec>(),
            ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Whether process `pid` exists (EPERM means it exists but is not ours).
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    if pid <= 0 {
        return true;
    }
    // SAFETY: kill with signal 0 sends nothing; it only checks for existence.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Spins `2^min(round, 6)` times with spin-loop hints.
#[inline]
fn spin(round: u32) {
    for _ in 0..(1u32 << round.min(6)) {
        std::hint::spin_loop();
    }
}

fn gettid() -> u64 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: the buffer is 8 writable bytes owned by this frame.
    let n = unsafe { libc::getrandom(addr_of_mut!(v).cast(), 8, libc::GRND_NONBLOCK) };
    if n != 8 {
        // Fallback: time and address entropy; O_EXCL makes collisions harmless.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        v = t ^ (addr_of!(v) as u64).rotate_left(32) ^ gettid().rotate_left(17);
    }
    v
}

/// Directory for ring files given the value of `MEMPIPE_DIR`: that value if
/// set and non-empty, else [`DEFAULT_DIR`].
pub fn dir_from(env_value: Option<OsString>) -> PathBuf {
    match env_value {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(DEFAULT_DIR),
    }
}

/// Directory [`Producer::create`] puts ring files in: `$MEMPIPE_DIR` if set
/// and non-empty, else `/dev/shm`.
pub fn ring_dir() -> PathBuf {
    dir_from(std::env::var_os(DIR_ENV))
}

// ---------------------------------------------------------------------------
// Producer
// ---------------------------------------------------------------------------

/// The writing end of a ring. `Send`, not `Sync`: one thread uses it at a time.
pub struct Producer {
    ring: Ring,
    /// The ring file's path (path API); empty for a memfd ring.
    path: PathBuf,
    /// The memfd of a memfd ring, until [`Producer::release_fd`].
    fd: Option<OwnedFd>,
    /// Sequence number of the next chunk to publish (= chunks published).
    next: u64,
    /// The slot for `next` was found free by `acquire` and not yet published.
    acquired: bool,
    closed: bool,
    /// Waits for a free slot that ran out their time slice instead of being
    /// woken (see [`Producer::sleeps_timed_out`]).
    slept_out: u64,
    _not_sync: PhantomData<Cell<()>>,
}

impl fmt::Debug for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("path", &self.path)
            .field("fd", &self.fd.as_ref().map(|f| f.as_raw_fd()))
            .field("chunk_size", &self.ring.geo.chunk_size)
            .field("chunk_count", &self.ring.geo.chunk_count)
            .field("published", &self.next)
            .field("closed", &self.closed)
            .finish()
    }
}

impl Producer {
    /// Creates a fresh ring file (`O_CREAT|O_EXCL`, mode 0600) named
    /// `mempipe-<pid>-<tid>-<random>` in [`ring_dir()`] (`$MEMPIPE_DIR` if set,
    /// else `/dev/shm`), sized for the header plus `chunk_count * chunk_size`,
    /// and maps it. `chunk_size` is a multiple of 4096 and at least 4096;
    /// `chunk_count` is a power of two and at least 2.
    pub fn create(chunk_size: usize, chunk_count: usize) -> Result<Producer, Error> {
        Self::create_in(&ring_dir(), chunk_size, chunk_count)
    }

    /// Like [`Producer::create`], in the directory `dir`.
    pub fn create_in(dir: &Path, chunk_size: usize, chunk_count: usize) -> Result<Producer, Error> {
        // SAFETY: no placement.
        unsafe { Self::create_at(dir, chunk_size, chunk_count, None) }
    }

    /// Bytes of address space a ring of this geometry maps.
    pub fn mapped_len(chunk_size: usize, chunk_count: usize) -> Result<usize, Error> {
        Ok(Geometry::new(chunk_size, chunk_count)
            .map_err(Error::InvalidArgument)?
            .file_len)
    }

    /// Like [`Producer::create_in`], mapping the ring at `at` when given:
    /// for a producer that must not let the kernel choose (see
    /// `mapping.rs`). When the producer is dropped the range is reserved
    /// again (`PROT_NONE`), not unmapped, for the caller to reuse.
    ///
    /// # Safety
    /// `at`, if given, starts [`Producer::mapped_len`] bytes of address
    /// space that the caller reserved and uses for nothing else until the
    /// producer is dropped.
    pub unsafe fn create_at(
        dir: &Path,
        chunk_size: usize,
        chunk_count: usize,
        at: Option<std::ptr::NonNull<u8>>,
    ) -> Result<Producer, Error> {
        let geo = Geometry::new(chunk_size, chunk_count).map_err(Error::InvalidArgument)?;
        let (file, path) = create_file(dir)?;
        let what = format!("ring file {}", path.display());
        let sized = size_ring(&file, geo, &what, false).and_then(|()| {
            // SAFETY: `at` is the caller's reservation (create_at's contract).
            unsafe { Self::init(&file, &what, geo, at) }
        });
        match sized {
            Ok(ring) => Ok(Producer::with_ring(ring, path, None)),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Creates an anonymous ring: a memfd named [`MEMFD_NAME`], sized for the
    /// header plus `chunk_count * chunk_size`, its memory allocated, sealed
    /// against shrinking and growing (and against further seals), and
    /// mapped. Nothing appears in any directory; the ring goes away with the
    /// last fd and mapping of it. Hand the consumer [`Producer::proc_path`]
    /// (or the fd itself) to attach with; then [`Producer::release_fd`] if
    /// the fd should not stay open. Geometry as for [`Producer::create`].
    pub fn create_memfd(chunk_size: usize, chunk_count: usize) -> Result<Producer, Error> {
        // SAFETY: no placement.
        unsafe { Self::create_memfd_at(chunk_size, chunk_count, None, 0) }
    }

    /// Like [`Producer::create_memfd`], mapping the ring at address `at` when
    /// given (see [`Producer::create_at`]), and with the memfd put where
    /// `place` says ([`wire::FdPlace`]; `0`: where the kernel put it). QEMU
    /// puts its fds out of the traced guest's reach.
    ///
    /// # Safety
    /// `at`, if given, is the start of [`Producer::mapped_len`] bytes of
    /// address space that the caller reserved and uses for nothing else
    /// until the producer is dropped.
    pub unsafe fn create_memfd_at(
        chunk_size: usize,
        chunk_count: usize,
        at: Option<usize>,
        place: impl Into<FdPlace>,
    ) -> Result<Producer, Error> {
        let geo = Geometry::new(chunk_size, chunk_count).map_err(Error::InvalidArgument)?;
        let at = match at {
            None => None,
            Some(a) => Some(std::ptr::NonNull::new(a as *mut u8).ok_or_else(|| {
                Error::InvalidArgument("the address to map the ring at is 0".into())
            })?),
        };
        let what = "the ring's memfd";
        let fd = make_fd(place, what, memfd_create)?;
        let file = File::from(fd);
        size_ring(&file, geo, what, true)?;
        seal(&file, what)?;
        // SAFETY: `at` is the caller's reservation (this function's contract).
        let ring = unsafe { Self::init(&file, what, geo, at) }?;
        Ok(Producer::with_ring(
            ring,
            PathBuf::new(),
            Some(OwnedFd::from(file)),
        ))
    }

    fn with_ring(ring: Ring, path: PathBuf, fd: Option<OwnedFd>) -> Producer {
        Producer {
            ring,
            path,
            fd,
            next: 0,
            acquired: false,
            closed: false,
            slept_out: 0,
            _not_sync: PhantomData,
        }
    }

    /// Waits for a free slot that ran out their whole time slice instead of
    /// being woken by the consumer. A lost wake-up shows here, by count.
    pub fn sleeps_timed_out(&self) -> u64 {
        self.slept_out
    }

    /// Maps the sized ring `file` (at `at` if given) and writes its header.
    ///
    /// # Safety
    /// As for [`Producer::create_at`]'s `at`.
    unsafe fn init(
        file: &File,
        what: &str,
        geo: Geometry,
        at: Option<std::ptr::NonNull<u8>>,
    ) -> Result<Ring, Error> {
        let len = geo.file_len;
        // SAFETY: `at` is the caller's reservation (this function's contract).
        let map = unsafe { Mapping::map(file, len, at) }
            .map_err(|e| io_error(format_args!("mapping {what} ({len} bytes)"), e))?;
        let base = map.as_mut_ptr() as *mut Ident;
        // SAFETY: the mapping is fresh, private to this function until the path
        // is handed out, at least HEADER_SIZE bytes and page aligned; the file
        // was just created, so everything else (slots, counters) is zero, which
        // is the initial state. Fields are written through raw pointers, before
        // any reference to the header exists.
        unsafe {
            addr_of_mut!((*base).version).write(LAYOUT_VERSION);
            addr_of_mut!((*base).header_size).write(HEADER_SIZE as u32);
            addr_of_mut!((*base).slot_size).write(SLOT_SIZE as u32);
            addr_of_mut!((*base).chunk_size).write(geo.chunk_size as u64);
            addr_of_mut!((*base).chunk_count).write(geo.chunk_count as u64);
            addr_of_mut!((*base).data_offset).write(geo.data_offset as u64);
            addr_of_mut!((*base).file_len).write(geo.file_len as u64);
            addr_of_mut!((*base).producer_pid).write(std::process::id());
            std::sync::atomic::fence(Ordering::Release);
            addr_of_mut!((*base).magic).write_volatile(MAGIC);
        }
        Ok(Ring::new(map, geo))
    }

    /// Path of the ring file (to hand to the consumer); empty for a memfd
    /// ring (see [`Producer::proc_path`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The memfd of a memfd ring, until [`Producer::release_fd`]; `None` for
    /// a ring made with the path API.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    /// Closes the memfd (once the consumer has its own). The mapping stays,
    /// so the producer keeps working; the ring's memory goes away when both
    /// ends have unmapped it. Idempotent.
    pub fn release_fd(&mut self) {
        self.fd = None;
    }

    /// `/proc/<pid>/fd/<n>` of the memfd while it is open: where a consumer
    /// of the same user opens its own fd of the ring
    /// ([`Consumer::open_proc`] takes the pid and `n`).
    pub fn proc_path(&self) -> Option<String> {
        let fd = self.fd.as_ref()?;
        Some(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            fd.as_raw_fd()
        ))
    }

    /// In a child made by `fork(2)` that inherited this producer: lets go of
    /// it without touching the ring, which the parent still writes. Closes
    /// the child's copy of the memfd, leaves the mapping in place (it is
    /// leaked, like everything else the child inherited and does not use)
    /// and does not mark the ring closed, as dropping it would.
    pub fn forget_in_forked_child(self) {
        let mut me = std::mem::ManuallyDrop::new(self);
        // Closing the child's copy of the fd leaves the parent's open.
        me.fd = None;
        me.path = PathBuf::new();
        // The ring (its mapping) is deliberately never dropped: unmapping or
        // re-reserving it would be harmless here, but Drop would also set
        // `closed` in the shared header, ending the parent's stream.
    }

    /// Size of each chunk in bytes.
    pub fn chunk_size(&self) -> usize {
        self.ring.geo.chunk_size
    }

    /// Number of chunks in the ring.
    pub fn chunk_count(&self) -> usize {
        self.ring.geo.chunk_count
    }

    /// Whether a consumer has opened the ring (recorded its pid).
    pub fn consumer_attached(&self) -> bool {
        self.ring
            .header()
            .ident
            .consumer_pid
            .load(Ordering::Acquire)
            != 0
    }

    /// Waits until the slot for the next sequence number is free and returns a
    /// pointer to its `chunk_size` writable bytes (8-byte aligned). Calling
    /// `acquire` again without `publish` returns the same chunk.
    ///
    /// While waiting it spins briefly, then futex-waits in slices of at most
    /// 100 ms, and returns [`Error::ConsumerGone`] if the consumer closed the
    /// ring or its process no longer exists. Until a consumer has opened the
    /// ring it waits indefinitely (see [`Producer::acquire_timeout`]).
    #[inline]
    pub fn acquire(&mut self) -> Result<*mut u8, Error> {
        match self.acquire_inner(None) {
            Ok(Some(p)) => Ok(p),
            // Without a deadline the wait only ends with a free slot or an error.
            Ok(None) => unreachable!("acquire without deadline timed out"),
            Err(e) => Err(e),
        }
    }

    /// Like [`Producer::acquire`], but gives up after `timeout` and returns
    /// `Ok(None)` (for instance when no consumer ever opened the ring).
    pub fn acquire_timeout(&mut self, timeout: Duration) -> Result<Option<*mut u8>, Error> {
        self.acquire_inner(Some(timeout))
    }

    /// Like [`Producer::acquire`], as a slice. The bytes are those last written
    /// to this chunk (zero at first); the consumer never writes them.
    pub fn acquire_slice(&mut self) -> Result<&mut [u8], Error> {
        let p = self.acquire()?;
        // SAFETY: the slot is free, so no consumer reads the chunk until
        // publish(&mut self), which ends this borrow; the chunk is chunk_size
        // initialized bytes (file-backed memory) inside the mapping.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, self.ring.geo.chunk_size) })
    }

    #[inline]
    fn acquire_inner(&mut self, timeout: Option<Duration>) -> Result<Option<*mut u8>, Error> {
        if self.closed {
            return Err(Error::Closed);
        }
        if self
            .ring
            .header()
            .wait
            .consumer_gone
            .load(Ordering::Relaxed)
            != 0
        {
            return Err(Error::ConsumerGone);
        }
        let idx = self.ring.slot_index(self.next);
        if !self.acquired
            && self.ring.slot(idx).state.load(Ordering::Acquire) != SLOT_FREE
            && !self.wait_for_slot(idx, timeout)?
        {
            return Ok(None);
        }
        self.acquired = true;
        Ok(Some(self.ring.chunk_ptr(idx)))
    }

    /// Slow path of acquire: waits until slot `idx` is free. Ok(false) on timeout.
    #[cold]
    #[inline(never)]
    fn wait_for_slot(&mut self, idx: usize, timeout: Option<Duration>) -> Result<bool, Error> {
        let slot = self.ring.slot(idx);
        for round in 0..SPIN_ROUNDS {
            spin(round);
            if slot.state.load(Ordering::Acquire) == SLOT_FREE {
                return Ok(true);
            }
        }
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let wait = &self.ring.header().wait;
        loop {
            // Announce the sleep in the slot's state word. A release racing with
            // this CAS either sees the waiter bit (and wakes us) or makes the CAS
            // fail with SLOT_FREE. Failure ordering Acquire pairs with the release.
            // (Err with the waiter bit already set, from an earlier round, is fine.)
            if let Err(SLOT_FREE) = slot.state.compare_exchange(
                SLOT_FULL,
                SLOT_FULL | SLOT_WAITER,
                Ordering::SeqCst,
                Ordering::Acquire,
            ) {
                return Ok(true);
            }
            // SeqCst against Consumer::close (store consumer_gone, then scan
            // the slots for waiter bits): one of us sees the other.
            if wait.consumer_gone.load(Ordering::SeqCst) != 0 {
                return Err(Error::ConsumerGone);
            }
            let slice = match deadline {
                None => MAX_SLICE,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Ok(false);
                    }
                    (d - now).min(MAX_SLICE)
                }
            };
            if futex_wait(&slot.state, SLOT_FULL | SLOT_WAITER, slice) && slice == MAX_SLICE {
                self.slept_out += 1;
            }
            if slot.state.load(Ordering::Acquire) == SLOT_FREE {
                return Ok(true);
            }
            let pid = self
                .ring
                .header()
                .ident
                .consumer_pid
                .load(Ordering::Acquire);
            if pid != 0 && !process_exists(pid) {
                return Err(Error::ConsumerGone);
            }
        }
    }

    /// Publishes the acquired chunk with `len` valid bytes (`len <= chunk_size`)
    /// under the next sequence number (0, 1, 2, ...), which it returns, and
    /// wakes a sleeping consumer thread if there is one.
    #[inline]
    pub fn publish(&mut self, len: usize) -> Result<u64, Error> {
        if self.closed {
            return Err(Error::Closed);
        }
        if !self.acquired {
            return Err(Error::NotAcquired);
        }
        if len > self.ring.geo.chunk_size {
            return Err(Error::TooLong {
                len,
                chunk_size: self.ring.geo.chunk_size,
            });
        }
        let hdr = self.ring.header();
        if hdr.wait.consumer_gone.load(Ordering::Relaxed) != 0 {
            return Err(Error::ConsumerGone);
        }
        let seq = self.next;
        let slot = self.ring.slot(self.ring.slot_index(seq));
        slot.len.store(len as u64, Ordering::Relaxed);
        slot.seq.store(seq, Ordering::Relaxed);
        slot.state.store(SLOT_FULL, Ordering::Relaxed);
        // Release (part of SeqCst): the chunk bytes and the descriptor above are
        // visible to whoever Acquire-loads published >= seq + 1. SeqCst, paired
        // with the sleepers load below and the consumer's sleepers increment
        // followed by its published load, so that no sleeper is missed.
        hdr.producer.published.store(seq + 1, Ordering::SeqCst);
        self.next = seq + 1;
        self.acquired = false;
        if hdr.wait.sleepers.load(Ordering::SeqCst) != 0 {
            self.ring.wake_consumers(1);
        }
        Ok(seq)
    }

    /// Number of chunks published so far.
    pub fn published(&self) -> u64 {
        self.next
    }

    /// Marks the stream finished (no more chunks) and wakes the consumer's
    /// threads. An acquired but unpublished chunk is discarded. Idempotent;
    /// dropping the producer calls it too.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.acquired = false;
        self.ring
            .header()
            .producer
            .closed
            .store(1, Ordering::SeqCst);
        self.ring.wake_consumers(i32::MAX);
    }

    /// Removes the ring file. The consumer normally does this right after
    /// opening; call it when the consumer never showed up. Idempotent; errors
    /// (such as the file being gone already) are ignored.
    pub fn unlink(&self) {
        if self.path.as_os_str().is_empty() {
            return; // a memfd ring has no name
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.close();
    }
}

/// Removes ring files in `dir` that a dead producer left behind: named
/// `mempipe-<pid>-...` for a pid that no longer exists, and ours (same
/// owner). A killed producer whose consumer never came leaves its ring in
/// `/dev/shm`; the next producer of this user sweeps it. A consumer unlinks
/// a ring as soon as it has it open, so no live ring is in the way.
/// Returns how many files it removed.
pub fn sweep_dead_rings(dir: &Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("mempipe-"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        // symlink_metadata: a link is never followed, and never ours to sweep.
        let ours = e
            .path()
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_file() && m.uid() == me);
        if ours && !process_exists(pid) && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Sizes a new ring file and allocates its memory, so that a full tmpfs (or
/// memory cgroup) is a clear error here rather than a SIGBUS on first touch.
/// A memfd must be allocated (the consumer refuses one with holes); a file
/// of the path API may live on a filesystem without `fallocate`.
fn size_ring(file: &File, geo: Geometry, what: &str, memfd: bool) -> Result<(), Error> {
    let len = geo.file_len;
    file.set_len(len as u64)
        .map_err(|e| io_error(format_args!("resizing {what} to {len} bytes"), e))?;
    // SAFETY: plain syscall on an fd we own; len fits off_t (<= MAX_RING_LEN).
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
    match rc {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS if !memfd => Ok(()),
        libc::ENOSPC | libc::ENOMEM => {
            let fix = if memfd {
                "free memory, or use fewer/smaller chunks (CANNOLI_CHUNKS, CANNOLI_CHUNK_KB)"
                    .to_string()
            } else {
                format!("free space there, point {DIR_ENV} at another directory, or use fewer/smaller chunks")
            };
            Err(io_error(
                format_args!("no room for a {len}-byte ring ({what}); {fix}"),
                io::Error::from_raw_os_error(rc),
            ))
        }
        _ => Err(io_error(
            format_args!("allocating {len} bytes for {what}"),
            io::Error::from_raw_os_error(rc),
        )),
    }
}

/// A fresh memfd for a ring, close-on-exec and sealable.
fn memfd_create() -> Result<OwnedFd, Error> {
    memfd_create_named(MEMFD_NAME, "the ring's memfd")
}

/// A fresh memfd named `name` (for `what`, in messages), close-on-exec and
/// sealable.
fn memfd_create_named(name: &str, what: &str) -> Result<OwnedFd, Error> {
    let name = std::ffi::CString::new(name).expect("no NUL in the name");
    // SAFETY: `name` is a valid NUL-terminated string for the duration of
    // the call; the flags are valid for memfd_create.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io_error(
            format_args!("creating {what} (memfd_create, Linux 3.17 or later)"),
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: memfd_create returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The descriptor (of `what`) that `create` makes, made where `place`
/// says. An error of `create` comes back as it is.
fn make_fd(
    place: impl Into<FdPlace>,
    what: &str,
    create: impl FnOnce() -> Result<OwnedFd, Error>,
) -> Result<OwnedFd, Error> {
    let mut create = Some(create);
    let mut failed = None;
    let made = place.into().make(&mut || match create.take().map(|c| c()) {
        Some(Ok(fd)) => Ok(fd),
        Some(Err(e)) => {
            failed = Some(e);
            Err(io::Error::other("not made"))
        }
        None => Err(io::Error::other("made twice")),
    });
    match (made, failed) {
        (Ok(fd), _) => Ok(fd),
        (Err(_), Some(e)) => Err(e),
        (Err(e), None) => Err(io_error(format_args!("making {what}"), e)),
    }
}

/// The seals every memfd ring carries: no one can change its size.
const RING_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;

/// Seals a sized memfd ring (or block table: `what`, in messages): no
/// shrinking (which would SIGBUS the consumer), no growing, and no further
/// seals (so nobody can add a write seal later).
fn seal(file: &File, what: &str) -> Result<(), Error> {
    // SAFETY: F_ADD_SEALS on an fd we own, with valid seal bits.
    let rc = unsafe {
        libc::fcntl(
            file.as_raw_fd(),
            libc::F_ADD_SEALS,
            RING_SEALS | libc::F_SEAL_SEAL,
        )
    };
    if rc != 0 {
        return Err(io_error(
            format_args!("sealing {what} (F_ADD_SEALS)"),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

fn create_file(dir: &Path) -> Result<(File, PathBuf), Error> {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        sweep_dead_rings(dir);
    });
    let pid = std::process::id();
    let tid = gettid();
    let mut last_err = None;
    for _ in 0..16 {
        let path = dir.join(format!("mempipe-{pid}-{tid}-{:016x}", random_u64()));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(f) => return Ok((f, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some((e, path)),
            Err(e) => {
                let hint = if e.kind() == io::ErrorKind::NotFound {
                    format!(" (the directory does not exist; create it or point {DIR_ENV} at an existing one)")
                } else if e.kind() == io::ErrorKind::PermissionDenied {
                    format!(" (no write permission there; point {DIR_ENV} at a writable directory)")
                } else {
                    String::new()
                };
                return Err(io_error(
                    format_args!("creating ring file {}{hint}", path.display()),
                    e,
                ));
            }
        }
    }
    let (e, path) = last_err.expect("loop ran");
    Err(io_error(
        format_args!("creating ring file {} (name collisions)", path.display()),
        e,
    ))
}

// ---------------------------------------------------------------------------
// Consumer
// ---------------------------------------------------------------------------

/// The reading end of a ring. `Send + Sync`: any number of threads may call
/// [`Consumer::recv`] concurrently.
pub struct Consumer {
    ring: Ring,
    /// Path the ring was opened from (path API); empty otherwise.
    path: PathBuf,
    producer_pid: u32,
    /// Next sequence number to hand out. In this process's memory, not the
    /// ring's: the producer cannot make us hand a number out twice or skip
    /// one, which the resequencing of the chunks relies on.
    claimed: AtomicU64,
    /// Held while a sequence number is claimed and its slot checked, so that
    /// a refused slot fixes the end before anyone can claim the next one
    /// ("nothing after a refused chunk"). Taken once per chunk.
    claim: std::sync::Mutex<()>,
    /// Sequence numbers below this are all the stream will have; [`NO_END`]
    /// until the producer closed, the ring was abandoned or a slot refused.
    end: AtomicU64,
    abandoned: AtomicBool,
    closed: AtomicBool,
    /// Chunks handed out refused (see [`Chunk::is_refused`]).
    refused: AtomicU64,
    /// The first protocol violation seen.
    violation: OnceLock<Violation>,
    /// Sleeps that ran out their time slice (see
    /// [`Consumer::sleeps_timed_out`]).
    slept_out: AtomicU64,
}

/// `Consumer::end` while the stream's end is not known.
const NO_END: u64 = u64::MAX;

/// How a producer broke the ring protocol: the consumer refused the chunk
/// with sequence number `seq` and stopped there. The numbers are what the
/// producer wrote into the slot; nothing else of the ring is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Violation {
    /// `published` says the chunk is there, but its slot is not marked full.
    SlotNotFull { seq: u64 },
    /// Its slot holds another sequence number.
    WrongSeq { seq: u64, found: u64 },
    /// Its slot's length exceeds the chunk size.
    TooLong {
        seq: u64,
        len: u64,
        chunk_size: usize,
    },
}

impl Violation {
    /// Sequence number of the refused chunk.
    pub fn seq(&self) -> u64 {
        match *self {
            Violation::SlotNotFull { seq }
            | Violation::WrongSeq { seq, .. }
            | Violation::TooLong { seq, .. } => seq,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mempipe: the producer broke the ring protocol: ")?;
        match *self {
            Violation::SlotNotFull { seq } => write!(
                f,
                "chunk {seq} was published but its slot is not marked full"
            )?,
            Violation::WrongSeq { seq, found } => write!(
                f,
                "chunk {seq} was published but its slot holds chunk {found}"
            )?,
            Violation::TooLong {
                seq,
                len,
                chunk_size,
            } => write!(
                f,
                "chunk {seq} claims {len} bytes in a {chunk_size}-byte chunk"
            )?,
        }
        write!(
            f,
            "; refused it and stopped reading the ring (the events from there on are lost; \
             the ring's producer is buggy or not the traced QEMU)"
        )
    }
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("path", &self.path)
            .field("chunk_size", &self.ring.geo.chunk_size)
            .field("chunk_count", &self.ring.geo.chunk_count)
            .field("producer_pid", &self.producer_pid)
            .field("published", &self.published())
            .field("claimed", &self.claimed.load(Ordering::Relaxed))
            .field("violation", &self.violation.get())
            .finish()
    }
}

/// Outcome of one non-blocking claim attempt.
enum Poll<'a> {
    Got(Chunk<'a>),
    Empty,
    Finished,
}

/// Refuses a file that is not a regular file of this user.
/// What [`check_sealed_file`] says of a shared file that fails it.
pub(crate) struct Sealed<'a> {
    /// Where such a file comes from (the fix for a wrong owner or kind).
    pub origin: &'a str,
    /// Who writes it ("producer", "writer").
    pub writer: &'a str,
    /// How to make one right (the fix for missing seals).
    pub how: &'a str,
}

/// The checks every shared file passes before it is mapped: a regular file
/// of this user, sealed against shrinking and growing (else its writer
/// could truncate it under this process, which would die of SIGBUS).
/// Returns its metadata for the caller's own checks; a failed check is
/// `refuse`d with one line.
pub(crate) fn check_sealed_file(
    file: &File,
    what: &str,
    say: Sealed<'_>,
    refuse: fn(String) -> Error,
) -> Result<std::fs::Metadata, Error> {
    let meta = file
        .metadata()
        .map_err(|e| io_error(format_args!("fstat of {what}"), e))?;
    check_owner(&meta, what, say.origin).map_err(refuse)?;
    // SAFETY: F_GET_SEALS on an fd the caller owns; it takes no argument.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & RING_SEALS != RING_SEALS {
        return Err(refuse(format!(
            "{what} is not sealed against shrinking and growing{}; its {} could truncate it \
             under this process (which would die of SIGBUS); {}",
            if seals < 0 { " (not a memfd)" } else { "" },
            say.writer,
            say.how
        )));
    }
    Ok(meta)
}

fn check_owner(meta: &std::fs::Metadata, what: &str, fix: &str) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if !meta.is_file() {
        return Err(format!("{what} is not a regular file; {fix}"));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "{what} belongs to uid {}, not to this user ({me}); a ring is made by \
             the traced QEMU running as the same user",
            meta.uid()
        ));
    }
    Ok(())
}

/// Opens the file process `pid` has open as fd `fd`, by opening
/// `/proc/<pid>/fd/<fd>` (a link to the file itself, which only a process
/// of the same user may follow; never a path in a directory anyone can
/// write): `what` names it in messages, `write` opens it read-write (else
/// read-only), `refused` makes the error for a file that is not a regular
/// file of this user (`fix` says what it should be). Whatever else that fd
/// may be, it is only looked at (`O_PATH`) until it is known to be a
/// regular file of this user: no device is opened, no FIFO waited for.
fn open_proc_fd(
    pid: i32,
    fd: i32,
    what: &str,
    write: bool,
    refused: fn(String) -> Error,
    fix: &str,
) -> Result<File, Error> {
    if pid <= 0 || fd < 0 {
        return Err(refused(format!(
            "pid {pid} fd {fd} cannot name a {what} (the pid must be positive and the fd \
             not negative); pass the pid and fd of the producer's memfd"
        )));
    }
    let path = format!("/proc/{pid}/fd/{fd}");
    let hint = |e: &io::Error| match e.kind() {
        io::ErrorKind::NotFound => {
            "; the producer exited or closed the fd before the consumer opened it"
        }
        io::ErrorKind::PermissionDenied => "; the producer runs as another user or is not dumpable",
        _ => "",
    };
    // First without opening anything for reading or writing (O_PATH
    // has no side effects: a device or FIFO behind the fd is neither
    // opened nor waited for); only a regular file is then reopened for
    // real. Not O_NOFOLLOW: the entry is a magic link, which is the
    // point.
    let probe = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| io_error(format_args!("opening {what} {path}{}", hint(&e)), e))?;
    let meta = probe
        .metadata()
        .map_err(|e| io_error(format_args!("fstat of {what} {path}"), e))?;
    check_owner(&meta, &format!("{what} {path}"), fix).map_err(refused)?;
    let again = format!("/proc/self/fd/{}", probe.as_raw_fd());
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&again)
        .map_err(|e| io_error(format_args!("opening {what} {path}{}", hint(&e)), e))?;
    drop(probe);
    Ok(file)
}

impl Consumer {
    /// Attaches to a memfd ring given an fd of it (e.g. received over a
    /// Unix socket, or opened by [`Consumer::open_proc`]). Before mapping
    /// anything it checks that the fd is a regular file of this user, sealed
    /// against shrinking and growing (an unsealed ring could be truncated
    /// under us, which would kill this process with SIGBUS), that its memory
    /// is allocated (so mapping it allocates none here), and that its size is
    /// what its header describes, at most [`MAX_RING_LEN`]. Then it maps the
    /// ring and records this process as its consumer. Nothing is unlinked:
    /// the ring has no name.
    pub fn from_fd(fd: OwnedFd) -> Result<Consumer, Error> {
        use std::os::unix::fs::MetadataExt;
        let file = File::from(fd);
        let what = "the ring's fd";
        let meta = check_sealed_file(
            &file,
            what,
            Sealed {
                origin: "a ring is the memfd Producer::create_memfd made",
                writer: "producer",
                how: "a ring must be made with Producer::create_memfd, which seals it",
            },
            Error::Refused,
        )?;
        let len = meta.len();
        if meta.blocks().saturating_mul(512) < len {
            return Err(Error::Refused(format!(
                "{what} is {len} bytes but only {} of them are allocated; its producer must \
                 allocate the ring's memory (Producer::create_memfd does), or mapping it \
                 here would allocate it",
                meta.blocks().saturating_mul(512)
            )));
        }
        Self::attach(file, len, what, PathBuf::new())
    }

    /// Attaches to the memfd ring that process `pid` has open as fd `fd`, by
    /// opening `/proc/<pid>/fd/<fd>` (a link to the memfd itself, which only
    /// a process of the same user may follow; never a path in a directory
    /// anyone can write), then as [`Consumer::from_fd`]. Whatever else that
    /// fd may be, it is only looked at (`O_PATH`) until it is known to be a
    /// regular file of this user: no device is opened, no FIFO waited for.
    pub fn open_proc(pid: i32, fd: i32) -> Result<Consumer, Error> {
        let file = open_proc_fd(
            pid,
            fd,
            "ring",
            true,
            Error::Refused,
            "a ring is the memfd Producer::create_memfd made",
        )?;
        Self::from_fd(OwnedFd::from(file))
    }

    /// Opens and maps an existing ring file (path API), validates its header
    /// (magic, version, sizes against the file length), records this
    /// process's pid in it and unlinks the file, so that nothing is left
    /// behind once both ends exit, even after a crash.
    ///
    /// Unlike a memfd ring, a file cannot be sealed: its producer can still
    /// truncate it while this process has it mapped, which kills this process
    /// with SIGBUS. Use [`Producer::create_memfd`] and
    /// [`Consumer::open_proc`] where the producer is not trusted.
    pub fn open(path: &Path) -> Result<Consumer, Error> {
        let shown = path.display();
        // No symlink is followed and nothing blocks (a FIFO in its place
        // cannot hang the client); only a regular file of our own user is a
        // ring we map.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| io_error(format_args!("opening ring file {shown}"), e))?;
        let meta = file
            .metadata()
            .map_err(|e| io_error(format_args!("reading the size of ring file {shown}"), e))?;
        check_owner(
            &meta,
            &shown.to_string(),
            "pass the path Producer::path() returned",
        )
        .map_err(Error::BadHeader)?;
        let consumer = Self::attach(file, meta.len(), &shown.to_string(), path.to_path_buf())?;
        // From here on, an error drops `consumer`, which tells the producer.
        unlink_if_same(path, &meta)?;
        Ok(consumer)
    }

    /// The attach protocol shared by both APIs: reads and checks the header
    /// (from the file, not a mapping, so that nothing is mapped before the
    /// size is known to be sane), maps the ring and claims it.
    fn attach(file: File, len: u64, what: &str, path: PathBuf) -> Result<Consumer, Error> {
        use std::os::unix::fs::FileExt;
        if len < HEADER_SIZE as u64 {
            return Err(Error::BadHeader(format!(
                "{what} is {len} bytes, smaller than the {HEADER_SIZE}-byte header; \
                 it is not a mempipe ring (or was truncated)"
            )));
        }
        let mut ident = [0u8; size_of::<Ident>()];
        file.read_exact_at(&mut ident, 0)
            .map_err(|e| io_error(format_args!("reading the header of {what}"), e))?;
        let (geo, producer_pid) = validate(&ident, len, what)?;
        let map = MmapOptions::new()
            .len(geo.file_len)
            .populate()
            .map_raw(&file)
            .map_err(|e| io_error(format_args!("mapping {what} ({} bytes)", geo.file_len), e))?;
        let ring = Ring::new(Mapping::Anywhere(map), geo);
        let me = std::process::id();
        if let Err(pid) = ring.header().ident.consumer_pid.compare_exchange(
            0,
            me,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            return Err(Error::AlreadyOpened { pid });
        }
        Ok(Consumer {
            ring,
            path,
            producer_pid,
            claimed: AtomicU64::new(0),
            claim: std::sync::Mutex::new(()),
            end: AtomicU64::new(NO_END),
            abandoned: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            refused: AtomicU64::new(0),
            violation: OnceLock::new(),
            slept_out: AtomicU64::new(0),
        })
    }

    /// Sleeps of this consumer's threads that ran out their whole time
    /// slice instead of being woken (by a publish, close or abandon). A
    /// lost wake-up shows here, by count.
    pub fn sleeps_timed_out(&self) -> u64 {
        self.slept_out.load(Ordering::Relaxed)
    }

    /// Path the ring was opened from (already unlinked); empty for a memfd
    /// ring.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of each chunk in bytes.
    pub fn chunk_size(&self) -> usize {
        self.ring.geo.chunk_size
    }

    /// Number of chunks in the ring.
    pub fn chunk_count(&self) -> usize {
        self.ring.geo.chunk_count
    }

    /// Pid of the process that created the ring, as recorded in its header
    /// (the producer's word: not a proof of anything).
    pub fn producer_pid(&self) -> u32 {
        self.producer_pid
    }

    /// Blocks until the next unclaimed sequence number is published, claims it
    /// and returns it. Each sequence number is handed to exactly one caller,
    /// claimed in increasing order, with no gaps. Returns `None` once the
    /// producer closed the ring (or [`Consumer::abandon`] was called, or a
    /// chunk was refused) and every chunk before that end has been claimed,
    /// and at once after [`Consumer::close`].
    ///
    /// The producer reuses slots in order, so a thread that blocks in `recv`
    /// while still holding a chunk may wait forever once the producer wraps
    /// around to that chunk's slot: drop held chunks before blocking, or use
    /// [`Consumer::try_recv`] while holding some. A producer that dies
    /// without closing the ring leaves `recv` waiting until
    /// [`Consumer::abandon`] (the ring itself cannot tell a dead producer
    /// from a slow one).
    pub fn recv(&self) -> Option<Chunk<'_>> {
        let mut round = 0;
        loop {
            match self.poll() {
                Poll::Got(c) => return Some(c),
                Poll::Finished => return None,
                Poll::Empty => {}
            }
            if round < SPIN_ROUNDS {
                spin(round);
                round += 1;
            } else {
                self.sleep();
            }
        }
    }

    /// Claims the next published chunk if there is one, without waiting.
    /// `None` means nothing is available right now (or the stream ended; see
    /// [`Consumer::is_finished`]).
    pub fn try_recv(&self) -> Option<Chunk<'_>> {
        match self.poll() {
            Poll::Got(c) => Some(c),
            Poll::Empty | Poll::Finished => None,
        }
    }

    /// Chunks published but not claimed yet: how far the consumer side is
    /// behind the producer (at most the ring's chunk count, whatever the
    /// producer wrote into the header).
    pub fn backlog(&self) -> u64 {
        let p = self.available();
        p.saturating_sub(self.claimed.load(Ordering::Acquire))
            .min(self.ring.geo.chunk_count as u64)
    }

    /// Whether the producer is waiting for a free slot right now: the ring
    /// is full and its chunks are all published or held by consumer
    /// threads, so its core is idle until one is released. (The waiter bit
    /// of the slot its next chunk goes to; a producer still spinning before
    /// it sleeps does not count yet.) A hint for a consumer's policy, read
    /// from memory the producer writes: never trusted for anything else.
    pub fn producer_waiting(&self) -> bool {
        let p = self
            .ring
            .header()
            .producer
            .published
            .load(Ordering::Relaxed);
        let slot = self.ring.slot(self.ring.slot_index(p));
        slot.state.load(Ordering::Relaxed) & SLOT_WAITER != 0
    }

    /// Whether `recv` would return `None`: the stream's end is known (the
    /// producer closed the ring, or it was abandoned, or a chunk refused) and
    /// every chunk before it has been claimed; or the consumer was closed.
    pub fn is_finished(&self) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return true;
        }
        let e = self.end_now();
        e != NO_END && self.claimed.load(Ordering::Acquire) >= self.available().min(e)
    }

    /// `published` (Acquire), never beyond the stream's known end.
    #[inline]
    fn available(&self) -> u64 {
        let p = self
            .ring
            .header()
            .producer
            .published
            .load(Ordering::Acquire);
        p.min(self.end.load(Ordering::Acquire))
    }

    /// The stream's end if known; fixes it at the current `published` the
    /// first time the producer's `closed` flag is seen (the producer sets it
    /// after its last publish, so that value is final).
    #[inline]
    fn end_now(&self) -> u64 {
        let e = self.end.load(Ordering::Acquire);
        if e != NO_END {
            return e;
        }
        let hdr = self.ring.header();
        if hdr.producer.closed.load(Ordering::Acquire) == 0 {
            return NO_END;
        }
        self.set_end(hdr.producer.published.load(Ordering::Acquire))
    }

    /// Lowers the stream's end to `e` (never raises it); returns the end.
    fn set_end(&self, e: u64) -> u64 {
        let e = e.min(NO_END - 1);
        let prev = self.end.fetch_min(e, Ordering::AcqRel);
        prev.min(e)
    }

    #[inline]
    fn poll(&self) -> Poll<'_> {
        loop {
            if self.closed.load(Ordering::Relaxed) {
                return Poll::Finished;
            }
            {
                // One claimer at a time: the slot is checked (and a broken
                // one fixes the stream's end) before the next claim. A
                // poisoned lock only means a panic elsewhere; the counters
                // it guards are atomics and stay consistent.
                let _claim = self.claim.lock().unwrap_or_else(|e| e.into_inner());
                let c = self.claimed.load(Ordering::Relaxed);
                // Acquire: pairs with the producer's publishing store, so the
                // chunk and its descriptor are visible once we own seq c < p.
                let p = self.available();
                if c < p {
                    // Release: `is_finished`/`backlog` read it without the lock.
                    self.claimed.store(c + 1, Ordering::Release);
                    // Informational copy for whoever inspects the ring.
                    self.ring
                        .header()
                        .consumer
                        .claimed
                        .fetch_max(c + 1, Ordering::Relaxed);
                    return Poll::Got(self.chunk(c));
                }
            }
            let e = self.end_now();
            if e != NO_END {
                // The end was fixed after the last publish: re-check.
                if self.claimed.load(Ordering::Acquire) >= self.available().min(e) {
                    return Poll::Finished;
                }
                continue;
            }
            return Poll::Empty;
        }
    }

    /// One futex sleep of at most MAX_SLICE, unless something changed.
    #[cold]
    fn sleep(&self) {
        let hdr = self.ring.header();
        let wait = &hdr.wait;
        wait.sleepers.fetch_add(1, Ordering::SeqCst);
        let word = wait.wake.load(Ordering::SeqCst);
        // Re-check after announcing ourselves: a publish/close/abandon either
        // happened before (we see it here) or sees sleepers != 0 and changes
        // `wake` (so the futex wait returns at once or is woken). Whatever
        // the producer does to `wake` and `sleepers`, the wait is bounded.
        let ready = self.claimed.load(Ordering::SeqCst)
            < hdr.producer.published.load(Ordering::SeqCst)
            || hdr.producer.closed.load(Ordering::SeqCst) != 0
            || self.end.load(Ordering::SeqCst) != NO_END
            || self.abandoned.load(Ordering::SeqCst)
            || self.closed.load(Ordering::SeqCst);
        if !ready && futex_wait(&wait.wake, word, MAX_SLICE) {
            self.slept_out.fetch_add(1, Ordering::Relaxed);
        }
        wait.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// The chunk of claimed sequence number `seq`, after checking its slot:
    /// full, holding `seq`, with a length that fits. A slot that fails the
    /// check is the producer's violation: the chunk is handed out refused
    /// (empty, the slot untouched), which keeps the sequence numbers dense
    /// for the caller, and the stream ends after it.
    #[inline]
    fn chunk(&self, seq: u64) -> Chunk<'_> {
        let idx = self.ring.slot_index(seq);
        let slot = self.ring.slot(idx);
        let state = slot.state.load(Ordering::Acquire);
        let found = slot.seq.load(Ordering::Relaxed);
        let len = slot.len.load(Ordering::Relaxed);
        let chunk_size = self.ring.geo.chunk_size;
        let bad = if state & SLOT_FULL == 0 {
            Some(Violation::SlotNotFull { seq })
        } else if found != seq {
            Some(Violation::WrongSeq { seq, found })
        } else if len > chunk_size as u64 {
            Some(Violation::TooLong {
                seq,
                len,
                chunk_size,
            })
        } else {
            None
        };
        if let Some(v) = bad {
            self.refuse(v);
            return Chunk {
                consumer: self,
                seq,
                idx,
                len: 0,
                refused: true,
            };
        }
        Chunk {
            consumer: self,
            seq,
            idx,
            len: len as usize,
            refused: false,
        }
    }

    /// Records a violation, ends the stream after it and tells the producer
    /// that no more will be read (so an honest but buggy one does not wait
    /// for a slot forever).
    #[cold]
    #[inline(never)]
    fn refuse(&self, v: Violation) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        let _ = self.violation.set(v);
        self.set_end(v.seq() + 1);
        self.tell_producer_gone();
        self.ring.wake_consumers(i32::MAX);
    }

    /// Chunks handed out refused because their slot broke the protocol
    /// (see [`Consumer::violation`]). At most 1: the first ends the stream.
    /// What the producer published after it is not read; how much that
    /// was is not known (the producer's counters are not trusted).
    pub fn refused_chunks(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The first protocol violation of the producer, if any.
    pub fn violation(&self) -> Option<Violation> {
        self.violation.get().copied()
    }

    /// Declares the producer dead (e.g. its control socket hit EOF without a
    /// clean close): `recv` drains what was published up to now, then
    /// returns `None` instead of waiting. Wakes sleeping `recv` callers.
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::SeqCst);
        self.set_end(
            self.ring
                .header()
                .producer
                .published
                .load(Ordering::Acquire),
        );
        self.ring.wake_consumers(i32::MAX);
    }

    /// Stops consuming: `recv` returns `None` from now on (unclaimed chunks are
    /// discarded), and the producer gets [`Error::ConsumerGone`]. Chunks
    /// already claimed stay valid until dropped. Idempotent; dropping the
    /// consumer calls it too.
    pub fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.tell_producer_gone();
        self.ring.wake_consumers(i32::MAX);
    }

    fn tell_producer_gone(&self) {
        let hdr = self.ring.header();
        hdr.wait.consumer_gone.store(1, Ordering::SeqCst);
        // Wake a producer sleeping on any slot (see wait_for_slot for the
        // SeqCst pairing).
        for idx in 0..self.ring.geo.chunk_count {
            let slot = self.ring.slot(idx);
            if slot.state.load(Ordering::SeqCst) & SLOT_WAITER != 0 {
                futex_wake(&slot.state, 1);
            }
        }
    }

    /// True if the producer called [`Producer::close`] (or dropped its end).
    pub fn closed_by_producer(&self) -> bool {
        self.ring.header().producer.closed.load(Ordering::Acquire) != 0
    }

    /// Chunks published by the producer so far, as its header says (for
    /// reports; what `recv` hands out never goes beyond the stream's end).
    pub fn published(&self) -> u64 {
        self.ring
            .header()
            .producer
            .published
            .load(Ordering::Acquire)
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.close();
    }
}

/// Unlinks `path` if it still names the file `opened` describes (same
/// device and inode): between the consumer's open and its unlink someone may
/// have put another file under that name, which is not ours to delete.
/// Returns whether it unlinked.
fn unlink_if_same(path: &Path, opened: &std::fs::Metadata) -> Result<bool, Error> {
    use std::os::unix::fs::MetadataExt;
    let shown = path.display();
    let same = match std::fs::symlink_metadata(path) {
        Ok(now) => now.dev() == opened.dev() && now.ino() == opened.ino(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => {
            return Err(io_error(
                format_args!("checking ring file {shown} before unlinking it"),
                e,
            ))
        }
    };
    if !same {
        return Ok(false);
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error(
            format_args!("unlinking ring file {shown} after opening it"),
            e,
        )),
    }
}

/// Checks the identity line of a ring (`ident`: a copy of the header's first
/// bytes) against the file's length `len`; returns its geometry and
/// producer pid. Messages never show the file's bytes, only numbers.
fn validate(
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

// ---------------------------------------------------------------------------
// Chunk
// ---------------------------------------------------------------------------

/// A claimed chunk. Dropping it releases its slot back to the producer.
pub struct Chunk<'a> {
    consumer: &'a Consumer,
    seq: u64,
    idx: usize,
    len: usize,
    /// The slot broke the protocol: no data, and the slot is not ours.
    refused: bool,
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
    /// read with one relaxed 64-bit atomic load per word (the chunk is
    /// page-aligned and a whole number of pages long, so the last word
    /// read is inside it), as the block table is read. What comes out is
    /// this process's own memory, still untrusted input: it may mix bytes
    /// from before and after a hostile producer's write.
    #[inline]
    pub fn copy_into(&self, buf: &mut ChunkBuf) {
        buf.words.clear();
        buf.len = 0;
        if self.refused {
            return;
        }
        let n = self.len.div_ceil(8);
        let src = self.consumer.ring.chunk_ptr(self.idx).cast::<u64>();
        buf.words.reserve(n);
        let dst = &mut buf.words.spare_capacity_mut()[..n];
        for (i, d) in dst.iter_mut().enumerate() {
            // SAFETY: i < n <= chunk_size / 8 (len <= chunk_size, checked
            // when claimed; chunk_size is a multiple of 4096), so the word
            // is inside this chunk, in the mapping, which outlives `self`
            // (the Consumer is borrowed); it is 8-aligned (the data area
            // and chunk_size are page multiples); this process only ever
            // reads it atomically.
            let w = unsafe { AtomicU64::from_ptr(src.add(i)) }.load(Ordering::Relaxed);
            d.write(w);
        }
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
    /// (see [`Consumer::violation`]). It has no data, and it is the last
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
        let slot = self.consumer.ring.slot(self.idx);
        // Release: our reads of the chunk happen before the producer (Acquire)
        // reuses it. The swap is ordered with the producer's waiter-bit CAS, so
        // either it sees the bit and wakes the producer or the CAS fails.
        let prev = slot.state.swap(SLOT_FREE, Ordering::Release);
        if prev & SLOT_WAITER != 0 {
            futex_wake(&slot.state, 1);
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_memfd;
