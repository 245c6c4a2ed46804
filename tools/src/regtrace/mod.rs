// SPDX-License-Identifier: GPL-2.0-or-later
//! Prints, for every executed guest instruction, the general purpose
//! registers it changed, by the guest's names:
//!
//! ```text
//! == pid 4242 tid 4242 ==
//! registers at 0x004006d0: sp=2b2ab870
//! 0x004006d0
//! 0x004006d4  ra: 0 -> 4006dc
//! 0x004006dc  gp: 0 -> a0000
//! 0x004006e0  gp: a0000 -> 9a5c4
//! ...
//! 0x0040ab14  (end of trace)
//! ```
//!
//! The hook library asks for `HookType::Register`: QEMU reports the
//! registers *before* each instruction runs, so what an instruction changed
//! shows in the registers of the next one, and the line of an instruction is
//! written once the next one arrives (the last one of a thread has nothing
//! after it). Values are hex, masked to the guest's register width. The
//! program counter is not a general purpose register and is not shown as a
//! change: ARM keeps it as r15 among the others (`pc` in the layout), but
//! QEMU writes it there only when a block ends, so it is left out.
//!
//! `--range LO-HI` and `--func SYMBOL` restrict the trace to some code
//! (decided at translation time, inside QEMU: the rest runs at full speed).
//! Changes are then those since the previous traced instruction: an
//! instruction that calls out of the range is shown with everything the
//! call changed. A recording (`--replay FILE`, made with registers at every
//! instruction) holds every instruction, so there the client drops those
//! outside the ranges itself, and prints what a live run would have.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use cannoli::recording::{Needs, RegsAt};
use cannoli::wire::parse_hex;
use cannoli::{Cannoli, ClientInfo};
use object::{Object, ObjectKind, ObjectSymbol, SymbolKind};

/// The environment variable the hook library reads its ranges from.
const RANGES_ENV: &str = "CANNOLI_REGTRACE_RANGES";

/// The environment variable naming the hook library's plan file (a
/// position-independent program's `--func`).
const PLAN_ENV: &str = "CANNOLI_REGTRACE_PLAN";

/// One line for `--help` and the `cannoli` command's list.
pub const ABOUT: &str =
    "Prints each executed instruction and the general purpose registers it changed, by name";

/// The command line of `regtrace`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Write the trace to FILE (default: stdout, shared with the program's
    /// own output)
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Only instructions in [LO, HI) (hex; repeatable)
    #[arg(long = "range", value_name = "LO-HI", value_parser = parse_range)]
    pub ranges: Vec<(u64, u64)>,
    /// Only the function SYMBOL of PROGRAM's symbol table (also of a
    /// position-independent one, placed as it runs; repeatable)
    #[arg(long = "func", value_name = "SYMBOL")]
    pub funcs: Vec<String>,
    /// Only instructions that changed a register
    #[arg(long)]
    pub changed: bool,
    /// Worker threads per guest thread: by default one per core beyond QEMU's thread, 2 to 16
    #[arg(long, value_name = "N", default_value_t = cannoli::default_workers(), value_parser = crate::args::threads)]
    pub threads: usize,
    /// Read a recording made by `cannoli record` (with registers at every
    /// instruction) instead of running a program; --func then looks in the
    /// recorded program's symbol table
    #[arg(long, value_name = "FILE", conflicts_with = "program")]
    pub replay: Option<PathBuf>,
    /// The program to run under the patched QEMU (-cannoli libregtrace.so),
    /// and its arguments; exits with its status. Without one (and without
    /// --replay), listens on $CANNOLI_ADDR for a QEMU started separately
    #[arg(value_name = "PROGRAM", trailing_var_arg = true)]
    pub program: Vec<OsString>,
}

