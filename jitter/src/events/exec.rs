//! Execve: the guest's exec ends its stream, and a guest program of the
//! same kind is run again under this QEMU and hook library (its argv and
//! environment rewritten), so that its trace continues.

use super::guest::env;
use super::syscalls::{lock, write_syscall, PENDING};
use crate::stream::{self, Cursor};
use std::ffi::{c_char, CStr, CString};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

/// Our own QEMU binary and hook library, for running an exec'd guest program
/// under the same tracer.
static SELF_PATHS: OnceLock<Option<(CString, CString)>> = OnceLock::new();
static EXEC_WARNED: AtomicI32 = AtomicI32::new(0);

fn self_paths() -> Option<&'static (CString, CString)> {
    SELF_PATHS
        .get_or_init(|| {
            let qemu = std::fs::read_link("/proc/self/exe").ok()?;
            // SAFETY: dladdr only reads our own code address and fills `info`.
            let lib = unsafe {
                let mut info: libc::Dl_info = std::mem::zeroed();
                if libc::dladdr(self_paths as *const () as *const libc::c_void, &mut info) == 0
                    || info.dli_fname.is_null()
                {
                    return None;
                }
                CStr::from_ptr(info.dli_fname).to_owned()
            };
            let lib = std::fs::canonicalize(lib.to_str().ok()?).ok()?;
            Some((
                CString::new(qemu.into_os_string().into_encoded_bytes()).ok()?,
                CString::new(lib.into_os_string().into_encoded_bytes()).ok()?,
            ))
        })
        .as_ref()
}

/// This QEMU's own command-line options, from /proc/self/cmdline: what comes
/// before the guest program, without `-0`, `-E`, `-U` and `-cannoli` (with
/// their arguments).
fn qemu_options() -> Vec<CString> {
    let Ok(raw) = std::fs::read("/proc/self/cmdline") else {
        return Vec::new();
    };
    let args: Vec<&[u8]> = raw.split(|&b| b == 0).collect();
    let Some(prog) = env().and_then(|e| e.exe_as_given.as_deref()) else {
        return Vec::new();
    };
    let Some(at) = args
        .iter()
        .skip(1)
        .position(|a| *a == prog.as_bytes())
        .map(|i| i + 1)
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // QEMU accepts both -opt and --opt.
    let mut it = args[1..at].iter();
    while let Some(&a) = it.next() {
        let name = a
            .strip_prefix(b"--")
            .or_else(|| a.strip_prefix(b"-"))
            .unwrap_or(a);
        if matches!(name, b"0" | b"E" | b"U" | b"cannoli") {
            it.next();
        } else if let Ok(c) = CString::new(a) {
            out.push(c);
        }
    }
    out
}

/// (class, data, machine) of an ELF file, if it is one.
pub fn elf_ident(path: &std::path::Path) -> Option<(u8, u8, u16)> {
    use std::io::Read;
    let mut h = [0u8; 20];
    std::fs::File::open(path).ok()?.read_exact(&mut h).ok()?;
    if &h[..4] != b"\x7fELF" {
        return None;
    }
    let machine = if h[5] == 2 {
        u16::from_be_bytes([h[18], h[19]])
    } else {
        u16::from_le_bytes([h[18], h[19]])
    };
    Some((h[4], h[5], machine))
}

/// Reads a NULL-terminated array of C strings.
///
/// # Safety
/// `v` is NULL or a valid NULL-terminated array of valid C strings.
unsafe fn c_strings(v: *const *mut c_char) -> Vec<CString> {
    let mut out = Vec::new();
    if v.is_null() {
        return out;
    }
    let mut i = 0;
    // SAFETY: the caller's contract: entries up to the NULL are C strings.
    unsafe {
        while !(*v.add(i)).is_null() {
            out.push(CStr::from_ptr(*v.add(i)).to_owned());
            i += 1;
        }
    }
    out
}

/// Leaks a NULL-terminated array for execve (it either replaces the process
/// or fails, which is rare enough to leak).
fn leak_argv(v: Vec<CString>) -> *mut *mut c_char {
    let mut ptrs: Vec<*mut c_char> = v.into_iter().map(CString::into_raw).collect();
    ptrs.push(std::ptr::null_mut());
    Box::leak(ptrs.into_boxed_slice()).as_mut_ptr()
}

