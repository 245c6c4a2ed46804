//! How a call shows in each guest architecture's registers and memory.
//!
//! The QEMU side reports a `Branch` event for every instruction that can
//! end a basic block, *before* it runs, and registers at the instruction the
//! branch lands on (the hook library's `Register` hook at block starts).
//! What tells a call from a jump:
//!
//! * **MIPS** (mipsel, mips, mips64el): `jal`, `jalr`, `bal`, `bgezal` write
//!   `ra` = the address after the delay slot, and the jump happens after
//!   the delay slot. Depending on the QEMU patch's version, the flagged
//!   instruction is the branch or its delay slot; when the instruction
//!   after a flagged one is the next in memory, the tracer treats it as the
//!   delay slot and decides at the instruction after it (a fall-through
//!   lands right after the delay slot either way). So, with `pc` the delay
//!   slot's address: a call leaves `ra == pc + 4`, the branch instruction
//!   is at `pc - 4`, a fall-through lands on `pc + 4`. Big-endian MIPS
//!   differs only in how its instruction words are stored, which nothing
//!   here reads.
//! * **RISC-V**: `jal ra`, `jalr ra` (and `c.jal`, `c.jalr`) write
//!   `ra` = the address after themselves: `pc + 4`, or `pc + 2` for a
//!   compressed one. Fall-throughs land on `pc + 2` or `pc + 4`.
//! * **ARM** (A32 and Thumb): `bl`, `blx imm` and `blx reg` write `lr` =
//!   the address after themselves (4 bytes, or 2 for a Thumb `blx reg`),
//!   with bit 0 set when the caller is Thumb code (the interworking bit:
//!   `bx lr` returns to Thumb state). Return addresses are compared with
//!   that bit cleared. Returns are `bx lr`, `pop {..., pc}`, `ldr pc, [sp],
//!   #4`: whatever lands on the return address with the caller's stack
//!   pointer. Conditional instructions can end a block too (a condition
//!   that fails jumps over them): they fall through to `pc + 2` or `pc + 4`.
//! * **AArch64**: `bl`, `blr` write `x30` = `pc + 4`; `ret` returns.
//! * **PowerPC** (ppc64le): `bl`, `bctrl`, `blrl` set the link register to
//!   `pc + 4`, but LR is not a general purpose register and the trace does
//!   not carry it: a call is told by its encoding instead, a branch with
//!   its LK bit set, read from the code the guest mapped. `blr` returns. A
//!   call between functions sharing a TOC lands on the callee's local entry
//!   point, 8 bytes past its symbol (ELFv2); see `symbols.rs`.
//! * **x86** (x86_64, i386): `call` pushes the return address: an 8-byte
//!   (4-byte) store by the branch instruction to `rsp - 8` (`esp - 4`) of
//!   the address after it. After `ret`, the stack pointer is 8 (4) higher
//!   than at the callee's entry.
//!
//! Where QEMU reported the length of the flagged instruction (its block
//! events), the return address and the fall-through are that exact
//! distance past it; the lists below are the fallback.

/// Where a call leaves its return address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// In a register, `pc + d` for one of these `d`, `pc` being the flagged
    /// instruction's.
    Register { offsets: &'static [u64] },
    /// Pushed on the stack by the flagged instruction (`ret_pop` bytes):
    /// the address `pc + d` for one of these `d`. The last instruction of a
    /// block that ends at a page boundary is flagged too, and may be a
    /// `push`: what it pushes is no return address.
    Stack { offsets: &'static [u64] },
    /// In a register the trace does not carry (PowerPC's LR): the flagged
    /// instruction is a call if its encoding says it sets the link
    /// register ([`is_ppc_call`]); it returns to `pc + 4`.
    Encoding,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub link: Link,
    /// Name of the link register (`Link::Register`).
    pub ra: Option<&'static str>,
    /// Name of the stack pointer.
    pub sp: &'static str,
    /// The branch instruction is this many bytes before the flagged one
    /// (MIPS: the delay slot is flagged).
    pub insn_back: u64,
    /// A branch not taken lands this many bytes after the flagged pc.
    pub fallthrough: &'static [u64],
    /// Branches have a delay slot (MIPS): `pc` above is the delay slot's.
    pub delay_slot: bool,
    /// The stack pointer after a return minus the one at the callee's entry
    /// (x86: the size of the return address `call` pushed).
    pub ret_pop: u64,
    /// Bits of the link register that say how to return rather than where
    /// (ARM's interworking bit); cleared before comparing addresses.
    pub mode_bits: u64,
}

impl Rules {
    /// The return address a link register value stands for.
    pub fn return_address(&self, ra: u64) -> u64 {
        ra & !self.mode_bits
    }
}

const MIPS: Rules = Rules {
    link: Link::Register { offsets: &[4] },
    ra: Some("ra"),
    sp: "sp",
    insn_back: 4,
    fallthrough: &[4],
    delay_slot: true,
    ret_pop: 0,
    mode_bits: 0,
};

/// The registers the call stacks read on `arch`: the stack pointer and
/// the link register (where it has one). A live run's hook library
/// reports only these at branches and landings.
pub fn registers_read(arch: &str) -> Option<Vec<&'static str>> {
    let r = rules(arch)?;
    Some(std::iter::once(r.sp).chain(r.ra).collect())
}

