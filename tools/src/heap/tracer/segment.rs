// SPDX-License-Identifier: GPL-2.0-or-later
//! Segments: a thread's loads and stores that can touch no block, folded
//! by the parallel phase into what they leave in the shadow memory, so
//! that the serial phase (one thread for a whole process) applies a word
//! once instead of every access to it.
//!
//! Most of a program's loads and stores are of its stack and globals,
//! over and over (a hash's state, a loop's locals). The serial phase
//! needs them for two things only: the check against the heap, which
//! [`Heap::untouched`](super::super::blocks::Heap::untouched) answers for
//! a whole range at once while no block was ever near it, and the shadow
//! memory, whose bytes hold what the last load or store left (the leak
//! check's roots, a stack argument's value), which is the same whether
//! each access is applied or only the last one to each byte.
//!
//! **The parallel phase** (one chunk of one thread) opens a segment at an
//! instruction event with registers once the chunk already had one (so
//! that the stack pointer before it is known), and closes it before any
//! event that reads or replaces the shadow, changes the heap or waits for
//! another thread ([`Item::Flush`] before an allocation function's
//! registers, an order number, a mapping, a signal, a `clone`, a fork, an
//! exec, an exit), and at the chunk's end ([`close`], from the library's
//! `decoded`). Within it, each access goes to the zone of its megabyte of
//! address space (at most [`MAX_ZONES`] of them; an access beyond goes
//! the old way), and each byte it touches is folded into a [`Delta`]:
//! stored (what a store or a load of a byte not given up leaves), seen (a
//! load the serial phase applies only where its shadow has not given the
//! byte up) or killed. The stack's frames given up when the stack pointer
//! rises ([`Shadow::kill`], applied by the serial phase at the instruction
//! event) are given up in the delta too, so that a store before the rise
//! is not applied after it. The access itself is then set aside in the
//! delta, by zone, with how many of the segment's items came before it
//! ([`Aside`]), rather than pushed: the serial phase does not visit it
//! where its zone is folded. Those it may need in the trace stay there:
//! a store at the last branch's pc (x86's `call` pushes the return address
//! that the call stacks read), on a guest whose vectors come split an
//! 8-byte load and the access right after one (the pieces of one vector
//! load are joined where nothing comes between them), an access of
//! more than 8 bytes, and an access of a window where the serial phase
//! lately found the heap ([`HeapWindows`]: likely not folded, and then
//! applied at less cost from the trace than set aside).
//!
//! **The serial phase** meets [`Item::Zones`] first, then the segment's
//! items in order, ending with its [`Item::Flush`]. At the start it
//! decides for each zone whether it is folded: no allocation function is
//! running (the allocator's own accesses are tagged), the process has one
//! thread (another's events could come between this thread's, and a
//! thread's events can be held back), nothing crossed a zone's edge, and
//! no block was ever near the zone's range, which stays true until the
//! next allocation (an event that closes the segment). A folded zone's
//! set-aside accesses are never visited, and one left in the trace only
//! does what the call stacks or a split vector need of it; at the
//! segment's end its words go into the shadow ([`Shadow::fold_word`]).
//! The set-aside accesses of a zone not folded are applied as any access,
//! each before the item it came before (in their order across zones
//! where several are due there), so that the order of accesses, call
//! stacks and findings is the one of the events.
//!
//! The result is the shadow, heap and findings that applying every
//! access gives (the unit test below on random runs of accesses and
//! returns, with every zone folded, none and some; the e2e
//! `heap::folding_changes_nothing` on every guest).
//! Folding pays where the serial phase bounds the run, with many workers
//! ([`wanted`]); a process that ever had a second thread builds no
//! segments from then on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[cfg(test)]
use super::super::super::probe::shadow::Shadow;
use super::super::super::probe::shadow::{guest_bytes, AddrMap, KILL_MAKES_PAGES};
use super::super::parallel;
use super::{given_up, Item, MemAccess, Proc, Thread};

/// Zones of one segment (bits of a `u8`).
pub const MAX_ZONES: usize = 8;

/// A zone is the accesses to one `1 << ZONE_SHIFT`-byte window.
const ZONE_SHIFT: u32 = 20;

/// Slots of [`HeapWindows`] (a power of two).
const HEAP_WINDOWS: usize = 64;

/// The windows (of a zone's size) the serial phase lately found a zone
/// of not folded because a block is near (the heap's own, most often),
/// for the parallel phase to leave their accesses in the trace: applied
/// there in the serial loop's own path rather than merged back one place
/// at a time. Only a hint, read and written without order: an access left
/// in the trace or set aside gives the same result either way, so a
/// stale or lost entry costs time only.
#[derive(Debug)]
pub struct HeapWindows {
    /// Window number + 1 by its low bits; 0: none.
    slots: [AtomicU64; HEAP_WINDOWS],
}

