// SPDX-License-Identifier: GPL-2.0-or-later
//! Placeholder hook library of `cannoli record`.

use jitter::HookType;

#[no_mangle]
fn hook_inst(_pc: u64, _branch: bool) -> HookType {
    HookType::Always
}

#[no_mangle]
fn hook_mem(_pc: u64, _write: bool, _size: usize) -> bool {
    true
}
