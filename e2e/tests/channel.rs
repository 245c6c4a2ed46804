// SPDX-License-Identifier: GPL-2.0-or-later
//! The channel between QEMU and the client, with the real patched QEMU:
//! only the traced QEMU can stream (the run's secret, proven both ways; the
//! private socket directory), TCP gives the same trace as the default Unix
//! socket, and a run killed half-way leaves nothing behind.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::{
    guest, jitter_lib, qemu_builds, release_artifact, run_guest, spawn_guest, DumpClient, GuestCmd,
    RunDir,
};

/// QEMU tracing `prog` into the client `c` (its address and secret).
fn traced(arch: &str, prog: &Path, args: &[&str], addr: &str, token: &str) -> GuestCmd {
    GuestCmd::new(arch, qemu_builds().qemu(arch), prog, args)
        .qemu_arg("-cannoli")
        .qemu_arg(jitter_lib())
        .env("CANNOLI_ADDR", addr)
        .env("CANNOLI_TOKEN", token)
}

/// The non-empty lines of QEMU's stderr.
fn lines(s: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(s)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn tcp_gives_the_same_trace_as_the_unix_socket() {
    for arch in ["x86_64", "mipsel"] {
        let prog = guest(arch, "calls");
        let dir = RunDir::new();
        let mut dumps = Vec::new();
        for (tag, extra) in [("unix", &[][..]), ("tcp", &["--listen", "127.0.0.1:0"][..])] {
            // Executed pcs only: loads, stores and syscall results carry
            // the thread id, which differs between any two runs.
            let mut args = vec!["--only", "X"];
            args.extend_from_slice(extra);
            let mut client = DumpClient::start_args(&dir, tag, &args);
            assert_eq!(
                client.addr.starts_with("unix:"),
                tag == "unix",
                "{tag}: {}",
                client.addr
            );
            let run = run_guest(
                &dir,
                tag,
                &traced(arch, &prog, &[], &client.addr, &client.token),
            );
            let (st, err) = client.finish(&run);
            run.assert_success();
            assert!(st.success(), "{arch} {tag}: client {st}\n{err}");
            assert!(err.contains(" 0 lost"), "{arch} {tag}: {err}");
            dumps.push(client.out.clone());
        }
        let n = fs::read_to_string(&dumps[0]).unwrap().lines().count();
        assert!(n > 10_000, "{arch}: a short trace ({n} lines)");
        if let Err(e) = e2e::compare_files(&dumps[0], &dumps[1]) {
            panic!("{arch}: the TCP trace differs: {e}");
        }
    }
}

#[test]
fn qemu_with_the_wrong_secret_is_refused_and_the_loss_counted() {
    let dir = RunDir::new();
    let mut client = DumpClient::start(&dir, "client", 1);
    let wrong = cannoli::wire::Token::generate().unwrap().to_hex();
    let prog = guest("x86_64", "calls");
    let run = run_guest(
        &dir,
        "qemu",
        &traced("x86_64", &prog, &[], &client.addr, &wrong),
    );
    let (st, err) = client.finish(&run);
    // QEMU says why in one line and does not run the program untraced.
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr_text());
    let qemu_lines = lines(&run.stderr);
    assert_eq!(qemu_lines.len(), 1, "{qemu_lines:?}");
    assert!(
        qemu_lines[0].contains("refused the trace") && qemu_lines[0].contains("secret"),
        "{qemu_lines:?}"
    );
    assert!(run.stdout.is_empty(), "the program ran untraced");
    // The client counts it as loss: it may have been one of our threads.
    assert_eq!(st.code(), Some(3), "{err}");
    assert!(err.contains("1 connection refused"), "{err}");
}

#[test]
fn qemu_refuses_a_listener_that_cannot_prove_the_secret() {
    // Something took the address and plays the client without the secret.
    let dir = RunDir::new();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let impostor = std::thread::spawn(move || {
        use std::io::{BufRead, BufReader, Write};
        let (mut s, _) = l.accept().unwrap();
        let ch = format!(
            "{{\"magic\":\"cannoli\",\"wire_version\":{},\"nonce\":\"{}\"}}\n",
            cannoli::wire::WIRE_VERSION,
            "cd".repeat(16)
        );
        s.write_all(ch.as_bytes()).unwrap();
        let mut hello = String::new();
        BufReader::new(&s).read_line(&mut hello).unwrap();
        s.write_all(b"{\"error\":null}\n").unwrap();
        hello
    });
    let token = cannoli::wire::Token::generate().unwrap().to_hex();
    let prog = guest("x86_64", "calls");
    let run = run_guest(&dir, "qemu", &traced("x86_64", &prog, &[], &addr, &token));
    let hello = impostor.join().unwrap();
    assert!(!hello.contains(&token), "the secret crossed the socket");
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr_text());
    let qemu_lines = lines(&run.stderr);
    assert_eq!(qemu_lines.len(), 1, "{qemu_lines:?}");
    assert!(qemu_lines[0].contains("could not prove"), "{qemu_lines:?}");
    assert!(run.stdout.is_empty(), "the program ran without its client");
}

