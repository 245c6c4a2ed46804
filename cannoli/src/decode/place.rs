//! Block placement: the block a stream is in, and how events move through
//! it (expanding the instructions they show ran).

use crate::blocks::Block;
use crate::Cannoli;

/// The block a stream is in the middle of: the instructions of `block`
/// from `next` on have not been expanded yet.
#[derive(Debug, Clone)]
pub(crate) struct OpenBlock {
    pub block: Block,
    pub next: usize,
}

/// The open block inside the decode loop: borrowed from the cache's slots
/// (or from the carried [`OpenBlock`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Open<'b> {
    pub block: &'b Block,
    pub next: usize,
}

impl Open<'_> {
    pub fn to_owned(self) -> OpenBlock {
        OpenBlock {
            block: self.block.clone(),
            next: self.next,
        }
    }
}

/// Calls `exec` for the instructions `from..to` of `b` that its mask
/// reports. Returns how many.
#[inline(always)]
pub(super) fn expand<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    b: &Block,
    from: usize,
    to: usize,
    trace: &mut Vec<T::Trace>,
) -> u64 {
    if !T::wants_runs(pid, tid, trace) {
        return b.reported(from, to);
    }
    let pcs = &b.pcs[from..to];
    if b.all() {
        T::exec_run(pid, tid, pcs, trace);
        pcs.len() as u64
    } else {
        expand_masked::<T>(pid, tid, b, from, to, trace)
    }
}

/// [`expand`] of a block whose mask has clear bits.
#[inline(never)]
fn expand_masked<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    b: &Block,
    from: usize,
    to: usize,
    trace: &mut Vec<T::Trace>,
) -> u64 {
    let Some(mask) = b.mask.as_deref() else {
        T::exec_run(pid, tid, &b.pcs[from..to], trace);
        return (to - from) as u64;
    };
    // Runs of reported instructions go out whole, found a mask word at a
    // time (a hooked block of a call-stack tool has a clear bit every few
    // instructions).
    let mut n = 0;
    let mut k = from;
    while k < to {
        let w = mask[k / 64] >> (k % 64);
        if w == 0 {
            k = (k / 64 + 1) * 64;
            continue;
        }
        let start = k + w.trailing_zeros() as usize;
        if start >= to {
            break;
        }
        // The run's end: its ones in this word, then whole words of ones.
        let mut end = start;
        loop {
            let ones = (mask[end / 64] >> (end % 64)).trailing_ones() as usize;
            end += ones;
            if ones == 0 || end % 64 != 0 || end >= to {
                break;
            }
        }
        let end = end.min(to);
        T::exec_run(pid, tid, &b.pcs[start..end], trace);
        n += (end - start) as u64;
        k = end;
    }
    n
}

/// The open block ran to its end: expands the rest.
#[inline(always)]
pub(super) fn close<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    o: Open<'_>,
    trace: &mut Vec<T::Trace>,
) -> u64 {
    expand::<T>(pid, tid, o.block, o.next, o.block.len(), trace)
}

/// Where the instruction at `pc` is in the unexpanded rest of `o`.
#[inline(always)]
fn find(o: &Open<'_>, pc: u64) -> Option<usize> {
    o.block.find(o.next, pc)
}

/// Places an event of the instruction at `pc` in the open block: expands
/// the instructions before it and, if reported, the instruction itself (an
/// event of the instruction just placed needs nothing). Returns false if
/// `pc` is not in the block: the block ran to its end (expanded) and is
/// closed.
#[inline(always)]
pub(super) fn place<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    o: &mut Open<'_>,
    pc: u64,
    trace: &mut Vec<T::Trace>,
    expanded: &mut u64,
) -> bool {
    if let Some(j) = find(o, pc) {
        // Through the instruction itself (if it is reported).
        *expanded += expand::<T>(pid, tid, o.block, o.next, j + 1, trace);
        o.next = j + 1;
        true
    } else if o.next > 0 && o.block.pcs[o.next - 1] == pc {
        true
    } else {
        *expanded += close::<T>(pid, tid, *o, trace);
        false
    }
}

/// A cut at `pc`: the block ran through the instruction at `pc` and no
/// further. A pc that is not in the rest of the block (nor the instruction
/// just placed) is a cut of another block, one with no run event (no
/// instruction of it is hooked): the open block ran to its end.
#[inline(never)]
pub(super) fn cut<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    o: Open<'_>,
    pc: u64,
    trace: &mut Vec<T::Trace>,
) -> u64 {
    let Some(j) = find(&o, pc) else {
        if o.next > 0 && o.block.pcs[o.next - 1] == pc {
            return 0;
        }
        return close::<T>(pid, tid, o, trace);
    };
    expand::<T>(pid, tid, o.block, o.next, j + 1, trace)
}
