// SPDX-License-Identifier: GPL-2.0-or-later
//! The calling conventions: where a function finds its integer arguments
//! at its first instruction, where its result is at its return, and what
//! the stack pointer is there, for each guest.
//!
//! | guest | convention | arguments | beyond those, on the stack at entry | result |
//! |---|---|---|---|---|
//! | mipsel, mips | o32 | a0..a3 | sp+16 (the four home slots come first) | v0 |
//! | mips64el | n64 | a0..a7 (QEMU names a4..a7 t0..t3) | sp+0 | v0 |
//! | arm | AAPCS | r0..r3 | sp+0 | r0 |
//! | aarch64 | AAPCS64 | x0..x7 | sp+0 | x0 |
//! | riscv64 | RISC-V | a0..a7 | sp+0 | a0 |
//! | x86_64 | SysV | rdi rsi rdx rcx r8 r9 | rsp+8 (above the return address) | rax |
//! | i386 | cdecl | none | esp+4 | eax |
//! | ppc64le | ELFv2 | r3..r10 | r1+96 (after the save area) | r3 |
//!
//! Arguments on the stack are memory: the probe reads them from what the
//! thread stored there (see `super::shadow`).
//!
//! A Go program's functions follow Go's conventions instead ([`Conv`]):
//!
//! | guest | Go's convention | arguments | result |
//! |---|---|---|---|
//! | x86_64 | ABIInternal | rax rbx rcx rdi rsi r8 r9 r10 r11 | rax |
//! | aarch64 | ABIInternal | x0..x15 | x0 |
//! | riscv64 | ABIInternal | a0..a7 s0 s1 s2..s7 (X10..X17, X8, X9, X18..X23) | a0 |
//! | ppc64le | ABIInternal | r3..r10 r14..r17 | r3 |
//! | i386 | ABI0 | esp+4, as cdecl | on the stack, after the arguments |
//! | arm, mipsel, mips | ABI0 | sp+4 (the caller's saved return address is at sp+0) | on the stack |
//! | mips64el | ABI0 | sp+8 | on the stack |
//!
//! An ABI0 function's results follow its arguments in the caller's frame,
//! at an offset only the function's argument types give (not its symbol):
//! `super::godwarf` finds it in the program's DWARF.
//!
//! Arguments past the registers, under either of Go's conventions, start
//! past the words Go keeps at the bottom of every frame: the return
//! address (x86), the caller's saved link register, and on ppc64le the
//! rest of ELFv2's four-word save area (Go's `FixedFrameSize`: sp+8 on
//! aarch64 and riscv64, sp+32 on ppc64le). Go's assembly functions take
//! ABI0 on every guest, the register guests too: their symbols end in
//! `.abi0` ([`Conv::of`]), and their DWARF has no parameters, so their
//! results are not placed.
//!
//! A frame is known by its *key*: the caller's stack pointer once the
//! function has returned. At the entry that is `sp` (plus the pushed
//! return address on x86); at a return instruction it is `sp` plus what
//! the instruction pops (see `super::isa`). Return probes match a return to
//! its entry by that key, which is right for recursion (each level has its
//! own), tail calls (the callee returns with its caller's key) and threads
//! (each has its own stack).

use object::{Architecture, Object};

/// A guest's calling convention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abi {
    O32,
    N64,
    Aapcs,
    Aapcs64,
    Riscv,
    SysV,
    Cdecl,
    Elfv2,
}

impl Abi {
    /// The convention of an ELF file's code.
    pub fn of(f: &object::File) -> Option<Abi> {
        Some(match (f.architecture(), f.is_64()) {
            (Architecture::Mips, false) => Abi::O32,
            (Architecture::Mips64, true) => Abi::N64,
            (Architecture::Arm, _) => Abi::Aapcs,
            (Architecture::Aarch64, _) => Abi::Aapcs64,
            (Architecture::Riscv64, _) => Abi::Riscv,
            (Architecture::X86_64, _) => Abi::SysV,
            (Architecture::I386, _) => Abi::Cdecl,
            (Architecture::PowerPc64, _) if f.is_little_endian() => Abi::Elfv2,
            _ => return None,
        })
    }

