// SPDX-License-Identifier: GPL-2.0-or-later
//! The parsers against small logs.

use super::*;
use std::fs;

fn tmp(name: &str, content: &str) -> (RunDir, PathBuf) {
    let d = RunDir::new();
    let p = d.file(name);
    fs::write(&p, content).unwrap();
    (d, p)
}

#[test]
fn strace_lines() {
    let c = parse_strace_line("31595 openat(AT_FDCWD,\"a, (b)\",O_RDWR|O_CREAT|O_TRUNC,0644) = 4")
        .unwrap();
    assert_eq!(c.tid, 31595);
    assert_eq!(c.name, "openat");
    assert_eq!(
        c.args,
        ["AT_FDCWD", "\"a, (b)\"", "O_RDWR|O_CREAT|O_TRUNC", "0644"]
    );
    assert_eq!(c.ret, Some(StraceRet::Value(4)));
    let c = parse_strace_line(
        "7 openat(AT_FDCWD,\"m\",O_RDONLY) = -1 errno=2 (No such file or directory)",
    )
    .unwrap();
    assert_eq!(c.ret, Some(StraceRet::Errno(2)));
    let c = parse_strace_line("7 exit_group(0)").unwrap();
    assert_eq!((c.args.len(), c.ret), (1, None));
    let c = parse_strace_line("7 getpid() = 7").unwrap();
    assert!(c.args.is_empty());
    let c = parse_strace_line("7 brk(NULL) = 0x004a4000").unwrap();
    assert_eq!(c.ret, Some(StraceRet::Value(0x4a4000)));
    let c = parse_strace_line(
        "7 prlimit64(0,RLIMIT_STACK,NULL,0x55d56da8) = 0 ({rlim_cur=8388608,rlim_max=-1})",
    )
    .unwrap();
    assert_eq!(c.ret, Some(StraceRet::Value(0)));
    assert_eq!(c.args.len(), 4);
    assert!(parse_strace_line("--- SIGSEGV {si_signo=SIGSEGV} ---").is_err());
    assert!(parse_strace_line("7 read(1,2").is_err());
}

#[test]
fn strace_values() {
    assert_eq!(
        strace_value("mipsel", "O_RDWR|O_CREAT|O_TRUNC"),
        Some(0x302)
    );
    assert_eq!(
        strace_value("riscv64", "O_RDWR|O_CREAT|O_TRUNC"),
        Some(0x242)
    );
    assert_eq!(
        strace_value("mipsel", "MAP_PRIVATE|MAP_ANONYMOUS"),
        Some(0x802)
    );
    assert_eq!(strace_value("riscv64", "AT_FDCWD"), Some(-100));
    assert_eq!(strace_value("riscv64", "0644"), Some(0o644));
    assert_eq!(strace_value("riscv64", "000"), Some(0));
    assert_eq!(strace_value("riscv64", "(nil)"), Some(0));
    assert_eq!(
        strace_value("riscv64", "0x0000000055d56da8"),
        Some(0x55d56da8)
    );
    assert_eq!(strace_value("riscv64", "RLIMIT_STACK"), None);
    assert_eq!(strace_value("riscv64", "O_RDONLY|O_WEIRD"), None);
    assert_eq!(strace_value("riscv64", "\"x\""), None);
    assert!(printed_matches(-100, 0xffff_ff9c, 32, true));
    assert!(printed_matches(-100, u64::MAX - 99, 64, true));
    assert!(printed_matches(5, 0x1_0000_0005, 64, true));
    assert!(!printed_matches(5, 0x1_0000_0005, 64, false));
    assert!(!printed_matches(6, 5, 64, true));
}

fn ev(name: &str, ret: Option<i64>, args: [u64; 6], data: &[u8]) -> SyscallEvent {
    SyscallEvent {
        num: 1,
        name: name.into(),
        ret,
        args,
        total: data.len() as u64,
        data: data.to_vec(),
    }
}

#[test]
fn strace_comparison() {
    let st: Vec<StraceCall> = [
        "9 openat(AT_FDCWD,\"f\",O_RDONLY) = 4",
        "9 getpid() = 9",
        "9 close(77) = -1 errno=9 (Bad file descriptor)",
        "9 exit_group(0)",
    ]
    .iter()
    .map(|l| parse_strace_line(l).unwrap())
    .collect();
    let good = vec![
        ev(
            "openat",
            Some(4),
            [(-100i64) as u64, 0x1000, 0, 0, 0, 0],
            b"f",
        ),
        ev("getpid", Some(20), [0; 6], b""),
        ev("close", Some(-9), [77, 0, 0, 0, 0, 0], b""),
        ev("exit_group", None, [0; 6], b""),
    ];
    let s = compare_strace("riscv64", 64, &st, 9, &good, 20).unwrap();
    assert_eq!((s.calls, s.results, s.paths, s.symbolic_args), (4, 3, 1, 2));
    let mut bad = good.clone();
    bad[0].data = b"g".to_vec();
    assert!(compare_strace("riscv64", 64, &st, 9, &bad, 20)
        .unwrap_err()
        .contains("path"));
    let mut bad = good.clone();
    bad[2].args[0] = 78;
    assert!(compare_strace("riscv64", 64, &st, 9, &bad, 20)
        .unwrap_err()
        .contains("argument 0"));
    let mut bad = good.clone();
    bad[2].ret = Some(-2);
    assert!(compare_strace("riscv64", 64, &st, 9, &bad, 20)
        .unwrap_err()
        .contains("result"));
    assert!(compare_strace("riscv64", 64, &st, 9, &good, 21).is_err());
    assert!(compare_strace("riscv64", 64, &st, 9, &good[..3], 20).is_err());
    let mut bad = good.clone();
    bad[0].args[2] = 1;
    assert!(compare_strace("riscv64", 64, &st, 9, &bad, 20).is_err());
}

