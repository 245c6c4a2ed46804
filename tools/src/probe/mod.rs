// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli probe`: function probes with their arguments and results, on
//! every guest, like uprobes and SystemTap for a program QEMU runs.
//!
//! ```text
//! cannoli probe -p pr_add6 -p 'pr_rec:return' ./prog     # one line per hit
//! cannoli probe --flow -p 'pr_*' ./prog                  # the call flow
//! cannoli probe --list 'pr_*' ./prog                     # what can be probed
//! cannoli probe -p libc:atoi -p libc:atoi:return ./dyn   # a shared library's
//! ```
//!
//! How it stays cheap: the probes are resolved in the program's ELF file
//! before it runs ([`plan`]), and the hook library asks QEMU for registers
//! at exactly those pcs: each probed function's entry and its return
//! instructions ([`isa`]), and the pcs of `FUNC+OFF` and `0xADDR` probes.
//! Everything else runs untraced, unless `--insns` counts every
//! instruction (for the instruction index of each hit, and the
//! instructions between an entry and its return), or an argument lies on
//! the stack (i386, the fifth of o32 and AAPCS), which needs the thread's
//! stores ([`shadow`]).
//!
//! `LIB:FUNC` probes are planned in the library's file and moved to where
//! the dynamic loader puts it, by the hook library and the client each
//! ([`libs`]). A position-independent program is planned the same way,
//! as a module at its link-time addresses; the hook library finds where
//! guest memory is from the first instruction QEMU runs, the entry of the
//! dynamic loader or of a static-pie program ([`plan::Anchor`]).
//!
//! The modules: [`spec`] parses `-p`, [`elf`] reads a file's functions,
//! [`libs`] finds a shared library's file, [`conv`] is each guest's calling
//! convention, [`isa`] finds return instructions and tail calls, [`plan`]
//! turns probes into hooked pcs, [`shadow`] keeps stores, [`tracer`] is the
//! client, [`out`] writes hits, [`hex`] the registers of a pc probe's
//! line; for Go, [`goroutine`] keeps frames by goroutine and [`stackmove`]
//! moves them with a stack the runtime copies.

pub mod conv;
pub mod elf;
pub mod error;
pub mod godwarf;
pub mod gopclntab;
pub mod goroutine;
pub mod hex;
pub mod isa;
pub mod libs;
pub mod out;
pub mod plan;
pub mod shadow;
pub mod spec;
pub mod stackmove;
pub mod tracer;

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cannoli::recording::{Needs, RegsAt};

use elf::Image;
use error::Error;
use plan::{Plan, Target};
use spec::Spec;

/// The variable the hook library reads its plan's file name from (QEMU
/// hides `CANNOLI_*` variables from the guest).
pub const PLAN_ENV: &str = "CANNOLI_PROBE_PLAN";

/// One line for `--help` and the `cannoli` command's list.
pub const ABOUT: &str =
    "Function probes: arguments at entries, results at returns, registers at any pc, on every guest";

/// The command line of `probe`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// A probe point (repeatable): FUNC, FUNC/N (N arguments), FUNC:return,
    /// FUNC+OFF or 0xADDR (every register there); FUNC may be a glob
    /// (`str*`)
    #[arg(short = 'p', long = "probe", value_name = "PROBE")]
    pub probes: Vec<String>,
    /// SystemTap's call flow: every entry and return of the matched
    /// functions, indented by depth, with results
    #[arg(long, conflicts_with = "json")]
    pub flow: bool,
    /// One JSON object per hit
    #[arg(long)]
    pub json: bool,
    /// Count every instruction: each hit gets its instruction index, each
    /// return the instructions since its entry (slower: every block is
    /// reported)
    #[arg(long)]
    pub insns: bool,
    /// Also write the calls as a Chrome trace-event file (ui.perfetto.dev
    /// opens it)
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
    /// List the functions that can be probed, with address, size and file,
    /// and exit: `--list [PATTERN] PROGRAM` (PATTERN a glob, default all;
    /// `LIB:PATTERN` for a shared library's)
    #[arg(long)]
    pub list: bool,
    /// Write the hits to FILE (default: stdout, shared with the program's
    /// own output)
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Worker threads per guest thread: by default one per core beyond QEMU's thread, 2 to 16
    #[arg(long, value_name = "N", default_value_t = cannoli::default_workers(), value_parser = crate::args::threads)]
    pub threads: usize,
    /// Read a recording made by `cannoli record --hooks regs` instead of
    /// running a program
    #[arg(long, value_name = "FILE", conflicts_with = "program")]
    pub replay: Option<PathBuf>,
    /// The program to run under the patched QEMU, and its arguments; exits
    /// with its status (its ELF file is where the probes are looked up, so
    /// there is no mode without one)
    #[arg(value_name = "PROGRAM", trailing_var_arg = true)]
    pub program: Vec<OsString>,
}

