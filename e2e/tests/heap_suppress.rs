// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli heap --suppressions` and `--gen-suppressions` against
//! memcheck's own suppressions:
//!
//! * memcheck (`--gen-suppressions=all`) writes one suppression for each
//!   planted bug of the x86_64 `dyn_heapbugs`; each must leave out the
//!   same bug of the static build of every guest (a clean run: no
//!   finding, the program's own exit status, the summary counting it as
//!   suppressed), and the other bugs' suppressions must leave it in (the
//!   finding and the non-zero exit as without them);
//! * memcheck's suppressions of C++ code (`fun:_Znwm`, mangled) and of
//!   the host's stripped programs that leak (`obj:/usr/bin/stat`,
//!   `fun:(below main)`) leave those leaks out;
//! * `--gen-suppressions` writes, on every guest, a suppression that
//!   leaves its own finding out when it is read back;
//! * a file that is not one is one line, naming its line.
//!
//! Ground truth and traced runs get the same argv, an empty environment
//! and stdin `/dev/null` (the harness's `Tool`).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::OnceLock;

use e2e::memcheck;
use e2e::recording::Tool;
use e2e::{guest, timeout, RunDir};
use serde_json::Value;

/// memcheck's suppression of each planted case, once per test process.
fn memchecks() -> &'static BTreeMap<String, String> {
    static S: OnceLock<BTreeMap<String, String>> = OnceLock::new();
    S.get_or_init(|| {
        let dir = RunDir::new();
        let prog = guest("x86_64", "dyn_heapbugs");
        let mut m = BTreeMap::new();
        for c in memcheck::planted_cases() {
            let r = memcheck::run_memcheck(&dir, &c, &prog, &[&c]);
            // A joined thread's TLS block, possibly lost, is no finding
            // of this tool's (heap.rs says why); the planted one is.
            let supps: Vec<&String> = r
                .suppressions
                .iter()
                .filter(|s| !s.contains("match-leak-kinds: possible"))
                .collect();
            assert_eq!(supps.len(), 1, "{c}: memcheck wrote {supps:?}");
            m.insert(c, supps[0].clone());
        }
        assert!(m.len() >= 10, "{m:?}");
        m
    })
}

/// One `cannoli heap --json` run: exit status, findings, summary.
struct Run {
    status: i32,
    findings: Vec<Value>,
    summary: Value,
    context: String,
}

fn heap(dir: &RunDir, tag: &str, opts: &[&str], prog: &Path, case: &str) -> Run {
    let out = dir.file(&format!("{tag}.json"));
    let r = Tool::new("cannoli")
        .args(["heap", "--json", "-o"])
        .arg(&out)
        .args(opts)
        .arg(prog)
        .arg(case)
        .run(dir, tag, timeout())
        .unwrap_or_else(|e| panic!("{e}"));
    let text = fs::read_to_string(&out).unwrap_or_default();
    let mut findings = Vec::new();
    let mut summary = Value::Null;
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
        match v.get("summary") {
            Some(s) => summary = s.clone(),
            None => findings.push(v),
        }
    }
    Run {
        status: r.status.code().unwrap_or(-1),
        findings,
        context: format!(
            "`{}` exited {:?}\n{text}\n{}",
            r.cmdline,
            r.status.code(),
            e2e::tail(&r.stderr, 20)
        ),
        summary,
    }
}

/// [`heap`] with `--suppressions` of a new file `<tag>.supp` holding `text`.
fn heap_with(dir: &RunDir, tag: &str, text: &str, prog: &Path, case: &str) -> Run {
    let file = dir.file(&format!("{tag}.supp"));
    fs::write(&file, text).unwrap();
    heap(
        dir,
        tag,
        &["--suppressions", file.to_str().unwrap()],
        prog,
        case,
    )
}

