// SPDX-License-Identifier: GPL-2.0-or-later
//! A guest address space as the trace's mmap, munmap and mprotect events
//! describe it, and the modules (executable mappings) in it.
//!
//! Every mapping that is executable when it is created, or becomes
//! executable through `mprotect`, gets a module. A module stays what it was
//! when it was created: a later `mmap`/`mprotect` over part of it (the
//! dynamic loader maps a library's data over the tail of its first
//! read-execute mapping) only changes which addresses still point to it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// An executable mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// The mapped file, `None` for anonymous memory.
    pub path: Option<Arc<str>>,
    /// Start and end (exclusive) of the mapping when it became executable.
    pub start: u64,
    pub end: u64,
    /// File offset mapped at `start` (0 for anonymous memory).
    pub offset: u64,
    /// QEMU's name of the guest architecture whose stream created it.
    pub arch: Arc<str>,
    /// Guest address width.
    pub bits: u32,
}

impl Module {
    /// Where offset 0 of the file would be: the image base of an ELF file
    /// (its first segment maps offset 0 at the load address, and text
    /// segments keep `vaddr - offset` constant). drcov offsets count from
    /// here, which is what Lighthouse and bncov add their image base to.
    /// `start` itself when that would be below address 0, and for
    /// anonymous memory.
    pub fn base(&self) -> u64 {
        match &self.path {
            Some(_) if self.offset <= self.start => self.start - self.offset,
            _ => self.start,
        }
    }

    /// The file offset of guest address `pc` in this module's mapping.
    pub fn file_offset(&self, pc: u64) -> u64 {
        pc.wrapping_sub(self.start).wrapping_add(self.offset)
    }
}

/// What makes two modules the same: file, start, end, offset.
type ModuleKey = (Option<Arc<str>>, u64, u64, u64);

/// Every module seen in a run, deduplicated (a forked child's inherited
/// mappings are the parent's modules).
#[derive(Debug, Default)]
pub struct Modules {
    list: Vec<Module>,
    index: HashMap<ModuleKey, u32>,
}

impl Modules {
    /// The id of `m`, adding it if it is new.
    pub fn intern(&mut self, m: Module) -> u32 {
        let key = (m.path.clone(), m.start, m.end, m.offset);
        if let Some(&id) = self.index.get(&key) {
            return id;
        }
        let id = self.list.len() as u32;
        self.list.push(m);
        self.index.insert(key, id);
        id
    }

    #[cfg(test)]
    pub fn get(&self, id: u32) -> &Module {
        &self.list[id as usize]
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.list.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &Module)> {
        self.list.iter().enumerate().map(|(i, m)| (i as u32, m))
    }
}

/// One mapped range `[start, end)` (the key of [`Space::regions`] is its
/// start).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Region {
    end: u64,
    exec: bool,
    /// File and the offset mapped at the region's start.
    file: Option<(Arc<str>, u64)>,
    /// The module code here belongs to (set once the region was
    /// executable; kept if it stops being executable).
    module: Option<u32>,
}

/// A guest address space: what is mapped where.
#[derive(Debug, Default)]
pub struct Space {
    regions: BTreeMap<u64, Region>,
    arch: Arc<str>,
    bits: u32,
}

fn end_of(base: u64, len: u64) -> u64 {
    base.saturating_add(len)
}

impl Space {
    pub fn new(arch: &str, bits: u32) -> Space {
        Space {
            regions: BTreeMap::new(),
            arch: arch.into(),
            bits,
        }
    }

    /// Makes `addr` a region boundary if it falls inside a region.
    fn split_at(&mut self, addr: u64) {
        let Some((&start, r)) = self.regions.range(..addr).next_back() else {
            return;
        };
        if r.end <= addr {
            return;
        }
        let mut right = r.clone();
        right.file = right
            .file
            .map(|(p, off)| (p, off.wrapping_add(addr - start)));
        self.regions.get_mut(&start).unwrap().end = addr;
        self.regions.insert(addr, right);
    }

    /// Splits at `lo` and `hi`; returns the starts of the regions inside.
    fn isolate(&mut self, lo: u64, hi: u64) -> Vec<u64> {
        self.split_at(lo);
        self.split_at(hi);
        self.regions.range(lo..hi).map(|(&s, _)| s).collect()
    }

    fn module_for(&self, start: u64, r: &Region, modules: &mut Modules) -> u32 {
        let (path, offset) = match &r.file {
            Some((p, off)) => (Some(p.clone()), *off),
            None => (None, 0),
        };
        modules.intern(Module {
            path,
            start,
            end: r.end,
            offset,
            arch: self.arch.clone(),
            bits: self.bits,
        })
    }

    /// `len` bytes at `base` are mapped (replacing what was there); `file`
    /// is the mapped file and the offset mapped at `base`.
    pub fn map(
        &mut self,
        base: u64,
        len: u64,
        exec: bool,
        file: Option<(Arc<str>, u64)>,
        modules: &mut Modules,
    ) {
        let end = end_of(base, len);
        if end <= base {
            return;
        }
        self.unmap(base, len);
        let mut r = Region {
            end,
            exec,
            file,
            module: None,
        };
        if exec {
            r.module = Some(self.module_for(base, &r, modules));
        }
        self.regions.insert(base, r);
    }

    /// `len` bytes at `base` are unmapped.
    pub fn unmap(&mut self, base: u64, len: u64) {
        let end = end_of(base, len);
        for s in self.isolate(base, end) {
            self.regions.remove(&s);
        }
    }

    /// `len` bytes at `base` got a new protection.
    pub fn protect(&mut self, base: u64, len: u64, exec: bool, modules: &mut Modules) {
        let end = end_of(base, len);
        for s in self.isolate(base, end) {
            let r = &self.regions[&s];
            let module = match (exec, r.module) {
                (true, None) => Some(self.module_for(s, r, modules)),
                (_, m) => m,
            };
            let r = self.regions.get_mut(&s).unwrap();
            r.exec = exec;
            r.module = module;
        }
    }

