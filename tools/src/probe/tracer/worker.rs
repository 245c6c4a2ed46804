// SPDX-License-Identifier: GPL-2.0-or-later
//! What the workers write themselves: a pc probe's line, most of a run's
//! text, needs no call stack (see [`ThreadRegs::lines`]).

use super::super::out::{self, At, Hit, Regs};
use super::super::plan::{Plan, Site};
use super::{Item, ThreadRegs};

/// A worker writes the lines of a hooked pc whose every site is a pc probe
/// ([`ThreadRegs::lines`]), after the hits before it in this chunk.
pub(super) fn lines(
    plan: &Plan,
    l: &ThreadRegs,
    pc: u64,
    sites: &[Site],
    regs: &[u8],
    n: usize,
    trace: &mut Vec<Item>,
) {
    if !matches!(trace.last(), Some(Item::Lines { .. })) {
        trace.push(Item::Lines {
            // About a hundred lines of 32 registers.
            text: Vec::with_capacity(1 << 15),
            hits: 0,
            pcs: 0,
            values: Vec::with_capacity(n),
        });
    }
    let Some(Item::Lines {
        text,
        hits,
        pcs,
        values,
    }) = trace.last_mut()
    else {
        unreachable!("pushed above");
    };
    l.masked(regs, n, values);
    *pcs += 1;
    for s in sites {
        if let Site::Pc(p) = *s {
            l.pc_hit(plan, p, pc, values).text(text);
            *hits += 1;
        }
    }
}

/// A worker writes the part of a pc probe's line after what needs the
/// thread's serial state ([`ThreadRegs::split`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn tail(
    plan: &Plan,
    l: &ThreadRegs,
    split: out::Split,
    pc: u64,
    p: usize,
    regs: &[u8],
    n: usize,
    trace: &mut Vec<Item>,
) {
    let mut v = Vec::with_capacity(n);
    l.masked(regs, n, &mut v);
    let mut text = Vec::with_capacity(64 * n);
    l.pc_hit(plan, p, pc, &v)
        .pc_tail(split, &l.json_keys, &mut text);
    trace.push(Item::Tail(text.into()));
}

impl ThreadRegs {
    /// The first `n` registers of a `Register` event, each masked to the
    /// guest's word, in `values` (what it held before is gone).
    pub(super) fn masked(&self, regs: &[u8], n: usize, values: &mut Vec<u64>) {
        values.clear();
        values.extend(
            regs.chunks_exact(8)
                .take(n)
                .map(|w| u64::from_le_bytes(w.try_into().unwrap()) & self.mask),
        );
    }

    /// The hit of pc probe `p` at `pc` with these registers, as a worker
    /// formats it (the serial parts, instruction index and depth, unset).
    pub(super) fn pc_hit<'a>(
        &'a self,
        plan: &'a Plan,
        p: usize,
        pc: u64,
        values: &'a [u64],
    ) -> Hit<'a> {
        Hit {
            pid: self.pid,
            tid: self.tid,
            insn: None,
            at: At::Pc,
            probe: &plan.specs[p].text,
            function: None,
            shown: None,
            pc,
            args: Vec::new(),
            ret: None,
            unwound: false,
            insns: None,
            regs: Regs {
                names: &self.names,
                values,
                keys: &self.keys,
            },
            depth: 0,
        }
    }
}

pub(super) fn count(trace: &mut Vec<Item>, n: u64) {
    match trace.last_mut() {
        Some(Item::Count(c)) => *c += n,
        _ => trace.push(Item::Count(n)),
    }
}
