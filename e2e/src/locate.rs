// SPDX-License-Identifier: GPL-2.0-or-later
//! Locating the prerequisites: the QEMU builds (`CANNOLI_QEMU_BUILD`,
//! `CANNOLI_QEMU_PLAIN`, else `target/qemu.env`), the guest programs
//! (`target/guests/<arch>/<name>`, built by `scripts/build-guests.sh`, and
//! Debian's busybox, installed by `scripts/fetch-busybox.sh`), the jitter
//! library and the `cannoli-dump` client (`target/release`); and the guest
//! matrix ([`GUESTS`]) with what each guest needs.
//!
//! A missing prerequisite panics with a message naming what is missing and
//! the command that provides it: the tests fail, they never skip.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// Guest architectures the single-architecture tests (hooks, syscalls,
/// errors, launch, most of processes) cover; the matrix tests cover every
/// entry of [`GUESTS`].
pub const ARCHES: &[&str] = &["mipsel", "riscv64"];

/// Guest programs in `tests/programs/`.
pub const PROGRAMS: &[&str] = &["loops", "calls", "fnptr", "libc", "sortcrc"];

/// One guest architecture of the test matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guest {
    /// QEMU's name (`qemu-<arch>`), also the directory of its programs
    /// under `target/guests`.
    pub arch: &'static str,
    /// Address width.
    pub bits: u32,
    pub big_endian: bool,
    /// Debian's cross toolchain triple: a dynamically linked program runs
    /// with `-L /usr/<triple>` (its C library); `None` for the host's own
    /// architecture, whose libraries are the host's.
    pub triple: Option<&'static str>,
    /// `scripts/build-qemu.sh` also builds an unpatched QEMU for it
    /// (`CANNOLI_PLAIN_TARGETS`); for the others the patched build without
    /// `-cannoli` is the reference.
    pub plain: bool,
    /// Debian 12 ships `busybox-static` for it (`scripts/fetch-busybox.sh`).
    pub busybox: bool,
}

/// Every guest the matrix tests run on, in the order of `scripts/build-guests.sh`.
pub const GUESTS: &[Guest] = &[
    Guest {
        arch: "mipsel",
        bits: 32,
        big_endian: false,
        triple: Some("mipsel-linux-gnu"),
        plain: true,
        busybox: true,
    },
    Guest {
        arch: "mips",
        bits: 32,
        big_endian: true,
        triple: Some("mips-linux-gnu"),
        plain: false,
        busybox: false,
    },
    Guest {
        arch: "mips64el",
        bits: 64,
        big_endian: false,
        triple: Some("mips64el-linux-gnuabi64"),
        plain: false,
        busybox: true,
    },
    Guest {
        arch: "arm",
        bits: 32,
        big_endian: false,
        triple: Some("arm-linux-gnueabihf"),
        plain: false,
        busybox: true,
    },
    Guest {
        arch: "aarch64",
        bits: 64,
        big_endian: false,
        triple: Some("aarch64-linux-gnu"),
        plain: true,
        busybox: true,
    },
    Guest {
        arch: "riscv64",
        bits: 64,
        big_endian: false,
        triple: Some("riscv64-linux-gnu"),
        plain: true,
        busybox: false,
    },
    Guest {
        arch: "x86_64",
        bits: 64,
        big_endian: false,
        triple: None,
        plain: true,
        busybox: true,
    },
    Guest {
        arch: "i386",
        bits: 32,
        big_endian: false,
        triple: Some("i686-linux-gnu"),
        plain: false,
        busybox: true,
    },
    Guest {
        arch: "ppc64le",
        bits: 64,
        big_endian: false,
        triple: Some("powerpc64le-linux-gnu"),
        plain: false,
        busybox: true,
    },
];

/// The [`GUESTS`] entry of `arch`; panics for an architecture the matrix
/// does not know.
pub fn guest_info(arch: &str) -> &'static Guest {
    GUESTS
        .iter()
        .find(|g| g.arch == arch)
        .unwrap_or_else(|| panic!("unknown guest architecture {arch:?} (not in e2e::GUESTS)"))
}

