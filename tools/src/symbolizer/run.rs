// SPDX-License-Identifier: GPL-2.0-or-later
//! One run of the symbolizer: the settings the callbacks read, the state
//! each process reaches, and [`main`], which builds them and runs.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cannoli::recording::Needs;

use super::args::Args;
use super::symbols::Symbols;
#[cfg(doc)]
use super::tracer::Pid;
use super::tracer::{Out, Symbolizer};
use crate::output;
use launch::Output;

/// What the callbacks need of the command line.
pub(super) struct Settings {
    pub(super) binary: Option<PathBuf>,
    pub(super) symbols: Option<PathBuf>,
    pub(super) base: u64,
    pub(super) mem: bool,
    pub(super) limit: Option<u64>,
    pub(super) color: bool,
    /// C++ and Rust names shown demangled (no `--no-demangle`).
    pub(super) demangle: bool,
}

/// One run of the symbolizer: what [`main`] builds from the command line
/// and hands to the run, reached by each process's [`Pid`].
pub(super) struct Run {
    pub(super) settings: Settings,
    /// Symbol tables, one per guest executable (or `--binary`), shared by
    /// the processes running it.
    pub(super) tables: Mutex<HashMap<Option<PathBuf>, Arc<Symbols>>>,
    /// The trace output; [`main`] takes it back after the run.
    pub(super) out: Mutex<Option<Out>>,
}
/// Runs the symbolizer; returns the exit status (the program's, or 1 or
/// 2 when something went wrong before or around it).
pub fn main(args: Args) -> i32 {
    let path = args.output.as_deref();
    let Some(w) = output::open("symbolizer", path, "the trace", Output::stdout) else {
        return 1;
    };
    let mut launcher = launch::Launcher::new(launch::Options {
        hooks: "symbolizer",
        threads: args.workers.threads,
    });
    if let Some(addr) = &args.listen {
        launcher = launcher.listen(addr.clone());
    }
    let needs = Needs {
        exec: true,
        mem: !args.no_mem,
        regs: None,
        mem_optional: Some("--no-mem"),
        branch_flags: false,
    };
    let settings = Settings {
        color: args.color(),
        binary: args.binary,
        symbols: args.symbols,
        base: args.base,
        mem: !args.no_mem,
        limit: args.limit,
        demangle: !args.no_demangle,
    };
    let run = Arc::new(Run {
        settings,
        tables: Mutex::new(HashMap::new()),
        out: Mutex::new(Some(Out {
            w,
            lines: 0,
            stopped: false,
            last: None,
        })),
    });
    let launcher = launcher.state(run.clone());

    let start = Instant::now();
    let flush = || {
        if let Ok(mut out) = run.out.lock() {
            if let Some(o) = out.as_mut() {
                let _ = o.w.flush();
            }
        }
    };
    let result = launch::flushing_while(args.replay.is_none(), flush, || {
        crate::input::run::<Symbolizer>(launcher, args.replay.as_deref(), needs, args.program)
    });
    let secs = start.elapsed().as_secs_f64();

    let out = run.out.lock().unwrap().take().expect("set above");
    let (lines, stopped) = (out.lines, out.stopped || out.w.reader_gone());
    let written = out.w.finish();
    match result {
        Ok(report) => {
            let st = &report.stats;
            let mut extra = format!(", {}", st.loss_summary());
            if stopped {
                extra += &format!(", printed {lines} lines");
            }
            eprintln!(
                "symbolizer: {} events in {} chunks from {} guest thread{}, {secs:.3} s, {:.1} M events/s{extra}",
                st.events,
                st.chunks,
                st.connections,
                if st.connections == 1 { "" } else { "s" },
                st.events as f64 / secs.max(1e-9) / 1e6
            );
            report.finish_with_output("symbolizer", written)
        }
        Err(e) => {
            eprintln!("symbolizer: {e}");
            if let Err(w) = written {
                w.report("symbolizer");
            }
            e.exit_code()
        }
    }
}