/// How hits are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Text,
    Json,
    Flow,
}

/// What every guest thread's probe shares: the plan and the output. One
/// value per run, made by [`main`] and handed to the run
/// ([`launch::Launcher::state`]); each process's `PidContext` holds it
/// (`ClientInfo::expect_state`), so that probe can run twice in one process.
pub struct RunState {
    pub plan: Arc<Plan>,
    pub mode: Mode,
    out: Mutex<Option<launch::Output>>,
    pub timeline: Option<Mutex<Vec<serde_json::Value>>>,
    pub hits: AtomicU64,
    pub threads: AtomicU64,
    /// A live run (its hook library asks for registers only at sites),
    /// not a replay.
    pub live: bool,
    /// Hits lost because their library's placement was not known in time
    /// (see `tracer::DEFER_LIMIT`).
    pub unplaced: AtomicU64,
    /// Go calls applied after a later number of their process's order
    /// (see `goroutine::WAIT_LIMIT`): their frames may be wrong.
    pub late: AtomicU64,
    /// Go calls without a number that may be out of their goroutine's
    /// order (`goroutine::Goroutines::unmatched`).
    pub unmatched: AtomicU64,
    /// Programs other than the plan's that a process exec'd, each said
    /// once (`Plan::for_image`).
    pub others: Mutex<std::collections::HashSet<String>>,
}

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RunState {
    /// Writes `text`; after a write error nothing more is written, but
    /// events are still consumed (QEMU is never held up).
    pub fn write(&self, text: &[u8]) {
        if let Some(w) = lock(&self.out).as_mut().filter(|w| w.is_writing()) {
            let _ = w.write_all(text);
        }
    }
}

/// `--list`: every function of `img` matching `pattern`, like `stap -L`.
fn list(img: &Image, pattern: &str) -> String {
    let mut s = String::new();
    let digits = if img.abi.word() == 4 { 8 } else { 16 };
    for f in img.matching(pattern) {
        s.push_str(&format!(
            "{} {:#0w$x} {} {}\n",
            f.name,
            f.start,
            f.size,
            img.path.display(),
            w = digits + 2
        ));
    }
    s
}

/// One warning line where `plan` shows results of a Go program's
/// functions that it cannot read: Go's ABI0 (the 32-bit guests and MIPS)
/// leaves them on the stack, where only the program's DWARF places them
/// (see `godwarf`), and a program built with `-ldflags=-w` or stripped has
/// none. Arguments are read by Go's conventions on every guest.
///
/// An assembly function's (`.abi0`) results are on the stack on every
/// guest, and nothing in the program places them (its DWARF has no
/// parameters for it): a line of its own says so.
fn go_warning(img: &Image, plan: &Plan) {
    let unread: Vec<&Target> = plan
        .targets
        .iter()
        .filter(|t| {
            !t.hidden
                && t.conv.go
                && t.conv.ret_reg().is_none()
                && t.ret_slot.is_none()
                && (t.on_return.is_some() || plan.flow)
        })
        .collect();
    let (asm, other): (Vec<&Target>, Vec<&Target>) = unread.iter().partition(|t| t.conv.abi0);
    if let Some(first) = asm.first() {
        eprintln!(
            "probe: warning: {} probed function{} Go assembly under Go's stack convention \
             ({}{}), whose results nothing in the program places, so {} `ret` is `?`",
            asm.len(),
            if asm.len() == 1 { " is" } else { "s are" },
            first.name,
            if asm.len() == 1 { "" } else { ", ..." },
            if asm.len() == 1 { "its" } else { "their" },
        );
    }
    if !other.is_empty() {
        eprintln!(
            "probe: warning: {} is a Go program without DWARF: on this guest its functions \
             return their results on the stack (Go's ABI0), where only DWARF places them, so \
             `ret` is `?`",
            img.path.display()
        );
    }
}

