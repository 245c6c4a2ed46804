// SPDX-License-Identifier: GPL-2.0-or-later
//! The run's guardian: the whole traced process tree dies with the
//! launcher, however the launcher dies.
//!
//! QEMU's first process is not the launcher's child. The launcher's child
//! is a small *guardian* process (a fork of the launcher that never
//! execs), which is a child subreaper and the parent of QEMU's first
//! process:
//!
//! ```text
//! launcher ──socket──> guardian (subreaper) ──> QEMU ──> forked QEMUs ...
//! ```
//!
//! Every process of the run is a descendant of the guardian for as long as
//! the guardian lives: a forked guest is QEMU's child, and one whose
//! parent exits is reparented to the nearest subreaper, the guardian. A
//! guest that calls `setsid` or `setpgid` leaves the terminal's process
//! group, not the tree, so the guardian still finds it (it reads every
//! process's parent from `/proc/<pid>/stat`). The guardian
//!
//! * waits for QEMU's first process and then for every other process of
//!   the tree, and exits with QEMU's status (the same exit code, or the
//!   same signal), so the launcher's `wait` sees what it saw before;
//! * reads its end of a socket pair with the launcher: two bytes per
//!   request. When the
//!   launcher is gone (its end closes, even after `SIGKILL`) or asks for
//!   it (the server failed), the guardian `SIGKILL`s every process of the
//!   tree, round after round until none is alive, reaps them and exits;
//! * forwards the signals the launcher receives (SIGINT, SIGQUIT, SIGTERM,
//!   SIGHUP) to every process of the tree: all of them for a signal sent
//!   by a process (`kill` of the launcher, as of a shell job), and for one
//!   the terminal sent (Ctrl-C) those that left the launcher's process
//!   group (`setsid`, `setpgid`), since the terminal reached the others.
//!
//! QEMU's first process also gets `PR_SET_PDEATHSIG` = SIGKILL, so that it
//! dies if the guardian itself is killed; its forked guests then become the
//! launcher's (also a subreaper), which waits for them as before.
//!
//! The guardian runs between `fork` and where `exec` would be, in a copy of
//! a process that may have had other threads: it only makes system calls
//! (no allocation, no lock), into memory it maps for itself.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

/// The request that kills the tree (no signal has number 0xff).
const KILL_TREE: u8 = 0xff;
/// Flag of a forwarded signal: the terminal sent it (to the launcher's
/// process group, which already has it).
const FROM_TTY: u8 = 1;

/// The launcher's end of the socket pair while a run's guardian listens, for the
/// signal handlers; -1 otherwise.
static CTL: AtomicI32 = AtomicI32::new(-1);

/// The launcher's side of a run's guardian: dropping it (the launcher's end
/// of the socket pair closing) makes the guardian kill the tree, as the
/// launcher's death does.
pub struct Guard {
    ctl: OwnedFd,
}

impl Guard {
    /// Makes `cmd` (QEMU's command) start a guardian first, which then
    /// starts QEMU as its child (see the module doc). Call it before any
    /// other `pre_exec` of `cmd`: the ones after it run in QEMU's process.
    /// `cmd`'s child is then the guardian.
    pub fn install(cmd: &mut Command) -> io::Result<Guard> {
        let mut fds = [-1; 2];
        // A socket pair rather than a pipe: its end of file is the same
        // (the launcher's end closes when the launcher dies, however), and
        // a send to a guardian that is gone is an error, never a SIGPIPE.
        // SAFETY: socketpair writes two fds into `fds`.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both fds are fresh and ours alone.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: getpgrp has no preconditions.
        let pgid = unsafe { libc::getpgrp() };
        let (r_fd, w_fd) = (r.as_raw_fd(), w.as_raw_fd());
        // SAFETY: the closure makes only async-signal-safe calls (see
        // `split`); the fds it names stay open until the spawn returns
        // (`r` is moved into the closure, `w` into the Guard, which the
        // caller keeps until the run is over).
        unsafe {
            cmd.pre_exec(move || {
                let _keep = &r;
                split(r_fd, pgid)
            });
        }
        CTL.store(w_fd, Ordering::SeqCst);
        Ok(Guard { ctl: w })
    }

