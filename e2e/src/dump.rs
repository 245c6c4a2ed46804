// SPDX-License-Identifier: GPL-2.0-or-later
//! The `cannoli-dump` output formats, writer and parser in one place.
//!
//! `cannoli-dump` (the writer, `src/bin/cannoli-dump.rs`) and the tests (the
//! readers) both use this module, so the two sides cannot drift apart: a
//! format change is made once, and the round-trip tests below check that
//! whatever the writer produces, the parser reads back unchanged.
//!
//! The trace, one event a line:
//!
//! ```text
//! X <pc>                              executed instruction
//! L <pc> <addr> <size> <value>        load
//! S <pc> <addr> <size> <value>        store
//! R <pc> <r0> <r1> ...                registers at an instruction (Register hook)
//! B <pc> <0|1> <r0> <r1> ...          registers at an instruction (Branch hook;
//!                                     1: it can end a basic block)
//! Y <num> <name> <ret> <a0> <a1> <a2> <a3> <a4> <a5> <total> <data>
//!                                     system call
//! M <base> <len> <prot> <anon|file> <offset> <path>
//!                                     new mapping
//! U <base> <len>                      unmapped
//! P <base> <len> <prot>               protection changed
//! G <signo> <code> <fault_addr> <handler>
//!                                     signal delivered
//! C <pid> <tid> <exec> <loads> <stores>
//!                                     with --counts: a stream's X, L and S
//!                                     events, counted instead of printed
//! ```
//!
//! Numbers are lowercase hex without `0x` and without leading zeros, except
//! these, in decimal: `size` (the access size in bytes: 1, 2, 4, 8 or 16),
//! the syscall number `num`, `signo` and `code` (which may be negative),
//! and all of a `C` line's numbers. A
//! 16-byte access's `value` is the whole 128-bit value. Registers are in the
//! order of the hello's register layout, masked to the guest register
//! width. `name` is the syscall's name, `?` where QEMU's side does not know
//! it. `ret` is the result as a signed hex number (`-2` is -ENOENT, `-16` is
//! -EINVAL), `-` for a syscall that did not return (`exit`, a successful
//! `execve`). `total` is the full length of the syscall's buffer and `data`
//! the captured part (at most 4096 bytes): `-` when empty, `"text"` when
//! every byte is printable ASCII, tab, newline or carriage return (with
//! `\"`, `\\`, `\t`, `\n`, `\r` escaped), else plain hex, two digits a byte.
//! `prot` is `rwx` with `-` for each missing right. `path` is the rest of
//! the line (it may contain spaces; `\\` and `\xHH` for control
//! characters), `-` for an anonymous mapping. `handler` is the guest
//! handler's address, `-` for the default action.
//!
//! Besides the trace: the first stdout line `listening <addr>`
//! ([`LISTENING`]), the closing stderr line ([`Summary`]), and under
//! `--split DIR` the per-stream file names ([`split_file_name`]) and the
//! index `DIR/streams.txt` ([`StreamInfo`]).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::lines::for_each_line;

/// Every line kind, in the order of `--only`'s documentation.
pub const ALL_KINDS: &str = "XLSRBYMUPG";

/// Start of the first stdout line, followed by the address the client
/// listens on: a caller that asked for port 0 learns the real port from it.
pub const LISTENING: &str = "listening ";

/// The index file of a `--split` directory.
pub const STREAMS_FILE: &str = "streams.txt";

const HEX: &[u8; 16] = b"0123456789abcdef";

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

/// Load or store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemKind {
    Load,
    Store,
}

impl MemKind {
    /// The line's tag letter.
    pub fn letter(self) -> char {
        match self {
            MemKind::Load => 'L',
            MemKind::Store => 'S',
        }
    }
}

/// One memory access, as in `cannoli-dump`'s `L`/`S` lines and libmem's
/// `print-accesses` lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemAccess {
    /// The accessing instruction.
    pub pc: u64,
    pub addr: u64,
    /// In bytes: 1, 2, 4, 8 or 16.
    pub size: u8,
    pub kind: MemKind,
    /// 128 bits wide so that 16-byte (SIMD, 128-bit atomic) accesses are
    /// compared whole, not just their low half.
    pub value: u128,
}

