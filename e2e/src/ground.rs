// SPDX-License-Identifier: GPL-2.0-or-later
//! Ground truth for the hook-type and syscall tests (`tests/hooks.rs`,
//! `tests/syscalls.rs`): running a guest with the tests' own hook library
//! (`libe2e_hooks.so`, configured by `CANNOLI_TEST_*` variables), and parsing
//! what QEMU itself says about the same program under the same conditions:
//!
//! * `-strace` ([`parse_strace`]): every syscall with its arguments, as
//!   `linux-user/strace.c` prints them, and its result;
//! * `contrib/plugins/libexeclog.so,reg=*` ([`parse_execlog_regs`]): the pc
//!   sequence, each pc's disassembly, and the register *changes*: the plugin
//!   prints an instruction's line when the *next* instruction starts, after
//!   comparing every register with the values it saw last, so the changes on
//!   line `k` are the values *after* instruction `k` (and line 0's are
//!   relative to the values read when the vCPU was created). The state before
//!   instruction `k + 1` is therefore the state before `k` updated with line
//!   `k`'s changes ([`states_from_changes`]). QEMU's MIPS target exposes no
//!   registers to plugins (it has no gdb XML description), so on mipsel the
//!   log has no changes at all;
//! * `-one-insn-per-tb -d cpu,nochain` ([`parse_cpu_log`]): QEMU logs the
//!   whole CPU state before executing each translation block; with one
//!   instruction per block and no chaining that is the state before every
//!   instruction. This is the register ground truth on mipsel, and a second
//!   one on riscv64;
//! * `-d in_asm` ([`parse_in_asm`]): every translation block as QEMU
//!   translated it, in translation order;
//! * the guest ELF's symbol table and code ([`Elf`]).
//!
//! The `cannoli-dump` lines these tests look at are parsed by
//! [`crate::dump`] ([`DumpEvents`], [`SyscallEvent`], [`RegsEvent`]).

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

pub use crate::dump::{parse_dump_events, DumpEvents};
pub use crate::lines::{for_lines, parse_hex};
pub use crate::model::{RegsEvent, SyscallEvent};
use crate::{
    assert_traced_success, finish_guest, qemu_builds, release_artifact, spawn_guest, DumpClient,
    GuestCmd, GuestRun, Plugin, RunDir,
};

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

/// The tests' hook library (`e2e/hooks`), configured by `CANNOLI_TEST_*`.
pub fn hooks_lib() -> PathBuf {
    release_artifact("libe2e_hooks.so")
}

/// How to trace a run.
#[derive(Debug, Clone)]
pub struct TraceOpts {
    /// The hook library given to `-cannoli`.
    pub lib: PathBuf,
    /// `cannoli-dump --threads`.
    pub threads: usize,
    /// QEMU's environment besides `CANNOLI_ADDR` (e.g. `CANNOLI_TEST_HOOKS`;
    /// the patched QEMU hides every `CANNOLI_*` variable from the guest).
    pub env: Vec<(String, String)>,
    /// QEMU options placed before `-cannoli` (e.g. `-d in_asm -D file`).
    pub qemu_args: Vec<OsString>,
}

