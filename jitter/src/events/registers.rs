//! Registers: the event an instruction hooked for Register or Branch
//! reports before it runs.

use super::guest::env;
use crate::stream::{self, Cursor};
use wire::{frame, tag};

/// The helper QEMU calls, with the guest registers synced to env, before an
/// instruction whose hook is Register or Branch.
///
/// # Safety
/// `env_ptr` is the calling vCPU's CPUArchState (QEMU's helper argument).
pub unsafe fn insn_helper(env_ptr: *mut u8, pc: u64, kind: u32) {
    let Some(e) = env() else {
        return;
    };
    let n = e.reg_count as usize;
    // On the stack: this runs before every hooked instruction (at every
    // branch for the call-stack tools), where a heap buffer's malloc and
    // free were a few per cent of QEMU's time. More registers than any
    // guest has go through the heap.
    let mut stack = [0u64; 2 + STACK_REGS];
    let mut heap = Vec::new();
    let words: &mut [u64] = if n <= STACK_REGS {
        &mut stack[..2 + n]
    } else {
        heap.resize(2 + n, 0);
        &mut heap
    };
    words[0] = frame(tag::REGS, kind, (2 + n) as u32);
    words[1] = pc;
    for (i, w) in words[2..].iter_mut().enumerate() {
        // SAFETY: QEMU described `reg_count` registers of `reg_bytes` bytes at
        // env + regs_env_offset, inside its CPUArchState.
        *w = unsafe {
            let p =
                env_ptr.offset(e.regs_env_offset as isize + (i * e.reg_bytes as usize) as isize);
            match e.reg_bytes {
                4 => (p as *const u32).read_unaligned() as u64,
                _ => (p as *const u64).read_unaligned(),
            }
        };
    }
    // SAFETY: the CannoliCursor sits at a fixed offset from env in the vCPU.
    let c = unsafe { &mut *(env_ptr.offset(e.cursor_env_offset as isize) as *mut Cursor) };
    stream::append(c, words, &[]);
}

/// Registers an event holds on the stack (more than any guest reports).
const STACK_REGS: usize = 128;
