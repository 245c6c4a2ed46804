// SPDX-License-Identifier: GPL-2.0-or-later
//! Code coverage of a guest program as a drcov file, with every executable
//! mapping a module: the program, its dynamic loader and shared libraries,
//! and anonymous code that ran (QEMU's signal trampoline, JIT code). Here,
//! not in the example, so that `cannoli coverage` and the `coverage`
//! example binary run the same code.
//!
//! ```sh
//! coverage -o prog.drcov ./prog args...     # then load prog.drcov into
//!                                           # Lighthouse, bncov or Cutter
//! ```
//!
//! How it works: the hook library (`libcoverage.so`) answers
//! `HookType::Once` for every instruction, so QEMU reports each translated
//! instruction the first time it runs and then patches the hook out; a hot
//! loop costs nothing after its first iteration. The client attributes each
//! reported pc to the executable mapping it lies in (from the trace's mmap,
//! munmap and mprotect events, in execution order), and at the end coalesces
//! each module's instruction starts into blocks: maximal runs of
//! instructions that follow each other without a gap (so a block can span
//! several basic blocks, as a straight-line call-and-return does; the
//! readers map covered bytes onto their own basic blocks). Only which pcs
//! ran counts, not how often each was reported: a recording (`--replay`),
//! whose exec events are `Always` ones (every run of every instruction),
//! gives the same drcov file as the live run; only the summary's count of
//! exec events is larger.
//!
//! The size of each instruction comes from QEMU: a block event, sent when
//! QEMU translates a block, lists the length of each of its instructions
//! (the only exact source for Thumb, where a 4-aligned pc may start an A32
//! instruction or a Thumb one, and the cheapest for x86). Lengths are kept
//! per module, so a block translated by one thread of a process sizes the
//! instructions another thread ran. A pc without one falls back to the
//! architecture (4 bytes on MIPS, AArch64, PowerPC) or to the instruction's
//! bytes in the mapped file (RISC-V compressed instructions, x86, Thumb).

mod drcov;
pub(crate) mod isa;
pub mod space;

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use cannoli::recording::Needs;
use cannoli::{Cannoli, ClientInfo};
use object::{Object, ObjectSegment, ObjectSymbol};

use drcov::{Bb, DrcovModule};
use isa::Isa;
use space::{Module, Modules, Space};

/// What the parallel callbacks hand to the serial phase.
enum Ev {
    Exec(u64),
    /// A translated block: its first pc and its instructions' lengths.
    Block {
        pc: u64,
        lens: Box<[u8]>,
    },
    Map {
        base: u64,
        len: u64,
        exec: bool,
        file: Option<(Arc<str>, u64)>,
    },
    Unmap {
        base: u64,
        len: u64,
    },
    Protect {
        base: u64,
        len: u64,
        exec: bool,
    },
}

/// Everything the run collected, over all guest processes and threads.
#[derive(Default)]
struct Coverage {
    modules: Modules,
    /// Instruction starts by module id.
    hits: Vec<HashSet<u64>>,
    /// Instruction lengths QEMU reported, by module id and pc.
    lens: Vec<HashMap<u64, u8>>,
    /// Reported pcs in no executable mapping.
    outside: HashSet<u64>,
    exec_events: u64,
    pids: HashSet<i32>,
    threads: u64,
    /// The first stream's guest address width.
    bits: Option<u32>,
}

/// One run's coverage: the run's own value (see [`cannoli::ToolState`]),
/// reached from each process's [`Proc`] and read by [`finish`] after it.
type Run = Arc<Mutex<Coverage>>;

impl Coverage {
    /// The instruction at `pc` of module `m` ran.
    fn hit(&mut self, m: u32, pc: u64) {
        if self.hits.len() <= m as usize {
            self.hits.resize_with(m as usize + 1, HashSet::new);
        }
        self.hits[m as usize].insert(pc);
    }

    /// The instruction at `pc` of module `m` is `len` bytes long.
    fn len(&mut self, m: u32, pc: u64, len: u8) {
        if self.lens.len() <= m as usize {
            self.lens.resize_with(m as usize + 1, HashMap::new);
        }
        self.lens[m as usize].insert(pc, len);
    }
}

