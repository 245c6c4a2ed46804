// SPDX-License-Identifier: GPL-2.0-or-later
//! The client side of a probe run: the parallel callbacks keep the
//! registers of hooked pcs (and, where arguments are on the stack, the
//! thread's stores); the serial phase runs each thread's probed call stack
//! and writes the hits. A pc probe's line, most of a run's text, needs no
//! call stack: the workers write it ([`Item::Lines`], [`Item::Tail`]) and
//! the serial phase only puts it in order, with the thread's instruction
//! index and depth where the line shows them.
//!
//! Returns are matched to entries by the frame key of [`super::conv`]: at
//! a return with key `k`, frames with a smaller key are left without a
//! return (a `longjmp` skipped them: reported `unwound`), and every frame
//! with key `k` returns with this value (a chain of tail calls returns at
//! once: the callee's result is each caller's). A return instruction that
//! leaves neither the innermost frame nor one of its own function is a
//! `longjmp` landing (it restores a caller's stack pointer and jumps):
//! every frame it leaves is `unwound`.

mod item;
mod layout;
mod placement;
mod probe;
mod process;
mod worker;

pub use item::Item;
pub use layout::ThreadRegs;
pub use placement::bias_after;
pub use probe::Probe;
pub use process::Pid;
