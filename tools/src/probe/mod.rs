// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli probe`: function probes with their arguments and results, on
//! every guest, like uprobes and SystemTap for a program QEMU runs.
//!
//! ```text
//! cannoli probe -p pr_add6 -p 'pr_rec:return' ./prog     # one line per hit
//! cannoli probe --flow -p 'pr_*' ./prog                  # the call flow
//! cannoli probe --list 'pr_*' ./prog                     # what can be probed
//! cannoli probe -p libc:atoi -p libc:atoi:return ./dyn   # a shared library's
//! ```
//!
//! How it stays cheap: the probes are resolved in the program's ELF file
//! before it runs ([`plan`]), and the hook library asks QEMU for registers
//! at exactly those pcs: each probed function's entry and its return
//! instructions ([`isa`]), and the pcs of `FUNC+OFF` and `0xADDR` probes.
//! Everything else runs untraced, unless `--insns` counts every
//! instruction (for the instruction index of each hit, and the
//! instructions between an entry and its return), or an argument lies on
//! the stack (i386, the fifth of o32 and AAPCS), which needs the thread's
//! stores ([`shadow`]).
//!
//! `LIB:FUNC` probes are planned in the library's file and moved to where
//! the dynamic loader puts it, by the hook library and the client each
//! ([`libs`]). A position-independent program is planned the same way,
//! as a module at its link-time addresses; the hook library finds where
//! guest memory is from the first instruction QEMU runs, the entry of the
//! dynamic loader or of a static-pie program ([`plan::Anchor`]).
//!
//! The modules: [`spec`] parses `-p`, [`elf`] reads a file's functions,
//! [`libs`] finds a shared library's file, [`conv`] is each guest's calling
//! convention, [`isa`] finds return instructions and tail calls, [`plan`]
//! turns probes into hooked pcs, [`shadow`] keeps stores, [`tracer`] is the
//! client, [`out`] writes hits, [`hex`] the registers of a pc probe's
//! line; for Go, [`goroutine`] keeps frames by goroutine and [`stackmove`]
//! moves them with a stack the runtime copies.

mod args;
pub mod conv;
pub mod elf;
pub mod error;
pub mod godwarf;
pub mod gopclntab;
pub mod goroutine;
pub mod hex;
pub mod isa;
pub mod libs;
mod list;
pub mod out;
pub mod plan;
mod program;
mod run;
pub mod shadow;
pub mod spec;
pub mod stackmove;
mod state;
pub mod tracer;

pub use args::{Args, ABOUT};
pub use run::{main, PLAN_ENV};
pub use state::{lock, Mode, RunState};
