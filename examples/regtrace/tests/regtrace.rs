// SPDX-License-Identifier: GPL-2.0-or-later
//! End-to-end tests of the regtrace example against QEMU's own view of the
//! registers:
//!
//! * riscv64: `contrib/plugins/libexeclog.so,reg=*`, whose log lists, per
//!   executed instruction, the registers that instruction changed;
//! * mipsel: QEMU's MIPS target exposes no registers to plugins (it has no
//!   gdb XML, so `qemu_plugin_get_registers` is empty and execlog's `reg=*`
//!   logs no changes at all), so the ground truth is QEMU's `-d cpu` log
//!   with `-one-insn-per-tb -d nochain`: the CPU state before every
//!   instruction.
//!
//! Both sides run under identical conditions (empty guest environment, same
//! absolute program path and argv, stdout to a file, `-seed 1`, `-R` for
//! 64-bit guests). Needs `cargo build --release` first and the QEMU builds.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use e2e::{guest, qemu_builds, qemu_common_args, tail, RunDir};

/// One line of the trace: pc and the registers it changed (name -> new).
type Step = (u64, BTreeMap<String, u64>);

fn regtrace_exe() -> PathBuf {
    e2e::tool_exe(env!("CARGO_BIN_EXE_regtrace"))
}

struct Run {
    status: i32,
    trace: String,
    stderr: String,
}

fn run_regtrace(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    opts: &[&str],
    prog: &Path,
    args: &[&str],
) -> Run {
    let q = qemu_builds();
    let out = dir.file(&format!("{tag}.trace"));
    let o = Command::new(regtrace_exe())
        .arg("-o")
        .arg(&out)
        .args(opts)
        .arg(prog)
        .args(args)
        .env_clear()
        .env("CANNOLI_QEMU_BUILD", &q.build)
        .env("CANNOLI_QEMU_ARGS", qemu_common_args(arch).join(" "))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(fs::File::create(dir.file(&format!("{tag}.stdout"))).unwrap())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    Run {
        status: o.status.code().unwrap_or(-1),
        trace: fs::read_to_string(&out).unwrap_or_default(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn hex(s: &str) -> u64 {
    let s = s.trim();
    u64::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16)
        .unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// Our trace: the instruction lines (the last, `(end of trace)`, apart),
/// and the `registers at` line's values.
fn parse_ours(text: &str) -> (Vec<Step>, u64, BTreeMap<String, u64>) {
    let mut steps = Vec::new();
    let mut last = None;
    let mut initial = BTreeMap::new();
    let mut headers = 0;
    for l in text.lines() {
        if l.starts_with("== pid ") {
            headers += 1;
            continue;
        }
        if let Some(rest) = l.strip_prefix("registers at ") {
            let (_, regs) = rest.split_once(':').unwrap();
            for kv in regs.split_whitespace() {
                let (k, v) = kv.split_once('=').unwrap();
                initial.insert(k.to_string(), hex(v));
            }
            continue;
        }
        assert!(last.is_none(), "a line after `(end of trace)`: {l:?}");
        let (pc, rest) = l.split_once("  ").unwrap_or((l, ""));
        let pc = hex(pc);
        if rest == "(end of trace)" {
            last = Some(pc);
            continue;
        }
        let mut ch = BTreeMap::new();
        for c in rest.split(", ").filter(|c| !c.is_empty()) {
            let (name, vals) = c.split_once(": ").unwrap_or_else(|| panic!("{l:?}"));
            let (_old, new) = vals.split_once(" -> ").unwrap_or_else(|| panic!("{l:?}"));
            ch.insert(name.to_string(), hex(new));
        }
        steps.push((pc, ch));
    }
    assert_eq!(headers, 1, "one thread, one header");
    (steps, last.expect("no `(end of trace)` line"), initial)
}

/// Registers whose reported change at each step differs between two runs
/// of the ground truth: values derived from the thread id (glibc's
/// `set_tid_address` result, stored and loaded again by its locks) and the
/// like, which no two runs share. Both runs must execute the same pcs.
fn unstable(a: &[Step], b: &[Step]) -> Vec<Vec<String>> {
    assert_eq!(
        a.len(),
        b.len(),
        "two ground-truth runs executed different instruction counts"
    );
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            assert_eq!(x.0, y.0, "two ground-truth runs executed different pcs");
            x.1.keys()
                .chain(y.1.keys())
                .filter(|r| x.1.get(*r) != y.1.get(*r))
                .cloned()
                .collect()
        })
        .collect()
}

/// Panics at the first difference, with context: pcs everywhere, each
/// register's reported change unless it is unstable at that step. Returns
/// how many (step, register) pairs were left out.
fn compare(ours: &[Step], theirs: &[Step], unstable: &[Vec<String>], what: &str) -> usize {
    let show = |s: &Step| format!("{:#x} {:x?}", s.0, s.1);
    let mut skipped = 0;
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        let mut same = a.0 == b.0;
        for r in a.1.keys().chain(b.1.keys()) {
            if unstable[i].contains(r) {
                skipped += 1;
            } else if a.1.get(r) != b.1.get(r) {
                same = false;
            }
        }
        if !same {
            let from = i.saturating_sub(3);
            let ctx: Vec<String> = (from..i + 1)
                .map(|j| format!("  ours {}\n  {what} {}", show(&ours[j]), show(&theirs[j])))
                .collect();
            panic!("instruction {i} differs from {what}:\n{}", ctx.join("\n"));
        }
    }
    assert_eq!(
        ours.len(),
        theirs.len(),
        "instruction counts differ from {what}"
    );
    skipped
}

