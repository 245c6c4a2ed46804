// SPDX-License-Identifier: GPL-2.0-or-later
//! What a guest thread stored, byte by byte: where an entry probe reads
//! the arguments a calling convention passes on the stack (i386 cdecl, the
//! fifth and later of o32 and AAPCS, ...).
//!
//! QEMU reports registers at a probed instruction, not memory. Arguments
//! on the stack were stored there by the caller, though (`push`, `sw a4,
//! 16(sp)`), so when some probe needs one, the hook library asks for the
//! thread's stores and this shadow keeps the last byte written to each
//! address. A slot no store of this thread wrote (the kernel's `argv` on
//! the initial stack, another thread's store) reads as unknown, never as a
//! guess.
//!
//! `cannoli heap` stores every load and store of a process here, so the
//! shadow is on its hottest path: pages live in one vector, found through
//! a map keyed by page number with a cheap multiplicative hash (page
//! numbers are no attacker's choice) and, before that, a small
//! direct-mapped cache of recently used pages; a store inside one page
//! writes its bytes and its bitmap bits at once instead of byte by byte.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const PAGE: u64 = 4096;

/// The longest range [`Shadow::kill`] gives up in pages not made yet.
pub const KILL_MAKES_PAGES: u64 = 4096;

/// Entries of the recently-used page cache (a power of two).
const RECENT: usize = 16;

/// One page's bytes, which of them were written, which were last
/// written by a store the caller tagged ([`Shadow::store_tagged`]), and
/// which were given up since their last store ([`Shadow::kill`]).
#[derive(Clone)]
struct Page {
    bytes: [u8; PAGE as usize],
    known: [u64; (PAGE / 64) as usize],
    tagged: [u64; (PAGE / 64) as usize],
    dead: [u64; (PAGE / 64) as usize],
}

impl Page {
    fn new() -> Box<Page> {
        Box::new(Page {
            bytes: [0; PAGE as usize],
            known: [0; (PAGE / 64) as usize],
            tagged: [0; (PAGE / 64) as usize],
            dead: [0; (PAGE / 64) as usize],
        })
    }

    /// Sets (`on`) or clears the bits of `bitmap` for the `n` bytes (at
    /// most 8) at offset `o`, which lie inside the page.
    #[inline(always)]
    fn set_bits(bitmap: &mut [u64; (PAGE / 64) as usize], o: usize, n: usize, on: bool) {
        Bits::new(o, n).put(bitmap, on);
    }
}

impl Page {
    /// Writes the first `n` of `bytes` (1 to 8, in guest order) at offset
    /// `o`, inside the page: known, tagged with `tag`, no longer given up.
    /// The bits of the three bitmaps are worked out once, and the bytes
    /// go in as one word where eight fit before the page's end.
    #[inline(always)]
    fn put(&mut self, o: usize, n: usize, bytes: [u8; 8], tag: bool) {
        match self.bytes.get_mut(o..o + 8) {
            Some(w) => {
                let keep = if n == 8 { 0 } else { !0u64 << (8 * n) };
                let old = u64::from_le_bytes((&*w).try_into().expect("8 bytes"));
                let new = (old & keep) | (u64::from_le_bytes(bytes) & !keep);
                w.copy_from_slice(&new.to_le_bytes());
            }
            None => self.bytes[o..o + n].copy_from_slice(&bytes[..n]),
        }
        let b = Bits::new(o, n);
        b.put(&mut self.known, true);
        b.put(&mut self.tagged, tag);
        b.put(&mut self.dead, false);
    }
}

/// The bits of a page's bitmaps for at most 8 bytes at an offset inside
/// the page: in one word, and the rest, if any, in the next.
#[derive(Clone, Copy)]
struct Bits {
    w: usize,
    lo: u64,
    hi: u64,
}

