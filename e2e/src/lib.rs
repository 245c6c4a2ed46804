// SPDX-License-Identifier: GPL-2.0-or-later
//! Helpers for cannoli's end-to-end tests.
//!
//! * locating the prerequisites: the QEMU builds (`CANNOLI_QEMU_BUILD`,
//!   `CANNOLI_QEMU_PLAIN`, else `target/qemu.env`), the guest programs
//!   (`target/guests/<arch>/<name>`, built by `scripts/build-guests.sh`), the
//!   jitter library and the `cannoli-dump` client (`target/release`);
//! * running guests under identical conditions (empty environment, same
//!   absolute program path and argv, same cwd, stdout/stderr to files, same
//!   `-seed`), with QEMU's plugins or with `-cannoli`;
//! * parsing the outputs of QEMU's `libinsn`, `libexeclog` and `libmem`
//!   plugins and of `cannoli-dump`;
//! * reporting the first difference of two long sequences with context.
//!
//! A missing prerequisite panics with a message naming what is missing and
//! the command that provides it: these tests fail, they never skip.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub mod ground;

pub mod procs;

/// Guest architectures every test covers.
pub const ARCHES: &[&str] = &["mipsel", "riscv64"];

/// Guest programs in `tests/programs/`.
pub const PROGRAMS: &[&str] = &["loops", "calls", "fnptr", "libc", "sortcrc"];

/// Options given to every QEMU run, plugin and cannoli alike, ahead of the
/// run-specific ones (see [`qemu_common_args`]).
///
/// `-seed` makes QEMU's guest randomness deterministic. Without it the 16
/// `AT_RANDOM` bytes on the initial stack differ on every run, and glibc's
/// start-up code loads them and stores the stack-protector and pointer
/// guards derived from them (and every function with a canary then loads the
/// guard), so load/store values would never match between two runs.
pub const QEMU_COMMON_ARGS: &[&str] = &["-seed", "1"];

/// Reserved guest address space given to 64-bit guests (`-R`).
///
/// 32-bit guests on a 64-bit host always get a reserved address space, in
/// which QEMU itself picks where the stack and every mmap go, so their guest
/// addresses are the same on every run. 64-bit guests by default get
/// whatever the host's (randomised) `mmap` returns: the stack of a riscv64
/// guest lands at a different 0x7f... address on each run. `-R` makes QEMU
/// allocate inside its own reservation, deterministically.
pub const RESERVED_VA_64: &str = "0x100000000";

/// The options every run of `arch` gets ahead of the run-specific ones.
pub fn qemu_common_args(arch: &str) -> Vec<&'static str> {
    let mut v = QEMU_COMMON_ARGS.to_vec();
    if arch_bits(arch) == 64 {
        v.extend(["-R", RESERVED_VA_64]);
    }
    v
}

/// Guest address width of `arch`.
pub fn arch_bits(arch: &str) -> u32 {
    match arch {
        "mipsel" | "mips" | "arm" | "armeb" | "i386" | "riscv32" | "ppc" | "sparc" | "m68k"
        | "sh4" | "hppa" | "or1k" | "microblaze" | "microblazeel" | "xtensa" | "xtensaeb"
        | "mipsn32" | "mipsn32el" => 32,
        _ => 64,
    }
}

/// Environment variable naming a directory: if set, run directories are
/// kept (and also whenever a test panics).
pub const KEEP_ENV: &str = "CANNOLI_E2E_KEEP";

/// Default limit on one QEMU or client run; `CANNOLI_E2E_TIMEOUT` (seconds)
/// overrides it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

// ---------------------------------------------------------------------------
// Locating things
// ---------------------------------------------------------------------------

/// The workspace root (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// Cargo's target directory: `CARGO_TARGET_DIR` if set, else `<root>/target`.
pub fn cargo_target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                workspace_root().join(d)
            }
        }
        _ => workspace_root().join("target"),
    }
}

/// Limit for one run.
pub fn timeout() -> Duration {
    std::env::var("CANNOLI_E2E_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_TIMEOUT)
}

/// Where the two QEMU builds are.
#[derive(Debug, Clone)]
pub struct QemuBuilds {
    /// The patched build (`-cannoli`, and the plugins used as ground truth).
    pub build: PathBuf,
    /// An unpatched build of the same QEMU version.
    pub plain: PathBuf,
}

/// QEMU's plugins used as ground truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugin {
    /// `tests/tcg/plugins/libinsn.so`: instruction counts.
    Insn,
    /// `contrib/plugins/libexeclog.so`: one line per executed instruction.
    Execlog,
    /// `tests/tcg/plugins/libmem.so,print-accesses=true`: one line per access.
    Mem,
}

impl Plugin {
    /// Path of the plugin library relative to the build directory.
    pub fn rel_path(self) -> &'static str {
        match self {
            Plugin::Insn => "tests/tcg/plugins/libinsn.so",
            Plugin::Execlog => "contrib/plugins/libexeclog.so",
            Plugin::Mem => "tests/tcg/plugins/libmem.so",
        }
    }
    /// Plugin arguments appended to the library path (`,a=b,...`).
    pub fn options(self) -> &'static str {
        match self {
            Plugin::Insn | Plugin::Execlog => "",
            Plugin::Mem => ",print-accesses=true",
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Plugin::Insn => "insn",
            Plugin::Execlog => "execlog",
            Plugin::Mem => "mem",
        }
    }
}

