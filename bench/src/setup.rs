//! Finding and building what the benchmark runs, and describing the host.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The workspace root (this crate lives in `<root>/bench`).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// Where the two QEMU builds are.
pub struct Qemu {
    /// Patched QEMU (and QEMU's plugins under `tests/tcg/plugins/`).
    pub build: PathBuf,
    /// The same source configured without cannoli.
    pub plain: PathBuf,
}

impl Qemu {
    /// `qemu-<arch>` of the patched build, or of the plain one.
    pub fn binary(&self, plain: bool, arch: &str) -> PathBuf {
        let dir = if plain { &self.plain } else { &self.build };
        dir.join(format!("qemu-{arch}"))
    }
}

const BUILD_HINT: &str = "build it with `bash scripts/build-qemu.sh`";

/// Reads `target/qemu.env` (written by scripts/build-qemu.sh). The variables
/// `CANNOLI_QEMU_BUILD` and `CANNOLI_QEMU_PLAIN` in our own environment win,
/// as in the e2e tests, so a QEMU built elsewhere can be measured too.
pub fn qemu(root: &Path, arch: &str) -> Result<Qemu, String> {
    let file = root.join("target/qemu.env");
    let text = fs::read_to_string(&file).unwrap_or_default();
    let get = |key: &str| -> Option<PathBuf> {
        if let Ok(v) = std::env::var(key) {
            if !v.is_empty() {
                return Some(v.into());
            }
        }
        text.lines()
            .map(|l| l.trim().strip_prefix("export ").unwrap_or(l.trim()))
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim().trim_matches('"').trim_matches('\'').into())
    };
    let (Some(build), Some(plain)) = (get("CANNOLI_QEMU_BUILD"), get("CANNOLI_QEMU_PLAIN")) else {
        return Err(if file.exists() {
            format!(
                "{} lacks CANNOLI_QEMU_BUILD or CANNOLI_QEMU_PLAIN: {BUILD_HINT}",
                file.display()
            )
        } else {
            format!(
                "no patched QEMU ({} is missing): {BUILD_HINT}",
                file.display()
            )
        });
    };
    let q = Qemu { build, plain };
    for plain in [false, true] {
        let b = q.binary(plain, arch);
        if !b.is_file() {
            return Err(format!("{} is missing: {BUILD_HINT}", b.display()));
        }
    }
    Ok(q)
}

/// Builds the client, the hook library and the guest programs. Every step is
/// a no-op when up to date; their own output goes to our stderr.
pub fn build(root: &Path) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run_step(
        Command::new(&cargo)
            .args([
                "build",
                "--release",
                "--quiet",
                "-p",
                "benchmark",
                "-p",
                "bench-hooks",
            ])
            .current_dir(root),
        "cargo build --release -p benchmark -p bench-hooks",
    )?;
    run_step(
        Command::new("bash")
            .arg(root.join("scripts/build-guests.sh"))
            .args(["--quiet", "mipsel"]),
        "bash scripts/build-guests.sh mipsel",
    )
}

fn run_step(cmd: &mut Command, what: &str) -> Result<(), String> {
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("cannot run `{what}`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{what}` failed ({status}); see its output above"))
    }
}

/// The lines above the table: what the numbers were measured on.
pub fn host_description(qemu_binary: &Path) -> Vec<String> {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let logical = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let usable = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let load = fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into());
    let version = Command::new(qemu_binary)
        .arg("--version")
        .env_clear()
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    vec![
        format!("- CPU: {model}, {logical} logical cores ({usable} usable by this process)"),
        format!("- Date: {}", utc_now()),
        format!("- QEMU: {version}"),
        format!(
            "- Linux {}, load average before the runs: {load}",
            kernel.trim()
        ),
    ]
}

/// The current time as `YYYY-MM-DD HH:MM UTC`.
fn utc_now() -> String {
    // SAFETY: time(NULL) has no preconditions; gmtime_r fills our struct.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::gmtime_r(&t, &mut tm).is_null() {
            return "unknown".into();
        }
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02} UTC",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min
        )
    }
}
