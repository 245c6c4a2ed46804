// SPDX-License-Identifier: GPL-2.0-or-later
//! The `cannoli` command: record a run once, analyse it many times.
//!
//! ```text
//! cannoli record [--hooks pc|mem|branches|regs] -o run.cnl ./prog args...
//! cannoli trace --replay run.cnl          # the symbolizer
//! cannoli coverage --replay run.cnl -o cov.drcov
//! cannoli info run.cnl
//! ```
//!
//! Every tool also traces a program live, as its example binary does
//! (`cannoli trace ./prog`); the tools are the `tools` crate's, so
//! `cannoli trace` and `symbolizer` are the same code.

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cannoli",
    version,
    about = "A fast execution tracer for Linux user-mode programs, on QEMU",
    long_about = "A fast execution tracer for Linux user-mode programs, on QEMU.\n\n\
        Record a run once (`cannoli record`), then analyse the recording as often as you like \
        (`cannoli trace --replay FILE`, `coverage`, `backtrace`, `regtrace`, `info`); or trace a \
        program live with any tool (`cannoli trace ./prog args`)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Export {
    #[command(about = export_parquet::ABOUT)]
    Parquet(export_parquet::Args),
    #[command(about = export_tenet::ABOUT)]
    Tenet(export_tenet::Args),
    /// The coverage of a recording as a drcov file (Lighthouse, bncov,
    /// Lightkeeper): the same bytes as a live `cannoli coverage` run
    Drcov(DrcovArgs),
}

#[derive(clap::Args)]
struct DrcovArgs {
    /// The recording (made by `cannoli record`, any preset with every
    /// instruction: pc or mem)
    #[arg(value_name = "RUN")]
    recording: std::path::PathBuf,
    /// Where to write the drcov file
    #[arg(short, long, value_name = "FILE", default_value = "coverage.drcov")]
    output: std::path::PathBuf,
}

/// `cannoli export drcov RUN -o FILE` is `cannoli coverage --replay RUN
/// -o FILE`: the same code, so the same bytes as a live run.
fn drcov(a: DrcovArgs) -> i32 {
    #[derive(Parser)]
    struct Coverage {
        #[command(flatten)]
        args: tools::coverage::Args,
    }
    let argv: [std::ffi::OsString; 5] = [
        "coverage".into(),
        "--replay".into(),
        a.recording.into(),
        "-o".into(),
        a.output.into(),
    ];
    match Coverage::try_parse_from(argv) {
        Ok(c) => tools::coverage::main(c.args),
        Err(e) => {
            eprintln!("cannoli export drcov: {}", tools::args::one_line(&e));
            2
        }
    }
}

#[derive(Subcommand)]
enum Command {
    #[command(about = tools::record::ABOUT)]
    Record(tools::record::Args),
    #[command(about = tools::symbolizer::ABOUT)]
    Trace(tools::symbolizer::Args),
    #[command(about = tools::coverage::ABOUT)]
    Coverage(tools::coverage::Args),
    #[command(about = tools::backtrace::ABOUT)]
    Backtrace(tools::backtrace::Args),
    #[command(about = tools::regtrace::ABOUT)]
    Regtrace(tools::regtrace::Args),
    #[command(about = tools::probe::ABOUT)]
    Probe(tools::probe::Args),
    #[command(about = tools::heap::ABOUT)]
    Heap(tools::heap::Args),
    #[command(about = tools::info::ABOUT)]
    Info(tools::info::Args),
    /// Export a recording to the formats other tools read
    Export {
        #[command(subcommand)]
        format: Export,
    },
    #[command(about = viz::ABOUT)]
    Viz(viz::Args),
    /// Print a shell completion script (e.g. `cannoli completions bash >
    /// /etc/bash_completion.d/cannoli`)
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() {
    let cli: Cli = tools::args::parse("cannoli");
    let code = match cli.command {
        Command::Record(a) => tools::record::main(a),
        Command::Trace(a) => tools::symbolizer::main(a),
        Command::Coverage(a) => tools::coverage::main(a),
        Command::Backtrace(a) => tools::backtrace::main(a),
        Command::Regtrace(a) => tools::regtrace::main(a),
        Command::Probe(a) => tools::probe::main(a),
        Command::Heap(a) => export_parquet::heap_main(a),
        Command::Info(a) => tools::info::main(a),
        Command::Export { format } => match format {
            Export::Parquet(a) => export_parquet::main(a),
            Export::Tenet(a) => export_tenet::main(a),
            Export::Drcov(a) => drcov(a),
        },
        Command::Viz(a) => viz::main(a),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "cannoli", &mut script);
            match std::io::Write::write_all(&mut std::io::stdout().lock(), &script) {
                Ok(()) => 0,
                // `cannoli completions bash | head`: the reader is gone.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
                Err(e) => {
                    eprintln!("cannoli: writing the completion script failed: {e}");
                    1
                }
            }
        }
    };
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_subcommand_has_help() {
        let mut cmd = Cli::command();
        for sub in cmd.get_subcommands_mut() {
            let help = sub.render_help().to_string();
            assert!(help.contains("Usage:"), "{}: {help}", sub.get_name());
        }
    }
}
