// SPDX-License-Identifier: GPL-2.0-or-later
//! Parsers of the ground truth: the logs of QEMU's own plugins `libinsn`
//! (instruction counts), `libexeclog` (executed pcs and their accesses'
//! addresses) and `libmem` (every access with its value). Each skips the
//! lines of QEMU's `-d page` output (see [`crate::pages`]) that the same log
//! may hold.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use crate::lines::{dec, for_each_line, parse_hex, parse_hex128};
pub use crate::model::MemSlot;
use crate::model::{MemAccess, MemKind};
use crate::pages::is_page_log_line;

/// Output of `libinsn`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsnCounts {
    /// `cpu N insns: X` lines, by N.
    pub per_cpu: Vec<(u32, u64)>,
    /// `total insns: X`.
    pub total: u64,
}

/// libinsn's lines, one at a time.
#[derive(Default)]
struct InsnLines {
    per_cpu: Vec<(u32, u64)>,
    total: Option<u64>,
}

impl InsnLines {
    fn line(&mut self, line: &str) -> Result<(), String> {
        if let Some(rest) = line.strip_prefix("total insns:") {
            if self.total.is_some() {
                return Err("second `total insns` line".into());
            }
            self.total = Some(dec(rest)?);
        } else if let Some(rest) = line.strip_prefix("cpu ") {
            let (cpu, count) = rest.split_once(" insns:").ok_or("unexpected line")?;
            self.per_cpu.push((dec(cpu)?, dec(count)?));
        } else if !line.trim().is_empty() {
            return Err("unexpected line".into());
        }
        Ok(())
    }

    fn finish(self, path: &Path) -> Result<InsnCounts, String> {
        let total = self
            .total
            .ok_or_else(|| format!("{}: no `total insns:` line", path.display()))?;
        let sum: u64 = self.per_cpu.iter().map(|(_, n)| n).sum();
        if !self.per_cpu.is_empty() && sum != total {
            return Err(format!(
                "{}: per-cpu counts add up to {sum}, total says {total}",
                path.display()
            ));
        }
        Ok(InsnCounts {
            per_cpu: self.per_cpu,
            total,
        })
    }
}

/// Parses libinsn's log (`cpu N insns: X` lines then `total insns: X`).
pub fn parse_insn(path: &Path) -> Result<InsnCounts, String> {
    let mut p = InsnLines::default();
    for_each_line(path, |_, line| {
        if is_page_log_line(line) {
            return Ok(());
        }
        p.line(line)
    })?;
    p.finish(path)
}

/// Output of `libexeclog`: the executed pcs in order, and the memory
/// accesses each instruction made (kind and address only).
#[derive(Debug, Default)]
pub struct Execlog {
    pub pcs: Vec<u64>,
    pub mem: Vec<MemSlot>,
    /// vCPU indexes seen.
    pub cpus: BTreeSet<u32>,
}

impl Execlog {
    /// Moves the pcs and access addresses inside regions that `r` moves
    /// (see [`crate::pages`]); returns how many changed.
    pub fn relocate(&mut self, r: &crate::pages::Relocation) -> usize {
        let mut n = 0;
        for a in self
            .pcs
            .iter_mut()
            .chain(self.mem.iter_mut().map(|s| &mut s.addr))
        {
            let new = r.addr(*a);
            n += usize::from(new != *a);
            *a = new;
        }
        n
    }
}

/// Parses libexeclog's log. Each line is
/// `<cpu>, 0x<pc>, 0x<opcode>, "<disas>"` followed by zero or more
/// `, load, 0x<addr>` / `, store, 0x<addr>`. Lines are printed when the
/// *next* instruction starts; the last one is printed by the plugin's exit
/// callback. An empty line (a vCPU that never ran) is skipped.
pub fn parse_execlog(path: &Path) -> Result<Execlog, String> {
    let mut log = Execlog::default();
    for_each_line(path, |_, line| {
        if line.is_empty() || is_page_log_line(line) {
            return Ok(());
        }
        log.line(line)
    })?;
    Ok(log)
}

