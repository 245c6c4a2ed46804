// SPDX-License-Identifier: GPL-2.0-or-later
//! Hook library of the backtrace example: `-cannoli libbacktrace.so`.
//!
//! Registers at branches and at the instructions they land on, and the
//! stores of branches (x86 `call` pushing its return address): the
//! decisions are `jitter::presets::branches`, which `cannoli record --hooks
//! branches` makes too, so a recording serves `backtrace --replay`. Live,
//! the register events carry only the registers the client reads
//! (`$CANNOLI_BACKTRACE_REGS`); a recording keeps every one.

use jitter::presets::branches;
use jitter::HookType;
use std::sync::Once;

/// The variable in which `cannoli backtrace` names the registers its
/// client reads, comma-separated (the stack pointer and the link
/// register: `sp,ra` on MIPS); unset (QEMU started by hand), every
/// register. QEMU hides `CANNOLI_*` variables from the guest.
const REGS_ENV: &str = "CANNOLI_BACKTRACE_REGS";

/// Narrows the register events to the named registers, at the first hook
/// call (QEMU's init has run). A name this guest lacks (a program run by
/// a guest of another architecture inherits the variable) keeps every
/// register, as does an unset variable.
fn narrow_once() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Ok(v) = std::env::var(REGS_ENV) else {
            return;
        };
        let names: Vec<&str> = v.split(',').filter(|n| !n.is_empty()).collect();
        jitter::narrow_registers_named(&names);
    });
}

#[no_mangle]
fn hook_inst(pc: u64, branch: bool) -> HookType {
    narrow_once();
    branches::inst(pc, branch)
}

#[no_mangle]
fn hook_mem(pc: u64, write: bool, size: usize) -> bool {
    branches::mem(pc, write, size)
}

/// No syscall events: the backtrace does not need them (mappings are
/// reported regardless).
#[no_mangle]
fn hook_syscall(_num: u64) -> bool {
    false
}
