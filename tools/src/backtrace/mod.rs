// SPDX-License-Identifier: GPL-2.0-or-later
//! `backtrace`: follows the call stack of every guest thread and prints the
//! whole backtrace, as one JSON line, at every function entry and exit.
//! Here, not in the example, so that `cannoli backtrace` and the
//! `backtrace` example binary run the same code.
//!
//! One command: `backtrace [OPTIONS] ./prog ARGS...` starts the client,
//! runs `./prog` under the patched QEMU for its architecture with
//! `-cannoli libbacktrace.so` (the backtrace example's hook library) and
//! exits with the program's status. Or, in two terminals, start it without
//! a program, then QEMU:
//!
//! ```text
//! $ backtrace -o calls.jsonl &
//! $ qemu-mipsel -cannoli target/release/libbacktrace.so ./prog
//! ```
//!
//! Or replay a recording made by `cannoli record` with the backtrace hook
//! library's decisions (`--replay FILE`).
//!
//! The design is the one of Cannoli's backtrace walkthrough: `Branch` hooks,
//! a `PidContext` holding the backtrace state (backtrace, return-address
//! stack, branch flag; here one per guest thread of the process), a
//! `TidContext` holding the symbols, and the serial `trace` phase walking
//! the events in execution order (see `state.rs` for the algorithm and
//! `arch.rs` for what a call looks like on each architecture). The parallel
//! callbacks only keep the events that matter: branches, the instruction
//! after each branch, the return addresses x86 `call`s push, mappings, and
//! the instruction lengths QEMU reports for each block it translates.

pub(crate) mod arch;
pub(crate) mod state;
pub(crate) mod symbols;

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cannoli::recording::{Needs, RegsAt};
use cannoli::{Cannoli, ClientInfo};
use serde::{Serialize, Serializer};

use crate::probe::shadow::AddrMap;

use arch::Rules;
use state::{BacktraceState, Change, Function, Regs, Symbolize};
use symbols::Functions;

/// One line for `backtrace --help` and `cannoli --help`.
pub const ABOUT: &str =
    "The call stack of every guest thread as JSON lines, at every function entry and exit";

/// What a recording must hold for backtrace: registers at branches and
/// where they land, and the stores of branches (a recording made with the
/// backtrace hook library's decisions).
const NEEDS: Needs = Needs {
    exec: false,
    mem: false,
    regs: Some(RegsAt::Branches),
    mem_optional: None,
    branch_flags: false,
};

