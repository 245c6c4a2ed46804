// SPDX-License-Identifier: GPL-2.0-or-later
//! The first pass: per stream, how many instructions and memory accesses
//! it has (the time axis) and which pages it touched; per process, what
//! was mapped where (the names of the bands). Cheap: the parallel phase
//! folds runs of events on the same page into one value.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

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

/// Adds `s` to `surveys`, leaving the least busy one out if there would be
/// more than [`MAX_LANES`]; returns whether one was left out.
pub fn keep_busiest(surveys: &mut BTreeMap<u64, StreamSurvey>, s: StreamSurvey) -> bool {
    surveys.insert(s.stream, s);
    if surveys.len() <= MAX_LANES {
        return false;
    }
    let least = surveys
        .values()
        .min_by_key(|s| busyness(s))
        .map(|s| s.stream)
        .expect("more than MAX_LANES surveys");
    surveys.remove(&least);
    true
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One survey pass: what it was told and what it found. The pass is
/// started with it ([`cannoli::Recording::replay_with`]) and every
/// [`Surveyor`] reaches it through its `PidContext` (it is the
/// `PidContext`): a value per pass rather than module statics, so that two
/// pictures can be drawn in one process, one after the other or at once.
#[derive(Debug, Default)]
pub struct Survey {
    /// Count `regs`/`branch` events as instructions (the recording has no
    /// `exec` events).
    pub fetch_from_regs: bool,
    /// Filled as streams end: the [`MAX_LANES`] busiest streams so far
    /// (see [`keep_busiest`]).
    surveys: Mutex<BTreeMap<u64, StreamSurvey>>,
    /// Streams left out of `surveys` for busier ones.
    left_out: AtomicU64,
    /// Address spaces, by (pid, program).
    spaces: Mutex<HashMap<SpaceKey, Space>>,
}

/// What a finished [`Survey`] found.
#[derive(Debug, Default)]
pub struct Found {
    /// The busiest streams, by stream number.
    pub surveys: BTreeMap<u64, StreamSurvey>,
    /// Streams left out of `surveys` for busier ones.
    pub left_out: u64,
    pub spaces: HashMap<SpaceKey, Space>,
}

impl Survey {
    pub fn new(fetch_from_regs: bool) -> Survey {
        Survey {
            fetch_from_regs,
            ..Survey::default()
        }
    }

    /// Adds a finished stream's survey (see [`keep_busiest`]).
    pub fn keep(&self, s: StreamSurvey) {
        if keep_busiest(&mut lock(&self.surveys), s) {
            self.left_out.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// What the pass found (once it has returned: every stream ended).
    pub fn take(&self) -> Found {
        Found {
            surveys: std::mem::take(&mut *lock(&self.surveys)),
            left_out: self.left_out.swap(0, Ordering::Relaxed),
            spaces: std::mem::take(&mut *lock(&self.spaces)),
        }
    }
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
    /// The pass, to hand `s` to when the stream ends.
    run: Arc<Survey>,
}

impl Cannoli for Surveyor {
    type Trace = Item;
    type TidContext = ();
    type PidContext = Survey;

    fn init_pid(ci: &ClientInfo) -> Arc<Survey> {
        ci.expect_state::<Survey>()
    }

    fn init_tid(_: &Survey, ci: &ClientInfo) -> (Surveyor, ()) {
        let exe = ci.exe.clone().unwrap_or_default();
        let s = StreamSurvey {
            stream: ci.stream,
            pid: ci.pid,
            tid: ci.tid,
            space: (ci.pid, exe.clone()),
            exe,
            ..Default::default()
        };
        (
            Surveyor {
                s,
                run: ci.expect_state::<Survey>(),
            },
            (),
        )
    }

    fn exec(_: &Survey, _: &(), pc: u64, t: &mut Vec<Item>) {
        touch(t, pc >> PAGE_SHIFT, 1, 0)
    }

    fn exec_run(_: &Survey, _: &(), pcs: &[u64], t: &mut Vec<Item>) {
        let (Some(&a), Some(&b)) = (pcs.first(), pcs.last()) else {
            return;
        };
        touch(t, a >> PAGE_SHIFT, pcs.len() as u32, 0);
        if b >> PAGE_SHIFT != a >> PAGE_SHIFT {
            touch(t, b >> PAGE_SHIFT, 0, 0);
        }
    }

    fn regs(run: &Survey, _: &(), pc: u64, _: &[u8], t: &mut Vec<Item>) {
        if run.fetch_from_regs {
            touch(t, pc >> PAGE_SHIFT, 1, 0)
        }
    }

    fn branch(run: &Survey, _: &(), pc: u64, _: bool, _: &[u8], t: &mut Vec<Item>) {
        if run.fetch_from_regs {
            touch(t, pc >> PAGE_SHIFT, 1, 0)
        }
    }

    fn read(_: &Survey, _: &(), _: u64, addr: u64, _: u64, _: u8, t: &mut Vec<Item>) {
        touch(t, addr >> PAGE_SHIFT, 0, 1)
    }

    fn write(_: &Survey, _: &(), _: u64, addr: u64, _: u64, _: u8, t: &mut Vec<Item>) {
        touch(t, addr >> PAGE_SHIFT, 0, 1)
    }

    #[allow(clippy::too_many_arguments)]
    fn mmap(
        _: &Survey,
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

    fn syscall(_: &Survey, _: &(), sc: &Syscall<'_>, t: &mut Vec<Item>) {
        if sc.name == Some("brk") {
            if let Some(r) = sc.ret.filter(|&r| r > 0) {
                t.push(Item::Brk(r as u64));
            }
        }
    }

    fn trace(&mut self, run: &Survey, _: &(), trace: &[Item]) {
        let mut spaces = lock(&run.spaces);
        let space = spaces.entry(self.s.space.clone()).or_default();
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
        self.run.keep(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_busiest_streams_get_lanes() {
        let mut m = BTreeMap::new();
        let mut left_out = 0;
        // 100 streams; stream i does i * 10 things (stream 0 nothing).
        for i in 0..100u64 {
            let s = StreamSurvey {
                stream: i,
                instructions: i * 7,
                accesses: i * 3,
                ..StreamSurvey::default()
            };
            left_out += keep_busiest(&mut m, s) as u64;
            assert!(m.len() <= MAX_LANES);
        }
        let kept: Vec<u64> = m.keys().copied().collect();
        let want: Vec<u64> = (100 - MAX_LANES as u64..100).collect();
        assert_eq!(kept, want);
        assert_eq!(left_out, 100 - MAX_LANES as u64);
    }

    #[test]
    fn two_surveys_keep_their_own_streams() {
        let (a, b) = (Survey::new(false), Survey::new(true));
        for i in 0..40u64 {
            let s = StreamSurvey {
                stream: i,
                instructions: i,
                ..StreamSurvey::default()
            };
            a.keep(s);
        }
        b.keep(StreamSurvey {
            stream: 7,
            ..StreamSurvey::default()
        });
        let (fa, fb) = (a.take(), b.take());
        assert_eq!(
            (fa.surveys.len(), fa.left_out),
            (MAX_LANES, 40 - MAX_LANES as u64)
        );
        assert_eq!(fb.surveys.keys().copied().collect::<Vec<_>>(), [7]);
        assert_eq!(fb.left_out, 0);
        // Taken: the survey is empty again.
        assert!(a.take().surveys.is_empty());
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
