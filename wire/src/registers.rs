//! Guest registers: the architecture's name as users know it, where QEMU
//! keeps the general purpose registers, and their names.

use serde::{Deserialize, Serialize};

/// The guest architecture's name as users know it. QEMU reports
/// `UNAME_MACHINE` ("mips" for both endiannesses of 32-bit MIPS); a
/// little-endian MIPS guest is called "mipsel" like its qemu-mipsel binary.
pub fn arch_name(uname_machine: &str, big_endian: bool) -> String {
    match (uname_machine, big_endian) {
        ("mips", false) => "mipsel".into(),
        ("mips64", false) => "mips64el".into(),
        (m, _) => m.into(),
    }
}

/// Where a guest's general purpose registers are, as QEMU describes them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RegLayout {
    /// Number of registers in a registers event (one word each, the guest
    /// value zero-extended to 64 bits).
    pub count: u32,
    /// Bytes each register has in the guest (4 or 8).
    pub bytes: u32,
    /// Their names, in event order (empty when the arch is unknown here).
    pub names: Vec<String>,
}

/// The general purpose register names of `arch` (as [`arch_name`] gives it),
/// in the order QEMU keeps them; empty for an arch this crate doesn't know.
pub fn reg_names(arch: &str) -> &'static [&'static str] {
    const MIPS: [&str; 32] = [
        "zero", "at", "v0", "v1", "a0", "a1", "a2", "a3", "t0", "t1", "t2", "t3", "t4", "t5", "t6",
        "t7", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "t8", "t9", "k0", "k1", "gp", "sp",
        "fp", "ra",
    ];
    const RISCV: [&str; 32] = [
        "zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", "a0", "a1", "a2", "a3", "a4",
        "a5", "a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4",
        "t5", "t6",
    ];
    const AARCH64: [&str; 32] = [
        "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13",
        "x14", "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26",
        "x27", "x28", "x29", "x30", "sp",
    ];
    const X86_64: [&str; 16] = [
        "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12",
        "r13", "r14", "r15",
    ];
    const ARM: [&str; 16] = [
        "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12", "sp",
        "lr", "pc",
    ];
    // QEMU's env->regs of a 32-bit x86 guest: the same order as x86_64's
    // first eight (the ModRM register numbers).
    const I386: [&str; 8] = ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi"];
    // env->gpr of PowerPC: r1 is the stack pointer and r2 the TOC pointer by
    // the ABI, not by the hardware, so the hardware names are the useful
    // ones (they are also what objdump and gdb print). LR and CTR are not
    // general purpose registers and are not in the event.
    const PPC: [&str; 32] = [
        "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12", "r13",
        "r14", "r15", "r16", "r17", "r18", "r19", "r20", "r21", "r22", "r23", "r24", "r25", "r26",
        "r27", "r28", "r29", "r30", "r31",
    ];
    match arch {
        "mips" | "mipsel" | "mips64" | "mips64el" | "mipsn32" | "mipsn32el" => &MIPS,
        "riscv32" | "riscv64" => &RISCV,
        "aarch64" | "aarch64_be" => &AARCH64,
        "x86_64" => &X86_64,
        // QEMU's linux-user calls a 32-bit x86 guest `i686` (its uname
        // machine), the launcher and Debian `i386`.
        "i386" | "i486" | "i586" | "i686" | "x86" => &I386,
        "ppc" | "ppc64" | "ppc64le" | "powerpc" | "powerpc64" | "powerpc64le" => &PPC,
        // QEMU's linux-user calls an ARM guest `armv5tel` / `armv5teb`
        // (its uname machine), the launcher `arm` / `armeb`, the kernel
        // `armv7l` and the like.
        "arm" | "armeb" => &ARM,
        a if a.starts_with("armv") => &ARM,
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_names() {
        assert_eq!(arch_name("mips", false), "mipsel");
        assert_eq!(arch_name("mips", true), "mips");
        assert_eq!(arch_name("mips64", false), "mips64el");
        assert_eq!(arch_name("riscv64", false), "riscv64");
    }

    #[test]
    fn register_names() {
        assert_eq!(reg_names("mipsel")[29], "sp");
        assert_eq!(reg_names("riscv64")[1], "ra");
        assert_eq!(reg_names("x86_64")[4], "rsp");
        assert!(reg_names("sparc").is_empty());
        // 32-bit x86 under either of its names: QEMU's env->regs order.
        for a in ["i386", "i686"] {
            assert_eq!(
                reg_names(a),
                ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi"]
            );
        }
        // PowerPC: env->gpr, r1 the stack pointer.
        for a in ["ppc", "ppc64", "ppc64le"] {
            let n = reg_names(a);
            assert_eq!((n.len(), n[0], n[1], n[31]), (32, "r0", "r1", "r31"));
        }
        // ARM under QEMU's uname name as well as the launcher's.
        for a in ["arm", "armeb", "armv5tel", "armv5teb", "armv7l"] {
            let n = reg_names(a);
            assert_eq!(
                (n.len(), n[13], n[14], n[15]),
                (16, "sp", "lr", "pc"),
                "{a}"
            );
        }
        assert_eq!(reg_names("mips64el")[31], "ra");
        assert_eq!(reg_names("aarch64")[30], "x30");
        assert_eq!(reg_names("aarch64")[31], "sp");
        // Only `armv...` machine names are taken as ARM, not any `arm...`.
        assert!(reg_names("armhf").is_empty());
    }
}
