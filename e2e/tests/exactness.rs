// SPDX-License-Identifier: GPL-2.0-or-later
//! cannoli's trace must be exactly what QEMU's own plugins see.
//!
//! For each guest program and architecture, under identical conditions
//! (empty environment, same absolute program path and argv, same cwd, same
//! `-seed` and for 64-bit guests `-R`, stdout/stderr to files; see
//! `e2e::qemu_common_args`):
//!
//! * ground truth from the patched QEMU's plugins: `libinsn` (count),
//!   `libexeclog` (pc sequence, plus the kind/address of each instruction's
//!   accesses), `libmem,print-accesses=true` (every access with its value);
//! * `qemu -cannoli libjitter_always.so` traced by `cannoli-dump`, with 1, 2
//!   and 4 worker threads;
//!
//! and checks
//!
//! * (a) number of `X` lines == libinsn's total;
//! * (b) `X` pc sequence == execlog's pc sequence;
//! * (c) `L`/`S` list == libmem's list (pc, addr, size, kind, value), except
//!   the values that differ between two libmem runs (thread id, getrandom
//!   bytes, fstat of the stdout file: see `e2e::volatile_values`);
//! * (d) the dump is byte-identical with 1, 2 and 4 threads (but for the
//!   run-dependent values of (c));
//! * (e) guest stdout under cannoli == guest stdout under the plain QEMU
//!   (and the plain and patched QEMUs agree without plugins, and with the
//!   expected output in `tests/programs/<name>.expected`);
//! * (f) every access is attributed to the instruction executed just before
//!   it, and the interleaving of instructions and accesses equals execlog's.
//!
//! Needs `cargo build --release` first (for `cannoli-dump` and the jitter
//! library) and the QEMU builds (see `e2e::qemu_builds`).

use std::path::Path;
use std::time::{Duration, Instant};

use e2e::*;

const THREADS: [usize; 3] = [1, 2, 4];

