// SPDX-License-Identifier: GPL-2.0-or-later
//! Hook library of `cannoli probe`: `HookType::Register` at the pcs of the
//! plan file `$CANNOLI_PROBE_PLAN` names (the client writes it: probed
//! entries, return instructions, `FUNC+OFF` pcs), nothing elsewhere. QEMU
//! hides `CANNOLI_*` variables from the guest.
//!
//! The plan: a line of settings (`stores=1`: every store too, where
//! arguments lie on the stack; `count=1`: every other instruction as an
//! exec event, for `--insns`; `order=1`: every pc takes a number of the
//! process's order, by which a Go program's calls are kept in order
//! between its threads), then one hex pc per line. For `LIB:FUNC`
//! probes, `exe LOW PATH` names the program and where its offset 0 is
//! linked, and each `lib LOW PATH` is followed by `+PC` lines at the
//! library's link-time addresses. A position-independent program is such
//! a `lib` too, and `anchor ENTRY LOW PATH` replaces `exe`: the file whose
//! entry QEMU runs first (the dynamic loader, or a static-pie program),
//! its `e_entry` and where its offset 0 is linked.
//!
//! A library's pcs are known once the dynamic loader has mapped it. Until
//! every library is found, an instruction on a page not looked at before
//! makes the library read QEMU's `/proc/self/maps` (a library's code runs
//! after it is mapped, so its first translation finds it): there the
//! program's mapping of its offset 0 gives where guest memory is in QEMU's
//! address space, and each library's mapping of its offset 0 its load
//! address, which moves its pcs. With an anchor, the first instruction
//! QEMU translates is the anchor's entry, at guest address `pc`; the
//! anchor's mapping of its offset 0 at host address `H` then says that
//! guest memory starts at `H - (pc - ENTRY + LOW)`.

use jitter::presets::plan::{self, Plan};
use jitter::HookType;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The environment variable naming the plan file.
const PLAN_ENV: &str = "CANNOLI_PROBE_PLAN";

jitter::qemu_maps_at_load!();

/// The plan, read at the first hook call. A static: QEMU calls the hooks
/// as free functions, so the library has nowhere else to keep it.
fn plan() -> MutexGuard<'static, Plan> {
    static P: OnceLock<Mutex<Plan>> = OnceLock::new();
    let m = P.get_or_init(|| {
        let maps = qemu_maps();
        Mutex::new(plan::load_or_exit(
            PLAN_ENV,
            "libprobe",
            "cannoli probe",
            maps,
        ))
    });
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[no_mangle]
fn hook_inst(pc: u64, _branch: bool) -> HookType {
    let mut p = plan();
    if p.hooked(pc) {
        if p.order {
            // A Go program's calls, in the order its threads ran them.
            jitter::order_here();
        }
        HookType::Register
    } else if p.count {
        HookType::Always
    } else {
        HookType::Never
    }
}

#[no_mangle]
fn hook_mem(_pc: u64, write: bool, _size: usize) -> bool {
    write && plan().stores
}

/// No syscall events.
#[no_mangle]
fn hook_syscall(_num: u64) -> bool {
    false
}
