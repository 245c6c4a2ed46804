// SPDX-License-Identifier: GPL-2.0-or-later
//! A launch's private directory, which holds its socket.

use std::io;
use std::path::PathBuf;

/// A run's private directory (for its socket), removed with the run.
pub(crate) struct RunDir {
    pub(crate) path: PathBuf,
}

impl RunDir {
    pub(crate) fn create() -> io::Result<RunDir> {
        let base = cannoli::wire::channel::runtime_dir();
        cannoli::wire::channel::private_dir(&base)?;
        sweep_dead_run_dirs(&base);
        let nonce = cannoli::wire::channel::nonce()?;
        let path = base.join(format!("run-{}-{}", std::process::id(), &nonce[..8]));
        cannoli::wire::channel::private_dir(&path)?;
        Ok(RunDir { path })
    }
}

/// Removes the run directories (`run-<pid>-<nonce>`, with at most their
/// socket) of launchers that were killed before they could clean up.
fn sweep_dead_run_dirs(base: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("run-"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks that the pid exists.
        let dead = pid > 0
            && unsafe { libc::kill(pid, 0) } != 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if dead {
            let _ = std::fs::remove_file(e.path().join("c.sock"));
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        // The server removed its socket; a socket of a crashed server goes
        // too.
        let _ = std::fs::remove_file(self.path.join("c.sock"));
        let _ = std::fs::remove_dir(&self.path);
    }
}
