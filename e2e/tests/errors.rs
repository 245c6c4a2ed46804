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
        .wait_timeout(Duration::from_secs(30))
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
