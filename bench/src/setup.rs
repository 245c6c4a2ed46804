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

/// Builds the client, the hook library, `cannoli` (the record rows) and
/// the guest programs. Every step is
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
                "-p",
                "cannoli-cli",
            ])
            .current_dir(root),
        "cargo build --release -p benchmark -p bench-hooks -p cannoli-cli",
    )?;
    run_step(
        Command::new("bash")
            .arg(root.join("scripts/build-guests.sh"))
            .args(["--quiet", "mipsel"]),
        "bash scripts/build-guests.sh mipsel",
    )
}

/// Where `setup::build_tbpeer` puts the TB-level plugin peer.
pub fn tbpeer_path(root: &Path) -> PathBuf {
    root.join("target/bench/plugins/libtbpeer.so")
}

/// The QEMU source tree of a build directory, for `qemu-plugin.h`: the `src`
/// directory beside it (scripts/build-qemu.sh's layout), else the source
/// directory meson recorded in `meson-info/meson-info.json`.
fn qemu_source(build: &Path) -> Option<PathBuf> {
    let header = |src: &Path| src.join("include/qemu/qemu-plugin.h").is_file();
    if let Some(src) = build.parent().map(|p| p.join("src")).filter(|s| header(s)) {
        return Some(src);
    }
    let info = fs::read_to_string(build.join("meson-info/meson-info.json")).ok()?;
    let at = info.find("\"source\"")? + "\"source\"".len();
    let rest = info[at..].trim_start().strip_prefix(':')?.trim_start();
    let src = PathBuf::from(rest.strip_prefix('"')?.split('"').next()?);
    header(&src).then_some(src)
}

fn mtime(p: &Path) -> Option<std::time::SystemTime> {
    fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Builds `bench/plugins/tbpeer.c` into [`tbpeer_path`] against the plugin
/// header of the QEMU in `build`, unless the library is newer than the
/// source and the header. Returns the library, or one line saying what is
/// missing.
pub fn build_tbpeer(root: &Path, build: &Path) -> Result<PathBuf, String> {
    let what = "cannot build the TB plugin peer";
    let source = root.join("bench/plugins/tbpeer.c");
    let out = tbpeer_path(root);
    let src = qemu_source(build).ok_or_else(|| {
        format!(
            "{what}: no QEMU source tree with include/qemu/qemu-plugin.h beside {}",
            build.display()
        )
    })?;
    let include = src.join("include/qemu");
    let built = mtime(&out);
    if built.is_some()
        && [&source, &include.join("qemu-plugin.h")]
            .iter()
            .all(|p| mtime(p) <= built)
    {
        return Ok(out);
    }
    let glib = Command::new("pkg-config")
        .args(["--cflags", "glib-2.0"])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .ok_or(format!(
            "{what}: no glib-2.0 headers (`pkg-config --cflags glib-2.0` failed; \
             apt-get install pkg-config libglib2.0-dev)"
        ))?;
    let dir = out.parent().expect("a directory");
    fs::create_dir_all(dir).map_err(|e| format!("{what}: cannot create {}: {e}", dir.display()))?;
    // Built beside and renamed into place, so that a concurrent run (or
    // test) never loads a half-written library.
    let tmp = out.with_extension(format!("so.tmp.{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let result = Command::new(&cc)
        .args(["-O2", "-Wall", "-shared", "-fPIC"])
        .args(glib.split_whitespace())
        .arg("-I")
        .arg(&include)
        .arg("-o")
        .arg(&tmp)
        .arg(&source)
        .stdin(Stdio::null())
        .output();
    let result = match result {
        Err(e) => Err(format!(
            "{what}: no C compiler ({cc}: {e}; apt-get install gcc)"
        )),
        Ok(o) if !o.status.success() => Err(format!(
            "{what}: {cc} failed: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .find(|l| l.contains("error"))
                .unwrap_or("(no message)")
        )),
        Ok(o) => {
            // Warnings are for whoever edits the plugin.
            std::io::Write::write_all(&mut std::io::stderr(), &o.stderr).ok();
            fs::rename(&tmp, &out).map_err(|e| format!("{what}: {e}"))
        }
    };
    let _ = fs::remove_file(&tmp);
    result.map(|()| out)
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
