//! `mempipe`: a zero-copy shared-memory ring of fixed-size chunks from one
//! producer thread (in one process) to one consumer process, in which several
//! threads may take chunks concurrently.
//!
//! The producer (inside QEMU) creates a ring file with [`Producer::create`],
//! tells the consumer its [`Producer::path`] over some control channel, then
//! loops [`Producer::acquire`] / write / [`Producer::publish`]. The consumer
//! (the analysis client) calls [`Consumer::open`], which maps and *unlinks* the
//! file, then any number of its threads call [`Consumer::recv`]. Each published
//! chunk gets the next sequence number (0, 1, 2, ...) and is handed to exactly
//! one `recv` caller, in increasing order of sequence number. Dropping the
//! returned [`Chunk`] gives its slot back to the producer; chunks may be
//! released in any order and from any thread.
//!
//! There is strict backpressure: when every slot is in use the producer waits
//! in `acquire`; nothing is ever dropped. Waiting (on either side) is a short
//! bounded spin, then `futex(2)` waits in slices of at most 100 ms. Sleepers
//! announce themselves, so the fast path (nobody asleep) makes no system call.
//! The producer's `acquire`/`publish` never allocate and never take locks.
//!
//! Only Linux is supported (the implementation uses `futex(2)`).
//!
//! # Wire format (layout version 1)
//!
//! The ring file (and its mapping, which starts at file offset 0) looks like
//! this. All integers are native-endian (both ends run on the same host);
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
//! 128  u64      claimed        next sequence number to hand out (CAS by recv)
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
//! * Consumer thread: `c = claimed`; if `c < published` (Acquire) CAS
//!   `claimed` from `c` to `c + 1`; the winner owns seq `c`. Releasing it
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

#![deny(unsafe_op_in_unsafe_fn)]

use std::cell::Cell;
use std::ffi::OsString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::marker::PhantomData;
use std::mem::{offset_of, size_of};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr::{self, addr_of, addr_of_mut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use memmap2::{MmapOptions, MmapRaw};

mod mapping;
use mapping::Mapping;

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
            .filter(|&l| l <= isize::MAX as usize && u64::try_from(l).is_ok())
            .ok_or_else(too_big)?;
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
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, 4-byte aligned u32 (in the shared mapping),
    // which the kernel only reads; `ts` outlives the call; the remaining
    // arguments are unused by FUTEX_WAIT.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            ptr::null::<u32>(),
            0u32,
        );
    }
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
    path: PathBuf,
    /// Sequence number of the next chunk to publish (= chunks published).
    next: u64,
    /// The slot for `next` was found free by `acquire` and not yet published.
    acquired: bool,
    closed: bool,
    _not_sync: PhantomData<Cell<()>>,
}