const QEMU_HOWTO: &str =
    "set CANNOLI_QEMU_BUILD and CANNOLI_QEMU_PLAIN, or provide target/qemu.env \
     with the lines CANNOLI_QEMU_BUILD=/abs/path/build-cannoli and \
     CANNOLI_QEMU_PLAIN=/abs/path/build-plain (written by the QEMU build step)";

fn parse_env_file(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(v);
            out.push((k.trim().to_string(), v.to_string()));
        }
    }
    out
}

fn locate_qemu() -> Result<QemuBuilds, String> {
    let env_file = workspace_root().join("target/qemu.env");
    let file_vars = match fs::read_to_string(&env_file) {
        Ok(t) => parse_env_file(&t),
        Err(_) => Vec::new(),
    };
    let get = |key: &str| -> Option<PathBuf> {
        if let Some(v) = std::env::var_os(key).filter(|v| !v.is_empty()) {
            return Some(PathBuf::from(v));
        }
        file_vars
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| PathBuf::from(v))
    };
    let mut missing = Vec::new();
    let build = get("CANNOLI_QEMU_BUILD");
    let plain = get("CANNOLI_QEMU_PLAIN");
    if build.is_none() {
        missing.push("CANNOLI_QEMU_BUILD");
    }
    if plain.is_none() {
        missing.push("CANNOLI_QEMU_PLAIN");
    }
    if !missing.is_empty() {
        return Err(format!(
            "QEMU builds not found: {} not set in the environment nor in {} ({}); {}",
            missing.join(" and "),
            env_file.display(),
            if env_file.exists() {
                "file exists"
            } else {
                "file missing"
            },
            QEMU_HOWTO
        ));
    }
    let root = workspace_root();
    let abs = |p: PathBuf| if p.is_absolute() { p } else { root.join(p) };
    let q = QemuBuilds {
        build: abs(build.unwrap()),
        plain: abs(plain.unwrap()),
    };
    let mut problems = Vec::new();
    for arch in ARCHES {
        for dir in [&q.build, &q.plain] {
            let exe = dir.join(format!("qemu-{arch}"));
            if !is_executable(&exe) {
                problems.push(format!("{} is missing or not executable", exe.display()));
            }
        }
    }
    for p in [Plugin::Insn, Plugin::Execlog, Plugin::Mem] {
        let lib = q.build.join(p.rel_path());
        if !lib.is_file() {
            problems.push(format!("plugin {} is missing", lib.display()));
        }
    }
    if !problems.is_empty() {
        return Err(format!(
            "incomplete QEMU builds (build = {}, plain = {}): {}",
            q.build.display(),
            q.plain.display(),
            problems.join("; ")
        ));
    }
    Ok(q)
}

/// The QEMU builds; panics with instructions if they are not there.
pub fn qemu_builds() -> &'static QemuBuilds {
    static Q: OnceLock<Result<QemuBuilds, String>> = OnceLock::new();
    match Q.get_or_init(locate_qemu) {
        Ok(q) => q,
        Err(e) => panic!("{e}"),
    }
}

