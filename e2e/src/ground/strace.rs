// SPDX-License-Identifier: GPL-2.0-or-later
//! QEMU's `-strace`: parsing it, and comparing it with a dump's `Y` lines.

use std::path::Path;

use super::mask;
use crate::lines::for_lines;
use crate::model::SyscallEvent;

/// What `-strace` printed as a syscall's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StraceRet {
    /// A number (decimal, or `0x` hex for address results).
    Value(i128),
    /// `-1 errno=N (text)`: the syscall returned `-N`.
    Errno(i64),
    /// Anything else, as printed.
    Other(String),
}

/// One syscall as `-strace` printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StraceCall {
    pub tid: u32,
    pub name: String,
    /// The arguments as printed, split at top-level commas.
    pub args: Vec<String>,
    /// `None`: no result was printed (`exit_group`, `exit`, a syscall that
    /// did not return).
    pub ret: Option<StraceRet>,
}

/// Splits `s` at commas outside quotes and brackets.
pub fn split_args(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0i32;
    let mut quoted = false;
    for c in s.chars() {
        match c {
            '"' => quoted = !quoted,
            '(' | '{' | '[' if !quoted => depth += 1,
            ')' | '}' | ']' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.is_empty() || !out.is_empty() {
        out.push(cur);
    }
    out
}

/// Parses one `-strace` line: `<tid> <name>(<args>)[ = <result>]`.
pub fn parse_strace_line(line: &str) -> Result<StraceCall, String> {
    let (tid, rest) = line.split_once(' ').ok_or("no tid")?;
    let tid = tid.parse().map_err(|_| "bad tid")?;
    let open = rest.find('(').ok_or("no '('")?;
    let name = &rest[..open];
    if name.is_empty() || !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
        return Err(format!("bad syscall name {name:?}"));
    }
    // The matching parenthesis, outside quotes.
    let (mut depth, mut quoted, mut close) = (0i32, false, None);
    for (i, c) in rest[open..].char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' | '{' | '[' if !quoted => depth += 1,
            ')' | '}' | ']' if !quoted => {
                depth -= 1;
                if depth == 0 {
                    close = Some(open + i);
                    break;
                }
            }
            _ => {}
        }
    }
    let close = close.ok_or("unbalanced parentheses")?;
    let args = split_args(&rest[open + 1..close]);
    let tail = &rest[close + 1..];
    let ret = if tail.trim().is_empty() {
        None
    } else {
        let r = tail
            .strip_prefix(" = ")
            .ok_or("no ' = ' after the arguments")?;
        Some(if let Some(e) = r.strip_prefix("-1 errno=") {
            let n = e.split(' ').next().unwrap_or("");
            StraceRet::Errno(n.parse().map_err(|_| format!("bad errno {n:?}"))?)
        } else {
            let tok = r.split(' ').next().unwrap_or("");
            match parse_number(tok) {
                Some(v) => StraceRet::Value(v),
                None => StraceRet::Other(r.to_string()),
            }
        })
    };
    Ok(StraceCall {
        tid,
        name: name.to_string(),
        args,
        ret,
    })
}

/// Parses a `-strace` log (`-strace -D file`).
pub fn parse_strace(path: &Path) -> Result<Vec<StraceCall>, String> {
    let mut out = Vec::new();
    for_lines(path, |_, line| {
        if !line.is_empty() {
            out.push(parse_strace_line(line)?);
        }
        Ok(())
    })?;
    Ok(out)
}

/// A plain number as strace prints one: decimal (possibly negative), octal
/// with a leading 0 (file modes), `0x` hex, `NULL` or `(nil)` for 0.
pub fn parse_number(tok: &str) -> Option<i128> {
    let t = tok.trim();
    if t == "NULL" || t == "(nil)" {
        return Some(0);
    }
    if let Some(h) = t.strip_prefix("0x") {
        return (!h.is_empty() && h.len() <= 16)
            .then(|| u64::from_str_radix(h, 16).ok())
            .flatten()
            .map(|v| v as i128);
    }
    let (neg, d) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t),
    };
    if d.is_empty() || d.len() > 20 || !d.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let v = if d.len() > 1 && d.starts_with('0') {
        i128::from_str_radix(d, 8).ok()?
    } else {
        d.parse::<i128>().ok()?
    };
    Some(if neg { -v } else { v })
}