impl Default for HeapWindows {
    fn default() -> HeapWindows {
        HeapWindows {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl HeapWindows {
    /// Whether `window` is one of them.
    #[inline(always)]
    fn has(&self, window: u64) -> bool {
        let slot = &self.slots[window as usize % HEAP_WINDOWS];
        slot.load(Ordering::Relaxed) == window.wrapping_add(1)
    }

    /// A zone of `window` was folded (`false`) or not because a block is
    /// near (`true`): what the next segments will most likely find.
    fn note(&self, window: u64, heap: bool) {
        let slot = &self.slots[window as usize % HEAP_WINDOWS];
        let had = slot.load(Ordering::Relaxed) == window.wrapping_add(1);
        if heap && !had {
            slot.store(window.wrapping_add(1), Ordering::Relaxed);
        } else if !heap && had {
            slot.store(0, Ordering::Relaxed);
        }
    }
}

/// The longest range a rise of the stack pointer gives up that an open
/// segment folds; a longer one (a `longjmp`, a switch of stacks) ends it.
/// The shadow gives up such a range in pages it did not have yet too,
/// as the delta does; a longer one only in pages it has, which the
/// segment, ended before it, made.
const KILL_MAX: u64 = KILL_MAKES_PAGES;

/// The fewest workers a guest thread with which a run folds by default
/// ([`wanted`]): where, on every guest, the longer of the serial phase
/// and the whole work over the workers is shorter folded (callgrind of
/// busybox `sha256sum`, 2026-12-02: x86_64 1.01 G instructions in all
/// and 0.37 G serial unfolded, 1.09 G and 0.14 G folded; 32-bit Arm,
/// the guest that gains least, 2.13 G and 0.60 G against 2.24 G and
/// 0.29 G, behind at 3 workers and ahead from 4).
const FOLD_WORKERS: usize = 4;

/// The longest vector load QEMU splits into 8-byte pieces that the heap
/// checks as one (four of arm's d registers are 32 bytes).
const VECTOR_MAX: u64 = 64;

/// A guest page, for accesses the shadow takes byte by byte.
const PAGE: u64 = 4096;

/// Entries of a delta's cache of recent words (a power of two): a
/// function's frame and the globals it works on.
const RECENT: usize = 64;

/// The first item of every chunk's trace: what the parallel phase keeps
/// while it builds the chunk.
#[derive(Debug, Clone, Default)]
pub struct Head {
    /// Instructions without a branch pushed since the last event of
    /// another kind but a load or store, up to 2 (0 at the chunk's start:
    /// the cautious answer, see [`plain_wanted`]).
    plain: u8,
    /// The stack pointer of the chunk's last instruction event with
    /// registers (0: none yet), folding or not ([`idle`]).
    sp: u64,
    /// The index of the open segment's [`Item::Zones`] (0: none).
    open: usize,
    /// The open segment's delta, moved to its [`Item::Zones`] when it
    /// closes (at the latest when the chunk's events end, [`close`]).
    building: Option<Box<Delta>>,
    /// The pc of the last branch pushed: a store at that pc (x86's `call`
    /// pushing its return address) stays in the trace, where the serial
    /// phase's call stacks look for it.
    branch_pc: u64,
}

/// One zone: its accesses keep shadow bytes in `window` only, and
/// `[lo, hi)` covers every byte the heap would check for them.
#[derive(Debug, Clone, Copy)]
pub struct Zone {
    window: u64,
    pub lo: u64,
    pub hi: u64,
}

/// An aligned 8-byte word's folded accesses; bit i of the masks is byte
/// i, and byte i of `bytes` (the guest's memory order) is at bits 8i.
#[derive(Debug, Clone, Copy)]
struct Word {
    addr: u64,
    zone: u8,
    bytes: u64,
    stored: u8,
    seen: u8,
    killed: u8,
}

/// A load or store of at most 8 bytes the parallel phase set aside (see
/// the module's doc).
#[derive(Debug, Clone, Copy)]
pub struct Aside {
    /// How many of the segment's items come before it (after its
    /// [`Item::Zones`]).
    pub at: u32,
    /// Its place among the segment's set-aside accesses of every zone.
    pub seq: u32,
    pc: u64,
    addr: u64,
    val: u64,
    size: u8,
    store: bool,
}

impl Aside {
    /// The access, as the trace would have held it.
    #[inline(always)]
    pub fn access(&self, zone: usize) -> MemAccess {
        MemAccess {
            pc: self.pc,
            addr: self.addr,
            val: self.val,
            hi: 0,
            size: self.size,
            store: self.store,
            zone: zone as u8 + 1,
        }
    }
}

/// A zone's set-aside accesses in execution order, in blocks of
/// [`ASIDES`], so that a long list grows without being copied.
#[derive(Debug, Clone, Default)]
pub struct Asides {
    blocks: Vec<Vec<Aside>>,
}

/// The set-aside accesses a block of [`Asides`] holds.
const ASIDES: usize = 1024;

impl Asides {
    #[inline(always)]
    fn push(&mut self, x: Aside) {
        match self.blocks.last_mut() {
            Some(b) if b.len() < ASIDES => b.push(x),
            _ => {
                let mut b = Vec::with_capacity(ASIDES);
                b.push(x);
                self.blocks.push(b);
            }
        }
    }

    /// The `i`th, if there are so many.
    #[inline(always)]
    pub fn get(&self, i: usize) -> Option<&Aside> {
        self.blocks.get(i / ASIDES)?.get(i % ASIDES)
    }

    fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = &Aside> {
        self.blocks.iter().flatten()
    }
}

/// A segment's folded accesses.
#[derive(Debug, Clone)]
pub struct Delta {
    pub zones: Vec<Zone>,
    /// An access crossed a zone's edge: nothing of the segment is folded.
    pub crossed: bool,
    words: Vec<Word>,
    index: AddrMap<u32>,
    /// Words looked up lately and their indexes, by the word's address's
    /// low bits; `u64::MAX`: none.
    recent: Box<[(u64, u32); RECENT]>,
    /// The accesses set aside, by zone, in execution order: the serial
    /// phase applies those of a zone it does not fold where they came.
    aside: [Asides; MAX_ZONES],
    /// How many were set aside.
    asides: u32,
}

impl Default for Delta {
    fn default() -> Delta {
        Delta {
            zones: Vec::new(),
            crossed: false,
            words: Vec::new(),
            index: AddrMap::default(),
            recent: Box::new([(u64::MAX, 0); RECENT]),
            aside: Default::default(),
            asides: 0,
        }
    }
}

/// Byte i of the result is 0xff where bit i of `m` is set: one load from
/// a table (2 KB) where spreading the bits took some 14 instructions an
/// access.
#[inline(always)]
fn byte_mask(m: u8) -> u64 {
    BYTE_MASKS[usize::from(m)]
}

/// [`byte_mask`] of every mask.
static BYTE_MASKS: [u64; 256] = {
    let mut t = [0; 256];
    let mut m = 0;
    while m < 256 {
        let mut i = 0;
        while i < 8 {
            if m >> i & 1 != 0 {
                t[m] |= 0xff << (8 * i);
            }
            i += 1;
        }
        m += 1;
    }
    t
};

impl Delta {
    /// Folds one access; its zone (1-based) or 0 (not folded).
    #[inline(always)]
    fn add(&mut self, a: &MemAccess, big_endian: bool) -> u8 {
        let len = match a.size {
            16 => 16,
            s => u64::from(s.min(8)),
        };
        if len == 0 {
            return 0;
        }
        // The bytes the shadow keeps lie in one zone's window (zones are
        // disjoint, so their order does not matter); the range the heap
        // would check is the zone's, wherever it reaches: every byte of an
        // access wider than the shadow keeps, and before an 8-byte load
        // the vector it may be a later piece of (`Thread::access`'s split
        // vectors).
        let (Some(kept), Some(end)) = (
            a.addr.checked_add(len),
            a.addr.checked_add(u64::from(a.size).max(len)),
        ) else {
            return 0;
        };
        let start = if a.size == 8 && !a.store {
            a.addr.saturating_sub(VECTOR_MAX - 8)
        } else {
            a.addr
        };
        let window = a.addr >> ZONE_SHIFT;
        if (kept - 1) >> ZONE_SHIFT != window {
            self.crossed = true;
            return 0;
        }
        let z = match self.zones.iter().position(|z| z.window == window) {
            Some(z) => z,
            None if self.zones.len() < MAX_ZONES => {
                self.zones.push(Zone {
                    window,
                    lo: start,
                    hi: end,
                });
                self.zones.len() - 1
            }
            None => return 0,
        };
        let zone = &mut self.zones[z];
        zone.lo = zone.lo.min(start);
        zone.hi = zone.hi.max(end);
        let z = z as u8;
        if a.size == 16 {
            let (first, second) = if big_endian {
                (a.hi, a.val)
            } else {
                (a.val, a.hi)
            };
            self.part(a.addr, first, 8, a.store, big_endian, z);
            self.part(a.addr.wrapping_add(8), second, 8, a.store, big_endian, z);
        } else {
            self.part(a.addr, a.val, len as usize, a.store, big_endian, z);
        }
        z + 1
    }

    /// `n` bytes (1 to 8) of `value` at `addr`, as the shadow takes
    /// them: a load across a page's end is taken whole, as a store. They
    /// lie in at most two aligned words.
    #[inline(always)]
    fn part(&mut self, addr: u64, value: u64, n: usize, store: bool, be: bool, zone: u8) {
        let store = store || (addr % PAGE) as usize + n > PAGE as usize;
        let v = u64::from_le_bytes(guest_bytes(value, n, be));
        let v = if n == 8 { v } else { v & ((1 << (8 * n)) - 1) };
        let k = (addr & 7) as u32;
        let span = ((1u32 << n) - 1) << k;
        let base = addr & !7;
        self.fold_in(base, span as u8, v << (8 * k), store, zone);
        if span >> 8 != 0 {
            self.fold_in(base + 8, (span >> 8) as u8, v >> (64 - 8 * k), store, zone);
        }
    }

    /// The bytes `m` of the word at `addr` take those of `v`, as a store
    /// or a load leaves them.
    #[inline(always)]
    fn fold_in(&mut self, addr: u64, m: u8, v: u64, store: bool, zone: u8) {
        let w = self.word(addr, zone);
        let take = if store {
            w.stored |= m;
            w.seen &= !m;
            w.killed &= !m;
            m
        } else {
            // A byte given up since stays so; a byte stored since is
            // stored with what the load saw; any other is seen.
            let take = m & !w.killed;
            w.seen |= take & !w.stored;
            take
        };
        let bm = byte_mask(take);
        w.bytes = (w.bytes & !bm) | (v & bm);
    }

    #[inline(always)]
    fn word(&mut self, addr: u64, zone: u8) -> &mut Word {
        let slot = (addr / 8) as usize % RECENT;
        let (cached, i) = self.recent[slot];
        let i = if cached == addr {
            i
        } else {
            let next = self.words.len() as u32;
            let i = *self.index.entry(addr).or_insert(next);
            if i == next {
                self.words.push(Word {
                    addr,
                    zone,
                    bytes: 0,
                    stored: 0,
                    seen: 0,
                    killed: 0,
                });
            }
            self.recent[slot] = (addr, i);
            i
        };
        &mut self.words[i as usize]
    }

    /// Sets aside access `a` of zone `a.zone` (1-based), `at` items into
    /// the segment.
    #[inline(always)]
    fn set_aside(&mut self, at: u32, a: &MemAccess) {
        let seq = self.asides;
        self.asides += 1;
        self.aside[usize::from(a.zone - 1) % MAX_ZONES].push(Aside {
            at,
            seq,
            pc: a.pc,
            addr: a.addr,
            val: a.val,
            size: a.size,
            store: a.store,
        });
    }

    /// The first set-aside access, in execution order, that is due no
    /// later than item `upto` of the segment, among the zones not in
    /// `folded` (bit z: zone z), where zone z's first not yet applied is
    /// `next[z]`: its zone and the access.
    pub fn next_aside(
        &self,
        next: &[u32; MAX_ZONES],
        folded: u8,
        upto: u32,
    ) -> Option<(usize, &Aside)> {
        let mut best: Option<(usize, &Aside)> = None;
        for (z, (list, &n)) in self
            .aside
            .iter()
            .zip(next)
            .enumerate()
            .take(self.zones.len())
        {
            if folded & (1 << z) != 0 {
                continue;
            }
            if let Some(x) = list.get(n as usize) {
                if x.at <= upto && best.map_or(true, |(_, b)| x.seq < b.seq) {
                    best = Some((z, x));
                }
            }
        }
        best
    }

    /// The bytes of `[lo, hi)` are given up.
    fn kill(&mut self, lo: u64, hi: u64) {
        if !self.zones.iter().any(|z| z.lo < hi && lo < z.hi) {
            return;
        }
        let mut w = lo & !7;
        while w < hi {
            if let Some(&i) = self.index.get(&w) {
                let word = &mut self.words[i as usize];
                let (from, to) = (lo.max(w) - w, hi.min(w + 8) - w);
                let m = ((1u16 << to) - (1u16 << from)) as u8;
                word.stored &= !m;
                word.seen &= !m;
                word.killed |= m;
            }
            w += 8;
        }
    }
}

// ---- The parallel phase ----

/// Makes the chunk's [`Head`] the trace's first item if the trace is
/// empty. Every callback that pushes an item calls this (or a function
/// here that does) first.
#[inline(always)]
pub fn begin(trace: &mut Vec<Item>) {
    if trace.is_empty() {
        trace.push(Item::Chunk(Head::default()));
    }
}

/// The chunk's [`Head`], made if the trace is empty.
#[inline(always)]
fn head(trace: &mut Vec<Item>) -> &mut Head {
    begin(trace);
    match &mut trace[0] {
        Item::Chunk(h) => h,
        _ => unreachable!("a heap run's trace starts with its head"),
    }
}

/// How many of the next instructions without a branch (and without
/// registers) the serial phase needs: [`plain_wanted`] of the chunk so
/// far, told by its head (`needed`: see there).
#[inline(always)]
pub fn plain_wanted(trace: &mut Vec<Item>, needed: u8) -> usize {
    parallel::plain_wanted(head(trace).plain, needed)
}

/// `n` instructions without a branch were pushed (`n` > 0 where the
/// event had no registers: then [`plain_wanted`] allowed them).
#[inline(always)]
pub fn plain_pushed(trace: &mut Vec<Item>, n: usize) {
    let h = head(trace);
    h.plain = (usize::from(h.plain) + n).min(2) as u8;
}

/// Whether an instruction event with registers at stack pointer `sp`,
/// no branch, would change nothing in the serial phase, so that it need
/// not be pushed: the chunk's last such event had the same stack pointer
/// (so none of the stack is given up, [`given_up`]), and enough
/// instructions without a branch came since any other event that
/// nothing is left for this one to do ([`plain_wanted`]: no branch to
/// land, no conditional return to decide, no signal handler to enter).
/// Its other registers are read only where such work is left. Not after
/// an 8-byte load, which the serial phase may join with the next one as
/// a vector split in pieces when no instruction comes between them (an
/// x86 `rep lodsq` runs one instruction again and again). Most block
/// starts inside a function are such (a loop's back edge lands at the
/// same stack pointer): on busybox `sha256sum` (mipsel) some 40 % of the
/// instruction events the serial phase got.
#[inline(always)]
pub fn idle(trace: &mut Vec<Item>, sp: u64, needed: u8) -> bool {
    quiet(head(trace), sp, needed) && !after_word_load(trace)
}

/// [`idle`] as the head tells it: the same stack pointer, nothing left.
#[inline(always)]
fn quiet(h: &Head, sp: u64, needed: u8) -> bool {
    sp != 0 && h.sp == sp && h.plain >= needed
}

/// Whether the trace's last item is an 8-byte load (see [`idle`]).
#[inline(always)]
fn after_word_load(trace: &[Item]) -> bool {
    matches!(
        trace.last(),
        Some(Item::Access(MemAccess {
            store: false,
            size: 8,
            ..
        }))
    )
}

/// An instruction event with registers at stack pointer `sp`, where the
/// run builds no segments ([`regs`] keeps the stack pointer where it
/// does): whether it is [`idle`] (`plain`: it is no branch).
#[inline(always)]
pub fn sp_seen(trace: &mut Vec<Item>, sp: u64, plain: bool, needed: u8) -> bool {
    let h = head(trace);
    let same = plain && quiet(h, sp, needed);
    h.sp = sp;
    same && !after_word_load(trace)
}

/// An event of any kind but a load, a store or an instruction without a
/// branch is to be pushed next: the instructions after it may have work
/// left by it ([`plain_wanted`]).
#[inline(always)]
pub fn event(trace: &mut Vec<Item>) {
    head(trace).plain = 0;
}

/// A branch's instruction event at `pc` is to be pushed next: an event
/// of another kind ([`event`]), and its stores stay in the trace.
#[inline(always)]
pub fn branch(trace: &mut Vec<Item>, pc: u64) {
    let h = head(trace);
    h.plain = 0;
    h.branch_pc = pc;
}

/// A load or store: folded into the open segment if there is one, and
/// then set aside there or pushed. Inlined into the decoder's loop, the
/// fold too ([`fold_access`]). `split`: the guest's vectors come split
/// ([`super::Layout`]).
#[inline(always)]
pub fn access(trace: &mut Vec<Item>, a: MemAccess, big_endian: bool, fold: bool, on: &Guest) {
    begin(trace);
    if fold {
        match trace.first() {
            Some(Item::Chunk(h)) if h.building.is_none() => {}
            _ => return fold_access(trace, a, big_endian, on),
        }
    }
    trace.push(Item::Access(a));
}

/// What [`access`] needs to know of the guest besides the access.
pub struct Guest<'a> {
    /// Its vectors come split ([`super::Layout`]).
    pub split: bool,
    /// Where its heap lately was.
    pub heap: &'a HeapWindows,
}

/// [`access`] into an open segment: folded, and set aside unless the
/// serial phase may need it in the trace even where its zone is folded
/// (a store at a branch's pc; where vectors come split, an 8-byte load
/// and the access right after one, which keeps two loads apart), it is
/// wider than 8 bytes, or its window was lately the heap's (where it is
/// most likely applied, which the trace does at less cost). Inlined with
/// [`Delta::add`], so that the access stays in registers: a call each
/// cost a tenth of a folded run's instructions (callgrind, busybox
/// `sha256sum`: mipsel and i386 -11 %), and the path that does not fold
/// is no dearer (-1 %).
#[inline(always)]
fn fold_access(trace: &mut Vec<Item>, mut a: MemAccess, big_endian: bool, on: &Guest) {
    let at = trace.len();
    let keep = a.size > 8
        || on.split && ((a.size == 8 && !a.store) || after_word_load(trace))
        || on.heap.has(a.addr >> ZONE_SHIFT);
    if let Some(Item::Chunk(h)) = trace.first_mut() {
        if let Some(d) = h.building.as_deref_mut() {
            a.zone = d.add(&a, big_endian);
            if a.zone != 0 && !keep && !(a.store && a.pc == h.branch_pc) {
                d.set_aside((at - h.open - 1) as u32, &a);
                return;
            }
        }
    }
    trace.push(Item::Access(a));
}

/// An instruction event with registers, with stack pointer `sp`, is to
/// be pushed next: the frames it gives up are given up in the open
/// segment too (`red_zone`: see [`super::Layout`]), and a segment opens
/// if none is. Only where the run folds; `open`: a segment may open (not
/// once the process had a second thread). At the chunk's first such event
/// the stack pointer before it is not known here, so the segment opens
/// after it instead: true where the caller is to call [`open_after`] once
/// the event is pushed. (Where block starts are quiet, a chunk of a
/// loop may have no other.)
pub fn regs(trace: &mut Vec<Item>, sp: u64, red_zone: u64, open: bool) -> bool {
    let prev = head(trace).sp;
    if let Some((lo, hi)) = given_up(prev, sp, red_zone) {
        if hi - lo > KILL_MAX {
            close(trace);
        } else if let Some(d) = head(trace).building.as_deref_mut() {
            d.kill(lo, hi);
        }
    }
    let h = head(trace);
    h.sp = sp;
    if !open || h.open != 0 {
        return false;
    }
    if prev == 0 {
        return true;
    }
    open_segment(trace);
    false
}

/// Opens a segment after the chunk's first instruction event with
/// registers, where [`regs`] said so (not after an allocation function's
/// registers, which close the open segment).
pub fn open_after(trace: &mut Vec<Item>) {
    if head(trace).open == 0 {
        open_segment(trace);
    }
}

/// A segment opens at the trace's end.
fn open_segment(trace: &mut Vec<Item>) {
    let at = trace.len();
    let h = head(trace);
    h.open = at;
    h.plain = 0;
    h.building = Some(Box::default());
    // Replaced by the segment's delta when it closes.
    trace.push(Item::Flush);
}

/// The open segment, if any, ends here: an allocation function's
/// registers are to be pushed next (the chunk has its head already), or
/// the chunk's events end ([`cannoli::Cannoli::decoded`]), so that every
/// segment's delta is in its [`Item::Zones`] and every segment ends with
/// an [`Item::Flush`].
#[inline]
pub fn close(trace: &mut Vec<Item>) {
    let Some(Item::Chunk(h)) = trace.first_mut() else {
        return;
    };
    if let Some(d) = h.building.take() {
        let at = std::mem::take(&mut h.open);
        h.plain = 0;
        trace[at] = Item::Zones(Arc::new(*d));
        trace.push(Item::Flush);
    }
}

/// An event that ends the open segment (see the module's doc) is to be
/// pushed next.
#[inline]
pub fn barrier(trace: &mut Vec<Item>) {
    event(trace);
    close(trace);
}

// ---- The serial phase ----

/// A thread's segments in the serial phase.
#[derive(Default)]
pub struct Segments {
    /// The one whose events are being applied.
    applying: Option<Applying>,
}

/// A segment being applied.
struct Applying {
    delta: Arc<Delta>,
    /// Zones folded (bit z: zone z), decided at the segment's start.
    folded: u8,
    /// The segment's items applied so far.
    count: u32,
    /// The item before which the next set-aside access of a zone not
    /// folded is due (`u32::MAX`: none is left).
    due: u32,
    /// Per zone, its first set-aside access not yet applied.
    next: [u32; MAX_ZONES],
    /// The one zone not folded that set accesses aside, where there is
    /// one (most segments with any: the heap's own zone).
    only: Option<usize>,
}

impl Applying {
    /// The next set-aside access, in execution order, of a zone not
    /// folded that is due no later than item `upto`: its zone and itself.
    #[inline(always)]
    fn next_due(&self, upto: u32) -> Option<(usize, Aside)> {
        match self.only {
            Some(z) => self.delta.aside[z]
                .get(self.next[z] as usize)
                .filter(|x| x.at <= upto)
                .map(|x| (z, *x)),
            None => self
                .delta
                .next_aside(&self.next, self.folded, upto)
                .map(|(z, x)| (z, *x)),
        }
    }

    /// Where the next set-aside access of a zone not folded is due.
    fn due(&self) -> u32 {
        self.next_due(u32::MAX).map_or(u32::MAX, |(_, x)| x.at)
    }
}

/// Whether a run with `workers` worker threads a guest thread folds
/// segments. Folding moves work from the serial phase to the parallel
/// one and may add some (a word looked up per access): with few workers
/// the parallel phase is what bounds the run, and the whole costs from
/// 3 % less (i386, aarch64) to 8 % more (x86_64) folded, while with many
/// the serial phase bounds it, and folding takes from half (32-bit Arm)
/// to more than nine tenths (aarch64) of it away. `CANNOLI_HEAP_FOLD=0`
/// or `1` decides instead (the e2e test compares the two).
pub fn wanted(workers: usize) -> bool {
    match std::env::var("CANNOLI_HEAP_FOLD").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => workers >= FOLD_WORKERS,
    }
}

impl Thread {
    /// [`Item::Zones`]: a segment starts. Each zone is folded or not for
    /// the whole segment, decided here: no allocation function is
    /// running, the process has one thread, nothing crossed a zone's
    /// edge, and no block was ever near the zone's range. None of that
    /// changes before the segment ends (an allocation function's entry or
    /// return ends it first; a tail call that ends one happens only while
    /// one is running).
    pub(super) fn segment(&mut self, st: &mut Proc, d: &Arc<Delta>, heap: &HeapWindows) {
        self.fold(st);
        let mut folded = 0;
        if !d.crossed && self.calls.is_empty() && !st.order.threads_created() {
            for (z, zone) in d.zones.iter().enumerate() {
                let untouched = st.heap.untouched(zone.lo, zone.hi);
                if untouched {
                    folded |= 1 << z;
                }
                heap.note(zone.window, !untouched);
            }
        }
        let mut unfolded =
            (0..d.zones.len()).filter(|&z| folded & (1 << z) == 0 && !d.aside[z].is_empty());
        let only = match (unfolded.next(), unfolded.next()) {
            (Some(z), None) => Some(z),
            _ => None,
        };
        let mut s = Applying {
            delta: d.clone(),
            folded,
            count: 0,
            due: u32::MAX,
            next: [0; MAX_ZONES],
            only,
        };
        s.due = s.due();
        self.segments.applying = Some(s);
    }

