// SPDX-License-Identifier: GPL-2.0-or-later
//! Register and block ground truth: libexeclog with registers, `-d cpu`,
//! `-d in_asm`, and the tests' hook library's log.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::lines::{for_lines, parse_hex};

/// libexeclog's log with `reg=...`.
#[derive(Debug, Default)]
pub struct ExeclogRegs {
    /// Executed pcs in order.
    pub pcs: Vec<u64>,
    /// Each pc's disassembly.
    pub disas: HashMap<u64, String>,
    /// Per line: the changes of the registers `index` knew, as (index, new
    /// value), i.e. the values after that instruction.
    pub changes: Vec<Vec<(usize, u64)>>,
    /// Names of changed registers that `index` did not know.
    pub other_regs: HashSet<String>,
}

impl ExeclogRegs {
    /// Moves the pcs and the register values inside regions that `r` moves
    /// (a plugin can move the guest's vDSO, see [`crate::pages`]); returns
    /// how many changed.
    pub fn relocate(&mut self, r: &crate::pages::Relocation) -> usize {
        let mut n = 0;
        for pc in self.pcs.iter_mut() {
            let new = r.addr(*pc);
            n += usize::from(new != *pc);
            *pc = new;
        }
        self.disas = self.disas.drain().map(|(pc, d)| (r.addr(pc), d)).collect();
        for ch in self.changes.iter_mut() {
            for (_, v) in ch.iter_mut() {
                let new = r.addr(*v);
                n += usize::from(new != *v);
                *v = new;
            }
        }
        n
    }
}

/// One line of libexeclog's log: `cpu, pc, opcode, "disassembly"`, then
/// its annotations.
pub struct ExeclogLine<'a> {
    pub pc: u64,
    pub disassembly: &'a str,
    pub items: Vec<ExeclogItem<'a>>,
}

/// An annotation of an execlog line.
pub enum ExeclogItem<'a> {
    /// `name -> value` (with `reg=`): the value as written (hex, or wider).
    Reg(&'a str, &'a str),
    /// `load, ADDR` / `store, ADDR`.
    Access(crate::model::MemKind, u64),
}

/// Splits one libexeclog line (shared by every parser of that log).
pub fn split_execlog_line(line: &str) -> Result<ExeclogLine<'_>, String> {
    let mut it = line.splitn(3, ", ");
    let _cpu = it.next().ok_or("no cpu")?;
    let pc = parse_hex(it.next().ok_or("no pc")?)?;
    let rest = it.next().ok_or("no opcode")?;
    let open = rest.find('"').ok_or("no disassembly")?;
    let close = rest
        .rfind('"')
        .filter(|&c| c > open)
        .ok_or("unterminated disassembly")?;
    let mut items = Vec::new();
    let mut t = &rest[close + 1..];
    while !t.is_empty() {
        t = t.strip_prefix(", ").ok_or("bad annotation")?;
        let end = t.find(", ").unwrap_or(t.len());
        let item = &t[..end];
        t = &t[end..];
        if item == "load" || item == "store" {
            // The address follows as its own item.
            t = t.strip_prefix(", ").ok_or("access without address")?;
            let end = t.find(", ").unwrap_or(t.len());
            let kind = if item == "load" {
                crate::model::MemKind::Load
            } else {
                crate::model::MemKind::Store
            };
            items.push(ExeclogItem::Access(kind, parse_hex(&t[..end])?));
            t = &t[end..];
            continue;
        }
        let (name, value) = item.split_once(" -> ").ok_or("bad annotation")?;
        items.push(ExeclogItem::Reg(name, value));
    }
    Ok(ExeclogLine {
        pc,
        disassembly: &rest[open + 1..close],
        items,
    })
}

/// Parses libexeclog's log, keeping the changes of the registers for which
/// `index(name)` gives an index.
pub fn parse_execlog_regs(
    path: &Path,
    index: impl Fn(&str) -> Option<usize>,
) -> Result<ExeclogRegs, String> {
    let mut log = ExeclogRegs::default();
    for_lines(path, |_, line| {
        if line.is_empty() || crate::pages::is_page_log_line(line) {
            return Ok(());
        }
        let l = split_execlog_line(line)?;
        log.pcs.push(l.pc);
        log.disas
            .entry(l.pc)
            .or_insert_with(|| l.disassembly.to_string());
        let mut changes = Vec::new();
        for item in l.items {
            let ExeclogItem::Reg(name, value) = item else {
                continue;
            };
            let value = parse_hex(value)?;
            match index(name) {
                Some(i) => changes.push((i, value)),
                None => {
                    if !log.other_regs.contains(name) {
                        log.other_regs.insert(name.to_string());
                    }
                }
            }
        }
        log.changes.push(changes);
        Ok(())
    })?;
    Ok(log)
}