impl fmt::Display for MemAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut b = Vec::with_capacity(64);
        push_mem(&mut b, self.kind, self.pc, self.addr, self.size, self.value);
        b.pop();
        f.write_str(&String::from_utf8_lossy(&b))
    }
}

/// An `R` or `B` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegsEvent {
    pub pc: u64,
    /// `B` lines: the "can end a block" flag; `None` for `R` lines.
    pub branch: Option<bool>,
    pub regs: Vec<u64>,
}

/// A `Y` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyscallEvent {
    pub num: u64,
    /// `?` where QEMU's side does not know the name.
    pub name: String,
    /// `None`: the syscall did not return (`-`).
    pub ret: Option<i64>,
    pub args: [u64; 6],
    /// Full length of the syscall's buffer.
    pub total: u64,
    /// The captured part of it, decoded.
    pub data: Vec<u8>,
}

/// An `M` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEvent {
    pub base: u64,
    pub len: u64,
    /// `rwx` with `-` for a missing right.
    pub prot: String,
    pub anon: bool,
    pub offset: u64,
    /// The file, decoded; empty for none (`-`).
    pub path: String,
}

impl MapEvent {
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr - self.base < self.len
    }
}

/// A `G` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalEvent {
    pub signo: i32,
    pub code: i32,
    pub fault_addr: u64,
    /// `None` for `-` (the default action).
    pub handler: Option<u64>,
}

/// One parsed line of a dump.
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

/// A `C` line: what a stream's `X`, `L` and `S` lines would have been, for
/// a run too long to print them (`cannoli-dump --counts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub pid: i32,
    pub tid: i32,
    pub exec: u64,
    pub loads: u64,
    pub stores: u64,
}

// ---------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------

/// `v` in lowercase hex without leading zeros.
#[inline]
pub fn push_hex(buf: &mut Vec<u8>, v: u64) {
    if v == 0 {
        buf.push(b'0');
        return;
    }
    let digits = (64 - v.leading_zeros()).div_ceil(4);
    for i in (0..digits).rev() {
        buf.push(HEX[((v >> (i * 4)) & 0xf) as usize]);
    }
}

/// A 128-bit `v` in lowercase hex without leading zeros.
#[inline]
pub fn push_hex128(buf: &mut Vec<u8>, v: u128) {
    let hi = (v >> 64) as u64;
    if hi == 0 {
        return push_hex(buf, v as u64);
    }
    push_hex(buf, hi);
    let lo = v as u64;
    for i in (0..16).rev() {
        buf.push(HEX[((lo >> (i * 4)) & 0xf) as usize]);
    }
}

/// `v` in decimal.
#[inline]
pub fn push_dec(buf: &mut Vec<u8>, v: u8) {
    if v >= 100 {
        buf.push(b'0' + v / 100);
    }
    if v >= 10 {
        buf.push(b'0' + (v / 10) % 10);
    }
    buf.push(b'0' + v % 10);
}

/// `v` as signed hex: `-` and the magnitude when negative.
pub fn push_signed_hex(buf: &mut Vec<u8>, v: i64) {
    if v < 0 {
        buf.push(b'-');
    }
    push_hex(buf, v.unsigned_abs());
}

/// An `X` line.
#[inline]
pub fn push_exec(buf: &mut Vec<u8>, pc: u64) {
    buf.extend_from_slice(b"X ");
    push_hex(buf, pc);
    buf.push(b'\n');
}

/// An `L` or `S` line.
#[inline]
pub fn push_mem(buf: &mut Vec<u8>, kind: MemKind, pc: u64, addr: u64, sz: u8, val: u128) {
    buf.push(kind.letter() as u8);
    buf.push(b' ');
    push_hex(buf, pc);
    buf.push(b' ');
    push_hex(buf, addr);
    buf.push(b' ');
    push_dec(buf, sz);
    buf.push(b' ');
    push_hex128(buf, val);
    buf.push(b'\n');
}

/// An `R` line (`branch` is `None`) or a `B` line, without the newline.
pub fn push_regs(
    buf: &mut Vec<u8>,
    pc: u64,
    branch: Option<bool>,
    regs: impl Iterator<Item = u64>,
) {
    buf.extend_from_slice(if branch.is_some() { b"B " } else { b"R " });
    push_hex(buf, pc);
    match branch {
        Some(true) => buf.extend_from_slice(b" 1"),
        Some(false) => buf.extend_from_slice(b" 0"),
        None => {}
    }
    for v in regs {
        buf.push(b' ');
        push_hex(buf, v);
    }
}

