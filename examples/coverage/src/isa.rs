// SPDX-License-Identifier: GPL-2.0-or-later
//! Instruction lengths, for the last instruction of a block: the trace gives
//! where instructions start, the drcov file wants block sizes in bytes.

/// How a guest architecture's instruction lengths are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Every instruction has this many bytes.
    Fixed(u64),
    /// RISC-V: 2 bytes (compressed) unless the low two bits are `11`.
    Riscv,
    /// s390x: 2, 4 or 6 bytes by the top two bits of the first byte.
    S390x,
    /// x86 with this bitness (32 or 64), decoded.
    X86(u32),
    /// Unknown: one byte (the block covers each instruction's first byte,
    /// which is what coverage tools look up).
    Unknown,
}

impl Isa {
    /// The encoding of QEMU's architecture `arch`.
    pub fn of(arch: &str) -> Isa {
        match arch {
            "riscv32" | "riscv64" => Isa::Riscv,
            "s390x" => Isa::S390x,
            "x86_64" => Isa::X86(64),
            "i386" => Isa::X86(32),
            // ARM is assumed in A32 mode (Thumb code would need the mode bit,
            // which the trace does not carry).
            "mips" | "mipsel" | "mips64" | "mips64el" | "mipsn32" | "mipsn32el" | "aarch64"
            | "aarch64_be" | "arm" | "armeb" | "ppc" | "ppc64" | "ppc64le" | "sparc"
            | "sparc64" | "loongarch64" | "hppa" | "alpha" | "or1k" | "microblaze"
            | "microblazeel" => Isa::Fixed(4),
            "sh4" | "sh4eb" => Isa::Fixed(2),
            _ => Isa::Unknown,
        }
    }

    /// Whether [`Isa::len`] needs the instruction's bytes.
    pub fn needs_code(self) -> bool {
        matches!(self, Isa::Riscv | Isa::S390x | Isa::X86(_))
    }

    /// The smallest instruction: the length used when the bytes are not
    /// available (anonymous memory, a file that cannot be read).
    pub fn min_len(self) -> u64 {
        match self {
            Isa::Fixed(n) => n,
            Isa::Riscv | Isa::S390x => 2,
            Isa::X86(_) | Isa::Unknown => 1,
        }
    }

    /// Length of the instruction whose bytes start `code` (as many bytes
    /// as are available, up to 15), or [`Isa::min_len`] without them.
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
}
