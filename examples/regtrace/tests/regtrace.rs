// SPDX-License-Identifier: GPL-2.0-or-later
//! End-to-end tests of the regtrace example against QEMU's own view of the
//! registers, on every guest of the matrix:
//!
//! * riscv64, arm (Thumb-2), aarch64, x86_64, i386, ppc64le:
//!   `contrib/plugins/libexeclog.so,reg=*`, whose log lists, per executed
//!   instruction, the registers that instruction changed (by gdb's names,
//!   which are ours but for RISC-V's `fp`);
//! * mipsel, mips, mips64el: QEMU's MIPS target exposes no registers to
//!   plugins (it has no gdb XML, so `qemu_plugin_get_registers` is empty and
//!   execlog's `reg=*` logs no changes at all), so the ground truth is
//!   QEMU's `-d cpu` log with `-one-insn-per-tb -d nochain`: the CPU state
//!   before every instruction.
//!
//! Both sides run under identical conditions (empty guest environment, same
//! absolute program path and argv, stdout to a file, `-seed 1`, the host's
//! address space randomisation off, so that a 64-bit guest gets the same
//! addresses in every run). Needs `cargo build --release` first and the
//! QEMU builds.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use e2e::{guest, no_aslr, qemu_builds, qemu_common_args, tail, RunDir, QEMU_ENV};

/// The QEMU options of both sides: `-seed 1`, and `-R` for a 64-bit guest,
/// so that its stack and mappings land at the same addresses in QEMU with
/// a plugin and in QEMU with cannoli (host address space randomisation is
/// off for both as well, but the plugin's own libraries would still move a
/// 64-bit guest's mappings). mips64el programs are linked at 0x120000000,
/// so it gets 8 GiB instead of 4; x86_64 none, as QEMU cannot place its
/// vsyscall page in a reserved space (see `matches_execlog_x86_64`).
/// QEMU itself runs with [`QEMU_ENV`] (one malloc arena: otherwise a race
/// between two of its threads decides where a guest without `-R` lands),
/// which `-U` keeps from the guest.
fn qemu_args(arch: &str) -> Vec<&'static str> {
    let mut v = qemu_common_args(arch);
    for (k, _) in QEMU_ENV {
        v.extend(["-U", k]);
    }
    if let Some(i) = v.iter().position(|a| *a == "-R") {
        match arch {
            "mips64el" => v[i + 1] = "0x200000000",
            "x86_64" => {
                v.drain(i..i + 2);
            }
            _ => {}
        }
    }
    v
}

/// Where the guest's stdout goes in every run, ours and QEMU's: glibc
/// `fstat`s it, and a file's or a pipe's timestamps (the second it was
/// made) would differ between runs, in registers too; /dev/null's do not.
fn guest_stdout() -> Stdio {
    Stdio::from(fs::File::create("/dev/null").unwrap())
}

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
    run_regtrace_with(dir, tag, arch, opts, prog, args, &[])
}

/// [`run_regtrace`] with more QEMU options (`CANNOLI_QEMU_ARGS`, split at
/// whitespace).
fn run_regtrace_with(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    opts: &[&str],
    prog: &Path,
    args: &[&str],
    qemu_extra: &[String],
) -> Run {
    let q = qemu_builds();
    let mut qemu_opts: Vec<String> = qemu_args(arch).iter().map(|s| s.to_string()).collect();
    qemu_opts.extend(qemu_extra.iter().cloned());
    let out = dir.file(&format!("{tag}.trace"));
    let o = no_aslr(&mut Command::new(regtrace_exe()))
        .arg("-o")
        .arg(&out)
        .args(opts)
        .arg(prog)
        .args(args)
        .env_clear()
        .envs(QEMU_ENV.iter().copied())
        .env("CANNOLI_QEMU_BUILD", &q.build)
        .env("CANNOLI_QEMU_ARGS", qemu_opts.join(" "))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(guest_stdout())
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

/// Our names of `arch`'s registers as regtrace shows them: all of the
/// layout's but the program counter (ARM's r15, which QEMU updates only
/// between blocks and regtrace leaves out).
fn shown_names(arch: &str) -> Vec<&'static str> {
    let names = cannoli::wire::reg_names(arch);
    assert!(!names.is_empty(), "no register names for {arch}");
    names.iter().copied().filter(|n| *n != "pc").collect()
}

