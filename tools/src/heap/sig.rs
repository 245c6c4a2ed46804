// SPDX-License-Identifier: GPL-2.0-or-later
//! The allocation functions of a stripped static program, found by their
//! code, as IDA's FLIRT finds library functions: Debian links its static
//! programs (busybox-static) with the very `libc.a` its cross toolchains
//! install (`/usr/<triple>/lib/libc.a`, the host's in
//! `/usr/lib/<triple>/libc.a`), and the linker copies an archive member's
//! code as it is, changing only the fields its relocations name.
//!
//! So each allocation function of the member that defines it (`malloc.o`:
//! `malloc`, `free`, `calloc`, `realloc`, `memalign`...; other members for
//! `reallocarray` and the C library's teardown) is a pattern: its bytes,
//! less those the linker may rewrite (the relocated field, widened to the
//! whole instruction on fixed-width machines and to the opcode before it
//! where x86's linker relaxes a GOT or TLS access) and the pc-relative
//! branches that leave the function (the program's C library may be a
//! build apart from the archive's, the native compiler's rather than the
//! cross one's, with the same code at other offsets in the member). A
//! pattern found once in the program's code, at an instruction boundary,
//! is that function; one found several times is placed where the other
//! functions of its section put that section, or skipped. Nothing is
//! cached: reading one archive member and scanning a few MB takes
//! milliseconds.
//!
//! The C library's string functions are found the same way (their loads
//! past a string's block are exempt, as memcheck replaces them), with
//! their variants (`__strlen_asimd`, `__memchr_neon`); one whose whole
//! code is not found, the program's C library being another version, may
//! be found by its start alone.
//!
//! RISC-V's linker does more: it relaxes calls and addresses into shorter
//! instruction sequences, so a function's code there is a [`Sig`], a
//! sequence of pieces some of which have several forms (`riscv`), and
//! its section's functions move apart from each other (none is placed by
//! the others then).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use object::read::archive::ArchiveFile;
use object::{elf as E, Object, ObjectSection, ObjectSymbol, RelocationFlags, SymbolKind};

use super::super::probe::elf::{local_entry, Func, Image};
use super::alloc::{self, Role};

mod riscv;
mod seq;

pub use seq::{find, Piece, Sig};

/// A function's code with the bits the linker fills in left open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub bytes: Vec<u8>,
    /// The bits of each byte the program's must equal (0xff: the whole
    /// byte; 0: any byte).
    pub mask: Vec<u8>,
}

impl Pattern {
    /// `bytes`, all known.
    pub fn new(bytes: &[u8]) -> Pattern {
        Pattern {
            bytes: bytes.to_vec(),
            mask: vec![0xff; bytes.len()],
        }
    }

    /// `bytes` with only the bits of `mask` known (as long as `bytes`).
    pub fn masked(bytes: &[u8], mask: &[u8]) -> Pattern {
        Pattern {
            bytes: bytes.to_vec(),
            mask: mask.to_vec(),
        }
    }

    /// Leaves `[start, end)` open (clipped to the pattern).
    pub fn open(&mut self, start: usize, end: usize) {
        let end = end.min(self.mask.len());
        if start < end {
            self.mask[start..end].fill(0);
        }
    }

    /// How many bytes' worth of bits must match (the bits, by 8: an
    /// instruction with only its immediate open still tells much).
    pub fn known_bytes(&self) -> usize {
        self.mask
            .iter()
            .map(|m| m.count_ones() as usize)
            .sum::<usize>()
            / 8
    }

    /// The longest run of whole known bytes, (offset, length): the part
    /// searched for first.
    fn anchor(&self) -> (usize, usize) {
        let (mut best, mut run_start) = ((0, 0), 0);
        for (i, &m) in self.mask.iter().enumerate() {
            if m != 0xff {
                run_start = i + 1;
            } else if i + 1 - run_start > best.1 {
                best = (run_start, i + 1 - run_start);
            }
        }
        best
    }

    fn matches(&self, hay: &[u8]) -> bool {
        hay.len() >= self.bytes.len()
            && self
                .bytes
                .iter()
                .zip(&self.mask)
                .zip(hay)
                .all(|((b, m), h)| (b ^ h) & m == 0)
    }
}