impl Bits {
    #[inline(always)]
    fn new(o: usize, n: usize) -> Bits {
        let m = (1u64 << n) - 1;
        let (w, sh) = (o / 64, o % 64);
        Bits {
            w,
            lo: m << sh,
            // Bits past the word's end go on in the next one.
            hi: if sh + n > 64 { m >> (64 - sh) } else { 0 },
        }
    }

    /// Sets (`on`) or clears these bits of `bitmap`.
    #[inline(always)]
    fn put(self, bitmap: &mut [u64; (PAGE / 64) as usize], on: bool) {
        if on {
            bitmap[self.w] |= self.lo;
            if self.hi != 0 {
                bitmap[self.w + 1] |= self.hi;
            }
        } else {
            bitmap[self.w] &= !self.lo;
            if self.hi != 0 {
                bitmap[self.w + 1] &= !self.hi;
            }
        }
    }

    #[inline(always)]
    fn any(self, bitmap: &[u64; (PAGE / 64) as usize]) -> bool {
        bitmap[self.w] & self.lo != 0 || (self.hi != 0 && bitmap[self.w + 1] & self.hi != 0)
    }
}

/// The low `n` bytes of `value` in guest order (big-endian: the most
/// significant of them first), in the first `n` places.
#[inline(always)]
pub fn guest_bytes(value: u64, n: usize, big_endian: bool) -> [u8; 8] {
    if big_endian {
        (value << (8 * (8 - n))).to_be_bytes()
    } else {
        value.to_le_bytes()
    }
}

/// A hasher for page numbers and guest addresses: a multiply, folded so
/// both halves count (the map takes its bucket from the low bits and its
/// tag from the high ones). The keys are the guest's, which could only
/// slow its own trace down, so no keyed hash is needed.
#[derive(Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        let h = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 29);
    }
}

/// A map keyed by page numbers or guest addresses, with [`AddrHasher`].
pub type AddrMap<V> = HashMap<u64, V, BuildHasherDefault<AddrHasher>>;

/// A thread's stores, in guest byte order.
#[derive(Clone)]
pub struct Shadow {
    /// The pages, in the order they were first written.
    pages: Vec<(u64, Box<Page>)>,
    /// Page number to index in `pages`.
    index: AddrMap<u32>,
    /// Page numbers and their indexes, by the page number's low bits;
    /// `u64::MAX`: empty.
    recent: [(u64, u32); RECENT],
}

impl Default for Shadow {
    fn default() -> Shadow {
        Shadow {
            pages: Vec::new(),
            index: AddrMap::default(),
            recent: [(u64::MAX, 0); RECENT],
        }
    }
}

impl Shadow {
    /// The page of number `no`, made if new.
    #[inline(always)]
    fn page_mut(&mut self, no: u64) -> &mut Page {
        let slot = (no as usize) % RECENT;
        let (cached, i) = self.recent[slot];
        let i = if cached == no {
            i
        } else {
            let next = self.pages.len() as u32;
            let i = *self.index.entry(no).or_insert(next);
            if i == next {
                self.pages.push((no, Page::new()));
            }
            self.recent[slot] = (no, i);
            i
        };
        &mut self.pages[i as usize].1
    }

    fn page(&self, no: u64) -> Option<&Page> {
        let i = *self.index.get(&no)?;
        Some(&self.pages[i as usize].1)
    }

    /// A store of `size` bytes of `value` at `addr`.
    pub fn store(&mut self, addr: u64, value: u64, size: u8, big_endian: bool) {
        self.store_tagged(addr, value, size, big_endian, false);
    }

    /// [`Shadow::store`], the bytes tagged with `tag` until the next store
    /// to them (`cannoli heap`: written by the allocator itself, whose
    /// bookkeeping is not where a program keeps its pointers).
    #[inline(always)]
    pub fn store_tagged(&mut self, addr: u64, value: u64, size: u8, big_endian: bool, tag: bool) {
        let n = usize::from(size.min(8));
        let o = (addr % PAGE) as usize;
        if n == 0 || o + n > PAGE as usize {
            return self.store_bytes(addr, value, n, big_endian, tag);
        }
        let bytes = guest_bytes(value, n, big_endian);
        self.page_mut(addr / PAGE).put(o, n, bytes, tag);
    }

