//! Connections that were challenged and have not said their hello yet,
//! waited for in the accept loop's poll.

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use wire::channel::Sock;

use crate::handshake::Opened;

/// Connections accepted at most per wake-up of the accept loop.
pub(super) const ACCEPT_BURST: usize = 64;

/// Connections that were challenged and have said nothing yet: the accept
/// loop polls them (no thread each), and hands one to a thread of its own
/// as soon as it has something to say. QEMU answers the challenge at once,
/// so a connection that stays silent is a stranger: it is dropped at its
/// deadline, or, when [`Waiting::cap`] of them wait, the oldest is dropped
/// for a new one. A flood of silent connections (TCP: anyone on the
/// machine can connect) thus costs a descriptor each, at most `cap`, and
/// cannot keep QEMU out: QEMU's connection is handed on the moment its
/// hello arrives, and would only be dropped if `cap` others connected
/// before QEMU could answer.
pub(super) struct Waiting {
    /// Oldest first.
    pub(super) list: VecDeque<Waiting1>,
    pub(super) cap: usize,
    /// Dropped for newer ones.
    pub(super) dropped: u64,
    /// Which of `list` the last poll found readable.
    pub(super) ready: Vec<bool>,
}

/// One connection waiting for its hello.
pub(super) struct Waiting1 {
    pub(super) sock: Sock,
    pub(super) peer: String,
    pub(super) opened: Opened,
    pub(super) since: Instant,
}

impl Waiting {
    pub(super) fn new(cap: usize) -> Waiting {
        Waiting {
            list: VecDeque::new(),
            cap: cap.max(1),
            dropped: 0,
            ready: Vec::new(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Adds `w`; returns the oldest, dropped, if the cap was reached.
    pub(super) fn push(&mut self, w: Waiting1) -> Option<Waiting1> {
        let old = if self.list.len() >= self.cap {
            self.dropped += 1;
            self.ready.clear();
            self.list.pop_front()
        } else {
            None
        };
        self.list.push_back(w);
        old
    }

    /// How long until the oldest one's deadline.
    pub(super) fn next_deadline(&self, timeout: Duration) -> Option<Duration> {
        self.list
            .front()
            .map(|w| (w.since + timeout).saturating_duration_since(Instant::now()))
    }

    /// Those the last poll found readable (data, or their end).
    pub(super) fn take_ready(&mut self) -> Vec<Waiting1> {
        let ready = std::mem::take(&mut self.ready);
        if !ready.iter().any(|&r| r) {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut keep = VecDeque::with_capacity(self.list.len());
        for (i, w) in std::mem::take(&mut self.list).into_iter().enumerate() {
            if ready.get(i).copied().unwrap_or(false) {
                out.push(w);
            } else {
                keep.push_back(w);
            }
        }
        self.list = keep;
        out
    }

    /// Those whose deadline has passed.
    pub(super) fn take_expired(&mut self, timeout: Duration) -> Vec<Waiting1> {
        let now = Instant::now();
        let mut out = Vec::new();
        while self.list.front().is_some_and(|w| w.since + timeout <= now) {
            out.extend(self.list.pop_front());
            self.ready.clear();
        }
        out
    }
}

/// How many silent connections may wait at once: 1024, or a quarter of
/// this process's descriptor limit if that is less (at least 16).
pub(super) fn max_pending() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `lim`.
    let cur = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    };
    ((cur / 4).min(1024) as usize).max(16)
}

/// Waits until `a` or `b` is readable, or one of the waiting connections
/// is (or ends), or the timeout passes. Returns which of `a` and `b` are
/// readable; the waiting ones' are left in `w.ready`.
pub(super) fn poll_all(
    a: i32,
    b: i32,
    w: &mut Waiting,
    timeout: Option<Duration>,
) -> io::Result<[bool; 2]> {
    let ms: libc::c_int = match timeout {
        None => -1,
        // Rounded up: a deadline 0.3 ms away must not poll 0 ms in a loop.
        Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
    };
    let mut fds: Vec<libc::pollfd> = [a, b]
        .into_iter()
        .chain(w.list.iter().map(|x| x.sock.as_raw_fd()))
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        // SAFETY: `fds` is a valid array of fds.len() pollfd for the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if rc >= 0 {
            let r = |p: &libc::pollfd| {
                p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP | libc::POLLRDHUP) != 0
            };
            w.ready = fds[2..].iter().map(r).collect();
            return Ok([r(&fds[0]), r(&fds[1])]);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
