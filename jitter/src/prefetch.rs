//! Cache lines of the ring fetched for writing before a helper or the
//! JIT's events reach them.
//!
//! A helper that writes a register event (`events::registers`) stores some
//! twenty words per hit into lines of the ring that the client's workers
//! read last, on other cores: each line's first store waits for the line
//! to be handed over. Asking for the lines a kilobyte ahead, for writing
//! (`prefetchw`), lets that hand-over overlap the guest code between hits.
//! QEMU's CPU time under `cannoli probe` of ten consecutive pcs of busybox
//! `sha256sum` on mipsel (1.09 M hits; two sets of 41 paired runs on the
//! 2-core VM): 12 and 21 ms less of some 235 ms, median of the pairs, the
//! run faster in three pairs of four; that is 10 to 20 ns of a hit's 60 to
//! 65. A read prefetch (`prefetcht0`) gained nothing: the store still had
//! to claim the line.
//!
//! The JIT's own events ask for the same line ahead, once at a hooked
//! block's first event and once per 64 bytes of events after it
//! (`codegen::fetched`). QEMU's CPU time on the bench's rows on the 2-core
//! VM (four invocations of five runs each, medians, 2026-11-28): PC+mem
//! 1.010 to 0.845 s on busybox `sha256sum`, 1.230 to 1.093 s on sortcrc,
//! 0.107 to 0.090 s on the nop loop; PC alone unchanged on busybox and
//! sortcrc, 0.073 to 0.065 s on the nop loop.
//!
//! `prefetchw` is asked of the CPU (CPUID) once: a processor without it
//! may fault on the opcode.

use std::sync::LazyLock;

/// How far past the cursor the lines fetched start: a few hits ahead.
pub const AHEAD: u64 = 1024;

/// Whether this CPU has `prefetchw` (CPUID 0x8000_0001, ECX bit 8).
static HAS_PREFETCHW: LazyLock<bool> = LazyLock::new(|| {
    #[cfg(target_arch = "x86_64")]
    #[allow(unused_unsafe)] // `__cpuid` is safe from Rust 1.87, unsafe before
    // SAFETY: CPUID exists on every x86-64 processor; leaves past the
    // highest one reported are not asked for.
    unsafe {
        use std::arch::x86_64::__cpuid;
        __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & 1 << 8 != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
});

/// Whether this CPU has `prefetchw`, for code that emits it.
pub fn has_prefetchw() -> bool {
    *HAS_PREFETCHW
}

/// Asks for the three cache lines [`AHEAD`] bytes past `cursor` for
/// writing, where the CPU can and they lie before `end` (the window's end:
/// past it lies a chunk a worker may be reading, whose lines this core
/// must not take from it).
#[inline(always)]
pub fn ring_lines_ahead(cursor: u64, end: u64) {
    #[cfg(target_arch = "x86_64")]
    if *HAS_PREFETCHW && cursor.checked_add(AHEAD + 192).is_some_and(|e| e <= end) {
        let p = cursor + AHEAD;
        // SAFETY: a prefetch is a hint: it reads and writes nothing the
        // program sees and faults on no address, mapped or not; the CPU has
        // the instruction (checked above).
        unsafe {
            std::arch::asm!(
                "prefetchw [{0}]",
                "prefetchw [{0} + 64]",
                "prefetchw [{0} + 128]",
                in(reg) p,
                options(nostack, readonly, preserves_flags)
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (cursor, end);
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefetching_anywhere_is_harmless() {
        // Unmapped and null addresses: a hint, never a fault; none past
        // the end, or where the sum would wrap.
        for p in [0, 8, 0x7fff_ffff_f000, u64::MAX - 64] {
            super::ring_lines_ahead(p, u64::MAX);
            super::ring_lines_ahead(p, p);
        }
    }
}
