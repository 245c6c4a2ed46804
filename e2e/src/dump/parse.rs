// SPDX-License-Identifier: GPL-2.0-or-later
//! The parser of single lines and fields, strict so that a writer bug
//! shows up as a parse error: [`Line`] and the `parse` of each event type.

use crate::model::{Counts, MapEvent, MemAccess, MemKind, RegsEvent, SignalEvent, SyscallEvent};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    Exec(u64),
    Mem(MemAccess),
    Regs(RegsEvent),
    Syscall(SyscallEvent),
    Map(MapEvent),
    Unmap { base: u64, len: u64 },
    Protect { base: u64, len: u64, prot: String },
    Signal(SignalEvent),
    Counts(Counts),
}

/// A hex number as the writer prints it: lowercase, no `0x`, no leading
/// zeros, at most `max_digits` digits. Strict, so that a writer bug (e.g.
/// padding) shows up as a parse error rather than passing unnoticed.
fn strict_hex(s: &str, max_digits: usize) -> Result<u128, String> {
    let ok = !s.is_empty()
        && s.len() <= max_digits
        && (s == "0" || !s.starts_with('0'))
        && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    if !ok {
        return Err(format!("bad hex number {s:?}"));
    }
    u128::from_str_radix(s, 16).map_err(|_| format!("bad hex number {s:?}"))
}

/// A 64-bit hex field.
pub fn parse_hex(s: &str) -> Result<u64, String> {
    strict_hex(s, 16).map(|v| v as u64)
}

/// A 128-bit hex field (an access value).
pub fn parse_hex128(s: &str) -> Result<u128, String> {
    strict_hex(s, 32)
}

/// A signed hex number as the writer prints results: `-` and the
/// magnitude for negative values.
pub fn parse_signed_hex(s: &str) -> Result<i64, String> {
    match s.strip_prefix('-') {
        Some(m) => {
            let v = parse_hex(m)?;
            if v == 0 || v > 1 << 63 {
                return Err(format!("{s:?} out of range"));
            }
            Ok((v as i64).wrapping_neg())
        }
        None => {
            let v = parse_hex(s)?;
            i64::try_from(v).map_err(|_| format!("{s:?} out of range"))
        }
    }
}

pub(super) fn parse_dec<T: std::str::FromStr + ToString>(s: &str) -> Result<T, String> {
    // Round-trip: no `+`, no leading zeros.
    let v: T = s.parse().map_err(|_| format!("bad decimal number {s:?}"))?;
    if v.to_string() != s {
        return Err(format!("bad decimal number {s:?}"));
    }
    Ok(v)
}

/// Decodes a `Y` line's data field: `-`, `"text"` (with `\" \\ \t \n \r`)
/// or plain hex.
pub fn decode_data(s: &str) -> Result<Vec<u8>, String> {
    if s == "-" {
        return Ok(Vec::new());
    }
    if let Some(inner) = s.strip_prefix('"') {
        let inner = inner
            .strip_suffix('"')
            .ok_or_else(|| format!("unterminated text {s:?}"))?;
        let mut out = Vec::with_capacity(inner.len());
        let mut it = inner.bytes();
        while let Some(c) = it.next() {
            if c != b'\\' {
                if c == b'"' {
                    return Err(format!("unescaped quote in {s:?}"));
                }
                out.push(c);
                continue;
            }
            out.push(match it.next() {
                Some(b'"') => b'"',
                Some(b'\\') => b'\\',
                Some(b't') => b'\t',
                Some(b'n') => b'\n',
                Some(b'r') => b'\r',
                other => return Err(format!("bad escape {other:?} in {s:?}")),
            });
        }
        return Ok(out);
    }
    if s.len() % 2 == 1
        || s.is_empty()
        || !s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(format!("bad hex data {s:?}"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| format!("bad hex data {s:?}")))
        .collect()
}

/// Decodes a path field (`-`, or text with `\\` and `\xHH`).
pub fn decode_path(s: &str) -> Result<String, String> {
    if s == "-" {
        return Ok(String::new());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match b.get(i + 1) {
            Some(b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            Some(b'x') => {
                let h = s
                    .get(i + 2..i + 4)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("bad \\x escape in {s:?}"))?;
                out.push(h);
                i += 4;
            }
            _ => return Err(format!("bad escape in {s:?}")),
        }
    }
    String::from_utf8(out).map_err(|_| format!("path not UTF-8: {s:?}"))
}

fn parse_prot(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let ok = b.len() == 3
        && matches!(b[0], b'r' | b'-')
        && matches!(b[1], b'w' | b'-')
        && matches!(b[2], b'x' | b'-');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!("bad protection {s:?}"))
    }
}

fn mem_size(s: &str) -> Result<u8, String> {
    match s {
        "1" => Ok(1),
        "2" => Ok(2),
        "4" => Ok(4),
        "8" => Ok(8),
        "16" => Ok(16),
        _ => Err(format!("bad size {s:?}")),
    }
}

/// The fields of a line, which must be exactly `n`.
fn fields(line: &str, n: usize) -> Result<Vec<&str>, String> {
    let f: Vec<&str> = line.split(' ').collect();
    if f.len() != n {
        return Err(format!("{} fields, want {n}", f.len()));
    }
    Ok(f)
}

