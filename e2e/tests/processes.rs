// SPDX-License-Identifier: GPL-2.0-or-later
//! Threads, processes, signals, dynamic linking and misbehaving clients,
//! against QEMU's own plugins (libinsn, libexeclog) and plain QEMU, under
//! the harness's identical conditions (empty environment, `-seed 1`, stdout
//! to files, the host's address space randomisation off, no `-R`; see
//! `e2e::run::GuestCmd`). Threads on every guest of the matrix
//! (`<arch>::threads*`), the rest on mipsel and riscv64:
//!
//! * `<arch>::threads`: a pthreads guest (tests/programs/threads.c). Each
//!   guest thread is its own stream (`cannoli-dump --split`); every worker
//!   thread's `X` count equals libinsn's count of its vCPU and its pc
//!   sequence equals libexeclog's sequence of that vCPU (moved to the bare
//!   QEMU's layout where the plugin moved the guest's vDSO, see
//!   `e2e::pages`). A worker's count does not depend on timing: the
//!   workers leave one at a time, so none loops again in glibc's atomic
//!   exit path (a store-conditional retry on most guests) because another
//!   left at once. Worker i is vCPU i + 1: the program creates all workers
//!   before any can finish, and QEMU numbers vCPUs in creation order; the
//!   guest reports which thread id worker i had, and main's `clone` results
//!   must agree. main's own count depends on timing (pthread_join waits on a
//!   futex only if the worker still runs), so main is compared up to
//!   `joins_begin`, the deterministic part.
//! * `<arch>::threads_same_run`, `threads_host_xz`: libinsn and libmem
//!   (counting) loaded into the traced QEMU itself, so the counts are of
//!   the very same execution: each stream's `X` count (`cannoli-dump
//!   --counts`) is its thread's share of libinsn's per-vCPU counts, all
//!   streams' accesses add up to libmem's count, nothing is lost; for the
//!   threads guest on
//!   every guest, and for the host's own dynamically linked `xz -T2`
//!   (x86_64), whose threads really start (its `clone` calls).
//! * `forkexec_*`: fork, then execve of the same guest program, then wait
//!   (tests/programs/forkexec.c). Three streams with the right pid/ppid; the
//!   exec'd stream equals libinsn/libexeclog's run of `forkexec child`
//!   (the same argv: QEMU gives the guest the program path as argv[0], and
//!   the exec'd QEMU gets it back with `-0`); `clone`, `wait4`, `execve`
//!   (no result) and `exit_group` (no result) show in the `Y` lines; the
//!   client returns only once all three streams ended.
//! * `signals_*`: SIGSEGV with siglongjmp, SIGALRM from setitimer, raise
//!   SIGUSR1, _exit from a SIGUSR2 handler (tests/programs/signals.c): the
//!   trace is exact, and the `G` lines name each signal, its code, the
//!   fault address and the handler (from the program's symbol table), and
//!   the next `X` is the handler's first instruction.
//! * `dynamic_*`: a dynamically linked program under `-L /usr/<triple>`
//!   (the ground truth's plugins loaded in every run, see
//!   `e2e::with_ground_plugins`):
//!   the `M` lines name the interpreter and libc.so.6 in the sysroot, code
//!   runs in both, and the trace is exact.
//! * `slow_client_*`: `cannoli-dump --delay-us` with small chunks: QEMU
//!   waits for the client, nothing is lost, the dump equals a normal run's.
//! * `killed_client_*`: `kill -9` of the client mid-trace: QEMU says so in
//!   one line, goes on untraced and exits as the program does, promptly.
//! * `sigterm_*`: QEMU itself gets SIGTERM while the guest waits in a
//!   syscall: it dies of SIGTERM as plain QEMU does, after handing over the
//!   whole trace, which ends with the `G` line of signal 15.
//!
//! Needs `cargo build --release` (cannoli-dump, libjitter_always.so), the
//! QEMU builds (see `e2e::qemu_builds`) and Debian's cross C libraries
//! (`libc6-dev-mipsel-cross`, `libc6-dev-riscv64-cross`) for the sysroots.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use e2e::procs::*;
use e2e::*;

/// Worker threads of the `threads` guest, and its work unit (small enough
/// for libexeclog to stay quick).
const WORKERS: usize = 3;
const WORK: &str = "5000";

/// Client options of most runs.
const CLIENT: &[&str] = &["--threads", "2"];

fn prefix_len_before(seq: &[u64], pc: u64) -> Option<usize> {
    seq.iter().position(|&p| p == pc)
}

fn parse_or_fail(f: &Failures, what: &str, p: &Path) -> Option<DumpTrace> {
    match parse_dump(p) {
        Ok(d) => Some(d),
        Err(e) => {
            f.fail(what, e);
            None
        }
    }
}

fn pcs_fmt(pc: &u64) -> String {
    format!("X {pc:x}")
}

/// Checks a single-process traced run `t`: the guest's stdout is plain
/// QEMU's, and the client lost nothing.
fn check_single_stream_run(f: &Failures, plain: &GuestRun, t: &Traced) {
    f.check(
        "guest stdout",
        same_output("plain QEMU", &plain.stdout, "cannoli", &t.guest.stdout),
    );
    f.check(
        "client (no lost events, no incomplete stream)",
        t.client_ok(),
    );
}

/// Checks a stream's executed pcs against the ground truth: libinsn's
/// count `want` and libexeclog's sequence. `prefix` starts the checks'
/// names (`count`, `pc sequence`).
fn check_pcs(f: &Failures, prefix: &str, pcs: &[u64], want: u64, execlog: &[u64]) {
    if pcs.len() as u64 != want {
        f.fail(
            &format!("{prefix}count"),
            format!("cannoli has {} X lines, libinsn counted {want}", pcs.len()),
        );
    }
    f.check(
        &format!("{prefix}pc sequence"),
        compare_seq("executed pcs", "execlog", execlog, "cannoli", pcs, pcs_fmt),
    );
}

// ---------------------------------------------------------------------------
// 1. threads
// ---------------------------------------------------------------------------

/// Attempts at a ground truth on which libinsn and libexeclog agree.
const GROUND_ATTEMPTS: usize = 3;

