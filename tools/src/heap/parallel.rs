// SPDX-License-Identifier: GPL-2.0-or-later
//! What the parallel phase of a heap run decides by itself, to hand the
//! serial phase (which runs one event at a time for a whole process) as
//! little as it needs: which instructions without registers can change a
//! thread's state ([`plain_wanted`]), and which pcs cannot be an
//! allocation function's site ([`SiteFilter`]), told without a lock.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bits of a [`SiteFilter`] (a power of two).
const FILTER_BITS: u64 = 1 << 18;

/// How many of the next instructions without registers the serial phase
/// needs (0 to `needed`), given `plain`: how many instructions without a
/// branch came since the last event of another kind but a load or store
/// (the chunk's head keeps the count, `segment::plain_pushed`; at a
/// chunk's start it is 0, the cautious answer). Such an instruction
/// changes the thread's state only when something before it left work
/// for the next instruction: a branch to land, a conditional return to
/// decide, a signal handler, the thread's start. Those are all branch
/// events or events of other kinds; loads and stores leave nothing of the
/// sort, nor does an instruction that is no branch (with registers or
/// not) once it is not a delay slot. So after the first such instruction
/// following any of those events (`needed` 1), or the first two where
/// branches have a delay slot and land after it (MIPS: `needed` 2), the
/// rest of a run of them would change nothing, and they are left out (the
/// bulk of a program's instructions). The count is kept as events are
/// pushed, not found by looking back through the trace: a look back past
/// a run's loads and stores, once per run, was 12 % of the parallel
/// phase's instructions.
#[inline(always)]
pub fn plain_wanted(plain: u8, needed: u8) -> usize {
    usize::from(needed.saturating_sub(plain))
}

/// A bit for every pc that may be an allocation function's site (the
/// plan's, at each bias a module ever had): most branch and block-start
/// events are none, and this tells them without the plan's lock and maps.
/// Bits are only ever set, so a stale or shared bit costs an exact look,
/// never a site missed.
pub struct SiteFilter(Box<[AtomicU64]>);

impl SiteFilter {
    pub fn new() -> SiteFilter {
        SiteFilter((0..FILTER_BITS / 64).map(|_| AtomicU64::new(0)).collect())
    }

    /// `pc`'s word and mask.
    fn bit(pc: u64) -> (usize, u64) {
        let h = pc.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - FILTER_BITS.trailing_zeros());
        ((h / 64) as usize, 1 << (h % 64))
    }

    /// `pc` may be a site from now on.
    pub fn allow(&self, pc: u64) {
        let (w, m) = Self::bit(pc);
        self.0[w].fetch_or(m, Ordering::Release);
    }

    /// False where `pc` is surely no site; true where it may be one.
    #[inline]
    pub fn may_be(&self, pc: u64) -> bool {
        let (w, m) = Self::bit(pc);
        self.0[w].load(Ordering::Acquire) & m != 0
    }
}

impl Default for SiteFilter {
    fn default() -> SiteFilter {
        SiteFilter::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_or_two_plain_instructions_after_anything_else_then_none() {
        assert_eq!(plain_wanted(0, 2), 2);
        assert_eq!(plain_wanted(1, 2), 1);
        assert_eq!(plain_wanted(2, 2), 0);
        assert_eq!(plain_wanted(200, 2), 0);
        assert_eq!(plain_wanted(0, 1), 1);
        assert_eq!(plain_wanted(1, 1), 0);
        assert_eq!(plain_wanted(2, 1), 0);
    }

    #[test]
    fn allowed_pcs_pass_the_filter() {
        let f = SiteFilter::new();
        let pcs = [
            0x401000_u64,
            0x7fff_f7a0_1234,
            0x1_0000,
            0xffff_ffff_ffff_fffc,
        ];
        assert!(pcs.iter().all(|&pc| !f.may_be(pc)));
        for pc in pcs {
            f.allow(pc);
        }
        assert!(pcs.iter().all(|&pc| f.may_be(pc)));
        let others = (0..1000u64).filter(|i| f.may_be(0x500000 + 4 * i)).count();
        assert!(others < 10, "{others} false positives of 1000");
    }
}
