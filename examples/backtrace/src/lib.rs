// SPDX-License-Identifier: GPL-2.0-or-later
//! Hook library of the backtrace example: `-cannoli libbacktrace.so`.
//!
//! Registers at branches and at the instructions they land on, and the
//! stores of branches (x86 `call` pushing its return address): the
//! decisions are `jitter::presets::branches`, which `cannoli record --hooks
//! branches` makes too, so a recording serves `backtrace --replay`.

use jitter::presets::branches;
use jitter::HookType;

#[no_mangle]
fn hook_inst(pc: u64, branch: bool) -> HookType {
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
