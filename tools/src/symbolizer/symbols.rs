//! Symbol tables: from an ELF file (with the `object` crate) or an `nm`
//! listing, looked up by binary search.
//!
//! Any ELF class and byte order (`object` reads 32- and 64-bit, big- and
//! little-endian files alike). An ARM Thumb function's symbol value has bit
//! 0 set (the interworking bit), while its code, and so every pc of the
//! trace, starts at the even address: the table keeps the code address, as
//! `nm` prints it.

use std::path::Path;

use object::{Object, ObjectKind, ObjectSection, ObjectSymbol, SymbolKind};

use crate::elf::{self, ReadError};

/// A named address range.
#[derive(Debug, Clone)]
struct Range {
    start: u64,
    /// Exclusive end.
    end: u64,
    name: Box<str>,
}

/// Where an address lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loc {
    /// Inside symbol `idx`, `off` bytes from its start.
    Sym { idx: u32, off: u64 },
    /// Not in a symbol but inside section `idx`.
    Section { idx: u32, off: u64 },
}

/// A sorted symbol table, plus the file's allocated sections as a fallback
/// label for data addresses.
#[derive(Debug, Default)]
pub struct Symbols {
    syms: Vec<Range>,
    sections: Vec<Range>,
    /// The ELF file is position independent (ET_DYN).
    pub pie: bool,
}

/// A symbol as read, before the table is built.
struct Raw {
    addr: u64,
    /// 0 = unknown.
    size: u64,
    name: String,
    /// Higher wins among symbols at the same address.
    rank: u8,
}

impl Symbols {
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// Reads the symbol table (or, without one, the dynamic symbols) of an
    /// ELF file. `bias` is added to every address (the load address of a
    /// position independent executable).
    pub fn from_elf(path: &Path, bias: u64) -> Result<Symbols, ReadError> {
        let data = elf::read(path)?;
        let file = elf::parse(path, &data)?;
        let arch = file.architecture();
        let mut raw: Vec<Raw> = file
            .symbols()
            .filter_map(|s| raw_symbol(arch, &s, bias))
            .collect();
        if raw.is_empty() {
            raw = file
                .dynamic_symbols()
                .filter_map(|s| raw_symbol(arch, &s, bias))
                .collect();
        }
        let mut sections: Vec<Range> = file
            .sections()
            .filter(|s| s.address() != 0 && s.size() != 0)
            .filter_map(|s| {
                let name = s.name().ok()?;
                let start = s.address().wrapping_add(bias);
                Some(Range {
                    start,
                    end: start.saturating_add(s.size()),
                    name: name.into(),
                })
            })
            .collect();
        sections.sort_by_key(|s| s.start);
        let mut t = Symbols::build(raw, sections);
        t.pie = file.kind() == ObjectKind::Dynamic;
        Ok(t)
    }

