// SPDX-License-Identifier: GPL-2.0-or-later
//! The hook types other than `Always`: `Once`, `Register`, `Branch`, and
//! `Never` around one function, against QEMU's own view of the same program
//! under the same conditions.
//!
//! The guest is `tests/programs/hookloop.c` (loops, calls, recursion, 32- and
//! 64-bit arithmetic; `hookloop ROUNDS` repeats the same code). The hook
//! library is `libe2e_hooks.so` (`e2e/hooks`), configured by
//! `CANNOLI_TEST_HOOKS`, `CANNOLI_TEST_RANGE` and `CANNOLI_TEST_LOG` (which
//! records every `hook_inst` call: one per instruction per translation, with
//! QEMU's `branch` argument). Ground truth (see `e2e::ground`):
//!
//! * libexeclog: the executed pcs in order and their disassembly; with
//!   `reg=*` the register changes (riscv64 only: QEMU's MIPS target exposes
//!   no registers to plugins, so on mipsel its log has none);
//! * `-one-insn-per-tb -d cpu,nochain`: the registers before every
//!   instruction (both targets);
//! * libinsn's instruction count, libmem's accesses;
//! * `-d in_asm` in the traced run itself: every translation block.
//!
//! Tests, per architecture:
//!
//! * `once_*` (200 rounds): `Once` reports every executed pc, only executed
//!   pcs, each as often as it has translations that executed it (exactly
//!   once for a pc translated once: replaying the pc sequence against the
//!   translation log gives the expected count of every pc), never more often
//!   than it was translated, in execution order (the `X` sequence is a
//!   subsequence of execlog's, and first appearances come in the same order),
//!   and the trace is far shorter than libinsn's count. `hook_inst` is
//!   called exactly once per instruction of each translation.
//! * `registers_and_branch_*` (3 rounds): `Register` gives one `R` line per
//!   executed instruction, no `X` lines, with the registers before the
//!   instruction equal to the `-d cpu` state (and, on riscv64, to the state
//!   execlog's changes imply; the two ground truths are checked against each
//!   other first). `Branch` gives the same pcs and registers on `B` lines, the
//!   flag `hook_inst` was given, 1 for every branch, jump, call, return and
//!   syscall instruction (by disassembly: mips `jal`, `jr`, `beq`, `bne`,
//!   `syscall`, ...; riscv `jal`, `jalr`, `beq`, `bne`, `ecall`, ...), and 0
//!   for a plain add (mips `addiu`/`addu`, riscv `addi`/`add`/...) that is not
//!   the last instruction of its translation block.
//! * `range_*` (5 rounds): hooks `Never` outside `hookloop_kernel` (its
//!   address range from the ELF symbol table): with `Always` inside, the `X`
//!   lines are exactly execlog's pcs inside the range, the loads and stores
//!   exactly libmem's inside it, each after its instruction; with `Register`
//!   inside, the `R` lines are exactly the `-d cpu` states at those pcs.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use e2e::ground::*;
use e2e::*;

const PROG: &str = "hookloop";
const KERNEL: &str = "hookloop_kernel";

fn mnemonic(disas: &str) -> &str {
    disas.split_whitespace().next().unwrap_or("")
}

/// Branches, jumps, calls, returns and syscalls, by mnemonic.
fn is_control(arch: &str, m: &str) -> bool {
    match arch {
        "mipsel" => {
            matches!(
                m,
                "j" | "jal" | "jalr" | "jr" | "jalx" | "jr.hb" | "jalr.hb" | "syscall"
            ) || (m.starts_with('b') && m != "break")
        }
        "riscv64" => {
            matches!(
                m,
                "j" | "jal" | "jalr" | "jr" | "ret" | "call" | "tail" | "ecall"
            ) || m.starts_with('b')
        }
        _ => false,
    }
}

