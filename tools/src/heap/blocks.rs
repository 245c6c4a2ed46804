// SPDX-License-Identifier: GPL-2.0-or-later
//! The heap as the allocation functions describe it: an interval map of
//! blocks, live and freed, that every load and store is checked against.
//!
//! A freed block stays known until the allocator hands its memory out
//! again (a new block overlapping it) or the memory is unmapped: until
//! then an access to it is a use after free. An access outside every
//! block but close to a live one (its slack up to the allocator's
//! alignment and the next chunk's header after it, a header's worth
//! before it) is an overflow or underflow of that block; farther away it
//! is not the heap's business (the stack, globals, the allocator's own
//! free memory).
//!
//! Optimized string functions read whole aligned words and vectors past
//! the end of a string (they cannot cross a page, so it is safe): as
//! memcheck's partial-loads-ok rule says, a load naturally aligned to its
//! size (a word or more) that overlaps a live block is fine, and a load of
//! 16 bytes or more is never reported (AVX2 `strlen` loads the aligned 32
//! bytes around a string's start, as two 16-byte halves, the first of
//! which may lie before the block, and its loop reads 128 bytes at a time
//! into whatever chunk follows, freed or not). A use after free or an
//! overflow made only by vector loads is therefore missed.

use std::collections::BTreeMap;
use std::sync::Arc;

/// A symbolized call stack, innermost first.
pub type Stack = Arc<[Arc<str>]>;

/// One allocation.
#[derive(Debug, Clone)]
pub struct Block {
    pub addr: u64,
    pub size: u64,
    /// Its allocation's sequence number in the process (from 1).
    pub seq: u64,
    pub tid: i32,
    /// The pc of the allocation function's entry.
    pub pc: u64,
    /// Which allocation function was called: its index in the plan's
    /// targets (`malloc`, `calloc`, ...).
    pub target: usize,
    /// The call site: the return address into the allocation's caller (0
    /// when the call stack did not show it), for joining with the trace.
    pub site_pc: u64,
    pub alloc_stack: Stack,
    /// Set when freed (boxed: a block is copied into every finding, and
    /// most are never freed by the time one is made).
    pub freed: Option<Box<Freed>>,
}

/// How a block was freed: by `free` or `delete`, or by `realloc` moving
/// or resizing it.
#[derive(Debug, Clone)]
pub struct Freed {
    /// The free's sequence number in the process, counted with the
    /// allocations.
    pub seq: u64,
    pub tid: i32,
    /// The freeing function's index in the plan's targets.
    pub target: usize,
    /// The free's call site, as [`Block::site_pc`].
    pub site_pc: u64,
    pub stack: Stack,
}

impl Freed {
    pub fn new(seq: u64, tid: i32, target: usize, site_pc: u64, stack: Stack) -> Freed {
        Freed {
            seq,
            tid,
            target,
            site_pc,
            stack,
        }
    }
}

impl Block {
    pub fn end(&self) -> u64 {
        self.addr.wrapping_add(self.size)
    }
}

/// What is wrong with an access or a free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    UseAfterFree,
    Overflow,
    DoubleFree,
    InvalidFree,
    Leak,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::UseAfterFree,
        Kind::Overflow,
        Kind::DoubleFree,
        Kind::InvalidFree,
        Kind::Leak,
    ];

    /// The name in the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Kind::UseAfterFree => "use-after-free",
            Kind::Overflow => "heap-buffer-overflow",
            Kind::DoubleFree => "double-free",
            Kind::InvalidFree => "invalid-free",
            Kind::Leak => "leak",
        }
    }
}

/// A bad access or free, with the block it concerns (a copy: the block
/// may change later).
#[derive(Debug, Clone)]
pub struct Bad {
    pub kind: Kind,
    /// The first byte at fault (the pointer, for a free).
    pub addr: u64,
    pub block: Option<Block>,
}