    /// The name of an architecture whose guests follow it, as
    /// `wire::reg_names` and the backtrace's rules know it (their register
    /// names and call rules do not depend on the byte order).
    pub fn arch(self) -> &'static str {
        match self {
            Abi::O32 => "mipsel",
            Abi::N64 => "mips64el",
            Abi::Aapcs => "arm",
            Abi::Aapcs64 => "aarch64",
            Abi::Riscv => "riscv64",
            Abi::SysV => "x86_64",
            Abi::Cdecl => "i386",
            Abi::Elfv2 => "ppc64le",
        }
    }

    /// Its name, for messages and docs.
    pub fn name(self) -> &'static str {
        match self {
            Abi::O32 => "o32",
            Abi::N64 => "n64",
            Abi::Aapcs => "AAPCS",
            Abi::Aapcs64 => "AAPCS64",
            Abi::Riscv => "RISC-V",
            Abi::SysV => "SysV",
            Abi::Cdecl => "cdecl",
            Abi::Elfv2 => "ELFv2",
        }
    }

    /// The registers of the first arguments, by QEMU's names.
    pub fn arg_regs(self) -> &'static [&'static str] {
        match self {
            Abi::O32 => &["a0", "a1", "a2", "a3"],
            Abi::N64 => &["a0", "a1", "a2", "a3", "t0", "t1", "t2", "t3"],
            Abi::Aapcs => &["r0", "r1", "r2", "r3"],
            Abi::Aapcs64 => &["x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"],
            Abi::Riscv => &["a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"],
            Abi::SysV => &["rdi", "rsi", "rdx", "rcx", "r8", "r9"],
            Abi::Cdecl => &[],
            Abi::Elfv2 => &["r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10"],
        }
    }

    /// Where the first argument past the registers is, from `sp` at entry.
    pub fn stack_args(self) -> u64 {
        match self {
            Abi::O32 => 16,
            Abi::SysV => 8,
            Abi::Cdecl => 4,
            Abi::Elfv2 => 96,
            _ => 0,
        }
    }

    /// Bytes of an argument slot on the stack.
    pub fn word(self) -> u64 {
        match self {
            Abi::O32 | Abi::Aapcs | Abi::Cdecl => 4,
            _ => 8,
        }
    }

    /// The register of the result.
    pub fn ret_reg(self) -> &'static str {
        match self {
            Abi::O32 | Abi::N64 => "v0",
            Abi::Aapcs => "r0",
            Abi::Aapcs64 => "x0",
            Abi::Riscv => "a0",
            Abi::SysV => "rax",
            Abi::Cdecl => "eax",
            Abi::Elfv2 => "r3",
        }
    }

    /// The stack pointer.
    pub fn sp_reg(self) -> &'static str {
        match self {
            Abi::SysV => "rsp",
            Abi::Cdecl => "esp",
            Abi::Elfv2 => "r1",
            _ => "sp",
        }
    }

    /// The register where Go's runtime keeps the running goroutine (its
    /// `g`), by QEMU's name: fixed by Go's ABI on every guest but i386,
    /// where `g` is in thread-local storage.
    pub fn go_g_reg(self) -> Option<&'static str> {
        Some(match self {
            Abi::SysV => "r14",
            Abi::Aapcs64 => "x28",
            Abi::Riscv => "s11",
            Abi::Elfv2 => "r30",
            Abi::Aapcs => "r10",
            // R30, which QEMU (and o32) calls `fp`.
            Abi::O32 | Abi::N64 => "fp",
            Abi::Cdecl => return None,
        })
    }

    /// A frame's key at its entry, from `sp` there: the return address
    /// the call pushed is popped by the return.
    pub fn entry_key(self, sp: u64) -> u64 {
        sp.wrapping_add(match self {
            Abi::SysV => 8,
            Abi::Cdecl => 4,
            _ => 0,
        })
    }

    /// Whether argument `i` (from 0) is in memory.
    pub fn on_stack(self, i: usize) -> bool {
        i >= self.arg_regs().len()
    }

    /// Where argument `i` (on the stack) is, from `sp` at entry.
    pub fn stack_slot(self, sp: u64, i: usize) -> u64 {
        let k = (i - self.arg_regs().len()) as u64;
        sp.wrapping_add(self.stack_args() + k * self.word())
    }
}

