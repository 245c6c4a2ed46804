// SPDX-License-Identifier: GPL-2.0-or-later
//! The writer: each line kind appended to a buffer, as `cannoli-dump`
//! prints it, and the `--split` file names.

use std::fmt;

use crate::model::{Counts, MemAccess, MemKind};

pub(super) const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Display for MemAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut b = Vec::with_capacity(64);
        push_mem(&mut b, self.kind, self.pc, self.addr, self.size, self.value);
        b.pop();
        f.write_str(&String::from_utf8_lossy(&b))
    }
}

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
