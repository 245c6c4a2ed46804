// SPDX-License-Identifier: GPL-2.0-or-later
//! Hook library of the regtrace example: `HookType::Register` (the guest's
//! general purpose registers before the instruction runs) for every
//! instruction, or only for those in the ranges of
//! `$CANNOLI_REGTRACE_RANGES` (`LO-HI[,LO-HI...]`, hex, HI exclusive; the
//! `regtrace` client sets it from `--range` and `--func`; QEMU hides
//! `CANNOLI_*` variables from the guest). No memory accesses, no syscalls.
//!
//! `--func` names the program's own link-time addresses: the client then
//! writes a plan file instead (`$CANNOLI_REGTRACE_PLAN`, the format of
//! [`jitter::presets::plan`], with range lines), which keeps them to that
//! program (a program it execs has other code there) and places them by
//! the load bias of a position-independent one when it is mapped.

use jitter::presets::plan::{self, Plan};
use jitter::HookType;
use std::sync::{Mutex, OnceLock};
use wire::parse_hex;

/// The environment variable the client passes the ranges in.
pub const RANGES_ENV: &str = "CANNOLI_REGTRACE_RANGES";

/// The environment variable naming the plan file, when there is one.
pub const PLAN_ENV: &str = "CANNOLI_REGTRACE_PLAN";

jitter::qemu_maps_at_load!();

/// The plan, if the client wrote one. A static: QEMU calls the hooks as
/// free functions, so the library has nowhere else to keep it.
fn plan() -> &'static Option<Mutex<Plan>> {
    static P: OnceLock<Option<Mutex<Plan>>> = OnceLock::new();
    P.get_or_init(|| {
        std::env::var_os(PLAN_ENV).filter(|v| !v.is_empty())?;
        let maps = qemu_maps();
        Some(Mutex::new(plan::load_or_exit(
            PLAN_ENV,
            "libregtrace",
            "regtrace",
            maps,
        )))
    })
}

/// `LO-HI[,LO-HI...]`; `None` if malformed.
pub fn parse_ranges(s: &str) -> Option<Vec<(u64, u64)>> {
    s.split(',')
        .map(|r| {
            let (lo, hi) = r.split_once('-')?;
            Some((parse_hex(lo)?, parse_hex(hi)?))
        })
        .collect()
}

fn ranges() -> &'static Option<Vec<(u64, u64)>> {
    static R: OnceLock<Option<Vec<(u64, u64)>>> = OnceLock::new();
    R.get_or_init(|| {
        let v = std::env::var(RANGES_ENV).ok().filter(|v| !v.is_empty())?;
        match parse_ranges(&v) {
            Some(r) => Some(r),
            None => {
                eprintln!(
                    "libregtrace: malformed {RANGES_ENV}={v:?} (want LO-HI[,LO-HI...] in hex)"
                );
                std::process::exit(2)
            }
        }
    })
}

#[no_mangle]
fn hook_inst(pc: u64, _branch: bool) -> HookType {
    if let Some(p) = plan() {
        // Asked about every instruction from the first: the plan places
        // the program by it.
        let hooked = p.lock().unwrap_or_else(|e| e.into_inner()).hooked(pc);
        return if hooked {
            HookType::Register
        } else {
            HookType::Never
        };
    }
    match ranges() {
        Some(r) if !r.iter().any(|&(lo, hi)| lo <= pc && pc < hi) => HookType::Never,
        _ => HookType::Register,
    }
}

#[no_mangle]
fn hook_mem(_pc: u64, _write: bool, _size: usize) -> bool {
    false
}

/// No syscall events (with `hook_syscall` support in jitter; ignored
/// without).
#[no_mangle]
fn hook_syscall(_num: u64) -> bool {
    false
}
