//! System helpers both ends share: futex waits and wake-ups, spinning,
//! process liveness, memfds (made, placed and sealed), and the checks a
//! shared file passes before it is mapped or opened through `/proc`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::ptr;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use wire::FdPlace;

use crate::error::{io_error, Error, OwnerError};

/// Longest single futex sleep; liveness and flags are re-checked between slices.
/// Unit tests use a long slice so that a lost wake-up shows as a timing failure.
pub(crate) const MAX_SLICE: Duration = if cfg!(test) {
    Duration::from_secs(2)
} else {
    Duration::from_millis(100)
};
/// Spin rounds before sleeping; round `r` spins `2^min(r, 6)` times (~190 hints in all).
pub(crate) const SPIN_ROUNDS: u32 = 8;

/// `FUTEX_WAIT` (shared) on `word` while it equals `expected`, for at most `timeout`.
/// Spurious returns (EINTR, EAGAIN, ETIMEDOUT) are fine: callers re-check.
/// Returns true if the sleep ran out its time instead of being woken
/// (ETIMEDOUT): counted, so that tests see a lost wake-up by count.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, 4-byte aligned u32 (in the shared mapping),
    // which the kernel only reads; `ts` outlives the call; the remaining
    // arguments are unused by FUTEX_WAIT.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            ptr::null::<u32>(),
            0u32,
        )
    };
    r == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT)
}

/// `FUTEX_WAKE` (shared) of up to `n` waiters on `word`.
pub(crate) fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE does not access it
    // beyond using its address as the key; other arguments are unused.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            ptr::null::<libc::timespec>(),
            ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Whether process `pid` exists (EPERM means it exists but is not ours).
pub(crate) fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    if pid <= 0 {
        return true;
    }
    // SAFETY: kill with signal 0 sends nothing; it only checks for existence.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Spins `2^min(round, 6)` times with spin-loop hints.
#[inline]
pub(crate) fn spin(round: u32) {
    for _ in 0..(1u32 << round.min(6)) {
        std::hint::spin_loop();
    }
}