    /// Reads an `nm` listing: `ADDR TYPE NAME` lines, or `ADDR SIZE TYPE
    /// NAME` as printed by `nm -S`. Other lines (undefined symbols, file
    /// headers) are skipped.
    pub fn from_nm(text: &str, bias: u64) -> Symbols {
        let mut raw = Vec::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (addr, size, ty, name) = match f.as_slice() {
                [a, t, n] if t.len() == 1 => (*a, None, *t, *n),
                [a, s, t, n] if t.len() == 1 => (*a, Some(*s), *t, *n),
                _ => continue,
            };
            let Ok(addr) = u64::from_str_radix(addr.trim_start_matches("0x"), 16) else {
                continue;
            };
            let size = size
                .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
                .unwrap_or(0);
            let ty = ty.chars().next().unwrap_or('?');
            if matches!(ty, 'U' | 'u' | 'w' | 'v' | 'N' | '-') || addr == 0 || skip_name(name) {
                continue;
            }
            let rank = match ty {
                'T' | 't' | 'D' | 'd' | 'B' | 'b' | 'R' | 'r' => 4,
                _ => 0,
            } + if ty.is_ascii_uppercase() { 2 } else { 0 }
                + if size > 0 { 1 } else { 0 };
            raw.push(Raw {
                addr: addr.wrapping_add(bias),
                size,
                name: name.to_string(),
                rank,
            });
        }
        Symbols::build(raw, Vec::new())
    }

    /// The same table with C++ and Rust names as a person reads them
    /// ([`crate::demangle::demangle`]), once per symbol.
    pub fn demangled(mut self) -> Symbols {
        for r in &mut self.syms {
            if let std::borrow::Cow::Owned(d) = crate::demangle::demangle(&r.name) {
                r.name = d.into();
            }
        }
        self
    }

    /// Adds the symbols of `other` (e.g. an nm listing on top of the ELF's).
    pub fn merge(self, other: Symbols) -> Symbols {
        let raw = self
            .syms
            .into_iter()
            .chain(other.syms)
            .map(|r| Raw {
                addr: r.start,
                size: r.end - r.start,
                name: r.name.into(),
                rank: 5,
            })
            .collect();
        let mut sections = self.sections;
        sections.extend(other.sections);
        sections.sort_by_key(|s| s.start);
        Symbols::build(raw, sections).with_pie(self.pie || other.pie)
    }

    fn with_pie(mut self, pie: bool) -> Symbols {
        self.pie = pie;
        self
    }

    fn build(mut raw: Vec<Raw>, sections: Vec<Range>) -> Symbols {
        // Best symbol first among those at the same address; keep one.
        raw.sort_by(|a, b| a.addr.cmp(&b.addr).then(b.rank.cmp(&a.rank)));
        raw.dedup_by_key(|r| r.addr);
        let mut syms = Vec::with_capacity(raw.len());
        for i in 0..raw.len() {
            let r = &raw[i];
            let end = if r.size > 0 {
                r.addr.saturating_add(r.size)
            } else {
                // Unknown size: up to the next symbol, within its section.
                let next = raw.get(i + 1).map(|n| n.addr);
                let sec_end = containing(&sections, r.addr).map(|s| sections[s].end);
                match (next, sec_end) {
                    (Some(n), Some(e)) => n.min(e),
                    (Some(n), None) => n,
                    (None, Some(e)) => e,
                    (None, None) => r.addr + 1,
                }
            };
            syms.push(Range {
                start: r.addr,
                end: end.max(r.addr + 1),
                name: std::mem::take(&mut raw[i].name).into(),
            });
        }
        Symbols {
            syms,
            sections,
            pie: false,
        }
    }

    /// Every symbol as (name, start, exclusive end), sorted by start; the
    /// i-th is the one [`Loc::Sym`] `idx` i names (exports list them).
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (&str, u64, u64)> {
        self.syms.iter().map(|r| (&*r.name, r.start, r.end))
    }

    /// The symbol containing `addr`.
    #[inline]
    pub fn symbol(&self, addr: u64) -> Option<Loc> {
        containing(&self.syms, addr).map(|i| Loc::Sym {
            idx: i as u32,
            off: addr - self.syms[i].start,
        })
    }

    /// The symbol containing `addr`, else the section containing it.
    #[inline]
    pub fn locate(&self, addr: u64) -> Option<Loc> {
        self.symbol(addr).or_else(|| {
            containing(&self.sections, addr).map(|i| Loc::Section {
                idx: i as u32,
                off: addr - self.sections[i].start,
            })
        })
    }

    /// Name of a located symbol or section.
    pub fn name(&self, loc: Loc) -> (&str, u64) {
        match loc {
            Loc::Sym { idx, off } => (&self.syms[idx as usize].name, off),
            Loc::Section { idx, off } => (&self.sections[idx as usize].name, off),
        }
    }
}

/// Where a symbol of `kind` with value `value` starts: ARM Thumb
/// functions' values have bit 0 set, their code starts at the even
/// address. Data symbols are what they say.
fn code_address(arch: object::Architecture, kind: SymbolKind, value: u64) -> u64 {
    match (arch, kind) {
        (object::Architecture::Arm, SymbolKind::Text) => value & !1,
        _ => value,
    }
}

/// An ELF symbol worth showing, or None.
fn raw_symbol<'d>(arch: object::Architecture, s: &impl ObjectSymbol<'d>, bias: u64) -> Option<Raw> {
    if s.is_undefined()
        || matches!(
            s.kind(),
            SymbolKind::Section | SymbolKind::File | SymbolKind::Tls
        )
    {
        return None;
    }
    let name = s.name().ok()?;
    if s.address() == 0 || skip_name(name) {
        return None;
    }
    let rank = match s.kind() {
        SymbolKind::Text | SymbolKind::Data => 4,
        _ => 0,
    } + if s.is_global() { 2 } else { 0 }
        + if s.size() > 0 { 1 } else { 0 };
    Some(Raw {
        addr: code_address(arch, s.kind(), s.address()).wrapping_add(bias),
        size: s.size(),
        name: name.to_string(),
        rank,
    })
}