/// How an object's relocations rewrite its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    X86,
    /// Instructions of this many bytes at most, as aligned (ARM: 2, the
    /// Thumb halfword; the rest: 4).
    Fixed(usize),
}

/// The bytes `[start, end)` of a section a relocation of type `r_type` at
/// `off`, `bits` wide (0: not known), lets the linker change.
pub fn relocated(isa: Isa, off: usize, bits: u8, r_type: u32) -> (usize, usize) {
    let len = if bits == 0 {
        4
    } else {
        usize::from(bits).div_ceil(8)
    };
    match isa {
        Isa::X86 => {
            const TLS_CALL: &[u32] = &[
                E::R_X86_64_TLSGD,
                E::R_X86_64_TLSLD,
                E::R_X86_64_TLSDESC_CALL,
                E::R_X86_64_GOTPC32_TLSDESC,
            ];
            const RELAXED: &[u32] = &[
                E::R_X86_64_GOTPCREL,
                E::R_X86_64_GOTPCRELX,
                E::R_X86_64_REX_GOTPCRELX,
                E::R_X86_64_GOTTPOFF,
            ];
            const RELAXED_386: &[u32] = &[
                E::R_386_GOT32,
                E::R_386_GOT32X,
                E::R_386_TLS_IE,
                E::R_386_TLS_GOTIE,
                E::R_386_TLS_GD,
                E::R_386_TLS_LDM,
                E::R_386_TLS_GOTDESC,
                E::R_386_TLS_DESC_CALL,
            ];
            // The i386 and x86_64 numbers overlap: both sets widen, which
            // only leaves a few more bytes open.
            if TLS_CALL.contains(&r_type) || RELAXED_386[4..].contains(&r_type) {
                // A general or local dynamic TLS sequence, relaxed whole.
                (off.saturating_sub(4), off.saturating_add(12))
            } else if RELAXED.contains(&r_type) || RELAXED_386.contains(&r_type) {
                // `mov x@GOTPCREL(%rip)` becomes `lea`, `mov $x`, ...: the
                // opcode and ModRM bytes before the field change too.
                (off.saturating_sub(3), off.saturating_add(len))
            } else {
                (off, off.saturating_add(len))
            }
        }
        Isa::Fixed(w) => {
            let start = off - off % w;
            let end = off.saturating_add(len).max(start.saturating_add(4));
            (start, end.div_ceil(w).saturating_mul(w))
        }
    }
}

/// Leaves open the pc-relative branches of the function `pat` (its bytes
/// from offset 0) that leave it: the assembler resolves a call to a
/// function of the same section without a relocation, and the program's
/// build of the C library may have that function elsewhere (a copy built
/// apart, by the native compiler rather than the cross one).
fn open_branches(f: &object::File, thumb: bool, pat: &mut Pattern) {
    let len = pat.bytes.len() as i64;
    let outside = |t: i64| t < 0 || t >= len;
    let mut open = Vec::new();
    match f.architecture() {
        object::Architecture::X86_64 | object::Architecture::I386 => {
            use iced_x86::{Decoder, DecoderOptions, OpKind};
            let bits = if f.is_64() { 64 } else { 32 };
            let mut d = Decoder::with_ip(bits, &pat.bytes, 0, DecoderOptions::NONE);
            while d.can_decode() {
                let i = d.decode();
                let near = matches!(
                    i.op0_kind(),
                    OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
                );
                if near && outside(i.near_branch_target() as i64) {
                    open.push((i.ip() as usize, i.next_ip() as usize));
                }
            }
        }
        object::Architecture::Arm if thumb => {
            let mut at = 0;
            while at + 2 <= pat.bytes.len() {
                let hw = u16::from_le_bytes([pat.bytes[at], pat.bytes[at + 1]]);
                let wide = hw >> 11 >= 0b11101;
                if wide && at + 4 <= pat.bytes.len() {
                    let lo = u16::from_le_bytes([pat.bytes[at + 2], pat.bytes[at + 3]]);
                    // B.W, BL, BLX: any target (the encoding's split
                    // offset is not worth decoding).
                    if hw & 0xf800 == 0xf000 && lo & 0x8000 == 0x8000 {
                        open.push((at, at + 4));
                    }
                }
                at += if wide { 4 } else { 2 };
            }
        }
        arch => {
            let big = !f.is_little_endian();
            for (k, w) in pat.bytes.chunks_exact(4).enumerate() {
                let w = [w[0], w[1], w[2], w[3]];
                let insn = if big {
                    u32::from_be_bytes(w)
                } else {
                    u32::from_le_bytes(w)
                };
                let pc = (k * 4) as i64;
                let sext = |v: u32, bits: u32| (((v << (32 - bits)) as i32) >> (32 - bits)) as i64;
                let target = match arch {
                    object::Architecture::Aarch64 if insn & 0x7c00_0000 == 0x1400_0000 => {
                        Some(pc + sext(insn & 0x03ff_ffff, 26) * 4)
                    }
                    object::Architecture::Arm if insn & 0x0e00_0000 == 0x0a00_0000 => {
                        Some(pc + 8 + sext(insn & 0x00ff_ffff, 24) * 4)
                    }
                    object::Architecture::Mips | object::Architecture::Mips64 if matches!(insn >> 26, 1 | 4..=7 | 0x14..=0x17) => {
                        Some(pc + 4 + sext(insn & 0xffff, 16) * 4)
                    }
                    object::Architecture::PowerPc64 if insn >> 26 == 18 && insn & 2 == 0 => {
                        Some(pc + sext(insn & 0x03ff_fffc, 26))
                    }
                    _ => None,
                };
                if target.is_some_and(outside) {
                    open.push((k * 4, k * 4 + 4));
                }
            }
        }
    }
    for (a, b) in open {
        pat.open(a, b);
    }
}