fn suppressed(r: &Run) -> u64 {
    r.summary["suppressed"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

/// Each memcheck suppression leaves its own bug out of the static build
/// of `arch`, and only its own.
fn memchecks_suppressions(arch: &str) {
    let dir = RunDir::new();
    let prog = guest(arch, "heapbugs");
    let all = memchecks();
    for (case, own) in all {
        let r = heap_with(&dir, case, own, &prog, case);
        assert!(r.findings.is_empty(), "{arch} {case}: {}", r.context);
        assert_eq!(r.status, 0, "{arch} {case}: {}", r.context);
        assert!(suppressed(&r) >= 1, "{arch} {case}: {}", r.context);
        // Every other bug's suppression, in one file: none matches.
        let others: String = all
            .iter()
            .filter(|(c, _)| *c != case)
            .map(|(_, s)| format!("{s}\n"))
            .collect();
        let r = heap_with(&dir, &format!("{case}-others"), &others, &prog, case);
        assert_eq!(r.findings.len(), 1, "{arch} {case}: {}", r.context);
        assert_eq!(r.status, 99, "{arch} {case}: {}", r.context);
        assert_eq!(suppressed(&r), 0, "{arch} {case}: {}", r.context);
    }
}

/// `--gen-suppressions` on `arch`: each finding's suppression, read back,
/// leaves it out.
fn generated_suppressions(arch: &str) {
    let dir = RunDir::new();
    let prog = guest(arch, "heapbugs");
    for case in ["uaf-read", "overflow-write", "double-free", "leak"] {
        let r = heap(&dir, case, &["--gen-suppressions"], &prog, case);
        assert_eq!(r.findings.len(), 1, "{arch} {case}: {}", r.context);
        let supp = r.findings[0]["suppression"].as_str().unwrap_or_default();
        assert!(supp.starts_with("{\n"), "{arch} {case}: {}", r.context);
        let r = heap_with(&dir, &format!("{case}-again"), supp, &prog, case);
        assert!(
            r.findings.is_empty(),
            "{arch} {case}: {supp}\n{}",
            r.context
        );
        assert_eq!(r.status, 0, "{arch} {case}: {}", r.context);
    }
}

macro_rules! per_guest {
    ($m:ident = $f:ident: $($arch:ident),*) => {
        mod $m {
            $(
                #[test]
                fn $arch() {
                    super::$f(stringify!($arch));
                }
            )*
        }
    };
}

per_guest!(memcheck_files = memchecks_suppressions: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);
per_guest!(generated = generated_suppressions: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// In text, the suppression follows its finding, and the summary names
/// the suppressions used.
#[test]
fn text_shows_the_suppression_and_the_use() {
    let dir = RunDir::new();
    let prog = guest("x86_64", "heapbugs");
    let out = dir.file("gen.txt");
    let r = Tool::new("cannoli")
        .args(["heap", "--gen-suppressions", "-o"])
        .arg(&out)
        .arg(&prog)
        .arg("leak")
        .run(&dir, "gen", timeout())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status.code(), Some(99), "{}", r.stderr);
    let text = fs::read_to_string(&out).unwrap();
    let at = text.find("definitely lost (block").expect("the finding");
    let supp = text[at..].find("{\n   <insert_a_suppression_name_here>\n   Memcheck:Leak\n");
    assert!(supp.is_some(), "{text}");
    let file = dir.file("leak.supp");
    fs::write(
        &file,
        memchecks()["leak"].replace("insert_a_suppression_name_here", "my leak"),
    )
    .unwrap();
    let r = Tool::new("cannoli")
        .args(["heap", "-o"])
        .arg(&out)
        .arg("--suppressions")
        .arg(&file)
        .arg(&prog)
        .arg("leak")
        .run(&dir, "used", timeout())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status.code(), Some(0), "{}", r.stderr);
    let text = fs::read_to_string(&out).unwrap();
    assert!(text.contains("ERROR SUMMARY: 0 findings"), "{text}");
    assert!(text.contains("suppressed: 33 bytes in 1 blocks"), "{text}");
    let used = format!("used_suppression:      1 <my leak> ({}:1)", file.display());
    assert!(text.contains(&used), "{used}\n{text}");
}

/// A file that is not one of suppressions: one line, and no run.
#[test]
fn a_bad_suppressions_file_is_one_line() {
    let dir = RunDir::new();
    let prog = guest("x86_64", "heapbugs");
    let bad = dir.file("bad.supp");
    fs::write(&bad, "{\n   x\n   Memcheck:Leek\n   fun:main\n}\n").unwrap();
    let missing = dir.file("missing.supp");
    for (file, says) in [
        (&bad, ":3: unknown memcheck kind"),
        (&missing, "No such file"),
    ] {
        let r = Tool::new("cannoli")
            .args(["heap", "--suppressions"])
            .arg(file)
            .arg(&prog)
            .arg("leak")
            .run(&dir, "bad", timeout())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
        let lines: Vec<&str> = r.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{}", r.stderr);
        assert!(lines[0].contains(says), "{}", r.stderr);
        assert!(r.stdout.is_empty(), "the program ran: {:?}", r.stdout);
    }
}

/// memcheck writes a C++ frame by its mangled name (`fun:_Znwm`), where
/// the stacks show it demangled: its suppression of `heapcxx`'s leak
/// (x86_64, the host's g++) leaves the leak out all the same.
#[test]
fn memchecks_mangled_cxx_frames_match() {
    let dir = RunDir::new();
    let prog = e2e::gxx(dir.path(), "heapcxx");
    let m = memcheck::run_memcheck(&dir, "mc-leak", &prog, &["leak"]);
    let [supp] = &m.suppressions[..] else {
        panic!("memcheck on heapcxx leak: {:?}", m.suppressions);
    };
    assert!(supp.contains("fun:_Zn"), "{supp}");
    let r = heap_with(&dir, "leak", supp, &prog, "leak");
    assert!(r.findings.is_empty(), "{supp}\n{}", r.context);
    assert_eq!(r.status, 0, "{}", r.context);
    assert_eq!(r.summary["suppressed_blocks"], 1, "{}", r.context);
}

/// The host's own stripped programs that leak (memcheck reports the same
/// leaks: `heap::host_programs`): memcheck's suppressions of them name
/// their code by file (`obj:/usr/bin/stat`) and the C library's caller of
/// `main` as `(below main)` (named by libc6-dbg's symbols, which memcheck
/// reads too), and leave every leak out.
#[test]
fn memchecks_suppressions_of_stripped_host_programs() {
    let dir = RunDir::new();
    fs::write(dir.file("in.txt"), "b 2\na 1\n").unwrap();
    let runs: &[(&str, &[&str])] = &[
        ("/usr/bin/stat", &["in.txt"]),
        ("/usr/bin/tar", &["cf", "/dev/null", "in.txt"]),
        ("/usr/bin/date", &["-u", "-d", "@0"]),
        ("/usr/bin/tr", &["a-z", "A-Z"]),
    ];
    let mut bad = Vec::new();
    for (i, (p, a)) in runs.iter().enumerate() {
        let m = memcheck::run_memcheck(&dir, &format!("mc{i}"), Path::new(p), a);
        let leaks = m.findings.iter().filter(|f| f.kind == "leak").count() as u64;
        assert!(
            leaks > 0,
            "memcheck found no leak in {p}: {:?}",
            m.all_kinds
        );
        let supp = m.suppressions.join("\n");
        let out = dir.file(&format!("host{i}.json"));
        let file = dir.file(&format!("host{i}.supp"));
        fs::write(&file, &supp).unwrap();
        let r = Tool::new("cannoli")
            .args(["heap", "--json", "-o"])
            .arg(&out)
            .arg("--suppressions")
            .arg(&file)
            .arg(p)
            .args(*a)
            .run(&dir, &format!("host{i}"), timeout())
            .unwrap_or_else(|e| panic!("{e}"));
        let text = fs::read_to_string(&out).unwrap_or_default();
        let summary = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find_map(|v| v.get("summary").cloned())
            .unwrap_or(Value::Null);
        if r.status.code() != Some(0) || summary["suppressed_blocks"] != leaks {
            bad.push(format!(
                "{p}: exit {:?}, {leaks} leaks memcheck suppressed with\n{supp}\ncannoli heap:\n{text}{}",
                r.status.code(),
                e2e::tail(&r.stderr, 10)
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
}
