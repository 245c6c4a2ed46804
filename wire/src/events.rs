//! The event layout's building blocks (see the crate doc for the table
//! of tags): the pc bits of a first word, the tags, the frame of the rare
//! events and the memory access tags.

/// Number of bits of the first word that carry the pc.
pub const PC_BITS: u32 = 56;
/// Mask selecting the pc bits of a first word.
pub const PC_MASK: u64 = (1 << PC_BITS) - 1;

/// Largest event the JIT writes, in bytes: a register event written in
/// place, of every register of a guest with 32 of 8 bytes (a `REGS`
/// event of 34 words). A chunk always has at least this much room left
/// when the JIT starts an event.
pub const MAX_JIT_EVENT: usize = 8 * 34;

/// Event tags (the top byte of an event's first word).
pub mod tag {
    /// Executed instruction, pc in the low 56 bits.
    pub const EXEC: u8 = 0x00;
    /// Executed instruction, pc in the next word.
    pub const EXEC_LONG: u8 = 0x01;
    /// Load of 16 bytes: value in two words, low then high.
    pub const LOAD128: u8 = 0x02;
    /// Store of 16 bytes, laid out like [`LOAD128`].
    pub const STORE128: u8 = 0x03;
    /// A translated block starts: its [`crate::blocks`] entry id in the low
    /// 56 bits.
    pub const RUN: u8 = 0x04;
    /// The running block was left after the instruction at the pc in the
    /// low 56 bits.
    pub const CUT: u8 = 0x05;
    /// A cut with the pc in the next word.
    pub const CUT_LONG: u8 = 0x06;
    /// Load of `1 << (tag & 3)` bytes.
    pub const LOAD: u8 = 0x10;
    /// Store of `1 << (tag & 3)` bytes.
    pub const STORE: u8 = 0x18;
    /// Load of `1 << (tag & 3)` (at most 4) bytes by a 32-bit guest: address
    /// and value share the second word (a third less data than `LOAD`).
    pub const LOAD32: u8 = 0x14;
    /// Store, packed like [`LOAD32`].
    pub const STORE32: u8 = 0x1c;
    /// Memory access with the pc in the next word; the low byte of the first
    /// word is the `LOAD`/`STORE` tag it stands for.
    pub const MEM_LONG: u8 = 0x1f;
    /// First tag of the framed events; every tag from here on is framed.
    pub const FRAMED: u8 = 0x20;
    /// Guest registers at an instruction (Register and Branch hooks).
    pub const REGS: u8 = 0x20;
    /// A guest system call with its arguments and result.
    pub const SYSCALL: u8 = 0x21;
    /// A new guest mapping.
    pub const MMAP: u8 = 0x22;
    /// Guest memory unmapped.
    pub const MUNMAP: u8 = 0x23;
    /// Guest memory protection changed.
    pub const MPROTECT: u8 = 0x24;
    /// A signal delivered to the guest.
    pub const SIGNAL: u8 = 0x25;
    /// A translated block's instruction lengths.
    pub const BLOCK: u8 = 0x26;
    /// Some guest registers at an instruction, packed at their guest size
    /// (see [`crate::some_regs_words`]): what a Register or Branch hook
    /// reports where the hook library narrowed the registers, or where
    /// they are 4 bytes each.
    pub const SOME_REGS: u8 = 0x27;
    /// The instruction at a pc took a number of the process's order, from
    /// the counter its threads share: where it ran among the other threads'
    /// ordered instructions.
    pub const ORDER: u8 = 0x28;
}

/// First word of a framed event: tag, 24 bits of `aux`, length in words.
#[inline]
pub fn frame(tag: u8, aux: u32, len_words: u32) -> u64 {
    debug_assert!(tag >= tag::FRAMED && aux < 1 << 24 && len_words >= 1);
    (tag as u64) << 56 | ((aux & 0xff_ffff) as u64) << 32 | len_words as u64
}

/// Splits a framed event's first word into (tag, aux, length in words).
#[inline]
pub fn unframe(w: u64) -> (u8, u32, u32) {
    ((w >> 56) as u8, ((w >> 32) & 0xff_ffff) as u32, w as u32)
}

/// `aux` of a registers event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum RegsKind {
    /// A Register hook: `regs` callback.
    Regs = 0,
    /// A Branch hook on an instruction that cannot end a basic block.
    BranchNo = 1,
    /// A Branch hook on an instruction that can end a basic block.
    BranchYes = 2,
}

/// Most registers a [`tag::SOME_REGS`] event can name: one bit each in its
/// mask word.
pub const MAX_SOME_REGS: u32 = 64;

