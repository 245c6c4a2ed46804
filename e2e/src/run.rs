// SPDX-License-Identifier: GPL-2.0-or-later
//! Running guests under identical conditions: an empty environment, the
//! same absolute program path and argv, the same cwd, stdin `/dev/null`,
//! stdout/stderr to regular files, the same `-seed`, and the host's address
//! space randomisation off (see [`GuestCmd`]); with QEMU's plugins, bare, or
//! with `-cannoli` and a `cannoli-dump` client.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::dump::LISTENING;
pub use crate::lines::tail;
use crate::locate::{
    dump_client, jitter_lib, qemu_builds, Plugin, QEMU_COMMON_ARGS, QEMU_ENV, QEMU_SEED_ARGS,
};

/// Environment variable naming a directory: if set, run directories are
/// kept (and also whenever a test panics).
pub const KEEP_ENV: &str = "CANNOLI_E2E_KEEP";

/// Default limit on one QEMU or client run; `CANNOLI_E2E_TIMEOUT` (seconds)
/// overrides it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Limit for one run.
pub fn timeout() -> Duration {
    std::env::var("CANNOLI_E2E_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_TIMEOUT)
}

/// A fresh directory under the system temp dir, removed on drop unless the
/// test is panicking or `CANNOLI_E2E_KEEP` is set.
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    pub fn new() -> RunDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("cannoli-e2e-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        RunDir { path }
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Default for RunDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os(KEEP_ENV).is_some() {
            eprintln!("e2e: keeping {}", self.path.display());
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// Kills the child on drop unless it was waited for.
pub struct ChildGuard {
    child: Option<Child>,
    what: String,
}

impl ChildGuard {
    pub fn new(child: Child, what: impl Into<String>) -> Self {
        ChildGuard {
            child: Some(child),
            what: what.into(),
        }
    }
    pub fn id(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }
    pub fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("child already reaped")
    }
    /// Waits at most `limit`; on time-out kills the child and returns `None`.
    pub fn wait_timeout(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        let mut nap = Duration::from_millis(1);
        loop {
            let child = self.child.as_mut().expect("child already reaped");
            match child.try_wait() {
                Ok(Some(st)) => {
                    self.child = None;
                    return Some(st);
                }
                Ok(None) => {}
                Err(e) => panic!("waiting for {}: {e}", self.what),
            }
            if start.elapsed() >= limit {
                self.kill();
                return None;
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(50));
        }
    }
    /// Kills and reaps the child (if still there).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What to run: `<qemu> <common args> <qemu_args> <prog> <args>`, where the
/// common args are [`QEMU_COMMON_ARGS`], with [`QEMU_ENV`] and the host's
/// address space randomisation off (as `setarch -R` does).
///
/// Why randomisation off rather than QEMU's `-R`: a 64-bit guest without
/// `-R` gets its stack and mmaps where the host's `mmap` puts them, which
/// with randomisation on differs from run to run, so no two runs could be
/// compared address by address. `-R` would hide that, but it also gives the
/// guest a layout it does not have in real use; with randomisation off the
/// guest is traced in its real layout, and every run (plain, plugin,
/// cannoli) must produce the same one.
#[derive(Debug, Clone)]
pub struct GuestCmd {
    pub qemu: PathBuf,
    /// [`QEMU_COMMON_ARGS`] (or [`QEMU_SEED_ARGS`], see [`GuestCmd::unpinned`]).
    pub common_args: Vec<&'static str>,
    pub qemu_args: Vec<OsString>,
    pub prog: PathBuf,
    pub args: Vec<String>,
    /// The whole environment of QEMU (it is cleared first): [`QEMU_ENV`]
    /// and what the run adds.
    pub env: Vec<(String, String)>,
    /// RLIMIT_NOFILE (soft, hard) QEMU starts with, if not the test's.
    pub nofile: Option<(u64, u64)>,
}

impl GuestCmd {
    /// `arch` is the guest's architecture (the common arguments are the
    /// same for all of them today).
    pub fn new(_arch: &str, qemu: PathBuf, prog: &Path, args: &[&str]) -> Self {
        GuestCmd {
            qemu,
            common_args: QEMU_COMMON_ARGS.to_vec(),
            qemu_args: Vec::new(),
            prog: prog.to_path_buf(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: QEMU_ENV
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            nofile: None,
        }
    }
    /// [`QEMU_ENV`] visible to the guest too (no `-U`), so that a QEMU the
    /// guest `execve`s (cannoli runs the new program under a new QEMU, with
    /// the guest's environment) also gets it. The guest's environment is
    /// then `QEMU_ENV`, in every run that is compared with this one.
    pub fn env_shared_with_guest(mut self) -> Self {
        self.common_args = QEMU_SEED_ARGS.to_vec();
        self
    }
    /// Without [`QEMU_ENV`] (and the `-U` that hides it): QEMU allocates
    /// as it does by default, and a 64-bit guest's layout may be either of
    /// the two its race gives. For the test of that layout itself.
    pub fn unpinned(mut self) -> Self {
        self.common_args = QEMU_SEED_ARGS.to_vec();
        self.env
            .retain(|(k, _)| !QEMU_ENV.iter().any(|(e, _)| e == k));
        self
    }
    pub fn qemu_arg(mut self, a: impl Into<OsString>) -> Self {
        self.qemu_args.push(a.into());
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.to_string(), v.to_string()));
        self
    }
    /// Starts QEMU with these descriptor limits (as `ulimit -Sn soft -Hn
    /// hard` would: the hard one may only be lowered) and with no
    /// descriptor but 0, 1 and 2 (the test process's others, such as
    /// cargo's jobserver pipe, are closed at the exec): a guest that looks
    /// at its descriptors finds the same on any machine.
    pub fn nofile(mut self, soft: u64, hard: u64) -> Self {
        self.nofile = Some((soft, hard));
        self
    }
    /// The full argument vector after the QEMU executable.
    pub fn argv(&self) -> Vec<OsString> {
        let mut v: Vec<OsString> = self.common_args.iter().map(OsString::from).collect();
        v.extend(self.qemu_args.iter().cloned());
        v.push(self.prog.clone().into_os_string());
        v.extend(self.args.iter().map(OsString::from));
        v
    }
    /// Shell-like rendering for messages.
    pub fn display(&self) -> String {
        let mut s = String::from("env -i ");
        for (k, v) in &self.env {
            s.push_str(&format!("{k}={v} "));
        }
        s.push_str("setarch -R ");
        s.push_str(&self.qemu.display().to_string());
        for a in self.argv() {
            s.push(' ');
            s.push_str(&a.to_string_lossy());
        }
        s
    }
}

/// Result of one guest run.
#[derive(Debug)]
pub struct GuestRun {
    pub status: ExitStatus,
    /// The guest's stdout.
    pub stdout: Vec<u8>,
    /// The guest's stderr (QEMU's own messages land here too).
    pub stderr: Vec<u8>,
    pub cmdline: String,
}

impl GuestRun {
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
    /// Panics unless QEMU exited with status 0.
    pub fn assert_success(&self) {
        assert!(
            self.status.success(),
            "`{}` failed: {}\n--- stderr ---\n{}",
            self.cmdline,
            self.status,
            tail(&self.stderr_text(), 40)
        );
    }
}

/// An input file for programs that read text (`sha256sum`, `sort`):
/// `lines` lines of pseudo-random words, the same on every run.
pub fn words(lines: usize) -> Vec<u8> {
    let mut x = 0x2545_f491u32;
    let mut out = Vec::new();
    for i in 0..lines {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        out.extend_from_slice(format!("{:08x} line {i} {}\n", x, x % 977).as_bytes());
    }
    out
}

/// Starts `cmd` with a cleared environment, cwd `dir`, stdin from
/// /dev/null and stdout/stderr to `<tag>.stdout` / `<tag>.stderr` in `dir`.
pub fn spawn_guest(dir: &RunDir, tag: &str, cmd: &GuestCmd) -> ChildGuard {
    let stdout = File::create(dir.file(&format!("{tag}.stdout"))).expect("create stdout file");
    let stderr = File::create(dir.file(&format!("{tag}.stderr"))).expect("create stderr file");
    let mut c = Command::new(&cmd.qemu);
    c.args(cmd.argv())
        .env_clear()
        .envs(cmd.env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    no_aslr(&mut c);
    if let Some((soft, hard)) = cmd.nofile {
        with_nofile(&mut c, soft, hard);
    }
    let child = c
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `{}`: {e}", cmd.display()));
    ChildGuard::new(child, cmd.display())
}

/// Makes `c` start its program with the host's address space randomisation
/// off (`ADDR_NO_RANDOMIZE`, what `setarch -R` sets). The flag is inherited
/// by children and kept across `execve`, so a guest's `fork`/`execve` (a
/// new QEMU) runs the same way.
pub fn no_aslr(c: &mut Command) -> &mut Command {
    // SAFETY: personality(2) is a plain system call, async-signal-safe, and
    // touches no memory of the parent.
    unsafe {
        c.pre_exec(|| {
            let cur = libc::personality(0xffff_ffff);
            if cur == -1
                || libc::personality(
                    (cur as libc::c_ulong) | libc::ADDR_NO_RANDOMIZE as libc::c_ulong,
                ) == -1
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Makes `c` start its program with RLIMIT_NOFILE (soft, hard) and only
/// descriptors 0, 1 and 2 (see [`GuestCmd::nofile`]).
pub fn with_nofile(c: &mut Command, soft: u64, hard: u64) -> &mut Command {
    // SAFETY: setrlimit(2) and close_range(2) are plain system calls,
    // async-signal-safe, and touch no memory of the parent. close_range
    // only marks descriptors close-on-exec, so std's own exec error pipe
    // (close-on-exec already) keeps working.
    unsafe {
        c.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0
                || libc::syscall(
                    libc::SYS_close_range,
                    3u32,
                    u32::MAX,
                    libc::CLOSE_RANGE_CLOEXEC,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Waits for a run started by [`spawn_guest`] and collects its outputs.
pub fn finish_guest(dir: &RunDir, tag: &str, cmd: &GuestCmd, mut child: ChildGuard) -> GuestRun {
    let limit = timeout();
    let status = child.wait_timeout(limit).unwrap_or_else(|| {
        let err = fs::read_to_string(dir.file(&format!("{tag}.stderr"))).unwrap_or_default();
        panic!(
            "`{}` did not finish within {limit:?}; killed.\n--- stderr ---\n{}",
            cmd.display(),
            tail(&err, 40)
        )
    });
    GuestRun {
        status,
        stdout: fs::read(dir.file(&format!("{tag}.stdout"))).unwrap_or_default(),
        stderr: fs::read(dir.file(&format!("{tag}.stderr"))).unwrap_or_default(),
        cmdline: cmd.display(),
    }
}

/// Runs `cmd` to completion (see [`spawn_guest`]).
pub fn run_guest(dir: &RunDir, tag: &str, cmd: &GuestCmd) -> GuestRun {
    let child = spawn_guest(dir, tag, cmd);
    finish_guest(dir, tag, cmd, child)
}

/// Runs `prog args` under the patched QEMU with one ground-truth plugin,
/// logging to `<tag>.log` in `dir`; returns the run and the log's path.
pub fn run_plugin(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    plugin: Plugin,
    prog: &Path,
    args: &[&str],
) -> (GuestRun, PathBuf) {
    let log = dir.file(&format!("{tag}.log"));
    let run = run_guest(dir, tag, &plugin_cmd(arch, plugin, prog, args, &log));
    (run, log)
}

/// `qemu-<arch> <common args> -plugin <plugin> -d plugin -D <log> prog args`
/// (the patched QEMU).
pub fn plugin_cmd(arch: &str, plugin: Plugin, prog: &Path, args: &[&str], log: &Path) -> GuestCmd {
    plugin_cmd_logging(arch, plugin, prog, args, log, "plugin")
}

/// [`plugin_cmd`] with `-d plugin,page`: the log also holds the guest's
/// address space layout (see [`crate::pages`]).
pub fn paged_plugin_cmd(
    arch: &str,
    plugin: Plugin,
    prog: &Path,
    args: &[&str],
    log: &Path,
) -> GuestCmd {
    plugin_cmd_logging(arch, plugin, prog, args, log, "plugin,page")
}

fn plugin_cmd_logging(
    arch: &str,
    plugin: Plugin,
    prog: &Path,
    args: &[&str],
    log: &Path,
    what: &str,
) -> GuestCmd {
    let q = qemu_builds();
    let mut spec = q.plugin(plugin).into_os_string();
    spec.push(plugin.options());
    GuestCmd::new(arch, q.qemu(arch), prog, args)
        .qemu_arg("-plugin")
        .qemu_arg(spec)
        .qemu_arg("-d")
        .qemu_arg(what)
        .qemu_arg("-D")
        .qemu_arg(log)
}

/// The ground-truth plugins, in the order [`with_ground_plugins`] loads them.
pub const GROUND_PLUGINS: [Plugin; 3] = [Plugin::Insn, Plugin::Execlog, Plugin::Mem];

/// `cmd` with libinsn, libexeclog and libmem (`print-accesses=true`) all
/// loaded, logging to `log` if given (else silent: QEMU drops plugin output
/// without `-d plugin`). Parse the log with
/// [`crate::plugins::parse_combined`].
///
/// Why all at once: a plugin is a shared object that QEMU maps before the
/// guest, and for a 64-bit PIE guest that moves where the program (and its
/// brk heap) is loaded, so that the guest even executes other instructions.
/// Runs compared with each other must then load the same plugins, cannoli's
/// runs included (silent there).
pub fn with_ground_plugins(mut cmd: GuestCmd, log: Option<&Path>) -> GuestCmd {
    let q = qemu_builds();
    for p in GROUND_PLUGINS {
        let mut spec = q.plugin(p).into_os_string();
        spec.push(p.options());
        cmd = cmd.qemu_arg("-plugin").qemu_arg(spec);
    }
    if let Some(log) = log {
        cmd = cmd
            .qemu_arg("-d")
            .qemu_arg("plugin")
            .qemu_arg("-D")
            .qemu_arg(log);
    }
    cmd
}

/// Runs `prog args` under QEMU (`qemu` is the plain or the patched
/// `qemu-<arch>`) without plugins or cannoli.
pub fn run_bare(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    qemu: PathBuf,
    prog: &Path,
    args: &[&str],
) -> GuestRun {
    run_guest(dir, tag, &GuestCmd::new(arch, qemu, prog, args))
}

/// A running `cannoli-dump`.
pub struct DumpClient {
    pub child: ChildGuard,
    /// The address it listens on, from its `listening` line.
    pub addr: String,
    /// The run's secret it was given (`CANNOLI_TOKEN`), for QEMU.
    pub token: String,
    /// Its `--out` file.
    pub out: PathBuf,
    pub(crate) stderr_path: PathBuf,
    pub(crate) stdout_rest: Option<std::thread::JoinHandle<Vec<u8>>>,
}

impl DumpClient {
    /// Starts `cannoli-dump --listen 127.0.0.1:0 --out <tag>.dump --threads N`
    /// and waits for its `listening` line.
    pub fn start(dir: &RunDir, tag: &str, threads: usize) -> DumpClient {
        DumpClient::start_args(dir, tag, &["--threads", &threads.to_string()])
    }

    /// Starts `cannoli-dump --listen unix:<dir>/<tag>.sock --out <tag>.dump
    /// <args>` with a fresh `CANNOLI_TOKEN` and waits (at most 60 s) for its
    /// `listening` line. `args` may name another `--listen` (TCP, say).
    pub fn start_args(dir: &RunDir, tag: &str, args: &[&str]) -> DumpClient {
        let exe = dump_client();
        let out = dir.file(&format!("{tag}.dump"));
        let stderr_path = dir.file(&format!("{tag}.client.stderr"));
        let stderr = File::create(&stderr_path).expect("create client stderr file");
        let token = cannoli::wire::Token::generate()
            .expect("random token")
            .to_hex();
        let sock = dir.file(&format!("{tag}.sock"));
        // A Unix socket path has at most 107 bytes; TCP otherwise.
        let listen = match sock.to_str() {
            Some(s) if s.len() < 100 => format!("unix:{s}"),
            _ => "127.0.0.1:0".to_string(),
        };
        let child = Command::new(&exe)
            .args(["--listen", &listen, "--out"])
            .arg(&out)
            .args(args)
            .env("CANNOLI_TOKEN", &token)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
        let mut child = ChildGuard::new(child, format!("{} ({tag})", exe.display()));
        let stdout = child.child_mut().stdout.take().expect("piped stdout");
        // Read the first line on a helper thread so a silent client cannot
        // hang the test; the thread then drains the rest of stdout.
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut first = String::new();
            let res = r.read_line(&mut first).map(|_| first);
            let _ = tx.send(res);
            let mut rest = Vec::new();
            let _ = r.read_to_end(&mut rest);
            rest
        });
        let first = rx.recv_timeout(Duration::from_secs(60));
        let read_err = |why: String, child: &mut ChildGuard| -> ! {
            child.kill();
            let err = fs::read_to_string(&stderr_path).unwrap_or_default();
            panic!(
                "cannoli-dump {} did not announce its address: {why}\n--- its stderr ---\n{}",
                args.join(" "),
                tail(&err, 40)
            )
        };
        let line = match first {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => read_err(format!("reading its stdout: {e}"), &mut child),
            Err(_) => read_err("no `listening` line within 60 s".into(), &mut child),
        };
        let addr = match line.trim_end().strip_prefix(LISTENING) {
            Some(a) if !a.is_empty() => a.to_string(),
            _ => read_err(
                format!("first stdout line was {line:?}, expected `listening <addr>`"),
                &mut child,
            ),
        };
        DumpClient {
            child,
            addr,
            token,
            out,
            stderr_path,
            stdout_rest: Some(reader),
        }
    }

    /// Waits for the client to exit (at most `limit`); returns its status and
    /// stderr. Panics on time-out (after killing it).
    pub fn wait(&mut self, limit: Duration) -> (ExitStatus, String) {
        let st = self.child.wait_timeout(limit);
        let err = fs::read_to_string(&self.stderr_path).unwrap_or_default();
        if let Some(h) = self.stdout_rest.take() {
            let _ = h.join();
        }
        match st {
            Some(st) => (st, err),
            None => panic!(
                "cannoli-dump did not exit within {limit:?} after QEMU finished; killed.\n--- its stderr ---\n{}",
                tail(&err, 40)
            ),
        }
    }

    /// After QEMU's run `guest`: waits for the client to finish promptly (not
    /// long if QEMU failed: it may never have connected), then returns its
    /// status and stderr. Panics on time-out (after killing it).
    pub fn finish(&mut self, guest: &GuestRun) -> (ExitStatus, String) {
        let limit = if guest.status.success() {
            timeout()
        } else {
            Duration::from_secs(10)
        };
        let st = self.child.wait_timeout(limit);
        let client_stderr = self.kill();
        let client_status = st.unwrap_or_else(|| {
            panic!(
                "cannoli-dump did not exit within {limit:?} after `{}` exited with {}; killed.\n\
                 --- QEMU stderr ---\n{}\n--- client stderr ---\n{}",
                guest.cmdline,
                guest.status,
                tail(&guest.stderr_text(), 20),
                tail(&client_stderr, 20)
            )
        });
        (client_status, client_stderr)
    }

    /// Kills the client and returns its stderr so far.
    pub fn kill(&mut self) -> String {
        self.child.kill();
        if let Some(h) = self.stdout_rest.take() {
            let _ = h.join();
        }
        fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

/// Result of one cannoli run.
pub struct CannoliRun {
    pub guest: GuestRun,
    pub client_status: ExitStatus,
    pub client_stderr: String,
    /// The dump file.
    pub dump: PathBuf,
}

impl CannoliRun {
    /// Panics unless QEMU and the client both exited 0.
    pub fn assert_success(&self) {
        assert_traced_success(&self.guest, &self.client_status, &self.client_stderr);
    }
}

/// Panics unless QEMU (`guest`) and the client both exited 0.
pub fn assert_traced_success(guest: &GuestRun, client_status: &ExitStatus, client_stderr: &str) {
    guest.assert_success();
    assert!(
        client_status.success(),
        "cannoli-dump failed: {}\n--- its stderr ---\n{}",
        client_status,
        tail(client_stderr, 40)
    );
}

/// Runs `prog args` under `qemu -cannoli libjitter_always.so`, traced by a
/// fresh `cannoli-dump --threads N`. The QEMU's environment is only
/// `CANNOLI_ADDR` (the patched QEMU hides it from the guest).
pub fn run_cannoli(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
    threads: usize,
) -> CannoliRun {
    let q = qemu_builds();
    let jitter = jitter_lib();
    let mut client = DumpClient::start(dir, tag, threads);
    let cmd = GuestCmd::new(arch, q.qemu(arch), prog, args)
        .qemu_arg("-cannoli")
        .qemu_arg(jitter)
        .env("CANNOLI_ADDR", &client.addr)
        .env("CANNOLI_TOKEN", &client.token);
    let guest = run_guest(dir, tag, &cmd);
    // QEMU is gone: the client has to finish promptly.
    let (client_status, client_stderr) = client.finish(&guest);
    CannoliRun {
        guest,
        client_status,
        client_stderr,
        dump: client.out.clone(),
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on (bound, then released).
pub fn unused_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

/// `c.output()` for a program this test process has just written (a copied
/// tool): retried while it is "text file busy". Another test thread's
/// fork may still hold the file's write descriptor for the moment between
/// its fork and exec (close-on-exec closes it only then), and exec of a
/// file open for writing fails with ETXTBSY.
pub fn output_of_fresh_copy(c: &mut Command) -> std::io::Result<std::process::Output> {
    while_text_busy(|| c.output())
}

/// `start()`, retried while it fails with "text file busy" (see
/// [`output_of_fresh_copy`]).
fn while_text_busy<T>(mut start: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    let mut tries = 0;
    loop {
        match start() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// What a live tool printed while the program it traced waited for a line
/// of input, and what it printed after ([`line_before_input`]).
pub struct WhileWaiting {
    /// The tool's first line of stdout that was wanted, read before the
    /// program could go on; `None`: none came within [`timeout`].
    pub seen: Option<String>,
    /// The lines before it.
    pub before: Vec<String>,
    /// The lines after it.
    pub rest: Vec<String>,
    pub status: ExitStatus,
    pub stderr: String,
}

/// Runs `c`, a tool tracing a program that reads a line from stdin before
/// it goes on (busybox `sh -c 'read x; ...'`, `head -n 1`), and waits for
/// a line of the tool's stdout that `wanted` picks; only then writes `go`
/// to the program's stdin. So whether the tool's output is live is told by
/// the order of events, never by a time: a tool that held its lines until
/// the end shows none while the program waits, and the wait ends at
/// [`timeout`] (a hang guard; the input is written then anyway).
pub fn line_before_input(c: &mut Command, wanted: impl Fn(&str) -> bool) -> WhileWaiting {
    use std::io::Write;
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child =
        while_text_busy(|| c.spawn()).unwrap_or_else(|e| panic!("cannot start {c:?}: {e}"));
    let stdout = child.stdout.take().expect("piped");
    let (tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + timeout();
    let mut before = Vec::new();
    let mut seen = None;
    while let Ok(l) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if wanted(&l) {
            seen = Some(l);
            break;
        }
        before.push(l);
    }
    let mut stdin = child.stdin.take().expect("piped");
    let _ = stdin.write_all(b"go\n");
    drop(stdin);
    let out = child.wait_with_output().expect("the tool ran");
    reader
        .join()
        .expect("the reader ends with the tool's stdout");
    WhileWaiting {
        seen,
        before,
        rest: lines.try_iter().collect(),
        status: out.status,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