impl Bad {
    /// Whether it is an overflow past a block's end (not an underflow):
    /// the only finding a C library string function's own load may make
    /// without memcheck seeing it, its aligned word or vector reading on
    /// past the string's terminating byte (memcheck replaces the function
    /// with one reading the string byte by byte). A read before a block or
    /// in a freed one is the caller's bug there too.
    pub fn past_end(&self) -> bool {
        self.kind == Kind::Overflow && self.block.as_ref().is_some_and(|b| self.addr >= b.end())
    }
}

/// The heap of one process.
#[derive(Debug, Clone)]
pub struct Heap {
    /// Live blocks by address.
    live: BTreeMap<u64, Block>,
    /// Freed blocks whose memory was not handed out again, by address.
    freed: BTreeMap<u64, Block>,
    /// Other threads' live blocks set aside by an allocation over them
    /// ([`Heap::alloc`]), by address: live again once it is freed.
    aside: BTreeMap<u64, Block>,
    /// Bytes in one guest word (4 or 8).
    word: u64,
    /// The lowest block address ever allocated, and the end of the
    /// highest block's overflow zone: an access wholly outside, with a
    /// word's margin below, touches no block and needs no lookup (most
    /// accesses: the stack, globals). Never shrinks, so it stays
    /// conservative.
    span: (u64, u64),
    pub live_bytes: u64,
    pub peak_bytes: u64,
    pub allocs: u64,
    pub frees: u64,
}

impl Heap {
    pub fn new(word: u64) -> Heap {
        Heap {
            live: BTreeMap::new(),
            freed: BTreeMap::new(),
            aside: BTreeMap::new(),
            word,
            span: (u64::MAX, 0),
            live_bytes: 0,
            peak_bytes: 0,
            allocs: 0,
            frees: 0,
        }
    }

    /// The live blocks, with those set aside (at the run's end, one whose
    /// earlier allocation was never freed).
    pub fn live(&self) -> impl Iterator<Item = &Block> {
        self.live.values().chain(self.aside.values())
    }

    /// A forked child's copy, its blocks all the child's thread `tid`'s
    /// (the threads that allocated them are not in the child).
    pub fn forked(&self, tid: i32) -> Heap {
        let mut h = self.clone();
        for b in h.live.values_mut().chain(h.aside.values_mut()) {
            b.tid = tid;
        }
        h
    }

    /// The live block containing `addr` (its start, for an empty block).
    pub fn live_at(&self, addr: u64) -> Option<&Block> {
        let (_, b) = self.live.range(..=addr).next_back()?;
        (addr < b.end() || addr == b.addr).then_some(b)
    }

    /// Forgets the freed blocks overlapping `[lo, hi)`: the allocator
    /// handed the memory out again, or it was unmapped.
    pub fn forget_freed(&mut self, lo: u64, hi: u64) {
        let gone: Vec<u64> = overlapping(&self.freed, lo, hi).collect();
        for a in gone {
            self.freed.remove(&a);
        }
    }

    /// The allocator returned `b`. A live block of `b`'s thread that it
    /// overlaps was freed without a call this tool saw: it is dropped, and
    /// returned so that its row of the allocations table is still written.
    /// A live block of another thread it overlaps is set aside until `b`
    /// is freed, then live again: the two were never live together, and
    /// which came first the threads' streams do not say (see
    /// `tracer::order`).
    pub fn alloc(&mut self, b: Block) -> Vec<Block> {
        let hi = b.addr.wrapping_add(b.size.max(1));
        self.forget_freed(b.addr, hi);
        let overlapped: Vec<u64> = overlapping(&self.live, b.addr, hi).collect();
        let mut dropped = Vec::new();
        for a in overlapped {
            if let Some(old) = self.live.remove(&a) {
                self.live_bytes -= old.size;
                if old.tid == b.tid {
                    dropped.push(old);
                } else {
                    self.aside.insert(a, old);
                }
            }
        }
        self.widen(&b);
        self.allocs += 1;
        self.live_bytes += b.size;
        self.peak_bytes = self.peak_bytes.max(self.live_bytes);
        self.live.insert(b.addr, b);
        dropped
    }

