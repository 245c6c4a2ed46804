// SPDX-License-Identifier: GPL-2.0-or-later
//! cannoli's trace must be exactly what QEMU's own plugins see, on every
//! guest of the matrix (`e2e::GUESTS`: mipsel, mips, mips64el, arm, aarch64,
//! riscv64, x86_64, i386, ppc64le).
//!
//! Programs: ours (`tests/programs`: loops, calls, fnptr, libc, sortcrc,
//! simd with its 16-byte accesses), Debian's busybox-static for the guest
//! (`sha256sum`, `sort`, `echo`: code we did not write) and, on x86_64, the
//! host's own dynamically linked `/usr/bin/sha256sum` and `/usr/bin/sort`.
//! Tests are named `<arch>::<program>`.
//!
//! For each, under identical conditions (empty environment, same absolute
//! program path and argv, same cwd and input files, `-seed`, stdout/stderr
//! to files, the host's address space randomisation off, no `-R`; see
//! `e2e::run::GuestCmd`):
//!
//! * ground truth from the patched QEMU's plugins: `libinsn` (count),
//!   `libexeclog` (pc sequence, plus the kind/address of each instruction's
//!   accesses), `libmem,print-accesses=true` (every access with its value,
//!   16-byte ones whole);
//! * `qemu -cannoli libjitter_always.so` traced by `cannoli-dump`;
//!
//! and checks
//!
//! * (a) number of `X` lines == libinsn's total;
//! * (b) `X` pc sequence == execlog's pc sequence;
//! * (c) `L`/`S` list == libmem's list (pc, addr, size, kind, value), except
//!   the values that differ between two libmem runs (thread id, getrandom
//!   bytes, fstat of the stdout file: see `e2e::volatile_values`);
//! * (d) the dump is byte-identical with 1, 2 and 4 client threads (but for
//!   the run-dependent values of (c));
//! * (e) guest stdout and stderr under cannoli == under the reference QEMU
//!   (plain QEMU where it is built, else the patched one without cannoli;
//!   the two agree where both exist), and == `tests/programs/<name>.expected`
//!   where there is one;
//! * (f) every access is attributed to the instruction executed just before
//!   it, and the interleaving of instructions and accesses equals execlog's.
//!
//! Without `-R` a 64-bit guest's early small mappings (its vDSO) go into
//! the first hole below QEMU's own libraries, and a plugin is one more
//! library: under libinsn/libmem the vDSO lands a few pages away from where
//! the bare QEMU (and cannoli) put it, under libexeclog elsewhere again.
//! Each plugin run therefore also logs `-d page`, and its pcs, addresses
//! and pointer-sized values inside a moved region are moved to the bare
//! QEMU's layout before the comparison (`e2e::Relocation`; the test prints
//! what moved). A PIE (the host's programs) moves itself under a plugin,
//! with its brk heap, and then even executes other instructions (glibc's
//! malloc aligns the heap it gets), which no relocation can undo; and an
//! x86_64 guest cannot have `-R` (QEMU finds no room for its vsyscall
//! page). So for a PIE on a 64-bit guest all three plugins are loaded into
//! one run, and into cannoli's runs too (silent there: no `-d plugin`):
//! the same shared objects in every QEMU, the same layout.
//! `tests/layout.rs` checks that cannoli alone leaves a PIE's layout alone. cannoli's own trace is never relocated (its layout is the
//! bare QEMU's: `tests/layout.rs`, and every address and pointer compared
//! here).
//!
//! Needs `cargo build --release` first (for `cannoli-dump` and the jitter
//! library), the QEMU builds (see `e2e::qemu_builds`), the guests
//! (`scripts/build-guests.sh`) and busybox (`scripts/fetch-busybox.sh`;
//! both run on demand).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use e2e::procs::{run_traced, traced_cmd};
use e2e::*;

