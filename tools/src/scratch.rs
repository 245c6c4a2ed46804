// SPDX-License-Identifier: GPL-2.0-or-later
//! Files a run writes for the QEMU it starts: a hook library's plan, too
//! big for an environment variable (a glob can hook thousands of pcs).
//!
//! Each file is new (`O_CREAT | O_EXCL`, so never another user's file or
//! link in a shared temporary directory) and has a name of its own, so that
//! two runs in one process, or two processes, never share one; it is
//! removed when the [`Scratch`] is dropped.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A file of this run, removed on drop.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// Writes `contents` to a new file `<tmp>/cannoli-<what>-<pid>-<n>.plan`
    /// with the first `n` whose name is free.
    pub fn create(what: &str, contents: &[u8]) -> io::Result<Scratch> {
        let dir = std::env::temp_dir();
        let pid = std::process::id();
        for n in 0u32.. {
            let path = dir.join(format!("cannoli-{what}-{pid}-{n}.plan"));
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut f) => {
                    let scratch = Scratch { path };
                    f.write_all(contents)?;
                    return Ok(scratch);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("no free scratch file name"))
    }

    /// The hook library's plan of a live run of `tool` (`probe`, `heap`,
    /// `regtrace`) in a new file, or the one line that says why not.
    pub fn plan(tool: &str, text: &str) -> Result<Scratch, String> {
        Scratch::create(tool, text.as_bytes())
            .map_err(|e| format!("{tool}: cannot write the hook library's plan: {e}"))
    }

    /// [`Scratch::plan`] of `text()` for a live run; `None` for a replay,
    /// which starts no QEMU (and does not build the text).
    pub fn plan_unless_replay(
        tool: &str,
        replay: bool,
        text: impl FnOnce() -> String,
    ) -> Result<Option<Scratch>, String> {
        (!replay).then(|| Scratch::plan(tool, &text())).transpose()
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_file_is_new_and_goes_with_its_value() {
        let a = Scratch::create("test", b"a").unwrap();
        let b = Scratch::create("test", b"b").unwrap();
        assert_ne!(a.path(), b.path());
        assert_eq!(std::fs::read(a.path()).unwrap(), b"a");
        assert_eq!(std::fs::read(b.path()).unwrap(), b"b");
        let p = a.path().to_path_buf();
        drop(a);
        assert!(!p.exists());
    }
}
