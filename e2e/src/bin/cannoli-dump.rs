// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli-dump`: a cannoli client that writes the complete, ordered trace of
//! a guest to a text file, one event a line. The format (`X` executed
//! instruction, `L`/`S` load/store with its value, `R`/`B` registers, `Y`
//! syscall, `M`/`U`/`P` mappings, `G` signal) is defined, written and parsed
//! by the `e2e::dump` module, shared with the tests that read these files.
//!
//! The end-to-end tests compare the `X`, `L` and `S` lines against QEMU's own
//! plugins (libinsn, libexeclog, libmem).
//!
//! usage: `cannoli-dump [--listen ADDR] [--threads N] [--out FILE] [--only KINDS]
//! [--no-exec] [--split DIR] [--delay-us N] [--counts] [-v]`
//!
//! The first line on stdout is `listening <addr>` (flushed at once), so a
//! caller that asked for port 0 learns the real port before starting QEMU.
//!
//! By default the lines of every traced thread and process go to the one
//! output, each chunk's lines together. `--split DIR` writes each stream (one
//! guest thread of one process image) to its own file instead,
//! `DIR/dump-<pid>-<tid>.txt`; a later stream with the same pid and tid (the
//! program that thread `execve`d) goes to `DIR/dump-<pid>-<tid>.<k>.txt`,
//! k = 1, 2, ... `DIR/streams.txt` lists the streams in the order they
//! connected, one a line:
//!
//! ```text
//! <file> pid <pid> ppid <ppid> tid <tid> exe <path or ->
//! ```
//!
//! `--delay-us N` makes the client slow on purpose: it sleeps N microseconds
//! in each serial `trace` call (once per chunk), so QEMU has to wait for
//! free chunks (a test of back-pressure).
//!
//! Exit status: 0 when the trace is complete and every line was written; 3
//! (`cannoli::EXIT_INCOMPLETE`) when events were lost or writing the output
//! (or a `--split` file) failed, each said in one line on stderr; 1 when it
//! could not start; 2 for bad arguments.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cannoli::{Cannoli, ClientInfo, Signal, Syscall};
use e2e::dump::{
    push_counts, push_exec, push_map, push_mem, push_protect, push_regs, push_signal, push_syscall,
    push_unmap, split_file_name, stream_line, Counts, MemKind, Summary, ALL_KINDS, LISTENING,
};
use launch::{Output, OutputError};

/// Where `trace` writes; shared by every traced thread and process.
struct Shared {
    /// Keeps its first write error for the end (`launch::Output`): the
    /// events are still consumed, so that QEMU does not block. `None` once
    /// finished.
    w: Option<Output>,
    lines: u64,
}

static OUT: OnceLock<Mutex<Shared>> = OnceLock::new();
/// The first failure of a `--split` file or of `streams.txt` (the shared
/// output keeps its own).
static SPLIT_ERROR: Mutex<Option<OutputError>> = Mutex::new(None);
static VERBOSE: OnceLock<bool> = OnceLock::new();
/// Line kinds to print: bit `letter - 'A'` set for each.
static KINDS: OnceLock<u32> = OnceLock::new();

/// `--split DIR`: one file per stream (see the file header).
struct Split {
    dir: PathBuf,
    /// `streams.txt`; `None` once finished.
    index: Option<Output>,
    /// Streams seen so far per (pid, tid).
    seen: HashMap<(i32, i32), u32>,
}

static SPLIT: OnceLock<Mutex<Split>> = OnceLock::new();
/// Lines written to the `--split` files.
static SPLIT_LINES: AtomicU64 = AtomicU64::new(0);
/// `--delay-us`.
static DELAY: OnceLock<Duration> = OnceLock::new();
/// `--counts`: count each stream's X, L and S events instead of printing
/// them, and print one `C` line when the stream ends.
static COUNTS: OnceLock<bool> = OnceLock::new();

fn counting() -> bool {
    *COUNTS.get().unwrap_or(&false)
}

/// The file name of the next stream of (`pid`, `tid`) under `--split`.
fn split_name(seen: &mut HashMap<(i32, i32), u32>, pid: i32, tid: i32) -> String {
    let k = seen.entry((pid, tid)).or_insert(0);
    let name = split_file_name(pid, tid, *k);
    *k += 1;
    name
}