/// The program a live run or `--list` reads; `Err` is one line.
fn program_image(args: &Args) -> Result<Image, Error> {
    // `--list PATTERN PROGRAM`: the program is the last word.
    let program = if args.list {
        args.program.last()
    } else {
        args.program.first()
    };
    let Some(program) = program else {
        return Err(Error::NoProgram);
    };
    let path = launch::find::resolve_program(program)?;
    Image::read(&path)
}

/// The recorded program of `--replay FILE`.
fn replay_image(path: &Path) -> Result<Image, Error> {
    let rec = cannoli::Recording::open(path)?;
    let exe = rec
        .info()
        .command
        .first()
        .cloned()
        .ok_or_else(|| Error::NoCommand(path.to_path_buf()))?;
    let exe = launch::find::resolve_program(&OsString::from(exe))?;
    Image::read(&exe)
}

/// Runs probe; returns the exit status (the program's, or 1 or 2 when
/// something went wrong before or around it).
pub fn main(args: Args) -> i32 {
    let img = match &args.replay {
        Some(r) => replay_image(r),
        None => program_image(&args),
    };
    let img = match img {
        Ok(i) => i,
        Err(e) => {
            eprintln!("probe: {e}");
            return 2;
        }
    };
    if args.list {
        let pattern = match &args.program[..] {
            [p, _, ..] => p.to_string_lossy().into_owned(),
            _ => "*".into(),
        };
        // `LIB:PATTERN`: a shared library's functions (at its link-time
        // addresses: where it lands is known only once it runs).
        let split = spec::lone_colon(&pattern).map(|i| (&pattern[..i], &pattern[i + 1..]));
        let listed = match split {
            Some((lib, pat)) => libs::find(&img.path, lib)
                .and_then(|p| Image::read(&p))
                .map(|li| list(&li, pat)),
            // The program's, then those of each library the loader maps
            // for it (`stap -L` of the process and its libraries).
            None => libs::loaded(&img.path).map(|ls| {
                let mut text = list(&img, &pattern);
                // One without symbols of a known guest lists nothing.
                for li in ls.iter().filter_map(|l| Image::read(l).ok()) {
                    text += &list(&li, &pattern);
                }
                text
            }),
        };
        let text = match listed {
            Ok(t) => t,
            Err(e) => {
                eprintln!("probe: {e}");
                return 2;
            }
        };
        if text.is_empty() {
            eprintln!(
                "probe: no function matches {pattern:?} in {}",
                img.path.display()
            );
            return 1;
        }
        return match std::io::stdout().lock().write_all(text.as_bytes()) {
            Ok(()) => 0,
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
            Err(e) => {
                eprintln!("probe: writing the list failed: {e}");
                1
            }
        };
    }
    if args.probes.is_empty() {
        eprintln!("probe: no probe; give one with -p FUNC (or --list to see the functions)");
        return 2;
    }
    let specs: Result<Vec<Spec>, Error> = args
        .probes
        .iter()
        .map(|p| Spec::parse(p).map_err(Error::from))
        .collect();
    let plan = specs.and_then(|s| Plan::new(&img, s, args.insns, args.flow));
    let plan = match plan {
        Ok(p) => {
            go_warning(&img, &p);
            Arc::new(p)
        }
        Err(e) => {
            eprintln!("probe: {e}");
            return 2;
        }
    };
    let out = match &args.output {
        Some(path) => match launch::Output::create(path, "the probe hits") {
            Ok(w) => w,
            Err(e) => {
                eprintln!("probe: {e}");
                return 1;
            }
        },
        None => launch::Output::stdout("the probe hits"),
    };
    // The hook library's plan, in a file of this run (a glob can hook more
    // pcs than an environment variable holds), named to QEMU alone.
    let plan_file = match args
        .replay
        .is_none()
        .then(|| crate::scratch::Scratch::plan("probe", &plan.hooks()))
        .transpose()
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let mode = if args.flow {
        Mode::Flow
    } else if args.json {
        Mode::Json
    } else {
        Mode::Text
    };
    let run = Arc::new(RunState {
        plan: plan.clone(),
        mode,
        out: Mutex::new(Some(out)),
        timeline: args.timeline.as_ref().map(|_| Mutex::new(Vec::new())),
        hits: AtomicU64::new(0),
        threads: AtomicU64::new(0),
        live: args.replay.is_none(),
        unplaced: AtomicU64::new(0),
        late: AtomicU64::new(0),
        unmatched: AtomicU64::new(0),
        others: Mutex::new(Default::default()),
    });
    let mut launcher = launch::Launcher::new(launch::Options {
        hooks: "probe",
        threads: args.threads,
    })
    .state(run.clone());
    if let Some(f) = &plan_file {
        launcher = launcher.qemu_env(PLAN_ENV, f.path());
    }
    let needs = Needs {
        regs: Some(RegsAt::All),
        mem: plan.stores,
        exec: false,
        ..Needs::default()
    };
    let flush = || {
        if let Some(w) = lock(&run.out).as_mut() {
            let _ = w.flush();
        }
    };
    let result = launch::flushing_while(run.live, flush, || {
        crate::input::run::<tracer::Probe>(launcher, args.replay.as_deref(), needs, args.program)
    });
    drop(plan_file);
    let written = lock(&run.out).take().expect("finished once").finish();
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            if let Err(w) = written {
                w.report("probe");
            }
            eprintln!("probe: {e}");
            return e.exit_code();
        }
    };
    if let (Some(path), Some(tl)) = (&args.timeline, &run.timeline) {
        let events = std::mem::take(&mut *lock(tl));
        let doc = serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ns" });
        if let Err(e) = std::fs::write(path, doc.to_string()) {
            eprintln!("probe: writing {} failed: {e}", path.display());
            return 1;
        }
    }
    eprintln!(
        "probe: {} hits of {} probes in {} functions, {} thread{}",
        run.hits.load(Ordering::Relaxed),
        plan.specs.len(),
        plan.targets.iter().filter(|t| !t.hidden).count(),
        run.threads.load(Ordering::Relaxed),
        if run.threads.load(Ordering::Relaxed) == 1 {
            ""
        } else {
            "s"
        }
    );
    let unplaced = run.unplaced.load(Ordering::Relaxed);
    let late = run.late.load(Ordering::Relaxed);
    let code = report.finish_with_output("probe", written);
    if unplaced > 0 {
        eprintln!(
            "probe: INCOMPLETE: {unplaced} hits lost: their library's placement was not known in time"
        );
    }
    if late > 0 {
        eprintln!(
            "probe: INCOMPLETE: {late} Go calls came too late for their goroutine's order (a thread held its events back); their returns may be missing"
        );
    }
    let unmatched = run.unmatched.load(Ordering::Relaxed);
    if unmatched > 0 {
        eprintln!(
            "probe: INCOMPLETE: {unmatched} Go calls may be out of order, and their hits missing: the recording has no order numbers between its threads (`--hooks regs`), and a goroutine can enter on one thread and return on another; probe the program live"
        );
    }
    if code == 0 && unplaced + late + unmatched > 0 {
        return 3;
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Args, String> {
        crate::args::parse_line("probe", s)
    }

    #[test]
    fn options() {
        let a = parse("-p f -p g:return --json -o x ./prog a b").unwrap();
        assert_eq!(a.probes, ["f", "g:return"]);
        assert!(a.json && !a.flow);
        let a = parse("--list str* ./prog").unwrap();
        assert!(a.list);
        assert_eq!(
            a.program,
            [OsString::from("str*"), OsString::from("./prog")]
        );
        assert!(parse("--flow --json ./p").is_err());
    }
}
