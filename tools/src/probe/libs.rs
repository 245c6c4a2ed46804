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

/// The library `lib` of the dynamically linked `program`, canonical:
/// `lib` is a file name prefix (`libc` for `libc.so.6`), a whole file name
/// (`libc.so.6`, as `ldd` and the loader's SONAMEs give it) or a path.
/// `Err` is one line.
pub fn find(program: &Path, lib: &str) -> Result<PathBuf, Error> {
    let (interp, root) = sysroot(program)?;
    let Some(interp) = interp else {
        return Err(Error::Static {
            program: program.to_path_buf(),
            lib: lib.into(),
        });
    };
    if lib.contains('/') {
        if let Ok(c) = Path::new(lib).canonicalize() {
            if is_elf(&c) {
                return Ok(c);
            }
        }
    }
    // The libraries the program loads first (those its `DT_RUNPATH` or
    // `LD_LIBRARY_PATH` place too), then any in the sysroot.
    let named = |n: &str| -> bool {
        n.strip_prefix(lib).is_some_and(|rest| {
            rest.is_empty() && lib.contains(".so")
                || rest.starts_with(".so")
                || rest.starts_with('-') && rest.contains(".so")
        })
    };
    let by_name = loaded(program)?
        .into_iter()
        .find(|l| l.file_name().is_some_and(|n| named(&n.to_string_lossy())));
    if let Some(l) = by_name {
        return Ok(l);
    }
    let dirs = search_dirs(&interp, &root);
    for d in &dirs {
        let Ok(rd) = std::fs::read_dir(d) else {
            continue;
        };
        let mut names: Vec<OsString> = rd.flatten().map(|e| e.file_name()).collect();
        names.sort();
        for n in names {
            let s = n.to_string_lossy();
            if named(&s) {
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

/// The directories the libraries of a program with loader `interp` are
/// looked for in, under `root`: the loader's own, then `lib`, `lib64`,
/// `usr/lib` and `usr/lib64` with Debian's multiarch directories
/// (`lib/x86_64-linux-gnu`) after each.
fn search_dirs(interp: &str, root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = Path::new(interp).parent() {
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
    dirs
}

/// The shared libraries the dynamic loader maps for `program` before it
/// runs, canonical, in the loader's order: its `DT_NEEDED` entries breadth
/// first (each library's own after the program's), then the loader itself
/// if no library named it. Empty for a statically linked program. A
/// needed library that is not found is left out (the loader would refuse
/// to start the program; its error says which). `Err` is one line.
///
/// `LD_PRELOAD`'s libraries come first, as the loader maps them first
/// (the guest's environment is the tool's). A name is looked for as
/// glibc's loader looks for it: in the `DT_RPATH` of the object that
/// needs it and of the program (where the object has no `DT_RUNPATH`), in
/// `LD_LIBRARY_PATH`, in the object's `DT_RUNPATH`, then in the sysroot's
/// default directories. `$ORIGIN` is the object's directory; each
/// directory is tried under the sysroot first, as QEMU's `-L` maps the
/// loader's paths.
/// The loader's cache (`/etc/ld.so.cache`) lists only the default
/// directories' libraries on Debian, so it adds nothing.
pub fn loaded(program: &Path) -> Result<Vec<PathBuf>, Error> {
    let (interp, root) = sysroot(program)?;
    let Some(interp) = interp else {
        return Ok(Vec::new());
    };
    let defaults = search_dirs(&interp, &root);
    let env: Vec<String> = std::env::var("LD_LIBRARY_PATH")
        .map(|v| v.split([':', ';']).map(str::to_string).collect())
        .unwrap_or_default();
    // Preloaded libraries come before the program's own (glibc's loader
    // takes names and paths, separated by spaces or colons).
    let preload: Vec<String> = std::env::var("LD_PRELOAD")
        .map(|v| {
            v.split([' ', ':'])
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let mut exe = Dynamic::read(program);
    let exe_rpath = exe.rpath.clone();
    exe.needed.splice(0..0, preload);
    let mut found: Vec<PathBuf> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut queue: std::collections::VecDeque<PathBuf> = [program.to_path_buf()].into();
    let mut first = Some(exe);
    while let Some(file) = queue.pop_front() {
        let dy = first.take().unwrap_or_else(|| Dynamic::read(&file));
        let origin = file.parent().unwrap_or(Path::new("/"));
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut add = |list: &[String], origin: &Path| {
            for d in list.iter().filter(|d| !d.is_empty()) {
                let d = d.replace("${ORIGIN}", "$ORIGIN");
                let d = d.replace("$ORIGIN", &origin.to_string_lossy());
                let d = Path::new(&d);
                if d.is_absolute() {
                    dirs.push(root.join(d.strip_prefix("/").unwrap_or(d)));
                }
                dirs.push(d.to_path_buf());
            }
        };
        if dy.runpath.is_empty() {
            add(&dy.rpath, origin);
            let exe_dir = program.parent().unwrap_or(Path::new("/"));
            add(&exe_rpath, exe_dir);
        }
        add(&env, Path::new("."));
        add(&dy.runpath, origin);
        dirs.extend(defaults.iter().cloned());
        for name in dy.needed {
            if names.contains(&name) {
                continue;
            }
            let at = if name.contains('/') {
                Some(PathBuf::from(&name)).filter(|p| is_elf(p))
            } else {
                dirs.iter().map(|d| d.join(&name)).find(|p| is_elf(p))
            };
            names.push(name);
            if let Some(c) = at.and_then(|p| p.canonicalize().ok()) {
                if !found.contains(&c) {
                    found.push(c.clone());
                    queue.push_back(c);
                }
            }
        }
    }
    if let Some(ld) = interpreter(program)? {
        if !found.contains(&ld) {
            found.push(ld);
        }
    }
    Ok(found)
}

/// What the dynamic section of an ELF file asks of the loader: the
/// libraries it needs and where to look for them (each list empty where
/// the file cannot be read or has no dynamic section).
#[derive(Default)]
struct Dynamic {
    needed: Vec<String>,
    rpath: Vec<String>,
    runpath: Vec<String>,
}

impl Dynamic {
    fn read(path: &Path) -> Dynamic {
        use object::read::elf::{ElfFile, FileHeader};
        fn of<E: FileHeader<Endian = object::Endianness>>(f: &ElfFile<'_, E>) -> Dynamic {
            use object::elf::{DT_NEEDED, DT_RPATH, DT_RUNPATH};
            use object::read::elf::Dyn;
            let mut out = Dynamic::default();
            let (e, data) = (f.endian(), f.data());
            let table = f.elf_section_table();
            let Ok(Some((dyns, link))) = table.dynamic(e, data) else {
                return out;
            };
            let Ok(strings) = table.strings(e, data, link) else {
                return out;
            };
            for d in dyns {
                let Some(tag) = d
                    .tag32(e)
                    .filter(|t| [DT_NEEDED, DT_RPATH, DT_RUNPATH].contains(t))
                else {
                    continue;
                };
                let Ok(s) = d.string(e, strings) else {
                    continue;
                };
                let s = String::from_utf8_lossy(s).into_owned();
                match tag {
                    DT_NEEDED => out.needed.push(s),
                    DT_RPATH => out.rpath.extend(s.split(':').map(str::to_string)),
                    _ => out.runpath.extend(s.split(':').map(str::to_string)),
                }
            }
            out
        }
        let Ok(data) = std::fs::read(path) else {
            return Dynamic::default();
        };
        match object::File::parse(&*data) {
            Ok(object::File::Elf32(f)) => of(&f),
            Ok(object::File::Elf64(f)) => of(&f),
            _ => Dynamic::default(),
        }
    }
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
