// SPDX-License-Identifier: GPL-2.0-or-later
//! Where the shared library of a `LIB:FUNC` probe is: the file QEMU will
//! map for a dynamically linked program, found before it runs in the
//! directories of the sysroot the launcher gives QEMU (`-L`, Debian's
//! `/usr/<triple>`), or of the host for its own architecture.
//!
//! Its run-time address is not known until the dynamic loader maps it:
//! the hook library finds it in QEMU's `/proc/self/maps` when the guest
//! first runs code outside what it has seen (`examples/probe/src/lib.rs`),
//! and the client from the mapping event of that file (`super::tracer`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::error::Error;

/// The library `lib` (a file name prefix: `libc` for `libc.so.6`) of the
/// dynamically linked `program`, canonical; `Err` is one line.
pub fn find(program: &Path, lib: &str) -> Result<PathBuf, Error> {
    let (interp, root) = sysroot(program)?;
    let Some(interp) = interp else {
        return Err(Error::Static {
            program: program.to_path_buf(),
            lib: lib.into(),
        });
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = Path::new(&interp).parent() {
        dirs.push(root.join(d.strip_prefix("/").unwrap_or(d)));
    }
    for d in ["lib", "lib64", "usr/lib", "usr/lib64"] {
        let d = root.join(d);
        // Debian's multiarch directories (`lib/x86_64-linux-gnu`).
        if let Ok(rd) = std::fs::read_dir(&d) {
            let mut multi: Vec<PathBuf> = rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir() && p.to_string_lossy().contains("-linux-"))
                .collect();
            multi.sort();
            dirs.push(d);
            dirs.extend(multi);
        }
    }
    for d in &dirs {
        let Ok(rd) = std::fs::read_dir(d) else {
            continue;
        };
        let mut names: Vec<OsString> = rd.flatten().map(|e| e.file_name()).collect();
        names.sort();
        for n in names {
            let s = n.to_string_lossy();
            let Some(rest) = s.strip_prefix(lib) else {
                continue;
            };
            if rest.starts_with(".so") || rest.starts_with("-") && rest.contains(".so") {
                let p = d.join(&n);
                // Not `libc.so`, the linker script: the ELF file.
                if let Ok(c) = p.canonicalize() {
                    if is_elf(&c) {
                        return Ok(c);
                    }
                }
            }
        }
    }
    Err(Error::NoLibrary {
        program: program.to_path_buf(),
        lib: lib.into(),
        dirs,
    })
}

/// The `PT_INTERP` path of `program` (`None`: statically linked) and the
/// sysroot QEMU will look for it and its libraries in.
fn sysroot(program: &Path) -> Result<(Option<String>, PathBuf), Error> {
    let guest = launch::arch::inspect(program)?;
    let root = launch::find::find_sysroot(&guest, &launch::find::env_qemu_args())?
        .unwrap_or_else(|| PathBuf::from("/"));
    Ok((guest.interp, root))
}

/// The dynamic loader's file of the dynamically linked `program`, as QEMU
/// will map it (canonical); `None` for a statically linked one; `Err` is
/// one line.
pub fn interpreter(program: &Path) -> Result<Option<PathBuf>, Error> {
    let (interp, root) = sysroot(program)?;
    let Some(interp) = interp else {
        return Ok(None);
    };
    let p = Path::new(&interp);
    let file = root.join(p.strip_prefix("/").unwrap_or(p));
    match file.canonicalize() {
        Ok(c) if is_elf(&c) => Ok(Some(c)),
        _ => Err(Error::NoLoader {
            program: program.to_path_buf(),
            interp,
            root,
        }),
    }
}

fn is_elf(p: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}
