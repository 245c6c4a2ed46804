//! One measurement: a workload under a configuration, start to finish.

use crate::config::{Config, Hooks, Kind, Lib};
use crate::proc::{wait_any, Exit, Proc};
use crate::setup::Qemu;
use crate::workload::Workload;
use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the client may take to say it listens.
const CLIENT_START: Duration = Duration::from_secs(20);
/// How long the client may keep running after QEMU exited. It has at most
/// one ring of events left to decode (the producer blocks when the ring is
/// full) plus its 100 ms linger, so a client still running after this is
/// stuck, e.g. because QEMU died before it ever connected.
const CLIENT_GRACE: Duration = Duration::from_secs(60);

/// What every run needs.
pub struct Ctx {
    pub qemu: Qemu,
    /// `target/release`: the client binary and the hook library.
    pub release: PathBuf,
    /// The client to run instead of `target/release/benchmark` (`--client`).
    pub client: Option<PathBuf>,
    /// `target/bench/out`: the guests' stdout and stderr, the plugin logs,
    /// and the working directory of every QEMU.
    pub out: PathBuf,
    /// Longest a QEMU run may take before it is killed.
    pub timeout: Duration,
    /// The TB-level plugin peer (`setup::build_tbpeer`), or why there is
    /// none.
    pub tbpeer: Result<PathBuf, String>,
    /// The recordings this process wrote (and kept) so far: a replay row
    /// replays its workload's `record-pc` file if it is here, else makes
    /// one first.
    pub recorded: Mutex<HashSet<PathBuf>>,
}

/// The results of one run.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Seconds from starting QEMU to QEMU's exit.
    pub wall: f64,
    /// Seconds from starting QEMU to the client's exit (= `wall` without a
    /// client).
    pub total: f64,
    /// Peak RSS of QEMU in KiB.
    pub qemu_rss_kb: u64,
    /// QEMU's CPU seconds and its voluntary and involuntary context
    /// switches, where bench started QEMU itself (not under `cannoli`):
    /// CPU near the wall time says QEMU ran all along; voluntary switches
    /// that it waited (for a free slot of a full ring, say), involuntary
    /// ones that other threads took its CPU.
    pub qemu_cpu: Option<(f64, u64, u64)>,
    /// Peak RSS of the client in KiB.
    pub client_rss_kb: Option<u64>,
    /// Events the client decoded, and those it reported lost.
    pub events: Option<u64>,
    pub lost: Option<u64>,
    /// libinsn.so's "total insns" and libmem.so's "mem accesses".
    pub insns: Option<u64>,
    pub mem: Option<u64>,
    /// The checksum of the pc stream, from the TB peer's log or the client's
    /// output (when it prints one): every thread's Fletcher-style pc checksum
    /// over its pcs in execution order, summed.
    pub pc_checksum: Option<u64>,
    /// What the guest wrote to stdout.
    pub stdout: String,
    /// A record row's file size in bytes.
    pub file_bytes: Option<u64>,
}

/// Guests whose address layout depends on the host's ASLR unless QEMU
/// reserves their address space up front (as the exactness tests do).
fn reserved_va(arch: &str) -> Option<&'static str> {
    match arch {
        "riscv64" | "aarch64" | "x86_64" | "mips64el" => Some("0x100000000"),
        _ => None,
    }
}

