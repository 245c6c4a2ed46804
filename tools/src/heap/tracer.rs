// SPDX-License-Identifier: GPL-2.0-or-later
//! The client side of a heap run. The parallel callbacks keep the
//! instructions the call stacks need ([`super::parallel`]), the registers
//! at the allocation functions' entries and returns, and every load and
//! store; the serial phase runs them in order against the process's heap.
//!
//! A thread is inside the allocator from the entry of an allocation
//! function to its matching return (frames matched by the stack pointer,
//! as `cannoli probe` matches them, [`super::super::probe::conv`]): only
//! the outermost call is an allocation or free, and the accesses in
//! between are the allocator's own.
//!
//! Here: the process ([`Pid`], [`Proc`]) and how a thread applies its
//! events ([`Thread`]); `item` the events ([`Item`]), `stream` the
//! library's side (the callbacks), `layout` a thread's registers,
//! `order` the order kept between a
//! process's threads, `segment` the loads and stores far from the heap
//! that the parallel phase folds into what they leave in the shadow.

mod fork;
mod item;
mod layout;
mod order;
mod segment;
mod stream;

pub use fork::{settle as settle_forks, Forks};
pub use item::{Item, MemAccess};
pub use layout::Layout;
pub use segment::wanted as fold_segments;
pub use stream::{narrowed_registers, quiet_sp, Stream};

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

use super::super::backtrace::arch::Rules;
use super::super::backtrace::state::{BacktraceState, Regs, Symbolize};
use super::super::backtrace::symbols::Functions;
use super::super::backtrace::{Exe, Module, Resolver};
use super::super::demangle::demangle;
use super::super::probe::conv::returns_genuinely;
use super::super::probe::isa::Ret;
use super::super::probe::plan::{Plan, Site};
use super::super::probe::shadow::{AddrMap, Shadow};
use super::alloc::Role;
use super::blocks::{Bad, Block, Freed, Heap, Kind, Stack};
use super::leaks;
use super::parallel::SiteFilter;
use super::report::{Finding, Op};
use super::Run;

/// The deepest call stack kept for a finding.
const MAX_FRAMES: usize = 32;

/// The largest rise of the stack pointer that returns from frames
/// (memcheck's largest frame, `--max-stackframe`); a larger jump is a
/// switch of stacks.
const MAX_FRAME: u64 = 2_000_000;

/// The bytes `[lo, hi)` given up when the stack pointer moves from `prev`
/// (0: not known) to `sp`: the frames it rose above and the red zone
/// below the old one (see [`Thread::insn`]). One rule for the serial
/// phase and the segments that mirror it ([`segment`]).
fn given_up(prev: u64, sp: u64, red_zone: u64) -> Option<(u64, u64)> {
    (prev != 0 && sp > prev && sp - prev <= MAX_FRAME).then(|| (prev.saturating_sub(red_zone), sp))
}

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A guest process: its heap, its memory as the trace shows it, and how
/// to name its code.
pub struct Pid {
    pub run: Arc<Run>,
    pid: i32,
    /// Itself, for its threads' streams to reach it when they end.
    me: Weak<Pid>,
    /// The run's plan as it applies to this image (`Plan::for_image`: an
    /// exec'd program of another file has none of the program's sites).
    plan: Arc<Plan>,
    /// The load bias of each planned module, as soon as it is mapped.
    biases: Mutex<Vec<Option<u64>>>,
    state: Mutex<Proc>,
    /// Signalled when the next number of the process's order moved while
    /// a thread waits for it ([`order::wait_turn`]).
    advanced: Condvar,
    /// Stack memory no longer in use, of the threads that ended.
    dead: Arc<Mutex<Vec<(u64, u64)>>>,
    /// A bit for every pc that may be an allocation function's site (the
    /// plan's, at each bias a module ever had): most branch and block
    /// events are none, and this tells them without a lock or a map.
    filter: SiteFilter,
    /// A `clone` of a thread was seen by the parallel phase: segments,
    /// which only a process of one thread folds, are not built.
    threaded: AtomicBool,
    /// Where the heap lately was, for the parallel phase's segments.
    heap_windows: segment::HeapWindows,
}

