// SPDX-License-Identifier: GPL-2.0-or-later
//! The end-to-end tests' hook library (`target/release/libe2e_hooks.so`).
//!
//! One library for every hook configuration the tests need, chosen by
//! environment variables that QEMU reads once (on the first lift or the
//! first syscall). QEMU hides `CANNOLI_*` variables from the guest, so they
//! never change what the guest does.
//!
//! * `CANNOLI_TEST_HOOKS` (required): what `hook_inst` answers and whether
//!   `hook_mem` traces accesses:
//!   * `always`: [`HookType::Always`], every load and store;
//!   * `nomem`: [`HookType::Always`], no loads or stores;
//!   * `once`: [`HookType::Once`], no loads or stores;
//!   * `regs`: [`HookType::Register`], no loads or stores;
//!   * `branch`: [`HookType::Branch`], no loads or stores;
//!   * `never`: [`HookType::Never`], no loads or stores.
//! * `CANNOLI_TEST_RANGE` (optional): `LO-HI` in hex (`0x` optional), HI
//!   exclusive. Instructions outside the range get [`HookType::Never`] and
//!   their accesses are not traced.
//! * `CANNOLI_TEST_SYSCALLS` (optional): which syscalls `hook_syscall`
//!   reports: a comma-separated list of the guest's syscall *numbers*
//!   (decimal; names would need a per-architecture table, and the tests learn
//!   the numbers from an unfiltered trace), or `none`. Unset: every syscall.
//! * `CANNOLI_TEST_LOG` (optional): a file to which every `hook_inst` call is
//!   appended as a line `<pc hex> <0|1>` (the `branch` argument). There is
//!   one call per instruction per translation, so the tests learn how often
//!   each pc was translated and what QEMU said about it.
//!
//! A missing or malformed setting stops QEMU with one line (exit status 2):
//! tracing the wrong configuration would make a test check the wrong thing.

use jitter::HookType;
use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::sync::{Mutex, OnceLock};
use wire::parse_hex;

/// What `hook_inst` and `hook_mem` answer inside the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Always,
    NoMem,
    Once,
    Regs,
    Branch,
    Never,
}

#[derive(Debug, PartialEq, Eq)]
struct Config {
    mode: Mode,
    /// `[lo, hi)`; `None`: every pc.
    range: Option<(u64, u64)>,
    /// `None`: every syscall.
    syscalls: Option<BTreeSet<u64>>,
}

const HOOKS_ENV: &str = "CANNOLI_TEST_HOOKS";
const RANGE_ENV: &str = "CANNOLI_TEST_RANGE";
const SYSCALLS_ENV: &str = "CANNOLI_TEST_SYSCALLS";
const LOG_ENV: &str = "CANNOLI_TEST_LOG";

fn parse_mode(v: &str) -> Result<Mode, String> {
    Ok(match v.trim() {
        "always" => Mode::Always,
        "nomem" => Mode::NoMem,
        "once" => Mode::Once,
        "regs" => Mode::Regs,
        "branch" => Mode::Branch,
        "never" => Mode::Never,
        other => {
            return Err(format!(
                "set {HOOKS_ENV} to always, nomem, once, regs, branch or never (got {other:?})"
            ))
        }
    })
}

fn parse_range(v: &str) -> Result<(u64, u64), String> {
    let bad = || format!("{RANGE_ENV} must be LO-HI in hex with LO < HI (got {v:?})");
    let (lo, hi) = v.split_once('-').ok_or_else(bad)?;
    match (parse_hex(lo), parse_hex(hi)) {
        (Some(lo), Some(hi)) if lo < hi => Ok((lo, hi)),
        _ => Err(bad()),
    }
}

fn parse_syscalls(v: &str) -> Result<BTreeSet<u64>, String> {
    if v.trim() == "none" {
        return Ok(BTreeSet::new());
    }
    v.split(',')
        .map(|n| {
            n.trim().parse::<u64>().map_err(|_| {
                format!(
                    "{SYSCALLS_ENV} must be `none` or decimal syscall numbers separated by \
                     commas (got {v:?})"
                )
            })
        })
        .collect()
}

fn parse_config(
    hooks: Option<&str>,
    range: Option<&str>,
    syscalls: Option<&str>,
) -> Result<Config, String> {
    Ok(Config {
        mode: parse_mode(hooks.unwrap_or(""))?,
        range: range.map(parse_range).transpose()?,
        syscalls: syscalls.map(parse_syscalls).transpose()?,
    })
}

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let var = |k: &str| std::env::var(k).ok();
        parse_config(
            var(HOOKS_ENV).as_deref(),
            var(RANGE_ENV).as_deref(),
            var(SYSCALLS_ENV).as_deref(),
        )
        .unwrap_or_else(|e| {
            eprintln!("e2e-hooks: {e}");
            std::process::exit(2)
        })
    })
}