/// execlog's register change log for `prog args` (its last line, printed
/// at exit without a register check, apart).
fn execlog(dir: &RunDir, tag: &str, arch: &str, prog: &Path, args: &[&str]) -> (Vec<Step>, u64) {
    let q = qemu_builds();
    let log = dir.file(&format!("{tag}.log"));
    let mut spec = q
        .build
        .join("contrib/plugins/libexeclog.so")
        .into_os_string();
    spec.push(",reg=*");
    let o = Command::new(q.qemu(arch))
        .args(qemu_common_args(arch))
        .arg("-plugin")
        .arg(spec)
        .args(["-d", "plugin", "-D"])
        .arg(&log)
        .arg(prog)
        .args(args)
        .env_clear()
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(fs::File::create(dir.file(&format!("{tag}.stdout"))).unwrap())
        .output()
        .unwrap();
    assert!(o.status.success());
    // Our names for the general purpose registers; execlog (gdb) calls s0 fp.
    let names: Vec<&str> = cannoli::wire::reg_names(arch).to_vec();
    let mut steps: Vec<Step> = Vec::new();
    for l in fs::read_to_string(&log).unwrap().lines() {
        // 0, 0x1062c, 0x22000ef, "jal ...", ra -> 0x0000000000010630, pc -> ...
        let mut f = l.splitn(3, ", ");
        let (_cpu, pc) = (f.next().unwrap(), hex(f.next().unwrap()));
        let rest = f.next().unwrap();
        // Changes follow the closing quote of the disassembly.
        let after = &rest[rest.rfind('"').unwrap() + 1..];
        let mut ch = BTreeMap::new();
        for c in after.split(", ").filter(|c| c.contains(" -> ")) {
            let (name, val) = c.split_once(" -> ").unwrap();
            let name = if name == "fp" { "s0" } else { name };
            if names.contains(&name) {
                ch.insert(name.to_string(), hex(val));
            }
        }
        steps.push((pc, ch));
    }
    let last = steps.pop().expect("empty execlog").0;
    (steps, last)
}

