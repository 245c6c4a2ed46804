// SPDX-License-Identifier: GPL-2.0-or-later
//! From probe points to instructions: which pcs QEMU reports registers at,
//! and what each one means. Made once, before the program runs, from the
//! program's ELF file; the hook library gets the pcs (see [`Plan::hooks`]),
//! the client keeps the rest.
//!
//! `LIB:FUNC` probes are planned the same way in the library's file, at
//! its link-time addresses ([`Module`]): the hook library and the client
//! each move them by the library's load bias once it is mapped. A
//! position-independent program is such a module too (module 0).
//!
//! Every probed function gets its entry and its return instructions
//! hooked, whatever was asked: the returns keep the call depth and match
//! returns to entries, and cost one event per call.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use super::super::demangle::qualified_name;
use super::conv::{Abi, Conv};
use super::elf::{Func, Image};
use super::error::Error;
use super::godwarf;
use super::isa::{self, Ret};
use super::shadow::AddrMap;
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
    /// Not probed: a function a probed one tail-calls, whose returns end
    /// the probed one's frame too.
    pub hidden: bool,
    /// Its convention: Go's for a Go program's functions.
    pub conv: Conv,
    /// Where its first result is in memory, for a convention without a
    /// result register (Go's ABI0, see [`godwarf`]), if known.
    pub ret_slot: Option<godwarf::Slot>,
    /// Its frames are its goroutine's, not its thread's (see
    /// [`by_goroutine`]).
    pub by_goroutine: bool,
    /// What it tells of a goroutine's stack moving, if it is one of the
    /// runtime's functions that move it.
    pub stack_move: Option<StackMove>,
}

/// The Go runtime's functions that move a goroutine's stack, and what
/// each tells (`super::goroutine`). When a goroutine needs more stack (or
/// the collector shrinks it), `runtime.copystack(gp, newsize)` gets a new
/// stack from `runtime.stackalloc`, copies the old one's used top there
/// (it keeps each frame's distance from the stack's high end), and gives
/// the old one to `runtime.stackfree`. The stack pointers of `gp`'s open
/// frames all move by the new high end less the old one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackMove {
    /// `copystack`'s entry: the goroutine and the new stack's size.
    Copy,
    /// `stackalloc`'s return: the new stack's low end (its result's first
    /// word).
    Alloc,
    /// `stackfree`'s entry: the old stack's low and high ends.
    Free,
}

