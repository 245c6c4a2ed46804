// SPDX-License-Identifier: GPL-2.0-or-later
//! Syscall events (`Y` lines) against QEMU's own `-strace`, and the
//! `hook_syscall` filter.
//!
//! The guest is `tests/programs/syscalls.c`: openat of a new, an existing and
//! a missing file, writes to a file (one longer than the 4096 bytes an event
//! carries) and to stdout, lseek, reads (full, short, at EOF, failing),
//! getrandom,
//! close of a good and a bad descriptor, getpid, mmap/munmap, brk (malloc),
//! unlinkat; plus what static glibc does at start-up (brk, set_tid_address,
//! readlink(at) of /proc/self/exe, getrandom, ...).
//!
//! The hook library is `libe2e_hooks.so` (`e2e/hooks`), configured by
//! `CANNOLI_TEST_HOOKS` and `CANNOLI_TEST_SYSCALLS`. Runs use the same
//! conditions as every e2e run (see `e2e::qemu_common_args`) and the same run
//! directory (the program creates and removes a file there). `-strace` logs
//! to a file with `-D`, which also makes QEMU hold descriptor 3 in both runs
//! (the log there, the client connection under cannoli), so the guest's
//! descriptors are the same.
//!
//! Tests, per architecture:
//!
//! * `strace_*`: cannoli (`never`: no instruction hooks) and `-strace` see the
//!   same syscalls in the same order, with the same results and the same
//!   arguments wherever strace prints a number or flags it can be resolved
//!   (paths: the event's data); the buffers the events carry are the bytes
//!   written, the path, the bytes read, as many random bytes as returned;
//!   `mmap`/`munmap` come with their `M`/`U` mapping lines. Then the same with
//!   every instruction hooked (`nomem`: `Always`; `regs`: `Register`): the
//!   same syscall and mapping events (but for pids and random bytes), each
//!   right after the guest's syscall instruction and before the next
//!   instruction.
//! * `filter_*`: `hook_syscall` allowing only `write` gives exactly the
//!   unfiltered run's `write` events; `write,openat` exactly those two kinds;
//!   `none` no syscall events, and the mapping events are unaffected.

use std::collections::BTreeMap;
use std::path::Path;

use e2e::ground::*;
use e2e::*;

const PROG: &str = "syscalls";
const FILE_NAME: &[u8] = b"syscalls-test.tmp";
const MISSING_NAME: &[u8] = b"syscalls-missing.tmp";
const STDOUT: &[u8] = b"syscalls: done\n";
const BIG: usize = 5000;
/// The most a syscall event carries (`wire::MAX_SYSCALL_DATA`).
const MAX_DATA: usize = cannoli::wire::MAX_SYSCALL_DATA;

/// The syscall numbers the filter test uses, as the guest ABI defines them
/// (mips o32: 4000 + the number; riscv64: the generic table).
fn known_numbers(arch: &str) -> [(&'static str, u64); 2] {
    match arch {
        "mipsel" => [("write", 4004), ("openat", 4288)],
        "riscv64" => [("write", 64), ("openat", 56)],
        _ => panic!("no syscall numbers for {arch}"),
    }
}

fn dump(run: &Traced) -> DumpEvents {
    run.assert_success();
    parse_dump_events(&run.dump).unwrap_or_else(|e| panic!("{e}"))
}

fn check_stdout(f: &Failures, what: &str, out: &[u8]) {
    if out != STDOUT {
        f.fail(
            what,
            format!("guest stdout {:?}, expected {:?}", text(out), text(STDOUT)),
        );
    }
}

/// The event's data as text, for messages.
fn show(e: &SyscallEvent) -> String {
    format!(
        "{} ret {:?} args {:x?} total {} data {:?}",
        e.name,
        e.ret,
        e.args,
        e.total,
        text(&e.data)
    )
}

fn by_name<'a>(d: &'a DumpEvents, name: &str) -> Vec<&'a SyscallEvent> {
    d.syscalls.iter().filter(|e| e.name == name).collect()
}

