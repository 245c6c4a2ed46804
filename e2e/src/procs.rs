// SPDX-License-Identifier: GPL-2.0-or-later
//! Helpers for the tests of threads, processes, signals, dynamic linking
//! and misbehaving clients (`tests/processes.rs`):
//!
//! * [`Client`]: `cannoli-dump` with any options (`--split`, `--delay-us`,
//!   ...), and [`Summary`], its closing stderr line;
//! * [`Traced`] / [`run_traced`]: one guest run under `-cannoli` with extra
//!   QEMU options and environment (e.g. `-L`, `CANNOLI_CHUNK_KB`);
//! * [`run_plugin_retrying`]: a ground-truth plugin run, again while QEMU
//!   crashes in the plugin;
//! * [`parse_execlog_per_cpu`]: libexeclog's log of a multi-threaded guest,
//!   split by vCPU (its lines can be torn, see there);
//! * [`Streams`]: the `--split` directory's `streams.txt` and files;
//! * parsers for `cannoli-dump`'s `Y`, `G` and `M` lines;
//! * [`elf_symbols`]: a program's symbol table, read directly from the ELF.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::*;

// ---------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------

/// A running `cannoli-dump --listen 127.0.0.1:0 --out <tag>.dump <args>`.
pub struct Client {
    pub child: ChildGuard,
    /// The address it listens on (its first stdout line).
    pub addr: String,
    /// Its `--out` file.
    pub out: PathBuf,
    pub stderr_path: PathBuf,
    stdout_rest: Option<std::thread::JoinHandle<Vec<u8>>>,
}