/// Runs workload `w` once under configuration `c`.
///
/// QEMU gets an empty environment, `-seed 1`, the guest's absolute path and
/// stdout to a regular file, like the exactness tests: the guest's libc
/// looks at all of these, so any difference would change the instruction
/// count between configurations.
pub fn run_once(ctx: &Ctx, w: &Workload, c: &Config) -> Result<Sample, String> {
    match c.kind {
        Kind::Record { hooks, level } => return run_record(ctx, w, c.name, hooks, level),
        Kind::Replay { workers } => return run_replay(ctx, w, c.name, workers),
        Kind::Probe => {
            let probes = w
                .probes
                .as_ref()
                .ok_or("the workload has no probe points")?;
            return crate::probe::run(ctx, w, c.name, probes);
        }
        Kind::Heap => return crate::heap::run(ctx, w, c.name),
        _ => {}
    }
    let tag = format!("{}.{}", w.name, c.name);
    let stdout_path = ctx.out.join(format!("{tag}.stdout"));
    let stderr_path = ctx.out.join(format!("{tag}.stderr"));
    let log_path = ctx.out.join(format!("{tag}.plugin.log"));
    let create =
        |p: &Path| File::create(p).map_err(|e| format!("cannot create {}: {e}", p.display()));

    let mut cmd = Command::new(ctx.qemu.binary(c.kind == Kind::Plain, w.arch));
    cmd.env_clear()
        .current_dir(&ctx.out)
        .stdin(Stdio::null())
        .stdout(create(&stdout_path)?)
        .stderr(create(&stderr_path)?)
        .args(["-seed", "1"]);
    if let Some(r) = reserved_va(w.arch) {
        cmd.args(["-R", r]);
    }
    let mut client = None;
    match c.kind {
        Kind::Plain | Kind::Record { .. } | Kind::Replay { .. } | Kind::Probe | Kind::Heap => {}
        Kind::Plugins(plugins) => {
            for (lib, opts) in plugins {
                let path = match lib {
                    Lib::Qemu(rel) => ctx.qemu.build.join(rel),
                    Lib::TbPeer => ctx.tbpeer.clone()?,
                };
                if !path.is_file() {
                    return Err(format!(
                        "QEMU plugin {} is missing: rebuild with {}",
                        path.display(),
                        match lib {
                            Lib::Qemu(_) => "`bash scripts/build-qemu.sh`",
                            Lib::TbPeer => "bench (without --no-build)",
                        }
                    ));
                }
                let sep = if opts.is_empty() { "" } else { "," };
                cmd.arg("-plugin")
                    .arg(format!("{}{sep}{opts}", path.display()));
            }
            let _ = fs::remove_file(&log_path);
            cmd.args(["-d", "plugin", "-D"]).arg(&log_path);
        }
        Kind::Cannoli { hooks, workers } => {
            let lib = ctx.release.join("libbench_hooks.so");
            if !lib.is_file() {
                return Err(format!(
                    "{} is missing: cargo build --release -p bench-hooks",
                    lib.display()
                ));
            }
            let cl = Client::start(ctx, &["--threads", &workers.to_string()], true)?;
            // Ring geometry and other jitter knobs set for the benchmark reach
            // QEMU (which hides CANNOLI_* from the guest).
            for (k, v) in std::env::vars() {
                if k.starts_with("CANNOLI_") && !k.starts_with("CANNOLI_QEMU_") {
                    cmd.env(k, v);
                }
            }
            cmd.env("CANNOLI_ADDR", &cl.addr)
                .env("CANNOLI_TOKEN", &cl.token)
                .env("CANNOLI_BENCH_HOOKS", hooks.env_value())
                .arg("-cannoli")
                .arg(&lib);
            client = Some(cl);
        }
    }
    cmd.arg(&w.guest).args(&w.args);

    let start = Instant::now();
    let mut qemu = Proc::spawn("QEMU", &mut cmd)?;
    let deadline = start + ctx.timeout;
    while qemu.exit().is_none() {
        if Instant::now() >= deadline {
            qemu.kill();
            return Err(format!(
                "QEMU still running after {} s: killed (raise --timeout?)",
                ctx.timeout.as_secs()
            ));
        }
        match client.as_mut() {
            Some(cl) => wait_any(&mut [&mut qemu, &mut cl.proc], deadline)?,
            None => wait_any(&mut [&mut qemu], deadline)?,
        };
    }
    let qexit = qemu.exit().expect("reaped");
    let mut sample = Sample {
        wall: (qexit.at - start).as_secs_f64(),
        qemu_rss_kb: qexit.maxrss_kb,
        qemu_cpu: Some((qexit.cpu_s, qexit.switches.0, qexit.switches.1)),
        ..Sample::default()
    };
    sample.total = sample.wall;
    if !qexit.success() {
        return Err(format!("QEMU {}{}", qexit.describe(), tail(&stderr_path)));
    }
    sample.stdout = read_text(&stdout_path)?;

    if let Some(mut cl) = client {
        let grace = qexit.at + CLIENT_GRACE;
        while cl.proc.exit().is_none() {
            if Instant::now() >= grace {
                cl.proc.kill();
                return Err(format!(
                    "the benchmark client was still running {} s after QEMU exited: killed{}",
                    (Instant::now() - qexit.at).as_secs(),
                    tail(&stderr_path)
                ));
            }
            wait_any(&mut [&mut cl.proc], grace)?;
        }
        let done = cl.finished("the benchmark client")?;
        sample.total = (done.exit.at - start).as_secs_f64();
        sample.client_rss_kb = Some(done.exit.maxrss_kb);
        sample.events = Some(done.events);
        sample.lost = Some(done.lost);
        sample.pc_checksum = find_checksum(&done.stdout);
    }

    if let Kind::Plugins(_) = c.kind {
        let log = fs::read_to_string(&log_path)
            .map_err(|e| format!("cannot read the plugin log {}: {e}", log_path.display()))?;
        sample.insns = find_count(&log, "total insns:");
        sample.mem = find_count(&log, "mem accesses:");
        sample.pc_checksum = find_checksum(&log);
        if sample.insns.is_none() && sample.mem.is_none() {
            return Err(format!("no plugin total in {}", log_path.display()));
        }
    }
    Ok(sample)
}

