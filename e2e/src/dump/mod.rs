// SPDX-License-Identifier: GPL-2.0-or-later
//! The `cannoli-dump` output formats, writer and parser in one place.
//!
//! `cannoli-dump` (the writer, `src/bin/cannoli-dump.rs`) and the tests (the
//! readers) both use this module, so the two sides cannot drift apart: a
//! format change is made once, and the round-trip tests (`tests.rs`) check
//! that whatever the writer produces, the parser reads back unchanged.
//!
//! The events themselves are [`crate::model`]'s (re-exported here); this
//! module is the text around them: [`write`](mod@write) (`push_*`, what the client
//! prints), [`parse`] (one line or field, strictly), [`read`] (whole dump
//! files) and [`client`] (the `--split` index and the closing line).
//!
//! The trace, one event a line:
//!
//! ```text
//! X <pc>                              executed instruction
//! L <pc> <addr> <size> <value>        load
//! S <pc> <addr> <size> <value>        store
//! R <pc> <r0> <r1> ...                registers at an instruction (Register hook)
//! B <pc> <0|1> <r0> <r1> ...          registers at an instruction (Branch hook;
//!                                     1: it can end a basic block)
//! Y <num> <name> <ret> <a0> <a1> <a2> <a3> <a4> <a5> <total> <data>
//!                                     system call
//! M <base> <len> <prot> <anon|file> <offset> <path>
//!                                     new mapping
//! U <base> <len>                      unmapped
//! P <base> <len> <prot>               protection changed
//! G <signo> <code> <fault_addr> <handler>
//!                                     signal delivered
//! C <pid> <tid> <exec> <loads> <stores>
//!                                     with --counts: a stream's X, L and S
//!                                     events, counted instead of printed
//! ```
//!
//! Numbers are lowercase hex without `0x` and without leading zeros, except
//! these, in decimal: `size` (the access size in bytes: 1, 2, 4, 8 or 16),
//! the syscall number `num`, `signo` and `code` (which may be negative),
//! and all of a `C` line's numbers. A
//! 16-byte access's `value` is the whole 128-bit value. Registers are in the
//! order of the hello's register layout, masked to the guest register
//! width. `name` is the syscall's name, `?` where QEMU's side does not know
//! it. `ret` is the result as a signed hex number (`-2` is -ENOENT, `-16` is
//! -EINVAL), `-` for a syscall that did not return (`exit`, a successful
//! `execve`). `total` is the full length of the syscall's buffer and `data`
//! the captured part (at most 4096 bytes): `-` when empty, `"text"` when
//! every byte is printable ASCII, tab, newline or carriage return (with
//! `\"`, `\\`, `\t`, `\n`, `\r` escaped), else plain hex, two digits a byte.
//! `prot` is `rwx` with `-` for each missing right. `path` is the rest of
//! the line (it may contain spaces; `\\` and `\xHH` for control
//! characters), `-` for an anonymous mapping. `handler` is the guest
//! handler's address, `-` for the default action.
//!
//! Besides the trace: the first stdout line `listening <addr>`
//! ([`LISTENING`]), the closing stderr line ([`Summary`]), and under
//! `--split DIR` the per-stream file names ([`split_file_name`]) and the
//! index `DIR/streams.txt` ([`StreamInfo`]).

pub mod client;
pub mod parse;
pub mod read;
pub mod write;

#[cfg(test)]
mod tests;

pub use client::*;
pub use parse::*;
pub use read::*;
pub use write::*;
// The event model, where it was before it had a module of its own.
pub use crate::model::{
    Counts, MapEvent, MemAccess, MemKind, RegsEvent, SignalEvent, SyscallEvent,
};

/// Every line kind, in the order of `--only`'s documentation.
pub const ALL_KINDS: &str = "XLSRBYMUPG";

/// Start of the first stdout line, followed by the address the client
/// listens on: a caller that asked for port 0 learns the real port from it.
pub const LISTENING: &str = "listening ";

/// The index file of a `--split` directory.
pub const STREAMS_FILE: &str = "streams.txt";
