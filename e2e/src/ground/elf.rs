// SPDX-License-Identifier: GPL-2.0-or-later
//! What the tests read from a guest executable.

use std::fs;
use std::path::Path;

/// What the tests read from a guest executable.
pub struct Elf {
    data: Vec<u8>,
}

impl Elf {
    pub fn open(path: &Path) -> Result<Elf, String> {
        let data = fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        object::File::parse(&*data).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Elf { data })
    }

    fn file(&self) -> object::File<'_> {
        object::File::parse(&*self.data).expect("parsed before")
    }

    /// `[start, end)` of the function symbol `name`.
    pub fn function(&self, name: &str) -> Result<(u64, u64), String> {
        use object::{Object, ObjectSymbol, SymbolKind};
        let f = self.file();
        let sym = f
            .symbols()
            .find(|s| s.name() == Ok(name) && s.kind() == SymbolKind::Text)
            .ok_or_else(|| format!("no function symbol {name}"))?;
        if sym.size() == 0 {
            return Err(format!("function symbol {name} has size 0"));
        }
        Ok((sym.address(), sym.address() + sym.size()))
    }

    /// The little-endian 32-bit word at `addr` in a section with contents.
    pub fn word(&self, addr: u64) -> Option<u32> {
        use object::{Object, ObjectSection};
        let f = self.file();
        for s in f.sections() {
            let (start, size) = (s.address(), s.size());
            if addr >= start && addr + 4 <= start + size {
                let d = s.data().ok()?;
                let o = (addr - start) as usize;
                return Some(u32::from_le_bytes(d.get(o..o + 4)?.try_into().ok()?));
            }
        }
        None
    }
}

/// Whether the 32-bit instruction word is the guest's syscall instruction
/// (mips `syscall`, riscv `ecall`).
pub fn is_syscall_insn(arch: &str, word: u32) -> bool {
    match arch {
        "mipsel" | "mips" => word & 0xfc00_003f == 0x0000_000c,
        "riscv64" | "riscv32" => word == 0x0000_0073,
        _ => false,
    }
}