/// Opens this stream's `--split` file and lists it in `streams.txt`. A
/// file that cannot be created is recorded as a failure and the stream's
/// lines are dropped (`None`).
fn split_open(ci: &ClientInfo) -> Option<Output> {
    let mut sp = SPLIT.get()?.lock().unwrap_or_else(|e| e.into_inner());
    let name = split_name(&mut sp.seen, ci.pid, ci.tid);
    let path = sp.dir.join(&name);
    let line = stream_line(
        &name,
        ci.pid,
        ci.ppid,
        ci.tid,
        ci.exe.as_deref().unwrap_or(""),
    );
    if let Some(index) = sp.index.as_mut() {
        // Flushed at once: a reader may follow the index while tracing.
        let _ = writeln!(index, "{line}");
        let _ = index.flush();
    }
    match Output::create(&path, "the trace") {
        Ok(w) => Some(w),
        Err(e) => {
            record_split_error(OutputError {
                what: "the trace".into(),
                dest: e.path,
                error: io::Error::new(e.source.kind(), format!("cannot create it: {}", e.source)),
            });
            None
        }
    }
}

/// Keeps the first `--split` failure for the final report.
fn record_split_error(e: OutputError) {
    let mut first = SPLIT_ERROR.lock().unwrap_or_else(|e| e.into_inner());
    if first.is_none() {
        *first = Some(e);
    }
}

fn kind_bits(kinds: &str) -> Result<u32, String> {
    let mut bits = 0;
    for c in kinds.chars() {
        if !ALL_KINDS.contains(c) {
            return Err(format!("unknown line kind '{c}' (kinds: {ALL_KINDS})"));
        }
        bits |= 1 << (c as u32 - 'A' as u32);
    }
    Ok(bits)
}

/// True if lines of kind `k` (an uppercase letter) are printed.
#[inline(always)]
fn want(k: u8) -> bool {
    match KINDS.get() {
        Some(b) => b & (1 << (k - b'A')) != 0,
        None => true,
    }
}

/// One event, produced by the parallel callbacks and formatted by `trace`.
enum Ev {
    Exec(u64),
    Load {
        pc: u64,
        addr: u64,
        val: u64,
        sz: u8,
    },
    Store {
        pc: u64,
        addr: u64,
        val: u64,
        sz: u8,
    },
    /// A 16-byte access (boxed: rare, and it would make every event
    /// larger).
    Wide(Box<Wide>),
    /// A rare event's whole line (with its newline), formatted in parallel.
    Line(Box<[u8]>),
}

struct Wide {
    kind: MemKind,
    pc: u64,
    addr: u64,
    val: u128,
    sz: u8,
}

/// Appends the lines of `trace` to `buf`; with `counts`, counts the `X`,
/// `L` and `S` events there instead.
fn format_events(buf: &mut Vec<u8>, trace: &[Ev], counts: Option<&mut Counts>) {
    if let Some(c) = counts {
        for ev in trace {
            match ev {
                Ev::Exec(_) => c.exec += 1,
                Ev::Load { .. } => c.loads += 1,
                Ev::Store { .. } => c.stores += 1,
                Ev::Wide(w) if w.kind == MemKind::Load => c.loads += 1,
                Ev::Wide(_) => c.stores += 1,
                Ev::Line(l) => buf.extend_from_slice(l),
            }
        }
        return;
    }
    for ev in trace {
        match ev {
            &Ev::Exec(pc) => push_exec(buf, pc),
            &Ev::Load { pc, addr, val, sz } => {
                push_mem(buf, MemKind::Load, pc, addr, sz, val as u128)
            }
            &Ev::Store { pc, addr, val, sz } => {
                push_mem(buf, MemKind::Store, pc, addr, sz, val as u128)
            }
            Ev::Wide(w) => push_mem(buf, w.kind, w.pc, w.addr, w.sz, w.val),
            Ev::Line(l) => buf.extend_from_slice(l),
        }
    }
}

struct Dump {
    buf: Vec<u8>,
    /// This stream's own file under `--split` (`None` without `--split`,
    /// or if it could not be created).
    split: Option<Output>,
    /// Under `--counts`: this stream's events so far.
    counts: Option<Counts>,
}

