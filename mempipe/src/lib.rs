#![warn(missing_docs)]
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
//! (which would kill the consumer with `SIGBUS`).
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
//! out as a slice of the shared mapping: [`Chunk::copy_into`] copies them,
//! as atomic loads would read them, into the consumer's own memory
//! ([`ChunkBuf`]), which the caller then parses as untrusted input.
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
//! The ring file (a memfd) and its mapping, which starts at file offset 0,
//! look like this. All integers are native-endian (both ends run on the same host);
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
//! -- line 0: identity, written by the producer before the ring is shared ----
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
//!  60  u32      consumer_pid   0 until the consumer attaches and stores its pid (atomic CAS 0 -> pid)
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

mod chunk;
mod consumer;
mod error;
mod layout;
mod mapping;
mod producer;
mod shared_copy;
mod sys;
pub mod table;

pub use chunk::{Chunk, ChunkBuf};
pub use consumer::{Consumer, Violation};
pub use error::Error;
pub use layout::{HEADER_SIZE, LAYOUT_VERSION, MAGIC, MAX_RING_LEN, PAGE_SIZE, SLOT_SIZE};
pub use producer::{Producer, MEMFD_NAME};
pub use table::{TableReader, TableWriter};
pub use wire::FdPlace;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_memfd;
