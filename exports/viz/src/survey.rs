// SPDX-License-Identifier: GPL-2.0-or-later
//! The first pass: per stream, how many instructions and memory accesses
//! it has (the time axis) and which pages it touched; per process, what
//! was mapped where (the names of the bands). Cheap: the parallel phase
//! folds runs of events on the same page into one value.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cannoli::{Cannoli, ClientInfo, Syscall};

use crate::layout::{PAGE, PAGE_SHIFT};

/// What the survey found about one stream.
#[derive(Debug, Default)]
pub struct StreamSurvey {
    pub stream: u64,
    pub pid: i32,
    pub tid: i32,
    pub exe: String,
    pub instructions: u64,
    pub accesses: u64,
    pub pages: HashSet<u64>,
    /// Which address space (process, program) it ran in.
    pub space: SpaceKey,
}

pub type SpaceKey = (i32, String);

/// One mapping as last mapped over an address.
#[derive(Debug, Clone)]
struct Mapping {
    end: u64,
    path: Option<Arc<str>>,
    /// Mapped executable.
    exec: bool,
    /// Made before the process's first instruction (by QEMU's loader).
    early: bool,
    /// Its `mmap`'s number in the process and length (the stack is the
    /// largest early anonymous one).
    id: u64,
    len: u64,
}

/// What was mapped where in one address space. Unmapping keeps the names
/// (an access after it is named after what was there), a new mapping
/// replaces them.
#[derive(Debug, Default)]
pub struct Space {
    regions: BTreeMap<u64, Mapping>,
    seen_insn: bool,
    next_id: u64,
    brk_lo: Option<u64>,
    brk_hi: u64,
}

