//! The reading end of a ring: [`Consumer`], which attaches to a memfd ring
//! it does not trust and hands its chunks to any number of threads, and
//! [`Violation`], how a producer broke the protocol.

use std::fmt;
use std::fs::File;
use std::mem::size_of;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use memmap2::MmapOptions;

use crate::chunk::Chunk;
use crate::error::{io_error, Error};
use crate::layout::{validate, Ident, Ring, HEADER_SIZE, SLOT_FULL, SLOT_WAITER};
use crate::mapping::Mapping;
use crate::sys::{
    check_sealed_file, futex_wait, futex_wake, open_proc_fd, spin, Sealed, MAX_SLICE, SPIN_ROUNDS,
};
#[allow(unused_imports)] // for the doc links
use crate::{Producer, MAX_RING_LEN};

/// The reading end of a ring. `Send + Sync`: any number of threads may call
/// [`Consumer::recv`] concurrently.
pub struct Consumer {
    pub(crate) ring: Ring,
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
    SlotNotFull {
        /// The refused chunk's sequence number.
        seq: u64,
    },
    /// Its slot holds another sequence number.
    WrongSeq {
        /// The refused chunk's sequence number.
        seq: u64,
        /// The one its slot holds.
        found: u64,
    },
    /// Its slot's length exceeds the chunk size.
    TooLong {
        /// The refused chunk's sequence number.
        seq: u64,
        /// The length its slot holds, in bytes.
        len: u64,
        /// The ring's chunk size, in bytes.
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
        Self::attach(file, len, what)
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

    /// The attach protocol: reads and checks the header (from the file, not
    /// a mapping, so that nothing is mapped before the size is known to be
    /// sane), maps the ring and claims it.
    fn attach(file: File, len: u64, what: &str) -> Result<Consumer, Error> {
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
        // Not populated: that would zero every page of the ring here, while
        // the producer waits for the handshake's answer; a page comes in
        // when either end first touches it.
        let map = MmapOptions::new()
            .len(geo.file_len)
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
        self.recv_spinning(Duration::ZERO)
    }

    /// [`Consumer::recv`] for a thread with a core of its own: it polls for
    /// up to `budget` before it sleeps, instead of a few hundred pause
    /// instructions. A chunk published within that time is taken without
    /// the producer paying a futex wake-up (a system call, and on a VM an
    /// interrupt to another CPU), which it pays for every chunk while a
    /// reader that keeps ahead of it sleeps between chunks.
    pub fn recv_spinning(&self, budget: Duration) -> Option<Chunk<'_>> {
        let mut round = 0;
        // Read once the short spin is over, and only with a budget.
        let mut start = None;
        loop {
            match self.poll() {
                Poll::Got(c) => return Some(c),
                Poll::Finished => return None,
                Poll::Empty => {}
            }
            if round < SPIN_ROUNDS {
                spin(round);
                round += 1;
            } else if !budget.is_zero() && start.get_or_insert_with(Instant::now).elapsed() < budget
            {
                // A poll and a clock read every 64 pauses.
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
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
                ring: &self.ring,
                seq,
                idx,
                len: 0,
                refused: true,
            };
        }
        Chunk {
            ring: &self.ring,
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