/// execlog's register change log for `prog args` (its last line, printed
/// at exit without a register check, apart).
fn execlog(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
    status: i32,
) -> (Vec<Step>, u64) {
    let log = dir.file(&format!("{tag}.log"));
    let o = no_aslr(&mut Command::new(qemu_builds().qemu(arch)))
        .args(qemu_args(arch))
        .args(execlog_args(&log))
        .arg(prog)
        .args(args)
        .env_clear()
        .envs(QEMU_ENV.iter().copied())
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(guest_stdout())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(status), "{arch}: execlog run");
    parse_execlog(&log, arch)
}

/// The QEMU options that log every instruction's register changes to
/// `log` (libexeclog with `reg=*`).
fn execlog_args(log: &Path) -> Vec<String> {
    let lib = qemu_builds().build.join("contrib/plugins/libexeclog.so");
    vec![
        "-plugin".into(),
        format!("{},reg=*", lib.display()),
        "-d".into(),
        "plugin".into(),
        "-D".into(),
        log.display().to_string(),
    ]
}

/// An execlog log as steps, and its last pc (printed at exit without a
/// register check).
fn parse_execlog(log: &Path, arch: &str) -> (Vec<Step>, u64) {
    // Our names for the general purpose registers; execlog (gdb) calls
    // RISC-V's s0 fp.
    let names = shown_names(arch);
    let mut steps: Vec<Step> = Vec::new();
    for l in fs::read_to_string(log).unwrap().lines() {
        // 0, 0x1062c, 0x22000ef, "jal ...", ra -> 0x0000000000010630, pc -> ...
        let mut f = l.splitn(3, ", ");
        let (_cpu, pc) = (f.next().unwrap(), hex(f.next().unwrap()));
        let rest = f.next().unwrap();
        // Changes follow the closing quote of the disassembly.
        let after = &rest[rest.rfind('"').unwrap() + 1..];
        let mut ch = BTreeMap::new();
        for c in after.split(", ").filter(|c| c.contains(" -> ")) {
            let (name, val) = c.split_once(" -> ").unwrap();
            let name = if name == "fp" && arch.starts_with("riscv") {
                "s0"
            } else {
                name
            };
            if names.contains(&name) {
                ch.insert(name.to_string(), hex(val));
            }
        }
        steps.push((pc, ch));
    }
    let last = steps.pop().expect("empty execlog").0;
    (steps, last)
}

/// `arch` against execlog's register change log, on `prog args` (which
/// exits with `status`) running at least `min` instructions; `sp` is the
/// stack pointer's name. `same_process`: execlog runs in regtrace's own
/// QEMU (for a guest whose addresses differ between two QEMU processes).
fn matches_execlog(
    arch: &str,
    prog: &str,
    args: &[&str],
    status: i32,
    min: usize,
    sp: &str,
    same_process: bool,
) {
    let dir = RunDir::new();
    let prog = guest(arch, prog);
    let (run, (a, a_last), (b, _)) = if same_process {
        let run = run_regtrace_with(
            &dir,
            "rt",
            arch,
            &[],
            &prog,
            args,
            &execlog_args(&dir.file("a.log")),
        );
        let again = run_regtrace_with(
            &dir,
            "rt2",
            arch,
            &[],
            &prog,
            args,
            &execlog_args(&dir.file("b.log")),
        );
        assert_eq!(again.status, status, "{}", tail(&again.stderr, 20));
        let a = parse_execlog(&dir.file("a.log"), arch);
        let b = parse_execlog(&dir.file("b.log"), arch);
        (run, a, b)
    } else {
        let run = run_regtrace(&dir, "rt", arch, &[], &prog, args);
        let a = execlog(&dir, "a", arch, &prog, args, status);
        let b = execlog(&dir, "b", arch, &prog, args, status);
        (run, a, b)
    };
    assert_eq!(run.status, status, "{}", tail(&run.stderr, 20));
    let (ours, last, initial) = parse_ours(&run.trace);
    let unstable = unstable(&a, &b);
    assert_eq!(last, a_last);
    assert!(ours.len() > min, "{} instructions", ours.len());
    let skipped = compare(&ours, &a, &unstable, "execlog");
    // Only a handful of thread-id values.
    eprintln!("{skipped} register changes left out (they differ between two ground-truth runs)");
    assert!(skipped < 100, "{skipped} register changes left out");
    // Something changed, by our names: not a trace of nothing.
    let changes: usize = ours.iter().map(|s| s.1.len()).sum();
    assert!(changes > ours.len() / 4, "{changes} changes");
    // The stack pointer is set before the first instruction.
    assert!(initial.get(sp).is_some_and(|&v| v != 0), "{initial:?}");
    assert!(
        run.stderr
            .contains(&format!("regtrace: {} instructions,", ours.len() + 1)),
        "{}",
        run.stderr
    );
}

