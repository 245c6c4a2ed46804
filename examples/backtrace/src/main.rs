// SPDX-License-Identifier: GPL-2.0-or-later
//! The `backtrace` example binary: the command line of `cannoli backtrace`
//! on its own. The tool itself is `tools::backtrace`, shared with the
//! `cannoli` command; this package keeps the hook library
//! (`libbacktrace.so`, `src/lib.rs`).

#[derive(clap::Parser)]
#[command(name = "backtrace", about = tools::backtrace::ABOUT)]
struct Cli {
    #[command(flatten)]
    args: tools::backtrace::Args,
}

fn main() {
    std::process::exit(tools::backtrace::main(
        tools::args::parse::<Cli>("backtrace").args,
    ))
}