/// A `Y` line, without the newline.
pub fn push_syscall(
    buf: &mut Vec<u8>,
    num: u64,
    name: Option<&str>,
    ret: Option<i64>,
    args: &[u64; 6],
    total: u64,
    data: &[u8],
) {
    buf.extend_from_slice(b"Y ");
    buf.extend_from_slice(num.to_string().as_bytes());
    buf.push(b' ');
    buf.extend_from_slice(name.unwrap_or("?").as_bytes());
    buf.push(b' ');
    match ret {
        Some(r) => push_signed_hex(buf, r),
        None => buf.push(b'-'),
    }
    for &a in args {
        buf.push(b' ');
        push_hex(buf, a);
    }
    buf.push(b' ');
    push_hex(buf, total);
    buf.push(b' ');
    push_data(buf, data);
}

/// The start of an `M`, `U` or `P` line: `<kind> <base> <len>`.
fn push_range(buf: &mut Vec<u8>, kind: u8, base: u64, len: u64) {
    buf.push(kind);
    buf.push(b' ');
    push_hex(buf, base);
    buf.push(b' ');
    push_hex(buf, len);
}

fn push_prot(buf: &mut Vec<u8>, r: bool, w: bool, x: bool) {
    buf.push(if r { b'r' } else { b'-' });
    buf.push(if w { b'w' } else { b'-' });
    buf.push(if x { b'x' } else { b'-' });
}

/// An `M` line, without the newline.
#[allow(clippy::too_many_arguments)]
pub fn push_map(
    buf: &mut Vec<u8>,
    base: u64,
    len: u64,
    (r, w, x): (bool, bool, bool),
    anon: bool,
    offset: u64,
    path: &str,
) {
    push_range(buf, b'M', base, len);
    buf.push(b' ');
    push_prot(buf, r, w, x);
    buf.extend_from_slice(if anon { b" anon " } else { b" file " });
    push_hex(buf, offset);
    buf.push(b' ');
    push_path(buf, path);
}

/// A `U` line, without the newline.
pub fn push_unmap(buf: &mut Vec<u8>, base: u64, len: u64) {
    push_range(buf, b'U', base, len);
}

/// A `P` line, without the newline.
pub fn push_protect(buf: &mut Vec<u8>, base: u64, len: u64, (r, w, x): (bool, bool, bool)) {
    push_range(buf, b'P', base, len);
    buf.push(b' ');
    push_prot(buf, r, w, x);
}

/// A `G` line, without the newline.
pub fn push_signal(
    buf: &mut Vec<u8>,
    signo: i32,
    code: i32,
    fault_addr: u64,
    handler: Option<u64>,
) {
    buf.extend_from_slice(format!("G {signo} {code} ").as_bytes());
    push_hex(buf, fault_addr);
    buf.push(b' ');
    match handler {
        Some(h) => push_hex(buf, h),
        None => buf.push(b'-'),
    }
}

/// A `C` line, without the newline.
pub fn push_counts(buf: &mut Vec<u8>, c: &Counts) {
    buf.extend_from_slice(
        format!("C {} {} {} {} {}", c.pid, c.tid, c.exec, c.loads, c.stores).as_bytes(),
    );
}

/// A syscall buffer: `-`, `"text"` or hex (see the module header).
pub fn push_data(buf: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        buf.push(b'-');
    } else if data
        .iter()
        .all(|&c| (0x20..0x7f).contains(&c) || matches!(c, b'\t' | b'\n' | b'\r'))
    {
        buf.push(b'"');
        for &c in data {
            match c {
                b'"' => buf.extend_from_slice(b"\\\""),
                b'\\' => buf.extend_from_slice(b"\\\\"),
                b'\t' => buf.extend_from_slice(b"\\t"),
                b'\n' => buf.extend_from_slice(b"\\n"),
                b'\r' => buf.extend_from_slice(b"\\r"),
                c => buf.push(c),
            }
        }
        buf.push(b'"');
    } else {
        for &c in data {
            buf.push(HEX[(c >> 4) as usize]);
            buf.push(HEX[(c & 15) as usize]);
        }
    }
}

