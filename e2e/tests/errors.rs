// SPDX-License-Identifier: GPL-2.0-or-later
//! Error paths: the patched QEMU and the client must fail with a clear
//! one-line message and a non-zero exit, never hang or crash.
//!
//! Needs `cargo build --release` first and the QEMU builds (see
//! `e2e::qemu_builds`).

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use e2e::*;

/// Runs `qemu-<arch> -cannoli <lib> loops` with `CANNOLI_ADDR=<addr>`.
fn run_with_lib(dir: &RunDir, tag: &str, arch: &str, lib: &Path, addr: &str) -> GuestRun {
    let q = qemu_builds();
    let prog = guest(arch, "loops");
    let cmd = GuestCmd::new(arch, q.qemu(arch), &prog, &[])
        .qemu_arg("-cannoli")
        .qemu_arg(lib)
        .env("CANNOLI_ADDR", addr);
    run_guest(dir, tag, &cmd)
}

/// QEMU failed cleanly: non-zero exit code (not a signal), the guest never
/// ran, and one stderr line satisfies `line_ok` (given the lowercased line).
fn assert_clean_failure(run: &GuestRun, what: &str, line_ok: impl Fn(&str) -> bool) {
    let err = run.stderr_text();
    assert!(
        !run.status.success(),
        "{what}: `{}` succeeded; expected an error.\n--- stderr ---\n{err}",
        run.cmdline
    );
    assert!(
        run.status.code().is_some(),
        "{what}: `{}` died from a signal ({}) instead of exiting with an error.\n--- stderr ---\n{err}",
        run.cmdline,
        run.status
    );
    assert!(
        run.stdout.is_empty(),
        "{what}: the guest ran (it printed {} bytes) although QEMU should have stopped first.\n--- stderr ---\n{err}",
        run.stdout.len()
    );
    assert!(
        err.lines().any(|l| line_ok(&l.to_lowercase())),
        "{what}: no stderr line of `{}` names the problem as expected.\n--- stderr ---\n{err}",
        run.cmdline
    );
}

#[test]
fn nonexistent_cannoli_library() {
    let dir = RunDir::new();
    for arch in ARCHES {
        // A live client, so whichever QEMU does first (load the library or
        // connect), the only thing wrong is the library.
        let mut client = DumpClient::start(&dir, &format!("client-{arch}"), 1);
        let lib = Path::new("/nonexistent.so");
        let run = run_with_lib(
            &dir,
            &format!("nonexistent-{arch}"),
            arch,
            lib,
            &client.addr,
        );
        client.kill();
        assert_clean_failure(&run, "-cannoli /nonexistent.so", |l| {
            l.contains("cannoli") && l.contains("/nonexistent.so")
        });
    }
}

#[test]
fn not_a_cannoli_library() {
    let dir = RunDir::new();
    let lib = qemu_builds().plugin(Plugin::Insn);
    for arch in ARCHES {
        let mut client = DumpClient::start(&dir, &format!("client-{arch}"), 1);
        let run = run_with_lib(
            &dir,
            &format!("notcannoli-{arch}"),
            arch,
            &lib,
            &client.addr,
        );
        client.kill();
        assert_clean_failure(&run, "-cannoli libinsn.so", |l| {
            l.contains("cannoli") && l.contains("libinsn.so")
        });
    }
}

#[test]
fn hook_library_of_another_abi_version() {
    let dir = RunDir::new();
    let root = workspace_root();
    let lib = dir.file("libother_abi.so");
    let cc = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join("e2e/tests/fixtures/other_abi.c"))
        .status()
        .expect("run cc (Debian package build-essential)");
    assert!(cc.success(), "cc failed to build the fixture");
    let header = std::fs::read_to_string(root.join("include/cannoli.h")).expect("read cannoli.h");
    let abi: u32 = header
        .lines()
        .find_map(|l| l.strip_prefix("#define CANNOLI_ABI_VERSION"))
        .and_then(|v| v.trim().parse().ok())
        .expect("CANNOLI_ABI_VERSION in cannoli.h");
    let (theirs, ours) = (format!("abi {}", abi + 1), format!("abi {abi}"));
    for arch in ARCHES {
        let mut client = DumpClient::start(&dir, &format!("client-{arch}"), 1);
        let run = run_with_lib(&dir, &format!("otherabi-{arch}"), arch, &lib, &client.addr);
        client.kill();
        assert_clean_failure(&run, "-cannoli libother_abi.so", |l| {
            l.contains("cannoli")
                && l.contains(&theirs)
                && l.contains(&ours)
                && l.contains("rebuild")
        });
    }
}