/// One program to check.
struct Case {
    arch: &'static str,
    prog: PathBuf,
    args: Vec<String>,
    /// For messages.
    what: String,
    /// `tests/programs/<name>.expected`, for our programs without arguments.
    expected: Option<Vec<u8>>,
    /// Files created in the run directory first (name, contents).
    files: Vec<(&'static str, Vec<u8>)>,
    /// `cannoli-dump --threads` of the traced runs (check (d) if several).
    client_threads: &'static [usize],
}

/// Client threads of most cases: the client's determinism does not depend
/// on the guest, so only some cases check it with 1, 2 and 4 threads.
const TWO: &[usize] = &[2];
const ALL_THREADS: &[usize] = &[1, 2, 4];

fn ours(arch: &'static str, name: &str, args: &[&str], client_threads: &'static [usize]) {
    let what = if args.is_empty() {
        format!("{name} on {arch}")
    } else {
        format!("{name} {} on {arch}", args.join(" "))
    };
    check(Case {
        arch,
        prog: guest(arch, name),
        args: args.iter().map(|s| s.to_string()).collect(),
        what,
        expected: if args.is_empty() {
            expected_stdout_on(arch, name)
        } else {
            None
        },
        files: Vec::new(),
        client_threads,
    });
}

fn busybox_case(arch: &'static str, applet_args: &[&str]) {
    program_case(arch, busybox(arch), "busybox", applet_args);
}

fn program_case(arch: &'static str, prog: PathBuf, name: &str, args: &[&str]) {
    check(Case {
        arch,
        what: format!("{name} {} on {arch}", args.join(" ")),
        prog,
        args: args.iter().map(|s| s.to_string()).collect(),
        expected: None,
        files: vec![("in.txt", words(300))],
        client_threads: TWO,
    });
}

/// The ground truth of a case.
struct Ground {
    insn: InsnCounts,
    execlog: Execlog,
    mem: Vec<MemAccess>,
    /// Per access of `mem`: its value differs between two runs.
    volatile: Vec<bool>,
}

/// Ground truth from the three plugins in one run (twice, for the
/// run-dependent values), for a PIE on a 64-bit guest: such a program is
/// loaded elsewhere under each plugin (see the file header), so all three
/// must be loaded in every run compared, cannoli's included.
fn ground_combined(
    dir: &RunDir,
    c: &Case,
    f: &Failures,
    ref_name: &str,
    ref_stdout: &[u8],
) -> Ground {
    let args: Vec<&str> = c.args.iter().map(String::as_str).collect();
    let run = |tag: &str| {
        let log = dir.file(&format!("{tag}.log"));
        let cmd = GuestCmd::new(c.arch, qemu_builds().qemu(c.arch), &c.prog, &args);
        let run = run_guest(dir, tag, &with_ground_plugins(cmd, Some(&log)));
        run.assert_success();
        f.check(
            &format!("ground truth: stdout with the plugins ({tag})"),
            same_output(ref_name, ref_stdout, "plugin run", &run.stdout),
        );
        let g = parse_combined(&log).unwrap_or_else(|e| panic!("{e}"));
        remove_big(&log);
        (g.insn, g.execlog, g.mem)
    };
    let start = Instant::now();
    let (insn, execlog, mem) = run("ground");
    if let Some(rest) = Duration::from_millis(1100).checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
    let (_, _, mem2) = run("ground2");
    let volatile = volatile_values(&mem, &mem2).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "e2e: {}: a 64-bit PIE: libinsn, libexeclog and libmem in every run (cannoli's too)",
        c.what
    );
    Ground {
        insn,
        execlog,
        mem,
        volatile,
    }
}

/// Ground truth from one run per plugin (libmem twice, for the
/// run-dependent values), each moved into the bare QEMU's layout
/// `layout`.
fn ground_separate(
    dir: &RunDir,
    c: &Case,
    f: &Failures,
    ref_name: &str,
    ref_stdout: &[u8],
    layout: &PageLayout,
) -> Ground {
    let ptr_bytes = (guest_info(c.arch).bits / 8) as u8;
    // libmem runs twice, to learn which values are not reproducible (see
    // `volatile_values`); its two stdout files must be created in different
    // seconds, so the other plugins run in between.
    let mem1_start = Instant::now();
    let mut moved = Vec::new();
    let (run, log, r) = ground_run(dir, "mem", c, Plugin::Mem, layout);
    let mut mem = parse_mem(&log).unwrap_or_else(|e| panic!("{e}"));
    remove_big(&log);
    let n = relocate_mem(&mut mem, &r, ptr_bytes);
    moved.push(format!("libmem {r} ({n} accesses)"));
    f.check(
        "ground truth: stdout with libmem",
        same_output(ref_name, ref_stdout, "libmem run", &run.stdout),
    );

    let (run, log, r) = ground_run(dir, "insn", c, Plugin::Insn, layout);
    let insn = parse_insn(&log).unwrap_or_else(|e| panic!("{e}"));
    moved.push(format!("libinsn {r}"));
    f.check(
        "ground truth: stdout with libinsn",
        same_output(ref_name, ref_stdout, "libinsn run", &run.stdout),
    );

    let (run, log, r) = ground_run(dir, "execlog", c, Plugin::Execlog, layout);
    let mut execlog = parse_execlog(&log).unwrap_or_else(|e| panic!("{e}"));
    remove_big(&log);
    let n = execlog.relocate(&r);
    moved.push(format!("libexeclog {r} ({n} pcs and addresses)"));
    f.check(
        "ground truth: stdout with libexeclog",
        same_output(ref_name, ref_stdout, "execlog run", &run.stdout),
    );

    let min_gap = Duration::from_millis(1100);
    if let Some(rest) = min_gap.checked_sub(mem1_start.elapsed()) {
        std::thread::sleep(rest);
    }
    let (_, log, r) = ground_run(dir, "mem2", c, Plugin::Mem, layout);
    let mut mem2 = parse_mem(&log).unwrap_or_else(|e| panic!("{e}"));
    remove_big(&log);
    relocate_mem(&mut mem2, &r, ptr_bytes);
    let volatile = volatile_values(&mem, &mem2).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "e2e: {}: plugins' layout vs the bare QEMU's (moved into it): {}",
        c.what,
        moved.join("; ")
    );
    Ground {
        insn,
        execlog,
        mem,
        volatile,
    }
}