    /// Every range `[start, end)` that holds code of a module, with the
    /// module, by start (exports resolve pcs from a copy of these).
    pub fn code_regions(&self) -> impl Iterator<Item = (u64, u64, u32)> + '_ {
        self.regions
            .iter()
            .filter_map(|(&s, r)| Some((s, r.end, r.module?)))
    }

    /// The module holding the code at `pc`.
    pub fn lookup(&self, pc: u64) -> Option<u32> {
        let (_, r) = self.regions.range(..=pc).next_back()?;
        if pc < r.end {
            r.module
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(p: &str, off: u64) -> Option<(Arc<str>, u64)> {
        Some((p.into(), off))
    }

    #[test]
    fn static_program_and_sigtramp() {
        let mut m = Modules::default();
        let mut s = Space::new("mipsel", 32);
        s.map(0x400000, 0xa2000, false, None, &mut m);
        s.map(0x400000, 0x8b000, true, file("/prog", 0), &mut m);
        s.map(0x49a000, 0x5000, false, file("/prog", 0x8a000), &mut m);
        s.map(0x2b2ac000, 0x1000, false, None, &mut m);
        assert_eq!(s.lookup(0x2b2ac010), None);
        s.protect(0x2b2ac000, 0x1000, true, &mut m);
        assert_eq!(m.len(), 2);
        assert_eq!(s.lookup(0x400000), Some(0));
        assert_eq!(s.lookup(0x48afff), Some(0));
        assert_eq!(s.lookup(0x48b000), None);
        assert_eq!(s.lookup(0x49a000), None);
        assert_eq!(s.lookup(0x2b2ac010), Some(1));
        let p = m.get(0);
        assert_eq!((p.base(), p.start, p.end), (0x400000, 0x400000, 0x48b000));
        let t = m.get(1);
        assert_eq!(
            (t.path.clone(), t.base(), t.end),
            (None, 0x2b2ac000, 0x2b2ad000)
        );
        // r-x again: still the same module.
        s.protect(0x2b2ac000, 0x1000, true, &mut m);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn shared_library_layout() {
        // What ld.so does with libc: one r-x mapping of the whole image,
        // data mapped over its tail, a hole made inaccessible.
        let mut m = Modules::default();
        let mut s = Space::new("mipsel", 32);
        s.map(0x2b2fa000, 0x1ed000, false, None, &mut m);
        s.map(
            0x2b300000,
            0x1dd000,
            true,
            file("/lib/libc.so.6", 0),
            &mut m,
        );
        s.unmap(0x2b2fa000, 0x6000);
        s.protect(0x2b4be000, 0xf000, false, &mut m);
        s.map(
            0x2b4cd000,
            0x6000,
            false,
            file("/lib/libc.so.6", 0x1cd000),
            &mut m,
        );
        s.protect(0x2b4cd000, 0x3000, false, &mut m);
        assert_eq!(m.len(), 1);
        assert_eq!(s.lookup(0x2b300000), Some(0));
        assert_eq!(s.lookup(0x2b4bdffc), Some(0));
        // Made non-executable: still attributed to libc (QEMU would not run
        // code there, but a pc already reported stays libc's).
        assert_eq!(s.lookup(0x2b4be000), Some(0));
        assert_eq!(s.lookup(0x2b4cd000), None);
        assert_eq!(s.lookup(0x2b2fa000), None);
        let l = m.get(0);
        assert_eq!((l.base(), l.end), (0x2b300000, 0x2b4dd000));
    }

    #[test]
    fn split_keeps_file_offsets_and_separate_code() {
        let mut m = Modules::default();
        let mut s = Space::new("x86_64", 64);
        // A read-only mapping of the whole file, then part of it made
        // executable (text at file offset 0x1000, as with -z separate-code).
        s.map(0x400000, 0x5000, false, file("/a.out", 0), &mut m);
        s.protect(0x401000, 0x2000, true, &mut m);
        assert_eq!(s.lookup(0x400fff), None);
        assert_eq!(s.lookup(0x401000), Some(0));
        assert_eq!(s.lookup(0x403000), None);
        let t = m.get(0);
        assert_eq!(
            (t.start, t.end, t.offset, t.base()),
            (0x401000, 0x403000, 0x1000, 0x400000)
        );
        assert_eq!(t.file_offset(0x401234), 0x1234);
        // Re-mapping the same text elsewhere is a new module.
        s.unmap(0x400000, 0x5000);
        assert_eq!(s.lookup(0x401000), None);
        s.map(0x800000, 0x1000, true, file("/a.out", 0x1000), &mut m);
        assert_eq!(s.lookup(0x800000), Some(1));
        assert_eq!(m.get(1).base(), 0x7ff000);
        // The same mapping in another process: the same module.
        let mut s2 = Space::new("x86_64", 64);
        s2.map(0x800000, 0x1000, true, file("/a.out", 0x1000), &mut m);
        assert_eq!(s2.lookup(0x800fff), Some(1));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn offsets_beyond_the_address_and_wrapping_lengths() {
        let mut m = Modules::default();
        let mut s = Space::new("riscv64", 64);
        s.map(0x1000, 0x1000, true, file("/odd", 0x5000), &mut m);
        assert_eq!(m.get(0).base(), 0x1000);
        s.map(u64::MAX - 0xfff, 0x2000, true, None, &mut m);
        assert_eq!(s.lookup(u64::MAX - 1), Some(1));
        s.map(0x5000, 0, true, None, &mut m);
        assert_eq!(s.lookup(0x5000), None);
    }
}
