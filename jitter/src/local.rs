// SPDX-License-Identifier: GPL-2.0-or-later
//! Local branches: the branches that cannot change a call stack, decoded
//! from the guest's code at lift time, so that a call-stack tool's preset
//! (`presets::branches::call_stack_inst`) can leave their registers out.
//!
//! A local branch is conditional, goes to a pc-relative target, writes no
//! link register and leaves the stack pointer alone: a loop's back edge,
//! an `if`. Compilers make calls with a link (or, on x86, a push), tail
//! calls with an unconditional jump, and returns through a register or the
//! stack: none of those is one of these. Such a branch goes to another
//! instruction of its function with the same stack pointer, so a call
//! stack learns nothing from its registers; where it lands still starts a
//! block, with registers. Should a compiler make a conditional tail call
//! with one, the call stack keeps the caller's frame for the callee,
//! whose return still leaves it (a tail call leaves no return address of
//! its own): a stack shown inside the callee names the caller instead.
//!
//! A direct jump ([`is_direct_jump`]) is told apart: it may be a tail
//! call, which only a call stack of return addresses can ignore.
//!
//! MIPS, whose branches have a delay slot that may move the stack pointer,
//! is decided in `delay` (its direct jumps too); 32-bit Arm is not decided
//! at all (whether the code at a pc is Arm or Thumb is not known here), and
//! keeps every branch's registers.

/// The guests whose local branches this module decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// x86_64 and i386: the same encodings of `jcc`, `jrcxz` and `loop`.
    X86,
    AArch64,
    RiscV,
    /// PowerPC, either byte order.
    Ppc,
}

impl Isa {
    /// From QEMU's target name.
    pub fn of(arch: &str) -> Option<Isa> {
        match arch {
            "x86_64" | "i386" => Some(Isa::X86),
            "aarch64" | "aarch64_be" => Some(Isa::AArch64),
            "riscv64" | "riscv32" => Some(Isa::RiscV),
            "ppc64" | "ppc64le" | "ppc" => Some(Isa::Ppc),
            _ => None,
        }
    }
}

/// The most bytes of code [`is_local`] reads (x86: two prefixes and
/// `0f 8x`; a word elsewhere).
pub const LONGEST: usize = 4;

/// Whether the instruction whose first bytes are `code` (up to
/// [`LONGEST`] of them; fewer where the page ends) is a local branch.
/// `big_endian`: the guest's byte order, that of PowerPC's words (AArch64
/// fetches its instructions little-endian in either).
pub fn is_local(isa: Isa, code: &[u8], big_endian: bool) -> bool {
    match isa {
        Isa::X86 => x86_local(code),
        Isa::AArch64 => word(code, false).is_some_and(a64_local),
        Isa::RiscV => riscv_local(code),
        Isa::Ppc => word(code, big_endian).is_some_and(ppc_local),
    }
}

/// Whether the instruction whose first bytes are `code` is a direct jump:
/// unconditional, to a pc-relative target, without link (x86 `jmp rel8`
/// and `jmp rel32`, AArch64 `b`, RISC-V `j` and `c.j`, PowerPC `b` and a
/// `bc` that always branches). Compilers make a loop's back edge with one
/// as often as with a conditional branch (busybox `sha256sum`'s round loop
/// on AArch64 ends in `b`), and a tail call too. A call stack that names
/// its frames by their return addresses alone, as `cannoli heap`'s do, is
/// the same without a tail call's frame: the callee returns where its
/// caller would have, with the caller's stack pointer, so the frame the
/// return leaves is the caller's either way. Where the jump lands still
/// starts a block, with registers. A stack that names the functions it
/// entered (`cannoli backtrace`) needs the jump, and does not ask.
pub fn is_direct_jump(isa: Isa, code: &[u8], big_endian: bool) -> bool {
    match isa {
        Isa::X86 => x86_jump(code),
        // B: 000101 imm26.
        Isa::AArch64 => word(code, false).is_some_and(|w| w >> 26 == 0b00_0101),
        Isa::RiscV => riscv_jump(code),
        Isa::Ppc => word(code, big_endian).is_some_and(ppc_jump),
    }
}

/// The 4-byte word `code` starts with, in the byte order given (none
/// where the page ended first).
fn word(code: &[u8], big_endian: bool) -> Option<u32> {
    let b: [u8; 4] = code.get(..4)?.try_into().ok()?;
    Some(if big_endian {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    })
}