/// A process's address space, and what ran in it before the trace showed
/// the mapping it ran in. The serial phase sees each thread's events in
/// order, but not the threads' in each other's: a new thread's chunks may
/// be handled before the chunk of the thread that mapped its code (the
/// first thread maps the program's image, and hands its first chunk over
/// only once it is full). So a pc the space does not know yet waits here
/// until a mapping covers it; what none ever covers is reported as outside
/// every mapping when the process's last thread is done.
struct AddrSpace {
    space: Space,
    /// Executed pcs in no known mapping yet.
    early_hits: HashSet<u64>,
    /// Instruction lengths at pcs in no known mapping yet.
    early_lens: HashMap<u64, u8>,
    /// Where what never found a mapping goes when the space is dropped.
    run: Run,
}

impl AddrSpace {
    fn new(arch: &str, bits: u32, run: Run) -> AddrSpace {
        AddrSpace {
            space: Space::new(arch, bits),
            early_hits: HashSet::new(),
            early_lens: HashMap::new(),
            run,
        }
    }

    /// The instruction at `pc` ran.
    fn hit(&mut self, c: &mut Coverage, pc: u64) {
        match self.space.lookup(pc) {
            Some(m) => c.hit(m, pc),
            None => {
                self.early_hits.insert(pc);
            }
        }
    }

    /// QEMU translated a block at `pc` with these instruction lengths: each
    /// goes to the module its instruction lies in (a block may run over the
    /// end of a mapping). A length of 0 (QEMU could not tell) ends the
    /// block's usable part: the pcs after it are unknown.
    fn block(&mut self, c: &mut Coverage, pc: u64, lens: &[u8]) {
        let mut at = pc;
        for &len in lens.iter().take_while(|&&n| n != 0) {
            match self.space.lookup(at) {
                Some(m) => c.len(m, at, len),
                None => {
                    self.early_lens.insert(at, len);
                }
            }
            at = at.wrapping_add(len as u64);
        }
    }

    /// Files what waited for a mapping that now exists (after a mapping
    /// became executable).
    fn settle(&mut self, c: &mut Coverage) {
        let AddrSpace {
            space,
            early_hits,
            early_lens,
            ..
        } = self;
        early_hits.retain(|&pc| match space.lookup(pc) {
            Some(m) => {
                c.hit(m, pc);
                false
            }
            None => true,
        });
        early_lens.retain(|&pc, &mut n| match space.lookup(pc) {
            Some(m) => {
                c.len(m, pc, n);
                false
            }
            None => true,
        });
    }
}