/// Environment variables of a QEMU that a traced exec started: that it is
/// one, as the count of traced execs that led to it (see [`image`]), and
/// the fd carrying its program (see [`exec_target`]).
const SUCCESSOR_ENV: &str = "CANNOLI_EXEC_SUCCESSOR";
const EXEC_FD_ENV: &str = "CANNOLI_EXEC_FD";

/// In a QEMU a traced exec started: the fd its program came through, closed
/// once QEMU has loaded the program (before any guest code runs).
static INHERITED_EXEC_FD: AtomicI32 = AtomicI32::new(-1);

thread_local! {
    /// The fd this thread passed to the next QEMU, closed if the exec
    /// comes back (it failed).
    static OUTGOING_EXEC_FD: std::cell::Cell<i32> = const { std::cell::Cell::new(-1) };
}

/// Whether this QEMU was started by a traced guest's exec.
pub fn exec_successor() -> bool {
    std::env::var_os(SUCCESSOR_ENV).is_some()
}

/// Which image of this pid the process is (`wire::Hello::image`): how many
/// traced execs led to it, 0 for the program as the run started it. A
/// forked child inherits QEMU's environment, and so its parent's count;
/// a count that is not a number reads as 1 (it was set, so an exec was).
pub fn image() -> u32 {
    std::env::var_os(SUCCESSOR_ENV)
        .map_or(0, |v| v.to_str().and_then(|s| s.parse().ok()).unwrap_or(1))
}

/// At init: remembers the fd the exec'ing QEMU passed its program through.
pub fn note_exec_fd() {
    if let Some(fd) = std::env::var(EXEC_FD_ENV)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|&fd| fd >= 0)
    {
        INHERITED_EXEC_FD.store(fd, Ordering::Relaxed);
    }
}

/// Closes the fds of [`note_exec_fd`] and of a failed exec, if any.
pub fn close_exec_fd() {
    if INHERITED_EXEC_FD.load(Ordering::Relaxed) >= 0 {
        let fd = INHERITED_EXEC_FD.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: the fd was made for this QEMU to open its program
            // (which it has, by the time a vCPU runs) and is nobody's else:
            // it sits out of the guest's reach.
            unsafe { libc::close(fd) };
        }
    }
    let fd = OUTGOING_EXEC_FD.with(|f| f.replace(-1));
    if fd >= 0 {
        // SAFETY: made by `execve` below for an exec that came back.
        unsafe { libc::close(fd) };
    }
}

/// The file a guest's execveat(dirfd, path, ..., flags) would run, looked
/// up the way the kernel does: relative to `dirfd` (or `dirfd` itself for
/// AT_EMPTY_PATH and an empty path), not through a final symlink with
/// AT_SYMLINK_NOFOLLOW, with search permission on the way, and then a
/// regular file the caller may execute on a mount that allows it. None when
/// the kernel would refuse the exec before looking inside the file: the
/// guest's own call then gets the kernel's own error (ENOENT, EACCES,
/// ELOOP, ENOTDIR, EBADF, ...). The fd is an O_PATH one out of the guest's
/// reach.
fn exec_target(dirfd: i32, path: &CStr, flags: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    if flags & !(libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW) != 0 {
        return None; // EINVAL
    }
    let fd = if path.is_empty() && flags & libc::AT_EMPTY_PATH != 0 {
        let raw = crate::fds::dup_up(dirfd, true);
        if raw < 0 {
            return None;
        }
        // SAFETY: `raw` is a new fd that nothing else owns.
        unsafe { OwnedFd::from_raw_fd(raw) }
    } else {
        let nofollow = if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
            libc::O_NOFOLLOW
        } else {
            0
        };
        crate::fds::make(&mut || {
            // SAFETY: `path` is a valid C string; openat makes a new fd or
            // fails.
            let low = unsafe {
                libc::openat(
                    dirfd,
                    path.as_ptr(),
                    libc::O_PATH | libc::O_CLOEXEC | nofollow,
                )
            };
            if low < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: the fd openat just made.
            Ok(unsafe { OwnedFd::from_raw_fd(low) })
        })
        .ok()?
    };
    // SAFETY: fstat, faccessat and fstatvfs only write the structs given.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        // A symlink opened with O_NOFOLLOW (the kernel: ELOOP), a directory
        // or a device (EACCES) are no programs.
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return None;
        }
        // Execute permission as exec checks it: for the effective ids
        // (through /proc: faccessat with AT_EMPTY_PATH needs Linux 5.8).
        let Ok(proc_path) = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())) else {
            return None;
        };
        if libc::faccessat(
            libc::AT_FDCWD,
            proc_path.as_ptr(),
            libc::X_OK,
            libc::AT_EACCESS,
        ) != 0
        {
            return None;
        }
        let mut vfs: libc::statvfs = std::mem::zeroed();
        if libc::fstatvfs(fd.as_raw_fd(), &mut vfs) == 0 && vfs.f_flag & libc::ST_NOEXEC != 0 {
            return None;
        }
    }
    Some(fd)
}

