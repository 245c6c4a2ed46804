// SPDX-License-Identifier: GPL-2.0-or-later
//! One chunk's events as the parallel callbacks gather them: a [`Batch`]
//! of columns, and the pool of [`Spares`] that lets the next chunks reuse
//! the batches the encoders are done with.

use std::cell::Cell;
use std::sync::Mutex;

use cannoli::Signal;

use crate::small;

/// An event that is neither an instruction nor a memory access, with its
/// place in the chunk.
pub struct Other {
    /// Its seq within the chunk.
    pub seq: u32,
    /// Instructions of the chunk before it (mapping changes apply from
    /// there on).
    pub insns: usize,
    pub ev: Ev,
}

/// What such an event says, as the serial phase needs it.
pub enum Ev {
    Syscall(small::SyscallRow),
    Mmap {
        base: u64,
        len: u64,
        prot: [bool; 3],
        path: Option<String>,
        offset: u64,
    },
    Munmap {
        base: u64,
        len: u64,
    },
    Mprotect {
        base: u64,
        len: u64,
        prot: [bool; 3],
    },
    Signal(Signal),
}

/// One chunk's events as columns, filled by the parallel callbacks. `seq`
/// values count from 0 at the chunk's first event; the serial phase knows
/// where the chunk starts in its stream.
#[derive(Default)]
pub struct Batch {
    pub events: u32,
    /// The instructions' seqs: runs of `(first, count)`.
    pub insn_seq: Vec<(u32, u32)>,
    pub insn_pc: Vec<i64>,
    pub mem_seq: Vec<u32>,
    pub mem_pc: Vec<i64>,
    pub mem_addr: Vec<i64>,
    pub mem_size: Vec<i8>,
    /// 0 load, 1 store (the keys of the `kind` dictionary).
    pub mem_kind: Vec<i8>,
    pub mem_val: Vec<i64>,
    /// (row, high 64 bits) of the 16-byte accesses.
    pub mem_hi: Vec<(usize, i64)>,
    pub other: Vec<Other>,
}

/// The parallel phase hands its batch to the serial phase, which moves it
/// on to an encoder: `trace` only gets a shared slice, hence the cell.
pub type Slot = Cell<Option<Box<Batch>>>;

impl Batch {
    /// Empties it, keeping the vectors' room.
    fn clear(&mut self) {
        self.events = 0;
        self.insn_seq.clear();
        self.insn_pc.clear();
        self.mem_seq.clear();
        self.mem_pc.clear();
        self.mem_addr.clear();
        self.mem_size.clear();
        self.mem_kind.clear();
        self.mem_val.clear();
        self.mem_hi.clear();
        self.other.clear();
    }
}

/// Batches the encoders are done with, kept for the next chunks: their
/// vectors have grown to a chunk's size already, so filling them neither
/// reallocates nor touches fresh memory.
///
/// One pool per export, part of the run's value (`Shared`): each stream's
/// callbacks reach it through their `TidContext`, the encoders through
/// their own `Arc`, so two exports in one process keep their batches
/// apart.
#[derive(Default)]
// Boxed as they travel: a batch moves between the callbacks, the jobs
// and this list as one pointer.
#[allow(clippy::vec_box)]
pub struct Spares(Mutex<Vec<Box<Batch>>>);

/// Spare batches kept: those in flight, about.
const SPARES: usize = 16;

impl Spares {
    /// A spare batch, or a new one.
    pub fn take(&self) -> Box<Batch> {
        let spare = self.0.lock().unwrap_or_else(|p| p.into_inner()).pop();
        spare.unwrap_or_default()
    }

    /// Empties `b` and keeps it for another chunk.
    pub fn give_back(&self, mut b: Box<Batch>) {
        b.clear();
        let mut spare = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if spare.len() < SPARES {
            spare.push(b);
        }
    }
}

/// The chunk's batch: the one trace value, made (or taken from `spares`)
/// on the first event.
#[inline(always)]
pub fn batch<'t>(spares: &Spares, t: &'t mut Vec<Slot>) -> &'t mut Batch {
    if t.is_empty() {
        t.push(Cell::new(Some(spares.take())));
    }
    t[0].get_mut()
        .as_mut()
        .expect("taken only by the serial phase")
}

/// Counts an event; returns its seq within the chunk.
#[inline(always)]
pub fn next_seq(b: &mut Batch) -> u32 {
    b.events += 1;
    b.events - 1
}

/// An event for the serial phase (not an instruction or an access).
pub fn other(spares: &Spares, t: &mut Vec<Slot>, ev: Ev) {
    let b = batch(spares, t);
    let seq = next_seq(b);
    let insns = b.insn_pc.len();
    b.other.push(Other { seq, insns, ev });
}

/// A memory access of `sz` bytes (`val`'s high half counts for 16 only).
#[inline(always)]
pub fn access(
    spares: &Spares,
    t: &mut Vec<Slot>,
    pc: u64,
    addr: u64,
    val: u128,
    sz: u8,
    store: bool,
) {
    let b = batch(spares, t);
    let seq = next_seq(b);
    if sz == 16 {
        b.mem_hi.push((b.mem_pc.len(), (val >> 64) as i64));
    }
    b.mem_seq.push(seq);
    b.mem_pc.push(pc as i64);
    b.mem_addr.push(addr as i64);
    b.mem_size.push(sz as i8);
    b.mem_kind.push(store as i8);
    b.mem_val.push(val as u64 as i64);
}