/// The rules for QEMU's arch name (`ClientInfo::arch`: QEMU reports its
/// uname machine, like `armv5tel` or `i686`; the launcher's names, like
/// `arm` and `i386`, are accepted too).
pub fn rules(arch: &str) -> Option<Rules> {
    Some(match arch {
        "mips" | "mipsel" | "mips64" | "mips64el" | "mipsn32" | "mipsn32el" => MIPS,
        "riscv32" | "riscv64" => Rules {
            link: Link::Register { offsets: &[2, 4] },
            ra: Some("ra"),
            sp: "sp",
            insn_back: 0,
            fallthrough: &[2, 4],
            ..FIXED4
        },
        "arm" | "armeb" => ARM,
        a if a.starts_with("armv") => ARM,
        "aarch64" | "aarch64_be" => Rules {
            link: Link::Register { offsets: &[4] },
            ra: Some("x30"),
            sp: "sp",
            ..FIXED4
        },
        "ppc64le" | "ppc64" | "ppc" => Rules {
            link: Link::Encoding,
            ra: None,
            sp: "r1",
            ..FIXED4
        },
        "x86_64" => Rules {
            link: Link::Stack {
                offsets: X86_LENGTHS,
            },
            ra: None,
            sp: "rsp",
            fallthrough: &[],
            ret_pop: 8,
            ..FIXED4
        },
        "i386" | "i486" | "i586" | "i686" => Rules {
            link: Link::Stack {
                offsets: X86_LENGTHS,
            },
            ra: None,
            sp: "esp",
            fallthrough: &[],
            ret_pop: 4,
            ..FIXED4
        },
        _ => return None,
    })
}

/// Every length an x86 instruction can have.
const X86_LENGTHS: &[u64] = &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

/// Fixed 4-byte instructions, the return address in a link register, no
/// delay slot: the base of most rules.
const FIXED4: Rules = Rules {
    insn_back: 0,
    delay_slot: false,
    ..MIPS
};

const ARM: Rules = Rules {
    link: Link::Register { offsets: &[2, 4] },
    ra: Some("lr"),
    sp: "sp",
    insn_back: 0,
    fallthrough: &[2, 4],
    delay_slot: false,
    ret_pop: 0,
    mode_bits: 1,
};

/// The architectures [`rules`] knows, for messages.
pub const KNOWN: &str =
    "mipsel, mips, mips64(el), riscv64, riscv32, arm (A32 and Thumb), aarch64, ppc64le, x86_64, i386";

/// Whether the PowerPC instruction `word` is a branch that sets the link
/// register: `bl`/`bla` (opcode 18), `bcl` (16), `bclrl`, `bcctrl`, `bctarl`
/// (19 with extended opcode 16, 528, 560), all with the LK bit (bit 0) set.
pub fn is_ppc_call(word: u32) -> bool {
    if word & 1 == 0 {
        return false;
    }
    match word >> 26 {
        16 | 18 => true,
        19 => matches!((word >> 1) & 0x3ff, 16 | 528 | 560),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_guest_of_the_matrix_has_rules() {
        for (arch, sp) in [
            ("mipsel", "sp"),
            ("mips", "sp"),
            ("mips64el", "sp"),
            ("riscv64", "sp"),
            ("armv5tel", "sp"),
            ("arm", "sp"),
            ("aarch64", "sp"),
            ("ppc64le", "r1"),
            ("x86_64", "rsp"),
            ("i686", "esp"),
            ("i386", "esp"),
        ] {
            let r = rules(arch).unwrap_or_else(|| panic!("{arch}"));
            assert_eq!(r.sp, sp, "{arch}");
            // The register names exist in the layout QEMU's events use.
            let names = cannoli::wire::reg_names(arch);
            for n in [Some(r.sp), r.ra].into_iter().flatten() {
                assert!(names.contains(&n), "{arch}: {n} not in {names:?}");
            }
        }
        assert!(rules("sparc64").is_none());
        // What a live run's hook library is told to keep.
        assert_eq!(registers_read("mipsel").unwrap(), ["sp", "ra"]);
        assert_eq!(registers_read("arm").unwrap(), ["sp", "lr"]);
        assert_eq!(registers_read("aarch64").unwrap(), ["sp", "x30"]);
        assert_eq!(registers_read("x86_64").unwrap(), ["rsp"]);
        assert_eq!(registers_read("ppc64le").unwrap(), ["r1"]);
        assert!(registers_read("sparc64").is_none());
        assert_eq!(rules("i686").unwrap().ret_pop, 4);
        assert_eq!(rules("x86_64").unwrap().ret_pop, 8);
        assert!(rules("mips").unwrap().delay_slot);
        assert!(!rules("aarch64").unwrap().delay_slot);
    }

    #[test]
    fn arm_interworking_bit() {
        let r = rules("armv5tel").unwrap();
        assert_eq!(r.return_address(0x10349), 0x10348);
        assert_eq!(r.return_address(0x10384), 0x10384);
        // Elsewhere every bit is address.
        assert_eq!(rules("riscv64").unwrap().return_address(0x10631), 0x10631);
    }

    #[test]
    fn powerpc_calls_by_encoding() {
        // From powerpc64le-linux-gnu-objdump of bt_calls.
        assert!(is_ppc_call(0x4800_02a5)); // bl
        assert!(is_ppc_call(0x4e80_0421)); // bctrl
        assert!(is_ppc_call(0x4e80_0021)); // blrl
        assert!(is_ppc_call(0x429f_0005)); // bcl 20,31,$+4
        assert!(!is_ppc_call(0x4bff_ffa8)); // b
        assert!(!is_ppc_call(0x4e80_0020)); // blr
        assert!(!is_ppc_call(0x4e80_0420)); // bctr
        assert!(!is_ppc_call(0x4081_0054)); // ble
        assert!(!is_ppc_call(0x7c08_02a6)); // mflr r0
        assert!(!is_ppc_call(0x3821_0031)); // addic r1,r1,49: odd, not a branch
    }
}
