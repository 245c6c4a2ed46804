// SPDX-License-Identifier: GPL-2.0-or-later
//! Guests doing ordinary things that used to cut their own trace short
//! (tests/programs/hostile.c): closing every fd from 3 up, `dup2` onto low
//! fds, F_DUPFD and closes near the top of the fd table, and SIGTERM set back
//! to `SIG_DFL` before it arrives. Each runs untraced (the same QEMU without
//! `-cannoli`) and traced by the `benchmark` tool; what the guest observed
//! (its file, with the fd numbers it got) and its exit status must be the
//! same, and the trace complete: the tool exits with the program's status
//! only when nothing was lost (3 otherwise).

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};

use e2e::{guest, qemu_builds, release_artifact, RunDir};

const GUESTS: &[&str] = &["x86_64", "mipsel"];

/// A shell-style status: the code, or 128 + the signal.
fn status_code(s: ExitStatus) -> i32 {
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

fn check(arch: &str, mode: &str) {
    let prog = guest(arch, "hostile");
    let dir = RunDir::new();
    let (plain_out, traced_out) = (dir.file("untraced.txt"), dir.file("traced.txt"));
    let untraced = Command::new(qemu_builds().qemu(arch))
        .arg(&prog)
        .args([mode, plain_out.to_str().unwrap()])
        .env_clear()
        .current_dir(dir.path())
        .output()
        .expect("run QEMU");
    let traced = Command::new(release_artifact("benchmark"))
        .arg(&prog)
        .args([mode, traced_out.to_str().unwrap()])
        .env_clear()
        .current_dir(dir.path())
        .output()
        .expect("run the benchmark tool");
    let stdout = String::from_utf8_lossy(&traced.stdout);
    let stderr = String::from_utf8_lossy(&traced.stderr);
    let what = format!("{arch} {mode}: traced stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(
        status_code(traced.status),
        status_code(untraced.status),
        "{what}\nuntraced stderr: {}",
        String::from_utf8_lossy(&untraced.stderr)
    );
    assert!(stdout.contains(", 0 lost"), "{what}");
    let events: u64 = stdout
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no event count: {what}"));
    assert!(events > 100_000, "only {events} events: {what}");
    let (a, b) = (
        std::fs::read_to_string(&plain_out).unwrap_or_default(),
        std::fs::read_to_string(&traced_out).unwrap_or_default(),
    );
    assert!(!a.is_empty(), "the untraced guest wrote nothing: {what}");
    assert_eq!(b, a, "the guest saw something else traced: {what}");
}

#[test]
fn close_range_from_3_up() {
    for arch in GUESTS {
        check(arch, "close_range");
    }
}

#[test]
fn dup2_onto_low_fds() {
    for arch in GUESTS {
        check(arch, "dup2");
    }
}

#[test]
fn closes_and_dups_near_the_fd_limit() {
    for arch in GUESTS {
        check(arch, "fcntl");
    }
}

#[test]
fn sigterm_back_to_sig_dfl() {
    for arch in GUESTS {
        check(arch, "sigdfl");
    }
}