/// A fresh memfd named `name` (for `what`, in messages), close-on-exec and
/// sealable.
pub(crate) fn memfd_create_named(name: &str, what: &str) -> Result<OwnedFd, Error> {
    let name = std::ffi::CString::new(name).expect("no NUL in the name");
    // SAFETY: `name` is a valid NUL-terminated string for the duration of
    // the call; the flags are valid for memfd_create.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io_error(
            format_args!("creating {what} (memfd_create, Linux 3.17 or later)"),
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: memfd_create returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The descriptor (of `what`) that `create` makes, made where `place`
/// says. An error of `create` comes back as it is.
pub(crate) fn make_fd(
    place: impl Into<FdPlace>,
    what: &str,
    create: impl FnOnce() -> Result<OwnedFd, Error>,
) -> Result<OwnedFd, Error> {
    let mut create = Some(create);
    let mut failed = None;
    let made = place.into().make(&mut || match create.take().map(|c| c()) {
        Some(Ok(fd)) => Ok(fd),
        Some(Err(e)) => {
            failed = Some(e);
            Err(io::Error::other("not made"))
        }
        None => Err(io::Error::other("made twice")),
    });
    match (made, failed) {
        (Ok(fd), _) => Ok(fd),
        (Err(_), Some(e)) => Err(e),
        (Err(e), None) => Err(io_error(format_args!("making {what}"), e)),
    }
}

/// The seals every memfd ring carries: no one can change its size.
pub(crate) const RING_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;

/// Seals a sized memfd ring (or block table: `what`, in messages): no
/// shrinking (which would SIGBUS the consumer), no growing, and no further
/// seals (so nobody can add a write seal later).
pub(crate) fn seal(file: &File, what: &str) -> Result<(), Error> {
    // SAFETY: F_ADD_SEALS on an fd we own, with valid seal bits.
    let rc = unsafe {
        libc::fcntl(
            file.as_raw_fd(),
            libc::F_ADD_SEALS,
            RING_SEALS | libc::F_SEAL_SEAL,
        )
    };
    if rc != 0 {
        return Err(io_error(
            format_args!("sealing {what} (F_ADD_SEALS)"),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// What [`check_sealed_file`] says of a shared file that fails it.
pub(crate) struct Sealed<'a> {
    /// Where such a file comes from (the fix for a wrong owner or kind).
    pub origin: &'a str,
    /// Who writes it ("producer", "writer").
    pub writer: &'a str,
    /// How to make one right (the fix for missing seals).
    pub how: &'a str,
}

/// The checks every shared file passes before it is mapped: a regular file
/// of this user, sealed against shrinking and growing (else its writer
/// could truncate it under this process, which would die of SIGBUS).
/// Returns its metadata for the caller's own checks; a failed check is
/// `refuse`d with one line.
pub(crate) fn check_sealed_file(
    file: &File,
    what: &str,
    say: Sealed<'_>,
    refuse: fn(String) -> Error,
) -> Result<std::fs::Metadata, Error> {
    let meta = file
        .metadata()
        .map_err(|e| io_error(format_args!("fstat of {what}"), e))?;
    check_owner(&meta, what, say.origin).map_err(|e| refuse(e.to_string()))?;
    // SAFETY: F_GET_SEALS on an fd the caller owns; it takes no argument.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & RING_SEALS != RING_SEALS {
        return Err(refuse(format!(
            "{what} is not sealed against shrinking and growing{}; its {} could truncate it \
             under this process (which would die of SIGBUS); {}",
            if seals < 0 { " (not a memfd)" } else { "" },
            say.writer,
            say.how
        )));
    }
    Ok(meta)
}

/// Refuses a file that is not a regular file of this user.
fn check_owner(meta: &std::fs::Metadata, what: &str, fix: &str) -> Result<(), OwnerError> {
    use std::os::unix::fs::MetadataExt;
    if !meta.is_file() {
        return Err(OwnerError::NotFile {
            what: what.into(),
            fix: fix.into(),
        });
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(OwnerError::NotMine {
            what: what.into(),
            uid: meta.uid(),
            me,
        });
    }
    Ok(())
}

/// Opens the file process `pid` has open as fd `fd`, by opening
/// `/proc/<pid>/fd/<fd>` (a link to the file itself, which only a process
/// of the same user may follow; never a path in a directory anyone can
/// write): `what` names it in messages, `write` opens it read-write (else
/// read-only), `refused` makes the error for a file that is not a regular
/// file of this user (`fix` says what it should be). Whatever else that fd
/// may be, it is only looked at (`O_PATH`) until it is known to be a
/// regular file of this user: no device is opened, no FIFO waited for.
pub(crate) fn open_proc_fd(
    pid: i32,
    fd: i32,
    what: &str,
    write: bool,
    refused: fn(String) -> Error,
    fix: &str,
) -> Result<File, Error> {
    if pid <= 0 || fd < 0 {
        return Err(refused(format!(
            "pid {pid} fd {fd} cannot name a {what} (the pid must be positive and the fd \
             not negative); pass the pid and fd of the producer's memfd"
        )));
    }
    let path = format!("/proc/{pid}/fd/{fd}");
    let hint = |e: &io::Error| match e.kind() {
        io::ErrorKind::NotFound => {
            "; the producer exited or closed the fd before the consumer opened it"
        }
        io::ErrorKind::PermissionDenied => "; the producer runs as another user or is not dumpable",
        _ => "",
    };
    // First without opening anything for reading or writing (O_PATH
    // has no side effects: a device or FIFO behind the fd is neither
    // opened nor waited for); only a regular file is then reopened for
    // real. Not O_NOFOLLOW: the entry is a magic link, which is the
    // point.
    let probe = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| io_error(format_args!("opening {what} {path}{}", hint(&e)), e))?;
    let meta = probe
        .metadata()
        .map_err(|e| io_error(format_args!("fstat of {what} {path}"), e))?;
    check_owner(&meta, &format!("{what} {path}"), fix).map_err(|e| refused(e.to_string()))?;
    let again = format!("/proc/self/fd/{}", probe.as_raw_fd());
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&again)
        .map_err(|e| io_error(format_args!("opening {what} {path}{}", hint(&e)), e))?;
    drop(probe);
    Ok(file)
}
