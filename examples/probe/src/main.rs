// SPDX-License-Identifier: GPL-2.0-or-later
//! The `probe` example's client: the same code as `cannoli probe`, in
//! `tools` (`tools::probe`).

#[derive(clap::Parser)]
#[command(name = "probe", about = tools::probe::ABOUT)]
struct Cli {
    #[command(flatten)]
    args: tools::probe::Args,
}

fn main() {
    let cli = tools::args::parse::<Cli>("probe");
    std::process::exit(tools::probe::main(cli.args))
}
