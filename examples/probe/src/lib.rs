// SPDX-License-Identifier: GPL-2.0-or-later
//! Hook library of `cannoli probe`: `HookType::Register` at the pcs of the
//! plan file `$CANNOLI_PROBE_PLAN` names (the client writes it: probed
//! entries, return instructions, `FUNC+OFF` pcs), nothing elsewhere. Its
//! first line has two settings: `stores=1` asks for every store (arguments
//! on the stack are read from them), `count=1` for every other instruction
//! as an exec event (`--insns`). QEMU hides `CANNOLI_*` variables from the
//! guest.

use jitter::HookType;
use std::collections::HashSet;
use std::sync::OnceLock;

/// The environment variable naming the plan file.
const PLAN_ENV: &str = "CANNOLI_PROBE_PLAN";

struct Plan {
    pcs: HashSet<u64>,
    stores: bool,
    count: bool,
}

fn parse(text: &str) -> Result<Plan, String> {
    let mut lines = text.lines();
    let head = lines.next().ok_or("empty")?;
    let mut plan = Plan {
        pcs: HashSet::new(),
        stores: false,
        count: false,
    };
    for kv in head.split_whitespace() {
        match kv {
            "stores=1" => plan.stores = true,
            "count=1" => plan.count = true,
            "stores=0" | "count=0" => {}
            _ => return Err(format!("unknown setting {kv:?}")),
        }
    }
    for l in lines {
        let pc = u64::from_str_radix(l.trim(), 16).map_err(|_| format!("bad pc {l:?}"))?;
        plan.pcs.insert(pc);
    }
    Ok(plan)
}

fn plan() -> &'static Plan {
    static P: OnceLock<Plan> = OnceLock::new();
    P.get_or_init(|| {
        let path = std::env::var_os(PLAN_ENV).unwrap_or_default();
        if path.is_empty() {
            eprintln!("libprobe: no {PLAN_ENV}; start it through `cannoli probe`");
            std::process::exit(2)
        }
        match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| parse(&t))
        {
            Ok(p) => p,
            Err(e) => {
                eprintln!("libprobe: {PLAN_ENV}={}: {e}", path.to_string_lossy());
                std::process::exit(2)
            }
        }
    })
}

#[no_mangle]
fn hook_inst(pc: u64, _branch: bool) -> HookType {
    let p = plan();
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