#[test]
fn matches_execlog_riscv64() {
    matches_execlog("riscv64", "calls", &[], 0, 100_000, "sp", false);
}

/// Thumb-2: ARM's env->regs, r13 and r14 by their ABI names, without r15.
#[test]
fn matches_execlog_arm() {
    matches_execlog("arm", "exitcode", &["3", "four"], 3, 10_000, "sp", false);
}

#[test]
fn matches_execlog_aarch64() {
    matches_execlog(
        "aarch64",
        "exitcode",
        &["3", "four"],
        3,
        10_000,
        "sp",
        false,
    );
}

/// x86_64 cannot have `-R` (QEMU cannot place its vsyscall page in a
/// reserved space), and without it the plugin's own libraries move the
/// guest's stack: execlog runs in regtrace's QEMU, on the same guest.
#[test]
fn matches_execlog_x86_64() {
    matches_execlog("x86_64", "exitcode", &["3", "four"], 3, 10_000, "rsp", true);
}

/// 32-bit x86: eax, ecx, edx, ebx, esp, ebp, esi, edi.
#[test]
fn matches_execlog_i386() {
    matches_execlog("i386", "exitcode", &["3", "four"], 3, 10_000, "esp", false);
}

/// PowerPC: r0..r31, r1 the stack pointer.
#[test]
fn matches_execlog_ppc64le() {
    matches_execlog(
        "ppc64le",
        "exitcode",
        &["3", "four"],
        3,
        10_000,
        "r1",
        false,
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
    let o = no_aslr(&mut Command::new(q.qemu(arch)))
        .args(qemu_args(arch))
        .args(["-one-insn-per-tb", "-d", "cpu,nochain", "-D"])
        .arg(&log)
        .arg(prog)
        .args(args)
        .env_clear()
        .envs(QEMU_ENV.iter().copied())
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(guest_stdout())
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

/// MIPS against QEMU's CPU state log.
fn matches_cpu_log(arch: &str) {
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

#[test]
fn matches_cpu_log_mipsel() {
    matches_cpu_log("mipsel");
}

/// Big-endian: the same registers, values read in the guest's order by
/// QEMU and handed over as host words.
#[test]
fn matches_cpu_log_mips() {
    matches_cpu_log("mips");
}

/// 64-bit registers.
#[test]
fn matches_cpu_log_mips64el() {
    matches_cpu_log("mips64el");
}

/// Debian's cross objdump for `arch`.
fn objdump(arch: &str) -> &'static str {
    match arch {
        "mipsel" => "mipsel-linux-gnu-objdump",
        "mips" => "mips-linux-gnu-objdump",
        "mips64el" => "mips64el-linux-gnuabi64-objdump",
        "arm" => "arm-linux-gnueabihf-objdump",
        "aarch64" => "aarch64-linux-gnu-objdump",
        "riscv64" => "riscv64-linux-gnu-objdump",
        "i386" => "i686-linux-gnu-objdump",
        "ppc64le" => "powerpc64le-linux-gnu-objdump",
        _ => "objdump",
    }
}

/// The addresses of the instructions in `[lo, hi)` of `prog`, as the cross
/// objdump disassembles them (data in the code, like ARM literal pools and
/// PowerPC traceback tables, left out).
fn objdump_pcs(arch: &str, prog: &Path, lo: u64, hi: u64) -> Vec<u64> {
    let o = Command::new(objdump(arch))
        .args(["-d", "-w", "--no-show-raw-insn"])
        .arg(format!("--start-address={lo:#x}"))
        .arg(format!("--stop-address={hi:#x}"))
        .arg(prog)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} (scripts/deps.sh): {e}", objdump(arch)));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let (addr, insn) = l.split_once(":\t")?;
            let addr = u64::from_str_radix(addr.trim(), 16).ok()?;
            (!insn.trim_start().starts_with('.')).then_some(addr)
        })
        .collect()
}