impl Space {
    /// `len` bytes at `base` are mapped (`path`: the file, if any).
    pub fn map(&mut self, base: u64, len: u64, exec: bool, path: Option<Arc<str>>) {
        let end = base.saturating_add(len);
        if end <= base {
            return;
        }
        // Trim what overlaps.
        if let Some((&s, m)) = self.regions.range(..base).next_back() {
            if m.end > base {
                let mut tail = m.clone();
                self.regions.get_mut(&s).unwrap().end = base;
                if tail.end > end {
                    tail.end = tail.end.max(end);
                    self.regions.insert(end, tail);
                }
            }
        }
        let inside: Vec<u64> = self.regions.range(base..end).map(|(&s, _)| s).collect();
        for s in inside {
            let m = self.regions.remove(&s).unwrap();
            if m.end > end {
                self.regions.insert(end, m);
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.regions.insert(
            base,
            Mapping {
                end,
                path,
                exec,
                early: !self.seen_insn,
                id,
                len,
            },
        );
    }

    /// A `brk` call returned `ret`.
    pub fn brk(&mut self, ret: u64) {
        if ret == 0 {
            return;
        }
        self.brk_lo = Some(self.brk_lo.map_or(ret, |l| l.min(ret)));
        self.brk_hi = self.brk_hi.max(ret);
    }

    fn covering(&self, addr: u64) -> Option<(u64, &Mapping)> {
        let (&s, m) = self.regions.range(..=addr).next_back()?;
        (addr < m.end).then_some((s, m))
    }

    fn in_brk(&self, lo: u64, hi: u64) -> bool {
        match self.brk_lo {
            Some(b) => lo < (self.brk_hi + PAGE - 1) & !(PAGE - 1) && hi > b,
            None => false,
        }
    }

    /// The id of the stack: the largest anonymous mapping QEMU's loader
    /// made before the first instruction.
    fn stack_id(&self) -> Option<u64> {
        self.regions
            .values()
            .filter(|m| m.early && m.path.is_none())
            .max_by_key(|m| m.len)
            .map(|m| m.id)
    }

    /// The name of the region holding `addr`: the file's name (mapped
    /// executable), `NAME (data)` (the file mapped otherwise), `NAME
    /// (bss)` (anonymous memory mapped right after a file's mapping),
    /// `[heap]` (the brk area), `[stack]`, `[anon]`, or `[unmapped]`.
    pub fn name_of(&self, addr: u64) -> String {
        let stack = self.stack_id();
        let Some((start, m)) = self.covering(addr) else {
            return if self.in_brk(addr, addr + 1) {
                "[heap]".into()
            } else {
                "[unmapped]".into()
            };
        };
        if let Some(p) = &m.path {
            return if m.exec {
                basename(p).to_string()
            } else {
                format!("{} (data)", basename(p))
            };
        }
        if self.in_brk(start, m.end) {
            return "[heap]".into();
        }
        if Some(m.id) == stack {
            return "[stack]".into();
        }
        if let Some((_, below)) = self.regions.range(..start).next_back() {
            // Mapped after the file, right behind it: what a loader does
            // for .bss (not what is left of an earlier reservation).
            if let (true, true, Some(p)) = (below.end == start, below.id < m.id, &below.path) {
                return format!("{} (bss)", basename(p));
            }
        }
        "[anon]".into()
    }
}

pub fn basename(p: &str) -> &str {
    p.rsplit('/').find(|s| !s.is_empty()).unwrap_or(p)
}

/// Results, filled as streams end: the [`MAX_LANES`] busiest streams so
/// far (see [`keep_busiest`]).
pub static SURVEYS: Mutex<BTreeMap<u64, StreamSurvey>> = Mutex::new(BTreeMap::new());
/// Streams left out of [`SURVEYS`] for busier ones.
pub static LEFT_OUT: AtomicU64 = AtomicU64::new(0);

/// Most lanes a picture has: a recording of more threads is drawn with its
/// busiest streams (instructions and accesses together), and says so. A
/// lane is a grid and a survey of the pages its thread touched: kept for
/// every stream of a program with thousands of threads, they would not fit
/// in memory, nor their lanes in a picture.
pub const MAX_LANES: usize = 32;

/// How busy a stream is, for [`MAX_LANES`]: its events, then the earlier
/// stream first.
fn busyness(s: &StreamSurvey) -> (u64, std::cmp::Reverse<u64>) {
    (s.instructions + s.accesses, std::cmp::Reverse(s.stream))
}

/// Adds `s` to `surveys`, leaving the least busy one out (counted in
/// [`LEFT_OUT`]) if there would be more than [`MAX_LANES`].
pub fn keep_busiest(surveys: &mut BTreeMap<u64, StreamSurvey>, s: StreamSurvey) {
    surveys.insert(s.stream, s);
    if surveys.len() > MAX_LANES {
        let least = surveys
            .values()
            .min_by_key(|s| busyness(s))
            .map(|s| s.stream)
            .expect("more than MAX_LANES surveys");
        surveys.remove(&least);
        LEFT_OUT.fetch_add(1, Ordering::Relaxed);
    }
}
/// Address spaces, by (pid, program).
pub static SPACES: Mutex<Option<HashMap<SpaceKey, Space>>> = Mutex::new(None);
/// Count `regs`/`branch` events as instructions (the recording has no
/// `exec` events).
pub static FETCH_FROM_REGS: AtomicBool = AtomicBool::new(false);

pub fn reset() {
    SURVEYS.lock().unwrap_or_else(|p| p.into_inner()).clear();
    LEFT_OUT.store(0, Ordering::Relaxed);
    *SPACES.lock().unwrap_or_else(|p| p.into_inner()) = Some(HashMap::new());
}

pub enum Item {
    Touch {
        page: u64,
        insns: u32,
        mems: u32,
    },
    Map {
        base: u64,
        len: u64,
        exec: bool,
        path: Option<Arc<str>>,
    },
    Brk(u64),
}

/// Adds to a recent value for the same page (the last four: code, stack
/// and data pages alternate), else pushes a new one.
#[inline(always)]
fn touch(t: &mut Vec<Item>, page: u64, insns: u32, mems: u32) {
    let n = t.len();
    for it in t[n.saturating_sub(4)..].iter_mut().rev() {
        if let Item::Touch {
            page: p,
            insns: i,
            mems: m,
        } = it
        {
            if *p == page && *i < u32::MAX / 2 && *m < u32::MAX / 2 {
                *i += insns;
                *m += mems;
                return;
            }
        }
    }
    t.push(Item::Touch { page, insns, mems });
}

pub struct Surveyor {
    s: StreamSurvey,
}

impl Cannoli for Surveyor {
    type Trace = Item;
    type TidContext = ();
    type PidContext = ();

    fn init_pid(_: &ClientInfo) -> Arc<()> {
        Arc::new(())
    }

    fn init_tid(_: &(), ci: &ClientInfo) -> (Surveyor, ()) {
        let exe = ci.exe.clone().unwrap_or_default();
        let s = StreamSurvey {
            stream: ci.stream,
            pid: ci.pid,
            tid: ci.tid,
            space: (ci.pid, exe.clone()),
            exe,
            ..Default::default()
        };
        (Surveyor { s }, ())
    }

    fn exec(_: &(), _: &(), pc: u64, t: &mut Vec<Item>) {
        touch(t, pc >> PAGE_SHIFT, 1, 0)
    }

    fn exec_run(_: &(), _: &(), pcs: &[u64], t: &mut Vec<Item>) {
        let (Some(&a), Some(&b)) = (pcs.first(), pcs.last()) else {
            return;
        };
        touch(t, a >> PAGE_SHIFT, pcs.len() as u32, 0);
        if b >> PAGE_SHIFT != a >> PAGE_SHIFT {
            touch(t, b >> PAGE_SHIFT, 0, 0);
        }
    }

    fn regs(_: &(), _: &(), pc: u64, _: &[u8], t: &mut Vec<Item>) {
        if FETCH_FROM_REGS.load(Ordering::Relaxed) {
            touch(t, pc >> PAGE_SHIFT, 1, 0)
        }
    }

    fn branch(_: &(), _: &(), pc: u64, _: bool, _: &[u8], t: &mut Vec<Item>) {
        if FETCH_FROM_REGS.load(Ordering::Relaxed) {
            touch(t, pc >> PAGE_SHIFT, 1, 0)
        }
    }

    fn read(_: &(), _: &(), _: u64, addr: u64, _: u64, _: u8, t: &mut Vec<Item>) {
        touch(t, addr >> PAGE_SHIFT, 0, 1)
    }

    fn write(_: &(), _: &(), _: u64, addr: u64, _: u64, _: u8, t: &mut Vec<Item>) {
        touch(t, addr >> PAGE_SHIFT, 0, 1)
    }

    #[allow(clippy::too_many_arguments)]
    fn mmap(
        _: &(),
        _: &(),
        base: u64,
        len: u64,
        anon: bool,
        _: bool,
        _: bool,
        exec: bool,
        path: &str,
        _: u64,
        t: &mut Vec<Item>,
    ) {
        let path = (!anon && !path.is_empty()).then(|| Arc::from(path));
        t.push(Item::Map {
            base,
            len,
            exec,
            path,
        });
    }

    fn syscall(_: &(), _: &(), sc: &Syscall<'_>, t: &mut Vec<Item>) {
        if sc.name == Some("brk") {
            if let Some(r) = sc.ret.filter(|&r| r > 0) {
                t.push(Item::Brk(r as u64));
            }
        }
    }

    fn trace(&mut self, _: &(), _: &(), trace: &[Item]) {
        let mut spaces = SPACES.lock().unwrap_or_else(|p| p.into_inner());
        let space = spaces
            .get_or_insert_with(HashMap::new)
            .entry(self.s.space.clone())
            .or_default();
        for it in trace {
            match it {
                Item::Touch { page, insns, mems } => {
                    self.s.instructions += *insns as u64;
                    self.s.accesses += *mems as u64;
                    if *insns > 0 {
                        space.seen_insn = true;
                    }
                    self.s.pages.insert(*page);
                }
                Item::Map {
                    base,
                    len,
                    exec,
                    path,
                } => space.map(*base, *len, *exec, path.clone()),
                Item::Brk(r) => space.brk(*r),
            }
        }
    }
}

impl Drop for Surveyor {
    fn drop(&mut self) {
        let s = std::mem::take(&mut self.s);
        keep_busiest(&mut SURVEYS.lock().unwrap_or_else(|p| p.into_inner()), s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_busiest_streams_get_lanes() {
        let mut m = BTreeMap::new();
        let before = LEFT_OUT.load(Ordering::Relaxed);
        // 100 streams; stream i does i * 10 things (stream 0 nothing).
        for i in 0..100u64 {
            let s = StreamSurvey {
                stream: i,
                instructions: i * 7,
                accesses: i * 3,
                ..StreamSurvey::default()
            };
            keep_busiest(&mut m, s);
            assert!(m.len() <= MAX_LANES);
        }
        let kept: Vec<u64> = m.keys().copied().collect();
        let want: Vec<u64> = (100 - MAX_LANES as u64..100).collect();
        assert_eq!(kept, want);
        assert!(LEFT_OUT.load(Ordering::Relaxed) - before >= 100 - MAX_LANES as u64);
    }

    #[test]
    fn names_of_a_static_program() {
        // mipsel vizpattern, as recorded.
        let mut s = Space::default();
        let prog: Arc<str> = "/x/vizpattern".into();
        s.map(0x400000, 0xb3000, false, None);
        s.map(0x400000, 0x8a000, true, Some(prog.clone()));
        s.map(0x499000, 0x6000, false, Some(prog.clone()));
        s.map(0x49f000, 0x14000, false, None);
        s.map(0x2aaab000, 0x801000, false, None);
        s.map(0x2b2ac000, 0x1000, false, None);
        s.seen_insn = true;
        s.map(0x4b3000, 0x1000, false, None);
        s.brk(0x4b3000);
        s.brk(0x4b3850);
        s.map(0x4b4000, 0x21000, false, None);
        s.brk(0x4d5000);
        s.map(0x7000_0000, 0x10000, false, None);
        assert_eq!(s.name_of(0x400123), "vizpattern");
        assert_eq!(s.name_of(0x49a000), "vizpattern (data)");
        assert_eq!(s.name_of(0x4a0000), "vizpattern (bss)");
        assert_eq!(s.name_of(0x4b3100), "[heap]");
        assert_eq!(s.name_of(0x4c0000), "[heap]");
        assert_eq!(s.name_of(0x2b2ab000), "[stack]");
        assert_eq!(s.name_of(0x2b2ac010), "[anon]");
        assert_eq!(s.name_of(0x7000_8000), "[anon]");
        assert_eq!(s.name_of(0x1000), "[unmapped]");
        // What is left of the loader's reservation between text and data.
        assert_eq!(s.name_of(0x48b000), "[anon]");
        // Mapping over the middle of a region splits it.
        s.map(0x7000_4000, 0x1000, true, Some("/lib/x.so".into()));
        assert_eq!(s.name_of(0x7000_3fff), "[anon]");
        assert_eq!(s.name_of(0x7000_4000), "x.so");
        assert_eq!(s.name_of(0x7000_5000), "[anon]");
    }
}
