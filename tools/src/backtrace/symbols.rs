//! The guest executable's functions, from its ELF symbol table, and its
//! code (PowerPC: the tracer reads call instructions).
//!
//! Two things make a symbol's value differ from the address code runs at:
//! an ARM Thumb function's value has bit 0 set (the interworking bit: a
//! `blx` to it switches to Thumb state), and a PowerPC ELFv2 function has a
//! local entry point a few instructions past its value (`st_other` says how
//! far), where calls from code sharing its TOC land.

use std::path::Path;
use std::sync::Arc;

use object::elf;
use object::read::elf::{ElfFile, FileHeader, ProgramHeader};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

use crate::elf::ReadError;

/// One function: `[start, end)` at the ELF's link-time addresses.
#[derive(Debug, Clone)]
pub struct Func {
    pub start: u64,
    pub end: u64,
    pub name: Arc<str>,
    /// The local entry point's distance from `start` (PowerPC ELFv2; else
    /// 0).
    pub local_entry: u64,
}

/// The functions of one executable, sorted and without overlaps.
#[derive(Debug, Default)]
pub struct Functions {
    funcs: Vec<Func>,
    /// Position independent (ET_DYN): the addresses need the load bias.
    pub pie: bool,
    /// Lowest page of the first loadable segment: the file's offset 0 is
    /// mapped there (plus the bias).
    pub first_page: u64,
    /// Executable sections, sorted: they name code outside any function
    /// (`.plt+0x18`).
    sections: Vec<Func>,
    /// The executable segments' bytes by link-time address, sorted.
    code: Vec<(u64, Vec<u8>)>,
    big_endian: bool,
}

/// A symbol as read, before the table is built.
struct Raw {
    start: u64,
    size: u64,
    /// End of its section: an unsized symbol ends there at the latest.
    limit: u64,
    name: String,
    /// Which of several symbols at one address names the function: lower
    /// wins.
    rank: (u8, usize, String),
    local_entry: u64,
}

impl Functions {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.funcs.len()
    }

    /// Reads the function symbols (STT_FUNC, STT_GNU_IFUNC) of an ELF file.
    pub fn from_elf(path: &Path) -> Result<Functions, ReadError> {
        Functions::read(path, false)
    }

    /// [`Functions::from_elf`], and where the file keeps only `.dynsym`
    /// (Debian's libc), also the symbols of its installed debug file
    /// ([`crate::elf::debug_file`]): the local functions too, as memcheck
    /// names them (`__libc_start_call_main`, below `main`).
    pub fn from_elf_and_debug(path: &Path) -> Result<Functions, ReadError> {
        Functions::read(path, true)
    }

    fn read(path: &Path, debug: bool) -> Result<Functions, ReadError> {
        let data = crate::elf::read(path)?;
        let file = crate::elf::parse(path, &data)?;
        let (first_page, code) = match &file {
            object::File::Elf32(f) => (first_load_page(f), code_segments(f)),
            object::File::Elf64(f) => (first_load_page(f), code_segments(f)),
            _ => return Err(ReadError::NotElf(path.to_path_buf())),
        };
        let mut raw: Vec<Raw> = file
            .symbols()
            .filter_map(|s| raw_symbol(&file, &s))
            .collect();
        if raw.is_empty() {
            raw = file
                .dynamic_symbols()
                .filter_map(|s| raw_symbol(&file, &s))
                .collect();
            if let Some(d) = debug.then(|| crate::elf::debug_file(&file)).flatten() {
                if let Ok(data) = crate::elf::read(&d) {
                    if let Ok(f) = crate::elf::parse(&d, &data) {
                        raw.extend(f.symbols().filter_map(|s| raw_symbol(&f, &s)));
                    }
                }
            }
        }
        let mut sections: Vec<Func> = file
            .sections()
            .filter(|s| {
                s.address() != 0
                    && s.size() != 0
                    && matches!(
                        s.flags(),
                        object::SectionFlags::Elf { sh_flags } if sh_flags & u64::from(elf::SHF_EXECINSTR) != 0
                    )
            })
            .filter_map(|s| {
                Some(Func {
                    start: s.address(),
                    end: s.address().saturating_add(s.size()),
                    name: s.name().ok()?.into(),
                    local_entry: 0,
                })
            })
            .collect();
        sections.sort_by_key(|s| s.start);
        Ok(Functions {
            funcs: build(raw),
            pie: file.kind() == object::ObjectKind::Dynamic,
            first_page,
            sections,
            code,
            big_endian: !file.is_little_endian(),
        })
    }

    /// The same table with C++ and Rust names as a person reads them
    /// ([`crate::demangle::demangle`]): once per symbol here, not once
    /// per event where a name is shown.
    pub fn demangled(mut self) -> Functions {
        for f in &mut self.funcs {
            if let std::borrow::Cow::Owned(d) = crate::demangle::demangle(&f.name) {
                f.name = d.into();
            }
        }
        self
    }

    /// A table from `(start, size, name)` triples (tests).
    #[cfg(test)]
    pub fn from_list(list: &[(u64, u64, &str)]) -> Functions {
        let raw = list
            .iter()
            .map(|&(start, size, name)| Raw {
                start,
                size,
                limit: u64::MAX,
                name: name.to_string(),
                rank: (0, 0, name.to_string()),
                local_entry: 0,
            })
            .collect();
        Functions {
            funcs: build(raw),
            ..Functions::default()
        }
    }

    /// The function containing link-time address `addr`.
    pub fn find(&self, addr: u64) -> Option<&Func> {
        let i = self.funcs.partition_point(|f| f.start <= addr);
        let f = self.funcs.get(i.checked_sub(1)?)?;
        (addr < f.end).then_some(f)
    }

    /// The 4-byte instruction word at link-time address `addr`, in the
    /// file's byte order.
    pub fn word(&self, addr: u64) -> Option<u32> {
        let i = self.code.partition_point(|(start, _)| *start <= addr);
        let (start, bytes) = self.code.get(i.checked_sub(1)?)?;
        let off = usize::try_from(addr - start).ok()?;
        let b: [u8; 4] = bytes.get(off..off.checked_add(4)?)?.try_into().ok()?;
        Some(if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    /// The executable section containing link-time address `addr`.
    pub fn section(&self, addr: u64) -> Option<&Func> {
        let i = self.sections.partition_point(|f| f.start <= addr);
        let f = self.sections.get(i.checked_sub(1)?)?;
        (addr < f.end).then_some(f)
    }
}

fn first_load_page<F: FileHeader>(f: &ElfFile<'_, F>) -> u64 {
    let endian = f.endian();
    f.elf_program_headers()
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD)
        .map(|p| {
            let vaddr: u64 = p.p_vaddr(endian).into();
            vaddr & !0xfff
        })
        .min()
        .unwrap_or(0)
}

