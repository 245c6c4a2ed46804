// SPDX-License-Identifier: GPL-2.0-or-later
//! A pc probe's registers as ` name=0x…` text, the bulk of what a pc
//! probe's line costs: a million hits of 32 registers are 32 million
//! numbers.
//!
//! Each number is written as a fixed 18 bytes (`0x` and 16 digits, the
//! value shifted so its first digit leads), and the line is then cut to
//! the digits the value has, so no number takes a loop or a branch. The
//! digits come from a 16-byte table looked up by `pshufb` where the CPU
//! has SSSE3 (a few instructions for all 16), else from a 512-byte table of
//! byte pairs (eight moves).

/// A register's ` name=` padded to 16 bytes, so a line copies it whole (one
/// fixed-size move, not a copy call); `len` 0 for the pc, which the line
/// already has.
#[derive(Debug, Clone, Copy, Default)]
pub struct Key {
    bytes: [u8; 16],
    len: u8,
}

/// The keys of `names`; empty if a name is too long for one (the line is
/// then written by name, more slowly).
pub fn keys(names: &[String]) -> Vec<Key> {
    if names.iter().any(|n| n.len() > 14) {
        return Vec::new();
    }
    names
        .iter()
        .map(|n| {
            let mut k = Key::default();
            if n != "pc" {
                k.bytes[0] = b' ';
                k.bytes[1..=n.len()].copy_from_slice(n.as_bytes());
                k.bytes[n.len() + 1] = b'=';
                k.len = n.len() as u8 + 2;
            }
            k
        })
        .collect()
}

/// Bytes [`put_regs`] may need per key: the key's 16 and a number's 18.
pub const MAX_PER_KEY: usize = 34;

/// Writes ` name=0x…` for each key (but the pc's) and value into `out`
/// (at least [`MAX_PER_KEY`] bytes per key); returns the bytes written.
pub fn put_regs(out: &mut [u8], keys: &[Key], values: &[u64]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("ssse3") {
        // SAFETY: the CPU has SSSE3 (checked just above).
        return unsafe { put_regs_ssse3(out, keys, values) };
    }
    put_regs_with(out, keys, values, hex_by_pairs)
}

/// [`put_regs`] with SSSE3's digits, inlined into one loop.
///
/// # Safety
/// The CPU has SSSE3.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
unsafe fn put_regs_ssse3(out: &mut [u8], keys: &[Key], values: &[u64]) -> usize {
    put_regs_with(out, keys, values, |o, v| {
        // SAFETY: this function's contract.
        unsafe { hex_ssse3(o, v) }
    })
}

#[inline(always)]
fn put_regs_with(
    out: &mut [u8],
    keys: &[Key],
    values: &[u64],
    hex: impl Fn(&mut [u8; 18], u64) -> usize,
) -> usize {
    let mut at = 0;
    for (k, &v) in keys.iter().zip(values) {
        if k.len == 0 {
            continue;
        }
        // One bounds check a register: the key and the number both lie in
        // this slot (a key is at most 16 bytes, which `min` tells the
        // compiler).
        let slot: &mut [u8; MAX_PER_KEY] = (&mut out[at..at + MAX_PER_KEY]).try_into().unwrap();
        let key = usize::from(k.len).min(16);
        slot[..16].copy_from_slice(&k.bytes);
        let num: &mut [u8; 18] = (&mut slot[key..key + 18]).try_into().unwrap();
        at += key + hex(num, v);
    }
    at
}

/// Digits of `v`, and `v` shifted so its first digit is the top nibble.
#[inline(always)]
fn lead(v: u64) -> (u32, u64) {
    let digits = (64 - (v | 1).leading_zeros()).div_ceil(4);
    (digits, v << ((16 - digits) * 4))
}

/// The two lower-case hex digits of every byte value, high nibble first.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [DIGITS[i >> 4], DIGITS[i & 0xf]];
        i += 1;
    }
    t
};

