// SPDX-License-Identifier: GPL-2.0-or-later
//! The command line of `symbolizer`: its options, how their numbers and
//! `--color` are read, and the one line that `--help` shows.

use std::ffi::OsString;
use std::io::{self, IsTerminal};
use std::path::PathBuf;

/// One line for `--help` and the `cannoli` command's list.
pub const ABOUT: &str =
    "Prints every instruction and memory access traced by QEMU as symbol+offset";

/// The command line of `symbolizer`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Guest ELF to read symbols from (default: the guest's executable)
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Extra symbols in nm format (ADDR TYPE NAME or nm -S lines)
    #[arg(long, value_name = "FILE")]
    pub symbols: Option<PathBuf>,
    /// Load address to add to the symbols (PIE binaries)
    #[arg(long, value_name = "ADDR", default_value = "0", value_parser = parse_num)]
    pub base: u64,
    #[command(flatten)]
    pub workers: crate::args::Workers,
    /// Without PROGRAM: address to listen on (default $CANNOLI_ADDR or
    /// 127.0.0.1:11458)
    #[arg(long, value_name = "ADDR", conflicts_with = "program")]
    pub listen: Option<String>,
    /// Write the trace to FILE instead of stdout
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Do not print memory accesses
    #[arg(long)]
    pub no_mem: bool,
    /// Print at most N trace lines (events are still consumed)
    #[arg(long, value_name = "N", value_parser = parse_num)]
    pub limit: Option<u64>,
    /// Colour the trace: auto (when it goes to a terminal), always or never
    #[arg(long, alias = "colour", value_name = "WHEN", default_value = "auto")]
    pub color: When,
    /// Show C++ and Rust symbols as the symbol table has them
    /// (`_ZN3geo3Box4areaEv`), not demangled (`geo::Box::area()`)
    #[arg(long)]
    pub no_demangle: bool,
    /// Read a recording made by `cannoli record` instead of running a
    /// program
    #[arg(long, value_name = "FILE", conflicts_with_all = ["program", "listen"])]
    pub replay: Option<PathBuf>,
    /// The program to run under the patched QEMU for its architecture
    /// (found via $CANNOLI_QEMU, $CANNOLI_QEMU_DIR or target/qemu.env), and
    /// its arguments; exits with its exit status once the trace is printed.
    /// Extra QEMU options go in $CANNOLI_QEMU_ARGS. Without one (and
    /// without --replay), listens for QEMU started separately with -cannoli
    /// libsymbolizer.so (start this first)
    #[arg(value_name = "PROGRAM", trailing_var_arg = true)]
    pub program: Vec<OsString>,
}

/// When to colour the trace.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Auto,
    Always,
    Never,
}

impl Args {
    /// Whether the trace is coloured (`auto`: when it goes to a terminal).
    pub(super) fn color(&self) -> bool {
        match self.color {
            When::Always => true,
            When::Never => false,
            When::Auto => self.output.is_none() && io::stdout().is_terminal(),
        }
    }
}

/// A number in decimal or, with `0x`, in hex.
fn parse_num(s: &str) -> Result<u64, NotANumber> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| NotANumber)
}

/// An option's value that is not a number.
#[derive(Debug, thiserror::Error)]
#[error("wants a number")]
struct NotANumber;

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// `s` as symbolizer's command line; `Err` is clap's one-line message.
    fn parse(s: &str) -> Result<Args, String> {
        crate::args::parse_line("symbolizer", s)
    }

    #[test]
    fn options() {
        let o =
            parse("--binary /bin/x --threads 4 --no-mem --limit 10 --color never --base 0x1000")
                .unwrap();
        assert_eq!(o.binary.as_deref(), Some(std::path::Path::new("/bin/x")));
        assert_eq!(
            (o.workers.threads, o.no_mem, o.limit, o.color(), o.base),
            (4, true, Some(10), false, 0x1000)
        );
        let o = parse("--listen=127.0.0.1:5 --colour=always").unwrap();
        assert_eq!(o.listen.as_deref(), Some("127.0.0.1:5"));
        assert!(o.color());
        assert!(o.program.is_empty());
        let o = parse("").unwrap();
        assert_eq!(
            (o.workers.threads, o.base, o.no_mem, o.limit),
            (2, 0, false, None)
        );
        assert!(parse("--threads").unwrap_err().contains("--threads"));
        assert!(parse("--threads x").unwrap_err().contains("number"));
        assert!(parse("--threads 0").unwrap_err().contains("at least 1"));
        assert!(parse("--bogus").unwrap_err().contains("--bogus"));
        assert!(parse("--color sometimes").is_err());
    }

    #[test]
    fn program_and_its_arguments() {
        let o = parse("--no-mem ./prog --limit 3 -x").unwrap();
        assert!(o.no_mem);
        assert_eq!(o.limit, None);
        assert_eq!(o.program, crate::args::words("./prog --limit 3 -x"));
        let o = parse("--threads 1 -- --weird-name a").unwrap();
        assert_eq!(
            (o.workers.threads, o.program),
            (1, crate::args::words("--weird-name a"))
        );
        let o = parse("-o /tmp/t.txt prog").unwrap();
        assert_eq!(
            o.output.as_deref(),
            Some(std::path::Path::new("/tmp/t.txt"))
        );
        assert!(
            !o.color(),
            "auto colour is off when the trace goes to a file"
        );
        assert!(parse("--listen 127.0.0.1:1 prog")
            .unwrap_err()
            .contains("--listen"));
    }

    #[test]
    fn replay_is_instead_of_a_program_or_listening() {
        let o = parse("--replay run.rec --no-mem").unwrap();
        assert_eq!(o.replay.as_deref(), Some(std::path::Path::new("run.rec")));
        assert!(o.program.is_empty());
        for bad in [
            "--replay run.rec prog",
            "--replay run.rec --listen 127.0.0.1:1",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("--replay") && !e.contains('\n'), "{bad}: {e}");
        }
    }
}
