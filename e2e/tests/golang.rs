// SPDX-License-Identifier: GPL-2.0-or-later
//! Go programs, as Debian's `golang-go` builds them for every guest of the
//! matrix (`tests/programs/gomix.go`, static, no cgo): a runtime that
//! spreads goroutines over OS threads of its own, preempts them with
//! signals, collects garbage, and raises its own descriptor limit to the
//! hard one at start. Nothing of it is timed or tuned here, so the runs
//! differ in their threads' interleaving; what is compared holds however
//! they were scheduled.
//!
//! * `<arch>::same_run`: started with a soft descriptor limit of 1024 (and
//!   a hard one of 4096), traced with libinsn and libmem loaded into the
//!   same QEMU (`processes::same_run_counts`): nothing is lost, the
//!   runtime's threads are streams of their own, and each stream holds at
//!   least its vCPU's count of libinsn (and all of them together at least
//!   libmem's accesses). Not exactly: Go's `sysmon` (and any thread that
//!   spins) still runs when the process exits, past the point where QEMU's
//!   plugins stop counting (`processes::AtExit::Running`); the threads
//!   guests in `processes` are the exact test of equal counts. The
//!   guest's stdout is that of the same QEMU untraced: the work's digest,
//!   the soft limit the runtime raised to the hard one, and the numbers
//!   1,100 descriptors opened past 1024 got.
//! * `<arch>::heap`: `cannoli heap` says that a Go program's heap is the
//!   runtime's, finds nothing, exits 0, and the guest's stdout is as
//!   above.
//! * `probe_*`: `cannoli probe` of a function named with its package path
//!   (`crypto/sha256.block:return`) hits it, and warns of nothing: Go's
//!   conventions are read on every guest (x86_64's ABIInternal
//!   arguments; mipsel's ABI0 results where the program's DWARF places
//!   them); the exact values, and the warning of a program without DWARF,
//!   are `examples/probe`'s `go_known_values` and `go_stripped`.
//!
//! The program's output holds no run-dependent value; the tests assert no
//! rate.

use std::path::PathBuf;

use e2e::procs::traced_cmd;
use e2e::recording::Tool;
use e2e::*;

use super::processes::{same_run_counts, AtExit};

/// Work items and descriptors the program is given.
const ARGS: [&str; 2] = ["300", "1100"];
/// The descriptor limits (soft, hard) QEMU starts with.
const NOFILE: (u64, u64) = (1024, 4096);

fn program(arch: &str) -> PathBuf {
    guest(arch, "gomix")
}

/// The lines every run must print (the digest is of the work alone).
fn check_stdout(f: &Failures, what: &str, stdout: &[u8]) {
    let text = String::from_utf8_lossy(stdout);
    let want = [
        "items 300 digest 0e4ad0e120a86de39530594ae36a3f4c0f3e7eb55117ed0e88820d5061249a13",
        "nofile soft limit raised to the hard one: true",
        "opened 1100 descriptors: ",
    ];
    let lines: Vec<&str> = text.lines().collect();
    let ok = lines.len() == want.len() && lines.iter().zip(want).all(|(l, w)| l.starts_with(w));
    f.check(
        &format!("{what}: the program's output"),
        if ok {
            Ok(())
        } else {
            Err(format!(
                "got\n{text}\nwant lines starting\n{}",
                want.join("\n")
            ))
        },
    );
}

fn same_run(arch: &str) {
    let prog = program(arch);
    let dir = RunDir::new();
    let f = Failures::new(format!("Go on {arch}, with libinsn in the same run"));
    // The untraced reference: the same QEMU and limits, no plugin log.
    // (That QEMU keeps its `-D` log 64 below the soft limit: a program
    // that raises its limit and opens 1,100 files meets it there. Traced,
    // the log is with QEMU's own descriptors, out of the guest's range.)
    let plain =
        GuestCmd::new(arch, qemu_builds().qemu(arch), &prog, &ARGS).nofile(NOFILE.0, NOFILE.1);
    let reference = run_guest(&dir, "untraced", &plain);
    reference.assert_success();
    check_stdout(&f, "untraced", &reference.stdout);
    let (t, counts, per_cpu) = same_run_counts(
        &f,
        &dir,
        traced_cmd(arch, &prog, &ARGS).nofile(NOFILE.0, NOFILE.1),
        AtExit::Running,
    );
    t.guest.assert_success();
    f.check(
        "guest stdout",
        same_output("untraced", &reference.stdout, "traced", &t.guest.stdout),
    );
    f.check(
        "the runtime's threads",
        if counts.len() > 1 && counts.len() == per_cpu.len() {
            Ok(())
        } else {
            Err(format!(
                "{} streams and {} vCPUs: want as many of each, more than one",
                counts.len(),
                per_cpu.len()
            ))
        },
    );
    f.finish();
}

