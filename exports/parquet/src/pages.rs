// SPDX-License-Identifier: GPL-2.0-or-later
//! The bytes of the large tables' data pages, in the encodings of the
//! Parquet format specification (`Encodings.md`):
//!
//! - integers as `DELTA_BINARY_PACKED`: blocks of [`BLOCK`] deltas, each
//!   with its minimum and [`MINIBLOCKS`] bit widths, the deltas less the
//!   minimum bit-packed 32 at a time, least significant bit first;
//! - definition levels as runs of the RLE/bit-packing hybrid (bit width 1);
//! - dictionary indices of a two-word dictionary as bit-packed groups of 8.
//!
//! Why not the `parquet` crate's encoders: they take 7-9 ns per value on
//! this project's machine (a generic column writer around a per-value
//! encoder), and an instruction row has six values. These loops do one
//! pass over a page's values and skip a miniblock whose deltas are all the
//! same, which is most of them for `stream`, `module` and `symbol` and
//! many for `seq`. The crate still frames the pages (headers), the column
//! chunks and the file (`columns.rs`), and reads them back in the tests.

/// Deltas per block.
pub const BLOCK: usize = 128;
/// Miniblocks per block.
pub const MINIBLOCKS: usize = 4;
/// Deltas per miniblock.
const MINI: usize = BLOCK / MINIBLOCKS;

/// A column's physical integer type. Deltas are taken in the type's own
/// width, wrapping, as readers add them back.
pub trait Int: Copy + Default + Send + 'static {
    /// The delta `self - prev`, sign-extended.
    fn delta(self, prev: Self) -> i64;
    fn widen(self) -> i64;
}

impl Int for i64 {
    #[inline(always)]
    fn delta(self, prev: i64) -> i64 {
        self.wrapping_sub(prev)
    }
    #[inline(always)]
    fn widen(self) -> i64 {
        self
    }
}

/// A chunk's own `seq` numbers, for an INT64 column.
impl Int for u32 {
    #[inline(always)]
    fn delta(self, prev: u32) -> i64 {
        self as i64 - prev as i64
    }
    #[inline(always)]
    fn widen(self) -> i64 {
        self as i64
    }
}

/// Access sizes, for an INT32 column.
impl Int for i8 {
    #[inline(always)]
    fn delta(self, prev: i8) -> i64 {
        self as i64 - prev as i64
    }
    #[inline(always)]
    fn widen(self) -> i64 {
        self as i64
    }
}

impl Int for i32 {
    #[inline(always)]
    fn delta(self, prev: i32) -> i64 {
        self.wrapping_sub(prev) as i64
    }
    #[inline(always)]
    fn widen(self) -> i64 {
        self as i64
    }
}

