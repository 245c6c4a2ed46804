// SPDX-License-Identifier: GPL-2.0-or-later
//! `symbolizer`: a cannoli client that prints every executed instruction and
//! memory access of the guest as `symbol+offset`.
//!
//! One command: `symbolizer [OPTIONS] ./prog ARGS...` starts the client,
//! runs `./prog` under the patched QEMU with `-cannoli libsymbolizer.so` (the
//! hook library of the `symbolizer` example, which records every
//! instruction and memory access) and exits with the program's status (see
//! the `launch` crate). Or, in two terminals, start it without a
//! program, then QEMU:
//!
//! ```text
//! $ symbolizer --binary ./prog > trace.txt &
//! $ qemu-mipsel -cannoli target/release/libsymbolizer.so ./prog
//! ```
//!
//! Or replay a recording of `cannoli record` (`--replay FILE`) without
//! running anything.
//!
//! Symbols are looked up in the worker threads (the parallel phase); the
//! serial phase only formats and prints.

mod args;
mod palette;
mod run;
pub mod symbols;
mod tables;
mod tracer;

pub use args::{Args, When, ABOUT};
pub use run::main;
