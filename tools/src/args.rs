// SPDX-License-Identifier: GPL-2.0-or-later
//! Command-line parsing shared by the tools: `clap`, with a bad command
//! line reported in one line (what is wrong, and where the help is) and
//! exit status 2.

use std::ffi::OsString;

use clap::error::ErrorKind;
use clap::Parser;

/// Parses the process's command line as `P`; on an error prints one line
/// `tool: PROBLEM; see `tool --help`` and exits 2. `--help` and
/// `--version` print and exit 0, as usual.
pub fn parse<P: Parser>(tool: &str) -> P {
    parse_from(tool, std::env::args_os())
}

/// [`parse`] of `args` (the first is the program name).
pub fn parse_from<P: Parser>(tool: &str, args: impl IntoIterator<Item = OsString>) -> P {
    match P::try_parse_from(args) {
        Ok(p) => p,
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
            _ => {
                eprintln!("{tool}: {}; see `{tool} --help`", one_line(&e));
                std::process::exit(2)
            }
        },
    }
}

/// `--threads N` of every tool that traces (`#[command(flatten)]` into its
/// [`clap::Args`]): one option, one help line, one default everywhere.
#[derive(clap::Args, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workers {
    /// Worker threads per guest thread: by default one per core beyond QEMU's thread, 2 to 16
    #[arg(long, value_name = "N", default_value_t = cannoli::default_workers(), value_parser = threads)]
    pub threads: usize,
}

/// `--threads N` of every tool: a number, at least 1.
pub fn threads(v: &str) -> Result<usize, NotAThreadCount> {
    match v.parse() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(NotAThreadCount),
    }
}

/// A `--threads` value that is not a number of at least 1.
#[derive(Debug, thiserror::Error)]
#[error("needs a number (at least 1)")]
pub struct NotAThreadCount;

/// The words of `line`, as a command line's arguments (tests).
#[cfg(test)]
pub fn words(line: &str) -> Vec<OsString> {
    line.split_whitespace().map(OsString::from).collect()
}

/// `line` (split at whitespace) as tool `tool`'s [`clap::Args`] `A`; `Err`
/// is clap's one-line message (tests).
#[cfg(test)]
pub fn parse_line<A: clap::Args>(tool: &str, line: &str) -> Result<A, String> {
    #[derive(Parser)]
    struct Cli<A: clap::Args> {
        #[command(flatten)]
        args: A,
    }
    Cli::<A>::try_parse_from(std::iter::once(OsString::from(tool)).chain(words(line)))
        .map(|c| c.args)
        .map_err(|e| one_line(&e))
}

/// The first line of clap's message, without its `error: ` prefix.
pub fn one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let first = text.lines().next().unwrap_or("bad command line").trim();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser, Debug)]
    struct T {
        #[arg(long)]
        n: Option<u32>,
    }

    #[test]
    fn an_error_is_one_line_without_its_prefix() {
        let e = T::try_parse_from(["t", "--n", "x"]).unwrap_err();
        let l = one_line(&e);
        assert!(!l.contains('\n') && !l.starts_with("error"), "{l}");
        assert!(l.contains("--n"), "{l}");
    }
}
