// SPDX-License-Identifier: GPL-2.0-or-later
//! Where the code to trace is: `--range` as written, `--func` looked up in
//! a program's symbol table, and the plan the hook library places them by.

use std::path::{Path, PathBuf};

use cannoli::wire::parse_hex;
use object::{Object, ObjectKind, ObjectSymbol, SymbolKind};

/// A `--range` that is not `LO-HI`.
#[derive(Debug, thiserror::Error)]
#[error("want LO-HI in hex, LO < HI")]
pub(super) struct RangeError;

pub(super) fn parse_range(s: &str) -> Result<(u64, u64), RangeError> {
    s.split_once('-')
        .and_then(|(lo, hi)| Some((parse_hex(lo)?, parse_hex(hi)?)))
        .filter(|(lo, hi)| lo < hi)
        .ok_or(RangeError)
}

/// Why `--func` names no range; one line, printed once.
#[derive(Debug, thiserror::Error)]
pub(super) enum FuncError {
    /// The program could not be found.
    #[error(transparent)]
    Launch(#[from] launch::Error),
    /// The replayed recording does not name its program.
    #[error("--func: the recording does not say which program ran")]
    NoProgram,
    /// The program could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The program is not an object file object knows.
    #[error("{}: {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: object::read::Error,
    },
    /// A recording of a position-independent program.
    #[error(
        "--func {name}: {} is position independent, and a recording's --func is placed only \
         in a live run; use --range with the run-time addresses",
        path.display()
    )]
    Pie { name: String, path: PathBuf },
    /// The program's placement could not be worked out.
    #[error("--func: {0}")]
    Place(#[from] crate::probe::error::Error),
    /// No symbol `name`.
    #[error("--func {name}: no such symbol in {}", path.display())]
    NoSymbol { name: String, path: PathBuf },
    /// The symbol has size 0.
    #[error("--func {name}: the symbol has no size in {}", path.display())]
    NoSize { name: String, path: PathBuf },
}

/// A function's `[start, end)`, at link time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FuncRange {
    pub(super) start: u64,
    pub(super) end: u64,
    /// In a position-independent program: moved by its load bias.
    pub(super) pie: bool,
}

/// `[start, end)` of function `name` in the symbol table of `path`.
fn func_range(path: &Path, name: &str) -> Result<FuncRange, FuncError> {
    let data = std::fs::read(path).map_err(|source| FuncError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let file = object::File::parse(&*data).map_err(|source| FuncError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let named = || (name.to_string(), path.to_path_buf());
    let pie = file.kind() != ObjectKind::Executable;
    let sym = file
        .symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.name() == Ok(name) && s.address() != 0)
        .ok_or_else(|| {
            let (name, path) = named();
            FuncError::NoSymbol { name, path }
        })?;
    if sym.size() == 0 {
        let (name, path) = named();
        return Err(FuncError::NoSize { name, path });
    }
    let start = code_address(file.architecture(), sym.kind(), sym.address());
    Ok(FuncRange {
        start,
        end: start + sym.size(),
        pie,
    })
}

/// The ranges of `funcs` in `program`, each announced on stderr.
pub(super) fn func_ranges(program: &Path, funcs: &[String]) -> Result<Vec<FuncRange>, FuncError> {
    funcs
        .iter()
        .map(|f| {
            let r = func_range(program, f)?;
            let at = if r.pie {
                " (link-time: the program is position independent, placed as it runs)"
            } else {
                ""
            };
            eprintln!("regtrace: {f} is {:#x}-{:#x}{at}", r.start, r.end);
            Ok(r)
        })
        .collect()
}

/// The hook library's plan for a position-independent `program`: `ranges`
/// at run-time addresses, and `funcs` at its link-time ones, placed when
/// it is mapped (see [`jitter::presets::plan`]).
pub(super) fn pie_plan(
    program: &Path,
    ranges: &[(u64, u64)],
    funcs: &[FuncRange],
) -> Result<String, FuncError> {
    use crate::probe::elf::Image;
    let exe = program
        .canonicalize()
        .unwrap_or_else(|_| program.to_path_buf());
    let img = Image::read(&exe)?;
    // Where guest memory is comes from the first instruction QEMU runs:
    // the dynamic loader's entry, or a static-pie program's own.
    let (entry, low, anchor) = match crate::probe::libs::interpreter(&exe)? {
        Some(ld) => {
            let li = Image::read(&ld)?;
            (li.entry, li.low, ld)
        }
        None => (img.entry, img.low, exe.clone()),
    };
    let mut s = String::from("stores=0 count=0\n");
    s += &format!("program {}\n", exe.display());
    for (lo, hi) in ranges {
        s += &format!("{lo:x}-{hi:x}\n");
    }
    s += &format!("anchor {entry:x} {low:x} {}\n", anchor.display());
    s += &format!("lib {:x} {}\n", img.low, exe.display());
    for f in funcs {
        s += &format!("+{:x}-{:x}\n", f.start, f.end);
    }
    Ok(s)
}

/// The hook library's plan for `--func` of a program at its link-time
/// addresses: `ranges` in `program` only (a program it execs has other
/// code there, see [`jitter::presets::plan`]).
pub(super) fn fixed_plan(program: &Path, ranges: &[(u64, u64)]) -> String {
    let exe = program
        .canonicalize()
        .unwrap_or_else(|_| program.to_path_buf());
    let mut s = format!("stores=0 count=0\nprogram {}\n", exe.display());
    for (lo, hi) in ranges {
        s += &format!("{lo:x}-{hi:x}\n");
    }
    s
}

/// Where a symbol of `kind` with value `value` starts: an ARM Thumb
/// function's value has bit 0 set (the interworking bit), its code starts
/// at the even address. Data symbols are what they say.
fn code_address(arch: object::Architecture, kind: SymbolKind, value: u64) -> u64 {
    match (arch, kind) {
        (object::Architecture::Arm, SymbolKind::Text) => value & !1,
        _ => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thumb_functions_start_at_the_even_address() {
        use object::Architecture::{Aarch64, Arm};
        assert_eq!(code_address(Arm, SymbolKind::Text, 0x104c9), 0x104c8);
        assert_eq!(code_address(Arm, SymbolKind::Text, 0x10340), 0x10340);
        assert_eq!(code_address(Arm, SymbolKind::Data, 0x2_0001), 0x2_0001);
        assert_eq!(code_address(Aarch64, SymbolKind::Text, 0x401), 0x401);
    }
}