/// Where a record row writes its recording (in `target/bench/out`).
pub fn recording_path(ctx: &Ctx, w: &Workload, config: &str) -> PathBuf {
    ctx.out.join(format!("{}.{config}.cnl", w.name))
}

/// The record row `name`: `cannoli record` on the workload, timed from
/// starting the recorder to its exit (QEMU's start, the run, and finishing
/// the file), then `cannoli info --json` on the file (not timed) for what
/// it holds. Only `record-pc`'s file is kept, for the replay row.
fn run_record(
    ctx: &Ctx,
    w: &Workload,
    name: &str,
    hooks: Hooks,
    level: Option<i32>,
) -> Result<Sample, String> {
    let path = recording_path(ctx, w, name);
    let r = record(ctx, w, name, hooks, level, &path);
    let mut kept = ctx.recorded.lock().unwrap_or_else(|p| p.into_inner());
    if name == "record-pc" && r.is_ok() {
        kept.insert(path);
    } else {
        kept.remove(&path);
        let _ = fs::remove_file(&path);
    }
    r
}

/// The `CANNOLI_*` variables of our environment that the recorder and the
/// replaying client get (ring geometry and other knobs set for the
/// benchmark), without those that would change what they run or where to.
fn forward_cannoli_env(cmd: &mut Command) {
    for (k, v) in std::env::vars() {
        let skip = [
            "CANNOLI_QEMU",
            "CANNOLI_RECORD",
            "CANNOLI_HOOKS",
            "CANNOLI_ADDR",
            "CANNOLI_TOKEN",
        ];
        if k.starts_with("CANNOLI_") && !skip.iter().any(|s| k.starts_with(s)) {
            cmd.env(k, v);
        }
    }
}

/// `target/release/cannoli`, or why it cannot run.
pub fn cannoli_binary(ctx: &Ctx) -> Result<PathBuf, String> {
    let cannoli = ctx.release.join("cannoli");
    if !cannoli.is_file() {
        return Err(format!(
            "{} is missing: cargo build --release -p cannoli-cli",
            cannoli.display()
        ));
    }
    Ok(cannoli)
}

/// `cannoli` (a subcommand and its options to follow) run as the other
/// rows run QEMU: the same QEMU, `-seed 1`, empty environment, working
/// directory and guest path (through `CANNOLI_QEMU` and
/// `CANNOLI_QEMU_ARGS`), stdout and stderr to `<workload>.<row>` files,
/// whose paths come back with it.
pub fn cannoli_command(
    ctx: &Ctx,
    w: &Workload,
    name: &str,
    cannoli: &Path,
) -> Result<(Command, PathBuf, PathBuf), String> {
    let tag = format!("{}.{name}", w.name);
    let stdout_path = ctx.out.join(format!("{tag}.stdout"));
    let stderr_path = ctx.out.join(format!("{tag}.stderr"));
    let create =
        |p: &Path| File::create(p).map_err(|e| format!("cannot create {}: {e}", p.display()));
    let mut qemu_args = vec!["-seed", "1"];
    if let Some(r) = reserved_va(w.arch) {
        qemu_args.extend(["-R", r]);
    }
    let mut cmd = Command::new(cannoli);
    cmd.env_clear()
        .current_dir(&ctx.out)
        .stdin(Stdio::null())
        .stdout(create(&stdout_path)?)
        .stderr(create(&stderr_path)?);
    forward_cannoli_env(&mut cmd);
    cmd.env("CANNOLI_QEMU", ctx.qemu.binary(false, w.arch))
        .env("CANNOLI_QEMU_ARGS", qemu_args.join(" "));
    Ok((cmd, stdout_path, stderr_path))
}

