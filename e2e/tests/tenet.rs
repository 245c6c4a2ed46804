// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli export tenet` against QEMU's own plugins.
//!
//! A short program is recorded with `--hooks regs` under the harness's
//! identical conditions, and the recording's QEMU also loads QEMU's own
//! libexeclog (`reg=*`: each instruction's pc, the registers it changed,
//! the addresses it loaded and stored) and libmem (each access's pc,
//! address, size and value) into one log: the ground truth is the very
//! execution that was recorded. (A separate plugin run would do: the
//! harness makes runs identical, but a plugin moves the guest's vDSO, and
//! the C library's start-up computes with its address, so some values
//! differ for that reason alone.) Then the recording is exported and,
//! following Tenet's convention (see `exports/tenet/src/lib.rs`: line k is
//! the state reached at instruction k, the registers that changed since
//! line k-1, then the pc, then the memory instruction k-1 accessed),
//! instruction by instruction:
//!
//! * line k's pc is libexeclog's k-th pc, and there are as many lines as
//!   executed instructions;
//! * the register state after line k (line 0's registers with every later
//!   line's changes applied) is line 0's with libexeclog's changes of
//!   instructions 0..k applied, for every register Tenet knows; and a line
//!   lists only registers that did change;
//! * line k's memory items are instruction k-1's accesses, in order, with
//!   libmem's addresses, sizes and values, `mr` for loads and `mw` for
//!   stores; line 0 has none;
//! * the first line has every register Tenet knows and no other; every
//!   line parses as Tenet's reader splits it.
//!
//! Line 0's own values are cannoli's registers before the first
//! instruction, which `tests/hooks.rs` checks against `-d cpu`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::time::Instant;

use e2e::dump::MemAccess;
use e2e::recording::Tool;
use e2e::tenet::*;
use e2e::*;

const PROG: &str = "exitcode";
const ARGS: &[&str] = &["0"];

/// The registers Tenet knows of `arch` (gdb's names, which are also the
/// export's) and its pc's name.
fn tenet_regs(arch: &str) -> (Vec<&'static str>, &'static str) {
    match arch {
        "x86_64" => (
            vec![
                "rax", "rbx", "rcx", "rdx", "rbp", "rsp", "rsi", "rdi", "r8", "r9", "r10", "r11",
                "r12", "r13", "r14", "r15",
            ],
            "rip",
        ),
        "i386" => (
            vec!["eax", "ebx", "ecx", "edx", "ebp", "esp", "esi", "edi"],
            "eip",
        ),
        "aarch64" => {
            let mut v: Vec<&'static str> = vec![
                "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12",
                "x13", "x14", "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24",
                "x25", "x26", "x27", "x28", "x29", "x30",
            ];
            v.push("sp");
            (v, "pc")
        }
        _ => panic!("no Tenet registers for {arch}"),
    }
}