/// The buffers of the syscalls `syscalls.c` makes (see its source).
fn check_data(f: &Failures, arch: &str, prog: &Path, d: &DumpEvents, stdout: &[u8]) {
    let big: Vec<u8> = (0..BIG).map(|i| b'a' + (i % 26) as u8).collect();

    // openat: the path, whatever the result. The first free descriptor is
    // the guest's (QEMU holds 3 in these runs); closed and reused.
    let opens = by_name(d, "openat");
    let program_opens: Vec<_> = opens
        .iter()
        .filter(|e| e.data.starts_with(b"syscalls-"))
        .collect();
    let fd = program_opens.first().and_then(|e| e.ret).unwrap_or(-1);
    if fd < 3 {
        f.fail("data: openat", format!("the first openat returned {fd}"));
    }
    let want: [(&[u8], i64); 4] = [
        (FILE_NAME, fd),
        (FILE_NAME, fd),
        (MISSING_NAME, -2),
        (FILE_NAME, fd),
    ];
    if program_opens.len() != want.len() {
        f.fail(
            "data: openat",
            format!("program's openat events: {program_opens:?}"),
        );
    } else {
        for (e, (path, ret)) in program_opens.iter().zip(want) {
            if e.data != path || e.total != path.len() as u64 || e.ret != Some(ret) {
                f.fail(
                    "data: openat",
                    format!(
                        "{}; expected path {:?} and result {ret}",
                        show(e),
                        text(path)
                    ),
                );
            }
        }
    }
    let fd = fd as u64;

    // write: the bytes written, `total` the length asked for.
    let writes = by_name(d, "write");
    let want: [(&[u8], usize, u64); 3] = [
        (b"hello, file\n", 12, fd),
        (&big[..MAX_DATA], BIG, fd),
        (STDOUT, STDOUT.len(), 1),
    ];
    if writes.len() != want.len() {
        f.fail(
            "data: write",
            format!(
                "{} write events, expected {}: {writes:?}",
                writes.len(),
                want.len()
            ),
        );
    } else {
        for (i, (e, (data, total, fd))) in writes.iter().zip(want).enumerate() {
            let ok = e.data == data
                && e.total == total as u64
                && e.args[2] == total as u64
                && e.ret == Some(total as i64)
                && e.args[0] == fd;
            if !ok {
                f.fail(
                    "data: write",
                    format!(
                        "write #{i}: {}; expected {} bytes written, {} of them carried: {:?}",
                        show(e),
                        total,
                        data.len(),
                        text(&data[..data.len().min(60)])
                    ),
                );
            }
        }
        if writes[2].data != stdout {
            f.fail(
                "data: write",
                format!(
                    "the write to stdout carries {:?}, the guest's stdout is {:?}",
                    text(&writes[2].data),
                    text(stdout)
                ),
            );
        }
    }

    for e in by_name(d, "unlinkat") {
        if e.data != FILE_NAME || e.total != FILE_NAME.len() as u64 {
            f.fail(
                "data: unlinkat",
                format!("{}; expected path {:?}", show(e), text(FILE_NAME)),
            );
        }
    }
    if by_name(d, "unlinkat").len() != 1 {
        f.fail("data: unlinkat", "expected one unlinkat event");
    }

    // read: what was read; nothing at end of file or on failure.
    let reads = by_name(d, "read");
    let want: [(&[u8], i64, Option<u64>); 5] = [
        (b"hello, file\n", 12, Some(fd)),
        (b"", 0, Some(fd)),
        (b"hello", 5, Some(fd)),
        (b"", -9, Some(77)),  // EBADF
        (b"", -14, Some(fd)), // EFAULT
    ];
    if reads.len() != want.len() {
        f.fail(
            "data: read",
            format!(
                "{} read events, expected {}: {reads:?}",
                reads.len(),
                want.len()
            ),
        );
    } else {
        for (e, (data, ret, rfd)) in reads.iter().zip(want) {
            if e.data != data
                || e.total != data.len() as u64
                || e.ret != Some(ret)
                || rfd.is_some_and(|rfd| e.args[0] != rfd)
            {
                f.fail(
                    "data: read",
                    format!(
                        "{}; expected result {ret} and data {:?}",
                        show(e),
                        text(data)
                    ),
                );
            }
        }
    }

    // getrandom: as many bytes as returned (glibc's start-up asks for some
    // too); the program asks for 16.
    let rnd = by_name(d, "getrandom");
    for e in &rnd {
        let n = e.ret.unwrap_or(-1);
        if n <= 0 || e.data.len() as i64 != n || e.total as i64 != n || e.args[1] as i64 != n {
            f.fail(
                "data: getrandom",
                format!(
                    "{}: expected as many bytes as returned (= the length asked for)",
                    show(e)
                ),
            );
        }
    }
    if !rnd
        .iter()
        .any(|e| e.args[1] == 16 && e.ret == Some(16) && e.data.len() == 16)
    {
        f.fail(
            "data: getrandom",
            format!("no getrandom of 16 bytes among {rnd:?}"),
        );
    }

    // readlink(at) of /proc/self/exe (glibc's start-up): QEMU answers with the
    // guest program's path.
    let exe = prog.to_str().unwrap().as_bytes();
    let links: Vec<_> = d
        .syscalls
        .iter()
        .filter(|e| e.name == "readlink" || e.name == "readlinkat")
        .collect();
    if links.len() != 1 || links[0].data != exe || links[0].ret != Some(exe.len() as i64) {
        f.fail(
            "data: readlink",
            format!(
                "expected one readlink(at) event carrying {:?}: {links:?}",
                text(exe)
            ),
        );
    }

    // No data where a syscall has no buffer.
    for e in &d.syscalls {
        let has_buf = matches!(
            e.name.as_str(),
            "write" | "read" | "getrandom" | "readlink" | "readlinkat"
        ) || path_arg(&e.name).is_some();
        if !has_buf && (e.total != 0 || !e.data.is_empty()) {
            f.fail("data: none", format!("{} carries data", show(e)));
        }
    }

    // exit_group: did not return, last event.
    match d.syscalls.last() {
        Some(e) if e.name == "exit_group" && e.ret.is_none() && e.args[0] == 0 => {}
        other => f.fail("data: exit_group", format!("last event {other:?}")),
    }

    // mmap/munmap of 3 pages come with their mapping lines, before the event.
    let mmap_name = if arch == "mipsel" { "mmap2" } else { "mmap" };
    let len = 3 * 4096u64;
    let maps_before = |i: usize| -> Vec<&str> {
        d.maps
            .iter()
            .filter(|(n, _)| *n == i)
            .map(|(_, l)| l.as_str())
            .collect()
    };
    let mut seen = 0;
    for (i, e) in d.syscalls.iter().enumerate() {
        if e.name == mmap_name && e.args[1] == len {
            seen += 1;
            let base = e.ret.unwrap_or(-1) as u64;
            let want = format!("M {base:x} {len:x} rw- anon 0 -");
            if maps_before(i) != [want.as_str()] {
                f.fail(
                    "data: mmap",
                    format!(
                        "{}: mapping lines before it {:?}, expected [{want:?}]",
                        show(e),
                        maps_before(i)
                    ),
                );
            }
        }
        if e.name == "munmap" && e.args[1] == len {
            seen += 1;
            let want = format!("U {:x} {len:x}", e.args[0]);
            if maps_before(i) != [want.as_str()] || e.ret != Some(0) {
                f.fail(
                    "data: munmap",
                    format!(
                        "{}: mapping lines before it {:?}, expected [{want:?}]",
                        show(e),
                        maps_before(i)
                    ),
                );
            }
        }
    }
    if seen != 2 {
        f.fail(
            "data: mmap",
            format!("expected one {mmap_name} and one munmap of {len} bytes"),
        );
    }
}

