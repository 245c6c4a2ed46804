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

use std::collections::HashMap;

const PAGE: u64 = 4096;

/// One page's bytes, which of them were written, and which were last
/// written by a store the caller tagged ([`Shadow::store_tagged`]).
struct Page {
    bytes: Box<[u8; PAGE as usize]>,
    known: Box<[u64; (PAGE / 64) as usize]>,
    tagged: Box<[u64; (PAGE / 64) as usize]>,
}

/// A thread's stores, in guest byte order.
#[derive(Default)]
pub struct Shadow {
    pages: HashMap<u64, Page>,
}

impl Shadow {
    /// A store of `size` bytes of `value` at `addr`.
    pub fn store(&mut self, addr: u64, value: u64, size: u8, big_endian: bool) {
        self.store_tagged(addr, value, size, big_endian, false);
    }

    /// [`Shadow::store`], the bytes tagged with `tag` until the next store
    /// to them (`cannoli heap`: written by the allocator itself, whose
    /// bookkeeping is not where a program keeps its pointers).
    pub fn store_tagged(&mut self, addr: u64, value: u64, size: u8, big_endian: bool, tag: bool) {
        let n = usize::from(size.min(8));
        let le = value.to_le_bytes();
        for i in 0..n {
            let b = if big_endian { le[n - 1 - i] } else { le[i] };
            let a = addr.wrapping_add(i as u64);
            let p = self.pages.entry(a / PAGE).or_insert_with(|| Page {
                bytes: Box::new([0; PAGE as usize]),
                known: Box::new([0; (PAGE / 64) as usize]),
                tagged: Box::new([0; (PAGE / 64) as usize]),
            });
            let o = (a % PAGE) as usize;
            p.bytes[o] = b;
            p.known[o / 64] |= 1 << (o % 64);
            if tag {
                p.tagged[o / 64] |= 1 << (o % 64);
            } else {
                p.tagged[o / 64] &= !(1 << (o % 64));
            }
        }
    }

    /// Takes the tag off `size` bytes at `addr` (they are the program's
    /// now, whoever wrote them).
    pub fn untag(&mut self, addr: u64, size: u64) {
        for i in 0..size {
            let a = addr.wrapping_add(i);
            if let Some(p) = self.pages.get_mut(&(a / PAGE)) {
                let o = (a % PAGE) as usize;
                p.tagged[o / 64] &= !(1 << (o % 64));
            }
        }
    }

    /// The `size`-byte word at `addr`, if every byte of it was stored.
    pub fn load(&self, addr: u64, size: u64, big_endian: bool) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..size {
            let a = addr.wrapping_add(i);
            let p = self.pages.get(&(a / PAGE))?;
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
        self.pages.iter().flat_map(move |(&page, p)| {
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
}