/// riscv64 against execlog's register change log.
#[test]
fn matches_execlog_riscv64() {
    let arch = "riscv64";
    let dir = RunDir::new();
    let prog = guest(arch, "calls");
    let run = run_regtrace(&dir, "rt", arch, &[], &prog, &[]);
    assert_eq!(run.status, 0, "{}", tail(&run.stderr, 20));
    let (ours, last, initial) = parse_ours(&run.trace);
    let (a, a_last) = execlog(&dir, "a", arch, &prog, &[]);
    let (b, _) = execlog(&dir, "b", arch, &prog, &[]);
    let unstable = unstable(&a, &b);
    assert_eq!(last, a_last);
    assert!(ours.len() > 100_000, "{} instructions", ours.len());
    let skipped = compare(&ours, &a, &unstable, "execlog");
    // Only a handful of thread-id values.
    eprintln!("{skipped} register changes left out (they differ between two ground-truth runs)");
    assert!(skipped < 100, "{skipped} register changes left out");
    // The stack pointer is set before the first instruction.
    assert!(initial.get("sp").is_some_and(|&sp| sp != 0), "{initial:?}");
    assert!(
        run.stderr
            .contains(&format!("regtrace: {} instructions,", ours.len() + 1)),
        "{}",
        run.stderr
    );
}

/// The CPU states of QEMU's `-d cpu` log for MIPS: pc and GPR0..31.
fn parse_mips_cpu_log(text: &str) -> Vec<(u64, Vec<u64>)> {
    let mut states: Vec<(u64, Vec<u64>)> = Vec::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("pc=") {
            let pc = hex(rest.split_whitespace().next().unwrap());
            states.push((pc, Vec::with_capacity(32)));
        } else if let Some(rest) = l.strip_prefix("GPR") {
            // GPR04: a0 00000000 a1 00000000 a2 00000000 a3 00000000
            let (idx, regs) = rest.split_once(':').unwrap();
            let s = &mut states.last_mut().expect("GPR line before pc=").1;
            assert_eq!(s.len(), idx.parse::<usize>().unwrap(), "{l}");
            let f: Vec<&str> = regs.split_whitespace().collect();
            for pair in f.chunks(2) {
                s.push(hex(pair[1]));
            }
        }
    }
    for s in &states {
        assert_eq!(s.1.len(), 32, "pc {:#x}", s.0);
    }
    states
}

/// QEMU's CPU state log for `prog args`, one instruction per block, as
/// change steps, the last pc, and the registers before the first.
fn cpu_log(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
) -> (Vec<Step>, u64, BTreeMap<String, u64>) {
    let q = qemu_builds();
    let log = dir.file(&format!("{tag}.log"));
    let o = Command::new(q.qemu(arch))
        .args(qemu_common_args(arch))
        .args(["-one-insn-per-tb", "-d", "cpu,nochain", "-D"])
        .arg(&log)
        .arg(prog)
        .args(args)
        .env_clear()
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(fs::File::create(dir.file(&format!("{tag}.stdout"))).unwrap())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let states = parse_mips_cpu_log(&fs::read_to_string(&log).unwrap());
    let _ = fs::remove_file(&log);
    let names = cannoli::wire::reg_names(arch);
    let steps: Vec<Step> = states
        .windows(2)
        .map(|w| {
            let ch = (0..32)
                .filter(|&i| w[0].1[i] != w[1].1[i])
                .map(|i| (names[i].to_string(), w[1].1[i]))
                .collect();
            (w[0].0, ch)
        })
        .collect();
    let initial = (0..32)
        .filter(|&i| states[0].1[i] != 0)
        .map(|i| (names[i].to_string(), states[0].1[i]))
        .collect();
    (steps, states.last().unwrap().0, initial)
}

