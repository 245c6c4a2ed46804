// SPDX-License-Identifier: GPL-2.0-or-later
//! One-command launching (the `launch` crate, used by the examples):
//! `symbolizer PROGRAM ARGS...` starts the client, finds the patched QEMU and
//! the hook library, runs the program and exits with its status; errors are
//! one line; the classic two-terminal mode still works.
//!
//! Needs `cargo build --release` first (target/release/symbolizer,
//! libsymbolizer.so, benchmark, libbenchmark.so) and the QEMU builds.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use e2e::*;

/// One run of a tool binary.
struct ToolRun {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    cmdline: String,
}

impl ToolRun {
    fn code(&self) -> i32 {
        self.status.code().unwrap_or_else(|| {
            panic!(
                "`{}` died of {} instead of exiting.\n--- stderr ---\n{}",
                self.cmdline,
                self.status,
                tail(&self.stderr, 30)
            )
        })
    }

    fn assert_code(&self, want: i32) {
        assert_eq!(
            self.code(),
            want,
            "`{}` exited with the wrong status.\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.cmdline,
            tail(&self.stdout, 20),
            tail(&self.stderr, 30)
        );
    }

    /// Exactly one stderr line, satisfying `ok` (lowercased).
    fn assert_one_line_error(&self, ok: impl Fn(&str) -> bool) {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert!(
            lines.len() == 1 && ok(&lines[0].to_lowercase()),
            "`{}`: expected one stderr line naming the problem, got:\n{}",
            self.cmdline,
            self.stderr
        );
        assert!(
            self.stdout.is_empty(),
            "`{}` printed on stdout:\n{}",
            self.cmdline,
            self.stdout
        );
    }
}

/// `target/release/<tool> args...` with a clean environment (only `PATH`,
/// and `CANNOLI_QEMU_BUILD` if the caller set it, as the harness allows),
/// plus `env`; cwd `dir`, stdout and stderr to files.
fn command(
    dir: &RunDir,
    tag: &str,
    tool: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Command, String) {
    let exe = release_artifact(tool);
    let mut c = Command::new(&exe);
    c.args(args)
        .env_clear()
        .current_dir(dir.path())
        .stdin(Stdio::null());
    if let Some(p) = std::env::var_os("PATH") {
        c.env("PATH", p);
    }
    if let Some(b) = std::env::var_os("CANNOLI_QEMU_BUILD") {
        c.env("CANNOLI_QEMU_BUILD", b);
    }
    c.envs(env.iter().copied());
    c.stdout(fs::File::create(dir.file(&format!("{tag}.stdout"))).unwrap());
    c.stderr(fs::File::create(dir.file(&format!("{tag}.stderr"))).unwrap());
    let mut line = String::new();
    for (k, v) in env {
        line += &format!("{k}={v} ");
    }
    line += &exe.display().to_string();
    for a in args {
        line += &format!(" {a}");
    }
    (c, line)
}

