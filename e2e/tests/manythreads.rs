// SPDX-License-Identifier: GPL-2.0-or-later
//! A program with 1,000 threads alive at once (tests/programs/manythreads.c)
//! traced completely at the usual descriptor limit: the tool is started
//! with a soft `RLIMIT_NOFILE` of 1024, raises its own to the hard limit
//! (it keeps one descriptor per stream), and gives QEMU back the 1024 it
//! had. Every guest thread is a stream of its own, nothing is lost, on
//! x86_64, arm (32-bit) and aarch64 (64-bit).
//!
//! QEMU's side must fit 1,001 streams in 1024 descriptors too (its
//! control sockets, kept above the guest's descriptors).

use std::fs;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e::*;

/// The soft descriptor limit the tool (and so QEMU) starts with.
const SOFT: u64 = 1024;
/// Guest threads besides main.
const THREADS: usize = 1000;

/// The soft limit on open files of process `pid`.
fn soft_nofile(pid: u32) -> Option<u64> {
    let limits = fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Children of `pid` (all its threads).
fn children(pid: u32) -> Vec<u32> {
    let mut v = Vec::new();
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(c) = fs::read_to_string(t.path().join("children")) {
                v.extend(c.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
            }
        }
    }
    v
}

fn many_threads(arch: &str) {
    let dir = RunDir::new();
    let prog = guest(arch, "manythreads");
    let out = dir.file("out");
    let err = dir.file("err");
    let mut c = Command::new(release_artifact("symbolizer"));
    c.args(["--no-mem", "-o", "/dev/null"])
        .arg(&prog)
        .arg(THREADS.to_string())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("CANNOLI_QEMU_BUILD", &qemu_builds().build)
        // Small rings: 1,001 of them at once.
        .env("CANNOLI_CHUNK_KB", "8")
        .env("CANNOLI_CHUNKS", "4")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out).unwrap())
        .stderr(fs::File::create(&err).unwrap());
    // SAFETY: only getrlimit/setrlimit between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let mut lim: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
            lim.rlim_cur = SOFT.min(lim.rlim_max);
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = ChildGuard::new(c.spawn().unwrap(), format!("symbolizer {arch} manythreads"));
    let tool = child.id();
    // While it runs: the tool raised its own limit, QEMU has the one the
    // tool was given. QEMU raises its soft limit for a moment whenever it
    // makes a descriptor of its own in its room above the guest's bound
    // (docs/guest-view.md), so a read can catch that: what counts is that
    // QEMU is seen at the tool's limit.
    let (mut raised, mut qemu_limits) = (None, std::collections::BTreeSet::new());
    let start = Instant::now();
    while (raised.is_none() || !qemu_limits.contains(&SOFT))
        && start.elapsed() < Duration::from_secs(60)
    {
        if let Some(s) = soft_nofile(tool).filter(|&s| s != SOFT) {
            raised = Some(s);
        }
        // The tool's child is the run's guardian, QEMU its child (once it
        // runs QEMU: before its exec it is a copy of the guardian).
        for g in children(tool) {
            for q in children(g) {
                let is_qemu = fs::read_link(format!("/proc/{q}/exe"))
                    .is_ok_and(|e| e.to_string_lossy().contains("qemu-"));
                if is_qemu {
                    qemu_limits.extend(soft_nofile(q));
                }
            }
        }
        if child.child_mut().try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = child
        .wait_timeout(timeout())
        .unwrap_or_else(|| panic!("{arch}: the run did not end within {:?}", timeout()));
    let stdout = fs::read_to_string(&out).unwrap_or_default();
    let stderr = fs::read_to_string(&err).unwrap_or_default();
    let summary = stderr
        .lines()
        .find(|l| l.contains(" events in "))
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        status.code(),
        Some(0),
        "{arch}: exit status {status}\n--- stdout ---\n{stdout}\n--- stderr (end) ---\n{}",
        tail(&stderr, 30)
    );
    assert!(
        stdout.starts_with(&format!("manythreads: {THREADS} threads, sum ")),
        "{arch}: {stdout}"
    );
    assert!(
        summary.contains(&format!("from {} guest threads,", THREADS + 1))
            && summary.ends_with(", 0 lost"),
        "{arch}: every thread a stream, nothing lost: {summary}\n{}",
        tail(&stderr, 30)
    );
    assert!(
        raised.is_some_and(|r| r > SOFT),
        "{arch}: the tool did not raise its own descriptor limit ({raised:?})"
    );
    assert!(
        qemu_limits.contains(&SOFT),
        "{arch}: QEMU's descriptor limit was never the tool's {SOFT}: {qemu_limits:?}"
    );
}

#[test]
fn many_threads_x86_64() {
    many_threads("x86_64");
}

#[test]
fn many_threads_arm() {
    many_threads("arm");
}

#[test]
fn many_threads_aarch64() {
    many_threads("aarch64");
}