/// The command line of `backtrace` (and `cannoli backtrace`).
// No doc comment on the struct: clap would take it for the command's about.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "\
Prints one JSON line at every function entry and exit, with the whole
backtrace:

  {\"event\":\"enter\",\"pid\":7,\"tid\":7,\"function\":\"bt_leaf\",\"pc\":\"0x400760\",
   \"via\":\"call\",\"from\":\"0x40059c\",\"return\":\"0x4005a4\",\"depth\":5,
   \"backtrace\":[\"__start\",\"__libc_start_main_impl\",\"__libc_start_call_main\",\"main\",\"bt_leaf\"]}
  {\"event\":\"exit\",\"pid\":7,\"tid\":7,\"function\":\"bt_leaf\",\"pc\":\"0x4005a4\",
   \"from\":\"0x400778\",\"depth\":4,\"backtrace\":[...]}

via: call, jump (a tail call), signal (a handler) or start (a thread's first
frame). pc: the function's first instruction (enter), where execution goes
on (exit). from: the branch instruction. return: where the frame returns to.

With a PROGRAM, runs it under the patched QEMU for its architecture (found
via $CANNOLI_QEMU, $CANNOLI_QEMU_DIR, $CANNOLI_QEMU_BUILD or target/qemu.env)
and exits with its exit status once the trace is processed; extra QEMU
options go in $CANNOLI_QEMU_ARGS. Without one, listens for QEMU started
separately with -cannoli libbacktrace.so (start this first).

Guests: mipsel, mips, mips64el, riscv64, arm (A32 and Thumb), aarch64,
ppc64le, x86_64, i386.")]
pub struct Args {
    /// Guest ELF to read symbols from (default: the guest's exe)
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Worker threads per traced thread: by default one per core beyond QEMU's thread, 2 to 16
    #[arg(long, value_name = "N", default_value_t = cannoli::default_workers(), value_parser = crate::args::threads)]
    pub threads: usize,
    /// Without PROGRAM: address to listen on (default $CANNOLI_ADDR or
    /// 127.0.0.1:11458); with a PROGRAM the client listens on a free port
    #[arg(long, value_name = "ADDR", conflicts_with = "program")]
    pub listen: Option<String>,
    /// Write the JSON lines to FILE instead of stdout
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// No summary line on stderr
    #[arg(short, long)]
    pub quiet: bool,
    /// Read a recording made by `cannoli record` instead of running a
    /// program
    #[arg(long, value_name = "FILE", conflicts_with_all = ["program", "listen"])]
    pub replay: Option<PathBuf>,
    /// Show C++ and Rust function names as the symbol table has them
    /// (`_ZN3geo3Box4areaEv`), not demangled (`geo::Box::area()`)
    #[arg(long)]
    pub no_demangle: bool,
    /// The program to trace and its arguments (options after PROGRAM are
    /// its own); without one, listens for a QEMU started separately
    #[arg(value_name = "PROGRAM", trailing_var_arg = true)]
    pub program: Vec<OsString>,
}

/// One run of backtrace: what [`main`] builds from the command line and
/// hands to the run (each process's [`Pid`] holds it), the symbol tables its
/// processes share, and the totals `main` reports after it.
#[derive(Default)]
struct Run {
    /// `--binary`, for [`Backtrace::init_tid`].
    binary: Option<PathBuf>,
    /// Names shown demangled (no `--no-demangle`).
    demangle: bool,
    /// `None` once [`main`] has taken it back to finish it.
    out: Mutex<Option<Out>>,
    /// One table per guest executable.
    tables: Mutex<HashMap<Option<PathBuf>, Arc<Functions>>>,
    /// One table per library mapped, `None` if it cannot be read.
    libs: Mutex<HashMap<String, Option<Arc<Functions>>>>,
    enters: AtomicU64,
    exits: AtomicU64,
    deepest: AtomicUsize,
    blind: AtomicU64,
}

// ---------------------------------------------------------------------------
// Output and totals
// ---------------------------------------------------------------------------

struct Out {
    /// Keeps its first write error for the end (see `launch::Output`):
    /// the events are still consumed, so that QEMU does not block.
    w: launch::Output,
}

/// An address, serialized as a `"0x..."` string.
struct Hex(u64);

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:#x}", self.0))
    }
}

/// One JSON line.
#[derive(Serialize)]
struct Line<'a> {
    event: &'static str,
    pid: i32,
    tid: i32,
    function: &'a str,
    /// enter: the function's first executed instruction; exit: where
    /// execution goes on.
    pc: Hex,
    #[serde(skip_serializing_if = "Option::is_none")]
    via: Option<&'static str>,
    /// The branch instruction that entered or left the function.
    #[serde(skip_serializing_if = "Option::is_none")]
    from: Option<Hex>,
    /// enter: where the frame will return to.
    #[serde(rename = "return", skip_serializing_if = "Option::is_none")]
    ret: Option<Hex>,
    depth: usize,
    backtrace: Vec<&'a str>,
}

