// SPDX-License-Identifier: GPL-2.0-or-later
//! The hook library of `cannoli record` (`-cannoli libcannoli_record.so`):
//! one library, four presets, chosen by `$CANNOLI_RECORD_HOOKS` (QEMU
//! hides `CANNOLI_*` variables from the guest). Each preset asks for what
//! the tools replaying it need (`cannoli::recording::Hooks::preset`):
//!
//! * `pc`: every instruction (`Always`), no memory;
//! * `mem`: every instruction and every load and store;
//! * `branches`: what `backtrace` needs (`jitter::presets::branches`);
//! * `regs`: registers at every instruction (`Branch` at the instructions
//!   that can end a block, so a replay follows calls and returns as a live
//!   `backtrace` or `heap` does; `Register` elsewhere), and every load and
//!   store.
//!
//! System calls are recorded in every preset: a recording is made once
//! for many analyses.

use std::sync::OnceLock;

use jitter::presets::branches;
use jitter::HookType;

/// The variable `cannoli record` names the preset in.
const PRESET_ENV: &str = "CANNOLI_RECORD_HOOKS";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Preset {
    Pc,
    Mem,
    Branches,
    Regs,
}

fn preset() -> Preset {
    static P: OnceLock<Preset> = OnceLock::new();
    *P.get_or_init(|| match std::env::var(PRESET_ENV).as_deref() {
        Ok("pc") => Preset::Pc,
        Ok("mem") | Err(_) => Preset::Mem,
        Ok("branches") => Preset::Branches,
        Ok("regs") => Preset::Regs,
        Ok(other) => {
            eprintln!(
                "libcannoli_record: unknown {PRESET_ENV}={other:?}; use pc, mem, branches or regs"
            );
            std::process::exit(2)
        }
    })
}

#[no_mangle]
fn hook_inst(pc: u64, branch: bool) -> HookType {
    match preset() {
        Preset::Pc | Preset::Mem => HookType::Always,
        Preset::Branches => branches::inst(pc, branch),
        Preset::Regs if branch => HookType::Branch,
        Preset::Regs => HookType::Register,
    }
}

#[no_mangle]
fn hook_mem(pc: u64, write: bool, size: usize) -> bool {
    match preset() {
        Preset::Pc => false,
        Preset::Mem | Preset::Regs => true,
        Preset::Branches => branches::mem(pc, write, size),
    }
}

#[no_mangle]
fn hook_syscall(_num: u64) -> bool {
    true
}
