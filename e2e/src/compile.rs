// SPDX-License-Identifier: GPL-2.0-or-later
//! Test programs built inside a test, by Debian's compilers: the cross
//! `gcc` of a guest, or the host's `g++` (Debian 12's only C++ compiler).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::locate::guest_info;

/// The C compiler of guest `arch`: Debian's cross `gcc`, the host's for
/// x86_64.
pub fn gcc(arch: &str) -> String {
    match guest_info(arch).triple {
        Some(t) => format!("{t}-gcc"),
        None => "gcc".into(),
    }
}

/// `tests/programs/NAME.cpp` built by the host's `g++ -O2` as `dir/NAME`
/// (x86_64, dynamically linked), for the tests of C++ programs.
pub fn gxx(dir: &Path, name: &str) -> PathBuf {
    let prog = dir.join(name);
    let src = crate::workspace_root().join(format!("tests/programs/{name}.cpp"));
    compile(
        "g++",
        [
            "-O2".as_ref(),
            "-o".as_ref(),
            prog.as_os_str(),
            src.as_os_str(),
        ],
    );
    prog
}

/// Runs `compiler args`; a compiler that cannot run or fails panics with
/// its error output and where it comes from.
pub fn compile<I, S>(compiler: &str, args: I)
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let o = Command::new(compiler)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{compiler}: {e}; install it with scripts/deps.sh"));
    assert!(
        o.status.success(),
        "{compiler}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}