    /// A load of `size` bytes of `value` at `addr`: what memory holds
    /// there, kept as a store keeps it, except in bytes given up by
    /// [`Shadow::kill`] and not stored since (memcheck's undefined stack:
    /// reading a stale slot does not make its value the program's again).
    #[inline(always)]
    pub fn load_seen(&mut self, addr: u64, value: u64, size: u8, big_endian: bool, tag: bool) {
        let n = usize::from(size.min(8));
        let o = (addr % PAGE) as usize;
        if n == 0 || o + n > PAGE as usize {
            // Across a page's end: rare, and then taken whole.
            return self.store_bytes(addr, value, n, big_endian, tag);
        }
        // One look at the page (through the recent-page cache: a load is
        // mostly of a page just touched) for both the check and the write.
        let p = self.page_mut(addr / PAGE);
        if !Bits::new(o, n).any(&p.dead) {
            // No byte was given up: kept as a store keeps it.
            return p.put(o, n, guest_bytes(value, n, big_endian), tag);
        }
        self.load_partly_dead(addr, value, n as u64, big_endian, tag);
    }

    /// [`Shadow::load_seen`] of bytes some of which were given up: only
    /// the others take the loaded value.
    #[cold]
    fn load_partly_dead(&mut self, addr: u64, value: u64, n: u64, big_endian: bool, tag: bool) {
        let le = value.to_le_bytes();
        for i in 0..n {
            let a = addr.wrapping_add(i);
            let p = self.page_mut(a / PAGE);
            let o = (a % PAGE) as usize;
            if p.dead[o / 64] & (1 << (o % 64)) == 0 {
                let i = i as usize;
                p.bytes[o] = if big_endian {
                    le[n as usize - 1 - i]
                } else {
                    le[i]
                };
                Page::set_bits(&mut p.known, o, 1, true);
                Page::set_bits(&mut p.tagged, o, 1, tag);
            }
        }
    }

    /// Gives up the bytes of `[lo, hi)`: they read as never stored until
    /// the next store to them, whatever loads see there meanwhile (a
    /// stack's frames once the stack pointer rose above them). A range of
    /// at most [`KILL_MAKES_PAGES`] bytes is given up in a page nothing
    /// touched yet too (at most two pages), so that what a byte holds does
    /// not depend on whether its neighbours were touched first: `cannoli
    /// heap` folds a run of accesses into the shadow after the frames they
    /// were in were given up, and ends such a run before a longer range
    /// (a switch of stacks, whose pages are not made).
    pub fn kill(&mut self, lo: u64, hi: u64) {
        let make = hi.saturating_sub(lo) <= KILL_MAKES_PAGES;
        let mut a = lo;
        while a < hi {
            let page_end = (a / PAGE + 1) * PAGE;
            let end = hi.min(page_end);
            let no = a / PAGE;
            let i = if make {
                self.page_mut(no);
                self.index.get(&no).copied()
            } else {
                self.index.get(&no).copied()
            };
            if let Some(i) = i {
                let p = &mut self.pages[i as usize].1;
                let mut o = (a % PAGE) as usize;
                let e = o + (end - a) as usize;
                while o < e {
                    if o % 64 == 0 && e - o >= 64 {
                        p.known[o / 64] = 0;
                        p.dead[o / 64] = u64::MAX;
                        o += 64;
                        continue;
                    }
                    let n = (e - o).min(8 - o % 8);
                    Page::set_bits(&mut p.known, o, n, false);
                    Page::set_bits(&mut p.dead, o, n, true);
                    o += n;
                }
            }
            a = end;
        }
    }

