// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli record`: runs a program under the patched QEMU and writes
//! everything it streams to one file, without decoding it, for any number
//! of later analyses (`cannoli trace --replay FILE`, `cannoli info FILE`,
//! ...).
//!
//! The hooks are one of the presets of `libcannoli_record.so` (the `cli`
//! package's hook library), named to it in `$CANNOLI_RECORD_HOOKS`. It
//! exits with the program's status, or with `cannoli::EXIT_INCOMPLETE`
//! after one line saying what was lost.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use cannoli::recording::{Exit, Hooks, Info, Writer};

/// One line for `cannoli --help`.
pub const ABOUT: &str = "Run a program under the patched QEMU and record its trace to a file";

/// The hook library `cannoli record` loads into QEMU.
pub const HOOKS_LIBRARY: &str = "cannoli_record";

/// The variable naming the preset to the hook library.
pub const PRESET_ENV: &str = "CANNOLI_RECORD_HOOKS";

/// What to record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// Every executed instruction (trace --no-mem, coverage)
    Pc,
    /// Every executed instruction and every memory access (trace, coverage)
    Mem,
    /// Registers at branches and where they land (backtrace)
    Branches,
    /// Registers at every instruction, and every memory access (regtrace)
    Regs,
}

impl Preset {
    /// The zstd level that records this preset fastest on a 2-core machine
    /// (bench `record-*-lN`, busybox sha256sum of 20 MB): run events
    /// shrink 40x at level 3, so less is written; memory and register
    /// events hardly shrink more at higher levels, so the fastest level
    /// wins.
    pub fn level(self) -> i32 {
        match self {
            Preset::Pc => 3,
            Preset::Mem | Preset::Branches | Preset::Regs => -3,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Preset::Pc => "pc",
            Preset::Mem => "mem",
            Preset::Branches => "branches",
            Preset::Regs => "regs",
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Where to write the recording
    #[arg(short, long, value_name = "FILE", default_value = "cannoli.cnl")]
    pub output: PathBuf,
    /// What to record
    #[arg(long, value_enum, default_value_t = Preset::Mem)]
    pub hooks: Preset,
    /// zstd compression level of the chunks (negative: faster, larger);
    /// default 3 for `--hooks pc`, -3 for the others
    #[arg(long, allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-7..=19))]
    pub level: Option<i32>,
    /// Compressing threads per traced guest thread: by default one per core beyond QEMU's thread, 2 to 16
    #[arg(long, default_value_t = cannoli::default_workers() as u64, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,
    /// The program to run, and its arguments
    #[arg(
        required = true,
        trailing_var_arg = true,
        value_name = "PROGRAM [ARGS]"
    )]
    pub program: Vec<OsString>,
}

/// Runs `cannoli record`; returns the exit status.
pub fn main(args: Args) -> i32 {
    let tool = "cannoli record";
    let guest = launch::find::resolve_program(&args.program[0])
        .ok()
        .and_then(|p| launch::arch::inspect(&p).ok())
        .map(|g| g.arch.name.to_string());
    let info = Info {
        writer: env!("CARGO_PKG_VERSION").into(),
        hooks: Hooks::preset(args.hooks.name()),
        command: args
            .program
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        guest,
        started_unix_ns: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    };
    let level = args.level.unwrap_or(args.hooks.level());
    let writer = match Writer::create(&args.output, &info, level) {
        Ok(w) => Arc::new(w),
        Err(e) => {
            eprintln!("{tool}: cannot create {}: {e}", args.output.display());
            return 1;
        }
    };
    let start = Instant::now();
    // Read by the hook library inside QEMU (which hides CANNOLI_* from
    // the guest).
    let launcher = launch::Launcher::new(launch::Options {
        hooks: HOOKS_LIBRARY,
        threads: args.threads as usize,
    })
    .qemu_env(PRESET_ENV, args.hooks.name());
    let report = match launcher.record(args.program.clone(), writer.clone()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{tool}: {e}");
            drop(writer);
            let _ = std::fs::remove_file(&args.output);
            return e.exit_code();
        }
    };
    let st = &report.stats;
    let exit = Exit {
        status: Some(report.status),
        refused_connections: st.refused_connections,
        missing_processes: st.missing_processes,
        strangers: st.strangers,
        end_ns: writer.now_ns(),
    };
    let secs = start.elapsed().as_secs_f64();
    match writer.finish(&exit) {
        Ok(w) => {
            eprintln!(
                "{tool}: {}: {} stream{}, {} chunks, {:.1} MB of events stored in {:.1} MB ({:.1}x), {} hooks, {secs:.3} s, {}",
                args.output.display(),
                st.connections,
                if st.connections == 1 { "" } else { "s" },
                st.chunks,
                w.chunk_raw as f64 / 1e6,
                w.file_bytes as f64 / 1e6,
                w.chunk_raw as f64 / (w.file_bytes as f64).max(1.0),
                args.hooks.name(),
                st.loss_summary()
            );
            report.finish(tool)
        }
        Err(e) => {
            eprintln!(
                "{tool}: writing {} failed: {e}; the recording is incomplete",
                args.output.display()
            );
            cannoli::EXIT_INCOMPLETE
        }
    }
}