/// Local labels and mapping symbols that only clutter a trace.
fn skip_name(name: &str) -> bool {
    name.is_empty()
        || name.starts_with('$')
        || name.starts_with(".L")
        || name.starts_with("L0\u{1}")
}

/// Index of the range containing `addr` in a list sorted by start. Ranges
/// may nest (a small symbol inside a larger one): look back a few entries.
#[inline]
fn containing(v: &[Range], addr: u64) -> Option<usize> {
    let mut i = v.partition_point(|r| r.start <= addr);
    let mut tries = 0;
    while i > 0 && tries < 4 {
        i -= 1;
        if addr < v[i].end {
            return Some(i);
        }
        tries += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(t: &Symbols, addr: u64) -> Option<String> {
        t.locate(addr).map(|l| {
            let (n, off) = t.name(l);
            format!("{n}+{off:#x}")
        })
    }

    #[test]
    fn nm_listing() {
        let nm = "\
00400000 T _start
00400100 T main
00400180 t helper
         U puts
00410000 D table
00410010 B counter
garbage line
";
        let t = Symbols::from_nm(nm, 0);
        assert_eq!(t.len(), 5);
        assert_eq!(show(&t, 0x400000).as_deref(), Some("_start+0x0"));
        assert_eq!(show(&t, 0x4000ff).as_deref(), Some("_start+0xff"));
        assert_eq!(show(&t, 0x400110).as_deref(), Some("main+0x10"));
        assert_eq!(show(&t, 0x400184).as_deref(), Some("helper+0x4"));
        assert_eq!(show(&t, 0x410004).as_deref(), Some("table+0x4"));
        // The last symbol has no size and nothing after it: exact match only.
        assert_eq!(show(&t, 0x410010).as_deref(), Some("counter+0x0"));
        assert_eq!(show(&t, 0x410011), None);
        assert_eq!(show(&t, 0x3fffff), None);
    }

    #[test]
    fn nm_with_sizes_respects_them() {
        let nm = "\
00400100 00000020 T main
00400200 00000010 T other
00410000 00000004 D word
00410010 B unsized
";
        let t = Symbols::from_nm(nm, 0);
        assert_eq!(show(&t, 0x40011f).as_deref(), Some("main+0x1f"));
        assert_eq!(show(&t, 0x400120), None, "past main's size");
        assert_eq!(show(&t, 0x410003).as_deref(), Some("word+0x3"));
        assert_eq!(show(&t, 0x410004), None);
    }

    #[test]
    fn nested_and_duplicate_symbols() {
        let nm = "\
00400000 00000100 T big
00400010 00000008 t inner
00400010 t inner_alias
";
        let t = Symbols::from_nm(nm, 0x1000);
        assert_eq!(show(&t, 0x401014).as_deref(), Some("inner+0x4"));
        // Past inner's end, still inside big.
        assert_eq!(show(&t, 0x401020).as_deref(), Some("big+0x20"));
        assert_eq!(t.len(), 2);
    }

    /// A function of this test binary that keeps its own symbol (a test
    /// function itself may be inlined into the harness's closure).
    #[inline(never)]
    fn defined_here() -> u32 {
        std::hint::black_box(7)
    }

    #[test]
    fn elf_of_this_test_binary() {
        assert_eq!(std::hint::black_box(defined_here as fn() -> u32)(), 7);
        let exe = std::env::current_exe().unwrap();
        let t = Symbols::from_elf(&exe, 0).expect("read own ELF");
        assert!(t.len() > 100, "only {} symbols", t.len());
        // Every symbol start resolves to itself at offset 0.
        for r in t.syms.iter().step_by(97) {
            match t.symbol(r.start) {
                Some(Loc::Sym { off: 0, .. }) => {}
                other => panic!("{} at {:#x}: {other:?}", r.name, r.start),
            }
        }
        // A function defined here is found by name.
        assert!(t.syms.iter().any(|r| r.name.contains("defined_here")));
        assert!(!t.sections.is_empty());
    }

    /// `nm -S --defined-only`'s view of `exe`: name -> (address, size).
    fn nm_sizes(nm: &str, exe: &Path) -> std::collections::HashMap<String, (u64, u64)> {
        let o = std::process::Command::new(nm)
            .args(["-S", "--defined-only"])
            .arg(exe)
            .output()
            .unwrap_or_else(|e| panic!("{nm}: {e}"));
        assert!(o.status.success(), "{nm} failed");
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                match f.as_slice() {
                    [a, sz, _, n] => Some((
                        n.to_string(),
                        (
                            u64::from_str_radix(a, 16).ok()?,
                            u64::from_str_radix(sz, 16).ok()?,
                        ),
                    )),
                    _ => None,
                }
            })
            .collect()
    }

    /// A guest program built by Debian's cross compiler `cc` (with
    /// `flags`), read back: the class and byte order are `bits` and
    /// `big_endian`, and every one of its functions and data objects
    /// resolves as the cross `nm` places it. ARM Thumb: the symbol values
    /// are odd, the table's (and nm's) addresses even. Skipped when the
    /// cross compiler is not installed (scripts/deps.sh installs it).
    fn guest_elf(cc: &str, flags: &[&str], bits: u32, big_endian: bool) {
        let tag = format!("{cc}{}", flags.join(""));
        let dir = std::env::temp_dir().join(format!("symbolizer-elf-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, exe) = (dir.join("p.c"), dir.join("p"));
        std::fs::write(
            &src,
            "int table[4] = {1, 2, 3, 4};\n\
             __attribute__((noinline)) int helper(int x) { return table[x & 3] * 3; }\n\
             int main(int argc, char **argv) { return helper(argc); }\n",
        )
        .unwrap();
        let built = std::process::Command::new(cc)
            .args(flags)
            .args(["-static", "-O1", "-o"])
            .arg(&exe)
            .arg(&src)
            .status();
        if !matches!(built, Ok(s) if s.success()) {
            eprintln!("skipping: {cc} is not installed (scripts/deps.sh installs it)");
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
        let data = std::fs::read(&exe).unwrap();
        let file = object::File::parse(&*data).unwrap();
        assert_eq!(file.is_64(), bits == 64, "{tag}");
        assert_eq!(file.is_little_endian(), !big_endian, "{tag}");
        let nm = nm_sizes(&cc.replace("-gcc", "-nm"), &exe);
        let t = Symbols::from_elf(&exe, 0).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!t.pie);
        for name in ["main", "helper", "table"] {
            let (addr, size) = nm[name];
            assert!(size > 0, "{tag}: {name}");
            assert_eq!(
                show(&t, addr).as_deref(),
                Some(&*format!("{name}+0x0")),
                "{tag}"
            );
            let last = addr + size - 1;
            assert_eq!(
                show(&t, last).as_deref(),
                Some(&*format!("{name}+{:#x}", size - 1)),
                "{tag}"
            );
        }
        let raw_main = file
            .symbols()
            .find(|s| s.name() == Ok("main"))
            .unwrap()
            .address();
        if file.architecture() == object::Architecture::Arm && !flags.contains(&"-marm") {
            assert_eq!(raw_main, nm["main"].0 | 1, "{tag}: a Thumb symbol");
        } else {
            assert_eq!(raw_main, nm["main"].0, "{tag}");
        }
    }

    #[test]
    fn elf_of_a_mipsel_program() {
        guest_elf("mipsel-linux-gnu-gcc", &[], 32, false);
    }

    #[test]
    fn elf_of_a_mips_program() {
        guest_elf("mips-linux-gnu-gcc", &[], 32, true);
    }

    #[test]
    fn elf_of_a_mips64el_program() {
        guest_elf("mips64el-linux-gnuabi64-gcc", &[], 64, false);
    }

    #[test]
    fn elf_of_an_arm_thumb_program() {
        guest_elf("arm-linux-gnueabihf-gcc", &[], 32, false);
    }

    #[test]
    fn elf_of_an_arm_a32_program() {
        guest_elf("arm-linux-gnueabihf-gcc", &["-marm"], 32, false);
    }

    #[test]
    fn elf_of_an_aarch64_program() {
        guest_elf("aarch64-linux-gnu-gcc", &[], 64, false);
    }

    #[test]
    fn elf_of_a_riscv64_program() {
        guest_elf("riscv64-linux-gnu-gcc", &[], 64, false);
    }

    #[test]
    fn elf_of_an_i386_program() {
        guest_elf("i686-linux-gnu-gcc", &[], 32, false);
    }

    #[test]
    fn elf_of_a_ppc64le_program() {
        guest_elf("powerpc64le-linux-gnu-gcc", &[], 64, false);
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let e = Symbols::from_elf(Path::new("/nonexistent/prog"), 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/prog"), "{e}");
    }
}
