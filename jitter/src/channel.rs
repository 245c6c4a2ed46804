//! Connecting a guest thread's stream to the client: the hello that
//! announces it, the run's secret that proves it is this run's QEMU, and
//! the hand-over of its ring (see `wire::channel` for the protocol).

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::OnceLock;

use wire::channel::{dial, Addr, RingOffer, Sock, TokenError};
use wire::{Hello, RingRef, Token, MAGIC, WIRE_VERSION};

use crate::config::Guest;

/// The run's secret, read once (from `CANNOLI_TOKEN`, else the token file):
/// a forked child inherits it, and an exec'd QEMU reads the same
/// environment again.
fn token() -> Result<&'static Token, TokenError> {
    static TOKEN: OnceLock<Result<Token, TokenError>> = OnceLock::new();
    TOKEN
        .get_or_init(Token::from_env)
        .as_ref()
        .map_err(Clone::clone)
}

/// Connects to the client at `addr`, announces this thread's stream and
/// hands over `ring` and the process's block table `blocks` (the table's
/// memfd, if there is one): their fds over a Unix socket, over TCP their
/// numbers, for the client to open through /proc. Returns the control
/// socket, out of the guest's reach. An error is one line for stderr.
pub fn connect(
    addr: &Addr,
    guest: &Guest,
    ring: &mempipe::Producer,
    blocks: Option<BorrowedFd<'_>>,
) -> crate::error::Result<Sock> {
    let fd = ring.fd().ok_or(crate::error::Error::NoRingFd)?;
    fn offer<'a>(addr: &Addr, fd: BorrowedFd<'a>) -> RingOffer<'a> {
        match addr {
            Addr::Unix(_) => RingOffer::Fd(fd),
            Addr::Tcp(_) => RingOffer::ProcFd(fd.as_raw_fd()),
        }
    }
    // SAFETY: plain libc getters with no preconditions.
    let (pid, ppid, tid) = unsafe { (libc::getpid(), libc::getppid(), libc::gettid()) };
    let hello = Hello {
        magic: MAGIC.into(),
        wire_version: WIRE_VERSION,
        jitter_version: env!("CARGO_PKG_VERSION").into(),
        pid,
        ppid,
        tid,
        arch: guest.arch.clone(),
        big_endian: guest.big_endian,
        guest_bits: guest.guest_bits,
        // `dial` fills in these four.
        ring: RingRef::Attached,
        nonce: String::new(),
        proof: String::new(),
        comm: guest
            .exe
            .as_deref()
            .and_then(|e| e.rsplit('/').next())
            .map(Into::into),
        exe: guest.exe.clone(),
        regs: guest.regs.clone(),
        syscall_names: guest.syscall_names.clone(),
        blocks: None,
        image: crate::events::image(),
    };
    let blocks = blocks.map(|b| offer(addr, b));
    Ok(dial(
        addr,
        token(),
        crate::fds::fd_place(),
        hello,
        &offer(addr, fd),
        blocks.as_ref(),
    )?)
}
