//! Hook library for the throughput benchmark: every instruction, no memory.

use jitter::HookType;

#[no_mangle]
fn hook_inst(_pc: u64, _branch: bool) -> HookType {
    HookType::Always
}

#[no_mangle]
fn hook_mem(_pc: u64, _write: bool, _size: usize) -> bool {
    false
}