pub struct Proc {
    pub heap: Heap,
    pub shadow: Shadow,
    pub word: u64,
    pub big_endian: bool,
    funcs: Arc<Functions>,
    exe: Option<Exe>,
    bias: Option<u64>,
    loads: HashMap<Arc<str>, u64>,
    modules: Vec<Module>,
    lens: AddrMap<u8>,
    names: HashMap<u64, Arc<str>>,
    /// Allocation and free sequence numbers.
    seq: u64,
    /// Shared libraries holding allocation functions, `[start, end)`.
    alloc_modules: Vec<(u64, u64)>,
    /// Findings already met, by (kind, pc), with the label of the
    /// suppression that left them out.
    seen: HashMap<(Kind, u64), Option<Arc<str>>>,
    /// The order kept between the threads ([`order`]).
    order: order::Order,
    /// The argument registers of the `exit_group` that ended the process:
    /// roots of the leak check, as memcheck scans the registers at exit
    /// (the only ones the trace gives there).
    pub exit_regs: Vec<u64>,
    /// A forked child waiting for its parent's state (`fork`): every
    /// event waits.
    pub awaiting: bool,
    /// The forking thread's call stack and stack pointer, for the child's
    /// first thread (`fork`).
    fork_stack: Option<(BacktraceState, u64)>,
    /// The image ended in an `execve` (its last word on it).
    execed: bool,
}

impl Proc {
    fn resolver(&self) -> Resolver<'_> {
        Resolver {
            funcs: &self.funcs,
            bias: self.bias.unwrap_or(0),
            modules: &self.modules,
            lens: &self.lens,
        }
    }

    /// `pc` as `function+0xoff`, remembered.
    fn name(&mut self, pc: u64) -> Arc<str> {
        if let Some(n) = self.names.get(&pc) {
            return n.clone();
        }
        let r = self.resolver();
        let n: Arc<str> = match r.function(pc) {
            // As memcheck shows it: C++ and Rust names demangled.
            Some(f) => format!("{}+{:#x}", demangle(&f.name), pc.wrapping_sub(f.start)).into(),
            None => r.unnamed(pc),
        };
        self.names.insert(pc, n.clone());
        n
    }

    /// Notes the module holding the allocation function at `pc`.
    fn note_allocator(&mut self, pc: u64) {
        if self.in_allocator_module(pc) {
            return;
        }
        if let Some(m) = self.modules.iter().find(|m| m.base <= pc && pc < m.end) {
            self.alloc_modules.push((m.base, m.end));
        }
    }

    /// Whether `pc` is in a shared library holding allocation functions
    /// (the C library).
    fn in_allocator_module(&self, pc: u64) -> bool {
        self.alloc_modules
            .iter()
            .any(|&(lo, hi)| lo <= pc && pc < hi)
    }

    /// Whether `bad` is the C library's code reading or writing a freed
    /// block's free-list link (its first two words: glibc's tcache
    /// `next` and `key`) outside the public functions, as its thread-exit
    /// cache teardown does in a stripped library where it has no name.
    fn freelist_link(&self, pc: u64, bad: &Bad, size: u64) -> bool {
        bad.kind == Kind::UseAfterFree
            && size == self.word
            && self.in_allocator_module(pc)
            && bad
                .block
                .as_ref()
                .is_some_and(|b| bad.addr.wrapping_sub(b.addr) < 2 * self.word)
    }

    fn is_exe(&self, path: &str) -> bool {
        self.exe.as_ref().is_some_and(|e| e.is(path))
    }
}

impl Drop for Pid {
    fn drop(&mut self) {
        let mut st = lock(&self.state);
        // The last thread ended: nothing it waited for will come.
        order::release(self, &mut st, true);
        lock(&self.run.summary).unordered += st.order.forced + st.order.late;
        let dead = std::mem::take(&mut *lock(&self.dead));
        if st.execed {
            leaks::exec_ends(&self.run, self.pid, &st);
        } else {
            leaks::report(&self.run, self.pid, &mut st, &dead);
        }
        let exe = st.exe.as_ref().map(|e| e.named().to_path_buf());
        drop(st);
        fork::ended(self);
        self.say_if_unchecked(exe);
    }
}

