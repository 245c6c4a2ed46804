//! Branch delay slots: on MIPS a branch's jump is translated together with
//! the instruction after it (its delay slot), so the TCG ops that end the
//! block belong to the delay slot. The user's `branch` flag means "this
//! instruction transfers control", so on MIPS it is moved back onto the
//! branch itself by decoding the instruction words.

/// Whether a MIPS32/MIPS64 (not microMIPS, not MIPS16) instruction is a
/// branch or jump with a delay slot.
pub fn mips_has_delay_slot(w: u32) -> bool {
    let op = w >> 26;
    let rs = (w >> 21) & 31;
    let rt = (w >> 16) & 31;
    match op {
        // J, JAL, BEQ, BNE, BLEZ, BGTZ and the "likely" forms.
        2..=7 | 20..=23 => true,
        // SPECIAL: JR, JALR.
        0 => matches!(w & 63, 8 | 9),
        // REGIMM: BLTZ, BGEZ(L), BLTZ(A)L(L), BGEZAL (BAL), ...
        1 => matches!(rt, 0..=3 | 16..=19),
        // COP1/COP2: BC1x, BC2x (rs = 8), BC1ANY2/4 (rs = 9, 10).
        17 | 18 => matches!(rs, 8..=10),
        _ => false,
    }
}

/// Whether a MIPS branch `w` whose delay slot is `slot` leaves a call stack
/// of return addresses as it is: a branch or jump that writes no link
/// register (`beq`/`bne`, `blez`, `bgtz`, `bltz`, `bgez`, their "likely"
/// forms, `bc1t`/`bc1f` and the like, the unconditional `b` and `j`), whose
/// delay slot does not name the stack pointer as a register it may write
/// (`rt` or `rd` of 29). Calls link, and returns and most tail calls go
/// through a register (`jr`): neither is one of these. A conditional
/// branch goes to another instruction of the same function with the same
/// stack pointer; `b` and `j` may be a tail call too, which leaves a stack
/// of return addresses as it is (`crate::local::is_direct_jump` says why).
/// A call-stack tool of return addresses learns nothing from their
/// registers.
pub fn mips_local_branch(w: u32, slot: u32) -> bool {
    let op = w >> 26;
    let rs = (w >> 21) & 31;
    let rt = (w >> 16) & 31;
    let without_link = match op {
        // J; BEQ, BNE, BLEZ, BGTZ and their likely forms (`beq zero,
        // zero` is `b`).
        2 | 4..=7 | 20..=23 => true,
        // REGIMM: BLTZ, BGEZ (`bgez zero` is `b`), BLTZL, BGEZL; not the
        // linking forms (`bal` among them).
        1 => matches!(rt, 0..=3),
        // COP1/COP2 condition branches.
        17 | 18 => matches!(rs, 8..=10),
        _ => false,
    };
    let slot_rt = (slot >> 16) & 31;
    let slot_rd = (slot >> 11) & 31;
    without_link && slot_rt != 29 && slot_rd != 29 && !mips_has_delay_slot(slot)
}