/// mipsel against QEMU's CPU state log.
#[test]
fn matches_cpu_log_mipsel() {
    let arch = "mipsel";
    let dir = RunDir::new();
    let prog = guest(arch, "exitcode");
    let args = ["3", "four"];
    let run = run_regtrace(&dir, "rt", arch, &[], &prog, &args);
    assert_eq!(run.status, 3, "{}", tail(&run.stderr, 20));
    let (ours, last, initial) = parse_ours(&run.trace);
    let (a, a_last, a_initial) = cpu_log(&dir, "a", arch, &prog, &args);
    let (b, _, _) = cpu_log(&dir, "b", arch, &prog, &args);
    let unstable = unstable(&a, &b);
    assert_eq!(last, a_last);
    assert_eq!(initial, a_initial);
    assert!(ours.len() > 10_000, "{} instructions", ours.len());
    let skipped = compare(&ours, &a, &unstable, "cpu log");
    eprintln!("{skipped} register changes left out (they differ between two ground-truth runs)");
    assert!(skipped < 100, "{skipped} register changes left out");
}

/// `--func`: only that function, every one of its instructions once, with
/// the result the C code computes.
fn one_function(arch: &str, min_insn: u64, result: &str) {
    let dir = RunDir::new();
    let prog = guest(arch, "cov_funcs");
    let run = run_regtrace(&dir, "f", arch, &["--func", "cov_always"], &prog, &[]);
    assert_eq!(run.status, 0, "{}", tail(&run.stderr, 20));
    let l = run
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("regtrace: cov_always is "))
        .unwrap_or_else(|| panic!("{}", run.stderr));
    let (lo, hi) = l.split_once('-').unwrap();
    let (lo, hi) = (hex(lo), hex(hi));
    let (steps, last, initial) = parse_ours(&run.trace);
    // A leaf function without branches but its return: each instruction
    // once, in order.
    let mut pcs: Vec<u64> = steps.iter().map(|s| s.0).collect();
    pcs.push(last);
    assert_eq!(pcs[0], lo, "{}", run.trace);
    for w in pcs.windows(2).chain([[last, hi].as_slice()]) {
        let step = w[1] - w[0];
        assert!(
            step == min_insn || step == 4,
            "{:#x} -> {:#x}\n{}",
            w[0],
            w[1],
            run.trace
        );
    }
    // Called with argc = 1.
    assert_eq!(initial.get("a0"), Some(&1), "{}", run.trace);
    let reg = if arch == "mipsel" { "v0" } else { "a0" };
    assert!(
        steps.iter().any(|s| s.1.get(reg) == Some(&hex(result))),
        "no `{reg}: ... -> {result}` in\n{}",
        run.trace
    );

    // --changed drops the lines without changes (the return here).
    let ch = run_regtrace(
        &dir,
        "c",
        arch,
        &["--func", "cov_always", "--changed"],
        &prog,
        &[],
    );
    let (csteps, clast, _) = parse_ours(&ch.trace);
    assert_eq!(clast, last);
    assert!(csteps.iter().all(|s| !s.1.is_empty()));
    let with: Vec<&Step> = steps.iter().filter(|s| !s.1.is_empty()).collect();
    assert_eq!(csteps.iter().collect::<Vec<_>>(), with);
    assert!(csteps.len() < steps.len());
}

#[test]
fn one_function_mipsel() {
    // 1 * 2654435761 ^ (1 >> 7)
    one_function("mipsel", 4, "9e3779b1");
}

#[test]
fn one_function_riscv64() {
    // RV64 keeps 32-bit values sign-extended in 64-bit registers.
    one_function("riscv64", 2, "ffffffff9e3779b1");
}

#[test]
fn usage_errors() {
    let exe = regtrace_exe();
    let o = Command::new(&exe)
        .arg("--range")
        .arg("10-5")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("want LO-HI"));
    let prog = guest("mipsel", "cov_funcs");
    let o = Command::new(&exe)
        .args(["--func", "no_such_function"])
        .arg(&prog)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no such symbol"));
    let o = Command::new(&exe).arg("--bogus").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}