impl Dump {
    /// Writes `buf`, `lines` lines, to this stream's file or the output.
    /// (`Output` keeps write errors for the end.)
    fn emit(split: &mut Option<Output>, buf: &[u8], lines: u64) {
        if SPLIT.get().is_some() {
            if let Some(w) = split {
                let _ = w.write_all(buf);
            }
            SPLIT_LINES.fetch_add(lines, Ordering::Relaxed);
            return;
        }
        let mut out = OUT
            .get()
            .expect("output initialised")
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(w) = out.w.as_mut() {
            let _ = w.write_all(buf);
        }
        out.lines += lines;
    }
}

impl Drop for Dump {
    fn drop(&mut self) {
        if let Some(c) = self.counts.take() {
            let mut b = Vec::with_capacity(64);
            push_counts(&mut b, &c);
            b.push(b'\n');
            Dump::emit(&mut self.split, &b, 1);
        }
        if let Some(Err(e)) = self.split.take().map(Output::finish) {
            record_split_error(e);
        }
    }
}

/// Formats one rare event's line with `f` and queues it.
#[inline]
fn line(trace: &mut Vec<Ev>, f: impl FnOnce(&mut Vec<u8>)) {
    let mut b = Vec::with_capacity(64);
    f(&mut b);
    b.push(b'\n');
    trace.push(Ev::Line(b.into_boxed_slice()));
}

fn reg_values<'a>(ci: &'a ClientInfo, regs: &'a [u8]) -> impl Iterator<Item = u64> + 'a {
    ci.reg_values(regs).map(|(_, v)| v)
}

/// A 16-byte access, if its line kind (`L`/`S`) is wanted. Boxed: wide
/// accesses are rare, and `Ev` stays small for the common ones.
fn push_wide(trace: &mut Vec<Ev>, kind: MemKind, pc: u64, addr: u64, val: u128, sz: u8) {
    let letter = if kind == MemKind::Load { b'L' } else { b'S' };
    if want(letter) {
        trace.push(Ev::Wide(Box::new(Wide {
            kind,
            pc,
            addr,
            val,
            sz,
        })));
    }
}

impl Cannoli for Dump {
    type Trace = Ev;
    /// The thread's hello, for its register layout.
    type TidContext = ClientInfo;
    type PidContext = ();

    fn init_pid(ci: &ClientInfo) -> Arc<Self::PidContext> {
        if *VERBOSE.get().unwrap_or(&false) {
            eprintln!(
                "cannoli-dump: process pid {} ppid {} arch {} ({}-bit, {}) exe {}",
                ci.pid,
                ci.ppid,
                ci.arch,
                ci.guest_bits,
                if ci.big_endian {
                    "big-endian"
                } else {
                    "little-endian"
                },
                ci.exe.as_deref().unwrap_or("?"),
            );
            eprintln!(
                "cannoli-dump: {} registers of {} bytes ({}), {} syscall names",
                ci.regs.count,
                ci.regs.bytes,
                ci.regs.names.join(" "),
                ci.syscall_names.len()
            );
        }
        Arc::new(())
    }

    fn init_tid(_pid: &Self::PidContext, ci: &ClientInfo) -> (Self, Self::TidContext) {
        if *VERBOSE.get().unwrap_or(&false) {
            eprintln!("cannoli-dump: thread tid {} of pid {}", ci.tid, ci.pid);
        }
        (
            Dump {
                buf: Vec::with_capacity(1 << 16),
                split: split_open(ci),
                counts: counting().then(|| Counts {
                    pid: ci.pid,
                    tid: ci.tid,
                    ..Counts::default()
                }),
            },
            ci.clone(),
        )
    }

    #[inline]
    fn exec(_pid: &(), _tid: &ClientInfo, pc: u64, trace: &mut Vec<Ev>) {
        if want(b'X') {
            trace.push(Ev::Exec(pc));
        }
    }

    #[inline]
    fn read(
        _pid: &(),
        _tid: &ClientInfo,
        pc: u64,
        addr: u64,
        val: u64,
        sz: u8,
        trace: &mut Vec<Ev>,
    ) {
        if want(b'L') {
            trace.push(Ev::Load { pc, addr, val, sz });
        }
    }

    #[inline]
    fn write(
        _pid: &(),
        _tid: &ClientInfo,
        pc: u64,
        addr: u64,
        val: u64,
        sz: u8,
        trace: &mut Vec<Ev>,
    ) {
        if want(b'S') {
            trace.push(Ev::Store { pc, addr, val, sz });
        }
    }

