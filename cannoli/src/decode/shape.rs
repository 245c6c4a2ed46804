//! What decoding needs to know about a stream.

use std::collections::BTreeMap;

use crate::ClientInfo;

/// What decoding needs to know about a stream, from its [`ClientInfo`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape<'a> {
    /// From [`addr_mask`].
    pub addr_mask: u64,
    /// Register words in a registers event.
    pub reg_words: usize,
    /// Bytes of a register in a `SOME_REGS` event: 4 for a guest whose
    /// registers are 4 bytes, else 8 (as the jitter packs them).
    pub reg_bytes: usize,
    pub syscall_names: &'a BTreeMap<u64, String>,
}

impl<'a> Shape<'a> {
    pub fn new(ci: &'a ClientInfo) -> Shape<'a> {
        Shape {
            addr_mask: addr_mask(ci.guest_bits),
            reg_words: ci.regs.count as usize,
            reg_bytes: if ci.regs.bytes == 4 { 4 } else { 8 },
            syscall_names: &ci.syscall_names,
        }
    }
}

/// Mask selecting the guest address bits.
#[inline]
pub(crate) fn addr_mask(guest_bits: u32) -> u64 {
    if guest_bits == 0 || guest_bits >= 64 {
        u64::MAX
    } else {
        (1u64 << guest_bits) - 1
    }
}
