// SPDX-License-Identifier: GPL-2.0-or-later
//! The `probe` row: `cannoli probe` with the workload's probe points,
//! against plain QEMU on the same run. Only the probed pcs are hooked, so
//! this row measures what a probe costs where it fires and nothing else.
//!
//! The hits are written to `/dev/null` (formatted, as a user's would be,
//! but not stored: a million lines of 32 registers are 330 MB), and their
//! number is checked against the workload's own arithmetic (SHA-256 runs
//! its block function once per 64 bytes of input, plus the padding block,
//! and busybox calls its update function once per 4096-byte read).

use std::ffi::OsStr;

use crate::run::{read_text, run_tool, Ctx, Sample};
use crate::workload::Workload;

/// What a workload's probe row probes, and how many hits that must give.
#[derive(Debug, Clone)]
pub struct Probes {
    /// The `-p` arguments.
    pub points: &'static [&'static str],
    /// Hits a correct run reports.
    pub hits: u64,
}

/// Ten pcs of the two SHA-256 functions of Debian's busybox-static
/// 1:1.35.0-4 for mipsel (stripped, so by address): the first three
/// instructions of the block function, run once per 64-byte block, and the
/// first seven of the update function it is called from, run once per read
/// of the input. Over the bench's 20 MB that is about a million hits in
/// all, as issue 25 sizes the row: the cost of probes that fire often, at
/// functions of two rates.
pub const SHA256_PROBES: &[&str] = &[
    "0x5c0910", "0x5c0914", "0x5c0918", "0x5c0ba0", "0x5c0ba4", "0x5c0ba8", "0x5c0bac", "0x5c0bb0",
    "0x5c0bb4", "0x5c0bb8",
];

/// Hits of [`SHA256_PROBES`] for `bytes` of input.
pub fn sha256_probe_hits(bytes: u64) -> u64 {
    3 * sha256_blocks(bytes) + 7 * sha256_reads(bytes)
}

/// How many times SHA-256 runs its block function on `bytes` of input:
/// once per whole 64-byte block, then once or twice for the padding (the
/// 0x80 byte and the 8-byte length must fit after the tail).
pub fn sha256_blocks(bytes: u64) -> u64 {
    bytes / 64 + if bytes % 64 < 56 { 1 } else { 2 }
}

/// How many times busybox's `sha256sum` calls the update function on
/// `bytes` of input: once per read of its 4096-byte buffer that returns
/// data.
pub fn sha256_reads(bytes: u64) -> u64 {
    bytes.div_ceil(4096)
}

/// Runs `cannoli probe` on `w` with `probes`, as the other rows run QEMU
/// ([`run_tool`]).
pub fn run(ctx: &Ctx, w: &Workload, name: &str, probes: &Probes) -> Result<Sample, String> {
    let mut args = vec![OsStr::new("probe")];
    for p in probes.points {
        args.extend([OsStr::new("-p"), OsStr::new(p)]);
    }
    args.extend([OsStr::new("-o"), OsStr::new("/dev/null")]);
    let run = run_tool(ctx, w, name, &args)?;
    let stderr = read_text(&run.stderr_path)?;
    let hits = parse_hits(&stderr)
        .ok_or_else(|| format!("cannot find the hit count in {}", run.stderr_path.display()))?;
    if hits != probes.hits {
        return Err(format!(
            "{hits} probe hits, not the workload's {} (difference {:+})",
            probes.hits,
            hits as i128 - probes.hits as i128
        ));
    }
    Ok(run.sample(hits))
}

/// N from `probe: N hits of ...`.
fn parse_hits(stderr: &str) -> Option<u64> {
    stderr.lines().find_map(|l| {
        l.strip_prefix("probe: ")?
            .split_once(" hits of ")?
            .0
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_counts() {
        // 7,000,000 bytes gave 109,376 calls of busybox's block function.
        assert_eq!(sha256_blocks(7_000_000), 109_376);
        assert_eq!(sha256_blocks(0), 1);
        assert_eq!(sha256_blocks(55), 1);
        assert_eq!(sha256_blocks(56), 2);
        assert_eq!(sha256_blocks(64), 2);
        // 20,000,000 bytes: 4,883 calls of the update function (4,882 of
        // 4096 bytes, one of 3328), counted by `cannoli probe`.
        assert_eq!(sha256_reads(20_000_000), 4_883);
        assert_eq!(sha256_reads(4096), 1);
        assert_eq!(sha256_probe_hits(20_000_000), 3 * 312_501 + 7 * 4_883);
    }

    #[test]
    fn hit_line() {
        let s = "x\nprobe: 1093760 hits of 10 probes in 0 functions, 1 thread\n";
        assert_eq!(parse_hits(s), Some(1_093_760));
        assert_eq!(parse_hits("probe: none"), None);
    }
}
