// SPDX-License-Identifier: GPL-2.0-or-later
//! Runs heap: reads the program and plans its allocation functions (by
//! symbol, or by their code in a stripped static program), launches QEMU
//! (or replays a recording) and turns the findings into the exit status.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io::Write;
use std::sync::{Arc, Mutex};

use cannoli::recording::{Needs, RegsAt};

use super::super::probe::elf::Image;
use super::super::probe::plan::Plan;
use super::alloc::{self, Role};
use super::args::Args;
use super::report::Summary;
#[cfg(doc)]
use super::rows;
use super::rows::Allocations;
use super::shared::Run;
use super::sig;
use super::suppress::Suppressions;
use super::tracer::{self, lock};
use crate::output;
use crate::scratch::Scratch;
use launch::Output;

/// The exit status when something was found.
pub const FOUND_EXIT: i32 = 99;

/// The variable the hook library reads its plan's file name from.
pub const PLAN_ENV: &str = "CANNOLI_HEAP_PLAN";

fn image(args: &Args) -> Result<Image, String> {
    let program =
        match &args.replay {
            Some(r) => {
                let rec = cannoli::Recording::open(r).map_err(|e| e.to_string())?;
                let exe =
                    rec.info().command.first().cloned().ok_or_else(|| {
                        format!("{}: the recording names no program", r.display())
                    })?;
                OsString::from(exe)
            }
            None => args
                .program
                .first()
                .cloned()
                .ok_or("no program; give one: cannoli heap ./prog args")?,
        };
    let path = launch::find::resolve_program(&program).map_err(|e| e.to_string())?;
    Image::read(&path).map_err(|e| e.to_string())
}

/// The line saying which allocation functions of a stripped program were
/// found by their code, and where (what the probes are planned at).
fn found_line(img: &Image, found: &sig::Found) -> String {
    let list: Vec<String> = found
        .funcs
        .iter()
        .map(|(f, _)| format!("{} {:#x}", f.name, f.start))
        .collect();
    format!(
        "{} has no symbols; {} of {} allocation functions found by their code in {}: {}",
        img.path.display(),
        found.funcs.len(),
        found.tried,
        found.archive.display(),
        list.join(", ")
    )
}

/// Runs heap; returns the exit status. Without a Parquet writer:
/// `--parquet` is refused (the `cannoli` command has one, [`main_with`]).
pub fn main(args: Args) -> i32 {
    if args.parquet.is_some() {
        eprintln!("heap: this program cannot write Parquet; use `cannoli heap --parquet DIR`");
        return 2;
    }
    main_with(args, None)
}