/// What a `cannoli` tool's run left: its wall time (start to exit), the
/// peak RSS of the tool and of QEMU, and the guest's stdout.
pub struct ToolRun {
    pub wall: f64,
    pub tool_rss_kb: u64,
    pub qemu_rss_kb: u64,
    pub stdout: String,
    /// The tool's stderr file.
    pub stderr_path: PathBuf,
}

impl ToolRun {
    /// The row's sample: the run's wall (no client to wait for), its RSS,
    /// the guest's stdout, and `events` the tool saw, none lost.
    pub fn sample(self, events: u64) -> Sample {
        Sample {
            wall: self.wall,
            total: self.wall,
            qemu_rss_kb: self.qemu_rss_kb,
            client_rss_kb: Some(self.tool_rss_kb),
            events: Some(events),
            lost: Some(0),
            stdout: self.stdout,
            ..Sample::default()
        }
    }
}

/// Runs `cannoli TOOL ARGS... GUEST GUEST_ARGS...` on `w` as the other
/// rows run QEMU ([`cannoli_command`]), to its exit; an error unless it
/// exits 0. `args` start with the tool's name.
pub fn run_tool(
    ctx: &Ctx,
    w: &Workload,
    name: &str,
    args: &[&std::ffi::OsStr],
) -> Result<ToolRun, String> {
    let cannoli = cannoli_binary(ctx)?;
    let (mut cmd, stdout_path, stderr_path) = cannoli_command(ctx, w, name, &cannoli)?;
    cmd.args(args).arg(&w.guest).args(&w.args);
    let what = format!("cannoli {}", args[0].to_string_lossy());
    let start = Instant::now();
    let mut p = Proc::spawn(&what, &mut cmd)?;
    let (own_kb, qemu_kb) = wait_watching_rss(&mut p, start + ctx.timeout)?;
    let exit = p.exit().expect("reaped");
    if !exit.success() {
        return Err(format!("{what} {}{}", exit.describe(), tail(&stderr_path)));
    }
    Ok(ToolRun {
        wall: (exit.at - start).as_secs_f64(),
        tool_rss_kb: own_kb.unwrap_or(exit.maxrss_kb),
        qemu_rss_kb: qemu_kb.unwrap_or(exit.maxrss_kb),
        stdout: read_text(&stdout_path)?,
        stderr_path,
    })
}

