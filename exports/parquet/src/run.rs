// SPDX-License-Identifier: GPL-2.0-or-later
//! The command: its arguments, and the run that builds the export's value,
//! replays the recording with it and waits for the encoders.

use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cannoli::recording::Recording;

use crate::batch::Spares;
use crate::columns::FileSchema;
use crate::encode::{encoder, Job};
use crate::error::{Error, Result};
use crate::exporter::{Exporter, Serial, Shared};
use crate::small::Small;
use crate::tables::{self, Table};

/// One line for `cannoli --help`.
pub const ABOUT: &str = "Export a recording as Parquet files for SQL (DuckDB, Spark, Trino)";

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The recording (made by `cannoli record`)
    #[arg(value_name = "RUN")]
    pub recording: PathBuf,
    /// The output directory: one subdirectory of Parquet files per table
    #[arg(short, long, value_name = "DIR")]
    pub out: PathBuf,
    /// Decoding threads: by default one per core beyond QEMU's thread, 2 to 16
    #[arg(long, default_value_t = cannoli::default_workers() as u64, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,
    /// Encoding threads, each writing its own files of `insns` and `mem`
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub jobs: u64,
}

const TOOL: &str = "cannoli export parquet";

/// Refuses to mix two exports: DIR must not hold one already.
fn check_out(out: &Path) -> Result<()> {
    if out.join("insns").exists() {
        return Err(Error::AlreadyExported(out.to_path_buf()));
    }
    if out.exists() && !out.is_dir() {
        return Err(Error::NotDir(out.to_path_buf()));
    }
    Ok(())
}

/// Runs the command; returns the exit status.
pub fn main(args: Args) -> i32 {
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{TOOL}: {e}");
            1
        }
    }
}

/// The export: builds its value, replays the recording with it, then
/// waits for the encoders and reports what was written.
fn run(args: &Args) -> Result<i32> {
    let start = Instant::now();
    let rec = Recording::open(&args.recording)?;
    check_out(&args.out)?;
    let out = &args.out;
    let insns = Arc::new(Table::create(out, "insns", tables::insns())?);
    let mem = Arc::new(Table::create(out, "mem", tables::mem())?);
    let small = Small::create(out)?;
    let (tx, rx) = sync_channel::<Job>(8 * args.jobs as usize);
    let rx = Arc::new(Mutex::new(rx));
    let layouts = (
        Arc::new(FileSchema::new(&tables::insns())?),
        Arc::new(FileSchema::new(&tables::mem())?),
    );
    let spares = Arc::new(Spares::default());
    let encoders: Vec<_> = (0..args.jobs)
        .map(|_| {
            let (rx, i, m, l) = (rx.clone(), insns.clone(), mem.clone(), layouts.clone());
            let spares = spares.clone();
            std::thread::spawn(move || encoder(rx, spares, i, m, l))
        })
        .collect();
    let process_of = rec.streams().iter().map(|s| s.start.process).collect();
    let shared = Arc::new(Shared {
        serial: Mutex::new(Serial::new(small, process_of)),
        jobs: tx,
        spares,
    });
    let bar = tools::progress::Bar::new(&rec, TOOL);
    let replayed = rec.replay_with::<Exporter>(args.threads as usize, shared.clone());
    drop(bar);
    // Every stream's sender is gone with its exporter: this was the last.
    let mut serial = Arc::into_inner(shared)
        .map(|s| s.serial.into_inner().unwrap_or_else(|p| p.into_inner()))
        .ok_or(Error::StreamOpen)?;
    let (mut first_err, mut n_insns, mut n_mem) = (None, 0, 0);
    for e in encoders {
        match e.join().unwrap_or_else(|_| Err(Error::EncoderPanicked)) {
            Ok((i, m)) => (n_insns, n_mem) = (n_insns + i, n_mem + m),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    let replayed = replayed?;
    if let Some(e) = serial.error.take().or(first_err) {
        return Err(e);
    }
    let counts = serial.small.finish()?;
    for t in [&insns, &mem] {
        t.ensure_file()?;
    }
    let events = counts.events;
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{TOOL}: wrote {}: {} insns, {} mem, {} syscalls, {} mappings, {} signals, {} threads, {} modules, {} symbols; {events} events in {secs:.2} s ({:.1} M events/s), {}",
        out.display(),
        n_insns,
        n_mem,
        counts.syscalls,
        counts.mappings,
        counts.signals,
        counts.threads,
        counts.modules,
        counts.symbols,
        events as f64 / secs / 1e6,
        replayed.stats.loss_summary(),
    );
    if !replayed.stats.is_complete() {
        eprintln!(
            "{TOOL}: {}: the recording is incomplete ({}); the tables hold what was delivered",
            args.recording.display(),
            replayed.stats.loss_summary()
        );
        return Ok(cannoli::EXIT_INCOMPLETE);
    }
    Ok(0)
}