/// `--func`: only that function, every one of its instructions once (the
/// cross objdump's, in order), with the result the C code computes in
/// `result_reg`; `arg_reg` holds argc = 1 at the start (i386 passes it on
/// the stack).
fn one_function(arch: &str, arg_reg: Option<&str>, result_reg: &str, result: &str) {
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
    let want = objdump_pcs(arch, &prog, lo, hi);
    assert!(want.len() >= 3, "{want:x?}");
    assert_eq!(
        pcs, want,
        "{arch}: the trace's pcs and objdump's\n{}",
        run.trace
    );
    // Called with argc = 1.
    if let Some(r) = arg_reg {
        assert_eq!(initial.get(r), Some(&1), "{}", run.trace);
    }
    assert!(
        steps
            .iter()
            .any(|s| s.1.get(result_reg) == Some(&hex(result))),
        "no `{result_reg}: ... -> {result}` in\n{}",
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
    one_function("mipsel", Some("a0"), "v0", "9e3779b1");
}

#[test]
fn one_function_riscv64() {
    // RV64 keeps 32-bit values sign-extended in 64-bit registers.
    one_function("riscv64", Some("a0"), "a0", "ffffffff9e3779b1");
}

#[test]
fn one_function_mips() {
    one_function("mips", Some("a0"), "v0", "9e3779b1");
}

#[test]
fn one_function_mips64el() {
    // As RV64, MIPS64 sign-extends 32-bit results.
    one_function("mips64el", Some("a0"), "v0", "ffffffff9e3779b1");
}

/// A Thumb function: its symbol's value is odd, its code is not.
#[test]
fn one_function_arm() {
    one_function("arm", Some("r0"), "r0", "9e3779b1");
}

#[test]
fn one_function_aarch64() {
    // A w register's result clears the upper half of its x register.
    one_function("aarch64", Some("x0"), "x0", "9e3779b1");
}

#[test]
fn one_function_x86_64() {
    one_function("x86_64", Some("rdi"), "rax", "9e3779b1");
}

#[test]
fn one_function_i386() {
    one_function("i386", None, "eax", "9e3779b1");
}

#[test]
fn one_function_ppc64le() {
    one_function("ppc64le", Some("r3"), "r3", "9e3779b1");
}

/// `--func` of a position-independent program (every `dyn_*` build is
/// one): the symbol's link-time range moves by the load bias the program
/// gets when it runs, so the hook library places it then (a plan file):
/// `hb_index`, a leaf without branches, traced once, each instruction of
/// objdump's at the same offset from the function's start.
fn one_pie_function(arch: &str) {
    let dir = RunDir::new();
    let prog = guest(arch, "dyn_heapbugs");
    let run = run_regtrace(
        &dir,
        "pie",
        arch,
        &["--func", "hb_index"],
        &prog,
        &["uaf-read"],
    );
    assert_eq!(run.status, 0, "{}", tail(&run.stderr, 20));
    let l = run
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("regtrace: hb_index is "))
        .unwrap_or_else(|| panic!("{}", run.stderr));
    assert!(l.contains("position independent"), "{l}");
    let (lo, hi) = l
        .split_whitespace()
        .next()
        .unwrap()
        .split_once('-')
        .unwrap();
    let (lo, hi) = (hex(lo), hex(hi));
    let (steps, last, _) = parse_ours(&run.trace);
    let mut pcs: Vec<u64> = steps.iter().map(|s| s.0).collect();
    pcs.push(last);
    let want = objdump_pcs(arch, &prog, lo, hi);
    assert!(want.len() >= 2, "{want:x?}");
    // The load bias is whole pages; the call may enter past the first
    // instruction (ppc64le's local entry skips the two that set r2) and
    // the function may end in padding (ARM's `nop`).
    let k = (0..want.len())
        .find(|&k| pcs[0].wrapping_sub(want[k]) % 4096 == 0)
        .unwrap_or_else(|| panic!("{arch}: {pcs:x?} is not {want:x?} moved by whole pages"));
    let bias = pcs[0].wrapping_sub(want[k]);
    let moved: Vec<u64> = want[k..]
        .iter()
        .take(pcs.len())
        .map(|w| w.wrapping_add(bias))
        .collect();
    assert_eq!(
        pcs, moved,
        "{arch}: the trace's pcs and objdump's, moved by {bias:#x}\n{}",
        run.trace
    );
    assert!(
        k <= 2 && pcs.len() + k + 1 >= want.len(),
        "{arch}: {pcs:x?} of {want:x?}"
    );
}

