//! The benchmark's hook library (`target/release/libbench_hooks.so`).
//!
//! One library for every traced configuration of the benchmark, so that the
//! configurations differ only in what they trace and never in which binary
//! was loaded. The environment variable `CANNOLI_BENCH_HOOKS` picks the
//! answer, read once per QEMU process:
//!
//! * `never`: no instruction and no memory access is traced. QEMU still runs
//!   with the patch active (reserved registers, splice points, the client
//!   connection), so this measures what the patch costs by itself.
//! * `pc`: every instruction, no memory accesses (the peer of QEMU's
//!   `libinsn.so`).
//! * `pcmem`: every instruction and every memory access.
//!
//! QEMU removes `CANNOLI_*` variables from the guest's environment, but this
//! library runs inside QEMU and sees QEMU's own environment.

use jitter::HookType;
use std::sync::OnceLock;

/// What the hooks answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Never,
    Pc,
    PcMem,
}

/// The environment variable that selects the [`Mode`].
const MODE_ENV: &str = "CANNOLI_BENCH_HOOKS";

fn parse(v: &str) -> Option<Mode> {
    match v.trim() {
        "never" => Some(Mode::Never),
        "pc" => Some(Mode::Pc),
        "pcmem" => Some(Mode::PcMem),
        _ => None,
    }
}

/// The mode, read on the first lift. An unset or unknown value stops QEMU
/// with one line: silently tracing the wrong thing would make the benchmark
/// measure the wrong configuration.
fn mode() -> Mode {
    static MODE: OnceLock<Mode> = OnceLock::new();
    *MODE.get_or_init(|| {
        let v = std::env::var(MODE_ENV).unwrap_or_default();
        parse(&v).unwrap_or_else(|| {
            eprintln!("bench-hooks: set {MODE_ENV} to never, pc or pcmem (got {v:?})");
            std::process::exit(2)
        })
    })
}

#[no_mangle]
fn hook_inst(_pc: u64, _branch: bool) -> HookType {
    match mode() {
        Mode::Never => HookType::Never,
        Mode::Pc | Mode::PcMem => HookType::Always,
    }
}

#[no_mangle]
fn hook_mem(_pc: u64, _write: bool, _size: usize) -> bool {
    mode() == Mode::PcMem
}

/// `never` measures the patch itself, so it asks for no syscall events
/// either (they carry the bytes each read returned).
#[no_mangle]
fn hook_syscall(_num: u64) -> bool {
    mode() != Mode::Never
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!(parse("never"), Some(Mode::Never));
        assert_eq!(parse(" pc\n"), Some(Mode::Pc));
        assert_eq!(parse("pcmem"), Some(Mode::PcMem));
        assert_eq!(parse("always"), None);
        assert_eq!(parse(""), None);
    }
}