/// The value of a symbolic constant `-strace` prints, on `arch`, for the
/// ones the tests' programs use (flags of openat, mmap and lseek); `None`
/// for any other name.
pub fn strace_symbol(arch: &str, name: &str) -> Option<i128> {
    let common = match name {
        "AT_FDCWD" => Some(-100),
        "SEEK_SET" => Some(0),
        "SEEK_CUR" => Some(1),
        "SEEK_END" => Some(2),
        "PROT_NONE" => Some(0),
        "PROT_READ" => Some(1),
        "PROT_WRITE" => Some(2),
        "PROT_EXEC" => Some(4),
        "MAP_SHARED" => Some(1),
        "MAP_PRIVATE" => Some(2),
        "MAP_FIXED" => Some(0x10),
        "O_RDONLY" => Some(0),
        "O_WRONLY" => Some(1),
        "O_RDWR" => Some(2),
        _ => None,
    };
    if common.is_some() {
        return common;
    }
    // QEMU's linux-user/mips/target_fcntl.h, mips/target_mman.h and the
    // generic ones (riscv).
    let mips = matches!(arch, "mips" | "mipsel" | "mips64" | "mips64el");
    let v: i128 = match (name, mips) {
        ("O_APPEND", true) => 0x8,
        ("O_NONBLOCK", true) => 0x80,
        ("O_CREAT", true) => 0x100,
        ("O_TRUNC", true) => 0x200,
        ("O_EXCL", true) => 0x400,
        ("O_NOCTTY", true) => 0x800,
        ("O_LARGEFILE", true) => 0x2000,
        ("MAP_ANONYMOUS", true) => 0x800,
        ("O_CREAT", false) => 0x40,
        ("O_EXCL", false) => 0x80,
        ("O_NOCTTY", false) => 0x100,
        ("O_TRUNC", false) => 0x200,
        ("O_APPEND", false) => 0x400,
        ("O_NONBLOCK", false) => 0x800,
        ("O_LARGEFILE", false) => 0x8000,
        ("MAP_ANONYMOUS", false) => 0x20,
        ("O_DIRECTORY", _) => 0x10000,
        ("O_NOFOLLOW", _) => 0x20000,
        ("O_CLOEXEC", _) => 0x80000,
        _ => return None,
    };
    Some(v)
}

/// The numeric value of a printed argument, if it has one: a number, or
/// `|`-joined known symbols and numbers. `None` for strings, structures and
/// unknown symbols.
pub fn strace_value(arch: &str, tok: &str) -> Option<i128> {
    let t = tok.trim();
    if let Some(v) = parse_number(t) {
        return Some(v);
    }
    if t.is_empty() || t.starts_with('"') || t.starts_with('{') || t.starts_with('[') {
        return None;
    }
    let mut v = 0i128;
    for part in t.split('|') {
        v |= parse_number(part).or_else(|| strace_symbol(arch, part))?;
    }
    Some(v)
}

/// A printed number `v` matches the raw value `raw` of a `bits`-bit guest
/// register: equal modulo 2^bits, or, for a decimal that fits 32 bits, equal
/// in the low 32 bits (strace prints many 64-bit arguments with `%d`/`%u`).
pub fn printed_matches(v: i128, raw: u64, bits: u32, decimal: bool) -> bool {
    let raw = mask(raw, bits);
    if mask(v as u64, bits) == raw {
        return true;
    }
    decimal && (i32::MIN as i128..=u32::MAX as i128).contains(&v) && v as u32 == raw as u32
}

/// Syscalls whose result is the caller's process or thread id.
pub const ID_SYSCALLS: &[&str] = &["getpid", "gettid", "set_tid_address"];

/// The argument index whose path a syscall event carries, by name (see
/// the jitter's capture rules).
pub fn path_arg(name: &str) -> Option<usize> {
    match name {
        "open" | "creat" | "stat" | "stat64" | "lstat" | "lstat64" | "access" | "unlink"
        | "mkdir" | "rmdir" | "execve" | "chdir" | "truncate" | "truncate64" | "statfs"
        | "statfs64" | "chmod" | "chown" | "lchown" | "chroot" | "symlink" | "link" | "rename" => {
            Some(0)
        }
        "openat" | "openat2" | "unlinkat" | "fstatat64" | "newfstatat" | "faccessat"
        | "faccessat2" | "mkdirat" | "execveat" | "statx" | "fchmodat" | "fchownat"
        | "utimensat" | "mknodat" | "renameat" | "renameat2" => Some(1),
        _ => None,
    }
}

