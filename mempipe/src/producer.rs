//! The writing end of a ring: [`Producer`], which makes the sealed memfd
//! ring, then loops [`Producer::acquire`] / write / [`Producer::publish`]
//! without allocating, locking or (while nobody sleeps) making system calls.

use std::cell::Cell;
use std::fmt;
use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::addr_of_mut;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use wire::FdPlace;

use crate::error::{io_error, Error};
use crate::layout::{
    Geometry, Ident, Ring, HEADER_SIZE, LAYOUT_VERSION, MAGIC, SLOT_FREE, SLOT_FULL, SLOT_SIZE,
    SLOT_WAITER,
};
use crate::mapping::Mapping;
use crate::sys::{
    futex_wait, make_fd, memfd_create_named, process_exists, seal, spin, MAX_SLICE, SPIN_ROUNDS,
};
#[allow(unused_imports)] // for the doc links
use crate::Consumer;

/// The name memfd rings get (it shows in `/proc/<pid>/fd` as
/// `/memfd:cannoli-ring (deleted)`; it is not a path anyone can open).
pub const MEMFD_NAME: &str = "cannoli-ring";

/// The writing end of a ring. `Send`, not `Sync`: one thread uses it at a time.
pub struct Producer {
    pub(crate) ring: Ring,
    /// The ring's memfd, until [`Producer::release_fd`].
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
            .field("fd", &self.fd.as_ref().map(|f| f.as_raw_fd()))
            .field("chunk_size", &self.ring.geo.chunk_size)
            .field("chunk_count", &self.ring.geo.chunk_count)
            .field("published", &self.next)
            .field("closed", &self.closed)
            .finish()
    }
}

impl Producer {
    /// Bytes of address space a ring of this geometry maps.
    pub fn mapped_len(chunk_size: usize, chunk_count: usize) -> Result<usize, Error> {
        Ok(Geometry::new(chunk_size, chunk_count)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?
            .file_len)
    }

    /// Creates an anonymous ring: a memfd named [`MEMFD_NAME`], sized for the
    /// header plus `chunk_count * chunk_size`, its memory allocated, sealed
    /// against shrinking and growing (and against further seals), and
    /// mapped. Nothing appears in any directory; the ring goes away with the
    /// last fd and mapping of it. Hand the consumer [`Producer::proc_path`]
    /// (or the fd itself) to attach with; then [`Producer::release_fd`] if
    /// the fd should not stay open. `chunk_size` is a multiple of 4096 and
    /// at least 4096; `chunk_count` is a power of two and at least 2.
    pub fn create_memfd(chunk_size: usize, chunk_count: usize) -> Result<Producer, Error> {
        // SAFETY: no placement.
        unsafe { Self::create_memfd_at(chunk_size, chunk_count, None, 0) }
    }

    /// Like [`Producer::create_memfd`], mapping the ring at address `at` when
    /// given: for a producer that must not let the kernel choose (see
    /// `mapping.rs`). When the producer is dropped the range is reserved
    /// again (`PROT_NONE`), not unmapped, for the caller to reuse. The memfd
    /// is put where `place` says ([`wire::FdPlace`]; `0`: where the kernel
    /// put it). QEMU puts its fds out of the traced guest's reach.
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
        let geo = Geometry::new(chunk_size, chunk_count)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let at = match at {
            None => None,
            Some(a) => Some(std::ptr::NonNull::new(a as *mut u8).ok_or_else(|| {
                Error::InvalidArgument("the address to map the ring at is 0".into())
            })?),
        };
        let what = "the ring's memfd";
        let fd = make_fd(place, what, memfd_create)?;
        let file = File::from(fd);
        size_ring(&file, geo, what)?;
        seal(&file, what)?;
        // SAFETY: `at` is the caller's reservation (this function's contract).
        let ring = unsafe { Self::init(&file, what, geo, at) }?;
        Ok(Producer::with_ring(ring, OwnedFd::from(file)))
    }

    fn with_ring(ring: Ring, fd: OwnedFd) -> Producer {
        Producer {
            ring,
            fd: Some(fd),
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
    /// As for [`Producer::create_memfd_at`]'s `at`.
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
        // SAFETY: the mapping is fresh, private to this function until the ring
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

    /// The ring's memfd, until [`Producer::release_fd`]; `None` after it.
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
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.close();
    }
}

/// Sizes a new ring file and allocates its memory, so that a full tmpfs (or
/// memory cgroup) is a clear error here rather than a SIGBUS on first touch.
/// A memfd must be allocated (the consumer refuses one with holes).
fn size_ring(file: &File, geo: Geometry, what: &str) -> Result<(), Error> {
    let len = geo.file_len;
    file.set_len(len as u64)
        .map_err(|e| io_error(format_args!("resizing {what} to {len} bytes"), e))?;
    // SAFETY: plain syscall on an fd we own; len fits off_t (<= MAX_RING_LEN).
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
    match rc {
        0 => Ok(()),
        libc::ENOSPC | libc::ENOMEM => {
            let fix = "free memory, or use fewer/smaller chunks (CANNOLI_CHUNKS, CANNOLI_CHUNK_KB)";
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
pub(crate) fn memfd_create() -> Result<OwnedFd, Error> {
    memfd_create_named(MEMFD_NAME, "the ring's memfd")
}
