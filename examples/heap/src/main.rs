// SPDX-License-Identifier: GPL-2.0-or-later
//! The `heap` example's client: the same code as `cannoli heap`, in
//! `tools` (`tools::heap`).

#[derive(clap::Parser)]
#[command(name = "heap", about = tools::heap::ABOUT)]
struct Cli {
    #[command(flatten)]
    args: tools::heap::Args,
}

fn main() {
    let cli = tools::args::parse::<Cli>("heap");
    std::process::exit(tools::heap::main(cli.args))
}