/// Plain additions, by mnemonic.
fn is_plain_add(arch: &str, m: &str) -> bool {
    match arch {
        "mipsel" => matches!(m, "addiu" | "addu"),
        "riscv64" => matches!(m, "addi" | "add" | "addiw" | "addw"),
        _ => false,
    }
}

/// The instruction kinds the Branch test must have seen (alternatives
/// separated by `|`), so that its checks are not vacuous.
fn required_kinds(arch: &str) -> &'static [&'static str] {
    match arch {
        "mipsel" => &["jal", "jr", "beq|bne|beqz|bnez", "syscall", "addiu"],
        "riscv64" => &["jal", "jalr|ret|jr", "beq|bne|beqz|bnez", "ecall", "addi"],
        _ => &[],
    }
}

fn check_run(f: &Failures, what: &str, run: &GuestRun, reference: &[u8]) {
    run.assert_success();
    if run.stdout != reference {
        f.fail(
            what,
            format!(
                "guest stdout {:?} differs from the reference run's {:?}",
                text(&run.stdout),
                text(reference)
            ),
        );
    }
}

fn traced(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
    o: &TraceOpts,
) -> (Traced, DumpEvents) {
    let t = run_traced(dir, tag, arch, prog, args, o);
    t.assert_success();
    let d = parse_dump_events(&t.dump).unwrap_or_else(|e| panic!("{e}"));
    (t, d)
}

/// `-d in_asm` to `<tag>.asm` and the hook log to `<tag>.hooks` of `dir`.
fn with_translation_logs(o: TraceOpts, dir: &RunDir, tag: &str) -> TraceOpts {
    let asm = dir.file(&format!("{tag}.asm"));
    let hooks = dir.file(&format!("{tag}.hooks"));
    o.qemu_arg("-d")
        .qemu_arg("in_asm")
        .qemu_arg("-D")
        .qemu_arg(asm)
        .env("CANNOLI_TEST_LOG", hooks.to_str().unwrap())
}

fn translation_logs(dir: &RunDir, tag: &str) -> (Vec<Vec<u64>>, Vec<(u64, bool)>) {
    let tbs = parse_in_asm(&dir.file(&format!("{tag}.asm"))).unwrap_or_else(|e| panic!("{e}"));
    let hooks =
        parse_hook_log(&dir.file(&format!("{tag}.hooks"))).unwrap_or_else(|e| panic!("{e}"));
    (tbs, hooks)
}

/// hook_inst must be called once per instruction of each translation.
fn check_hook_calls(f: &Failures, tbs: &[Vec<u64>], hooks: &[(u64, bool)]) -> HashMap<u64, u32> {
    let mut translations: HashMap<u64, u32> = HashMap::new();
    for pc in tbs.iter().flatten() {
        *translations.entry(*pc).or_default() += 1;
    }
    let mut calls: HashMap<u64, u32> = HashMap::new();
    for (pc, _) in hooks {
        *calls.entry(*pc).or_default() += 1;
    }
    if calls != translations {
        let mut diff: Vec<_> = translations
            .keys()
            .chain(calls.keys())
            .collect::<HashSet<_>>()
            .into_iter()
            .filter(|pc| translations.get(pc) != calls.get(pc))
            .map(|pc| (*pc, translations.get(pc).copied(), calls.get(pc).copied()))
            .collect();
        diff.sort();
        f.fail(
            "hook_inst calls",
            format!(
                "{} pcs are translated (-d in_asm) a different number of times than hook_inst \
                 was called for them; (pc, translations, calls): {:x?}",
                diff.len(),
                &diff[..diff.len().min(20)]
            ),
        );
    }
    translations
}

// ---------------------------------------------------------------------------
// Once
// ---------------------------------------------------------------------------

