// SPDX-License-Identifier: GPL-2.0-or-later
//! The functions of an ELF file, as a probe needs them: where each one's
//! code starts and ends, where a call lands, and its bytes (the return
//! instructions are found in them, see [`super::isa`]).
//!
//! A symbol's value is not always where a call lands: an ARM Thumb
//! function's value has bit 0 set (the interworking bit), and a PowerPC
//! ELFv2 function has a local entry a few instructions past its value
//! (`st_other`), where calls from code sharing its TOC land; a call through
//! the global entry runs on into the local one, so the probe sits there and
//! fires once for either.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use object::read::elf::{ElfFile, FileHeader, ProgramHeader};
use object::{elf, Object, ObjectSymbol, SymbolKind};

use super::super::demangle::qualified_name;
use super::conv::Abi;
use super::error::Error;

/// One function symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Func {
    pub name: String,
    /// Its first instruction (Thumb: the even address).
    pub start: u64,
    /// Where the entry probe sits: `start`, or the ELFv2 local entry.
    pub entry: u64,
    /// As the symbol table says (0 for many assembly functions).
    pub size: u64,
    /// Where its code ends: `start + size`, or for a symbol without a size
    /// the next function's start (at most 4 KiB on), so that the returns
    /// of assembly functions such as i386's `__x86.get_pc_thunk.ax` are
    /// found.
    pub end: u64,
    /// ARM Thumb code.
    pub thumb: bool,
    /// A GNU indirect function (`STT_GNU_IFUNC`): the code at `start` is
    /// its resolver, which the dynamic loader runs once to choose the
    /// implementation every call then reaches.
    pub ifunc: bool,
}

/// An ELF file's functions and code, at its link-time addresses.
pub struct Image {
    pub path: PathBuf,
    pub abi: Abi,
    pub big_endian: bool,
    /// Position independent (ET_DYN): run-time addresses need the load
    /// bias.
    pub pie: bool,
    /// Where the file's offset 0 is, at link-time addresses: a shared
    /// library's load bias is its mapping of offset 0 minus this.
    pub low: u64,
    /// How many bytes from `low` its loadable segments cover.
    pub span: u64,
    /// Where it starts running (`e_entry`; ARM: the even address): the
    /// first instruction QEMU runs of the file it starts in.
    pub entry: u64,
    /// Sorted by start; one name per start (the first in the table).
    pub funcs: Vec<Func>,
    /// The separate debug file whose symbol table was read too, if the
    /// file has none of its own but one is installed (`debug_file`).
    pub debug: Option<PathBuf>,
    /// Loadable executable segments: (address, bytes' range in `file`).
    code: Vec<(u64, Range<usize>)>,
    /// The file's bytes, kept whole: its code is most of most files, and
    /// a copy of the code alone would cost a second allocation and copy of
    /// megabytes at every launch.
    file: Vec<u8>,
    /// Each of `funcs`' C++ or Rust name without parameters
    /// ([`qualified_name`]), worked out the first time a probe needs one.
    qualified: OnceLock<Vec<Option<String>>>,
}

/// The page of the lowest loadable segment: where the file's offset 0 is
/// mapped, at link-time addresses.
fn low_page<E: FileHeader<Endian = object::Endianness>>(f: &ElfFile<'_, E>) -> u64 {
    let e = f.endian();
    f.elf_program_headers()
        .iter()
        .filter(|p| p.p_type(e) == elf::PT_LOAD)
        .map(|p| {
            let v: u64 = p.p_vaddr(e).into();
            let o: u64 = p.p_offset(e).into();
            v - o
        })
        .min()
        .unwrap_or(0)
}

/// How far the loadable segments reach past the low page.
fn span<E: FileHeader<Endian = object::Endianness>>(f: &ElfFile<'_, E>, low: u64) -> u64 {
    let e = f.endian();
    f.elf_program_headers()
        .iter()
        .filter(|p| p.p_type(e) == elf::PT_LOAD)
        .map(|p| {
            let v: u64 = p.p_vaddr(e).into();
            let m: u64 = p.p_memsz(e).into();
            (v + m).saturating_sub(low)
        })
        .max()
        .unwrap_or(0)
}

/// The loadable executable segments: (address, their bytes' range in the
/// file). A segment whose bytes the file does not hold is left out.
fn segments<E: FileHeader<Endian = object::Endianness>>(
    f: &ElfFile<'_, E>,
) -> Vec<(u64, Range<usize>)> {
    let e = f.endian();
    let len = f.data().len() as u64;
    f.elf_program_headers()
        .iter()
        .filter(|p| p.p_type(e) == elf::PT_LOAD && p.p_flags(e) & elf::PF_X != 0)
        .filter_map(|p| {
            let (offset, size) = p.file_range(e);
            let end = offset.checked_add(size).filter(|&end| end <= len)?;
            Some((p.p_vaddr(e).into(), offset as usize..end as usize))
        })
        .collect()
}

