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

/// `$CANNOLI_QEMU`: the patched QEMU binary to use as is, instead of
/// looking for one.
pub const QEMU_ENV: &str = "CANNOLI_QEMU";
/// `$CANNOLI_QEMU_DIR`: a directory holding `qemu-<arch>` binaries.
pub const QEMU_DIR_ENV: &str = "CANNOLI_QEMU_DIR";
/// `$CANNOLI_QEMU_BUILD`: a QEMU build directory holding `qemu-<arch>`;
/// `scripts/build-qemu.sh` also records it in `target/qemu.env`.
pub const QEMU_BUILD_ENV: &str = "CANNOLI_QEMU_BUILD";
/// `$CANNOLI_QEMU_ARGS`: more arguments for QEMU, split at whitespace
/// (e.g. `-L /sysroot`).
pub const QEMU_ARGS_ENV: &str = "CANNOLI_QEMU_ARGS";
/// `$CANNOLI_HOOKS`: the hook library to load, instead of looking for one.
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

/// The program to run, as a shell finds it: a name with a `/` is used as
/// given; a name without one is looked up in `PATH` only (the current
/// directory only where `PATH` has `.` or an empty entry), the first
/// executable regular file of that name.
pub fn resolve_program(program: &OsStr) -> Result<PathBuf, Error> {
    resolve_in(program, &std::env::var_os("PATH").unwrap_or_default())
}

