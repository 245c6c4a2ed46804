// SPDX-License-Identifier: GPL-2.0-or-later
//! What a traced guest sees of its descriptors, its descriptor limits and
//! its `/proc` (docs/guest-view.md), with `tests/programs/guestview.c`, on
//! x86_64, a 32-bit guest (arm) and a 64-bit one (aarch64). Each guest
//! starts with a soft limit of 1024 and a hard limit of 4096 descriptors
//! and writes what it observed to a file; the traced run's file must equal
//! the untraced run's, and the trace must be complete:
//!
//! * `fds`: it raises its soft limit to its hard one and holds 1,200
//!   descriptors (open, dup, fcntl F_DUPFD, dup2 to the numbers just below
//!   its limit) while threads come and go, checks and closes them all, gets
//!   EMFILE exactly at a lowered soft limit and starts a thread there (it
//!   is traced too), lowers its hard limit and raises it again. The one line that may differ is its first hard
//!   limit: QEMU keeps room for its own descriptors above the guest's
//!   (docs/guest-view.md), so a traced guest sees 4096 only where QEMU may
//!   raise its hard limit (CAP_SYS_RESOURCE), else 4096 - 2048.
//! * `exec` (x86_64, whose exec runs natively untraced): the limits a
//!   program execs with, as the new program sees them.
//! * `proc`: `/proc/self/fd`, `fdinfo`, `<pid>/fd`, `task/T/fd`,
//!   `thread-self/fd` and `/dev/fd` list the same descriptors, and
//!   `/proc/self/environ` (also through `<pid>`, `thread-self` and
//!   `task/T`) shows the same environment: none of QEMU's `CANNOLI_*`
//!   variables, the run's secret among them.
//! * `reach`: whatever the guest tries on descriptors it did not make
//!   (those /proc lists, and every number from its hard limit up 4096, past
//!   QEMU's room): fcntl, dup, dup2, dup3, fstat, write, pwrite, read,
//!   lseek, ioctl, mmap, send, sendmsg, getsockopt, epoll_ctl, SCM_RIGHTS,
//!   fchdir, fstatat, readlink/open/stat through /proc/self/fd, fdinfo,
//!   /dev/fd and thread-self, shutdown, close and close_range gets what an
//!   untraced guest gets, and a forged goodbye written to every socket it
//!   finds reaches no client: the trace is complete, and has exactly as
//!   many instructions as libinsn counts.
//!
//! The guest never depends on time; the tests assert no rate.

use std::path::{Path, PathBuf};

use e2e::procs::{run_traced, traced_cmd, Traced};
use e2e::*;

/// x86_64, a 32-bit and a 64-bit guest of other families.
const GUESTS: &[&str] = &["x86_64", "arm", "aarch64"];
const SOFT: u64 = 1024;
const HARD: u64 = 4096;

/// The hard limit a traced guest sees when QEMU starts with hard limit `h`
/// (util/cannoli-fds.c): QEMU keeps R = min(h / 2, 65536) descriptors
/// above the guest's, raising its hard limit by R where it may.
fn traced_hard(h: u64) -> u64 {
    let room = (h / 2).min(65536);
    let nr_open: u64 = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 20);
    let top = if may_raise_hard_limits() {
        (h + room).min(nr_open)
    } else {
        h
    };
    h.min(top - room)
}

/// Whether this process (and so QEMU) has CAP_SYS_RESOURCE.
fn may_raise_hard_limits() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 24) != 0)
}

/// The program's file `name` in `dir`, or "" if it wrote none.
fn observed(dir: &RunDir, name: &str) -> String {
    std::fs::read_to_string(dir.file(name)).unwrap_or_default()
}

/// `guestview <mode> <dir>/<out> <extra>` untraced (the reference QEMU),
/// with the test's limits; what it observed.
fn untraced(dir: &RunDir, arch: &str, mode: &str, out: &str, extra: &[&str]) -> String {
    let q = qemu_builds();
    let prog = guest(arch, "guestview");
    let path = dir.file(out);
    let mut args = vec![mode, path.to_str().unwrap()];
    args.extend(extra);
    let cmd = GuestCmd::new(arch, q.reference_qemu(arch), &prog, &args)
        .env("GV_MARK", "visible")
        .nofile(SOFT, HARD);
    let run = run_guest(dir, &format!("{out}.untraced"), &cmd);
    run.assert_success();
    let seen = observed(dir, out);
    assert!(
        seen.ends_with("end\n") || mode == "exec",
        "{arch} {mode}: the untraced guest did not finish:\n{seen}"
    );
    seen
}

/// The same traced by cannoli-dump (`client`: its options), with extra
/// QEMU options; what it observed and the run.
fn traced(
    dir: &RunDir,
    arch: &str,
    mode: &str,
    out: &str,
    extra: &[&str],
    qemu_args: &[PathBuf],
    client: &[&str],
) -> (String, Traced) {
    let prog = guest(arch, "guestview");
    let path = dir.file(out);
    let mut args = vec![mode, path.to_str().unwrap()];
    args.extend(extra);
    let mut cmd = traced_cmd(arch, &prog, &args)
        .env("GV_MARK", "visible")
        .nofile(SOFT, HARD);
    for a in qemu_args {
        cmd = cmd.qemu_arg(a);
    }
    let t = run_traced(dir, out, cmd, client, false);
    let what = format!(
        "{arch} {mode} traced: QEMU {}\n--- its stderr ---\n{}\n--- observed ---\n{}",
        t.guest.status,
        tail(&t.guest.stderr_text(), 20),
        observed(dir, out)
    );
    assert!(t.guest.status.success(), "{what}");
    t.client_ok().unwrap_or_else(|e| panic!("{what}\n{e}"));
    (observed(dir, out), t)
}

