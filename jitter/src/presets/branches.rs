// SPDX-License-Identifier: GPL-2.0-or-later
//! Registers at branches and where they land: what a call-stack tool needs
//! from QEMU (`examples/backtrace`, and `cannoli record --hooks branches`):
//!
//! * every instruction that can end a basic block (a branch, jump, call,
//!   return or syscall) as a [`HookType::Branch`] event: its pc, the fact
//!   that it is a branch, and the registers before it runs;
//! * the instruction each branch lands on, with the registers *after* the
//!   branch: whether a call wrote the link register (riscv `jal ra`), the
//!   stack pointer after a return. A branch always ends QEMU's translation
//!   block, so the instruction it lands on starts one: the first instruction
//!   of every block gets [`HookType::Register`]; the rest get
//!   [`HookType::Always`] (one word each, so the client still sees every pc
//!   and can tell a landing from a straight-line instruction);
//! * on x86, where `call` pushes the return address instead of setting a
//!   link register: the 8-byte (x86_64) and 4-byte (i386) stores made by
//!   branch instructions.
//!
//! [`inst`] learns where a block starts from the order QEMU asks in: it
//! asks about a block's instructions in order, right after translating it,
//! so an instruction starts a block if the one asked about before it (on this
//! thread) was a branch, lies after it or far before it, or was the delay
//! slot of a branch. A wrong guess costs one register event, or, the other
//! way round, one branch target the client judges by addresses alone (it
//! counts those).
//!
//! On MIPS the instruction after a branch or jump with a delay slot (the
//! jitter decodes the guest's word) is that slot, which QEMU translates
//! into the branch's own block: it starts none, and gets
//! [`HookType::Always`]. The registers before it are the branch's (only a
//! link register differs), and a call-stack tool reads a branch's
//! outcome where it lands, after the slot; a register event there was a
//! third of a MIPS trace's register events, for nothing.

use crate::HookType;
use std::cell::{Cell, RefCell};
use std::collections::HashSet;

/// More than the longest instruction of any guest (x86: 15 bytes).
const MAX_INSN: u64 = 16;

thread_local! {
    /// The instructions `hook_inst` was last asked about on this thread,
    /// and whether they were branches: the last one and the one before.
    static PREV: Cell<[Option<(u64, bool)>; 2]> = const { Cell::new([None; 2]) };
    /// Every branch instruction seen on this thread: `hook_mem` wants their
    /// stores only.
    static BRANCHES: RefCell<HashSet<u64>> = RefCell::new(HashSet::new());
}

/// The instruction hook: `Branch` at branches, `Register` where a block
/// starts, `Always` elsewhere.
pub fn inst(pc: u64, branch: bool) -> HookType {
    classify(pc, branch, false)
}

/// [`inst`], where `local` says a branch is to be hooked as the
/// instruction it is but for its branch: `Register` where it starts a
/// block, `Always` elsewhere.
fn classify(pc: u64, branch: bool, local: bool) -> HookType {
    let [prev, before] = PREV.with(|p| {
        let [last, _] = p.get();
        p.replace([Some((pc, branch)), last])
    });
    if branch {
        BRANCHES.with(|b| b.borrow_mut().insert(pc));
        if !local {
            return HookType::Branch;
        }
    }
    let starts_block = match (prev, before) {
        (None, _) => true,
        (Some((p, true)), _) if pc == p.wrapping_add(4) && crate::events::in_delay_slot(pc) => {
            false
        }
        (Some((p, was_branch)), before) => {
            was_branch
                || pc <= p
                || pc - p > MAX_INSN
                || before.is_some_and(|(b, br)| br && p == b.wrapping_add(4))
        }
    };
    if starts_block {
        HookType::Register
    } else {
        HookType::Always
    }
}

/// [`inst`] for a tool that reads branches for its call stacks only: a
/// branch that cannot change a call stack gets no registers of its own
/// (`Always`): a conditional, pc-relative branch without link (the back
/// edges of loops, an `if`) and a direct jump (a back edge too, or a tail
/// call, which leaves a stack of return addresses as it is) on every
/// guest but 32-bit Arm (`jitter::local`; on MIPS, either, where the
/// delay slot leaves the stack pointer alone, `jitter::delay`'s
/// `mips_local_branch`). Where it lands still starts a
/// block, with the registers after it, so the stack pointer a call stack
/// follows is sampled there as before. A local branch that starts a block
/// (the first instruction after a call returns, say) keeps its registers
/// (`Register`): they are where the branch before it landed. On busybox
/// `sha256sum` most branches are such back edges.
pub fn call_stack_inst(pc: u64, branch: bool) -> HookType {
    classify(pc, branch, branch && crate::events::local_branch(pc))
}

/// The memory hook: the 4- and 8-byte stores of branch instructions.
pub fn mem(pc: u64, write: bool, size: usize) -> bool {
    write && (size == 4 || size == 8) && BRANCHES.with(|b| b.borrow().contains(&pc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_branch_keeps_the_registers_of_the_block_it_starts() {
        use HookType::{Always, Branch, Register};
        // A block's first instruction, then a call.
        assert_eq!(classify(0x1000, false, false), Register);
        assert_eq!(classify(0x1004, true, false), Branch);
        // The call's return lands on a local branch: where it landed.
        assert_eq!(classify(0x1008, true, true), Register);
        // After a branch, and after the instruction after one.
        assert_eq!(classify(0x100c, false, false), Register);
        assert_eq!(classify(0x1010, false, false), Register);
        // A local branch inside a block: nothing of its own.
        assert_eq!(classify(0x1014, false, false), Always);
        assert_eq!(classify(0x1018, true, true), Always);
        // Any other branch inside a block.
        assert_eq!(classify(0x2000, false, false), Register);
        assert_eq!(classify(0x2004, false, false), Always);
        assert_eq!(classify(0x2008, true, false), Branch);
    }
}
