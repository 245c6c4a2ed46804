// SPDX-License-Identifier: GPL-2.0-or-later
//! Hook library of `cannoli probe`: `HookType::Register` at the pcs of the
//! plan file `$CANNOLI_PROBE_PLAN` names (the client writes it: probed
//! entries, return instructions, `FUNC+OFF` pcs), nothing elsewhere. QEMU
//! hides `CANNOLI_*` variables from the guest.
//!
//! The plan: a line of settings (`stores=1`: every store too, where
//! arguments lie on the stack; `count=1`: every other instruction as an
//! exec event, for `--insns`), then one hex pc per line. For `LIB:FUNC`
//! probes, `exe LOW PATH` names the program and where its offset 0 is
//! linked, and each `lib LOW PATH` is followed by `+PC` lines at the
//! library's link-time addresses.
//!
//! A library's pcs are known once the dynamic loader has mapped it. Until
//! every library is found, an instruction on a page not looked at before
//! makes the library read QEMU's `/proc/self/maps` (a library's code runs
//! after it is mapped, so its first translation finds it): there the
//! program's mapping of its offset 0 gives where guest memory is in QEMU's
//! address space, and each library's mapping of its offset 0 its load
//! address, which moves its pcs.

use jitter::HookType;
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The environment variable naming the plan file.
const PLAN_ENV: &str = "CANNOLI_PROBE_PLAN";

/// A library whose pcs wait for its mapping.
struct Lib {
    path: String,
    low: u64,
    pcs: Vec<u64>,
    found: bool,
}

struct Plan {
    pcs: HashSet<u64>,
    stores: bool,
    count: bool,
    exe: Option<(u64, String)>,
    libs: Vec<Lib>,
    /// Pages whose instructions were looked up in the mappings already.
    seen: HashSet<u64>,
    /// The files mapped before the guest ran (where they start): QEMU's
    /// own libraries, which on a guest of the host's architecture are the
    /// same files as the guest's (the host's libc).
    before: HashSet<(u64, String)>,
}

fn parse(text: &str) -> Result<Plan, String> {
    let mut lines = text.lines();
    let head = lines.next().ok_or("empty")?;
    let mut plan = Plan {
        pcs: HashSet::new(),
        stores: false,
        count: false,
        exe: None,
        libs: Vec::new(),
        seen: HashSet::new(),
        before: HashSet::new(),
    };
    for kv in head.split_whitespace() {
        match kv {
            "stores=1" => plan.stores = true,
            "count=1" => plan.count = true,
            "stores=0" | "count=0" => {}
            _ => return Err(format!("unknown setting {kv:?}")),
        }
    }
    let hex = |s: &str| u64::from_str_radix(s.trim(), 16).map_err(|_| format!("bad pc {s:?}"));
    for l in lines {
        if let Some(rest) = l.strip_prefix("exe ").or_else(|| l.strip_prefix("lib ")) {
            let (low, path) = rest.split_once(' ').ok_or(format!("bad line {l:?}"))?;
            if l.starts_with("exe ") {
                plan.exe = Some((hex(low)?, path.to_string()));
            } else {
                plan.libs.push(Lib {
                    path: path.to_string(),
                    low: hex(low)?,
                    pcs: Vec::new(),
                    found: false,
                });
            }
        } else if let Some(pc) = l.strip_prefix('+') {
            let lib = plan
                .libs
                .last_mut()
                .ok_or("a +PC line before any lib line")?;
            lib.pcs.push(hex(pc)?);
        } else {
            plan.pcs.insert(hex(l)?);
        }
    }
    if !plan.libs.is_empty() {
        plan.before = file_starts(&read_maps())
            .into_iter()
            .map(|(s, p)| (s, p.to_string()))
            .collect();
    }
    Ok(plan)
}

fn read_maps() -> String {
    std::fs::read_to_string("/proc/self/maps").unwrap_or_default()
}

/// `start-end perms offset dev inode path`: the start of each file's
/// mapping of its offset 0.
fn file_starts(maps: &str) -> Vec<(u64, &str)> {
    maps.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let range = w.next()?;
            let _perms = w.next()?;
            let offset = w.next()?;
            let path = w.nth(2)?;
            let start = u64::from_str_radix(range.split('-').next()?, 16).ok()?;
            (u64::from_str_radix(offset, 16).ok()? == 0).then_some((start, path))
        })
        .collect()
}

impl Plan {
    /// Looks for the libraries not found yet in QEMU's mappings.
    fn find_libs(&mut self) {
        let Some((exe_low, exe)) = &self.exe else {
            return;
        };
        let maps = read_maps();
        let starts = file_starts(&maps);
        let Some(host_exe) = starts.iter().find(|(_, p)| p == exe).map(|(s, _)| *s) else {
            return;
        };
        let guest_base = host_exe.wrapping_sub(*exe_low);
        for lib in self.libs.iter_mut().filter(|l| !l.found) {
            let before = &self.before;
            let guest = starts
                .iter()
                .find(|(s, p)| *p == lib.path && !before.contains(&(*s, p.to_string())));
            if let Some((start, _)) = guest {
                let bias = start.wrapping_sub(guest_base).wrapping_sub(lib.low);
                self.pcs
                    .extend(lib.pcs.iter().map(|pc| pc.wrapping_add(bias)));
                lib.found = true;
            }
        }
    }
}

/// The plan, read at the first hook call. A static: QEMU calls the hooks
/// as free functions, so the library has nowhere else to keep it.
fn plan() -> MutexGuard<'static, Plan> {
    static P: OnceLock<Mutex<Plan>> = OnceLock::new();
    let m = P.get_or_init(|| {
        let path = std::env::var_os(PLAN_ENV).unwrap_or_default();
        if path.is_empty() {
            eprintln!("libprobe: no {PLAN_ENV}; start it through `cannoli probe`");
            std::process::exit(2)
        }
        match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| parse(&t))
        {
            Ok(p) => Mutex::new(p),
            Err(e) => {
                eprintln!("libprobe: {PLAN_ENV}={}: {e}", path.to_string_lossy());
                std::process::exit(2)
            }
        }
    });
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[no_mangle]
fn hook_inst(pc: u64, _branch: bool) -> HookType {
    let mut p = plan();
    if p.libs.iter().any(|l| !l.found) && p.seen.insert(pc >> 12) {
        p.find_libs();
    }
    if p.pcs.contains(&pc) {
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