/// The `threads` guest's ground truth: libinsn's per-vCPU counts, and
/// libexeclog's pcs per vCPU (moved to the bare QEMU's layout), from two
/// runs that agree on every worker's count.
///
/// A worker's count is a property of the program, but QEMU can still
/// change it now and then: on a guest whose atomics are load-reserved /
/// store-conditional loops split over two translation blocks (ppc's
/// `lwarx; cmpw; bne` then `stwcx.; bne-`), any exit from the vCPU's
/// translated code in between drops the reservation (ppc's `cpu_loop` does
/// on `EXCP_INTERRUPT`), and the loop runs once more (5 instructions). QEMU
/// interrupts every running vCPU for exclusive work, such as growing a
/// plugin's scoreboard when a new vCPU starts. The guest keeps its workers
/// clear of such loops where it can (see `tests/programs/threads.c`); a
/// ground truth whose two plugin runs still disagree is not one, and is
/// taken again (a fresh-clone CI run with two CPU hogs, 2026-11-30, saw
/// libexeclog count 45,827 instructions on ppc64le's worker 0 where libinsn
/// and every other run counted 45,822).
fn worker_ground_truth(
    dir: &RunDir,
    arch: &str,
    prog: &Path,
    args: &[&str],
) -> (InsnCounts, BTreeMap<u32, Vec<u64>>) {
    let mut disagreements = Vec::new();
    for attempt in 0..GROUND_ATTEMPTS {
        let (run, log) = run_plugin(
            dir,
            &format!("insn-{attempt}"),
            arch,
            Plugin::Insn,
            prog,
            args,
        );
        run.assert_success();
        let insn = parse_insn(&log).unwrap_or_else(|e| panic!("{e}"));
        let (run, log) = run_plugin_retrying(
            dir,
            &format!("execlog-{attempt}"),
            arch,
            Plugin::Execlog,
            prog,
            args,
            10,
        );
        run.assert_success();
        let mut execlog = parse_execlog_per_cpu(&log).unwrap_or_else(|e| panic!("{e}"));
        // Without -R the plugin can move the guest's vDSO (see e2e::pages):
        // its pcs go to where the bare QEMU has them.
        let reloc = Relocation::between(
            &parse_page_layout(&log).unwrap_or_else(|e| panic!("{e}")),
            &bare_layout(dir, &format!("bare-{attempt}"), arch, prog, args, &same),
        )
        .unwrap_or_else(|e| panic!("threads on {arch}: the layout under libexeclog: {e}"));
        for pcs in execlog.values_mut() {
            for pc in pcs.iter_mut() {
                *pc = reloc.addr(*pc);
            }
        }

        // One vCPU per thread, in both runs.
        let cpus: Vec<u32> = insn.per_cpu.iter().map(|&(c, _)| c).collect();
        let want_cpus: Vec<u32> = (0..=WORKERS as u32).collect();
        assert_eq!(
            cpus, want_cpus,
            "libinsn should count vCPUs 0..={WORKERS} (main + workers)"
        );
        assert_eq!(
            execlog.keys().copied().collect::<Vec<_>>(),
            want_cpus,
            "libexeclog should show vCPUs 0..={WORKERS}"
        );
        let disagree: Vec<String> = (1..=WORKERS)
            .filter(|&w| execlog[&(w as u32)].len() as u64 != insn.per_cpu[w].1)
            .map(|w| {
                format!(
                    "attempt {attempt}: vCPU {w} (worker {}): libinsn {}, libexeclog {}",
                    w - 1,
                    insn.per_cpu[w].1,
                    execlog[&(w as u32)].len()
                )
            })
            .collect();
        if disagree.is_empty() {
            if !disagreements.is_empty() {
                eprintln!(
                    "e2e: threads on {arch}: the plugins disagreed before they agreed:\n{}",
                    disagreements.join("\n")
                );
            }
            return (insn, execlog);
        }
        disagreements.extend(disagree);
    }
    panic!(
        "ground truth: libinsn and libexeclog disagree on a worker in all {GROUND_ATTEMPTS} attempts (the workers are not deterministic):\n{}",
        disagreements.join("\n")
    )
}

fn threads(arch: &str) {
    let q = qemu_builds();
    let prog = guest(arch, "threads");
    let workers = WORKERS.to_string();
    let args = [workers.as_str(), WORK];
    let dir = RunDir::new();
    let f = Failures::new(format!("threads on {arch}"));

    let plain = run_bare(&dir, "plain", arch, q.reference_qemu(arch), &prog, &args);
    plain.assert_success();

    let (insn, execlog) = worker_ground_truth(&dir, arch, &prog, &args);

    let t = run_traced(
        &dir,
        "cannoli",
        traced_cmd(arch, &prog, &args),
        CLIENT,
        true,
    );
    t.guest.assert_success();
    f.check(
        "guest stdout",
        same_output("plain QEMU", &plain.stdout, "cannoli", &t.guest.stdout),
    );
    f.check("client", t.client_ok());
    match t.summary() {
        Ok(s) if s.connections == WORKERS as u64 + 1 => {}
        Ok(s) => f.fail(
            "connections",
            format!(
                "{} connections, want {} (main + workers)",
                s.connections,
                WORKERS + 1
            ),
        ),
        Err(e) => f.fail("summary", e),
    }

    // worker index -> tid, as the guest saw it.
    let mut tids = [0i32; WORKERS];
    for line in t.guest.stderr_text().lines() {
        let w: Vec<&str> = line.split(' ').collect();
        if let ["worker", i, "tid", tid] = w[..] {
            if let (Ok(i), Ok(tid)) = (i.parse::<usize>(), tid.parse::<i32>()) {
                if i < WORKERS {
                    tids[i] = tid;
                }
            }
        }
    }
    assert!(
        tids.iter().all(|&t| t > 0),
        "the guest did not report every worker's tid:\n{}",
        t.guest.stderr_text()
    );

    let streams = t.streams().unwrap_or_else(|e| panic!("{e}"));
    let Some(main) = streams.0.first().cloned() else {
        panic!("no streams at all");
    };
    if streams.0.len() != WORKERS + 1
        || streams.0.iter().any(|s| s.pid != main.pid)
        || main.tid != main.pid
    {
        f.fail(
            "streams",
            format!(
                "want {} streams of one process, the first its main thread (tid == pid):\n{}",
                WORKERS + 1,
                streams.describe()
            ),
        );
    }

    // Workers: exact.
    for (i, &tid) in tids.iter().enumerate() {
        let cpu = i as u32 + 1;
        let what = format!("worker {i} (tid {tid}, vCPU {cpu})");
        let s = streams.of(main.pid, tid);
        if s.len() != 1 {
            f.fail(
                &what,
                format!(
                    "{} streams for it, want 1:\n{}",
                    s.len(),
                    streams.describe()
                ),
            );
            continue;
        }
        let Some(d) = parse_or_fail(&f, &what, &s[0].file) else {
            continue;
        };
        let want = insn.per_cpu[cpu as usize].1;
        check_pcs(&f, &format!("{what}: "), &d.pcs, want, &execlog[&cpu]);
        match d.syscalls() {
            Ok(y) => {
                let last = y.last();
                if !matches!(last, Some(l) if l.name == "exit" && l.ret.is_none()) {
                    f.fail(
                        &format!("{what}: Y lines"),
                        format!("last syscall {last:?}, want exit without a result"),
                    );
                }
                if y.iter().any(|l| l.name == "exit_group") {
                    f.fail(&format!("{what}: Y lines"), "a worker called exit_group");
                }
            }
            Err(e) => f.fail(&what, e),
        }
    }

    // main: its clone results are the workers' tids in creation order; its
    // pcs up to `joins_begin` equal vCPU 0's; it ends in exit_group.
    if let Some(d) = parse_or_fail(&f, "main thread", &main.file) {
        match d.syscalls() {
            Ok(y) => {
                let clones: Vec<i64> = y
                    .iter()
                    .filter(|l| matches!(l.name.as_str(), "clone" | "clone3"))
                    .filter_map(|l| l.ret)
                    .collect();
                let want: Vec<i64> = tids.iter().map(|&t| t as i64).collect();
                if clones != want {
                    f.fail(
                        "main: clone results",
                        format!("clone returned {clones:?}, the workers' tids are {want:?}"),
                    );
                }
                let last = y.last();
                if !matches!(last, Some(l) if l.name == "exit_group" && l.ret.is_none() && l.args[0] == 0)
                {
                    f.fail(
                        "main: Y lines",
                        format!("last syscall {last:?}, want exit_group(0) without a result"),
                    );
                }
            }
            Err(e) => f.fail("main thread", e),
        }
        let syms = elf_symbols(&prog).unwrap_or_else(|e| panic!("{e}"));
        // A Thumb function's symbol has bit 0 set; its code does not.
        let jb = elf_symbol(&syms, &prog, "joins_begin") & !u64::from(arch == "arm");
        match (
            prefix_len_before(&execlog[&0], jb),
            prefix_len_before(&d.pcs, jb),
        ) {
            (Some(a), Some(b)) => {
                f.check(
                    "main: pcs before joins_begin",
                    compare_seq(
                        "main's pcs before joins_begin",
                        "execlog vCPU 0",
                        &execlog[&0][..a],
                        "cannoli",
                        &d.pcs[..b],
                        pcs_fmt,
                    ),
                );
            }
            (a, b) => f.fail(
                "main: joins_begin",
                format!(
                    "joins_begin ({jb:#x}) executed: execlog {}, cannoli {}",
                    a.is_some(),
                    b.is_some()
                ),
            ),
        }
    }
    f.finish();
}