/// The `branch` flag the user's hook sees for the instruction at `pc`.
/// `ends_block`: its TCG ops may end the translation block. `word(addr)`
/// reads a guest instruction word (None if unreadable).
pub fn user_branch_flag(
    mips: bool,
    pc: u64,
    ends_block: bool,
    word: impl Fn(u64) -> Option<u32>,
) -> bool {
    if !mips {
        return ends_block;
    }
    if word(pc).is_some_and(mips_has_delay_slot) {
        return true;
    }
    // A delay slot carries its branch's block end; anything else that ends
    // the block (syscall, break, trap, eret, a compact branch) is itself one.
    ends_block
        && !pc
            .checked_sub(4)
            .and_then(&word)
            .is_some_and(mips_has_delay_slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_mips_branches() {
        // Encodings from the MIPS32 manual (assembled by hand):
        assert!(mips_has_delay_slot(0x0c100200)); // jal 0x400800
        assert!(mips_has_delay_slot(0x08100200)); // j 0x400800
        assert!(mips_has_delay_slot(0x03e00008)); // jr ra
        assert!(mips_has_delay_slot(0x0320f809)); // jalr t9
        assert!(mips_has_delay_slot(0x10400003)); // beq v0, zero, +3
        assert!(mips_has_delay_slot(0x14a0fffe)); // bne a1, zero, -2
        assert!(mips_has_delay_slot(0x04110004)); // bal +4
        assert!(mips_has_delay_slot(0x1000ffff)); // b -1 (beq zero, zero)
        assert!(!mips_has_delay_slot(0x27bdffe0)); // addiu sp, sp, -32
        assert!(!mips_has_delay_slot(0x0000000c)); // syscall
        assert!(!mips_has_delay_slot(0x00000000)); // nop
        assert!(!mips_has_delay_slot(0x8fbf001c)); // lw ra, 28(sp)
    }

    #[test]
    fn local_branches() {
        let nop = 0;
        // Conditional, no link: local.
        assert!(mips_local_branch(0x10400003, nop)); // beq v0, zero, +3
        assert!(mips_local_branch(0x14a0fffe, nop)); // bne a1, zero, -2
        assert!(mips_local_branch(0x1c400002, nop)); // bgtz v0, +2
        assert!(mips_local_branch(0x18400002, nop)); // blez v0, +2
        assert!(mips_local_branch(0x04400002, nop)); // bltz v0, +2
        assert!(mips_local_branch(0x04410002, nop)); // bgez v0, +2
        assert!(mips_local_branch(0x54a0fffe, nop)); // bnel a1, zero, -2
        assert!(mips_local_branch(0x45010002, nop)); // bc1t +2
        assert!(mips_local_branch(0x14a0fffe, 0x8fbf001c)); // slot: lw ra, 28(sp)

        // Unconditional and direct, no link: a back edge or a tail call.
        assert!(mips_local_branch(0x1000ffff, nop)); // b -1
        assert!(mips_local_branch(0x1000ffc4, 0x00402825)); // busybox sha256sum's b, slot move a1, v0
        assert!(mips_local_branch(0x04010004, nop)); // bgez zero, +4 (b)
        assert!(mips_local_branch(0x08100200, nop)); // j
        assert!(!mips_local_branch(0x08100200, 0x27bd0020)); // j, slot addiu sp, sp, 32

        // Linking or through a register: not.
        assert!(!mips_local_branch(0x04110004, nop)); // bal +4
        assert!(!mips_local_branch(0x04500004, nop)); // bltzal v0, +4
        assert!(!mips_local_branch(0x0c100200, nop)); // jal
        assert!(!mips_local_branch(0x03e00008, nop)); // jr ra
        assert!(!mips_local_branch(0x0320f809, nop)); // jalr t9

        // A delay slot that may move the stack pointer keeps it.
        assert!(!mips_local_branch(0x14a0fffe, 0x27bdffe0)); // addiu sp, sp, -32
        assert!(!mips_local_branch(0x14a0fffe, 0x03a0e821)); // move sp, sp (addu sp, sp, zero)
        assert!(!mips_local_branch(0x10400003, 0x8fbd0010)); // lw sp, 16(sp)

        // Not branches.
        assert!(!mips_local_branch(0x27bdffe0, nop));
        assert!(!mips_local_branch(0x0000000c, nop));
    }

    #[test]
    fn flag_moves_from_delay_slot_to_branch() {
        // 0x100: jal, 0x104: nop (delay slot, carries the block end),
        // 0x108: syscall (ends the block itself), 0x10c: addiu.
        let code = |a: u64| match a {
            0x100 => Some(0x0c100200),
            0x104 => Some(0),
            0x108 => Some(0x0000000c),
            0x10c => Some(0x27bdffe0),
            _ => None,
        };
        assert!(user_branch_flag(true, 0x100, false, code));
        assert!(!user_branch_flag(true, 0x104, true, code));
        assert!(user_branch_flag(true, 0x108, true, code));
        assert!(!user_branch_flag(true, 0x10c, false, code));
        // Other guests: the TCG flag as it is.
        assert!(user_branch_flag(false, 0x104, true, code));
        assert!(!user_branch_flag(false, 0x100, false, code));
    }
}