impl QemuBuilds {
    /// The patched `qemu-<arch>`.
    pub fn qemu(&self, arch: &str) -> PathBuf {
        self.build.join(format!("qemu-{arch}"))
    }
    /// The unpatched `qemu-<arch>`.
    pub fn plain_qemu(&self, arch: &str) -> PathBuf {
        self.plain.join(format!("qemu-{arch}"))
    }
    /// A ground-truth plugin library of the patched build.
    pub fn plugin(&self, p: Plugin) -> PathBuf {
        self.build.join(p.rel_path())
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Runs `scripts/build-guests.sh` once per test process (it only rebuilds
/// what is out of date).
fn build_guests() -> Result<(), String> {
    let script = workspace_root().join("scripts/build-guests.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("--quiet")
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}):\n{}{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Absolute path of guest program `name` for `arch`, built on demand.
pub fn guest(arch: &str, name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(e) = BUILT.get_or_init(build_guests) {
        panic!("building the guest programs failed: {e}");
    }
    let p = workspace_root().join("target/guests").join(arch).join(name);
    assert!(
        is_executable(&p),
        "guest program {} missing after running scripts/build-guests.sh (is tests/programs/{name}.c there?)",
        p.display()
    );
    p
}

/// Expected stdout of a guest program run with no arguments
/// (`tests/programs/<name>.expected`), if the file exists.
pub fn expected_stdout(name: &str) -> Option<Vec<u8>> {
    fs::read(
        workspace_root()
            .join("tests/programs")
            .join(format!("{name}.expected")),
    )
    .ok()
}

const RELEASE_HOWTO: &str = "run `cargo build --release` in the workspace root first";

/// An artifact of `cargo build --release`, e.g. `libjitter_always.so`.
pub fn release_artifact(file: &str) -> PathBuf {
    let p = cargo_target_dir().join("release").join(file);
    assert!(
        p.is_file(),
        "{} is missing: {RELEASE_HOWTO} (it builds target/release/cannoli-dump and \
         target/release/libjitter_always.so)",
        p.display()
    );
    p
}

/// The jitter library given to `qemu -cannoli`.
pub fn jitter_lib() -> PathBuf {
    release_artifact("libjitter_always.so")
}

/// The `cannoli-dump` client.
pub fn dump_client() -> PathBuf {
    release_artifact("cannoli-dump")
}

// ---------------------------------------------------------------------------
// Run directories and processes
// ---------------------------------------------------------------------------

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
/// common args are [`qemu_common_args`] of the guest's architecture.
#[derive(Debug, Clone)]
pub struct GuestCmd {
    pub qemu: PathBuf,
    /// `qemu_common_args(arch)`.
    pub common_args: Vec<&'static str>,
    pub qemu_args: Vec<OsString>,
    pub prog: PathBuf,
    pub args: Vec<String>,
    /// The whole environment of QEMU (it is cleared first).
    pub env: Vec<(String, String)>,
}

impl GuestCmd {
    pub fn new(arch: &str, qemu: PathBuf, prog: &Path, args: &[&str]) -> Self {
        GuestCmd {
            qemu,
            common_args: qemu_common_args(arch),
            qemu_args: Vec::new(),
            prog: prog.to_path_buf(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
        }
    }
    pub fn qemu_arg(mut self, a: impl Into<OsString>) -> Self {
        self.qemu_args.push(a.into());
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.to_string(), v.to_string()));
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
        let mut s = String::new();
        for (k, v) in &self.env {
            s.push_str(&format!("{k}={v} "));
        }
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

/// Last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let from = lines.len().saturating_sub(n);
    lines[from..].join("\n")
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
    let child = c
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `{}`: {e}", cmd.display()));
    ChildGuard::new(child, cmd.display())
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
    let q = qemu_builds();
    let mut spec = q.plugin(plugin).into_os_string();
    spec.push(plugin.options());
    GuestCmd::new(arch, q.qemu(arch), prog, args)
        .qemu_arg("-plugin")
        .qemu_arg(spec)
        .qemu_arg("-d")
        .qemu_arg("plugin")
        .qemu_arg("-D")
        .qemu_arg(log)
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
    /// Its `--out` file.
    pub out: PathBuf,
    stderr_path: PathBuf,
    stdout_rest: Option<std::thread::JoinHandle<Vec<u8>>>,
}

impl DumpClient {
    /// Starts `cannoli-dump --listen 127.0.0.1:0 --out <tag>.dump --threads N`
    /// and waits for its `listening` line.
    pub fn start(dir: &RunDir, tag: &str, threads: usize) -> DumpClient {
        DumpClient::start_args(dir, tag, &["--threads", &threads.to_string()])
    }

    /// Starts `cannoli-dump --listen 127.0.0.1:0 --out <tag>.dump <args>`
    /// and waits (at most 60 s) for its `listening` line.
    pub fn start_args(dir: &RunDir, tag: &str, args: &[&str]) -> DumpClient {
        let exe = dump_client();
        let out = dir.file(&format!("{tag}.dump"));
        let stderr_path = dir.file(&format!("{tag}.client.stderr"));
        let stderr = File::create(&stderr_path).expect("create client stderr file");
        let child = Command::new(&exe)
            .args(["--listen", "127.0.0.1:0", "--out"])
            .arg(&out)
            .args(args)
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
        let addr = match line.trim_end().strip_prefix("listening ") {
            Some(a) if !a.is_empty() => a.to_string(),
            _ => read_err(
                format!("first stdout line was {line:?}, expected `listening <addr>`"),
                &mut child,
            ),
        };
        DumpClient {
            child,
            addr,
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
        .env("CANNOLI_ADDR", &client.addr);
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

// ---------------------------------------------------------------------------
// Events and parsers
// ---------------------------------------------------------------------------

/// Load or store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemKind {
    Load,
    Store,
}

impl MemKind {
    pub fn letter(self) -> char {
        match self {
            MemKind::Load => 'L',
            MemKind::Store => 'S',
        }
    }
}

/// One memory access, as in `cannoli-dump`'s `L`/`S` lines and libmem's
/// `print-accesses` lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemAccess {
    /// The accessing instruction.
    pub pc: u64,
    pub addr: u64,
    /// In bytes.
    pub size: u8,
    pub kind: MemKind,
    pub value: u64,
}

impl fmt::Display for MemAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:x} {:x} {} {:x}",
            self.kind.letter(),
            self.pc,
            self.addr,
            self.size,
            self.value
        )
    }
}

/// A memory access attributed to the n-th executed instruction, without
/// size/value (what execlog shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemSlot {
    /// Index of the instruction in the exec sequence.
    pub insn: u64,
    pub kind: MemKind,
    pub addr: u64,
}

impl fmt::Display for MemSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "insn #{} {} {:x}",
            self.insn,
            self.kind.letter(),
            self.addr
        )
    }
}

fn open_log(path: &Path) -> Result<BufReader<File>, String> {
    File::open(path)
        .map(|f| BufReader::with_capacity(1 << 20, f))
        .map_err(|e| format!("cannot open {}: {e}", path.display()))
}