impl Pid {
    /// An image of another program than the plan's (`Plan::for_image`)
    /// where no library with allocation functions was placed: nothing of
    /// it was checked. Says so once per program and run.
    fn say_if_unchecked(&self, exe: Option<PathBuf>) {
        if Arc::ptr_eq(&self.plan, &self.run.plan) {
            return;
        }
        let b = lock(&self.biases);
        let mut placed = self.plan.modules.iter().zip(b.iter());
        if placed.any(|(m, b)| b.is_some() && !m.sites.is_empty()) {
            return;
        }
        let exe = exe.map_or_else(|| "?".into(), |p| p.display().to_string());
        if lock(&self.run.unchecked).insert(exe.clone()) {
            eprintln!(
                "heap: warning: process {} exec'd {exe}, not {}: its allocation functions \
                 are not known, so nothing of it was checked (here or in any other process \
                 that runs it); run `cannoli heap {exe}` on it",
                self.pid,
                self.plan.exe.0.display()
            );
        }
    }
}

/// An allocation function called and not returned yet.
struct Open {
    target: usize,
    key: u64,
    role: Role,
    args: Vec<u64>,
    pc: u64,
    /// The return address into its caller (0 if unknown).
    site_pc: u64,
    stack: Option<Stack>,
    /// The call stack's depth with its frame.
    depth: usize,
}

/// A conditional return seen, taken unless the next instruction is the
/// one after it.
struct Pending {
    target: usize,
    ret: Ret,
    regs: Box<[u64]>,
    /// Where the instruction after it runs. The plan's `cond_next` is
    /// where it is linked, which in a shared library or a
    /// position-independent program is not where it runs: compared as it
    /// is, every conditional return there looked taken (ppc64le's `free`
    /// starts with `beqlr` for a null pointer: its frame closed there).
    next: u64,
}

/// A guest thread.
pub struct Thread {
    run: Arc<Run>,
    pid: i32,
    tid: i32,
    rules: Option<Rules>,
    layout: Arc<Layout>,
    bt: BacktraceState,
    calls: Vec<Open>,
    pending: Option<Pending>,
    sp_lo: u64,
    sp_last: u64,
    /// Where the thread's dead stack goes when it ends.
    dead: Arc<Mutex<Vec<(u64, u64)>>>,
    /// Events that wait for another thread's ([`order`]), in order.
    deferred: VecDeque<Item>,
    /// Its stream ended: it finishes when `deferred` is empty.
    ended: bool,
    /// It is on the process's list of streams with events waiting.
    queued: bool,
    /// The item just applied was an 8-byte piece of a vector load on a
    /// guest that splits them (see [`Layout::split_vectors`]): its pc,
    /// the address right after it and where the vector starts.
    half_load: Option<(u64, u64, u64)>,
    /// Its segments' deltas ([`segment`]).
    segments: segment::Segments,
    /// The `clone` that created the thread was applied (or it is the
    /// process's first): once true, for good. Kept here so that the
    /// serial loop does not look the thread up for each of its events.
    started: Cell<bool>,
}

fn table(run: &Run, path: &Path) -> Option<Arc<Functions>> {
    let key = path.to_string_lossy().into_owned();
    lock(&run.tables)
        .entry(key)
        .or_insert_with(|| Functions::from_elf_and_debug(path).ok().map(Arc::new))
        .clone()
}

impl Pid {
    /// A load or store, to the chunk's trace (the parallel phase's
    /// `segment::access`, with what it needs of the guest).
    #[inline(always)]
    fn access(&self, l: &Layout, a: MemAccess, trace: &mut Vec<Item>) {
        let on = segment::Guest {
            split: l.split_vectors,
            heap: &self.heap_windows,
        };
        segment::access(trace, a, self.run.plan.big_endian, self.run.fold, &on);
    }

    /// Whether registers at `pc` are an allocation function's. The
    /// filter inline (it tells most pcs), the maps not.
    #[inline(always)]
    fn is_site(&self, pc: u64) -> bool {
        self.filter.may_be(pc) && self.is_site_exactly(pc)
    }

    #[inline(never)]
    fn is_site_exactly(&self, pc: u64) -> bool {
        let plan = &self.plan;
        if plan.sites.contains_key(&pc) {
            return true;
        }
        let b = lock(&self.biases);
        plan.modules
            .iter()
            .zip(b.iter())
            .any(|(m, b)| b.is_some_and(|b| m.sites.contains_key(&pc.wrapping_sub(b))))
    }

    fn sites(&self, pc: u64) -> Vec<Site> {
        let plan = &self.plan;
        if let Some(v) = plan.sites.get(&pc) {
            return v.clone();
        }
        let b = lock(&self.biases);
        for (m, bias) in plan.modules.iter().zip(b.iter()) {
            if let Some(v) = bias.and_then(|b| m.sites.get(&pc.wrapping_sub(b))) {
                return v.clone();
            }
        }
        Vec::new()
    }
}