#[test]
fn execlog_with_registers() {
    let (_d, p) = tmp(
        "e.log",
        "0, 0x1062c, 0x22000ef, \"jal ra,34 # 0x1064e\", ra -> 0x0000000000010630, pc -> 0x000000000001064e, cycle -> 0x1\n\
         0, 0x1064e, 0x67197, \"sd a0, 8(sp)\", store, 0x7ff0, fp -> 0x0000000000000005\n\
         0, 0x10652, 0x1, \"nop\"\n",
    );
    let log = parse_execlog_regs(&p, |n| layout_index("riscv64", n)).unwrap();
    assert_eq!(log.pcs, vec![0x1062c, 0x1064e, 0x10652]);
    assert_eq!(log.disas[&0x1064e], "sd a0, 8(sp)");
    assert_eq!(log.changes[0], vec![(1, 0x10630)]);
    assert_eq!(log.changes[1], vec![(8, 5)]);
    assert!(log.other_regs.contains("pc") && log.other_regs.contains("cycle"));
    let states = states_from_changes(&[7; 32], &log.changes);
    assert_eq!(states.len(), 3);
    assert_eq!(states[0][1], 7);
    assert_eq!(states[1][1], 0x10630);
    assert_eq!((states[2][1], states[2][8]), (0x10630, 5));
}

#[test]
fn cpu_logs() {
    let mut mips = String::from("pc=0x004006d0 HI=0x00000000 LO=0x00000000 ds 00e2 00000000 0\n");
    for b in (0..32).step_by(4) {
        mips.push_str(&format!(
            "GPR{b:02}: r0 {:08x} at {:08x} v0 {:08x} v1 {:08x}\n",
            b,
            b + 1,
            b + 2,
            b + 3
        ));
    }
    mips.push_str("CP0 Status  0x24000010 Cause   0x00000000 EPC    0x00000000\n");
    let (_d, p) = tmp("m.log", &mips);
    let s = parse_cpu_log(&p).unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].pc, 0x4006d0);
    assert_eq!(s[0].regs, (0..32).collect::<Vec<u64>>());
    let mut rv = String::from(" pc       0000000000010670\n");
    for b in (0..32).step_by(4) {
        rv.push_str(&format!(
            " x{b}/a {:016x} x{}/b {:016x} x{}/c {:016x} x{}/d {:016x}\n",
            b * 2,
            b + 1,
            (b + 1) * 2,
            b + 2,
            (b + 2) * 2,
            b + 3,
            (b + 3) * 2
        ));
    }
    let (_d, p) = tmp("r.log", &rv);
    let s = parse_cpu_log(&p).unwrap();
    assert_eq!(s[0].pc, 0x10670);
    assert_eq!(s[0].regs, (0..32).map(|i| i * 2).collect::<Vec<u64>>());
    let (_d, p) = tmp("bad.log", " pc       0000000000010670\n x0/zero 0\n");
    assert!(parse_cpu_log(&p).is_err());
}

#[test]
fn in_asm_and_once() {
    let (_d, p) = tmp(
        "a.log",
        "----------------\nIN: _start\n0x00000010:  addi\n0x00000014:  bnez\n\n\
         ----------------\nIN: \n0x00000014:  bnez\n\n\
         ----------------\nIN: \n0x00000018:  ret\n\n",
    );
    let tbs = parse_in_asm(&p).unwrap();
    assert_eq!(tbs, vec![vec![0x10, 0x14], vec![0x14], vec![0x18]]);
    // 10 14 | 14 (new block at 14) | 14 | 18
    let c = once_expectation(&tbs, &[0x10, 0x14, 0x14, 0x14, 0x18]).unwrap();
    assert_eq!((c[&0x10], c[&0x14], c[&0x18]), (1, 2, 1));
    assert!(once_expectation(&tbs, &[0x10, 0x14, 0x18]).is_err());
    assert!(once_expectation(&tbs, &[0x10, 0x14, 0x14]).is_err());
    assert!(is_subsequence(&[1, 3], &[1, 2, 3]).is_ok());
    assert!(is_subsequence(&[3, 1], &[1, 2, 3]).is_err());
}

#[test]
fn syscall_insns() {
    assert!(is_syscall_insn("mipsel", 0x0000000c));
    assert!(!is_syscall_insn("mipsel", 0x03e00008));
    assert!(is_syscall_insn("riscv64", 0x00000073));
    assert!(!is_syscall_insn("riscv64", 0x00100073));
}