fn once_test(arch: &str) {
    const ROUNDS: &str = "200";
    let prog = guest(arch, PROG);
    let dir = RunDir::new();
    let f = Failures::new(format!("{PROG} {ROUNDS} on {arch}: Once"));
    eprintln!("e2e: Once on {arch}: run dir {}", dir.path().display());

    let (run, log) = run_plugin(&dir, "execlog", arch, Plugin::Execlog, &prog, &[ROUNDS]);
    run.assert_success();
    let reference = run.stdout.clone();
    let el = parse_execlog(&log).unwrap_or_else(|e| panic!("{e}"));
    let (run, log) = run_plugin(&dir, "insn", arch, Plugin::Insn, &prog, &[ROUNDS]);
    check_run(&f, "stdout (libinsn)", &run, &reference);
    let insn = parse_insn(&log).unwrap_or_else(|e| panic!("{e}"));
    if insn.total != el.pcs.len() as u64 {
        f.fail(
            "ground truth",
            format!(
                "libinsn counts {}, execlog has {} lines",
                insn.total,
                el.pcs.len()
            ),
        );
    }

    let opts = with_translation_logs(TraceOpts::hooks("once"), &dir, "once");
    let (t, d) = traced(&dir, "once", arch, &prog, &[ROUNDS], &opts);
    check_run(&f, "stdout (once)", &t.guest, &reference);
    if d.kinds
        .iter()
        .any(|k| matches!(k, b'L' | b'S' | b'R' | b'B'))
    {
        f.fail(
            "kinds",
            "Once without memory hooks wrote L, S, R or B lines",
        );
    }
    let (tbs, hooks) = translation_logs(&dir, "once");
    let translations = check_hook_calls(&f, &tbs, &hooks);

    let mut counts: HashMap<u64, u32> = HashMap::new();
    for &pc in &d.pcs {
        *counts.entry(pc).or_default() += 1;
    }
    let executed: HashSet<u64> = el.pcs.iter().copied().collect();
    let retranslated = translations.values().filter(|&&n| n > 1).count();
    eprintln!(
        "e2e: Once on {arch}: {} X lines for {} executed instructions, {} distinct pcs, \
         {} translation blocks, {retranslated} pcs translated more than once",
        d.pcs.len(),
        insn.total,
        executed.len(),
        tbs.len()
    );

    // Far fewer events than instructions.
    if d.pcs.len() as u64 * 10 > insn.total {
        f.fail(
            "far below libinsn",
            format!(
                "{} X lines for {} executed instructions",
                d.pcs.len(),
                insn.total
            ),
        );
    }
    // Every executed pc, and nothing else.
    let mut missing: Vec<u64> = executed
        .iter()
        .filter(|pc| !counts.contains_key(pc))
        .copied()
        .collect();
    let mut extra: Vec<u64> = counts
        .keys()
        .filter(|pc| !executed.contains(pc))
        .copied()
        .collect();
    missing.sort();
    extra.sort();
    if !missing.is_empty() || !extra.is_empty() {
        f.fail(
            "coverage",
            format!(
                "{} executed pcs never reported (first: {:x?}); {} reported pcs never executed (first: {:x?})",
                missing.len(),
                &missing[..missing.len().min(10)],
                extra.len(),
                &extra[..extra.len().min(10)]
            ),
        );
    }
    // Never more often than translated.
    let mut over: Vec<(u64, u32, u32)> = counts
        .iter()
        .filter(|(pc, &n)| n > translations.get(pc).copied().unwrap_or(0))
        .map(|(pc, &n)| (*pc, n, translations.get(pc).copied().unwrap_or(0)))
        .collect();
    over.sort();
    if !over.is_empty() {
        f.fail(
            "at most once per translation",
            format!(
                "{} pcs reported more often than translated; (pc, reported, translations): {:x?}",
                over.len(),
                &over[..over.len().min(10)]
            ),
        );
    }
    // Exactly once per translation that executed the pc.
    match once_expectation(&tbs, &el.pcs) {
        Ok(want) => {
            let mut diff: Vec<(u64, u32, u32)> = want
                .keys()
                .chain(counts.keys())
                .collect::<HashSet<_>>()
                .into_iter()
                .filter(|pc| want.get(pc) != counts.get(pc))
                .map(|pc| {
                    (
                        *pc,
                        counts.get(pc).copied().unwrap_or(0),
                        want.get(pc).copied().unwrap_or(0),
                    )
                })
                .collect();
            diff.sort();
            if !diff.is_empty() {
                f.fail(
                    "once per executed translation",
                    format!(
                        "{} pcs are reported a wrong number of times; (pc, reported, translations \
                         that executed it): {:x?}",
                        diff.len(),
                        &diff[..diff.len().min(20)]
                    ),
                );
            }
            let once_only = want.values().filter(|&&n| n == 1).count();
            if once_only * 2 < want.len() {
                f.fail(
                    "once per executed translation",
                    "most pcs have several translations: the check says little",
                );
            }
        }
        Err(e) => f.fail(
            "once per executed translation",
            format!("the translation log cannot be replayed against execlog's pc sequence: {e}"),
        ),
    }
    // In execution order.
    f.check(
        "order: subsequence of execlog",
        is_subsequence(&d.pcs, &el.pcs),
    );
    let firsts = |pcs: &[u64]| {
        let mut seen = HashSet::new();
        pcs.iter()
            .copied()
            .filter(|pc| seen.insert(*pc))
            .collect::<Vec<u64>>()
    };
    f.check(
        "order: first appearances",
        compare_seq(
            "first appearance of each pc",
            "execlog",
            &firsts(&el.pcs),
            "Once X lines",
            &firsts(&d.pcs),
            |pc| format!("{pc:x}"),
        ),
    );
    f.finish();
}