impl Execlog {
    /// Adds one of libexeclog's lines.
    fn line(&mut self, line: &str) -> Result<(), String> {
        let mut it = line.splitn(3, ", ");
        let cpu = it.next().ok_or("no cpu")?;
        let pc = it.next().ok_or("no pc")?;
        let rest = it.next().ok_or("no opcode")?;
        self.cpus.insert(dec(cpu)?);
        if !pc.starts_with("0x") {
            return Err("pc without 0x".into());
        }
        self.pcs.push(parse_hex(pc)?);
        let insn = self.pcs.len() as u64 - 1;
        // Memory annotations follow the closing quote of the disassembly.
        let open = rest.find('"').ok_or("no disassembly")?;
        let close = rest
            .rfind('"')
            .filter(|&c| c > open)
            .ok_or("unterminated disassembly")?;
        let mut tail = &rest[close + 1..];
        while !tail.is_empty() {
            let t = tail.strip_prefix(", ").ok_or("bad memory annotation")?;
            let (kind, t) = if let Some(t) = t.strip_prefix("load, ") {
                (MemKind::Load, t)
            } else if let Some(t) = t.strip_prefix("store, ") {
                (MemKind::Store, t)
            } else {
                return Err("bad memory annotation".into());
            };
            let end = t.find(", ").unwrap_or(t.len());
            let addr = parse_hex(&t[..end])?;
            self.mem.push(MemSlot { insn, kind, addr });
            tail = &t[end..];
        }
        Ok(())
    }
}

fn size_from_bits(bits: u32) -> Result<u8, String> {
    match bits {
        8 => Ok(1),
        16 => Ok(2),
        32 => Ok(4),
        64 => Ok(8),
        128 => Ok(16),
        _ => Err(format!("unexpected access size {bits} bits")),
    }
}

/// Parses libmem's `print-accesses=true` log: a header line
/// `insn_vaddr,insn_symbol,mem_vaddr,mem_hwaddr,access_size,access_type,mem_value`
/// then `0x<pc>,<symbol>,0x<vaddr>,0x<hwaddr>,<bits>,<load|store>,0x<value>`
/// per access (the symbol may be empty; hwaddr is 0 in user mode). A
/// 128-bit access's value is printed as 32 hex digits, high half first.
pub fn parse_mem(path: &Path) -> Result<Vec<MemAccess>, String> {
    let mut p = MemLines::default();
    for_each_line(path, |_, line| {
        if line.is_empty() || is_page_log_line(line) {
            return Ok(());
        }
        p.line(line)
    })?;
    Ok(p.out)
}

/// libmem's lines, one at a time.
#[derive(Default)]
struct MemLines {
    out: Vec<MemAccess>,
    header: bool,
    /// `mem accesses: N` (with `inline=true` or `callback=true`).
    total: Option<u64>,
}

impl MemLines {
    fn line(&mut self, line: &str) -> Result<(), String> {
        if line.starts_with("insn_vaddr,") {
            return if !self.header && self.out.is_empty() {
                self.header = true;
                Ok(())
            } else {
                Err("header line not first".into())
            };
        }
        if let Some(n) = line.strip_prefix("mem accesses:") {
            if self.total.replace(dec(n)?).is_some() {
                return Err("second `mem accesses` line".into());
            }
            return Ok(());
        }
        let (pc, rest) = line.split_once(',').ok_or("unexpected line")?;
        // The symbol could in principle contain commas: take the last five
        // fields from the right.
        let mut f = rest.rsplitn(6, ',');
        let value = f.next().ok_or("no value")?;
        let kind = f.next().ok_or("no type")?;
        let bits = f.next().ok_or("no size")?;
        let _hwaddr = f.next().ok_or("no hwaddr")?;
        let vaddr = f.next().ok_or("no vaddr")?;
        let _sym = f.next().ok_or("no symbol")?;
        let kind = match kind {
            "load" => MemKind::Load,
            "store" => MemKind::Store,
            _ => return Err(format!("bad access type {kind:?}")),
        };
        self.out.push(MemAccess {
            pc: parse_hex(pc)?,
            addr: parse_hex(vaddr)?,
            size: size_from_bits(dec(bits)?)?,
            kind,
            value: parse_hex128(value)?,
        });
        Ok(())
    }
}

/// What one run with several plugins in one log gave ([`parse_combined`]).
#[derive(Debug)]
pub struct Combined {
    pub insn: InsnCounts,
    /// Empty if libexeclog was not loaded.
    pub execlog: Execlog,
    /// Empty unless libmem had `print-accesses=true`.
    pub mem: Vec<MemAccess>,
    /// libmem's `mem accesses: N` (with `inline=true`), if printed.
    pub mem_total: Option<u64>,
}