    /// `free(addr)`, described by `how`. `Ok`: the freed block (`None`
    /// for null, whose free is nothing). `Err`: a double or invalid free.
    /// Where a block set aside lies at `addr` and another thread than the
    /// live block's frees it, that block is the one freed (the freeing
    /// thread had it from the set-aside block's owner, a hand-off the
    /// live block's thread does not know). Otherwise the live block is,
    /// and the blocks set aside under it are live again.
    pub fn free(&mut self, addr: u64, how: Freed) -> Result<Option<Block>, Bad> {
        if addr == 0 {
            return Ok(None);
        }
        let of_aside = self.aside.contains_key(&addr)
            && !self.live.get(&addr).is_some_and(|b| b.tid == how.tid);
        if of_aside {
            let mut b = self.aside.remove(&addr).expect("looked up above");
            self.frees += 1;
            b.freed = Some(Box::new(how));
            // The memory is the live block's now: no use after free there.
            return Ok(Some(b));
        }
        if let Some(mut b) = self.live.remove(&addr) {
            self.frees += 1;
            self.live_bytes -= b.size;
            let hi = b.addr.wrapping_add(b.size.max(1));
            b.freed = Some(Box::new(how));
            self.freed.insert(addr, b.clone());
            self.restore(addr, hi);
            return Ok(Some(b));
        }
        if let Some(b) = self.freed.get(&addr) {
            return Err(Bad {
                kind: Kind::DoubleFree,
                addr,
                block: Some(b.clone()),
            });
        }
        let inside = self.live_at(addr).or_else(|| self.freed_at(addr)).cloned();
        Err(Bad {
            kind: Kind::InvalidFree,
            addr,
            block: inside,
        })
    }

    /// Makes the blocks set aside over `[lo, hi)` live again where no
    /// live block overlaps them any more: the blocks allocated over them
    /// were freed, and they came after those (the allocator handed their
    /// memory out again).
    fn restore(&mut self, lo: u64, hi: u64) {
        let back: Vec<u64> = overlapping(&self.aside, lo, hi).collect();
        for a in back {
            let end = self.aside[&a].end().max(a.wrapping_add(1));
            if overlapping(&self.live, a, end).next().is_some() {
                continue;
            }
            let b = self.aside.remove(&a).expect("found above");
            self.forget_freed(a, end);
            self.live_bytes += b.size;
            self.live.insert(a, b);
        }
    }

    /// Whether `[addr, addr + size)` lies in a block of thread `tid` that is
    /// set aside: the thread's own live memory, whatever block another
    /// thread's allocation put over it in the meantime (an access there is
    /// not checked against that block).
    pub fn aside_holds(&self, tid: i32, addr: u64, size: u64) -> bool {
        let Some((_, b)) = self.aside.range(..=addr).next_back() else {
            return false;
        };
        b.tid == tid && addr.checked_add(size).is_some_and(|e| e <= b.end())
    }

    fn freed_at(&self, addr: u64) -> Option<&Block> {
        let (_, b) = self.freed.range(..=addr).next_back()?;
        (addr < b.end()).then_some(b)
    }

    /// Takes `b` and the zone after it that [`Heap::check`] calls an
    /// overflow into [`Heap::span`].
    fn widen(&mut self, b: &Block) {
        let zone = b
            .addr
            .checked_add(b.size)
            .and_then(|e| e.checked_next_multiple_of(2 * self.word))
            .and_then(|e| e.checked_add(self.word))
            .unwrap_or(u64::MAX);
        self.span = (self.span.0.min(b.addr), self.span.1.max(zone));
    }

    /// Whether `[addr, addr + size)` is too far from every block, live or
    /// freed, for [`Heap::check`] to find anything: wholly above the
    /// overflow zone of the highest, or ending a word or more below the
    /// lowest (an underflow is at most a word before a block).
    #[inline]
    fn far(&self, addr: u64, size: u64) -> bool {
        let Some(end) = addr.checked_add(size) else {
            return false;
        };
        addr >= self.span.1 || end.saturating_add(self.word) <= self.span.0
    }