// ---------------------------------------------------------------------------
// Register and Branch
// ---------------------------------------------------------------------------

/// Register states of one run: the pc and the registers before each
/// instruction, and the run's pid (QEMU's, which the guest sees as its pid
/// and thread id: `set_tid_address` and `getpid` return it in a register).
struct States<'a> {
    name: &'a str,
    pid: u32,
    v: &'a [(u64, Vec<u64>)],
}

/// Compares two runs' register states; a register may differ only where it
/// holds each run's own pid. A difference names the registers.
fn compare_states(arch: &str, what: &str, a: States, b: States) -> Result<(), String> {
    let names = cannoli::wire::reg_names(arch);
    let same_reg = |x: u64, y: u64| x == y || (x == a.pid as u64 && y == b.pid as u64);
    let same = |x: &(u64, Vec<u64>), y: &(u64, Vec<u64>)| {
        x.0 == y.0 && x.1.len() == y.1.len() && x.1.iter().zip(&y.1).all(|(p, q)| same_reg(*p, *q))
    };
    let r = compare_seq_by(
        what,
        a.name,
        a.v,
        b.name,
        b.v,
        |_, x, y| same(x, y),
        |_, (pc, regs)| {
            let shown: Vec<String> = regs
                .iter()
                .enumerate()
                .filter(|(_, v)| **v != 0)
                .map(|(i, v)| format!("{}={v:x}", names.get(i).copied().unwrap_or("?")))
                .collect();
            format!("{pc:x}: {}", shown.join(" "))
        },
    );
    r.map_err(|mut e| {
        if let Some(i) = a.v.iter().zip(b.v).position(|(x, y)| !same(x, y)) {
            let (x, y) = (&a.v[i], &b.v[i]);
            let regs: Vec<String> = (0..x.1.len().max(y.1.len()))
                .filter(|&r| x.1.get(r) != y.1.get(r))
                .map(|r| {
                    format!(
                        "{}: {} {:x?}, {} {:x?}",
                        names.get(r).copied().unwrap_or("?"),
                        a.name,
                        x.1.get(r),
                        b.name,
                        y.1.get(r)
                    )
                })
                .collect();
            e.push_str(&format!(
                "  at index {i} (pc {:x} / {:x}) these differ: {} (pids: {} {}, {} {})\n",
                x.0,
                y.0,
                regs.join("; "),
                a.name,
                a.pid,
                b.name,
                b.pid
            ));
        }
        e
    })
}

