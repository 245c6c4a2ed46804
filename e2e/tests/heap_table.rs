// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli heap --parquet DIR`'s allocations table, read back with DuckDB
//! (e2e/src/parquet.rs), against Valgrind memcheck (e2e/src/memcheck.rs):
//!
//! * memcheck's "total heap usage: N allocs, M frees, B bytes allocated"
//!   and "in use at exit" of the x86_64 `dyn_heapclean nothreads` and of
//!   each planted case of `dyn_heapbugs` are the table's rows, frees and
//!   bytes (memcheck counts a double or invalid free as a free too: those
//!   are the run's findings, no block's row), and its definitely lost
//!   blocks are the rows marked `leaked`;
//! * the static `heapclean nothreads` has the same rows from `main` down;
//!   the rest are static glibc's start-up allocations;
//! * "who allocated what was freed here": a query naming a free's site
//!   gives the allocating function and site memcheck names for the freed
//!   block of each use after free and double free;
//! * a `--hooks regs` recording replayed gives the live run's table.
//!
//! memcheck replaces `malloc` only in a dynamically linked program, so its
//! runs are of the `dyn_*` builds. Ground truth and traced runs get the
//! same program file (but for the static one), argv, an empty
//! environment, stdin `/dev/null`, stdout to a file and the run directory
//! as cwd.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use e2e::memcheck::{self, base_function, innermost_program_function};
use e2e::parquet::duckdb;
use e2e::recording::Tool;
use e2e::{guest, timeout, RunDir};
use serde_json::Value;

/// One `cannoli heap --json --parquet` run: its summary object.
struct TableRun {
    /// `DIR`, holding `allocations/`.
    out: std::path::PathBuf,
    summary: Value,
    context: String,
}

/// `cannoli heap --json -o <tag>.json --parquet <tag>.pq OPTS ARGS` in
/// `dir`.
fn heap_table(dir: &RunDir, tag: &str, opts: &[&std::ffi::OsStr]) -> TableRun {
    let json = dir.file(&format!("{tag}.json"));
    let out = dir.file(&format!("{tag}.pq"));
    let r = Tool::new("cannoli")
        .args(["heap", "--json", "-o"])
        .arg(&json)
        .arg("--parquet")
        .arg(&out)
        .args(opts)
        .run(dir, tag, timeout())
        .unwrap_or_else(|e| panic!("{e}"));
    let text = fs::read_to_string(&json).unwrap_or_default();
    let context = format!("{}\nstderr:\n{}\njson:\n{text}", r.cmdline, r.stderr);
    let summary = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v.get("summary").cloned())
        .unwrap_or_else(|| panic!("no summary: {context}"));
    assert!(
        out.join("allocations/part-00000.parquet").is_file(),
        "no table: {context}"
    );
    TableRun {
        out,
        summary,
        context,
    }
}

fn live(dir: &RunDir, tag: &str, prog: &Path, args: &[&str]) -> TableRun {
    let mut a: Vec<&std::ffi::OsStr> = vec![prog.as_os_str()];
    a.extend(args.iter().map(std::ffi::OsStr::new));
    heap_table(dir, tag, &a)
}

/// One query's rows on `out` (`{t}` is the table).
fn query(out: &Path, q: &str) -> Vec<Vec<String>> {
    let q = q.replace("{t}", "read_parquet('{dir}/allocations/*.parquet')");
    duckdb(out, &[q])
        .unwrap_or_else(|e| panic!("{e}"))
        .remove(0)
}

/// One row of numbers.
fn numbers(out: &Path, q: &str) -> Vec<u64> {
    let rows = query(out, q);
    rows[0]
        .iter()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{q}: {v:?}")))
        .collect()
}

/// Rows, frees, bytes, then bytes and blocks never freed, of the rows
/// `filter` keeps.
fn totals(out: &Path, filter: &str) -> Vec<u64> {
    numbers(
        out,
        &format!(
            "SELECT count(*), count(free_seq), coalesce(sum(size), 0), \
             coalesce(sum(size) FILTER (WHERE free_seq IS NULL), 0), \
             count(*) FILTER (WHERE free_seq IS NULL) FROM {{t}} WHERE {filter}"
        ),
    )
}

/// memcheck's (allocs, frees, bytes, bytes in use at exit, blocks in use).
fn memcheck_usage(dir: &RunDir, tag: &str, prog: &Path, args: &[&str]) -> Vec<u64> {
    let (a, f, b) = memcheck::heap_usage(dir, tag, prog, args);
    let log = fs::read_to_string(dir.file(&format!("{tag}.log"))).unwrap_or_default();
    let (ib, in_blocks) =
        memcheck::parse_in_use(&log).unwrap_or_else(|| panic!("no in use line:\n{log}"));
    vec![a, f, b, ib, in_blocks]
}

