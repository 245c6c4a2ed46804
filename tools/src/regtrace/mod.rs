// SPDX-License-Identifier: GPL-2.0-or-later
//! Prints, for every executed guest instruction, the general purpose
//! registers it changed, by the guest's names:
//!
//! ```text
//! == pid 4242 tid 4242 ==
//! registers at 0x004006d0: sp=2b2ab870
//! 0x004006d0
//! 0x004006d4  ra: 0 -> 4006dc
//! 0x004006dc  gp: 0 -> a0000
//! 0x004006e0  gp: a0000 -> 9a5c4
//! ...
//! 0x0040ab14  (end of trace)
//! ```
//!
//! The hook library asks for `HookType::Register`: QEMU reports the
//! registers *before* each instruction runs, so what an instruction changed
//! shows in the registers of the next one, and the line of an instruction is
//! written once the next one arrives (the last one of a thread has nothing
//! after it). Values are hex, masked to the guest's register width. The
//! program counter is not a general purpose register and is not shown as a
//! change: ARM keeps it as r15 among the others (`pc` in the layout), but
//! QEMU writes it there only when a block ends, so it is left out.
//!
//! `--range LO-HI` and `--func SYMBOL` restrict the trace to some code
//! (decided at translation time, inside QEMU: the rest runs at full speed).
//! Changes are then those since the previous traced instruction: an
//! instruction that calls out of the range is shown with everything the
//! call changed. A recording (`--replay FILE`, made with registers at every
//! instruction) holds every instruction, so there the client drops those
//! outside the ranges itself, and prints what a live run would have.

mod args;
mod filter;
mod ranges;
mod run;
mod tracer;

pub use args::{Args, ABOUT};
pub use run::main;
