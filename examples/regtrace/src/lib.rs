// SPDX-License-Identifier: GPL-2.0-or-later
//! Hook library of the regtrace example: `HookType::Register` (the guest's
//! general purpose registers before the instruction runs) for every
//! instruction, or only for those in the ranges of
//! `$CANNOLI_REGTRACE_RANGES` (`LO-HI[,LO-HI...]`, hex, HI exclusive; the
//! `regtrace` client sets it from `--range` and `--func`; QEMU hides
//! `CANNOLI_*` variables from the guest). No memory accesses, no syscalls.

use jitter::HookType;
use std::sync::OnceLock;
use wire::parse_hex;

/// The environment variable the client passes the ranges in.
pub const RANGES_ENV: &str = "CANNOLI_REGTRACE_RANGES";

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