/// Appends `v` as an unsigned LEB128 varint.
pub fn uleb(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends `v` zigzag-encoded as a varint.
fn zigzag(out: &mut Vec<u8>, v: i64) {
    uleb(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// Appends `vals`, each plus `add`, as one `DELTA_BINARY_PACKED` run (a
/// page's values). Adding a constant changes only the first value: the
/// deltas are those of `vals`.
pub fn delta<T: Int>(vals: &[T], add: i64, out: &mut Vec<u8>) {
    let first = vals.first().map_or(0, |v| v.widen().wrapping_add(add));
    delta_header(vals.len(), first, out);
    delta_blocks(vals, out);
}

/// Appends the header of a `DELTA_BINARY_PACKED` run of `n` values from
/// `first` on.
pub fn delta_header(n: usize, first: i64, out: &mut Vec<u8>) {
    uleb(out, BLOCK as u64);
    uleb(out, MINIBLOCKS as u64);
    uleb(out, n as u64);
    zigzag(out, first);
}

/// Appends `n` copies of `v` as a `DELTA_BINARY_PACKED` run: the header,
/// then per block a zero minimum and four zero widths.
pub fn delta_const(v: i64, n: usize, out: &mut Vec<u8>) {
    delta_header(n, v, out);
    let blocks = n.saturating_sub(1).div_ceil(BLOCK);
    out.resize(out.len() + blocks * (1 + MINIBLOCKS), 0);
}

/// Appends the blocks of the deltas of `vals` (after a [`delta_header`]).
pub fn delta_blocks<T: Int>(vals: &[T], out: &mut Vec<u8>) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above; that is all
        // `blocks_avx2` asks.
        unsafe { blocks_avx2(vals, out) };
        return;
    }
    blocks(vals, out)
}

/// [`blocks`] compiled for AVX2: the baseline x86-64 (SSE2) has no 64-bit
/// compare, and the minimum of 64-bit deltas was most of the time.
///
/// # Safety
///
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn blocks_avx2<T: Int>(vals: &[T], out: &mut Vec<u8>) {
    blocks(vals, out)
}

#[inline(always)]
fn blocks<T: Int>(vals: &[T], out: &mut Vec<u8>) {
    let mut deltas = [0i64; BLOCK];
    let mut at = 1;
    while at < vals.len() {
        let n = (vals.len() - at).min(BLOCK);
        // Separate passes over slices, so that they vectorize.
        let (cur, prev) = (&vals[at..at + n], &vals[at - 1..at - 1 + n]);
        for ((d, c), p) in deltas.iter_mut().zip(cur).zip(prev) {
            *d = c.delta(*p);
        }
        block(&deltas[..n], out);
        at += n;
    }
}

/// Appends one block of at most [`BLOCK`] deltas.
#[inline(always)]
fn block(deltas: &[i64], out: &mut Vec<u8>) {
    let min = deltas.iter().copied().min().unwrap_or(0);
    zigzag(out, min);
    let widths_at = out.len();
    out.extend_from_slice(&[0; MINIBLOCKS]);
    for (m, mini) in deltas.chunks(MINI).enumerate() {
        // The deltas less the minimum fit the type's width: both are
        // sign-extended values of it. Padding is 0.
        let mut packed = [0u64; MINI];
        let mut or = 0u64;
        for (p, &d) in packed.iter_mut().zip(mini) {
            *p = d.wrapping_sub(min) as u64;
            or |= *p;
        }
        let width = 64 - or.leading_zeros();
        out[widths_at + m] = width as u8;
        pack(&packed, width, out);
    }
}

/// Appends a `DELTA_BINARY_PACKED` run of the numbers of `runs`, each a
/// first number and a count of numbers from it on, `add` added: `seq`
/// for the instructions of a chunk, which come in runs between its other
/// events. A block inside one run is all deltas of 1: five bytes, with no
/// pass over it.
pub fn delta_runs(runs: &[(u32, u32)], add: i64, out: &mut Vec<u8>) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        unsafe { runs_avx2(runs, add, out) };
        return;
    }
    runs_blocks(runs, add, out)
}

/// [`runs_blocks`] compiled for AVX2 (see [`blocks_avx2`]).
///
/// # Safety
///
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn runs_avx2(runs: &[(u32, u32)], add: i64, out: &mut Vec<u8>) {
    runs_blocks(runs, add, out)
}

#[inline(always)]
fn runs_blocks(runs: &[(u32, u32)], add: i64, out: &mut Vec<u8>) {
    let n: usize = runs.iter().map(|r| r.1 as usize).sum();
    let mut runs = runs.iter().filter(|r| r.1 > 0);
    let Some(&(first, count)) = runs.next() else {
        delta_header(0, 0, out);
        return;
    };
    delta_header(n, first as i64 + add, out);
    // Every delta is 1 but the first of each run after the first: delta
    // `at` (between numbers `at` and `at + 1`) is the next such.
    let mut last = first as i64 + count as i64 - 1;
    let mut at = count as usize - 1;
    let mut next = runs.next();
    let mut deltas = [1i64; BLOCK];
    let mut from = 0;
    while from < n - 1 {
        let len = (n - 1 - from).min(BLOCK);
        let mut boundary = false;
        while let (Some(&(start, count)), true) = (next, at < from + len) {
            if !boundary {
                deltas.fill(1);
                boundary = true;
            }
            deltas[at - from] = start as i64 - last;
            last = start as i64 + count as i64 - 1;
            at += count as usize;
            next = runs.next();
        }
        if !boundary && len == BLOCK {
            // Minimum 1 (zigzag 2), every width 0.
            out.extend_from_slice(&[2, 0, 0, 0, 0]);
        } else {
            if !boundary {
                deltas.fill(1);
            }
            block(&deltas[..len], out);
        }
        from += len;
    }
}