/// What a chunk's parallel phase hands to the serial phase.
enum Item {
    /// The chunk's first instruction: its pc and registers.
    Head { pc: u64, regs: Vec<u64> },
    /// The lines of the chunk's instructions but the last, each written
    /// when the following instruction's registers arrived.
    Text {
        buf: String,
        lines: u64,
        changed: u64,
    },
    /// The chunk's last instruction (its line needs the next chunk).
    Tail { pc: u64, regs: Vec<u64> },
}

/// One run of regtrace: what [`main`] builds from the command line and
/// hands to the run (each process's [`Pid`] holds it), and what it counts,
/// which `main` reports after the run.
struct Run {
    /// --changed: print only the instructions that changed a register.
    changed_only: bool,
    out: Mutex<Out>,
    /// --range and --func of a replay (a live run's hook library already
    /// left the rest out), resolved by the first process.
    replay: Option<ReplayRanges>,
    resolved: OnceLock<Arc<[(u64, u64)]>>,
    insns: AtomicU64,
    changed: AtomicU64,
    threads: AtomicU64,
}

/// Where lines go, and which thread wrote last (a header when it changes).
struct Out {
    /// Keeps its first write error for the end (see `launch::Output`);
    /// `None` once finished.
    w: Option<launch::Output>,
    last: Option<(i32, i32)>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes `text` for thread (pid, tid). After a write error (or a closed
/// pipe) nothing more is written, but the rest of the trace is still
/// consumed, so that QEMU does not block; the error is reported at the end.
fn emit(run: &Run, pid: i32, tid: i32, text: &str) {
    let mut guard = lock(&run.out);
    let o = &mut *guard;
    let Some(w) = o.w.as_mut().filter(|w| w.is_writing()) else {
        return;
    };
    if text.is_empty() {
        return;
    }
    // `Output` keeps its errors for the end.
    if o.last != Some((pid, tid)) {
        o.last = Some((pid, tid));
        let _ = writeln!(w, "== pid {pid} tid {tid} ==");
    }
    let _ = w.write_all(text.as_bytes());
}

/// Per guest thread: the register layout.
struct ThreadRegs {
    names: Vec<String>,
    /// Shown: all but the program counter (ARM's r15).
    shown: Vec<bool>,
    mask: u64,
    /// Hex digits of a pc.
    pc_digits: usize,
    /// --changed (see [`Run`]).
    changed_only: bool,
}

impl ThreadRegs {
    fn value(&self, regs: &[u8], i: usize) -> u64 {
        u64::from_le_bytes(regs[i * 8..i * 8 + 8].try_into().unwrap()) & self.mask
    }

    fn count(&self, regs: &[u8]) -> usize {
        (regs.len() / 8).min(self.names.len())
    }

    /// The line of the instruction at `pc` whose registers were `old` before
    /// and `new` after it. Returns whether it changed any.
    fn line(&self, buf: &mut String, pc: u64, old: &[u64], new: impl Fn(usize) -> u64) -> bool {
        let start = buf.len();
        let _ = write!(buf, "{:#0w$x}", pc, w = self.pc_digits + 2);
        let mut changed = false;
        for (i, &o) in old.iter().enumerate() {
            let n = new(i);
            if n != o && self.shown.get(i) == Some(&true) {
                buf.push_str(if changed { ", " } else { "  " });
                let _ = write!(buf, "{}: {o:x} -> {n:x}", self.names[i]);
                changed = true;
            }
        }
        if !changed && self.changed_only {
            buf.truncate(start);
        } else {
            buf.push('\n');
        }
        changed
    }
}

/// Per guest thread, serial phase: the last instruction seen.
struct Tracer {
    run: Arc<Run>,
    pid: i32,
    tid: i32,
    layout: Arc<ThreadRegs>,
    pending: Option<(u64, Vec<u64>)>,
    insns: u64,
    changed: u64,
}

impl Cannoli for Tracer {
    type Trace = Item;
    type TidContext = Arc<ThreadRegs>;
    type PidContext = Pid;

    fn init_pid(ci: &ClientInfo) -> Arc<Pid> {
        let run = ci.expect_state::<Run>();
        Arc::new(Pid {
            filter: Filter::of(&run, ci),
            run,
        })
    }

    fn init_tid(pid: &Pid, ci: &ClientInfo) -> (Tracer, Arc<ThreadRegs>) {
        pid.run.threads.fetch_add(1, Ordering::Relaxed);
        let bytes = ci.regs.bytes;
        let layout = Arc::new(ThreadRegs {
            names: ci.regs.names.clone(),
            shown: ci.regs.names.iter().map(|n| n != "pc").collect(),
            mask: if (1..8).contains(&bytes) {
                (1u64 << (bytes * 8)) - 1
            } else {
                u64::MAX
            },
            pc_digits: if ci.guest_bits <= 32 { 8 } else { 16 },
            changed_only: pid.run.changed_only,
        });
        (
            Tracer {
                run: pid.run.clone(),
                pid: ci.pid,
                tid: ci.tid,
                layout: layout.clone(),
                pending: None,
                insns: 0,
                changed: 0,
            },
            layout,
        )
    }

    fn regs(p: &Pid, l: &Arc<ThreadRegs>, pc: u64, regs: &[u8], trace: &mut Vec<Item>) {
        if !p.filter.traces(pc) {
            return;
        }
        let n = l.count(regs);
        if trace.is_empty() {
            let v: Vec<u64> = (0..n).map(|i| l.value(regs, i)).collect();
            trace.push(Item::Head {
                pc,
                regs: v.clone(),
            });
            trace.push(Item::Text {
                buf: String::new(),
                lines: 0,
                changed: 0,
            });
            trace.push(Item::Tail { pc, regs: v });
            return;
        }
        let [_, Item::Text {
            buf,
            lines,
            changed,
        }, Item::Tail {
            pc: tpc,
            regs: tregs,
        }] = &mut trace[..]
        else {
            unreachable!("a chunk's trace is head, text, tail")
        };
        tregs.resize(n, 0);
        if l.line(buf, *tpc, tregs, |i| l.value(regs, i)) {
            *changed += 1;
        }
        *lines += 1;
        *tpc = pc;
        for (i, r) in tregs.iter_mut().enumerate() {
            *r = l.value(regs, i);
        }
    }

    fn trace(&mut self, _pid: &Pid, _l: &Arc<ThreadRegs>, trace: &[Item]) {
        let mut s = String::new();
        for item in trace {
            match item {
                Item::Head { pc, regs } => match &self.pending {
                    Some((ppc, pregs)) => {
                        self.insns += 1;
                        if self
                            .layout
                            .line(&mut s, *ppc, pregs, |i| regs.get(i).copied().unwrap_or(0))
                        {
                            self.changed += 1;
                        }
                    }
                    None => {
                        let _ = write!(
                            s,
                            "registers at {:#0w$x}:",
                            pc,
                            w = self.layout.pc_digits + 2
                        );
                        for (i, v) in regs.iter().enumerate() {
                            if *v != 0 && self.layout.shown.get(i) == Some(&true) {
                                let _ = write!(s, " {}={v:x}", self.layout.names[i]);
                            }
                        }
                        s.push('\n');
                    }
                },
                Item::Text {
                    buf,
                    lines,
                    changed,
                } => {
                    s.push_str(buf);
                    self.insns += lines;
                    self.changed += changed;
                }
                Item::Tail { pc, regs } => self.pending = Some((*pc, regs.clone())),
            }
        }
        emit(&self.run, self.pid, self.tid, &s);
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if let Some((pc, _)) = self.pending.take() {
            self.insns += 1;
            let line = format!(
                "{:#0w$x}  (end of trace)\n",
                pc,
                w = self.layout.pc_digits + 2
            );
            emit(&self.run, self.pid, self.tid, &line);
        }
        self.run.insns.fetch_add(self.insns, Ordering::Relaxed);
        self.run.changed.fetch_add(self.changed, Ordering::Relaxed);
    }
}

/// The ranges the client itself keeps instructions of. Empty in a live
/// run, where the hook library already left the rest out.
struct Filter {
    ranges: Arc<[(u64, u64)]>,
}

/// Per guest process: its filter, and the run.
struct Pid {
    filter: Filter,
    run: Arc<Run>,
}

/// What [`Filter::of`] needs: `--range` and `--func` of a replay, whose
/// functions are looked up in the first recorded process's program (the
/// one a live run would have read them from).
struct ReplayRanges {
    ranges: Vec<(u64, u64)>,
    funcs: Vec<String>,
}

impl Filter {
    fn of(run: &Run, ci: &ClientInfo) -> Filter {
        let Some(r) = &run.replay else {
            return Filter {
                ranges: Arc::new([]),
            };
        };
        let ranges = run.resolved.get_or_init(|| {
            let mut ranges = r.ranges.clone();
            if !r.funcs.is_empty() {
                // Too late to refuse the command line: the replay has begun.
                let found = match &ci.exe {
                    Some(exe) => func_ranges(Path::new(exe), &r.funcs).and_then(|f| {
                        match f.iter().zip(&r.funcs).find(|(f, _)| f.pie) {
                            Some((_, name)) => Err(FuncError::Pie {
                                name: name.clone(),
                                path: PathBuf::from(exe),
                            }),
                            None => Ok(f),
                        }
                    }),
                    None => Err(FuncError::NoProgram),
                };
                match found {
                    Ok(f) => ranges.extend(f.iter().map(|f| (f.start, f.end))),
                    Err(e) => {
                        eprintln!("regtrace: {e}");
                        std::process::exit(2)
                    }
                }
            }
            ranges.into()
        });
        Filter {
            ranges: ranges.clone(),
        }
    }

    fn traces(&self, pc: u64) -> bool {
        self.ranges.is_empty() || self.ranges.iter().any(|&(lo, hi)| lo <= pc && pc < hi)
    }
}

/// A `--range` that is not `LO-HI`.
#[derive(Debug, thiserror::Error)]
#[error("want LO-HI in hex, LO < HI")]
struct RangeError;

fn parse_range(s: &str) -> Result<(u64, u64), RangeError> {
    s.split_once('-')
        .and_then(|(lo, hi)| Some((parse_hex(lo)?, parse_hex(hi)?)))
        .filter(|(lo, hi)| lo < hi)
        .ok_or(RangeError)
}

/// Why `--func` names no range; one line, printed once.
#[derive(Debug, thiserror::Error)]
enum FuncError {
    /// The program could not be found.
    #[error(transparent)]
    Launch(#[from] launch::Error),
    /// The replayed recording does not name its program.
    #[error("--func: the recording does not say which program ran")]
    NoProgram,
    /// The program could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The program is not an object file object knows.
    #[error("{}: {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: object::read::Error,
    },
    /// A recording of a position-independent program.
    #[error(
        "--func {name}: {} is position independent, and a recording's --func is placed only \
         in a live run; use --range with the run-time addresses",
        path.display()
    )]
    Pie { name: String, path: PathBuf },
    /// The program's placement could not be worked out.
    #[error("--func: {0}")]
    Place(#[from] crate::probe::error::Error),
    /// No symbol `name`.
    #[error("--func {name}: no such symbol in {}", path.display())]
    NoSymbol { name: String, path: PathBuf },
    /// The symbol has size 0.
    #[error("--func {name}: the symbol has no size in {}", path.display())]
    NoSize { name: String, path: PathBuf },
}

/// A function's `[start, end)`, at link time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FuncRange {
    start: u64,
    end: u64,
    /// In a position-independent program: moved by its load bias.
    pie: bool,
}