impl TraceOpts {
    /// [`hooks_lib`] with `CANNOLI_TEST_HOOKS=mode`, two client threads.
    pub fn hooks(mode: &str) -> TraceOpts {
        TraceOpts {
            lib: hooks_lib(),
            threads: 2,
            env: vec![("CANNOLI_TEST_HOOKS".into(), mode.into())],
            qemu_args: Vec::new(),
        }
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
    pub fn qemu_arg(mut self, a: impl Into<OsString>) -> Self {
        self.qemu_args.push(a.into());
        self
    }
}

/// One traced run.
pub struct Traced {
    pub guest: GuestRun,
    /// QEMU's process id: the guest's pid and main thread id.
    pub pid: u32,
    pub client_status: ExitStatus,
    pub client_stderr: String,
    /// The `cannoli-dump` output.
    pub dump: PathBuf,
}

impl Traced {
    /// Panics unless QEMU and the client both exited 0.
    pub fn assert_success(&self) {
        assert_traced_success(&self.guest, &self.client_status, &self.client_stderr);
    }
}

/// Like [`crate::run_cannoli`], with any hook library, environment and
/// extra QEMU options, and QEMU's pid.
pub fn run_traced(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
    opts: &TraceOpts,
) -> Traced {
    let q = qemu_builds();
    let mut client = DumpClient::start(dir, tag, opts.threads);
    let mut cmd = GuestCmd::new(arch, q.qemu(arch), prog, args);
    for a in &opts.qemu_args {
        cmd = cmd.qemu_arg(a.clone());
    }
    cmd = cmd
        .qemu_arg("-cannoli")
        .qemu_arg(&opts.lib)
        .env("CANNOLI_ADDR", &client.addr)
        .env("CANNOLI_TOKEN", &client.token);
    for (k, v) in &opts.env {
        cmd = cmd.env(k, v);
    }
    let child = spawn_guest(dir, tag, &cmd);
    let pid = child.id();
    let guest = finish_guest(dir, tag, &cmd, child);
    let (client_status, client_stderr) = client.finish(&guest);
    Traced {
        guest,
        pid,
        client_status,
        client_stderr,
        dump: client.out.clone(),
    }
}

/// Runs `prog args` under the patched QEMU (no cannoli) with `qemu_args`,
/// which are expected to log to `<tag>.log` (`-D`); returns the run, the
/// log's path and QEMU's pid.
pub fn run_logged(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
    qemu_args: &[OsString],
) -> (GuestRun, PathBuf, u32) {
    let q = qemu_builds();
    let log = dir.file(&format!("{tag}.log"));
    let mut cmd = GuestCmd::new(arch, q.qemu(arch), prog, args);
    for a in qemu_args {
        cmd = cmd.qemu_arg(a.clone());
    }
    cmd = cmd.qemu_arg("-D").qemu_arg(log.clone());
    let child = spawn_guest(dir, tag, &cmd);
    let pid = child.id();
    let run = finish_guest(dir, tag, &cmd, child);
    (run, log, pid)
}

/// QEMU's `-strace`, logged to `<tag>.log` with `-D` (so that the guest's
/// own stderr cannot interleave with it). Note that the log file is QEMU's
/// descriptor 3, as the client connection is under cannoli: the guest's
/// first free descriptor is 4 in both runs.
pub fn run_strace(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
) -> (GuestRun, PathBuf, u32) {
    run_logged(dir, tag, arch, prog, args, &["-strace".into()])
}

/// libexeclog with `reg=*` (every register the target exposes), and `-d
/// page` in the same log (see [`crate::pages`]); returns the run, the log
/// and QEMU's pid.
pub fn run_execlog_regs(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
) -> (GuestRun, PathBuf, u32) {
    let mut spec = qemu_builds().plugin(Plugin::Execlog).into_os_string();
    spec.push(",reg=*");
    run_logged(
        dir,
        tag,
        arch,
        prog,
        args,
        &["-plugin".into(), spec, "-d".into(), "plugin,page".into()],
    )
}

/// The CPU state before every instruction (`-one-insn-per-tb -d
/// cpu,nochain`); returns the run, the log and QEMU's pid.
pub fn run_cpu_log(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
) -> (GuestRun, PathBuf, u32) {
    run_logged(
        dir,
        tag,
        arch,
        prog,
        args,
        &["-one-insn-per-tb".into(), "-d".into(), "cpu,nochain".into()],
    )
}

// ---------------------------------------------------------------------------
// Small parsing helpers
// ---------------------------------------------------------------------------

/// `v` reduced to `bits` bits.
pub fn mask(v: u64, bits: u32) -> u64 {
    if bits >= 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    }
}

// ---------------------------------------------------------------------------
// -strace
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// libexeclog with registers
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// The guest ELF
// ---------------------------------------------------------------------------

/// What the tests read from a guest executable.
pub struct Elf {
    data: Vec<u8>,
}