fn emit(run: &Run, out: &mut Out, pid: i32, tid: i32, c: &Change, st: &BacktraceState) {
    let depth = st.depth();
    let line = match c {
        Change::Enter { from, ret } => {
            run.enters.fetch_add(1, Ordering::Relaxed);
            run.deepest.fetch_max(depth, Ordering::Relaxed);
            let top = st.backtrace.last().expect("a frame was entered");
            Line {
                event: "enter",
                pid,
                tid,
                function: &top.name,
                pc: Hex(top.entry),
                via: Some(top.via.as_str()),
                from: from.map(Hex),
                ret: ret.map(Hex),
                depth,
                backtrace: st.names().collect(),
            }
        }
        Change::Exit { frame, pc, from } => {
            run.exits.fetch_add(1, Ordering::Relaxed);
            Line {
                event: "exit",
                pid,
                tid,
                function: &frame.name,
                pc: Hex(*pc),
                via: None,
                from: Some(Hex(*from)),
                ret: None,
                depth,
                backtrace: st.names().collect(),
            }
        }
    };
    if !out.w.is_writing() {
        return;
    }
    // `Output` keeps write errors for the end; serializing these types
    // cannot fail.
    let _ = serde_json::to_writer(&mut out.w, &line);
    let _ = out.w.write_all(b"\n");
}

// ---------------------------------------------------------------------------
// Symbols, one table per guest executable
// ---------------------------------------------------------------------------

fn table_for(run: &Run, exe: Option<&Path>) -> Arc<Functions> {
    let mut tables = run.tables.lock().unwrap();
    let key = exe.map(Path::to_path_buf);
    if let Some(t) = tables.get(&key) {
        return t.clone();
    }
    let t = match exe {
        Some(p) => match Functions::from_elf(p) {
            Ok(t) => t,
            Err(e) => {
                eprintln!(
                    "backtrace: {}; functions are named by address",
                    cannoli::wire::escape(&e.to_string())
                );
                Functions::default()
            }
        },
        None => {
            eprintln!(
                "backtrace: QEMU did not say which program runs and no --binary was given; \
                 functions are named by address"
            );
            Functions::default()
        }
    };
    let t = Arc::new(shown(run, t));
    tables.insert(key, t.clone());
    t
}

/// The functions of a shared library (or of any ELF file the guest maps
/// executable), `None` if it cannot be read.
fn library_table(run: &Run, path: &str) -> Option<Arc<Functions>> {
    let mut libs = run.libs.lock().unwrap();
    libs.entry(path.to_string())
        .or_insert_with(|| {
            let t = Functions::from_elf(Path::new(path)).ok()?;
            Some(Arc::new(shown(run, t)))
        })
        .clone()
}

/// `t` with its names as the run shows them.
fn shown(run: &Run, t: Functions) -> Functions {
    if run.demangle {
        t.demangled()
    } else {
        t
    }
}

/// Code the guest mapped from a file other than the executable: a shared
/// library, the dynamic linker.
#[derive(Debug, Clone)]
pub(crate) struct Module {
    pub(crate) base: u64,
    pub(crate) end: u64,
    pub(crate) offset: u64,
    /// The file's name, for code without a symbol: `libc.so.6+0x1234`.
    pub(crate) name: Arc<str>,
    /// The file, as QEMU mapped it.
    pub(crate) path: Arc<str>,
    pub(crate) funcs: Option<Arc<Functions>>,
    pub(crate) bias: u64,
}

/// Names guest code: the executable's functions (moved by the load bias of a
/// position independent executable), else a mapped library's functions, else
/// the executable's section or the library's file offset.
pub(crate) struct Resolver<'a> {
    pub(crate) funcs: &'a Functions,
    pub(crate) bias: u64,
    pub(crate) modules: &'a [Module],
    /// Instruction lengths from QEMU's block events.
    pub(crate) lens: &'a AddrMap<u8>,
}

impl Resolver<'_> {
    fn module(&self, pc: u64) -> Option<&Module> {
        self.modules
            .iter()
            .rev()
            .find(|m| m.base <= pc && pc < m.end)
    }

    /// The function containing `pc`, in the executable's table or a
    /// mapped library's, with the bias that moves its addresses to `pc`'s.
    fn find(&self, pc: u64) -> Option<(&symbols::Func, u64)> {
        match self.funcs.find(pc.wrapping_sub(self.bias)) {
            Some(f) => Some((f, self.bias)),
            None => {
                let m = self.module(pc)?;
                Some((m.funcs.as_ref()?.find(pc.wrapping_sub(m.bias))?, m.bias))
            }
        }
    }
}