/// Iterates over the lines of a (possibly huge) file without keeping them.
fn for_each_line(
    path: &Path,
    mut f: impl FnMut(usize, &str) -> Result<(), String>,
) -> Result<(), String> {
    let mut r = open_log(path)?;
    let mut buf = Vec::with_capacity(256);
    let mut lineno = 0usize;
    loop {
        buf.clear();
        let n = r
            .read_until(b'\n', &mut buf)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        if n == 0 {
            return Ok(());
        }
        lineno += 1;
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        let line = std::str::from_utf8(&buf).map_err(|_| {
            format!(
                "{}:{lineno}: not UTF-8: {:?}",
                path.display(),
                String::from_utf8_lossy(&buf)
            )
        })?;
        f(lineno, line).map_err(|e| format!("{}:{lineno}: {e}: {line:?}", path.display()))?;
    }
}

fn hex(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if digits.is_empty() || digits.len() > 16 {
        return Err(format!("bad hex number {s:?}"));
    }
    u64::from_str_radix(digits, 16).map_err(|_| format!("bad hex number {s:?}"))
}

fn dec<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("bad decimal number {s:?}"))
}

/// Output of `libinsn`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsnCounts {
    /// `cpu N insns: X` lines, by N.
    pub per_cpu: Vec<(u32, u64)>,
    /// `total insns: X`.
    pub total: u64,
}

/// Parses libinsn's log (`cpu N insns: X` lines then `total insns: X`).
pub fn parse_insn(path: &Path) -> Result<InsnCounts, String> {
    let mut per_cpu = Vec::new();
    let mut total = None;
    for_each_line(path, |_, line| {
        if let Some(rest) = line.strip_prefix("total insns:") {
            if total.is_some() {
                return Err("second `total insns` line".into());
            }
            total = Some(dec(rest)?);
        } else if let Some(rest) = line.strip_prefix("cpu ") {
            let (cpu, count) = rest.split_once(" insns:").ok_or("unexpected line")?;
            per_cpu.push((dec(cpu)?, dec(count)?));
        } else if !line.trim().is_empty() {
            return Err("unexpected line".into());
        }
        Ok(())
    })?;
    let total = total.ok_or_else(|| format!("{}: no `total insns:` line", path.display()))?;
    let sum: u64 = per_cpu.iter().map(|(_, n)| n).sum();
    if !per_cpu.is_empty() && sum != total {
        return Err(format!(
            "{}: per-cpu counts add up to {sum}, total says {total}",
            path.display()
        ));
    }
    Ok(InsnCounts { per_cpu, total })
}

/// Output of `libexeclog`: the executed pcs in order, and the memory
/// accesses each instruction made (kind and address only).
#[derive(Debug, Default)]
pub struct Execlog {
    pub pcs: Vec<u64>,
    pub mem: Vec<MemSlot>,
    /// vCPU indexes seen.
    pub cpus: BTreeSet<u32>,
}

/// Parses libexeclog's log. Each line is
/// `<cpu>, 0x<pc>, 0x<opcode>, "<disas>"` followed by zero or more
/// `, load, 0x<addr>` / `, store, 0x<addr>`. Lines are printed when the
/// *next* instruction starts; the last one is printed by the plugin's exit
/// callback. An empty line (a vCPU that never ran) is skipped.
pub fn parse_execlog(path: &Path) -> Result<Execlog, String> {
    let mut log = Execlog::default();
    for_each_line(path, |_, line| {
        if line.is_empty() {
            return Ok(());
        }
        let mut it = line.splitn(3, ", ");
        let cpu = it.next().ok_or("no cpu")?;
        let pc = it.next().ok_or("no pc")?;
        let rest = it.next().ok_or("no opcode")?;
        log.cpus.insert(dec(cpu)?);
        if !pc.starts_with("0x") {
            return Err("pc without 0x".into());
        }
        log.pcs.push(hex(pc)?);
        let insn = log.pcs.len() as u64 - 1;
        // Memory annotations follow the closing quote of the disassembly.
        let open = rest.find('"').ok_or("no disassembly")?;
        let close = rest
            .rfind('"')
            .filter(|&c| c > open)
            .ok_or("unterminated disassembly")?;
        let mut tail = &rest[close + 1..];
        while !tail.is_empty() {
            let t = tail.strip_prefix(", ").ok_or("bad memory annotation")?;
            let (kind, t) = if let Some(t) = t.strip_prefix("load, ") {
                (MemKind::Load, t)
            } else if let Some(t) = t.strip_prefix("store, ") {
                (MemKind::Store, t)
            } else {
                return Err("bad memory annotation".into());
            };
            let end = t.find(", ").unwrap_or(t.len());
            let addr = hex(&t[..end])?;
            log.mem.push(MemSlot { insn, kind, addr });
            tail = &t[end..];
        }
        Ok(())
    })?;
    Ok(log)
}

fn size_from_bits(bits: u32) -> Result<u8, String> {
    match bits {
        8 => Ok(1),
        16 => Ok(2),
        32 => Ok(4),
        64 => Ok(8),
        128 => Err("128-bit access (not representable in a u64 value)".into()),
        _ => Err(format!("unexpected access size {bits} bits")),
    }
}