/// Two runs' events, equal but for the pid-valued results and the random
/// bytes.
fn same_events(a: &DumpEvents, a_pid: u32, b: &DumpEvents, b_pid: u32) -> Result<(), String> {
    compare_seq_by(
        "syscall events",
        "never run",
        &a.syscalls,
        "hooked run",
        &b.syscalls,
        |_, x, y| {
            if ID_SYSCALLS.contains(&x.name.as_str()) {
                x.name == y.name
                    && x.args == y.args
                    && x.ret == Some(a_pid as i64)
                    && y.ret == Some(b_pid as i64)
            } else if x.name == "getrandom" {
                SyscallEvent {
                    data: vec![],
                    ..x.clone()
                } == SyscallEvent {
                    data: vec![],
                    ..y.clone()
                } && x.data.len() == y.data.len()
            } else {
                x == y
            }
        },
        |_, e| show(e),
    )
}

fn strace_test(arch: &str) {
    let prog = guest(arch, PROG);
    let bits = arch_bits(arch);
    let dir = RunDir::new();
    let f = Failures::new(format!("{PROG} on {arch}: syscall events vs -strace"));
    eprintln!("e2e: syscalls on {arch}: run dir {}", dir.path().display());

    let never = run_traced(&dir, "never", arch, &prog, &[], &TraceOpts::hooks("never"));
    let nd = dump(&never);
    check_stdout(&f, "stdout (cannoli, never)", &never.guest.stdout);
    if !nd.pcs.is_empty()
        || nd
            .kinds
            .iter()
            .any(|k| matches!(k, b'L' | b'S' | b'R' | b'B'))
    {
        f.fail(
            "never",
            "instruction or memory events with every hook Never",
        );
    }

    let (st_run, st_log, st_pid) = run_strace(&dir, "strace", arch, &prog, &[]);
    st_run.assert_success();
    check_stdout(&f, "stdout (-strace)", &st_run.stdout);
    let strace = parse_strace(&st_log).unwrap_or_else(|e| panic!("{e}"));

    match compare_strace(arch, bits, &strace, st_pid, &nd.syscalls, never.pid) {
        Ok(st) => {
            eprintln!("e2e: syscalls on {arch}: {st:?}");
            // The comparison must have compared something of each kind.
            if st.calls < 30
                || st.results + 1 != st.calls
                || st.numeric_args < 50
                || st.symbolic_args < 10
                || st.paths < 4
            {
                f.fail("strace", format!("too little was compared: {st:?}"));
            }
        }
        Err(e) => f.fail("strace", e),
    }
    check_data(&f, arch, &prog, &nd, &never.guest.stdout);

    // Every instruction hooked (Always, and Register, which calls a helper
    // before each instruction): the same events, each right after the
    // syscall instruction.
    let elf = Elf::open(&prog).unwrap_or_else(|e| panic!("{e}"));
    let maps = |d: &DumpEvents| d.maps.iter().map(|(_, l)| l.clone()).collect::<Vec<_>>();
    for mode in ["nomem", "regs"] {
        let run = run_traced(&dir, mode, arch, &prog, &[], &TraceOpts::hooks(mode));
        let md = dump(&run);
        check_stdout(&f, &format!("stdout (cannoli, {mode})"), &run.guest.stdout);
        let n_lines = if mode == "regs" {
            md.regs.len()
        } else {
            md.pcs.len()
        };
        if n_lines != md.insn_pcs.len() || n_lines < 1000 {
            f.fail(
                mode,
                format!(
                    "{n_lines} instruction lines of the hooked kind, {} in all",
                    md.insn_pcs.len()
                ),
            );
        }
        f.check(
            &format!("same events with every instruction hooked ({mode})"),
            same_events(&nd, never.pid, &md, run.pid),
        );
        f.check(
            &format!("same mapping events with every instruction hooked ({mode})"),
            compare_seq(
                "M/U/P lines",
                "never run",
                &maps(&nd),
                mode,
                &maps(&md),
                |l| l.clone(),
            ),
        );
        for (i, e) in md.syscalls.iter().enumerate() {
            let what = format!("order ({mode})");
            let (after, before) = (md.syscall_after[i], md.syscall_before[i]);
            let Some(&pc) = md.insn_pcs.get(after) else {
                f.fail(
                    &what,
                    format!("syscall event #{i} ({}) before any instruction", e.name),
                );
                continue;
            };
            let word = elf.word(pc);
            if !word.is_some_and(|w| is_syscall_insn(arch, w)) {
                f.fail(
                    &what,
                    format!(
                        "syscall event #{i} ({}) follows the instruction at {pc:#x} (word {word:x?}), \
                         not a syscall instruction",
                        e.name
                    ),
                );
            }
            match (e.ret, md.insn_pcs.get(before)) {
                (None, None) => {}
                (Some(_), Some(&next)) if next == pc + 4 && before == after + 1 => {}
                (_, next) => f.fail(
                    &what,
                    format!(
                        "syscall event #{i} ({}, result {:?}) after the syscall instruction at \
                         {pc:#x}: the next instruction is {next:x?}, expected {:#x} (or none for a \
                         syscall that does not return)",
                        e.name,
                        e.ret,
                        pc + 4
                    ),
                ),
            }
        }
    }
    f.finish();
}