    #[inline]
    fn read_wide(
        _pid: &(),
        _tid: &ClientInfo,
        pc: u64,
        addr: u64,
        val: u128,
        sz: u8,
        trace: &mut Vec<Ev>,
    ) {
        push_wide(trace, MemKind::Load, pc, addr, val, sz);
    }

    #[inline]
    fn write_wide(
        _pid: &(),
        _tid: &ClientInfo,
        pc: u64,
        addr: u64,
        val: u128,
        sz: u8,
        trace: &mut Vec<Ev>,
    ) {
        push_wide(trace, MemKind::Store, pc, addr, val, sz);
    }

    fn regs(_pid: &(), ci: &ClientInfo, pc: u64, regs: &[u8], trace: &mut Vec<Ev>) {
        if want(b'R') {
            line(trace, |b| push_regs(b, pc, None, reg_values(ci, regs)));
        }
    }

    fn branch(_pid: &(), ci: &ClientInfo, pc: u64, branch: bool, regs: &[u8], trace: &mut Vec<Ev>) {
        if want(b'B') {
            line(trace, |b| {
                push_regs(b, pc, Some(branch), reg_values(ci, regs))
            });
        }
    }

    fn syscall(_pid: &(), _tid: &ClientInfo, sc: &Syscall<'_>, trace: &mut Vec<Ev>) {
        if want(b'Y') {
            line(trace, |b| {
                push_syscall(b, sc.num, sc.name, sc.ret, &sc.args, sc.data_total, sc.data)
            });
        }
    }

    fn mmap(
        _pid: &(),
        _tid: &ClientInfo,
        base: u64,
        len: u64,
        anon: bool,
        read: bool,
        write: bool,
        exec: bool,
        path: &str,
        offset: u64,
        trace: &mut Vec<Ev>,
    ) {
        if want(b'M') {
            line(trace, |b| {
                push_map(b, base, len, (read, write, exec), anon, offset, path)
            });
        }
    }

    fn munmap(_pid: &(), _tid: &ClientInfo, base: u64, len: u64, trace: &mut Vec<Ev>) {
        if want(b'U') {
            line(trace, |b| push_unmap(b, base, len));
        }
    }

    fn mprotect(
        _pid: &(),
        _tid: &ClientInfo,
        base: u64,
        len: u64,
        read: bool,
        write: bool,
        exec: bool,
        trace: &mut Vec<Ev>,
    ) {
        if want(b'P') {
            line(trace, |b| push_protect(b, base, len, (read, write, exec)));
        }
    }

    fn signal(_pid: &(), _tid: &ClientInfo, sig: &Signal, trace: &mut Vec<Ev>) {
        if want(b'G') {
            line(trace, |b| {
                push_signal(b, sig.signo, sig.code, sig.fault_addr, sig.handler)
            });
        }
    }

    fn trace(&mut self, _pid: &(), _tid: &ClientInfo, trace: &[Ev]) {
        if trace.is_empty() {
            return;
        }
        if let Some(&d) = DELAY.get() {
            if !d.is_zero() {
                std::thread::sleep(d);
            }
        }
        let buf = &mut self.buf;
        buf.clear();
        format_events(buf, trace, self.counts.as_mut());
        let lines = if self.counts.is_some() {
            buf.iter().filter(|&&c| c == b'\n').count() as u64
        } else {
            trace.len() as u64
        };
        if !buf.is_empty() {
            Dump::emit(&mut self.split, buf, lines);
        }
    }
}

struct Args {
    listen: String,
    threads: usize,
    out: String,
    verbose: bool,
    /// `KINDS` bits.
    kinds: u32,
    split: Option<String>,
    delay_us: u64,
    counts: bool,
    /// `--record FILE`: also write the run to this recording.
    record: Option<PathBuf>,
    /// `--replay FILE`: dump this recording instead of listening.
    replay: Option<PathBuf>,
}