/// The convention of one function: its guest's C convention, or Go's
/// (see the table at the top).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv {
    pub abi: Abi,
    /// A function of a Go program.
    pub go: bool,
    /// A Go function under Go's stack convention (ABI0) where Go has a
    /// register one too: an assembly function (its symbol ends in
    /// `.abi0`), which takes its arguments and leaves its results on the
    /// stack on every guest.
    pub abi0: bool,
}

impl Conv {
    pub fn new(abi: Abi, go: bool) -> Conv {
        Conv {
            abi,
            go,
            abi0: false,
        }
    }

    /// The convention of a function of a program of convention `abi`
    /// (`go`: a Go program) named `name`: Go's stack convention for a Go
    /// symbol that says so (`.abi0`).
    pub fn of(abi: Abi, go: bool, name: &str) -> Conv {
        Conv {
            abi0: go && name.ends_with(".abi0"),
            ..Conv::new(abi, go)
        }
    }

    /// Go's stack convention (ABI0): the function's own (assembly), or
    /// Go has no register convention here.
    fn go_stack(self) -> bool {
        self.go && (self.abi0 || matches!(self.abi, Abi::Aapcs | Abi::O32 | Abi::N64 | Abi::Cdecl))
    }

    /// The registers of the first arguments, by QEMU's names.
    pub fn arg_regs(self) -> &'static [&'static str] {
        match self.abi {
            _ if self.go_stack() => &[],
            Abi::SysV if self.go => &["rax", "rbx", "rcx", "rdi", "rsi", "r8", "r9", "r10", "r11"],
            Abi::Aapcs64 if self.go => &[
                "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12",
                "x13", "x14", "x15",
            ],
            // X10 to X17, X8, X9, X18 to X23.
            Abi::Riscv if self.go => &[
                "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "s0", "s1", "s2", "s3", "s4", "s5",
                "s6", "s7",
            ],
            Abi::Elfv2 if self.go => &[
                "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r14", "r15", "r16", "r17",
            ],
            a => a.arg_regs(),
        }
    }

    /// Whether argument `i` (from 0) is in memory.
    pub fn on_stack(self, i: usize) -> bool {
        i >= self.arg_regs().len()
    }

    /// Where argument `i` (on the stack) is, from `sp` at entry.
    pub fn stack_slot(self, sp: u64, i: usize) -> u64 {
        let first = if self.go {
            // Either Go convention: past the return address the call
            // pushed (x86), or the slots Go keeps at the bottom of every
            // frame on the link-register guests: the caller's own saved
            // return address, and on ppc64le the three other words of
            // ELFv2's save area (Go's `FixedFrameSize`).
            match self.abi {
                Abi::Elfv2 => 4 * self.abi.word(),
                a => a.word(),
            }
        } else {
            self.abi.stack_args()
        };
        let k = (i - self.arg_regs().len()) as u64;
        sp.wrapping_add(first + k * self.abi.word())
    }

    /// Bytes of an argument slot on the stack.
    pub fn word(self) -> u64 {
        self.abi.word()
    }

    /// The register of the result, if the result is in one (not under
    /// Go's ABI0).
    pub fn ret_reg(self) -> Option<&'static str> {
        (!self.go_stack()).then(|| self.abi.ret_reg())
    }
}

