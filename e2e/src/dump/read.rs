// SPDX-License-Identifier: GPL-2.0-or-later
//! Reading whole dump files: [`parse_dump`], [`parse_dump_events`] and
//! [`signals_in_context`].

use std::path::Path;

use super::parse::{parse_hex, Line};
use crate::lines::for_each_line;
use crate::model::{Counts, MapEvent, MemAccess, MemSlot, RegsEvent, SignalEvent, SyscallEvent};

/// A parsed dump: the instructions and accesses, the rest as lines.
#[derive(Debug, Default)]
pub struct DumpTrace {
    /// `X` lines in order.
    pub pcs: Vec<u64>,
    /// `L`/`S` lines in order.
    pub mem: Vec<MemAccess>,
    /// For each entry of `mem`, the index in `pcs` of the last `X` before it
    /// (`u64::MAX` if there was none).
    pub mem_insn: Vec<u64>,
    /// Every other line (`R`, `B`, `Y`, `M`, `U`, `P`, `G`, `C`), whole, in
    /// order (each was parsed, so it is well-formed).
    pub other: Vec<String>,
}

impl DumpTrace {
    /// The accesses as execlog shows them: instruction index, kind, address.
    pub fn mem_slots(&self) -> Vec<MemSlot> {
        self.mem
            .iter()
            .zip(&self.mem_insn)
            .map(|(m, &insn)| MemSlot {
                insn,
                kind: m.kind,
                addr: m.addr,
            })
            .collect()
    }

    /// Checks that every access's pc is the pc of the instruction executed
    /// last before it.
    pub fn check_attribution(&self) -> Result<(), String> {
        for (i, (m, &insn)) in self.mem.iter().zip(&self.mem_insn).enumerate() {
            if insn == u64::MAX {
                return Err(format!(
                    "memory access #{i} ({m}) comes before any executed instruction"
                ));
            }
            let pc = self.pcs[insn as usize];
            if pc != m.pc {
                return Err(format!(
                    "memory access #{i} ({m}) follows instruction #{insn} at pc {pc:x}, but names pc {:x}",
                    m.pc
                ));
            }
        }
        Ok(())
    }

    fn rare<T>(&self, tag: &str, parse: fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
        self.other
            .iter()
            .filter(|l| l.starts_with(tag))
            .map(|l| parse(l))
            .collect()
    }

    /// The `Y` lines, parsed.
    pub fn syscalls(&self) -> Result<Vec<SyscallEvent>, String> {
        self.rare("Y ", SyscallEvent::parse)
    }

    /// The `G` lines, parsed.
    pub fn signals(&self) -> Result<Vec<SignalEvent>, String> {
        self.rare("G ", SignalEvent::parse)
    }

    /// The `M` lines, parsed.
    pub fn maps(&self) -> Result<Vec<MapEvent>, String> {
        self.rare("M ", MapEvent::parse)
    }

    /// The `C` lines, parsed.
    pub fn counts(&self) -> Result<Vec<Counts>, String> {
        self.rare("C ", Counts::parse)
    }
}

/// Parses a dump file; every line must be well-formed.
pub fn parse_dump(path: &Path) -> Result<DumpTrace, String> {
    let mut d = DumpTrace::default();
    for_each_line(path, |_, line| {
        match line.as_bytes().first() {
            // The hot cases without building a `Line`.
            Some(b'X') => {
                let pc = line.strip_prefix("X ").ok_or("bad X line")?;
                d.pcs.push(parse_hex(pc)?);
            }
            Some(b'L' | b'S') => {
                d.mem.push(MemAccess::parse(line)?);
                d.mem_insn.push((d.pcs.len() as u64).wrapping_sub(1));
            }
            _ => {
                Line::parse(line)?;
                d.other.push(line.to_string());
            }
        }
        Ok(())
    })?;
    Ok(d)
}

/// The parts of a dump the hook and syscall tests look at: instruction
/// lines of every kind and where the rare events fall between them.
#[derive(Debug, Default)]
pub struct DumpEvents {
    /// `X` pcs in order.
    pub pcs: Vec<u64>,
    /// `R` and `B` lines in order.
    pub regs: Vec<RegsEvent>,
    /// `Y` lines in order.
    pub syscalls: Vec<SyscallEvent>,
    /// Every line's kind letter, in order (`X`, `L`, `S`, `R`, `B`, `Y`,
    /// `M`, `U`, `P`, `G`).
    pub kinds: Vec<u8>,
    /// The pcs of the `X`, `R` and `B` lines, in order.
    pub insn_pcs: Vec<u64>,
    /// For each `Y` line, the index in `insn_pcs` of the last instruction
    /// line before it (`usize::MAX` if none).
    pub syscall_after: Vec<usize>,
    /// For each `Y` line, the index in `insn_pcs` of the first instruction
    /// line after it (`usize::MAX` if none).
    pub syscall_before: Vec<usize>,
    /// `M`, `U` and `P` lines, whole, each with the number of `Y` lines
    /// before it.
    pub maps: Vec<(usize, String)>,
}

/// Parses a dump file into [`DumpEvents`]; every line must be well-formed.
pub fn parse_dump_events(path: &Path) -> Result<DumpEvents, String> {
    let mut d = DumpEvents::default();
    let mut pending_before = Vec::new();
    for_each_line(path, |_, line| {
        let k = *line.as_bytes().first().ok_or("empty line")?;
        d.kinds.push(k);
        let insn_pc = match Line::parse(line)? {
            Line::Exec(pc) => {
                d.pcs.push(pc);
                Some(pc)
            }
            Line::Regs(r) => {
                let pc = r.pc;
                d.regs.push(r);
                Some(pc)
            }
            Line::Syscall(y) => {
                d.syscalls.push(y);
                d.syscall_after.push(d.insn_pcs.len().wrapping_sub(1));
                d.syscall_before.push(usize::MAX);
                pending_before.push(d.syscalls.len() - 1);
                None
            }
            Line::Map(_) | Line::Unmap { .. } | Line::Protect { .. } => {
                d.maps.push((d.syscalls.len(), line.to_string()));
                None
            }
            Line::Mem(_) | Line::Signal(_) | Line::Counts(_) => None,
        };
        if let Some(pc) = insn_pc {
            d.insn_pcs.push(pc);
            for i in pending_before.drain(..) {
                d.syscall_before[i] = d.insn_pcs.len() - 1;
            }
        }
        Ok(())
    })?;
    Ok(d)
}

/// A `G` line with the pcs of the `X` lines right before and right after
/// it (`None` at either end).
pub type SignalInContext = (SignalEvent, Option<u64>, Option<u64>);

/// Each `G` line of a dump file with the pcs of the `X` lines right before
/// and right after it.
pub fn signals_in_context(dump: &Path) -> Result<Vec<SignalInContext>, String> {
    let mut out: Vec<SignalInContext> = Vec::new();
    let mut last_x = None;
    let mut waiting: Vec<usize> = Vec::new();
    for_each_line(dump, |_, line| {
        match Line::parse(line)? {
            Line::Exec(pc) => {
                for i in waiting.drain(..) {
                    out[i].2 = Some(pc);
                }
                last_x = Some(pc);
            }
            Line::Signal(g) => {
                waiting.push(out.len());
                out.push((g, last_x, None));
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok(out)
}
