//! Where QEMU's side makes the file descriptors it keeps (its control
//! sockets, its rings' and block table's memfds): out of the traced
//! guest's reach. QEMU keeps the guest's descriptors below a bound and its
//! own at the bound and above (docs/guest-view.md); only QEMU can make one
//! there (the kernel refuses numbers at or above the soft limit, which is
//! the guest's), so the jitter passes QEMU's way of doing it as
//! [`FdPlace::With`]. Tests and clients that need no such thing pass `0`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The function of [`FdPlace::With`]: makes a descriptor with `create`
/// (which makes it wherever the kernel puts it) and returns it at its
/// place.
pub type MakeFd = fn(create: &mut dyn FnMut() -> io::Result<OwnedFd>) -> io::Result<OwnedFd>;

/// How to make a descriptor that stays.
#[derive(Clone, Copy, Debug)]
pub enum FdPlace {
    /// Moved to the lowest free number at or above this one (close-on-exec);
    /// `0` or below: where the kernel put it. If none up there is free, it
    /// stays where it is.
    Floor(i32),
    /// Made and placed by this function, which may fail (then there is no
    /// descriptor).
    With(MakeFd),
}

impl From<i32> for FdPlace {
    fn from(floor: i32) -> FdPlace {
        FdPlace::Floor(floor)
    }
}

impl FdPlace {
    /// The descriptor `create` makes, at its place.
    pub fn make(self, create: &mut dyn FnMut() -> io::Result<OwnedFd>) -> io::Result<OwnedFd> {
        match self {
            FdPlace::Floor(floor) => {
                let fd = create()?;
                if floor <= 0 || fd.as_raw_fd() >= floor {
                    return Ok(fd);
                }
                // SAFETY: F_DUPFD_CLOEXEC on an fd we own only makes a new fd.
                let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, floor) };
                if moved < 0 {
                    return Ok(fd);
                }
                // SAFETY: fcntl returned a new fd that nothing else owns;
                // the old one closes when `fd` drops here.
                Ok(unsafe { OwnedFd::from_raw_fd(moved) })
            }
            FdPlace::With(make) => make(create),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn null() -> io::Result<OwnedFd> {
        Ok(OwnedFd::from(std::fs::File::open("/dev/null")?))
    }

    #[test]
    fn a_floor_moves_the_fd_up_and_zero_leaves_it() {
        let fd = FdPlace::from(0).make(&mut null).unwrap();
        let low = fd.as_raw_fd();
        drop(fd);
        assert_eq!(FdPlace::from(0).make(&mut null).unwrap().as_raw_fd(), low);
        let high = FdPlace::from(900).make(&mut null).unwrap();
        assert!(high.as_raw_fd() >= 900);
        // SAFETY: F_GETFD only reads the fd's flags.
        let flags = unsafe { libc::fcntl(high.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
    }

    #[test]
    fn a_function_makes_it_or_fails() {
        fn refuse(_: &mut dyn FnMut() -> io::Result<OwnedFd>) -> io::Result<OwnedFd> {
            Err(io::Error::from_raw_os_error(libc::EMFILE))
        }
        let e = FdPlace::With(refuse).make(&mut null).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EMFILE));
        fn plain(create: &mut dyn FnMut() -> io::Result<OwnedFd>) -> io::Result<OwnedFd> {
            create()
        }
        assert!(FdPlace::With(plain).make(&mut null).is_ok());
        let failing = &mut || -> io::Result<OwnedFd> { Err(io::Error::other("no")) };
        assert!(FdPlace::With(plain).make(failing).is_err());
    }
}