/// Writes `0x` and `v` in lower-case hex over all of `out` (what follows
/// the digits is left over, to be overwritten or cut off); returns how
/// many bytes the number took.
fn hex_by_pairs(out: &mut [u8; 18], v: u64) -> usize {
    let (digits, top) = lead(v);
    out[0] = b'0';
    out[1] = b'x';
    for (pair, &byte) in out[2..].chunks_exact_mut(2).zip(&top.to_be_bytes()) {
        pair.copy_from_slice(&HEX_PAIRS[usize::from(byte)]);
    }
    2 + digits as usize
}

/// [`hex_by_pairs`] with SSSE3: the 16 nibbles spread to bytes, most
/// significant first, and made digits by one table shuffle.
///
/// # Safety
/// The CPU has SSSE3.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
#[allow(unused_unsafe)] // the intrinsics are safe here from Rust 1.87 on
unsafe fn hex_ssse3(out: &mut [u8; 18], v: u64) -> usize {
    use std::arch::x86_64::{
        _mm_and_si128, _mm_cvtsi64_si128, _mm_set1_epi8, _mm_setr_epi8, _mm_shuffle_epi8,
        _mm_srli_epi16, _mm_storeu_si128, _mm_unpacklo_epi8,
    };
    let (digits, top) = lead(v);
    out[0] = b'0';
    out[1] = b'x';
    // SAFETY: SSSE3 (this function's contract) and SSE2 (every x86-64);
    // the store is of 16 bytes at `out[2..18]`.
    unsafe {
        let bytes = _mm_cvtsi64_si128(top.swap_bytes() as i64);
        let low = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(bytes, low);
        let hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low);
        let nibbles = _mm_unpacklo_epi8(hi, lo);
        let table = _mm_setr_epi8(
            b'0' as i8, b'1' as i8, b'2' as i8, b'3' as i8, b'4' as i8, b'5' as i8, b'6' as i8,
            b'7' as i8, b'8' as i8, b'9' as i8, b'a' as i8, b'b' as i8, b'c' as i8, b'd' as i8,
            b'e' as i8, b'f' as i8,
        );
        let text = _mm_shuffle_epi8(table, nibbles);
        _mm_storeu_si128(out[2..].as_mut_ptr().cast(), text);
    }
    2 + digits as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<u64> {
        let mut v = vec![0, 1, 0xf, 0x10, 0xff, 0x100, 0xdead_beef, 1 << 63, u64::MAX];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for shift in 0..64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            v.push(x >> shift);
        }
        v
    }

    #[test]
    fn both_digit_writers_give_rusts_hex() {
        for v in samples() {
            let mut out = [0u8; 18];
            let n = hex_by_pairs(&mut out, v);
            assert_eq!(&out[..n], format!("{v:#x}").as_bytes());
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("ssse3") {
                let mut out = [0u8; 18];
                // SAFETY: checked just above.
                let n = unsafe { hex_ssse3(&mut out, v) };
                assert_eq!(&out[..n], format!("{v:#x}").as_bytes(), "ssse3");
            }
        }
    }

    #[test]
    fn registers_are_keys_and_numbers_without_the_pc() {
        let names: Vec<String> = ["zero", "pc", "sp"].map(String::from).into();
        let k = keys(&names);
        let mut out = vec![0u8; k.len() * MAX_PER_KEY];
        let n = put_regs(&mut out, &k, &[0, 0x400000, 0x7ffe_1234]);
        assert_eq!(&out[..n], b" zero=0x0 sp=0x7ffe1234");
        let mut by_pairs = vec![0u8; k.len() * MAX_PER_KEY];
        let m = put_regs_with(&mut by_pairs, &k, &[0, 0x400000, 0x7ffe_1234], hex_by_pairs);
        assert_eq!(by_pairs[..m], out[..n]);
        assert!(keys(&["a_name_of_15_by".to_string()]).is_empty());
    }
}