#[test]
fn one_pie_function_mipsel() {
    one_pie_function("mipsel");
}

#[test]
fn one_pie_function_mips() {
    one_pie_function("mips");
}

#[test]
fn one_pie_function_mips64el() {
    one_pie_function("mips64el");
}

#[test]
fn one_pie_function_arm() {
    one_pie_function("arm");
}

#[test]
fn one_pie_function_aarch64() {
    one_pie_function("aarch64");
}

#[test]
fn one_pie_function_riscv64() {
    one_pie_function("riscv64");
}

#[test]
fn one_pie_function_x86_64() {
    one_pie_function("x86_64");
}

#[test]
fn one_pie_function_i386() {
    one_pie_function("i386");
}

#[test]
fn one_pie_function_ppc64le() {
    one_pie_function("ppc64le");
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

/// A live run's lines show while the program runs, not when it ends: the
/// registers at busybox's entry (the first process's, the shell's) come
/// while the shell waits in `read` for a line only
/// [`e2e::line_before_input`] writes, once it has seen them.
#[test]
fn lines_are_seen_while_the_program_sleeps() {
    let prog = guest("x86_64", "busybox");
    let entry = tools::probe::elf::Image::read(&prog).unwrap().entry;
    let q = qemu_builds();
    let w = e2e::line_before_input(
        no_aslr(&mut Command::new(regtrace_exe()))
            .args(["--range", &format!("{entry:x}-{:x}", entry + 1)])
            .arg(&prog)
            .args(["sh", "-c", "read x; echo \"got $x\""])
            .env_clear()
            .envs(QEMU_ENV.iter().copied())
            .env("CANNOLI_QEMU_BUILD", &q.build),
        |_| true,
    );
    let (rest, stderr) = (&w.rest, &w.stderr);
    let first = w.seen.as_deref().unwrap_or_else(|| {
        panic!("nothing while the program waited in read; later: {rest:?}\n{stderr}")
    });
    // The header and the registers are written together (one lock of the
    // output), so the header seen means the registers were flushed too.
    assert!(first.starts_with("== pid "), "{first}\n{stderr}");
    assert!(
        rest.first()
            .is_some_and(|l| l.starts_with(&format!("registers at {entry:#018x}"))),
        "{rest:?}\n{stderr}"
    );
    assert_eq!(w.status.code(), Some(0), "{stderr}");
    assert!(rest.iter().any(|l| l == "got go"), "{stderr}");
}