impl Image {
    /// A Go program: its runtime's allocator is in the symbol table. Its
    /// functions follow Go's conventions, not the C ones of [`Abi`].
    pub fn is_go(&self) -> bool {
        self.funcs.iter().any(|f| f.name == "runtime.mallocgc")
    }

    /// Reads `path`; `Err` is one line.
    pub fn read(path: &Path) -> Result<Image, Error> {
        let data = std::fs::read(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let file = object::File::parse(&*data).map_err(|source| Error::NotElf {
            path: path.to_path_buf(),
            source,
        })?;
        let abi = Abi::of(&file).ok_or_else(|| Error::NoAbi {
            path: path.to_path_buf(),
            arch: file.architecture(),
        })?;
        let (code, low, span) = match &file {
            object::File::Elf32(f) => (segments(f), low_page(f), span(f, low_page(f))),
            object::File::Elf64(f) => (segments(f), low_page(f), span(f, low_page(f))),
            _ => return Err(Error::NotElfFormat(path.to_path_buf())),
        };
        let mut funcs = functions(&file, abi);
        // A stripped library (Debian's libc) keeps only `.dynsym`, which
        // has no symbol for the implementations of its indirect functions
        // (`strlen`'s `__strlen_avx2`...): its installed debug file has.
        let mut debug = None;
        if file.symbols().next().is_none() {
            if let Some(d) = crate::elf::debug_file(&file) {
                if let Some(more) = std::fs::read(&d)
                    .ok()
                    .and_then(|data| object::File::parse(&*data).ok().map(|f| functions(&f, abi)))
                {
                    funcs.extend(more);
                    debug = Some(d);
                }
            }
        }
        // A stripped Go program still has its runtime's table.
        if funcs.is_empty() {
            funcs = super::gopclntab::functions(&file)
                .unwrap_or_default()
                .into_iter()
                .map(|g| Func {
                    name: g.name,
                    start: g.start,
                    entry: g.start,
                    size: g.end - g.start,
                    end: g.end,
                    thumb: false,
                    ifunc: false,
                })
                .collect();
        }
        funcs.sort_by(|a, b| a.start.cmp(&b.start).then(a.name.cmp(&b.name)));
        funcs.dedup_by(|b, a| a.start == b.start && a.name == b.name);
        let starts: Vec<u64> = funcs.iter().map(|f| f.start).collect();
        for f in funcs.iter_mut().filter(|f| f.size == 0) {
            let next = starts.partition_point(|&s| s <= f.start);
            let limit = starts.get(next).copied().unwrap_or(u64::MAX);
            f.end = limit.min(f.start + 4096);
        }
        Ok(Image {
            path: path.to_path_buf(),
            abi,
            big_endian: !file.is_little_endian(),
            pie: file.kind() == object::ObjectKind::Dynamic,
            low,
            span,
            entry: if abi == Abi::Aapcs {
                file.entry() & !1
            } else {
                file.entry()
            },
            funcs,
            debug,
            code,
            file: data,
            qualified: OnceLock::new(),
        })
    }

    /// The implementations of the indirect function `f`, by glibc's naming
    /// of them (`__strlen_avx2`, `__strlen_sse2` for `strlen`; the
    /// resolver's own local name, `__strlen_ifunc`, is not one): whichever
    /// the resolver picks at load time is probed. Empty when no symbol
    /// names them (a stripped library without its debug file).
    pub fn implementations<'a>(&'a self, f: &'a Func) -> impl Iterator<Item = &'a Func> + 'a {
        let prefix = format!("__{}_", f.name);
        self.funcs
            .iter()
            .filter(move |g| !g.ifunc && g.start != f.start && g.name.starts_with(&prefix))
    }

    /// The bytes of `[start, start + len)`, if code of the file.
    pub fn bytes(&self, start: u64, len: u64) -> Option<&[u8]> {
        self.code().find_map(|(a, d)| {
            let off = start.checked_sub(a)?;
            let end = off.checked_add(len)?;
            (end <= d.len() as u64).then(|| &d[off as usize..end as usize])
        })
    }

    /// The bytes from `start` to at most `len` on, ending where its segment
    /// does (a symbol without a size near the end of the code).
    pub fn bytes_to_segment_end(&self, start: u64, len: u64) -> Option<&[u8]> {
        self.code().find_map(|(a, d)| {
            let off = start.checked_sub(a)?;
            let end = off.checked_add(len)?.min(d.len() as u64);
            (off < end).then(|| &d[off as usize..end as usize])
        })
    }