/// The file bytes of the executable PT_LOAD segments, by link-time
/// address.
fn code_segments<F: FileHeader>(f: &ElfFile<'_, F>) -> Vec<(u64, Vec<u8>)> {
    let endian = f.endian();
    let mut v: Vec<(u64, Vec<u8>)> = f
        .elf_program_headers()
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD && p.p_flags(endian) & elf::PF_X != 0)
        .filter_map(|p| {
            let data = p.data(endian, f.data()).ok()?;
            Some((p.p_vaddr(endian).into(), data.to_vec()))
        })
        .collect();
    v.sort_by_key(|(a, _)| *a);
    v
}

/// The address code of a function symbol runs at, and the distance of its
/// local entry point: ARM Thumb symbols have bit 0 set, PowerPC ELFv2
/// ones carry the local entry in the top three bits of `st_other` (as
/// `PPC64_LOCAL_ENTRY_OFFSET` decodes them: 0 and 1 mean none, n means
/// `1 << n` bytes).
fn code_address(arch: object::Architecture, value: u64, st_other: u8) -> (u64, u64) {
    match arch {
        object::Architecture::Arm => (value & !1, 0),
        object::Architecture::PowerPc64 => {
            let local = match st_other >> 5 {
                0 | 1 => 0,
                n => 1u64 << n,
            };
            (value, local)
        }
        _ => (value, 0),
    }
}

fn raw_symbol<'a>(file: &object::File<'a>, s: &impl ObjectSymbol<'a>) -> Option<Raw> {
    if s.kind() != SymbolKind::Text || s.is_undefined() || s.address() == 0 {
        return None;
    }
    let st_other = match s.flags() {
        object::SymbolFlags::Elf { st_other, .. } => st_other,
        _ => 0,
    };
    let (start, local_entry) = code_address(file.architecture(), s.address(), st_other);
    let name = s.name().ok()?;
    if name.is_empty() {
        return None;
    }
    // Prefer global names, then the one with fewer leading underscores
    // (`printf` over `_IO_printf`), then the alphabetically first.
    let binding = if s.is_global() {
        0
    } else if s.is_weak() {
        1
    } else {
        2
    };
    let underscores = name.len() - name.trim_start_matches('_').len();
    let limit = s
        .section_index()
        .and_then(|i| file.section_by_index(i).ok())
        .map_or(u64::MAX, |sec| sec.address().saturating_add(sec.size()));
    Some(Raw {
        start,
        size: s.size(),
        limit,
        name: name.to_string(),
        rank: (binding, underscores, name.to_string()),
        local_entry,
    })
}

/// Sorts, merges aliases and gives unsized symbols the room up to the next.
fn build(mut raw: Vec<Raw>) -> Vec<Func> {
    raw.sort_by(|a, b| a.start.cmp(&b.start).then_with(|| a.rank.cmp(&b.rank)));
    let mut funcs: Vec<Func> = Vec::with_capacity(raw.len());
    // (size, section end) of each function.
    let mut sizes: Vec<(u64, u64)> = Vec::with_capacity(raw.len());
    for r in raw {
        if let Some(last) = funcs.last() {
            if last.start == r.start {
                // An alias: the first (best ranked) keeps the name, the
                // largest size counts.
                let s = sizes.last_mut().unwrap();
                s.0 = s.0.max(r.size);
                continue;
            }
        }
        funcs.push(Func {
            start: r.start,
            end: 0,
            name: r.name.into(),
            local_entry: r.local_entry,
        });
        sizes.push((r.size, r.limit));
    }
    for i in 0..funcs.len() {
        let next = funcs.get(i + 1).map_or(u64::MAX, |f| f.start);
        let end = match sizes[i] {
            (0, limit) => next.min(limit),
            (s, _) => funcs[i].start.saturating_add(s).min(next),
        };
        funcs[i].end = end;
    }
    funcs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup() {
        let t = Functions::from_list(&[
            (0x100, 0x10, "a"),
            (0x100, 0x20, "alias"),
            (0x140, 0, "unsized"),
            (0x200, 0x8, "b"),
        ]);
        assert_eq!(t.len(), 3);
        assert_eq!(t.find(0x100).unwrap().name.as_ref(), "a");
        assert_eq!(t.find(0x11f).unwrap().name.as_ref(), "a");
        assert!(t.find(0x120).is_none());
        assert!(t.find(0xff).is_none());
        assert_eq!(t.find(0x1ff).unwrap().name.as_ref(), "unsized");
        assert_eq!(t.find(0x207).unwrap().name.as_ref(), "b");
        assert!(t.find(0x208).is_none());
    }
}