/// A path: `-` when empty, else as is but for `\\` and `\xHH` for control
/// characters.
pub fn push_path(buf: &mut Vec<u8>, path: &str) {
    if path.is_empty() {
        buf.push(b'-');
        return;
    }
    for &c in path.as_bytes() {
        match c {
            b'\\' => buf.extend_from_slice(b"\\\\"),
            0..=0x1f | 0x7f => {
                buf.extend_from_slice(b"\\x");
                buf.push(HEX[(c >> 4) as usize]);
                buf.push(HEX[(c & 15) as usize]);
            }
            c => buf.push(c),
        }
    }
}

/// The file name of a `--split` stream: the `k`-th (from 0) stream of
/// (`pid`, `tid`); later ones are the programs that thread `execve`d.
pub fn split_file_name(pid: i32, tid: i32, k: u32) -> String {
    if k == 0 {
        format!("dump-{pid}-{tid}.txt")
    } else {
        format!("dump-{pid}-{tid}.{k}.txt")
    }
}

/// A line of `streams.txt`, without the newline:
/// `<file> pid <pid> ppid <ppid> tid <tid> exe <path or ->`.
pub fn stream_line(file: &str, pid: i32, ppid: i32, tid: i32, exe: &str) -> String {
    let mut e = Vec::new();
    push_path(&mut e, exe);
    format!(
        "{file} pid {pid} ppid {ppid} tid {tid} exe {}",
        String::from_utf8_lossy(&e)
    )
}

// ---------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------

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

