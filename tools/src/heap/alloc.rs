// SPDX-License-Identifier: GPL-2.0-or-later
//! Which functions allocate and free, and where their arguments are: the
//! default list (the C library's and C++'s allocation functions, on
//! glibc, musl and uClibc) and `--alloc NAME=ROLE` (or `ADDR+SIZE=ROLE`
//! for code no symbol names), planned as probes in
//! the program and, for a dynamically linked one, in every library the
//! loader maps for it.
//!
//! Allocator internals that run outside the public functions (glibc's
//! thread-exit cache teardown) are `Internal`: their accesses are the
//! allocator's own, not checked, and calls made inside them are ignored.

use super::super::probe::conv::Abi;
use super::super::probe::elf::{Func, Image};
use super::super::probe::spec::{self, Point, Spec};

/// What a function does to the heap, with its argument positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Returns a block of the size in argument `size` (`malloc`,
    /// `memalign`, `operator new`).
    Malloc { size: usize },
    /// `calloc(n, size)`.
    Calloc,
    /// `realloc(ptr, size)`.
    Realloc,
    /// `reallocarray(ptr, n, size)`.
    ReallocArray,
    /// `posix_memalign(&ptr, align, size)`: the block is stored at `*ptr`.
    PosixMemalign,
    /// Frees the block in argument `ptr`.
    Free { ptr: usize },
    /// The allocator's own code: not checked, no event.
    Internal,
}

impl Role {
    /// Whether it returns the block it allocated.
    pub fn returns_block(self) -> bool {
        matches!(
            self,
            Role::Malloc { .. } | Role::Calloc | Role::Realloc | Role::ReallocArray
        )
    }

    /// Arguments read at its entry.
    pub fn args(self) -> usize {
        match self {
            Role::Malloc { size } => size + 1,
            Role::Calloc | Role::Realloc => 2,
            Role::ReallocArray | Role::PosixMemalign => 3,
            Role::Free { ptr } => ptr + 1,
            Role::Internal => 0,
        }
    }

    /// `--alloc NAME=ROLE`'s roles.
    fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "malloc" => Role::Malloc { size: 0 },
            "calloc" => Role::Calloc,
            "realloc" => Role::Realloc,
            "free" => Role::Free { ptr: 0 },
            _ => return None,
        })
    }
}

/// The functions allocating by default: name globs, first match wins.
pub const DEFAULTS: &[(&str, Role)] = &[
    ("malloc", Role::Malloc { size: 0 }),
    ("calloc", Role::Calloc),
    ("realloc", Role::Realloc),
    ("reallocarray", Role::ReallocArray),
    ("free", Role::Free { ptr: 0 }),
    ("cfree", Role::Free { ptr: 0 }),
    ("memalign", Role::Malloc { size: 1 }),
    ("aligned_alloc", Role::Malloc { size: 1 }),
    ("posix_memalign", Role::PosixMemalign),
    ("valloc", Role::Malloc { size: 0 }),
    ("pvalloc", Role::Malloc { size: 0 }),
    // The C library's own names for them (musl's `__libc_malloc`, called
    // by other parts of the library without going through `malloc`).
    ("__libc_malloc", Role::Malloc { size: 0 }),
    ("__libc_calloc", Role::Calloc),
    ("__libc_realloc", Role::Realloc),
    ("__libc_free", Role::Free { ptr: 0 }),
    ("__libc_memalign", Role::Malloc { size: 1 }),
    // C++: operator new and new[] (plain, nothrow, aligned), delete and
    // delete[] (plain, sized, aligned): the size or the pointer first.
    ("_Znw*", Role::Malloc { size: 0 }),
    ("_Zna*", Role::Malloc { size: 0 }),
    ("_Zdl*", Role::Free { ptr: 0 }),
    ("_Zda*", Role::Free { ptr: 0 }),
    // glibc's allocator work outside the public functions.
    ("tcache_thread_shutdown", Role::Internal),
    ("__malloc_arena_thread_freeres", Role::Internal),
    ("__libc_thread_freeres", Role::Internal),
    ("__libc_freeres", Role::Internal),
    ("malloc_trim", Role::Internal),
    ("malloc_usable_size", Role::Internal),
    ("__malloc_usable_size", Role::Internal),
    ("malloc_info", Role::Internal),
    ("malloc_stats", Role::Internal),
    ("mallinfo*", Role::Internal),
    ("__malloc_fork_*", Role::Internal),
];

