// SPDX-License-Identifier: GPL-2.0-or-later
//! Recordings (`cannoli/src/recording/`), end to end, under the harness's
//! identical conditions (empty environment, `-seed 1`, the host's address
//! space randomisation off, stdout to files; see `e2e::run::GuestCmd`):
//!
//! * `dump::<arch>::<program>`: `cannoli-dump --record R --split live` of a
//!   live run (a tee), then `cannoli-dump --replay R --split replay` (with
//!   2 and with 1 decoding threads): every stream's file is identical line
//!   for line and `streams.txt` holds the same lines. On mipsel, arm and
//!   x86_64: `threads` (four streams), `forkexec` (fork, execve, wait:
//!   three streams, two with the same pid and tid), `signals` (the `G`
//!   lines), and `sha256sum` of a file (Debian's busybox; the host's own
//!   dynamically linked `/usr/bin/sha256sum` as the x86_64 guest). Ground
//!   truth: each program's exit status, its stream count, and for
//!   sha256sum the hash the host's `sha256sum` prints.
//! * `tools::*`: `cannoli trace`, `coverage` (and `cannoli export drcov`),
//!   `backtrace` and `regtrace`
//!   traced live with `$CANNOLI_RECORD_TO`, then the same tool with
//!   `--replay`: the same output byte for byte, and the program's exit
//!   status from both. On busybox sha256sum (mipsel) and `signals` (arm,
//!   status 7); on the multi-threaded `threads` (x86_64) each thread's
//!   lines are the same (a live run interleaves the threads' chunks as
//!   they arrive, a replay gives them stream after stream), and the drcov
//!   file byte for byte.
//! * `tools::record_presets`: `cannoli record --hooks P` for each preset,
//!   then its tools' `--replay`; coverage from a `--hooks pc` (and `mem`)
//!   recording equals a live coverage run's; every tool given a recording
//!   of the wrong preset fails with one line naming the preset it needs.
//! * `info::*`: `cannoli info --json` of a tee recording (x86_64 threads,
//!   mipsel forkexec) and of a `cannoli record` recording (mipsel signals):
//!   its streams are the replay's streams (pid, tid, order), its events by
//!   kind are the replay dump's lines by kind, stream by stream, its total
//!   is what the live client counted (blocks included), the status is the
//!   program's where the recorder started it.
//! * `damaged::*`: a small recording (many chunks) cut at a dozen places,
//!   a byte flipped in a chunk's payload and in a chunk's header, a file of
//!   version 2, files that are not recordings: `cannoli-dump --replay`,
//!   `cannoli trace --replay` and `cannoli info` end within seconds, never
//!   panic, and either fail with one line naming the file (exit 1), or give
//!   a prefix of the whole output and say what is missing (exit 3), or (only
//!   when no frame with events was lost) exit 0 with the whole output.
//!
//! Needs `cargo build --release --workspace` (cannoli, cannoli-dump,
//! libjitter_always.so, the tools' hook libraries), the QEMU builds, the
//! guest programs and busybox (built and fetched on demand).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::procs::{run_traced, traced_cmd, Streams, Traced};
use e2e::recording::*;
use e2e::*;

/// Hang guard on one replay or `cannoli info` (they take milliseconds):
/// generous, so that a loaded machine never trips it.
const QUICK: Duration = Duration::from_secs(300);
/// Hang guard on one live tool run.
const LIVE: Duration = Duration::from_secs(600);

/// Worker threads of the `threads` guest, and its work unit.
const WORKERS: usize = 3;
const WORK: &str = "5000";
/// Exit status of tests/programs/signals.c and of `forkexec` (the child's
/// 42 seen by the parent, see tests/programs/forkexec.c).
const SIGNALS_EXIT: i32 = 7;
const FORKEXEC_EXIT: i32 = 3;

/// One program to run.
struct Prog {
    arch: &'static str,
    prog: PathBuf,
    args: Vec<String>,
    /// Its exit status.
    status: i32,
    /// Its streams (guest threads, and process images).
    streams: usize,
    /// QEMU's environment shared with the guest (a guest that execs: the
    /// new QEMU gets the guest's environment, see `GuestCmd`).
    shared_env: bool,
    /// Writes `in.txt` first, and its stdout must be the host's
    /// `sha256sum in.txt`.
    sha256sum: bool,
    what: String,
}

impl Prog {
    fn ours(arch: &'static str, name: &str) -> Prog {
        let (args, status, streams): (Vec<&str>, i32, usize) = match name {
            "threads" => (vec!["3", WORK], 0, WORKERS + 1),
            "forkexec" => (vec![], FORKEXEC_EXIT, 3),
            "signals" => (vec![], SIGNALS_EXIT, 1),
            _ => panic!("no such case {name}"),
        };
        assert_eq!(WORKERS, 3);
        Prog {
            arch,
            prog: guest(arch, name),
            args: args.iter().map(|s| s.to_string()).collect(),
            status,
            streams,
            shared_env: name == "forkexec",
            sha256sum: false,
            what: format!("{name} on {arch}"),
        }
    }

    /// `sha256sum in.txt`: Debian's busybox, or on x86_64 the host's own.
    fn sha256sum(arch: &'static str) -> Prog {
        let (prog, args, what) = if arch == "x86_64" {
            (
                PathBuf::from("/usr/bin/sha256sum"),
                vec!["in.txt"],
                "/usr/bin/sha256sum on x86_64".to_string(),
            )
        } else {
            (
                busybox(arch),
                vec!["sha256sum", "in.txt"],
                format!("busybox sha256sum on {arch}"),
            )
        };
        Prog {
            arch,
            prog,
            args: args.iter().map(|s| s.to_string()).collect(),
            status: 0,
            streams: 1,
            shared_env: false,
            sha256sum: true,
            what,
        }
    }

    fn args(&self) -> Vec<&str> {
        self.args.iter().map(String::as_str).collect()
    }

    /// Writes the input files into `dir`; returns the stdout the program
    /// must print, where known (the host's `sha256sum`, run there).
    fn prepare(&self, dir: &RunDir) -> Option<Vec<u8>> {
        if !self.sha256sum {
            return None;
        }
        fs::write(dir.file("in.txt"), words(300)).unwrap();
        let o = Command::new("sha256sum")
            .arg("in.txt")
            .current_dir(dir.path())
            .output()
            .expect("the host's sha256sum");
        assert!(o.status.success(), "host sha256sum failed");
        Some(o.stdout)
    }

