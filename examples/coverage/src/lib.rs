// SPDX-License-Identifier: GPL-2.0-or-later
//! Hook library of the coverage example: every guest instruction reports its
//! pc once per translation (`HookType::Once`: the first time that translated
//! instruction runs, then the hook patches itself out), no memory accesses.
//! The client builds basic blocks from those pcs.

use jitter::HookType;

#[no_mangle]
fn hook_inst(_pc: u64, _branch: bool) -> HookType {
    HookType::Once
}

#[no_mangle]
fn hook_mem(_pc: u64, _write: bool, _size: usize) -> bool {
    false
}

/// No syscall events: coverage needs none, and a `read` event carries the
/// bytes read (with `hook_syscall` support in jitter; ignored without).
#[no_mangle]
fn hook_syscall(_num: u64) -> bool {
    false
}
