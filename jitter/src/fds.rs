//! QEMU's file descriptors, out of the traced guest's reach
//! (docs/guest-view.md): the guest's are below a bound, QEMU's at it and
//! above. Every descriptor the jitter keeps (control sockets, rings' and
//! the block table's memfds, an exec's program) goes there through QEMU's
//! `place_fd`, which alone can put one there (it raises the soft limit for
//! the move, under the lock the guest's own limit calls take).

use std::ffi::{c_char, c_int, CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use wire::FdPlace;

/// QEMU's functions (`CannoliGuestInfo.place_fd` and `exec_env`).
pub struct Qemu {
    pub place_fd: Option<unsafe extern "C" fn(c_int, bool) -> c_int>,
    pub exec_env: Option<unsafe extern "C" fn() -> *const c_char>,
}

static QEMU: OnceLock<Qemu> = OnceLock::new();

/// At init: how QEMU places descriptors.
pub fn set(q: Qemu) {
    let _ = QEMU.set(q);
}

/// A new descriptor for the file `fd` refers to, at the bound or above
/// (close-on-exec if asked), or -1 with errno. Without QEMU (unit tests) a
/// plain duplicate.
pub fn place_raw(fd: RawFd, cloexec: bool) -> RawFd {
    match QEMU.get().and_then(|q| q.place_fd) {
        // SAFETY: QEMU's function takes any fd number and only makes a new
        // descriptor (or fails).
        Some(place) => unsafe { place(fd, cloexec) },
        None => {
            let cmd = if cloexec {
                libc::F_DUPFD_CLOEXEC
            } else {
                libc::F_DUPFD
            };
            // SAFETY: fcntl on an fd number only makes a new fd or fails.
            unsafe { libc::fcntl(fd, cmd, 0) }
        }
    }
}

/// `fd` moved to the bound or above, close-on-exec; the old number is
/// closed. Fails (EMFILE) when QEMU's room above the bound is full.
pub fn place(fd: OwnedFd) -> io::Result<OwnedFd> {
    if QEMU.get().and_then(|q| q.place_fd).is_none() {
        return Ok(fd);
    }
    let high = place_raw(fd.as_raw_fd(), true);
    if high < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that nothing else owns; the old one closes
    // as `fd` drops.
    Ok(unsafe { OwnedFd::from_raw_fd(high) })
}

/// [`place`], for the crates that make descriptors (mempipe, wire).
pub fn fd_place() -> FdPlace {
    FdPlace::With(place)
}

/// The environment entry the QEMU a traced exec starts needs (the bound and
/// the guest's hard limit of descriptors), if QEMU gives one.
pub fn exec_env() -> Option<CString> {
    let f = QEMU.get()?.exec_env?;
    // SAFETY: QEMU returns NULL or a C string valid until this thread calls
    // it again; it is copied at once.
    let p = unsafe { f() };
    // SAFETY: as above.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_qemu_a_descriptor_stays_where_it_is() {
        let f = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let n = f.as_raw_fd();
        assert_eq!(place(f).unwrap().as_raw_fd(), n);
        assert!(exec_env().is_none());
    }
}