impl Thread {
    /// Applies one event. Loads and stores (most events) and instructions
    /// take their own paths, inlined into the serial loop
    /// ([`order::run`]); the rare kinds go through one call.
    #[inline(always)]
    fn apply(&mut self, pid: &Pid, st: &mut Proc, item: &Item) {
        self.step(st);
        let half_load = self.take_half_load();
        match *item {
            // By reference: a folded access is not copied out.
            Item::Access(ref a) => {
                if self.folded(a.zone) {
                    self.skipped(a, half_load);
                } else {
                    self.access(st, *a, half_load);
                }
            }
            Item::Insn {
                pc,
                branch,
                regs,
                value,
            } => self.insn(pid, st, pc, branch, regs, value),
            Item::Chunk(_) | Item::Zones(_) | Item::Flush => {
                // Between a split vector's pieces too (a chunk's end).
                self.half_load = half_load;
                self.apply_rare(pid, st, item);
            }
            _ => self.apply_rare(pid, st, item),
        }
    }

    /// The split vector load the item before left ([`Thread::access`]),
    /// taken for the item being applied. Read before written: most events
    /// find none (a write per event was 8 % of the serial phase's
    /// instructions).
    #[inline(always)]
    fn take_half_load(&mut self) -> Option<(u64, u64, u64)> {
        if self.half_load.is_some() {
            self.half_load.take()
        } else {
            None
        }
    }

    /// An instruction (see [`Item::Insn`]).
    #[inline(always)]
    fn insn(
        &mut self,
        pid: &Pid,
        st: &mut Proc,
        pc: u64,
        branch: bool,
        regs: Option<Regs>,
        value: Option<u64>,
    ) {
        // Read before taken: most instructions have none pending.
        if self.pending.is_some() {
            if let Some(p) = self.pending.take() {
                if p.next != pc {
                    self.returned(pid, st, p.target, &p.ret, &p.regs);
                }
            }
        }
        if let Some(r) = regs {
            // The frames the stack pointer rose above are gone: memcheck makes
            // them inaccessible, so no pointer left in them is a root until
            // stored there again. It makes the red zone below the stack pointer
            // (the bytes an ABI lets a leaf use unmoved) undefined at each call
            // and return too (VEX's AbiHint), so what lies below the new stack
            // pointer goes with it. A jump of more than memcheck's largest frame
            // (`--max-stackframe`, 2000000) is a switch of stacks, not a return.
            if let Some((lo, hi)) = given_up(self.sp_last, r.sp, self.layout.red_zone) {
                st.shadow.kill(lo, hi);
            }
            self.sp_lo = self.sp_lo.min(r.sp);
            self.sp_last = r.sp;
        }
        // By reference: the rules are some ten words, an instruction event every
        // few instructions.
        if let Some(rules) = &self.rules {
            let res = st.resolver();
            self.bt.insn(rules, &res, pc, branch, regs, &mut |_, _| {});
        }
        // The outermost allocation function's frame is gone without a return
        // instruction of its own: it ended in a tail call to a function outside
        // the plan (calloc's `jmp memset` through the PLT).
        if self.rules.is_some()
            && self
                .calls
                .first()
                .is_some_and(|f| self.bt.depth() < f.depth)
        {
            let f = self.calls.remove(0);
            self.calls.clear();
            self.completed(st, &f, value.unwrap_or(0));
        }
    }

