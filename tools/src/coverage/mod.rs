// SPDX-License-Identifier: GPL-2.0-or-later
//! Code coverage of a guest program as a drcov file, with every executable
//! mapping a module: the program, its dynamic loader and shared libraries,
//! and anonymous code that ran (QEMU's signal trampoline, JIT code). Here,
//! not in the example, so that `cannoli coverage` and the `coverage`
//! example binary run the same code.
//!
//! ```sh
//! coverage -o prog.drcov ./prog args...     # then load prog.drcov into
//!                                           # Lighthouse, bncov or Cutter
//! ```
//!
//! How it works: the hook library (`libcoverage.so`) answers
//! `HookType::Once` for every instruction, so QEMU reports each translated
//! instruction the first time it runs and then patches the hook out; a hot
//! loop costs nothing after its first iteration. The client attributes each
//! reported pc to the executable mapping it lies in (from the trace's mmap,
//! munmap and mprotect events, in execution order), and at the end coalesces
//! each module's instruction starts into blocks: maximal runs of
//! instructions that follow each other without a gap (so a block can span
//! several basic blocks, as a straight-line call-and-return does; the
//! readers map covered bytes onto their own basic blocks). Only which pcs
//! ran counts, not how often each was reported: a recording (`--replay`),
//! whose exec events are `Always` ones (every run of every instruction),
//! gives the same drcov file as the live run; only the summary's count of
//! exec events is larger.
//!
//! The size of each instruction comes from QEMU: a block event, sent when
//! QEMU translates a block, lists the length of each of its instructions
//! (the only exact source for Thumb, where a 4-aligned pc may start an A32
//! instruction or a Thumb one, and the cheapest for x86). Lengths are kept
//! per module, so a block translated by one thread of a process sizes the
//! instructions another thread ran. A pc without one falls back to the
//! architecture (4 bytes on MIPS, AArch64, PowerPC) or to the instruction's
//! bytes in the mapped file (RISC-V compressed instructions, x86, Thumb).

mod addr_space;
mod args;
mod arm;
mod blocks;
mod collected;
mod drcov;
pub(crate) mod isa;
mod report;
mod run;
pub mod space;
mod tracer;

pub use args::{Args, ABOUT};
pub use run::main;
