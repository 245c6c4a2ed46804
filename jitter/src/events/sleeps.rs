// SPDX-License-Identifier: GPL-2.0-or-later
//! Which syscalls may put their thread to sleep: before one, the thread
//! hands over the events it has written so far, however few, so that the
//! client sees them while it sleeps (see [`hand_over_before`]).
//!
//! A hand-over costs the client a chunk (a worker's wake-up and a chunk's
//! bookkeeping, some microseconds), so a syscall that will not sleep is
//! told apart where that is cheap: a read of a file or of a pipe that
//! holds data, a poll of a descriptor that is ready, a wait with a zero
//! timeout or `WNOHANG`. Asking the host never touches the guest's
//! descriptors beyond `fstat`, `fcntl(F_GETFL)` and, on pipes, sockets
//! and terminals, `FIONREAD`.

use super::guest::{env, read_guest};
use std::collections::HashMap;
use std::sync::OnceLock;

/// How a syscall may put its thread to sleep for as long as the world
/// outside decides (see [`hand_over_before`]), and what tells, before it
/// starts, that it will not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sleeps {
    /// Nothing cheap tells: a timer, a signal, a lock held elsewhere.
    Yes,
    /// `futex`: only its waiting operations (the second argument, without
    /// the private and clock flags).
    FutexWait,
    /// A read of the descriptor in the first argument: not of a file or a
    /// block device, nor of a non-blocking descriptor, nor of a pipe,
    /// socket or terminal that holds data already.
    Read,
    /// `poll` (with its timeout in milliseconds, the third argument) or
    /// `ppoll` (`false`: a pointer there): not with a timeout of 0, nor
    /// when one of the descriptors is ready already.
    Poll { millis: bool },
    /// A wait for descriptors whose argument `n` is the timeout in
    /// milliseconds: not with 0.
    Timeout(usize),
    /// A wait for a child whose argument `n` holds the options: not with
    /// `WNOHANG`.
    Child(usize),
}

fn sleeps_for(name: &str) -> Option<Sleeps> {
    Some(match name {
        "futex" | "futex_time64" => Sleeps::FutexWait,
        "read" | "readv" | "recv" | "recvfrom" | "recvmsg" | "recvmmsg" | "recvmmsg_time64"
        | "accept" | "accept4" => Sleeps::Read,
        "poll" => Sleeps::Poll { millis: true },
        "ppoll" | "ppoll_time64" => Sleeps::Poll { millis: false },
        "epoll_wait" | "epoll_pwait" => Sleeps::Timeout(3),
        "wait4" | "waitpid" => Sleeps::Child(2),
        "waitid" => Sleeps::Child(3),
        "futex_waitv"
        | "nanosleep"
        | "clock_nanosleep"
        | "clock_nanosleep_time64"
        | "connect"
        | "select"
        | "_newselect"
        | "pselect6"
        | "pselect6_time64"
        | "epoll_pwait2"
        | "pause"
        | "sigsuspend"
        | "rt_sigsuspend"
        | "rt_sigtimedwait"
        | "rt_sigtimedwait_time64"
        | "msgrcv"
        | "semop"
        | "semtimedop"
        | "semtimedop_time64"
        | "mq_timedreceive"
        | "mq_timedreceive_time64"
        | "flock" => Sleeps::Yes,
        _ => return None,
    })
}

/// Whether a `poll` of the `n` guest `pollfd`s at `fds` may sleep: none
/// of them is ready now (a poll of a copy, with a timeout of 0, tells).
/// Many at once are not copied: they may sleep.
fn poll_may_sleep(fds: u64, n: u64) -> bool {
    const MOST: u64 = 64;
    if n == 0 || n > MOST {
        return n != 0;
    }
    let Some(e) = env() else {
        return true;
    };
    let Some(raw) = read_guest(fds, 8 * n as usize) else {
        return false; // EFAULT at once
    };
    let mut host: Vec<libc::pollfd> = raw
        .chunks_exact(8)
        .map(|p| {
            let (fd, events) = ([p[0], p[1], p[2], p[3]], [p[4], p[5]]);
            if e.big_endian {
                libc::pollfd {
                    fd: i32::from_be_bytes(fd),
                    events: i16::from_be_bytes(events),
                    revents: 0,
                }
            } else {
                libc::pollfd {
                    fd: i32::from_le_bytes(fd),
                    events: i16::from_le_bytes(events),
                    revents: 0,
                }
            }
        })
        .collect();
    // SAFETY: `host` holds `n` initialized pollfds, which poll may write
    // (their `revents`) and nothing past.
    unsafe { libc::poll(host.as_mut_ptr(), n as libc::nfds_t, 0) == 0 }
}