/// The names a signature is looked for under: the exact names among the
/// default allocation functions and the custom ones.
fn wanted(custom: &[(String, Role)]) -> BTreeSet<String> {
    alloc::DEFAULTS
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !n.contains('*') && !n.starts_with("_Z"))
        .chain(custom.iter().map(|(n, _)| n.as_str()))
        .map(str::to_string)
        .collect()
}

/// The C library archives a static program of `img`'s guest was likely
/// linked with, first the cross sysroot's.
fn archives(img: &Image) -> Result<Vec<PathBuf>, String> {
    let guest = launch::arch::inspect(&img.path).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    if let Some(root) = guest.arch.sysroot() {
        out.push(root.join("lib/libc.a"));
    }
    if let Some(t) = guest.arch.triple {
        out.push(Path::new("/usr/lib").join(t).join("libc.a"));
    }
    Ok(out)
}

/// The C library's string functions, by their base names: memcheck
/// replaces them with its own, which read a string byte by byte, so the
/// optimized versions' aligned word and vector loads past its end are
/// never seen there (see [`is_string_func`]).
const STRING_FUNCS: &[&str] = &[
    "strlen",
    "strnlen",
    "strcmp",
    "strncmp",
    "strcpy",
    "stpcpy",
    "strncpy",
    "stpncpy",
    "strcat",
    "strncat",
    "strchr",
    "strchrnul",
    "strrchr",
    "memchr",
    "rawmemchr",
    "memrchr",
    "memcmp",
    "bcmp",
    "strcasecmp",
    "strncasecmp",
    "strstr",
    "strspn",
    "strcspn",
    "strpbrk",
    "wcslen",
    "wcsnlen",
    "wcscmp",
    "wcschr",
    "wmemchr",
];

/// Whether `name` is one of the C library's string functions or one of
/// its variants (`__strlen_asimd`, `__memchr_neon`, `__strcmp_power9`,
/// `__GI_strlen`, `strcasecmp_l`). A variant's suffix needs the C
/// library's reserved leading underscore (or is the locale form `_l`): a
/// program's own `strcmp_nocase` is the program's code, checked as such.
pub fn is_string_func(name: &str) -> bool {
    let reserved = name.starts_with('_');
    let n = name.trim_start_matches('_');
    let n = n.strip_prefix("GI_").unwrap_or(n);
    STRING_FUNCS.iter().any(|b| {
        n.strip_prefix(b)
            .is_some_and(|r| r.is_empty() || r == "_l" || (reserved && r.starts_with('_')))
    })
}