/// Words of a [`tag::SOME_REGS`] event's values: one `reg_bytes`-byte value
/// (4 or 8) per bit of `mask`, packed in the order of the bits, from bit 0
/// up, the last word padded with zeros.
#[inline]
pub fn some_regs_words(mask: u64, reg_bytes: u32) -> usize {
    (mask.count_ones() as usize * reg_bytes as usize).div_ceil(8)
}

/// Bits of the `aux` of mmap and mprotect events.
pub mod map_flags {
    /// `PROT_READ`.
    pub const READ: u32 = 1;
    /// `PROT_WRITE`.
    pub const WRITE: u32 = 2;
    /// `PROT_EXEC`.
    pub const EXEC: u32 = 4;
    /// Not backed by a file (the path is empty).
    pub const ANON: u32 = 8;
    /// MAP_SHARED.
    pub const SHARED: u32 = 16;
}

/// Most bytes of a syscall's buffer carried in its event.
pub const MAX_SYSCALL_DATA: usize = 4096;

/// Words a framed event needs for `payload_bytes` bytes after `fixed_words`.
#[inline]
pub fn framed_len(fixed_words: usize, payload_bytes: usize) -> usize {
    fixed_words + payload_bytes.div_ceil(8)
}

/// True if `pc` fits in the first word of an event.
#[inline]
pub fn pc_fits(pc: u64) -> bool {
    pc >> PC_BITS == 0
}

/// Tag of a memory access of `size_log2` (0..=4) bytes: a 16-byte access
/// has its own tag, as its value takes two words.
#[inline]
pub fn mem_tag(store: bool, size_log2: u8) -> u8 {
    debug_assert!(size_log2 <= 4);
    match (size_log2, store) {
        (4, false) => tag::LOAD128,
        (4, true) => tag::STORE128,
        _ => (if store { tag::STORE } else { tag::LOAD }) | size_log2,
    }
}

/// Words of a memory event with tag `t` (as [`mem_tag`] gives it) and a
/// pc that fits the first word.
#[inline]
pub fn mem_words(t: u8) -> usize {
    if t == tag::LOAD128 || t == tag::STORE128 {
        4
    } else {
        3
    }
}

/// Tag of a packed (two-word) access of `size_log2` (0..=2) bytes by a
/// 32-bit guest.
#[inline]
pub fn mem32_tag(store: bool, size_log2: u8) -> u8 {
    debug_assert!(size_log2 <= 2);
    (if store { tag::STORE32 } else { tag::LOAD32 }) | size_log2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_do_not_overlap() {
        let mut seen = std::collections::BTreeSet::new();
        for t in [tag::EXEC, tag::EXEC_LONG, tag::MEM_LONG] {
            assert!(seen.insert(t));
        }
        for s in [false, true] {
            for l in 0..4 {
                assert!(seen.insert(mem_tag(s, l)));
            }
            for l in 0..3 {
                assert!(seen.insert(mem32_tag(s, l)));
            }
        }
        assert!(seen.iter().all(|&t| t < tag::FRAMED));
    }

    #[test]
    fn frames_roundtrip() {
        let w = frame(tag::SYSCALL, 1, 12);
        assert_eq!(w >> 56, tag::SYSCALL as u64);
        assert_eq!(unframe(w), (tag::SYSCALL, 1, 12));
        assert_eq!(
            unframe(frame(tag::SIGNAL, 0xff_ffff, u32::MAX)),
            (tag::SIGNAL, 0xff_ffff, u32::MAX)
        );
        assert_eq!(framed_len(10, 0), 10);
        assert_eq!(framed_len(10, 1), 11);
        assert_eq!(framed_len(10, 8), 11);
        assert_eq!(framed_len(10, 9), 12);
    }

    #[test]
    fn some_regs_sizes() {
        assert_eq!(some_regs_words(0, 4), 0);
        assert_eq!(some_regs_words(0b1, 4), 1);
        assert_eq!(some_regs_words(0b11, 4), 1);
        assert_eq!(some_regs_words(0b111, 4), 2);
        assert_eq!(some_regs_words(0b111, 8), 3);
        assert_eq!(some_regs_words(u32::MAX as u64, 4), 16);
        assert_eq!(some_regs_words(u64::MAX, 8), 64);
    }

    #[test]
    fn pc_fits_boundaries() {
        assert!(pc_fits(0x00ff_ffff_ffff_ffff));
        assert!(!pc_fits(0x0100_0000_0000_0000));
    }
}