fn check(arch: &str, name: &str, args: &[&str]) {
    // Fail early, with the message naming the missing piece.
    let q = qemu_builds();
    let prog = guest(arch, name);
    jitter_lib();
    dump_client();

    let dir = RunDir::new();
    let what = if args.is_empty() {
        format!("{name} on {arch}")
    } else {
        format!("{name} {} on {arch}", args.join(" "))
    };
    let f = Failures::new(what.clone());
    eprintln!("e2e: {what}: run dir {}", dir.path().display());

    // ---- plain runs: the reference stdout ------------------------------
    let plain = run_bare(&dir, "plain", arch, q.plain_qemu(arch), &prog, args);
    plain.assert_success();
    let build = run_bare(&dir, "build", arch, q.qemu(arch), &prog, args);
    build.assert_success();
    f.check(
        "e: stdout plain vs patched QEMU",
        same_output("plain QEMU", &plain.stdout, "patched QEMU", &build.stdout),
    );
    if args.is_empty() {
        if let Some(exp) = expected_stdout(name) {
            f.check(
                "e: stdout vs tests/programs/*.expected",
                same_output("expected", &exp, "plain QEMU", &plain.stdout),
            );
        }
    }

    // ---- ground truth ----------------------------------------------------
    // libmem runs twice, to learn which values are not reproducible (see
    // `volatile_values`); its two stdout files must be created in different
    // seconds, so the other plugins run in between.
    let mem1_start = Instant::now();
    let (run, log) = run_plugin(&dir, "mem", arch, Plugin::Mem, &prog, args);
    run.assert_success();
    let mem = parse_mem(&log).unwrap_or_else(|e| panic!("{e}"));
    remove_big(&log);
    f.check(
        "ground truth: stdout with libmem",
        same_output("plain", &plain.stdout, "libmem run", &run.stdout),
    );

    let (run, log) = run_plugin(&dir, "insn", arch, Plugin::Insn, &prog, args);
    run.assert_success();
    let insn = parse_insn(&log).unwrap_or_else(|e| panic!("{e}"));
    f.check(
        "ground truth: stdout with libinsn",
        same_output("plain", &plain.stdout, "libinsn run", &run.stdout),
    );

    let (run, log) = run_plugin(&dir, "execlog", arch, Plugin::Execlog, &prog, args);
    run.assert_success();
    let execlog = parse_execlog(&log).unwrap_or_else(|e| panic!("{e}"));
    remove_big(&log);
    f.check(
        "ground truth: stdout with libexeclog",
        same_output("plain", &plain.stdout, "execlog run", &run.stdout),
    );

    let min_gap = Duration::from_millis(1100);
    if let Some(rest) = min_gap.checked_sub(mem1_start.elapsed()) {
        std::thread::sleep(rest);
    }
    let (run, log) = run_plugin(&dir, "mem2", arch, Plugin::Mem, &prog, args);
    run.assert_success();
    let mem2 = parse_mem(&log).unwrap_or_else(|e| panic!("{e}"));
    remove_big(&log);
    let volatile = volatile_values(&mem, &mem2).unwrap_or_else(|e| panic!("{e}"));
    drop(mem2);
    let n_volatile = volatile.iter().filter(|&&v| v).count();

    // The plugins must agree with each other, or the comparison below means
    // nothing (e.g. a guest that is not deterministic).
    if execlog.pcs.len() as u64 != insn.total {
        f.fail(
            "ground truth: libinsn vs execlog",
            format!(
                "libinsn counted {} instructions, execlog has {} lines",
                insn.total,
                execlog.pcs.len()
            ),
        );
    }
    {
        let from_execlog: Vec<(u64, MemKind, u64)> = execlog
            .mem
            .iter()
            .map(|s| (execlog.pcs[s.insn as usize], s.kind, s.addr))
            .collect();
        let from_mem: Vec<(u64, MemKind, u64)> =
            mem.iter().map(|m| (m.pc, m.kind, m.addr)).collect();
        f.check(
            "ground truth: execlog vs libmem accesses",
            compare_seq(
                "accesses (pc, kind, addr)",
                "execlog",
                &from_execlog,
                "libmem",
                &from_mem,
                |(pc, k, a)| format!("{} {pc:x} {a:x}", k.letter()),
            ),
        );
    }
    eprintln!(
        "e2e: {what}: {} instructions, {} accesses ({} loads, {} stores, {n_volatile} with run-dependent values)",
        insn.total,
        mem.len(),
        mem.iter().filter(|m| m.kind == MemKind::Load).count(),
        mem.iter().filter(|m| m.kind == MemKind::Store).count()
    );

    // ---- cannoli ----------------------------------------------------------
    let mut dumps = Vec::new();
    for t in THREADS {
        let tag = format!("cannoli-t{t}");
        let run = run_cannoli(&dir, &tag, arch, &prog, args, t);
        if !run.guest.status.success() || !run.client_status.success() {
            f.fail(
                &format!("cannoli run, {t} threads"),
                format!(
                    "`{}` exited with {}, cannoli-dump with {}\n--- QEMU stderr ---\n{}\n--- client stderr ---\n{}",
                    run.guest.cmdline,
                    run.guest.status,
                    run.client_status,
                    tail(&run.guest.stderr_text(), 20),
                    tail(&run.client_stderr, 20)
                ),
            );
            continue;
        }
        f.check(
            &format!("e: guest stdout under cannoli ({t} threads) vs plain QEMU"),
            same_output("plain QEMU", &plain.stdout, "cannoli", &run.guest.stdout),
        );
        if run.guest.stderr != plain.stderr {
            f.fail(
                &format!("e: guest stderr under cannoli ({t} threads)"),
                format!(
                    "differs from plain QEMU's:\n--- plain ---\n{}\n--- cannoli ---\n{}",
                    tail(&text(&plain.stderr), 10),
                    tail(&run.guest.stderr_text(), 10)
                ),
            );
        }
        dumps.push((t, run.dump));
    }

    let mut c_ok = false;
    if let Some((t0, first)) = dumps.first() {
        match parse_dump(first) {
            Err(e) => f.fail("dump format", e),
            Ok(d) => {
                if d.pcs.len() as u64 != insn.total {
                    f.fail(
                        "a: instruction count",
                        format!(
                            "dump ({t0} threads) has {} X lines, libinsn counted {}",
                            d.pcs.len(),
                            insn.total
                        ),
                    );
                }
                f.check(
                    "b: pc sequence",
                    compare_seq(
                        "executed pcs",
                        "execlog",
                        &execlog.pcs,
                        "cannoli",
                        &d.pcs,
                        |pc| format!("X {pc:x}"),
                    ),
                );
                c_ok = f.check(
                    "c: memory accesses",
                    compare_accesses(&mem, &d.mem, &volatile),
                );
                f.check("f: access attribution", d.check_attribution());
                f.check(
                    "f: interleaving of instructions and accesses",
                    compare_seq(
                        "accesses by instruction index",
                        "execlog",
                        &execlog.mem,
                        "cannoli",
                        &d.mem_slots(),
                        |s| s.to_string(),
                    ),
                );
            }
        }
        for (t, other) in &dumps[1..] {
            let r = compare_dumps(first, other, &volatile).map_err(|e| {
                if c_ok {
                    e
                } else {
                    format!(
                        "{e}\n  (possibly a consequence of the (c) failure: the run-dependent values are \
                         located by their index in libmem's list)"
                    )
                }
            });
            f.check(&format!("d: dump with {t0} vs {t} threads"), r);
        }
    }
    if dumps.len() == THREADS.len() && f.is_empty() {
        for (_, d) in &dumps {
            remove_big(d);
        }
    }
    f.finish();
}

/// Deletes a big log once parsed (unless the run dir is to be kept).
fn remove_big(p: &Path) {
    if std::env::var_os(KEEP_ENV).is_none() {
        let _ = std::fs::remove_file(p);
    }
}

macro_rules! exact {
    ($($fn:ident: $name:literal on $arch:literal $(with [$($arg:literal),*])?;)*) => {
        $(
            #[test]
            fn $fn() {
                check($arch, $name, &[$($($arg),*)?]);
            }
        )*
    };
}

exact! {
    loops_mipsel: "loops" on "mipsel";
    loops_riscv64: "loops" on "riscv64";
    calls_mipsel: "calls" on "mipsel";
    calls_riscv64: "calls" on "riscv64";
    fnptr_mipsel: "fnptr" on "mipsel";
    fnptr_riscv64: "fnptr" on "riscv64";
    libc_mipsel: "libc" on "mipsel";
    libc_riscv64: "libc" on "riscv64";
    sortcrc_mipsel: "sortcrc" on "mipsel";
    sortcrc_riscv64: "sortcrc" on "riscv64";
    sortcrc_args_mipsel: "sortcrc" on "mipsel" with ["700", "2"];
    sortcrc_args_riscv64: "sortcrc" on "riscv64" with ["700", "2"];
}
