// SPDX-License-Identifier: GPL-2.0-or-later
//! Hook library of `cannoli heap` (`-cannoli libheap.so`):
//!
//! * registers at the allocation functions' entries and return
//!   instructions, the pcs of the plan file `$CANNOLI_HEAP_PLAN` names
//!   (the format and how a library's pcs are placed: `cannoli probe`'s,
//!   [`jitter::presets::plan`]);
//! * what the call stacks need (`jitter::presets::branches`,
//!   `call_stack_inst`): registers at branches that can change a call
//!   stack and where branches land, every other instruction as an exec
//!   event; there only the registers the plan's `regs=` setting names
//!   (the stack pointer, the link register and the return value: see
//!   [`jitter::register_mask`]), every register at the plan's pcs; with
//!   the plan's `quiet=` setting, a block start's registers only where
//!   the stack pointer moved or another kind of event came between
//!   ([`jitter::quiet_block_starts`]; with `quiet_words=1`, an 8-byte
//!   load among those);
//! * every load and store, with its value (the checks, and the memory a
//!   leak scan reads);
//! * a number of the process's order at the plan's pcs
//!   ([`jitter::order_here`]): the client applies the threads'
//!   allocations and frees in the order they ran;
//! * every system call (the threads' `clone`s order them).
//!
//! QEMU hides `CANNOLI_*` variables from the guest.

use jitter::presets::branches;
use jitter::presets::plan::{self, Plan};
use jitter::HookType;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The environment variable naming the plan file.
const PLAN_ENV: &str = "CANNOLI_HEAP_PLAN";

jitter::qemu_maps_at_load!();

/// The plan, read at the first hook call. A static: QEMU calls the hooks
/// as free functions, so the library has nowhere else to keep it.
fn plan() -> MutexGuard<'static, Plan> {
    static P: OnceLock<Mutex<Plan>> = OnceLock::new();
    let m = P.get_or_init(|| {
        let maps = qemu_maps();
        let plan = plan::load_or_exit(PLAN_ENV, "libheap", "cannoli heap", maps);
        if let Some(names) = &plan.regs {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            // A name this guest lacks keeps every register.
            if jitter::narrow_registers_named(&names) {
                if let Some(sp) = &plan.quiet {
                    jitter::quiet_block_starts(sp, !plan.quiet_words);
                }
            }
        }
        Mutex::new(plan)
    });
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The plan is asked about every instruction, also those that get
/// registers anyway (a block's first, a branch): it takes the first pc it
/// is asked about for the entry of the file QEMU starts in, which places a
/// position-independent program and its libraries (see
/// [`Plan::hooked`]). Asked only about the others, it placed every pc one
/// instruction too far, and ppc64le's malloc, entered through the PLT at
/// its global entry with the probe at the local entry two instructions
/// further in the same block, got no registers there.
#[no_mangle]
fn hook_inst(pc: u64, branch: bool) -> HookType {
    let hooked = plan().hooked(pc);
    if hooked {
        jitter::every_register_here();
        // The threads' allocations and frees, in the order they ran.
        jitter::order_here();
    }
    let h = branches::call_stack_inst(pc, branch);
    if h == HookType::Always && hooked {
        HookType::Register
    } else {
        h
    }
}

#[no_mangle]
fn hook_mem(_pc: u64, _write: bool, _size: usize) -> bool {
    true
}

/// Every syscall: `clone` is how the client orders a new thread after
/// its creator (the rest are few next to the loads and stores).
#[no_mangle]
fn hook_syscall(_num: u64) -> bool {
    true
}
