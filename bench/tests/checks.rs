// SPDX-License-Identifier: GPL-2.0-or-later
//! The bench's own checks, on its small inputs: every row's guest output is
//! the same, the TB peer's instruction count equals QEMU's `libinsn.so`'s,
//! and the pc checksum of the `benchmark` client (live, PC and PC+mem) equals
//! the TB peer's. Both sides fold every pc in several chains
//! (`examples/benchmark`'s `Fold::push_all`, `bench/plugins/tbpeer.c`'s
//! `fold_block`), written apart, in two languages; the checksum is the one
//! function of the pc stream both must compute, with `libinsn.so` counting
//! the stream. The `heap` row's report must be clean on each of these
//! correct programs (nothing found, nothing lost).

use std::process::Command;

#[test]
fn quick_rows_agree_with_qemus_plugins() {
    let out = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args([
            "--quick",
            "--workload",
            "nop-loop,busybox-sha256,sortcrc",
            "--config",
            "plugin-insn,plugin-tb,cannoli-pc-1w,cannoli-pc-2w,cannoli-pcmem-2w,heap",
        ])
        .output()
        .expect("cannot run bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("All checks passed"),
        "bench found a mismatch:\n{stdout}\n{stderr}"
    );
    for row in [
        "plugin-insn",
        "plugin-tb",
        "cannoli-pc-1w",
        "cannoli-pc-2w",
        "cannoli-pcmem-2w",
        "heap",
    ] {
        let rows = stdout
            .lines()
            .filter(|l| l.starts_with('|') && l.contains(&format!("| {row} ")))
            .count();
        assert_eq!(rows, 3, "{row}: not a row for every workload:\n{stdout}");
    }
}
