//! Child processes with a deadline, an exact exit time and their rusage.
//!
//! Why not `std::process::Child::wait`: it neither reports the child's peak
//! RSS (`wait4`'s rusage) nor waits with a timeout, and a helper thread that
//! blocks in `wait4` would reap the child at an unknown moment, after which
//! killing it on a timeout could hit a recycled pid. A pidfd solves all
//! three: `poll` on it waits with a timeout and wakes the moment the child
//! exits (so the exit time is exact), the child stays a zombie until we reap
//! it with `wait4` (so `kill` never hits another process), and `wait4` then
//! hands over its rusage.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// How a process ended.
#[derive(Debug, Clone, Copy)]
pub struct Exit {
    /// Raw wait status.
    status: libc::c_int,
    /// Peak resident set size in KiB (`ru_maxrss`).
    pub maxrss_kb: u64,
    /// CPU seconds, user and system (`ru_utime` + `ru_stime`).
    pub cpu_s: f64,
    /// Context switches: voluntary (it blocked: a futex, a full ring) and
    /// involuntary (preempted: another thread took its CPU).
    pub switches: (u64, u64),
    /// When `poll` saw the process end.
    pub at: Instant,
}

impl Exit {
    pub fn success(&self) -> bool {
        libc::WIFEXITED(self.status) && libc::WEXITSTATUS(self.status) == 0
    }

    /// "exit status 3" or "killed by signal 9".
    pub fn describe(&self) -> String {
        if libc::WIFEXITED(self.status) {
            format!("exit status {}", libc::WEXITSTATUS(self.status))
        } else if libc::WIFSIGNALED(self.status) {
            format!("killed by signal {}", libc::WTERMSIG(self.status))
        } else {
            format!("wait status {:#x}", self.status)
        }
    }
}

/// A started child process. Dropping it kills and reaps the child if it is
/// still running, so an error anywhere in the harness leaves no stray QEMU or
/// client behind.
pub struct Proc {
    name: String,
    pid: libc::pid_t,
    pidfd: OwnedFd,
    /// Kept for its pipes; never waited on through std (we reap with wait4).
    pub child: Child,
    exit: Option<Exit>,
}

impl Proc {
    /// Starts `cmd`; `name` names the process in error messages.
    pub fn spawn(name: &str, cmd: &mut Command) -> Result<Proc, String> {
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {name} ({:?}): {e}", cmd.get_program()))?;
        let pid = child.id() as libc::pid_t;
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "pidfd_open for {name} failed: {e} (needs Linux 5.3 or newer)"
            ));
        }
        // SAFETY: the syscall returned a fresh fd that nothing else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
        Ok(Proc {
            name: name.to_string(),
            pid,
            pidfd,
            child,
            exit: None,
        })
    }

    /// How it ended, once [`wait_any`] has seen it end.
    pub fn exit(&self) -> Option<Exit> {
        self.exit
    }

    /// Sends SIGKILL if the process has not been reaped yet (then the pid is
    /// still ours, if only as a zombie).
    pub fn kill(&mut self) {
        if self.exit.is_none() {
            // SAFETY: plain syscall on a pid we have not reaped.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
    }

    /// Reaps the (already ended, or killed) process and records its exit.
    fn reap(&mut self, at: Instant) -> Result<(), String> {
        let mut status: libc::c_int = 0;
        // SAFETY: rusage is plain old data; wait4 fills it in.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: valid pointers to locals; pid is our unreaped child.
            let r = unsafe { libc::wait4(self.pid, &mut status, 0, &mut ru) };
            if r == self.pid {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(format!("wait4 on {} failed: {e}", self.name));
            }
        }
        self.exit = Some(Exit {
            status,
            maxrss_kb: ru.ru_maxrss.max(0) as u64,
            cpu_s: timeval_s(ru.ru_utime) + timeval_s(ru.ru_stime),
            switches: (ru.ru_nvcsw.max(0) as u64, ru.ru_nivcsw.max(0) as u64),
            at,
        });
        Ok(())
    }
}

fn timeval_s(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exit.is_none() {
            self.kill();
            let _ = self.reap(Instant::now());
        }
    }
}

/// Waits until at least one of the still-running `procs` has ended (and
/// reaps every one that has), or until `deadline`. Returns whether any ended.
pub fn wait_any(procs: &mut [&mut Proc], deadline: Instant) -> Result<bool, String> {
    loop {
        let running: Vec<usize> = (0..procs.len())
            .filter(|&i| procs[i].exit.is_none())
            .collect();
        if running.is_empty() {
            return Ok(false);
        }
        let mut fds: Vec<libc::pollfd> = running
            .iter()
            .map(|&i| libc::pollfd {
                fd: procs[i].pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let left = deadline.saturating_duration_since(Instant::now());
        // Round up so that we never spin on a sub-millisecond remainder.
        let ms = left.as_millis().min(i32::MAX as u128) as i32 + (left > Duration::ZERO) as i32;
        // SAFETY: fds is a live array of fds.len() pollfds.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        let at = Instant::now();
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("poll on child processes failed: {e}"));
        }
        if n == 0 {
            if Instant::now() >= deadline {
                return Ok(false);
            }
            continue;
        }
        for (k, &i) in running.iter().enumerate() {
            if fds[k].revents != 0 {
                procs[i].reap(at)?;
            }
        }
        return Ok(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_and_timeout() {
        let mut p = Proc::spawn("sh", Command::new("sh").args(["-c", "exit 3"])).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while p.exit().is_none() {
            wait_any(&mut [&mut p], deadline).unwrap();
        }
        let e = p.exit().unwrap();
        assert!(!e.success());
        assert_eq!(e.describe(), "exit status 3");
        assert!(e.maxrss_kb > 0);

        let mut s = Proc::spawn("sleep", Command::new("sleep").arg("30")).unwrap();
        let t = Instant::now();
        assert!(!wait_any(&mut [&mut s], t + Duration::from_millis(50)).unwrap());
        assert!(s.exit().is_none());
        s.kill();
        wait_any(&mut [&mut s], Instant::now() + Duration::from_secs(10)).unwrap();
        assert_eq!(s.exit().unwrap().describe(), "killed by signal 9");
    }
}