/// Options that make QEMU's guest randomness deterministic: given to every
/// run of the harness, plugin and cannoli alike.
///
/// Without `-seed` the 16 `AT_RANDOM` bytes on the initial stack differ on
/// every run, and glibc's start-up code loads them and stores the
/// stack-protector and pointer guards derived from them (and every function
/// with a canary then loads the guard), so load/store values would never
/// match between two runs.
pub const QEMU_SEED_ARGS: &[&str] = &["-seed", "1"];

/// QEMU's own environment in every run of the harness (its guest does not
/// see it: [`QEMU_COMMON_ARGS`] unsets it for the guest with `-U`).
///
/// `MALLOC_ARENA_MAX=1` makes every QEMU thread allocate from glibc's main
/// arena. Otherwise QEMU's RCU thread, started early, creates its own arena
/// with a 64 MiB `mmap` at a moment that races with QEMU mapping its code
/// buffer, and which of the two comes first decides where a 64-bit guest's
/// stack and mmaps land (two layouts, even for plain QEMU, run to run);
/// every guest thread's first malloc would add another such mapping. With
/// one arena, every run of the same program under any QEMU build, plugin
/// or cannoli gets the same layout.
pub const QEMU_ENV: &[(&str, &str)] = &[("MALLOC_ARENA_MAX", "1")];

/// Options given to every QEMU run of the harness, plugin and cannoli
/// alike, ahead of the run-specific ones: [`QEMU_SEED_ARGS`], and `-U` for
/// each variable of [`QEMU_ENV`], so that the guest's environment stays
/// empty.
///
/// No `-R`: the harness runs every QEMU with the host's address space
/// randomisation off instead (see [`crate::run::GuestCmd`]), so that a
/// 64-bit guest is traced with the address space layout it really gets.
pub const QEMU_COMMON_ARGS: &[&str] = &["-seed", "1", "-U", "MALLOC_ARENA_MAX"];

/// Reserved guest address space given to 64-bit guests (`-R`) by
/// [`qemu_common_args`].
///
/// 32-bit guests on a 64-bit host always get a reserved address space, in
/// which QEMU itself picks where the stack and every mmap go, so their guest
/// addresses are the same on every run. 64-bit guests by default get
/// whatever the host's (randomised) `mmap` returns: the stack of a riscv64
/// guest lands at a different 0x7f... address on each run. `-R` makes QEMU
/// allocate inside its own reservation, deterministically.
pub const RESERVED_VA_64: &str = "0x100000000";

/// Options for a caller that starts QEMU itself with the host's address
/// space randomisation on (the example tools' tests): [`QEMU_SEED_ARGS`]
/// and, for 64-bit guests, `-R` so that two runs agree on every address.
/// The harness's own runs use [`QEMU_COMMON_ARGS`] and [`QEMU_ENV`] with
/// randomisation off.
pub fn qemu_common_args(arch: &str) -> Vec<&'static str> {
    let mut v = QEMU_SEED_ARGS.to_vec();
    if arch_bits(arch) == 64 {
        v.extend(["-R", RESERVED_VA_64]);
    }
    v
}

/// True if `prog` is a position-independent executable (ELF `ET_DYN`):
/// QEMU picks its load address (and so where its brk heap starts) with the
/// host's `mmap`, like the guest's stack and vDSO.
pub fn is_pie(prog: &Path) -> bool {
    use std::io::Read;
    let mut h = [0u8; 18];
    let ok = fs::File::open(prog)
        .and_then(|mut f| f.read_exact(&mut h))
        .is_ok();
    if !ok || &h[..4] != b"\x7fELF" {
        return false;
    }
    let e_type = if h[5] == 2 {
        u16::from_be_bytes([h[16], h[17]])
    } else {
        u16::from_le_bytes([h[16], h[17]])
    };
    e_type == 3
}