const USAGE: &str = "\
usage: cannoli-dump [--listen ADDR] [--threads N] [--out FILE|-] [--only KINDS] [--no-exec]
                    [--split DIR] [--delay-us N] [--counts] [--record FILE | --replay FILE] [-v]
  --listen ADDR   address to listen on (default 127.0.0.1:0 = any free port)
  --threads N     worker threads for the parallel callbacks (default: number of cpus)
  --out FILE      where to write the trace, '-' for stdout (default -)
  --only KINDS    print only lines of these kinds (letters of XLSRBYMUPG; default all)
  --no-exec       do not print X lines
  --split DIR     write each traced thread's lines to DIR/dump-<pid>-<tid>.txt instead
                  (DIR/dump-<pid>-<tid>.<k>.txt for the k-th later one, after an execve),
                  and list them in DIR/streams.txt in connection order
  --delay-us N    sleep N microseconds per chunk in the serial phase (a slow client)
  --counts        count each stream's X, L and S events instead of printing them,
                  and print 'C <pid> <tid> <exec> <loads> <stores>' when it ends
  --record FILE   also write the run, as it streams, to the recording FILE
  --replay FILE   dump the recording FILE (made by --record or `cannoli record`) instead
                  of listening: the same lines as the live run
  -v, --verbose   log every traced process and thread to stderr
Line kinds: X exec, L load, S store, R registers, B branch registers,
Y syscall, M mmap, U munmap, P mprotect, G signal, C counts (formats: e2e::dump).
Prints 'listening <addr>' as the first line on stdout, then serves until the
first traced process and all its children have exited.";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        listen: "127.0.0.1:0".to_string(),
        threads: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        out: "-".to_string(),
        verbose: false,
        kinds: kind_bits(ALL_KINDS).unwrap(),
        split: None,
        delay_us: 0,
        counts: false,
        record: None,
        replay: None,
    };
    let mut no_exec = false;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => it.next().ok_or_else(|| format!("{name} needs a value")),
            }
        };
        match name.as_str() {
            "--listen" | "-l" => args.listen = value(&name)?,
            "--threads" | "-t" => {
                let v = value(&name)?;
                args.threads =
                    v.parse().ok().filter(|&n: &usize| n > 0).ok_or_else(|| {
                        format!("--threads: expected a positive integer, got '{v}'")
                    })?;
            }
            "--out" | "-o" => args.out = value(&name)?,
            "--only" => {
                args.kinds = kind_bits(&value(&name)?).map_err(|e| format!("--only: {e}"))?
            }
            "--no-exec" => no_exec = true,
            "--split" => args.split = Some(value(&name)?),
            "--delay-us" => {
                let v = value(&name)?;
                args.delay_us = v.parse().map_err(|_| {
                    format!("--delay-us: expected a number of microseconds, got '{v}'")
                })?;
            }
            "--counts" => args.counts = true,
            "--record" => args.record = Some(value(&name)?.into()),
            "--replay" => args.replay = Some(value(&name)?.into()),
            "--verbose" | "-v" => args.verbose = true,
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument '{arg}'")),
        }
    }
    if no_exec {
        args.kinds &= !kind_bits("X").unwrap();
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cannoli-dump: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let _ = VERBOSE.set(args.verbose);
    let _ = KINDS.set(args.kinds);
    let _ = DELAY.set(Duration::from_micros(args.delay_us));
    let _ = COUNTS.set(args.counts);
    if let Some(dir) = &args.split {
        let dir = PathBuf::from(dir);
        let index = dir.join("streams.txt");
        let made = std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))
            .and_then(|_| Output::create(&index, "the stream index").map_err(|e| e.to_string()));
        match made {
            Ok(f) => {
                let _ = SPLIT.set(Mutex::new(Split {
                    dir,
                    index: Some(f),
                    seen: HashMap::new(),
                }));
            }
            Err(e) => {
                eprintln!("cannoli-dump: {e}");
                return ExitCode::from(1);
            }
        }
    }

    // Open the output first so a bad path fails before anyone connects.
    let w = if args.out == "-" {
        Output::stdout("the trace")
    } else {
        match Output::create(args.out.as_ref(), "the trace") {
            Ok(w) => w,
            Err(e) => {
                eprintln!("cannoli-dump: {e}");
                return ExitCode::from(1);
            }
        }
    };

    let _ = OUT.set(Mutex::new(Shared {
        w: Some(w),
        lines: 0,
    }));
    let start = Instant::now();
    let result = match &args.replay {
        Some(path) => match cannoli::replay::<Dump>(path, args.threads) {
            Ok(r) => Ok(r.stats),
            Err(e) => {
                eprintln!("cannoli-dump: {e}");
                return ExitCode::from(1);
            }
        },
        None => match live(&args) {
            Ok(r) => r,
            Err(code) => return code,
        },
    };
    let secs = start.elapsed().as_secs_f64();
    finish(&args, result, secs)
}