#[test]
fn no_client_listening() {
    let dir = RunDir::new();
    let lib = jitter_lib();
    for arch in ARCHES {
        let addr = format!("127.0.0.1:{}", unused_port());
        let run = run_with_lib(&dir, &format!("noclient-{arch}"), arch, &lib, &addr);
        assert_clean_failure(&run, &format!("CANNOLI_ADDR={addr} with no client"), |l| {
            l.contains("cannoli") && (l.contains("no client") || l.contains("connect"))
        });
    }
}

#[test]
fn server_bind_address_in_use() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = taken.local_addr().unwrap().to_string();
    let err = match cannoli::Server::bind(&addr) {
        Ok(s) => panic!(
            "Server::bind({addr}) succeeded on a port already in use (got {})",
            s.addr()
        ),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(&addr),
        "error does not name the address {addr}: {err}"
    );
    assert!(
        err.contains("in use"),
        "error does not say the address is in use: {err}"
    );
    assert_eq!(err.lines().count(), 1, "error is not one line: {err}");
}

#[test]
fn dump_client_address_in_use() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = taken.local_addr().unwrap().to_string();
    let dir = RunDir::new();
    let child = std::process::Command::new(dump_client())
        .args(["--listen", &addr, "--threads", "1", "--out"])
        .arg(dir.file("never.dump"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start cannoli-dump");
    let mut guard = ChildGuard::new(child, "cannoli-dump");
    let mut stderr = guard.child_mut().stderr.take().unwrap();
    let mut stdout = guard.child_mut().stdout.take().unwrap();
    let status = guard
        .wait_timeout(Duration::from_secs(120))
        .expect("cannoli-dump hung on a taken port");
    let mut err = String::new();
    let mut out = String::new();
    use std::io::Read;
    let _ = stderr.read_to_string(&mut err);
    let _ = stdout.read_to_string(&mut out);
    assert_eq!(
        status.code(),
        Some(1),
        "cannoli-dump on a taken port: {status}\n{err}"
    );
    assert!(
        err.contains(&addr) && err.contains("in use"),
        "unclear error: {err}"
    );
    assert!(
        !out.contains("listening"),
        "cannoli-dump announced an address it could not bind: {out}"
    );
}

// ---------------------------------------------------------------------------
// Tools whose output cannot be written (issue 11, item 5)
// ---------------------------------------------------------------------------

/// The guest's exit status in these runs: a tool whose output failed must
/// not exit with it.
const GUEST_STATUS: &str = "5";

/// Where a tool's output goes in one run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dest {
    /// stdout is `/dev/full` (every write fails with ENOSPC).
    StdoutFull,
    /// `-o /dev/full`.
    DashOFull,
    /// `-o <a file in the run directory>`, stdout a file: all is well.
    Fine,
}

/// `target/release/<tool> [-o ...] exitcode 5` on x86_64 (static, a few
/// ten thousand instructions: the trace is far bigger than any buffer, so
/// writing fails during the run, not only at the final flush), with a clean
/// environment; returns its status and stderr.
fn tool_run(dir: &RunDir, tool: &str, dest: Dest) -> (std::process::ExitStatus, String) {
    use std::fs::{File, OpenOptions};
    let tag = format!("{tool}-{dest:?}");
    let mut c = std::process::Command::new(release_artifact(tool));
    let file = dir.file(&format!("{tag}.out"));
    match dest {
        Dest::DashOFull => {
            c.args(["-o", "/dev/full"]);
        }
        Dest::Fine => {
            c.arg("-o").arg(&file);
        }
        Dest::StdoutFull => {}
    }
    // The benchmark has no -o: its result goes to stdout.
    if tool == "benchmark" {
        c = std::process::Command::new(release_artifact(tool));
    }
    c.arg(guest("x86_64", "exitcode")).arg(GUEST_STATUS);
    let stdout = match dest {
        Dest::StdoutFull => OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("open /dev/full"),
        _ => File::create(dir.file(&format!("{tag}.stdout"))).unwrap(),
    };
    let stderr_path = dir.file(&format!("{tag}.stderr"));
    c.env_clear()
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(File::create(&stderr_path).unwrap());
    for k in ["PATH", "CANNOLI_QEMU_BUILD"] {
        if let Some(v) = std::env::var_os(k) {
            c.env(k, v);
        }
    }
    let child = c
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {tool}: {e}"));
    let status = ChildGuard::new(child, tool)
        .wait_timeout(timeout())
        .unwrap_or_else(|| panic!("{tool} ({dest:?}) did not finish; killed"));
    (
        status,
        std::fs::read_to_string(&stderr_path).unwrap_or_default(),
    )
}