/// Register states before each instruction: `first` before instruction 0,
/// then each state updated with the previous line's changes. (Line 0's
/// changes are relative to the registers at vCPU creation, but they are
/// absolute values, so applying them to the state before instruction 0
/// gives the state after it either way.)
pub fn states_from_changes(first: &[u64], changes: &[Vec<(usize, u64)>]) -> Vec<Vec<u64>> {
    let mut out = Vec::with_capacity(changes.len());
    let mut cur = first.to_vec();
    for ch in changes {
        out.push(cur.clone());
        for &(i, v) in ch {
            cur[i] = v;
        }
    }
    out
}

/// Index of an execlog (gdb) register name in cannoli's register layout of
/// `arch`: the layout's own names, and gdb's `fp` for RISC-V's `s0`.
pub fn layout_index(arch: &str, name: &str) -> Option<usize> {
    let names = cannoli::wire::reg_names(arch);
    let name = match (arch, name) {
        ("riscv64" | "riscv32", "fp") => "s0",
        _ => name,
    };
    names.iter().position(|n| *n == name)
}

// ---------------------------------------------------------------------------
// -d cpu, -d in_asm
// ---------------------------------------------------------------------------

/// One `-d cpu` record: the pc and the general purpose registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuState {
    pub pc: u64,
    pub regs: Vec<u64>,
}

/// Parses a `-d cpu` log of mips (`pc=0x...`, `GPRnn: name value ...`) or
/// riscv (` pc  <hex>`, ` xN/name <hex> ...`); other lines are ignored.
/// Every record must have all 32 general purpose registers.
pub fn parse_cpu_log(path: &Path) -> Result<Vec<CpuState>, String> {
    let mut out: Vec<CpuState> = Vec::new();
    let mut seen: Vec<bool> = Vec::new();
    let finish = |out: &mut Vec<CpuState>, seen: &[bool]| -> Result<(), String> {
        match out.last() {
            Some(s) if seen.iter().any(|x| !x) => Err(format!(
                "the record for pc {:#x} lacks registers {:?}",
                s.pc,
                seen.iter()
                    .enumerate()
                    .filter(|(_, x)| !**x)
                    .map(|(i, _)| i)
                    .collect::<Vec<_>>()
            )),
            _ => Ok(()),
        }
    };
    for_lines(path, |_, line| {
        let t = line.trim_start();
        let pc = if let Some(r) = t.strip_prefix("pc=") {
            Some(parse_hex(r.split(' ').next().unwrap_or(""))?)
        } else if let Some(r) = t.strip_prefix("pc ") {
            Some(parse_hex(r.trim())?)
        } else {
            None
        };
        if let Some(pc) = pc {
            finish(&mut out, &seen)?;
            out.push(CpuState {
                pc,
                regs: vec![0; 32],
            });
            seen = vec![false; 32];
            return Ok(());
        }
        let Some(cur) = out.last_mut() else {
            return Ok(());
        };
        let mut set = |i: usize, v: &str| -> Result<(), String> {
            if i >= 32 {
                return Err(format!("register index {i}"));
            }
            cur.regs[i] = parse_hex(v)?;
            seen[i] = true;
            Ok(())
        };
        if let Some(r) = t.strip_prefix("GPR") {
            // mips: GPRnn: name value name value ...
            let (base, pairs) = r.split_once(':').ok_or("bad GPR line")?;
            let base: usize = base.parse().map_err(|_| "bad GPR index")?;
            let toks: Vec<&str> = pairs.split_whitespace().collect();
            for (j, p) in toks.chunks(2).enumerate() {
                if p.len() != 2 {
                    return Err("odd GPR line".into());
                }
                set(base + j, p[1])?;
            }
        } else if t.starts_with("x0/") || (t.starts_with('x') && t.contains('/')) {
            // riscv: xN/name value ...
            let toks: Vec<&str> = t.split_whitespace().collect();
            for p in toks.chunks(2) {
                let Some(n) = p[0].strip_prefix('x').and_then(|r| r.split('/').next()) else {
                    continue;
                };
                let Ok(i) = n.parse::<usize>() else { continue };
                set(i, p.get(1).ok_or("register without value")?)?;
            }
        }
        Ok(())
    })?;
    finish(&mut out, &seen)?;
    Ok(out)
}