impl Elf {
    pub fn open(path: &Path) -> Result<Elf, String> {
        let data = fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        object::File::parse(&*data).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Elf { data })
    }

    fn file(&self) -> object::File<'_> {
        object::File::parse(&*self.data).expect("parsed before")
    }

    /// `[start, end)` of the function symbol `name`.
    pub fn function(&self, name: &str) -> Result<(u64, u64), String> {
        use object::{Object, ObjectSymbol, SymbolKind};
        let f = self.file();
        let sym = f
            .symbols()
            .find(|s| s.name() == Ok(name) && s.kind() == SymbolKind::Text)
            .ok_or_else(|| format!("no function symbol {name}"))?;
        if sym.size() == 0 {
            return Err(format!("function symbol {name} has size 0"));
        }
        Ok((sym.address(), sym.address() + sym.size()))
    }

    /// The little-endian 32-bit word at `addr` in a section with contents.
    pub fn word(&self, addr: u64) -> Option<u32> {
        use object::{Object, ObjectSection};
        let f = self.file();
        for s in f.sections() {
            let (start, size) = (s.address(), s.size());
            if addr >= start && addr + 4 <= start + size {
                let d = s.data().ok()?;
                let o = (addr - start) as usize;
                return Some(u32::from_le_bytes(d.get(o..o + 4)?.try_into().ok()?));
            }
        }
        None
    }
}