fn registers_and_branch_test(arch: &str) {
    const ROUNDS: &str = "3";
    let prog = guest(arch, PROG);
    let bits = arch_bits(arch);
    let dir = RunDir::new();
    let f = Failures::new(format!("{PROG} {ROUNDS} on {arch}: Register and Branch"));
    eprintln!(
        "e2e: Register/Branch on {arch}: run dir {}",
        dir.path().display()
    );

    // ---- ground truth --------------------------------------------------
    let (run, log, cpu_pid) = run_cpu_log(&dir, "cpu", arch, &prog, &[ROUNDS]);
    run.assert_success();
    let reference = run.stdout.clone();
    let cpu = parse_cpu_log(&log).unwrap_or_else(|e| panic!("{e}"));
    let truth: Vec<(u64, Vec<u64>)> = cpu
        .iter()
        .map(|s| (s.pc, s.regs.iter().map(|&v| mask(v, bits)).collect()))
        .collect();
    let (run, log, el_pid) = run_execlog_regs(&dir, "execlog", arch, &prog, &[ROUNDS]);
    check_run(&f, "stdout (execlog)", &run, &reference);
    let mut el =
        parse_execlog_regs(&log, |n| layout_index(arch, n)).unwrap_or_else(|e| panic!("{e}"));
    // Without -R the plugin can move the guest's vDSO (see e2e::pages):
    // its pcs and register values go to where -d cpu and cannoli, which
    // load no plugin, have them.
    let reloc = Relocation::between(
        &parse_page_layout(&log).unwrap_or_else(|e| panic!("{e}")),
        &e2e::procs::bare_layout(&dir, "bare", arch, &prog, &[ROUNDS], &e2e::procs::same),
    )
    .unwrap_or_else(|e| panic!("the layout under libexeclog: {e}"));
    el.relocate(&reloc);
    let truth_pcs: Vec<u64> = truth.iter().map(|s| s.0).collect();
    if !f.check(
        "ground truth: -d cpu and execlog pcs",
        compare_seq("pcs", "execlog", &el.pcs, "-d cpu", &truth_pcs, |pc| {
            format!("{pc:x}")
        }),
    ) {
        f.finish();
        return;
    }
    // riscv64: execlog's changes applied to the state before the first
    // instruction must give -d cpu's states (QEMU's mips target exposes no
    // registers to plugins: nothing to reconstruct there).
    let from_execlog: Option<Vec<(u64, Vec<u64>)>> = (arch == "riscv64").then(|| {
        let states = states_from_changes(&truth[0].1, &el.changes);
        el.pcs.iter().copied().zip(states).collect()
    });
    if let Some(x) = &from_execlog {
        if el.changes.iter().all(|c| c.is_empty()) {
            f.fail(
                "ground truth",
                "execlog reg=* reported no general purpose register changes",
            );
        }
        f.check(
            "ground truth: execlog reg=* vs -d cpu",
            compare_states(
                arch,
                "register states",
                States {
                    name: "-d cpu",
                    pid: cpu_pid,
                    v: &truth,
                },
                States {
                    name: "execlog",
                    pid: el_pid,
                    v: x,
                },
            ),
        );
    }

    // ---- Register --------------------------------------------------------
    let (t, d) = traced(
        &dir,
        "regs",
        arch,
        &prog,
        &[ROUNDS],
        &TraceOpts::hooks("regs"),
    );
    check_run(&f, "stdout (regs)", &t.guest, &reference);
    if !d.pcs.is_empty() || d.kinds.iter().any(|k| matches!(k, b'L' | b'S' | b'B')) {
        f.fail("Register: kinds", "Register hooks wrote X, L, S or B lines");
    }
    if d.regs
        .iter()
        .any(|r| r.branch.is_some() || r.regs.len() != 32)
    {
        f.fail(
            "Register: lines",
            "an R line is malformed (a flag, or not 32 registers)",
        );
    }
    let r_states: Vec<(u64, Vec<u64>)> = d.regs.iter().map(|r| (r.pc, r.regs.clone())).collect();
    let cpu_truth = || States {
        name: "-d cpu",
        pid: cpu_pid,
        v: &truth,
    };
    let r_lines = States {
        name: "R lines",
        pid: t.pid,
        v: &r_states,
    };
    f.check(
        "Register vs -d cpu",
        compare_states(
            arch,
            "registers before each instruction",
            cpu_truth(),
            r_lines,
        ),
    );
    if let Some(x) = &from_execlog {
        f.check(
            "Register vs execlog reg=*",
            compare_states(
                arch,
                "registers before each instruction",
                States {
                    name: "execlog",
                    pid: el_pid,
                    v: x,
                },
                States {
                    name: "R lines",
                    pid: t.pid,
                    v: &r_states,
                },
            ),
        );
    }
    let r_pid = t.pid;

    // ---- Branch ------------------------------------------------------------
    let opts = with_translation_logs(TraceOpts::hooks("branch"), &dir, "branch");
    let (t, d) = traced(&dir, "branch", arch, &prog, &[ROUNDS], &opts);
    check_run(&f, "stdout (branch)", &t.guest, &reference);
    if !d.pcs.is_empty() || d.kinds.iter().any(|k| matches!(k, b'L' | b'S' | b'R')) {
        f.fail("Branch: kinds", "Branch hooks wrote X, L, S or R lines");
    }
    if d.regs.iter().any(|r| r.branch.is_none()) {
        f.fail("Branch: lines", "a register line without a flag");
    }
    let b_states: Vec<(u64, Vec<u64>)> = d.regs.iter().map(|r| (r.pc, r.regs.clone())).collect();
    let b_lines = || States {
        name: "B lines",
        pid: t.pid,
        v: &b_states,
    };
    f.check(
        "Branch vs -d cpu",
        compare_states(
            arch,
            "registers before each instruction",
            cpu_truth(),
            b_lines(),
        ),
    );
    f.check(
        "Branch vs Register",
        compare_states(
            arch,
            "registers before each instruction",
            States {
                name: "R lines",
                pid: r_pid,
                v: &r_states,
            },
            b_lines(),
        ),
    );
    let (tbs, hooks) = translation_logs(&dir, "branch");
    check_hook_calls(&f, &tbs, &hooks);
    let mut given: HashMap<u64, HashSet<bool>> = HashMap::new();
    for &(pc, b) in &hooks {
        given.entry(pc).or_default().insert(b);
    }
    let last_in_tb: HashSet<u64> = tbs.iter().filter_map(|t| t.last().copied()).collect();
    // Flags per pc, as the B lines carry them.
    let mut flags: HashMap<u64, HashSet<bool>> = HashMap::new();
    for r in &d.regs {
        flags
            .entry(r.pc)
            .or_default()
            .insert(r.branch.unwrap_or(false));
    }
    let mut not_given = Vec::new();
    for (pc, fl) in &flags {
        let g = given.get(pc).cloned().unwrap_or_default();
        if !fl.is_subset(&g) {
            not_given.push((*pc, fl.clone(), g));
        }
    }
    if !not_given.is_empty() {
        not_given.sort_by_key(|x| x.0);
        f.fail(
            "Branch: flag == hook_inst's branch argument",
            format!(
                "{} pcs have B flags that hook_inst was not given; (pc, B flags, hook_inst's): {:x?}",
                not_given.len(),
                &not_given[..not_given.len().min(10)]
            ),
        );
    }
    // By instruction kind.
    let mut wrong_control: HashMap<&str, Vec<u64>> = HashMap::new();
    let mut wrong_add: HashMap<&str, Vec<u64>> = HashMap::new();
    let mut kinds_seen: HashMap<&str, usize> = HashMap::new();
    let (mut n_control, mut n_add) = (0, 0);
    for (pc, fl) in &flags {
        let Some(dis) = el.disas.get(pc) else {
            f.fail(
                "Branch: disassembly",
                format!("no execlog line for pc {pc:x}"),
            );
            continue;
        };
        let m = mnemonic(dis);
        *kinds_seen.entry(m).or_default() += 1;
        if is_control(arch, m) {
            n_control += 1;
            if fl.contains(&false) {
                wrong_control.entry(m).or_default().push(*pc);
            }
        } else if is_plain_add(arch, m) && !last_in_tb.contains(pc) {
            n_add += 1;
            if fl.contains(&true) {
                wrong_add.entry(m).or_default().push(*pc);
            }
        }
    }
    let summarize = |m: &HashMap<&str, Vec<u64>>| {
        let mut v: Vec<String> = m
            .iter()
            .map(|(k, pcs)| {
                let mut pcs = pcs.clone();
                pcs.sort();
                format!("{k} x{} (e.g. {:x?})", pcs.len(), &pcs[..pcs.len().min(3)])
            })
            .collect();
        v.sort();
        v.join(", ")
    };
    if !wrong_control.is_empty() {
        f.fail(
            "Branch: flag 1 for branches, jumps, calls, returns, syscalls",
            format!(
                "flag 0 at {} of {n_control} such pcs: {}",
                wrong_control.values().map(Vec::len).sum::<usize>(),
                summarize(&wrong_control)
            ),
        );
    }
    if !wrong_add.is_empty() {
        f.fail(
            "Branch: flag 0 for plain adds (not last in their block)",
            format!(
                "flag 1 at {} of {n_add} such pcs: {}",
                wrong_add.values().map(Vec::len).sum::<usize>(),
                summarize(&wrong_add)
            ),
        );
    }
    for kind in required_kinds(arch) {
        if !kind.split('|').any(|k| kinds_seen.contains_key(k)) {
            f.fail(
                "Branch: instruction kinds",
                format!("no `{kind}` instruction was executed"),
            );
        }
    }
    eprintln!(
        "e2e: Register/Branch on {arch}: {} instructions, {} distinct pcs, {n_control} control \
         pcs, {n_add} plain adds not last in a block",
        truth.len(),
        flags.len()
    );
    f.finish();
}