    /// [`Shadow::store_tagged`] byte by byte: a store across a page's end.
    #[cold]
    fn store_bytes(&mut self, addr: u64, value: u64, n: usize, big_endian: bool, tag: bool) {
        let le = value.to_le_bytes();
        for i in 0..n {
            let b = if big_endian { le[n - 1 - i] } else { le[i] };
            let a = addr.wrapping_add(i as u64);
            let p = self.page_mut(a / PAGE);
            let o = (a % PAGE) as usize;
            p.bytes[o] = b;
            Page::set_bits(&mut p.known, o, 1, true);
            Page::set_bits(&mut p.tagged, o, 1, tag);
            Page::set_bits(&mut p.dead, o, 1, false);
        }
    }

    /// What a run of loads and stores left in the aligned 8-byte word at
    /// `addr`, applied at once (`cannoli heap`'s segments,
    /// `heap::tracer::segment`): the bytes of `stored` (bit i: byte i)
    /// as a store leaves them, those of `seen` as a load does (only where
    /// not given up), untagged, each from `bytes` (guest order).
    pub fn fold_word(&mut self, addr: u64, bytes: [u8; 8], stored: u8, seen: u8) {
        debug_assert_eq!(addr % 8, 0);
        let p = self.page_mut(addr / PAGE);
        let o = (addr % PAGE) as usize;
        // An aligned word's eight bits lie in one bitmap word.
        let sh = o % 64;
        let live = !((p.dead[o / 64] >> sh) as u8);
        let m = stored | (seen & live);
        if m == 0 {
            return;
        }
        for (i, &b) in bytes.iter().enumerate() {
            if m & (1 << i) != 0 {
                p.bytes[o + i] = b;
            }
        }
        let bits = u64::from(m) << sh;
        p.known[o / 64] |= bits;
        p.tagged[o / 64] &= !bits;
        p.dead[o / 64] &= !bits;
    }

    /// Takes the tag off `size` bytes at `addr` (they are the program's
    /// now, whoever wrote them).
    pub fn untag(&mut self, addr: u64, size: u64) {
        for i in 0..size {
            let a = addr.wrapping_add(i);
            if let Some(&p) = self.index.get(&(a / PAGE)) {
                let o = (a % PAGE) as usize;
                Page::set_bits(&mut self.pages[p as usize].1.tagged, o, 1, false);
            }
        }
    }

    /// The `size`-byte word at `addr`, if every byte of it was stored.
    pub fn load(&self, addr: u64, size: u64, big_endian: bool) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..size {
            let a = addr.wrapping_add(i);
            let p = self.page(a / PAGE)?;
            let o = (a % PAGE) as usize;
            if p.known[o / 64] & (1 << (o % 64)) == 0 {
                return None;
            }
            let b = u64::from(p.bytes[o]);
            v = if big_endian {
                v << 8 | b
            } else {
                v | b << (8 * i)
            };
        }
        Some(v)
    }
}

impl Shadow {
    /// Every naturally aligned `word`-byte word all of whose bytes were
    /// stored, with its value: where a leak check looks for pointers.
    /// `tagged`: words with a tagged byte too.
    pub fn words(
        &self,
        word: u64,
        big_endian: bool,
        tagged: bool,
    ) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.pages.iter().flat_map(move |&(page, ref p)| {
            (0..PAGE / word).filter_map(move |i| {
                let o = i * word;
                let bits = (1u64 << word) - 1;
                let known = p.known[(o / 64) as usize] >> (o % 64) & bits;
                if known != bits || !untagged_only(p, o, bits, tagged) {
                    return None;
                }
                let mut v = 0u64;
                for k in 0..word {
                    let b = u64::from(p.bytes[(o + k) as usize]);
                    v = if big_endian {
                        v << 8 | b
                    } else {
                        v | b << (8 * k)
                    };
                }
                Some((page * PAGE + o, v))
            })
        })
    }
}