impl Symbolize for Resolver<'_> {
    fn function(&self, pc: u64) -> Option<Function> {
        let (f, bias) = self.find(pc)?;
        let start = f.start.wrapping_add(bias);
        Some(Function {
            start,
            local_entry: start.wrapping_add(f.local_entry),
            name: f.name.clone(),
        })
    }

    fn entries(&self, pc: u64) -> Option<(u64, u64)> {
        let (f, bias) = self.find(pc)?;
        let start = f.start.wrapping_add(bias);
        Some((start, start.wrapping_add(f.local_entry)))
    }

    fn insn_len(&self, pc: u64) -> Option<u64> {
        self.lens.get(&pc).map(|&n| u64::from(n))
    }

    fn insn_word(&self, pc: u64) -> Option<u32> {
        // The executable's code, else a library's: the one containing pc.
        if let Some(w) = self.funcs.word(pc.wrapping_sub(self.bias)) {
            return Some(w);
        }
        let m = self.module(pc)?;
        m.funcs.as_ref()?.word(pc.wrapping_sub(m.bias))
    }

    fn unnamed(&self, pc: u64) -> Arc<str> {
        let addr = pc.wrapping_sub(self.bias);
        if let Some(s) = self.funcs.section(addr) {
            return format!("{}+{:#x}", s.name, addr - s.start).into();
        }
        match self.module(pc) {
            Some(m) => format!("{}+{:#x}", m.name, pc - m.base + m.offset).into(),
            None => format!("{pc:#x}").into(),
        }
    }
}

// ---------------------------------------------------------------------------
// The tool
// ---------------------------------------------------------------------------

/// What the parallel callbacks keep for the serial phase.
#[derive(Debug, Clone)]
enum Item {
    /// A branch, or the instruction after one (or the first of a chunk,
    /// which may be after a branch at the end of the previous chunk).
    Insn {
        pc: u64,
        branch: bool,
        regs: Option<Regs>,
    },
    /// An 8-byte store by a branch instruction.
    Write {
        pc: u64,
        addr: u64,
        val: u64,
        sz: u8,
    },
    /// A file mapping.
    Map {
        base: u64,
        len: u64,
        exec: bool,
        offset: u64,
        path: Arc<str>,
    },
    Unmap {
        base: u64,
        len: u64,
    },
    /// A signal is delivered to this guest handler.
    Signal {
        handler: u64,
    },
    /// QEMU translated a block: its first pc and its instructions' lengths.
    Block {
        pc: u64,
        lens: Box<[u8]>,
    },
}

/// Per guest process: the backtrace state of each of its threads, and what
/// its mappings tell.
struct Pid {
    pid: i32,
    state: Mutex<Proc>,
    run: Arc<Run>,
}

#[derive(Default)]
struct Proc {
    /// By tid.
    threads: HashMap<i32, BacktraceState>,
    /// Load bias of a position independent executable, once its mapping
    /// was seen.
    bias: Option<u64>,
    /// Load bias of each other mapped file, from its mapping at offset 0.
    loads: HashMap<Arc<str>, u64>,
    modules: Vec<Module>,
    /// The length of every instruction QEMU translated for the process
    /// (by any of its threads), by pc.
    lens: AddrMap<u8>,
}

/// Per guest thread: the symbols and how to read the registers.
struct Tid {
    tid: i32,
    funcs: Arc<Functions>,
    /// The executable the symbols come from, as QEMU or --binary named it,
    /// and canonicalized.
    exe: Option<(PathBuf, Option<PathBuf>)>,
    rules: Option<Rules>,
    /// `rules.delay_slot`, for the parallel callbacks.
    delay_slot: bool,
    ra: Option<usize>,
    sp: Option<usize>,
    mask: u64,
}

impl Tid {
    fn read(&self, regs: &[u8], i: usize) -> Option<u64> {
        let w = regs.get(i * 8..i * 8 + 8)?;
        Some(u64::from_le_bytes(w.try_into().unwrap()) & self.mask)
    }