/// Runs heap with `rows`, the writer of the allocations table that
/// `--parquet` asked for (opened by the caller: the Parquet tables have
/// their own crate, see [`rows`]); returns the exit status.
pub fn main_with(args: Args, rows: Option<Box<dyn Allocations>>) -> i32 {
    let mut strings = Vec::new();
    let mut custom = Vec::new();
    let plan = image(&args).and_then(|mut img| {
        let c = alloc::custom(&img, &args.allocs)?;
        img.add_funcs(c.funcs);
        custom = c.named;
        let (mut specs, mut missing) = alloc::specs(&img, &custom)?;
        if specs.is_empty() && img.is_go() {
            // Go's heap is the runtime's, garbage collected: nothing frees
            // a block, so there is nothing of malloc's to check (cgo links
            // the C library, whose malloc the plan finds above).
            eprintln!(
                "heap: warning: {} is a Go program: its heap is the Go runtime's \
                 (runtime.mallocgc, garbage collected), not malloc's: nothing is checked",
                img.path.display()
            );
        } else if specs.is_empty() {
            // A stripped static program: its C library's code finds them.
            // Its string functions are looked for at the same time, on a
            // core of their own: each search reads and matches the whole
            // archive, before the program can start.
            let (discovered, string_funcs) = std::thread::scope(|s| {
                let strings = s.spawn(|| sig::string_funcs(&img));
                let found = sig::discover(&img, &custom);
                (found, strings.join())
            });
            let tried = match discovered {
                Ok(found) if found.usable() => {
                    eprintln!("heap: {}", found_line(&img, &found));
                    img.add_funcs(found.funcs.into_iter().map(|(f, _)| f).collect());
                    // Not found: their over-reads are reported, as before.
                    if let Ok(Ok(s)) = string_funcs {
                        strings = s.iter().map(|f| (f.start, f.end)).collect();
                    }
                    (specs, missing) = alloc::specs(&img, &custom)?;
                    String::new()
                }
                Ok(found) => format!(
                    "; by their code in {}, {} of {} functions were found, not both malloc and free",
                    found.archive.display(),
                    found.funcs.len(),
                    found.tried
                ),
                Err(why) => format!("; not looked for by their code: {why}"),
            };
            if specs.is_empty() {
                eprintln!(
                    "heap: warning: {} has no allocation function (malloc, free, ...) in its \
                     symbol tables (stripped?){tried}: nothing is checked; name them with \
                     --alloc NAME=malloc",
                    img.path.display()
                );
            }
        }
        if let Some(name) = missing {
            return Err(alloc::unknown(&img, &name));
        }
        let mut plan = Plan::new(&img, specs, false, false).map_err(|e| e.to_string())?;
        // Away from the allocation functions, registers only for the call
        // stacks: three where a guest has up to 32.
        plan.narrow = Some(tracer::narrowed_registers(plan.abi));
        // And at most block starts none (a loop's back edge, landing at
        // the stack pointer it left).
        (plan.quiet, plan.quiet_words) = tracer::quiet_sp(plan.abi);
        Ok(plan)
    });
    let plan = match plan {
        Ok(p) => Arc::new(p),
        Err(e) => {
            eprintln!("heap: {e}");
            return 2;
        }
    };
    let program = plan.exe.0.clone();
    let suppressions = match Suppressions::read(&args.suppressions, &program) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("heap: {e}");
            return 2;
        }
    };
    let roles = plan
        .targets
        .iter()
        .map(|t| alloc::role_of(&custom, &t.name).unwrap_or(Role::Internal))
        .collect();
    let path = args.output.as_deref();
    let Some(out) = output::open("heap", path, "the findings", Output::stderr) else {
        return 1;
    };
    // The hook library's plan, a new file of this run, named to QEMU alone.
    let replay = args.replay.is_some();
    let plan_file = match Scratch::plan_unless_replay("heap", replay, || plan.hooks()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let run = Arc::new(Run {
        plan,
        roles,
        strings,
        library_strings: Mutex::new(HashMap::new()),
        unchecked: Mutex::new(HashSet::new()),
        json: args.json,
        gen_suppressions: args.gen_suppressions.then(|| program.clone()),
        suppressions,
        out: Mutex::new(Some(out)),
        summary: Mutex::new(Summary::default()),
        tables: Mutex::new(HashMap::new()),
        threads: Mutex::new(HashSet::new()),
        fold: tracer::fold_segments(args.workers.threads),
        rows: Mutex::new(rows),
        rows_error: Mutex::new(None),
        forks: Mutex::new(tracer::Forks::default()),
        live: args.replay.is_none(),
    });
    let mut launcher = launch::Launcher::new(launch::Options {
        hooks: "heap",
        threads: args.workers.threads,
    })
    .state(run.clone());
    if let Some(f) = &plan_file {
        launcher = launcher.qemu_env(PLAN_ENV, f.path());
    }
    let needs = Needs {
        regs: Some(RegsAt::All),
        mem: true,
        exec: false,
        // Stacks follow calls and returns, as live.
        branch_flags: true,
        ..Needs::default()
    };
    let result =
        crate::input::run::<tracer::Stream>(launcher, args.replay.as_deref(), needs, args.program);
    drop(plan_file);
    // A child whose parent never applied its fork goes on empty now.
    tracer::settle_forks(&run.forks);
    // Every process has ended and written its last rows.
    let table = run.finish_rows();
    if let Err(e) = &table {
        eprintln!("heap: the allocations table: {e}");
    }
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            let written = lock(&run.out).take().expect("finished once").finish();
            if let Err(w) = written {
                w.report("heap");
            }
            eprintln!("heap: {e}");
            return e.exit_code();
        }
    };
    let lost = report.stats.lost_events;
    let summary = lock(&run.summary);
    let text = if args.json {
        format!("{}\n", summary.json(lost))
    } else {
        summary.text(lost)
    };
    if let Some(w) = lock(&run.out).as_mut().filter(|w| w.is_writing()) {
        let _ = w.write_all(text.as_bytes());
    }
    let found = summary.total_found();
    let unordered = (summary.unordered > 0).then(|| summary.unordered_line());
    drop(summary);
    if let Some(line) = &unordered {
        eprintln!("heap: warning: {line}");
    }
    let written = lock(&run.out).take().expect("finished once").finish();
    let code = report.finish_with_output("heap", written);
    if code == cannoli::EXIT_INCOMPLETE || !report.stats.is_complete() || unordered.is_some() {
        cannoli::EXIT_INCOMPLETE
    } else if found > 0 {
        FOUND_EXIT
    } else if table.is_err() && code == 0 {
        1
    } else {
        code
    }
}