/// Whether the word at `o` of `p` (mask `bits`) is wanted: any word when
/// `tagged`, else one none of whose bytes is tagged.
fn untagged_only(p: &Page, o: u64, bits: u64, tagged: bool) -> bool {
    tagged || p.tagged[(o / 64) as usize] >> (o % 64) & bits == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_are_read_back_in_guest_byte_order() {
        let mut s = Shadow::default();
        s.store(0x1ffe, 0x1122_3344, 4, false);
        assert_eq!(s.load(0x1ffe, 4, false), Some(0x1122_3344));
        assert_eq!(s.load(0x1fff, 2, false), Some(0x2233));
        assert_eq!(s.load(0x1ffd, 4, false), None);
        s.store(0x3000, 0xaabb_ccdd, 4, true);
        assert_eq!(s.load(0x3000, 4, true), Some(0xaabb_ccdd));
        assert_eq!(s.load(0x3000, 1, true), Some(0xaa));
        s.store(0x3001, 0x55, 1, true);
        assert_eq!(s.load(0x3000, 4, true), Some(0xaa55_ccdd));
    }

    #[test]
    fn tagged_words_are_left_out_until_stored_again() {
        let mut s = Shadow::default();
        s.store_tagged(0x1000, 7, 8, false, true);
        s.store(0x1008, 9, 8, false);
        let words = |s: &Shadow, t| {
            let mut v: Vec<(u64, u64)> = s.words(8, false, t).collect();
            v.sort();
            v
        };
        assert_eq!(words(&s, true), [(0x1000, 7), (0x1008, 9)]);
        assert_eq!(words(&s, false), [(0x1008, 9)]);
        s.store(0x1000, 8, 8, false);
        assert_eq!(words(&s, false), [(0x1000, 8), (0x1008, 9)]);
        s.store_tagged(0x1008, 1, 8, false, true);
        s.untag(0x1008, 8);
        assert_eq!(words(&s, false), [(0x1000, 8), (0x1008, 1)]);
    }

    #[test]
    fn killed_bytes_come_back_by_a_store_only() {
        let mut s = Shadow::default();
        for a in (0x1000..0x1100).step_by(8) {
            s.store(a, a, 8, false);
        }
        s.kill(0x1004, 0x10c8);
        let words: Vec<_> = s.words(8, false, true).map(|(a, _)| a).collect();
        assert_eq!(words.len(), 0x100 / 8 - 25);
        assert!(words.contains(&0x10c8) && !words.contains(&0x1000));
        assert_eq!(s.load(0x1000, 4, false), Some(0x1000));
        // A load of a given-up slot sees the stale value: not taken.
        s.load_seen(0x1008, 0x1008, 8, false, false);
        assert_eq!(s.load(0x1008, 8, false), None);
        // Its live bytes are taken, its given-up ones not.
        s.load_seen(0x1000, 0x7777_7777_0000_1000, 8, false, false);
        assert_eq!(s.load(0x1000, 4, false), Some(0x1000));
        assert_eq!(s.load(0x1004, 1, false), None);
        s.store(0x1008, 5, 8, false);
        s.load_seen(0x1008, 5, 8, false, false);
        assert_eq!(s.load(0x1008, 8, false), Some(5));
    }

    #[test]
    fn stores_across_bitmap_words_and_pages_are_whole() {
        let mut s = Shadow::default();
        for (i, a) in [0x103c_u64, 0x1ffc, 0x2ff9].into_iter().enumerate() {
            let v = 0x0102_0304_0506_0708 * (i as u64 + 1);
            s.store_tagged(a, v, 8, false, true);
            assert_eq!(s.load(a, 8, false), Some(v));
            assert_eq!(s.load(a.wrapping_sub(1), 1, false), None);
            assert_eq!(s.load(a + 8, 1, false), None);
            s.store(a, v, 8, true);
            assert_eq!(s.load(a, 8, true), Some(v));
        }
        // Every tag was taken off by the untagged stores.
        let all: Vec<_> = s.words(4, true, true).collect();
        let mine: Vec<_> = s.words(4, true, false).collect();
        assert_eq!(all.len(), mine.len());
    }
}
