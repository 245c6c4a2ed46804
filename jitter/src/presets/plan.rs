// SPDX-License-Identifier: GPL-2.0-or-later
//! The plan file of a hook library that asks for registers at chosen pcs
//! (`cannoli probe`'s `libprobe.so`, `cannoli heap`'s `libheap.so`): the
//! client writes it before the program runs, the hook library reads it at
//! its first hook call. Here so that both libraries read it with the same
//! code.
//!
//! The plan: a line of settings (`stores=1`: every store too; `count=1`:
//! every other instruction as an exec event; `order=1`: every pc of the
//! plan takes a number of the process's order; `regs=NAME,NAME,...`: the
//! registers that registers events carry away from the plan's pcs, see
//! [`crate::register_mask`]; `quiet=NAME`: block starts report those
//! registers only where the stack pointer NAME moved or an event of
//! another kind came between, see [`crate::quiet_block_starts`];
//! `quiet_words=1`: an 8-byte load is such an event too), then one hex
//! pc per line.
//! `program PATH` names the program those pcs are in: a QEMU an exec
//! started on another program hooks none of them (nor the ranges, nor a
//! position-independent program's), only the libraries' (see
//! [`Plan::for_guest`]).
//! For pcs in shared libraries, `exe LOW PATH` names the program and where
//! its offset 0 is linked, and each `lib LOW PATH` is followed by `+PC`
//! lines at the library's link-time addresses. A line `LO-HI` (or
//! `+LO-HI` after a `lib`) asks for every instruction in `[LO, HI)`
//! (`regtrace --func` of a position-independent program). A position-independent
//! program is such a `lib` too, and `anchor ENTRY LOW PATH` replaces `exe`:
//! the file whose entry QEMU runs first (the dynamic loader, or a
//! static-pie program), its `e_entry` and where its offset 0 is linked.
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

use std::collections::HashSet;

/// A library whose pcs wait for its mapping.
struct Lib {
    path: String,
    low: u64,
    pcs: Vec<u64>,
    ranges: Vec<(u64, u64)>,
    found: bool,
}

/// The pcs a hook library asks registers at, with what places those of
/// shared libraries.
pub struct Plan {
    pcs: HashSet<u64>,
    /// `[lo, hi)` ranges of pcs, placed.
    ranges: Vec<(u64, u64)>,
    /// `stores=1`: every store too.
    pub stores: bool,
    /// `count=1`: every other instruction as an exec event.
    pub count: bool,
    /// `order=1`: every pc of the plan takes a number of the process's
    /// order (`crate::order_here`).
    pub order: bool,
    /// `regs=NAME,...`: the registers events carry at instructions other
    /// than the plan's pcs (which carry every register), by name.
    pub regs: Option<Vec<String>>,
    /// `quiet=NAME`: block starts are quiet, NAME the stack pointer.
    pub quiet: Option<String>,
    /// `quiet_words=1`: but not right after an 8-byte load.
    pub quiet_words: bool,
    exe: Option<(u64, String)>,
    /// `program PATH`: the program the plan was made for.
    program: Option<String>,
    /// `(entry, low, path)` of the file QEMU starts in.
    anchor: Option<(u64, u64, String)>,
    /// Where guest memory is in QEMU's address space, once known.
    guest_base: Option<u64>,
    /// The first instruction was looked at (the anchor's entry).
    started: bool,
    /// The guest runs another program than the plan's ([`Plan::for_guest`]).
    other_program: bool,
    libs: Vec<Lib>,
    /// Pages whose instructions were looked up in the mappings already.
    seen: HashSet<u64>,
    /// The files mapped before the guest ran (where they start): QEMU's
    /// own libraries, which on a guest of the host's architecture are the
    /// same files as the guest's (the host's libc).
    before: HashSet<(u64, String)>,
}