    /// A load or store: the shadow memory, the x86 call stack's pushes,
    /// and the check against the heap.
    #[inline(always)]
    fn access(&mut self, st: &mut Proc, a: MemAccess, half_load: Option<(u64, u64, u64)>) {
        let MemAccess {
            pc,
            addr,
            val,
            hi,
            size,
            store,
            ..
        } = a;
        let be = st.big_endian;
        // The allocator's own accesses tag what they touch: not where the
        // program keeps pointers (see `leaks`).
        let mine = !self.calls.is_empty();
        let sh = &mut st.shadow;
        // Called directly (not through a function pointer), to inline.
        if size == 16 {
            let (first, second) = if be { (hi, val) } else { (val, hi) };
            let second_at = addr.wrapping_add(8);
            if store {
                sh.store_tagged(addr, first, 8, be, mine);
                sh.store_tagged(second_at, second, 8, be, mine);
            } else {
                sh.load_seen(addr, first, 8, be, mine);
                sh.load_seen(second_at, second, 8, be, mine);
            }
        } else if store {
            sh.store_tagged(addr, val, size, be, mine);
        } else {
            sh.load_seen(addr, val, size, be, mine);
        }
        if store {
            if let Some(rules) = &self.rules {
                self.bt.write(rules, pc, addr, val, size);
            }
        }
        // A piece of a split vector load after the first is checked as the
        // vector so far (the first was checked by itself: a partial load of an
        // aligned word is as fine as the vector's).
        let (at, len) = match half_load {
            Some((p, next, start)) if !store && size == 8 && p == pc && next == addr => {
                self.half_load = Some((p, next.wrapping_add(8), start));
                (start, next.wrapping_add(8).wrapping_sub(start))
            }
            _ => {
                if !store && size == 8 && self.layout.split_vectors {
                    self.half_load = Some((pc, addr.wrapping_add(8), addr));
                }
                (addr, u64::from(size))
            }
        };
        if self.calls.is_empty() {
            if let Some(bad) = st.heap.check(at, len, store) {
                self.bad_access(st, bad, &a, at, len);
            }
        }
    }

    /// An access [`Heap::check`] found outside what the heap allows: a
    /// finding, unless it is one of the C library's own ways.
    /// `at` and `len`: the bytes checked (a split vector load's so far).
    #[cold]
    #[inline(never)]
    fn bad_access(&mut self, st: &mut Proc, bad: Bad, a: &MemAccess, at: u64, len: u64) {
        let MemAccess {
            pc, size, store, ..
        } = *a;
        if !st.freelist_link(pc, &bad, u64::from(size))
            && !st.heap.aside_holds(self.tid, at, len)
            && !self.library_teardown(st, pc)
            && !self.string_overread(st, pc, &bad, store)
        {
            let op = if store { Op::Write } else { Op::Read };
            self.found(st, bad, op, pc, u64::from(size));
        }
    }

    /// The other kinds of event.
    #[inline(never)]
    fn apply_rare(&mut self, pid: &Pid, st: &mut Proc, item: &Item) {
        // The parallel phase ends a segment before any of these; a
        // translation's lengths may come inside one.
        if !matches!(item, Item::Block { .. }) {
            self.fold(st);
        }
        match item {
            Item::Hit { pc, regs } => {
                for s in pid.sites(*pc) {
                    match s {
                        Site::Entry(t) => self.entered(pid, st, *pc, t, regs),
                        Site::Return(t, r) if r.cond_next.is_some() => {
                            let len = r.cond_next.unwrap_or(r.pc).wrapping_sub(r.pc);
                            self.pending = Some(Pending {
                                target: t,
                                ret: r,
                                regs: regs.clone(),
                                next: pc.wrapping_add(len),
                            })
                        }
                        Site::Return(t, r) => self.returned(pid, st, t, &r, regs),
                        Site::NotTaken(_) | Site::Pc(_) => {}
                    }
                }
            }
            Item::Block { pc, lens } => {
                for (at, n) in (cannoli::Block { pc: *pc, lens }).insns() {
                    st.lens.insert(at, n);
                }
            }
            Item::Map {
                base,
                len,
                exec,
                offset,
                path,
            } => {
                st.heap.forget_freed(*base, base.saturating_add(*len));
                if path.is_empty() {
                    return;
                }
                if st.is_exe(path) {
                    if st.bias.is_none() && st.funcs.pie && *offset == 0 {
                        st.bias = Some(base.wrapping_sub(st.funcs.first_page));
                    }
                    return;
                }
                let funcs = table(&self.run, Path::new(&**path));
                if *offset == 0 {
                    if let Some(f) = &funcs {
                        st.loads
                            .insert(path.clone(), base.wrapping_sub(f.first_page));
                    }
                }
                if *exec {
                    let bias = st
                        .loads
                        .get(path)
                        .copied()
                        .unwrap_or_else(|| base.wrapping_sub(*offset));
                    st.modules.push(Module {
                        base: *base,
                        end: base.saturating_add(*len),
                        offset: *offset,
                        name: path.rsplit('/').next().unwrap_or(path).into(),
                        path: path.clone(),
                        funcs,
                        bias,
                    });
                    st.names.clear();
                }
            }
            Item::Unmap { base, len } => {
                let end = base.saturating_add(*len);
                st.heap.forget_freed(*base, end);
                st.modules.retain(|m| m.end <= *base || m.base >= end);
                st.names.clear();
            }
            Item::Signal { handler } => self.bt.signal(*handler),
            Item::Clone { child, tid_word } => st.order.created(*child, *tid_word),
            Item::Fork { child } => fork::forked(pid, st, self, *child),
            Item::Exec { ok } => st.execed = *ok,
            Item::Order { seq } => st.order.took(*seq),
            Item::Exit { args } => {
                st.execed = false;
                st.exit_regs = args.to_vec();
            }
            Item::Chunk(_) => {}
            Item::Flush => {}
            Item::Zones(d) => self.segment(st, d, &pid.heap_windows),
            Item::Insn { .. } | Item::Access(_) => unreachable!("applied inline"),
        }
    }