/// The tool exited with status 3 and said, in exactly one line, that
/// writing `what` to `to` failed with ENOSPC and the output is incomplete.
fn assert_output_failed(tool: &str, dest: Dest, status: std::process::ExitStatus, err: &str) {
    let to = if dest == Dest::StdoutFull {
        "stdout"
    } else {
        "/dev/full"
    };
    assert_eq!(
        status.code(),
        Some(cannoli::EXIT_INCOMPLETE),
        "{tool} with its output on a full disk ({dest:?}): {status}, expected exit status {} \
         (not the guest's {GUEST_STATUS})\n--- stderr ---\n{err}",
        cannoli::EXIT_INCOMPLETE
    );
    let failed: Vec<&str> = err.lines().filter(|l| l.contains("failed")).collect();
    assert!(
        failed.len() == 1
            && failed[0].starts_with(&format!("{tool}: writing "))
            && failed[0].contains(&format!(" to {to} failed: "))
            && failed[0].contains("No space left on device")
            && failed[0].ends_with("; the output is incomplete"),
        "{tool} ({dest:?}): expected one line `{tool}: writing ... to {to} failed: No space left \
         on device ...; the output is incomplete`, got:\n{err}"
    );
    assert!(
        !err.contains("panicked"),
        "{tool} ({dest:?}) panicked:\n{err}"
    );
}

#[test]
fn tools_with_stdout_on_a_full_disk() {
    let dir = RunDir::new();
    for tool in ["symbolizer", "backtrace", "regtrace", "benchmark"] {
        let (status, err) = tool_run(&dir, tool, Dest::StdoutFull);
        assert_output_failed(tool, Dest::StdoutFull, status, &err);
    }
    // coverage writes only its drcov file and stderr: stdout is the
    // program's alone, and the program's status stands.
    let (status, err) = tool_run(&dir, "coverage", Dest::StdoutFull);
    assert_eq!(
        status.code(),
        Some(GUEST_STATUS.parse().unwrap()),
        "coverage with stdout on a full disk (it writes nothing there): {status}\n{err}"
    );
}

#[test]
fn tools_with_dash_o_on_a_full_disk() {
    let dir = RunDir::new();
    for tool in ["symbolizer", "backtrace", "regtrace", "coverage"] {
        let (status, err) = tool_run(&dir, tool, Dest::DashOFull);
        assert_output_failed(tool, Dest::DashOFull, status, &err);
    }
}

/// The same runs with somewhere to write: the guest's status, no failure
/// line (so the tests above fail for the right reason).
#[test]
fn tools_with_room_to_write() {
    let dir = RunDir::new();
    for tool in [
        "symbolizer",
        "backtrace",
        "regtrace",
        "coverage",
        "benchmark",
    ] {
        let (status, err) = tool_run(&dir, tool, Dest::Fine);
        assert_eq!(
            status.code(),
            Some(GUEST_STATUS.parse().unwrap()),
            "{tool} writing to a file: {status}\n{err}"
        );
        assert!(
            !err.contains("failed"),
            "{tool} writing to a file says something failed:\n{err}"
        );
    }
}

#[test]
fn dump_client_with_out_on_a_full_disk() {
    let dir = RunDir::new();
    let q = qemu_builds();
    let arch = "x86_64";
    // `--out /dev/full` after start_args' own `--out`: the last one counts.
    let mut client =
        DumpClient::start_args(&dir, "full", &["--threads", "1", "--out", "/dev/full"]);
    let cmd = GuestCmd::new(arch, q.qemu(arch), &guest(arch, "loops"), &[])
        .qemu_arg("-cannoli")
        .qemu_arg(jitter_lib())
        .env("CANNOLI_ADDR", &client.addr)
        .env("CANNOLI_TOKEN", &client.token);
    let run = run_guest(&dir, "full", &cmd);
    // QEMU is not held up by the client that cannot write.
    run.assert_success();
    let (status, err) = client.finish(&run);
    assert_output_failed("cannoli-dump", Dest::DashOFull, status, &err);
}

#[test]
fn dump_client_with_stdout_on_a_full_disk() {
    // Its first line (`listening <addr>`) cannot be written: it stops at
    // once, before anything connects, with one line.
    let dir = RunDir::new();
    let err_path = dir.file("stdout-full.stderr");
    let child = std::process::Command::new(dump_client())
        .args(["--listen", "127.0.0.1:0", "--threads", "1", "--out"])
        .arg(dir.file("never.dump"))
        .stdin(std::process::Stdio::null())
        .stdout(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .expect("open /dev/full"),
        )
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("start cannoli-dump");
    let status = ChildGuard::new(child, "cannoli-dump")
        .wait_timeout(Duration::from_secs(120))
        .expect("cannoli-dump with stdout on a full disk hung");
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert_eq!(status.code(), Some(1), "{status}\n{err}");
    assert!(
        err.lines().count() == 1 && err.contains("stdout") && err.contains("No space left"),
        "expected one line about stdout:\n{err}"
    );
}
