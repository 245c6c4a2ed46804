// SPDX-License-Identifier: GPL-2.0-or-later
//! The event model: what a traced run did, whoever observed it. A
//! `cannoli-dump` trace ([`crate::dump`]) and QEMU's own plugins
//! ([`crate::plugins`]) are both read into these types, so that the tests
//! compare like with like. The doc comments name each type's line in the
//! dump format.

use std::fmt;

/// Load or store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemKind {
    Load,
    Store,
}

impl MemKind {
    /// The line's tag letter.
    pub fn letter(self) -> char {
        match self {
            MemKind::Load => 'L',
            MemKind::Store => 'S',
        }
    }
}

/// One memory access, as in `cannoli-dump`'s `L`/`S` lines and libmem's
/// `print-accesses` lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemAccess {
    /// The accessing instruction.
    pub pc: u64,
    pub addr: u64,
    /// In bytes: 1, 2, 4, 8 or 16.
    pub size: u8,
    pub kind: MemKind,
    /// 128 bits wide so that 16-byte (SIMD, 128-bit atomic) accesses are
    /// compared whole, not just their low half.
    pub value: u128,
}

/// An `R` or `B` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegsEvent {
    pub pc: u64,
    /// `B` lines: the "can end a block" flag; `None` for `R` lines.
    pub branch: Option<bool>,
    pub regs: Vec<u64>,
}

/// A `Y` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyscallEvent {
    pub num: u64,
    /// `?` where QEMU's side does not know the name.
    pub name: String,
    /// `None`: the syscall did not return (`-`).
    pub ret: Option<i64>,
    pub args: [u64; 6],
    /// Full length of the syscall's buffer.
    pub total: u64,
    /// The captured part of it, decoded.
    pub data: Vec<u8>,
}

/// An `M` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEvent {
    pub base: u64,
    pub len: u64,
    /// `rwx` with `-` for a missing right.
    pub prot: String,
    pub anon: bool,
    pub offset: u64,
    /// The file, decoded; empty for none (`-`).
    pub path: String,
}

impl MapEvent {
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr - self.base < self.len
    }
}

/// A `G` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalEvent {
    pub signo: i32,
    pub code: i32,
    pub fault_addr: u64,
    /// `None` for `-` (the default action).
    pub handler: Option<u64>,
}

/// a run too long to print them (`cannoli-dump --counts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub pid: i32,
    pub tid: i32,
    pub exec: u64,
    pub loads: u64,
    pub stores: u64,
}

/// A memory access attributed to the n-th executed instruction, without
/// size/value (what execlog shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemSlot {
    /// Index of the instruction in the exec sequence.
    pub insn: u64,
    pub kind: MemKind,
    pub addr: u64,
}

impl fmt::Display for MemSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "insn #{} {} {:x}",
            self.insn,
            self.kind.letter(),
            self.addr
        )
    }
}
