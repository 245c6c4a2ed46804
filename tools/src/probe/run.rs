// SPDX-License-Identifier: GPL-2.0-or-later
//! Runs probe: `--list`, or plans the probes in the program, warns of Go
//! results it cannot read, launches QEMU (or replays a recording) and
//! reports the hits and what was incomplete.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cannoli::recording::{Needs, RegsAt};

use super::args::Args;
use super::elf::Image;
use super::error::Error;
use super::libs;
use super::list::list;
use super::plan::{Plan, Target};
use super::program::{program_image, replay_image};
use super::spec::{self, Spec};
use super::state::{lock, Mode, RunState};
use super::tracer;
use crate::output;
use crate::scratch::Scratch;
use launch::Output;

/// The variable the hook library reads its plan's file name from (QEMU
/// hides `CANNOLI_*` variables from the guest).
pub const PLAN_ENV: &str = "CANNOLI_PROBE_PLAN";

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
    let path = args.output.as_deref();
    let Some(out) = output::open("probe", path, "the probe hits", Output::stdout) else {
        return 1;
    };
    // The hook library's plan, in a file of this run (a glob can hook more
    // pcs than an environment variable holds), named to QEMU alone.
    let replay = args.replay.is_some();
    let plan_file = match Scratch::plan_unless_replay("probe", replay, || plan.hooks()) {
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
        threads: args.workers.threads,
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