    fn regs(&self, regs: &[u8]) -> Option<Regs> {
        Some(Regs {
            ra: self.ra.and_then(|i| self.read(regs, i)),
            sp: self.read(regs, self.sp?)?,
        })
    }

    fn is_exe(&self, path: &str) -> bool {
        let Some((named, canon)) = &self.exe else {
            return false;
        };
        let p = Path::new(path);
        p == named
            || canon
                .as_ref()
                .is_some_and(|c| std::fs::canonicalize(p).is_ok_and(|q| &q == c))
    }
}

/// Keep an instruction event: it may be where a branch went. With delay
/// slots, also the one after the instruction that follows a branch (that
/// one may be the delay slot).
fn after_branch(trace: &[Item], delay_slot: bool) -> bool {
    let mut kept = trace
        .iter()
        .rev()
        // A block event comes before the block's first instruction, which
        // may be where a branch went: look past it, as past mappings.
        .filter(|i| {
            !matches!(
                i,
                Item::Map { .. } | Item::Unmap { .. } | Item::Block { .. }
            )
        });
    match kept.next() {
        None => true,
        Some(Item::Insn { branch: true, .. })
        | Some(Item::Write { .. })
        | Some(Item::Signal { .. }) => true,
        Some(Item::Insn { pc, .. }) if delay_slot => match kept.next() {
            // The first of the chunk: it may follow a branch at the end of
            // the previous chunk.
            None => true,
            Some(Item::Insn {
                pc: b,
                branch: true,
                ..
            }) => *pc == b.wrapping_add(4),
            Some(_) => false,
        },
        Some(_) => false,
    }
}

struct Backtrace;

impl Cannoli for Backtrace {
    type Trace = Item;
    type TidContext = Tid;
    type PidContext = Pid;

    fn init_pid(ci: &ClientInfo) -> Arc<Pid> {
        Arc::new(Pid {
            pid: ci.pid,
            state: Mutex::new(Proc::default()),
            run: ci.expect_state::<Run>(),
        })
    }

    fn init_tid(pid: &Pid, ci: &ClientInfo) -> (Self, Tid) {
        let exe = pid
            .run
            .binary
            .clone()
            .or_else(|| ci.exe.as_ref().map(PathBuf::from));
        let rules = arch::rules(&ci.arch);
        if rules.is_none() {
            eprintln!(
                "backtrace: no call rules for guest arch {:?} (known: {}); thread {} is not traced",
                ci.arch,
                arch::KNOWN,
                ci.tid
            );
        }
        let index = |name: Option<&str>| {
            let name = name?;
            ci.regs.names[..ci.regs.count as usize]
                .iter()
                .position(|n| n == name)
        };
        let ra = index(rules.and_then(|r| r.ra));
        let sp = index(rules.map(|r| r.sp));
        let mask = match ci.regs.bytes {
            1..=7 => (1u64 << (ci.regs.bytes * 8)) - 1,
            _ => u64::MAX,
        };
        // A thread id can come back (a new thread, a program after execve):
        // it starts with an empty backtrace.
        pid.state
            .lock()
            .unwrap()
            .threads
            .insert(ci.tid, BacktraceState::default());
        let tid = Tid {
            tid: ci.tid,
            funcs: table_for(&pid.run, exe.as_deref()),
            exe: exe.map(|p| {
                let c = std::fs::canonicalize(&p).ok();
                (p, c)
            }),
            rules,
            delay_slot: rules.is_some_and(|r| r.delay_slot),
            ra,
            sp,
            mask,
        };
        (Backtrace, tid)
    }

    /// Only where [`Self::exec`] would keep one: the instructions of a
    /// block between two branches are counted, not visited.
    #[inline]
    fn wants_runs(_pid: &Pid, tid: &Tid, trace: &mut Vec<Item>) -> bool {
        after_branch(trace, tid.delay_slot)
    }