/// Parses the plan file's `text`; `qemu_maps` is QEMU's `/proc/self/maps`
/// from before it loaded the guest (`None`: read now).
pub fn parse(text: &str, qemu_maps: Option<&str>) -> Result<Plan, String> {
    let mut lines = text.lines();
    let head = lines.next().ok_or("empty")?;
    let mut plan = Plan {
        pcs: HashSet::new(),
        ranges: Vec::new(),
        stores: false,
        count: false,
        order: false,
        regs: None,
        quiet: None,
        quiet_words: false,
        exe: None,
        program: None,
        anchor: None,
        guest_base: None,
        started: false,
        other_program: false,
        libs: Vec::new(),
        seen: HashSet::new(),
        before: HashSet::new(),
    };
    for kv in head.split_whitespace() {
        match kv {
            "stores=1" => plan.stores = true,
            "quiet_words=1" => plan.quiet_words = true,
            "count=1" => plan.count = true,
            "order=1" => plan.order = true,
            "stores=0" | "count=0" | "order=0" | "quiet_words=0" => {}
            _ if kv.starts_with("regs=") => {
                let list = &kv["regs=".len()..];
                let names: Vec<String> = list.split(',').map(String::from).collect();
                if names.iter().any(|n| n.is_empty()) {
                    return Err(format!("bad register list {list:?}"));
                }
                plan.regs = Some(names);
            }
            _ if kv.starts_with("quiet=") => {
                let name = &kv["quiet=".len()..];
                if name.is_empty() || name.contains(',') {
                    return Err(format!("bad stack pointer {name:?}"));
                }
                plan.quiet = Some(name.to_string());
            }
            _ => return Err(format!("unknown setting {kv:?}")),
        }
    }
    let hex = |s: &str| u64::from_str_radix(s.trim(), 16).map_err(|_| format!("bad pc {s:?}"));
    let range = |s: &str| -> Result<Option<(u64, u64)>, String> {
        let Some((lo, hi)) = s.split_once('-') else {
            return Ok(None);
        };
        let (lo, hi) = (hex(lo)?, hex(hi)?);
        if lo >= hi {
            return Err(format!("bad range {s:?}"));
        }
        Ok(Some((lo, hi)))
    };
    for l in lines {
        if let Some(path) = l.strip_prefix("program ") {
            plan.program = Some(path.to_string());
        } else if let Some(rest) = l.strip_prefix("anchor ") {
            let mut w = rest.splitn(3, ' ');
            let (Some(entry), Some(low), Some(path)) = (w.next(), w.next(), w.next()) else {
                return Err(format!("bad line {l:?}"));
            };
            plan.anchor = Some((hex(entry)?, hex(low)?, path.to_string()));
        } else if let Some(rest) = l.strip_prefix("exe ").or_else(|| l.strip_prefix("lib ")) {
            let (low, path) = rest.split_once(' ').ok_or(format!("bad line {l:?}"))?;
            if l.starts_with("exe ") {
                plan.exe = Some((hex(low)?, path.to_string()));
            } else {
                plan.libs.push(Lib {
                    path: path.to_string(),
                    low: hex(low)?,
                    pcs: Vec::new(),
                    ranges: Vec::new(),
                    found: false,
                });
            }
        } else if let Some(pc) = l.strip_prefix('+') {
            let lib = plan
                .libs
                .last_mut()
                .ok_or("a +PC line before any lib line")?;
            match range(pc)? {
                Some(r) => lib.ranges.push(r),
                None => lib.pcs.push(hex(pc)?),
            }
        } else if let Some(r) = range(l)? {
            plan.ranges.push(r);
        } else {
            plan.pcs.insert(hex(l)?);
        }
    }
    if !plan.libs.is_empty() {
        // QEMU's own files, mapped before the guest's: from when this
        // library was loaded, else (no snapshot) from now, when the
        // guest's libraries are not mapped yet (but its dynamic loader
        // is: a position-independent program needs the snapshot).
        let maps = qemu_maps.map_or_else(read_maps, str::to_string);
        plan.before = file_starts(&maps)
            .into_iter()
            .map(|(s, p)| (s, p.to_string()))
            .collect();
    }
    Ok(plan)
}

/// The plan of the file that `$env` names, for hook library `lib` of
/// `tool` (`"libheap"`, `"cannoli heap"`), with QEMU's mappings from
/// before it loaded the guest ([`read_maps`] at the library's load). A hook
/// library has no other way to fail: a missing variable or a bad file is
/// one line on stderr and exit status 2.
pub fn load_or_exit(env: &str, lib: &str, tool: &str, qemu_maps: Option<&str>) -> Plan {
    let path = std::env::var_os(env).unwrap_or_default();
    if path.is_empty() {
        eprintln!("{lib}: no {env}; start it through `{tool}`");
        std::process::exit(2)
    }
    match std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|t| parse(&t, qemu_maps))
    {
        Ok(mut p) => {
            p.for_guest(crate::config::get().and_then(|c| c.guest.exe.as_deref()));
            p
        }
        Err(e) => {
            eprintln!("{lib}: {env}={}: {e}", path.to_string_lossy());
            std::process::exit(2)
        }
    }
}

