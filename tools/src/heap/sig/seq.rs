// SPDX-License-Identifier: GPL-2.0-or-later
//! A signature as a sequence of pieces, for linkers that do more than
//! fill in fields: RISC-V's linker relaxes an instruction sequence that
//! carries `R_RISCV_RELAX` into a shorter one (a call's `auipc`+`jalr`
//! into one `jal`, an address's `auipc` deleted) and shrinks the nops an
//! `R_RISCV_ALIGN` pads with, so that the linked code is the archive's
//! with some spans replaced by one of a few known shorter forms. Each such
//! span is a choice between those forms; every other byte stays as fixed
//! as in a plain [`Pattern`], which is a signature of one piece.

use std::collections::BTreeSet;

use super::Pattern;

/// One span of a function's code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// These bytes, as they are (but the masked-off bits).
    Fixed(Pattern),
    /// Any one of these forms (an empty one: the span was deleted).
    Either(Vec<Pattern>),
    /// Nops padding to the next multiple of `align`, at most `max` bytes:
    /// RISC-V's `R_RISCV_ALIGN`, which the linker shrinks to what the
    /// linked address needs and fills with 4-byte nops, then one 2-byte
    /// `c.nop` if the length asks for it.
    Pad { max: usize, align: u64 },
}

impl Piece {
    /// The lengths the piece may have.
    fn lens(&self) -> Vec<usize> {
        match self {
            Piece::Fixed(p) => vec![p.bytes.len()],
            Piece::Either(v) => v.iter().map(|p| p.bytes.len()).collect(),
            Piece::Pad { max, .. } => (0..=*max).step_by(2).collect(),
        }
    }

    /// The offsets past this piece's end when it starts at `at` in `data`
    /// (which starts at address `base`).
    fn ends(&self, data: &[u8], base: u64, at: usize, out: &mut Vec<usize>) {
        let hay = &data[at.min(data.len())..];
        match self {
            Piece::Fixed(p) => {
                if p.matches(hay) {
                    out.push(at + p.bytes.len());
                }
            }
            Piece::Either(v) => {
                for p in v {
                    if p.matches(hay) {
                        out.push(at + p.bytes.len());
                    }
                }
            }
            Piece::Pad { max, align } => {
                let a = (*align).max(1);
                let n = ((a - base.wrapping_add(at as u64) % a) % a) as usize;
                if n <= *max && hay.len() >= n && is_nops(&hay[..n]) {
                    out.push(at + n);
                }
            }
        }
    }
}

/// Whether `b` is the linker's nop fill: `nop`s, then a `c.nop` if its
/// length is 2 more than a multiple of 4.
fn is_nops(b: &[u8]) -> bool {
    let words = b.len() / 4 * 4;
    b[..words].chunks_exact(4).all(|w| w == [0x13, 0, 0, 0])
        && matches!(b[words..], [] | [0x01, 0x00])
}

/// A function's code as pieces, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sig {
    pub pieces: Vec<Piece>,
}

/// The most distinct offsets a piece may lie at for it to be searched
/// for first: past that, each of its hits would try too many starts.
const MAX_OFFSETS: usize = 256;

/// Anchor runs at least this long are long enough: among them the one
/// with the fewest possible offsets wins.
const GOOD_RUN: usize = 8;

impl From<Pattern> for Sig {
    fn from(p: Pattern) -> Sig {
        Sig {
            pieces: vec![Piece::Fixed(p)],
        }
    }
}

impl Sig {
    /// Its first `n` bytes, as a signature, with its whole length: only
    /// for a signature of one piece at least that long.
    pub fn prefix(&self, n: usize) -> Option<(Sig, usize)> {
        match &self.pieces[..] {
            [Piece::Fixed(p)] if p.bytes.len() >= n => Some((
                Sig::from(Pattern::masked(&p.bytes[..n], &p.mask[..n])),
                p.bytes.len(),
            )),
            _ => None,
        }
    }

    /// The fewest bytes any match fixes whole.
    pub fn known_bytes(&self) -> usize {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Fixed(p) => p.known_bytes(),
                Piece::Either(v) => v.iter().map(Pattern::known_bytes).min().unwrap_or(0),
                Piece::Pad { .. } => 0,
            })
            .sum()
    }

    /// The offsets from the function's start where piece `k` may begin,
    /// or `None` when there are more than [`MAX_OFFSETS`].
    fn offsets(&self, k: usize) -> Option<BTreeSet<usize>> {
        let mut at = BTreeSet::from([0]);
        for p in &self.pieces[..k] {
            let lens = p.lens();
            at = at
                .iter()
                .flat_map(|a| lens.iter().map(move |l| a + l))
                .collect();
            if at.len() > MAX_OFFSETS {
                return None;
            }
        }
        Some(at)
    }

    /// The run of whole bytes searched for first: (its piece, the piece's
    /// possible offsets, the run's offset in its piece, its length). Long enough
    /// (up to [`GOOD_RUN`]), then with the fewest offsets, then longest.
    fn anchor(&self) -> Option<(usize, BTreeSet<usize>, usize, usize)> {
        let mut best: Option<(usize, BTreeSet<usize>, usize, usize)> = None;
        for (k, p) in self.pieces.iter().enumerate() {
            let Piece::Fixed(p) = p else { continue };
            let (off, len) = p.anchor();
            if len == 0 {
                continue;
            }
            let Some(offs) = self.offsets(k) else {
                continue;
            };
            let key =
                |o: &BTreeSet<usize>, l: usize| (l.min(GOOD_RUN), std::cmp::Reverse(o.len()), l);
            if !best
                .as_ref()
                .is_some_and(|(_, o, _, l)| key(&offs, len) <= key(o, *l))
            {
                best = Some((k, offs, off, len));
            }
        }
        best
    }

    /// The lengths of the matches that start at `start` in `data`
    /// (address `base`), shortest first: each piece tried in turn from
    /// every place the pieces before it may have ended.
    fn match_at(&self, data: &[u8], base: u64, start: usize) -> Vec<usize> {
        let mut at = vec![start];
        for p in &self.pieces {
            let mut next = Vec::new();
            for &a in &at {
                p.ends(data, base, a, &mut next);
            }
            next.sort_unstable();
            next.dedup();
            if next.is_empty() {
                return next;
            }
            at = next;
        }
        at.iter().map(|e| e - start).collect()
    }
}

/// Where `sig` occurs in `code` (address, bytes), at addresses `a` with
/// `a % align == phase`, with the length it has there (its longest): at
/// most `limit` of them, each start once.
pub fn find(
    code: &[(u64, &[u8])],
    sig: &Sig,
    align: u64,
    phase: u64,
    limit: usize,
) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    let Some((k, offs, aoff, alen)) = sig.anchor() else {
        return out;
    };
    let Piece::Fixed(p) = &sig.pieces[k] else {
        return out;
    };
    let finder = memchr::memmem::Finder::new(&p.bytes[aoff..aoff + alen]);
    let align = align.max(1);
    for (base, data) in code {
        for pos in finder.find_iter(data) {
            for o in &offs {
                let Some(start) = pos.checked_sub(aoff + o) else {
                    continue;
                };
                let addr = base.wrapping_add(start as u64);
                if addr % align != phase % align || out.iter().any(|h| h.0 == addr) {
                    continue;
                }
                if let Some(&len) = sig.match_at(data, *base, start).last() {
                    out.push((addr, len as u64));
                    if out.len() >= limit {
                        return out;
                    }
                }
            }
        }
    }
    out
}