    fn cmd(&self) -> GuestCmd {
        let c = traced_cmd(self.arch, &self.prog, &self.args());
        if self.shared_env {
            c.env_shared_with_guest()
        } else {
            c
        }
    }
}

/// The ground truth of a traced run of `p`: its exit status, its stdout
/// where known, and a complete trace.
fn check_traced(f: &Failures, p: &Prog, t: &Traced, want_stdout: Option<&[u8]>) {
    if t.guest.status.code() != Some(p.status) {
        f.fail(
            "exit status",
            format!(
                "{}, expected {}\n--- QEMU stderr ---\n{}",
                t.guest.status,
                p.status,
                tail(&t.guest.stderr_text(), 20)
            ),
        );
    }
    if let Some(want) = want_stdout {
        f.check(
            "guest stdout",
            same_output("the host's sha256sum", want, "traced", &t.guest.stdout),
        );
    }
    f.check("live client", t.client_ok());
}

/// `cannoli-dump --replay rec --split <tag>.split --threads N` in `dir`.
fn replay_dump(
    dir: &RunDir,
    tag: &str,
    rec: &Path,
    threads: usize,
) -> (Result<ToolRun, String>, PathBuf) {
    let split = dir.file(&format!("{tag}.split"));
    let run = Tool::new("cannoli-dump")
        .arg("--replay")
        .arg(rec)
        .arg("--split")
        .arg(&split)
        .arg("--out")
        .arg(dir.file(&format!("{tag}.dump")))
        .args(["--threads", &threads.to_string()])
        .run(dir, tag, QUICK);
    (run, split)
}

/// The lines of a split directory's `streams.txt`, sorted.
fn stream_lines(split: &Path) -> Result<Vec<String>, String> {
    let mut v = file_lines(&split.join("streams.txt"))?;
    v.sort();
    Ok(v)
}