/// The ground truths from one run that loaded libinsn with libexeclog
/// and/or libmem into one log: each line goes to its plugin's parser by its
/// shape (libmem's start with `0x`, `mem accesses:` or are its header,
/// libinsn's with `cpu ` or `total insns:`, the rest are libexeclog's).
pub fn parse_combined(path: &Path) -> Result<Combined, String> {
    let (mut insn, mut execlog, mut mem) = (
        InsnLines::default(),
        Execlog::default(),
        MemLines::default(),
    );
    for_each_line(path, |_, line| {
        if line.is_empty() || is_page_log_line(line) {
            Ok(())
        } else if line.starts_with("0x")
            || line.starts_with("insn_vaddr,")
            || line.starts_with("mem accesses:")
        {
            mem.line(line)
        } else if line.starts_with("cpu ") || line.starts_with("total insns:") {
            insn.line(line)
        } else {
            execlog.line(line)
        }
    })?;
    Ok(Combined {
        insn: insn.finish(path)?,
        execlog,
        mem: mem.out,
        mem_total: mem.total,
    })
}

/// libexeclog's log split by vCPU: the executed pcs of each vCPU, in order.
///
/// libexeclog prints each instruction's record and its newline with two
/// separate `qemu_plugin_outs` calls. Each call is written whole, but with
/// several vCPUs running at once another vCPU's record can come in between:
/// `R1 R2 \n \n` gives the line `R1R2` and an empty line. So the log is
/// parsed as a stream of records, ignoring the newlines: a record is
/// `<cpu>, 0x<pc>, 0x<opcode>, "<disas>"` then zero or more
/// `, load, 0x<addr>` / `, store, 0x<addr>`. An address printed right before
/// another record's cpu number runs into it (`0x0049a0183, 0x...`): a run of
/// hex digits followed by `, 0x` is an address and then a cpu number. With
/// fewer than 10 vCPUs that number is the run's last digit; with more the
/// split would be ambiguous, which is an error (as is an address of fewer
/// than 8 digits, the plugin's minimum width).
pub fn parse_execlog_per_cpu(path: &Path) -> Result<BTreeMap<u32, Vec<u64>>, String> {
    let text = fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text = String::from_utf8(text).map_err(|_| format!("{}: not UTF-8", path.display()))?;
    let mut per_cpu: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut torn_splits = 0usize;
    let b = text.as_bytes();
    let mut p = 0usize;
    let err = |p: usize, what: &str| {
        let from = p.saturating_sub(60);
        let to = (p + 60).min(b.len());
        format!(
            "{}: byte {p}: {what}: ...{:?}...",
            path.display(),
            String::from_utf8_lossy(&b[from..to])
        )
    };
    // Length of the record start `<dec>, 0x<hex>, 0x<hex>, "` at q, if any.
    let record_start = |q: usize| -> bool {
        let mut i = q;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i > q && b[i..].starts_with(b", 0x")
    };
    let hex_run = |q: usize| -> usize {
        let mut i = q;
        while i < b.len() && b[i].is_ascii_hexdigit() {
            i += 1;
        }
        i - q
    };
    // The whole line starting at q, if it is a `-d page` line (a page dump
    // is written whole, but can come between a record and its newline).
    let page_line_end = |q: usize| -> Option<usize> {
        let end = b[q..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(b.len(), |e| q + e);
        is_page_log_line(&text[q..end]).then_some(end)
    };
    loop {
        while p < b.len() && b[p] == b'\n' {
            p += 1;
        }
        if p >= b.len() {
            break;
        }
        if let Some(end) = page_line_end(p) {
            p = end;
            continue;
        }
        // cpu
        let s = p;
        while p < b.len() && b[p].is_ascii_digit() {
            p += 1;
        }
        if p == s {
            return Err(err(p, "expected a cpu number"));
        }
        let cpu: u32 = text[s..p].parse().map_err(|_| err(s, "bad cpu number"))?;
        // pc
        if !b[p..].starts_with(b", 0x") {
            return Err(err(p, "expected `, 0x<pc>`"));
        }
        p += 4;
        let n = hex_run(p);
        if n == 0 || n > 16 {
            return Err(err(p, "bad pc"));
        }
        let pc = u64::from_str_radix(&text[p..p + n], 16).map_err(|_| err(p, "bad pc"))?;
        p += n;
        // opcode
        if !b[p..].starts_with(b", 0x") {
            return Err(err(p, "expected `, 0x<opcode>`"));
        }
        p += 4;
        p += hex_run(p);
        // disassembly
        if !b[p..].starts_with(b", \"") {
            return Err(err(p, "expected `, \"<disassembly>\"`"));
        }
        p += 3;
        let close = b[p..]
            .iter()
            .position(|&c| c == b'"' || c == b'\n')
            .ok_or_else(|| err(p, "unterminated disassembly"))?;
        if b[p + close] != b'"' {
            return Err(err(p, "disassembly with a newline"));
        }
        p += close + 1;
        // memory annotations
        loop {
            let rest = &b[p..];
            let skip = if rest.starts_with(b", load, 0x") {
                10
            } else if rest.starts_with(b", store, 0x") {
                11
            } else {
                break;
            };
            p += skip;
            let n = hex_run(p);
            let torn = n > 0 && b[p + n..].starts_with(b", 0x");
            let len = if torn {
                if !b[p + n - 1].is_ascii_digit() {
                    return Err(err(
                        p,
                        "an address runs into something that is not a cpu number",
                    ));
                }
                torn_splits += 1;
                n - 1
            } else {
                n
            };
            if len < 8 {
                return Err(err(p, "memory address with fewer than 8 digits"));
            }
            if len > 16 {
                return Err(err(p, "memory address of more than 64 bits"));
            }
            p += len;
        }
        per_cpu.entry(cpu).or_default().push(pc);
        // What follows: a newline, the end, another record (torn line) or a
        // page dump.
        if p < b.len() && b[p] != b'\n' && !record_start(p) && page_line_end(p).is_none() {
            return Err(err(p, "unexpected text after a record"));
        }
    }
    if torn_splits > 0 && per_cpu.keys().any(|&c| c >= 10) {
        return Err(format!(
            "{}: {torn_splits} addresses run into the next record's cpu number, and with \
             vCPUs numbered 10 and above their split is ambiguous",
            path.display()
        ));
    }
    Ok(per_cpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::RunDir;
    use std::path::PathBuf;

    fn tmpfile(name: &str, content: &str) -> (RunDir, PathBuf) {
        let d = RunDir::new();
        let p = d.file(name);
        fs::write(&p, content).unwrap();
        (d, p)
    }

    #[test]
    fn insn_log() {
        let (_d, p) = tmpfile(
            "insn.log",
            "cpu 0 insns: 120\ncpu 1 insns: 3\ntotal insns: 123\n",
        );
        let c = parse_insn(&p).unwrap();
        assert_eq!(c.total, 123);
        assert_eq!(c.per_cpu, vec![(0, 120), (1, 3)]);
        let (_d, p) = tmpfile("bad.log", "cpu 0 insns: 120\ntotal insns: 123\n");
        assert!(parse_insn(&p).is_err());
    }

    #[test]
    fn execlog_lines() {
        let (_d, p) = tmpfile(
            "e.log",
            "0, 0x400630, 0x3c1c0005, \"lui gp, 5\"\n\
             0, 0x400634, 0x8f998018, \"lw t9, -0x7fe8(gp)\", load, 0x0049a018\n\
             0, 0x1000, 0x0, \"sw a, b, \"c\"\", store, 0x7fff0000, load, 0x10\n\n",
        );
        let e = parse_execlog(&p).unwrap();
        assert_eq!(e.pcs, vec![0x400630, 0x400634, 0x1000]);
        assert_eq!(
            e.mem,
            vec![
                MemSlot {
                    insn: 1,
                    kind: MemKind::Load,
                    addr: 0x49a018
                },
                MemSlot {
                    insn: 2,
                    kind: MemKind::Store,
                    addr: 0x7fff0000
                },
                MemSlot {
                    insn: 2,
                    kind: MemKind::Load,
                    addr: 0x10
                },
            ]
        );
    }

    #[test]
    fn mem_lines() {
        let (_d, p) = tmpfile(
            "m.log",
            "insn_vaddr,insn_symbol,mem_vaddr,mem_hwaddr,access_size,access_type,mem_value\n\
             0x400634,_start,0x49a018,0x0,32,load,0x0040a000\n\
             0x10,,0x7ffe,0x0,8,store,0xff\n\
             0x12,a,b,0x8,0x0,64,store,0x0000000000000001\n",
        );
        let m = parse_mem(&p).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(
            m[0],
            MemAccess {
                pc: 0x400634,
                addr: 0x49a018,
                size: 4,
                kind: MemKind::Load,
                value: 0x40a000
            }
        );
        assert_eq!(
            m[1],
            MemAccess {
                pc: 0x10,
                addr: 0x7ffe,
                size: 1,
                kind: MemKind::Store,
                value: 0xff
            }
        );
        assert_eq!(
            m[2],
            MemAccess {
                pc: 0x12,
                addr: 0x8,
                size: 8,
                kind: MemKind::Store,
                value: 1
            }
        );
    }

    #[test]
    fn combined_log() {
        let (_d, p) = tmpfile(
            "c.log",
            "insn_vaddr,insn_symbol,mem_vaddr,mem_hwaddr,access_size,access_type,mem_value\n\
             0x10,,0x7ffe,0x0,32,load,0x00000001\n\
             0, 0x10, 0x8f998018, \"lw t9, 0(sp)\", load, 0x00007ffe\n\
             page layout changed following mmap\n\
             0, 0x14, 0x0, \"nop\"\n\
             cpu 0 insns: 2\n\
             total insns: 2\n\
             mem accesses: 1\n",
        );
        let c = parse_combined(&p).unwrap();
        assert_eq!(c.insn.total, 2);
        assert_eq!(c.execlog.pcs, vec![0x10, 0x14]);
        assert_eq!(c.execlog.mem.len(), 1);
        assert_eq!((c.mem.len(), c.mem[0].value, c.mem_total), (1, 1, Some(1)));
        let (_d, p) = tmpfile("d.log", "0, 0x10, 0x0, \"nop\"\n");
        assert!(parse_combined(&p).is_err(), "no libinsn total");
        let (_d, p) = tmpfile("e.log", "junk\ntotal insns: 0\n");
        assert!(parse_combined(&p).is_err());
    }

    #[test]
    fn mem_lines_128_bit() {
        let (_d, p) = tmpfile(
            "m.log",
            "0x401000,memcpy,0x7ffe0010,0x0,128,store,0x00112233445566778899aabbccddeeff\n",
        );
        let m = parse_mem(&p).unwrap();
        assert_eq!(m[0].size, 16);
        assert_eq!(m[0].value, 0x0011_2233_4455_6677_8899_aabb_ccdd_eeff);
        let (_d, p) = tmpfile("b.log", "0x1,a,0x2,0x0,24,load,0x1\n");
        assert!(parse_mem(&p).is_err());
    }

    #[test]
    fn execlog_torn_lines() {
        let d = RunDir::new();
        let p = d.file("x.log");
        fs::write(
            &p,
            "0, 0x400630, 0x3c1c0005, \"lui gp, 5\"\n\
             1, 0x400634, 0x8f998018, \"lw t9, -0x7fe8(gp)\", load, 0x0049a0182, 0x10, 0x0, \"nop\"\n\
             \n\
             2, 0x20, 0x0, \"sw a, b\", store, 0x7fff0000, load, 0x00000010\n\
             1, 0x400638, 0x0, \"nop\"0, 0x400634, 0x1, \"x\"\n\
             3, 0x30, 0x0, \"ld\", load, 0x00007ffff7ff00101, 0x38, 0x0, \"nop\"\n\n",
        )
        .unwrap();
        let m = parse_execlog_per_cpu(&p).unwrap();
        assert_eq!(m[&0], vec![0x400630, 0x400634]);
        assert_eq!(m[&1], vec![0x400634, 0x400638, 0x38]);
        assert_eq!(m[&2], vec![0x10, 0x20]);
        assert_eq!(m[&3], vec![0x30]);
        fs::write(&p, "0, 0x10, 0x0, \"a\", load, 0x123\n").unwrap();
        assert!(parse_execlog_per_cpu(&p).is_err());
        fs::write(&p, "0, 0x10, 0x0, \"a\" junk\n").unwrap();
        assert!(parse_execlog_per_cpu(&p).is_err());
        // With a vCPU 12 a torn address could end in "1" or "12".
        fs::write(
            &p,
            "12, 0x10, 0x0, \"a\", load, 0x000000101, 0x14, 0x0, \"b\"\n",
        )
        .unwrap();
        assert!(parse_execlog_per_cpu(&p).unwrap_err().contains("ambiguous"));
    }
}
