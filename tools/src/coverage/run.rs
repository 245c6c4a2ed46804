// SPDX-License-Identifier: GPL-2.0-or-later
//! Runs coverage: creates the drcov file, launches QEMU (or replays a
//! recording) with the client, and writes the file once the trace is done.

use cannoli::recording::Needs;

use super::args::{default_output, Args};
use super::collected::Run;
use super::report::finish;
use super::tracer::Tracer;

/// What a recording must hold for coverage: every instruction's pc (with
/// the block, mapping and mprotect events every recording has).
const NEEDS: Needs = Needs {
    exec: true,
    mem: false,
    regs: None,
    mem_optional: None,
    branch_flags: false,
};
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
        threads: args.workers.threads,
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