    /// Asks the guardian to kill the whole tree now (the server failed:
    /// QEMU would wait forever for a client that is gone).
    pub fn kill_tree(&self) {
        send(self.ctl.as_raw_fd(), KILL_TREE, 0);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = CTL.compare_exchange(self.ctl.as_raw_fd(), -1, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// Forwards `sig` to the tree of the run, from a signal handler: `tty`
/// when the terminal sent it.
pub fn forward(sig: libc::c_int, tty: bool) {
    let fd = CTL.load(Ordering::SeqCst);
    if fd >= 0 {
        send(fd, sig as u8, if tty { FROM_TTY } else { 0 });
    }
}

/// Sends one request (async-signal-safe; never blocks: a full socket
/// only drops a forwarded signal).
fn send(fd: RawFd, what: u8, flags: u8) {
    let b = [what, flags];
    // SAFETY: send of 2 bytes from a live buffer on a socket we own.
    unsafe {
        libc::send(
            fd,
            b.as_ptr().cast(),
            2,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
}

/// In the child of the spawn: becomes the guardian, whose child goes on to
/// exec QEMU. Only async-signal-safe calls.
fn split(ctl: RawFd, pgid: libc::pid_t) -> io::Result<()> {
    // SAFETY: plain system calls of this (single-threaded) child.
    unsafe {
        // Before the fork: an orphan of the tree must never find us not
        // yet a subreaper.
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        let me = libc::getpid();
        match libc::fork() {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                // QEMU's first process: dies with the guardian.
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                if libc::getppid() != me {
                    libc::_exit(137);
                }
                Ok(())
            }
            // The launcher's end (`w`) is closed with every other fd.
            qemu => guardian(qemu, ctl, pgid),
        }
    }
}

/// Most processes a scan of `/proc` looks at; the rest wait for the next
/// round (a kill round repeats until a scan finds nobody alive).
const MAX_PROCS: usize = 1 << 20;

/// The guardian's scratch memory: one scan of `/proc`.
struct Scan {
    /// pid, parent pid, process group, and whether it is alive (not a
    /// zombie), per process seen.
    procs: *mut [libc::pid_t; 4],
    n: usize,
    /// Descendants of the guardian, by pid (a bitmap over pid_max).
    mark: *mut u64,
    mark_words: usize,
}

/// The guardian's loop (see the module doc); never returns.
fn guardian(qemu: libc::pid_t, ctl: RawFd, pgid: libc::pid_t) -> ! {
    // SAFETY: system calls on fds and memory of this process only; the
    // scratch mappings are ours alone (this process has one thread).
    unsafe {
        close_others(ctl);
        for sig in [
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGPIPE,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        // Children's ends come through a signalfd, so that one poll waits
        // for them and for the launcher.
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let sfd = libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
        let mut scan = Scan::new();
        let mut status: Option<libc::c_int> = None;
        let mut doomed = false;
        loop {
            if !reap(qemu, &mut status) {
                break; // no child left: the tree is done
            }
            let mut fds = [
                libc::pollfd {
                    fd: if doomed { -1 } else { ctl },
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: sfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // Without a signalfd, look again now and then.
            let timeout = if sfd < 0 { 50 } else { -1 };
            if libc::poll(fds.as_mut_ptr(), 2, timeout) < 0 {
                continue; // EINTR
            }
            if fds[1].revents != 0 {
                let mut info = [0u8; 128 * 8];
                while libc::read(sfd, info.as_mut_ptr().cast(), info.len()) > 0 {}
            }
            if fds[0].revents == 0 {
                continue;
            }
            let mut req = [0u8; 256];
            let n = libc::read(ctl, req.as_mut_ptr().cast(), req.len());
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                // The launcher is gone: so is its run.
                doomed = true;
                kill_tree(&mut scan, qemu, &mut status);
                continue;
            }
            for pair in req[..n as usize & !1].chunks_exact(2) {
                match pair[0] {
                    KILL_TREE => {
                        doomed = true;
                        kill_tree(&mut scan, qemu, &mut status);
                    }
                    sig => {
                        let skip = (pair[1] & FROM_TTY != 0).then_some(pgid);
                        scan.signal(sig as libc::c_int, skip, qemu);
                    }
                }
            }
        }
        exit_as(status)
    }
}

/// Reaps every child that has ended (QEMU's status is kept). False when
/// this process has no child left.
///
/// # Safety
/// Plain system calls.
unsafe fn reap(qemu: libc::pid_t, status: &mut Option<libc::c_int>) -> bool {
    loop {
        let mut st = 0;
        // SAFETY: waitpid with a valid out-pointer.
        let r = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if r > 0 {
            if r == qemu {
                *status = Some(st);
            }
            continue;
        }
        if r == 0 {
            return true;
        }
        // SAFETY: errno of this thread.
        match unsafe { *libc::__errno_location() } {
            libc::EINTR => continue,
            _ => return false, // ECHILD
        }
    }
}

/// Kills every process of the tree, round after round until a scan finds
/// none alive (a process forking meanwhile is killed in the next round;
/// SIGKILL also ends a fork in progress), then reaps them all.
///
/// # Safety
/// Plain system calls; `scan` is this process's.
unsafe fn kill_tree(scan: &mut Scan, qemu: libc::pid_t, status: &mut Option<libc::c_int>) {
    loop {
        // SAFETY: see the function's contract.
        unsafe {
            let alive = scan.signal(libc::SIGKILL, None, qemu);
            reap(qemu, status);
            if alive == 0 {
                break;
            }
            let nap = libc::timespec {
                tv_sec: 0,
                tv_nsec: 1_000_000,
            };
            libc::nanosleep(&nap, std::ptr::null_mut());
        }
    }
}

/// Exits as QEMU did: its exit code, or death by its signal (without a
/// core file of this process).
///
/// # Safety
/// Plain system calls.
unsafe fn exit_as(status: Option<libc::c_int>) -> ! {
    // SAFETY: plain system calls; this process ends here.
    unsafe {
        let Some(st) = status else {
            libc::_exit(1);
        };
        if libc::WIFEXITED(st) {
            libc::_exit(libc::WEXITSTATUS(st));
        }
        let sig = if libc::WIFSIGNALED(st) {
            libc::WTERMSIG(st)
        } else {
            libc::SIGKILL
        };
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig)
    }
}

/// Closes every fd but 0, 1, 2 and `keep` (among them the spawn's own
/// error pipe, which must see its end at QEMU's exec).
///
/// # Safety
/// Closes fds this process does not otherwise use.
unsafe fn close_others(keep: RawFd) {
    // SAFETY: close_range/close of fds; see the contract.
    unsafe {
        let ranged = keep > 3
            && libc::syscall(libc::SYS_close_range, 3u32, (keep - 1) as u32, 0u32) == 0
            && libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32) == 0
            || keep == 3 && libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) == 0;
        if ranged {
            return;
        }
        let mut lim: libc::rlimit = std::mem::zeroed();
        let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur.min(1 << 20) as RawFd
        } else {
            1024
        };
        for fd in 3..top {
            if fd != keep {
                libc::close(fd);
            }
        }
    }
}

/// Bits of [`Scan::mark`]: Linux's largest pid (`PID_MAX_LIMIT`) + 1.
const PID_LIMIT: usize = 1 << 22;

impl Scan {
    /// Maps the scratch memory (untouched pages cost nothing).
    ///
    /// # Safety
    /// Plain system calls.
    unsafe fn new() -> Scan {
        let map = |bytes: usize| {
            // SAFETY: a fresh private anonymous mapping.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                std::ptr::null_mut()
            } else {
                p
            }
        };
        let procs = map(MAX_PROCS * std::mem::size_of::<[libc::pid_t; 4]>());
        let mark = map(PID_LIMIT / 8);
        Scan {
            procs: procs.cast(),
            n: 0,
            mark: mark.cast(),
            mark_words: if mark.is_null() { 0 } else { PID_LIMIT / 64 },
        }
    }

    /// Sends `sig` to every live process of the tree (in `skip_pgid`'s
    /// process group excepted); returns how many it sent it to. Without
    /// scratch memory, to QEMU's first process only.
    ///
    /// # Safety
    /// Plain system calls; `self` is this process's.
    unsafe fn signal(
        &mut self,
        sig: libc::c_int,
        skip_pgid: Option<libc::pid_t>,
        qemu: libc::pid_t,
    ) -> usize {
        // SAFETY: see the contract; indexes stay inside the mappings.
        unsafe {
            if self.procs.is_null() || self.mark.is_null() {
                return usize::from(libc::kill(qemu, sig) == 0);
            }
            self.load();
            std::ptr::write_bytes(self.mark, 0, self.mark_words);
            let set = |m: *mut u64, pid: libc::pid_t| {
                let p = pid as usize;
                *m.add(p / 64) |= 1 << (p % 64);
            };
            let get = |m: *mut u64, pid: libc::pid_t| {
                let p = pid as usize;
                p < PID_LIMIT && *m.add(p / 64) >> (p % 64) & 1 != 0
            };
            set(self.mark, libc::getpid());
            // Descendants: a process whose parent is marked, until no more
            // (a pass per generation at most).
            loop {
                let mut changed = false;
                for i in 0..self.n {
                    let [pid, ppid, _, _] = *self.procs.add(i);
                    if !get(self.mark, pid) && get(self.mark, ppid) {
                        set(self.mark, pid);
                        changed = true;
                    }
                }
                if !changed {
                    break;
                }
            }
            let me = libc::getpid();
            let mut sent = 0;
            for i in 0..self.n {
                let [pid, _, pgrp, alive] = *self.procs.add(i);
                if pid == me || alive == 0 || !get(self.mark, pid) {
                    continue;
                }
                if skip_pgid == Some(pgrp) {
                    continue;
                }
                if libc::kill(pid, sig) == 0 {
                    sent += 1;
                }
            }
            sent
        }
    }

    /// Reads every process's parent, group and state from `/proc`.
    ///
    /// # Safety
    /// Plain system calls; `self.procs` is mapped.
    unsafe fn load(&mut self) {
        self.n = 0;
        // SAFETY: see the contract; buffers are this frame's.
        unsafe {
            let dir = libc::open(
                c"/proc".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            );
            if dir < 0 {
                return;
            }
            let mut buf = [0u8; 16 * 1024];
            loop {
                let got = libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len());
                if got <= 0 {
                    break;
                }
                let mut at = 0usize;
                while at + 19 < got as usize {
                    let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
                    if reclen == 0 {
                        break;
                    }
                    let name = &buf[at + 19..(at + reclen).min(got as usize)];
                    at += reclen;
                    let Some(pid) = parse_pid(name) else { continue };
                    if self.n == MAX_PROCS {
                        break;
                    }
                    if let Some((ppid, pgrp, alive)) = stat_of(pid) {
                        *self.procs.add(self.n) = [pid, ppid, pgrp, alive as libc::pid_t];
                        self.n += 1;
                    }
                }
            }
            libc::close(dir);
        }
    }
}

