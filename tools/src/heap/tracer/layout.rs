// SPDX-License-Identifier: GPL-2.0-or-later
//! A thread's registers as the heap reads them: where the arguments, the
//! return value, the stack pointer and the return address are, and what
//! the guest's loads and branches ask of the serial phase.

use super::super::super::backtrace::state::Regs;

/// A thread's register layout.
pub struct Layout {
    pub(super) mask: u64,
    pub(super) args: Vec<Option<usize>>,
    pub(super) ret: Option<usize>,
    pub(super) sp: Option<usize>,
    pub(super) ra: Option<usize>,
    pub(super) bits64: bool,
    /// The bytes below the stack pointer the ABI lets a function use
    /// without moving it, which memcheck keeps valid (its
    /// `VG_STACK_REDZONE_SZB`): 128 on x86_64, 288 on ppc64, else none.
    pub(super) red_zone: u64,
    /// QEMU loads a vector of 16 bytes or more as 8-byte pieces, one
    /// access event each (ppc64's `lxvd2x`, arm's `vld1` of several d
    /// registers, as NEON `memchr` does around a string's start): each
    /// piece after the first follows the one before with the same pc, and
    /// they are checked as the one vector load memcheck sees. Not on guests
    /// where one instruction makes 8-byte loads that are not a vector
    /// (aarch64's `ldp`, x86's `rep lodsq`: those load 16 bytes as one).
    pub(super) split_vectors: bool,
    /// How many instructions without a branch after any other event the
    /// serial phase needs ([`plain_wanted`](super::parallel::plain_wanted)):
    /// 2 where branches have a delay slot (MIPS), else 1.
    pub(super) plain_needed: u8,
}

impl Layout {
    pub(super) fn read(&self, regs: &[u8], i: usize) -> Option<u64> {
        let w = regs.get(i * 8..i * 8 + 8)?;
        Some(u64::from_le_bytes(w.try_into().unwrap()) & self.mask)
    }

    pub(super) fn bt(&self, regs: &[u8]) -> Option<Regs> {
        Some(Regs {
            ra: self.ra.and_then(|i| self.read(regs, i)),
            sp: self.read(regs, self.sp?)?,
        })
    }
}