/// Whether a read of descriptor `fd` may sleep (see [`Sleeps::Read`]).
/// The guest's descriptors are the host's (QEMU passes them through), so
/// the host is asked what the descriptor is (one `fstat`, the whole
/// answer for a file), then, for a pipe, a socket or a terminal, whether
/// bytes wait to be read (`FIONREAD`, which only those define: no other
/// device is sent an ioctl the guest did not make), then whether it is
/// non-blocking. Three cheap syscalls at most, against a hand-over that
/// costs the client a chunk.
fn read_may_sleep(fd: i64) -> bool {
    /// Memory devices (`/dev/null`, `zero`, `random`, `urandom`, ...):
    /// a read never waits.
    const MEM_MAJOR: u32 = 1;
    /// Terminals: virtual consoles and serial lines, `/dev/tty` and
    /// `/dev/console`, pseudo-terminals' secondaries.
    fn is_terminal(major: u32) -> bool {
        matches!(major, 4 | 5 | 136..=143)
    }
    let Ok(fd) = i32::try_from(fd) else {
        return false; // EBADF at once
    };
    // SAFETY: a zeroed `stat` is a valid value of the plain C struct, and
    // fstat writes no more than it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return false;
    }
    let asks = match st.st_mode & libc::S_IFMT {
        libc::S_IFIFO | libc::S_IFSOCK => true,
        libc::S_IFCHR => match libc::major(st.st_rdev) {
            MEM_MAJOR => return false,
            m => is_terminal(m),
        },
        // A file, a block device, a directory (EISDIR).
        _ => return false,
    };
    let mut ready: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int, to `ready`; `asks` limits it to the
    // descriptors that define it.
    if asks && unsafe { libc::ioctl(fd, libc::FIONREAD, &mut ready) } == 0 && ready > 0 {
        return false;
    }
    // SAFETY: F_GETFL reads the descriptor's flags and takes no pointer.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    !(flags >= 0 && flags & libc::O_NONBLOCK != 0)
}

/// The syscalls that may sleep, by number, from QEMU's names.
static SLEEPERS: OnceLock<HashMap<u64, Sleeps>> = OnceLock::new();

/// Learns the numbers of the syscalls that may sleep from QEMU's names.
pub(super) fn set_syscall_names(names: &std::collections::BTreeMap<u64, String>) {
    let _ = SLEEPERS.set(
        names
            .iter()
            .filter_map(|(&n, name)| Some((n, sleeps_for(name)?)))
            .collect(),
    );
}

/// Whether syscall `num` with these arguments may sleep until something
/// outside the process happens. Before such a syscall the thread hands
/// over the events it has written so far, however few: otherwise they
/// would wait in its chunk for as long as it sleeps (a probe's hit before
/// a server's `epoll_wait`, shown only at the next request; an allocation
/// before a `futex` wait, which `cannoli heap`'s other threads wait for).
pub(super) fn hand_over_before(num: u64, args: &[i64; 6]) -> bool {
    SLEEPERS
        .get()
        .and_then(|s| s.get(&num))
        .is_some_and(|k| k.may_sleep(args))
}

