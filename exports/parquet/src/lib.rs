// SPDX-License-Identifier: GPL-2.0-or-later
//! Placeholder: `cannoli export parquet`.

use std::path::PathBuf;

/// One line for `cannoli --help`.
pub const ABOUT: &str = "Export a recording as Parquet files for SQL (DuckDB, Spark, Trino)";

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The recording (made by `cannoli record`)
    #[arg(value_name = "RUN")]
    pub recording: PathBuf,
}

/// Runs the command; returns the exit status.
pub fn main(args: Args) -> i32 {
    eprintln!(
        "cannoli export parquet: {}: not implemented yet",
        args.recording.display()
    );
    1
}
