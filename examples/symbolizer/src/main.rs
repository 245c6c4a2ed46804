// SPDX-License-Identifier: GPL-2.0-or-later
//! The `symbolizer` example's client: the same code as `cannoli
//! symbolizer`, in `tools` (`tools::symbolizer`), so that the two
//! cannot drift apart.

#[derive(clap::Parser)]
#[command(name = "symbolizer", about = tools::symbolizer::ABOUT)]
struct Cli {
    #[command(flatten)]
    args: tools::symbolizer::Args,
}

fn main() {
    let cli = tools::args::parse::<Cli>("symbolizer");
    std::process::exit(tools::symbolizer::main(cli.args))
}