impl Client {
    /// Starts the client with `args` after `--listen 127.0.0.1:0 --out
    /// <tag>.dump` and waits (at most 60 s) for its `listening` line.
    pub fn start(dir: &RunDir, tag: &str, args: &[&str]) -> Client {
        let DumpClient {
            child,
            addr,
            out,
            stderr_path,
            stdout_rest,
        } = DumpClient::start_args(dir, tag, args);
        Client {
            child,
            addr,
            out,
            stderr_path,
            stdout_rest,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its stderr so far.
    pub fn stderr(&self) -> String {
        read_text(&self.stderr_path)
    }

    /// Waits at most `limit` for it to exit: its status (`None` on time-out,
    /// after killing it) and its stderr.
    pub fn wait(&mut self, limit: Duration) -> (Option<ExitStatus>, String) {
        let st = self.child.wait_timeout(limit);
        if let Some(h) = self.stdout_rest.take() {
            let _ = h.join();
        }
        (st, self.stderr())
    }

    /// SIGKILLs it (and reaps it).
    pub fn kill_9(&mut self) {
        self.child.kill();
        if let Some(h) = self.stdout_rest.take() {
            let _ = h.join();
        }
    }
}

/// The client's closing line: `cannoli-dump: N connections, N events in N
/// chunks, N lost, N incomplete streams; ...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    pub connections: u64,
    pub events: u64,
    pub chunks: u64,
    pub lost: u64,
    pub incomplete: u64,
}

impl Summary {
    /// Finds and parses the summary line in the client's stderr.
    pub fn parse(stderr: &str) -> Result<Summary, String> {
        let line = stderr
            .lines()
            .find(|l| l.starts_with("cannoli-dump: ") && l.contains(" connections, "))
            .ok_or_else(|| {
                format!(
                    "no summary line in the client's stderr:\n{}",
                    tail(stderr, 20)
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

// ---------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------

/// `qemu-<arch> <common args> -cannoli libjitter_always.so prog args` (the
/// patched QEMU); add options with [`GuestCmd::qemu_arg`] (they go before
/// the program, after `-cannoli`).
pub fn traced_cmd(arch: &str, prog: &Path, args: &[&str]) -> GuestCmd {
    GuestCmd::new(arch, qemu_builds().qemu(arch), prog, args)
        .qemu_arg("-cannoli")
        .qemu_arg(jitter_lib())
}

/// Runs a ground-truth plugin on a multi-threaded guest, again (at most
/// `attempts` times) while QEMU dies of an internal SIGSEGV: QEMU 10.0's
/// libexeclog grows its per-vCPU array when a vCPU starts while other vCPUs
/// may still use pointers into the old one (`get_cpu` returns a pointer
/// after dropping its lock), and sometimes crashes when a guest creates a
/// thread. That is the ground truth failing, with plain QEMU too, not
/// cannoli. Returns the successful run and its log; panics if every attempt
/// crashed.
pub fn run_plugin_retrying(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    plugin: Plugin,
    prog: &Path,
    args: &[&str],
    attempts: usize,
) -> (GuestRun, PathBuf) {
    let mut crashes = Vec::new();
    for n in 0..attempts {
        let (run, log) = run_plugin(dir, &format!("{tag}-{n}"), arch, plugin, prog, args);
        let internal =
            run.status.code().is_none() && run.stderr_text().contains("QEMU internal SIGSEGV");
        if !internal {
            if !crashes.is_empty() {
                eprintln!(
                    "e2e: {tag}: QEMU with the {} plugin crashed in {} earlier attempt(s) (the upstream race)",
                    plugin.name(),
                    crashes.len()
                );
            }
            return (run, log);
        }
        let _ = fs::remove_file(&log);
        crashes.push(format!("{}: {}", run.status, tail(&run.stderr_text(), 2)));
    }
    panic!(
        "`{}` crashed inside QEMU in all {attempts} attempts:\n{}",
        plugin_cmd(arch, plugin, prog, args, Path::new("<log>")).display(),
        crashes.join("\n")
    )
}

/// One traced run.
pub struct Traced {
    pub guest: GuestRun,
    /// QEMU's wall time.
    pub elapsed: Duration,
    /// `None`: the client did not exit in time (it was killed).
    pub client_status: Option<ExitStatus>,
    pub client_stderr: String,
    /// The client's `--out` file.
    pub dump: PathBuf,
    /// The `--split` directory, if `split` was asked for.
    pub split: Option<PathBuf>,
}

impl Traced {
    /// The client's summary line.
    pub fn summary(&self) -> Result<Summary, String> {
        Summary::parse(&self.client_stderr)
    }

    /// Ok if the client exited 0 and reported nothing lost and no
    /// incomplete stream.
    pub fn client_ok(&self) -> Result<(), String> {
        let s = self.summary()?;
        if self.client_status.map(|s| s.success()) != Some(true) || s.lost != 0 || s.incomplete != 0
        {
            return Err(format!(
                "cannoli-dump exited with {:?}, {} events lost, {} incomplete streams\n--- its stderr ---\n{}",
                self.client_status,
                s.lost,
                s.incomplete,
                tail(&self.client_stderr, 20)
            ));
        }
        Ok(())
    }

    /// The streams of a `--split` run.
    pub fn streams(&self) -> Result<Streams, String> {
        Streams::read(self.split.as_deref().ok_or("not a --split run")?)
    }
}

/// Runs `cmd` (see [`traced_cmd`]) traced by a fresh `cannoli-dump
/// <client_args>` (plus `--split <tag>.split` if `split`), with
/// `CANNOLI_ADDR` added to QEMU's environment.
pub fn run_traced(
    dir: &RunDir,
    tag: &str,
    cmd: GuestCmd,
    client_args: &[&str],
    split: bool,
) -> Traced {
    let split_dir = dir.file(&format!("{tag}.split"));
    let split_str = split_dir.to_string_lossy().into_owned();
    let mut args: Vec<&str> = client_args.to_vec();
    if split {
        args.extend(["--split", &split_str]);
    }
    let mut client = Client::start(dir, tag, &args);
    let cmd = cmd.env("CANNOLI_ADDR", &client.addr);
    let start = Instant::now();
    let child = spawn_guest(dir, tag, &cmd);
    let guest = finish_guest(dir, tag, &cmd, child);
    let elapsed = start.elapsed();
    let (client_status, client_stderr) = client.wait(Duration::from_secs(60).min(timeout()));
    Traced {
        guest,
        elapsed,
        client_status,
        client_stderr,
        dump: client.out.clone(),
        split: split.then_some(split_dir),
    }
}

/// Exit code of a run, or a message naming the signal that killed it.
pub fn exit_code(st: &ExitStatus) -> Result<i32, String> {
    st.code().ok_or_else(|| format!("killed by a signal: {st}"))
}

// ---------------------------------------------------------------------------
// libexeclog with several vCPUs
// ---------------------------------------------------------------------------

/// libexeclog's log split by vCPU: the executed pcs of each vCPU, in order.
///
/// libexeclog prints each instruction's record and its newline with two
/// separate `qemu_plugin_outs` calls. Each call is written whole, but with
/// several vCPUs running at once another vCPU's record can come in between:
/// `R1 R2 \n \n` gives the line `R1R2` and an empty line. So the log is
/// parsed as a stream of records, ignoring the newlines: a record is
/// `<cpu>, 0x<pc>, 0x<opcode>, "<disas>"` then zero or more
/// `, load, 0x<addr>` / `, store, 0x<addr>`. An address printed right before
/// another record's cpu number runs into it (`0x0049a0183, 0x...`): the
/// plugin prints addresses with at least 8 digits, so a run of more than 8
/// digits is split after the 8th when what follows is a record (addresses
/// of these guests are below 2^32; a longer address is an error).
pub fn parse_execlog_per_cpu(path: &Path) -> Result<BTreeMap<u32, Vec<u64>>, String> {
    let text = fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text = String::from_utf8(text).map_err(|_| format!("{}: not UTF-8", path.display()))?;
    let mut per_cpu: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
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
    loop {
        while p < b.len() && b[p] == b'\n' {
            p += 1;
        }
        if p >= b.len() {
            break;
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
            if n < 8 {
                return Err(err(p, "memory address with fewer than 8 digits"));
            }
            if n == 8 || (n > 8 && record_start(p + 8) && !record_start(p + n)) {
                p += 8;
            } else {
                return Err(err(p, "memory address of more than 8 digits (ambiguous)"));
            }
        }
        per_cpu.entry(cpu).or_default().push(pc);
        // What follows: a newline, the end, or another record (torn line).
        if p < b.len() && b[p] != b'\n' && !record_start(p) {
            return Err(err(p, "unexpected text after a record"));
        }
    }
    Ok(per_cpu)
}

// ---------------------------------------------------------------------------
// --split output
// ---------------------------------------------------------------------------

/// One stream of a `--split` run (a line of `streams.txt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    /// Its file, in the split directory.
    pub file: PathBuf,
    pub pid: i32,
    pub ppid: i32,
    pub tid: i32,
    pub exe: String,
}

/// The streams of a `--split` run, in connection order.
#[derive(Debug, Clone)]
pub struct Streams(pub Vec<StreamInfo>);

impl Streams {
    pub fn read(dir: &Path) -> Result<Streams, String> {
        let index = dir.join("streams.txt");
        let text = fs::read_to_string(&index)
            .map_err(|e| format!("cannot read {}: {e}", index.display()))?;
        let mut v = Vec::new();
        for line in text.lines() {
            let f: Vec<&str> = line.splitn(9, ' ').collect();
            let ok =
                f.len() == 9 && f[1] == "pid" && f[3] == "ppid" && f[5] == "tid" && f[7] == "exe";
            if !ok {
                return Err(format!("{}: bad line {line:?}", index.display()));
            }
            let num = |s: &str| {
                s.parse::<i32>()
                    .map_err(|_| format!("{}: bad number in {line:?}", index.display()))
            };
            v.push(StreamInfo {
                file: dir.join(f[0]),
                pid: num(f[2])?,
                ppid: num(f[4])?,
                tid: num(f[6])?,
                exe: f[8].to_string(),
            });
        }
        Ok(Streams(v))
    }

    /// The streams of thread `tid` of process `pid`, in connection order.
    pub fn of(&self, pid: i32, tid: i32) -> Vec<&StreamInfo> {
        self.0
            .iter()
            .filter(|s| s.pid == pid && s.tid == tid)
            .collect()
    }

    /// A one-line-per-stream description, for messages.
    pub fn describe(&self) -> String {
        self.0
            .iter()
            .map(|s| {
                format!(
                    "  pid {} ppid {} tid {} exe {} ({})",
                    s.pid,
                    s.ppid,
                    s.tid,
                    s.exe,
                    s.file.display()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

// ---------------------------------------------------------------------------
// Rare event lines
// ---------------------------------------------------------------------------

/// A `Y` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyscallLine {
    pub num: u64,
    pub name: String,
    /// `None` for `-` (did not return).
    pub ret: Option<i64>,
    pub args: [u64; 6],
    pub total: u64,
    pub data: String,
}

fn hex_u64(s: &str) -> Result<u64, String> {
    u64::from_str_radix(s, 16).map_err(|_| format!("bad hex number {s:?}"))
}

impl SyscallLine {
    pub fn parse(line: &str) -> Result<SyscallLine, String> {
        let f: Vec<&str> = line.splitn(12, ' ').collect();
        if f.len() != 12 || f[0] != "Y" {
            return Err(format!("not a Y line: {line:?}"));
        }
        let ret = match f[3] {
            "-" => None,
            r => Some(match r.strip_prefix('-') {
                Some(m) => -(hex_u64(m)? as i64),
                None => hex_u64(r)? as i64,
            }),
        };
        let mut args = [0u64; 6];
        for (i, a) in args.iter_mut().enumerate() {
            *a = hex_u64(f[4 + i])?;
        }
        Ok(SyscallLine {
            num: f[1]
                .parse()
                .map_err(|_| format!("bad syscall number in {line:?}"))?,
            name: f[2].to_string(),
            ret,
            args,
            total: hex_u64(f[10])?,
            data: f[11].to_string(),
        })
    }
}

/// A `G` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalLine {
    pub signo: i32,
    pub code: i32,
    pub fault_addr: u64,
    /// `None` for `-` (the default action).
    pub handler: Option<u64>,
}

impl SignalLine {
    pub fn parse(line: &str) -> Result<SignalLine, String> {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() != 5 || f[0] != "G" {
            return Err(format!("not a G line: {line:?}"));
        }
        let dec = |s: &str| {
            s.parse::<i32>()
                .map_err(|_| format!("bad number {s:?} in {line:?}"))
        };
        Ok(SignalLine {
            signo: dec(f[1])?,
            code: dec(f[2])?,
            fault_addr: hex_u64(f[3])?,
            handler: match f[4] {
                "-" => None,
                h => Some(hex_u64(h)?),
            },
        })
    }
}

/// An `M` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapLine {
    pub base: u64,
    pub len: u64,
    /// `rwx` with `-` for a missing right.
    pub prot: String,
    pub anon: bool,
    pub offset: u64,
    /// `-` for none.
    pub path: String,
}

impl MapLine {
    pub fn parse(line: &str) -> Result<MapLine, String> {
        let f: Vec<&str> = line.splitn(7, ' ').collect();
        if f.len() != 7 || f[0] != "M" || !matches!(f[4], "anon" | "file") {
            return Err(format!("not an M line: {line:?}"));
        }
        Ok(MapLine {
            base: hex_u64(f[1])?,
            len: hex_u64(f[2])?,
            prot: f[3].to_string(),
            anon: f[4] == "anon",
            offset: hex_u64(f[5])?,
            path: f[6].to_string(),
        })
    }

    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr - self.base < self.len
    }
}

impl DumpTrace {
    /// The `Y` lines, parsed.
    pub fn syscalls(&self) -> Result<Vec<SyscallLine>, String> {
        self.other
            .iter()
            .filter(|l| l.starts_with("Y "))
            .map(|l| SyscallLine::parse(l))
            .collect()
    }
    /// The `G` lines, parsed.
    pub fn signals(&self) -> Result<Vec<SignalLine>, String> {
        self.other
            .iter()
            .filter(|l| l.starts_with("G "))
            .map(|l| SignalLine::parse(l))
            .collect()
    }
    /// The `M` lines, parsed.
    pub fn maps(&self) -> Result<Vec<MapLine>, String> {
        self.other
            .iter()
            .filter(|l| l.starts_with("M "))
            .map(|l| MapLine::parse(l))
            .collect()
    }
}

/// For two dumps of the same program from different runs: per `L`/`S` line,
/// whether its value differs (see [`volatile_values`]); an error if they
/// differ in anything else about the accesses.
pub fn dump_volatile(a: &DumpTrace, b: &DumpTrace) -> Result<Vec<bool>, String> {
    volatile_values(&a.mem, &b.mem)
}

/// A `G` line with the pcs of the `X` lines right before and right after
/// it (`None` at either end).
pub type SignalInContext = (SignalLine, Option<u64>, Option<u64>);

/// Each `G` line of a dump file with the pcs of the `X` lines right before
/// and right after it.
pub fn signals_in_context(dump: &Path) -> Result<Vec<SignalInContext>, String> {
    let f = File::open(dump).map_err(|e| format!("cannot open {}: {e}", dump.display()))?;
    let mut out: Vec<SignalInContext> = Vec::new();
    let mut last_x = None;
    let mut waiting: Vec<usize> = Vec::new();
    for line in BufReader::new(f).lines() {
        let line = line.map_err(|e| format!("reading {}: {e}", dump.display()))?;
        if let Some(pc) = line.strip_prefix("X ") {
            let pc = hex_u64(pc)?;
            for i in waiting.drain(..) {
                out[i].2 = Some(pc);
            }
            last_x = Some(pc);
        } else if line.starts_with("G ") {
            waiting.push(out.len());
            out.push((SignalLine::parse(&line)?, last_x, None));
        }
    }
    Ok(out)
}

/// Ok if the two outputs are equal, else both (their tails) in a message.
pub fn same_output(an: &str, a: &[u8], bn: &str, b: &[u8]) -> Result<(), String> {
    if a == b {
        return Ok(());
    }
    Err(format!(
        "{an} and {bn} outputs differ\n--- {an} ---\n{}\n--- {bn} ---\n{}",
        tail(&text(a), 15),
        tail(&text(b), 15)
    ))
}

// ---------------------------------------------------------------------------
// ELF symbols
// ---------------------------------------------------------------------------

/// The `.symtab` of a little-endian ELF file: name -> value (first wins).
pub fn elf_symbols(path: &Path) -> Result<HashMap<String, u64>, String> {
    let d = fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let bad = |what: &str| format!("{}: {what}", path.display());
    if d.len() < 64 || &d[..4] != b"\x7fELF" {
        return Err(bad("not an ELF file"));
    }
    if d[5] != 1 {
        return Err(bad("not little-endian"));
    }
    let is64 = match d[4] {
        1 => false,
        2 => true,
        _ => return Err(bad("bad ELF class")),
    };
    let rd = |off: usize, n: usize| -> Result<u64, String> {
        let s = d.get(off..off + n).ok_or_else(|| bad("truncated"))?;
        let mut v = 0u64;
        for (i, &x) in s.iter().enumerate() {
            v |= (x as u64) << (8 * i);
        }
        Ok(v)
    };
    let (shoff, shentsize, shnum) = if is64 {
        (
            rd(0x28, 8)? as usize,
            rd(0x3a, 2)? as usize,
            rd(0x3c, 2)? as usize,
        )
    } else {
        (
            rd(0x20, 4)? as usize,
            rd(0x2e, 2)? as usize,
            rd(0x30, 2)? as usize,
        )
    };
    // (type, offset, size, link, entsize) of section i
    let section = |i: usize| -> Result<(u64, usize, usize, usize, usize), String> {
        let o = shoff + i * shentsize;
        if is64 {
            Ok((
                rd(o + 4, 4)?,
                rd(o + 0x18, 8)? as usize,
                rd(o + 0x20, 8)? as usize,
                rd(o + 0x28, 4)? as usize,
                rd(o + 0x38, 8)? as usize,
            ))
        } else {
            Ok((
                rd(o + 4, 4)?,
                rd(o + 0x10, 4)? as usize,
                rd(o + 0x14, 4)? as usize,
                rd(o + 0x18, 4)? as usize,
                rd(o + 0x24, 4)? as usize,
            ))
        }
    };
    const SHT_SYMTAB: u64 = 2;
    let mut out = HashMap::new();
    for i in 0..shnum {
        let (ty, off, size, link, entsize) = section(i)?;
        if ty != SHT_SYMTAB || entsize == 0 {
            continue;
        }
        let (_, stroff, strsize, _, _) = section(link)?;
        let strtab = d
            .get(stroff..stroff + strsize)
            .ok_or_else(|| bad("truncated string table"))?;
        for k in 0..size / entsize {
            let o = off + k * entsize;
            let (name, value) = if is64 {
                (rd(o, 4)? as usize, rd(o + 8, 8)?)
            } else {
                (rd(o, 4)? as usize, rd(o + 4, 4)?)
            };
            if name == 0 || name >= strtab.len() {
                continue;
            }
            let end = strtab[name..]
                .iter()
                .position(|&c| c == 0)
                .map_or(strtab.len(), |e| name + e);
            let s = String::from_utf8_lossy(&strtab[name..end]).into_owned();
            out.entry(s).or_insert(value);
        }
    }
    if out.is_empty() {
        return Err(bad("no symbol table"));
    }
    Ok(out)
}

/// The value of symbol `name` in `path`.
pub fn elf_symbol(syms: &HashMap<String, u64>, path: &Path, name: &str) -> u64 {
    *syms
        .get(name)
        .unwrap_or_else(|| panic!("{}: no symbol {name}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
             1, 0x400638, 0x0, \"nop\"0, 0x400634, 0x1, \"x\"\n\n",
        )
        .unwrap();
        let m = parse_execlog_per_cpu(&p).unwrap();
        assert_eq!(m[&0], vec![0x400630, 0x400634]);
        assert_eq!(m[&1], vec![0x400634, 0x400638]);
        assert_eq!(m[&2], vec![0x10, 0x20]);
        fs::write(&p, "0, 0x10, 0x0, \"a\", load, 0x123\n").unwrap();
        assert!(parse_execlog_per_cpu(&p).is_err());
        fs::write(&p, "0, 0x10, 0x0, \"a\" junk\n").unwrap();
        assert!(parse_execlog_per_cpu(&p).is_err());
    }

    #[test]
    fn summary_line() {
        let s = Summary::parse(
            "x\ncannoli-dump: 3 connections, 51615 events in 6 chunks, 0 lost, 1 incomplete streams; \
             51615 lines to d in 0.487s (2 threads)\n",
        )
        .unwrap();
        assert_eq!(
            s,
            Summary {
                connections: 3,
                events: 51615,
                chunks: 6,
                lost: 0,
                incomplete: 1
            }
        );
        assert!(Summary::parse("nothing").is_err());
    }

    #[test]
    fn rare_lines() {
        let y = SyscallLine::parse("Y 4011 execve - 2b 2c 2d 0 0 0 28 \"/a b\"").unwrap();
        assert_eq!(
            (y.num, y.name.as_str(), y.ret, y.args[0], y.total),
            (4011, "execve", None, 0x2b, 0x28)
        );
        assert_eq!(y.data, "\"/a b\"");
        assert_eq!(
            SyscallLine::parse("Y 1 x -16 0 0 0 0 0 0 0 -").unwrap().ret,
            Some(-0x16)
        );
        let g = SignalLine::parse("G 11 1 1238 4009c8").unwrap();
        assert_eq!(
            g,
            SignalLine {
                signo: 11,
                code: 1,
                fault_addr: 0x1238,
                handler: Some(0x4009c8)
            }
        );
        assert_eq!(SignalLine::parse("G 16 -6 0 -").unwrap().handler, None);
        let m = MapLine::parse("M 2b300000 1dd000 r-x file 0 /usr/x/lib/libc.so.6").unwrap();
        assert!(m.contains(0x2b300000) && m.contains(0x2b4dcfff) && !m.contains(0x2b4dd000));
        assert_eq!(m.path, "/usr/x/lib/libc.so.6");
    }

    #[test]
    fn streams_file() {
        let d = RunDir::new();
        fs::write(
            d.file("streams.txt"),
            "dump-1-1.txt pid 1 ppid 0 tid 1 exe /a b\ndump-1-1.1.txt pid 1 ppid 0 tid 1 exe -\n",
        )
        .unwrap();
        let s = Streams::read(d.path()).unwrap();
        assert_eq!(s.0.len(), 2);
        assert_eq!(s.0[0].exe, "/a b");
        assert_eq!(s.of(1, 1).len(), 2);
    }
}