    #[inline]
    fn exec(_pid: &Pid, tid: &Tid, pc: u64, trace: &mut Vec<Item>) {
        if after_branch(trace, tid.delay_slot) {
            trace.push(Item::Insn {
                pc,
                branch: false,
                regs: None,
            });
        }
    }

    fn regs(_pid: &Pid, tid: &Tid, pc: u64, regs: &[u8], trace: &mut Vec<Item>) {
        if after_branch(trace, tid.delay_slot) {
            trace.push(Item::Insn {
                pc,
                branch: false,
                regs: tid.regs(regs),
            });
        }
    }

    fn branch(_pid: &Pid, tid: &Tid, pc: u64, branch: bool, regs: &[u8], trace: &mut Vec<Item>) {
        if branch || after_branch(trace, tid.delay_slot) {
            trace.push(Item::Insn {
                pc,
                branch,
                regs: tid.regs(regs),
            });
        }
    }

    /// A branch's store: kept right after the branch's own event, and at a
    /// chunk's start, where the branch may have ended the previous chunk
    /// (the serial phase checks it against the branch flag either way).
    fn write(_pid: &Pid, _tid: &Tid, pc: u64, addr: u64, val: u64, sz: u8, trace: &mut Vec<Item>) {
        let keep = match trace.last() {
            None => true,
            Some(Item::Insn {
                pc: b,
                branch: true,
                ..
            }) => *b == pc,
            Some(_) => false,
        };
        if keep {
            trace.push(Item::Write { pc, addr, val, sz });
        }
    }

    fn block(_pid: &Pid, _tid: &Tid, pc: u64, lens: &[u8], trace: &mut Vec<Item>) {
        trace.push(Item::Block {
            pc,
            lens: lens.into(),
        });
    }

    fn mmap(
        _pid: &Pid,
        _tid: &Tid,
        base: u64,
        len: u64,
        anon: bool,
        _read: bool,
        _write: bool,
        exec: bool,
        path: &str,
        offset: u64,
        trace: &mut Vec<Item>,
    ) {
        if !anon && !path.is_empty() {
            trace.push(Item::Map {
                base,
                len,
                exec,
                offset,
                path: path.into(),
            });
        }
    }

    fn munmap(_pid: &Pid, _tid: &Tid, base: u64, len: u64, trace: &mut Vec<Item>) {
        trace.push(Item::Unmap { base, len });
    }

    fn signal(_pid: &Pid, _tid: &Tid, sig: &cannoli::Signal, trace: &mut Vec<Item>) {
        if let Some(handler) = sig.handler {
            trace.push(Item::Signal { handler });
        }
    }

    fn trace(&mut self, pid: &Pid, tid: &Tid, trace: &[Item]) {
        let Some(rules) = tid.rules else { return };
        let mut guard = pid.state.lock().unwrap();
        let Proc {
            threads,
            bias,
            loads,
            modules,
            lens,
        } = &mut *guard;
        let st = threads.entry(tid.tid).or_default();
        let blind = st.blind_landings;
        let run = &*pid.run;
        let mut out = run.out.lock().unwrap();
        let Some(out) = out.as_mut() else { return };
        for item in trace {
            match item {
                Item::Insn { pc, branch, regs } => {
                    let r = Resolver {
                        funcs: &tid.funcs,
                        bias: bias.unwrap_or(0),
                        modules,
                        lens,
                    };
                    st.insn(&rules, &r, *pc, *branch, *regs, &mut |c, s| {
                        emit(run, out, pid.pid, tid.tid, c, s)
                    });
                }
                Item::Write { pc, addr, val, sz } => st.write(&rules, *pc, *addr, *val, *sz),
                Item::Block { pc, lens: l } => {
                    let mut at = *pc;
                    // A length of 0 (unknown) leaves the rest unsized.
                    for &n in l.iter().take_while(|&&n| n != 0) {
                        lens.insert(at, n);
                        at = at.wrapping_add(u64::from(n));
                    }
                }
                Item::Map {
                    base,
                    len,
                    exec,
                    offset,
                    path,
                } => {
                    if tid.is_exe(path) {
                        if bias.is_none() && tid.funcs.pie && *offset == 0 {
                            *bias = Some(base.wrapping_sub(tid.funcs.first_page));
                        }
                        continue;
                    }
                    if *offset == 0 {
                        if let Some(f) = library_table(run, path) {
                            loads.insert(path.clone(), base.wrapping_sub(f.first_page));
                        }
                    }
                    if *exec {
                        let funcs = library_table(run, path);
                        // Without the mapping at offset 0: the usual layout,
                        // code at the same offset in file and memory.
                        let bias = loads
                            .get(path)
                            .copied()
                            .unwrap_or_else(|| base.wrapping_sub(*offset));
                        modules.push(Module {
                            base: *base,
                            end: base.saturating_add(*len),
                            offset: *offset,
                            name: path.rsplit('/').next().unwrap_or(path).into(),
                            path: path.clone(),
                            funcs,
                            bias,
                        });
                    }
                }
                Item::Signal { handler } => st.signal(*handler),
                Item::Unmap { base, len } => {
                    let end = base.saturating_add(*len);
                    modules.retain(|m| m.end <= *base || m.base >= end);
                }
            }
        }
        run.blind
            .fetch_add(st.blind_landings - blind, Ordering::Relaxed);
    }
}