    /// Whether a segment is being applied.
    #[inline(always)]
    pub(super) fn in_segment(&self) -> bool {
        self.segments.applying.is_some()
    }

    /// An item of the segment being applied is to be applied next: the
    /// set-aside accesses due before it go first. Every item goes through
    /// here, in order, once ([`Thread::apply`] and the serial loop).
    #[inline(always)]
    pub(super) fn step(&mut self, st: &mut Proc) {
        if let Some(s) = &mut self.segments.applying {
            let at = s.count;
            s.count += 1;
            if s.due == at {
                self.apply_asides(st, at);
            }
        }
    }

    /// Applies, in execution order, the set-aside accesses of the zones
    /// not folded that are due no later than item `upto`.
    #[inline(never)]
    fn apply_asides(&mut self, st: &mut Proc, upto: u32) {
        loop {
            let Some(s) = &mut self.segments.applying else {
                return;
            };
            let Some((z, x)) = s.next_due(upto) else {
                s.due = s.due();
                return;
            };
            s.next[z] += 1;
            let half_load = self.take_half_load();
            self.access(st, x.access(z), half_load);
        }
    }

    /// Whether the access of `zone` (1-based, 0: none) of the segment
    /// being applied is folded.
    #[inline(always)]
    pub(super) fn folded(&self, zone: u8) -> bool {
        match &self.segments.applying {
            Some(s) if zone != 0 => s.folded & (1 << (zone - 1)) != 0,
            _ => false,
        }
    }