fn filter_test(arch: &str) {
    let prog = guest(arch, PROG);
    let dir = RunDir::new();
    let f = Failures::new(format!("{PROG} on {arch}: hook_syscall filter"));
    eprintln!(
        "e2e: syscall filter on {arch}: run dir {}",
        dir.path().display()
    );

    let all = run_traced(&dir, "all", arch, &prog, &[], &TraceOpts::hooks("never"));
    let ad = dump(&all);
    // The numbers of the names, from the unfiltered trace.
    let mut nums: BTreeMap<&str, u64> = BTreeMap::new();
    for e in &ad.syscalls {
        if let Some(&n) = nums.get(e.name.as_str()) {
            if n != e.num {
                f.fail(
                    "numbers",
                    format!("{} has numbers {n} and {}", e.name, e.num),
                );
            }
        }
        nums.insert(&e.name, e.num);
    }
    for (name, n) in known_numbers(arch) {
        if nums.get(name) != Some(&n) {
            f.fail(
                "numbers",
                format!(
                    "{name} is {:?} in the trace, {n} in the {arch} ABI",
                    nums.get(name)
                ),
            );
        }
    }
    let maps = |d: &DumpEvents| d.maps.iter().map(|(_, l)| l.clone()).collect::<Vec<_>>();

    let cases: [(&str, &[&str]); 3] = [
        ("write", &["write"]),
        ("write,openat", &["write", "openat"]),
        ("none", &[]),
    ];
    for (tag, names) in cases {
        let spec = if names.is_empty() {
            "none".to_string()
        } else {
            names
                .iter()
                .map(|n| nums.get(n).copied().unwrap_or(u64::MAX).to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let run = run_traced(
            &dir,
            &format!("only-{}", tag.replace(',', "-")),
            arch,
            &prog,
            &[],
            &TraceOpts::hooks("never").env("CANNOLI_TEST_SYSCALLS", &spec),
        );
        let d = dump(&run);
        check_stdout(&f, &format!("stdout ({tag})"), &run.guest.stdout);
        let want: Vec<SyscallEvent> = ad
            .syscalls
            .iter()
            .filter(|e| names.contains(&e.name.as_str()))
            .cloned()
            .collect();
        let expected_count = match tag {
            "write" => 3,
            "write,openat" => 7,
            _ => 0,
        };
        if want.len() != expected_count {
            f.fail(
                &format!("filter {tag}"),
                format!(
                    "the unfiltered run has {} such events, the program makes {expected_count}",
                    want.len()
                ),
            );
        }
        f.check(
            &format!("filter {tag} (CANNOLI_TEST_SYSCALLS={spec})"),
            compare_seq(
                "syscall events",
                "unfiltered, selected",
                &want,
                "filtered run",
                &d.syscalls,
                show,
            ),
        );
        f.check(
            &format!("filter {tag}: mapping events unaffected"),
            compare_seq(
                "M/U/P lines",
                "unfiltered",
                &maps(&ad),
                "filtered",
                &maps(&d),
                |l| l.clone(),
            ),
        );
    }
    f.finish();
}

#[test]
fn strace_mipsel() {
    strace_test("mipsel");
}

#[test]
fn strace_riscv64() {
    strace_test("riscv64");
}

#[test]
fn filter_mipsel() {
    filter_test("mipsel");
}

#[test]
fn filter_riscv64() {
    filter_test("riscv64");
}
