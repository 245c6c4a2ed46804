// SPDX-License-Identifier: GPL-2.0-or-later
//! The command line of `coverage` (and `cannoli coverage`), its one-line
//! description, and where the drcov file goes without `-o`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// One line for `coverage --help` and `cannoli --help`.
pub const ABOUT: &str = "Code coverage of a program as a drcov file (Lighthouse, bncov, Cutter)";
/// The command line of `coverage` (and `cannoli coverage`).
// No doc comment on the struct: clap would take it for the command's about.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "\
Runs PROGRAM under the patched QEMU (-cannoli libcoverage.so) and writes its
coverage as a drcov file (DRCOV VERSION 2), one module per executable mapping:
the program, its dynamic loader, its shared libraries. Exits with the program's
status. Without PROGRAM: listens on $CANNOLI_ADDR for a QEMU started
separately. A per-module summary goes to stderr.")]
pub struct Args {
    /// The drcov file (default: PROGRAM's name + .drcov in the current
    /// directory, coverage.drcov without PROGRAM)
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub workers: crate::args::Workers,
    /// Read a recording made by `cannoli record` instead of running a
    /// program
    #[arg(long, value_name = "FILE", conflicts_with = "program")]
    pub replay: Option<PathBuf>,
    /// The program to trace and its arguments (options after PROGRAM are
    /// its own)
    #[arg(value_name = "PROGRAM", trailing_var_arg = true)]
    pub program: Vec<OsString>,
}

/// Where the drcov file goes without `-o`: PROGRAM's name + `.drcov` in
/// the current directory, `coverage.drcov` without PROGRAM.
pub(super) fn default_output(program: &[OsString]) -> PathBuf {
    match program.first() {
        Some(p) => {
            let name = Path::new(p)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "coverage".into());
            PathBuf::from(format!("{name}.drcov"))
        }
        None => PathBuf::from("coverage.drcov"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `s` as coverage's command line; `Err` is clap's one-line message.
    fn parse(s: &str) -> Result<Args, String> {
        crate::args::parse_line("coverage", s)
    }

    #[test]
    fn options_and_the_program() {
        let o = parse("").unwrap();
        assert_eq!(
            (o.workers.threads, o.output, o.replay),
            (cannoli::default_workers(), None, None)
        );
        let o = parse("-o a.drcov --threads 3 ./prog -o x --threads").unwrap();
        assert_eq!(o.output.as_deref(), Some(Path::new("a.drcov")));
        assert_eq!(o.workers.threads, 3);
        assert_eq!(o.program, crate::args::words("./prog -o x --threads"));
        assert_eq!(
            parse("-- -odd").unwrap().program,
            crate::args::words("-odd")
        );
        assert!(parse("--bogus").unwrap_err().contains("--bogus"));
        assert!(parse("-o").unwrap_err().contains("--output"));
        assert!(parse("--threads 0").unwrap_err().contains("at least 1"));
        let o = parse("--replay run.rec").unwrap();
        assert_eq!(o.replay.as_deref(), Some(Path::new("run.rec")));
        assert!(parse("--replay run.rec prog")
            .unwrap_err()
            .contains("--replay"));
    }

    #[test]
    fn the_file_is_named_after_the_program() {
        assert_eq!(
            default_output(&crate::args::words("/bin/ls -l")),
            Path::new("ls.drcov")
        );
        assert_eq!(default_output(&[]), Path::new("coverage.drcov"));
    }
}