/// [`resolve_program`] with `path_var` for `PATH`.
fn resolve_in(program: &OsStr, path_var: &OsStr) -> Result<PathBuf, Error> {
    let given = Path::new(program);
    let no_such = || Error::NoProgram {
        program: given.to_path_buf(),
    };
    if program.is_empty() {
        return Err(no_such());
    }
    let path = if program.as_bytes().contains(&b'/') {
        given.to_path_buf()
    } else {
        // An empty entry is the current directory, as in a shell.
        std::env::split_paths(path_var)
            .map(|d| {
                if d.as_os_str().is_empty() {
                    PathBuf::from(".").join(given)
                } else {
                    d.join(given)
                }
            })
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

/// A `target/qemu.env` file the launcher may read, and its text.
struct EnvFile {
    path: PathBuf,
    text: String,
}

/// `target/qemu.env` files to try: in every directory above the running
/// executable, nearest first, then the workspace this crate was built in.
/// Each is read only if it can be trusted (see [`trusted_env_file`]); one
/// that cannot is skipped with one line on stderr saying why.
fn qemu_env_files() -> Vec<EnvFile> {
    let exe = std::env::current_exe().ok();
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).parent();
    let (files, skipped) = env_files_above(exe.as_deref(), ws);
    for why in skipped {
        eprintln!("{}: {why}", crate::tool_name());
    }
    files
}

/// [`qemu_env_files`] for the executable `exe` and the workspace `ws`:
/// the files to use, and a line for each one skipped.
fn env_files_above(exe: Option<&Path>, ws: Option<&Path>) -> (Vec<EnvFile>, Vec<String>) {
    let mut candidates: Vec<PathBuf> = Vec::new();
    for dir in exe.into_iter().flat_map(|e| e.ancestors().skip(1)) {
        candidates.push(dir.join("target/qemu.env"));
    }
    candidates.extend(ws.map(|w| w.join("target/qemu.env")));
    let mut files: Vec<EnvFile> = Vec::new();
    let mut skipped = Vec::new();
    for path in candidates {
        if files.iter().any(|f| f.path == path) {
            continue;
        }
        match trusted_env_file(&path) {
            Ok(Some(text)) => files.push(EnvFile { path, text }),
            Ok(None) => {}
            Err(why) => skipped.push(format!("ignoring {}: {why}", crate::escape_path(&path))),
        }
    }
    (files, skipped)
}

/// The text of the configuration file at `path` if it is one the launcher
/// may trust: a regular file owned by this user or root that group and
/// others cannot write (else anyone who could write it would choose the
/// QEMU every tool runs). `Ok(None)`: there is none; `Err`: why it is not
/// trusted. It is checked on the open file, then read from it.
fn trusted_env_file(path: &Path) -> Result<Option<String>, String> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(_) => return Ok(None),
    };
    let m = f
        .metadata()
        .map_err(|e| format!("cannot look at it ({e})"))?;
    if !m.is_file() {
        return Ok(None);
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if m.uid() != me && m.uid() != 0 {
        return Err(format!(
            "it belongs to uid {}, neither you ({me}) nor root; only a file of yours or root's \
             chooses the QEMU to run",
            m.uid()
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!(
            "others than its owner may write it (mode {:04o}); chmod go-w it to use it",
            m.mode() & 0o7777
        ));
    }
    let mut text = String::new();
    f.by_ref()
        .take(64 * 1024)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read it ({e})"))?;
    Ok(Some(text))
}

/// The value of `key` in `KEY=VALUE` lines.
fn env_text_value(text: &str, key: &str) -> Option<String> {
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
        looked.push(
            "target/qemu.env (none you or root own above the executable or in the workspace)"
                .into(),
        );
    }
    for f in files {
        match env_text_value(&f.text, QEMU_BUILD_ENV) {
            Some(d) => {
                let q = Path::new(&d).join(&bin);
                if is_executable_file(&q) {
                    return Ok(q);
                }
                looked.push(format!(
                    "{} ({QEMU_BUILD_ENV}={d} has no {bin})",
                    f.path.display()
                ));
            }
            None => looked.push(format!("{} (no {QEMU_BUILD_ENV})", f.path.display())),
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
        let t = "A=1\nCANNOLI_QEMU_BUILD=/x/y\n";
        assert_eq!(
            env_text_value(t, "CANNOLI_QEMU_BUILD").as_deref(),
            Some("/x/y")
        );
        assert_eq!(env_text_value(t, "B"), None);
    }

    /// A fresh directory tree for one test.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("launch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_planted_qemu_env_above_the_executable_is_ignored() {
        use std::os::unix::fs::PermissionsExt;
        let root = scratch("env");
        // <root>/target/qemu.env (planted), <root>/a/target/qemu.env (ours),
        // and the executable <root>/a/b/bin/tool.
        let planted = root.join("target/qemu.env");
        let ours = root.join("a/target/qemu.env");
        let exe = root.join("a/b/bin/tool");
        for f in [&planted, &ours, &exe] {
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, "CANNOLI_QEMU_BUILD=/x\n").unwrap();
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let found = |exe: &Path| {
            let (files, skipped) = env_files_above(Some(exe), None);
            (
                files.into_iter().map(|f| f.path).collect::<Vec<_>>(),
                skipped,
            )
        };
        // Both trusted: every ancestor's, nearest first.
        assert_eq!(found(&exe).0, vec![ours.clone(), planted.clone()]);
        // Writable by others: skipped, with a line saying why.
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666)).unwrap();
        let (files, skipped) = found(&exe);
        assert_eq!(files, vec![ours.clone()]);
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert!(
            skipped[0].contains(&planted.display().to_string()) && skipped[0].contains("mode 0666"),
            "{skipped:?}"
        );
        // Group-writable: the same.
        std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(0o664)).unwrap();
        assert_eq!(found(&exe).0, Vec::<PathBuf>::new());
        std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o644)).unwrap();
        // Another owner (only root can make one).
        // SAFETY: geteuid has no preconditions; chown of our own file.
        if unsafe { libc::geteuid() } == 0 {
            let c = std::ffi::CString::new(planted.as_os_str().as_bytes()).unwrap();
            assert_eq!(unsafe { libc::chown(c.as_ptr(), 54_321, 54_321) }, 0);
            let (files, skipped) = found(&exe);
            assert_eq!(files, vec![ours.clone()]);
            assert!(skipped[0].contains("belongs to uid 54321"), "{skipped:?}");
        }
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_bare_name_is_looked_up_in_path_only() {
        use std::os::unix::fs::PermissionsExt;
        let d = scratch("path");
        let prog = d.join("launch-test-prog");
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let name = OsStr::new("launch-test-prog");
        let path_with = |dirs: &[&Path]| std::env::join_paths(dirs).unwrap();
        // In PATH: found there.
        assert_eq!(
            resolve_in(name, &path_with(&[Path::new("/usr/bin"), &d])).unwrap(),
            prog
        );
        // Not in PATH: not found, wherever the current directory is.
        assert!(matches!(
            resolve_in(name, &path_with(&[Path::new("/usr/bin")])),
            Err(Error::NoProgram { .. })
        ));
        // A non-executable file of that name earlier in PATH is passed over.
        let other = scratch("path2");
        std::fs::write(other.join("launch-test-prog"), "x").unwrap();
        assert_eq!(resolve_in(name, &path_with(&[&other, &d])).unwrap(), prog);
        // An empty entry is the current directory, as in a shell.
        assert_eq!(
            resolve_in(OsStr::new("x"), OsStr::new(":/nonexistent"))
                .err()
                .map(|e| e.to_string()),
            Some("x: no such program".into())
        );
        // A name with a slash is used as given.
        assert_eq!(resolve_in(prog.as_os_str(), OsStr::new("")).unwrap(), prog);
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_dir_all(&other);
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