/// Parses libmem's `print-accesses=true` log: a header line
/// `insn_vaddr,insn_symbol,mem_vaddr,mem_hwaddr,access_size,access_type,mem_value`
/// then `0x<pc>,<symbol>,0x<vaddr>,0x<hwaddr>,<bits>,<load|store>,0x<value>`
/// per access (the symbol may be empty; hwaddr is 0 in user mode).
pub fn parse_mem(path: &Path) -> Result<Vec<MemAccess>, String> {
    let mut out = Vec::new();
    for_each_line(path, |lineno, line| {
        if line.is_empty() {
            return Ok(());
        }
        if line.starts_with("insn_vaddr,") {
            return if lineno == 1 {
                Ok(())
            } else {
                Err("header line not first".into())
            };
        }
        if line.starts_with("mem accesses:") {
            return Ok(());
        }
        let (pc, rest) = line.split_once(',').ok_or("unexpected line")?;
        // The symbol could in principle contain commas: take the last five
        // fields from the right.
        let mut f = rest.rsplitn(6, ',');
        let value = f.next().ok_or("no value")?;
        let kind = f.next().ok_or("no type")?;
        let bits = f.next().ok_or("no size")?;
        let _hwaddr = f.next().ok_or("no hwaddr")?;
        let vaddr = f.next().ok_or("no vaddr")?;
        let _sym = f.next().ok_or("no symbol")?;
        let kind = match kind {
            "load" => MemKind::Load,
            "store" => MemKind::Store,
            _ => return Err(format!("bad access type {kind:?}")),
        };
        out.push(MemAccess {
            pc: hex(pc)?,
            addr: hex(vaddr)?,
            size: size_from_bits(dec(bits)?)?,
            kind,
            value: hex(value)?,
        });
        Ok(())
    })?;
    Ok(out)
}

/// A parsed `cannoli-dump` file.
#[derive(Debug, Default)]
pub struct DumpTrace {
    /// `X` lines in order.
    pub pcs: Vec<u64>,
    /// `L`/`S` lines in order.
    pub mem: Vec<MemAccess>,
    /// For each entry of `mem`, the index in `pcs` of the last `X` before it
    /// (`u64::MAX` if there was none).
    pub mem_insn: Vec<u64>,
    /// Every other line (`R`, `B`, `Y`, `M`, `U`, `P`, `G`), whole, in order.
    pub other: Vec<String>,
}

impl DumpTrace {
    /// The accesses as execlog shows them: instruction index, kind, address.
    pub fn mem_slots(&self) -> Vec<MemSlot> {
        self.mem
            .iter()
            .zip(&self.mem_insn)
            .map(|(m, &insn)| MemSlot {
                insn,
                kind: m.kind,
                addr: m.addr,
            })
            .collect()
    }

    /// Checks that every access's pc is the pc of the instruction executed
    /// last before it.
    pub fn check_attribution(&self) -> Result<(), String> {
        for (i, (m, &insn)) in self.mem.iter().zip(&self.mem_insn).enumerate() {
            if insn == u64::MAX {
                return Err(format!(
                    "memory access #{i} ({m}) comes before any executed instruction"
                ));
            }
            let pc = self.pcs[insn as usize];
            if pc != m.pc {
                return Err(format!(
                    "memory access #{i} ({m}) follows instruction #{insn} at pc {pc:x}, but names pc {:x}",
                    m.pc
                ));
            }
        }
        Ok(())
    }
}

/// A tool binary of this workspace (`env!("CARGO_BIN_EXE_<name>")`), after
/// checking that its hook library `lib<name>.so` was built next to it.
pub fn tool_exe(exe: &str) -> PathBuf {
    let exe = PathBuf::from(exe);
    let name = exe.file_name().and_then(|n| n.to_str()).expect("tool file name");
    let lib = exe.with_file_name(format!("lib{name}.so"));
    assert!(
        lib.is_file(),
        "{} is missing: run `cargo build --release` in the workspace root first",
        lib.display()
    );
    exe
}

/// Parses a `cannoli-dump` file.
pub fn parse_dump(path: &Path) -> Result<DumpTrace, String> {
    let mut d = DumpTrace::default();
    for_each_line(path, |_, line| {
        let mut f = line.split(' ');
        let tag = f.next().ok_or("empty line")?;
        let mut field = |what: &str| f.next().ok_or_else(|| format!("missing {what}"));
        match tag {
            "X" => {
                let pc = hex(field("pc")?)?;
                d.pcs.push(pc);
            }
            "L" | "S" => {
                let pc = hex(field("pc")?)?;
                let addr = hex(field("addr")?)?;
                let size: u8 = dec(field("size")?)?;
                let value = hex(field("value")?)?;
                if !matches!(size, 1 | 2 | 4 | 8) {
                    return Err(format!("bad size {size}"));
                }
                let kind = if tag == "L" {
                    MemKind::Load
                } else {
                    MemKind::Store
                };
                d.mem.push(MemAccess {
                    pc,
                    addr,
                    size,
                    kind,
                    value,
                });
                d.mem_insn.push((d.pcs.len() as u64).wrapping_sub(1));
            }
            // The rare events (registers, syscalls, mappings, signals) are
            // kept whole for the tests that look at them.
            "R" | "B" | "Y" | "M" | "U" | "P" | "G" => {
                d.other.push(line.to_string());
                return Ok(());
            }
            _ => return Err(format!("unknown tag {tag:?}")),
        }
        if f.next().is_some() {
            return Err("trailing fields".into());
        }
        Ok(())
    })?;
    Ok(d)
}