    /// A folded access in the trace: what it does besides the shadow and
    /// the check (as [`Thread::access`] does it).
    #[inline(always)]
    pub(super) fn skipped(&mut self, a: &MemAccess, half_load: Option<(u64, u64, u64)>) {
        if a.store {
            if let Some(rules) = &self.rules {
                self.bt.write(rules, a.pc, a.addr, a.val, a.size);
            }
        } else if a.size == 8 {
            // A split vector load's pieces are checked together.
            self.half_load = match half_load {
                Some((p, next, start)) if p == a.pc && next == a.addr => {
                    Some((p, next.wrapping_add(8), start))
                }
                _ if self.layout.split_vectors => Some((a.pc, a.addr.wrapping_add(8), a.addr)),
                _ => None,
            };
        }
    }

    /// The segment being applied ends (at its [`Item::Flush`]): the
    /// set-aside accesses of zones not folded not applied yet are applied
    /// (none, where the segment ended with its flush), and the folded
    /// zones' words go into the shadow.
    pub(super) fn fold(&mut self, st: &mut Proc) {
        if self
            .segments
            .applying
            .as_ref()
            .is_some_and(|s| s.due != u32::MAX)
        {
            self.apply_asides(st, u32::MAX);
        }
        let Some(s) = self.segments.applying.take() else {
            return;
        };
        if s.folded == 0 {
            return;
        }
        for w in &s.delta.words {
            if s.folded & (1 << w.zone) != 0 {
                let bytes = w.bytes.to_le_bytes();
                st.shadow.fold_word(w.addr, bytes, w.stored, w.seen);
            }
        }
    }
}

/// Folds `items` as the parallel phase would, then applies the trace as
/// the serial phase would with the zones of `folds` (bit z: zone z)
/// folded in every segment that crossed no zone's edge (for tests): the
/// shadow.
#[cfg(test)]
pub fn folded_shadow(
    items: &[Item],
    big_endian: bool,
    red_zone: u64,
    folds: u8,
    heap: &HeapWindows,
) -> Shadow {
    let on = Guest { split: false, heap };
    let mut trace = Vec::new();
    begin(&mut trace);
    for item in items {
        match item {
            Item::Access(a) => access(&mut trace, *a, big_endian, true, &on),
            Item::Insn { regs: Some(r), .. } => {
                let after = regs(&mut trace, r.sp, red_zone, true);
                trace.push(item.clone());
                if after {
                    open_after(&mut trace);
                }
            }
            _ => trace.push(item.clone()),
        }
    }
    close(&mut trace);
    struct Seg {
        delta: Arc<Delta>,
        folded: u8,
        count: u32,
        next: [u32; MAX_ZONES],
    }
    let mut sh = Shadow::default();
    let mut sp_last = 0;
    let mut segment: Option<Seg> = None;
    for item in &trace {
        if let Some(s) = &mut segment {
            let at = s.count;
            s.count += 1;
            while let Some((z, x)) = s.delta.next_aside(&s.next, s.folded, at) {
                let a = x.access(z);
                s.next[z] += 1;
                plain_access(&mut sh, &a, big_endian);
            }
        }
        match item {
            Item::Zones(d) => {
                segment = Some(Seg {
                    delta: d.clone(),
                    folded: if d.crossed { 0 } else { folds },
                    count: 0,
                    next: [0; MAX_ZONES],
                });
            }
            Item::Flush => {
                if let Some(s) = segment.take() {
                    assert!(s.delta.next_aside(&s.next, s.folded, u32::MAX).is_none());
                    for w in &s.delta.words {
                        if s.folded & (1 << w.zone) != 0 {
                            sh.fold_word(w.addr, w.bytes.to_le_bytes(), w.stored, w.seen);
                        }
                    }
                }
            }
            Item::Access(a)
                if a.zone != 0
                    && segment
                        .as_ref()
                        .is_some_and(|s| s.folded & (1 << (a.zone - 1)) != 0) => {}
            Item::Access(a) => plain_access(&mut sh, a, big_endian),
            Item::Insn { regs: Some(r), .. } => {
                if let Some((lo, hi)) = given_up(sp_last, r.sp, red_zone) {
                    sh.kill(lo, hi);
                }
                sp_last = r.sp;
            }
            _ => {}
        }
    }
    assert!(segment.is_none(), "every segment ends with its flush");
    sh
}

/// An access applied to `sh` as the serial phase applies it unfolded.
#[cfg(test)]
pub fn plain_access(sh: &mut Shadow, a: &MemAccess, be: bool) {
    if a.size == 16 {
        let (first, second) = if be { (a.hi, a.val) } else { (a.val, a.hi) };
        if a.store {
            sh.store_tagged(a.addr, first, 8, be, false);
            sh.store_tagged(a.addr.wrapping_add(8), second, 8, be, false);
        } else {
            sh.load_seen(a.addr, first, 8, be, false);
            sh.load_seen(a.addr.wrapping_add(8), second, 8, be, false);
        }
    } else if a.store {
        sh.store_tagged(a.addr, a.val, a.size, be, false);
    } else {
        sh.load_seen(a.addr, a.val, a.size, be, false);
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::super::backtrace::state::Regs;
    use super::*;

    /// An instruction event at pc 0x1000, with the stack pointer `sp` if
    /// it has registers.
    fn insn(branch: bool, sp: Option<u64>) -> Item {
        Item::Insn {
            pc: 0x1000,
            branch,
            regs: sp.map(|sp| Regs { sp, ra: None }),
            value: None,
        }
    }

    /// xorshift64: a fixed sequence, no crate needed.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    const STACK: u64 = 0x7fff_0000;

    /// A thread's events: loads and stores of the stack, of globals near
    /// a page's end and across a zone's edge, and calls and returns.
    fn events(rng: &mut Rng, n: usize) -> Vec<Item> {
        let mut sp = STACK;
        let mut items = Vec::new();
        for _ in 0..n {
            match rng.below(10) {
                0 | 1 => {
                    sp = match rng.below(3) {
                        0 if sp < STACK => sp + 8 * rng.below(24),
                        1 => sp - 8 * rng.below(24),
                        _ => sp + 0x2000 * rng.below(2),
                    };
                    items.push(insn(true, Some(sp)));
                }
                _ => {
                    let addr = match rng.below(32) {
                        0..=19 => sp - 64 + rng.below(256),
                        20..=30 => 0x40_0ff0 + rng.below(32),
                        _ => 0x4f_fff8 + rng.below(16),
                    };
                    let size = [1, 2, 4, 8, 16][rng.below(5) as usize];
                    items.push(Item::Access(MemAccess {
                        pc: 0x1000,
                        addr,
                        val: rng.next(),
                        hi: rng.next(),
                        size,
                        store: rng.below(2) == 0,
                        zone: 0,
                    }));
                }
            }
        }
        items
    }

    /// Every byte's value where known, then whether a load would make it
    /// known (a byte given up stays unknown).
    fn bytes(sh: &mut Shadow) -> Vec<Option<u64>> {
        let ranges = [
            (STACK - 0x8000, STACK + 0x8000),
            (0x40_0f00, 0x40_1100),
            (0x4f_ff00, 0x50_0100),
        ];
        let mut v = Vec::new();
        for &(lo, hi) in &ranges {
            v.extend((lo..hi).map(|a| sh.load(a, 1, false)));
        }
        for &(lo, hi) in &ranges {
            for a in lo..hi {
                sh.load_seen(a, 0xab, 1, false, false);
                v.push(sh.load(a, 1, false));
            }
        }
        v
    }

    #[test]
    fn a_byte_mask_has_a_byte_for_each_bit() {
        for m in 0..=255u8 {
            let want = (0..8).fold(0u64, |acc, i| match m >> i & 1 {
                1 => acc | 0xff << (8 * i),
                _ => acc,
            });
            assert_eq!(byte_mask(m), want, "{m:#x}");
        }
        assert_eq!(byte_mask(0x81), 0xff00_0000_0000_00ff);
    }

    #[test]
    fn folded_segments_leave_the_shadow_every_access_leaves() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..200 {
            let items = events(&mut rng, 300);
            for be in [false, true] {
                let red_zone = if round % 2 == 0 { 0 } else { 128 };
                let mut plain = Shadow::default();
                let mut sp_last = 0;
                for item in &items {
                    match item {
                        Item::Access(a) => plain_access(&mut plain, a, be),
                        Item::Insn { regs: Some(r), .. } => {
                            if let Some((lo, hi)) = given_up(sp_last, r.sp, red_zone) {
                                plain.kill(lo, hi);
                            }
                            sp_last = r.sp;
                        }
                        _ => {}
                    }
                }
                let want = bytes(&mut plain);
                // Every zone folded, none, and some; the globals' window
                // taken for the heap's (its accesses left in the trace) or not.
                let heap = HeapWindows::default();
                if round % 3 == 0 {
                    heap.note(0x40_0ff0 >> ZONE_SHIFT, true);
                }
                for folds in [u8::MAX, 0, rng.next() as u8] {
                    let mut folded = folded_shadow(&items, be, red_zone, folds, &heap);
                    assert!(
                        want == bytes(&mut folded),
                        "round {round}, big-endian {be}, folds {folds:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_segment_opens_after_the_first_register_event_and_closes_at_a_barrier() {
        let insn_at = |sp| insn(true, Some(sp));
        let heap = HeapWindows::default();
        let on = Guest {
            split: false,
            heap: &heap,
        };
        let store = MemAccess {
            pc: 8,
            addr: STACK - 16,
            val: 1,
            hi: 0,
            size: 4,
            store: true,
            zone: 0,
        };
        let mut trace = Vec::new();
        access(&mut trace, store, false, true, &on);
        // The chunk's first: the stack pointer before it is not known, so
        // the segment opens after it.
        assert!(regs(&mut trace, STACK - 32, 0, true));
        trace.push(insn_at(STACK - 32));
        open_after(&mut trace);
        access(&mut trace, store, false, true, &on);
        // Inside the open segment.
        assert!(!regs(&mut trace, STACK - 32, 0, true));
        trace.push(insn_at(STACK - 32));
        access(&mut trace, store, false, true, &on);
        close(&mut trace);
        // After the barrier, the next register event opens one before it.
        access(&mut trace, store, false, true, &on);
        assert!(!regs(&mut trace, STACK - 48, 0, true));
        trace.push(insn_at(STACK - 48));
        access(&mut trace, store, false, true, &on);
        close(&mut trace);
        let kinds: Vec<&str> = trace
            .iter()
            .map(|i| match i {
                Item::Chunk(_) => "head",
                Item::Access(a) if a.zone == 0 => "access",
                Item::Access(_) => "kept",
                Item::Insn { .. } => "insn",
                Item::Zones(_) => "zones",
                Item::Flush => "flush",
                _ => "other",
            })
            .collect();
        // The accesses inside a segment are set aside, where they came.
        assert_eq!(
            kinds,
            [
                "head", "access", "insn", "zones", "insn", "flush", "access", "zones", "insn",
                "flush"
            ]
        );
        let asides = |i: usize| match &trace[i] {
            Item::Zones(d) => d.aside[0].iter().map(|x| (x.at, x.seq)).collect::<Vec<_>>(),
            _ => panic!("item {i} is no segment's start"),
        };
        assert_eq!(asides(3), [(0, 0), (1, 1)]);
        assert_eq!(asides(7), [(1, 0)]);
    }

    /// What stays in the trace inside a segment: a store at the last
    /// branch's pc, and where vectors come split, an 8-byte load and the
    /// access right after one.
    #[test]
    fn what_the_serial_phase_may_need_stays_in_the_trace() {
        let insn_at = |sp| insn(false, Some(sp));
        let at = |pc, size, store| MemAccess {
            pc,
            addr: STACK - 64,
            val: 1,
            hi: 0,
            size,
            store,
            zone: 0,
        };
        let heap = HeapWindows::default();
        for split in [false, true] {
            let on = Guest { split, heap: &heap };
            let mut trace = Vec::new();
            assert!(regs(&mut trace, STACK, 0, true));
            trace.push(insn_at(STACK));
            open_after(&mut trace);
            branch(&mut trace, 0x40);
            trace.push(insn_at(STACK));
            access(&mut trace, at(0x40, 8, true), false, true, &on);
            access(&mut trace, at(0x44, 8, true), false, true, &on);
            access(&mut trace, at(0x48, 8, false), false, true, &on);
            access(&mut trace, at(0x4c, 4, false), false, true, &on);
            access(&mut trace, at(0x50, 4, false), false, true, &on);
            close(&mut trace);
            let kept: Vec<u64> = trace
                .iter()
                .filter_map(|i| match i {
                    Item::Access(a) => Some(a.pc),
                    _ => None,
                })
                .collect();
            if split {
                assert_eq!(kept, [0x40, 0x48, 0x4c]);
            } else {
                assert_eq!(kept, [0x40]);
            }
        }
        // A window lately the heap's keeps every access of it.
        heap.note((STACK - 64) >> ZONE_SHIFT, true);
        let on = Guest {
            split: false,
            heap: &heap,
        };
        let mut trace = Vec::new();
        assert!(regs(&mut trace, STACK, 0, true));
        trace.push(insn_at(STACK));
        open_after(&mut trace);
        access(&mut trace, at(0x4c, 4, false), false, true, &on);
        access(&mut trace, at(0x50, 4, true), false, true, &on);
        close(&mut trace);
        let kept = trace
            .iter()
            .filter(|i| matches!(i, Item::Access(a) if a.zone == 1))
            .count();
        assert_eq!(kept, 2);
    }

    /// What the head's count stands for: the instructions without a
    /// branch since the last event of another kind, loads and stores
    /// aside, found by looking back through the whole trace.
    fn looked_back(trace: &[Item], needed: usize) -> usize {
        let mut plain = 0;
        for item in trace.iter().rev() {
            match item {
                Item::Access(_) => {}
                Item::Insn { branch: false, .. } => {
                    plain += 1;
                    if plain == needed {
                        return 0;
                    }
                }
                _ => return needed - plain,
            }
        }
        needed - plain
    }

    /// The head's count of instructions without a branch agrees with a
    /// look back through the trace, events pushed as the heap's callbacks
    /// push them, folding or not.
    #[test]
    fn the_heads_count_is_what_a_look_back_finds() {
        let heap = HeapWindows::default();
        let on = Guest {
            split: false,
            heap: &heap,
        };
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for round in 0..200 {
            let fold = round % 2 == 0;
            let needed = 1 + (round / 2 % 2) as u8;
            let mut trace = Vec::new();
            let mut sp = STACK;
            for _ in 0..300 {
                match rng.below(8) {
                    0..=2 => {
                        let k = 1 + rng.below(6) as usize;
                        let n = plain_wanted(&mut trace, needed).min(k);
                        assert_eq!(
                            n,
                            looked_back(&trace, usize::from(needed)).min(k),
                            "round {round}"
                        );
                        for _ in 0..n {
                            trace.push(insn(false, None));
                        }
                        if n > 0 {
                            plain_pushed(&mut trace, n);
                        }
                    }
                    3 | 4 => {
                        let a = MemAccess {
                            pc: 0x1000,
                            // Most on the stack, some in another zone.
                            addr: if rng.below(4) == 0 {
                                0x1000_0000 + 8 * rng.below(8)
                            } else {
                                sp - 8 * rng.below(8)
                            },
                            val: rng.next(),
                            hi: 0,
                            size: 8,
                            store: rng.below(2) == 0,
                            zone: 0,
                        };
                        access(&mut trace, a, false, fold, &on);
                    }
                    5 | 6 => {
                        // An instruction event with registers: a branch,
                        // or a block's first instruction.
                        let branch = rng.below(2) == 0;
                        sp = STACK - 8 * rng.below(64);
                        let after = fold && regs(&mut trace, sp, 0, true);
                        if branch {
                            super::branch(&mut trace, 0x1000);
                        } else {
                            plain_pushed(&mut trace, 1);
                        }
                        trace.push(insn(branch, Some(sp)));
                        if rng.below(8) == 0 {
                            close(&mut trace);
                            event(&mut trace);
                            trace.push(Item::Hit {
                                pc: 0x1000,
                                regs: Box::new([]),
                            });
                        } else if after {
                            open_after(&mut trace);
                        }
                    }
                    _ => {
                        barrier(&mut trace);
                        trace.push(Item::Signal { handler: 0x2000 });
                    }
                }
                assert_eq!(
                    plain_wanted(&mut trace, needed),
                    looked_back(&trace, usize::from(needed)),
                    "round {round}"
                );
            }
        }
    }
}