/// The pid a `/proc` entry's NUL-terminated name is, if it is one.
fn parse_pid(name: &[u8]) -> Option<libc::pid_t> {
    let mut pid: i64 = 0;
    let mut digits = 0;
    for &b in name {
        if b == 0 {
            break;
        }
        if !b.is_ascii_digit() || digits == 9 {
            return None;
        }
        pid = pid * 10 + (b - b'0') as i64;
        digits += 1;
    }
    (digits > 0 && pid > 0 && (pid as usize) < PID_LIMIT).then_some(pid as libc::pid_t)
}

/// Process `pid`'s parent, process group, and whether it is alive (not a
/// zombie), from `/proc/<pid>/stat`: `pid (comm) S ppid pgrp ...`.
///
/// # Safety
/// Plain system calls.
unsafe fn stat_of(pid: libc::pid_t) -> Option<(libc::pid_t, libc::pid_t, bool)> {
    let mut path = [0u8; 32];
    let mut n = 0;
    for &b in b"/proc/" {
        path[n] = b;
        n += 1;
    }
    let mut digits = [0u8; 10];
    let mut k = 0;
    let mut v = pid as u32;
    loop {
        digits[k] = b'0' + (v % 10) as u8;
        k += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    while k > 0 {
        k -= 1;
        path[n] = digits[k];
        n += 1;
    }
    for &b in b"/stat\0" {
        path[n] = b;
        n += 1;
    }
    let mut buf = [0u8; 1024];
    // SAFETY: `path` is NUL-terminated; read into a live buffer.
    let len = unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let len = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        len
    };
    if len <= 0 {
        return None;
    }
    let s = &buf[..len as usize];
    let close = s.iter().rposition(|&b| b == b')')?;
    let mut fields = s[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?;
    let num = |f: &[u8]| -> Option<libc::pid_t> {
        let mut v: i64 = 0;
        for &b in f {
            if !b.is_ascii_digit() {
                return None;
            }
            v = v * 10 + (b - b'0') as i64;
        }
        i32::try_from(v).ok()
    };
    let ppid = num(fields.next()?)?;
    let pgrp = num(fields.next()?)?;
    Some((ppid, pgrp, state != b'Z' && state != b'X'))
}