// ---------------------------------------------------------------------------
// Comparisons
// ---------------------------------------------------------------------------

/// Lines of context shown around the first difference.
pub const CONTEXT: usize = 5;

/// Compares two sequences; on a difference returns a message with the first
/// differing index and `CONTEXT` entries either side from both.
pub fn compare_seq<T: PartialEq>(
    what: &str,
    left_name: &str,
    left: &[T],
    right_name: &str,
    right: &[T],
    fmt: impl Fn(&T) -> String,
) -> Result<(), String> {
    compare_seq_by(
        what,
        left_name,
        left,
        right_name,
        right,
        |_, a, b| a == b,
        |_, x| fmt(x),
    )
}

/// [`compare_seq`] with an equality that also gets the index, and a
/// formatter that gets the index too.
pub fn compare_seq_by<T>(
    what: &str,
    left_name: &str,
    left: &[T],
    right_name: &str,
    right: &[T],
    eq: impl Fn(usize, &T, &T) -> bool,
    fmt: impl Fn(usize, &T) -> String,
) -> Result<(), String> {
    let common = left.len().min(right.len());
    let first = (0..common).find(|&i| !eq(i, &left[i], &right[i]));
    let idx = match first {
        Some(i) => i,
        None if left.len() == right.len() => return Ok(()),
        None => common,
    };
    let mut msg = format!(
        "{what}: {left_name} has {} entries, {right_name} has {}; first difference at index {idx}\n",
        left.len(),
        right.len()
    );
    let from = idx.saturating_sub(CONTEXT);
    for (name, seq) in [(left_name, left), (right_name, right)] {
        msg.push_str(&format!("  --- {name} [{from}..]\n"));
        let to = (idx + CONTEXT + 1).min(seq.len());
        for (i, item) in seq.iter().enumerate().take(to).skip(from) {
            let mark = if i == idx { ">>" } else { "  " };
            msg.push_str(&format!("  {mark} {i:>9}: {}\n", fmt(i, item)));
        }
        if idx >= seq.len() {
            msg.push_str(&format!("  >> {idx:>9}: <end>\n"));
        }
    }
    Err(msg)
}

/// Compares two runs' libmem outputs of the same program: they must agree
/// on every access's pc, address, size and kind. Returns, per access, whether
/// its value differed: such values depend on something outside the guest's
/// control, so no third run can be expected to reproduce them either. In
/// practice: the thread id (`set_tid_address`, stored by glibc and loaded by
/// its locks), `getrandom` bytes (glibc's malloc `tcache_key`, loaded and
/// stored by every `free`), and `fstat` results of the stdout file (inode,
/// timestamps: copied field by field by mipsel's glibc). To catch the
/// timestamps, the two runs' stdout files must be created in different
/// seconds.
pub fn volatile_values(a: &[MemAccess], b: &[MemAccess]) -> Result<Vec<bool>, String> {
    compare_seq_by(
        "two ground-truth runs' accesses (pc, addr, size, kind)",
        "libmem run 1",
        a,
        "libmem run 2",
        b,
        |_, x, y| x.pc == y.pc && x.addr == y.addr && x.size == y.size && x.kind == y.kind,
        |_, m| m.to_string(),
    )
    .map_err(|e| format!("the guest is not deterministic under QEMU: {e}"))?;
    Ok(a.iter().zip(b).map(|(x, y)| x.value != y.value).collect())
}

/// Compares cannoli's accesses with libmem's: everything must be equal,
/// except the value where `volatile[i]` is set.
pub fn compare_accesses(
    libmem: &[MemAccess],
    cannoli: &[MemAccess],
    volatile: &[bool],
) -> Result<(), String> {
    let is_vol = |i: usize| volatile.get(i).copied().unwrap_or(false);
    compare_seq_by(
        "loads/stores",
        "libmem",
        libmem,
        "cannoli",
        cannoli,
        |i, x, y| {
            x.pc == y.pc
                && x.addr == y.addr
                && x.size == y.size
                && x.kind == y.kind
                && (x.value == y.value || is_vol(i))
        },
        |i, m| {
            if is_vol(i) {
                format!("{m}   (value differs between runs)")
            } else {
                m.to_string()
            }
        },
    )
}

/// Compares two files byte for byte; on a difference reports the first
/// differing line (1-based) of each.
pub fn compare_files(a: &Path, b: &Path) -> Result<(), String> {
    let open = |p: &Path| open_log(p);
    let (mut ra, mut rb) = (open(a)?, open(b)?);
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    let mut lineno = 0u64;
    loop {
        la.clear();
        lb.clear();
        let na = ra
            .read_until(b'\n', &mut la)
            .map_err(|e| format!("reading {}: {e}", a.display()))?;
        let nb = rb
            .read_until(b'\n', &mut lb)
            .map_err(|e| format!("reading {}: {e}", b.display()))?;
        lineno += 1;
        if la != lb {
            let show = |n: usize, l: &[u8]| {
                if n == 0 {
                    "<end of file>".to_string()
                } else {
                    format!("{:?}", String::from_utf8_lossy(l).trim_end_matches('\n'))
                }
            };
            return Err(format!(
                "{} and {} differ at line {lineno}:\n  {}\n  {}",
                a.display(),
                b.display(),
                show(na, &la),
                show(nb, &lb)
            ));
        }
        if na == 0 {
            return Ok(());
        }
    }
}