/// One `--alloc NAME=ROLE` or `--alloc ADDR+SIZE=ROLE`; `Err` is one line
/// saying what is wrong. The address form comes back as `0xADDR+SIZE`
/// (hex, decimal), for [`custom`] to place in the program.
pub fn parse_alloc(s: &str) -> Result<(String, Role), String> {
    let (name, role) = s.split_once('=').ok_or_else(|| {
        format!("--alloc {s:?}: give NAME=ROLE or ADDR+SIZE=ROLE, ROLE one of malloc, calloc, realloc, free")
    })?;
    let role = Role::parse(role).ok_or_else(|| {
        format!("--alloc {s:?}: unknown role {role:?}; use malloc, calloc, realloc or free")
    })?;
    if name.starts_with("0x") || name.starts_with("0X") {
        let (addr, size) = parse_at(name).ok_or_else(|| {
            format!(
                "--alloc {s:?}: give the function's address and size in bytes, as \
                 0x4012a0+72=malloc (its returns are found in that code)"
            )
        })?;
        return Ok((format!("0x{addr:x}+{size}"), role));
    }
    if name.is_empty() || name.contains(char::is_whitespace) || name.contains(':') {
        return Err(format!("--alloc {s:?}: NAME must be one function name"));
    }
    Ok((name.to_string(), role))
}

/// `0xADDR+SIZE` (SIZE decimal or `0x` hex, not zero).
fn parse_at(s: &str) -> Option<(u64, u64)> {
    let (addr, size) = s.split_once('+')?;
    let hex = |t: &str| {
        t.strip_prefix("0x")
            .or_else(|| t.strip_prefix("0X"))
            .and_then(|h| u64::from_str_radix(h, 16).ok())
    };
    let size = hex(size).or_else(|| size.parse().ok())?;
    Some((hex(addr)?, size)).filter(|&(_, n)| n > 0)
}

