// SPDX-License-Identifier: GPL-2.0-or-later
//! From a pc to its module, offset in the module and symbol, on the
//! encoding threads.
//!
//! The address space changes only at mapping events, which the serial phase
//! sees in execution order: it takes a [`Snapshot`] of the code regions
//! after each and hands it along with the instructions that ran under it.
//! The encoders then resolve pcs without locks. A [`Resolver`] remembers
//! the last range that resolved the same way (a symbol, or the gap between
//! symbols of a region: the whole region for a stripped binary), and hands
//! out runs of pcs in it: a pc costs one range check in the common case and
//! a binary search on a miss, and a run is one value of the `module` and
//! `symbol` pages.

use std::path::Path;
use std::sync::Arc;

use tools::coverage::space::{Module, Space};
use tools::symbolizer::symbols::{Loc, Symbols};

/// A module as the exports need it.
#[derive(Debug)]
pub struct ModInfo {
    /// What the `offset` column counts from ([`Module::base`]).
    pub base: u64,
    /// Added to the ELF file's addresses: the base of a position
    /// independent file, 0 for one linked at its address.
    pub bias: u64,
    /// Its symbols, where the file could be read.
    pub syms: Option<Symbols>,
    /// `[start, end)` of each symbol of `syms`, bias added.
    pub ranges: Vec<(u64, u64)>,
    /// The `symbols` table's id of its first symbol.
    pub first_sym: i32,
}

impl ModInfo {
    /// Reads the module's symbols (none for anonymous memory or a file
    /// that is not a readable ELF file: its pcs get a null symbol).
    pub fn load(m: &Module, first_sym: i32) -> ModInfo {
        let base = m.base();
        let syms = m
            .path
            .as_deref()
            .and_then(|p| Symbols::from_elf(Path::new(p), 0).ok())
            .filter(|s| !s.is_empty());
        let bias = match &syms {
            Some(s) if s.pie => base,
            _ => 0,
        };
        let ranges = syms
            .iter()
            .flat_map(|s| s.entries())
            .map(|(_, a, b)| (a.wrapping_add(bias), b.wrapping_add(bias)))
            .collect();
        ModInfo {
            base,
            bias,
            syms,
            ranges,
            first_sym,
        }
    }
}

/// The code regions of a process at one point of its run.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// `(start, end, module)`, sorted by start, not overlapping.
    regions: Vec<(u64, u64, u32)>,
    /// Every module known when it was taken, by id.
    modules: Vec<Arc<ModInfo>>,
}

impl Snapshot {
    pub fn new(space: &Space, modules: &[Arc<ModInfo>]) -> Snapshot {
        Snapshot {
            regions: space.code_regions().collect(),
            modules: modules.to_vec(),
        }
    }
}

impl Snapshot {
    /// Whether pcs resolve the same under both.
    pub fn same_code(&self, other: &Snapshot) -> bool {
        self.regions == other.regions
    }
}

/// Resolves pcs under one snapshot, remembering the last range.
pub struct Resolver<'a> {
    snap: &'a Snapshot,
    /// Every pc in `[lo, lo + len)` resolves to `module` with base `base`
    /// and symbol `sym` (`len` 0: nothing remembered yet).
    lo: u64,
    len: u64,
    base: u64,
    module: Option<i32>,
    sym: Option<i32>,
}

impl<'a> Resolver<'a> {
    pub fn new(snap: &'a Snapshot) -> Resolver<'a> {
        Resolver {
            snap,
            lo: 0,
            len: 0,
            base: 0,
            module: None,
            sym: None,
        }
    }

    /// Resolves `pcs[0]` and says how many of the pcs from there resolve
    /// to the same module and symbol: `(count, module, base, symbol)`,
    /// where a pc's offset is `pc - base`.
    #[inline(always)]
    pub fn resolve_run(&mut self, pcs: &[i64]) -> (usize, Option<i32>, u64, Option<i32>) {
        let first = pcs[0] as u64;
        if first.wrapping_sub(self.lo) >= self.len {
            self.miss(first);
        }
        let (lo, len) = (self.lo, self.len);
        let n = pcs
            .iter()
            .position(|&pc| (pc as u64).wrapping_sub(lo) >= len)
            .unwrap_or(pcs.len());
        (n.max(1), self.module, self.base, self.sym)
    }

    #[cold]
    fn miss(&mut self, pc: u64) {
        let r = &self.snap.regions;
        let i = r.partition_point(|&(s, _, _)| s <= pc);
        let region = i.checked_sub(1).map(|i| r[i]).filter(|&(_, e, _)| pc < e);
        let Some((start, end, id)) = region else {
            // Not in any module: remember just this pc.
            (self.lo, self.len, self.module, self.sym) = (pc, 1, None, None);
            return;
        };
        let m = &self.snap.modules[id as usize];
        let (mut lo, mut hi, mut sym) = (start, end, None);
        if let Some(syms) = &m.syms {
            // Symbols may nest: the range ends where the next one starts,
            // and starts at pc unless the symbol is the last to start
            // before it.
            let next = m.ranges.partition_point(|&(a, _)| a <= pc);
            if let Some(&(a, _)) = m.ranges.get(next) {
                hi = hi.min(a);
            }
            lo = pc;
            if let Some(Loc::Sym { idx, .. }) = syms.symbol(pc.wrapping_sub(m.bias)) {
                let (a, b) = m.ranges[idx as usize];
                hi = hi.min(b);
                if idx as usize + 1 == next {
                    lo = start.max(a);
                }
                sym = Some(m.first_sym + idx as i32);
            }
        }
        self.lo = lo;
        self.len = hi - lo;
        self.base = m.base;
        self.module = Some(id as i32);
        self.sym = sym;
    }
}