/// Defines, in a hook library, `fn qemu_maps() -> Option<&'static str>`:
/// QEMU's `/proc/self/maps` as the dynamic linker loaded the library,
/// before QEMU mapped the guest (QEMU's own files, which on a guest of the
/// host's architecture include the guest's dynamic loader and C library:
/// [`parse`] tells them from the guest's by it). A macro because the
/// `.init_array` entry that takes the snapshot must be in the library
/// itself: one in this crate would be dropped with its unreferenced object.
#[macro_export]
macro_rules! qemu_maps_at_load {
    () => {
        static QEMU_MAPS: ::std::sync::OnceLock<String> = ::std::sync::OnceLock::new();

        extern "C" fn snapshot_qemu_maps() {
            let _ = QEMU_MAPS.set($crate::presets::plan::read_maps());
        }

        #[used]
        #[link_section = ".init_array"]
        static SNAPSHOT_QEMU_MAPS: extern "C" fn() = snapshot_qemu_maps;

        /// QEMU's mappings from before it loaded the guest.
        fn qemu_maps() -> Option<&'static str> {
            QEMU_MAPS.get().map(String::as_str)
        }
    };
}

/// QEMU's own `/proc/self/maps`.
pub fn read_maps() -> String {
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

/// Whether `a` and `b` name the same file (device and inode; by name
/// where one cannot be read).
fn same_file(a: &str, b: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &str| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    match (id(a), id(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

impl Plan {
    /// Keeps what applies to a guest running `exe` (canonical; `None`: not
    /// known, keep everything). A program other than the plan's, started
    /// by a traced exec under the same hook library, has other code at the
    /// program's addresses: its pcs and ranges go, and with them a
    /// position-independent program's (found by its path, which this guest
    /// never maps). Where the anchor is the dynamic loader, the libraries'
    /// pcs stay, placed by their mappings (a dynamically linked successor
    /// maps the same C library); a guest whose first instruction is not
    /// the loader's entry places none, quietly. Without such an anchor
    /// nothing can be placed, and nothing is kept.
    pub fn for_guest(&mut self, exe: Option<&str>) {
        let (Some(program), Some(exe)) = (&self.program, exe) else {
            return;
        };
        if same_file(program, exe) {
            return;
        }
        self.other_program = true;
        self.pcs.clear();
        self.ranges.clear();
        let program = program.clone();
        self.libs.retain(|l| l.path != program);
        // Without an anchor, the libraries are placed from the program's
        // own mapping, which this guest never has.
        if !self.anchor.as_ref().is_some_and(|a| a.2 != program) {
            self.anchor = None;
            self.libs.clear();
        }
    }

    /// Looks for the libraries not found yet in QEMU's mappings; `pc` is
    /// the instruction being translated.
    fn find_libs(&mut self, pc: u64) {
        let first = !std::mem::replace(&mut self.started, true);
        let maps = read_maps();
        let starts = file_starts(&maps);
        if self.guest_base.is_none() {
            self.guest_base = match (&self.anchor, &self.exe) {
                (Some((entry, low, path)), _) if first => {
                    let before = &self.before;
                    let host = starts
                        .iter()
                        .find(|(s, p)| *p == path && !before.contains(&(*s, p.to_string())));
                    match host {
                        Some((h, _)) => {
                            Some(h.wrapping_sub(pc.wrapping_sub(*entry).wrapping_add(*low)))
                        }
                        None => {
                            // Another program (`for_guest`) may well not
                            // use the plan's dynamic loader.
                            if !self.other_program {
                                eprintln!(
                                    "hook library: {path} is not mapped when the guest starts: \
                                     the position-independent program's probes cannot be placed"
                                );
                            }
                            self.libs.iter_mut().for_each(|l| l.found = true);
                            return;
                        }
                    }
                }
                (None, Some((exe_low, exe))) => starts
                    .iter()
                    .find(|(_, p)| p == exe)
                    .map(|(s, _)| s.wrapping_sub(*exe_low)),
                _ => None,
            };
        }
        let Some(guest_base) = self.guest_base else {
            return;
        };
        for lib in self.libs.iter_mut().filter(|l| !l.found) {
            let before = &self.before;
            let guest = starts
                .iter()
                .find(|(s, p)| *p == lib.path && !before.contains(&(*s, p.to_string())));
            if let Some((start, _)) = guest {
                let bias = start.wrapping_sub(guest_base).wrapping_sub(lib.low);
                self.pcs
                    .extend(lib.pcs.iter().map(|pc| pc.wrapping_add(bias)));
                self.ranges.extend(
                    lib.ranges
                        .iter()
                        .map(|&(lo, hi)| (lo.wrapping_add(bias), hi.wrapping_add(bias))),
                );
                lib.found = true;
            }
        }
    }

    /// Whether registers are wanted at `pc`, about to be translated. Ask
    /// about every instruction QEMU translates, from its very first: with
    /// an anchor, the first pc asked about is taken for the anchor's entry
    /// (where guest memory is follows from it), and a page's first pc
    /// asked about looks for the libraries not found yet.
    pub fn hooked(&mut self, pc: u64) -> bool {
        if self.libs.iter().any(|l| !l.found) && self.seen.insert(pc >> 12) {
            self.find_libs(pc);
        }
        self.pcs.contains(&pc) || self.ranges.iter().any(|&(lo, hi)| lo <= pc && pc < hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_ask_for_every_pc_inside() {
        let mut p = parse("stores=0 count=0\n10-20\n40\n", Some("")).unwrap();
        assert!(!p.hooked(0xf));
        assert!(p.hooked(0x10) && p.hooked(0x1f));
        assert!(!p.hooked(0x20));
        assert!(p.hooked(0x40) && !p.hooked(0x41));
    }

    #[test]
    fn another_program_keeps_only_what_its_mappings_place() {
        // The plan's program at fixed addresses, one library placed from
        // the program's mapping: in another program, nothing applies.
        let text = "stores=0 count=0\nprogram /bin/true\n10\n20-30\nexe 0 /bin/true\n\
                    lib 0 /lib/libc.so\n+40\n";
        let mut p = parse(text, Some("")).unwrap();
        p.for_guest(Some("/usr/bin/true")); // the same file by another path
        assert!(p.hooked(0x10) && p.hooked(0x25) && p.libs.len() == 1);
        let mut p = parse(text, Some("")).unwrap();
        p.for_guest(Some("/bin/false"));
        assert!(!p.hooked(0x10) && !p.hooked(0x25) && p.libs.is_empty());
        // Not known: everything stays.
        let mut p = parse(text, Some("")).unwrap();
        p.for_guest(None);
        assert!(p.hooked(0x10));

        // A position-independent program behind the dynamic loader: its
        // own pcs go, the C library's stay for the loader to place.
        let text = "stores=0 count=0\nprogram /bin/true\nanchor 100 0 /lib/ld.so\n\
                    lib 0 /bin/true\n+10\nlib 0 /lib/libc.so\n+40\n";
        let mut p = parse(text, Some("")).unwrap();
        p.for_guest(Some("/bin/false"));
        assert!(p.anchor.is_some() && p.libs.len() == 1 && p.libs[0].path == "/lib/libc.so");
        // A static-pie program is its own anchor: nothing is left.
        let text = "stores=0 count=0\nprogram /bin/true\nanchor 100 0 /bin/true\n\
                    lib 0 /bin/true\n+10\n";
        let mut p = parse(text, Some("")).unwrap();
        p.for_guest(Some("/bin/false"));
        assert!(p.anchor.is_none() && p.libs.is_empty() && !p.hooked(0x10));
    }

    #[test]
    fn settings_name_the_registers() {
        let p = parse("stores=1 count=0 regs=sp,ra,v0\n10\n", Some("")).unwrap();
        assert!(p.stores && !p.count && !p.order);
        assert!(parse("stores=0 order=1\n", Some("")).unwrap().order);
        assert_eq!(p.regs.unwrap(), ["sp", "ra", "v0"]);
        assert_eq!(parse("stores=0\n", Some("")).unwrap().regs, None);
        let p = parse("regs=rsp,rax quiet=rsp\n", Some("")).unwrap();
        assert_eq!(p.quiet.as_deref(), Some("rsp"));
        assert!(!p.quiet_words);
        assert!(
            parse("quiet=r1 quiet_words=1\n", Some(""))
                .unwrap()
                .quiet_words
        );
        assert_eq!(parse("regs=sp\n", Some("")).unwrap().quiet, None);
        assert!(parse("quiet=\n", Some("")).is_err());
        assert!(parse("quiet=sp,ra\n", Some("")).is_err());
        let e = parse("regs=sp,,ra\n", Some("")).err().unwrap();
        assert!(e.contains("bad register list \"sp,,ra\""), "{e}");
        assert!(parse("regs=\n", Some("")).is_err());
        assert!(parse("flow=1\n", Some("")).is_err());
    }

    #[test]
    fn bad_ranges_are_refused() {
        assert!(parse("stores=0\n20-10\n", Some("")).is_err());
        assert!(parse("stores=0\n10-zz\n", Some("")).is_err());
        assert!(parse("stores=0\n+10-20\n", Some("")).is_err());
    }
}
