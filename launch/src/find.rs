// SPDX-License-Identifier: GPL-2.0-or-later
//! Finding things: the program, the patched QEMU, the hook library, the
//! sysroot of a dynamically linked guest.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::arch::{Arch, Guest};
use crate::Error;

/// Environment variables the launcher reads.
pub const QEMU_ENV: &str = "CANNOLI_QEMU";
pub const QEMU_DIR_ENV: &str = "CANNOLI_QEMU_DIR";
pub const QEMU_BUILD_ENV: &str = "CANNOLI_QEMU_BUILD";
pub const QEMU_ARGS_ENV: &str = "CANNOLI_QEMU_ARGS";
pub const HOOKS_ENV: &str = "CANNOLI_HOOKS";
/// QEMU's own environment variable for `-L`.
pub const LD_PREFIX_ENV: &str = "QEMU_LD_PREFIX";

fn env_nonempty(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

fn is_executable_file(p: &Path) -> bool {
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The program to run: a path with a `/` as given; a bare name from the
/// current directory if it is there, else from `PATH`.
pub fn resolve_program(program: &OsStr) -> Result<PathBuf, Error> {
    let given = Path::new(program);
    let no_such = || Error::NoProgram {
        program: given.to_path_buf(),
    };
    if program.is_empty() {
        return Err(no_such());
    }
    let path = if program.as_bytes().contains(&b'/') || given.exists() {
        given.to_path_buf()
    } else {
        let path_var = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path_var)
            .map(|d| d.join(given))
            .find(|p| is_executable_file(p))
            .ok_or_else(no_such)?
    };
    let meta = std::fs::metadata(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            no_such()
        } else {
            Error::NotExecutable {
                path: path.clone(),
                why: e.to_string(),
            }
        }
    })?;
    if meta.is_dir() {
        return Err(Error::NotExecutable {
            path,
            why: "it is a directory".into(),
        });
    }
    if !meta.is_file() {
        return Err(Error::NotExecutable {
            path,
            why: "not a regular file".into(),
        });
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(Error::NotExecutable {
            path,
            why: "it has no execute permission (chmod +x it)".into(),
        });
    }
    Ok(path)
}

/// The directories where the hook library may be: around the running
/// executable (its own directory, cargo's profile directory; the profile
/// directory above `deps/` or `examples/` for tests and `cargo run
/// --example`; `../lib` of an installed `bin/`, Nix-like layouts), then
/// `target/release` of the workspace this crate was built in (where
/// `cargo build --release` puts them for a `cargo install`ed tool).
fn exe_dirs() -> Vec<PathBuf> {
    let mut dirs = dirs_near_exe();
    if let Some(ws) = Path::new(env!("CARGO_MANIFEST_DIR")).parent() {
        let d = ws.join("target/release");
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs
}

fn dirs_near_exe() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    else {
        return dirs;
    };
    let name = dir.file_name().and_then(|n| n.to_str()).map(str::to_owned);
    dirs.push(dir.clone());
    if let Some(parent) = dir.parent() {
        match name.as_deref() {
            Some("deps" | "examples") => dirs.push(parent.to_path_buf()),
            Some("bin") => dirs.push(parent.join("lib")),
            _ => {}
        }
    }
    dirs
}

/// The hook library `lib<name>.so`: `$CANNOLI_HOOKS` if set, else next to
/// the running executable. A `name` with a `/` or ending in `.so` is a path.
pub fn find_hooks(name: &str) -> Result<PathBuf, Error> {
    if let Some(p) = env_nonempty(HOOKS_ENV) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(Error::NoHooks {
                name: name.to_string(),
                looked: vec![format!("${HOOKS_ENV}={} (no such file)", p.display())],
            })
        };
    }
    if name.contains('/') || name.ends_with(".so") {
        let p = PathBuf::from(name);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(Error::NoHooks {
                name: name.to_string(),
                looked: vec![format!("{name} (no such file)")],
            })
        };
    }
    let file = hooks_file(name);
    let dirs = exe_dirs();
    for d in &dirs {
        let p = d.join(&file);
        if p.is_file() {
            return Ok(p);
        }
    }
    let mut looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    looked.push(format!("${HOOKS_ENV} (unset)"));
    Err(Error::NoHooks {
        name: name.to_string(),
        looked,
    })
}

/// `lib<name>.so`, with `-` turned into `_` as cargo does.
pub fn hooks_file(name: &str) -> String {
    format!("lib{}.so", name.replace('-', "_"))
}

/// `target/qemu.env` files to try: above the running executable, then the
/// workspace this crate was built in.
fn qemu_env_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut push = |p: PathBuf| {
        if !files.contains(&p) {
            files.push(p);
        }
    };
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1) {
            let f = dir.join("target/qemu.env");
            if f.is_file() {
                push(f);
                break;
            }
        }
    }
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).parent();
    if let Some(ws) = ws {
        let f = ws.join("target/qemu.env");
        if f.is_file() {
            push(f);
        }
    }
    files
}

/// The value of `key` in a `KEY=VALUE` file.
fn env_file_value(file: &Path, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.trim().split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
    })
}

/// Whether `qemu` is a patched QEMU: its `-h` lists `-cannoli`.
pub fn understands_cannoli(qemu: &Path) -> bool {
    Command::new(qemu)
        .arg("-h")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|o| {
            o.stdout
                .windows(b"-cannoli".len())
                .any(|w| w == b"-cannoli")
        })
        .unwrap_or(false)
}