/// A file's text (lossy UTF-8), or why it cannot be read.
pub fn read_text(path: &Path) -> Result<String, String> {
    fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Runs `cannoli record` on `w` into `path`: the same QEMU, `-seed 1`,
/// empty environment, working directory and guest path as the other rows
/// (through `CANNOLI_QEMU` and `CANNOLI_QEMU_ARGS`), so the guest runs the
/// same instructions.
fn record(
    ctx: &Ctx,
    w: &Workload,
    name: &str,
    hooks: Hooks,
    level: Option<i32>,
    path: &Path,
) -> Result<Sample, String> {
    let cannoli = cannoli_binary(ctx)?;
    let preset = hooks
        .record_preset()
        .ok_or("cannoli record has no preset that traces nothing")?;
    let _ = fs::remove_file(path);
    let (mut cmd, stdout_path, stderr_path) = cannoli_command(ctx, w, name, &cannoli)?;
    cmd.args(["record", "--hooks", preset, "-o"]).arg(path);
    if let Some(l) = level {
        cmd.arg(format!("--level={l}"));
    }
    cmd.arg(&w.guest).args(&w.args);

    let start = Instant::now();
    let mut rec = Proc::spawn("cannoli record", &mut cmd)?;
    let (own_kb, qemu_kb) = wait_watching_rss(&mut rec, start + ctx.timeout)?;
    let exit = rec.exit().expect("reaped");
    if !exit.success() {
        return Err(format!(
            "cannoli record {}{}",
            exit.describe(),
            tail(&stderr_path)
        ));
    }
    let wall = (exit.at - start).as_secs_f64();
    let stdout = read_text(&stdout_path)?;

    let out = Command::new(&cannoli)
        .args(["info", "--json"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run cannoli info: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cannoli info {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let info = parse_info(&String::from_utf8_lossy(&out.stdout))?;
    if !info.complete {
        return Err(format!("{} is not complete (cannoli info)", path.display()));
    }
    let mem = (hooks == Hooks::PcMem).then_some(info.mem);
    Ok(Sample {
        wall,
        total: wall,
        // wait4's ru_maxrss is the larger of the recorder's and QEMU's
        // (its waited-for child): each one's own peak comes from /proc.
        qemu_rss_kb: qemu_kb.unwrap_or(exit.maxrss_kb),
        client_rss_kb: Some(own_kb.unwrap_or(exit.maxrss_kb)),
        events: Some(info.exec + mem.unwrap_or(0)),
        lost: Some(info.lost),
        insns: Some(info.exec),
        mem,
        pc_checksum: None,
        stdout,
        file_bytes: Some(info.file_bytes),
        // QEMU ran under the recorder: wait4's rusage is both together.
        qemu_cpu: None,
    })
}

/// The replay row: `benchmark --threads N --replay FILE` on the workload's
/// `record-pc` recording (made first, untimed, if no record-pc row has
/// made it in this run), timed from starting the client to its exit.
fn run_replay(ctx: &Ctx, w: &Workload, name: &str, workers: usize) -> Result<Sample, String> {
    let path = recording_path(ctx, w, "record-pc");
    let have = ctx
        .recorded
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&path);
    if !have {
        eprint!("(recording {} first) ", path.display());
        run_record(ctx, w, "record-pc", Hooks::Pc, None)?;
    }
    let start = Instant::now();
    let file = path.to_string_lossy().into_owned();
    let mut cl = Client::start(
        ctx,
        &["--threads", &workers.to_string(), "--replay", &file],
        false,
    )?;
    let deadline = start + ctx.timeout;
    while cl.proc.exit().is_none() {
        if Instant::now() >= deadline {
            cl.proc.kill();
            return Err(format!(
                "{name}: the client still ran after {} s: killed (raise --timeout?)",
                ctx.timeout.as_secs()
            ));
        }
        wait_any(&mut [&mut cl.proc], deadline)?;
    }
    let done = cl.finished("the benchmark client (--replay)")?;
    let wall = (done.exit.at - start).as_secs_f64();
    Ok(Sample {
        wall,
        total: wall,
        qemu_rss_kb: 0,
        client_rss_kb: Some(done.exit.maxrss_kb),
        events: Some(done.events),
        lost: Some(done.lost),
        pc_checksum: find_checksum(&done.stdout),
        ..Sample::default()
    })
}

/// Waits for `p` to end (killing it at `deadline`), reading every 20 ms
/// while it runs the peak RSS (`VmHWM`) of it and of its child (QEMU):
/// wait4's `ru_maxrss` of a process that reaped its children is the larger
/// of its own peak and theirs, so it cannot tell the two apart. Returns
/// the last values read (peaks only grow; the last 20 ms may be missed).
pub fn wait_watching_rss(
    p: &mut Proc,
    deadline: Instant,
) -> Result<(Option<u64>, Option<u64>), String> {
    let pid = p.child.id();
    let (mut own, mut kid, mut child) = (None, None, None);
    while p.exit().is_none() {
        if Instant::now() >= deadline {
            p.kill();
            return Err(format!(
                "still running after {} s: killed (raise --timeout?)",
                (deadline - Instant::now()).as_secs()
            ));
        }
        if let Some(kb) = vm_hwm_kb(pid) {
            own = Some(kb);
        }
        if child.is_none() {
            child = first_child(pid);
        }
        if let Some(kb) = child.and_then(vm_hwm_kb) {
            kid = Some(kb);
        }
        wait_any(
            &mut [p],
            (Instant::now() + Duration::from_millis(20)).min(deadline),
        )?;
    }
    Ok((own, kid))
}

/// A child process of `pid` that has exec'd something other than `pid`'s
/// own program (QEMU, not the fork before its exec).
fn first_child(pid: u32) -> Option<u32> {
    let own = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    for task in fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let kids = fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for kid in kids
            .split_whitespace()
            .filter_map(|k| k.parse::<u32>().ok())
        {
            match fs::read_link(format!("/proc/{kid}/exe")) {
                Ok(exe) if exe != own => return Some(kid),
                _ => {}
            }
        }
    }
    None
}

/// `VmHWM` of a running process, in KiB.
fn vm_hwm_kb(pid: u32) -> Option<u64> {
    parse_vm_hwm(&fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// The `VmHWM:` of a /proc/PID/status text, in KiB.
pub fn parse_vm_hwm(status: &str) -> Option<u64> {
    let v = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    v.trim().strip_suffix("kB")?.trim().parse().ok()
}

/// What `cannoli info --json` says a recording holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecInfo {
    pub file_bytes: u64,
    /// Exec events: instructions.
    pub exec: u64,
    /// Read and write events: memory accesses.
    pub mem: u64,
    /// Events the recorder's streams reported lost.
    pub lost: u64,
    /// The recording ended properly (not cut short).
    pub complete: bool,
}

/// Parses `cannoli info --json`.
pub fn parse_info(json: &str) -> Result<RecInfo, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("cannoli info --json: {e}"))?;
    let num = |v: &serde_json::Value, what: &str| {
        v.as_u64()
            .ok_or_else(|| format!("cannoli info --json: no number {what}"))
    };
    let events = &v["events"];
    let lost = v["streams"]
        .as_array()
        .map(|s| s.iter().filter_map(|s| s["lost_events"].as_u64()).sum())
        .unwrap_or(0);
    Ok(RecInfo {
        file_bytes: num(&v["file_bytes"], "file_bytes")?,
        exec: num(&events["exec"], "events.exec")?,
        mem: num(&events["read"], "events.read")? + num(&events["write"], "events.write")?,
        lost,
        complete: v["complete"].as_bool().unwrap_or(false),
    })
}

/// The `benchmark` client (examples/benchmark), started on a port of its own.
struct Client {
    proc: Proc,
    /// Where it listens, from its "listening on ADDR" line.
    addr: String,
    /// The run's secret it was given, for QEMU.
    token: String,
    /// Its later stderr lines.
    lines: mpsc::Receiver<String>,
    /// Its stdout, read to the end on a thread so that it never blocks.
    stdout: JoinHandle<String>,
}

impl Client {
    /// Starts the client with `CANNOLI_ADDR=127.0.0.1:0`, so that the kernel
    /// picks a free port and no other run (or test) can take it between
    /// choosing and binding, and waits for it to say where it listens.
    /// With `listens` false (a replay) it does not wait for that line.
    fn start(ctx: &Ctx, args: &[&str], listens: bool) -> Result<Client, String> {
        let bin = ctx
            .client
            .clone()
            .unwrap_or_else(|| ctx.release.join("benchmark"));
        if !bin.is_file() {
            return Err(format!(
                "{} is missing: cargo build --release -p benchmark",
                bin.display()
            ));
        }
        let token = wire::Token::generate()
            .map_err(|e| format!("no random secret: {e}"))?
            .to_hex();
        let mut proc = Proc::spawn(
            "benchmark client",
            Command::new(&bin)
                .args(args)
                .env("CANNOLI_ADDR", "127.0.0.1:0")
                .env("CANNOLI_TOKEN", &token)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )?;
        let mut out = proc.child.stdout.take().expect("piped");
        let stdout = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let err = proc.child.stderr.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        if !listens {
            return Ok(Client {
                proc,
                addr: String::new(),
                token,
                lines,
                stdout,
            });
        }
        let until = Instant::now() + CLIENT_START;
        let mut seen = Vec::new();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(addr) = listening_addr(&line) {
                        return Ok(Client {
                            proc,
                            addr,
                            token,
                            lines,
                            stdout,
                        });
                    }
                    seen.push(line);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "the benchmark client did not say it listens within {} s",
                        CLIENT_START.as_secs()
                    ))
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(format!(
                        "the benchmark client exited before listening: {}",
                        seen.last().map(String::as_str).unwrap_or("(no message)")
                    ))
                }
            }
        }
    }
}

