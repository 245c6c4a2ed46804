// SPDX-License-Identifier: GPL-2.0-or-later
//! The analyses of the cannoli tracer, one module per tool. Each tool has
//! its command line as a `clap` [`clap::Args`] struct and a `main(args) ->
//! exit status`, so that the `cannoli` command (`cli/`) and the example
//! binaries (`examples/*`) run the same code: a tool traces a program live
//! or replays a recording (`--replay FILE`, see [`input`]).

pub mod args;
pub mod backtrace;
pub mod coverage;
pub mod demangle;
pub mod elf;
pub mod heap;
pub mod info;
pub mod input;
pub mod output;
pub mod probe;
pub mod progress;
pub mod record;
pub mod regtrace;
pub mod scratch;
pub mod symbolizer;