/// Assigns each thread's count to a vCPU so that every vCPU's count is the
/// sum of its threads' (QEMU gives a new thread the lowest free vCPU index,
/// so a thread that starts after another ended reuses its index, and the
/// plugins add both up). Returns, per thread, its vCPU; `None` if there is
/// no such assignment.
fn assign_threads(threads: &[u64], cpus: &[u64]) -> Option<Vec<usize>> {
    fn go(i: usize, t: &[u64], left: &mut [u64], out: &mut Vec<usize>) -> bool {
        if i == t.len() {
            return left.iter().all(|&l| l == 0);
        }
        for c in 0..left.len() {
            if left[c] >= t[i] {
                left[c] -= t[i];
                out.push(c);
                if go(i + 1, t, left, out) {
                    return true;
                }
                out.pop();
                left[c] += t[i];
            }
        }
        false
    }
    let mut left = cpus.to_vec();
    let mut out = Vec::new();
    go(0, threads, &mut left, &mut out).then_some(out)
}

/// `cmd` with libinsn and libmem (`inline=true`: a count) loaded, their
/// counts logged to `log`.
fn with_counting_plugins(cmd: GuestCmd, log: &Path) -> GuestCmd {
    let mut mem = qemu_builds().plugin(Plugin::Mem).into_os_string();
    mem.push(",inline=true");
    cmd.qemu_arg("-plugin")
        .qemu_arg(qemu_builds().plugin(Plugin::Insn))
        .qemu_arg("-plugin")
        .qemu_arg(mem)
        .qemu_arg("-d")
        .qemu_arg("plugin")
        .qemu_arg("-D")
        .qemu_arg(log)
}

/// For [`AtExit::Running`]: pairs the streams' counts with libinsn's
/// vCPUs, one each, every stream at least its vCPU's count (largest with
/// largest: such a pairing exists exactly when that one works). Returns
/// each pair's surplus, largest stream first.
fn at_least(threads: &[u64], cpus: &[u64]) -> Result<Vec<u64>, String> {
    let (mut t, mut c) = (threads.to_vec(), cpus.to_vec());
    t.sort_unstable_by(|a, b| b.cmp(a));
    c.sort_unstable_by(|a, b| b.cmp(a));
    if t.len() != c.len() || t.iter().zip(&c).any(|(a, b)| a < b) {
        return Err(format!(
            "the streams' counts {threads:?} do not each cover one of libinsn's vCPUs {cpus:?}"
        ));
    }
    Ok(t.iter().zip(&c).map(|(a, b)| a - b).collect())
}

/// What [`same_run_counts`] gives: the run, each stream (in connection
/// order) with its counts, and libinsn's per-vCPU counts.
pub(crate) type SameRun = (Traced, Vec<(StreamInfo, Counts)>, Vec<(u32, u64)>);

/// How a program's threads stand when it exits, for [`same_run_counts`].
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum AtExit {
    /// Every thread but the exiting one ended or waits in the kernel (the
    /// program joins its threads): the counts are equal.
    Joined,
    /// Threads may run on when the process exits (a Go runtime's `sysmon`
    /// and spinning threads). QEMU's plugins stop counting at the
    /// `exit_group` (`qemu_plugin_user_exit` unregisters their callbacks
    /// and lets the other vCPUs run on), but those threads execute guest
    /// code until QEMU's process ends, and cannoli traces it: a thread's
    /// stream may then hold more than the plugins counted, never less.
    Running,
}