/// The custom allocation functions of `--alloc`, all by name, and the
/// functions its address form names in the program `img`, which no symbol
/// does: `sub_ADDR`, as disassemblers call such code, from ADDR (a
/// link-time address, as `nm` or a disassembler shows it; ARM: odd for
/// Thumb code) for SIZE bytes, where its returns are looked for. An ELFv2
/// function's probe sits at its local entry, after the two instructions
/// that set up the TOC pointer, where calls from its own module enter.
pub fn custom(img: &Image, allocs: &[(String, Role)]) -> Result<Custom, String> {
    let mut named = Vec::new();
    let mut funcs = Vec::new();
    for (name, role) in allocs {
        let Some((addr, size)) = parse_at(name) else {
            named.push((name.clone(), *role));
            continue;
        };
        let thumb = img.abi == Abi::Aapcs && addr & 1 == 1;
        let start = if thumb { addr & !1 } else { addr };
        let code = img.bytes(start, size).ok_or_else(|| {
            format!(
                "--alloc {name}: {} has no code there (give a link-time address, as nm or \
                 a disassembler shows it, and the function's size)",
                img.path.display()
            )
        })?;
        let word = |i: usize| {
            code.get(i * 4..i * 4 + 4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        };
        // addis r2,r12,HI (or a static program's lis r2,HI); addi
        // r2,r2,LO: the global entry's TOC set-up.
        let toc = img.abi == Abi::Elfv2
            && !img.big_endian
            && word(0).is_some_and(|w| w >> 16 == 0x3c4c || w >> 16 == 0x3c40)
            && word(1).is_some_and(|w| w >> 16 == 0x3842);
        let f = Func {
            name: format!("sub_{start:x}"),
            start,
            entry: if toc { start + 8 } else { start },
            size,
            end: start + size,
            thumb,
            ifunc: false,
        };
        named.push((f.name.clone(), *role));
        funcs.push(f);
    }
    Ok(Custom { named, funcs })
}

/// What [`custom`] makes of `--alloc`.
pub struct Custom {
    /// Every custom allocation function by name, with its role.
    pub named: Vec<(String, Role)>,
    /// The functions of the address form, for the program's image.
    pub funcs: Vec<Func>,
}

/// The role of the function named `name`: the custom ones first.
pub fn role_of(custom: &[(String, Role)], name: &str) -> Option<Role> {
    ranked(custom, name).map(|(_, r)| r)
}

/// The role of `name` and the position of the pattern that gave it.
fn ranked(custom: &[(String, Role)], name: &str) -> Option<(usize, Role)> {
    custom
        .iter()
        .map(|(n, r)| (n.as_str(), *r))
        .chain(DEFAULTS.iter().copied())
        .enumerate()
        .find(|(_, (pat, _))| spec::glob(pat, name))
        .map(|(i, (_, r))| (i, r))
}

/// Probes for every allocation function in `img` (`lib`: the library
/// prefix its probes are given with, `None` for the program). Of the
/// names of one entry (glibc's `malloc` and `__libc_malloc`, `free` and
/// `cfree`) the one listed first is kept: the name a user calls, which
/// reports and the allocations table show.
fn specs_in(img: &Image, lib: Option<&str>, custom: &[(String, Role)], out: &mut Vec<Spec>) {
    let mut best: Vec<(u64, usize, Role, &str)> = Vec::new();
    for f in img.matching("*") {
        let Some((rank, role)) = ranked(custom, &f.name) else {
            continue;
        };
        match best.iter_mut().find(|b| b.0 == f.entry) {
            Some(b) if rank < b.1 => *b = (f.entry, rank, role, &f.name),
            Some(_) => {}
            None => best.push((f.entry, rank, role, &f.name)),
        }
    }
    for (_, _, role, name) in best {
        let text = match lib {
            Some(l) => format!("{l}:{name}"),
            None => name.to_string(),
        };
        out.push(Spec {
            text,
            lib: lib.map(str::to_string),
            func: name.to_string(),
            point: Point::Entry(role.args()),
        });
    }
}

/// The probes of a run of `img`: its own allocation functions, and for a
/// dynamically linked program those of every library the loader maps for
/// it (the C library's; the C++ library's `operator new` and `delete`; an
/// allocator library that takes `malloc` over, as jemalloc does; a
/// custom allocator of `--alloc` in a library of the program's own).
/// Where two modules define one name, the loader binds calls to the
/// first, and the other's is never called but from inside itself. Also
/// the first custom allocation function found nowhere: [`unknown`] makes
/// it an error. `Err` is one line.
pub fn specs(
    img: &Image,
    custom: &[(String, Role)],
) -> Result<(Vec<Spec>, Option<String>), String> {
    let mut out = Vec::new();
    specs_in(img, None, custom, &mut out);
    let mut found: Vec<bool> = custom
        .iter()
        .map(|(n, _)| img.matching(n).next().is_some())
        .collect();
    for path in super::super::probe::libs::loaded(&img.path).map_err(|e| e.to_string())? {
        // One the probes cannot read (no symbols of a known guest) has
        // nothing to probe; the run goes on without it.
        let Ok(li) = Image::read(&path) else {
            continue;
        };
        for (f, (n, _)) in found.iter_mut().zip(custom) {
            *f |= li.matching(n).next().is_some();
        }
        specs_in(&li, Some(&path.to_string_lossy()), custom, &mut out);
    }
    let missing = custom.iter().zip(&found).find(|(_, f)| !**f);
    Ok((out, missing.map(|((n, _), _)| n.clone())))
}

/// The line for a custom allocation function `name` that is in neither
/// the program `img` nor a library it loads: a misspelt `--alloc` would
/// otherwise check nothing.
pub fn unknown(img: &Image, name: &str) -> String {
    format!(
        "--alloc {name}: no function {name} in {} or the libraries it loads; \
         `cannoli probe --list PATTERN PROGRAM` lists theirs (for code no symbol names, \
         give ADDR+SIZE=ROLE)",
        img.path.display()
    )
}