/// Deletes a big log once parsed (unless the run dir is to be kept).
fn remove_big(p: &Path) {
    if std::env::var_os(KEEP_ENV).is_none() {
        let _ = std::fs::remove_file(p);
    }
}

/// A plugin run with `-d page` in its log: the run, its log, and the
/// relocation from its layout to `reference`.
fn ground_run(
    dir: &RunDir,
    tag: &str,
    c: &Case,
    plugin: Plugin,
    reference: &PageLayout,
) -> (GuestRun, PathBuf, Relocation) {
    let log = dir.file(&format!("{tag}.log"));
    let args: Vec<&str> = c.args.iter().map(String::as_str).collect();
    let run = run_guest(
        dir,
        tag,
        &paged_plugin_cmd(c.arch, plugin, &c.prog, &args, &log),
    );
    run.assert_success();
    let layout = parse_page_layout(&log).unwrap_or_else(|e| panic!("{e}"));
    let reloc = Relocation::between(&layout, reference).unwrap_or_else(|e| {
        panic!(
            "{}: the guest's layout under the {} plugin: {e}",
            c.what,
            plugin.name()
        )
    });
    (run, log, reloc)
}

/// Relocates libmem's accesses; returns how many changed.
fn relocate_mem(mem: &mut [MemAccess], r: &Relocation, ptr_bytes: u8) -> usize {
    if r.is_identity() {
        return 0;
    }
    let mut n = 0;
    for m in mem.iter_mut() {
        n += usize::from(r.access(m, ptr_bytes));
    }
    n
}