/// The `CANNOLI_TEST_LOG` file, if asked for.
fn log() -> Option<&'static Mutex<File>> {
    static LOG: OnceLock<Option<Mutex<File>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let path = std::env::var_os(LOG_ENV)?;
        match File::create(&path) {
            Ok(f) => Some(Mutex::new(f)),
            Err(e) => {
                eprintln!("e2e-hooks: cannot create {LOG_ENV} file {path:?}: {e}");
                std::process::exit(2)
            }
        }
    })
    .as_ref()
}

impl Config {
    fn in_range(&self, pc: u64) -> bool {
        self.range.map_or(true, |(lo, hi)| (lo..hi).contains(&pc))
    }

    fn inst(&self, pc: u64) -> HookType {
        if !self.in_range(pc) {
            return HookType::Never;
        }
        match self.mode {
            Mode::Always | Mode::NoMem => HookType::Always,
            Mode::Once => HookType::Once,
            Mode::Regs => HookType::Register,
            Mode::Branch => HookType::Branch,
            Mode::Never => HookType::Never,
        }
    }

    fn mem(&self, pc: u64) -> bool {
        self.mode == Mode::Always && self.in_range(pc)
    }

    fn syscall(&self, num: u64) -> bool {
        self.syscalls.as_ref().map_or(true, |s| s.contains(&num))
    }
}

#[no_mangle]
fn hook_inst(pc: u64, branch: bool) -> HookType {
    if let Some(log) = log() {
        let mut f = log.lock().unwrap_or_else(|e| e.into_inner());
        // One write per line: a crash loses at most the line being written.
        if let Err(e) = writeln!(f, "{pc:x} {}", branch as u8) {
            eprintln!("e2e-hooks: writing the {LOG_ENV} file: {e}");
            std::process::exit(2)
        }
    }
    config().inst(pc)
}

#[no_mangle]
fn hook_mem(pc: u64, _write: bool, _size: usize) -> bool {
    config().mem(pc)
}

#[no_mangle]
fn hook_syscall(num: u64) -> bool {
    config().syscall(num)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        for (s, m) in [
            ("always", Mode::Always),
            ("nomem", Mode::NoMem),
            ("once", Mode::Once),
            (" regs\n", Mode::Regs),
            ("branch", Mode::Branch),
            ("never", Mode::Never),
        ] {
            assert_eq!(parse_mode(s), Ok(m));
        }
        assert!(parse_mode("").is_err());
        assert!(parse_mode("Always").is_err());
    }

    #[test]
    fn ranges_and_answers() {
        let c = parse_config(Some("regs"), Some("0x400000-400010"), None).unwrap();
        assert_eq!(c.range, Some((0x400000, 0x400010)));
        assert_eq!(c.inst(0x3ffffc), HookType::Never);
        assert_eq!(c.inst(0x400000), HookType::Register);
        assert_eq!(c.inst(0x40000c), HookType::Register);
        assert_eq!(c.inst(0x400010), HookType::Never);
        assert!(!c.mem(0x400000));
        let c = parse_config(Some("always"), Some("10-20"), None).unwrap();
        assert!(c.mem(0x10) && !c.mem(0x20) && !c.mem(0xf));
        assert_eq!(c.inst(0x1f), HookType::Always);
        let c = parse_config(Some("nomem"), None, None).unwrap();
        assert!(!c.mem(0x10));
        assert_eq!(c.inst(u64::MAX), HookType::Always);
        assert!(parse_config(Some("always"), Some("20-10"), None).is_err());
        assert!(parse_config(Some("always"), Some("10"), None).is_err());
        assert!(parse_config(Some("always"), Some("x-20"), None).is_err());
    }

    #[test]
    fn syscall_filter() {
        let c = parse_config(Some("never"), None, None).unwrap();
        assert!(c.syscall(0) && c.syscall(4004));
        let c = parse_config(Some("never"), None, Some("4004, 4288")).unwrap();
        assert!(c.syscall(4004) && c.syscall(4288) && !c.syscall(4003) && !c.syscall(64));
        let c = parse_config(Some("never"), None, Some("none")).unwrap();
        assert!(!c.syscall(64));
        assert!(parse_config(Some("never"), None, Some("write")).is_err());
        assert!(parse_config(Some("never"), None, Some("")).is_err());
    }
}