/// A multi-threaded run traced by cannoli with libinsn and libmem
/// (`inline=true`: a count) loaded into the same QEMU (`cmd` is a
/// [`traced_cmd`]): each stream's `X` count must be a thread's share of
/// libinsn's per-vCPU counts ([`assign_threads`]), all streams' `L` and `S`
/// events together libmem's count, and the client must lose nothing (for
/// [`AtExit::Running`]: at least those counts, see there). Unlike
/// comparisons across runs this holds however the threads were scheduled.
/// Returns the run and the counts (per stream in connection order, per
/// vCPU).
pub(crate) fn same_run_counts(
    f: &Failures,
    dir: &RunDir,
    cmd: GuestCmd,
    at_exit: AtExit,
) -> SameRun {
    let log = dir.file("same-run-insn.log");
    let cmd = with_counting_plugins(cmd, &log);
    let t = run_traced(dir, "same-run", cmd, &["--threads", "2", "--counts"], true);
    f.check(
        "same run: client (no lost events, no incomplete streams)",
        t.client_ok(),
    );
    let ground = parse_combined(&log).unwrap_or_else(|e| panic!("{e}"));
    let insn = ground.insn;
    let streams = t.streams().unwrap_or_else(|e| panic!("{e}"));
    let mut counts = Vec::new();
    for s in &streams.0 {
        match parse_dump(&s.file).and_then(|d| d.counts()) {
            Ok(c) if c.len() == 1 && c[0].pid == s.pid && c[0].tid == s.tid => {
                counts.push((s.clone(), c[0]))
            }
            Ok(c) => f.fail(
                "same run: C lines",
                format!(
                    "{}: {c:?}, want one C line of pid {} tid {}",
                    s.file.display(),
                    s.pid,
                    s.tid
                ),
            ),
            Err(e) => f.fail("same run: stream file", e),
        }
    }
    let per_thread: Vec<u64> = counts.iter().map(|(_, c)| c.exec).collect();
    let per_cpu: Vec<u64> = insn.per_cpu.iter().map(|&(_, n)| n).collect();
    let accesses: u64 = counts.iter().map(|(_, c)| c.loads + c.stores).sum();
    if at_exit == AtExit::Running {
        match at_least(&per_thread, &per_cpu) {
            Ok(past) => eprintln!(
                "e2e: same run: {} of {} streams have instructions past the plugins' \
                 exit ({past:?}); {} accesses past libmem's {:?}",
                past.iter().filter(|&&n| n > 0).count(),
                past.len(),
                accesses.saturating_sub(ground.mem_total.unwrap_or(0)),
                ground.mem_total
            ),
            Err(e) => f.fail("same run: per-thread counts", e),
        }
        if ground.mem_total.map_or(true, |m| accesses < m) {
            f.fail(
                "same run: memory accesses",
                format!(
                    "the streams have {accesses} L and S events in all, fewer than libmem's {:?}",
                    ground.mem_total
                ),
            );
        }
        return (t, counts, insn.per_cpu);
    }
    if per_thread.iter().sum::<u64>() != insn.total {
        f.fail(
            "same run: instruction count",
            format!(
                "the streams have {} X events in all ({per_thread:?}), libinsn counted {} ({per_cpu:?})",
                per_thread.iter().sum::<u64>(),
                insn.total
            ),
        );
    } else if assign_threads(&per_thread, &per_cpu).is_none() {
        f.fail(
            "same run: per-thread counts",
            format!(
                "no assignment of the streams' counts {per_thread:?} to libinsn's vCPUs {:?}",
                insn.per_cpu
            ),
        );
    }
    if ground.mem_total != Some(accesses) {
        f.fail(
            "same run: memory accesses",
            format!(
                "the streams have {accesses} L and S events in all, libmem counted {:?}",
                ground.mem_total
            ),
        );
    }
    (t, counts, insn.per_cpu)
}

/// The `threads` guest on every guest, in one run with libinsn.
fn threads_same_run(arch: &str) {
    let prog = guest(arch, "threads");
    let workers = WORKERS.to_string();
    let args = [workers.as_str(), WORK];
    let dir = RunDir::new();
    let f = Failures::new(format!("threads on {arch}, with libinsn in the same run"));
    let (t, counts, per_cpu) =
        same_run_counts(&f, &dir, traced_cmd(arch, &prog, &args), AtExit::Joined);
    t.guest.assert_success();
    if counts.len() != WORKERS + 1 || per_cpu.len() != WORKERS + 1 {
        f.fail(
            "threads",
            format!(
                "{} streams and {} vCPUs, want {}",
                counts.len(),
                per_cpu.len(),
                WORKERS + 1
            ),
        );
    }
    f.finish();
}

/// The host's own multi-threaded `xz -T2` (dynamically linked, x86_64),
/// compressing a few blocks at once: it really starts threads (its `clone`
/// calls, more than one stream), and each thread's count is its share of
/// libinsn's in the same run.
#[test]
fn threads_host_xz() {
    let arch = "x86_64";
    let dir = RunDir::new();
    let mut data = Vec::new();
    let mut x = 0x2545_f491u32;
    while data.len() < 24 << 10 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        data.extend_from_slice(format!("{x:08x} {}\n", x % 1000).as_bytes());
    }
    std::fs::write(dir.file("in.txt"), &data).unwrap();
    let prog = Path::new("/usr/bin/xz");
    let args = ["-T2", "-0", "--block-size=8KiB", "-c", "in.txt"];
    let f = Failures::new("xz -T2 on x86_64, with libinsn in the same run");
    let reference = run_bare(
        &dir,
        "plain",
        arch,
        qemu_builds().plain_qemu(arch),
        prog,
        &args,
    );
    reference.assert_success();
    let (t, counts, per_cpu) =
        same_run_counts(&f, &dir, traced_cmd(arch, prog, &args), AtExit::Joined);
    t.guest.assert_success();
    f.check(
        "guest stdout",
        same_output("plain QEMU", &reference.stdout, "cannoli", &t.guest.stdout),
    );
    let clones = counts
        .first()
        .map(|(s, _)| {
            parse_dump(&s.file)
                .and_then(|d| d.syscalls())
                .map(|y| {
                    y.iter()
                        .filter(|l| {
                            matches!(l.name.as_str(), "clone" | "clone3") && l.ret.unwrap_or(0) > 0
                        })
                        .count()
                })
                .unwrap_or(0)
        })
        .unwrap_or(0);
    if clones < 2 || counts.len() < 3 || per_cpu.len() < 2 {
        f.fail(
            "threads",
            format!(
                "xz -T2 made {clones} threads (clone in the main stream), {} streams, {} vCPUs: \
                 want at least 2 worker threads",
                counts.len(),
                per_cpu.len()
            ),
        );
    }
    eprintln!(
        "e2e: xz -T2: {} streams {:?}, libinsn {per_cpu:?}",
        counts.len(),
        counts.iter().map(|(_, c)| c.exec).collect::<Vec<_>>()
    );
    f.finish();
}

#[test]
fn assignment_of_threads_to_vcpus() {
    assert_eq!(assign_threads(&[5, 3, 7], &[5, 7, 3]), Some(vec![0, 2, 1]));
    assert_eq!(assign_threads(&[5, 3, 4], &[5, 7]), Some(vec![0, 1, 1]));
    assert_eq!(assign_threads(&[5, 3, 4], &[5, 8]), None);
    assert_eq!(assign_threads(&[5, 3], &[5, 3, 1]), None);
}

macro_rules! threads_tests {
    ($($arch:ident),*) => {$(
        mod $arch {
            #[test]
            fn threads() {
                super::threads(stringify!($arch));
            }
            #[test]
            fn threads_same_run() {
                super::threads_same_run(stringify!($arch));
            }
        }
    )*};
}

