// SPDX-License-Identifier: GPL-2.0-or-later
//! Guests doing ordinary things that used to cut their own trace short
//! (tests/programs/hostile.c): closing every fd from 3 up, `dup2` onto low
//! fds, F_DUPFD and closes near the top of the fd table, and SIGTERM set back
//! to `SIG_DFL` before it arrives. Each runs untraced (the same QEMU without
//! `-cannoli`) and traced by the `benchmark` tool; what the guest observed
//! (its file, with the fd numbers it got) and its exit status must be the
//! same, and the trace complete: the tool exits with the program's status
//! only when nothing was lost (3 otherwise).
//!
//! Processes and threads (issue 11), on x86_64, mipsel, i386 and arm: `exit`
//! while other threads are blocked in read, futex and nanosleep or coming
//! back from syscalls; `fork` while another thread is blocked in read;
//! `posix_spawn` and `vfork` + `execve` (which QEMU runs as forks); execs
//! that fail (ENOENT, EACCES, ENOEXEC), and `execveat` with a dirfd,
//! AT_EMPTY_PATH and AT_SYMLINK_NOFOLLOW. The
//! modes that exec successfully need an untraced run in which the exec
//! works: plain QEMU hands it to the host kernel, which runs an x86_64
//! program itself but no other guest's (no binfmt_misc here). Their
//! reference is therefore the untraced x86_64 run, on every guest (the
//! program prints nothing that depends on the architecture). Runs traced by
//! cannoli-dump also check the streams and syscall events themselves.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};

use e2e::dump::parse_dump_events;
use e2e::procs::{run_traced, traced_cmd, Client, Streams};
use e2e::{finish_guest, guest, qemu_builds, release_artifact, spawn_guest, RunDir, SyscallEvent};

const GUESTS: &[&str] = &["x86_64", "mipsel"];
/// The process and thread tests: 32-bit guests of both families too.
const PROCESS_GUESTS: &[&str] = &["x86_64", "mipsel", "i386", "arm"];