/// Line by line, the first difference of two observations.
fn same_observations(arch: &str, mode: &str, untraced: &str, traced: &str) {
    if untraced == traced {
        return;
    }
    let (u, t): (Vec<&str>, Vec<&str>) = (untraced.lines().collect(), traced.lines().collect());
    let i = u.iter().zip(&t).take_while(|(a, b)| a == b).count();
    panic!(
        "{arch} {mode}: the traced guest saw something else, from line {}:\n  untraced: {:?}\n  traced:   {:?}\n--- untraced ---\n{untraced}\n--- traced ---\n{traced}",
        i + 1,
        u.get(i),
        t.get(i)
    );
}

#[test]
fn descriptors_as_untraced_at_any_limit() {
    for arch in GUESTS {
        let dir = RunDir::new();
        let want = untraced(&dir, arch, "fds", "u.txt", &[]);
        let (got, t) = traced(&dir, arch, "fds", "t.txt", &[], &[], &["--only", "Y"]);
        // The first hard limit: the traced guest's view of it.
        let want_hard = format!("hard {}", traced_hard(HARD));
        let mut first = true;
        let got: String = got
            .lines()
            .map(|l| {
                if first && l.starts_with("hard ") {
                    first = false;
                    assert_eq!(l, want_hard, "{arch}: the traced guest's hard limit");
                    format!("hard {HARD}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        same_observations(arch, "fds", &want, &got);
        for line in [
            "open: 0 failed",
            "dup: 0 failed",
            "fcntl F_DUPFD: 0 failed, above the asked 0",
            "dup2 below the limit: 0 failed, off by 0",
            "threads: 0 failed",
            "F_GETFD failed 0, close failed 0, second close worked 0",
            "then EMFILE",
            "a thread at the limit: its open failed",
        ] {
            assert!(want.contains(line), "{arch}: no {line:?} in:\n{want}");
        }
        // The main thread and its 18 threads (one to warm up, 16, one
        // started while the guest held every descriptor it may), each
        // traced.
        let s = t.summary().unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!(s.connections, 19, "{arch}: streams\n{}", t.client_stderr);
    }
}

#[test]
fn limits_survive_exec() {
    // Untraced, the exec runs natively: only an x86_64 guest can.
    let arch = "x86_64";
    let dir = RunDir::new();
    let want = untraced(&dir, arch, "exec", "u.txt", &[]);
    assert!(
        want.contains("after exec: soft 700 hard 900"),
        "untraced:\n{want}"
    );
    let (got, t) = traced(&dir, arch, "exec", "t.txt", &[], &[], &["--only", "Y"]);
    same_observations(arch, "exec", &want, &got);
    let s = t.summary().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        s.connections, 2,
        "{arch}: streams before and after the exec"
    );
}

#[test]
fn proc_self_as_untraced() {
    for arch in GUESTS {
        let dir = RunDir::new();
        let want = untraced(&dir, arch, "proc", "u.txt", &[]);
        let (got, _) = traced(&dir, arch, "proc", "t.txt", &[], &[], &["--only", "Y"]);
        assert!(
            want.contains("  GV_MARK=visible\n") && !want.contains("CANNOLI"),
            "{arch}: untraced:\n{want}"
        );
        same_observations(arch, "proc", &want, &got);
    }
}

/// The libinsn plugin of the patched build.
fn libinsn() -> PathBuf {
    qemu_builds().plugin(Plugin::Insn)
}

/// Instructions of `guestview reach` by libinsn: untraced, the plugin's
/// output on stderr (a log file would be one more descriptor in the
/// guest's /proc lists).
fn reach_instructions(dir: &RunDir, arch: &str, out: &str, range: &str) -> u64 {
    let q = qemu_builds();
    let prog = guest(arch, "guestview");
    let path = dir.file(out);
    let cmd = GuestCmd::new(
        arch,
        q.qemu(arch),
        &prog,
        &["reach", path.to_str().unwrap(), range],
    )
    .qemu_arg("-plugin")
    .qemu_arg(libinsn())
    .qemu_arg("-d")
    .qemu_arg("plugin")
    .env("GV_MARK", "visible")
    .nofile(SOFT, HARD);
    let run = run_guest(dir, out, &cmd);
    run.assert_success();
    let log = dir.file(&format!("{out}.stderr"));
    parse_insn(Path::new(&log))
        .unwrap_or_else(|e| panic!("{arch}: libinsn: {e}"))
        .total
}

#[test]
fn qemu_descriptors_out_of_reach() {
    let range = "4096";
    for arch in GUESTS {
        let dir = RunDir::new();
        let want = untraced(&dir, arch, "reach", "u.txt", &[range]);
        assert!(
            want.contains("foreign descriptors listed: 0\n")
                && want.contains("fcntl F_GETFD: EBADF 4096\n"),
            "{arch}: untraced:\n{want}"
        );
        let (got, t) = traced(
            &dir,
            arch,
            "reach",
            "t.txt",
            &[range],
            &[PathBuf::from("-plugin"), libinsn()],
            &["--counts", "--only", "X"],
        );
        same_observations(arch, "reach", &want, &got);
        // Every instruction, once: no goodbye cut the stream short.
        let insns = reach_instructions(&dir, arch, "g.txt", range);
        let counts = parse_dump(&t.dump)
            .and_then(|d| d.counts())
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
        let exec: u64 = counts.iter().map(|c| c.exec).sum();
        assert_eq!(
            (counts.len(), exec),
            (1, insns),
            "{arch}: one stream with libinsn's instructions\n{}",
            t.client_stderr
        );
    }
}