fn heap(arch: &str) {
    let prog = program(arch);
    let dir = RunDir::new();
    let f = Failures::new(format!("cannoli heap of a Go program on {arch}"));
    let out = dir.file("heap.json");
    let r = Tool::new("cannoli")
        .args(["heap", "--json", "-o"])
        .arg(&out)
        .arg(&prog)
        .args(ARGS)
        .run(&dir, "heap", timeout())
        .unwrap_or_else(|e| panic!("{e}"));
    f.check("exit status", r.expect_code(0));
    check_stdout(&f, "under cannoli heap", &r.stdout);
    let said = format!("{} is a Go program", prog.display());
    f.check(
        "what it says",
        if r.stderr.contains(&said) {
            Ok(())
        } else {
            Err(format!("no `{said}` in its stderr:\n{}", r.stderr))
        },
    );
    let json = std::fs::read_to_string(&out).unwrap_or_default();
    let findings = json
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("\"summary\""))
        .count();
    f.check(
        "findings",
        if findings == 0 {
            Ok(())
        } else {
            Err(format!("{findings} findings:\n{json}"))
        },
    );
    f.finish();
}

/// `cannoli probe` of a Go function, named with its package path: hits,
/// and whether a warning line says that results are not read.
fn probe(arch: &str, spec: &str, warns: bool) {
    let func = spec.strip_suffix(":return").unwrap_or(spec);
    let prog = program(arch);
    let dir = RunDir::new();
    let f = Failures::new(format!("cannoli probe of a Go program on {arch}"));
    let out = dir.file("probe.json");
    let r = Tool::new("cannoli")
        .args(["probe", "--json", "-p", spec, "-o"])
        .arg(&out)
        .arg(&prog)
        .args(ARGS)
        .run(&dir, "probe", timeout())
        .unwrap_or_else(|e| panic!("{e}"));
    f.check("exit status", r.expect_code(0));
    check_stdout(&f, "under cannoli probe", &r.stdout);
    let hits = std::fs::read_to_string(&out)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&format!("\"function\":\"{func}\"")))
        .count();
    f.check(
        "hits",
        if hits > 0 {
            Ok(())
        } else {
            Err(format!("no hit of {func}; stderr:\n{}", r.stderr))
        },
    );
    let warned = r.stderr.contains("is a Go program") && r.stderr.contains("Go's ABI0");
    f.check(
        "the convention's warning",
        if warned == warns {
            Ok(())
        } else {
            Err(format!(
                "warned: {warned}, want {warns}; stderr:\n{}",
                r.stderr
            ))
        },
    );
    f.finish();
}

/// aarch64: Go's registers are C's; the assembly `block` has its Go name.
#[test]
fn probe_aarch64() {
    probe("aarch64", "crypto/sha256.block:return", false);
}

/// x86_64: Go's ABIInternal arguments are read from its registers, not
/// SysV's, and its first result is in RAX: nothing to warn of.
#[test]
fn probe_x86_64() {
    probe("x86_64", "crypto/sha256.Sum256", false);
}

/// mipsel: Go's ABI0 returns results on the stack, where the program's
/// DWARF places them: nothing to warn of.
#[test]
fn probe_mipsel() {
    probe("mipsel", "crypto/sha256.Sum256:return", false);
}

macro_rules! per_guest {
    ($($arch:ident),*) => {
        $(
            mod $arch {
                #[test]
                fn same_run() {
                    super::same_run(stringify!($arch));
                }

                #[test]
                fn heap() {
                    super::heap(stringify!($arch));
                }
            }
        )*
    };
}

per_guest!(mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// Every guest of the matrix has its tests here.
#[test]
fn every_guest_has_tests() {
    let names = [
        "mipsel", "mips", "mips64el", "arm", "aarch64", "riscv64", "x86_64", "i386", "ppc64le",
    ];
    assert_eq!(GUESTS.iter().map(|g| g.arch).collect::<Vec<_>>(), names);
}