/// Two `--split` directories hold the same streams with the same lines.
fn same_split(live: &Path, replay: &Path) -> Result<(), String> {
    let (a, b) = (stream_lines(live)?, stream_lines(replay)?);
    if a != b {
        return Err(format!(
            "streams.txt differ:\n--- live ---\n{}\n--- replay ---\n{}",
            a.join("\n"),
            b.join("\n")
        ));
    }
    for l in &a {
        let name = l.split(' ').next().unwrap();
        compare_files(&live.join(name), &replay.join(name))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// 1. cannoli-dump: the replay of a tee recording is the live run
// ---------------------------------------------------------------------------

fn dump_case(p: Prog) {
    let start = Instant::now();
    let dir = RunDir::new();
    let f = Failures::new(format!("replay equals live: {}", p.what));
    let want_stdout = p.prepare(&dir);
    let rec = dir.file("tee.cnl");
    let rec_s = rec.to_string_lossy().into_owned();
    let t = run_traced(
        &dir,
        "live",
        p.cmd(),
        &["--threads", "2", "--record", &rec_s],
        true,
    );
    check_traced(&f, &p, &t, want_stdout.as_deref());
    let live = t.split.clone().unwrap();
    match t.streams() {
        Ok(s) if s.0.len() == p.streams => {}
        Ok(s) => f.fail(
            "streams",
            format!(
                "{} streams, expected {}:\n{}",
                s.0.len(),
                p.streams,
                s.describe()
            ),
        ),
        Err(e) => f.fail("streams", e),
    }
    // Every stream executed something, and the run shows what the program
    // is about (so that two empty dumps cannot agree).
    if let Ok(s) = Streams::read(&live) {
        for st in &s.0 {
            let k = line_kinds([st.file.as_path()]).unwrap_or_default();
            if k.get(&'X').copied().unwrap_or(0) == 0 {
                f.fail("live dump", format!("{} has no X lines", st.file.display()));
            }
        }
        let files: Vec<&Path> = s.0.iter().map(|s| s.file.as_path()).collect();
        let k = line_kinds(files).unwrap_or_default();
        let want_signals = if p.what.starts_with("signals") { 4 } else { 0 };
        if k.get(&'G').copied().unwrap_or(0) < want_signals {
            f.fail(
                "live dump",
                format!("fewer than {want_signals} G lines: {k:?}"),
            );
        }
    }
    for threads in [2, 1] {
        let tag = format!("replay-t{threads}");
        let (run, split) = replay_dump(&dir, &tag, &rec, threads);
        match run {
            Ok(r) => {
                f.check(&format!("{tag}: exit status"), r.expect_code(0));
                f.check(&format!("{tag}: every stream"), same_split(&live, &split));
            }
            Err(e) => f.fail(&tag, e),
        }
    }
    eprintln!("e2e: {}: {:.1} s", p.what, start.elapsed().as_secs_f64());
    f.finish();
}

mod dump {
    use super::*;
    macro_rules! dump_cases {
        ($($arch:ident),*) => {$(
            mod $arch {
                use super::*;
                const A: &str = stringify!($arch);
                #[test]
                fn threads() {
                    dump_case(Prog::ours(A, "threads"));
                }
                #[test]
                fn forkexec() {
                    dump_case(Prog::ours(A, "forkexec"));
                }
                #[test]
                fn signals() {
                    dump_case(Prog::ours(A, "signals"));
                }
                #[test]
                fn sha256sum() {
                    dump_case(Prog::sha256sum(A));
                }
            }
        )*};
    }
    dump_cases!(mipsel, arm, x86_64);
}

// ---------------------------------------------------------------------------
// 2. The tools: live and replayed, the same output
// ---------------------------------------------------------------------------

/// The tools, the file each writes, and the recording preset each needs.
const TOOLS: [(&str, &str, &str); 4] = [
    ("trace", "trace.txt", "mem"),
    ("coverage", "cov.drcov", "pc"),
    ("backtrace", "bt.jsonl", "branches"),
    ("regtrace", "regs.txt", "regs"),
];

/// `cannoli <tool> -o <out> PROGRAM ARGS` (with `$CANNOLI_RECORD_TO` if
/// `record`).
fn live_tool(
    dir: &RunDir,
    tag: &str,
    tool: &str,
    out: &Path,
    p: &Prog,
    record: Option<&Path>,
) -> Result<ToolRun, String> {
    let mut t = Tool::new("cannoli")
        .args([tool, "-o"])
        .arg(out)
        .arg(&p.prog)
        .args(&p.args);
    if let Some(r) = record {
        t = t.env("CANNOLI_RECORD_TO", r);
    }
    t.run(dir, tag, LIVE)
}

/// `cannoli <tool> -o <out> --replay <rec> <opts>`.
fn replay_tool(
    dir: &RunDir,
    tag: &str,
    tool: &str,
    out: &Path,
    rec: &Path,
    opts: &[&str],
) -> Result<ToolRun, String> {
    Tool::new("cannoli")
        .args([tool, "-o"])
        .arg(out)
        .args(opts)
        .arg("--replay")
        .arg(rec)
        .run(dir, tag, QUICK)
}

fn tools_case(p: Prog) {
    let start = Instant::now();
    let dir = RunDir::new();
    let f = Failures::new(format!("tools live and replayed: {}", p.what));
    let want_stdout = p.prepare(&dir);
    let multi = p.streams > 1;
    for (tool, file, _) in TOOLS {
        let rec = dir.file(&format!("{tool}.cnl"));
        let (live_out, rep_out) = (
            dir.file(&format!("live-{file}")),
            dir.file(&format!("replay-{file}")),
        );
        let live = match live_tool(
            &dir,
            &format!("{tool}-live"),
            tool,
            &live_out,
            &p,
            Some(&rec),
        ) {
            Ok(r) => r,
            Err(e) => {
                f.fail(tool, e);
                continue;
            }
        };
        f.check(
            &format!("{tool} live: exit status"),
            live.expect_code(p.status),
        );
        if let Some(w) = &want_stdout {
            f.check(
                &format!("{tool} live: guest stdout"),
                same_output("the host's sha256sum", w, tool, &live.stdout),
            );
        }
        match fs::metadata(&live_out) {
            Ok(m) if m.len() > 0 => {}
            _ => f.fail(
                tool,
                format!("live run wrote nothing to {}", live_out.display()),
            ),
        }
        let rep = match replay_tool(&dir, &format!("{tool}-replay"), tool, &rep_out, &rec, &[]) {
            Ok(r) => r,
            Err(e) => {
                f.fail(tool, e);
                continue;
            }
        };
        f.check(
            &format!("{tool} replay: exit status (the program's)"),
            rep.expect_code(p.status),
        );
        if tool == "coverage" {
            // `cannoli export drcov` is the same file as a live run's.
            let exported = dir.file("export.drcov");
            let r = Tool::new("cannoli")
                .args(["export", "drcov"])
                .arg(&rec)
                .arg("-o")
                .arg(&exported)
                .run(&dir, "export-drcov", QUICK);
            match r {
                Ok(r) => {
                    f.check("export drcov: exit status", r.expect_code(p.status));
                    f.check(
                        "export drcov: the live run's drcov file",
                        compare_files(&live_out, &exported),
                    );
                }
                Err(e) => f.fail("export drcov", e),
            }
        }
        if !multi || tool == "coverage" {
            f.check(
                &format!("{tool}: replay output"),
                compare_files(&live_out, &rep_out),
            );
            continue;
        }
        // Several threads: each thread's lines in order.
        let (a, b) = (
            by_stream(&fs::read(&live_out).unwrap_or_default()),
            by_stream(&fs::read(&rep_out).unwrap_or_default()),
        );
        if a.len() < p.streams {
            f.fail(
                &format!("{tool}: live output"),
                format!(
                    "{} threads in it, expected {}: {:?}",
                    a.len(),
                    p.streams,
                    a.keys()
                ),
            );
        }
        if a.keys().ne(b.keys()) {
            f.fail(
                &format!("{tool}: replay output"),
                format!("threads differ: live {:?}, replay {:?}", a.keys(), b.keys()),
            );
            continue;
        }
        for (k, la) in &a {
            f.check(
                &format!("{tool}: replay output of {k}"),
                same_lines("live", la, "replay", &b[k]),
            );
        }
    }
    eprintln!(
        "e2e: tools on {}: {:.1} s",
        p.what,
        start.elapsed().as_secs_f64()
    );
    f.finish();
}

mod tools {
    use super::*;

    #[test]
    fn busybox_sha256sum_mipsel() {
        tools_case(Prog::sha256sum("mipsel"));
    }

    #[test]
    fn signals_arm() {
        tools_case(Prog::ours("arm", "signals"));
    }

    #[test]
    fn threads_x86_64() {
        tools_case(Prog::ours("x86_64", "threads"));
    }

    /// `cannoli record --hooks P` for each preset, then each tool on each
    /// recording: the right preset works, a wrong one is one line naming
    /// the right one; coverage of a recording equals a live run's.
    #[test]
    fn record_presets() {
        let start = Instant::now();
        let dir = RunDir::new();
        let p = Prog::sha256sum("mipsel");
        let f = Failures::new(format!("cannoli record presets: {}", p.what));
        let want_stdout = p.prepare(&dir).unwrap();
        let presets = ["pc", "mem", "branches", "regs"];
        for preset in presets {
            let rec = dir.file(&format!("{preset}.cnl"));
            let r = Tool::new("cannoli")
                .args(["record", "--hooks", preset, "-o"])
                .arg(&rec)
                .arg(&p.prog)
                .args(&p.args)
                .run(&dir, &format!("record-{preset}"), LIVE);
            match r {
                Ok(r) => {
                    f.check(
                        &format!("record --hooks {preset}: exit status"),
                        r.expect_code(0),
                    );
                    f.check(
                        &format!("record --hooks {preset}: guest stdout"),
                        same_output("the host's sha256sum", &want_stdout, "recorded", &r.stdout),
                    );
                    if !r.stderr.contains(" 0 lost") {
                        f.fail(
                            &format!("record --hooks {preset}"),
                            format!("no `0 lost` in its summary:\n{}", r.stderr),
                        );
                    }
                }
                Err(e) => f.fail(&format!("record --hooks {preset}"), e),
            }
        }
        // A MIPS delay slot starts no block: `--hooks branches` gives it no
        // register event, so a landing per branch at most (plus the few
        // blocks no branch leads to: the first, those after a syscall),
        // where a register event in every slot made twice the branches.
        match info_json(&dir, "info-branches", &dir.file("branches.cnl")) {
            Ok((_, j)) => {
                let n = |k: &str| j.get("events").get(k).as_u64().unwrap_or(0);
                let (regs, branches) = (n("regs"), n("branch"));
                if branches == 0 || regs > branches + branches / 8 {
                    f.fail(
                        "record --hooks branches: register events",
                        format!(
                            "{regs} register events for {branches} branches (delay slots hooked?)"
                        ),
                    );
                }
            }
            Err(e) => f.fail("info of the --hooks branches recording", e),
        }
        // Every tool on every recording.
        for (tool, file, needs) in TOOLS {
            for preset in presets {
                let rec = dir.file(&format!("{preset}.cnl"));
                let tag = format!("{tool}-on-{preset}");
                let out = dir.file(&format!("{preset}-{file}"));
                let ok = preset == needs || (tool == "coverage" && preset == "mem");
                let r = match replay_tool(&dir, &tag, tool, &out, &rec, &[]) {
                    Ok(r) => r,
                    Err(e) => {
                        f.fail(&tag, e);
                        continue;
                    }
                };
                if ok {
                    f.check(&tag, r.expect_code(0));
                    match fs::metadata(&out) {
                        Ok(m) if m.len() > 0 => {}
                        _ => f.fail(&tag, format!("wrote nothing to {}", out.display())),
                    }
                    continue;
                }
                let lines = r.stderr_lines();
                let want = format!("--hooks {needs}");
                let code = r.code().unwrap_or(-1);
                if code == 0
                    || lines.len() != 1
                    || !lines[0].contains(&want)
                    || !lines[0].contains(&format!("{preset}.cnl"))
                    || !r.stdout.is_empty()
                {
                    f.fail(
                        &tag,
                        format!(
                            "expected a non-zero exit and one stderr line naming the file and `{want}`; \
                             got exit {code}, stderr:\n{}",
                            r.stderr
                        ),
                    );
                }
            }
        }
        // trace --no-mem needs only the pcs.
        let out = dir.file("pc-trace-nomem.txt");
        match replay_tool(
            &dir,
            "trace-nomem-on-pc",
            "trace",
            &out,
            &dir.file("pc.cnl"),
            &["--no-mem"],
        ) {
            Ok(r) => {
                f.check("trace --no-mem on pc", r.expect_code(0));
                if fs::metadata(&out).map(|m| m.len()).unwrap_or(0) == 0 {
                    f.fail("trace --no-mem on pc", "no output");
                }
            }
            Err(e) => f.fail("trace --no-mem on pc", e),
        }
        // Coverage only depends on which pcs ran, and busybox sha256sum of
        // a fixed file under these conditions runs the same ones: a live
        // coverage run (its own hook library, no recording) has the very
        // drcov file of the recordings.
        let live = dir.file("live-cov.drcov");
        match live_tool(&dir, "coverage-live", "coverage", &live, &p, None) {
            Ok(r) => {
                f.check("coverage live", r.expect_code(0));
                for preset in ["pc", "mem"] {
                    f.check(
                        &format!("coverage of the --hooks {preset} recording vs live"),
                        compare_files(&live, &dir.file(&format!("{preset}-cov.drcov"))),
                    );
                }
            }
            Err(e) => f.fail("coverage live", e),
        }
        eprintln!(
            "e2e: record presets: {:.1} s",
            start.elapsed().as_secs_f64()
        );
        f.finish();
    }
}

// ---------------------------------------------------------------------------
// 3. cannoli info
// ---------------------------------------------------------------------------

/// Event kinds of `cannoli info` and the `cannoli-dump` line of each
/// (`block` has none).
const KINDS: [(&str, Option<char>); 11] = [
    ("exec", Some('X')),
    ("read", Some('L')),
    ("write", Some('S')),
    ("regs", Some('R')),
    ("branch", Some('B')),
    ("block", None),
    ("syscall", Some('Y')),
    ("mmap", Some('M')),
    ("munmap", Some('U')),
    ("mprotect", Some('P')),
    ("signal", Some('G')),
];

/// `cannoli info --json rec`, parsed.
fn info_json(dir: &RunDir, tag: &str, rec: &Path) -> Result<(ToolRun, Json), String> {
    let r = Tool::new("cannoli")
        .args(["info", "--json"])
        .arg(rec)
        .run(dir, tag, QUICK)?;
    let j = Json::parse(&String::from_utf8_lossy(&r.stdout))
        .map_err(|e| format!("`{}`: {e}\n--- stdout ---\n{}", r.cmdline, text(&r.stdout)))?;
    Ok((r, j))
}

/// Checks `info`'s streams and counts against the replay dump in `split`
/// (stream i of the recording is line i of its `streams.txt`): per stream
/// and in total, every kind but `block` equals the dump's lines of that
/// kind. Returns the total of all events.
fn check_info_against_dump(f: &Failures, info: &Json, split: &Path) -> u64 {
    let streams = match Streams::read(split) {
        Ok(s) => s,
        Err(e) => {
            f.fail("replay streams", e);
            return 0;
        }
    };
    let is = info.get("streams").as_array();
    if is.len() != streams.0.len() {
        f.fail(
            "stream count",
            format!(
                "info: {}, streams.txt: {}\n{}",
                is.len(),
                streams.0.len(),
                streams.describe()
            ),
        );
        return 0;
    }
    let mut total: BTreeMap<&str, u64> = BTreeMap::new();
    let mut all_lines: BTreeMap<char, u64> = BTreeMap::new();
    for (i, (s, st)) in is.iter().zip(&streams.0).enumerate() {
        let ctx = format!("stream {i} (pid {} tid {})", st.pid, st.tid);
        if s.get("stream").as_u64() != Some(i as u64)
            || s.get("pid").as_i64() != Some(st.pid as i64)
            || s.get("tid").as_i64() != Some(st.tid as i64)
        {
            f.fail(&ctx, format!("info has {:?}", s));
        }
        match s.get("ended").as_str() {
            Some("goodbye" | "exec") => {}
            other => f.fail(&ctx, format!("ended {other:?}")),
        }
        if s.get("lost_events").as_u64() != Some(0) {
            f.fail(&ctx, format!("lost_events {:?}", s.get("lost_events")));
        }
        let lines = line_kinds([st.file.as_path()]).unwrap_or_else(|e| panic!("{e}"));
        for (k, n) in &lines {
            *all_lines.entry(*k).or_default() += n;
        }
        for (kind, letter) in KINDS {
            let got = s.get("events").get(kind).as_u64();
            *total.entry(kind).or_default() += got.unwrap_or(0);
            let Some(l) = letter else { continue };
            let want = lines.get(&l).copied().unwrap_or(0);
            if got != Some(want) {
                f.fail(
                    &ctx,
                    format!("{kind}: info {got:?}, the dump's {l} lines {want}"),
                );
            }
        }
        if let Some(k) = lines
            .keys()
            .find(|k| !KINDS.iter().any(|(_, l)| *l == Some(**k)))
        {
            f.fail(&ctx, format!("the dump has lines of kind {k}"));
        }
    }
    for (kind, letter) in KINDS {
        let got = info.get("events").get(kind).as_u64();
        if got != Some(total[kind]) {
            f.fail(
                "events",
                format!("{kind}: {got:?} in all, {} over the streams", total[kind]),
            );
        }
        if let Some(l) = letter {
            let want = all_lines.get(&l).copied().unwrap_or(0);
            if got != Some(want) {
                f.fail(
                    "events",
                    format!("{kind}: info {got:?}, the dump's {l} lines {want}"),
                );
            }
        }
    }
    let sum: u64 = total.values().sum();
    if info.get("total_events").as_u64() != Some(sum) {
        f.fail(
            "total_events",
            format!("{:?}, the kinds add up to {sum}", info.get("total_events")),
        );
    }
    if all_lines.get(&'X').copied().unwrap_or(0) == 0 {
        f.fail("replay dump", "no X lines at all");
    }
    sum
}

/// A tee recording (`cannoli-dump --record`) of a multi-stream run.
fn info_tee_case(p: Prog) {
    let start = Instant::now();
    let dir = RunDir::new();
    let f = Failures::new(format!("cannoli info of a tee recording: {}", p.what));
    let rec = dir.file("tee.cnl");
    let rec_s = rec.to_string_lossy().into_owned();
    let t = run_traced(
        &dir,
        "live",
        p.cmd(),
        &["--threads", "2", "--record", &rec_s],
        true,
    );
    check_traced(&f, &p, &t, None);
    let live_lines = stream_lines(t.split.as_deref().unwrap()).unwrap_or_default();
    let (run, split) = replay_dump(&dir, "replay", &rec, 2);
    match run {
        Ok(r) => {
            f.check("replay", r.expect_code(0));
            f.check("replay", same_split(t.split.as_deref().unwrap(), &split));
        }
        Err(e) => f.fail("replay", e),
    }
    match info_json(&dir, "info", &rec) {
        Ok((r, j)) => {
            f.check("info: exit status", r.expect_code(0));
            let n = j.get("streams").as_array().len();
            if n != live_lines.len() || n != p.streams {
                f.fail(
                    "stream count",
                    format!(
                        "info {n}, the live streams.txt {}, expected {}",
                        live_lines.len(),
                        p.streams
                    ),
                );
            }
            let sum = check_info_against_dump(&f, &j, &split);
            // What the live client counted (blocks included).
            match t.summary() {
                Ok(s) if s.events == sum => {}
                Ok(s) => f.fail(
                    "total_events",
                    format!("info {sum}, the live client {}", s.events),
                ),
                Err(e) => f.fail("live summary", e),
            }
            // cannoli-dump started no program: no status; nothing lost.
            if j.get("status") != &Json::Null {
                f.fail(
                    "status",
                    format!("{:?}, expected null (not recorded)", j.get("status")),
                );
            }
            if j.get("complete") != &Json::Bool(true) || j.get("cut") != &Json::Null {
                f.fail(
                    "complete",
                    format!("complete {:?}, cut {:?}", j.get("complete"), j.get("cut")),
                );
            }
        }
        Err(e) => f.fail("info", e),
    }
    eprintln!(
        "e2e: info, {}: {:.1} s",
        p.what,
        start.elapsed().as_secs_f64()
    );
    f.finish();
}

mod info {
    use super::*;

    #[test]
    fn tee_threads_x86_64() {
        info_tee_case(Prog::ours("x86_64", "threads"));
    }

    #[test]
    fn tee_forkexec_mipsel() {
        info_tee_case(Prog::ours("mipsel", "forkexec"));
    }

    /// A `cannoli record` recording: the program's status, the command,
    /// the guest and the preset; the counts against its replay dump.
    #[test]
    fn record_signals_mipsel() {
        let start = Instant::now();
        let dir = RunDir::new();
        let p = Prog::ours("mipsel", "signals");
        let f = Failures::new(format!(
            "cannoli info of a cannoli record recording: {}",
            p.what
        ));
        let rec = dir.file("sig.cnl");
        match Tool::new("cannoli")
            .args(["record", "-o"])
            .arg(&rec)
            .arg(&p.prog)
            .run(&dir, "record", LIVE)
        {
            Ok(r) => f.check(
                "record: exit status (the program's)",
                r.expect_code(SIGNALS_EXIT),
            ),
            Err(e) => {
                f.fail("record", e);
                f.finish();
                return;
            }
        };
        let (run, split) = replay_dump(&dir, "replay", &rec, 2);
        match run {
            Ok(r) => {
                f.check("replay", r.expect_code(0));
            }
            Err(e) => f.fail("replay", e),
        }
        match info_json(&dir, "info", &rec) {
            Ok((r, j)) => {
                f.check("info: exit status", r.expect_code(0));
                check_info_against_dump(&f, &j, &split);
                if j.get("status").as_i64() != Some(SIGNALS_EXIT as i64) {
                    f.fail(
                        "status",
                        format!(
                            "{:?}, the program exited with {SIGNALS_EXIT}",
                            j.get("status")
                        ),
                    );
                }
                if j.get("complete") != &Json::Bool(true) || j.get("cut") != &Json::Null {
                    f.fail(
                        "complete",
                        format!("complete {:?}, cut {:?}", j.get("complete"), j.get("cut")),
                    );
                }
                let prog = p.prog.to_string_lossy();
                let cmd: Vec<&str> = j
                    .get("command")
                    .as_array()
                    .iter()
                    .filter_map(Json::as_str)
                    .collect();
                if cmd != [prog.as_ref()] {
                    f.fail("command", format!("{cmd:?}, expected [{prog}]"));
                }
                if j.get("guest").as_str() != Some("mipsel") {
                    f.fail("guest", format!("{:?}", j.get("guest")));
                }
                if j.get("hooks").get("preset").as_str() != Some("mem") {
                    f.fail("hooks", format!("{:?}", j.get("hooks")));
                }
                if j.get("events").get("signal").as_u64().unwrap_or(0) < 4 {
                    f.fail(
                        "events",
                        format!("fewer than 4 signals: {:?}", j.get("events")),
                    );
                }
            }
            Err(e) => f.fail("info", e),
        }
        eprintln!(
            "e2e: info of cannoli record: {:.1} s",
            start.elapsed().as_secs_f64()
        );
        f.finish();
    }
}

// ---------------------------------------------------------------------------
// 4. Damaged recordings
// ---------------------------------------------------------------------------

/// A small recording with many chunks (`CANNOLI_CHUNK_KB=16`) of busybox
/// sha256sum on mipsel, in `dir`, and its frames.
fn small_recording(dir: &RunDir) -> (PathBuf, Vec<u8>, Vec<Frame>) {
    let p = Prog::sha256sum("mipsel");
    let want = p.prepare(dir).unwrap();
    let rec = dir.file("small.cnl");
    let r = Tool::new("cannoli")
        .args(["record", "-o"])
        .arg(&rec)
        .arg(&p.prog)
        .args(&p.args)
        .env("CANNOLI_CHUNK_KB", "16")
        .run(dir, "record", LIVE)
        .unwrap_or_else(|e| panic!("{e}"));
    r.expect_code(0).unwrap_or_else(|e| panic!("{e}"));
    same_output("the host's sha256sum", &want, "recorded", &r.stdout)
        .unwrap_or_else(|e| panic!("{e}"));
    let bytes = fs::read(&rec).unwrap();
    let fr = frames(&bytes).unwrap_or_else(|e| {
        panic!(
            "{}: not the layout of cannoli/src/recording/format.rs: {e}",
            rec.display()
        )
    });
    (rec, bytes, fr)
}

/// One damaged file: its name, bytes, and whether every frame with events
/// and the exit record are still whole in it (then exit 0 with the whole
/// output is right too).
struct Damage {
    name: &'static str,
    bytes: Vec<u8>,
    whole: bool,
}

fn damages(bytes: &[u8], fr: &[Frame]) -> Vec<Damage> {
    let chunks: Vec<&Frame> = fr.iter().filter(|f| f.kind == KIND_CHUNK).collect();
    assert!(
        chunks.len() >= 4,
        "only {} chunks: make them smaller",
        chunks.len()
    );
    let mid = chunks[chunks.len() / 2];
    let exit = fr
        .iter()
        .find(|f| f.kind == KIND_EXIT)
        .expect("an exit frame");
    let first_index = fr
        .iter()
        .find(|f| f.kind == KIND_INDEX)
        .expect("an index frame");
    assert!(exit.end() <= first_index.offset, "the index comes last");
    let cut = |name, at: usize, whole| Damage {
        name,
        bytes: bytes[..at].to_vec(),
        whole,
    };
    let flip = |name, at: usize| {
        let mut b = bytes.to_vec();
        b[at] ^= 0x40;
        Damage {
            name,
            bytes: b,
            whole: false,
        }
    };
    let mut v2 = bytes.to_vec();
    v2[8..12].copy_from_slice(&2u32.to_le_bytes());
    // A recording's header, then garbage (the scan has to give up).
    let mut garbage = bytes[..HEADER_BYTES].to_vec();
    let mut x = 0x9e37_79b9u32;
    for _ in 0..8192 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        garbage.push(x as u8);
    }
    let n = bytes.len();
    vec![
        cut("empty", 0, false),
        cut("cut inside the file header", 10, false),
        cut("cut after the file header", HEADER_BYTES, false),
        cut("cut inside the info frame", fr[0].payload() + 5, false),
        cut(
            "cut inside a middle chunk's frame header",
            mid.offset + 12,
            false,
        ),
        cut(
            "cut inside a middle chunk's payload",
            mid.payload() + mid.stored_len / 2,
            false,
        ),
        cut("cut just after a middle chunk", mid.end(), false),
        cut("cut inside the exit frame", exit.payload() + 3, false),
        cut("cut just before the index", first_index.offset, true),
        cut("cut inside the index", first_index.payload() + 40, true),
        cut("cut just before the trailer", n - TRAILER_BYTES, true),
        cut("cut inside the trailer", n - 5, true),
        flip(
            "a byte flipped in a middle chunk's payload",
            mid.payload() + mid.stored_len / 2,
        ),
        flip(
            "a byte flipped in a middle chunk's frame header",
            mid.offset + 8,
        ),
        Damage {
            name: "format version 2",
            bytes: v2,
            whole: false,
        },
        Damage {
            name: "not a recording (a README)",
            bytes: fs::read(workspace_root().join("README.md")).unwrap(),
            whole: false,
        },
        Damage {
            name: "a recording's header, then garbage",
            bytes: garbage,
            whole: false,
        },
    ]
}

/// The three readers of a recording, each writing to `out`, with
/// `threads` decoding threads.
fn readers(rec: &Path, out: &Path, threads: usize) -> [(&'static str, Tool); 3] {
    let t = threads.to_string();
    [
        (
            "cannoli-dump --replay",
            Tool::new("cannoli-dump")
                .arg("--replay")
                .arg(rec)
                .arg("--out")
                .arg(out)
                .args(["--threads", &t]),
        ),
        (
            "cannoli trace --replay",
            Tool::new("cannoli")
                .args(["trace", "--threads", &t, "-o"])
                .arg(out)
                .arg("--replay")
                .arg(rec),
        ),
        (
            "cannoli info",
            Tool::new("cannoli")
                .args(["info", "--json", "--threads", &t])
                .arg(rec),
        ),
    ]
}

/// Whether `part` is the start of `whole` (a partial replay delivers the
/// chunks before the loss, in order, and nothing of those after it).
fn starts_like(part: &[String], whole: &[String]) -> Result<(), String> {
    if whole.starts_with(part) {
        return Ok(());
    }
    let k = part.iter().zip(whole).take_while(|(a, b)| a == b).count();
    Err(format!(
        "its {} lines are not the start of the whole {}: {k} agree\n{}",
        part.len(),
        whole.len(),
        same_lines("partial", part, "whole", whole)
            .err()
            .unwrap_or_default()
    ))
}

/// The output of reader `which` (`cannoli info`: its stdout).
fn reader_output(which: &str, run: &ToolRun, out: &Path) -> Vec<String> {
    if which == "cannoli info" {
        return String::from_utf8_lossy(&run.stdout)
            .lines()
            .map(str::to_string)
            .collect();
    }
    file_lines(out).unwrap_or_default()
}

mod damaged {
    use super::*;

    #[test]
    fn every_reader_fails_cleanly_or_says_what_is_missing() {
        let start = Instant::now();
        let dir = RunDir::new();
        let f = Failures::new("damaged recordings");
        let (rec, bytes, fr) = small_recording(&dir);
        // The whole outputs.
        let mut whole: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        // A damaged copy is read in about the time of the whole file, not
        // without bound: the longest whole read, on this machine under its
        // load, sets the bound (no fixed number of seconds).
        let mut whole_took = Duration::ZERO;
        for (which, tool) in readers(&rec, &dir.file("whole.out"), 1) {
            let _ = fs::remove_file(dir.file("whole.out"));
            let r = tool
                .run(&dir, "whole", QUICK)
                .unwrap_or_else(|e| panic!("{e}"));
            whole_took = whole_took.max(r.elapsed);
            r.expect_code(0).unwrap_or_else(|e| panic!("{e}"));
            let o = reader_output(which, &r, &dir.file("whole.out"));
            assert!(o.len() > 10, "{which}: {} lines of output", o.len());
            whole.insert(which, o);
        }
        let whole_info = Json::parse(&whole["cannoli info"].join("\n")).unwrap();
        let total = whole_info.get("total_events").as_u64().unwrap();
        let slow = whole_took * 10 + Duration::from_secs(10);
        for (i, d) in damages(&bytes, &fr).into_iter().enumerate() {
            let file = dir.file(&format!("damaged-{i}.cnl"));
            fs::write(&file, &d.bytes).unwrap();
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            let out = dir.file(&format!("damaged-{i}.out"));
            for (which, tool) in readers(&file, &out, 2) {
                let _ = fs::remove_file(&out);
                let ctx = format!("{} ({} bytes), {which}", d.name, d.bytes.len());
                let r = match tool.run(&dir, &format!("damaged-{i}"), slow * 3) {
                    Ok(r) => r,
                    Err(e) => {
                        f.fail(&ctx, e);
                        continue;
                    }
                };
                if r.elapsed > slow {
                    f.fail(
                        &ctx,
                        format!(
                            "took {:.1} s, the whole file {:.1} s",
                            r.elapsed.as_secs_f64(),
                            whole_took.as_secs_f64()
                        ),
                    );
                }
                if r.stderr.contains("panicked") {
                    f.fail(&ctx, format!("panicked:\n{}", tail(&r.stderr, 20)));
                }
                let code = match r.code() {
                    Ok(c) => c,
                    Err(e) => {
                        f.fail(&ctx, e);
                        continue;
                    }
                };
                let o = reader_output(which, &r, &out);
                match code {
                    1 => {
                        let lines = r.stderr_lines();
                        if lines.len() != 1 || !lines[0].contains(&name) {
                            f.fail(
                                &ctx,
                                format!(
                                    "exit 1, expected one stderr line naming {name}, got:\n{}",
                                    r.stderr
                                ),
                            );
                        }
                    }
                    3 => {
                        if !r.stderr.contains("missing") {
                            f.fail(
                                &ctx,
                                format!("exit 3 without saying what is missing:\n{}", r.stderr),
                            );
                        }
                        if which == "cannoli info" {
                            match Json::parse(&o.join("\n")) {
                                Ok(j) => {
                                    let n = j.get("total_events").as_u64().unwrap_or(u64::MAX);
                                    if j.get("complete") != &Json::Bool(false) || n > total {
                                        f.fail(
                                            &ctx,
                                            format!(
                                                "complete {:?}, {n} events of {total}",
                                                j.get("complete")
                                            ),
                                        );
                                    }
                                }
                                Err(e) => f.fail(&ctx, format!("exit 3 and its JSON: {e}")),
                            }
                        } else {
                            // A partial result: the start of the whole one.
                            if let Err(e) = starts_like(&o, &whole[which]) {
                                f.fail(&ctx, format!("exit 3, but {e}"));
                            }
                        }
                    }
                    0 if d.whole => {
                        if which == "cannoli info" {
                            let j = Json::parse(&o.join("\n")).unwrap_or(Json::Null);
                            if j.get("total_events").as_u64() != Some(total)
                                || j.get("complete") != &Json::Bool(true)
                                || j.get("status").as_i64() != Some(0)
                            {
                                f.fail(
                                    &ctx,
                                    format!(
                                        "exit 0 but not the whole recording:\n{}",
                                        o.join("\n")
                                    ),
                                );
                            }
                        } else {
                            f.check(
                                &ctx,
                                same_lines("exit 0", &o, "the whole output", &whole[which]),
                            );
                        }
                    }
                    c => f.fail(
                        &ctx,
                        format!(
                            "exit {c}; expected 1 or 3{}\n{}",
                            if d.whole { " or 0" } else { "" },
                            tail(&r.stderr, 10)
                        ),
                    ),
                }
            }
        }
        eprintln!(
            "e2e: damaged recordings: {:.1} s",
            start.elapsed().as_secs_f64()
        );
        f.finish();
    }

    /// The recording of [`small_recording`] with a byte flipped in the
    /// payload of a chunk in the middle, and cut in the middle of that
    /// payload: the same chunks are whole in both.
    fn flipped_and_cut(bytes: &[u8], fr: &[Frame]) -> [(&'static str, Vec<u8>); 2] {
        let chunks: Vec<&Frame> = fr.iter().filter(|f| f.kind == KIND_CHUNK).collect();
        let mid = chunks[chunks.len() / 2];
        let at = mid.payload() + mid.stored_len / 2;
        let mut flipped = bytes.to_vec();
        flipped[at] ^= 0x40;
        [("flipped", flipped), ("cut", bytes[..at].to_vec())]
    }

    /// `cannoli-dump --replay file --threads N --out <tag>.dump`: its
    /// summary and dump.
    fn dump_with(dir: &RunDir, tag: &str, file: &Path, threads: usize) -> (ToolRun, Vec<u8>) {
        let out = dir.file(&format!("{tag}.dump"));
        let r = Tool::new("cannoli-dump")
            .arg("--replay")
            .arg(file)
            .arg("--out")
            .arg(&out)
            .args(["--threads", &threads.to_string()])
            .run(dir, tag, QUICK)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
        (r, fs::read(&out).unwrap_or_default())
    }

    /// A damaged chunk ends its stream there, whatever the number of
    /// decoding threads: the dump is the one a single thread gives, every
    /// time.
    #[test]
    fn several_decoding_threads() {
        let dir = RunDir::new();
        let f = Failures::new("a damaged chunk, several decoding threads");
        let (_, bytes, fr) = small_recording(&dir);
        let [(_, flipped), _] = flipped_and_cut(&bytes, &fr);
        let file = dir.file("flipped.cnl");
        fs::write(&file, flipped).unwrap();
        let (r1, want) = dump_with(&dir, "t1", &file, 1);
        r1.expect_code(3).unwrap_or_else(|e| panic!("{e}"));
        let lines = |b: &[u8]| b.iter().filter(|&&c| c == b'\n').count();
        for threads in [2, 4] {
            for n in 0..5 {
                let (r, got) = dump_with(&dir, &format!("t{threads}-{n}"), &file, threads);
                f.check(
                    &format!("{threads} threads, run {n}: exit status"),
                    r.expect_code(3),
                );
                if got != want {
                    f.fail(
                        &format!("{threads} threads, run {n}"),
                        format!(
                            "{} lines, one thread gives {} (the chunks before the damaged one)",
                            lines(&got),
                            lines(&want)
                        ),
                    );
                }
            }
        }
        f.finish();
    }

    /// A replay that lost the end of its stream gives a prefix of the
    /// whole trace: nothing it did not see.
    #[test]
    fn a_partial_replay_is_a_prefix_of_the_whole() {
        let dir = RunDir::new();
        let f = Failures::new("a partial replay");
        let (rec, bytes, fr) = small_recording(&dir);
        let (_, whole) = dump_with(&dir, "whole", &rec, 1);
        for (name, b) in flipped_and_cut(&bytes, &fr) {
            let file = dir.file(&format!("{name}.cnl"));
            fs::write(&file, b).unwrap();
            let (_, got) = dump_with(&dir, name, &file, 1);
            if !whole.starts_with(&got) {
                let (a, b) = (
                    String::from_utf8_lossy(&got)
                        .lines()
                        .map(str::to_string)
                        .collect::<Vec<_>>(),
                    String::from_utf8_lossy(&whole)
                        .lines()
                        .map(str::to_string)
                        .collect::<Vec<_>>(),
                );
                f.fail(
                    name,
                    same_lines("partial", &a, "whole", &b)
                        .err()
                        .unwrap_or_default(),
                );
            }
        }
        f.finish();
    }

    /// The summary of a replay that lost chunks counts what it delivered:
    /// a chunk damaged in place and the file cut in that chunk deliver the
    /// same events, and a single stream is at most one incomplete stream.
    #[test]
    fn the_summary_counts_what_was_delivered() {
        let dir = RunDir::new();
        let f = Failures::new("summaries of damaged recordings");
        let (_, bytes, fr) = small_recording(&dir);
        let mut sums = Vec::new();
        for (name, b) in flipped_and_cut(&bytes, &fr) {
            let file = dir.file(&format!("{name}.cnl"));
            fs::write(&file, b).unwrap();
            let (r, dump) = dump_with(&dir, name, &file, 1);
            let s = Summary::parse(&r.stderr).unwrap_or_else(|e| panic!("{e}"));
            if s.incomplete > s.connections {
                f.fail(
                    name,
                    format!(
                        "{} incomplete streams of {}:\n{}",
                        s.incomplete, s.connections, r.stderr
                    ),
                );
            }
            sums.push((s.events, dump));
        }
        assert_eq!(sums[0].1, sums[1].1, "the two dumps should be the same");
        if sums[0].0 != sums[1].0 {
            f.fail(
                "events",
                format!(
                    "the same {} lines delivered, but {} events counted for the flipped chunk, {} for the cut",
                    sums[0].1.iter().filter(|&&c| c == b'\n').count(),
                    sums[0].0,
                    sums[1].0
                ),
            );
        }
        f.finish();
    }
}

// ---------------------------------------------------------------------------
// 5. Recorded strings reach the terminal escaped
// ---------------------------------------------------------------------------

/// Whether `b` holds a control character other than a line's end.
fn control_chars(b: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(b)
        .lines()
        .filter(|l| l.chars().any(char::is_control))
        .map(|l| format!("{l:?}"))
        .collect()
}

/// A program under a name with an escape sequence in it, recorded with an
/// argument holding others (a terminal title, a colour): `cannoli info` and
/// `cannoli trace --replay` print every recorded string escaped.
#[test]
fn recorded_names_reach_the_terminal_escaped() {
    let dir = RunDir::new();
    let prog = dir.file("ex\u{1b}[2Jit");
    fs::copy(guest("x86_64", "exitcode"), &prog).unwrap();
    let arg = "\u{1b}]0;title\u{7}\u{1b}[31mred";
    let rec = dir.file("esc.cnl");
    let r = Tool::new("cannoli")
        .args(["record", "--hooks", "pc", "-o"])
        .arg(&rec)
        .arg(&prog)
        .args(["0", arg])
        .run(&dir, "record", LIVE)
        .unwrap_or_else(|e| panic!("{e}"));
    r.expect_code(0).unwrap_or_else(|e| panic!("{e}"));
    let info = Tool::new("cannoli")
        .arg("info")
        .arg(&rec)
        .run(&dir, "info", QUICK)
        .unwrap_or_else(|e| panic!("{e}"));
    info.expect_code(0).unwrap_or_else(|e| panic!("{e}"));
    let out = text(&info.stdout);
    for (what, bytes) in [
        ("stdout", &info.stdout[..]),
        ("stderr", info.stderr.as_bytes()),
    ] {
        let bad = control_chars(bytes);
        assert!(bad.is_empty(), "`cannoli info` {what}: {}", bad.join("\n"));
    }
    assert!(
        out.contains(r"\u{1b}]0;title\u{7}\u{1b}[31mred"),
        "the command line, escaped:\n{out}"
    );
    assert!(
        out.contains(r"ex\u{1b}[2Jit"),
        "the program's name, escaped:\n{out}"
    );
    let trace = Tool::new("cannoli")
        .args(["trace", "--no-mem", "--limit", "20", "--replay"])
        .arg(&rec)
        .run(&dir, "trace", QUICK)
        .unwrap_or_else(|e| panic!("{e}"));
    trace.expect_code(0).unwrap_or_else(|e| panic!("{e}"));
    for (what, bytes) in [
        ("stdout", &trace.stdout[..]),
        ("stderr", trace.stderr.as_bytes()),
    ] {
        let bad = control_chars(bytes);
        assert!(
            bad.is_empty(),
            "`cannoli trace --replay` {what}: {}",
            bad.join("\n")
        );
    }
    assert!(
        trace.stderr.contains(r"ex\u{1b}[2Jit"),
        "the symbolizer names the program, escaped:\n{}",
        trace.stderr
    );
}
