// SPDX-License-Identifier: GPL-2.0-or-later
//! The command line of `heap` (and `cannoli heap`): its options, and the
//! one line that `--help` and the `cannoli` command's list show.

use std::ffi::OsString;
use std::path::PathBuf;

use super::alloc::{self, Role};

/// One line for `--help` and the `cannoli` command's list.
pub const ABOUT: &str =
    "Heap errors and leaks (use after free, overflows, double and invalid frees) on every guest, as memcheck reports them";

/// The command line of `heap`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// A custom allocation function (repeatable): NAME=malloc, calloc,
    /// realloc or free (its arguments as those have them); in code no
    /// symbol names, ADDR+SIZE=ROLE (the function's link-time address and
    /// size in bytes: 0x4012a0+72=malloc)
    #[arg(long = "alloc", value_name = "NAME=ROLE", value_parser = alloc::parse_alloc)]
    pub allocs: Vec<(String, Role)>,
    /// One JSON object per finding, and a summary object last
    #[arg(long)]
    pub json: bool,
    /// Write the findings to FILE (default: stderr)
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub workers: crate::args::Workers,
    /// Read a recording made by `cannoli record --hooks regs` instead of
    /// running a program
    #[arg(long, value_name = "FILE", conflicts_with = "program")]
    pub replay: Option<PathBuf>,
    /// Write every block the run allocated, freed or not, to
    /// DIR/allocations/part-00000.parquet (the layout of `cannoli export
    /// parquet`)
    #[arg(long, value_name = "DIR")]
    pub parquet: Option<PathBuf>,
    /// Leave out the findings a suppression of FILE matches (repeatable):
    /// memcheck's format, so a file `valgrind --gen-suppressions=all`
    /// wrote works as it is (Memcheck:Addr1..32, Free and Leak; fun:,
    /// obj: and ... frames, * and ? globs)
    #[arg(long = "suppressions", value_name = "FILE")]
    pub suppressions: Vec<PathBuf>,
    /// After each finding, print a suppression that matches it (as
    /// memcheck's --gen-suppressions=all; in --json, its "suppression")
    #[arg(long)]
    pub gen_suppressions: bool,
    /// The program to run under the patched QEMU, and its arguments
    #[arg(value_name = "PROGRAM", trailing_var_arg = true)]
    pub program: Vec<OsString>,
}