impl StackMove {
    /// Each, by its function's name (unchanged since Go 1.5).
    pub const FUNCTIONS: [(StackMove, &'static str); 3] = [
        (StackMove::Copy, "runtime.copystack"),
        (StackMove::Alloc, "runtime.stackalloc"),
        (StackMove::Free, "runtime.stackfree"),
    ];

    /// How many arguments its entry reads.
    pub fn args(self) -> usize {
        match self {
            StackMove::Copy | StackMove::Free => 2,
            StackMove::Alloc => 0,
        }
    }
}

/// Whether a function of a program of convention `abi` named `name` keeps
/// its frames by goroutine (`super::goroutine`): a Go function that runs
/// with `g` in its register and its stack pointer on that goroutine's
/// stack, on a guest where Go has such a register. Not so, and so kept
/// per thread (each runs to its return on its thread):
///
/// * on x86_64, an assembly function under the stack convention (its
///   symbol ends in `.abi0`): only Go's register convention keeps `g` in
///   r14, and such a function may use r14 for anything;
/// * the runtime's helpers that set `g` while the scheduler switches
///   goroutines (`save_g`, `load_g`, `setg`), called with the new
///   goroutine's `g` on the old one's stack: taken for the new one's,
///   their frame would end every frame it has.
pub fn by_goroutine(abi: Abi, go: bool, name: &str) -> bool {
    let bare = name.strip_suffix(".abi0").unwrap_or(name);
    let asm = abi == Abi::SysV && bare.len() < name.len();
    let switch = matches!(
        bare,
        "runtime.save_g" | "runtime.load_g" | "runtime.setg" | "setg" | "runtime.setg_gcc"
    );
    go && abi.go_g_reg().is_some() && !asm && !switch
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

/// A shared library with probes: its sites are at its link-time
/// addresses, moved by its load bias once it is mapped.
#[derive(Clone)]
pub struct Module {
    /// Canonical: as QEMU's mappings name it.
    pub path: PathBuf,
    /// Where its offset 0 is at link time ([`Image::low`]).
    pub low: u64,
    /// How far its segments reach past `low` ([`Image::span`]).
    pub span: u64,
    /// By pc, with the cheap [`AddrMap`] hash: looked up at every hit.
    pub sites: AddrMap<Vec<Site>>,
}

/// The file whose entry is the first instruction QEMU runs: the dynamic
/// loader, or a static-pie program. Where its offset 0 is mapped in QEMU's
/// address space, less where it is in the guest's (the first pc, less its
/// entry, plus its link-time low page), is where guest memory starts.
#[derive(Debug, Clone)]
pub struct Anchor {
    /// Its `e_entry` (ARM: even).
    pub entry: u64,
    /// Its link-time low page ([`Image::low`]).
    pub low: u64,
    /// Canonical: as QEMU's mappings name it.
    pub path: PathBuf,
}

/// Everything the probes of one run need.
#[derive(Clone)]
pub struct Plan {
    pub abi: Abi,
    pub big_endian: bool,
    pub specs: Vec<Spec>,
    pub targets: Vec<Target>,
    /// By pc, with the cheap [`AddrMap`] hash: looked up at every hit.
    pub sites: AddrMap<Vec<Site>>,
    /// The libraries of `LIB:FUNC` probes.
    pub modules: Vec<Module>,
    /// The program and its lowest page, for the hook library to find where
    /// QEMU put guest memory (libraries of a program at its link address).
    pub exe: (PathBuf, u64),
    /// A position-independent program: the file QEMU starts running in,
    /// from which the hook library finds where guest memory is.
    pub anchor: Option<Anchor>,
    /// Some argument is on the stack: the thread's stores are needed.
    pub stores: bool,
    /// Count every instruction (`--insns`).
    pub count: bool,
    /// Print every entry and return of every target (`--flow`).
    pub flow: bool,
    /// The registers, by name, that registers events need carry away
    /// from the sites, which carry every register; `None`: every register
    /// everywhere. The hook library's `regs=` setting.
    pub narrow: Option<Vec<&'static str>>,
    /// The stack pointer, by name, where block starts report their
    /// registers only where it moved or another kind of event came
    /// between (the hook library's `quiet=` setting, with `narrow`).
    pub quiet: Option<&'static str>,
    /// With `quiet`: a block start right after an 8-byte load reports its
    /// registers anyway (`quiet_words=1`).
    pub quiet_words: bool,
    /// Each target's name as a person reads it where that differs from
    /// its symbol (a C++ or Rust function's qualified name): `--flow`'s
    /// and the timeline's. Empty where none does.
    pub shown: Vec<Option<String>>,
}

impl Plan {
    /// Resolves `specs` in `img`; `Err` is one line naming the probe that
    /// matched nothing and how to see what there is.
    pub fn new(img: &Image, specs: Vec<Spec>, count: bool, flow: bool) -> Result<Plan, Error> {
        let exe = img.path.canonicalize().unwrap_or_else(|_| img.path.clone());
        // A position-independent program is placed like a library: its
        // sites are at link-time addresses, moved by its load bias. Where
        // QEMU put guest memory is found from the first instruction it
        // runs, the entry of the dynamic loader (or of a static-pie
        // program itself).
        let anchor = if img.pie {
            let a = match super::libs::interpreter(&img.path)? {
                Some(ld) => {
                    let li = Image::read(&ld)?;
                    Anchor {
                        entry: li.entry,
                        low: li.low,
                        path: ld,
                    }
                }
                None => Anchor {
                    entry: img.entry,
                    low: img.low,
                    path: exe.clone(),
                },
            };
            Some(a)
        } else {
            None
        };
        let mut plan = Plan {
            abi: img.abi,
            big_endian: img.big_endian,
            specs: Vec::new(),
            targets: Vec::new(),
            sites: AddrMap::default(),
            modules: Vec::new(),
            exe: (exe.clone(), img.low),
            anchor,
            stores: false,
            count,
            flow,
            narrow: None,
            quiet: None,
            quiet_words: false,
            shown: Vec::new(),
        };
        // The program's own sites: in `sites`, or in module 0 when it is
        // position independent.
        let exe_module = if img.pie {
            plan.modules.push(Module {
                path: exe,
                low: img.low,
                span: img.span,
                sites: AddrMap::default(),
            });
            Some(0)
        } else {
            None
        };
        let first_lib = plan.modules.len();
        // Targets by (module, entry): a function probed twice is one target.
        let mut by_entry: HashMap<(Option<usize>, u64), usize> = HashMap::new();
        let mut libs: Vec<(String, Image)> = Vec::new();
        for (p, spec) in specs.iter().enumerate() {
            let (module, image) = match &spec.lib {
                Some(lib) => {
                    let i = match libs.iter().position(|(l, _)| l == lib) {
                        Some(m) => m,
                        None => {
                            let path =
                                super::libs::find(&img.path, lib).map_err(|e| Error::ProbeLib {
                                    text: spec.text.clone(),
                                    source: Box::new(e),
                                })?;
                            let li = Image::read(&path)?;
                            plan.modules.push(Module {
                                path,
                                low: li.low,
                                span: li.span,
                                sites: AddrMap::default(),
                            });
                            libs.push((lib.clone(), li));
                            libs.len() - 1
                        }
                    };
                    (Some(first_lib + i), &libs[i].1)
                }
                None => (exe_module, img),
            };
            if let (Point::Addr(a), None) = (spec.point, &spec.lib) {
                plan.add(exe_module, a, Site::Pc(p));
                continue;
            }
            let mut matched: Vec<&Func> = image.matching(&spec.func).collect();
            if let Some(f) = matched.iter().find(|f| f.ifunc) {
                // An indirect function named as such: its calls reach the
                // implementation its resolver picked, not the resolver.
                let named = !spec.func.contains(['*', '?']);
                if named && matches!(spec.point, Point::Entry(_) | Point::Return) {
                    let imps: Vec<&Func> = image.implementations(f).collect();
                    if imps.is_empty() {
                        return Err(Error::Ifunc {
                            text: spec.text.clone(),
                            func: f.name.clone(),
                            path: image.path.clone(),
                        });
                    }
                    matched = imps;
                }
            }
            let go = image.is_go();
            let mut any = false;
            for f in matched {
                any = true;
                if let Point::Offset(o) = spec.point {
                    if o >= (f.end - f.start).max(1) {
                        return Err(Error::Outside {
                            text: spec.text.clone(),
                            func: f.name.clone(),
                            len: f.end - f.start,
                            off: o,
                        });
                    }
                    plan.add(module, f.start + o, Site::Pc(p));
                    continue;
                }
                let t = plan.target(module, image, go, f, &mut by_entry);
                plan.targets[t].hidden = false;
                let target = &mut plan.targets[t];
                match spec.point {
                    Point::Entry(n) => {
                        if target.on_entry.is_none() {
                            target.on_entry = Some((p, n));
                        }
                        if (0..n).any(|i| target.conv.on_stack(i)) {
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
                if spec.lib.is_none() {
                    if let Some(lib) = library_with(img, &spec.func) {
                        return Err(Error::InLibrary {
                            text: spec.text.clone(),
                            func: spec.func.clone(),
                            path: image.path.clone(),
                            with_lib: format!("{lib}:{}", spec.text.trim()),
                            lib,
                        });
                    }
                }
                return Err(Error::NoFunction {
                    text: spec.text.clone(),
                    func: spec.func.clone(),
                    path: image.path.clone(),
                });
            }
        }
        if flow {
            // SystemTap's call flow shows arguments at every entry.
            for t in plan.targets.iter_mut().filter(|t| !t.hidden) {
                if t.on_entry.is_none() {
                    let p = t.on_return.unwrap_or(0);
                    t.on_entry = Some((p, 0));
                }
            }
        }
        // Where Go keeps `g` in a register, the goroutines' frames move
        // with their stacks; on i386 (`g` in thread-local storage) the
        // frames of the thread that moves a stack do.
        let go_per_thread = img.abi.go_g_reg().is_none() && plan.targets.iter().any(|t| t.conv.go);
        if plan.by_goroutine() || go_per_thread {
            plan.follow_stack_moves(img, exe_module, &mut by_entry);
        }
        plan.find_ret_slots(img);
        plan.stackalloc_slot(img);
        plan.specs = specs;
        plan.shown = plan
            .targets
            .iter()
            .map(|t| qualified_name(&t.name))
            .collect();
        if plan.shown.iter().all(Option::is_none) {
            plan.shown.clear();
        }
        Ok(plan)
    }

    /// Target `t`'s name as `--flow` and the timeline show it, where that
    /// is not its symbol ([`Plan::shown`]).
    pub fn shown(&self, t: usize) -> Option<&str> {
        self.shown.get(t)?.as_deref()
    }

    /// Hooks the runtime's functions that move a goroutine's stack
    /// ([`StackMove`]), unprobed unless asked for: without them a
    /// goroutine's frames open across a move would keep their old stack
    /// pointers, and every return after it would take them for frames a
    /// panic unwound.
    fn follow_stack_moves(
        &mut self,
        img: &Image,
        module: Option<usize>,
        by_entry: &mut HashMap<(Option<usize>, u64), usize>,
    ) {
        for (what, name) in StackMove::FUNCTIONS {
            let Some(f) = img.matching(name).next() else {
                continue;
            };
            let t = self.target(module, img, true, f, by_entry);
            let target = &mut self.targets[t];
            target.stack_move = Some(what);
            if (0..what.args()).any(|i| target.conv.on_stack(i)) {
                self.stores = true;
            }
        }
    }

    /// The result slots of a Go program's targets under ABI0, from its
    /// DWARF; reading them needs the thread's stores.
    fn find_ret_slots(&mut self, img: &Image) {
        let wanted: Vec<u64> = self
            .targets
            .iter()
            .filter(|t| t.conv.go && t.conv.ret_reg().is_none())
            .filter(|t| {
                t.on_return.is_some() || self.flow || t.stack_move == Some(StackMove::Alloc)
            })
            .map(|t| t.entry)
            .collect();
        if wanted.is_empty() {
            return;
        }
        let lr = img.abi != Abi::Cdecl;
        let slots = godwarf::result_slots(&img.path, &wanted, img.abi.word(), lr);
        for t in self.targets.iter_mut().filter(|t| t.conv.go) {
            t.ret_slot = slots.get(&t.entry).copied();
        }
        self.stores |= !slots.is_empty();
    }

    /// `runtime.stackalloc`'s result slot under ABI0 where DWARF gave
    /// none (a program linked with `-w`, or stripped): its signature,
    /// `stackalloc(n uint32) stack`, puts the result's first word one word
    /// past its one argument's slot.
    fn stackalloc_slot(&mut self, img: &Image) {
        let w = img.abi.word();
        let first_arg = if img.abi == Abi::Cdecl { 0 } else { w };
        for t in &mut self.targets {
            if t.stack_move == Some(StackMove::Alloc)
                && t.conv.ret_reg().is_none()
                && t.ret_slot.is_none()
            {
                t.ret_slot = Some(godwarf::Slot {
                    offset: first_arg + w,
                    len: w,
                });
                self.stores = true;
            }
        }
    }

    /// The target of `f`, made (entry and returns hooked) if new; the
    /// functions it tail-calls become hidden targets, so that their
    /// returns close its frame (`atoi` ends in `b strtol` on MIPS).
    fn target(
        &mut self,
        module: Option<usize>,
        image: &Image,
        go: bool,
        f: &Func,
        by_entry: &mut HashMap<(Option<usize>, u64), usize>,
    ) -> usize {
        if let Some(&t) = by_entry.get(&(module, f.entry)) {
            return t;
        }
        let first = self.targets.len();
        let mut work = vec![f.clone()];
        // Bounded: a chain of tail calls is short, a glob probes the rest.
        while let Some(g) = work.pop().filter(|_| self.targets.len() - first < 256) {
            if by_entry.contains_key(&(module, g.entry)) {
                continue;
            }
            let t = self.targets.len();
            self.targets.push(Target {
                name: g.name.clone(),
                entry: g.entry,
                on_entry: None,
                on_return: None,
                hidden: true,
                conv: Conv::of(image.abi, go, &g.name),
                ret_slot: None,
                by_goroutine: by_goroutine(image.abi, go, &g.name),
                stack_move: None,
            });
            by_entry.insert((module, g.entry), t);
            self.add(module, g.entry, Site::Entry(t));
            for r in isa::returns(image, &g) {
                self.add(module, r.pc, Site::Return(t, r));
                if let Some(next) = r.cond_next {
                    self.add(module, next, Site::NotTaken(r.pc));
                }
            }
            for to in isa::tail_jumps(image, &g) {
                if let Some(h) = image.containing(to) {
                    work.push(h.clone());
                }
            }
        }
        first
    }

    fn add(&mut self, module: Option<usize>, pc: u64, s: Site) {
        let sites = match module {
            Some(m) => &mut self.modules[m].sites,
            None => &mut self.sites,
        };
        let v = sites.entry(pc).or_default();
        if !v.contains(&s) {
            v.push(s);
        }
    }

    /// The `-p` a return of target `t` is a hit of: its return probe, or
    /// its entry probe under `--flow`.
    pub fn return_probe(&self, t: usize) -> Option<usize> {
        let target = &self.targets[t];
        match (target.on_return, target.on_entry, self.flow) {
            (Some(p), _, _) => Some(p),
            (None, Some((p, _)), true) => Some(p),
            _ => None,
        }
    }

    /// Whether Go functions' frames are kept by goroutine, in the order
    /// the process's threads ran their calls (`super::goroutine`): some
    /// target's are ([`by_goroutine`]).
    pub fn by_goroutine(&self) -> bool {
        self.targets.iter().any(|t| t.by_goroutine)
    }

    /// The hook library's plan: a line of settings, then one hex pc per
    /// line.
    pub fn hooks(&self) -> String {
        let mut s = format!(
            "stores={} count={}",
            u8::from(self.stores),
            u8::from(self.count)
        );
        if self.by_goroutine() {
            s.push_str(" order=1");
        }
        if let Some(names) = &self.narrow {
            let _ = write!(s, " regs={}", names.join(","));
            if let Some(sp) = self.quiet {
                let _ = write!(s, " quiet={sp}");
                if self.quiet_words {
                    s.push_str(" quiet_words=1");
                }
            }
        }
        s.push('\n');
        let _ = writeln!(s, "program {}", self.exe.0.display());
        let mut pcs: Vec<u64> = self.sites.keys().copied().collect();
        pcs.sort_unstable();
        for pc in pcs {
            let _ = writeln!(s, "{pc:x}");
        }
        if let Some(a) = &self.anchor {
            let _ = writeln!(s, "anchor {:x} {:x} {}", a.entry, a.low, a.path.display());
        } else if !self.modules.is_empty() {
            let _ = writeln!(s, "exe {:x} {}", self.exe.1, self.exe.0.display());
        }
        for m in &self.modules {
            let _ = writeln!(s, "lib {:x} {}", m.low, m.path.display());
            let mut pcs: Vec<u64> = m.sites.keys().copied().collect();
            pcs.sort_unstable();
            for pc in pcs {
                let _ = writeln!(s, "+{pc:x}");
            }
        }
        s
    }

    /// The plan as it applies to a process image running `exe` (its
    /// canonical path, as the hello names it): this one where that is the
    /// plan's program, or not known; else a copy without the program's
    /// own sites. An exec keeps the pid and the hook library but not the
    /// program: the sites of another file at the same addresses would be
    /// read as its functions. A library's sites stay where the hook
    /// library can place them: behind the dynamic loader of a
    /// position-independent program.
    pub fn for_image(self: &Arc<Plan>, exe: Option<&str>) -> Arc<Plan> {
        if self.runs_in(exe) {
            return self.clone();
        }
        let mut p = Plan::clone(self);
        p.sites.clear();
        let by_loader = p.anchor.as_ref().is_some_and(|a| a.path != p.exe.0);
        if p.anchor.is_some() {
            // A position-independent program is module 0, found by its
            // path: another program never maps it. Nothing waits for it.
            p.modules[0].sites.clear();
            p.anchor = None;
        }
        if !by_loader {
            // The hook library places libraries from where the dynamic
            // loader or the program itself is mapped: neither is there
            // (`jitter::presets::plan::Plan::for_guest`).
            p.modules.iter_mut().for_each(|m| m.sites.clear());
        }
        Arc::new(p)
    }

    /// Whether an image running `exe` runs the plan's program: the same
    /// file (by device and inode, so another path to it is the same
    /// program), or one not known.
    pub fn runs_in(&self, exe: Option<&str>) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Some(exe) = exe else {
            return true;
        };
        let id = |p: &std::path::Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
        match (id(std::path::Path::new(exe)), id(&self.exe.0)) {
            (Some(a), Some(b)) => a == b,
            _ => std::path::Path::new(exe) == self.exe.0,
        }
    }

    /// The module whose file is `path` (canonical), if it has probes.
    pub fn module_of(&self, path: &std::path::Path) -> Option<usize> {
        self.modules.iter().position(|m| m.path == path)
    }
}

/// The file name of the first library the loader maps for the dynamically
/// linked program `img` that has a function matching `func`: where a
/// probe of the program names a function it only imports (`malloc`), the
/// line that says so names the probe to write instead.
fn library_with(img: &Image, func: &str) -> Option<String> {
    let libs = super::libs::loaded(&img.path).ok()?;
    libs.iter().find_map(|l| {
        let li = Image::read(l).ok()?;
        li.matching(func).next()?;
        Some(l.file_name()?.to_string_lossy().into_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_frames_are_a_goroutines() {
        assert!(by_goroutine(Abi::SysV, true, "main.relay"));
        assert!(!by_goroutine(Abi::SysV, false, "main"), "C");
        assert!(!by_goroutine(Abi::Cdecl, true, "main.relay"), "g in TLS");
        assert!(!by_goroutine(Abi::SysV, true, "crypto/sha256.block.abi0"));
        assert!(by_goroutine(Abi::Aapcs64, true, "crypto/sha256.block.abi0"));
        assert!(!by_goroutine(Abi::O32, true, "runtime.save_g"));
        assert!(!by_goroutine(Abi::Aapcs, true, "setg"));
    }
}
