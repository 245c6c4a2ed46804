// SPDX-License-Identifier: GPL-2.0-or-later
//! Helpers for the Tenet export's test (`tests/tenet.rs`): libexeclog's
//! `reg=*` log with its memory annotations kept, a parser of Tenet trace
//! lines (as Tenet's own reader splits them), and the trace Tenet's
//! convention gives from the ground truth.

use std::collections::BTreeMap;
use std::path::Path;

use crate::ground::{split_execlog_line, ExeclogItem};
use crate::lines::{for_lines, parse_hex};
use crate::model::{MemAccess, MemKind};

/// One libexeclog line: the instruction, the registers it changed (gdb's
/// names, values after it) and its accesses in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExeclogInsn {
    pub pc: u64,
    pub changes: Vec<(String, u64)>,
    pub mem: Vec<(MemKind, u64)>,
}

/// Whether a line of a log shared by several plugins is libmem's.
pub fn is_libmem_line(line: &str) -> bool {
    line.starts_with("0x") || line.starts_with("insn_vaddr,") || line.starts_with("mem accesses:")
}

/// libmem's accesses from a log it shares with libexeclog: its lines are
/// copied to `<log>.mem` and parsed there.
pub fn parse_shared_mem(log: &Path) -> Result<Vec<MemAccess>, String> {
    let mut text = String::new();
    for_lines(log, |_, line| {
        if is_libmem_line(line) {
            text.push_str(line);
            text.push('\n');
        }
        Ok(())
    })?;
    let mut p = log.as_os_str().to_owned();
    p.push(".mem");
    let p = std::path::PathBuf::from(p);
    std::fs::write(&p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    crate::plugins::parse_mem(&p)
}

/// Parses libexeclog's log with `reg=*` (`-d page` lines and libmem's, if
/// it shares the log, are skipped).
pub fn parse_execlog_insns(path: &Path) -> Result<Vec<ExeclogInsn>, String> {
    let mut out = Vec::new();
    for_lines(path, |_, line| {
        if line.is_empty() || crate::pages::is_page_log_line(line) || is_libmem_line(line) {
            return Ok(());
        }
        let l = split_execlog_line(line)?;
        let mut insn = ExeclogInsn {
            pc: l.pc,
            changes: Vec::new(),
            mem: Vec::new(),
        };
        for item in l.items {
            match item {
                ExeclogItem::Access(kind, addr) => insn.mem.push((kind, addr)),
                // Registers wider than 64 bits (vector registers) are of
                // no interest here.
                ExeclogItem::Reg(name, value) => {
                    if let Ok(v) = parse_hex(value) {
                        insn.changes.push((name.to_string(), v));
                    }
                }
            }
        }
        out.push(insn);
        Ok(())
    })?;
    Ok(out)
}

/// One line of a Tenet trace, as Tenet's reader splits it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenetLine {
    /// `name=value` items other than the pc and memory, in line order
    /// (names lowercased).
    pub regs: Vec<(String, u64)>,
    /// The pc item's value.
    pub pc: Option<u64>,
    /// `mr`/`mw`/`mrw` items: kind, address, bytes.
    pub mem: Vec<(String, u64, Vec<u8>)>,
}

