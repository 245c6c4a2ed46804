// SPDX-License-Identifier: GPL-2.0-or-later
//! The command line of `probe` (and `cannoli probe`): its options, and the
//! one line that `--help` and the `cannoli` command's list show.

use std::ffi::OsString;
use std::path::PathBuf;

/// One line for `--help` and the `cannoli` command's list.
pub const ABOUT: &str =
    "Function probes: arguments at entries, results at returns, registers at any pc, on every guest";

/// The command line of `probe`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// A probe point (repeatable): FUNC, FUNC/N (N arguments), FUNC:return,
    /// FUNC+OFF or 0xADDR (every register there); FUNC may be a glob
    /// (`str*`)
    #[arg(short = 'p', long = "probe", value_name = "PROBE")]
    pub probes: Vec<String>,
    /// SystemTap's call flow: every entry and return of the matched
    /// functions, indented by depth, with results
    #[arg(long, conflicts_with = "json")]
    pub flow: bool,
    /// One JSON object per hit
    #[arg(long)]
    pub json: bool,
    /// Count every instruction: each hit gets its instruction index, each
    /// return the instructions since its entry (slower: every block is
    /// reported)
    #[arg(long)]
    pub insns: bool,
    /// Also write the calls as a Chrome trace-event file (ui.perfetto.dev
    /// opens it)
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
    /// List the functions that can be probed, with address, size and file,
    /// and exit: `--list [PATTERN] PROGRAM` (PATTERN a glob, default all;
    /// `LIB:PATTERN` for a shared library's)
    #[arg(long)]
    pub list: bool,
    /// Write the hits to FILE (default: stdout, shared with the program's
    /// own output)
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub workers: crate::args::Workers,
    /// Read a recording made by `cannoli record --hooks regs` instead of
    /// running a program
    #[arg(long, value_name = "FILE", conflicts_with = "program")]
    pub replay: Option<PathBuf>,
    /// The program to run under the patched QEMU, and its arguments; exits
    /// with its status (its ELF file is where the probes are looked up, so
    /// there is no mode without one)
    #[arg(value_name = "PROGRAM", trailing_var_arg = true)]
    pub program: Vec<OsString>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Args, String> {
        crate::args::parse_line("probe", s)
    }

    #[test]
    fn options() {
        let a = parse("-p f -p g:return --json -o x ./prog a b").unwrap();
        assert_eq!(a.probes, ["f", "g:return"]);
        assert!(a.json && !a.flow);
        let a = parse("--list str* ./prog").unwrap();
        assert!(a.list);
        assert_eq!(
            a.program,
            [OsString::from("str*"), OsString::from("./prog")]
        );
        assert!(parse("--flow --json ./p").is_err());
    }
}