    /// The thread's call stack now, at `pc`, innermost first.
    fn stack(&self, st: &mut Proc, pc: u64) -> Stack {
        let mut v = vec![st.name(pc)];
        for r in self.bt.return_stack().iter().skip(1).rev() {
            if v.len() >= MAX_FRAMES {
                break;
            }
            if let Some(a) = r.addr {
                let n = st.name(a);
                // A tail call (a PLT stub's jump) returns where its caller
                // does: one line.
                if v.last() != Some(&n) {
                    v.push(n);
                }
            }
        }
        v.into()
    }

    /// A bad access or free: written the first time at its pc (unless a
    /// suppression matches it), counted every time.
    fn found(&mut self, st: &mut Proc, bad: Bad, op: Op, pc: u64, size: u64) {
        let kind = bad.kind;
        let muted = match st.seen.get(&(kind, pc)) {
            Some(muted) => muted.clone(),
            None => {
                let f = Finding {
                    bad,
                    op,
                    pc,
                    size,
                    pid: self.pid,
                    tid: self.tid,
                    stack: self.stack(st, pc),
                };
                let muted = self.run.suppressed(&f);
                if muted.is_none() {
                    self.run.emit(&f);
                }
                st.seen.insert((kind, pc), muted.clone());
                muted
            }
        };
        let mut summary = lock(&self.run.summary);
        match muted {
            None => *summary.found.entry(kind.name()).or_default() += 1,
            Some(label) => *summary.suppressed.entry(label).or_default() += 1,
        }
    }

    fn arg(&self, st: &Proc, regs: &[u64], i: usize) -> u64 {
        let abi = self.run.plan.abi;
        if abi.on_stack(i) {
            let sp = self
                .layout
                .sp
                .and_then(|s| regs.get(s))
                .copied()
                .unwrap_or(0);
            st.shadow
                .load(abi.stack_slot(sp, i), abi.word(), st.big_endian)
                .unwrap_or(0)
        } else {
            self.layout.args[i]
                .and_then(|r| regs.get(r))
                .copied()
                .unwrap_or(0)
        }
    }

    fn entered(&mut self, _pid: &Pid, st: &mut Proc, pc: u64, t: usize, regs: &[u64]) {
        let abi = self.run.plan.abi;
        let sp = self
            .layout
            .sp
            .and_then(|s| regs.get(s))
            .copied()
            .unwrap_or(0);
        let role = self.run.roles[t];
        // Frames a longjmp left without their return (glibc's abort on a
        // bad free, caught and jumped out of): this call is further out.
        let key = abi.entry_key(sp);
        while self.calls.last().is_some_and(|f| f.key < key) {
            self.calls.pop();
        }
        let outer = self.calls.is_empty();
        let args: Vec<u64> = (0..role.args()).map(|i| self.arg(st, regs, i)).collect();
        let stack = (outer && role != Role::Internal).then(|| self.stack(st, pc));
        let caller = self.bt.return_stack().last().and_then(|r| r.addr);
        // The frame `stack` names as the caller (its first is no frame).
        let site_pc = self.bt.return_stack().iter().skip(1).next_back();
        let site_pc = site_pc.and_then(|r| r.addr).unwrap_or(0);
        if outer {
            st.note_allocator(pc);
            // A free is done at its entry: glibc aborts on a double free
            // before it returns. realloc's pointer is checked there too.
            let ptr = match role {
                Role::Free { ptr } => Some(args[ptr]),
                Role::Realloc | Role::ReallocArray => Some(args[0])
                    .filter(|&p| p != 0 && st.heap.live_at(p).map(|b| b.addr) != Some(p)),
                _ => None,
            };
            let stale = ptr.is_some_and(|p| self.stale_teardown_free(st, p));
            if let (Some(p), Some(s), false) = (ptr, &stack, stale) {
                st.seq += 1;
                let how = Freed::new(st.seq, self.tid, t, site_pc, s.clone());
                match st.heap.free(p, how) {
                    Err(bad) => {
                        // The C library emptying its caches (a thread's
                        // tcache at its exit) frees what is already free.
                        if !caller.is_some_and(|c| st.in_allocator_module(c)) {
                            self.found(st, bad, Op::Free, pc, 0);
                        }
                    }
                    // `free(NULL)` frees nothing, and memcheck does not
                    // count it either.
                    Ok(None) => {}
                    Ok(Some(b)) => {
                        self.run.record(self.pid, &b, None);
                        let mut summary = lock(&self.run.summary);
                        summary.frees += 1;
                        summary.sample(st.heap.live_bytes);
                    }
                }
            }
        }
        self.calls.push(Open {
            target: t,
            key,
            role,
            args,
            pc,
            site_pc,
            stack,
            depth: self.bt.depth(),
        });
    }