/// Whether a mapped file named `name` is a shared C library (glibc's,
/// musl's, uClibc's), whose string functions [`string_funcs`] finds.
pub fn is_c_library(name: &str) -> bool {
    ["libc.so", "libc-", "libc.musl", "ld-musl", "libuClibc"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// Chooses a function's name among its aliases, with its role.
type Pick<'p> = &'p dyn for<'a> Fn(&[&'a str]) -> Option<(&'a str, Role)>;

/// One function of an archive member, as a pattern.
struct Candidate {
    name: String,
    role: Role,
    /// (member index, section index): functions sharing it moved together.
    section: (usize, usize),
    /// Its offset in that section.
    off: u64,
    /// Its instructions' alignment: where in the program it may start.
    /// (Not the section's: the program's C library may have been built
    /// apart from the archive, with the functions of the member at other
    /// offsets.)
    align: u64,
    thumb: bool,
    local: u64,
    /// Its code.
    pat: Sig,
    /// Whether the linker may have shortened its code (RISC-V): then the
    /// functions of a section no longer keep their offsets in it.
    relaxed: bool,
}

/// The preferred name of a function with several: one with a role, the
/// public one (`malloc`) before the internal (`__libc_malloc`).
fn pick_name<'a>(names: &[&'a str], custom: &[(String, Role)]) -> Option<(&'a str, Role)> {
    let mut named: Vec<(&str, Role)> = names
        .iter()
        .filter_map(|n| alloc::role_of(custom, n).map(|r| (*n, r)))
        .collect();
    named.sort_by_key(|(n, _)| (n.starts_with('_'), n.len(), *n));
    named.first().copied()
}

/// The functions of the member `data` (index `m`) that `pick` names.
fn candidates(m: usize, data: &[u8], pick: Pick, out: &mut Vec<Candidate>) {
    let Ok(f) = object::File::parse(data) else {
        return;
    };
    let isa = match f.architecture() {
        object::Architecture::X86_64 | object::Architecture::I386 => Isa::X86,
        object::Architecture::Arm => Isa::Fixed(2),
        _ => Isa::Fixed(4),
    };
    let arm = f.architecture() == object::Architecture::Arm;
    let rv = f.architecture() == object::Architecture::Riscv64
        || f.architecture() == object::Architecture::Riscv32;
    let ppc = f.architecture() == object::Architecture::PowerPc64;
    // Functions by (section, value): aliases share one.
    let mut funcs: HashMap<(usize, u64), (Vec<&str>, u64, u8)> = HashMap::new();
    for s in f.symbols() {
        let (Some(sec), Ok(name)) = (s.section_index(), s.name()) else {
            continue;
        };
        if s.kind() != SymbolKind::Text || s.size() == 0 || s.is_undefined() {
            continue;
        }
        let st_other = match s.flags() {
            object::SymbolFlags::Elf { st_other, .. } => st_other,
            _ => 0,
        };
        let e = funcs
            .entry((sec.0, s.address()))
            .or_insert((Vec::new(), s.size(), st_other));
        e.0.push(name);
    }
    // Each section's code, relocated fields open, or (RISC-V) as it is
    // with its relocations.
    let mut opened: HashMap<usize, (Pattern, Vec<riscv::Reloc>)> = HashMap::new();
    for ((sec, value), (names, size, st_other)) in funcs {
        let Some((name, role)) = pick(&names) else {
            continue;
        };
        let Ok(section) = f.section_by_index(object::SectionIndex(sec)) else {
            continue;
        };
        let (whole, relocs) = match opened.entry(sec) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let Ok(bytes) = section.data() else {
                    continue;
                };
                let mut p = Pattern::new(bytes);
                let mut folded = Vec::new();
                if rv {
                    // Every field is in a piece of its own: see `riscv`.
                    folded = riscv::fold(section.relocations().filter_map(|(off, r)| {
                        let RelocationFlags::Elf { r_type } = r.flags() else {
                            return None;
                        };
                        let sym = match r.target() {
                            object::RelocationTarget::Symbol(i) => Some(i),
                            _ => None,
                        };
                        let target = sym
                            .and_then(|i| f.symbol_by_index(i).ok())
                            .and_then(|s| usize::try_from(s.address()).ok());
                        Some(riscv::Reloc {
                            off: usize::try_from(off).ok()?,
                            r_type,
                            addend: r.addend(),
                            relax: false,
                            sym: sym.map(|i| i.0),
                            target,
                        })
                    }));
                } else {
                    for (off, r) in section.relocations() {
                        let r_type = match r.flags() {
                            RelocationFlags::Elf { r_type } => r_type,
                            _ => 0,
                        };
                        let Ok(off) = usize::try_from(off) else {
                            continue;
                        };
                        let (a, b) = relocated(isa, off, r.size(), r_type);
                        p.open(a, b);
                    }
                }
                v.insert((p, folded))
            }
        };
        let thumb = arm && value & 1 == 1;
        let off = if arm { value & !1 } else { value };
        let (Ok(a), Ok(n)) = (usize::try_from(off), usize::try_from(size)) else {
            continue;
        };
        let Some(end) = a.checked_add(n).filter(|&e| e <= whole.bytes.len()) else {
            continue;
        };
        let pat = if rv {
            riscv::sig(&whole.bytes, relocs, a..end, !f.is_64())
        } else {
            let mut pat = Pattern::masked(&whole.bytes[a..end], &whole.mask[a..end]);
            open_branches(&f, thumb, &mut pat);
            Sig::from(pat)
        };
        out.push(Candidate {
            name: name.to_string(),
            role,
            section: (m, sec),
            off,
            align: match isa {
                Isa::X86 => 1,
                // (RISC-V's compressed instructions: 2.)
                _ if rv => 2,
                Isa::Fixed(w) => w as u64,
            },
            relaxed: rv,
            thumb,
            local: if ppc { local_entry(st_other) } else { 0 },
            pat,
        });
    }
}

