// SPDX-License-Identifier: GPL-2.0-or-later
//! Runs regtrace: turns the command line into the hook library's ranges or
//! plan, launches QEMU (or replays a recording) and reports the counts.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use cannoli::recording::{Needs, RegsAt};

use super::args::Args;
use super::filter::ReplayRanges;
use super::ranges::{fixed_plan, func_ranges, pie_plan, FuncError};
use super::tracer::{lock, Out, Run, Tracer};
use crate::output;
use launch::Output;

/// The environment variable the hook library reads its ranges from.
const RANGES_ENV: &str = "CANNOLI_REGTRACE_RANGES";

/// The environment variable naming the hook library's plan file (a
/// position-independent program's `--func`).
const PLAN_ENV: &str = "CANNOLI_REGTRACE_PLAN";
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
    let path = args.output.as_deref();
    let Some(w) = output::open("regtrace", path, "the trace", Output::stdout) else {
        return 1;
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
        threads: args.workers.threads,
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