/// Compares two `cannoli-dump` files of the same program from different
/// runs: byte for byte, except the value field of the `volatile` accesses
/// (indexes among the `L`/`S` lines; see [`volatile_values`]).
/// Syscalls whose result (and buffer) differ from run to run of the same
/// program: thread and process ids, random bytes, clocks.
const VOLATILE_SYSCALLS: &[&str] = &[
    "set_tid_address", "gettid", "getpid", "getppid", "getrandom", "clone", "clone3", "fork",
    "vfork", "clock_gettime", "clock_gettime64", "gettimeofday", "time",
];

/// Two `Y` lines of a volatile syscall that agree on everything but the
/// result and the data (fields 3 and the last).
fn same_syscall_but_volatile(a: &[u8], b: &[u8]) -> bool {
    let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    let (fa, fb): (Vec<&str>, Vec<&str>) = (a.trim_end().split(' ').collect(), b.trim_end().split(' ').collect());
    fa.len() == fb.len()
        && fa.len() > 4
        && VOLATILE_SYSCALLS.contains(&fa[2])
        && fa.iter().zip(&fb).enumerate().all(|(i, (x, y))| i == 3 || i == fa.len() - 1 || x == y)
}

pub fn compare_dumps(a: &Path, b: &Path, volatile: &[bool]) -> Result<(), String> {
    let (mut ra, mut rb) = (open_log(a)?, open_log(b)?);
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    let mut lineno = 0u64;
    let mut access = 0usize;
    let strip_value = |l: &[u8]| -> Vec<u8> {
        let l = l.strip_suffix(b"\n").unwrap_or(l);
        match l.iter().rposition(|&c| c == b' ') {
            Some(i) => l[..i].to_vec(),
            None => l.to_vec(),
        }
    };
    loop {
        la.clear();
        lb.clear();
        let na = ra
            .read_until(b'\n', &mut la)
            .map_err(|e| format!("reading {}: {e}", a.display()))?;
        let nb = rb
            .read_until(b'\n', &mut lb)
            .map_err(|e| format!("reading {}: {e}", b.display()))?;
        lineno += 1;
        let is_access = matches!(la.first(), Some(b'L' | b'S'));
        let same = if la == lb {
            true
        } else if la.starts_with(b"Y ") {
            same_syscall_but_volatile(&la, &lb)
        } else {
            is_access
                && volatile.get(access).copied().unwrap_or(false)
                && strip_value(&la) == strip_value(&lb)
        };
        if !same {
            let show = |n: usize, l: &[u8]| {
                if n == 0 {
                    "<end of file>".to_string()
                } else {
                    format!("{:?}", String::from_utf8_lossy(l).trim_end_matches('\n'))
                }
            };
            return Err(format!(
                "{} and {} differ at line {lineno}:\n  {}\n  {}",
                a.display(),
                b.display(),
                show(na, &la),
                show(nb, &lb)
            ));
        }
        if is_access {
            access += 1;
        }
        if na == 0 {
            return Ok(());
        }
    }
}

/// Collects failed checks so one run reports all of them.
#[derive(Default)]
pub struct Failures {
    context: String,
    list: Mutex<Vec<String>>,
}

impl Failures {
    pub fn new(context: impl Into<String>) -> Self {
        Failures {
            context: context.into(),
            list: Mutex::new(Vec::new()),
        }
    }
    /// Records `r`'s error under `check`.
    pub fn check(&self, check: &str, r: Result<(), String>) -> bool {
        match r {
            Ok(()) => true,
            Err(e) => {
                self.list.lock().unwrap().push(format!("[{check}] {e}"));
                false
            }
        }
    }
    pub fn fail(&self, check: &str, msg: impl Into<String>) {
        self.list
            .lock()
            .unwrap()
            .push(format!("[{check}] {}", msg.into()));
    }
    pub fn is_empty(&self) -> bool {
        self.list.lock().unwrap().is_empty()
    }
    /// Panics with every recorded failure.
    pub fn finish(self) {
        let list = self.list.into_inner().unwrap();
        if !list.is_empty() {
            panic!(
                "{}: {} check(s) failed:\n\n{}",
                self.context,
                list.len(),
                list.join("\n\n")
            );
        }
    }
}

