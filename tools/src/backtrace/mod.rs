// SPDX-License-Identifier: GPL-2.0-or-later
//! `backtrace`: follows the call stack of every guest thread and prints the
//! whole backtrace, as one JSON line, at every function entry and exit.
//! Here, not in the example, so that `cannoli backtrace` and the
//! `backtrace` example binary run the same code.
//!
//! One command: `backtrace [OPTIONS] ./prog ARGS...` starts the client,
//! runs `./prog` under the patched QEMU for its architecture with
//! `-cannoli libbacktrace.so` (the backtrace example's hook library) and
//! exits with the program's status. Or, in two terminals, start it without
//! a program, then QEMU:
//!
//! ```text
//! $ backtrace -o calls.jsonl &
//! $ qemu-mipsel -cannoli target/release/libbacktrace.so ./prog
//! ```
//!
//! Or replay a recording made by `cannoli record` with the backtrace hook
//! library's decisions (`--replay FILE`).
//!
//! The design is the one of Cannoli's backtrace walkthrough: `Branch` hooks,
//! a `PidContext` holding the backtrace state (backtrace, return-address
//! stack, branch flag; here one per guest thread of the process), a
//! `TidContext` holding the symbols, and the serial `trace` phase walking
//! the events in execution order (see `state.rs` for the algorithm and
//! `arch.rs` for what a call looks like on each architecture). The parallel
//! callbacks only keep the events that matter: branches, the instruction
//! after each branch, the return addresses x86 `call`s push, mappings, and
//! the instruction lengths QEMU reports for each block it translates.

pub(crate) mod arch;
mod args;
mod output;
mod resolver;
mod run;
pub(crate) mod state;
pub(crate) mod symbols;
mod tables;
mod tracer;

pub use args::{Args, ABOUT};
pub(crate) use resolver::{Exe, Module, Resolver};
pub use run::main;