/// [`memcheck_usage`] of each process of the run (memcheck follows forks;
/// every process writes its lines, `==PID==` first, to the one log).
fn memcheck_usage_by_pid(dir: &RunDir, tag: &str, prog: &Path, args: &[&str]) -> Vec<Vec<u64>> {
    memcheck::heap_usage(dir, tag, prog, args);
    let log = fs::read_to_string(dir.file(&format!("{tag}.log"))).unwrap_or_default();
    let mut by_pid: BTreeMap<u64, String> = BTreeMap::new();
    for line in log.lines() {
        let pid = line
            .strip_prefix("==")
            .and_then(|r| r.split_once("=="))
            .and_then(|(p, _)| p.parse().ok());
        if let Some(pid) = pid {
            let text = by_pid.entry(pid).or_default();
            text.push_str(line);
            text.push('\n');
        }
    }
    by_pid
        .values()
        .map(|text| {
            let (a, f, b) = memcheck::parse_heap_usage(text)
                .unwrap_or_else(|| panic!("no heap usage line:\n{log}"));
            let (ib, n) =
                memcheck::parse_in_use(text).unwrap_or_else(|| panic!("no in use line:\n{log}"));
            vec![a, f, b, ib, n]
        })
        .collect()
}

/// The run's double and invalid frees, which memcheck counts as frees.
fn bad_frees(s: &Value) -> u64 {
    ["double-free", "invalid-free"]
        .iter()
        .map(|k| s["findings"][k].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn clean_program_rows_are_memchecks_heap_usage() {
    let dir = RunDir::new();
    let prog = guest("x86_64", "dyn_heapclean");
    let want = memcheck_usage(&dir, "usage", &prog, &["nothreads"]);
    let r = live(&dir, "clean", &prog, &["nothreads"]);
    assert_eq!(totals(&r.out, "true"), want, "{}", r.context);
    // The summary counts what the table holds.
    let s = &r.summary;
    assert_eq!(
        [&s["allocations"], &s["frees"], &s["bytes_allocated"]].map(|v| v.as_u64()),
        [Some(want[0]), Some(want[1]), Some(want[2])],
        "{}",
        r.context
    );
    // What is in use at exit (stdio's buffer) is reachable, not lost.
    assert_eq!(
        numbers(&r.out, "SELECT count(*) FROM {t} WHERE leaked"),
        [0],
        "{}",
        r.context
    );
}

/// The static build allocates what the dynamic one does from `main` down.
/// Before `main`, static glibc's start-up (`_dl_non_dynamic_init`, doing
/// what the dynamic loader does for a dynamic program, with its own
/// allocator that memcheck does not see) allocates a few blocks it keeps:
/// those are the only other rows.
#[test]
fn static_program_rows_from_main_are_memchecks() {
    let dir = RunDir::new();
    let want = memcheck_usage(
        &dir,
        "usage",
        &guest("x86_64", "dyn_heapclean"),
        &["nothreads"],
    );
    let r = live(&dir, "clean", &guest("x86_64", "heapclean"), &["nothreads"]);
    let from_main = has_frame("main");
    assert_eq!(totals(&r.out, &from_main), want, "{}", r.context);
    let startup = has_frame("_dl_non_dynamic_init");
    let rest = numbers(
        &r.out,
        &format!(
            "SELECT count(*), count(*) FILTER (WHERE {startup} AND free_seq IS NULL \
             AND NOT leaked) FROM {{t}} WHERE NOT ({from_main})"
        ),
    );
    assert!(rest[0] > 0 && rest[0] == rest[1], "{rest:?}\n{}", r.context);
}

/// SQL: whether the allocation stack has a frame in `function`.
fn has_frame(function: &str) -> String {
    format!("regexp_matches(' ' || array_to_string(alloc_stack, ' '), ' {function}\\+')")
}

/// The planted cases, as the program lists them (run with no argument).
fn cases() -> Vec<String> {
    memcheck::planted_cases()
}

#[test]
fn planted_cases_rows_are_memchecks_heap_usage() {
    let dir = RunDir::new();
    let prog = guest("x86_64", "dyn_heapbugs");
    let cases = cases();
    assert!(cases.len() >= 10, "{cases:?}");
    for c in &cases {
        // Per process: a forked child's table holds its copy of its
        // parent's blocks, as memcheck's child counts them.
        let mut want = memcheck_usage_by_pid(&dir, &format!("usage-{c}"), &prog, &[c]);
        let mc = memcheck::run_memcheck(&dir, &format!("mc-{c}"), &prog, &[c]);
        let r = live(&dir, c, &prog, &[c]);
        if let [only] = &mut want[..] {
            only[1] -= bad_frees(&r.summary);
        }
        let mut got: Vec<Vec<u64>> = query(&r.out, "SELECT DISTINCT pid FROM {t}")
            .iter()
            .map(|p| totals(&r.out, &format!("pid = {}", p[0])))
            .collect();
        // Two runs' pids differ: the processes' totals as a set.
        got.sort();
        want.sort();
        assert_eq!(got, want, "{c}\n{}", r.context);
        // The blocks memcheck says are definitely lost: (their allocating
        // program function, size).
        let lost: BTreeSet<(Option<String>, u64)> = mc
            .findings
            .iter()
            .filter(|f| f.kind == "leak")
            .map(|f| (f.function.clone(), f.block_size.unwrap_or(0)))
            .collect();
        let rows: BTreeSet<(Option<String>, u64)> = query(
            &r.out,
            "SELECT array_to_string(alloc_stack, ' '), size FROM {t} WHERE leaked",
        )
        .into_iter()
        .map(|row| {
            let f = innermost_program_function(row[0].split(' '));
            (f, row[1].parse().unwrap())
        })
        .collect();
        assert_eq!(rows, lost, "{c}\n{}", r.context);
    }
}

/// "Who allocated what was freed here": for each freed block memcheck
/// reports (use after free, double free), the query naming its free's
/// function and site gives memcheck's allocating function and site, and
/// only those.
#[test]
fn who_allocated_what_was_freed_here() {
    let dir = RunDir::new();
    let prog = guest("x86_64", "dyn_heapbugs");
    let mut checked = 0;
    for c in ["uaf-read", "uaf-write", "double-free", "realloc-move"] {
        let m = memcheck::run_memcheck(&dir, c, &prog, &[c]);
        let doc = fs::read_to_string(&m.xml[0]).unwrap();
        let blocks = memcheck::freed_block_stacks(&doc).unwrap();
        assert!(!blocks.is_empty(), "{c}: memcheck names no freed block");
        let r = live(&dir, c, &prog, &[c]);
        for (free, alloc) in blocks {
            let at = |s: &[String]| innermost_program_function(s.iter().map(|f| f.as_str()));
            let (free_fn, free_site) = (free[0].clone(), at(&free).expect("a program frame"));
            let want = (alloc[0].clone(), at(&alloc));
            let got: BTreeSet<(String, Option<String>)> = query(
                &r.out,
                &format!(
                    "SELECT DISTINCT function, alloc_site FROM {{t}} \
                     WHERE free_function = '{free_fn}' \
                     AND regexp_matches(free_site, '^{free_site}[.+]')"
                ),
            )
            .into_iter()
            .map(|row| (row[0].clone(), Some(base_function(&row[1]).to_string())))
            .collect();
            assert_eq!(
                got,
                BTreeSet::from([want]),
                "{c}: freed by {free_fn} in {free_site}\n{}",
                r.context
            );
            checked += 1;
        }
    }
    assert!(checked >= 4);
}

/// A `--hooks regs` recording of heapclean replayed with `--parquet`: the
/// live run's rows (but the addresses, which differ from run to run).
#[test]
fn replay_gives_the_live_table() {
    let dir = RunDir::new();
    let prog = guest("x86_64", "heapclean");
    let l = live(&dir, "live", &prog, &["nothreads"]);
    let rec = dir.file("clean.cnl");
    Tool::new("cannoli")
        .args(["record", "--hooks", "regs", "-o"])
        .arg(&rec)
        .arg(&prog)
        .arg("nothreads")
        .run(&dir, "rec", timeout())
        .unwrap_or_else(|e| panic!("{e}"))
        .expect_code(0)
        .unwrap_or_else(|e| panic!("{e}"));
    let r = heap_table(&dir, "replay", &["--replay".as_ref(), rec.as_os_str()]);
    // Not the addresses: the mmap'd blocks' differ from run to run.
    let q = "SELECT size, function, alloc_seq, free_seq, free_function, leaked \
             FROM {t} ORDER BY alloc_seq";
    let want = query(&l.out, q);
    assert!(want.len() > 200, "{}", l.context);
    assert_eq!(query(&r.out, q), want, "{}", r.context);
}
