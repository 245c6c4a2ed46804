//! The client's side of the handshake (protocol: `wire::channel`): check
//! who connected, challenge it, take its hello and ring, and welcome it.
//!
//! Who may stream to us: a peer of our own uid (Unix sockets, checked with
//! `SO_PEERCRED`, and its pid must be the one its hello names), holding the
//! run's secret (its hello's proof), offering a ring that is a sealed memfd
//! of our uid (`mempipe::Consumer::from_fd`). Every read has a deadline.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use mempipe::Consumer;
use wire::channel::{cmsg_space_for_one_fd, nonce, Challenge, Role, Sock, MAX_LINE};
use wire::{parse_hello, Hello, HelloError, RingRef, Token, Welcome, MAGIC, WIRE_VERSION};

/// Why a connection did not become a stream.
pub(crate) enum Refusal {
    /// Not this run's QEMU at all (another user, not a cannoli hello, gone
    /// before saying anything): said on stderr, not counted as loss.
    Stranger(String),
    /// A cannoli hello we could not take (wrong version, wrong secret, bad
    /// ring): if it was one of our guest threads, its events are lost.
    Refused(String),
}

/// Runs the handshake on a fresh connection; `peer` names it in messages.
/// `timeout` bounds each read and write; `trust_pid`: take the hello's pid
/// without checking it against the connecting process.
pub(crate) fn handshake(
    sock: &mut Sock,
    peer: &str,
    token: &Token,
    timeout: Duration,
    trust_pid: bool,
) -> Result<(Hello, Consumer), Refusal> {
    let _ = sock.set_read_timeout(Some(timeout));
    let _ = sock.set_write_timeout(Some(timeout));
    let cred =
        match sock {
            Sock::Unix(_) => Some(peer_cred(sock).map_err(|e| {
                Refusal::Stranger(format!("{peer}: cannot tell who connected ({e})"))
            })?),
            Sock::Tcp(_) => None,
        };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if let Some(c) = cred {
        if c.uid != me {
            return Err(Refusal::Stranger(format!(
                "{peer}: a process of uid {} connected; only this user's QEMU may stream here",
                c.uid
            )));
        }
    }

    let ours = nonce().map_err(|e| Refusal::Stranger(format!("{peer}: no random nonce: {e}")))?;
    let challenge = Challenge {
        magic: MAGIC.into(),
        wire_version: WIRE_VERSION,
        nonce: ours.clone(),
    };
    let line = serde_json::to_string(&challenge).expect("a Challenge serializes") + "\n";
    sock.write_all(line.as_bytes())
        .map_err(|e| Refusal::Stranger(format!("{peer}: closed before the handshake ({e})")))?;

    let (line, fds) = recv_line(sock).map_err(|e| {
        Refusal::Stranger(match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => format!(
                "{peer}: sent no hello within {:.1} s",
                timeout.as_secs_f64()
            ),
            _ => format!("{peer}: reading its hello failed: {e}"),
        })
    })?;
    let hello = match parse_hello(&line) {
        Ok(h) => h,
        Err(HelloError::NotCannoli) => {
            return Err(Refusal::Stranger(format!(
                "{peer}: did not send a cannoli hello"
            )))
        }
        Err(e) => return Err(refuse(sock, format!("{peer}: {e}"))),
    };
    let who = format!("pid {} tid {}", hello.pid, hello.tid);
    if !token.check(Role::Hello, &ours, &hello.nonce, &hello.proof) {
        return Err(refuse(
            sock,
            format!(
                "{who} ({peer}): its hello does not prove it holds this run's secret; a QEMU started \
                 by hand needs this client's token (the client's token file, or {})",
                wire::TOKEN_ENV
            ),
        ));
    }
    if let Some(c) = cred.filter(|_| !trust_pid) {
        if c.pid != hello.pid {
            return Err(refuse(
                sock,
                format!(
                    "{who}: the hello names pid {} but process {} sent it",
                    hello.pid, c.pid
                ),
            ));
        }
    }
    let consumer = match hello.ring {
        RingRef::Attached => match <[OwnedFd; 1]>::try_from(fds) {
            Ok([fd]) => Consumer::from_fd(fd),
            Err(v) => {
                return Err(refuse(
                    sock,
                    format!(
                        "{who}: its hello came with {} file descriptors, not its ring alone",
                        v.len()
                    ),
                ))
            }
        },
        RingRef::ProcFd(n) => Consumer::open_proc(hello.pid, n),
    };
    let consumer =
        consumer.map_err(|e| refuse(sock, format!("{who}: cannot open its event ring: {e}")))?;
    let welcome = Welcome {
        error: None,
        proof: Some(token.prove(Role::Welcome, &ours, &hello.nonce)),
    };
    let line = serde_json::to_string(&welcome).expect("a Welcome serializes") + "\n";
    sock.write_all(line.as_bytes())
        .map_err(|e| Refusal::Refused(format!("{who}: sending the welcome failed: {e}")))?;
    let _ = sock.set_read_timeout(None);
    let _ = sock.set_write_timeout(None);
    Ok((hello, consumer))
}

/// Tells QEMU why its stream is refused (QEMU prints it) and returns the
/// refusal.
fn refuse(sock: &mut Sock, msg: String) -> Refusal {
    let w = Welcome {
        error: Some(msg.clone()),
        proof: None,
    };
    let line = serde_json::to_string(&w).expect("a Welcome serializes") + "\n";
    let _ = sock.write_all(line.as_bytes());
    Refusal::Refused(msg)
}

fn peer_cred(sock: &Sock) -> io::Result<libc::ucred> {
    // SAFETY: ucred is plain data.
    let mut c: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes into `c`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(c)
}

/// Most descriptors a hello may bring; any beyond are closed unread.
const MAX_FDS: usize = 4;

/// Reads the hello line and the descriptors that came with it. QEMU sends
/// nothing after its hello until our welcome, so the line is all there is;
/// anything after its newline is a protocol violation.
fn recv_line(sock: &Sock) -> io::Result<(String, Vec<OwnedFd>)> {
    let mut line = Vec::new();
    let mut fds = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let space = cmsg_space_for_one_fd() * MAX_FDS;
    let mut cbuf = vec![0u8; space];
    loop {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: msghdr is plain data; its pointers refer to `iov`, `buf`
        // and `cbuf`, which outlive the recvmsg call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: see above; MSG_CMSG_CLOEXEC makes received fds close-on-exec.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: the kernel filled `msg`'s control buffer; CMSG_FIRSTHDR /
        // CMSG_NXTHDR walk only inside msg_controllen, and each SCM_RIGHTS
        // payload holds (cmsg_len - CMSG_LEN(0)) / 4 descriptors now ours.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    let data = libc::CMSG_DATA(c) as *const i32;
                    for i in 0..bytes / 4 {
                        fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "more file descriptors than a hello brings",
            ));
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before the end of the hello",
            ));
        }
        let got = &buf[..n as usize];
        if let Some(end) = got.iter().position(|&b| b == b'\n') {
            if end + 1 != got.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "data after the hello before the welcome",
                ));
            }
            line.extend_from_slice(got);
            break;
        }
        line.extend_from_slice(got);
        if line.len() > MAX_LINE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "hello longer than 64 KiB",
            ));
        }
    }
    let line = String::from_utf8(line)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "hello is not UTF-8"))?;
    Ok((line, fds))
}