/// Serves a live run (and records it with `--record`). `Err`: it could
/// not start, said on stderr.
fn live(args: &Args) -> Result<Result<cannoli::Stats, cannoli::Error>, ExitCode> {
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("cannoli-dump: {e}");
        ExitCode::from(1)
    };
    let mut server = cannoli::bind_by_hand_at(&args.listen).map_err(|e| fail(&e))?;
    let writer = match &args.record {
        Some(path) => {
            let info = cannoli::recording::Info {
                writer: env!("CARGO_PKG_VERSION").into(),
                hooks: cannoli::recording::Hooks::preset("custom"),
                command: Vec::new(),
                guest: None,
                started_unix_ns: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
            };
            let w =
                cannoli::recording::Writer::create(path, &info, cannoli::recording::DEFAULT_LEVEL)
                    .map_err(|e| fail(&format!("cannot create {}: {e}", path.display())))?;
            let w = Arc::new(w);
            server = server.tee(w.clone());
            Some(w)
        }
        None => None,
    };
    {
        let mut stdout = io::stdout().lock();
        let ok = writeln!(stdout, "{LISTENING}{}", server.addr()).and_then(|_| stdout.flush());
        if let Err(e) = ok {
            return Err(fail(&format!("cannot write to stdout: {e}")));
        }
    }
    let result = server.run::<Dump>(args.threads);
    if let (Some(w), Ok(st)) = (&writer, &result) {
        let exit = cannoli::recording::Exit {
            status: None,
            refused_connections: st.refused_connections,
            missing_processes: st.missing_processes,
            strangers: st.strangers,
            end_ns: w.now_ns(),
        };
        if let Err(e) = w.finish(&exit) {
            eprintln!("cannoli-dump: writing {} failed: {e}", w.path().display());
            return Err(ExitCode::from(cannoli::EXIT_INCOMPLETE as u8));
        }
    }
    Ok(result)
}

/// The summary, the output's errors and the exit status.
fn finish(args: &Args, result: Result<cannoli::Stats, cannoli::Error>, secs: f64) -> ExitCode {
    let mut out = OUT.get().unwrap().lock().unwrap_or_else(|e| e.into_inner());
    let mut failed: Vec<OutputError> = Vec::new();
    if let Some(Err(e)) = out.w.take().map(Output::finish) {
        failed.push(e);
    }
    if let Some(sp) = SPLIT.get() {
        let index = sp.lock().unwrap_or_else(|e| e.into_inner()).index.take();
        if let Some(Err(e)) = index.map(Output::finish) {
            failed.push(e);
        }
    }
    if let Some(e) = SPLIT_ERROR.lock().unwrap_or_else(|e| e.into_inner()).take() {
        failed.push(e);
    }
    let stats = match result {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannoli-dump: {e}");
            for f in &failed {
                f.report("cannoli-dump");
            }
            return ExitCode::from(1);
        }
    };
    let split_dest;
    let dest = match &args.split {
        Some(dir) => {
            out.lines += SPLIT_LINES.load(Ordering::Relaxed);
            split_dest = format!("{dir}/dump-*.txt");
            &split_dest
        }
        None if args.out == "-" => "stdout",
        None => &args.out,
    };
    let summary = Summary {
        connections: stats.connections,
        events: stats.events,
        chunks: stats.chunks,
        lost: stats.lost_events,
        incomplete: stats.incomplete_streams,
    };
    eprintln!("{}", summary.line(out.lines, dest, secs, args.threads));
    let mut code = ExitCode::SUCCESS;
    for f in &failed {
        code = ExitCode::from(f.report("cannoli-dump") as u8);
    }
    if !stats.is_complete() {
        eprintln!(
            "cannoli-dump: the trace is incomplete: {}",
            stats.loss_summary()
        );
        code = ExitCode::from(cannoli::EXIT_INCOMPLETE as u8);
    }
    code
}

// The crate root's modules resolve beside it, so the tests' file is named.
#[cfg(test)]
#[path = "cannoli-dump/tests.rs"]
mod tests;
