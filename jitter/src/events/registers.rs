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
    // SAFETY: QEMU described `reg_count` registers of `reg_bytes` bytes at
    // env + regs_env_offset, inside its CPUArchState.
    let regs = unsafe { env_ptr.offset(e.regs_env_offset as isize) };
    let wide = e.reg_bytes != 4;
    // SAFETY (both reads): register `i < reg_count` lies inside the
    // CPUArchState (above); they are read unaligned, as QEMU lays them out.
    let reg = |i: usize| unsafe {
        if wide {
            (regs.add(8 * i) as *const u64).read_unaligned()
        } else {
            (regs.add(4 * i) as *const u32).read_unaligned() as u64
        }
    };
    let head = [frame(tag::REGS, kind, (2 + n) as u32), pc];
    // SAFETY: the CannoliCursor sits at a fixed offset from env in the vCPU.
    let c = unsafe { &mut *(env_ptr.offset(e.cursor_env_offset as isize) as *mut Cursor) };
    // This helper is called from the JIT: the event goes straight into the
    // window where it fits (nearly always).
    if stream::append_in_window(c, &head, n, reg) {
        return;
    }
    // Once a window (at its end, where the event needs a flush, or before
    // the thread's first): the rare path, through the stream.
    let words: Vec<u64> = head.iter().copied().chain((0..n).map(reg)).collect();
    stream::append(c, &words, &[]);
}