    /// Whether no access inside `[lo, hi)` can touch a block as long as
    /// no block is allocated: [`Heap::check`] finds nothing there.
    pub fn untouched(&self, lo: u64, hi: u64) -> bool {
        hi >= lo && self.far(lo, hi - lo)
    }

    /// Checks a load or store of `size` bytes at `addr`.
    pub fn check(&self, addr: u64, size: u64, store: bool) -> Option<Bad> {
        if self.far(addr, size) {
            return None;
        }
        let end = addr.wrapping_add(size);
        let prev = self.live.range(..=addr).next_back().map(|(_, b)| b);
        if let Some(b) = prev {
            if addr < b.end() && end <= b.end() {
                return None;
            }
        }
        let next = self
            .live
            .range(addr.wrapping_add(1)..)
            .next()
            .map(|(_, b)| b);
        let load_ok_partly = !store && ((size >= self.word && addr % size == 0) || size >= 16);
        let overlaps = |b: &Block| b.addr < end && addr < b.end();
        if load_ok_partly && (prev.is_some_and(overlaps) || next.is_some_and(overlaps)) {
            return None;
        }
        // Vector loads (16 bytes and more) are the C library's string
        // functions reading whole aligned vectors, also past a string's
        // end into the next chunk, freed or not: never reported.
        if !store && size >= 16 {
            return None;
        }
        // A freed block: where the access starts, or overlapped.
        if let Some(f) = self.freed_at(addr) {
            return Some(Bad {
                kind: Kind::UseAfterFree,
                addr,
                block: Some(f.clone()),
            });
        }
        if let Some((_, f)) = self.freed.range(addr.wrapping_add(1)..end).next() {
            if !load_ok_partly {
                return Some(Bad {
                    kind: Kind::UseAfterFree,
                    addr: f.addr,
                    block: Some(f.clone()),
                });
            }
            return None;
        }
        // Overflow past `prev`, into its slack or the next chunk's
        // header; or underflow before `next`.
        let after = prev.and_then(|b| {
            if addr < b.end() {
                // Starts inside, ends past the end.
                return Some((0, b.end(), b));
            }
            let zone = b.end().next_multiple_of(2 * self.word) + self.word;
            (addr < zone).then(|| (addr - b.end(), addr, b))
        });
        let before = next.and_then(|b| {
            let gap = b.addr.saturating_sub(end);
            (gap < self.word).then_some((gap, addr, b))
        });
        let (_, first, b) = match (after, before) {
            (Some(a), Some(b)) => {
                if a.0 <= b.0 {
                    a
                } else {
                    b
                }
            }
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => return None,
        };
        Some(Bad {
            kind: Kind::Overflow,
            addr: first,
            block: Some(b.clone()),
        })
    }

    /// The freed blocks' memory, `[start, end)`, sorted.
    pub fn freed_ranges(&self) -> Vec<(u64, u64)> {
        self.freed.values().map(|b| (b.addr, b.end())).collect()
    }

    /// How many blocks are live (set aside or not) and freed.
    pub fn block_count(&self) -> (usize, usize) {
        (self.live.len() + self.aside.len(), self.freed.len())
    }
}

/// The keys of the blocks of `map` overlapping `[lo, hi)`.
fn overlapping(map: &BTreeMap<u64, Block>, lo: u64, hi: u64) -> impl Iterator<Item = u64> + '_ {
    let first = map
        .range(..lo)
        .next_back()
        .filter(|(_, b)| b.end() > lo)
        .map(|(&a, _)| a);
    first.into_iter().chain(map.range(lo..hi).map(|(&a, _)| a))
}

/// How `addr` lies relative to `b`, memcheck's words: "4 bytes after a
/// block of size 40", "8 bytes inside a block of size 16".
pub fn relation(addr: u64, b: &Block) -> String {
    if addr < b.addr {
        format!("{} bytes before a block of size {}", b.addr - addr, b.size)
    } else if addr >= b.end() {
        format!("{} bytes after a block of size {}", addr - b.end(), b.size)
    } else {
        format!("{} bytes inside a block of size {}", addr - b.addr, b.size)
    }
}