/// Whether a return of target `t` whose frame key is `key` really returns
/// (see `tracer`): it leaves the innermost frame of `frames` (outermost
/// first, each as its key and target), or, among the frames it leaves,
/// one of its own function's with this key. Otherwise it only restored a
/// caller's stack pointer (a `longjmp`), and every frame it leaves was
/// left without returning.
pub fn returns_genuinely<F>(
    frames: &[F],
    key: u64,
    t: usize,
    of: impl Fn(&F) -> (u64, usize),
) -> bool {
    frames.last().is_some_and(|f| of(f).0 == key)
        || frames
            .iter()
            .rev()
            .map(of)
            .take_while(|&(k, _)| k <= key)
            .any(|(k, target)| target == t && k == key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_slots() {
        assert_eq!(Abi::O32.stack_slot(0x1000, 4), 0x1010);
        assert_eq!(Abi::O32.stack_slot(0x1000, 5), 0x1014);
        assert_eq!(Abi::Cdecl.stack_slot(0x1000, 0), 0x1004);
        assert_eq!(Abi::Aapcs.stack_slot(0x1000, 4), 0x1000);
        assert_eq!(Abi::SysV.stack_slot(0x1000, 6), 0x1008);
        assert!(!Abi::SysV.on_stack(5) && Abi::SysV.on_stack(6));
        assert!(Abi::Cdecl.on_stack(0));
    }

    #[test]
    fn go_conventions() {
        let go = |abi| Conv::new(abi, true);
        assert_eq!(go(Abi::SysV).arg_regs()[..3], ["rax", "rbx", "rcx"]);
        assert_eq!(go(Abi::SysV).stack_slot(0x1000, 9), 0x1008);
        assert_eq!(go(Abi::SysV).ret_reg(), Some("rax"));
        // ABI0: the arguments follow the caller's saved return address.
        assert_eq!(go(Abi::O32).stack_slot(0x1000, 0), 0x1004);
        assert_eq!(go(Abi::O32).stack_slot(0x1000, 2), 0x100c);
        assert_eq!(go(Abi::Aapcs).stack_slot(0x1000, 1), 0x1008);
        assert_eq!(go(Abi::N64).stack_slot(0x1000, 1), 0x1010);
        assert_eq!(go(Abi::Cdecl).stack_slot(0x1000, 0), 0x1004);
        assert!(go(Abi::O32).on_stack(0) && go(Abi::O32).ret_reg().is_none());
        // Past the registers of Go's register convention.
        assert_eq!(go(Abi::Aapcs64).stack_slot(0x1000, 16), 0x1008);
        assert_eq!(go(Abi::Riscv).stack_slot(0x1000, 17), 0x1010);
        assert_eq!(go(Abi::Elfv2).stack_slot(0x1000, 12), 0x1020);
        // Assembly (`.abi0`) on the register guests: the stack, as ABI0.
        let asm = |abi| Conv::of(abi, true, "crypto/sha256.block.abi0");
        assert!(asm(Abi::SysV).on_stack(0) && asm(Abi::SysV).ret_reg().is_none());
        assert_eq!(asm(Abi::SysV).stack_slot(0x1000, 1), 0x1010);
        assert_eq!(asm(Abi::Aapcs64).stack_slot(0x1000, 0), 0x1008);
        assert_eq!(asm(Abi::Elfv2).stack_slot(0x1000, 0), 0x1020);
        assert!(!Conv::of(Abi::SysV, true, "main.mix").abi0);
        assert!(!Conv::of(Abi::SysV, false, "x.abi0").abi0, "C");
        // The register guests: Go's first registers are C's; Go has more.
        for (abi, n) in [(Abi::Aapcs64, 16), (Abi::Riscv, 16), (Abi::Elfv2, 12)] {
            assert_eq!(go(abi).arg_regs()[..8], *abi.arg_regs());
            assert_eq!(go(abi).arg_regs().len(), n);
            assert_eq!(go(abi).ret_reg(), Some(abi.ret_reg()));
        }
        // C is C.
        let c = Conv::new(Abi::O32, false);
        assert_eq!(c.stack_slot(0x1000, 4), 0x1010);
        assert_eq!(c.ret_reg(), Some("v0"));
    }

    #[test]
    fn genuine_returns() {
        let of = |f: &(u64, usize)| *f;
        // Outermost first: target 0 at 0x9000, 1 at 0x8000, 2 at 0x7000.
        let frames = [(0x9000, 0), (0x8000, 1), (0x7000, 2)];
        assert!(returns_genuinely(&frames, 0x7000, 5, of), "the innermost");
        assert!(
            returns_genuinely(&frames, 0x8000, 1, of),
            "its own, past a longjmp"
        );
        assert!(!returns_genuinely(&frames, 0x8000, 0, of), "another's key");
        assert!(!returns_genuinely(&[] as &[(u64, usize)], 0x8000, 0, of));
    }

    #[test]
    fn keys() {
        assert_eq!(Abi::SysV.entry_key(0x7ff8), 0x8000);
        assert_eq!(Abi::Cdecl.entry_key(0x7ffc), 0x8000);
        assert_eq!(Abi::Riscv.entry_key(0x8000), 0x8000);
    }
}