/// Bit-packs a miniblock in `width` bits per value, least significant bit
/// first: `width` 32-bit words.
fn pack(v: &[u64; MINI], width: u32, out: &mut Vec<u8>) {
    macro_rules! widths {
        ($($w:literal)*) => {
            match width {
                0 => {}
                $($w => pack_w::<$w>(v, out),)*
                _ => unreachable!("a width is at most 64"),
            }
        };
    }
    widths!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25
        26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49
        50 51 52 53 54 55 56 57 58 59 60 61 62 63 64)
}

/// [`pack`] for one width: with `W` known and the loop unrolled by hand,
/// every word index and shift is a constant.
#[inline(always)]
fn pack_w<const W: u32>(v: &[u64; MINI], out: &mut Vec<u8>) {
    let mut words = [0u32; 66];
    macro_rules! put {
        ($($j:literal)*) => {$(
            let bit = $j * W;
            let (w, s) = ((bit / 32) as usize, bit % 32);
            let x = v[$j];
            words[w] |= (x << s) as u32;
            if s + W > 32 {
                words[w + 1] |= (x >> (32 - s)) as u32;
            }
            if s + W > 64 {
                words[w + 2] |= (x >> (64 - s)) as u32;
            }
        )*};
    }
    put!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
    let mut bytes = [0u8; 256];
    for (b, w) in bytes.chunks_exact_mut(4).zip(&words[..W as usize]) {
        b.copy_from_slice(&w.to_le_bytes());
    }
    out.extend_from_slice(&bytes[..4 * W as usize]);
}

/// Appends definition levels (1 for a value, 0 for a null) from runs of
/// values (true) and nulls, as RLE runs (bit width 1; a data page v2
/// gives their length in its header). Returns the number of nulls.
pub fn level_runs(runs: &[(bool, usize)], out: &mut Vec<u8>) -> usize {
    let mut nulls = 0;
    for &(v, n) in runs.iter().filter(|r| r.1 > 0) {
        uleb(out, (n as u64) << 1);
        out.push(v as u8);
        nulls += if v { 0 } else { n };
    }
    nulls
}

/// Appends dictionary indices 0 or 1 (`RLE_DICTIONARY`, bit width 1) as
/// one bit-packed run.
pub fn indices_1bit(idx: &[i8], out: &mut Vec<u8>) {
    out.push(1);
    let groups = idx.len().div_ceil(8);
    uleb(out, ((groups as u64) << 1) | 1);
    for g in idx.chunks(8) {
        let mut b = 0u8;
        for (i, &x) in g.iter().enumerate() {
            b |= ((x & 1) as u8) << i;
        }
        out.push(b);
    }
}