/// What a client that exited reported.
struct Finished {
    exit: Exit,
    /// All it wrote to stdout.
    stdout: String,
    /// Its count of events, and of events lost.
    events: u64,
    lost: u64,
}

impl Client {
    /// The result of a client that has exited (reaped by `wait_any`):
    /// its stdout and its line of counts, or why there is none, its last
    /// stderr line naming `who` (e.g. "the benchmark client") failing.
    fn finished(self, who: &str) -> Result<Finished, String> {
        let exit = self.proc.exit().expect("reaped");
        let stdout = self.stdout.join().unwrap_or_default();
        // The client has exited, so its stderr reader ends soon.
        let mut last = None;
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            last = Some(l);
        }
        if !exit.success() {
            return Err(format!(
                "{who} ended with {}: {}",
                exit.describe(),
                last.as_deref().unwrap_or("(no message)")
            ));
        }
        let (events, lost) = parse_client_line(&stdout)
            .ok_or_else(|| format!("unexpected output from {who}: {:?}", stdout.trim()))?;
        Ok(Finished {
            exit,
            stdout,
            events,
            lost,
        })
    }
}

/// The address in the client's "...listening on ADDR[; more text]" line.
pub fn listening_addr(line: &str) -> Option<String> {
    let rest = line.split("listening on ").nth(1)?;
    let addr: String = rest
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ';' && *c != ',')
        .collect();
    (!addr.is_empty()).then_some(addr)
}

