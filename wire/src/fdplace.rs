//! Where QEMU's side puts the file descriptors it makes (its control
//! sockets, its rings' and block table's memfds): out of the traced
//! guest's reach. QEMU keeps the guest's descriptors below a bound and its
//! own at the bound and above (docs/guest-view.md); only QEMU can put one
//! there, so the jitter passes QEMU's way of doing it as
//! [`FdPlace::With`]. Tests and clients that need no such thing pass `0`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// How to place a new file descriptor.
#[derive(Clone, Copy, Debug)]
pub enum FdPlace {
    /// The lowest free number at or above this one (close-on-exec); `0` or
    /// below: where the kernel put it. If none up there is free, it stays
    /// where it is.
    Floor(i32),
    /// Moved by this function, which returns the descriptor's new place
    /// (the old one is closed), or fails: then the descriptor is not made.
    With(fn(OwnedFd) -> io::Result<OwnedFd>),
}

impl From<i32> for FdPlace {
    fn from(floor: i32) -> FdPlace {
        FdPlace::Floor(floor)
    }
}

impl FdPlace {
    /// `fd` at its place.
    pub fn apply(self, fd: OwnedFd) -> io::Result<OwnedFd> {
        match self {
            FdPlace::Floor(floor) if floor > 0 && fd.as_raw_fd() < floor => {
                // SAFETY: F_DUPFD_CLOEXEC on an fd we own only makes a new fd.
                let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, floor) };
                if moved < 0 {
                    return Ok(fd);
                }
                // SAFETY: fcntl returned a new fd that nothing else owns;
                // the old one closes when `fd` drops here.
                Ok(unsafe { OwnedFd::from_raw_fd(moved) })
            }
            FdPlace::Floor(_) => Ok(fd),
            FdPlace::With(f) => f(fd),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn null() -> OwnedFd {
        OwnedFd::from(std::fs::File::open("/dev/null").unwrap())
    }

    #[test]
    fn a_floor_moves_the_fd_up_and_zero_leaves_it() {
        let fd = null();
        let low = fd.as_raw_fd();
        assert_eq!(FdPlace::from(0).apply(fd).unwrap().as_raw_fd(), low);
        let high = FdPlace::from(900).apply(null()).unwrap();
        assert!(high.as_raw_fd() >= 900);
        // SAFETY: F_GETFD only reads the fd's flags.
        let flags = unsafe { libc::fcntl(high.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
    }

    #[test]
    fn a_function_places_it_or_fails() {
        fn refuse(_: OwnedFd) -> io::Result<OwnedFd> {
            Err(io::Error::from_raw_os_error(libc::EMFILE))
        }
        let e = FdPlace::With(refuse).apply(null()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EMFILE));
        fn keep(fd: OwnedFd) -> io::Result<OwnedFd> {
            Ok(fd)
        }
        assert!(FdPlace::With(keep).apply(null()).is_ok());
    }
}