// ---------------------------------------------------------------------------
// Never outside one function
// ---------------------------------------------------------------------------

fn range_test(arch: &str) {
    const ROUNDS: &str = "5";
    let prog = guest(arch, PROG);
    let bits = arch_bits(arch);
    let dir = RunDir::new();
    let f = Failures::new(format!("{PROG} {ROUNDS} on {arch}: hooks only in {KERNEL}"));
    eprintln!("e2e: range on {arch}: run dir {}", dir.path().display());

    let (lo, hi) = Elf::open(&prog)
        .and_then(|e| e.function(KERNEL))
        .unwrap_or_else(|e| panic!("{e}"));
    let inside = |pc: u64| (lo..hi).contains(&pc);
    let range = format!("{lo:x}-{hi:x}");

    let (run, log) = run_plugin(&dir, "execlog", arch, Plugin::Execlog, &prog, &[ROUNDS]);
    run.assert_success();
    let reference = run.stdout.clone();
    let el = parse_execlog(&log).unwrap_or_else(|e| panic!("{e}"));
    let want_pcs: Vec<u64> = el.pcs.iter().copied().filter(|&pc| inside(pc)).collect();
    if want_pcs.len() < 100 || want_pcs.len() * 2 > el.pcs.len() {
        f.fail(
            "ground truth",
            format!(
                "{} of {} executed instructions are in {KERNEL} [{range}): the test needs many in and more out",
                want_pcs.len(),
                el.pcs.len()
            ),
        );
    }
    let (run, log) = run_plugin(&dir, "mem", arch, Plugin::Mem, &prog, &[ROUNDS]);
    check_run(&f, "stdout (libmem)", &run, &reference);
    let want_mem: Vec<MemAccess> = parse_mem(&log)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .filter(|m| inside(m.pc))
        .collect();
    if want_mem.is_empty() {
        f.fail("ground truth", format!("no loads or stores in {KERNEL}"));
    }

    // Always (with memory) inside the range.
    let t = run_traced(
        &dir,
        "always",
        arch,
        &prog,
        &[ROUNDS],
        &TraceOpts::hooks("always").env("CANNOLI_TEST_RANGE", &range),
    );
    t.assert_success();
    check_run(&f, "stdout (always in range)", &t.guest, &reference);
    let d = parse_dump(&t.dump).unwrap_or_else(|e| panic!("{e}"));
    f.check(
        "Always inside: X lines",
        compare_seq(
            "pcs",
            &format!("execlog in [{range})"),
            &want_pcs,
            "X lines",
            &d.pcs,
            |pc| format!("{pc:x}"),
        ),
    );
    f.check(
        "Always inside: loads and stores",
        compare_seq(
            "accesses",
            &format!("libmem in [{range})"),
            &want_mem,
            "L/S lines",
            &d.mem,
            |m| m.to_string(),
        ),
    );
    f.check(
        "Always inside: accesses after their instruction",
        d.check_attribution(),
    );
    if d.other
        .iter()
        .any(|l| l.starts_with('R') || l.starts_with('B'))
    {
        f.fail("Always inside: kinds", "R or B lines");
    }

    // Register inside the range.
    let (run, log, cpu_pid) = run_cpu_log(&dir, "cpu", arch, &prog, &[ROUNDS]);
    check_run(&f, "stdout (-d cpu)", &run, &reference);
    let truth: Vec<(u64, Vec<u64>)> = parse_cpu_log(&log)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .filter(|s| inside(s.pc))
        .map(|s| (s.pc, s.regs.iter().map(|&v| mask(v, bits)).collect()))
        .collect();
    let (t, d) = traced(
        &dir,
        "regs",
        arch,
        &prog,
        &[ROUNDS],
        &TraceOpts::hooks("regs").env("CANNOLI_TEST_RANGE", &range),
    );
    check_run(&f, "stdout (regs in range)", &t.guest, &reference);
    if !d.pcs.is_empty() {
        f.fail("Register inside: kinds", "X lines");
    }
    let got: Vec<(u64, Vec<u64>)> = d.regs.iter().map(|r| (r.pc, r.regs.clone())).collect();
    f.check(
        "Register inside: R lines",
        compare_states(
            arch,
            "registers before each instruction",
            States {
                name: &format!("-d cpu in [{range})"),
                pid: cpu_pid,
                v: &truth,
            },
            States {
                name: "R lines",
                pid: t.pid,
                v: &got,
            },
        ),
    );
    eprintln!(
        "e2e: range on {arch}: {KERNEL} [{range}): {} of {} instructions, {} accesses",
        want_pcs.len(),
        el.pcs.len(),
        want_mem.len()
    );
    f.finish();
}

#[test]
fn once_mipsel() {
    once_test("mipsel");
}

#[test]
fn once_riscv64() {
    once_test("riscv64");
}

#[test]
fn registers_and_branch_mipsel() {
    registers_and_branch_test("mipsel");
}

#[test]
fn registers_and_branch_riscv64() {
    registers_and_branch_test("riscv64");
}

#[test]
fn range_mipsel() {
    range_test("mipsel");
}

#[test]
fn range_riscv64() {
    range_test("riscv64");
}
