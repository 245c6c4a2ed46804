//! The simplest cannoli hook library: record every executed instruction and
//! every memory access. Load it into QEMU with
//! `-cannoli target/release/libjitter_always.so`.

use jitter::HookType;

#[no_mangle]
fn hook_inst(_pc: u64, _branch: bool) -> HookType {
    HookType::Always
}

#[no_mangle]
fn hook_mem(_pc: u64, _write: bool, _size: usize) -> bool {
    true
}