threads_tests!(mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

// ---------------------------------------------------------------------------
// 2. fork + exec
// ---------------------------------------------------------------------------

fn forkexec(arch: &str) {
    let q = qemu_builds();
    let prog = guest(arch, "forkexec");
    let prog_str = prog.to_string_lossy().into_owned();
    let dir = RunDir::new();
    let f = Failures::new(format!("forkexec on {arch}"));

    // QEMU's malloc arena must be pinned in the QEMU that the guest's
    // execve starts too (see e2e::QEMU_ENV), which gets the guest's
    // environment: so here the guest sees QEMU_ENV, in every run.
    let tweak = |c: GuestCmd| c.env_shared_with_guest();

    // Reference: plain QEMU hands execve to the host kernel, which cannot
    // run a foreign ELF without binfmt_misc; `forkexec noexec` prints and
    // returns exactly what `forkexec` does, without the exec.
    let reference = q.reference_qemu(arch);
    let bare = |tag: &str, args: &[&str]| {
        run_guest(
            &dir,
            tag,
            &tweak(GuestCmd::new(arch, reference.clone(), &prog, args)),
        )
    };
    let plain = bare("plain", &["noexec"]);
    let plain_code = exit_code(&plain.status).unwrap_or_else(|e| panic!("plain QEMU: {e}"));
    assert_eq!(
        plain_code,
        3,
        "`forkexec noexec` under plain QEMU:\n{}",
        plain.stderr_text()
    );
    let plain_child = bare("plain-child", &["child"]);
    assert_eq!(
        plain_child.status.code(),
        Some(42),
        "`forkexec child` under plain QEMU"
    );

    // Ground truth for the exec'd program: the same argv (argv[0] is the
    // program path either way) and the same environment.
    let log = dir.file("insn-child.log");
    let run = run_guest(
        &dir,
        "insn-child",
        &tweak(plugin_cmd(arch, Plugin::Insn, &prog, &["child"], &log)),
    );
    assert_eq!(run.status.code(), Some(42));
    let insn = parse_insn(&log).unwrap_or_else(|e| panic!("{e}"));
    let (run, execlog) =
        execlog_in_bare_layout(&dir, "execlog-child", arch, &prog, &["child"], &tweak);
    assert_eq!(run.status.code(), Some(42));

    let t = run_traced(
        &dir,
        "cannoli",
        tweak(traced_cmd(arch, &prog, &[])),
        CLIENT,
        true,
    );
    match exit_code(&t.guest.status) {
        Ok(c) if c == plain_code => {}
        other => f.fail(
            "exit status",
            format!(
                "{other:?}, plain QEMU (noexec) {plain_code}\n--- QEMU stderr ---\n{}",
                tail(&t.guest.stderr_text(), 20)
            ),
        ),
    }
    f.check(
        "guest stdout",
        same_output(
            "plain QEMU (noexec)",
            &plain.stdout,
            "cannoli",
            &t.guest.stdout,
        ),
    );
    if !text(&t.guest.stdout).contains(&text(&plain_child.stdout)) {
        f.fail(
            "guest stdout",
            "does not contain the exec'd program's output",
        );
    }
    f.check(
        "client (no lost events, no incomplete streams)",
        t.client_ok(),
    );
    match t.summary() {
        Ok(s) if s.connections == 3 => {}
        Ok(s) => f.fail(
            "connections",
            format!(
                "{}, want 3 (parent, child, child after execve)",
                s.connections
            ),
        ),
        Err(e) => f.fail("summary", e),
    }

    let streams = t.streams().unwrap_or_else(|e| panic!("{e}"));
    let v = &streams.0;
    let shape_ok = v.len() == 3
        && v[0].tid == v[0].pid
        && v[0].ppid == std::process::id() as i32
        && v[1].pid != v[0].pid
        && v[1].tid == v[1].pid
        && v[1].ppid == v[0].pid
        && v[2].pid == v[1].pid
        && v[2].tid == v[1].tid
        && v[2].ppid == v[0].pid
        && v.iter().all(|s| s.exe == prog_str);
    if !shape_ok {
        f.fail(
            "streams",
            format!(
                "want parent (pid P, ppid = the test {}), child (pid C, ppid P), exec'd child (pid C, ppid P), \
                 all of {prog_str}; got:\n{}",
                std::process::id(),
                streams.describe()
            ),
        );
        f.finish();
        return;
    }
    let (parent, child) = (v[0].pid, v[1].pid);

    // Parent: fork = clone returning the child's pid, wait4 for it, exit_group(3).
    if let Some(d) = parse_or_fail(&f, "parent", &v[0].file) {
        let y = d.syscalls().unwrap_or_else(|e| panic!("{e}"));
        let fork = y
            .iter()
            .find(|l| matches!(l.name.as_str(), "clone" | "clone3" | "fork" | "vfork"));
        if !matches!(fork, Some(l) if l.ret == Some(child as i64)) {
            f.fail(
                "parent: fork",
                format!("{fork:?}, want a clone returning the child's pid {child}"),
            );
        }
        let wait = y.iter().find(|l| l.name == "wait4");
        if !matches!(wait, Some(l) if l.ret == Some(child as i64)) {
            f.fail(
                "parent: wait4",
                format!("{wait:?}, want wait4 returning {child}"),
            );
        }
        if y.iter().any(|l| l.name == "execve") {
            f.fail("parent: execve", "the parent's stream shows an execve");
        }
        let last = y.last();
        if !matches!(last, Some(l) if l.name == "exit_group" && l.ret.is_none() && l.args[0] == 3) {
            f.fail(
                "parent: exit",
                format!("last syscall {last:?}, want exit_group(3) without a result"),
            );
        }
    }

    // Child before execve: replays the parent's mappings first, sees clone
    // return 0, ends in execve without a result.
    if let Some(d) = parse_or_fail(&f, "child", &v[1].file) {
        let first = std::fs::read_to_string(&v[1].file).unwrap_or_default();
        let before_x: Vec<&str> = first.lines().take_while(|l| !l.starts_with("X ")).collect();
        if !before_x
            .iter()
            .any(|l| l.starts_with("M ") && l.ends_with(&format!(" {prog_str}")))
        {
            f.fail(
                "child: mappings replayed",
                format!("no M line of {prog_str} before the child's first instruction; its first lines:\n{}", before_x.join("\n")),
            );
        }
        let y = d.syscalls().unwrap_or_else(|e| panic!("{e}"));
        if !y.iter().any(|l| {
            matches!(l.name.as_str(), "clone" | "clone3" | "fork" | "vfork") && l.ret == Some(0)
        }) {
            f.fail("child: fork", "no clone returning 0 in the child's stream");
        }
        let last = y.last();
        let ok = matches!(last, Some(l) if l.name == "execve" && l.ret.is_none() && l.data == prog_str.as_bytes());
        if !ok {
            f.fail(
                "child: execve",
                format!("last syscall {last:?}, want execve of {prog_str} without a result"),
            );
        }
        if d.pcs.is_empty() {
            f.fail("child", "no instructions before the execve");
        }
    }

    // Child after execve: exactly `forkexec child`.
    if let Some(d) = parse_or_fail(&f, "exec'd child", &v[2].file) {
        check_pcs(&f, "exec'd child: ", &d.pcs, insn.total, &execlog.pcs);
        // The exec'd program must run under the same QEMU options and QEMU
        // environment as a direct run (`-seed 1`, `MALLOC_ARENA_MAX=1`):
        // else its stack and mmaps land elsewhere.
        f.check(
            "exec'd child: accesses (instruction, kind, address) as in a direct run",
            compare_seq(
                "accesses",
                "execlog",
                &execlog.mem,
                "cannoli",
                &d.mem_slots(),
                |s| s.to_string(),
            ),
        );
        let y = d.syscalls().unwrap_or_else(|e| panic!("{e}"));
        let last = y.last();
        if !matches!(last, Some(l) if l.name == "exit_group" && l.ret.is_none() && l.args[0] == 42)
        {
            f.fail(
                "exec'd child: exit",
                format!("last syscall {last:?}, want exit_group(42) without a result"),
            );
        }
        if y.iter().any(|l| l.name == "execve") {
            f.fail("exec'd child", "shows an execve");
        }
        match d.maps() {
            Ok(m)
                if m.iter()
                    .any(|m| !m.anon && m.prot.contains('x') && m.path == prog_str) => {}
            Ok(_) => f.fail(
                "exec'd child: M lines",
                format!("no executable mapping of {prog_str}"),
            ),
            Err(e) => f.fail("exec'd child: M lines", e),
        }
    }
    let _ = parent;
    f.finish();
}

#[test]
fn forkexec_mipsel() {
    forkexec("mipsel");
}

#[test]
fn forkexec_riscv64() {
    forkexec("riscv64");
}

// ---------------------------------------------------------------------------
// 3. signals
// ---------------------------------------------------------------------------

/// `fault_address` in tests/programs/signals.c.
const FAULT_ADDR: u64 = 0x1238;
/// Exit status of tests/programs/signals.c (from its SIGUSR2 handler).
const SIGNALS_EXIT: i32 = 7;
const SEGV_MAPERR: i32 = 1;
const SI_KERNEL: i32 = 0x80;
const SI_TKILL: i32 = -6;

/// (SIGSEGV, SIGALRM, SIGUSR1, SIGUSR2) of the guest.
fn signal_numbers(arch: &str) -> (i32, i32, i32, i32) {
    match arch {
        "mipsel" | "mips" | "mips64el" | "mips64" => (11, 14, 16, 17),
        _ => (11, 14, 10, 12),
    }
}

fn signals(arch: &str) {
    let q = qemu_builds();
    let prog = guest(arch, "signals");
    let dir = RunDir::new();
    let f = Failures::new(format!("signals on {arch}"));
    let syms = elf_symbols(&prog).unwrap_or_else(|e| panic!("{e}"));
    let sym = |n: &str| elf_symbol(&syms, &prog, n);

    let plain = run_bare(&dir, "plain", arch, q.plain_qemu(arch), &prog, &[]);
    assert_eq!(
        plain.status.code(),
        Some(SIGNALS_EXIT),
        "plain QEMU: {}",
        plain.stderr_text()
    );
    let (run, log) = run_plugin(&dir, "insn", arch, Plugin::Insn, &prog, &[]);
    assert_eq!(run.status.code(), Some(SIGNALS_EXIT));
    let insn = parse_insn(&log).unwrap_or_else(|e| panic!("{e}"));
    let (run, execlog) = execlog_in_bare_layout(&dir, "execlog", arch, &prog, &[], &same);
    assert_eq!(run.status.code(), Some(SIGNALS_EXIT));
    assert_eq!(
        execlog.pcs.len() as u64,
        insn.total,
        "ground truth: libinsn and libexeclog disagree"
    );

    let t = run_traced(&dir, "cannoli", traced_cmd(arch, &prog, &[]), CLIENT, false);
    if t.guest.status.code() != Some(SIGNALS_EXIT) {
        f.fail(
            "exit status",
            format!(
                "{}, want {SIGNALS_EXIT}\n{}",
                t.guest.status,
                tail(&t.guest.stderr_text(), 20)
            ),
        );
    }
    check_single_stream_run(&f, &plain, &t);
    match t.summary() {
        Ok(s) if s.connections == 1 => {}
        Ok(s) => f.fail("connections", format!("{}, want 1", s.connections)),
        Err(e) => f.fail("summary", e),
    }
    let d = parse_dump(&t.dump).unwrap_or_else(|e| panic!("{e}"));
    check_pcs(&f, "", &d.pcs, insn.total, &execlog.pcs);

    let (segv, alrm, usr1, usr2) = signal_numbers(arch);
    // (signo, code, fault address, handler)
    let want = [
        (segv, SEGV_MAPERR, FAULT_ADDR, sym("on_segv")),
        (segv, SEGV_MAPERR, FAULT_ADDR, sym("on_segv")),
        (alrm, SI_KERNEL, 0, sym("on_alrm")),
        (usr1, SI_TKILL, 0, sym("on_usr1")),
        (usr2, SI_TKILL, 0, sym("on_usr2")),
    ];
    match signals_in_context(&t.dump) {
        Err(e) => f.fail("G lines", e),
        Ok(got) => {
            let got_v: Vec<(i32, i32, u64, Option<u64>)> = got
                .iter()
                .map(|(g, _, _)| (g.signo, g.code, g.fault_addr, g.handler))
                .collect();
            let want_v: Vec<(i32, i32, u64, Option<u64>)> = want
                .iter()
                .map(|&(s, c, a, h)| (s, c, a, Some(h)))
                .collect();
            f.check(
                "G lines (signo, code, fault address, handler)",
                compare_seq("signals", "expected", &want_v, "cannoli", &got_v, |x| {
                    format!("{x:x?}")
                }),
            );
            for (g, _, next) in &got {
                if let Some(h) = g.handler {
                    if *next != Some(h) {
                        f.fail(
                            "G lines: handler runs next",
                            format!(
                                "after G {} the next X is {next:x?}, not the handler {h:#x}",
                                g.signo
                            ),
                        );
                    }
                }
            }
        }
    }
    match d.syscalls() {
        Ok(y) => {
            let last = y.last();
            if !matches!(last, Some(l) if l.name == "exit_group" && l.ret.is_none() && l.args[0] == SIGNALS_EXIT as u64)
            {
                f.fail(
                    "Y lines",
                    format!(
                        "last syscall {last:?}, want exit_group({SIGNALS_EXIT}) without a result"
                    ),
                );
            }
            let tgkills = y.iter().filter(|l| l.name == "tgkill").count();
            if tgkills != 2 {
                f.fail(
                    "Y lines",
                    format!("{tgkills} tgkill calls, want 2 (the two raise calls)"),
                );
            }
            if !y.iter().any(|l| l.name == "setitimer") {
                f.fail("Y lines", "no setitimer");
            }
        }
        Err(e) => f.fail("Y lines", e),
    }
    f.finish();
}

#[test]
fn signals_mipsel() {
    signals("mipsel");
}

#[test]
fn signals_riscv64() {
    signals("riscv64");
}

// ---------------------------------------------------------------------------
// 4. a dynamically linked program
// ---------------------------------------------------------------------------

/// Debian's cross sysroot and the interpreter's path in it.
fn sysroot(arch: &str) -> (PathBuf, &'static str) {
    let (dir, interp) = match arch {
        "mipsel" => ("/usr/mipsel-linux-gnu", "/lib/ld.so.1"),
        "riscv64" => ("/usr/riscv64-linux-gnu", "/lib/ld-linux-riscv64-lp64d.so.1"),
        _ => panic!("no sysroot known for {arch}"),
    };
    let root = PathBuf::from(dir);
    for f in [interp, "/lib/libc.so.6"] {
        let p = root.join(f.trim_start_matches('/'));
        assert!(
            p.is_file(),
            "{} is missing: install Debian's libc6-{arch}-cross (apt-get install -y libc6-dev-{arch}-cross)",
            p.display()
        );
    }
    (root, interp)
}

/// Same file (after resolving symbolic links)?
fn same_file(a: &str, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

fn dynamic(arch: &str) {
    let q = qemu_builds();
    let prog = guest(arch, "dyn_hello");
    let prog_str = prog.to_string_lossy().into_owned();
    let (root, interp) = sysroot(arch);
    let interp_path = root.join(interp.trim_start_matches('/'));
    let libc_path = root.join("lib/libc.so.6");
    let dir = RunDir::new();
    let f = Failures::new(format!("dyn_hello -L {} on {arch}", root.display()));

    // -L in every run; and the ground-truth plugins in every run, cannoli's
    // too (silent there): the program is a PIE, which a plugin would move
    // (see e2e::with_ground_plugins).
    let tweak = |c: GuestCmd| c.qemu_arg("-L").qemu_arg(&root);
    let plain = run_guest(
        &dir,
        "plain",
        &tweak(GuestCmd::new(arch, q.plain_qemu(arch), &prog, &[])),
    );
    plain.assert_success();
    let log = dir.file("ground.log");
    let cmd = tweak(GuestCmd::new(arch, q.qemu(arch), &prog, &[]));
    run_guest(&dir, "ground", &with_ground_plugins(cmd, Some(&log))).assert_success();
    let ground = parse_combined(&log).unwrap_or_else(|e| panic!("{e}"));
    let (insn, execlog) = (ground.insn, ground.execlog);

    let cmd = with_ground_plugins(tweak(traced_cmd(arch, &prog, &[])), None);
    let t = run_traced(&dir, "cannoli", cmd, CLIENT, false);
    t.guest.assert_success();
    check_single_stream_run(&f, &plain, &t);
    let d = parse_dump(&t.dump).unwrap_or_else(|e| panic!("{e}"));
    check_pcs(&f, "", &d.pcs, insn.total, &execlog.pcs);

    let maps = d.maps().unwrap_or_else(|e| panic!("{e}"));
    let listing = || {
        d.other
            .iter()
            .filter(|l| l.starts_with("M "))
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    };
    for (what, path) in [
        ("the program", prog.as_path()),
        ("the interpreter", interp_path.as_path()),
        ("libc.so.6", libc_path.as_path()),
    ] {
        let exec_maps: Vec<&MapEvent> = maps
            .iter()
            .filter(|m| !m.anon && m.prot.contains('x') && same_file(&m.path, path))
            .collect();
        if exec_maps.is_empty() {
            f.fail(
                &format!("M lines: {what}"),
                format!(
                    "no executable mapping of {} (or of a link to it); M lines:\n{}",
                    path.display(),
                    listing()
                ),
            );
            continue;
        }
        if !exec_maps
            .iter()
            .all(|m| m.path.starts_with(&*root.to_string_lossy()) || m.path == prog_str)
        {
            f.fail(
                &format!("M lines: {what}"),
                format!(
                    "{:?} is not under the sysroot {}",
                    exec_maps[0].path,
                    root.display()
                ),
            );
        }
        let inside = d
            .pcs
            .iter()
            .filter(|&&pc| exec_maps.iter().any(|m| m.contains(pc)))
            .count();
        if inside == 0 {
            f.fail(
                &format!("pcs in {what}"),
                format!("no executed pc inside {:x?}", exec_maps),
            );
        }
        eprintln!(
            "e2e: dyn_hello on {arch}: {inside} instructions in {what} ({})",
            exec_maps[0].path
        );
    }
    f.finish();
}

#[test]
fn dynamic_mipsel() {
    dynamic("mipsel");
}

#[test]
fn dynamic_riscv64() {
    dynamic("riscv64");
}

// ---------------------------------------------------------------------------
// 5. a slow client
// ---------------------------------------------------------------------------

/// Sleep per chunk of the slow client, in microseconds.
const DELAY_US: u64 = 300;

fn slow_client(arch: &str) {
    let q = qemu_builds();
    let prog = guest(arch, "sortcrc");
    let dir = RunDir::new();
    let f = Failures::new(format!("slow client, sortcrc on {arch}"));

    let plain = run_bare(&dir, "plain", arch, q.plain_qemu(arch), &prog, &[]);
    plain.assert_success();

    // Two normal runs, their stdout files created in different seconds, tell
    // which access values are not reproducible (see e2e::volatile_values).
    let first = Instant::now();
    let a = run_traced(&dir, "normal1", traced_cmd(arch, &prog, &[]), CLIENT, false);
    a.guest.assert_success();
    a.client_ok().unwrap_or_else(|e| panic!("normal run: {e}"));

    let delay = DELAY_US.to_string();
    let slow_args = ["--threads", "2", "--delay-us", delay.as_str()];
    let cmd = traced_cmd(arch, &prog, &[])
        .env("CANNOLI_CHUNK_KB", "16")
        .env("CANNOLI_CHUNKS", "4");
    let s = run_traced(&dir, "slow", cmd, &slow_args, false);

    if let Some(rest) = Duration::from_millis(1100).checked_sub(first.elapsed()) {
        std::thread::sleep(rest);
    }
    let b = run_traced(&dir, "normal2", traced_cmd(arch, &prog, &[]), CLIENT, false);
    b.guest.assert_success();
    b.client_ok()
        .unwrap_or_else(|e| panic!("second normal run: {e}"));

    if !s.guest.status.success() {
        f.fail(
            "exit status",
            format!("{}\n{}", s.guest.status, tail(&s.guest.stderr_text(), 20)),
        );
    }
    f.check(
        "guest stdout",
        same_output(
            "plain QEMU",
            &plain.stdout,
            "slow client run",
            &s.guest.stdout,
        ),
    );
    if !s.guest.stderr.is_empty() {
        f.fail(
            "QEMU stderr",
            format!("QEMU complained:\n{}", tail(&s.guest.stderr_text(), 10)),
        );
    }
    f.check(
        "slow client: nothing lost, no incomplete stream",
        s.client_ok(),
    );
    let (sa, ss) = (a.summary().unwrap_or_else(|e| panic!("{e}")), s.summary());
    match ss {
        Err(e) => f.fail("slow client summary", e),
        Ok(ss) => {
            if ss.events != sa.events {
                f.fail(
                    "events",
                    format!(
                        "slow client got {} events, the normal run {}",
                        ss.events, sa.events
                    ),
                );
            }
            // 16 KiB chunks: many more than the normal run's 128 KiB ones.
            if ss.chunks < 4 * sa.chunks || ss.chunks < 100 {
                f.fail(
                    "chunks",
                    format!(
                        "{} chunks with CANNOLI_CHUNK_KB=16, {} normally",
                        ss.chunks, sa.chunks
                    ),
                );
            }
            // QEMU can run ahead of the client by the ring (4 chunks) and what
            // the client buffers (a few chunks per worker), not more: it had
            // to wait for nearly every delay.
            let min = Duration::from_micros(DELAY_US * ss.chunks / 2);
            if s.elapsed < min {
                f.fail(
                    "back-pressure",
                    format!("QEMU took {:?} for {} chunks; a client sleeping {DELAY_US} us per chunk should hold it up at least {min:?}", s.elapsed, ss.chunks),
                );
            }
            eprintln!(
                "e2e: slow client on {arch}: {} chunks, QEMU {:?} (normal run {:?})",
                ss.chunks, s.elapsed, a.elapsed
            );
        }
    }
    let (da, db) = (
        parse_dump(&a.dump).unwrap_or_else(|e| panic!("{e}")),
        parse_dump(&b.dump).unwrap_or_else(|e| panic!("{e}")),
    );
    let volatile =
        dump_volatile(&da, &db).unwrap_or_else(|e| panic!("two normal runs differ: {e}"));
    f.check(
        "dump identical to a normal run's",
        compare_dumps(&a.dump, &s.dump, &volatile),
    );
    f.finish();
}

#[test]
fn slow_client_mipsel() {
    slow_client("mipsel");
}

#[test]
fn slow_client_riscv64() {
    slow_client("riscv64");
}

// ---------------------------------------------------------------------------
// 6. a killed client
// ---------------------------------------------------------------------------

/// sortcrc's arguments for a long run: about 0.5 s under plain QEMU, ten
/// times that traced.
const LONG_ARGS: &[&str] = &["100000", "20"];

fn killed_client(arch: &str) {
    let q = qemu_builds();
    let prog = guest(arch, "sortcrc");
    let dir = RunDir::new();

    let plain = run_bare(&dir, "plain", arch, q.plain_qemu(arch), &prog, LONG_ARGS);
    plain.assert_success();

    // -v: the client logs each new stream, so we know the trace started.
    // --only Y: the dump stays small. --delay-us: a slow client holds QEMU
    // back (the ring is full), so on any machine, however fast, QEMU is
    // still running when the client is killed.
    let mut client = Client::start(
        &dir,
        "cannoli",
        &["--threads", "2", "-v", "--only", "Y", "--delay-us", "5000"],
    );
    let cmd = traced_cmd(arch, &prog, LONG_ARGS)
        .env("CANNOLI_ADDR", &client.addr)
        .env("CANNOLI_TOKEN", &client.token);
    let mut qemu = spawn_guest(&dir, "cannoli", &cmd);
    let started = Instant::now();
    while !client.stderr().contains("cannoli-dump: thread tid ") {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the trace did not start\n--- client stderr ---\n{}\n--- QEMU stderr ---\n{}",
            client.stderr(),
            read_text(&dir.file("cannoli.stderr"))
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        qemu.child_mut().try_wait().expect("try_wait").is_none(),
        "QEMU finished before the client was killed, although the slow client holds it back"
    );
    client.kill_9();
    let killed = Instant::now();

    let limit = Duration::from_secs(60);
    let status = qemu.wait_timeout(limit).unwrap_or_else(|| {
        panic!(
            "QEMU did not finish within {limit:?} after its client was killed (hangs?); killed it.\n--- QEMU stderr ---\n{}",
            tail(&read_text(&dir.file("cannoli.stderr")), 20)
        )
    });
    let after_kill = killed.elapsed();
    let stdout = std::fs::read(dir.file("cannoli.stdout")).unwrap_or_default();
    let stderr = read_text(&dir.file("cannoli.stderr"));
    let f = Failures::new(format!(
        "killed client, sortcrc {} on {arch}",
        LONG_ARGS.join(" ")
    ));
    if status.code() != plain.status.code() {
        f.fail(
            "exit status",
            format!("{status}, plain QEMU {}", plain.status),
        );
    }
    f.check(
        "guest stdout",
        same_output("plain QEMU", &plain.stdout, "cannoli", &stdout),
    );
    let lines: Vec<&str> = stderr.lines().collect();
    let clear = |l: &str| {
        l.contains("client")
            && (l.contains("stopped") || l.contains("gone") || l.contains("went away"))
    };
    if !(lines.len() == 1 && clear(lines[0])) {
        f.fail(
            "QEMU's message",
            format!(
                "want exactly one stderr line saying that the client went away; got {}:\n{stderr}",
                lines.len()
            ),
        );
    }
    eprintln!("e2e: killed client on {arch}: QEMU finished {after_kill:?} after the kill");
    f.finish();
}

#[test]
fn killed_client_mipsel() {
    killed_client("mipsel");
}

#[test]
fn killed_client_riscv64() {
    killed_client("riscv64");
}

/// SIGTERM from outside while the guest blocks in pause(2).
fn sigterm(arch: &str) {
    let prog = guest(arch, "waitsig");
    let dir = RunDir::new();
    let mut client = Client::start(&dir, "cannoli", CLIENT);
    let cmd = traced_cmd(arch, &prog, &[])
        .env("CANNOLI_ADDR", &client.addr)
        .env("CANNOLI_TOKEN", &client.token);
    let mut qemu = spawn_guest(&dir, "cannoli", &cmd);
    let started = Instant::now();
    while !read_text(&dir.file("cannoli.stdout")).contains("ready") {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the guest never said it was ready"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(qemu.id() as i32, libc::SIGTERM) }, 0);
    let status = qemu
        .wait_timeout(Duration::from_secs(120))
        .expect("QEMU did not die of SIGTERM");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGTERM),
        "QEMU's status: {status}"
    );
    let (client_status, client_err) = client.wait(Duration::from_secs(120));
    assert!(
        client_status.is_some_and(|s| s.success()),
        "cannoli-dump reported lost events or an incomplete stream:\n{client_err}"
    );
    let dump = parse_dump(&client.out).unwrap_or_else(|e| panic!("{e}"));
    assert!(!dump.pcs.is_empty(), "no instructions traced");
    let last = dump.other.last().map(String::as_str).unwrap_or("");
    assert!(
        last.starts_with(&format!("G {} ", libc::SIGTERM)),
        "the trace does not end with the SIGTERM delivery: last rare event {last:?}"
    );
}

#[test]
fn sigterm_mipsel() {
    sigterm("mipsel");
}

#[test]
fn sigterm_riscv64() {
    sigterm("riscv64");
}