/// A shell-style status: the code, or 128 + the signal.
fn status_code(s: ExitStatus) -> i32 {
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

fn check(arch: &str, mode: &str) {
    check_against(arch, mode, arch);
}

/// [`check`], with the untraced run on guest `reference` (see the top).
fn check_against(arch: &str, mode: &str, reference: &str) -> u64 {
    let prog = guest(arch, "hostile");
    let dir = RunDir::new();
    let (plain_out, traced_out) = (dir.file("untraced.txt"), dir.file("traced.txt"));
    let untraced = Command::new(qemu_builds().qemu(reference))
        .arg(guest(reference, "hostile"))
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
    events
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

/// The modes that exec a program: the untraced x86_64 run is the reference.
const EXEC_REFERENCE: &str = "x86_64";

#[test]
fn exit_while_threads_are_in_syscalls() {
    // A race (threads coming back from syscalls while the process ends):
    // a few times each.
    for arch in PROCESS_GUESTS {
        for _ in 0..4 {
            check(arch, "exit_blocked");
        }
        // Every thread's stream ends with the syscall it was in, unfinished:
        // main's exit_group, the blocked read, futex wait and sleep.
        let (_dir, streams) = dump_streams(arch, "exit_blocked");
        assert_eq!(streams.0.len(), 9, "{arch}:\n{}", streams.describe());
        let last: Vec<String> = (0..streams.0.len())
            .filter_map(|i| {
                let d = parse_dump_events(&streams.0[i].file).unwrap_or_else(|e| panic!("{e}"));
                d.syscalls
                    .last()
                    .filter(|y| y.ret.is_none())
                    .map(|y| y.name.clone())
            })
            .collect();
        for want in ["exit_group", "read", "futex"] {
            assert!(
                last.iter().any(|n| n == want),
                "{arch}: no stream ends in {want}: {last:?}"
            );
        }
        assert!(
            last.iter().any(|n| n.ends_with("nanosleep")),
            "{arch}: no stream ends in a sleep: {last:?}"
        );
    }
}

#[test]
fn fork_while_a_thread_is_in_read() {
    for arch in PROCESS_GUESTS {
        check(arch, "fork_blocked");
        let (_dir, streams) = dump_streams(arch, "fork_blocked");
        // Parent: main and the reader thread; the child: its one thread.
        let parent = streams.0[0].pid;
        let tids = |pid: i32| streams.0.iter().filter(|s| s.pid == pid).count();
        let child: Vec<_> = streams.0.iter().filter(|s| s.ppid == parent).collect();
        assert!(
            tids(parent) == 2 && child.len() == 1 && child[0].tid == child[0].pid,
            "{arch}: want the parent's two threads and the child's one:\n{}",
            streams.describe()
        );
    }
}

#[test]
fn posix_spawn_and_vfork_exec() {
    for arch in PROCESS_GUESTS {
        check_against(arch, "spawn", EXEC_REFERENCE);
        // Each child: a stream until its execve, then the exec'd program's.
        let (_dir, streams) = dump_streams(arch, "spawn");
        let parent = streams.0[0].pid;
        let mut children: Vec<i32> = streams
            .0
            .iter()
            .filter(|s| s.ppid == parent)
            .map(|s| s.pid)
            .collect();
        children.dedup();
        assert!(
            children.len() == 2 && children.iter().all(|&c| streams.of(c, c).len() == 2),
            "{arch}: want two children with two streams each (before and after execve):\n{}",
            streams.describe()
        );
    }
}

#[test]
fn failed_execs_return_their_errors() {
    for arch in PROCESS_GUESTS {
        check(arch, "exec_fail");
        // One process, whose execve/execveat events carry the errors: ENOENT
        // (execve, execveat), EACCES (not executable), EACCES (directory),
        // ENOEXEC, EACCES (fexecve of a file that is not executable),
        // ENOENT (empty path). Same numbers on every guest here. One stream
        // too: the jitter sees that these execs cannot succeed (the ENOEXEC
        // one only where binfmt_misc has no entries; else the stream ends at
        // that exec and a new one goes on, starting with its result).
        let (_dir, streams) = dump_streams(arch, "exec_fail");
        let pid = streams.0[0].pid;
        assert!(
            streams.0.iter().all(|s| s.pid == pid && s.tid == pid)
                && (streams.0.len() == 1 || binfmt_misc_entries()),
            "{arch}:\n{}",
            streams.describe()
        );
        let rets: Vec<Option<i64>> = (0..streams.0.len())
            .flat_map(|i| exec_syscalls(&streams, i))
            .filter(|y| y.ret.is_some())
            .map(|y| y.ret)
            .collect();
        let want = [-2, -2, -13, -13, -8, -13, -2].map(Some);
        assert_eq!(rets, want, "{arch}: the execs' syscall events");
    }
}

#[test]
fn execveat_keeps_dirfd_and_flags() {
    for arch in PROCESS_GUESTS {
        check_against(arch, "execveat", EXEC_REFERENCE);
        // The parent's execveat with AT_SYMLINK_NOFOLLOW on a symlink fails
        // (ELOOP), and one relative to a dirfd with a missing file (ENOENT);
        // four children exec (a stream before, one after each).
        let (_dir, streams) = dump_streams(arch, "execveat");
        let parent = streams.0[0].pid;
        let rets: Vec<Option<i64>> = exec_syscalls(&streams, 0).iter().map(|y| y.ret).collect();
        // ELOOP is 90 on MIPS, 40 elsewhere.
        let eloop = if arch.starts_with("mips") { 90 } else { 40 };
        assert_eq!(
            rets,
            [Some(-eloop), Some(-2)],
            "{arch}: the parent's execveat events"
        );
        let children = streams.0.iter().filter(|s| s.ppid == parent).count();
        assert_eq!(children, 8, "{arch}:\n{}", streams.describe());
    }
}

/// The streams of `hostile <mode>` traced by cannoli-dump (syscall events
/// only), which must be complete; with the directory that holds them.
fn dump_streams(arch: &str, mode: &str) -> (RunDir, Streams) {
    let dir = RunDir::new();
    let out = dir.file("out.txt");
    let cmd = traced_cmd(
        arch,
        &guest(arch, "hostile"),
        &[mode, out.to_str().unwrap()],
    );
    let t = run_traced(&dir, "dump", cmd, &["--only", "Y"], true);
    t.client_ok()
        .unwrap_or_else(|e| panic!("{arch} {mode}: cannoli-dump: {e}"));
    let streams = t.streams().unwrap_or_else(|e| panic!("{arch} {mode}: {e}"));
    (dir, streams)
}

/// The execve and execveat events of stream `i`.
fn exec_syscalls(streams: &Streams, i: usize) -> Vec<SyscallEvent> {
    let d = parse_dump_events(&streams.0[i].file).unwrap_or_else(|e| panic!("{e}"));
    d.syscalls
        .into_iter()
        .filter(|y| y.name == "execve" || y.name == "execveat")
        .collect()
}

/// Whether the host's binfmt_misc has entries (a file the kernel's own
/// loaders refuse may then still run).
fn binfmt_misc_entries() -> bool {
    std::fs::read_dir("/proc/sys/fs/binfmt_misc").is_ok_and(|d| {
        d.flatten()
            .any(|e| !matches!(e.file_name().to_str(), Some("register" | "status")))
    })
}

#[test]
fn a_child_whose_client_is_gone_goes_on_untraced() {
    // The parent connects; then the client dies (killed while the guest
    // waits for a file), and the guest forks: the child cannot connect. It
    // must go on untraced (QEMU says so in one line), not exit with 1.
    for arch in GUESTS {
        let prog = guest(arch, "hostile");
        let dir = RunDir::new();
        let (plain_out, traced_out) = (dir.file("untraced.txt"), dir.file("traced.txt"));
        let flag = dir.file("go");
        std::fs::write(&flag, "").unwrap();
        let untraced = Command::new(qemu_builds().qemu(arch))
            .arg(&prog)
            .args([
                "fork_when",
                plain_out.to_str().unwrap(),
                flag.to_str().unwrap(),
            ])
            .env_clear()
            .current_dir(dir.path())
            .output()
            .expect("run QEMU");
        std::fs::remove_file(&flag).unwrap();
        let mut client = Client::start(&dir, "client", &["--only", "Y"]);
        let cmd = traced_cmd(
            arch,
            &prog,
            &[
                "fork_when",
                traced_out.to_str().unwrap(),
                flag.to_str().unwrap(),
            ],
        )
        .env("CANNOLI_ADDR", &client.addr)
        .env("CANNOLI_TOKEN", &client.token);
        let child = spawn_guest(&dir, "guest", &cmd);
        let start = std::time::Instant::now();
        while !std::fs::read_to_string(&traced_out).is_ok_and(|s| s.contains("ready")) {
            assert!(
                start.elapsed().as_secs() < 60,
                "{arch}: the traced guest never got ready"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        client.kill_9();
        std::fs::write(&flag, "").unwrap();
        let run = finish_guest(&dir, "guest", &cmd, child);
        let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
        let what = format!("{arch}: QEMU's stderr:\n{stderr}");
        assert_eq!(
            status_code(run.status),
            status_code(untraced.status),
            "{what}"
        );
        assert_eq!(
            std::fs::read_to_string(&traced_out).unwrap_or_default(),
            std::fs::read_to_string(&plain_out).unwrap_or_default(),
            "{what}"
        );
        assert_eq!(stderr.matches("goes on untraced").count(), 1, "{what}");
    }
}
