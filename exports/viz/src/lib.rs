// SPDX-License-Identifier: GPL-2.0-or-later
//! Placeholder: `cannoli viz`.

use std::path::PathBuf;

/// One line for `cannoli --help`.
pub const ABOUT: &str =
    "Draw a recording: time against guest address, fetches, loads and stores, one lane per thread";

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The recording (made by `cannoli record`)
    #[arg(value_name = "RUN")]
    pub recording: PathBuf,
}

/// Runs the command; returns the exit status.
pub fn main(args: Args) -> i32 {
    eprintln!(
        "cannoli viz: {}: not implemented yet",
        args.recording.display()
    );
    1
}
