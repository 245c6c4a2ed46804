// SPDX-License-Identifier: GPL-2.0-or-later
//! The `coverage` example binary: the command line of `cannoli coverage`
//! on its own. The tool itself is `tools::coverage`, shared with the
//! `cannoli` command; this package keeps the hook library
//! (`libcoverage.so`, `src/lib.rs`).

#[derive(clap::Parser)]
#[command(name = "coverage", about = tools::coverage::ABOUT)]
struct Cli {
    #[command(flatten)]
    args: tools::coverage::Args,
}

fn main() {
    std::process::exit(tools::coverage::main(
        tools::args::parse::<Cli>("coverage").args,
    ))
}