/// x86: `jmp rel8` (`eb`) and `jmp rel32` (`e9`), after at most MPX's
/// `bnd` (`f2`). An operand-size prefix (a 16-bit target) leaves it not
/// one.
fn x86_jump(code: &[u8]) -> bool {
    let bnd = usize::from(code.first() == Some(&0xf2));
    matches!(code.get(bnd), Some(0xeb | 0xe9))
}

/// RISC-V: `jal` with `rd` x0 (`j`), and the compressed `c.j` (quadrant
/// 1, funct3 `101`). RV32's `c.jal` (funct3 `001`) links, and is the
/// 64-bit guests' `c.addiw`: neither.
fn riscv_jump(code: &[u8]) -> bool {
    let Some(&[lo, hi]) = code.get(..2) else {
        return false;
    };
    let half = u16::from_le_bytes([lo, hi]);
    if half & 3 != 3 {
        return half & 0xe003 == 0xa001;
    }
    let Some(b) = code.get(..4) else {
        return false;
    };
    let w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    w & 0xfff == 0x06f
}

/// PowerPC: `b` (primary opcode 18) and `bc` (16) whose `BO` says
/// "branch always" (`1z1zz`), relative (`AA` 0) and without link (`LK`
/// 0).
fn ppc_jump(w: u32) -> bool {
    let bo = (w >> 21) & 31;
    let always = w >> 26 == 18 || (w >> 26 == 16 && bo & 0b10100 == 0b10100);
    always && w & 3 == 0
}

/// x86: `jcc rel8` (`70`-`7f`), `jcc rel32` (`0f 80`-`0f 8f`), `jrcxz`
/// (`e3`) and `loop`/`loope`/`loopne` (`e0`-`e2`), after at most two of
/// the prefixes compilers put on them: the branch hints (`2e`, `3e`) and
/// MPX's `bnd` (`f2`). An operand-size prefix (which truncates the target
/// on some CPUs) or any other leaves it not local.
fn x86_local(code: &[u8]) -> bool {
    let hints = code
        .iter()
        .take(2)
        .take_while(|&&b| matches!(b, 0x2e | 0x3e | 0xf2))
        .count();
    matches!(
        code.get(hints..),
        Some([0x70..=0x7f | 0xe0..=0xe3, ..] | [0x0f, 0x80..=0x8f, ..])
    )
}

/// AArch64: `b.cond` and `bc.cond`, `cbz`/`cbnz`, `tbz`/`tbnz`.
fn a64_local(w: u32) -> bool {
    // B.cond (bit 4 clear) and BC.cond (bit 4 set): 0101 0100 ...
    let cond = w & 0xff00_0000 == 0x5400_0000;
    // CBZ/CBNZ: sf 011010 op; TBZ/TBNZ: b5 011011 op.
    let compare = w & 0x7e00_0000 == 0x3400_0000;
    let test = w & 0x7e00_0000 == 0x3600_0000;
    cond || compare || test
}

/// RISC-V: `beq`, `bne`, `blt`, `bge`, `bltu`, `bgeu` (opcode `1100011`,
/// funct3 not 2 or 3, which are reserved), and the compressed `c.beqz`
/// and `c.bnez` (quadrant 1, funct3 `110` and `111`).
fn riscv_local(code: &[u8]) -> bool {
    let Some(&[lo, hi]) = code.get(..2) else {
        return false;
    };
    let half = u16::from_le_bytes([lo, hi]);
    if half & 3 != 3 {
        return half & 3 == 1 && matches!(half >> 13, 6 | 7);
    }
    let Some(b) = code.get(..4) else {
        return false;
    };
    let w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    w & 0x7f == 0x63 && !matches!((w >> 12) & 7, 2 | 3)
}