/// The patched `qemu-<arch>`: `$CANNOLI_QEMU` (a binary, used as is),
/// `$CANNOLI_QEMU_DIR/qemu-<arch>`, `$CANNOLI_QEMU_BUILD/qemu-<arch>`,
/// `CANNOLI_QEMU_BUILD` of `target/qemu.env` (written by
/// `scripts/build-qemu.sh`), else `qemu-<arch>` on `PATH` if it understands
/// `-cannoli`.
pub fn find_qemu(arch: &'static Arch) -> Result<PathBuf, Error> {
    let bin = arch.qemu_binary();
    let mut looked = Vec::new();
    if let Some(q) = env_nonempty(QEMU_ENV) {
        let q = PathBuf::from(q);
        if is_executable_file(&q) {
            return Ok(q);
        }
        looked.push(format!(
            "${QEMU_ENV}={} (not an executable file)",
            q.display()
        ));
        return Err(Error::NoQemu { arch, looked });
    }
    looked.push(format!("${QEMU_ENV} (unset)"));
    for var in [QEMU_DIR_ENV, QEMU_BUILD_ENV] {
        match env_nonempty(var) {
            Some(d) => {
                let q = Path::new(&d).join(&bin);
                if is_executable_file(&q) {
                    return Ok(q);
                }
                looked.push(format!("${var}={} (no {bin})", Path::new(&d).display()));
            }
            None if var == QEMU_DIR_ENV => looked.push(format!("${var} (unset)")),
            None => {}
        }
    }
    let files = qemu_env_files();
    if files.is_empty() {
        looked.push("target/qemu.env (none above the executable or in the workspace)".into());
    }
    for f in files {
        match env_file_value(&f, QEMU_BUILD_ENV) {
            Some(d) => {
                let q = Path::new(&d).join(&bin);
                if is_executable_file(&q) {
                    return Ok(q);
                }
                looked.push(format!(
                    "{} ({QEMU_BUILD_ENV}={d} has no {bin})",
                    f.display()
                ));
            }
            None => looked.push(format!("{} (no {QEMU_BUILD_ENV})", f.display())),
        }
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    let on_path: Vec<PathBuf> = std::env::split_paths(&path_var)
        .map(|d| d.join(&bin))
        .filter(|p| is_executable_file(p))
        .collect();
    for q in &on_path {
        if understands_cannoli(q) {
            return Ok(q.clone());
        }
    }
    if on_path.is_empty() {
        looked.push(format!("PATH (no {bin})"));
    } else {
        let list: Vec<String> = on_path.iter().map(|p| p.display().to_string()).collect();
        looked.push(format!("PATH ({} without -cannoli)", list.join(", ")));
    }
    Err(Error::NoQemu { arch, looked })
}

/// Whether the QEMU options already choose a sysroot (`-L`), or QEMU's
/// `QEMU_LD_PREFIX` does.
fn sysroot_given(qemu_args: &[OsString]) -> bool {
    env_nonempty(LD_PREFIX_ENV).is_some() || qemu_args.iter().any(|a| a == "-L")
}

/// The `-L` sysroot for a dynamically linked guest: the Debian cross
/// sysroot `/usr/<triple>` if it holds the guest's interpreter. `None` for a
/// static guest, when the options already have one, or when the host runs
/// the architecture natively and has the interpreter.
pub fn find_sysroot(guest: &Guest, qemu_args: &[OsString]) -> Result<Option<PathBuf>, Error> {
    let Some(interp) = &guest.interp else {
        return Ok(None);
    };
    if sysroot_given(qemu_args) {
        return Ok(None);
    }
    let arch = guest.arch;
    if let Some(root) = arch.sysroot() {
        if root.join(interp.trim_start_matches('/')).exists() {
            return Ok(Some(root));
        }
    }
    if arch.is_host() && Path::new(interp).exists() {
        return Ok(None);
    }
    Err(Error::NoSysroot {
        path: guest.path.clone(),
        arch,
        interp: interp.clone(),
    })
}

/// `$CANNOLI_QEMU_ARGS`, split at whitespace.
pub fn env_qemu_args() -> Vec<OsString> {
    env_nonempty(QEMU_ARGS_ENV)
        .map(|v| {
            v.as_bytes()
                .split(|b| b.is_ascii_whitespace())
                .filter(|w| !w.is_empty())
                .map(|w| OsStr::from_bytes(w).to_os_string())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_file_name() {
        assert_eq!(hooks_file("symbolizer"), "libsymbolizer.so");
        assert_eq!(hooks_file("my-tool"), "libmy_tool.so");
    }

    #[test]
    fn env_file() {
        let p = std::env::temp_dir().join(format!("launch-env-{}", std::process::id()));
        std::fs::write(&p, "A=1\nCANNOLI_QEMU_BUILD=/x/y\n").unwrap();
        assert_eq!(
            env_file_value(&p, "CANNOLI_QEMU_BUILD").as_deref(),
            Some("/x/y")
        );
        assert_eq!(env_file_value(&p, "B"), None);
        let _ = std::fs::remove_file(p);
    }

    #[test]
    fn programs() {
        assert!(matches!(
            resolve_program(OsStr::new("/nonexistent/prog")),
            Err(Error::NoProgram { .. })
        ));
        assert!(matches!(
            resolve_program(OsStr::new("no-such-program-anywhere-xyz")),
            Err(Error::NoProgram { .. })
        ));
        assert!(matches!(
            resolve_program(OsStr::new("/tmp")),
            Err(Error::NotExecutable { .. })
        ));
        assert_eq!(
            resolve_program(OsStr::new("sh"))
                .unwrap()
                .file_name()
                .unwrap(),
            "sh"
        );
    }
}