/// What [`discover`] found.
pub struct Found {
    /// The archive read.
    pub archive: PathBuf,
    /// How many functions were looked for.
    pub tried: usize,
    /// Those found, with their roles.
    pub funcs: Vec<(Func, Role)>,
}

impl Found {
    /// Whether both `malloc` and `free` are among them: without either,
    /// the blocks are not known.
    pub fn usable(&self) -> bool {
        let has = |want: fn(Role) -> bool| self.funcs.iter().any(|(_, r)| want(*r));
        has(|r| r == Role::Malloc { size: 0 }) && has(|r| matches!(r, Role::Free { .. }))
    }
}

/// How many first bytes of a string function, found once in the
/// program, tell it where the whole function is not found: the program's
/// C library may be another version than the archive's, with a function's
/// loop changed but its start the same (aarch64's `__strlen_mte`). Its
/// length is then the archive's; what that decides is only which loads
/// past a block's end are exempt.
const PREFIX: usize = 32;

/// Fewest bytes a pattern must fix: shorter ones match by chance.
const MIN_KNOWN: usize = 16;

/// The allocation functions of the stripped static program `img`, found
/// by the code of its C library archive; `Err` is one line saying why
/// none could be looked for.
pub fn discover(img: &Image, custom: &[(String, Role)]) -> Result<Found, String> {
    // Its allocator is the shared C library's, named by its symbols.
    let guest = launch::arch::inspect(&img.path).map_err(|e| e.to_string())?;
    if guest.interp.is_some() {
        return Err("it is dynamically linked".into());
    }
    let want = wanted(custom);
    scan(
        img,
        &|n| want.contains(n),
        &|names| pick_name(names, custom),
        false,
    )
}

/// The string functions (and their variants: see [`is_string_func`]) of
/// the stripped static program `img`, or of a shared C library (whose
/// variants, `__strcmp_avx2` and the like, are local symbols a stripped
/// library does not name), found by the code of the C library archive:
/// their loads past a string's block are exempt, as memcheck's
/// replacements of them never make them.
pub fn string_funcs(img: &Image) -> Result<Vec<Func>, String> {
    fn pick<'a>(names: &[&'a str]) -> Option<(&'a str, Role)> {
        let mut n: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| is_string_func(n))
            .collect();
        n.sort_by_key(|n| (n.starts_with('_'), n.len(), *n));
        n.first().map(|n| (*n, Role::Internal))
    }
    let found = scan(img, &is_string_func, &pick, true)?;
    Ok(found.funcs.into_iter().map(|(f, _)| f).collect())
}