/// Lossy text of a byte buffer, for messages.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Reads a whole file, for small outputs.
pub fn read_text(p: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = File::open(p) {
        let _ = f.read_to_string(&mut s);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpfile(name: &str, content: &str) -> (RunDir, PathBuf) {
        let d = RunDir::new();
        let p = d.file(name);
        fs::write(&p, content).unwrap();
        (d, p)
    }

    #[test]
    fn insn_log() {
        let (_d, p) = tmpfile(
            "insn.log",
            "cpu 0 insns: 120\ncpu 1 insns: 3\ntotal insns: 123\n",
        );
        let c = parse_insn(&p).unwrap();
        assert_eq!(c.total, 123);
        assert_eq!(c.per_cpu, vec![(0, 120), (1, 3)]);
        let (_d, p) = tmpfile("bad.log", "cpu 0 insns: 120\ntotal insns: 123\n");
        assert!(parse_insn(&p).is_err());
    }

    #[test]
    fn execlog_lines() {
        let (_d, p) = tmpfile(
            "e.log",
            "0, 0x400630, 0x3c1c0005, \"lui gp, 5\"\n\
             0, 0x400634, 0x8f998018, \"lw t9, -0x7fe8(gp)\", load, 0x0049a018\n\
             0, 0x1000, 0x0, \"sw a, b, \"c\"\", store, 0x7fff0000, load, 0x10\n\n",
        );
        let e = parse_execlog(&p).unwrap();
        assert_eq!(e.pcs, vec![0x400630, 0x400634, 0x1000]);
        assert_eq!(
            e.mem,
            vec![
                MemSlot {
                    insn: 1,
                    kind: MemKind::Load,
                    addr: 0x49a018
                },
                MemSlot {
                    insn: 2,
                    kind: MemKind::Store,
                    addr: 0x7fff0000
                },
                MemSlot {
                    insn: 2,
                    kind: MemKind::Load,
                    addr: 0x10
                },
            ]
        );
    }

    #[test]
    fn mem_lines() {
        let (_d, p) = tmpfile(
            "m.log",
            "insn_vaddr,insn_symbol,mem_vaddr,mem_hwaddr,access_size,access_type,mem_value\n\
             0x400634,_start,0x49a018,0x0,32,load,0x0040a000\n\
             0x10,,0x7ffe,0x0,8,store,0xff\n\
             0x12,a,b,0x8,0x0,64,store,0x0000000000000001\n",
        );
        let m = parse_mem(&p).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(
            m[0],
            MemAccess {
                pc: 0x400634,
                addr: 0x49a018,
                size: 4,
                kind: MemKind::Load,
                value: 0x40a000
            }
        );
        assert_eq!(
            m[1],
            MemAccess {
                pc: 0x10,
                addr: 0x7ffe,
                size: 1,
                kind: MemKind::Store,
                value: 0xff
            }
        );
        assert_eq!(
            m[2],
            MemAccess {
                pc: 0x12,
                addr: 0x8,
                size: 8,
                kind: MemKind::Store,
                value: 1
            }
        );
    }

    #[test]
    fn dump_lines() {
        let (_d, p) = tmpfile(
            "d.dump",
            "X 10\nL 10 7ffe 4 0\nX 14\nS 14 0 8 ffffffffffffffff\n",
        );
        let d = parse_dump(&p).unwrap();
        assert_eq!(d.pcs, vec![0x10, 0x14]);
        assert_eq!(d.mem_insn, vec![0, 1]);
        assert_eq!(d.mem[1].value, u64::MAX);
        d.check_attribution().unwrap();
        let (_d, p) = tmpfile("e.dump", "L 10 7ffe 4 0\n");
        assert!(parse_dump(&p).unwrap().check_attribution().is_err());
        let (_d, p) = tmpfile("f.dump", "X 10 11\n");
        assert!(parse_dump(&p).is_err());
    }

    #[test]
    fn compare() {
        let a: Vec<u64> = (0..100).collect();
        let mut b = a.clone();
        assert!(compare_seq("t", "a", &a, "b", &b, |x| format!("{x:x}")).is_ok());
        b[50] = 7;
        let e = compare_seq("t", "a", &a, "b", &b, |x| format!("{x:x}")).unwrap_err();
        assert!(e.contains("first difference at index 50"), "{e}");
        assert!(
            e.contains(">>        50: 32") && e.contains(">>        50: 7"),
            "{e}"
        );
        let e = compare_seq("t", "a", &a, "b", &a[..90], |x| format!("{x:x}")).unwrap_err();
        assert!(e.contains("index 90") && e.contains("<end>"), "{e}");
    }

    #[test]
    fn dumps_modulo_volatile() {
        let d = RunDir::new();
        let (a, b) = (d.file("a"), d.file("b"));
        fs::write(&a, "X 10\nS 10 20 4 7cc3\nX 14\nL 14 20 4 1\n").unwrap();
        fs::write(&b, "X 10\nS 10 20 4 7cd7\nX 14\nL 14 20 4 1\n").unwrap();
        assert!(compare_dumps(&a, &b, &[true, false]).is_ok());
        let e = compare_dumps(&a, &b, &[false, true]).unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        fs::write(&b, "X 10\nS 10 24 4 7cd7\nX 14\nL 14 20 4 1\n").unwrap();
        assert!(compare_dumps(&a, &b, &[true, true]).is_err());
        fs::write(&b, "X 10\nS 10 20 4 7cc3\nX 14\n").unwrap();
        assert!(compare_dumps(&a, &b, &[true, true])
            .unwrap_err()
            .contains("<end of file>"));
    }

    #[test]
    fn env_file() {
        let v =
            parse_env_file("# c\nCANNOLI_QEMU_BUILD=/a/b\nexport CANNOLI_QEMU_PLAIN=\"/c d\"\n\n");
        assert_eq!(
            v,
            vec![
                ("CANNOLI_QEMU_BUILD".to_string(), "/a/b".to_string()),
                ("CANNOLI_QEMU_PLAIN".to_string(), "/c d".to_string())
            ]
        );
    }
}
