// SPDX-License-Identifier: GPL-2.0-or-later
//! Instruction lengths, for the last instruction of a block: the trace gives
//! where instructions start, the drcov file wants block sizes in bytes.
//!
//! QEMU itself says how long each instruction it translated is (the block
//! events, see `mod.rs`), and that is what the tool uses. This is the
//! fallback for a pc without one: decoded from the instruction's bytes where
//! the length depends on them, else the architecture's fixed size.

/// How a guest architecture's instruction lengths are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Every instruction has this many bytes (A32 is `Fixed(4)`).
    Fixed(u64),
    /// RISC-V: 2 bytes (compressed) unless the low two bits are `11`.
    Riscv,
    /// s390x: 2, 4 or 6 bytes by the top two bits of the first byte.
    S390x,
    /// x86 with this bitness (32 or 64), decoded.
    X86(u32),
    /// ARM Thumb (Thumb-2): 4 bytes if the first halfword's top five bits
    /// are `0b11101`, `0b11110` or `0b11111`, else 2.
    Thumb,
    /// ARM, mode unknown: the pc alone does not tell A32 (4 bytes) from
    /// Thumb (2 or 4). [`Isa::arm_mode`] picks one for a pc.
    Arm,
    /// Unknown: one byte (the block covers each instruction's first byte,
    /// which is what coverage tools look up).
    Unknown,
}

impl Isa {
    /// The encoding of QEMU's architecture `arch` (the launcher's names and
    /// the uname machine names QEMU reports, like `armv5tel` or `i686`).
    pub fn of(arch: &str) -> Isa {
        match arch {
            "riscv32" | "riscv64" => Isa::Riscv,
            "s390x" => Isa::S390x,
            "x86_64" => Isa::X86(64),
            "i386" | "i486" | "i586" | "i686" => Isa::X86(32),
            "arm" | "armeb" => Isa::Arm,
            a if a.starts_with("armv") => Isa::Arm,
            "mips" | "mipsel" | "mips64" | "mips64el" | "mipsn32" | "mipsn32el" | "aarch64"
            | "aarch64_be" | "ppc" | "ppc64" | "ppc64le" | "sparc" | "sparc64" | "loongarch64"
            | "hppa" | "alpha" | "or1k" | "microblaze" | "microblazeel" => Isa::Fixed(4),
            "sh4" | "sh4eb" => Isa::Fixed(2),
            _ => Isa::Unknown,
        }
    }

    /// For [`Isa::Arm`], the encoding of the code at `pc`: `thumb` is what
    /// the file says about that address (its `$t`/`$a` mapping symbols),
    /// `None` if nothing. A pc that is not a multiple of 4 can only be
    /// Thumb; otherwise, without the file's word, Thumb, which Debian's
    /// armhf toolchain and every armhf library default to. Other ISAs are
    /// returned unchanged.
    pub fn arm_mode(self, pc: u64, thumb: Option<bool>) -> Isa {
        if self != Isa::Arm {
            return self;
        }
        match thumb {
            _ if pc & 2 != 0 => Isa::Thumb,
            Some(false) => Isa::Fixed(4),
            _ => Isa::Thumb,
        }
    }

    /// Whether [`Isa::len`] needs the instruction's bytes.
    pub fn needs_code(self) -> bool {
        matches!(
            self,
            Isa::Riscv | Isa::S390x | Isa::X86(_) | Isa::Thumb | Isa::Arm
        )
    }

    /// The smallest instruction: the length used when the bytes are not
    /// available (anonymous memory, a file that cannot be read).
    pub fn min_len(self) -> u64 {
        match self {
            Isa::Fixed(n) => n,
            Isa::Riscv | Isa::S390x | Isa::Thumb | Isa::Arm => 2,
            Isa::X86(_) | Isa::Unknown => 1,
        }
    }