/// The functions of the archive members defining a name `want` accepts,
/// named by `pick`, found in `img`'s code; `by_start`: one not found
/// whole may be found by its first [`PREFIX`] bytes alone (see there).
fn scan(
    img: &Image,
    want: &dyn Fn(&str) -> bool,
    pick: Pick,
    by_start: bool,
) -> Result<Found, String> {
    let paths = archives(img)?;
    let archive = paths.iter().find(|p| p.is_file()).ok_or_else(|| {
        let list: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        format!("no C library archive ({}) is installed", list.join(", "))
    })?;
    let data = std::fs::read(archive).map_err(|e| format!("{}: {e}", archive.display()))?;
    let ar = ArchiveFile::parse(&*data)
        .map_err(|e| format!("{}: not an archive ({e})", archive.display()))?;
    let mut members = BTreeSet::new();
    if let Ok(Some(syms)) = ar.symbols() {
        for s in syms.flatten() {
            if std::str::from_utf8(s.name()).is_ok_and(want) {
                members.insert(s.offset().0);
            }
        }
    }
    let mut cands = Vec::new();
    for (m, off) in members.into_iter().enumerate() {
        let Ok(member) = ar.member(object::read::archive::ArchiveOffset(off)) else {
            continue;
        };
        if let Ok(d) = member.data(&*data) {
            // A copy: a member starts at any even offset, and the ELF
            // reader wants its headers aligned.
            let copy: Vec<u8> = d.into();
            candidates(m, &copy, pick, &mut cands);
        }
    }
    cands.retain(|c| c.pat.known_bytes() >= MIN_KNOWN);
    let code: Vec<(u64, &[u8])> = img.code().collect();
    let hits: Vec<Vec<(u64, u64)>> = cands
        .iter()
        .map(|c| find(&code, &c.pat, c.align, 0, 8))
        .collect();
    // Where each section landed, by the functions found once in it: the
    // most common answer (a section is copied whole).
    let mut votes: HashMap<(usize, usize), HashMap<u64, usize>> = HashMap::new();
    for (c, h) in cands.iter().zip(&hits) {
        if let ([(addr, _)], false) = (&h[..], c.relaxed) {
            *votes
                .entry(c.section)
                .or_default()
                .entry(addr.wrapping_sub(c.off))
                .or_default() += 1;
        }
    }
    let placed: HashMap<(usize, usize), u64> = votes
        .into_iter()
        .filter_map(|(s, v)| {
            let (base, _) = v
                .into_iter()
                .max_by_key(|&(b, n)| (n, std::cmp::Reverse(b)))?;
            Some((s, base))
        })
        .collect();
    let mut funcs = Vec::new();
    for (c, h) in cands.iter().zip(&hits) {
        let at = match (&h[..], placed.get(&c.section)) {
            ([a], _) => Some(*a),
            (_, Some(base)) => h.iter().copied().find(|a| a.0 == base.wrapping_add(c.off)),
            _ => None,
        };
        let at = at.or_else(|| {
            let (pre, len) = c
                .pat
                .prefix(PREFIX)
                .filter(|(p, _)| by_start && h.is_empty() && p.known_bytes() >= PREFIX * 3 / 4)?;
            match find(&code, &pre, c.align, 0, 2)[..] {
                [(a, _)] => Some((a, len as u64)),
                _ => None,
            }
        });
        if let Some((start, size)) = at {
            funcs.push((
                Func {
                    name: c.name.clone(),
                    start,
                    entry: start.wrapping_add(c.local),
                    size,
                    end: start.saturating_add(size),
                    thumb: c.thumb,
                    ifunc: false,
                },
                c.role,
            ));
        }
    }
    funcs.sort_by_key(|f| f.0.start);
    Ok(Found {
        archive: archive.clone(),
        tried: cands.len(),
        funcs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_bytes_match_anything_and_the_rest_must_equal() {
        // A call's 4-byte displacement at offset 5 left open.
        let mut p = Pattern::new(&[0x55, 0x48, 0x89, 0xe5, 0xe8, 0, 0, 0, 0, 0x5d, 0xc3]);
        let (a, b) = relocated(Isa::X86, 5, 32, E::R_X86_64_PLT32);
        assert_eq!((a, b), (5, 9));
        p.open(a, b);
        assert_eq!(p.known_bytes(), 7);
        assert_eq!(p.anchor(), (0, 5));
        let mut text = [0x90u8; 64];
        text[16..27].copy_from_slice(&[0x55, 0x48, 0x89, 0xe5, 0xe8, 1, 2, 3, 4, 0x5d, 0xc3]);
        // The same, with its tail changed: no match.
        text[40..51].copy_from_slice(&[0x55, 0x48, 0x89, 0xe5, 0xe8, 1, 2, 3, 4, 0x5d, 0xc2]);
        let code = [(0x1000u64, &text[..])];
        let p = Sig::from(p);
        assert_eq!(find(&code, &p, 16, 0, 8), vec![(0x1010, 11)]);
        // Where the section's alignment forbids it: none.
        assert_eq!(find(&code, &p, 16, 4, 8), vec![]);
        // Twice: both.
        text[48..59].copy_from_slice(&[0x55, 0x48, 0x89, 0xe5, 0xe8, 9, 9, 9, 9, 0x5d, 0xc3]);
        let code = [(0x1000u64, &text[..])];
        assert_eq!(find(&code, &p, 1, 0, 8), vec![(0x1010, 11), (0x1030, 11)]);
    }

    #[test]
    fn relaxed_and_fixed_width_relocations_open_whole_instructions() {
        // `mov foo@GOTTPOFF(%rip), %rax` may become `mov $x, %rax`.
        assert_eq!(relocated(Isa::X86, 10, 32, E::R_X86_64_GOTTPOFF), (7, 14));
        // A MIPS `%lo` half of a word: the word.
        assert_eq!(relocated(Isa::Fixed(4), 6, 16, E::R_MIPS_LO16), (4, 8));
        // A Thumb-2 call of unknown width at a halfword: both halfwords.
        assert_eq!(relocated(Isa::Fixed(2), 2, 0, E::R_ARM_THM_PC22), (2, 6));
    }

    /// The host's shared C library names its IFUNC `strcmp`, not the
    /// variants it picks from: those are found by the archive's code.
    #[test]
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn a_shared_c_librarys_string_variants_are_found_by_their_code() {
        let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        let img = Image::read(libc).expect("the host's C library");
        let found = string_funcs(&img).expect("found by the archive's code");
        let names: Vec<&str> = found.iter().map(|f| &*f.name).collect();
        assert!(found.len() >= 20, "{names:?}");
        assert!(names.iter().all(|n| is_string_func(n)), "{names:?}");
        for base in ["strlen", "strcmp", "memchr"] {
            let variants = names.iter().filter(|n| n.contains(base)).count();
            assert!(variants >= 2, "{base}: {names:?}");
        }
        assert!(is_c_library("libc.so.6") && !is_c_library("libcrypt.so.1"));
    }

    #[test]
    fn string_functions_and_their_variants_are_named_but_no_others() {
        for n in [
            "strlen",
            "__strlen_asimd",
            "__memchr_neon",
            "__strcmp_power9",
            "__GI_strlen",
            "strcasecmp_l",
        ] {
            assert!(is_string_func(n), "{n}");
        }
        for n in [
            "strlenx",
            "malloc",
            "strtol",
            "memcpy",
            "__strerror_r",
            "str",
            "strcmp_nocase",
            "strlen_utf8",
        ] {
            assert!(!is_string_func(n), "{n}");
        }
    }

    #[test]
    fn a_prefix_keeps_the_whole_length() {
        let mut p = Pattern::new(&[1, 2, 3, 4, 5, 6]);
        p.open(1, 2);
        let (pre, len) = Sig::from(p).prefix(4).unwrap();
        assert_eq!(len, 6);
        assert_eq!(pre.known_bytes(), 3);
        let code = [(0x10u64, &[9, 1, 7, 3, 4, 8][..])];
        assert_eq!(find(&code, &pre, 1, 0, 2), vec![(0x11, 4)]);
        assert!(Sig::from(Pattern::new(&[1])).prefix(4).is_none());
    }

    #[test]
    fn hostile_patterns_do_not_panic() {
        let p = Sig::from(Pattern::masked(&[1, 2], &[0, 0]));
        assert!(find(&[(0, &[1, 2, 3][..])], &p, 0, 0, 8).is_empty());
        let mut q = Pattern::new(&[1, 2, 3]);
        q.open(2, 100);
        q.open(5, 3);
        assert_eq!(q.known_bytes(), 2);
        let q = Sig::from(q);
        // Running past the code's end: no match.
        assert!(find(&[(u64::MAX - 1, &[1, 2][..])], &q, 1, 0, 8).is_empty());
        assert_eq!(
            find(&[(u64::MAX - 2, &[1, 2, 9][..])], &q, 1, 0, 8),
            vec![(u64::MAX - 2, 3)]
        );
    }
}
