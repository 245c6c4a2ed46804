// SPDX-License-Identifier: GPL-2.0-or-later
//! The traced process tree outlives QEMU's first process when the guest
//! forks and the parent exits first: the child is another QEMU process that
//! connects to the client on its own, maybe after its parent is gone. The
//! launcher makes itself a child subreaper while the program runs, so such
//! orphans become its children, and waits for them too before it lets the
//! server finish.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The subreaper attribute, restored on drop.
pub struct Subreaper {
    was: bool,
}

impl Subreaper {
    pub fn become_one() -> Subreaper {
        let mut was: libc::c_int = 0;
        // SAFETY: prctl with a valid out-pointer / plain flags.
        unsafe {
            libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut was as *mut libc::c_int);
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
        }
        Subreaper { was: was != 0 }
    }
}

impl Drop for Subreaper {
    fn drop(&mut self) {
        if !self.was {
            // SAFETY: plain prctl.
            unsafe {
                libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0 as libc::c_ulong, 0, 0, 0);
            }
        }
    }
}

/// This process's children (of all its threads).
fn children() -> Vec<i32> {
    let mut v = Vec::new();
    if let Ok(tasks) = fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            if let Ok(c) = fs::read_to_string(t.path().join("children")) {
                v.extend(c.split_whitespace().filter_map(|x| x.parse::<i32>().ok()));
            }
        }
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// `comm` of a process, zombies included.
fn comm(pid: i32) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    Some(stat[open + 1..close].to_string())
}

/// QEMU processes of the traced tree that were reparented to us.
pub struct Orphans {
    exe: Option<PathBuf>,
    /// The kernel's `comm` of QEMU: its file name, cut to 15 bytes.
    comm: String,
}

impl Orphans {
    pub fn new(qemu: &Path) -> Orphans {
        let name = qemu
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let comm: String = name.chars().take(15).collect();
        Orphans {
            exe: fs::canonicalize(qemu).ok(),
            comm,
        }
    }

    fn is_ours(&self, pid: i32) -> bool {
        let exe = fs::read_link(format!("/proc/{pid}/exe")).ok();
        match (&self.exe, exe) {
            (Some(q), Some(e)) => *q == e,
            // A zombie has no exe link any more.
            _ => comm(pid).is_some_and(|c| c == self.comm),
        }
    }

    /// Waits until no orphaned QEMU process is left, reaping each.
    pub fn wait_all(&self) -> io::Result<()> {
        loop {
            let Some(pid) = children().into_iter().find(|&p| self.is_ours(p)) else {
                return Ok(());
            };
            loop {
                let mut status = 0;
                // SAFETY: waitpid with a valid out-pointer.
                let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
                if rc >= 0 {
                    break;
                }
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::ECHILD) => break, // reaped by someone else
                    _ => return Err(e),
                }
            }
        }
    }
}