    /// Length of the instruction whose bytes start `code` (as many bytes
    /// as are available, up to 15), or [`Isa::min_len`] without them.
    /// Thumb halfwords are read little-endian: ARMv7's instructions are
    /// little-endian even on a big-endian (BE8) guest.
    pub fn len(self, code: Option<&[u8]>) -> u64 {
        let code = code.filter(|c| !c.is_empty());
        match (self, code) {
            (Isa::Fixed(n), _) => n,
            (Isa::Riscv, Some(c)) => {
                if c[0] & 3 == 3 {
                    4
                } else {
                    2
                }
            }
            (Isa::S390x, Some(c)) => match c[0] >> 6 {
                0 => 2,
                1 | 2 => 4,
                _ => 6,
            },
            (Isa::X86(bits), Some(c)) => {
                let mut d = iced_x86::Decoder::new(bits, c, iced_x86::DecoderOptions::NONE);
                let insn = d.decode();
                if insn.is_invalid() {
                    1
                } else {
                    insn.len() as u64
                }
            }
            (Isa::Thumb | Isa::Arm, Some(c)) if c.len() >= 2 => {
                // The top five bits of the first halfword (its second byte).
                match c[1] >> 3 {
                    0b11101..=0b11111 => 4,
                    _ => 2,
                }
            }
            _ => self.min_len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths() {
        assert_eq!(Isa::of("mipsel").len(None), 4);
        let rv = Isa::of("riscv64");
        assert!(rv.needs_code());
        assert_eq!(rv.len(Some(&[0x82, 0x80])), 2); // ret (c.jr ra)
        assert_eq!(rv.len(Some(&[0x93, 0x01, 0x01, 0x00])), 4); // addi
        assert_eq!(rv.len(None), 2);
        let x = Isa::of("x86_64");
        assert_eq!(x.len(Some(&[0xc3])), 1);
        assert_eq!(x.len(Some(&[0x48, 0x89, 0xe5, 0x90])), 3); // mov rbp, rsp
        assert_eq!(
            x.len(Some(&[0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8])),
            10 // movabs rax, imm64
        );
        assert_eq!(Isa::of("i386").len(Some(&[0x55])), 1);
        assert_eq!(Isa::of("s390x").len(Some(&[0xc0, 0xe5])), 6);
        assert_eq!(Isa::of("s390x").len(Some(&[0x07, 0xfe])), 2);
        assert_eq!(Isa::of("nonesuch").len(Some(&[1, 2])), 1);
    }

    #[test]
    fn every_guest_of_the_matrix_is_known() {
        for (arch, isa) in [
            ("mipsel", Isa::Fixed(4)),
            ("mips", Isa::Fixed(4)),
            ("mips64el", Isa::Fixed(4)),
            ("aarch64", Isa::Fixed(4)),
            ("ppc64le", Isa::Fixed(4)),
            ("riscv64", Isa::Riscv),
            ("x86_64", Isa::X86(64)),
            // QEMU's uname names as the trace reports them, and the
            // launcher's.
            ("i686", Isa::X86(32)),
            ("i386", Isa::X86(32)),
            ("armv5tel", Isa::Arm),
            ("arm", Isa::Arm),
        ] {
            assert_eq!(Isa::of(arch), isa, "{arch}");
        }
        // 32-bit x86: the same bytes decode differently than in 64-bit mode
        // (0x48 is `dec eax` there, a REX prefix here).
        assert_eq!(Isa::of("i686").len(Some(&[0x48, 0x89, 0xe5])), 1);
        assert_eq!(Isa::of("x86_64").len(Some(&[0x48, 0x89, 0xe5])), 3);
    }

    #[test]
    fn thumb_and_a32() {
        let t = Isa::Thumb;
        assert!(t.needs_code());
        // Little-endian halfwords, as arm-linux-gnueabihf-objdump shows them.
        assert_eq!(t.len(Some(&[0x70, 0x47])), 2); // 4770 bx lr
        assert_eq!(t.len(Some(&[0x38, 0xb5])), 2); // b538 push {r3, r4, r5, lr}
        assert_eq!(t.len(Some(&[0x00, 0xf0, 0x94, 0xf8])), 4); // f000 f894 bl
        assert_eq!(t.len(Some(&[0x03, 0xeb, 0x40, 0x00])), 4); // eb03 0040 add.w
        assert_eq!(t.len(Some(&[0xdf, 0xf8, 0x08, 0x30])), 4); // f8df 3008 ldr.w
        assert_eq!(t.len(Some(&[0xe7, 0xe7])), 2); // e7e7 b.n (0b11100: 2 bytes)
        assert_eq!(t.len(None), 2);
        assert_eq!(t.len(Some(&[0xf0])), 2, "half an instruction: the minimum");

        let arm = Isa::of("armv5tel");
        assert!(arm.needs_code());
        // Not a multiple of 4: Thumb whatever the file says.
        assert_eq!(arm.arm_mode(0x10342, Some(false)), Isa::Thumb);
        assert_eq!(arm.arm_mode(0x10340, Some(false)), Isa::Fixed(4));
        assert_eq!(arm.arm_mode(0x10340, Some(true)), Isa::Thumb);
        assert_eq!(arm.arm_mode(0x10340, None), Isa::Thumb);
        // A32: 4 bytes whatever the bytes.
        let a32 = arm.arm_mode(0x10340, Some(false));
        assert_eq!(a32.len(Some(&[0x10, 0x40, 0x2d, 0xe9])), 4); // push {r4, lr}
                                                                 // Other ISAs do not care about the mode.
        assert_eq!(Isa::Riscv.arm_mode(0x2, Some(false)), Isa::Riscv);
    }
}