/// Ring-like leftovers in /dev/shm naming `pid`.
fn shm_files_of(pid: u32) -> Vec<String> {
    fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(&format!("-{pid}-")))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_killed_qemu_leaves_nothing_behind_and_is_counted() {
    let dir = RunDir::new();
    let prog = guest("x86_64", "sortcrc");
    // -v: the client logs each new stream, so we know the trace started.
    let mut client = DumpClient::start_args(&dir, "client", &["-v", "--only", "Y"]);
    let cmd = traced(
        "x86_64",
        &prog,
        &["100000", "20"],
        &client.addr,
        &client.token,
    );
    let mut qemu = spawn_guest(&dir, "qemu", &cmd);
    let pid = qemu.id();
    let start = Instant::now();
    while !fs::read_to_string(dir.file("client.client.stderr"))
        .unwrap_or_default()
        .contains("cannoli-dump: thread tid ")
    {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no stream began"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: plain kill of our own child.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let st = qemu
        .wait_timeout(Duration::from_secs(120))
        .expect("QEMU died");
    assert_eq!(st.signal(), Some(libc::SIGKILL));
    let (cst, err) = client.wait(Duration::from_secs(120));
    assert_eq!(cst.code(), Some(3), "{err}");
    assert!(err.contains("cut short"), "{err}");
    assert_eq!(shm_files_of(pid), Vec::<String>::new());
}

/// The launch mode's socket directory: only its user may enter it. As
/// root, a process of another uid is tried for real.
#[test]
fn other_users_cannot_reach_a_launched_run() {
    let dir = RunDir::new();
    let base = PathBuf::from(format!("/tmp/cannoli-{}", unsafe { libc::geteuid() }));
    let prog = guest("x86_64", "sortcrc");
    let mut tool = Command::new(release_artifact("benchmark"))
        .arg(&prog)
        .args(["100000", "20"])
        .env_clear()
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let me = tool.id();
    let run_dir = base.join(format!("run-{me}-"));
    let start = Instant::now();
    let sock = loop {
        let found = fs::read_dir(&base).ok().and_then(|d| {
            d.flatten()
                .map(|e| e.path())
                .find(|p| p.to_string_lossy().starts_with(&*run_dir.to_string_lossy()))
        });
        if let Some(d) = found {
            let s = d.join("c.sock");
            if s.exists() {
                break s;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no run directory"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let d = sock.parent().unwrap();
    let m = fs::metadata(d).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o700, "{}", d.display());
    assert_eq!(m.uid(), unsafe { libc::geteuid() });
    assert_eq!(fs::metadata(&base).unwrap().permissions().mode() & 0o077, 0);
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(connect_as(65534, &sock), Err(libc::EACCES));
    } else {
        eprintln!("not root: the connect as another user is not tried");
    }
    let st = tool.wait().unwrap();
    assert!(st.success(), "{st}");
    assert!(!d.exists(), "the run directory stays after the run");
}

/// Connects to the Unix socket `path` from a child process running as
/// `uid`; the errno of the connect, or Ok.
fn connect_as(uid: u32, path: &Path) -> Result<(), i32> {
    // Everything the child needs is made before the fork: after it, only
    // async-signal-safe calls.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_encoded_bytes();
    assert!(bytes.len() < addr.sun_path.len());
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: the child only calls setgroups/setgid/setuid/socket/connect
    // and _exit, all async-signal-safe, on memory prepared above.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0);
        if pid == 0 {
            let rc = if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(uid) != 0
                || libc::setuid(uid) != 0
            {
                200
            } else {
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                if libc::connect(
                    fd,
                    &addr as *const libc::sockaddr_un as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
                ) == 0
                {
                    0
                } else {
                    *libc::__errno_location()
                }
            };
            libc::_exit(rc);
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        assert!(libc::WIFEXITED(status));
        match libc::WEXITSTATUS(status) {
            0 => Ok(()),
            200 => panic!("could not become uid {uid}"),
            e => Err(e),
        }
    }
}
