// SPDX-License-Identifier: GPL-2.0-or-later
//! The connection to the client ([`Sock`]): a Unix socket or TCP, and the
//! system calls behind it (a ring's fd passed with `SCM_RIGHTS`).

use super::Addr;
use crate::FdPlace;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The connection to the client, either kind.
#[derive(Debug)]
pub enum Sock {
    /// A Unix-domain socket: the default, and the only kind that can pass
    /// a ring's fd ([`RingRef::Attached`](super::RingRef::Attached)).
    Unix(UnixStream),
    /// A TCP connection (`HOST:PORT`).
    Tcp(TcpStream),
}

impl Sock {
    /// Connects to `addr`.
    pub fn connect(addr: &Addr) -> io::Result<Sock> {
        Self::connect_placed(addr, FdPlace::Floor(0))
    }

    /// Connects to `addr` from a socket that `place` made where it belongs,
    /// before the connect (which may wait a while for the client).
    pub fn connect_placed(addr: &Addr, place: FdPlace) -> io::Result<Sock> {
        Self::connect_made(addr, place).map_err(|e| match e {
            Unconnected::NotMade(e) | Unconnected::Refused(e) => e,
        })
    }

    pub(super) fn connect_made(addr: &Addr, place: FdPlace) -> Result<Sock, Unconnected> {
        let make = |family| {
            place
                .make(&mut || new_socket(family))
                .map_err(Unconnected::NotMade)
        };
        match addr {
            Addr::Unix(p) => {
                // SAFETY: sockaddr_un is plain data; all zeroes is valid.
                let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
                sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
                let path = p.as_os_str().as_encoded_bytes();
                if path.is_empty() || path.len() >= sa.sun_path.len() || path.contains(&0) {
                    return Err(Unconnected::Refused(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "a Unix socket path has 1 to {} bytes and no NUL",
                            sa.sun_path.len() - 1
                        ),
                    )));
                }
                for (d, b) in sa.sun_path.iter_mut().zip(path) {
                    *d = *b as libc::c_char;
                }
                let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + path.len() + 1;
                let fd = make(libc::AF_UNIX)?;
                connect_fd(&fd, &sa as *const _ as *const libc::sockaddr, len, true)
                    .map_err(Unconnected::Refused)?;
                Ok(Sock::Unix(UnixStream::from(fd)))
            }
            Addr::Tcp(a) => {
                let mut last = io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{a} resolves to no address"),
                );
                for sa in a.as_str().to_socket_addrs().map_err(Unconnected::Refused)? {
                    let family = if sa.is_ipv4() {
                        libc::AF_INET
                    } else {
                        libc::AF_INET6
                    };
                    let fd = make(family)?;
                    let (raw, len) = inet_sockaddr(&sa);
                    match connect_fd(&fd, &raw as *const _ as *const libc::sockaddr, len, false) {
                        Ok(()) => {
                            let s = TcpStream::from(fd);
                            let _ = s.set_nodelay(true);
                            return Ok(Sock::Tcp(s));
                        }
                        Err(e) => last = e,
                    }
                }
                Err(Unconnected::Refused(last))
            }
        }
    }

    /// Sets the socket's read timeout (`None`: block forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Sock::Unix(s) => s.set_read_timeout(t),
            Sock::Tcp(s) => s.set_read_timeout(t),
        }
    }

    /// Sets the socket's write timeout (`None`: block forever).
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Sock::Unix(s) => s.set_write_timeout(t),
            Sock::Tcp(s) => s.set_write_timeout(t),
        }
    }

    /// Shuts both directions of the connection down; errors are ignored
    /// (the peer may be gone already).
    pub fn shutdown(&self) {
        let _ = match self {
            Sock::Unix(s) => s.shutdown(Shutdown::Both),
            Sock::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }

    /// A second handle on the same connection (a dup of its fd).
    pub fn try_clone(&self) -> io::Result<Sock> {
        Ok(match self {
            Sock::Unix(s) => Sock::Unix(s.try_clone()?),
            Sock::Tcp(s) => Sock::Tcp(s.try_clone()?),
        })
    }

    /// Gives up the socket without closing it (a forked child closes its
    /// copy of the parent's connection this way: see
    /// jitter's `Stream::abandon_inherited`).
    pub fn into_raw_fd(self) -> RawFd {
        match self {
            Sock::Unix(s) => s.into_raw_fd(),
            Sock::Tcp(s) => s.into_raw_fd(),
        }
    }

    /// Writes all of `line`, passing `fd` along with its first byte
    /// (`SCM_RIGHTS`; Unix sockets only).
    pub fn send_with_fd(&mut self, line: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
        self.send_with_fds(line, &[fd])
    }

    /// Writes all of `line`, passing `fds` (1 to [`MAX_PASSED_FDS`] of
    /// them, in this order) along with its first byte, in one
    /// `SCM_RIGHTS` message (Unix sockets only).
    pub fn send_with_fds(&mut self, line: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        self.send_fds(line, fds)
    }

    /// [`Sock::send_with_fds`] on a shared socket (the handshake reads from
    /// it meanwhile).
    pub(super) fn send_fds(&self, line: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let Sock::Unix(s) = self else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "file descriptors only travel over Unix sockets",
            ));
        };
        if fds.is_empty() || fds.len() > MAX_PASSED_FDS || line.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a line passes 1 to {MAX_PASSED_FDS} file descriptors, and has bytes to \
                     carry them"
                ),
            ));
        }
        let payload = 4 * fds.len() as u32;
        // SAFETY: CMSG_SPACE is arithmetic on its argument.
        let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
        let mut cbuf = vec![0u8; space];
        let iov = [IoSlice::new(line)];
        // SAFETY: msghdr is plain data; every pointer set below refers to a
        // buffer that outlives the sendmsg call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` bytes, room for one
        // SCM_RIGHTS header and `fds.len()` ints (CMSG_SPACE(payload));
        // CMSG_FIRSTHDR and the ints written from CMSG_DATA stay inside it.
        let sent = unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(payload) as _;
            let data = libc::CMSG_DATA(c) as *mut i32;
            for (i, fd) in fds.iter().enumerate() {
                std::ptr::write_unaligned(data.add(i), fd.as_raw_fd());
            }
            libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        // The rest of the line, if the kernel took only part of it.
        (&*s).write_all(&line[sent as usize..])
    }
}