/// Counts of what [`compare_strace`] compared.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StraceStats {
    pub calls: usize,
    pub results: usize,
    pub numeric_args: usize,
    pub symbolic_args: usize,
    pub paths: usize,
    /// Printed arguments that were not compared (strings other than paths,
    /// structures, unknown symbols).
    pub skipped_args: usize,
}

/// Compares cannoli's syscall events with `-strace`'s lines of a run of the
/// same program under the same conditions: the same syscalls in the same
/// order; each result equal (the pid-valued results of [`ID_SYSCALLS`] are
/// compared with each run's own pid); each argument strace prints as a
/// number or as known symbols equal to the event's; each path strace prints
/// equal to the event's data.
pub fn compare_strace(
    arch: &str,
    bits: u32,
    strace: &[StraceCall],
    strace_pid: u32,
    events: &[SyscallEvent],
    cannoli_pid: u32,
) -> Result<StraceStats, String> {
    let mut st = StraceStats::default();
    let names = |v: &mut dyn Iterator<Item = &str>| v.collect::<Vec<_>>().join(" ");
    if strace.len() != events.len() || strace.iter().zip(events).any(|(s, e)| s.name != e.name) {
        let first = strace
            .iter()
            .zip(events)
            .position(|(s, e)| s.name != e.name)
            .unwrap_or(strace.len().min(events.len()));
        return Err(format!(
            "syscall sequences differ at #{first}: strace has {} calls, cannoli {}\n  strace:  {}\n  cannoli: {}",
            strace.len(),
            events.len(),
            names(&mut strace.iter().map(|s| s.name.as_str())),
            names(&mut events.iter().map(|e| e.name.as_str())),
        ));
    }
    let mut errs = Vec::new();
    for (i, (s, e)) in strace.iter().zip(events).enumerate() {
        st.calls += 1;
        let what = format!("syscall #{i} {}", s.name);
        if s.tid != strace_pid {
            errs.push(format!(
                "{what}: strace tid {} is not QEMU's pid {strace_pid}",
                s.tid
            ));
        }
        // The result.
        match (&s.ret, e.ret) {
            (None, None) => {}
            (Some(r), Some(cr)) => {
                st.results += 1;
                let ok = if ID_SYSCALLS.contains(&s.name.as_str()) {
                    *r == StraceRet::Value(strace_pid as i128) && cr == cannoli_pid as i64
                } else {
                    match r {
                        StraceRet::Errno(n) => cr == -n,
                        StraceRet::Value(v) => mask(*v as u64, bits) == mask(cr as u64, bits),
                        StraceRet::Other(o) => {
                            errs.push(format!("{what}: unparsed strace result {o:?}"));
                            true
                        }
                    }
                };
                if !ok {
                    errs.push(format!(
                        "{what}: result: strace {r:?} (pid {strace_pid}), cannoli {cr} = {cr:#x} (pid {cannoli_pid})"
                    ));
                }
            }
            (r, cr) => errs.push(format!(
                "{what}: strace result {r:?}, cannoli result {cr:?} (one returned, the other did not)"
            )),
        }
        if s.args.len() > 6 {
            errs.push(format!("{what}: strace printed {} arguments", s.args.len()));
            continue;
        }
        for (j, tok) in s.args.iter().enumerate() {
            let raw = e.args[j];
            if path_arg(&s.name) == Some(j) && tok.starts_with('"') {
                st.paths += 1;
                let printed = tok.trim_matches('"').as_bytes();
                if printed != e.data.as_slice() || e.total != printed.len() as u64 {
                    errs.push(format!(
                        "{what}: path argument {j}: strace {tok}, cannoli data {:?} (total {})",
                        String::from_utf8_lossy(&e.data),
                        e.total
                    ));
                }
                continue;
            }
            match strace_value(arch, tok) {
                Some(v) => {
                    let plain = parse_number(tok).is_some();
                    if plain {
                        st.numeric_args += 1;
                    } else {
                        st.symbolic_args += 1;
                    }
                    let decimal = plain && !tok.trim().starts_with("0x");
                    if !printed_matches(v, raw, bits, decimal) {
                        errs.push(format!(
                            "{what}: argument {j}: strace {tok} = {v:#x}, cannoli {raw:#x}"
                        ));
                    }
                }
                None => st.skipped_args += 1,
            }
        }
    }
    if errs.is_empty() {
        Ok(st)
    } else {
        Err(format!(
            "{} difference(s):\n  {}",
            errs.len(),
            errs.join("\n  ")
        ))
    }
}