fn spawn_tool(
    dir: &RunDir,
    tag: &str,
    tool: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (ChildGuard, String) {
    let (mut c, line) = command(dir, tag, tool, args, env);
    let child = c
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `{line}`: {e}"));
    (ChildGuard::new(child, line.clone()), line)
}

fn finish_tool(dir: &RunDir, tag: &str, mut child: ChildGuard, cmdline: String) -> ToolRun {
    let limit = timeout();
    let status = child.wait_timeout(limit);
    let stdout = fs::read_to_string(dir.file(&format!("{tag}.stdout"))).unwrap_or_default();
    let stderr = fs::read_to_string(dir.file(&format!("{tag}.stderr"))).unwrap_or_default();
    let status = status.unwrap_or_else(|| {
        panic!(
            "`{cmdline}` did not finish within {limit:?}; killed.\n--- stderr ---\n{}",
            tail(&stderr, 30)
        )
    });
    ToolRun {
        status,
        stdout,
        stderr,
        cmdline,
    }
}

fn run_tool(dir: &RunDir, tag: &str, tool: &str, args: &[&str], env: &[(&str, &str)]) -> ToolRun {
    let (child, line) = spawn_tool(dir, tag, tool, args, env);
    finish_tool(dir, tag, child, line)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// The symbolizer's summary says the whole stream arrived.
fn assert_complete(run: &ToolRun) {
    let summary = run
        .stderr
        .lines()
        .find(|l| l.starts_with("symbolizer: ") && l.contains(" events in "))
        .unwrap_or_else(|| {
            panic!(
                "`{}`: no summary line.\n--- stderr ---\n{}",
                run.cmdline, run.stderr
            )
        });
    // `cannoli::Stats::loss_summary`: `0 lost` exactly when the trace is
    // complete, else `INCOMPLETE: ...`.
    assert!(
        summary.contains("from 1 guest thread,")
            && summary.ends_with(", 0 lost")
            && !summary.contains("INCOMPLETE"),
        "`{}`: the trace is not complete: {summary}",
        run.cmdline
    );
}

#[test]
fn one_command_traces_and_returns_the_program_output() {
    let dir = RunDir::new();
    let prog = guest("mipsel", "calls");
    let trace = dir.file("trace.txt");
    let run = run_tool(
        &dir,
        "calls",
        "symbolizer",
        &["--color", "never", "-o", s(&trace), s(&prog)],
        &[],
    );
    run.assert_code(0);
    assert_complete(&run);
    let want = expected_stdout("calls").expect("tests/programs/calls.expected");
    assert_eq!(
        run.stdout.as_bytes(),
        &want[..],
        "the program's output differs under the launcher"
    );
    let text = fs::read_to_string(&trace).unwrap();
    assert!(
        text.starts_with("== pid "),
        "the trace does not start with its thread header"
    );
    for sym in ["__start+0x0", "main+0x0", "fib+0x"] {
        assert!(text.contains(sym), "the trace has no {sym}");
    }
}

fn exit_status(arch: &str) {
    let dir = RunDir::new();
    let prog = guest(arch, "exitcode");
    let run = run_tool(
        &dir,
        "default",
        "symbolizer",
        &["-o", "/dev/null", s(&prog)],
        &[],
    );
    run.assert_code(3);
    assert_eq!(run.stdout, "exitcode: argc 1\n");
    assert_complete(&run);

    // Arguments reach the program untouched, options included.
    let run = run_tool(
        &dir,
        "args",
        "symbolizer",
        &[
            "--no-mem",
            "-o",
            "/dev/null",
            s(&prog),
            "42",
            "0",
            "--limit",
            "-o",
        ],
        &[],
    );
    run.assert_code(42);
    assert_eq!(run.stdout, "exitcode: argc 5 [42] [0] [--limit] [-o]\n");

    let run = run_tool(
        &dir,
        "bench",
        "benchmark",
        &["--threads", "2", s(&prog), "0"],
        &[],
    );
    run.assert_code(0);
    // The summary, then the pc checksum line.
    let summary = run
        .stdout
        .lines()
        .find(|l| l.contains(" events in "))
        .unwrap_or("");
    assert!(
        run.stdout.starts_with("exitcode: argc 2 [0]\n")
            && summary.ends_with(" 0 lost")
            && run
                .stdout
                .lines()
                .last()
                .unwrap_or("")
                .starts_with("pc checksum: 0x"),
        "benchmark output:\n{}",
        run.stdout
    );
}

#[test]
fn exit_status_mipsel() {
    exit_status("mipsel");
}

#[test]
fn exit_status_riscv64() {
    exit_status("riscv64");
}

#[test]
fn a_guest_killed_by_a_signal_exits_128_plus_the_signal() {
    let dir = RunDir::new();
    for arch in ARCHES {
        let prog = guest(arch, "crash");
        let run = run_tool(
            &dir,
            &format!("crash-{arch}"),
            "symbolizer",
            &["-o", "/dev/null", s(&prog)],
            &[],
        );
        // QEMU re-raises the guest's fatal signal on itself.
        let plain = Command::new(qemu_builds().qemu(arch))
            .arg(&prog)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        let sig = plain
            .signal()
            .expect("the crash program dies of a signal under QEMU");
        run.assert_code(128 + sig);
        assert_complete(&run);
    }
}

/// `exitcode.c` dynamically linked: the launcher must find Debian's cross
/// sysroot for `-L` by itself.
#[test]
fn dynamic_guests_get_the_debian_cross_sysroot() {
    let dir = RunDir::new();
    let src = workspace_root().join("tests/programs/exitcode.c");
    for (arch, cc, triple) in [
        ("mipsel", "mipsel-linux-gnu-gcc", "mipsel-linux-gnu"),
        ("riscv64", "riscv64-linux-gnu-gcc", "riscv64-linux-gnu"),
    ] {
        let exe = dir.file(&format!("exitcode-dyn-{arch}"));
        let st = Command::new(cc)
            .args(["-O2", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {cc} ({e}): run scripts/deps.sh"));
        assert!(st.success(), "{cc} failed on {}", src.display());
        let run = run_tool(
            &dir,
            &format!("dyn-{arch}"),
            "symbolizer",
            &["-o", "/dev/null", s(&exe), "5"],
            &[("CANNOLI_VERBOSE", "1")],
        );
        run.assert_code(5);
        assert_eq!(run.stdout, "exitcode: argc 2 [5]\n");
        assert!(
            run.stderr.contains(&format!(" -L /usr/{triple} -cannoli ")),
            "the QEMU command line has no -L /usr/{triple}:\n{}",
            run.stderr
        );
        assert_complete(&run);
    }
}

#[test]
fn extra_qemu_options_from_the_environment() {
    let dir = RunDir::new();
    let prog = guest("riscv64", "exitcode");
    let run = run_tool(
        &dir,
        "strace",
        "symbolizer",
        &["-o", "/dev/null", s(&prog)],
        &[("CANNOLI_QEMU_ARGS", " -strace  ")],
    );
    run.assert_code(3);
    assert!(
        run.stderr.contains("exit_group(3)"),
        "no -strace output:\n{}",
        tail(&run.stderr, 10)
    );
}

#[test]
fn qemu_from_cannoli_qemu_dir() {
    let dir = RunDir::new();
    let prog = guest("mipsel", "exitcode");
    let build = qemu_builds().qemu("mipsel").parent().unwrap().to_path_buf();
    let run = run_tool(
        &dir,
        "dir",
        "symbolizer",
        &["-o", "/dev/null", s(&prog), "9"],
        &[("CANNOLI_QEMU_DIR", s(&build)), ("CANNOLI_VERBOSE", "1")],
    );
    run.assert_code(9);
    assert!(
        run.stderr.contains(s(&build.join("qemu-mipsel"))),
        "{}",
        run.stderr
    );
}

/// The guest forks and its parent exits first: the launcher must wait for
/// the orphaned child (it is a child subreaper), process its stream too and
/// return the parent's status.
#[test]
fn a_forked_child_that_outlives_its_parent_is_waited_for() {
    let dir = RunDir::new();
    for arch in ARCHES {
        let prog = guest(arch, "orphan");
        let start = Instant::now();
        let run = run_tool(
            &dir,
            &format!("orphan-{arch}"),
            "symbolizer",
            &["-o", "/dev/null", s(&prog), "1"],
            &[],
        );
        run.assert_code(4);
        assert!(
            start.elapsed() >= Duration::from_millis(900),
            "the launcher did not wait for the child"
        );
        assert_eq!(
            run.stdout, "orphan: parent exits\norphan: child done\n",
            "the child's output is missing"
        );
        let summary = run
            .stderr
            .lines()
            .find(|l| l.contains(" events in "))
            .unwrap_or_default();
        assert!(
            summary.contains("from 2 guest threads,")
                && summary.ends_with(", 0 lost")
                && !summary.contains("INCOMPLETE"),
            "both processes' streams must be complete: {summary}\n{}",
            run.stderr
        );
    }
}

#[test]
fn missing_program_is_one_line() {
    let dir = RunDir::new();
    let run = run_tool(
        &dir,
        "missing",
        "symbolizer",
        &["/nonexistent/program", "x"],
        &[],
    );
    run.assert_code(127);
    run.assert_one_line_error(|l| {
        l.contains("/nonexistent/program") && l.contains("no such program")
    });
}

#[test]
fn non_elf_file_is_one_line() {
    let dir = RunDir::new();
    let script = dir.file("script.sh");
    fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let run = run_tool(&dir, "script", "symbolizer", &[s(&script)], &[]);
    run.assert_code(126);
    run.assert_one_line_error(|l| l.contains("script.sh") && l.contains("not an elf"));

    let text = dir.file("notes.txt");
    fs::write(&text, "just text\n").unwrap();
    fs::set_permissions(&text, fs::Permissions::from_mode(0o755)).unwrap();
    let run = run_tool(&dir, "text", "benchmark", &[s(&text)], &[]);
    run.assert_code(126);
    run.assert_one_line_error(|l| l.starts_with("benchmark: ") && l.contains("not an elf"));
}

#[test]
fn unknown_machine_is_one_line() {
    let dir = RunDir::new();
    // An ELF64 little-endian executable header for machine 0x4242.
    let mut h = vec![0u8; 64];
    h[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
    h[16] = 2; // ET_EXEC
    h[18..20].copy_from_slice(&0x4242u16.to_le_bytes());
    h[20] = 1;
    h[52] = 64;
    h[54] = 56;
    let elf = dir.file("odd.elf");
    fs::write(&elf, &h).unwrap();
    fs::set_permissions(&elf, fs::Permissions::from_mode(0o755)).unwrap();
    let run = run_tool(&dir, "odd", "symbolizer", &[s(&elf)], &[]);
    run.assert_code(126);
    run.assert_one_line_error(|l| l.contains("0x4242") && l.contains("64-bit little-endian"));
}

#[test]
fn no_qemu_for_the_arch_is_one_line() {
    let dir = RunDir::new();
    // A static s390x executable (just the header): a machine QEMU knows,
    // but no patched qemu-s390x is built.
    let mut h = vec![0u8; 64];
    h[..7].copy_from_slice(b"\x7fELF\x02\x02\x01");
    h[16..18].copy_from_slice(&2u16.to_be_bytes()); // ET_EXEC
    h[18..20].copy_from_slice(&22u16.to_be_bytes()); // EM_S390
    h[20..24].copy_from_slice(&1u32.to_be_bytes());
    h[52..54].copy_from_slice(&64u16.to_be_bytes());
    h[54..56].copy_from_slice(&56u16.to_be_bytes());
    let elf = dir.file("s390x.elf");
    fs::write(&elf, &h).unwrap();
    fs::set_permissions(&elf, fs::Permissions::from_mode(0o755)).unwrap();
    let run = run_tool(&dir, "s390x", "symbolizer", &[s(&elf)], &[]);
    run.assert_code(1);
    run.assert_one_line_error(|l| {
        l.contains("no patched qemu for s390x")
            && l.contains("qemu.env")
            && l.contains("bash scripts/build-qemu.sh")
            && l.contains("s390x-linux-user")
            && l.contains("cannoli_qemu")
    });

    let prog = guest("mipsel", "exitcode");
    let run = run_tool(
        &dir,
        "env",
        "symbolizer",
        &[s(&prog)],
        &[("CANNOLI_QEMU", "/nonexistent/qemu")],
    );
    run.assert_code(1);
    run.assert_one_line_error(|l| l.contains("mipsel") && l.contains("/nonexistent/qemu"));
}

#[test]
fn no_hook_library_is_one_line() {
    let dir = RunDir::new();
    let prog = guest("mipsel", "exitcode");
    let run = run_tool(
        &dir,
        "hooks",
        "symbolizer",
        &[s(&prog)],
        &[("CANNOLI_HOOKS", "/nonexistent/libx.so")],
    );
    run.assert_code(1);
    run.assert_one_line_error(|l| {
        l.contains("no hook library") && l.contains("/nonexistent/libx.so")
    });
}

/// The seed's way: the client in one terminal, QEMU in another.
#[test]
fn classic_two_terminal_mode_still_works() {
    let dir = RunDir::new();
    let addr = format!("127.0.0.1:{}", unused_port());
    let trace = dir.file("trace.txt");
    // The client writes the run's secret there; QEMU reads it.
    let token_file = dir.file("token");
    let (client, line) = spawn_tool(
        &dir,
        "client",
        "symbolizer",
        &["--color", "never", "-o", s(&trace)],
        &[
            ("CANNOLI_ADDR", &addr),
            ("CANNOLI_TOKEN_FILE", s(&token_file)),
        ],
    );
    let mut client = Some(client);
    // Wait until it listens (its first stderr line says so).
    let start = Instant::now();
    loop {
        let err = fs::read_to_string(dir.file("client.stderr")).unwrap_or_default();
        if err.contains(&format!(
            "symbolizer: listening on {addr}; now start QEMU with -cannoli "
        )) {
            assert!(err.contains("libsymbolizer.so"), "{err}");
            break;
        }
        if let Some(st) = client.as_mut().unwrap().child_mut().try_wait().unwrap() {
            panic!("`{line}` exited ({st}) before listening:\n{err}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "`{line}` did not listen within 30 s:\n{err}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let prog = guest("mipsel", "calls");
    let cmd = GuestCmd::new("mipsel", qemu_builds().qemu("mipsel"), &prog, &[])
        .qemu_arg("-cannoli")
        .qemu_arg(release_artifact("libsymbolizer.so"))
        .env("CANNOLI_ADDR", &addr)
        .env("CANNOLI_TOKEN_FILE", s(&token_file));
    let qemu = run_guest(&dir, "qemu", &cmd);
    qemu.assert_success();
    assert_eq!(qemu.stdout, expected_stdout("calls").unwrap());
    let run = finish_tool(&dir, "client", client.take().unwrap(), line);
    run.assert_code(0);
    assert_complete(&run);
    let text = fs::read_to_string(&trace).unwrap();
    assert!(text.contains("main+0x0"), "the trace has no main");
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

/// Whether `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
            .unwrap_or(true),
    }
}

/// Starts `symbolizer exitcode 0 600` on riscv64; returns it and QEMU's pid
/// once the guest runs (it printed its line and sleeps).
fn start_sleeper(dir: &RunDir, tag: &str) -> (ChildGuard, String, u32) {
    let prog = guest("riscv64", "exitcode");
    let (mut child, line) = spawn_tool(
        dir,
        tag,
        "symbolizer",
        &["-o", "/dev/null", s(&prog), "0", "600"],
        &[],
    );
    let start = Instant::now();
    loop {
        let out = fs::read_to_string(dir.file(&format!("{tag}.stdout"))).unwrap_or_default();
        if out.contains("exitcode: argc 3") {
            break;
        }
        if let Some(st) = child.child_mut().try_wait().unwrap() {
            panic!("`{line}` exited early ({st})");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the guest did not start within 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The launcher's child is the run's guardian, QEMU its child.
    let kids = children(child.id());
    assert_eq!(
        kids.len(),
        1,
        "the launcher should have exactly one child (the guardian): {kids:?}"
    );
    let qemu = children(kids[0]);
    assert_eq!(
        qemu.len(),
        1,
        "the guardian should have exactly one child (QEMU): {qemu:?}"
    );
    (child, line, qemu[0])
}

fn wait_gone(pid: u32, what: &str) {
    let start = Instant::now();
    while !gone(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: QEMU (pid {pid}) is still running"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_to_the_launcher_reaches_the_program() {
    let dir = RunDir::new();
    let (child, line, qemu) = start_sleeper(&dir, "term");
    // SAFETY: plain kill of our own child.
    unsafe { libc_kill(child.id() as i32, 15) };
    let run = finish_tool(&dir, "term", child, line);
    run.assert_code(128 + 15);
    wait_gone(qemu, "after SIGTERM to the launcher");
}

#[test]
fn killing_the_launcher_leaves_no_qemu_behind() {
    let dir = RunDir::new();
    let (mut child, _line, qemu) = start_sleeper(&dir, "kill");
    child.kill(); // SIGKILL: no chance to clean up; PR_SET_PDEATHSIG must do it
    wait_gone(qemu, "after SIGKILL to the launcher");
}

#[test]
fn a_bare_program_name_is_looked_up_in_path_only() {
    // As a shell does: `exitcode` in the current directory is not run
    // unless PATH says so; `./exitcode` is.
    let dir = RunDir::new();
    fs::copy(guest("x86_64", "exitcode"), dir.file("exitcode")).unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let run = run_tool(
        &dir,
        "bare",
        "symbolizer",
        &["-o", "/dev/null", "exitcode", "5"],
        &[("PATH", &path)],
    );
    run.assert_code(127);
    run.assert_one_line_error(|l| l.contains("exitcode: no such program"));
    let run = run_tool(
        &dir,
        "dot",
        "symbolizer",
        &["-o", "/dev/null", "./exitcode", "5"],
        &[],
    );
    run.assert_code(5);
    let with_dir = format!("{}:{path}", dir.path().display());
    let run = run_tool(
        &dir,
        "path",
        "symbolizer",
        &["-o", "/dev/null", "exitcode", "6"],
        &[("PATH", &with_dir)],
    );
    run.assert_code(6);
}

#[test]
fn a_planted_qemu_env_above_the_tool_is_ignored() {
    // The tool lives in <dir>/x/bin; <dir>/target/qemu.env names a "QEMU"
    // that leaves a mark. Writable by others, the file is skipped with one
    // line and the real QEMU runs; once only its owner may write it, it is
    // the nearest one and is used (which is why the check matters).
    let dir = RunDir::new();
    let bin = dir.path().join("x/bin");
    fs::create_dir_all(&bin).unwrap();
    let tool = bin.join("symbolizer");
    fs::copy(release_artifact("symbolizer"), &tool).unwrap();
    let evil = dir.path().join("evil");
    fs::create_dir_all(&evil).unwrap();
    let mark = dir.path().join("pwned");
    let fake = evil.join("qemu-x86_64");
    fs::write(
        &fake,
        format!("#!/bin/sh\ntouch '{}'\nexit 9\n", mark.display()),
    )
    .unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let planted = dir.path().join("target/qemu.env");
    fs::create_dir_all(planted.parent().unwrap()).unwrap();
    fs::write(&planted, format!("CANNOLI_QEMU_BUILD={}\n", evil.display())).unwrap();
    let prog = guest("x86_64", "exitcode");
    let run = |tag: &str| {
        let mut c = Command::new(&tool);
        c.args(["-o", "/dev/null", s(&prog), "0"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(dir.path())
            .stdin(Stdio::null());
        let out = e2e::run::output_of_fresh_copy(&mut c).unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            tag.to_string(),
        )
    };
    fs::set_permissions(&planted, fs::Permissions::from_mode(0o666)).unwrap();
    let (code, err, _) = run("open");
    assert_eq!(code, Some(0), "the real QEMU should have run:\n{err}");
    assert!(!mark.exists(), "the planted QEMU ran");
    let why: Vec<&str> = err.lines().filter(|l| l.contains("ignoring")).collect();
    assert!(
        why.len() == 1
            && why[0].contains(&planted.display().to_string())
            && why[0].contains("mode 0666"),
        "one line saying why the file is skipped:\n{err}"
    );
    fs::set_permissions(&planted, fs::Permissions::from_mode(0o644)).unwrap();
    let (code, err, _) = run("owner only");
    assert!(
        mark.exists() && err.contains("QEMU exited (status 9)"),
        "a file only its owner may write is used ({code:?}):\n{err}"
    );
}

/// Every process below `pid` (children, theirs, ...), from each process's
/// parent in `/proc/<pid>/stat`.
fn descendants(pid: u32) -> Vec<u32> {
    let mut parent: Vec<(u32, u32)> = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        if let Some(pp) = rest.split_whitespace().nth(1).and_then(|x| x.parse().ok()) {
            parent.push((p, pp));
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out.remove(0);
    out
}

/// Waits until `tag`'s stdout holds `line` (the guest got that far);
/// fails if the tool exits first.
fn wait_for_line(dir: &RunDir, tag: &str, child: &mut ChildGuard, line: &str) {
    let start = Instant::now();
    loop {
        let out = fs::read_to_string(dir.file(&format!("{tag}.stdout"))).unwrap_or_default();
        if out.contains(line) {
            return;
        }
        if let Some(st) = child.child_mut().try_wait().unwrap() {
            panic!("the tool exited early ({st}) before the guest printed {line:?}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the guest did not print {line:?} within 120 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for the tool at most `limit` (the run should end on its own).
fn finish_within(
    dir: &RunDir,
    tag: &str,
    mut child: ChildGuard,
    cmdline: String,
    limit: Duration,
    what: &str,
) -> ToolRun {
    let status = child.wait_timeout(limit);
    let stdout = fs::read_to_string(dir.file(&format!("{tag}.stdout"))).unwrap_or_default();
    let stderr = fs::read_to_string(dir.file(&format!("{tag}.stderr"))).unwrap_or_default();
    let status = status.unwrap_or_else(|| {
        panic!(
            "`{cmdline}` still ran {limit:?} after {what}; killed.\n--- stderr ---\n{}",
            tail(&stderr, 30)
        )
    });
    ToolRun {
        status,
        stdout,
        stderr,
        cmdline,
    }
}

#[test]
fn killing_the_launcher_leaves_no_forked_guest_behind() {
    // The guest forks and its parent exits; the child (another QEMU
    // process, which no PR_SET_PDEATHSIG reaches) sleeps. SIGKILL to the
    // launcher: every process of the run goes.
    let dir = RunDir::new();
    let prog = guest("x86_64", "orphan");
    let (mut child, _line) = spawn_tool(
        &dir,
        "orphan",
        "symbolizer",
        &["-o", "/dev/null", s(&prog), "600"],
        &[],
    );
    wait_for_line(&dir, "orphan", &mut child, "orphan: parent exits");
    // The parent's QEMU exits; its orphaned child stays, below the launcher.
    let start = Instant::now();
    let run = loop {
        let run = descendants(child.id());
        let qemus: Vec<u32> = run
            .iter()
            .copied()
            .filter(|&p| {
                fs::read_link(format!("/proc/{p}/exe"))
                    .is_ok_and(|e| e.to_string_lossy().contains("qemu-x86_64"))
            })
            .collect();
        if qemus.len() == 1 && run.iter().all(|&p| !gone(p) || qemus.contains(&p)) {
            break run;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "expected the orphaned child's QEMU below the launcher: {run:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill(); // SIGKILL: the launcher cannot clean up
    for p in run {
        wait_gone(p, "after SIGKILL to the launcher");
    }
}

#[test]
fn sigterm_to_the_launcher_reaches_a_guest_that_left_its_process_group() {
    // The guest forks; the child calls setsid. `kill -TERM` of the
    // launcher reaches both (as a shell's kill of a job would), so the run
    // ends, with the parent's death by SIGTERM as its status.
    let dir = RunDir::new();
    let prog = guest("x86_64", "detach");
    let (mut child, line) = spawn_tool(
        &dir,
        "term",
        "symbolizer",
        &["-o", "/dev/null", s(&prog), "fork"],
        &[],
    );
    wait_for_line(&dir, "term", &mut child, "detach: child ready");
    wait_for_line(&dir, "term", &mut child, "detach: parent ready");
    // SAFETY: plain kill of our own child.
    unsafe { libc_kill(child.id() as i32, 15) };
    let run = finish_within(
        &dir,
        "term",
        child,
        line,
        Duration::from_secs(120),
        "SIGTERM",
    );
    run.assert_code(128 + 15);
}

/// A pseudo-terminal: its master, and its slave's path.
fn pty() -> (fs::File, std::ffi::CString) {
    use std::os::fd::FromRawFd;
    // SAFETY: posix_openpt/grantpt/unlockpt/ptsname on a fresh master fd;
    // ptsname's static buffer is copied at once (this test is its only
    // user in this process).
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let name = std::ffi::CStr::from_ptr(libc::ptsname(m)).to_owned();
        (fs::File::from_raw_fd(m), name)
    }
}

#[test]
fn ctrl_c_reaches_a_guest_that_called_setsid() {
    // The launcher in a session of its own, with a pseudo-terminal as its
    // controlling terminal; the guest calls setsid, leaving the terminal's
    // process group. Ctrl-C on the terminal reaches the launcher's group
    // only; the launcher forwards it to the guest.
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let dir = RunDir::new();
    let prog = guest("x86_64", "detach");
    let (mut master, slave) = pty();
    let (mut c, line) = command(
        &dir,
        "ctrlc",
        "symbolizer",
        &["-o", "/dev/null", s(&prog)],
        &[],
    );
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        c.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Opened by a session leader without a terminal: it becomes
            // the session's controlling terminal, and the launcher's
            // group its foreground.
            let fd = libc::open(slave.as_ptr(), libc::O_RDWR);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::ioctl(fd, libc::TIOCSCTTY, 0);
            libc::dup2(fd, 0);
            libc::close(fd);
            Ok(())
        });
    }
    let mut child = ChildGuard::new(c.spawn().unwrap(), line.clone());
    wait_for_line(&dir, "ctrlc", &mut child, "detach: ready");
    master.write_all(&[0x03]).unwrap(); // Ctrl-C
    let run = finish_within(
        &dir,
        "ctrlc",
        child,
        line,
        Duration::from_secs(120),
        "Ctrl-C",
    );
    run.assert_code(128 + 2);
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