impl Drop for AddrSpace {
    fn drop(&mut self) {
        if !self.early_hits.is_empty() {
            lock(&self.run).outside.extend(self.early_hits.drain());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An address space shared by a process's threads. Dropping the last
/// reference takes the [`Run`]'s lock (see [`AddrSpace`]'s `Drop`):
/// never while holding it.
type Shared<T> = Arc<Mutex<T>>;

/// Per guest process: its current address space. An `execve` replaces it:
/// the new image's first thread (tid == pid) connects again.
struct Proc {
    space: Mutex<(Shared<AddrSpace>, bool)>,
    run: Run,
}

/// Per guest thread: the address space it runs in.
struct Thread {
    space: Shared<AddrSpace>,
}

struct Tracer;

impl Cannoli for Tracer {
    type Trace = Ev;
    type TidContext = Thread;
    type PidContext = Proc;

    fn init_pid(ci: &ClientInfo) -> Arc<Proc> {
        let run = ci.expect_state::<Mutex<Coverage>>();
        let mut c = lock(&run);
        c.pids.insert(ci.pid);
        c.bits.get_or_insert(ci.guest_bits);
        drop(c);
        let space = AddrSpace::new(&ci.arch, ci.guest_bits, run.clone());
        Arc::new(Proc {
            space: Mutex::new((Arc::new(Mutex::new(space)), false)),
            run,
        })
    }

    fn init_tid(pid: &Proc, ci: &ClientInfo) -> (Tracer, Thread) {
        lock(&pid.run).threads += 1;
        let mut cur = lock(&pid.space);
        if ci.tid == ci.pid {
            // The process's first thread, or its image after an execve.
            if cur.1 {
                let space = AddrSpace::new(&ci.arch, ci.guest_bits, pid.run.clone());
                cur.0 = Arc::new(Mutex::new(space));
            }
            cur.1 = true;
        }
        (
            Tracer,
            Thread {
                space: cur.0.clone(),
            },
        )
    }

    fn exec(_pid: &Proc, _tid: &Thread, pc: u64, trace: &mut Vec<Ev>) {
        trace.push(Ev::Exec(pc));
    }

    fn block(_pid: &Proc, _tid: &Thread, pc: u64, lens: &[u8], trace: &mut Vec<Ev>) {
        trace.push(Ev::Block {
            pc,
            lens: lens.into(),
        });
    }

    fn mmap(
        _pid: &Proc,
        _tid: &Thread,
        base: u64,
        len: u64,
        anon: bool,
        _read: bool,
        _write: bool,
        exec: bool,
        path: &str,
        offset: u64,
        trace: &mut Vec<Ev>,
    ) {
        let file = (!anon).then(|| (Arc::from(path), offset));
        trace.push(Ev::Map {
            base,
            len,
            exec,
            file,
        });
    }

    fn munmap(_pid: &Proc, _tid: &Thread, base: u64, len: u64, trace: &mut Vec<Ev>) {
        trace.push(Ev::Unmap { base, len });
    }

    fn mprotect(
        _pid: &Proc,
        _tid: &Thread,
        base: u64,
        len: u64,
        _read: bool,
        _write: bool,
        exec: bool,
        trace: &mut Vec<Ev>,
    ) {
        trace.push(Ev::Protect { base, len, exec });
    }

    fn trace(&mut self, pid: &Proc, tid: &Thread, trace: &[Ev]) {
        let mut a = lock(&tid.space);
        let mut c = lock(&pid.run);
        let c = &mut *c;
        for ev in trace {
            match ev {
                Ev::Exec(pc) => {
                    c.exec_events += 1;
                    a.hit(c, *pc);
                }
                Ev::Block { pc, lens } => a.block(c, *pc, lens),
                Ev::Map {
                    base,
                    len,
                    exec,
                    file,
                } => {
                    a.space
                        .map(*base, *len, *exec, file.clone(), &mut c.modules);
                    if *exec {
                        a.settle(c);
                    }
                }
                Ev::Unmap { base, len } => a.space.unmap(*base, *len),
                Ev::Protect { base, len, exec } => {
                    a.space.protect(*base, *len, *exec, &mut c.modules);
                    if *exec {
                        a.settle(c);
                    }
                }
            }
        }
    }
}

/// ARM's mapping symbols of an ELF file, sorted by link-time address:
/// `$a` starts A32 code (`Some(false)`), `$t` Thumb code (`Some(true)`),
/// `$d` data (`None`).
type ArmModes = Vec<(u64, Option<bool>)>;

/// The [`ArmModes`] of an ELF file; empty for other files.
fn arm_modes(data: &[u8]) -> ArmModes {
    let Ok(file) = object::File::parse(data) else {
        return Vec::new();
    };
    if file.architecture() != object::Architecture::Arm {
        return Vec::new();
    }
    let mut v: ArmModes = file
        .symbols()
        .filter_map(|s| {
            let name = s.name().ok()?;
            let thumb = match name.split('.').next()? {
                "$a" => Some(false),
                "$t" => Some(true),
                "$d" => None,
                _ => return None,
            };
            Some((s.address(), thumb))
        })
        .collect();
    v.sort_by_key(|&(a, _)| a);
    v
}

/// What the mapping symbols say about link-time address `addr`: Thumb,
/// A32, or nothing (no symbol before it, or data).
fn arm_mode_at(modes: &[(u64, Option<bool>)], addr: u64) -> Option<bool> {
    let i = modes.partition_point(|&(a, _)| a <= addr);
    modes.get(i.checked_sub(1)?)?.1
}

/// Link-time address minus run-time address of module `m`'s code (0 if
/// the file says nothing), as [`entry`] works it out.
fn link_bias(data: &[u8], m: &Module) -> u64 {
    let Ok(file) = object::File::parse(data) else {
        return 0;
    };
    for seg in file.segments() {
        let (off, size) = seg.file_range();
        if off <= m.offset && m.offset < off + size.max(1) {
            let want = seg.address().wrapping_add(m.offset - off);
            return want.wrapping_sub(m.start);
        }
    }
    0
}

/// One module of the output, with its blocks.
struct ModuleOut {
    row: DrcovModule,
    blocks: Vec<(u64, u64)>,
    insns: usize,
    bytes: u64,
}

/// The entry point of the ELF image in `data` as loaded for `m`.
fn entry(data: &[u8], m: &Module) -> u64 {
    let Ok(file) = object::File::parse(data) else {
        return 0;
    };
    // The load bias: where the segment holding the mapping's file offset
    // landed, against where the file says it goes.
    for seg in file.segments() {
        let (off, size) = seg.file_range();
        if off <= m.offset && m.offset < off + size.max(1) {
            let want = seg.address().wrapping_add(m.offset - off);
            return file.entry().wrapping_add(m.start.wrapping_sub(want));
        }
    }
    0
}

/// Builds each module's blocks. Modules without blocks are kept if they
/// map a file (DynamoRIO lists every loaded module), dropped if anonymous.
fn build(c: &Coverage) -> Vec<ModuleOut> {
    let mut files: HashMap<Arc<str>, Option<Vec<u8>>> = HashMap::new();
    let mut out = Vec::new();
    for (id, m) in c.modules.iter() {
        let hits = c.hits.get(id as usize);
        let mut pcs: Vec<u64> = hits
            .map(|h| h.iter().copied().collect())
            .unwrap_or_default();
        if pcs.is_empty() && m.path.is_none() {
            continue;
        }
        pcs.sort_unstable();
        let isa = Isa::of(&m.arch);
        let data = m.path.as_ref().and_then(|p| {
            files
                .entry(p.clone())
                .or_insert_with(|| std::fs::read(&**p).ok())
                .as_deref()
        });
        let reported = c.lens.get(id as usize);
        // Only for ARM pcs QEMU did not size (there should be none).
        let mut modes: Option<(ArmModes, u64)> = None;
        let len = |pc: u64| {
            if let Some(&n) = reported.and_then(|l| l.get(&pc)) {
                return n as u64;
            }
            let isa = match (isa, data) {
                (Isa::Arm, Some(d)) => {
                    let (modes, bias) =
                        modes.get_or_insert_with(|| (arm_modes(d), link_bias(d, m)));
                    isa.arm_mode(pc, arm_mode_at(modes, pc.wrapping_add(*bias)))
                }
                _ => isa.arm_mode(pc, None),
            };
            let code = data.filter(|_| isa.needs_code()).and_then(|d| {
                let off = usize::try_from(m.file_offset(pc)).ok()?;
                d.get(off..(off + 15).min(d.len()))
            });
            isa.len(code)
        };
        let blocks = drcov::coalesce(&pcs, u16::MAX as u64, len);
        let bytes = blocks.iter().map(|(s, e)| e - s).sum();
        out.push(ModuleOut {
            row: DrcovModule {
                base: m.base(),
                end: m.end,
                entry: data.map(|d| entry(d, m)).unwrap_or(0),
                path: m
                    .path
                    .as_deref()
                    .map(str::to_string)
                    .unwrap_or_else(|| "[anon]".to_string()),
            },
            blocks,
            insns: pcs.len(),
            bytes,
        });
    }
    out
}

/// More modules than drcov's 16-bit module ids can number.
#[derive(Debug, thiserror::Error)]
#[error("{0} modules: more than drcov's 65535")]
struct TooManyModules(usize);

/// Writes the file `w` (created before the run, so that a bad path fails
/// before the program runs) and prints the summary on stderr. Returns
/// whether writing the file worked (`Err` is a problem with the coverage
/// itself).
fn finish(
    mut w: launch::Output,
    report: &launch::Report,
    run: &Run,
) -> Result<Result<(), launch::OutputError>, TooManyModules> {
    let c = lock(run);
    let mods = build(&c);
    let mut bbs = Vec::new();
    let mut dropped = 0usize;
    for (id, m) in mods.iter().enumerate() {
        for &(s, e) in &m.blocks {
            match u32::try_from(s - m.row.base) {
                Ok(start) => bbs.push(Bb {
                    module: id as u16,
                    start,
                    size: (e - s) as u16,
                }),
                Err(_) => dropped += 1,
            }
        }
    }
    if mods.len() > u16::MAX as usize {
        return Err(TooManyModules(mods.len()));
    }
    let rows: Vec<DrcovModule> = mods.iter().map(|m| m.row.clone()).collect();
    // `Output` keeps write errors; `finish` returns the first.
    let _ = drcov::write(&mut w, c.bits.unwrap_or(64), &rows, &bbs);
    let dest = w.dest().to_string();
    let written = w.finish();

    let insns: usize = mods.iter().map(|m| m.insns).sum();
    let mut s = format!(
        "coverage: {} {dest}: {} modules, {} blocks, {} instructions from {} exec events \
         ({} process{}, {} thread{})\n",
        // On failure the line after the table says what went wrong.
        if written.is_ok() { "wrote" } else { "for" },
        mods.len(),
        bbs.len(),
        insns,
        c.exec_events,
        c.pids.len(),
        if c.pids.len() == 1 { "" } else { "es" },
        c.threads,
        if c.threads == 1 { "" } else { "s" },
    );
    let w = if c.bits.unwrap_or(64) <= 32 { 8 } else { 12 };
    s += &format!(
        "{:>4} {:>8} {:>8} {:>9}  {:<w$}  {:<w$}  module\n",
        "id", "blocks", "insns", "bytes", "base", "end"
    );
    for (id, m) in mods.iter().enumerate() {
        s += &format!(
            "{id:>4} {:>8} {:>8} {:>9}  {:<w$x}  {:<w$x}  {}\n",
            m.blocks.len(),
            m.insns,
            m.bytes,
            m.row.base,
            m.row.end,
            // The guest's file names: no control character to the terminal.
            cannoli::wire::escape(&m.row.path)
        );
    }
    if !c.outside.is_empty() {
        let mut v: Vec<u64> = c.outside.iter().copied().collect();
        v.sort_unstable();
        let shown: Vec<String> = v.iter().take(4).map(|pc| format!("{pc:#x}")).collect();
        s += &format!(
            "coverage: {} instructions ran outside any executable mapping the trace reported \
             (not in the file): {}{}\n",
            v.len(),
            shown.join(", "),
            if v.len() > 4 { ", ..." } else { "" }
        );
    }
    if dropped > 0 {
        s += &format!(
            "coverage: {dropped} blocks more than 4 GiB past their module's base were left out\n"
        );
    }
    if !report.stats.is_complete() {
        s += &format!(
            "coverage: the trace is incomplete ({}): coverage is a lower bound\n",
            report.stats.loss_summary()
        );
    }
    eprint!("{s}");
    Ok(written)
}

/// One line for `coverage --help` and `cannoli --help`.
pub const ABOUT: &str = "Code coverage of a program as a drcov file (Lighthouse, bncov, Cutter)";

/// What a recording must hold for coverage: every instruction's pc (with
/// the block, mapping and mprotect events every recording has).
const NEEDS: Needs = Needs {
    exec: true,
    mem: false,
    regs: None,
    mem_optional: None,
    branch_flags: false,
};

/// The command line of `coverage` (and `cannoli coverage`).
// No doc comment on the struct: clap would take it for the command's about.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "\
Runs PROGRAM under the patched QEMU (-cannoli libcoverage.so) and writes its
coverage as a drcov file (DRCOV VERSION 2), one module per executable mapping:
the program, its dynamic loader, its shared libraries. Exits with the program's
status. Without PROGRAM: listens on $CANNOLI_ADDR for a QEMU started
separately. A per-module summary goes to stderr.")]
pub struct Args {
    /// The drcov file (default: PROGRAM's name + .drcov in the current
    /// directory, coverage.drcov without PROGRAM)
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Worker threads per guest thread: by default one per core beyond QEMU's thread, 2 to 16
    #[arg(long, value_name = "N", default_value_t = cannoli::default_workers(), value_parser = crate::args::threads)]
    pub threads: usize,
    /// Read a recording made by `cannoli record` instead of running a
    /// program
    #[arg(long, value_name = "FILE", conflicts_with = "program")]
    pub replay: Option<PathBuf>,
    /// The program to trace and its arguments (options after PROGRAM are
    /// its own)
    #[arg(value_name = "PROGRAM", trailing_var_arg = true)]
    pub program: Vec<OsString>,
}

/// Where the drcov file goes without `-o`: PROGRAM's name + `.drcov` in
/// the current directory, `coverage.drcov` without PROGRAM.
fn default_output(program: &[OsString]) -> PathBuf {
    match program.first() {
        Some(p) => {
            let name = Path::new(p)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "coverage".into());
            PathBuf::from(format!("{name}.drcov"))
        }
        None => PathBuf::from("coverage.drcov"),
    }
}

/// Runs coverage; returns the exit status: the program's (or the
/// recording's), [`cannoli::EXIT_INCOMPLETE`] if events or the file are
/// incomplete, 1 (or the launcher's status) if nothing could run.
pub fn main(args: Args) -> i32 {
    let out = args.output.unwrap_or_else(|| default_output(&args.program));
    // Created now, so that a bad path fails before the program runs; filled
    // once the trace is complete.
    let w = match launch::Output::create(&out, "the drcov file") {
        Ok(w) => w,
        Err(e) => {
            eprintln!("coverage: {e}");
            return 1;
        }
    };
    let run = Run::default();
    let launcher = launch::Launcher::new(launch::Options {
        hooks: "coverage",
        threads: args.threads,
    })
    .state(run.clone());
    let report =
        match crate::input::run::<Tracer>(launcher, args.replay.as_deref(), NEEDS, args.program) {
            Ok(r) => r,
            Err(e) => {
                // Nothing ran: no empty file left behind.
                let _ = std::fs::remove_file(&out);
                eprintln!("coverage: {e}");
                return e.exit_code();
            }
        };
    match finish(w, &report, &run) {
        Ok(written) => report.finish_with_output("coverage", written),
        Err(e) => {
            eprintln!("coverage: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `s` as coverage's command line; `Err` is clap's one-line message.
    fn parse(s: &str) -> Result<Args, String> {
        crate::args::parse_line("coverage", s)
    }

    #[test]
    fn options_and_the_program() {
        let o = parse("").unwrap();
        assert_eq!(
            (o.threads, o.output, o.replay),
            (cannoli::default_workers(), None, None)
        );
        let o = parse("-o a.drcov --threads 3 ./prog -o x --threads").unwrap();
        assert_eq!(o.output.as_deref(), Some(Path::new("a.drcov")));
        assert_eq!(o.threads, 3);
        assert_eq!(o.program, crate::args::words("./prog -o x --threads"));
        assert_eq!(
            parse("-- -odd").unwrap().program,
            crate::args::words("-odd")
        );
        assert!(parse("--bogus").unwrap_err().contains("--bogus"));
        assert!(parse("-o").unwrap_err().contains("--output"));
        assert!(parse("--threads 0").unwrap_err().contains("at least 1"));
        let o = parse("--replay run.rec").unwrap();
        assert_eq!(o.replay.as_deref(), Some(Path::new("run.rec")));
        assert!(parse("--replay run.rec prog")
            .unwrap_err()
            .contains("--replay"));
    }

    #[test]
    fn the_file_is_named_after_the_program() {
        assert_eq!(
            default_output(&crate::args::words("/bin/ls -l")),
            Path::new("ls.drcov")
        );
        assert_eq!(default_output(&[]), Path::new("coverage.drcov"));
    }

    #[test]
    fn entry_of_a_static_and_a_relocated_image() {
        // The test binary itself: an x86-64 ELF (PIE or not).
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(&exe).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let first = file
            .segments()
            .find(|s| s.file_range().0 == 0)
            .expect("a segment at file offset 0");
        let m = Module {
            path: Some(exe.to_string_lossy().as_ref().into()),
            start: first.address(),
            end: first.address() + 0x1000,
            offset: 0,
            arch: "x86_64".into(),
            bits: 64,
        };
        assert_eq!(entry(&data, &m), file.entry());
        let moved = Module {
            start: m.start + 0x5550_0000_0000,
            ..m.clone()
        };
        assert_eq!(entry(&data, &moved), file.entry() + 0x5550_0000_0000);
        assert_eq!(entry(b"not an elf", &m), 0);
    }

    #[test]
    fn block_lengths_go_to_the_module_of_each_instruction() {
        let mut c = Coverage::default();
        let mut a = AddrSpace::new("armv5tel", 32, Run::default());
        a.space.map(
            0x10000,
            0x1000,
            true,
            Some(("/a".into(), 0)),
            &mut c.modules,
        );
        a.space.map(
            0x11000,
            0x1000,
            true,
            Some(("/b".into(), 0)),
            &mut c.modules,
        );
        // Thumb: 2, 4, 2 bytes; the last instruction is in the next
        // mapping.
        a.block(&mut c, 0x10ffa, &[2, 4, 2]);
        assert_eq!(c.lens[0].get(&0x10ffa), Some(&2));
        assert_eq!(c.lens[0].get(&0x10ffc), Some(&4));
        assert_eq!(c.lens[0].len(), 2);
        assert_eq!(c.lens[1].get(&0x11000), Some(&2));
        assert_eq!(c.lens[1].len(), 1);
        // An unknown length (0) leaves the rest of the block unsized.
        a.block(&mut c, 0x10100, &[4, 0, 2]);
        assert_eq!(c.lens[0].get(&0x10100), Some(&4));
        assert_eq!(c.lens[0].get(&0x10104), None);
        assert_eq!(c.lens[0].get(&0x10106), None);
    }

    #[test]
    fn code_that_ran_before_its_mapping_was_seen_waits_for_it() {
        // A second thread's events handled before the first thread's
        // mapping of the program.
        let mut c = Coverage::default();
        let run = Run::default();
        let mut a = AddrSpace::new("mipsel", 32, run.clone());
        a.block(&mut c, 0x400100, &[4, 4]);
        a.hit(&mut c, 0x400100);
        a.hit(&mut c, 0x400104);
        a.hit(&mut c, 0x7000);
        assert!(c.hits.is_empty() && c.lens.is_empty());
        // A data mapping settles nothing.
        a.space.map(0x7000, 0x1000, false, None, &mut c.modules);
        a.settle(&mut c);
        assert!(c.hits.is_empty());
        a.space.map(
            0x400000,
            0x1000,
            true,
            Some(("/p".into(), 0)),
            &mut c.modules,
        );
        a.settle(&mut c);
        assert_eq!(c.hits[0], HashSet::from([0x400100, 0x400104]));
        assert_eq!(c.lens[0], HashMap::from([(0x400100, 4), (0x400104, 4)]));
        // 0x7000 never became code: it is reported outside, once the
        // space is gone.
        assert_eq!(a.early_hits, HashSet::from([0x7000]));
        assert!(a.early_lens.is_empty());
        drop(a);
        assert!(lock(&run).outside.contains(&0x7000));
    }

    #[test]
    fn arm_mapping_symbols() {
        let modes = [(0x100, Some(false)), (0x200, None), (0x208, Some(true))];
        assert_eq!(arm_mode_at(&modes, 0xfc), None);
        assert_eq!(arm_mode_at(&modes, 0x100), Some(false));
        assert_eq!(arm_mode_at(&modes, 0x1fc), Some(false));
        assert_eq!(arm_mode_at(&modes, 0x204), None);
        assert_eq!(arm_mode_at(&modes, 0x208), Some(true));
        assert_eq!(arm_mode_at(&modes, 0x9000), Some(true));
        // Not an ARM file (this test binary): no mapping symbols.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(arm_modes(&exe).is_empty());
    }
}