/// Parses the client's "N events in M chunks, ..., L lost" line.
pub fn parse_client_line(out: &str) -> Option<(u64, u64)> {
    let line = out.lines().find(|l| l.contains(" events in "))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let events = words.first()?.parse().ok()?;
    let at = words
        .iter()
        .rposition(|w| w.trim_end_matches([',', ';']) == "lost")?;
    let lost = words.get(at.checked_sub(1)?)?.parse().ok()?;
    Some((events, lost))
}

/// The number after `key` in a plugin log.
pub fn find_count(log: &str, key: &str) -> Option<u64> {
    log.lines()
        .find_map(|l| l.trim().strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

/// The `0x...` after "pc checksum:" in a plugin log or the client's output.
pub fn find_checksum(text: &str) -> Option<u64> {
    let at = text.find("pc checksum: 0x")? + "pc checksum: 0x".len();
    let hex: String = text[at..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    u64::from_str_radix(&hex, 16).ok()
}

/// `": <last line of stderr>"` for an error message, or "".
pub fn tail(stderr: &Path) -> String {
    let text = fs::read_to_string(stderr).unwrap_or_default();
    match text.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(l) => format!(": {}", l.trim()),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The TB peer, built from its source, runs in QEMU and counts exactly
    /// what libinsn.so counts on a short nop loop; with libmem.so beside it,
    /// it sees the same pc stream (same checksum) and libmem.so the same
    /// accesses as alone. Needs the QEMU of scripts/build-qemu.sh and the
    /// guests of scripts/build-guests.sh (the error says so): it fails, it
    /// never skips.
    #[test]
    fn tbpeer_counts_equal_libinsn_on_the_nop_loop() {
        let root = crate::setup::workspace_root();
        let qemu = crate::setup::qemu(&root, "mipsel").unwrap();
        let lib = crate::setup::build_tbpeer(&root, &qemu.build).unwrap();
        let built = fs::metadata(&lib).unwrap().modified().unwrap();
        // Up to date: not built again.
        crate::setup::build_tbpeer(&root, &qemu.build).unwrap();
        assert_eq!(fs::metadata(&lib).unwrap().modified().unwrap(), built);

        let mut w = crate::workload::all(&root, true)
            .into_iter()
            .find(|w| w.name == "nop-loop")
            .unwrap();
        w.args = vec!["100000".into()];
        w.prepare().unwrap();
        let out = std::env::temp_dir().join(format!("cannoli-bench-tbpeer-{}", std::process::id()));
        fs::create_dir_all(&out).unwrap();
        let ctx = Ctx {
            qemu,
            release: root.join("target/release"),
            client: None,
            out: out.clone(),
            timeout: Duration::from_secs(120),
            tbpeer: Ok(lib),
            recorded: Mutex::default(),
        };
        let run = |name: &str| {
            let c = crate::config::by_name(name).unwrap();
            let s = run_once(&ctx, &w, c).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(s.stdout, "nop_loop: 100000 x 100 nops\n", "{name}");
            s
        };
        let (insn, tb, tb_mem, mem) = (
            run("plugin-insn"),
            run("plugin-tb"),
            run("plugin-tb-mem"),
            run("plugin-mem"),
        );
        fs::remove_dir_all(&out).unwrap();
        let n = insn.insns.unwrap();
        assert!(n > 100_000 * 104, "{n}");
        assert_eq!(tb.insns, Some(n));
        assert_eq!(tb_mem.insns, Some(n));
        assert_eq!(insn.pc_checksum, None);
        assert!(tb.pc_checksum.is_some());
        assert_eq!(tb_mem.pc_checksum, tb.pc_checksum);
        assert!(mem.mem.unwrap() > 0);
        assert_eq!(tb_mem.mem, mem.mem);
        assert_eq!(tb.mem, None);
    }

    #[test]
    fn parses_recording_info_and_rss() {
        let json = r#"{"file": "/x.cnl", "file_bytes": 38173566, "hooks": {"preset": "pc"},
            "streams": [{"stream": 0, "lost_events": 0, "events": {"exec": 5}},
                        {"stream": 1, "lost_events": 2, "events": {"exec": 7}}],
            "events": {"block": 1124, "exec": 1168436496, "read": 10, "write": 5, "syscall": 4904},
            "total_events": 1168442535, "bytes_per_event": 0.03, "complete": true}"#;
        assert_eq!(
            parse_info(json),
            Ok(RecInfo {
                file_bytes: 38173566,
                exec: 1168436496,
                mem: 15,
                lost: 2,
                complete: true
            })
        );
        let cut = json.replace("\"complete\": true", "\"complete\": false");
        assert!(!parse_info(&cut).unwrap().complete);
        assert!(parse_info("{\"file_bytes\": 1}").is_err());
        assert!(parse_info("not json").is_err());
        let status = "Name:\tcannoli\nVmPeak:\t  20000 kB\nVmHWM:\t   14352 kB\nVmRSS:\t 9000 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(14352));
        assert_eq!(parse_vm_hwm("Name:\tzombie\n"), None);
        // Our own, while running.
        assert!(vm_hwm_kb(std::process::id()).unwrap() > 0);
    }

    #[test]
    fn parses_client_and_plugin_output() {
        let line = "1040000123 events in 7935 chunks, 0.412 s since listening, 2524.3 M events/s, 0 lost\n";
        assert_eq!(parse_client_line(line), Some((1040000123, 0)));
        assert_eq!(parse_client_line("nothing"), None);
        let more = "7 events in 1 chunks, 3 lost; pc checksum: 0x00000000000000ff (7 pcs)\n";
        assert_eq!(parse_client_line(more), Some((7, 3)));
        assert_eq!(
            listening_addr("benchmark: listening on 127.0.0.1:4242").as_deref(),
            Some("127.0.0.1:4242")
        );
        assert_eq!(
            listening_addr(
                "benchmark: listening on 127.0.0.1:4242; now start QEMU with -cannoli x.so"
            )
            .as_deref(),
            Some("127.0.0.1:4242")
        );
        assert_eq!(listening_addr("benchmark: starting"), None);
        let log = "cpu 0 insns: 22950248\ntotal insns: 22950248\nmem accesses: 77\n";
        assert_eq!(find_count(log, "total insns:"), Some(22950248));
        assert_eq!(find_count(log, "mem accesses:"), Some(77));
        assert_eq!(find_count(log, "io accesses:"), None);
        let tb = "mem accesses: 77\ntotal insns: 10409130\npc checksum: 0x6a4f1f4de47f8ab6\n";
        assert_eq!(find_count(tb, "total insns:"), Some(10409130));
        assert_eq!(find_checksum(tb), Some(0x6a4f1f4de47f8ab6));
        assert_eq!(find_checksum(log), None);
        assert_eq!(
            find_checksum(
                "12 events in 3 chunks, 0 lost; pc checksum: 0x00000000000000ff (12 pcs)"
            ),
            Some(0xff)
        );
    }
}
