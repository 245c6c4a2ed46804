// SPDX-License-Identifier: GPL-2.0-or-later
//! The command line of `regtrace`: its options, and the one line that
//! `--help` and the `cannoli` command's list show.

use std::ffi::OsString;
use std::path::PathBuf;

use super::ranges::parse_range;

/// One line for `--help` and the `cannoli` command's list.
pub const ABOUT: &str =
    "Prints each executed instruction and the general purpose registers it changed, by name";

/// The command line of `regtrace`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Write the trace to FILE (default: stdout, shared with the program's
    /// own output)
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Only instructions in [LO, HI) (hex; repeatable)
    #[arg(long = "range", value_name = "LO-HI", value_parser = parse_range)]
    pub ranges: Vec<(u64, u64)>,
    /// Only the function SYMBOL of PROGRAM's symbol table (also of a
    /// position-independent one, placed as it runs; repeatable)
    #[arg(long = "func", value_name = "SYMBOL")]
    pub funcs: Vec<String>,
    /// Only instructions that changed a register
    #[arg(long)]
    pub changed: bool,
    #[command(flatten)]
    pub workers: crate::args::Workers,
    /// Read a recording made by `cannoli record` (with registers at every
    /// instruction) instead of running a program; --func then looks in the
    /// recorded program's symbol table
    #[arg(long, value_name = "FILE", conflicts_with = "program")]
    pub replay: Option<PathBuf>,
    /// The program to run under the patched QEMU (-cannoli libregtrace.so),
    /// and its arguments; exits with its status. Without one (and without
    /// --replay), listens on $CANNOLI_ADDR for a QEMU started separately
    #[arg(value_name = "PROGRAM", trailing_var_arg = true)]
    pub program: Vec<OsString>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::path::Path;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// `s` as regtrace's command line; `Err` is clap's one-line message.
    fn parse(s: &str) -> Result<Args, String> {
        crate::args::parse_line("regtrace", s)
    }

    #[test]
    fn options() {
        let a =
            parse("-o t.txt --range 0x10-20 --range 30-40 --func f --changed --threads 3").unwrap();
        assert_eq!(a.output.as_deref(), Some(Path::new("t.txt")));
        assert_eq!(a.ranges, [(0x10, 0x20), (0x30, 0x40)]);
        assert_eq!(a.funcs, ["f"]);
        assert_eq!((a.changed, a.workers.threads), (true, 3));
        let a = parse("").unwrap();
        assert_eq!((a.changed, a.workers.threads, a.replay), (false, 2, None));
        assert!(parse("--range 10-5").unwrap_err().contains("want LO-HI"));
        assert!(parse("--range 10").unwrap_err().contains("want LO-HI"));
        assert!(parse("--threads 0").unwrap_err().contains("at least 1"));
        assert!(parse("--bogus").unwrap_err().contains("--bogus"));
    }

    #[test]
    fn program_and_its_arguments() {
        let a = parse("--changed ./prog --range 1-2 -x").unwrap();
        assert!(a.ranges.is_empty());
        let want: Vec<OsString> = ["./prog", "--range", "1-2", "-x"].map(Into::into).into();
        assert_eq!(a.program, want);
        let a = parse("-- --prog").unwrap();
        assert_eq!(a.program, [OsString::from("--prog")]);
    }

    #[test]
    fn replay_is_instead_of_a_program() {
        let a = parse("--replay run.rec --range 10-20").unwrap();
        assert_eq!(a.replay.as_deref(), Some(Path::new("run.rec")));
        let e = parse("--replay run.rec ./prog").unwrap_err();
        assert!(e.contains("--replay") && !e.contains('\n'), "{e}");
    }
}
