// SPDX-License-Identifier: GPL-2.0-or-later
//! Runs backtrace: the run's shared state and totals, what a recording must
//! hold, and `main`, which launches QEMU (or replays) and reports.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cannoli::recording::{Needs, RegsAt};

use super::arch;
use super::args::Args;
use super::output::Out;
use super::symbols::Functions;
use super::tracer::Backtrace;
#[cfg(doc)]
use super::tracer::Pid;
use crate::output;
use launch::Output;

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

/// One run of backtrace: what [`main`] builds from the command line and
/// hands to the run (each process's [`Pid`] holds it), the symbol tables its
/// processes share, and the totals `main` reports after it.
#[derive(Default)]
pub(super) struct Run {
    /// `--binary`, for [`Backtrace::init_tid`].
    pub(super) binary: Option<PathBuf>,
    /// Names shown demangled (no `--no-demangle`).
    pub(super) demangle: bool,
    /// `None` once [`main`] has taken it back to finish it.
    pub(super) out: Mutex<Option<Out>>,
    /// One table per guest executable.
    pub(super) tables: Mutex<HashMap<Option<PathBuf>, Arc<Functions>>>,
    /// One table per library mapped, `None` if it cannot be read.
    pub(super) libs: Mutex<HashMap<String, Option<Arc<Functions>>>>,
    pub(super) enters: AtomicU64,
    pub(super) exits: AtomicU64,
    pub(super) deepest: AtomicUsize,
    pub(super) blind: AtomicU64,
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
    let path = args.output.as_deref();
    let Some(w) = output::open("backtrace", path, "the trace", Output::stdout) else {
        return 1;
    };
    let mut launcher = launch::Launcher::new(launch::Options {
        hooks: "backtrace",
        threads: args.workers.threads,
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
