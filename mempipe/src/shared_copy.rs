//! Copying words out of memory another process may write at the same time.
//!
//! Rust gives such memory no `&[u8]` and no plain reads: either would be a
//! data race in its model. A relaxed atomic load per word is sound, and was
//! this crate's copy, but it moves 8 bytes an instruction where `memcpy`
//! moves 32 or 64: with chunks of register events it was nearly a fifth
//! of `cannoli heap`'s time (docs/performance.md). On x86-64 the copy is one `rep movsb`, the string move the
//! CPU runs at `memcpy` speed. It is inline assembly, outside Rust's memory
//! model: what it does is what a copy by relaxed byte-wise atomic loads
//! would do (each byte is some value the memory held), which is all the
//! callers assume. Elsewhere the atomic loop remains.

/// Copies `n` words from `src` to `dst`.
///
/// # Safety
/// `src` is 8-aligned and `n` words from it lie in a live mapping that this
/// process only ever reads, atomically or through this function; `dst` is
/// valid for `n` words of writes and overlaps no part of `src`.
#[inline]
pub(crate) unsafe fn copy_words(src: *const u64, dst: *mut u64, n: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the contract above: n * 8 bytes are readable at src and
        // writable at dst, apart. `rep movsb` reads and writes exactly
        // those (forwards: the ABI keeps the direction flag clear), and
        // touches nothing else but the three registers it is given.
        unsafe {
            std::arch::asm!(
                "rep movsb",
                inout("rcx") n * 8 => _,
                inout("rsi") src => _,
                inout("rdi") dst => _,
                options(nostack, preserves_flags),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    for i in 0..n {
        use std::sync::atomic::{AtomicU64, Ordering};
        // SAFETY: i < n: inside the mapping, 8-aligned, only ever read
        // atomically (the contract above); dst has room for word i.
        unsafe {
            let w = AtomicU64::from_ptr(src.add(i).cast_mut()).load(Ordering::Relaxed);
            dst.add(i).write(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::copy_words;

    #[test]
    fn copies_exactly_the_words_asked_for() {
        let src: Vec<u64> = (0..37).map(|i| i * 0x0101_0101_0101_0101).collect();
        for n in [0, 1, 2, 7, 36] {
            let mut dst = vec![u64::MAX; 37];
            // SAFETY: both vectors hold 37 words, n <= 36; src is only read.
            unsafe { copy_words(src.as_ptr(), dst.as_mut_ptr(), n) };
            assert_eq!(dst[..n], src[..n]);
            assert!(dst[n..].iter().all(|&w| w == u64::MAX), "n = {n}");
        }
    }
}
