// SPDX-License-Identifier: GPL-2.0-or-later
//! Signals while the traced program runs, so that no QEMU is left behind.
//!
//! * SIGINT, SIGQUIT, SIGTERM and SIGHUP the launcher receives are handed
//!   to the run's guardian (`guard.rs`), which forwards them to every
//!   process of the traced tree: all of them when a process sent it (`kill`
//!   of the launcher, as of a shell's job), and when the terminal sent it
//!   (Ctrl-C to the foreground process group) those that left the
//!   launcher's process group (a guest that called `setsid` or `setpgid`),
//!   since the others have it already. The launcher itself keeps running,
//!   drains the trace and exits with QEMU's status.
//! * If the launcher dies anyway (SIGKILL, a panic in the tool), the
//!   guardian kills the whole tree (`guard.rs`).
//!
//! The dispositions are restored once the tree has exited, so Ctrl-C while
//! the rest of the trace is processed stops the launcher as usual.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::guard;

const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP];

extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // si_code <= 0: sent by a process (SI_USER, SI_QUEUE, SI_TKILL); > 0:
    // by the kernel, e.g. the terminal's Ctrl-C to the whole process group.
    // SAFETY: the kernel passes a valid siginfo_t with SA_SIGINFO.
    let from_tty = !info.is_null() && unsafe { (*info).si_code } > 0;
    // Async-signal-safe: one send on a socket.
    guard::forward(sig, from_tty);
}

/// Installed signal forwarding; dropping it restores the old dispositions.
pub struct Forwarding {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl Forwarding {
    /// Installs the handlers (signals ignored on entry stay ignored, as a
    /// shell's background job expects).
    pub fn install() -> Forwarding {
        let mut old = Vec::new();
        for sig in FORWARDED {
            // SAFETY: plain sigaction calls with valid, zero-initialised
            // structs; the handler only does async-signal-safe work.
            unsafe {
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut prev) != 0
                    || prev.sa_sigaction == libc::SIG_IGN
                {
                    continue;
                }
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = forward as *const () as usize;
                act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut act.sa_mask);
                if libc::sigaction(sig, &act, std::ptr::null_mut()) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        Forwarding { old }
    }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        for (sig, prev) in &self.old {
            // SAFETY: restores a disposition sigaction gave us.
            unsafe {
                libc::sigaction(*sig, prev, std::ptr::null_mut());
            }
        }
    }
}

/// Gives the child back the descriptor limit this process had before the
/// client raised its own ([`cannoli::raise_fd_limit`]): QEMU, and the
/// program it runs, start with the limit the user gave them.
pub fn restore_fd_limit(cmd: &mut Command) {
    let Some(soft) = cannoli::original_fd_limit() else {
        return;
    };
    // SAFETY: only async-signal-safe calls (getrlimit, setrlimit) between
    // fork and exec; a failure leaves the raised limit, which only gives
    // the program more room than it asked for.
    unsafe {
        cmd.pre_exec(move || {
            let mut lim: libc::rlimit = std::mem::zeroed();
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && soft < lim.rlim_cur {
                lim.rlim_cur = soft;
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
            Ok(())
        });
    }
}

/// Grows the child's file descriptor table to its whole `RLIMIT_NOFILE`
/// before it execs QEMU. QEMU keeps its own files (the jitter's sockets,
/// rings, block table) at the top of that range, out of the guest's reach;
/// growing a shared descriptor table there once QEMU has threads (its RCU
/// thread starts before `main`) waits for an RCU grace period, about 10 ms
/// of every traced run's start. Growing it here, while the child is one
/// thread, costs nothing, and exec keeps the table.
pub fn grow_fd_table(cmd: &mut Command) {
    // SAFETY: only async-signal-safe calls (getrlimit, dup2, close) between
    // fork and exec; a failure leaves the table as it was, which only
    // costs the time this saves.
    unsafe {
        cmd.pre_exec(|| {
            let mut lim: libc::rlimit = std::mem::zeroed();
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0
                && (1..=1 << 20).contains(&lim.rlim_cur)
            {
                let top = (lim.rlim_cur - 1) as libc::c_int;
                for src in 0..3 {
                    if libc::dup2(src, top) == top {
                        libc::close(top);
                        break;
                    }
                }
            }
            Ok(())
        });
    }
}

/// Waits until the child `pid` has exited without reaping it (its pid stays
/// valid until the caller's `wait`).
pub fn wait_exited_nowait(pid: u32) -> io::Result<()> {
    loop {
        // SAFETY: waitid with a valid out-pointer.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
