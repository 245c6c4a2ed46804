// SPDX-License-Identifier: GPL-2.0-or-later
//! From probe points to instructions: which pcs QEMU reports registers at,
//! and what each one means. Made once, before the program runs, from the
//! program's ELF file; the hook library gets the pcs (see [`Plan::hooks`]),
//! the client keeps the rest.
//!
//! Every probed function gets its entry and its return instructions
//! hooked, whatever was asked: the returns keep the call depth and match
//! returns to entries, and cost one event per call.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::conv::Abi;
use super::elf::Image;
use super::isa::{self, Ret};
use super::spec::{Point, Spec};

/// A probed function.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub entry: u64,
    /// The `-p` of its entry (index into [`Plan::specs`]) and how many
    /// arguments it reports.
    pub on_entry: Option<(usize, usize)>,
    /// The `-p` of its return.
    pub on_return: Option<usize>,
}

/// What a hooked pc means; one pc can mean several things.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Site {
    /// Target `t` starts here.
    Entry(usize),
    /// A return instruction of target `t`.
    Return(usize, Ret),
    /// The instruction after a conditional return at this pc: reaching it
    /// next means that return was not taken.
    NotTaken(u64),
    /// `-p` number `p` asks for every register here.
    Pc(usize),
}

/// Everything the probes of one run need.
pub struct Plan {
    pub abi: Abi,
    pub big_endian: bool,
    pub specs: Vec<Spec>,
    pub targets: Vec<Target>,
    pub sites: HashMap<u64, Vec<Site>>,
    /// Some argument is on the stack: the thread's stores are needed.
    pub stores: bool,
    /// Count every instruction (`--insns`).
    pub count: bool,
    /// Print every entry and return of every target (`--flow`).
    pub flow: bool,
}

impl Plan {
    /// Resolves `specs` in `img`; `Err` is one line naming the probe that
    /// matched nothing and how to see what there is.
    pub fn new(img: &Image, specs: Vec<Spec>, count: bool, flow: bool) -> Result<Plan, String> {
        if img.pie {
            return Err(format!(
                "{} is position independent, so its functions' run-time addresses are not known \
                 before it runs; build it with -no-pie (or -static)",
                img.path.display()
            ));
        }
        let mut plan = Plan {
            abi: img.abi,
            big_endian: img.big_endian,
            specs: Vec::new(),
            targets: Vec::new(),
            sites: HashMap::new(),
            stores: false,
            count,
            flow,
        };
        let mut by_entry: HashMap<u64, usize> = HashMap::new();
        for (p, spec) in specs.iter().enumerate() {
            if let Some(lib) = &spec.lib {
                return Err(format!(
                    "probe {:?}: {lib}:{} names a shared library, and probes in libraries are \
                     not supported yet; probe the program's own functions (a static build \
                     has libc's in it)",
                    spec.text, spec.func
                ));
            }
            if let Point::Addr(a) = spec.point {
                plan.add(a, Site::Pc(p));
                continue;
            }
            let mut any = false;
            for f in img.matching(&spec.func) {
                any = true;
                if let Point::Offset(o) = spec.point {
                    if o >= (f.end - f.start).max(1) {
                        return Err(format!(
                            "probe {:?}: {} is {} bytes long, so +{o:#x} is outside it",
                            spec.text,
                            f.name,
                            f.end - f.start
                        ));
                    }
                    plan.add(f.start + o, Site::Pc(p));
                    continue;
                }
                let t = match by_entry.get(&f.entry) {
                    Some(&t) => t,
                    None => {
                        let t = plan.targets.len();
                        plan.targets.push(Target {
                            name: f.name.clone(),
                            entry: f.entry,
                            on_entry: None,
                            on_return: None,
                        });
                        by_entry.insert(f.entry, t);
                        plan.add(f.entry, Site::Entry(t));
                        for r in isa::returns(img, f) {
                            plan.add(r.pc, Site::Return(t, r));
                            if let Some(next) = r.cond_next {
                                plan.add(next, Site::NotTaken(r.pc));
                            }
                        }
                        t
                    }
                };
                let target = &mut plan.targets[t];
                match spec.point {
                    Point::Entry(n) => {
                        if target.on_entry.is_none() {
                            target.on_entry = Some((p, n));
                        }
                        if (0..n).any(|i| img.abi.on_stack(i)) {
                            plan.stores = true;
                        }
                    }
                    Point::Return => {
                        target.on_return.get_or_insert(p);
                    }
                    Point::Offset(_) | Point::Addr(_) => unreachable!("handled above"),
                }
            }
            if !any {
                return Err(format!(
                    "probe {:?}: no function {} in {}; `cannoli probe --list PATTERN PROGRAM` \
                     lists them",
                    spec.text,
                    spec.func,
                    img.path.display()
                ));
            }
        }
        if flow {
            // SystemTap's call flow shows arguments at every entry.
            for t in &mut plan.targets {
                if t.on_entry.is_none() {
                    let p = t.on_return.unwrap_or(0);
                    t.on_entry = Some((p, 0));
                }
            }
        }
        plan.specs = specs;
        Ok(plan)
    }

    fn add(&mut self, pc: u64, s: Site) {
        let v = self.sites.entry(pc).or_default();
        if !v.contains(&s) {
            v.push(s);
        }
    }

    /// The hook library's plan: a line of settings, then one hex pc per
    /// line.
    pub fn hooks(&self) -> String {
        let mut s = format!(
            "stores={} count={}\n",
            u8::from(self.stores),
            u8::from(self.count)
        );
        let mut pcs: Vec<u64> = self.sites.keys().copied().collect();
        pcs.sort_unstable();
        for pc in pcs {
            let _ = writeln!(s, "{pc:x}");
        }
        s
    }
}
