// SPDX-License-Identifier: GPL-2.0-or-later
//! A Go goroutine's stack that the runtime moves ([`StackMove`]), as the
//! calls of `copystack`, its `stackalloc` and its `stackfree` tell it: the
//! open frames on the old stack take the same distance from the new
//! stack's high end. One owner for the arithmetic, whoever keeps the
//! frames: the process's goroutines ([`super::goroutine`]), or a thread
//! where Go keeps `g` out of reach of its registers (i386, where the
//! thread that grows a goroutine's stack is the one that runs it).

use std::ops::RangeInclusive;

use super::plan::StackMove;

/// A move under way: what `copystack` and the `stackalloc` it called said
/// so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Moving {
    /// The goroutine moved (`copystack`'s `gp`).
    gp: Option<u64>,
    /// The new stack's size.
    size: Option<u64>,
    /// The new stack's low end.
    lo: Option<u64>,
}

/// A move done: frames whose key lies in `old` move by `delta`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// The goroutine moved.
    pub gp: u64,
    /// The old stack, both ends.
    pub old: RangeInclusive<u64>,
    /// The new high end less the old one (wrapping).
    pub delta: u64,
}

impl Moving {
    /// `copystack(gp, newsize)`'s entry, with its arguments.
    pub fn copy(args: &[Option<u64>]) -> Moving {
        Moving {
            gp: arg(args, 0),
            size: arg(args, 1),
            lo: None,
        }
    }

    /// `stackalloc`'s return: the first word of its result, the new
    /// stack's low end.
    pub fn allocated(&mut self, lo: Option<u64>) {
        self.lo = lo;
    }

    /// `stackfree(stk)`'s entry, with the old stack's low and high ends as
    /// its two arguments: the move, where every part of it was read.
    pub fn freed(self, args: &[Option<u64>]) -> Option<Moved> {
        let (gp, size, lo) = (self.gp?, self.size?, self.lo?);
        let (old_lo, old_hi) = (arg(args, 0)?, arg(args, 1)?);
        Some(Moved {
            gp,
            old: old_lo..=old_hi,
            delta: lo.wrapping_add(size).wrapping_sub(old_hi),
        })
    }
}

impl Moved {
    /// `key` where its frame is now: moved if it was on the old stack.
    pub fn key(&self, key: u64) -> u64 {
        if self.old.contains(&key) {
            key.wrapping_add(self.delta)
        } else {
            key
        }
    }
}

/// What a call of one of [`StackMove`]'s functions does to a move under
/// way, in `moving`: `entry` gives the arguments of an entry, `value` the
/// result's first word at a return. The move, once `stackfree` ends it.
pub fn step(
    moving: &mut Option<Moving>,
    what: StackMove,
    entry: Option<&[Option<u64>]>,
    value: Option<u64>,
) -> Option<Moved> {
    match (what, entry) {
        (StackMove::Copy, Some(args)) => *moving = Some(Moving::copy(args)),
        (StackMove::Copy, None) => *moving = None,
        (StackMove::Alloc, None) => {
            if let Some(m) = moving {
                m.allocated(value);
            }
        }
        (StackMove::Free, Some(args)) => return moving.take()?.freed(args),
        _ => {}
    }
    None
}

fn arg(args: &[Option<u64>], i: usize) -> Option<u64> {
    args.get(i).copied().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_keeps_the_distance_from_the_high_end() {
        let mut m = None;
        assert_eq!(
            step(
                &mut m,
                StackMove::Copy,
                Some(&[Some(0xa0), Some(0x4000)]),
                None
            ),
            None
        );
        assert_eq!(step(&mut m, StackMove::Alloc, Some(&[]), None), None);
        assert_eq!(step(&mut m, StackMove::Alloc, None, Some(0x10000)), None);
        let moved = step(
            &mut m,
            StackMove::Free,
            Some(&[Some(0x4000), Some(0x6000)]),
            None,
        )
        .expect("a move");
        assert_eq!(moved.gp, 0xa0);
        assert_eq!(moved.key(0x5f00), 0x13f00, "0x100 below the high end");
        assert_eq!(moved.key(0x6000), 0x14000);
        assert_eq!(moved.key(0x7000), 0x7000, "not on the old stack");
        assert_eq!(m, None, "ended");
        // A move whose stackalloc was not seen is no move.
        step(
            &mut m,
            StackMove::Copy,
            Some(&[Some(0xa0), Some(0x4000)]),
            None,
        );
        assert_eq!(
            step(&mut m, StackMove::Free, Some(&[Some(1), Some(2)]), None),
            None
        );
        // A copystack that returned ended it.
        step(
            &mut m,
            StackMove::Copy,
            Some(&[Some(0xa0), Some(0x4000)]),
            None,
        );
        step(&mut m, StackMove::Copy, None, None);
        assert_eq!(m, None);
    }
}