    fn returned(&mut self, _pid: &Pid, st: &mut Proc, t: usize, r: &Ret, regs: &[u64]) {
        let l = self.layout.clone();
        let after = r.after(regs, l.bits64);
        let Some(sp) = after.get(l.sp) else {
            return;
        };
        let key = sp.wrapping_add(r.pops);
        let value = after.get(l.ret);
        let genuine = returns_genuinely(&self.calls, key, t, |f| (f.key, f.target));
        while let Some(top) = self.calls.last() {
            if top.key > key {
                break;
            }
            let unwound = top.key < key || !genuine;
            let f = self.calls.pop().expect("looked at above");
            if self.calls.is_empty() && !unwound {
                self.completed(st, &f, value.unwrap_or(0));
            }
        }
    }

    /// The outermost allocation call `f` returned `value`.
    fn completed(&mut self, st: &mut Proc, f: &Open, value: u64) {
        let Some(stack) = f.stack.clone() else {
            return;
        };
        let (old, ptr, size) = match f.role {
            Role::Malloc { size } => (0, value, f.args[size]),
            Role::Calloc => (0, value, f.args[0].wrapping_mul(f.args[1])),
            Role::Realloc => (f.args[0], value, f.args[1]),
            Role::ReallocArray => (f.args[0], value, f.args[1].wrapping_mul(f.args[2])),
            Role::PosixMemalign => {
                let p = if value == 0 {
                    // `*memptr` is the program's, though the allocator
                    // wrote it.
                    st.shadow.untag(f.args[0], st.word);
                    st.shadow
                        .load(f.args[0], st.word, st.big_endian)
                        .unwrap_or(0)
                } else {
                    0
                };
                (0, p, f.args[2])
            }
            Role::Free { .. } | Role::Internal => return,
        };
        let mut summary = lock(&self.run.summary);
        if old != 0
            && (ptr != 0 || size == 0)
            && st.heap.live_at(old).is_some_and(|b| b.addr == old)
        {
            st.seq += 1;
            let how = Freed::new(st.seq, self.tid, f.target, f.site_pc, stack.clone());
            if let Ok(Some(b)) = st.heap.free(old, how) {
                self.run.record(self.pid, &b, None);
            }
            summary.frees += 1;
            summary.sample(st.heap.live_bytes);
        }
        if ptr == 0 {
            return;
        }
        st.seq += 1;
        let site = super::rows::site(&stack)
            .cloned()
            .unwrap_or_else(|| "?".into());
        let e = summary.sites.entry(site).or_default();
        e.0 += 1;
        e.1 += size;
        summary.allocs += 1;
        summary.bytes += size;
        // Other threads' live blocks are set aside, not dropped (see
        // `order`).
        let dropped = st.heap.alloc(Block {
            addr: ptr,
            size,
            seq: st.seq,
            tid: self.tid,
            pc: f.pc,
            target: f.target,
            site_pc: f.site_pc,
            alloc_stack: stack,
            freed: None,
        });
        summary.sample(st.heap.live_bytes);
        drop(summary);
        for b in &dropped {
            self.run.record(self.pid, b, None);
        }
    }
}
