//! How a call shows in each guest architecture's registers and memory.
//!
//! The QEMU side reports a `Branch` event for every instruction that can
//! end a basic block, *before* it runs, and registers at the instruction the
//! branch lands on (the hook library's `Register` hook at block starts).
//! What tells a call from a jump:
//!
//! * **MIPS**: `jal`, `jalr`, `bal`, `bgezal` write `ra` = the address after
//!   the delay slot, and the jump happens after the delay slot. Depending on
//!   the QEMU patch's version, the flagged instruction is the branch or its
//!   delay slot; when the instruction after a flagged one is the next in
//!   memory, the tracer treats it as the delay slot and decides at the
//!   instruction after it (a fall-through lands right after the delay slot
//!   either way). So, with `pc` the delay slot's address: a call leaves
//!   `ra == pc + 4`, the branch instruction is at `pc - 4`, a fall-through
//!   lands on `pc + 4`.
//! * **RISC-V**: `jal ra`, `jalr ra` (and `c.jal`, `c.jalr`) write
//!   `ra` = the address after themselves: `pc + 4`, or `pc + 2` for a
//!   compressed one. Fall-throughs land on `pc + 2` or `pc + 4`.
//! * **x86_64**: `call` pushes the return address: an 8-byte store by the
//!   branch instruction to `rsp - 8`. After `ret`, `rsp` is 8 higher than at
//!   the callee's entry.

/// Where a call leaves its return address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// In a register, `pc + d` for one of these `d`, `pc` being the flagged
    /// instruction's.
    Register { offsets: &'static [u64] },
    /// Pushed on the stack by the flagged instruction (8 bytes).
    Stack,
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
    /// The stack pointer after a return minus the one at the callee's entry.
    pub ret_pop: u64,
}

/// The rules for QEMU's arch name (`ClientInfo::arch`).
pub fn rules(arch: &str) -> Option<Rules> {
    Some(match arch {
        "mips" | "mipsel" | "mips64" | "mips64el" | "mipsn32" | "mipsn32el" => Rules {
            link: Link::Register { offsets: &[4] },
            ra: Some("ra"),
            sp: "sp",
            insn_back: 4,
            fallthrough: &[4],
            delay_slot: true,
            ret_pop: 0,
        },
        "riscv32" | "riscv64" => Rules {
            link: Link::Register { offsets: &[2, 4] },
            ra: Some("ra"),
            sp: "sp",
            insn_back: 0,
            fallthrough: &[2, 4],
            delay_slot: false,
            ret_pop: 0,
        },
        "x86_64" => Rules {
            link: Link::Stack,
            ra: None,
            sp: "rsp",
            insn_back: 0,
            fallthrough: &[],
            delay_slot: false,
            ret_pop: 8,
        },
        _ => return None,
    })
}

/// The architectures [`rules`] knows, for messages.
pub const KNOWN: &str = "mipsel, mips, mips64(el), riscv64, riscv32, x86_64";
