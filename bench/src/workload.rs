//! The guest programs the benchmark runs, and their input data.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::probe::{sha256_probe_hits, Probes, SHA256_PROBES};

pub struct Workload {
    pub name: &'static str,
    /// Guest architecture (`qemu-<arch>`, `target/guests/<arch>/`).
    pub arch: &'static str,
    /// Absolute path of the guest binary: QEMU passes it to the guest as
    /// `argv[0]`, so every configuration must see the same path for the
    /// instruction counts to match.
    pub guest: PathBuf,
    pub args: Vec<String>,
    /// Restricts the workload to these configurations (`None`: all).
    pub only: Option<&'static [&'static str]>,
    /// One line for the legend under the table.
    pub about: String,
    /// What the guest's stdout must start with, when we know it in advance.
    pub expect_stdout: Option<String>,
    /// Input file to create before the first run: (path, size in bytes).
    input: Option<(PathBuf, u64)>,
    /// The `probe` row's probe points, for workloads that have one.
    pub probes: Option<Probes>,
}

/// Names accepted by `--workload`, in table order.
pub const NAMES: &[&str] = &["nop-loop", "busybox-sha256", "sortcrc", "rss-10x"];

/// Iterations of the nop loop (104 guest instructions each on mipsel: 100
/// nops, the counter increment, compare, branch and its delay slot).
fn nop_iterations(quick: bool) -> u64 {
    if quick {
        1_000_000
    } else {
        10_000_000
    }
}

/// Every workload, with inputs sized for a full run or a `--quick` smoke test.
pub fn all(root: &Path, quick: bool) -> Vec<Workload> {
    let guests = root.join("target/guests/mipsel");
    let data = root.join("target/bench");
    let nops = nop_iterations(quick);
    // 20 MB for the real run: about 1.2 G guest instructions.
    let sha_bytes: u64 = if quick { 2_000_000 } else { 20_000_000 };
    let sha_file = data.join(format!("random-{}MB.bin", sha_bytes / 1_000_000));
    // sortcrc N ROUNDS: each round generates, sorts and CRCs N ints; with
    // N = 200000 a round is about 48 M guest instructions.
    let (sort_n, sort_rounds) = if quick { (200_000, 2) } else { (200_000, 16) };
    vec![
        Workload {
            name: "nop-loop",
            arch: "mipsel",
            guest: guests.join("nop_loop"),
            args: vec![nops.to_string()],
            only: None,
            about: format!("bench/programs/nop_loop.c: {nops} x 100 nops"),
            expect_stdout: Some(format!("nop_loop: {nops} x 100 nops\n")),
            input: None,
            probes: None,
        },
        Workload {
            name: "busybox-sha256",
            arch: "mipsel",
            guest: guests.join("busybox"),
            args: vec!["sha256sum".into(), sha_file.to_string_lossy().into_owned()],
            only: None,
            about: format!(
                "Debian's busybox-static (mipsel) `sha256sum` over {} MB of pseudo-random bytes",
                sha_bytes / 1_000_000
            ),
            expect_stdout: None,
            input: Some((sha_file, sha_bytes)),
            probes: Some(Probes {
                points: SHA256_PROBES,
                hits: sha256_probe_hits(sha_bytes),
            }),
        },
        Workload {
            name: "sortcrc",
            arch: "mipsel",
            guest: guests.join("sortcrc"),
            args: vec![sort_n.to_string(), sort_rounds.to_string()],
            only: None,
            about: format!("tests/programs/sortcrc.c {sort_n} {sort_rounds}: quicksort + crc32"),
            expect_stdout: None,
            input: None,
            probes: None,
        },
        Workload {
            name: "rss-10x",
            arch: "mipsel",
            guest: guests.join("nop_loop"),
            args: vec![(nops * 10).to_string()],
            only: Some(&["cannoli-pc-1w", "record-pc", "replay-pc-2w"]),
            about: format!(
                "the nop loop 10x longer ({} x 100 nops), for peak RSS (live, recording, replay)",
                nops * 10
            ),
            expect_stdout: Some(format!("nop_loop: {} x 100 nops\n", nops * 10)),
            input: None,
            probes: None,
        },
    ]
}

impl Workload {
    pub fn runs_config(&self, config: &str) -> bool {
        if config == "probe" && self.probes.is_none() {
            return false;
        }
        match self.only {
            None => true,
            Some(only) => only.contains(&config),
        }
    }

    /// Checks that the guest binary exists and creates the input file.
    pub fn prepare(&mut self) -> Result<(), String> {
        if !self.guest.is_file() {
            let how = if self.name.starts_with("busybox") {
                "bash scripts/fetch-busybox.sh mipsel"
            } else {
                "bash scripts/build-guests.sh"
            };
            return Err(format!(
                "{}: {} is missing: run {how}",
                self.name,
                self.guest.display()
            ));
        }
        if let Some((path, size)) = &self.input {
            ensure_random_file(path, *size)?;
            if let Some(sum) = host_sha256(path) {
                self.expect_stdout = Some(format!("{sum}  {}\n", path.display()));
            }
        }
        Ok(())
    }
}

/// Writes `size` deterministic pseudo-random bytes (xorshift64*, fixed seed)
/// to `path` unless a file of that size is already there. Deterministic so
/// that every machine hashes the same bytes and runs the same instructions;
/// pseudo-random so that no data-dependent shortcut in the guest applies.
pub fn ensure_random_file(path: &Path, size: u64) -> Result<(), String> {
    if fs::metadata(path).map(|m| m.len() == size).unwrap_or(false) {
        return Ok(());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(fs::File::create(&tmp)?);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut left = size;
        while left > 0 {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let word = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            let n = left.min(8) as usize;
            f.write_all(&word[..n])?;
            left -= n as u64;
        }
        f.into_inner().map_err(|e| e.into_error())?.sync_all()
    };
    write().and_then(|()| fs::rename(&tmp, path)).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        format!("cannot write {}: {e}", path.display())
    })
}

/// The file's SHA-256 from the host's `sha256sum`, to check the guest's
/// answer; `None` if the host has no sha256sum.
fn host_sha256(path: &Path) -> Option<String> {
    let out = Command::new("sha256sum").arg(path).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?;
    let sum = s.split_whitespace().next()?;
    (out.status.success() && sum.len() == 64).then(|| sum.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_file_is_deterministic() {
        let dir = std::env::temp_dir().join(format!("cannoli-bench-test-{}", std::process::id()));
        let (a, b) = (dir.join("a"), dir.join("b"));
        ensure_random_file(&a, 1003).unwrap();
        ensure_random_file(&b, 1003).unwrap();
        let (x, y) = (fs::read(&a).unwrap(), fs::read(&b).unwrap());
        assert_eq!(x.len(), 1003);
        assert_eq!(x, y);
        assert!(
            x.iter().filter(|&&v| v == 0).count() < 20,
            "not random-looking"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
