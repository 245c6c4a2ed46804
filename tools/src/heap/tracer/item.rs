// SPDX-License-Identifier: GPL-2.0-or-later
//! The events the parallel phase hands the serial phase, one thread's in
//! its execution order.

use std::sync::Arc;

use super::super::super::backtrace::state::Regs;
use super::segment;

/// What the parallel phase hands on, in execution order.
#[derive(Debug, Clone)]
pub enum Item {
    /// An instruction; `regs`: the stack pointer and link register where
    /// the event carried registers.
    Insn {
        pc: u64,
        branch: bool,
        regs: Option<Regs>,
        /// The return register, with `regs`.
        value: Option<u64>,
    },
    /// An allocation function's entry or return: every register.
    Hit {
        pc: u64,
        regs: Box<[u64]>,
    },
    /// A load or store.
    Access(MemAccess),
    Map {
        base: u64,
        len: u64,
        exec: bool,
        offset: u64,
        path: Arc<str>,
    },
    Unmap {
        base: u64,
        len: u64,
    },
    Signal {
        handler: u64,
    },
    /// This thread created thread `child`, whose id word (cleared when it
    /// exits) is at `tid_word`.
    Clone {
        child: i32,
        tid_word: Option<u64>,
    },
    /// This thread forked process `child` (`fork`).
    Fork {
        child: i32,
    },
    /// An `execve` of this thread: `ok`, it did not come back (the image
    /// ends there, without a leak check, as under memcheck).
    Exec {
        ok: bool,
    },
    /// The next instruction, an allocation function's entry or return,
    /// took number `seq` of the process's order (`jitter::order_here`).
    Order {
        seq: u64,
    },
    /// The process ends (`exit_group`) with these argument registers.
    Exit {
        args: [u64; 6],
    },
    Block {
        pc: u64,
        lens: Box<[u8]>,
    },
    /// The first item of a chunk's trace (`segment`).
    Chunk(segment::Head),
    /// A segment starts: its folded loads and stores (`segment`).
    Zones(Arc<segment::Delta>),
    /// The segment ends.
    Flush,
}

/// A load or store, as the serial phase checks it.
#[derive(Debug, Clone, Copy)]
pub struct MemAccess {
    pub pc: u64,
    pub addr: u64,
    pub val: u64,
    /// The high 8 bytes of a 16-byte access.
    pub hi: u64,
    pub size: u8,
    pub store: bool,
    /// Its zone of the segment it is in (1-based; 0: none, see
    /// `segment`).
    pub zone: u8,
}