/// Parses one Tenet line whose program counter is called `pc_name`.
/// Errors where Tenet's reader would: an item without `=`, a value that is
/// not hex, memory without `:` or with odd hex.
pub fn parse_tenet_line(line: &str, pc_name: &str) -> Result<TenetLine, String> {
    let hex = |s: &str| -> Result<u64, String> {
        let d = s
            .strip_prefix("0x")
            .or_else(|| s.strip_prefix("0X"))
            .unwrap_or(s);
        u64::from_str_radix(d, 16).map_err(|_| format!("not hex: {s:?}"))
    };
    let mut out = TenetLine::default();
    for item in line.split(',') {
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| format!("item without '=': {item:?}"))?;
        if value.contains('=') {
            return Err(format!("item with two '=': {item:?}"));
        }
        let name = name.to_ascii_lowercase();
        match name.as_str() {
            "mr" | "mw" | "mrw" => {
                let (a, d) = value
                    .split_once(':')
                    .ok_or_else(|| format!("memory without ':': {item:?}"))?;
                if d.len() % 2 != 0 || d.is_empty() {
                    return Err(format!("memory bytes of odd length: {item:?}"));
                }
                let bytes = (0..d.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&d[i..i + 2], 16))
                    .collect::<Result<Vec<u8>, _>>()
                    .map_err(|_| format!("memory bytes not hex: {item:?}"))?;
                out.mem.push((name, hex(a)?, bytes));
            }
            n if n == pc_name => {
                if out.pc.replace(hex(value)?).is_some() {
                    return Err(format!("two pcs: {line:?}"));
                }
            }
            _ => out.regs.push((name, hex(value)?)),
        }
    }
    Ok(out)
}

/// The memory items Tenet's convention expects for one instruction's
/// accesses: `(kind, addr, bytes)` with the bytes in memory order.
pub fn tenet_mem(m: &MemAccess, big_endian: bool) -> (String, u64, Vec<u8>) {
    let n = m.size as usize;
    let bytes = if n == 16 {
        m.value.to_le_bytes().to_vec()
    } else if big_endian {
        (m.value as u64).to_be_bytes()[8 - n..].to_vec()
    } else {
        (m.value as u64).to_le_bytes()[..n].to_vec()
    };
    let kind = match m.kind {
        MemKind::Load => "mr",
        MemKind::Store => "mw",
    };
    (kind.to_string(), m.addr, bytes)
}

/// Each instruction's libmem accesses: libexeclog says how many accesses
/// (kind, address) each executed instruction made, libmem gives them with
/// sizes and values in the same order. Errors where the two disagree.
pub fn accesses_by_insn(
    insns: &[ExeclogInsn],
    mem: &[MemAccess],
) -> Result<Vec<Vec<MemAccess>>, String> {
    let mut out = Vec::with_capacity(insns.len());
    let mut j = 0;
    for (i, insn) in insns.iter().enumerate() {
        let mut v = Vec::new();
        for &(kind, addr) in &insn.mem {
            let m = mem.get(j).ok_or_else(|| {
                format!(
                    "libmem ends at access {j}, libexeclog has more (insn #{i} at {:x})",
                    insn.pc
                )
            })?;
            if m.pc != insn.pc || m.kind != kind || m.addr != addr {
                return Err(format!(
                    "access {j}: libexeclog insn #{i} at {:x} {kind:?} {addr:x}, libmem {m}",
                    insn.pc
                ));
            }
            v.push(*m);
            j += 1;
        }
        out.push(v);
    }
    if j != mem.len() {
        return Err(format!("libmem has {} accesses, libexeclog {j}", mem.len()));
    }
    Ok(out)
}

/// Register states line by line from Tenet lines: the first line's
/// registers, then each line's changes applied.
pub fn tenet_states(lines: &[TenetLine]) -> Vec<BTreeMap<String, u64>> {
    let mut cur: BTreeMap<String, u64> = BTreeMap::new();
    lines
        .iter()
        .map(|l| {
            for (n, v) in &l.regs {
                cur.insert(n.clone(), *v);
            }
            cur.clone()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenet_lines() {
        let l = parse_tenet_line("RSP=0x10,rip=0x401000,mw=0x10:0a0b", "rip").unwrap();
        assert_eq!(l.regs, vec![("rsp".to_string(), 0x10)]);
        assert_eq!(l.pc, Some(0x401000));
        assert_eq!(l.mem, vec![("mw".to_string(), 0x10, vec![10, 11])]);
        assert!(parse_tenet_line("rip=0x1,", "rip").is_err());
        assert!(parse_tenet_line("rip=0x1,mr=0x2:abc", "rip").is_err());
        assert!(parse_tenet_line("", "rip").is_err());
    }
}
