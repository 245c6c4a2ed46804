// SPDX-License-Identifier: GPL-2.0-or-later
//! The `regtrace` example's client: the same code as `cannoli regtrace`,
//! in `tools` (`tools::regtrace`), so that the two cannot drift
//! apart.

#[derive(clap::Parser)]
#[command(name = "regtrace", about = tools::regtrace::ABOUT)]
struct Cli {
    #[command(flatten)]
    args: tools::regtrace::Args,
}

fn main() {
    let cli = tools::args::parse::<Cli>("regtrace");
    std::process::exit(tools::regtrace::main(cli.args))
}