/// A dictionary page's values: `PLAIN` byte arrays.
pub fn plain_words(words: &[&str], out: &mut Vec<u8>) {
    for w in words {
        out.extend_from_slice(&(w.len() as u32).to_le_bytes());
        out.extend_from_slice(w.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reference decoder of `DELTA_BINARY_PACKED`, written from the
    /// specification's text, for the byte-level tests; the files are also
    /// read back by the `parquet` crate (`columns.rs`).
    fn undelta(mut b: &[u8], bits32: bool) -> Vec<i64> {
        fn uleb(b: &mut &[u8]) -> u64 {
            let (mut v, mut s) = (0u64, 0);
            loop {
                let x = b[0];
                *b = &b[1..];
                v |= ((x & 0x7f) as u64) << s;
                s += 7;
                if x < 0x80 {
                    return v;
                }
            }
        }
        fn zz(b: &mut &[u8]) -> i64 {
            let u = uleb(b);
            ((u >> 1) as i64) ^ -((u & 1) as i64)
        }
        assert_eq!(uleb(&mut b), 128);
        assert_eq!(uleb(&mut b), 4);
        let n = uleb(&mut b) as usize;
        let mut v = zz(&mut b);
        let mut out = Vec::new();
        if n == 0 {
            return out;
        }
        out.push(v);
        while out.len() < n {
            let min = zz(&mut b);
            let widths: Vec<usize> = b[..4].iter().map(|&w| w as usize).collect();
            b = &b[4..];
            for w in widths {
                if out.len() == n {
                    break;
                }
                let bytes = &b[..w * 4];
                b = &b[w * 4..];
                for i in 0..32 {
                    let mut x = 0u64;
                    for k in 0..w {
                        let bit = i * w + k;
                        x |= (((bytes[bit / 8] >> (bit % 8)) & 1) as u64) << k;
                    }
                    if out.len() < n {
                        v = if bits32 {
                            (v as i32).wrapping_add(min as i32).wrapping_add(x as i32) as i64
                        } else {
                            v.wrapping_add(min).wrapping_add(x as i64)
                        };
                        out.push(v);
                    }
                }
            }
        }
        assert!(b.is_empty(), "{} bytes left", b.len());
        out
    }

    fn lcg(n: usize, seed: u64) -> impl Iterator<Item = u64> {
        let mut s = seed;
        (0..n).map(move |_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s
        })
    }

    #[test]
    fn delta_round_trips_every_width_and_length() {
        for n in [0, 1, 2, 31, 32, 33, 128, 129, 130, 257, 1000] {
            for shift in [0, 1, 7, 31, 32, 40, 63, 64] {
                let v: Vec<i64> = lcg(n, n as u64 + shift as u64)
                    .map(|x| if shift == 64 { 5 } else { (x >> shift) as i64 })
                    .collect();
                let mut out = Vec::new();
                delta(&v, 0, &mut out);
                assert_eq!(undelta(&out, false), v, "n {n} shift {shift}");
                let w: Vec<i32> = v.iter().map(|&x| x as i32).collect();
                let mut out = Vec::new();
                delta(&w, 0, &mut out);
                let back: Vec<i32> = undelta(&out, true).iter().map(|&x| x as i32).collect();
                assert_eq!(back, w, "i32 n {n} shift {shift}");
            }
        }
        let edge = vec![i64::MIN, i64::MAX, 0, -1, i64::MAX, i64::MIN, 1];
        let mut out = Vec::new();
        delta(&edge, 0, &mut out);
        assert_eq!(undelta(&out, false), edge);
        let edge32 = vec![i32::MIN, i32::MAX, 0, -1, i32::MAX, i32::MIN, 1];
        let mut out = Vec::new();
        delta(&edge32, 0, &mut out);
        let back: Vec<i32> = undelta(&out, true).iter().map(|&x| x as i32).collect();
        assert_eq!(back, edge32);
    }

    #[test]
    fn runs_encode_as_their_numbers_do() {
        for case in 0..200 {
            let mut runs = Vec::new();
            let mut next = (lcg(1, case).next().unwrap() % 1000) as u32;
            for x in lcg(case as usize % 40 + 1, case + 1) {
                let count = if x % 7 == 0 { 300 } else { (x % 5 + 1) as u32 };
                if x % 11 == 0 {
                    runs.push((next, 0));
                }
                runs.push((next, count));
                next += count + (x >> 60) as u32 * (case as u32 % 3);
            }
            let nums: Vec<u32> = runs.iter().flat_map(|&(s, c)| s..s + c).collect();
            let (mut a, mut b) = (Vec::new(), Vec::new());
            delta_runs(&runs, 1 << 40, &mut a);
            delta(&nums, 1 << 40, &mut b);
            assert_eq!(a, b, "case {case}: {runs:?}");
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        delta_runs(&[], 0, &mut a);
        delta::<u32>(&[], 0, &mut b);
        assert_eq!(a, b);
    }

    #[test]
    fn a_constant_page_is_a_few_bytes_per_block() {
        let mut out = Vec::new();
        delta(&vec![7i32; 1 + 4 * BLOCK], 0, &mut out);
        // Header: 128 (2 bytes), 4, 513 (2 bytes), 7; then per block the
        // minimum (1 byte) and 4 widths, and no packed bits.
        assert_eq!(out.len(), 6 + 4 * 5);
    }

    #[test]
    fn levels_are_runs_and_nulls_are_counted() {
        let mut out = Vec::new();
        let nulls = level_runs(&[(true, 3), (false, 1), (true, 0), (true, 1)], &mut out);
        assert_eq!(out, [3 << 1, 1, 1 << 1, 0, 1 << 1, 1]);
        assert_eq!(nulls, 1);
    }

    #[test]
    fn indices_pack_eight_to_a_byte() {
        let mut out = Vec::new();
        indices_1bit(&[1, 0, 0, 1, 1, 0, 0, 0, 1], &mut out);
        let mut c = Vec::new();
        delta_const(9, 1 + 2 * BLOCK + 1, &mut c);
        let mut d = Vec::new();
        delta(&vec![9i32; 1 + 2 * BLOCK + 1], 0, &mut d);
        assert_eq!(c, d);
        assert_eq!(out, [1, (2 << 1) | 1, 0b0001_1001, 0b1]);
    }
}