/// Guest address width of `arch`.
pub fn arch_bits(arch: &str) -> u32 {
    if let Some(g) = GUESTS.iter().find(|g| g.arch == arch) {
        return g.bits;
    }
    match arch {
        "armeb" | "riscv32" | "ppc" | "sparc" | "m68k" | "sh4" | "hppa" | "or1k" | "microblaze"
        | "microblazeel" | "xtensa" | "xtensaeb" | "mipsn32" | "mipsn32el" => 32,
        _ => 64,
    }
}

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
    // Each qemu-<arch> is checked when a test asks for it (`qemu`,
    // `plain_qemu`): a build without some target fails only those tests.
    let mut problems = Vec::new();
    for dir in [&q.build, &q.plain] {
        if !dir.is_dir() {
            problems.push(format!("{} is not a directory", dir.display()));
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
    /// The patched `qemu-<arch>`; panics if the build has none.
    pub fn qemu(&self, arch: &str) -> PathBuf {
        let exe = self.build.join(format!("qemu-{arch}"));
        assert!(
            is_executable(&exe),
            "{} is missing: the patched QEMU has no {arch} target; build it with \
             `bash scripts/build-qemu.sh` (its CANNOLI_QEMU_TARGETS must include {arch}-linux-user)",
            exe.display()
        );
        exe
    }
    /// True if the unpatched build has `qemu-<arch>`.
    pub fn has_plain(&self, arch: &str) -> bool {
        is_executable(&self.plain.join(format!("qemu-{arch}")))
    }
    /// The unpatched `qemu-<arch>`; panics if the build has none.
    pub fn plain_qemu(&self, arch: &str) -> PathBuf {
        let exe = self.plain.join(format!("qemu-{arch}"));
        assert!(
            is_executable(&exe),
            "{} is missing: the unpatched QEMU has no {arch} target; build it with \
             `bash scripts/build-qemu.sh` (its CANNOLI_PLAIN_TARGETS must include {arch})",
            exe.display()
        );
        exe
    }
    /// The reference QEMU for `arch`'s guest output: the unpatched one if
    /// the matrix says there is one ([`Guest::plain`]), else the patched
    /// one (run without `-cannoli`).
    pub fn reference_qemu(&self, arch: &str) -> PathBuf {
        match GUESTS.iter().find(|g| g.arch == arch) {
            Some(g) if !g.plain => self.qemu(arch),
            _ => self.plain_qemu(arch),
        }
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

/// Runs `bash scripts/<script> --quiet <arch>`; an error carries its output.
fn run_script(script: &str, arch: &str) -> Result<(), String> {
    let script = workspace_root().join("scripts").join(script);
    let out = Command::new("bash")
        .arg(&script)
        .arg("--quiet")
        .arg(arch)
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`bash {} --quiet {arch}` failed ({}):\n{}{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Runs `script` for `arch` once per test process (both scripts only do
/// what is not done yet), remembering the outcome; concurrent callers for
/// the same architecture wait for the first.
fn once_per_arch(
    done: &'static OnceLock<Mutex<HashMap<String, Result<(), String>>>>,
    script: &str,
    arch: &str,
) -> Result<(), String> {
    let mut m = done
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    m.entry(arch.to_string())
        .or_insert_with(|| run_script(script, arch))
        .clone()
}

/// Absolute path of guest program `name` for `arch`, built on demand by
/// `scripts/build-guests.sh` (`busybox`: see [`busybox`]).
pub fn guest(arch: &str, name: &str) -> PathBuf {
    if name == "busybox" {
        return busybox(arch);
    }
    if arch == "x86_64" && name == "dyn_busybox" {
        return dyn_busybox();
    }
    static BUILT: OnceLock<Mutex<HashMap<String, Result<(), String>>>> = OnceLock::new();
    if let Err(e) = once_per_arch(&BUILT, "build-guests.sh", arch) {
        panic!("building the guest programs for {arch} failed: {e}");
    }
    let p = workspace_root().join("target/guests").join(arch).join(name);
    assert!(
        is_executable(&p),
        "guest program {} missing after running scripts/build-guests.sh (is tests/programs/{name}.c there?)",
        p.display()
    );
    p
}

/// Debian's statically linked busybox for `arch`
/// (`target/guests/<arch>/busybox`), downloaded on demand by
/// `scripts/fetch-busybox.sh`; panics with that script's error if it
/// cannot be had (e.g. the mirror is unreachable, or `arch` is not a dpkg
/// foreign architecture).
pub fn busybox(arch: &str) -> PathBuf {
    let g = guest_info(arch);
    assert!(
        g.busybox,
        "Debian ships no busybox-static for {arch} (see e2e::GUESTS)"
    );
    static FETCHED: OnceLock<Mutex<HashMap<String, Result<(), String>>>> = OnceLock::new();
    if let Err(e) = once_per_arch(&FETCHED, "fetch-busybox.sh", arch) {
        panic!("no busybox for {arch}: {e}");
    }
    let p = workspace_root()
        .join("target/guests")
        .join(arch)
        .join("busybox");
    assert!(
        is_executable(&p),
        "{} missing after scripts/fetch-busybox.sh {arch} succeeded",
        p.display()
    );
    p
}

/// Debian's dynamically linked busybox for amd64 (package `busybox`, the
/// source version of `busybox-static`), `target/guests/x86_64/dyn/busybox`:
/// a build memcheck can run (it sees only a dynamic program's
/// allocations). Fetched on demand by `scripts/fetch-busybox.sh
/// dyn-x86_64`; panics with its error if it cannot be had.
pub fn dyn_busybox() -> PathBuf {
    static FETCHED: OnceLock<Mutex<HashMap<String, Result<(), String>>>> = OnceLock::new();
    if let Err(e) = once_per_arch(&FETCHED, "fetch-busybox.sh", "dyn-x86_64") {
        panic!("no dynamic busybox for x86_64: {e}");
    }
    let p = workspace_root().join("target/guests/x86_64/dyn/busybox");
    assert!(
        is_executable(&p),
        "{} missing after scripts/fetch-busybox.sh dyn-x86_64 succeeded",
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

/// [`expected_stdout`] on `arch`: on a big-endian guest
/// `tests/programs/<name>.be.expected` if there is one (a program whose
/// output depends on the byte order, like sortcrc's CRC over the bytes of
/// an int array).
pub fn expected_stdout_on(arch: &str, name: &str) -> Option<Vec<u8>> {
    let be = GUESTS.iter().any(|g| g.arch == arch && g.big_endian);
    let dir = workspace_root().join("tests/programs");
    be.then(|| fs::read(dir.join(format!("{name}.be.expected"))).ok())
        .flatten()
        .or_else(|| expected_stdout(name))
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

/// A tool binary of this workspace (`env!("CARGO_BIN_EXE_<name>")`, whose
/// package is also called `<name>`), with its hook library `lib<name>.so`
/// next to it. Cargo builds a package's cdylib for `cargo build`, not for
/// its integration tests, so this builds it, once per test process (a no-op
/// when it is up to date).
pub fn tool_exe(exe: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let exe = PathBuf::from(exe);
    let name = exe
        .file_name()
        .and_then(|n| n.to_str())
        .expect("tool file name")
        .to_string();
    let lib = exe.with_file_name(format!("lib{name}.so"));
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.contains(&name) {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", &name, "--lib"])
            .current_dir(workspace_root());
        match exe
            .parent()
            .and_then(|d| d.file_name())
            .and_then(|p| p.to_str())
        {
            Some("release") => {
                cmd.arg("--release");
            }
            Some("debug") | None => {}
            Some(profile) => {
                cmd.args(["--profile", profile]);
            }
        }
        let out = cmd.output().expect("cannot run cargo");
        assert!(
            out.status.success(),
            "building {} failed: {}",
            lib.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        built.push(name);
    }
    assert!(
        lib.is_file(),
        "{} is missing after building it",
        lib.display()
    );
    exe
}

#[cfg(test)]
mod tests {
    use super::*;

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
