// SPDX-License-Identifier: GPL-2.0-or-later
//! How guest code is named: the mapped modules and the resolver that looks
//! a pc up in the executable's functions or a library's (heap uses it too).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::probe::shadow::AddrMap;

use super::state::{Function, Symbolize};
use super::symbols::{self, Functions};

/// Code the guest mapped from a file other than the executable: a shared
/// library, the dynamic linker.
#[derive(Debug, Clone)]
pub(crate) struct Module {
    pub(crate) base: u64,
    pub(crate) end: u64,
    pub(crate) offset: u64,
    /// The file's name, for code without a symbol: `libc.so.6+0x1234`.
    pub(crate) name: Arc<str>,
    /// The file, as QEMU mapped it.
    pub(crate) path: Arc<str>,
    pub(crate) funcs: Option<Arc<Functions>>,
    pub(crate) bias: u64,
}

/// The executable a process's symbols come from: as QEMU (or `--binary`)
/// named it, and canonicalized, so that a mapping of it is known by either
/// name (QEMU maps it by the name it was given; a link may lead to it).
#[derive(Debug, Clone)]
pub(crate) struct Exe {
    named: PathBuf,
    canon: Option<PathBuf>,
}

impl Exe {
    pub(crate) fn new(named: PathBuf) -> Exe {
        let canon = std::fs::canonicalize(&named).ok();
        Exe { named, canon }
    }

    /// The name QEMU (or `--binary`) gave it.
    pub(crate) fn named(&self) -> &Path {
        &self.named
    }

    /// Whether a mapping's `path` is this executable.
    pub(crate) fn is(&self, path: &str) -> bool {
        let p = Path::new(path);
        p == self.named
            || self
                .canon
                .as_ref()
                .is_some_and(|c| std::fs::canonicalize(p).is_ok_and(|q| &q == c))
    }
}

/// Names guest code: the executable's functions (moved by the load bias of a
/// position independent executable), else a mapped library's functions, else
/// the executable's section or the library's file offset.
pub(crate) struct Resolver<'a> {
    pub(crate) funcs: &'a Functions,
    pub(crate) bias: u64,
    pub(crate) modules: &'a [Module],
    /// Instruction lengths from QEMU's block events.
    pub(crate) lens: &'a AddrMap<u8>,
}

impl Resolver<'_> {
    fn module(&self, pc: u64) -> Option<&Module> {
        self.modules
            .iter()
            .rev()
            .find(|m| m.base <= pc && pc < m.end)
    }

    /// The function containing `pc`, in the executable's table or a
    /// mapped library's, with the bias that moves its addresses to `pc`'s.
    fn find(&self, pc: u64) -> Option<(&symbols::Func, u64)> {
        match self.funcs.find(pc.wrapping_sub(self.bias)) {
            Some(f) => Some((f, self.bias)),
            None => {
                let m = self.module(pc)?;
                Some((m.funcs.as_ref()?.find(pc.wrapping_sub(m.bias))?, m.bias))
            }
        }
    }
}

impl Symbolize for Resolver<'_> {
    fn function(&self, pc: u64) -> Option<Function> {
        let (f, bias) = self.find(pc)?;
        let start = f.start.wrapping_add(bias);
        Some(Function {
            start,
            local_entry: start.wrapping_add(f.local_entry),
            name: f.name.clone(),
        })
    }

    fn entries(&self, pc: u64) -> Option<(u64, u64)> {
        let (f, bias) = self.find(pc)?;
        let start = f.start.wrapping_add(bias);
        Some((start, start.wrapping_add(f.local_entry)))
    }

    fn insn_len(&self, pc: u64) -> Option<u64> {
        self.lens.get(&pc).map(|&n| u64::from(n))
    }

    fn insn_word(&self, pc: u64) -> Option<u32> {
        // The executable's code, else a library's: the one containing pc.
        if let Some(w) = self.funcs.word(pc.wrapping_sub(self.bias)) {
            return Some(w);
        }
        let m = self.module(pc)?;
        m.funcs.as_ref()?.word(pc.wrapping_sub(m.bias))
    }

    fn unnamed(&self, pc: u64) -> Arc<str> {
        let addr = pc.wrapping_sub(self.bias);
        if let Some(s) = self.funcs.section(addr) {
            return format!("{}+{:#x}", s.name, addr - s.start).into();
        }
        match self.module(pc) {
            Some(m) => format!("{}+{:#x}", m.name, pc - m.base + m.offset).into(),
            None => format!("{pc:#x}").into(),
        }
    }
}