/// The variable naming the registers the hook library reports (see
/// `examples/backtrace`).
const REGS_ENV: &str = "CANNOLI_BACKTRACE_REGS";

/// The registers a live run of `args`' program needs reported
/// ([`arch::registers_read`] of its architecture); `None` (every register)
/// for a replay, or a program whose architecture this cannot tell (the
/// launcher then says why it cannot run it).
fn registers_read(args: &Args) -> Option<Vec<&'static str>> {
    if args.replay.is_some() {
        return None;
    }
    let path = launch::find::resolve_program(args.program.first()?).ok()?;
    let guest = launch::arch::inspect(&path).ok()?;
    arch::registers_read(guest.arch.name)
}

/// Runs backtrace; returns the exit status: the program's (or the
/// recording's), [`cannoli::EXIT_INCOMPLETE`] if events or the output are
/// incomplete, 1 (or the launcher's status) if nothing could run.
pub fn main(args: Args) -> i32 {
    let w = match &args.output {
        None => launch::Output::stdout("the trace"),
        Some(p) => match launch::Output::create(p, "the trace") {
            Ok(w) => w,
            Err(e) => {
                eprintln!("backtrace: {e}");
                return 1;
            }
        },
    };
    let mut launcher = launch::Launcher::new(launch::Options {
        hooks: "backtrace",
        threads: args.threads,
    });
    if let Some(names) = registers_read(&args) {
        launcher = launcher.qemu_env(REGS_ENV, names.join(","));
    }
    if let Some(addr) = args.listen {
        launcher = launcher.listen(addr);
    }
    let run = Arc::new(Run {
        binary: args.binary,
        demangle: !args.no_demangle,
        out: Mutex::new(Some(Out { w })),
        ..Run::default()
    });
    let launcher = launcher.state(run.clone());

    let start = Instant::now();
    // A live run's lines show while the program runs (a replay's need not).
    let flush = || {
        if let Some(o) = run.out.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            let _ = o.w.flush();
        }
    };
    let result = launch::flushing_while(args.replay.is_none(), flush, || {
        crate::input::run::<Backtrace>(launcher, args.replay.as_deref(), NEEDS, args.program)
    });
    let secs = start.elapsed().as_secs_f64();

    let written = run
        .out
        .lock()
        .unwrap()
        .take()
        .expect("set above")
        .w
        .finish();
    match result {
        Ok(report) => {
            let st = &report.stats;
            if !args.quiet {
                let extra = format!(", {}", st.loss_summary());
                eprintln!(
                    "backtrace: {} events from {} guest thread{}, {} function entries, {} exits, \
                     deepest {} frames, {secs:.3} s{extra}",
                    st.events,
                    st.connections,
                    if st.connections == 1 { "" } else { "s" },
                    run.enters.load(Ordering::Relaxed),
                    run.exits.load(Ordering::Relaxed),
                    run.deepest.load(Ordering::Relaxed),
                );
            }
            let blind = run.blind.load(Ordering::Relaxed);
            if blind > 0 {
                eprintln!(
                    "backtrace: warning: {blind} branch targets came without registers \
                     (calls there were judged by address alone)"
                );
            }
            report.finish_with_output("backtrace", written)
        }
        Err(e) => {
            eprintln!("backtrace: {e}");
            if let Err(w) = written {
                w.report("backtrace");
            }
            e.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `s` as backtrace's command line; `Err` is clap's one-line message.
    fn parse(s: &str) -> Result<Args, String> {
        crate::args::parse_line("backtrace", s)
    }

    #[test]
    fn options() {
        let o = parse("--binary /bin/x --threads 4 -o /tmp/t.jsonl -q").unwrap();
        assert_eq!(o.binary.as_deref(), Some(Path::new("/bin/x")));
        assert_eq!(o.output.as_deref(), Some(Path::new("/tmp/t.jsonl")));
        assert_eq!((o.threads, o.quiet), (4, true));
        assert!(o.program.is_empty() && o.replay.is_none());
        let o = parse("").unwrap();
        assert_eq!((o.threads, o.quiet), (cannoli::default_workers(), false));
        let o = parse("--listen=127.0.0.1:5").unwrap();
        assert_eq!(o.listen.as_deref(), Some("127.0.0.1:5"));
        assert!(parse("--threads").unwrap_err().contains("--threads"));
        assert!(parse("--threads 0").unwrap_err().contains("at least 1"));
        assert!(parse("--bogus").unwrap_err().contains("--bogus"));
    }

    #[test]
    fn program_and_its_arguments() {
        let o = parse("-q ./prog -o x --threads 3").unwrap();
        assert!(o.quiet);
        assert_eq!(o.output, None);
        assert_eq!(o.program, crate::args::words("./prog -o x --threads 3"));
        let o = parse("-- --odd-name a").unwrap();
        assert_eq!(o.program, crate::args::words("--odd-name a"));
        assert!(parse("--listen 127.0.0.1:1 prog")
            .unwrap_err()
            .contains("--listen"));
    }

    #[test]
    fn a_replay_runs_no_program_and_listens_nowhere() {
        let o = parse("--replay run.rec -o x").unwrap();
        assert_eq!(o.replay.as_deref(), Some(Path::new("run.rec")));
        assert!(parse("--replay run.rec prog")
            .unwrap_err()
            .contains("--replay"));
        let e = parse("--replay run.rec --listen 127.0.0.1:1").unwrap_err();
        assert!(e.contains("--replay") && e.contains("--listen"), "{e}");
    }

    #[test]
    fn keeps_only_what_follows_a_branch() {
        let insn = |pc, branch| Item::Insn {
            pc,
            branch,
            regs: None,
        };
        assert!(after_branch(&[], false));
        assert!(after_branch(&[insn(0, true)], false));
        assert!(!after_branch(&[insn(0, false)], false));
        assert!(!after_branch(&[insn(0, true), insn(4, false)], false));
        let map = Item::Map {
            base: 0,
            len: 1,
            exec: true,
            offset: 0,
            path: "x".into(),
        };
        assert!(after_branch(&[insn(0, true), map.clone()], false));
        assert!(!after_branch(&[insn(0, false), map.clone()], false));
        // Delay slots: the instruction after the next one too.
        assert!(after_branch(&[insn(0, true), insn(4, false)], true));
        assert!(after_branch(&[insn(4, false)], true));
        assert!(after_branch(&[insn(0, true), insn(4, false), map], true));
        assert!(!after_branch(&[insn(0, true), insn(8, false)], true));
        assert!(!after_branch(&[insn(0, false), insn(4, false)], true));
    }
}
