//! What the other event modules read from QEMU and the guest: init's
//! settings, guest memory, and the user's branch flag.

use crate::config::Env;
use wire::MAX_SYSCALL_DATA;

/// What init set; None only if QEMU reported something before init, which
/// the C side never does (every caller then does nothing).
pub(super) fn env() -> Option<&'static Env> {
    crate::config::get().map(|c| &c.env)
}

/// Copies guest memory; None if any of it is unreadable.
pub(super) fn read_guest(addr: u64, len: usize) -> Option<Vec<u8>> {
    let f = env()?.read_guest?;
    let mut v = vec![0u8; len];
    // SAFETY: `v` has `len` writable bytes; QEMU's copy_from_user checks the
    // guest range and writes at most `len` bytes.
    (unsafe { f(addr, v.as_mut_ptr(), len) } == 0).then_some(v)
}

/// A NUL-terminated guest string of at most MAX_SYSCALL_DATA bytes.
pub(super) fn read_guest_str(addr: u64) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut a = addr;
    while out.len() < MAX_SYSCALL_DATA {
        // Read up to the next page boundary so a string ending just before an
        // unmapped page is still read.
        let n = (4096 - (a as usize & 4095)).min(MAX_SYSCALL_DATA - out.len());
        let piece = read_guest(a, n)?;
        if let Some(z) = piece.iter().position(|&b| b == 0) {
            out.extend_from_slice(&piece[..z]);
            return Some(out);
        }
        out.extend_from_slice(&piece);
        a += n as u64;
    }
    Some(out)
}

/// The user's `branch` flag for the instruction at `pc` (see `delay`).
pub fn branch_flag(pc: u64, ends_block: bool) -> bool {
    let Some(e) = env() else {
        return ends_block;
    };
    crate::delay::user_branch_flag(e.mips, pc, ends_block, |a| insn_word(e, a))
}

/// Whether the instruction at `pc` is a branch that leaves call stacks of
/// return addresses as they are: a local branch or a direct jump
/// (`crate::local`; on MIPS, a local branch whose delay slot leaves the
/// stack pointer alone, [`crate::delay::mips_local_branch`]).
pub fn local_branch(pc: u64) -> bool {
    let Some(e) = env() else {
        return false;
    };
    if e.mips {
        return insn_word(e, pc).is_some_and(|w| {
            pc.checked_add(4)
                .and_then(|a| insn_word(e, a))
                .is_some_and(|slot| crate::delay::mips_local_branch(w, slot))
        });
    }
    let Some(isa) = e.local else {
        return false;
    };
    // Not past the page's end, which may be unmapped: a shorter read
    // decides the cautious way (not local).
    let room = 4096 - (pc & 4095) as usize;
    read_guest(pc, crate::local::LONGEST.min(room)).is_some_and(|code| {
        crate::local::is_local(isa, &code, e.big_endian)
            || crate::local::is_direct_jump(isa, &code, e.big_endian)
    })
}

/// Whether the instruction at `pc` is the delay slot of a branch (MIPS:
/// the instruction before it is a branch or jump with a delay slot).
pub fn in_delay_slot(pc: u64) -> bool {
    env().is_some_and(|e| {
        e.mips
            && pc
                .checked_sub(4)
                .and_then(|a| insn_word(e, a))
                .is_some_and(crate::delay::mips_has_delay_slot)
    })
}

/// The 4-byte instruction word at `addr`, in the guest's byte order.
fn insn_word(e: &Env, addr: u64) -> Option<u32> {
    let b: [u8; 4] = read_guest(addr, 4)?.try_into().ok()?;
    Some(if e.big_endian {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    })
}
