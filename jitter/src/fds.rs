//! QEMU's file descriptors, out of the traced guest's reach
//! (docs/guest-view.md): the guest's are below a bound, QEMU's at it and
//! above. Every descriptor the jitter keeps (control sockets, rings' and
//! the block table's memfds, an exec's program) is made in QEMU's room:
//! between `fd_room(true)` and `fd_room(false)` the soft limit is the real
//! hard one (under the lock the guest's own limit calls take), so it can be
//! made whatever the guest holds and moved to the bound or above.

use std::ffi::{c_char, CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use wire::FdPlace;

/// What QEMU told us (`CannoliGuestInfo.fd_bound`, `fd_room`, `exec_env`).
pub struct Qemu {
    pub bound: i32,
    pub room: Option<unsafe extern "C" fn(bool)>,
    pub exec_env: Option<unsafe extern "C" fn() -> *const c_char>,
}

static QEMU: OnceLock<Qemu> = OnceLock::new();

/// At init: how QEMU keeps its descriptors.
pub fn set(q: Qemu) {
    let _ = QEMU.set(q);
}

/// `f` in QEMU's room (only system calls in it); without QEMU (unit tests)
/// just `f`, with bound 0.
fn in_room<R>(f: impl FnOnce(i32) -> R) -> R {
    match QEMU.get() {
        Some(Qemu {
            bound,
            room: Some(room),
            ..
        }) => {
            // SAFETY: QEMU's function; entered and left once each, around
            // system calls only.
            unsafe { room(true) };
            let r = f(*bound);
            // SAFETY: as above.
            unsafe { room(false) };
            r
        }
        _ => f(0),
    }
}

/// A new descriptor of `fd`'s file at the bound or above (close-on-exec if
/// asked), or -1 with errno (EMFILE: QEMU's room is full).
pub fn dup_up(fd: RawFd, cloexec: bool) -> RawFd {
    let cmd = if cloexec {
        libc::F_DUPFD_CLOEXEC
    } else {
        libc::F_DUPFD
    };
    // SAFETY: fcntl on an fd number only makes a new fd or fails.
    in_room(|bound| unsafe { libc::fcntl(fd, cmd, bound) })
}

/// The descriptor `create` makes, at the bound or above (close-on-exec).
pub fn make(create: &mut dyn FnMut() -> io::Result<OwnedFd>) -> io::Result<OwnedFd> {
    in_room(|bound| {
        let low = create()?;
        if low.as_raw_fd() >= bound {
            return Ok(low);
        }
        // SAFETY: F_DUPFD_CLOEXEC on an fd we own only makes a new fd.
        let high = unsafe { libc::fcntl(low.as_raw_fd(), libc::F_DUPFD_CLOEXEC, bound) };
        if high < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "no descriptor free from {bound} up, where QEMU keeps its own ({e}): raise \
                     the hard limit of open files (ulimit -Hn)"
                ),
            ));
        }
        // SAFETY: a fresh descriptor that nothing else owns; the low one
        // closes as `low` drops, still in the room.
        Ok(unsafe { OwnedFd::from_raw_fd(high) })
    })
}

/// [`make`], for the crates that make descriptors (mempipe, wire).
pub fn fd_place() -> FdPlace {
    FdPlace::With(make)
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
    fn without_qemu_a_descriptor_is_made_where_the_kernel_puts_it() {
        let f = make(&mut || Ok(OwnedFd::from(std::fs::File::open("/dev/null")?))).unwrap();
        let n = f.as_raw_fd();
        drop(f);
        let g = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        assert_eq!(g.as_raw_fd(), n);
        assert!(exec_env().is_none());
    }
}