/// Whether the 32-bit instruction word is the guest's syscall instruction
/// (mips `syscall`, riscv `ecall`).
pub fn is_syscall_insn(arch: &str, word: u32) -> bool {
    match arch {
        "mipsel" | "mips" => word & 0xfc00_003f == 0x0000_000c,
        "riscv64" | "riscv32" => word == 0x0000_0073,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str, content: &str) -> (RunDir, PathBuf) {
        let d = RunDir::new();
        let p = d.file(name);
        fs::write(&p, content).unwrap();
        (d, p)
    }

    #[test]
    fn strace_lines() {
        let c =
            parse_strace_line("31595 openat(AT_FDCWD,\"a, (b)\",O_RDWR|O_CREAT|O_TRUNC,0644) = 4")
                .unwrap();
        assert_eq!(c.tid, 31595);
        assert_eq!(c.name, "openat");
        assert_eq!(
            c.args,
            ["AT_FDCWD", "\"a, (b)\"", "O_RDWR|O_CREAT|O_TRUNC", "0644"]
        );
        assert_eq!(c.ret, Some(StraceRet::Value(4)));
        let c = parse_strace_line(
            "7 openat(AT_FDCWD,\"m\",O_RDONLY) = -1 errno=2 (No such file or directory)",
        )
        .unwrap();
        assert_eq!(c.ret, Some(StraceRet::Errno(2)));
        let c = parse_strace_line("7 exit_group(0)").unwrap();
        assert_eq!((c.args.len(), c.ret), (1, None));
        let c = parse_strace_line("7 getpid() = 7").unwrap();
        assert!(c.args.is_empty());
        let c = parse_strace_line("7 brk(NULL) = 0x004a4000").unwrap();
        assert_eq!(c.ret, Some(StraceRet::Value(0x4a4000)));
        let c = parse_strace_line(
            "7 prlimit64(0,RLIMIT_STACK,NULL,0x55d56da8) = 0 ({rlim_cur=8388608,rlim_max=-1})",
        )
        .unwrap();
        assert_eq!(c.ret, Some(StraceRet::Value(0)));
        assert_eq!(c.args.len(), 4);
        assert!(parse_strace_line("--- SIGSEGV {si_signo=SIGSEGV} ---").is_err());
        assert!(parse_strace_line("7 read(1,2").is_err());
    }

    #[test]
    fn strace_values() {
        assert_eq!(
            strace_value("mipsel", "O_RDWR|O_CREAT|O_TRUNC"),
            Some(0x302)
        );
        assert_eq!(
            strace_value("riscv64", "O_RDWR|O_CREAT|O_TRUNC"),
            Some(0x242)
        );
        assert_eq!(
            strace_value("mipsel", "MAP_PRIVATE|MAP_ANONYMOUS"),
            Some(0x802)
        );
        assert_eq!(strace_value("riscv64", "AT_FDCWD"), Some(-100));
        assert_eq!(strace_value("riscv64", "0644"), Some(0o644));
        assert_eq!(strace_value("riscv64", "000"), Some(0));
        assert_eq!(strace_value("riscv64", "(nil)"), Some(0));
        assert_eq!(
            strace_value("riscv64", "0x0000000055d56da8"),
            Some(0x55d56da8)
        );
        assert_eq!(strace_value("riscv64", "RLIMIT_STACK"), None);
        assert_eq!(strace_value("riscv64", "O_RDONLY|O_WEIRD"), None);
        assert_eq!(strace_value("riscv64", "\"x\""), None);
        assert!(printed_matches(-100, 0xffff_ff9c, 32, true));
        assert!(printed_matches(-100, u64::MAX - 99, 64, true));
        assert!(printed_matches(5, 0x1_0000_0005, 64, true));
        assert!(!printed_matches(5, 0x1_0000_0005, 64, false));
        assert!(!printed_matches(6, 5, 64, true));
    }

    fn ev(name: &str, ret: Option<i64>, args: [u64; 6], data: &[u8]) -> SyscallEvent {
        SyscallEvent {
            num: 1,
            name: name.into(),
            ret,
            args,
            total: data.len() as u64,
            data: data.to_vec(),
        }
    }

    #[test]
    fn strace_comparison() {
        let st: Vec<StraceCall> = [
            "9 openat(AT_FDCWD,\"f\",O_RDONLY) = 4",
            "9 getpid() = 9",
            "9 close(77) = -1 errno=9 (Bad file descriptor)",
            "9 exit_group(0)",
        ]
        .iter()
        .map(|l| parse_strace_line(l).unwrap())
        .collect();
        let good = vec![
            ev(
                "openat",
                Some(4),
                [(-100i64) as u64, 0x1000, 0, 0, 0, 0],
                b"f",
            ),
            ev("getpid", Some(20), [0; 6], b""),
            ev("close", Some(-9), [77, 0, 0, 0, 0, 0], b""),
            ev("exit_group", None, [0; 6], b""),
        ];
        let s = compare_strace("riscv64", 64, &st, 9, &good, 20).unwrap();
        assert_eq!((s.calls, s.results, s.paths, s.symbolic_args), (4, 3, 1, 2));
        let mut bad = good.clone();
        bad[0].data = b"g".to_vec();
        assert!(compare_strace("riscv64", 64, &st, 9, &bad, 20)
            .unwrap_err()
            .contains("path"));
        let mut bad = good.clone();
        bad[2].args[0] = 78;
        assert!(compare_strace("riscv64", 64, &st, 9, &bad, 20)
            .unwrap_err()
            .contains("argument 0"));
        let mut bad = good.clone();
        bad[2].ret = Some(-2);
        assert!(compare_strace("riscv64", 64, &st, 9, &bad, 20)
            .unwrap_err()
            .contains("result"));
        assert!(compare_strace("riscv64", 64, &st, 9, &good, 21).is_err());
        assert!(compare_strace("riscv64", 64, &st, 9, &good[..3], 20).is_err());
        let mut bad = good.clone();
        bad[0].args[2] = 1;
        assert!(compare_strace("riscv64", 64, &st, 9, &bad, 20).is_err());
    }

    #[test]
    fn execlog_with_registers() {
        let (_d, p) = tmp(
            "e.log",
            "0, 0x1062c, 0x22000ef, \"jal ra,34 # 0x1064e\", ra -> 0x0000000000010630, pc -> 0x000000000001064e, cycle -> 0x1\n\
             0, 0x1064e, 0x67197, \"sd a0, 8(sp)\", store, 0x7ff0, fp -> 0x0000000000000005\n\
             0, 0x10652, 0x1, \"nop\"\n",
        );
        let log = parse_execlog_regs(&p, |n| layout_index("riscv64", n)).unwrap();
        assert_eq!(log.pcs, vec![0x1062c, 0x1064e, 0x10652]);
        assert_eq!(log.disas[&0x1064e], "sd a0, 8(sp)");
        assert_eq!(log.changes[0], vec![(1, 0x10630)]);
        assert_eq!(log.changes[1], vec![(8, 5)]);
        assert!(log.other_regs.contains("pc") && log.other_regs.contains("cycle"));
        let states = states_from_changes(&[7; 32], &log.changes);
        assert_eq!(states.len(), 3);
        assert_eq!(states[0][1], 7);
        assert_eq!(states[1][1], 0x10630);
        assert_eq!((states[2][1], states[2][8]), (0x10630, 5));
    }

    #[test]
    fn cpu_logs() {
        let mut mips =
            String::from("pc=0x004006d0 HI=0x00000000 LO=0x00000000 ds 00e2 00000000 0\n");
        for b in (0..32).step_by(4) {
            mips.push_str(&format!(
                "GPR{b:02}: r0 {:08x} at {:08x} v0 {:08x} v1 {:08x}\n",
                b,
                b + 1,
                b + 2,
                b + 3
            ));
        }
        mips.push_str("CP0 Status  0x24000010 Cause   0x00000000 EPC    0x00000000\n");
        let (_d, p) = tmp("m.log", &mips);
        let s = parse_cpu_log(&p).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].pc, 0x4006d0);
        assert_eq!(s[0].regs, (0..32).collect::<Vec<u64>>());
        let mut rv = String::from(" pc       0000000000010670\n");
        for b in (0..32).step_by(4) {
            rv.push_str(&format!(
                " x{b}/a {:016x} x{}/b {:016x} x{}/c {:016x} x{}/d {:016x}\n",
                b * 2,
                b + 1,
                (b + 1) * 2,
                b + 2,
                (b + 2) * 2,
                b + 3,
                (b + 3) * 2
            ));
        }
        let (_d, p) = tmp("r.log", &rv);
        let s = parse_cpu_log(&p).unwrap();
        assert_eq!(s[0].pc, 0x10670);
        assert_eq!(s[0].regs, (0..32).map(|i| i * 2).collect::<Vec<u64>>());
        let (_d, p) = tmp("bad.log", " pc       0000000000010670\n x0/zero 0\n");
        assert!(parse_cpu_log(&p).is_err());
    }

    #[test]
    fn in_asm_and_once() {
        let (_d, p) = tmp(
            "a.log",
            "----------------\nIN: _start\n0x00000010:  addi\n0x00000014:  bnez\n\n\
             ----------------\nIN: \n0x00000014:  bnez\n\n\
             ----------------\nIN: \n0x00000018:  ret\n\n",
        );
        let tbs = parse_in_asm(&p).unwrap();
        assert_eq!(tbs, vec![vec![0x10, 0x14], vec![0x14], vec![0x18]]);
        // 10 14 | 14 (new block at 14) | 14 | 18
        let c = once_expectation(&tbs, &[0x10, 0x14, 0x14, 0x14, 0x18]).unwrap();
        assert_eq!((c[&0x10], c[&0x14], c[&0x18]), (1, 2, 1));
        assert!(once_expectation(&tbs, &[0x10, 0x14, 0x18]).is_err());
        assert!(once_expectation(&tbs, &[0x10, 0x14, 0x14]).is_err());
        assert!(is_subsequence(&[1, 3], &[1, 2, 3]).is_ok());
        assert!(is_subsequence(&[3, 1], &[1, 2, 3]).is_err());
    }

    #[test]
    fn syscall_insns() {
        assert!(is_syscall_insn("mipsel", 0x0000000c));
        assert!(!is_syscall_insn("mipsel", 0x03e00008));
        assert!(is_syscall_insn("riscv64", 0x00000073));
        assert!(!is_syscall_insn("riscv64", 0x00100073));
    }
}
