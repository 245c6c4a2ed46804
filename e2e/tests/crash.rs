// SPDX-License-Identifier: GPL-2.0-or-later
//! A guest killed by a fault: QEMU leaves the JIT from its signal handler by
//! longjmp, and dies with the guest's signal. The trace must be complete up
//! to the faulting instruction, and handed over before QEMU dies.

use e2e::*;

fn crash(arch: &str) {
    let prog = guest(arch, "crash");
    let dir = RunDir::new();
    let (gt, log) = run_plugin(&dir, "execlog", arch, Plugin::Execlog, &prog, &[]);
    assert!(
        !gt.status.success(),
        "the crash program did not crash under the execlog plugin"
    );
    let execlog = parse_execlog(&log).unwrap_or_else(|e| panic!("{e}"));

    let run = run_cannoli(&dir, "cannoli", arch, &prog, &[], 2);
    assert_eq!(
        run.guest.status.code(),
        gt.status.code(),
        "QEMU's exit status differs with -cannoli"
    );
    assert_eq!(
        run.guest.stdout, gt.stdout,
        "guest stdout differs with -cannoli"
    );
    assert!(
        run.client_status.success(),
        "cannoli-dump reported lost events or an incomplete stream:\n{}",
        run.client_stderr
    );
    let dump = parse_dump(&run.dump).unwrap_or_else(|e| panic!("{e}"));
    compare_seq(
        "pc sequence",
        "execlog",
        &execlog.pcs,
        "cannoli",
        &dump.pcs,
        |pc| format!("{pc:#x}"),
    )
    .unwrap_or_else(|e| panic!("crash on {arch}: {e}"));
}

#[test]
fn crash_mipsel() {
    crash("mipsel");
}

#[test]
fn crash_riscv64() {
    crash("riscv64");
}
