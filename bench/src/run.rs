//! One measurement: a workload under a configuration, start to finish.

use crate::config::{Config, Kind, Lib};
use crate::proc::{wait_any, Proc};
use crate::setup::Qemu;
use crate::workload::Workload;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
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
        Kind::Plain => {}
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
            let cl = Client::start(ctx, workers)?;
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
        ..Sample::default()
    };
    sample.total = sample.wall;
    if !qexit.success() {
        return Err(format!("QEMU {}{}", qexit.describe(), tail(&stderr_path)));
    }
    sample.stdout = fs::read(&stdout_path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| format!("cannot read {}: {e}", stdout_path.display()))?;

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
        let cexit = cl.proc.exit().expect("reaped");
        sample.total = (cexit.at - start).as_secs_f64();
        sample.client_rss_kb = Some(cexit.maxrss_kb);
        let out = cl.stdout.join().unwrap_or_default();
        // The client has exited, so its stderr reader ends soon.
        let mut errs = Vec::new();
        while let Ok(l) = cl.lines.recv_timeout(Duration::from_secs(2)) {
            errs.push(l);
        }
        if !cexit.success() {
            return Err(format!(
                "the benchmark client ended with {}: {}",
                cexit.describe(),
                errs.last().map(String::as_str).unwrap_or("(no message)")
            ));
        }
        let (events, lost) = parse_client_line(&out).ok_or_else(|| {
            format!(
                "unexpected output from the benchmark client: {:?}",
                out.trim()
            )
        })?;
        sample.events = Some(events);
        sample.lost = Some(lost);
        sample.pc_checksum = find_checksum(&out);
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
    fn start(ctx: &Ctx, workers: usize) -> Result<Client, String> {
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
                .args(["--threads", &workers.to_string()])
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

/// ": <last line of stderr>" for an error message, or "".
fn tail(stderr: &Path) -> String {
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