impl MemAccess {
    /// Parses an `L` or `S` line.
    pub fn parse(line: &str) -> Result<MemAccess, String> {
        let f = fields(line, 5)?;
        let kind = match f[0] {
            "L" => MemKind::Load,
            "S" => MemKind::Store,
            _ => return Err("not an L or S line".into()),
        };
        let size = mem_size(f[3])?;
        let value = parse_hex128(f[4])?;
        if size < 16 && value >> (8 * size as u32) != 0 {
            return Err(format!("value wider than {size} bytes"));
        }
        Ok(MemAccess {
            pc: parse_hex(f[1])?,
            addr: parse_hex(f[2])?,
            size,
            kind,
            value,
        })
    }
}

impl RegsEvent {
    /// Parses an `R` or `B` line.
    pub fn parse(line: &str) -> Result<RegsEvent, String> {
        let mut f = line.split(' ');
        let tag = f.next().unwrap_or("");
        let pc = parse_hex(f.next().ok_or_else(|| format!("no pc: {line:?}"))?)?;
        let branch = match tag {
            "R" => None,
            "B" => Some(match f.next() {
                Some("0") => false,
                Some("1") => true,
                other => return Err(format!("bad branch flag {other:?}: {line:?}")),
            }),
            _ => return Err(format!("not an R or B line: {line:?}")),
        };
        let regs = f.map(parse_hex).collect::<Result<Vec<u64>, String>>()?;
        Ok(RegsEvent { pc, branch, regs })
    }
}

impl SyscallEvent {
    /// Parses `Y <num> <name> <ret> <a0>..<a5> <total> <data>`.
    pub fn parse(line: &str) -> Result<SyscallEvent, String> {
        let f: Vec<&str> = line.splitn(12, ' ').collect();
        if f.len() != 12 || f[0] != "Y" {
            return Err(format!("not a Y line with 12 fields: {line:?}"));
        }
        if f[2].is_empty() {
            return Err(format!("no syscall name: {line:?}"));
        }
        let mut args = [0u64; 6];
        for (i, a) in args.iter_mut().enumerate() {
            *a = parse_hex(f[4 + i])?;
        }
        Ok(SyscallEvent {
            num: parse_dec(f[1]).map_err(|e| format!("syscall number: {e}"))?,
            name: f[2].to_string(),
            ret: if f[3] == "-" {
                None
            } else {
                Some(parse_signed_hex(f[3])?)
            },
            args,
            total: parse_hex(f[10])?,
            data: decode_data(f[11])?,
        })
    }
}

impl MapEvent {
    /// Parses an `M` line.
    pub fn parse(line: &str) -> Result<MapEvent, String> {
        let f: Vec<&str> = line.splitn(7, ' ').collect();
        if f.len() != 7 || f[0] != "M" || !matches!(f[4], "anon" | "file") {
            return Err(format!("not an M line: {line:?}"));
        }
        Ok(MapEvent {
            base: parse_hex(f[1])?,
            len: parse_hex(f[2])?,
            prot: parse_prot(f[3])?,
            anon: f[4] == "anon",
            offset: parse_hex(f[5])?,
            path: decode_path(f[6])?,
        })
    }
}

impl SignalEvent {
    /// Parses a `G` line.
    pub fn parse(line: &str) -> Result<SignalEvent, String> {
        let f = fields(line, 5)?;
        if f[0] != "G" {
            return Err(format!("not a G line: {line:?}"));
        }
        Ok(SignalEvent {
            signo: parse_dec(f[1])?,
            code: parse_dec(f[2])?,
            fault_addr: parse_hex(f[3])?,
            handler: match f[4] {
                "-" => None,
                h => Some(parse_hex(h)?),
            },
        })
    }
}

impl Counts {
    /// Parses a `C` line.
    pub fn parse(line: &str) -> Result<Counts, String> {
        let f = fields(line, 6)?;
        if f[0] != "C" {
            return Err(format!("not a C line: {line:?}"));
        }
        Ok(Counts {
            pid: parse_dec(f[1])?,
            tid: parse_dec(f[2])?,
            exec: parse_dec(f[3])?,
            loads: parse_dec(f[4])?,
            stores: parse_dec(f[5])?,
        })
    }
}

impl Line {
    /// Parses any trace line (without its newline).
    pub fn parse(line: &str) -> Result<Line, String> {
        let tag = line.split(' ').next().unwrap_or("");
        match tag {
            "X" => {
                let f = fields(line, 2)?;
                Ok(Line::Exec(parse_hex(f[1])?))
            }
            "L" | "S" => MemAccess::parse(line).map(Line::Mem),
            "R" | "B" => RegsEvent::parse(line).map(Line::Regs),
            "Y" => SyscallEvent::parse(line).map(Line::Syscall),
            "M" => MapEvent::parse(line).map(Line::Map),
            "U" => {
                let f = fields(line, 3)?;
                Ok(Line::Unmap {
                    base: parse_hex(f[1])?,
                    len: parse_hex(f[2])?,
                })
            }
            "P" => {
                let f = fields(line, 4)?;
                Ok(Line::Protect {
                    base: parse_hex(f[1])?,
                    len: parse_hex(f[2])?,
                    prot: parse_prot(f[3])?,
                })
            }
            "G" => SignalEvent::parse(line).map(Line::Signal),
            "C" => Counts::parse(line).map(Line::Counts),
            _ => Err(format!("unknown tag {tag:?}")),
        }
    }
}