impl Sleeps {
    /// Whether a syscall of this kind, with these arguments, may sleep.
    fn may_sleep(self, args: &[i64; 6]) -> bool {
        /// FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET,
        /// FUTEX_WAIT_REQUEUE_PI, FUTEX_LOCK_PI2.
        const FUTEX_WAITS: [i64; 5] = [0, 6, 9, 11, 13];
        /// FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME.
        const FUTEX_FLAGS: i64 = 128 | 256;
        const WNOHANG: i64 = 1;
        match self {
            Sleeps::Yes => true,
            Sleeps::FutexWait => FUTEX_WAITS.contains(&(args[1] & !FUTEX_FLAGS)),
            Sleeps::Read => read_may_sleep(args[0]),
            Sleeps::Poll { millis } => {
                !(millis && args[2] == 0) && poll_may_sleep(args[0] as u64, args[1] as u64)
            }
            Sleeps::Timeout(n) => args[n] != 0,
            Sleeps::Child(n) => args[n] & WNOHANG == 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{read_may_sleep, sleeps_for, Sleeps};
    use std::io::Seek;
    use std::os::fd::AsRawFd;

    fn args(a: &[i64]) -> [i64; 6] {
        let mut v = [0; 6];
        v[..a.len()].copy_from_slice(a);
        v
    }

    #[test]
    fn the_names_that_may_sleep() {
        for n in [
            "nanosleep",
            "clock_nanosleep",
            "rt_sigsuspend",
            "pselect6",
            "connect",
        ] {
            assert_eq!(sleeps_for(n), Some(Sleeps::Yes), "{n}");
        }
        assert_eq!(sleeps_for("futex_time64"), Some(Sleeps::FutexWait));
        assert_eq!(sleeps_for("recvfrom"), Some(Sleeps::Read));
        assert_eq!(sleeps_for("ppoll"), Some(Sleeps::Poll { millis: false }));
        assert_eq!(sleeps_for("epoll_pwait"), Some(Sleeps::Timeout(3)));
        assert_eq!(sleeps_for("waitid"), Some(Sleeps::Child(3)));
        for n in ["write", "getpid", "mmap", "pread64", "clone", "exit_group"] {
            assert_eq!(sleeps_for(n), None, "{n}");
        }
    }

    #[test]
    fn futex_waits_sleep_and_wakes_do_not() {
        let f = Sleeps::FutexWait;
        // FUTEX_WAIT | FUTEX_PRIVATE_FLAG, FUTEX_WAIT_BITSET with both
        // flags, FUTEX_LOCK_PI.
        for op in [0, 128, 9 | 128 | 256, 6] {
            assert!(f.may_sleep(&args(&[0x1000, op, 1])), "{op}");
        }
        // FUTEX_WAKE, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, FUTEX_REQUEUE,
        // FUTEX_WAKE_OP, FUTEX_UNLOCK_PI.
        for op in [1, 129, 3, 5, 7] {
            assert!(!f.may_sleep(&args(&[0x1000, op, 1])), "{op}");
        }
    }

    #[test]
    fn waits_without_a_wait_do_not_sleep() {
        assert!(!Sleeps::Timeout(3).may_sleep(&args(&[5, 0x1000, 8, 0])));
        assert!(Sleeps::Timeout(3).may_sleep(&args(&[5, 0x1000, 8, -1])));
        assert!(!Sleeps::Child(2).may_sleep(&args(&[-1, 0, 1])));
        assert!(Sleeps::Child(2).may_sleep(&args(&[-1, 0, 0])));
        assert!(!Sleeps::Poll { millis: true }.may_sleep(&args(&[0x1000, 1, 0])));
    }

    #[test]
    fn reads_that_would_sleep_are_told_from_reads_that_would_not() {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (r, w) = (i64::from(fds[0]), fds[1]);
        assert!(read_may_sleep(r), "an empty pipe");
        // SAFETY: `w` is the pipe's open write end; one byte from a static.
        assert_eq!(unsafe { libc::write(w, b"x".as_ptr().cast(), 1) }, 1);
        assert!(!read_may_sleep(r), "a pipe with a byte in it");
        // SAFETY: both descriptors are ours, closed once.
        unsafe {
            libc::close(fds[0]);
            libc::close(w);
        }
        assert!(!read_may_sleep(-1));
        assert!(!read_may_sleep(1 << 40));

        let mut file = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
        assert!(!read_may_sleep(i64::from(file.as_raw_fd())), "a file");
        file.seek(std::io::SeekFrom::End(0)).unwrap();
        assert!(
            !read_may_sleep(i64::from(file.as_raw_fd())),
            "a file at its end"
        );
        let null = std::fs::File::open("/dev/null").unwrap();
        assert!(!read_may_sleep(i64::from(null.as_raw_fd())), "/dev/null");

        // SAFETY: `fds` has room for two descriptors; both closed below.
        assert_eq!(
            unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) },
            0
        );
        assert!(!read_may_sleep(i64::from(fds[0])), "a non-blocking pipe");
        // SAFETY: ours, closed once.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}