/// Whether the host kernel may run the regular file `fd` itself: a `#!`
/// script, an ELF file of the host's (x86-64, or i386 which it runs too),
/// or anything while binfmt_misc has entries (which could take it), or a
/// file it cannot read. Else its exec fails with ENOEXEC.
fn host_may_run(fd: i32) -> bool {
    use std::io::Read;
    let mut head = [0u8; 20];
    // Unreadable (execute-only): it may well be a program.
    let Ok(n) =
        std::fs::File::open(format!("/proc/self/fd/{fd}")).and_then(|mut f| f.read(&mut head))
    else {
        return true;
    };
    let head = &head[..n];
    const EM_386: u16 = 3;
    const EM_X86_64: u16 = 62;
    let host_elf = head.len() == 20
        && head.starts_with(b"\x7fELF")
        && head[5] == 1
        && matches!(u16::from_le_bytes([head[18], head[19]]), EM_386 | EM_X86_64);
    host_elf
        || head.starts_with(b"#!")
        || std::fs::read_dir("/proc/sys/fs/binfmt_misc").is_ok_and(|d| {
            d.flatten()
                .any(|e| !matches!(e.file_name().to_str(), Some("register" | "status")))
        })
}

/// The guest is about to exec. If the kernel would refuse the exec, nothing
/// happens here: the guest's own call fails with the kernel's error, which
/// its syscall event reports, and the trace goes on. Otherwise the execve is
/// reported (without a result) and the stream ends; if the new program is a
/// guest binary of the same kind, it is run under this QEMU and hook
/// library again, so its trace continues as a new connection. Should the
/// exec fail after all, the thread traces on in a new stream, which starts
/// with the process's mappings and the execve with its error.
///
/// The new QEMU gets the program by the guest's own path when that means
/// the same file to it (an absolute path, or one relative to the working
/// directory, which the exec keeps); else (a dirfd, AT_EMPTY_PATH) as
/// `/proc/self/fd/N`, with N an fd of the file out of the guest's reach that the
/// new QEMU closes once it has loaded the program.
///
/// # Safety
/// `path`, `argv` and `envp` are valid as for execve(2).
pub unsafe fn execve(
    c: &mut Cursor,
    dirfd: i32,
    flags: i32,
    path: &mut *const c_char,
    argv: &mut *mut *mut c_char,
    envp: &mut *mut *mut c_char,
) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: the caller's contract: `*path` is a C string.
    let guest = unsafe { CStr::from_ptr(*path) }.to_owned();
    let Some(target) = exec_target(dirfd, &guest, flags) else {
        return false;
    };
    let Some(e) = env() else {
        return false;
    };
    let ident = elf_ident(std::path::Path::new(&format!(
        "/proc/self/fd/{}",
        target.as_raw_fd()
    )));
    let same_kind = e.elf_ident.is_some() && ident == e.elf_ident;
    let reexec = self_paths().filter(|_| same_kind);
    if reexec.is_none() && !host_may_run(target.as_raw_fd()) {
        // The kernel has no loader for it: ENOEXEC, and the trace goes on.
        return false;
    }
    // Reported now, while the stream lasts; kept pending for a failure.
    if let Some(p) = PENDING.with(|q| lock(q).clone()).filter(|p| p.report) {
        write_syscall(c, &p, None);
    }
    stream::owe_replay();
    stream::finish(
        c,
        stream::After::Exec {
            successor: reexec.is_some(),
        },
    );
    let shown = String::from_utf8_lossy(guest.to_bytes());
    let Some((qemu, lib)) = reexec else {
        if EXEC_WARNED.fetch_add(1, Ordering::Relaxed) == 0 && ident.is_some() && !same_kind {
            eprintln!(
                "qemu: cannoli: {shown} is not a {} program; it runs untraced",
                crate::config::get().map_or("guest", |c| c.guest.arch.as_str())
            );
        }
        return false;
    };
    let by_path =
        !guest.is_empty() && (dirfd == libc::AT_FDCWD || guest.to_bytes().starts_with(b"/"));
    let (program, exec_fd) = if by_path {
        (guest.clone(), None)
    } else {
        let fd = crate::fds::dup_up(target.as_raw_fd(), false);
        if fd < 0 {
            return false;
        }
        OUTGOING_EXEC_FD.with(|f| f.set(fd));
        match CString::new(format!("/proc/self/fd/{fd}")) {
            Ok(p) => (p, Some(fd)),
            Err(_) => return false,
        }
    };
    // SAFETY: the caller's contract: a NULL-terminated array of C strings.
    let old_argv = unsafe { c_strings(*argv) };
    let mut new_argv = vec![qemu.clone(), c"-cannoli".into(), lib.clone()];
    // The options this QEMU was started with (-R, -seed, -cpu, -L, -strace,
    // ...) apply to the new program too; not those naming this program's
    // argv[0] and environment or the hook library, which are set anew.
    let opts = qemu_options();
    new_argv.extend(opts.iter().cloned());
    if !opts.iter().any(|o| o.to_bytes() == b"-L") {
        if let Some(p) = e
            .interp_prefix
            .as_deref()
            .and_then(|p| CString::new(p).ok())
        {
            new_argv.extend([c"-L".into(), p]);
        }
    }
    if let Some(a0) = old_argv.first() {
        new_argv.extend([c"-0".into(), a0.clone()]);
    }
    new_argv.push(program);
    new_argv.extend(old_argv.into_iter().skip(1));
    // The guest's environment lost our CANNOLI_* settings (QEMU strips them);
    // the next QEMU needs them again, and learns that an exec started it
    // and what the guest's descriptor limits are.
    // SAFETY: as for argv.
    let mut new_envp: Vec<CString> = unsafe { c_strings(*envp) }
        .into_iter()
        .filter(|e| !e.to_bytes().starts_with(b"CANNOLI_"))
        .collect();
    let limits = crate::fds::exec_env();
    let limits_name = limits
        .as_ref()
        .and_then(|l| l.to_bytes().split(|&b| b == b'=').next())
        .unwrap_or_default();
    for (k, v) in std::env::vars_os() {
        let k = k.into_encoded_bytes();
        if k.starts_with(b"CANNOLI_")
            && k != SUCCESSOR_ENV.as_bytes()
            && k != EXEC_FD_ENV.as_bytes()
            && k != limits_name
        {
            let mut kv = k;
            kv.push(b'=');
            kv.extend(v.into_encoded_bytes());
            if let Ok(kv) = CString::new(kv) {
                new_envp.push(kv);
            }
        }
    }
    new_envp.extend(limits.clone());
    new_envp.extend(CString::new(format!(
        "{SUCCESSOR_ENV}={}",
        image().saturating_add(1)
    )));
    if let Some(fd) = exec_fd {
        new_envp.extend(CString::new(format!("{EXEC_FD_ENV}={fd}")));
    }
    *path = qemu.as_ptr();
    *argv = leak_argv(new_argv);
    *envp = leak_argv(new_envp);
    true
}