/// Why [`Sock::connect_made`] has no connection.
pub(super) enum Unconnected {
    /// No socket: its [`FdPlace`] failed.
    NotMade(io::Error),
    /// The connect failed.
    Refused(io::Error),
}

/// A new stream socket of `family`, close-on-exec.
pub(super) fn new_socket(family: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) makes a new fd or fails.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `sa` as a sockaddr_in or sockaddr_in6, and its length.
pub(super) fn inet_sockaddr(sa: &SocketAddr) -> (libc::sockaddr_storage, usize) {
    // SAFETY: sockaddr_storage is plain data; all zeroes is valid.
    let mut raw: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match sa {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for any
            // sockaddr.
            unsafe { std::ptr::write(&mut raw as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { std::ptr::write(&mut raw as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (raw, len)
}

/// connect(2) on a blocking socket, through signals: a Unix socket simply
/// tries again; a TCP connect goes on in the background after EINTR, so
/// wait until it is done and take its result.
pub(super) fn connect_fd(
    fd: &OwnedFd,
    sa: *const libc::sockaddr,
    len: usize,
    unix: bool,
) -> io::Result<()> {
    loop {
        // SAFETY: `sa` points to `len` bytes of a sockaddr of the socket's
        // family (the callers build it just before).
        if unsafe { libc::connect(fd.as_raw_fd(), sa, len as libc::socklen_t) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
        if unix {
            continue;
        }
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        while unsafe { libc::poll(&mut p, 1, -1) } < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        let mut err: libc::c_int = 0;
        let mut n = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: SO_ERROR writes one int into `err`, `n` says its size.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                &mut err as *mut _ as *mut libc::c_void,
                &mut n,
            )
        };
        return match (rc, err) {
            (0, 0) => Ok(()),
            (0, e) => Err(io::Error::from_raw_os_error(e)),
            _ => Err(io::Error::last_os_error()),
        };
    }
}

/// Most file descriptors [`Sock::send_with_fds`] passes with one line (a
/// hello passes its ring and its block table).
pub const MAX_PASSED_FDS: usize = 2;

/// Bytes of control buffer for one passed fd.
pub fn cmsg_space_for_one_fd() -> usize {
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    unsafe { libc::CMSG_SPACE(4) as usize }
}

impl Read for Sock {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => s.read(b),
            Sock::Tcp(s) => s.read(b),
        }
    }
}

impl Read for &Sock {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => (&*s).read(b),
            Sock::Tcp(s) => (&*s).read(b),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => s.write(b),
            Sock::Tcp(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &Sock {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => (&*s).write(b),
            Sock::Tcp(s) => (&*s).write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for Sock {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Sock::Unix(s) => s.as_raw_fd(),
            Sock::Tcp(s) => s.as_raw_fd(),
        }
    }
}