fn parse_dec<T: std::str::FromStr + ToString>(s: &str) -> Result<T, String> {
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

// ---------------------------------------------------------------------------
// Whole dumps
// ---------------------------------------------------------------------------

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
    pub fn mem_slots(&self) -> Vec<crate::plugins::MemSlot> {
        self.mem
            .iter()
            .zip(&self.mem_insn)
            .map(|(m, &insn)| crate::plugins::MemSlot {
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

// ---------------------------------------------------------------------------
// --split and the closing line
// ---------------------------------------------------------------------------

/// One stream of a `--split` run (a line of `streams.txt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    /// Its file, in the split directory.
    pub file: PathBuf,
    pub pid: i32,
    pub ppid: i32,
    pub tid: i32,
    /// The program, decoded; empty if unknown.
    pub exe: String,
}

impl StreamInfo {
    /// Parses a line of `streams.txt` in the split directory `dir`.
    pub fn parse(dir: &Path, line: &str) -> Result<StreamInfo, String> {
        let f: Vec<&str> = line.splitn(9, ' ').collect();
        let ok = f.len() == 9 && f[1] == "pid" && f[3] == "ppid" && f[5] == "tid" && f[7] == "exe";
        if !ok {
            return Err(format!("bad line {line:?}"));
        }
        let num = |s: &str| parse_dec::<i32>(s).map_err(|e| format!("{e} in {line:?}"));
        Ok(StreamInfo {
            file: dir.join(f[0]),
            pid: num(f[2])?,
            ppid: num(f[4])?,
            tid: num(f[6])?,
            exe: decode_path(f[8])?,
        })
    }
}

/// The client's closing stderr line: `cannoli-dump: N connections, N events
/// in N chunks, N lost, N incomplete streams; N lines to DEST in S.SSSs (N
/// threads)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    pub connections: u64,
    pub events: u64,
    pub chunks: u64,
    pub lost: u64,
    pub incomplete: u64,
}

impl Summary {
    /// The line the client prints, with what only the client knows: the
    /// lines it wrote, where to, the seconds it took and its threads.
    pub fn line(&self, lines: u64, dest: &str, secs: f64, threads: usize) -> String {
        format!(
            "cannoli-dump: {} connections, {} events in {} chunks, {} lost, {} incomplete streams; \
             {lines} lines to {dest} in {secs:.3}s ({threads} threads)",
            self.connections, self.events, self.chunks, self.lost, self.incomplete,
        )
    }

    /// Finds and parses the summary line in the client's stderr.
    pub fn parse(stderr: &str) -> Result<Summary, String> {
        let line = stderr
            .lines()
            .find(|l| l.starts_with("cannoli-dump: ") && l.contains(" connections, "))
            .ok_or_else(|| {
                format!(
                    "no summary line in the client's stderr:\n{}",
                    crate::run::tail(stderr, 20)
                )
            })?;
        let words: Vec<&str> = line
            .split([' ', ',', ';'])
            .filter(|w| !w.is_empty())
            .collect();
        let before = |what: &str| -> Result<u64, String> {
            let i = words
                .iter()
                .position(|w| *w == what)
                .filter(|&i| i > 0)
                .ok_or_else(|| format!("no `{what}` in {line:?}"))?;
            words[i - 1]
                .parse()
                .map_err(|_| format!("bad number before `{what}` in {line:?}"))
        };
        Ok(Summary {
            connections: before("connections")?,
            events: before("events")?,
            chunks: before("chunks")?,
            lost: before("lost")?,
            incomplete: before("incomplete")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::RunDir;

    fn line(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut b = Vec::new();
        f(&mut b);
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn hex_writer() {
        let s = |v: u64| line(|b| push_hex(b, v));
        assert_eq!(
            (s(0), s(0x10), s(u64::MAX)),
            ("0".into(), "10".into(), "ffffffffffffffff".into())
        );
        let w = |v: u128| line(|b| push_hex128(b, v));
        assert_eq!(w(0x1234), "1234");
        assert_eq!(w(1 << 64), "10000000000000000");
        assert_eq!(w(u128::MAX), "f".repeat(32));
        assert_eq!(w((0xab << 64) | 5), "ab0000000000000005");
        let d = |v: u8| line(|b| push_dec(b, v));
        assert_eq!(
            (d(0), d(16), d(255)),
            ("0".into(), "16".into(), "255".into())
        );
    }

    #[test]
    fn signed_hex() {
        let mut b = Vec::new();
        push_signed_hex(&mut b, i64::MIN);
        b.push(b' ');
        push_signed_hex(&mut b, -1);
        b.push(b' ');
        push_signed_hex(&mut b, 0);
        assert_eq!(b, b"-8000000000000000 -1 0");
        for v in [i64::MIN, -1, 0, 1, i64::MAX] {
            assert_eq!(parse_signed_hex(&line(|b| push_signed_hex(b, v))), Ok(v));
        }
        assert!(parse_signed_hex("-0").is_err());
        assert!(parse_signed_hex("8000000000000000").is_err());
    }

    #[test]
    fn strict_numbers() {
        assert_eq!(parse_hex("0"), Ok(0));
        assert_eq!(parse_hex("ffffffffffffffff"), Ok(u64::MAX));
        for bad in ["", "0x10", "010", "A", "1ffffffffffffffff", " 1", "-1"] {
            assert!(parse_hex(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_hex128(&"f".repeat(32)), Ok(u128::MAX));
        assert!(parse_hex128(&"f".repeat(33)).is_err());
    }

    /// Every line kind, written by the writer and read back by the parser.
    #[test]
    fn round_trip() {
        let mem = [
            MemAccess {
                pc: 0x400634,
                addr: 0x7ffe,
                size: 4,
                kind: MemKind::Load,
                value: 0,
            },
            MemAccess {
                pc: 0x14,
                addr: 0,
                size: 8,
                kind: MemKind::Store,
                value: u64::MAX as u128,
            },
            MemAccess {
                pc: 0x14,
                addr: 0x10,
                size: 16,
                kind: MemKind::Store,
                value: u128::MAX - 7,
            },
            MemAccess {
                pc: 1,
                addr: 2,
                size: 16,
                kind: MemKind::Load,
                value: 3,
            },
        ];
        for m in mem {
            let l = line(|b| push_mem(b, m.kind, m.pc, m.addr, m.size, m.value));
            assert!(l.ends_with('\n'));
            let l = l.trim_end();
            assert_eq!(l, m.to_string());
            assert_eq!(Line::parse(l), Ok(Line::Mem(m)), "{l}");
        }
        assert_eq!(
            line(|b| push_mem(b, MemKind::Store, 0x14, 0x10, 16, (0x1234 << 64) | 0xff)),
            "S 14 10 16 123400000000000000ff\n"
        );
        let x = line(|b| push_exec(b, 0x10_0000_0000));
        assert_eq!(x, "X 1000000000\n");
        assert_eq!(Line::parse(x.trim_end()), Ok(Line::Exec(0x10_0000_0000)));

        let r = RegsEvent {
            pc: 0x400000,
            branch: None,
            regs: vec![0, 0x8000_0001, 0x10],
        };
        let b = RegsEvent {
            branch: Some(true),
            ..r.clone()
        };
        let b0 = RegsEvent {
            branch: Some(false),
            regs: vec![],
            ..r.clone()
        };
        for e in [r, b, b0] {
            let l = line(|buf| push_regs(buf, e.pc, e.branch, e.regs.iter().copied()));
            assert_eq!(Line::parse(&l), Ok(Line::Regs(e)), "{l}");
        }

        let y = |name: &str, ret, data: &[u8], total| SyscallEvent {
            num: 4004,
            name: name.into(),
            ret,
            args: [1, 0x7ffe_0010, 6, 0, 0, u64::MAX],
            total,
            data: data.to_vec(),
        };
        for e in [
            y("write", Some(6), b"hi \"x\"\\\n\t\r", 8),
            y("?", Some(-22), &[0, 0xff, 0x41], 100),
            y("exit", None, b"", 0),
        ] {
            let name = (e.name != "?").then_some(e.name.as_str());
            let l = line(|b| push_syscall(b, e.num, name, e.ret, &e.args, e.total, &e.data));
            assert_eq!(Line::parse(&l), Ok(Line::Syscall(e)), "{l}");
        }

        let m = MapEvent {
            base: 0x7700_0000,
            len: 0x2000,
            prot: "r-x".into(),
            anon: false,
            offset: 0x1000,
            path: "/lib/a b\n\\c.so".into(),
        };
        let l = line(|b| {
            push_map(
                b,
                m.base,
                m.len,
                (true, false, true),
                false,
                m.offset,
                &m.path,
            )
        });
        assert_eq!(l, "M 77000000 2000 r-x file 1000 /lib/a b\\x0a\\\\c.so");
        assert_eq!(Line::parse(&l), Ok(Line::Map(m)));
        let l = line(|b| push_map(b, 0x1000, 0x1000, (true, true, false), true, 0, ""));
        assert_eq!(l, "M 1000 1000 rw- anon 0 -");
        assert!(
            matches!(Line::parse(&l), Ok(Line::Map(MapEvent { anon: true, ref path, .. })) if path.is_empty())
        );
        let l = line(|b| push_unmap(b, 0x7600_0000, 0x1000));
        assert_eq!(
            Line::parse(&l),
            Ok(Line::Unmap {
                base: 0x7600_0000,
                len: 0x1000
            })
        );
        let l = line(|b| push_protect(b, 0x7700_1000, 0x1000, (false, false, false)));
        assert_eq!(l, "P 77001000 1000 ---");
        assert_eq!(
            Line::parse(&l),
            Ok(Line::Protect {
                base: 0x7700_1000,
                len: 0x1000,
                prot: "---".into()
            })
        );

        for g in [
            SignalEvent {
                signo: 11,
                code: -6,
                fault_addr: 0x10,
                handler: None,
            },
            SignalEvent {
                signo: 17,
                code: 128,
                fault_addr: 0,
                handler: Some(0x401000),
            },
        ] {
            let l = line(|b| push_signal(b, g.signo, g.code, g.fault_addr, g.handler));
            assert_eq!(Line::parse(&l), Ok(Line::Signal(g)), "{l}");
        }
    }

    #[test]
    fn malformed_lines() {
        for bad in [
            "X 10 11",
            "X 0x10",
            "X",
            "L 10 7ffe 3 0",
            "L 10 7ffe 4 100000000",
            "S 10 7ffe 16",
            "L 10 7ffe 04 0",
            "R",
            "B 10 2 0",
            "Y 94 exit_group - 0 0 0 0 0 0 0",
            "Y 1 x 0 0 0 0 0 0 0 0 abc",
            "Y 1 x 0 0 0 0 0 0 0 0 \"a\\q\"",
            "Y 01 x 0 0 0 0 0 0 0 0 -",
            "M 1000 1000 rwz anon 0 -",
            "M 1000 1000 rw- none 0 -",
            "U 1000",
            "P 1000 1000",
            "G 11 -6 10",
            "G +11 -6 10 -",
            "Q 1",
            "",
            "R 10 0x1",
        ] {
            assert!(Line::parse(bad).is_err(), "{bad:?} parsed");
        }
        assert!(RegsEvent::parse("X 10").is_err());
        let y = SyscallEvent::parse("Y 4004 write c 1 46f0b0 c 0 0 0 c \"hello, \\\"x\\\"\\n\"")
            .unwrap();
        assert_eq!(
            (y.num, y.name.as_str(), y.ret, y.args),
            (4004, "write", Some(12), [1, 0x46f0b0, 12, 0, 0, 0])
        );
        assert_eq!(y.data, b"hello, \"x\"\n");
        let y =
            SyscallEvent::parse("Y 56 openat -2 ffffffffffffff9c 0 0 0 0 0 4 00ff4100").unwrap();
        assert_eq!(
            (y.ret, y.args[0], y.data),
            (Some(-2), (-100i64) as u64, vec![0, 0xff, 0x41, 0])
        );
    }

    #[test]
    fn dump_files() {
        let d = RunDir::new();
        let p = d.file("d.dump");
        std::fs::write(
            &p,
            "M 1000 1000 r-x file 0 /a\nX 10\nL 10 7ffe 4 0\nX 14\nS 14 0 8 ffffffffffffffff\nY 1 exit - 0 0 0 0 0 0 0 -\nG 11 1 0 -\nX 18\n",
        )
        .unwrap();
        let t = parse_dump(&p).unwrap();
        assert_eq!(t.pcs, vec![0x10, 0x14, 0x18]);
        assert_eq!(t.mem_insn, vec![0, 1]);
        assert_eq!(t.mem[1].value, u64::MAX as u128);
        assert_eq!(t.other.len(), 3);
        t.check_attribution().unwrap();
        assert_eq!(t.syscalls().unwrap()[0].name, "exit");
        assert_eq!(t.maps().unwrap()[0].path, "/a");
        assert_eq!(t.signals().unwrap()[0].signo, 11);
        let e = parse_dump_events(&p).unwrap();
        assert_eq!((e.pcs.len(), e.syscalls.len(), e.maps.len()), (3, 1, 1));
        assert_eq!((e.syscall_after[0], e.syscall_before[0]), (1, 2));
        assert_eq!(e.kinds, b"MXLXSYGX");
        let g = signals_in_context(&p).unwrap();
        assert_eq!((g[0].1, g[0].2), (Some(0x14), Some(0x18)));

        std::fs::write(&p, "L 10 7ffe 4 0\n").unwrap();
        assert!(parse_dump(&p).unwrap().check_attribution().is_err());
        std::fs::write(&p, "X 10 11\n").unwrap();
        assert!(parse_dump(&p).is_err());
        std::fs::write(&p, "X 10\nY 1 exit\n").unwrap();
        let e = parse_dump(&p).unwrap_err();
        assert!(e.contains(":2:"), "{e}");
    }

    #[test]
    fn split_and_streams() {
        assert_eq!(split_file_name(10, 11, 0), "dump-10-11.txt");
        assert_eq!(split_file_name(10, 10, 2), "dump-10-10.2.txt");
        let dir = Path::new("/d");
        let l = stream_line("dump-1-1.txt", 1, 0, 1, "/a b\\c");
        assert_eq!(l, "dump-1-1.txt pid 1 ppid 0 tid 1 exe /a b\\\\c");
        let s = StreamInfo::parse(dir, &l).unwrap();
        assert_eq!(
            (s.file.as_path(), s.pid, s.ppid, s.tid, s.exe.as_str()),
            (Path::new("/d/dump-1-1.txt"), 1, 0, 1, "/a b\\c")
        );
        assert_eq!(
            StreamInfo::parse(dir, &stream_line("f", 2, 1, 3, ""))
                .unwrap()
                .exe,
            ""
        );
        assert!(StreamInfo::parse(dir, "f pid 1 ppid 0 tid 1").is_err());
    }

    #[test]
    fn summary_line() {
        let s = Summary {
            connections: 3,
            events: 51615,
            chunks: 6,
            lost: 0,
            incomplete: 1,
        };
        let l = s.line(51615, "d", 0.4871, 2);
        assert_eq!(
            l,
            "cannoli-dump: 3 connections, 51615 events in 6 chunks, 0 lost, 1 incomplete streams; \
             51615 lines to d in 0.487s (2 threads)"
        );
        assert_eq!(Summary::parse(&format!("x\n{l}\n")), Ok(s));
        assert!(Summary::parse("nothing").is_err());
    }
}