    /// The loadable executable segments: (address, bytes).
    pub fn code(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.code.iter().map(|(a, r)| (*a, &self.file[r.clone()]))
    }

    /// Adds functions no symbol names (found by their code, see
    /// `heap::sig`), kept sorted by start.
    pub fn add_funcs(&mut self, more: Vec<Func>) {
        self.funcs.extend(more);
        self.funcs
            .sort_by(|a, b| a.start.cmp(&b.start).then(a.name.cmp(&b.name)));
        self.funcs
            .dedup_by(|b, a| a.start == b.start && a.name == b.name);
        // By position: worked out again for the new list.
        self.qualified = OnceLock::new();
    }

    /// The function whose code holds `pc`.
    pub fn containing(&self, pc: u64) -> Option<&Func> {
        let i = self.funcs.partition_point(|f| f.start <= pc);
        self.funcs[..i].iter().rev().find(|f| pc < f.end)
    }

    /// The functions whose names `glob` matches; a Go assembly function
    /// (`crypto/sha256.block.abi0`) by its Go name too, as Go's stack
    /// traces and a stripped program's own table name it; a C++ or Rust
    /// function by its qualified name too (`geo::Box::area` for
    /// `_ZN3geo3Box4areaEv`), as `perf probe` and SystemTap take them.
    pub fn matching<'a>(&'a self, glob: &'a str) -> impl Iterator<Item = &'a Func> + 'a {
        self.funcs.iter().enumerate().filter_map(move |(i, f)| {
            let hit = super::spec::glob(glob, &f.name)
                || f.name
                    .strip_suffix(".abi0")
                    .is_some_and(|n| super::spec::glob(glob, n))
                || (f.name.starts_with("_Z") || f.name.starts_with("_R"))
                    && self.qualified()[i]
                        .as_deref()
                        .is_some_and(|n| super::spec::glob(glob, n));
            hit.then_some(f)
        })
    }

    /// [`Image::qualified`], worked out on first use.
    fn qualified(&self) -> &[Option<String>] {
        self.qualified
            .get_or_init(|| self.funcs.iter().map(|f| qualified_name(&f.name)).collect())
    }
}

/// The function symbols of `file`: its symbol table's, or its dynamic
/// symbol table's when it has no other, unsorted.
fn functions(file: &object::File, abi: Abi) -> Vec<Func> {
    let ppc = abi == Abi::Elfv2;
    let arm = abi == Abi::Aapcs;
    let ifunc = |s: &object::Symbol| matches!(s.flags(), object::SymbolFlags::Elf { st_info, .. } if st_info & 0xf == elf::STT_GNU_IFUNC);
    // STT_FUNC, and STT_GNU_IFUNC (its value is the resolver, which is
    // code too, and what `nm` lists).
    let is_code = |s: &object::Symbol| s.kind() == SymbolKind::Text || ifunc(s);
    let mut syms: Vec<object::Symbol> = file.symbols().collect();
    if !syms.iter().any(is_code) {
        syms = file.dynamic_symbols().collect();
    }
    syms.iter()
        .filter(|s| is_code(s) && !s.is_undefined() && s.address() != 0)
        .filter_map(|s| {
            let name = s.name().ok()?.to_string();
            if name.is_empty() || name.starts_with('$') {
                return None;
            }
            let thumb = arm && s.address() & 1 == 1;
            let start = if arm { s.address() & !1 } else { s.address() };
            let local = match s.flags() {
                object::SymbolFlags::Elf { st_other, .. } if ppc => local_entry(st_other),
                _ => 0,
            };
            Some(Func {
                name,
                start,
                entry: start + local,
                size: s.size(),
                end: start + s.size(),
                thumb,
                ifunc: ifunc(s),
            })
        })
        .collect()
}

/// Bytes from an ELFv2 function's global entry to its local entry, from
/// the three high bits `v` of `st_other` (the ELFv2 ABI: 0 and 1 mean the
/// same address, 2 to 6 mean `1 << v` bytes past it).
pub fn local_entry(st_other: u8) -> u64 {
    match (st_other >> 5) & 7 {
        v @ 2..=6 => 1u64 << v,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elfv2_local_entry_offsets() {
        assert_eq!(local_entry(0), 0);
        assert_eq!(local_entry(1 << 5), 0);
        assert_eq!(local_entry(3 << 5), 8);
        assert_eq!(local_entry(4 << 5), 16);
        assert_eq!(local_entry(2 << 5), 4);
    }
}