fn show_mem(m: &[(String, u64, Vec<u8>)]) -> String {
    m.iter()
        .map(|(k, a, b)| {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!("{k}={a:#x}:{hex}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn tenet_case(arch: &str) {
    let start = Instant::now();
    let prog = guest(arch, PROG);
    let big_endian = false;
    let dir = RunDir::new();
    let f = Failures::new(format!("cannoli export tenet: {PROG} on {arch}"));
    eprintln!("e2e: tenet on {arch}: run dir {}", dir.path().display());
    let (names, pc_name) = tenet_regs(arch);
    let known: BTreeSet<&str> = names.iter().copied().collect();

    // ---- record, with the ground truth from the same run ------------------
    // The recording's QEMU also loads libexeclog (`reg=*`) and libmem into
    // one log: the very execution that is recorded (same pid, same layout:
    // a plugin run of its own would move the vDSO, and the C library's
    // start-up computes with the vDSO's address).
    let q = qemu_builds();
    let log = dir.file("truth.log");
    let qemu_args = format!(
        "{} -plugin {},reg=* -plugin {}{} -d plugin -D {}",
        QEMU_COMMON_ARGS.join(" "),
        q.plugin(Plugin::Execlog).display(),
        q.plugin(Plugin::Mem).display(),
        Plugin::Mem.options(),
        log.display()
    );
    let rec = dir.file("run.cnl");
    let out = dir.file("run.tenet");
    let r = Tool::new("cannoli")
        .args(["record", "--hooks", "regs", "-o"])
        .arg(&rec)
        .arg(&prog)
        .args(ARGS)
        .env("CANNOLI_QEMU_ARGS", &qemu_args)
        .run(&dir, "record", timeout())
        .unwrap_or_else(|e| panic!("{e}"));
    if let Err(e) = r.expect_code(0) {
        panic!("{e}");
    }
    if !r.stderr.contains(" 0 lost") {
        f.fail(
            "record",
            format!("no `0 lost` in its summary:\n{}", r.stderr),
        );
    }
    let insns = parse_execlog_insns(&log).unwrap_or_else(|e| panic!("{e}"));
    let mem = parse_shared_mem(&log).unwrap_or_else(|e| panic!("{e}"));
    let by_insn: Vec<Vec<MemAccess>> =
        accesses_by_insn(&insns, &mem).unwrap_or_else(|e| panic!("ground truth: {e}"));
    if insns.len() < 1000 || mem.len() < 100 {
        f.fail(
            "ground truth",
            format!(
                "{} instructions, {} accesses: too few to test anything",
                insns.len(),
                mem.len()
            ),
        );
    }

    // ---- export -----------------------------------------------------------
    let t0 = Instant::now();
    let x = Tool::new("cannoli")
        .args(["export", "tenet"])
        .arg(&rec)
        .arg("-o")
        .arg(&out)
        .run(&dir, "export", timeout())
        .unwrap_or_else(|e| panic!("{e}"));
    let export_time = t0.elapsed();
    if let Err(e) = x.expect_code(0) {
        panic!("{e}");
    }
    // A stream that does not exist: one line naming the ones that do.
    let bad = Tool::new("cannoli")
        .args(["export", "tenet"])
        .arg(&rec)
        .args(["--stream", "7", "-o"])
        .arg(dir.file("bad.tenet"))
        .run(&dir, "export-bad-stream", timeout())
        .unwrap_or_else(|e| panic!("{e}"));
    let lines_err = bad.stderr_lines();
    if bad.code() != Ok(1)
        || lines_err.len() != 1
        || !lines_err[0].contains("no stream 7")
        || !lines_err[0].contains("0 (pid ")
        || !lines_err[0].contains("--stream N")
    {
        f.fail(
            "--stream 7",
            format!("{:?}, stderr:\n{}", bad.code(), bad.stderr),
        );
    }
    let text = fs::read_to_string(&out).expect("the trace");
    let mut lines = Vec::new();
    for (i, l) in text.lines().enumerate() {
        match parse_tenet_line(l, pc_name) {
            Ok(t) => lines.push(t),
            Err(e) => {
                f.fail("format", format!("line {i}: {e}: {l:?}"));
                f.finish();
                return;
            }
        }
    }
    eprintln!(
        "e2e: tenet on {arch}: {} lines, {} accesses; export {:.2?}",
        lines.len(),
        mem.len(),
        export_time
    );

    // ---- format -------------------------------------------------------
    for (i, l) in lines.iter().enumerate() {
        if l.pc.is_none() {
            f.fail("format", format!("line {i} has no {pc_name}"));
            break;
        }
        if let Some((n, _)) = l.regs.iter().find(|(n, _)| !known.contains(n.as_str())) {
            f.fail(
                "format",
                format!("line {i}: {n} is not a register Tenet knows"),
            );
            break;
        }
    }
    if let Some(l0) = lines.first() {
        let got: BTreeSet<&str> = l0.regs.iter().map(|(n, _)| n.as_str()).collect();
        if got != known {
            f.fail(
                "format",
                format!("the first line has {got:?}, not every register {known:?}"),
            );
        }
    }

    // ---- pcs ----------------------------------------------------------
    let want_pcs: Vec<u64> = insns.iter().map(|i| i.pc).collect();
    let got_pcs: Vec<u64> = lines.iter().map(|l| l.pc.unwrap_or(0)).collect();
    f.check(
        "pcs",
        compare_seq("pcs", "libexeclog", &want_pcs, "tenet", &got_pcs, |pc| {
            format!("{pc:x}")
        }),
    );

    // ---- registers ----------------------------------------------------
    let got_states = tenet_states(&lines);
    let mut want_states: Vec<BTreeMap<String, u64>> = Vec::with_capacity(lines.len());
    if let Some(s0) = got_states.first() {
        let mut cur = s0.clone();
        for k in 0..insns.len() {
            if k > 0 {
                for (n, v) in &insns[k - 1].changes {
                    if known.contains(n.as_str()) {
                        cur.insert(n.clone(), *v);
                    }
                }
            }
            want_states.push(cur.clone());
        }
    }
    f.check(
        "registers",
        compare_seq_by(
            "register state at each line",
            "libexeclog",
            &want_states,
            "tenet",
            &got_states,
            |_, w, g| w.len() == g.len() && w.iter().all(|(n, v)| g.get(n) == Some(v)),
            |i, s| {
                let diff: Vec<String> = s
                    .iter()
                    .filter(|(n, v)| {
                        i == 0
                            || got_states
                                .get(i - 1)
                                .and_then(|p| p.get(*n))
                                .map(|p| p != *v)
                                .unwrap_or(true)
                    })
                    .map(|(n, v)| format!("{n}={v:x}"))
                    .collect();
                format!(
                    "{:x}: {}",
                    want_pcs.get(i).copied().unwrap_or(0),
                    diff.join(" ")
                )
            },
        ),
    );
    // Only changes are listed.
    for (k, l) in lines.iter().enumerate().skip(1) {
        if let Some((n, v)) = l
            .regs
            .iter()
            .find(|(n, v)| got_states[k - 1].get(n) == Some(v))
        {
            f.fail(
                "registers",
                format!("line {k} lists {n}={v:x}, which did not change"),
            );
            break;
        }
    }

    // ---- memory -------------------------------------------------------
    let want_mem: Vec<Vec<(String, u64, Vec<u8>)>> = (0..insns.len())
        .map(|k| {
            if k == 0 {
                Vec::new()
            } else {
                by_insn[k - 1]
                    .iter()
                    .map(|m| tenet_mem(m, big_endian))
                    .collect()
            }
        })
        .collect();
    let got_mem: Vec<Vec<(String, u64, Vec<u8>)>> = lines.iter().map(|l| l.mem.clone()).collect();
    f.check(
        "memory",
        compare_seq_by(
            "memory items of each line",
            "libmem",
            &want_mem,
            "tenet",
            &got_mem,
            |_, w, g| w == g,
            |i, m| {
                format!(
                    "line {i} ({:x}): {}",
                    want_pcs.get(i).copied().unwrap_or(0),
                    show_mem(m)
                )
            },
        ),
    );
    if let Some(last) = by_insn.last() {
        if !last.is_empty() {
            f.fail(
                "memory",
                format!(
                    "the last instruction made {} accesses, which no line can hold",
                    last.len()
                ),
            );
        }
    }
    eprintln!("e2e: tenet on {arch}: checked in {:.1?}", start.elapsed());
    f.finish();
}

#[test]
fn tenet_x86_64() {
    tenet_case("x86_64");
}

#[test]
fn tenet_aarch64() {
    tenet_case("aarch64");
}

#[test]
fn tenet_i386() {
    tenet_case("i386");
}