impl fmt::Debug for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("path", &self.path)
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
        match Self::init(&file, &path, geo, at) {
            Ok(ring) => Ok(Producer {
                ring,
                path,
                next: 0,
                acquired: false,
                closed: false,
                _not_sync: PhantomData,
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    fn init(
        file: &File,
        path: &Path,
        geo: Geometry,
        at: Option<std::ptr::NonNull<u8>>,
    ) -> Result<Ring, Error> {
        let len = geo.file_len;
        file.set_len(len as u64).map_err(|e| {
            io_error(
                format_args!("resizing ring file {} to {len} bytes", path.display()),
                e,
            )
        })?;
        // Reserve the memory now, so that a full tmpfs is a clear error here
        // rather than a SIGBUS on first touch.
        // SAFETY: plain syscall on an fd we own.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
        match rc {
            0 | libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS => {}
            libc::ENOSPC => {
                return Err(io_error(
                    format_args!(
                    "no space for a {len}-byte ring in {}; free space there, point {DIR_ENV} at \
                         another directory, or use fewer/smaller chunks",
                    path.parent().unwrap_or(Path::new("")).display()
                ),
                    io::Error::from_raw_os_error(rc),
                ))
            }
            _ => {
                return Err(io_error(
                    format_args!("allocating {len} bytes for ring file {}", path.display()),
                    io::Error::from_raw_os_error(rc),
                ))
            }
        }
        // SAFETY: `at` is the caller's reservation (create_at's contract).
        let map = unsafe { Mapping::map(file, len, at) }.map_err(|e| {
            io_error(
                format_args!("mapping ring file {} ({len} bytes)", path.display()),
                e,
            )
        })?;
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

    /// Path of the ring file (to hand to the consumer).
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
    fn wait_for_slot(&self, idx: usize, timeout: Option<Duration>) -> Result<bool, Error> {
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
            futex_wait(&slot.state, SLOT_FULL | SLOT_WAITER, slice);
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
    path: PathBuf,
    producer_pid: u32,
    abandoned: AtomicBool,
    closed: AtomicBool,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("path", &self.path)
            .field("chunk_size", &self.ring.geo.chunk_size)
            .field("chunk_count", &self.ring.geo.chunk_count)
            .field("producer_pid", &self.producer_pid)
            .field("published", &self.published())
            .finish()
    }
}

/// Outcome of one non-blocking claim attempt.
enum Poll<'a> {
    Got(Chunk<'a>),
    Empty,
    Finished,
}

impl Consumer {
    /// Opens and maps an existing ring file, validates its header (magic,
    /// version, sizes against the file length), records this process's pid in
    /// it and unlinks the file, so that nothing is left behind once both ends
    /// exit, even after a crash.
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
        if !meta.is_file() {
            return Err(Error::BadHeader(format!(
                "{shown} is not a regular file; pass the path Producer::path() returned"
            )));
        }
        {
            use std::os::unix::fs::MetadataExt;
            // SAFETY: geteuid has no preconditions.
            let me = unsafe { libc::geteuid() };
            if meta.uid() != me {
                return Err(Error::BadHeader(format!(
                    "{shown} belongs to uid {}, not to this user ({me}); a ring is made by \
                     the traced QEMU running as the same user",
                    meta.uid()
                )));
            }
        }
        let len = meta.len();
        if len < HEADER_SIZE as u64 {
            return Err(Error::BadHeader(format!(
                "{shown} is {len} bytes, smaller than the {HEADER_SIZE}-byte header; \
                 it is not a mempipe ring (or was truncated)"
            )));
        }
        let len = usize::try_from(len)
            .map_err(|_| Error::BadHeader(format!("{shown} is {len} bytes, too large to map")))?;
        let map = MmapOptions::new()
            .len(len)
            .populate()
            .map_raw(&file)
            .map_err(|e| io_error(format_args!("mapping ring file {shown} ({len} bytes)"), e))?;
        let geo = validate(&map, path)?;
        let base = map.as_ptr() as *const Ident;
        // SAFETY: the mapping is >= HEADER_SIZE bytes and page aligned; the
        // field is written by the producer before the path is handed out.
        let producer_pid = unsafe { addr_of!((*base).producer_pid).read_volatile() };
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
        let consumer = Consumer {
            ring,
            path: path.to_path_buf(),
            producer_pid,
            abandoned: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        };
        // From here on, an error drops `consumer`, which tells the producer.
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(io_error(
                    format_args!("unlinking ring file {shown} after opening it"),
                    e,
                ))
            }
        }
        Ok(consumer)
    }

    /// Path the ring was opened from (already unlinked).
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

    /// Pid of the process that created the ring, as recorded in its header.
    pub fn producer_pid(&self) -> u32 {
        self.producer_pid
    }

    /// Blocks until the next unclaimed sequence number is published, claims it
    /// and returns it. Each sequence number is handed to exactly one caller,
    /// claimed in increasing order. Returns `None` once the producer closed
    /// the ring (or [`Consumer::abandon`] was called) and every published
    /// chunk has been claimed, and at once after [`Consumer::close`].
    ///
    /// The producer reuses slots in order, so a thread that blocks in `recv`
    /// while still holding a chunk may wait forever once the producer wraps
    /// around to that chunk's slot: drop held chunks before blocking, or use
    /// [`Consumer::try_recv`] while holding some.
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
    /// behind the producer.
    pub fn backlog(&self) -> u64 {
        let hdr = self.ring.header();
        let p = hdr.producer.published.load(Ordering::Acquire);
        p.saturating_sub(hdr.consumer.claimed.load(Ordering::Acquire))
    }

    /// Whether `recv` would return `None`: the producer closed (or the ring was
    /// abandoned or closed) and every published chunk has been claimed.
    pub fn is_finished(&self) -> bool {
        self.closed.load(Ordering::Acquire)
            || (self.producer_done()
                && self.ring.header().consumer.claimed.load(Ordering::Acquire)
                    >= self
                        .ring
                        .header()
                        .producer
                        .published
                        .load(Ordering::Acquire))
    }

    #[inline]
    fn producer_done(&self) -> bool {
        self.ring.header().producer.closed.load(Ordering::Acquire) != 0
            || self.abandoned.load(Ordering::Acquire)
    }

    #[inline]
    fn poll(&self) -> Poll<'_> {
        let hdr = self.ring.header();
        loop {
            if self.closed.load(Ordering::Relaxed) {
                return Poll::Finished;
            }
            let c = hdr.consumer.claimed.load(Ordering::Relaxed);
            // Acquire: pairs with the producer's publishing store, so the chunk
            // and its descriptor are visible once we own seq c < p.
            let p = hdr.producer.published.load(Ordering::Acquire);
            if c < p {
                if hdr
                    .consumer
                    .claimed
                    .compare_exchange_weak(c, c + 1, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    return Poll::Got(self.chunk(c));
                }
                continue;
            }
            if self.producer_done() {
                // The flag was set after the last publish: re-read published.
                let p = hdr.producer.published.load(Ordering::Acquire);
                if hdr.consumer.claimed.load(Ordering::Relaxed) >= p {
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
        // `wake` (so the futex wait returns at once or is woken).
        let ready = hdr.consumer.claimed.load(Ordering::SeqCst)
            < hdr.producer.published.load(Ordering::SeqCst)
            || hdr.producer.closed.load(Ordering::SeqCst) != 0
            || self.abandoned.load(Ordering::SeqCst)
            || self.closed.load(Ordering::SeqCst);
        if !ready {
            futex_wait(&wait.wake, word, MAX_SLICE);
        }
        wait.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    #[inline]
    fn chunk(&self, seq: u64) -> Chunk<'_> {
        let idx = self.ring.slot_index(seq);
        let slot = self.ring.slot(idx);
        debug_assert_eq!(slot.seq.load(Ordering::Relaxed), seq);
        // Clamp: a corrupted descriptor must not make data() read out of bounds.
        let len = (slot.len.load(Ordering::Relaxed) as usize).min(self.ring.geo.chunk_size);
        Chunk {
            consumer: self,
            seq,
            idx,
            len,
        }
    }

    /// Declares the producer dead (e.g. its control socket hit EOF without a
    /// clean close): `recv` drains what was published, then returns `None`
    /// instead of waiting. Wakes sleeping `recv` callers.
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::SeqCst);
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
        let hdr = self.ring.header();
        hdr.wait.consumer_gone.store(1, Ordering::SeqCst);
        self.ring.wake_consumers(i32::MAX);
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

    /// Chunks published by the producer so far.
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

/// Checks the identity line of a mapped ring file; returns its geometry.
fn validate(map: &MmapRaw, path: &Path) -> Result<Geometry, Error> {
    let shown = path.display();
    let base = map.as_ptr() as *const Ident;
    // SAFETY: the caller checked that the mapping is at least HEADER_SIZE
    // bytes; it is page aligned. Volatile reads copy the fields out once, so
    // later changes by the other process cannot affect the checks below.
    let (magic, version, header_size, slot_size, chunk_size, chunk_count, data_offset, file_len) = unsafe {
        (
            addr_of!((*base).magic).read_volatile(),
            addr_of!((*base).version).read_volatile(),
            addr_of!((*base).header_size).read_volatile(),
            addr_of!((*base).slot_size).read_volatile(),
            addr_of!((*base).chunk_size).read_volatile(),
            addr_of!((*base).chunk_count).read_volatile(),
            addr_of!((*base).data_offset).read_volatile(),
            addr_of!((*base).file_len).read_volatile(),
        )
    };
    std::sync::atomic::fence(Ordering::Acquire);
    if magic != MAGIC {
        return Err(Error::BadHeader(format!(
            "{shown} does not start with the magic {:?} (found {:?}); it is not a ring made by mempipe::Producer",
            String::from_utf8_lossy(&MAGIC),
            String::from_utf8_lossy(&magic)
        )));
    }
    if version != LAYOUT_VERSION {
        return Err(Error::BadHeader(format!(
            "{shown} has layout version {version}, this build reads version {LAYOUT_VERSION}; \
             build the producer and the consumer from the same source"
        )));
    }
    if header_size as usize != HEADER_SIZE || slot_size as usize != SLOT_SIZE {
        return Err(Error::BadHeader(format!(
            "{shown} declares a {header_size}-byte header and {slot_size}-byte slots, \
             expected {HEADER_SIZE} and {SLOT_SIZE}; the header is corrupted"
        )));
    }
    let (Ok(cs), Ok(cc)) = (usize::try_from(chunk_size), usize::try_from(chunk_count)) else {
        return Err(Error::BadHeader(format!(
            "{shown} declares chunk_size {chunk_size} and chunk_count {chunk_count}, too large for this machine"
        )));
    };
    let geo = Geometry::new(cs, cc)
        .map_err(|m| Error::BadHeader(format!("{shown} declares {m}; the header is corrupted")))?;
    if data_offset != geo.data_offset as u64 || file_len != geo.file_len as u64 {
        return Err(Error::BadHeader(format!(
            "{shown} declares data_offset {data_offset} and file_len {file_len}, but {chunk_count} chunks of \
             {chunk_size} bytes need {} and {}; the header is corrupted",
            geo.data_offset, geo.file_len
        )));
    }
    if map.len() != geo.file_len {
        return Err(Error::BadHeader(format!(
            "{shown} is {} bytes but its header describes {} bytes ({chunk_count} chunks of {chunk_size} bytes); \
             the file was truncated or extended",
            map.len(),
            geo.file_len
        )));
    }
    Ok(geo)
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
}

impl Chunk<'_> {
    /// Sequence number of this chunk (0 for the first published).
    #[inline]
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The published bytes: exactly the `len` given to `publish`, starting at
    /// a page-aligned (hence 8-byte aligned) address.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: we own seq `self.seq`, whose slot stays "full" until this
        // Chunk is dropped, so the producer does not write the chunk meanwhile;
        // the bytes were published before our Acquire load of `published`;
        // len <= chunk_size keeps the slice inside the chunk, in the mapping,
        // which outlives 'a (the Consumer is borrowed).
        unsafe { std::slice::from_raw_parts(self.consumer.ring.chunk_ptr(self.idx), self.len) }
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
}

impl fmt::Debug for Chunk<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunk")
            .field("seq", &self.seq)
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for Chunk<'_> {
    #[inline]
    fn drop(&mut self) {
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