/// PowerPC: `bc` (primary opcode 16) without link (`LK` 0), relative
/// (`AA` 0), whose `BO` does not say "branch always" (`1z1zz`): `beq`,
/// `bne`, `bdnz` and the like. `bclr` (a conditional return) and `bcctr`
/// are other opcodes.
fn ppc_local(w: u32) -> bool {
    let bo = (w >> 21) & 31;
    w >> 26 == 16 && w & 3 == 0 && bo & 0b10100 != 0b10100
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x86(bytes: &[u8]) -> bool {
        is_local(Isa::X86, bytes, false)
    }

    #[test]
    fn x86_conditional_jumps_are_local() {
        assert!(x86(&[0x75, 0xf0])); // jne -16
        assert!(x86(&[0x7e, 0x10])); // jle +16
        assert!(x86(&[0x0f, 0x84, 0x10, 0x00])); // je rel32
        assert!(x86(&[0x0f, 0x8f, 0x10, 0x00])); // jg rel32
        assert!(x86(&[0xe3, 0x05])); // jrcxz
        assert!(x86(&[0xe2, 0xfe])); // loop
        assert!(x86(&[0x3e, 0x74, 0x02])); // ds je (taken hint)
        assert!(x86(&[0xf2, 0x0f, 0x85, 0x00])); // bnd jne rel32
    }

    #[test]
    fn x86_calls_jumps_and_returns_are_not() {
        assert!(!x86(&[0xeb, 0xfe])); // jmp rel8
        assert!(!x86(&[0xe9, 0, 0, 0])); // jmp rel32
        assert!(!x86(&[0xe8, 0, 0, 0])); // call rel32
        assert!(!x86(&[0xc3])); // ret
        assert!(!x86(&[0xf2, 0xc3])); // bnd ret
        assert!(!x86(&[0xff, 0xe0])); // jmp *%rax
        assert!(!x86(&[0xff, 0xd0])); // call *%rax
        assert!(!x86(&[0x66, 0x75, 0x00])); // jne with an operand size
        assert!(!x86(&[0x0f, 0x05])); // syscall
        assert!(!x86(&[0x0f, 0x90, 0xc0])); // seto %al (0f 9x)
        assert!(!x86(&[0x0f])); // cut at a page's end
        assert!(!x86(&[]));
    }

    fn a64(w: u32) -> bool {
        is_local(Isa::AArch64, &w.to_le_bytes(), false)
    }

    #[test]
    fn aarch64_conditional_branches_are_local() {
        assert!(a64(0x5400_0041)); // b.ne +8
        assert!(a64(0x54ff_ffe0)); // b.eq -4
        assert!(a64(0x5400_0050)); // bc.eq +8
        assert!(a64(0xb400_0040)); // cbz x0, +8
        assert!(a64(0x3500_0040)); // cbnz w0, +8
        assert!(a64(0x3600_0040)); // tbz w0, #0, +8
        assert!(a64(0xb7f8_0040)); // tbnz x0, #63, +8

        // A big-endian guest's code is little-endian all the same.
        assert!(is_local(Isa::AArch64, &0x5400_0041u32.to_le_bytes(), true));
    }

    #[test]
    fn aarch64_calls_jumps_and_returns_are_not() {
        assert!(!a64(0x1400_0002)); // b +8
        assert!(!a64(0x9400_0002)); // bl +8
        assert!(!a64(0xd65f_03c0)); // ret
        assert!(!a64(0xd63f_0200)); // blr x16
        assert!(!a64(0xd61f_0220)); // br x17
        assert!(!a64(0xd400_0001)); // svc #0
        assert!(!a64(0x9100_43ff)); // add sp, sp, #16
        assert!(!a64(0xd503_201f)); // nop
    }

    #[test]
    fn direct_jumps_are_told_on_each_guest() {
        let x = |b: &[u8]| is_direct_jump(Isa::X86, b, false);
        assert!(x(&[0xeb, 0xfe])); // jmp rel8
        assert!(x(&[0xe9, 0, 0, 0])); // jmp rel32
        assert!(x(&[0xf2, 0xe9, 0, 0])); // bnd jmp rel32
        assert!(!x(&[0x66, 0xe9, 0, 0])); // jmp with an operand size
        assert!(!x(&[0xe8, 0, 0, 0])); // call rel32
        assert!(!x(&[0xff, 0xe0])); // jmp *%rax
        assert!(!x(&[0x75, 0xf0])); // jne (local, not a jump)
        assert!(!x(&[]));

        let a = |w: u32| is_direct_jump(Isa::AArch64, &w.to_le_bytes(), false);
        assert!(a(0x1400_0002)); // b +8
        assert!(a(0x17ff_ffca)); // b -216 (busybox sha256sum's round loop)
        assert!(!a(0x9400_0002)); // bl +8
        assert!(!a(0xd61f_0220)); // br x17
        assert!(!a(0x5400_0041)); // b.ne +8

        let r = |b: &[u8]| is_direct_jump(Isa::RiscV, b, false);
        assert!(r(&0x0080_006fu32.to_le_bytes())); // j +8
        assert!(r(&0xa011u16.to_le_bytes())); // c.j +4
        assert!(!r(&0x0080_00efu32.to_le_bytes())); // jal ra, +8
        assert!(!r(&0x2505u16.to_le_bytes())); // c.addiw a0, 1 (c.jal on RV32)
        assert!(!r(&0x0000_8067u32.to_le_bytes())); // ret
        assert!(!r(&0x8082u16.to_le_bytes())); // c.jr ra
        assert!(!r(&[0x6f])); // cut at a page's end

        let p = |w: u32| is_direct_jump(Isa::Ppc, &w.to_le_bytes(), false);
        assert!(p(0x4800_0008)); // b +8
        assert!(p(0x4280_0008)); // bc 20, 0, +8: always
        assert!(!p(0x4800_0009)); // bl +8
        assert!(!p(0x4800_000a)); // ba (absolute)
        assert!(!p(0x4182_0008)); // beq +8
        assert!(!p(0x4e80_0020)); // blr
        assert!(is_direct_jump(
            Isa::Ppc,
            &0x4800_0008u32.to_be_bytes(),
            true
        ));
    }

    fn rv(bytes: &[u8]) -> bool {
        is_local(Isa::RiscV, bytes, false)
    }

    #[test]
    fn riscv_conditional_branches_are_local() {
        assert!(rv(&0x0005_0463u32.to_le_bytes())); // beqz a0, +8
        assert!(rv(&0x00b5_1463u32.to_le_bytes())); // bne a0, a1, +8
        assert!(rv(&0x00b5_4463u32.to_le_bytes())); // blt a0, a1, +8
        assert!(rv(&0x00b5_7463u32.to_le_bytes())); // bgeu a0, a1, +8
        assert!(rv(&0xc111u16.to_le_bytes())); // c.beqz a0, +4
        assert!(rv(&0xe111u16.to_le_bytes())); // c.bnez a0, +4
    }

    #[test]
    fn riscv_calls_jumps_and_returns_are_not() {
        assert!(!rv(&0x0080_00efu32.to_le_bytes())); // jal ra, +8
        assert!(!rv(&0x0080_006fu32.to_le_bytes())); // j +8
        assert!(!rv(&0x0000_8067u32.to_le_bytes())); // ret (jalr x0, 0(ra))
        assert!(!rv(&0x8082u16.to_le_bytes())); // c.jr ra (ret)
        assert!(!rv(&0xa011u16.to_le_bytes())); // c.j +4
        assert!(!rv(&0x00b5_2463u32.to_le_bytes())); // funct3 2: reserved
        assert!(!rv(&0x1141u16.to_le_bytes())); // c.addi sp, sp, -16
        assert!(!rv(&[0x63])); // cut at a page's end
        assert!(!rv(&[0x63, 0x04])); // a 4-byte word cut short
    }

    fn ppc(w: u32) -> bool {
        is_local(Isa::Ppc, &w.to_le_bytes(), false)
    }

    #[test]
    fn ppc_conditional_branches_are_local() {
        assert!(ppc(0x4182_0008)); // beq +8
        assert!(ppc(0x4082_0008)); // bne +8
        assert!(ppc(0x4200_fff8)); // bdnz -8
        assert!(ppc(0x419d_0010)); // bgt cr7, +16
        assert!(is_local(Isa::Ppc, &0x4182_0008u32.to_be_bytes(), true));
    }

    #[test]
    fn ppc_calls_jumps_and_returns_are_not() {
        assert!(!ppc(0x4800_0008)); // b +8
        assert!(!ppc(0x4800_0009)); // bl +8
        assert!(!ppc(0x4e80_0020)); // blr
        assert!(!ppc(0x4d82_0020)); // beqlr
        assert!(!ppc(0x4e80_0420)); // bctr
        assert!(!ppc(0x4182_0009)); // beql +8 (links)
        assert!(!ppc(0x4182_000a)); // beqa (absolute)
        assert!(!ppc(0x4280_0008)); // bc 20, 0, +8: always (a `b`)
        assert!(!ppc(0x4400_0002)); // sc
    }
}