fn check(c: Case) {
    // Fail early, with the message naming the missing piece.
    let q = qemu_builds();
    let g = guest_info(c.arch);
    jitter_lib();
    dump_client();
    let arch = c.arch;
    let args: Vec<&str> = c.args.iter().map(String::as_str).collect();
    let args = &args[..];
    let prog = &c.prog;

    let dir = RunDir::new();
    for (name, data) in &c.files {
        std::fs::write(dir.file(name), data).expect("write an input file");
    }
    let what = c.what.clone();
    let f = Failures::new(what.clone());
    eprintln!("e2e: {what}: run dir {}", dir.path().display());

    // ---- reference runs: stdout, and the layout ----------------------------
    let page_log = dir.file("build.page");
    let build_cmd = GuestCmd::new(arch, q.qemu(arch), prog, args)
        .qemu_arg("-d")
        .qemu_arg("page")
        .qemu_arg("-D")
        .qemu_arg(&page_log);
    let build = run_guest(&dir, "build", &build_cmd);
    build.assert_success();
    let layout = parse_page_layout(&page_log).unwrap_or_else(|e| panic!("{e}"));
    let reference = if g.plain {
        let plain_cmd = GuestCmd::new(arch, q.plain_qemu(arch), prog, args);
        let plain = run_guest(&dir, "plain", &plain_cmd);
        plain.assert_success();
        f.check(
            "e: stdout plain vs patched QEMU",
            same_output("plain QEMU", &plain.stdout, "patched QEMU", &build.stdout),
        );
        plain
    } else {
        build
    };
    let ref_name = if g.plain {
        "plain QEMU"
    } else {
        "patched QEMU without cannoli"
    };
    if let Some(exp) = &c.expected {
        f.check(
            "e: stdout vs tests/programs/*.expected",
            same_output("expected", exp, ref_name, &reference.stdout),
        );
    }

    // ---- ground truth ------------------------------------------------------
    let combined = g.bits == 64 && is_pie(prog);
    let Ground {
        insn,
        execlog,
        mem,
        volatile,
    } = if combined {
        ground_combined(&dir, &c, &f, ref_name, &reference.stdout)
    } else {
        ground_separate(&dir, &c, &f, ref_name, &reference.stdout, &layout)
    };
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
    let wide = mem.iter().filter(|m| m.size == 16).count();
    eprintln!(
        "e2e: {what}: {} instructions, {} accesses ({} loads, {} stores, {wide} of 16 bytes, \
         {n_volatile} with run-dependent values)",
        insn.total,
        mem.len(),
        mem.iter().filter(|m| m.kind == MemKind::Load).count(),
        mem.iter().filter(|m| m.kind == MemKind::Store).count()
    );

    // ---- cannoli -----------------------------------------------------------
    let mut dumps = Vec::new();
    for &t in c.client_threads {
        let tag = format!("cannoli-t{t}");
        // No `-d page -D` here: the log would be one more descriptor open in
        // QEMU, and the guest's first free descriptor would differ from the
        // plugin runs' (which have their log, as cannoli has its socket).
        let mut cmd = traced_cmd(arch, prog, args);
        if combined {
            // The ground truth's plugins, silent (no -d plugin): the same
            // shared objects in QEMU, so the same layout.
            cmd = with_ground_plugins(cmd, None);
        }
        let threads = t.to_string();
        let run = run_traced(&dir, &tag, cmd, &["--threads", &threads], false);
        let client = run.client_ok();
        if !run.guest.status.success() || client.is_err() {
            f.fail(
                &format!("cannoli run, {t} threads"),
                format!(
                    "`{}` exited with {}; client: {}\n--- QEMU stderr ---\n{}",
                    run.guest.cmdline,
                    run.guest.status,
                    client.err().unwrap_or_else(|| "ok".into()),
                    tail(&run.guest.stderr_text(), 20),
                ),
            );
            continue;
        }
        f.check(
            &format!("e: guest stdout under cannoli ({t} threads)"),
            same_output(ref_name, &reference.stdout, "cannoli", &run.guest.stdout),
        );
        f.check(
            &format!("e: guest stderr under cannoli ({t} threads)"),
            same_output(ref_name, &reference.stderr, "cannoli", &run.guest.stderr),
        );
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
    if dumps.len() == c.client_threads.len() && f.is_empty() {
        for (_, d) in &dumps {
            remove_big(d);
        }
    }
    f.finish();
}

/// Our programs, on every guest.
macro_rules! ours {
    ($($arch:ident),*) => {$(
        mod $arch {
            use super::*;
            const A: &str = stringify!($arch);
            #[test]
            fn loops() {
                ours(A, "loops", &[], ALL_THREADS);
            }
            #[test]
            fn calls() {
                ours(A, "calls", &[], TWO);
            }
            #[test]
            fn fnptr() {
                ours(A, "fnptr", &[], TWO);
            }
            #[test]
            fn libc() {
                ours(A, "libc", &[], TWO);
            }
            #[test]
            fn sortcrc() {
                ours(A, "sortcrc", &[], ALL_THREADS);
            }
            #[test]
            fn sortcrc_args() {
                ours(A, "sortcrc", &["700", "2"], TWO);
            }
            #[test]
            fn simd() {
                ours(A, "simd", &[], TWO);
            }
            /// Blocks left from their middle (MIPS branch-likely).
            #[test]
            fn earlyexit() {
                ours(A, "earlyexit", &[], TWO);
            }
        }
    )*};
}

ours!(mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// Debian's busybox, on every guest it is built for.
macro_rules! busybox {
    ($($arch:ident),*) => {$(
        mod $arch {
            use super::*;
            const A: &str = stringify!($arch);
            #[test]
            fn busybox_sha256sum() {
                busybox_case(A, &["sha256sum", "in.txt"]);
            }
            #[test]
            fn busybox_sort() {
                busybox_case(A, &["sort", "in.txt"]);
            }
            #[test]
            fn busybox_echo() {
                busybox_case(A, &["echo", "hello,", "world"]);
            }
        }
    )*};
}

mod bb {
    use super::*;
    busybox!(mipsel, mips64el, arm, aarch64, x86_64, i386, ppc64le);
}

/// The host's own dynamically linked programs, as an x86_64 guest.
mod host {
    use super::*;

    #[test]
    fn sha256sum() {
        program_case(
            "x86_64",
            PathBuf::from("/usr/bin/sha256sum"),
            "sha256sum",
            &["in.txt"],
        );
    }

    #[test]
    fn sort() {
        program_case(
            "x86_64",
            PathBuf::from("/usr/bin/sort"),
            "sort",
            &["in.txt"],
        );
    }
}

#[test]
fn every_guest_has_tests() {
    let names = [
        "mipsel", "mips", "mips64el", "arm", "aarch64", "riscv64", "x86_64", "i386", "ppc64le",
    ];
    assert_eq!(GUESTS.iter().map(|g| g.arch).collect::<Vec<_>>(), names);
    let bb: Vec<&str> = GUESTS
        .iter()
        .filter(|g| g.busybox)
        .map(|g| g.arch)
        .collect();
    assert_eq!(
        bb,
        ["mipsel", "mips64el", "arm", "aarch64", "x86_64", "i386", "ppc64le"]
    );
}