/// Parses a `-d in_asm` log into translation blocks (their instructions'
/// pcs), in translation order.
pub fn parse_in_asm(path: &Path) -> Result<Vec<Vec<u64>>, String> {
    let mut tbs: Vec<Vec<u64>> = Vec::new();
    let mut open = false;
    for_lines(path, |_, line| {
        if line.starts_with("IN:") {
            tbs.push(Vec::new());
            open = true;
        } else if line.trim().is_empty() || line.starts_with("---") {
            open = false;
        } else if open && line.starts_with("0x") {
            let (pc, _) = line.split_once(':').ok_or("no ':' after the pc")?;
            tbs.last_mut().unwrap().push(parse_hex(pc)?);
        }
        Ok(())
    })?;
    if let Some(i) = tbs.iter().position(|t| t.is_empty()) {
        return Err(format!(
            "{}: translation block #{i} has no instructions",
            path.display()
        ));
    }
    Ok(tbs)
}

/// Parses the hook library's `CANNOLI_TEST_LOG`: one `(pc, branch)` per
/// `hook_inst` call.
pub fn parse_hook_log(path: &Path) -> Result<Vec<(u64, bool)>, String> {
    let mut out = Vec::new();
    for_lines(path, |_, line| {
        let (pc, b) = line.split_once(' ').ok_or("no flag")?;
        let b = match b {
            "0" => false,
            "1" => true,
            _ => return Err("bad flag".into()),
        };
        out.push((parse_hex(pc)?, b));
        Ok(())
    })?;
    Ok(out)
}

/// For a `Once` trace: how many times each pc must be reported, from the
/// translation blocks (in translation order) and the executed pc sequence.
///
/// A pc is reported the first time each of its translations executes it.
/// The pc sequence is replayed against the blocks: execution continues in
/// the current block while the next pc is the block's next instruction;
/// otherwise it enters the block that starts at that pc, which is the next
/// not yet used block of the log if no block started there before (QEMU
/// translates a block when it first needs it). Fails if the log cannot be
/// replayed that way (a block translated for another reason, e.g. an
/// invalidation), naming where.
pub fn once_expectation(tbs: &[Vec<u64>], pcs: &[u64]) -> Result<HashMap<u64, u32>, String> {
    let mut by_start: HashMap<u64, usize> = HashMap::new();
    let mut next_new = 0usize;
    let mut executed: HashSet<(usize, usize)> = HashSet::new();
    let mut cur: Option<(usize, usize)> = None;
    for (k, &pc) in pcs.iter().enumerate() {
        let next = match cur {
            Some((t, p)) if tbs[t].get(p + 1) == Some(&pc) => (t, p + 1),
            _ => {
                let t = match by_start.get(&pc) {
                    Some(&t) => t,
                    None => {
                        if tbs.get(next_new).and_then(|b| b.first()) != Some(&pc) {
                            return Err(format!(
                                "instruction #{k} at {pc:#x} enters a block never translated before, \
                                 but the next new block of the translation log is #{next_new} at {}",
                                tbs.get(next_new)
                                    .map(|b| format!("{:#x}", b[0]))
                                    .unwrap_or_else(|| "<none>".into())
                            ));
                        }
                        by_start.insert(pc, next_new);
                        next_new += 1;
                        next_new - 1
                    }
                };
                (t, 0)
            }
        };
        executed.insert(next);
        cur = Some(next);
    }
    if next_new != tbs.len() {
        return Err(format!(
            "{} of {} translated blocks were never entered in the replay (first unused: #{next_new} at {:#x})",
            tbs.len() - next_new,
            tbs.len(),
            tbs[next_new][0]
        ));
    }
    let mut counts = HashMap::new();
    for (t, p) in executed {
        *counts.entry(tbs[t][p]).or_insert(0) += 1;
    }
    Ok(counts)
}

/// True if `sub` is a subsequence of `seq`.
pub fn is_subsequence(sub: &[u64], seq: &[u64]) -> Result<(), String> {
    let mut it = seq.iter().enumerate();
    for (i, x) in sub.iter().enumerate() {
        if !it.any(|(_, y)| y == x) {
            return Err(format!(
                "entry #{i} ({x:#x}) of {} cannot be matched in order within {} entries",
                sub.len(),
                seq.len()
            ));
        }
    }
    Ok(())
}