/// `[start, end)` of function `name` in the symbol table of `path`.
fn func_range(path: &Path, name: &str) -> Result<FuncRange, FuncError> {
    let data = std::fs::read(path).map_err(|source| FuncError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let file = object::File::parse(&*data).map_err(|source| FuncError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let named = || (name.to_string(), path.to_path_buf());
    let pie = file.kind() != ObjectKind::Executable;
    let sym = file
        .symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.name() == Ok(name) && s.address() != 0)
        .ok_or_else(|| {
            let (name, path) = named();
            FuncError::NoSymbol { name, path }
        })?;
    if sym.size() == 0 {
        let (name, path) = named();
        return Err(FuncError::NoSize { name, path });
    }
    let start = code_address(file.architecture(), sym.kind(), sym.address());
    Ok(FuncRange {
        start,
        end: start + sym.size(),
        pie,
    })
}

/// The ranges of `funcs` in `program`, each announced on stderr.
fn func_ranges(program: &Path, funcs: &[String]) -> Result<Vec<FuncRange>, FuncError> {
    funcs
        .iter()
        .map(|f| {
            let r = func_range(program, f)?;
            let at = if r.pie {
                " (link-time: the program is position independent, placed as it runs)"
            } else {
                ""
            };
            eprintln!("regtrace: {f} is {:#x}-{:#x}{at}", r.start, r.end);
            Ok(r)
        })
        .collect()
}

/// The hook library's plan for a position-independent `program`: `ranges`
/// at run-time addresses, and `funcs` at its link-time ones, placed when
/// it is mapped (see [`jitter::presets::plan`]).
fn pie_plan(
    program: &Path,
    ranges: &[(u64, u64)],
    funcs: &[FuncRange],
) -> Result<String, FuncError> {
    use crate::probe::elf::Image;
    let exe = program
        .canonicalize()
        .unwrap_or_else(|_| program.to_path_buf());
    let img = Image::read(&exe)?;
    // Where guest memory is comes from the first instruction QEMU runs:
    // the dynamic loader's entry, or a static-pie program's own.
    let (entry, low, anchor) = match crate::probe::libs::interpreter(&exe)? {
        Some(ld) => {
            let li = Image::read(&ld)?;
            (li.entry, li.low, ld)
        }
        None => (img.entry, img.low, exe.clone()),
    };
    let mut s = String::from("stores=0 count=0\n");
    s += &format!("program {}\n", exe.display());
    for (lo, hi) in ranges {
        s += &format!("{lo:x}-{hi:x}\n");
    }
    s += &format!("anchor {entry:x} {low:x} {}\n", anchor.display());
    s += &format!("lib {:x} {}\n", img.low, exe.display());
    for f in funcs {
        s += &format!("+{:x}-{:x}\n", f.start, f.end);
    }
    Ok(s)
}

/// The hook library's plan for `--func` of a program at its link-time
/// addresses: `ranges` in `program` only (a program it execs has other
/// code there, see [`jitter::presets::plan`]).
fn fixed_plan(program: &Path, ranges: &[(u64, u64)]) -> String {
    let exe = program
        .canonicalize()
        .unwrap_or_else(|_| program.to_path_buf());
    let mut s = format!("stores=0 count=0\nprogram {}\n", exe.display());
    for (lo, hi) in ranges {
        s += &format!("{lo:x}-{hi:x}\n");
    }
    s
}

/// Where a symbol of `kind` with value `value` starts: an ARM Thumb
/// function's value has bit 0 set (the interworking bit), its code starts
/// at the even address. Data symbols are what they say.
fn code_address(arch: object::Architecture, kind: SymbolKind, value: u64) -> u64 {
    match (arch, kind) {
        (object::Architecture::Arm, SymbolKind::Text) => value & !1,
        _ => value,
    }
}

/// Runs regtrace; returns the exit status (the program's, or 1 or 2 when
/// something went wrong before or around it).
pub fn main(args: Args) -> i32 {
    let mut ranges = args.ranges;
    let mut replay = None;
    let mut plan_text = None;
    if args.replay.is_some() {
        replay = Some(ReplayRanges {
            ranges: std::mem::take(&mut ranges),
            funcs: args.funcs,
        });
    } else if !args.funcs.is_empty() {
        let Some(program) = args.program.first() else {
            eprintln!("regtrace: --func needs a PROGRAM (or --replay)");
            return 2;
        };
        let found = launch::find::resolve_program(program)
            .map_err(FuncError::from)
            .and_then(|path| {
                let f = func_ranges(&path, &args.funcs)?;
                if f.iter().any(|f| f.pie) {
                    plan_text = Some(pie_plan(&path, &ranges, &f)?);
                } else {
                    ranges.extend(f.iter().map(|f| (f.start, f.end)));
                    plan_text = Some(fixed_plan(&path, &ranges));
                }
                Ok(())
            });
        if let Err(e) = found {
            eprintln!("regtrace: {e}");
            return 2;
        }
    }
    // The plan of `--func`, a new file of this run,
    // named to QEMU alone.
    let plan_file = match plan_text.map(|t| crate::scratch::Scratch::plan("regtrace", &t)) {
        None => None,
        Some(Ok(f)) => {
            ranges.clear();
            Some(f)
        }
        Some(Err(e)) => {
            eprintln!("{e}");
            return 1;
        }
    };
    // For the hook library, which runs inside QEMU (another process) and
    // has nothing but its environment to learn the ranges from.
    let mut ranges_env = None;
    if !ranges.is_empty() {
        let v: Vec<String> = ranges.iter().map(|(a, b)| format!("{a:x}-{b:x}")).collect();
        let v = v.join(",");
        if args.program.is_empty() {
            eprintln!("regtrace: start QEMU with {RANGES_ENV}={v} in its environment");
        }
        ranges_env = Some(v);
    }
    let w = match &args.output {
        None => launch::Output::stdout("the trace"),
        Some(path) => match launch::Output::create(path, "the trace") {
            Ok(w) => w,
            Err(e) => {
                eprintln!("regtrace: {e}");
                return 1;
            }
        },
    };
    let run = Arc::new(Run {
        changed_only: args.changed,
        out: Mutex::new(Out {
            w: Some(w),
            last: None,
        }),
        replay,
        resolved: OnceLock::new(),
        insns: AtomicU64::new(0),
        changed: AtomicU64::new(0),
        threads: AtomicU64::new(0),
    });

    let start = Instant::now();
    let mut launcher = launch::Launcher::new(launch::Options {
        hooks: "regtrace",
        threads: args.threads,
    })
    .state(run.clone());
    if let Some(v) = ranges_env {
        launcher = launcher.qemu_env(RANGES_ENV, v);
    }
    if let Some(f) = &plan_file {
        launcher = launcher.qemu_env(PLAN_ENV, f.path());
    }
    let needs = Needs {
        regs: Some(RegsAt::All),
        ..Needs::default()
    };
    // A live run's lines show while the program runs (a replay's need not).
    let flush = || {
        if let Some(w) = lock(&run.out).w.as_mut() {
            let _ = w.flush();
        }
    };
    let result = launch::flushing_while(args.replay.is_none(), flush, || {
        crate::input::run::<Tracer>(launcher, args.replay.as_deref(), needs, args.program)
    });
    drop(plan_file);
    let written = lock(&run.out).w.take().expect("finished once").finish();
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            if let Err(w) = written {
                w.report("regtrace");
            }
            eprintln!("regtrace: {e}");
            return e.exit_code();
        }
    };
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "regtrace: {} instructions, {} changed registers, {} thread{}, {:.3} s",
        run.insns.load(Ordering::Relaxed),
        run.changed.load(Ordering::Relaxed),
        run.threads.load(Ordering::Relaxed),
        if run.threads.load(Ordering::Relaxed) == 1 {
            ""
        } else {
            "s"
        },
        secs
    );
    report.finish_with_output("regtrace", written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// `s` as regtrace's command line; `Err` is clap's one-line message.
    fn parse(s: &str) -> Result<Args, String> {
        crate::args::parse_line("regtrace", s)
    }

    #[test]
    fn options() {
        let a =
            parse("-o t.txt --range 0x10-20 --range 30-40 --func f --changed --threads 3").unwrap();
        assert_eq!(a.output.as_deref(), Some(Path::new("t.txt")));
        assert_eq!(a.ranges, [(0x10, 0x20), (0x30, 0x40)]);
        assert_eq!(a.funcs, ["f"]);
        assert_eq!((a.changed, a.threads), (true, 3));
        let a = parse("").unwrap();
        assert_eq!((a.changed, a.threads, a.replay), (false, 2, None));
        assert!(parse("--range 10-5").unwrap_err().contains("want LO-HI"));
        assert!(parse("--range 10").unwrap_err().contains("want LO-HI"));
        assert!(parse("--threads 0").unwrap_err().contains("at least 1"));
        assert!(parse("--bogus").unwrap_err().contains("--bogus"));
    }

    #[test]
    fn program_and_its_arguments() {
        let a = parse("--changed ./prog --range 1-2 -x").unwrap();
        assert!(a.ranges.is_empty());
        let want: Vec<OsString> = ["./prog", "--range", "1-2", "-x"].map(Into::into).into();
        assert_eq!(a.program, want);
        let a = parse("-- --prog").unwrap();
        assert_eq!(a.program, [OsString::from("--prog")]);
    }

    #[test]
    fn replay_is_instead_of_a_program() {
        let a = parse("--replay run.rec --range 10-20").unwrap();
        assert_eq!(a.replay.as_deref(), Some(Path::new("run.rec")));
        let e = parse("--replay run.rec ./prog").unwrap_err();
        assert!(e.contains("--replay") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn a_replay_keeps_what_is_in_range() {
        let all = Filter {
            ranges: Arc::new([]),
        };
        assert!(all.traces(0) && all.traces(u64::MAX));
        let some = Filter {
            ranges: Arc::new([(0x10, 0x20), (0x40, 0x41)]),
        };
        let kept: Vec<u64> = [0xf, 0x10, 0x1f, 0x20, 0x40, 0x41]
            .into_iter()
            .filter(|&pc| some.traces(pc))
            .collect();
        assert_eq!(kept, [0x10, 0x1f, 0x40]);
    }

    #[test]
    fn thumb_functions_start_at_the_even_address() {
        use object::Architecture::{Aarch64, Arm};
        assert_eq!(code_address(Arm, SymbolKind::Text, 0x104c9), 0x104c8);
        assert_eq!(code_address(Arm, SymbolKind::Text, 0x10340), 0x10340);
        assert_eq!(code_address(Arm, SymbolKind::Data, 0x2_0001), 0x2_0001);
        assert_eq!(code_address(Aarch64, SymbolKind::Text, 0x401), 0x401);
    }

    #[test]
    fn the_program_counter_is_no_change() {
        // ARM's layout: r0..r12, sp, lr, pc.
        let names: Vec<String> = cannoli::wire::reg_names("armv5tel")
            .iter()
            .map(|s| s.to_string())
            .collect();
        let l = ThreadRegs {
            shown: names.iter().map(|n| n != "pc").collect(),
            names,
            mask: 0xffff_ffff,
            pc_digits: 8,
            changed_only: false,
        };
        let old = [0u64; 16];
        let mut new = [0u64; 16];
        new[15] = 0x104cc;
        let mut buf = String::new();
        assert!(!l.line(&mut buf, 0x104c8, &old, |i| new[i]));
        assert_eq!(buf, "0x000104c8\n");
        new[0] = 0x9e37_79b1;
        new[13] = 0x4080_0800;
        buf.clear();
        assert!(l.line(&mut buf, 0x104c8, &old, |i| new[i]));
        assert_eq!(buf, "0x000104c8  r0: 0 -> 9e3779b1, sp: 0 -> 40800800\n");
    }
}
