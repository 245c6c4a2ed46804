// SPDX-License-Identifier: GPL-2.0-or-later
//! End-to-end tests of `cannoli probe` (the `probe` example, the same code)
//! on all nine guests, against ground truth it did not produce:
//!
//! * the program's own word: `tests/programs/probe.c` prints every call's
//!   arguments and result, so the entries, returns, depths and threads of
//!   the probes must say the same (recursion, a call through a pointer, a
//!   tail call, three threads calling one function, six arguments: on
//!   i386 all of them and on o32 and ARM the fifth and sixth come from the
//!   stack);
//! * QEMU's `contrib/plugins/libexeclog.so,reg=*`: the registers at the
//!   same pcs (the guests whose registers QEMU shows plugins: not MIPS);
//! * the cross `nm` of the program for `--list`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use e2e::ground::{layout_index, run_execlog_regs, split_execlog_line, ExeclogItem};
use e2e::{guest, guest_info, no_aslr, qemu_builds, RunDir, GUESTS, QEMU_ENV};
use serde_json::Value;

fn probe_exe() -> PathBuf {
    e2e::tool_exe(env!("CARGO_BIN_EXE_probe"))
}

/// `cannoli probe` as every test runs it: QEMU's environment alone, the
/// patched QEMU of this tree, address randomization off, in `dir`.
fn probe_cmd(dir: &RunDir) -> Command {
    let q = qemu_builds();
    let mut c = Command::new(probe_exe());
    no_aslr(&mut c)
        .env_clear()
        .envs(QEMU_ENV.iter().copied())
        .env("CANNOLI_QEMU_BUILD", &q.build)
        .current_dir(dir.path());
    c
}

/// The probes of every run: each function's entry and return.
const PROBES: &[&str] = &[
    "pr_add6",
    "pr_add6:return",
    "pr_rec/1",
    "pr_rec:return",
    "pr_viaptr/1",
    "pr_viaptr:return",
    "pr_tail/1",
    "pr_tail:return",
    "pr_tailee:return",
    "pr_catch/1",
    "pr_catch:return",
    "pr_deep/1",
    "pr_deep:return",
];

struct Run {
    status: i32,
    out: String,
    stdout: String,
    stderr: String,
}

fn run_probe(dir: &RunDir, tag: &str, opts: &[&str], prog: &Path) -> Run {
    run_probe_args(dir, tag, opts, prog, &[])
}

fn run_probe_args(dir: &RunDir, tag: &str, opts: &[&str], prog: &Path, args: &[&str]) -> Run {
    run_probe_env(dir, tag, opts, prog, args, &[])
}

fn run_probe_env(
    dir: &RunDir,
    tag: &str,
    opts: &[&str],
    prog: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Run {
    let out = dir.file(&format!("{tag}.out"));
    let o = probe_cmd(dir)
        .arg("-o")
        .arg(&out)
        .args(opts)
        .arg(prog)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Run {
        status: o.status.code().unwrap_or(-1),
        out: fs::read_to_string(&out).unwrap_or_default(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn probe_args() -> Vec<&'static str> {
    let mut v = vec!["--json"];
    for p in PROBES {
        v.extend(["-p", p]);
    }
    v
}

/// One JSON hit per line of `text`.
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// An entry hit's arguments, every one known.
fn known_args(h: &Value) -> Vec<u64> {
    let a = h["args"].as_array().expect("args");
    a.iter().map(|a| hex(a).expect("known")).collect()
}

fn hex(v: &Value) -> Option<u64> {
    let s = v.as_str()?;
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

fn mask(v: i64, bits: u32) -> u64 {
    if bits == 64 {
        v as u64
    } else {
        v as u64 & ((1u64 << bits) - 1)
    }
}

/// One hit, as the test compares it: `function at values depth`.
fn line(h: &Value) -> String {
    let f = h["function"].as_str().unwrap_or("?");
    let at = h["at"].as_str().unwrap_or("?");
    let vals: Vec<String> = match at {
        "entry" => h["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| hex(a).map_or("?".into(), |v| format!("{v:#x}")))
            .collect(),
        _ => vec![hex(&h["ret"]).map_or("?".into(), |v| format!("{v:#x}"))],
    };
    let unwound = if h["unwound"] == true { " unwound" } else { "" };
    format!("{f} {at} {}{unwound} depth {}", vals.join(","), h["depth"])
}

/// What the program printed, as the hits it implies: the main thread's,
/// and each worker thread's.
fn expected(stdout: &str, bits: u32) -> (Vec<String>, BTreeSet<Vec<String>>) {
    let h = |v: i64| format!("{:#x}", mask(v, bits));
    let nums = |s: &str| -> Vec<i64> { s.split(',').map(|x| x.parse().unwrap()).collect() };
    let mut main = Vec::new();
    let mut workers = BTreeSet::new();
    for l in stdout.lines() {
        let (call, r) = l.rsplit_once('=').unwrap();
        let r: i64 = r.parse().unwrap();
        let (name, args) = call.trim_end_matches(')').split_once('(').unwrap();
        let args = nums(args);
        if let Some(w) = name.strip_prefix("thread ") {
            let _ = w;
            let a: Vec<String> = args.iter().map(|&a| h(a)).collect();
            workers.insert(vec![
                format!("pr_add6 entry {} depth 1", a.join(",")),
                format!("pr_add6 return {} depth 1", h(r)),
            ]);
            continue;
        }
        match name {
            "pr_add6" | "pr_viaptr" => {
                let a: Vec<String> = args.iter().map(|&a| h(a)).collect();
                main.push(format!("{name} entry {} depth 1", a.join(",")));
                main.push(format!("{name} return {} depth 1", h(r)));
            }
            "pr_rec" => {
                // Each level n calls n-1; the results are 1, then 3r + n.
                let n = args[0];
                let mut results = vec![1i64];
                for k in 1..=n {
                    results.push(results[k as usize - 1] * 3 + k);
                }
                assert_eq!(results[n as usize], r, "{l}");
                for k in (0..=n).rev() {
                    main.push(format!("pr_rec entry {} depth {}", h(k), n - k + 1));
                }
                for k in 0..=n {
                    main.push(format!(
                        "pr_rec return {} depth {}",
                        h(results[k as usize]),
                        n - k + 1
                    ));
                }
            }
            "pr_catch" => {
                // pr_deep(n) .. pr_deep(0), whose longjmp leaves them all.
                let n = args[0];
                main.push(format!("pr_catch entry {} depth 1", h(n)));
                for k in (0..=n).rev() {
                    main.push(format!("pr_deep entry {} depth {}", h(k), n - k + 2));
                }
                for k in 0..=n {
                    main.push(format!("pr_deep return ? unwound depth {}", n - k + 2));
                }
                main.push(format!("pr_catch return {} depth 1", h(r)));
            }
            "pr_tail" => {
                main.push(format!("pr_tail entry {} depth 1", h(args[0])));
                main.push(format!("pr_tailee return {} depth 2", h(r)));
                main.push(format!("pr_tail return {} depth 1", h(r)));
            }
            other => panic!("unexpected line {other:?} in {stdout}"),
        }
    }
    (main, workers)
}

/// The hits of a run, by thread (in the order threads first appear).
fn hits_by_thread(out: &str) -> Vec<(i64, Vec<Value>)> {
    let mut by: Vec<(i64, Vec<Value>)> = Vec::new();
    for l in out.lines() {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
        let tid = v["tid"].as_i64().unwrap();
        match by.iter_mut().find(|(t, _)| *t == tid) {
            Some((_, h)) => h.push(v),
            None => by.push((tid, vec![v])),
        }
    }
    by
}

fn known_values(arch: &str) {
    let dir = RunDir::new();
    known_values_of(&dir, arch, &guest(arch, "probe"));
}

fn known_values_of(dir: &RunDir, arch: &str, prog: &Path) {
    let r = run_probe(dir, arch, &probe_args(), prog);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    let (main, workers) = expected(&r.stdout, guest_info(arch).bits);
    let by = hits_by_thread(&r.out);
    let pid = by
        .iter()
        .flat_map(|(_, h)| h)
        .map(|h| h["pid"].as_i64().unwrap())
        .next()
        .expect("hits");
    let got_main: Vec<String> = by
        .iter()
        .filter(|(t, _)| *t == pid)
        .flat_map(|(_, h)| h.iter().map(line))
        .collect();
    assert_eq!(got_main, main, "{arch}: the main thread's hits");
    let got_workers: BTreeSet<Vec<String>> = by
        .iter()
        .filter(|(t, _)| *t != pid)
        .map(|(_, h)| h.iter().map(line).collect())
        .collect();
    assert_eq!(got_workers, workers, "{arch}: the worker threads' hits");
    assert_eq!(
        by.len(),
        4,
        "{arch}: hits in the main thread and three workers"
    );
    // Every hit names its probe as given, and the pcs are the functions'.
    for h in by.iter().flat_map(|(_, h)| h) {
        let probe = h["probe"].as_str().unwrap();
        assert!(PROBES.contains(&probe), "{arch}: {h}");
        assert!(hex(&h["pc"]).is_some(), "{arch}: {h}");
    }
}

macro_rules! per_guest {
    ($f:ident: $($arch:ident),*) => {
        mod $f {
            $(
                #[test]
                fn $arch() {
                    super::$f(stringify!($arch));
                }
            )*
        }
    };
}

per_guest!(known_values: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// The ARM guest's programs are Thumb-2 (Debian's default); the same
/// program built with `-marm` has A32 functions (`pop {r4, pc}`, `ldr pc,
/// [sp], #4`) calling a Thumb libc.
#[test]
fn known_values_in_a32() {
    let dir = RunDir::new();
    let prog = dir.file("probe-a32");
    let src = e2e::workspace_root().join("tests/programs/probe.c");
    let cc = "arm-linux-gnueabihf-gcc";
    let o = Command::new(cc)
        .args(["-marm", "-O2", "-static", "-pthread", "-o"])
        .arg(&prog)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("{cc}: {e}; install it with scripts/deps.sh"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    known_values_of(&dir, "arm", &prog);
}

/// The registers before each instruction of cpu 0 (the main thread), from
/// execlog's changes; only registers that changed at least once are known.
/// Calls `at(pc, state)` at every instruction.
fn execlog_states(log: &Path, arch: &str, mut at: impl FnMut(u64, &BTreeMap<usize, u64>)) {
    let text = fs::read_to_string(log).unwrap();
    let mut state = BTreeMap::new();
    for l in text.lines() {
        if !l.starts_with("0, ") {
            continue;
        }
        let Ok(e) = split_execlog_line(l) else {
            continue;
        };
        at(e.pc, &state);
        for item in e.items {
            if let ExeclogItem::Reg(name, value) = item {
                if let Some(i) = layout_index(arch, name) {
                    let v = value.trim_start_matches("0x");
                    let v = u128::from_str_radix(v, 16).unwrap() as u64;
                    state.insert(i, v);
                }
            }
        }
    }
}

/// Registers at entries and returns equal those execlog saw at the same
/// pcs, for the main thread.
fn matches_execlog(arch: &str) {
    let dir = RunDir::new();
    let prog = guest(arch, "probe");
    // Without the threads, which QEMU's execlog does not survive.
    let mut opts = probe_args();
    opts.push("--insns");
    let r = run_probe_args(&dir, arch, &opts, &prog, &["nothreads"]);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    let by = hits_by_thread(&r.out);
    let ours: Vec<Value> = by
        .iter()
        .find(|(t, h)| h[0]["pid"].as_i64() == Some(*t))
        .expect("hits of the main thread")
        .1
        .iter()
        // A frame a longjmp left has no result to compare.
        .filter(|h| h["unwound"] != true)
        .cloned()
        .collect();
    let (run, log, _) = run_execlog_regs(&dir, "execlog", arch, &prog, &["nothreads"]);
    run.assert_success();
    let bits = guest_info(arch).bits;
    let (args, ret): (&[&str], &str) = match arch {
        "riscv64" => (&["a0", "a1", "a2", "a3", "a4", "a5"], "a0"),
        "arm" => (&["r0", "r1", "r2", "r3"], "r0"),
        "aarch64" => (&["x0", "x1", "x2", "x3", "x4", "x5"], "x0"),
        "x86_64" => (&["rdi", "rsi", "rdx", "rcx", "r8", "r9"], "rax"),
        "i386" => (&[], "eax"),
        "ppc64le" => (&["r3", "r4", "r5", "r6", "r7", "r8"], "r3"),
        _ => unreachable!(),
    };
    let idx = |n: &str| layout_index(arch, n).unwrap();
    let m = |v: u64| e2e::ground::mask(v, bits);
    // Our hits, as (pc, the values execlog can know).
    let want: Vec<(u64, Vec<u64>)> = ours
        .iter()
        .map(|h| {
            let pc = hex(&h["pc"]).unwrap();
            let vals = match h["at"].as_str().unwrap() {
                "entry" => {
                    let a = h["args"].as_array().unwrap();
                    a.iter().take(args.len()).map(|v| hex(v).unwrap()).collect()
                }
                _ => vec![hex(&h["ret"]).unwrap()],
            };
            (pc, vals)
        })
        .collect();
    let entries: BTreeMap<u64, usize> = ours
        .iter()
        .filter(|h| h["at"] == "entry")
        .map(|h| (hex(&h["pc"]).unwrap(), h["args"].as_array().unwrap().len()))
        .collect();
    let returns: BTreeSet<u64> = ours
        .iter()
        .filter(|h| h["at"] == "return")
        .map(|h| hex(&h["pc"]).unwrap())
        .collect();
    let mut got: Vec<(u64, Vec<u64>)> = Vec::new();
    // execlog's instruction index of each of those.
    let mut index: Vec<u64> = Vec::new();
    let mut k = 0u64;
    execlog_states(&log, arch, |pc, s| {
        let get = |n: &str| m(s.get(&idx(n)).copied().unwrap_or(0));
        if let Some(&n) = entries.get(&pc) {
            got.push((pc, args.iter().take(n).map(|a| get(a)).collect()));
            index.push(k);
        }
        if returns.contains(&pc) {
            // A tail call's return closes both frames: one line each.
            let n = ours
                .iter()
                .filter(|h| h["at"] == "return" && hex(&h["pc"]) == Some(pc))
                .map(|h| h["function"].as_str().unwrap())
                .collect::<BTreeSet<_>>()
                .len();
            for _ in 0..n {
                got.push((pc, vec![get(ret)]));
                index.push(k);
            }
        }
        k += 1;
    });
    assert_eq!(
        got, want,
        "{arch}: registers at the probed pcs, execlog then ours"
    );
    // `--insns`: the instructions from each entry to its return, as
    // execlog counted them (a return is matched to the last open entry of
    // its function at its depth).
    let mut open: Vec<(String, u64, u64)> = Vec::new();
    let mut checked = 0;
    for (h, &at) in ours.iter().zip(&index) {
        let f = h["function"].as_str().unwrap().to_string();
        let depth = h["depth"].as_u64().unwrap();
        if h["at"] == "entry" {
            open.push((f, depth, at));
        } else if let Some(i) = open.iter().rposition(|(g, d, _)| *g == f && *d == depth) {
            let (_, _, start) = open.remove(i);
            assert_eq!(h["insns"].as_u64(), Some(at - start), "{arch}: {h}");
            checked += 1;
        }
    }
    assert!(checked >= 9, "{arch}: {checked} returns checked");
}

per_guest!(matches_execlog: arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// Pc probes in the text form (each line written whole by the client's
/// parallel phase): every register a line shows equals what execlog saw
/// before the same instruction, for every register execlog knows, and
/// there is one line per time execlog ran the pc.
fn pc_lines_match_execlog(arch: &str) {
    let dir = RunDir::new();
    let prog = guest(arch, "probe");
    let opts = ["-p", "pr_add6+0", "-p", "pr_rec+0"];
    // QEMU as execlog's run has it: the same seed (the guest's random
    // bytes, which land in registers), the same empty environment.
    let qemu = e2e::QEMU_COMMON_ARGS.join(" ");
    let env = [("CANNOLI_QEMU_ARGS", qemu.as_str())];
    let r = run_probe_env(&dir, arch, &opts, &prog, &["nothreads"], &env);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    let bits = guest_info(arch).bits;
    let m = |v: u64| e2e::ground::mask(v, bits);
    // Ours: (pc, layout index to value) per line, in order.
    let ours: Vec<(u64, BTreeMap<usize, u64>)> = r
        .out
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f[1], "-", "{arch}: no --insns: {l}");
            let pc = u64::from_str_radix(f[3].trim_start_matches("0x"), 16).unwrap();
            let regs = f[4..]
                .iter()
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    let i = layout_index(arch, k).unwrap_or_else(|| panic!("{arch}: {k}"));
                    (
                        i,
                        u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap(),
                    )
                })
                .collect();
            (pc, regs)
        })
        .collect();
    let pcs: BTreeSet<u64> = ours.iter().map(|(pc, _)| *pc).collect();
    // (ppc64le's calls within the program enter past the global entry.)
    assert!(!pcs.is_empty(), "{arch}: no hits: {}", r.stderr);
    let (run, log, _) = run_execlog_regs(&dir, "execlog", arch, &prog, &["nothreads"]);
    run.assert_success();
    let mut seen = 0;
    let mut compared = 0;
    // execlog's instruction index of each hit.
    let mut index = Vec::new();
    let mut k = 0u64;
    execlog_states(&log, arch, |pc, s| {
        k += 1;
        if !pcs.contains(&pc) {
            return;
        }
        index.push(k - 1);
        let (our_pc, regs) = ours.get(seen).expect("a line per execlog hit");
        assert_eq!(*our_pc, pc, "{arch}: hit {seen}");
        for (i, v) in s {
            if let Some(ours) = regs.get(i) {
                assert_eq!(
                    m(*ours),
                    m(*v),
                    "{arch}: hit {seen} at {pc:#x}, register {i}"
                );
                compared += 1;
            }
        }
        seen += 1;
    });
    assert_eq!(seen, ours.len(), "{arch}: lines, execlog's then ours");
    assert!(
        compared >= 4 * seen,
        "{arch}: {compared} registers compared"
    );
    // `--json --insns` and `--flow` (their lines are split between the
    // client's phases): the same registers, and the instruction index
    // execlog counted between the hits.
    let mut json_opts = opts.to_vec();
    json_opts.extend(["--json", "--insns"]);
    let r = run_probe_env(&dir, "json", &json_opts, &prog, &["nothreads"], &env);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    let hits: Vec<Value> = r
        .out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(hits.len(), ours.len(), "{arch}: json hits, text lines");
    let first = hits[0]["insn"].as_u64().unwrap();
    for (n, ((h, (pc, regs)), at)) in hits.iter().zip(&ours).zip(&index).enumerate() {
        assert_eq!(
            (h["at"].as_str(), h["depth"].as_u64()),
            (Some("pc"), Some(0)),
            "{arch}: {h}"
        );
        assert_eq!(hex(&h["pc"]), Some(*pc), "{arch}: hit {n}");
        let theirs: BTreeMap<usize, u64> = h["regs"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (layout_index(arch, k).unwrap(), hex(v).unwrap()))
            .collect();
        assert_eq!(&theirs, regs, "{arch}: hit {n}, json then text");
        let insn = h["insn"].as_u64().unwrap();
        assert_eq!(
            insn - first,
            at - index[0],
            "{arch}: hit {n}: instructions since the first"
        );
    }
    let mut flow_opts = opts.to_vec();
    flow_opts.push("--flow");
    let r = run_probe_env(&dir, "flow", &flow_opts, &prog, &["nothreads"], &env);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    let text: Vec<String> = ours
        .iter()
        .map(|(pc, regs)| format!("{pc:#x} {}", regs.len()))
        .collect();
    let flow: Vec<String> = r
        .out
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f[1], "@", "{arch}: {l}");
            format!("{} {}", f[3], f.len() - 4)
        })
        .collect();
    assert_eq!(
        flow, text,
        "{arch}: flow's pcs and register counts, then text's"
    );
}

per_guest!(pc_lines_match_execlog: arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// `probe OPTS PROG` (a `--list`): each line's function and address.
fn listed(dir: &RunDir, arch: &str, opts: &[&str], prog: &Path) -> Vec<(String, u64)> {
    let o = Command::new(probe_exe())
        .args(opts)
        .arg(prog)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{arch}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            // NAME ADDR SIZE FILE; a Go name may hold spaces (`struct { .. }`).
            let w: Vec<&str> = l.rsplitn(4, ' ').collect();
            let a = u64::from_str_radix(w[2].trim_start_matches("0x"), 16).unwrap();
            (w[3].to_string(), a)
        })
        .collect()
}

/// `--list` names the functions the cross `nm` of the program lists as
/// code with a size, at the same addresses.
fn list_matches_nm(arch: &str) {
    let prog = guest(arch, "probe");
    let dir = RunDir::new();
    let ours: BTreeSet<(String, u64)> =
        listed(&dir, arch, &["--list"], &prog).into_iter().collect();
    let nm = match guest_info(arch).triple {
        Some(t) => format!("{t}-nm"),
        None => "nm".into(),
    };
    let o = Command::new(&nm)
        .args(["-S", "--defined-only"])
        .arg(&prog)
        .output()
        .unwrap_or_else(|e| panic!("{nm}: {e}"));
    assert!(o.status.success(), "{nm}");
    let theirs: BTreeSet<(String, u64)> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let [addr, size, ty, name] = w[..] else {
                return None;
            };
            let size = u64::from_str_radix(size, 16).ok()?;
            if !matches!(ty, "T" | "t" | "W" | "i") || size == 0 {
                return None;
            }
            let a = u64::from_str_radix(addr, 16).ok()?;
            let a = if arch == "arm" { a & !1 } else { a };
            Some((name.to_string(), a))
        })
        .collect();
    let sized: BTreeSet<(String, u64)> = theirs.iter().cloned().collect();
    let missing: Vec<_> = sized.difference(&ours).take(10).collect();
    assert!(
        missing.is_empty(),
        "{arch}: nm has, --list lacks: {missing:?}"
    );
    for f in [
        "pr_add6",
        "pr_rec",
        "pr_viaptr",
        "pr_tail",
        "pr_tailee",
        "main",
    ] {
        assert!(ours.iter().any(|(n, _)| n == f), "{arch}: {f} not listed");
    }
}

per_guest!(list_matches_nm: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

#[test]
fn bad_probes_are_one_line() {
    let dir = RunDir::new();
    let prog = guest("mipsel", "probe");
    for (opts, want) in [
        (&["-p", "pr_add6/2x"][..], "write FUNC"),
        (&["-p", "no_such_fn"][..], "--list"),
        // A `/` not followed by a digit is part of a name (Go's paths).
        (&["-p", "pr_add6/x"][..], "--list"),
        (&["-p", "pr_add6+0x1000"][..], "outside it"),
        (&["-p", "libc:strlen"][..], "shared library"),
        (&[][..], "-p FUNC"),
    ] {
        let r = run_probe(&dir, "bad", opts, &prog);
        assert_eq!(r.status, 2, "{opts:?}: {}", r.stderr);
        let lines: Vec<&str> = r.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{opts:?}: {}", r.stderr);
        assert!(
            lines[0].starts_with("probe: ") && lines[0].contains(want),
            "{}",
            lines[0]
        );
    }
}

/// `--flow`: every entry and return of the matched functions, indented by
/// depth, with the results.
#[test]
fn flow_of_the_recursion() {
    let dir = RunDir::new();
    let prog = guest("riscv64", "probe");
    let r = run_probe(&dir, "flow", &["--flow", "-p", "pr_rec/1"], &prog);
    assert_eq!(r.status, 0, "{}", r.stderr);
    let flow: Vec<String> = r
        .out
        .lines()
        .map(|l| l.split_once(": ").unwrap().1.to_string())
        .collect();
    let want = [
        "-> pr_rec(arg0=0x0)",
        "<- pr_rec ret=0x1",
        "-> pr_rec(arg0=0x4)",
        "  -> pr_rec(arg0=0x3)",
        "    -> pr_rec(arg0=0x2)",
        "      -> pr_rec(arg0=0x1)",
        "        -> pr_rec(arg0=0x0)",
        "        <- pr_rec ret=0x1",
        "      <- pr_rec ret=0x4",
        "    <- pr_rec ret=0xe",
        "  <- pr_rec ret=0x2d",
        "<- pr_rec ret=0x8b",
    ];
    assert_eq!(flow, want);
}

/// Every guest in the matrix is covered above.
#[test]
fn the_matrix_is_covered() {
    assert_eq!(GUESTS.len(), 9);
}

/// `--flow -p '*'`: every function of the program (all of static glibc's
/// start-up and exit too) enters and returns well nested in every thread,
/// none left without its return, and the probed program's own functions
/// show their known results.
fn flow_of_everything(arch: &str) {
    let dir = RunDir::new();
    let prog = guest(arch, "probe");
    let r = run_probe(&dir, arch, &["--flow", "-p", "*"], &prog);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    let mut stacks: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut results: Vec<String> = Vec::new();
    for l in r.out.lines() {
        let (head, rest) = l.split_once(": ").unwrap();
        let tid = head.split_whitespace().last().unwrap().to_string();
        let stack = stacks.entry(tid).or_default();
        let body = rest.trim_start();
        let indent = (rest.len() - body.len()) / 2;
        if body.contains("unwound") {
            // Left by the longjmp: pr_deep's frames and glibc's longjmp
            // itself (which never returns either).
            let f = body.split_whitespace().nth(1).unwrap();
            assert!(f == "pr_deep" || f.contains("longjmp"), "{arch}: {l}");
        }
        if let Some(call) = body.strip_prefix("-> ") {
            assert_eq!(indent, stack.len(), "{arch}: {l}");
            stack.push(call.split('(').next().unwrap().to_string());
        } else if let Some(ret) = body.strip_prefix("<- ") {
            let (f, v) = ret.split_once(' ').unwrap();
            assert_eq!(stack.pop().as_deref(), Some(f), "{arch}: {l}");
            assert_eq!(indent, stack.len(), "{arch}: {l}");
            if f.starts_with("pr_") {
                results.push(format!("{f} {v}"));
            }
        } else {
            panic!("{arch}: {l}");
        }
    }
    let want = [
        "pr_add6 ret=0x5b",
        "pr_add6 ret=0x7092dd",
        "pr_rec ret=0x1",
        "pr_rec ret=0x1",
        "pr_rec ret=0x4",
        "pr_rec ret=0xe",
        "pr_rec ret=0x2d",
        "pr_rec ret=0x8b",
        "pr_viaptr ret=0x52",
        "pr_tailee ret=0x2a",
        "pr_tail ret=0x2a",
        "pr_deep ret=? unwound",
        "pr_deep ret=? unwound",
        "pr_deep ret=? unwound",
        "pr_deep ret=? unwound",
        "pr_catch ret=0x2bf",
        "pr_add6 ret=0x118",
        "pr_add6 ret=0x1ea",
        "pr_add6 ret=0x2bc",
    ];
    let mut got = results.clone();
    let mut w: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    // Threads' lines may come before or after the main thread's.
    got.sort();
    w.sort();
    assert_eq!(got, w, "{arch}");
}

per_guest!(flow_of_everything: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// `--timeline FILE`: a Chrome trace-event document whose begin and end
/// events nest per thread, one span per call.
#[test]
fn timeline_spans() {
    let dir = RunDir::new();
    let prog = guest("aarch64", "probe");
    let tl = dir.file("t.json");
    let r = run_probe(
        &dir,
        "tl",
        &["--flow", "-p", "pr_*", "--timeline", tl.to_str().unwrap()],
        &prog,
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    let doc: Value = serde_json::from_str(&fs::read_to_string(&tl).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let mut open: BTreeMap<i64, Vec<(String, u64)>> = BTreeMap::new();
    let mut spans = 0;
    for e in events {
        let tid = e["tid"].as_i64().unwrap();
        let name = e["name"].as_str().unwrap().to_string();
        let ts = e["ts"].as_u64().unwrap();
        match e["ph"].as_str().unwrap() {
            "B" => open.entry(tid).or_default().push((name, ts)),
            "E" => {
                let (n, t0) = open.get_mut(&tid).unwrap().pop().unwrap();
                assert_eq!(n, name);
                assert!(t0 < ts, "{e}");
                spans += 1;
            }
            other => panic!("{other}"),
        }
    }
    assert!(open.values().all(|v| v.is_empty()), "{open:?}");
    // pr_add6 x5, pr_rec x6, pr_viaptr, pr_tail, pr_tailee, pr_catch,
    // pr_deep x4 (closed by the longjmp).
    assert_eq!(spans, 19);
}

fn cannoli(dir: &RunDir, args: &[&std::ffi::OsStr]) -> (i32, String) {
    let q = qemu_builds();
    let o = no_aslr(&mut Command::new(e2e::release_artifact("cannoli")))
        .args(args)
        .env_clear()
        .envs(QEMU_ENV.iter().copied())
        .env("CANNOLI_QEMU_BUILD", &q.build)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `cannoli record [--hooks HOOKS] -o rec prog args..`, which must succeed.
fn record(dir: &RunDir, hooks: Option<&str>, rec: &Path, prog: &Path, args: &[&str]) {
    use std::ffi::OsStr;
    let mut a: Vec<&OsStr> = vec![OsStr::new("record")];
    if let Some(h) = hooks {
        a.extend([OsStr::new("--hooks"), OsStr::new(h)]);
    }
    a.extend([OsStr::new("-o"), rec.as_os_str(), prog.as_os_str()]);
    a.extend(args.iter().map(OsStr::new));
    let (st, err) = cannoli(dir, &a);
    assert_eq!(st, 0, "{err}");
}

/// A probe run's lines without their thread ids (each run's own).
fn without_tids(s: &str) -> Vec<String> {
    s.lines()
        .map(|l| l.split_once(' ').unwrap().1.to_string())
        .collect()
}

/// Probes `prog args` live with `opts`, then the same probes on a
/// recording of it made with `--hooks regs` (`rec`): the replay must give
/// the live run's lines. Returns the live run.
fn replay_matches_live(dir: &RunDir, prog: &Path, opts: &[&str], args: &[&str], rec: &str) -> Run {
    let live = run_probe_args(dir, "live", opts, prog, args);
    assert_eq!(live.status, 0, "{}", live.stderr);
    let rec = dir.file(rec);
    record(dir, Some("regs"), &rec, prog, args);
    let mut ropts = vec!["--replay", rec.to_str().unwrap()];
    ropts.extend(opts);
    let replay = run_probe(dir, "replay", &ropts, Path::new("--"));
    assert_eq!(replay.status, 0, "{}", replay.stderr);
    assert_eq!(
        without_tids(&replay.out),
        without_tids(&live.out),
        "{}",
        prog.display()
    );
    live
}

/// The same probes on a recording made with `--hooks regs` give the live
/// run's hits, instruction indexes included (the guest's stdout is a pipe
/// in both runs: glibc's `printf` takes another path for /dev/null); a recording without registers gets one line naming the
/// preset.
fn replay_equals_live(arch: &str) {
    let dir = RunDir::new();
    let prog = guest(arch, "probe");
    let mut opts = vec!["--insns"];
    for p in PROBES {
        opts.extend(["-p", p]);
    }
    let live = replay_matches_live(&dir, &prog, &opts, &["nothreads"], "regs.cnl");
    assert!(live.out.lines().count() >= 20, "{}", live.out);
    let mem = dir.file("mem.cnl");
    record(&dir, None, &mem, &prog, &["nothreads"]);
    let r = run_probe(
        &dir,
        "nomem",
        &["--replay", mem.to_str().unwrap(), "-p", "pr_rec"],
        Path::new("--"),
    );
    assert_ne!(r.status, 0);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    assert!(lines[0].contains("--hooks regs"), "{}", lines[0]);
}

per_guest!(replay_equals_live: mipsel, i386, arm);

/// `tools::probe::main` with `args` (`probe` and its options, as on a
/// command line) in this process; returns the exit status and what it wrote
/// to `out`.
fn probe_here(args: &[&std::ffi::OsStr], out: &Path) -> (i32, String) {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: tools::probe::Args,
    }
    let cli = <Cli as clap::Parser>::try_parse_from(
        std::iter::once("probe".as_ref())
            .chain(["-o".as_ref(), out.as_os_str()])
            .chain(args.iter().copied()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let code = tools::probe::main(cli.args);
    (code, fs::read_to_string(out).unwrap_or_default())
}

/// probe is a value, not module statics: one process replays the same
/// recording (every thread of `probe.c`) several times, one after another
/// and two at once, and every run writes the hits that `probe --replay`
/// writes in a process of its own. A run that kept anything of the one
/// before (its plan, its output, its counts) would write other hits, or
/// none.
#[test]
fn runs_twice_in_one_process() {
    let dir = RunDir::new();
    let prog = guest("mipsel", "probe");
    let rec = dir.file("regs.cnl");
    record(&dir, Some("regs"), &rec, &prog, &[]);
    let mut opts = vec!["--insns", "--replay", rec.to_str().unwrap()];
    for p in PROBES {
        opts.extend(["-p", p]);
    }
    let alone = run_probe(&dir, "alone", &opts, Path::new("--"));
    assert_eq!(alone.status, 0, "{}", alone.stderr);
    assert!(alone.out.lines().count() >= 20, "{}", alone.out);
    let args: Vec<&std::ffi::OsStr> = opts.iter().map(|o| o.as_ref()).collect();
    for tag in ["first", "second"] {
        let (code, out) = probe_here(&args, &dir.file(&format!("{tag}.out")));
        assert_eq!(code, 0, "{tag}");
        assert_eq!(out, alone.out, "{tag}: not the hits of probe --replay");
    }
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| probe_here(&args, &dir.file("left.out")));
        let b = s.spawn(|| probe_here(&args, &dir.file("right.out")));
        (a.join().unwrap(), b.join().unwrap())
    });
    for (tag, (code, out)) in [("left", a), ("right", b)] {
        assert_eq!(code, 0, "{tag}");
        assert_eq!(out, alone.out, "{tag}: not the hits of probe --replay");
    }
}

/// Two live runs at once in one process, each with probes of its own: each
/// hook library gets its own plan (through its QEMU's environment, not this
/// process's), so each run writes the hits its probes give in a process of
/// their own.
#[test]
fn two_live_runs_at_once_in_one_process() {
    let dir = RunDir::new();
    let prog = guest("mipsel", "probe");
    let sets: [&[&str]; 2] = [&["-p", "pr_add6"], &["-p", "pr_rec:return"]];
    let alone: Vec<Run> = sets
        .iter()
        .enumerate()
        .map(|(i, opts)| run_probe(&dir, &format!("alone{i}"), opts, &prog))
        .collect();
    for a in &alone {
        assert_eq!(a.status, 0, "{}", a.stderr);
        assert!(!a.out.is_empty(), "{}", a.stderr);
    }
    assert_ne!(without_tids(&alone[0].out), without_tids(&alone[1].out));
    // The launcher finds QEMU from target/qemu.env, above this test binary.
    let outs = std::thread::scope(|s| {
        let runs: Vec<_> = sets
            .iter()
            .enumerate()
            .map(|(i, opts)| {
                let dir = &dir;
                let prog = &prog;
                s.spawn(move || {
                    let mut args: Vec<&std::ffi::OsStr> = opts.iter().map(|o| o.as_ref()).collect();
                    args.push(prog.as_os_str());
                    probe_here(&args, &dir.file(&format!("here{i}.out")))
                })
            })
            .collect();
        runs.into_iter()
            .map(|r| r.join().unwrap())
            .collect::<Vec<_>>()
    });
    // Threads' lines interleave chunk by chunk: compare them as sets.
    let sorted = |s: &str| {
        let mut v = without_tids(s);
        v.sort();
        v
    };
    for (i, (code, out)) in outs.iter().enumerate() {
        assert_eq!(*code, 0, "run {i}");
        assert_eq!(
            sorted(out),
            sorted(&alone[i].out),
            "run {i}: not the hits of its probes alone"
        );
    }
}

/// `tests/programs/dyn_probe.c` built for `arch` by Debian's cross compiler,
/// not position-independent, in `dir`.
fn dyn_probe(dir: &RunDir, arch: &str) -> std::path::PathBuf {
    build(dir, arch, "dyn_probe", "dyn_probe", &["-O2", "-no-pie"])
}

/// `tests/programs/NAME.c` built for `arch` by Debian's cross compiler with
/// `flags`, as `dir/out`.
fn build(dir: &RunDir, arch: &str, name: &str, out: &str, flags: &[&str]) -> PathBuf {
    let prog = dir.file(out);
    let src = e2e::workspace_root().join(format!("tests/programs/{name}.c"));
    let flags = flags.iter().map(std::ffi::OsStr::new);
    e2e::compile(
        &e2e::gcc(arch),
        flags.chain([
            std::ffi::OsStr::new("-o"),
            prog.as_os_str(),
            src.as_os_str(),
        ]),
    );
    prog
}

/// `LIB:FUNC`: functions of the dynamically linked C library, by name,
/// with the values the program prints (`atoi` tail-calls `strtol` on some
/// guests: its return is found there).
fn library_functions(arch: &str) {
    let dir = RunDir::new();
    let prog = dyn_probe(&dir, arch);
    library_functions_of(&dir, arch, &prog);
}

/// The `libc:atoi` and `libc:labs` probes of [`library_functions`] on
/// `prog`, a build of `dyn_probe.c`; returns the hits.
fn library_functions_of(dir: &RunDir, arch: &str, prog: &Path) -> Vec<Value> {
    let opts = [
        "--json",
        "-p",
        "libc:atoi/0",
        "-p",
        "libc:atoi:return",
        "-p",
        "libc:labs/1",
        "-p",
        "libc:labs:return",
    ];
    let r = run_probe(dir, arch, &opts, prog);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    let bits = guest_info(arch).bits;
    let mut want = Vec::new();
    for l in r.stdout.lines() {
        let (call, v) = l.rsplit_once('=').unwrap();
        let (f, a) = call.trim_end_matches(')').split_once('(').unwrap();
        let v: i64 = v.parse().unwrap();
        match f {
            "atoi" => {
                want.push("atoi entry  depth 1".to_string());
                // An int in a wider register: compare its low 32 bits.
                want.push(format!("atoi return {:#x} depth 1", mask(v, 32)));
            }
            _ => {
                let a: i64 = a.parse().unwrap();
                want.push(format!("labs entry {:#x} depth 1", mask(a, bits)));
                want.push(format!("labs return {:#x} depth 1", mask(v, bits)));
            }
        }
    }
    let got: Vec<String> = r
        .out
        .lines()
        .map(|l| {
            let mut h: Value = serde_json::from_str(l).unwrap();
            if h["function"] == "atoi" && h["at"] == "return" {
                let v = hex(&h["ret"]).unwrap() & 0xffff_ffff;
                h["ret"] = Value::String(format!("{v:#x}"));
            }
            line(&h)
        })
        .collect();
    assert_eq!(got, want, "{arch}");
    r.out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

per_guest!(library_functions: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// Library probes on a recording: the library's mapping event places it.
#[test]
fn library_functions_replayed() {
    let dir = RunDir::new();
    let prog = dyn_probe(&dir, "mipsel");
    let probes = ["-p", "libc:labs/1", "-p", "libc:atoi:return"];
    let live = replay_matches_live(&dir, &prog, &probes, &[], "dyn.cnl");
    assert_eq!(live.out.lines().count(), 6, "{}", live.out);
}

/// `LIB:FUNC` hits in threads that call the library while the main
/// thread, whose stream holds the library's mapping event, waits for them
/// (`tests/programs/dyn_probe_mt.c`): every thread's call is there, with
/// the argument the program prints, none lost (they wait for the mapping).
fn library_functions_in_threads(arch: &str) {
    let dir = RunDir::new();
    let prog = build(
        &dir,
        arch,
        "dyn_probe_mt",
        "dyn_probe_mt",
        &["-O2", "-no-pie", "-pthread"],
    );
    let r = run_probe(&dir, arch, &["--json", "-p", "libc:labs/1"], &prog);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    let bits = guest_info(arch).bits;
    let want: BTreeSet<String> = r
        .stdout
        .lines()
        .map(|l| {
            let a = l.strip_prefix("labs(").unwrap().split(')').next().unwrap();
            format!("labs entry {:#x} depth 1", mask(a.parse().unwrap(), bits))
        })
        .collect();
    assert_eq!(want.len(), 8, "{arch}: the program's output: {}", r.stdout);
    let hits: Vec<Value> = r
        .out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let got: BTreeSet<String> = hits.iter().map(line).collect();
    assert_eq!(got, want, "{arch}: {}", r.stderr);
    assert_eq!(hits.len(), 8, "{arch}: {}", r.out);
    let tids: BTreeSet<i64> = hits.iter().map(|h| h["tid"].as_i64().unwrap()).collect();
    assert_eq!(tids.len(), 8, "{arch}: one call per thread: {}", r.out);
    assert!(
        hits.iter().all(|h| h["tid"] != h["pid"]),
        "{arch}: the main thread calls no labs: {}",
        r.out
    );
}

per_guest!(library_functions_in_threads: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// `strlen:return` on `tests/programs/probe_strlen.c` built with `flags`:
/// the lengths the program prints are among the results, in order, and
/// where the cross `nm` says `strlen` is an indirect function (`i`), every
/// hit is in one of its implementations, never in the resolver.
fn strlen_by_name(arch: &str, flags: &[&str], probe: &str) {
    let dir = RunDir::new();
    let prog = build(&dir, arch, "probe_strlen", "probe_strlen", flags);
    let r = run_probe(&dir, arch, &["--json", "-p", probe], &prog);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    let printed: Vec<u64> = r.stdout.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(printed, [1, 5, 12, 0, 33], "{arch}");
    let hits: Vec<Value> = r
        .out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let rets: Vec<u64> = hits.iter().filter_map(|h| hex(&h["ret"])).collect();
    let mut want = printed.iter().peekable();
    for v in &rets {
        if want.peek() == Some(&v) {
            want.next();
        }
    }
    assert!(
        want.peek().is_none(),
        "{arch}: the printed lengths {printed:?} are not among the results {rets:?}"
    );
    let nm = guest_info(arch)
        .triple
        .map_or("nm".to_string(), |t| format!("{t}-nm"));
    let lib = probe.strip_suffix("strlen:return").unwrap_or("");
    let file = if lib.is_empty() {
        prog.clone()
    } else {
        PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6")
    };
    let o = Command::new(&nm).arg("-D").arg(&file).output().unwrap();
    let o2 = Command::new(&nm).arg(&file).output().unwrap();
    let listing =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o2.stdout);
    let ifunc = listing
        .lines()
        .any(|l| l.ends_with(" i strlen") || l.contains(" i strlen@"));
    for h in &hits {
        let f = h["function"].as_str().unwrap();
        if ifunc {
            assert!(
                f.starts_with("__strlen_"),
                "{arch}: a hit in {f}, not an implementation: {h}"
            );
        } else {
            assert_eq!(f, "strlen", "{arch}");
        }
    }
}

fn strlen_static(arch: &str) {
    strlen_by_name(arch, &["-O2", "-static"], "strlen:return");
}

per_guest!(strlen_static: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// The host's C library (x86_64) is stripped: its implementations are
/// named by its debug file (`libc6-dbg`, which `scripts/deps.sh` installs).
#[test]
fn strlen_of_the_host_libc() {
    strlen_by_name("x86_64", &["-O2"], "libc:strlen:return");
}

/// A cross C library without its debug file: one line naming the fix.
#[test]
fn strlen_without_debug_symbols_is_one_line() {
    let dir = RunDir::new();
    let prog = build(&dir, "aarch64", "probe_strlen", "probe_strlen", &["-O2"]);
    let r = run_probe(&dir, "aarch64", &["-p", "libc:strlen"], &prog);
    assert_eq!(r.status, 2, "{}", r.stderr);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    assert!(
        lines[0].contains("indirect function") && lines[0].contains("libc6-dbg"),
        "{}",
        r.stderr
    );
}

/// C++ functions named by their qualified names (`geo::scale`, a method
/// `geo::Box::area`), as `perf probe` takes them: the hits are those of
/// their mangled symbols (`nm`'s), with the values the program prints
/// (`tests/programs/probe_cxx.cpp`, x86_64: Debian 12's only C++ compiler
/// is the host's).
#[test]
fn cxx_functions_by_their_qualified_names() {
    let dir = RunDir::new();
    let prog = e2e::gxx(dir.path(), "probe_cxx");
    let opts = [
        "--json",
        "-p",
        "geo::scale/2",
        "-p",
        "geo::Box::area:return",
    ];
    let r = run_probe(&dir, "cxx", &opts, &prog);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "area=21 scale=63\n");
    let nm = nm_funcs("x86_64", &prog, false);
    let hits = json_lines(&r.out);
    let got: Vec<(String, bool, String)> = hits
        .iter()
        .map(|h| {
            let f = h["function"].as_str().unwrap().to_string();
            let known = nm.contains_key(&f);
            let v = match h["at"].as_str() {
                Some("entry") => format!("{}", h["args"]),
                _ => h["ret"].as_str().unwrap().to_string(),
            };
            (f, known, v)
        })
        .collect();
    assert_eq!(got.len(), 2, "{}", r.out);
    assert!(got.iter().all(|(_, known, _)| *known), "{got:?} {nm:?}");
    assert!(got[0].0.starts_with("_ZNK3geo3Box4areaEv"), "{got:?}");
    assert_eq!(got[0].2, "0x15");
    assert_eq!(got[1].0, "_ZN3geo5scaleEli");
    assert_eq!(got[1].2, r#"["0x15","0x3"]"#);
    // The mangled symbol is still a name the probe takes.
    let r = run_probe(&dir, "mangled", &["-p", "_ZN3geo5scaleEli/2"], &prog);
    assert_eq!((r.status, r.out.lines().count()), (0, 1), "{}", r.stderr);
    // `--flow` shows them by the names the probes took.
    let r = run_probe(&dir, "flow", &["--flow", "-p", "geo::*"], &prog);
    // "TID: -> NAME(args)" and "TID: <- NAME ret=..": the arrow and NAME.
    let calls: Vec<String> = r
        .out
        .lines()
        .map(|l| l.split_once(": ").map_or(l, |(_, c)| c))
        .map(|c| c.split(['(', ' ']).take(2).collect::<Vec<_>>().join(" "))
        .collect();
    let want = [
        "-> geo::Box::area",
        "<- geo::Box::area",
        "-> geo::scale",
        "<- geo::scale",
    ];
    assert_eq!(calls, want, "{}", r.out);
    // `--list` takes the qualified name too, and lists the symbols.
    let listed: Vec<String> = listed(&dir, "x86_64", &["--list", "geo::s*"], &prog)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(listed, ["_ZN3geo5scaleEli"]);
}

/// `--list LIB:PATTERN` lists a library's functions from its `.dynsym`.
#[test]
fn list_of_a_library() {
    let dir = RunDir::new();
    let prog = dyn_probe(&dir, "mipsel");
    let o = Command::new(probe_exe())
        .args(["--list", "libc:labs"])
        .arg(&prog)
        .output()
        .unwrap();
    let out = String::from_utf8(o.stdout).unwrap();
    let w: Vec<&str> = out.split_whitespace().collect();
    assert_eq!((w[0], w.len()), ("labs", 4), "{out}");
    assert!(w[3].ends_with("/libc.so.6"), "{out}");
}

/// `--list PATTERN PROGRAM` of a dynamically linked program lists the
/// functions of every library the loader maps for it too, each with its
/// file, at the addresses the cross `nm -D` of that file gives.
#[test]
fn list_of_a_dynamic_program_has_its_libraries() {
    let dir = RunDir::new();
    let arch = "mipsel";
    let prog = dyn_probe(&dir, arch);
    let o = Command::new(probe_exe())
        .args(["--list", "labs"])
        .arg(&prog)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines.len(), 1, "{out}");
    let [name, addr, _size, file] = lines[0][..] else {
        panic!("{out}");
    };
    assert_eq!(name, "labs", "{out}");
    assert!(file.ends_with("/libc.so.6"), "{out}");
    let nm = nm_funcs(arch, Path::new(file), true);
    let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16).unwrap();
    assert_eq!(nm.get("labs"), Some(&addr), "{out}");
    // The whole list: the program's functions, then the C library's and
    // the dynamic loader's.
    let o = Command::new(probe_exe())
        .arg("--list")
        .arg(&prog)
        .output()
        .unwrap();
    let out = String::from_utf8(o.stdout).unwrap();
    let files: BTreeSet<&str> = out.lines().filter_map(|l| l.rsplit(' ').next()).collect();
    assert!(files.contains(prog.to_str().unwrap()), "{files:?}");
    assert!(files.iter().any(|f| f.ends_with("/libc.so.6")), "{files:?}");
    assert!(files.iter().any(|f| f.contains("/ld")), "{files:?}");
}

/// A probe of a function the program only imports (`labs`, from the C
/// library) is one line naming the probe to write instead; written so,
/// as the library's file name or its path, it gives the hits `libc:`
/// gives.
#[test]
fn a_library_by_its_file_name_or_path() {
    let dir = RunDir::new();
    let arch = "mipsel";
    let prog = dyn_probe(&dir, arch);
    let r = run_probe(&dir, "alone", &["-p", "labs:return"], &prog);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!((r.status, lines.len()), (2, 1), "{}", r.stderr);
    assert!(
        lines[0].contains("probe it as libc.so.6:labs:return"),
        "{}",
        lines[0]
    );
    let hits = |tag: &str, lib: &str| -> Vec<Value> {
        let p = format!("{lib}:labs/1");
        let r = run_probe(&dir, tag, &["--json", "-p", &p], &prog);
        assert_eq!(r.status, 0, "{p}: {}", r.stderr);
        json_lines(&r.out)
            .into_iter()
            .map(|mut h| {
                h["probe"] = Value::Null;
                h["pc"] = Value::Null;
                h["tid"] = Value::Null;
                h["pid"] = Value::Null;
                h
            })
            .collect()
    };
    let by_prefix = hits("prefix", "libc");
    assert!(!by_prefix.is_empty());
    assert_eq!(hits("name", "libc.so.6"), by_prefix);
    let path = format!("/usr/{}/lib/libc.so.6", guest_info(arch).triple.unwrap());
    assert_eq!(hits("path", &path), by_prefix);
}

/// The cross `nm` of `file` (`-D`: its dynamic symbols): each defined
/// function's address (ARM: even).
fn nm_funcs(arch: &str, file: &Path, dynamic: bool) -> BTreeMap<String, u64> {
    let nm = match guest_info(arch).triple {
        Some(t) => format!("{t}-nm"),
        None => "nm".into(),
    };
    let mut cmd = Command::new(&nm);
    if dynamic {
        cmd.arg("-D");
    }
    let o = cmd
        .arg("--defined-only")
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("{nm}: {e}"));
    assert!(o.status.success(), "{nm} {}", file.display());
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let [addr, ty, name] = w[..] else {
                return None;
            };
            if !matches!(ty, "T" | "t" | "W" | "i") {
                return None;
            }
            let a = u64::from_str_radix(addr, 16).ok()?;
            let a = if arch == "arm" { a & !1 } else { a };
            Some((name.split('@').next().unwrap().to_string(), a))
        })
        .collect()
}

/// The load bias the entry hits of `hits` imply: each one's pc less the
/// `nm` address of its function is one and the same page-aligned bias
/// (on ppc64le the probe sits at the ELFv2 local entry, up to 16 bytes
/// on).
fn load_bias(arch: &str, hits: &[Value], nm: &BTreeMap<String, u64>) -> u64 {
    let mut biases = BTreeSet::new();
    for h in hits.iter().filter(|h| h["at"] == "entry") {
        let f = h["function"].as_str().unwrap();
        let at = nm.get(f).unwrap_or_else(|| panic!("{arch}: nm lacks {f}"));
        let mut d = hex(&h["pc"]).unwrap().wrapping_sub(*at);
        if arch == "ppc64le" && d & 0xfff <= 16 {
            d &= !0xfff;
        }
        biases.insert(d);
    }
    assert_eq!(biases.len(), 1, "{arch}: one load bias: {biases:x?}");
    let b = biases.into_iter().next().unwrap();
    assert_eq!(b % 0x1000, 0, "{arch}: a page-aligned load bias: {b:#x}");
    b
}

/// A position-independent program (`-pie -fPIE`, Debian's default):
/// planned at link-time addresses and moved by where QEMU put it, with
/// the same known values, at the `nm` addresses plus one load bias.
fn pie_known_values(arch: &str) {
    let dir = RunDir::new();
    let prog = build(
        &dir,
        arch,
        "probe",
        "probe-pie",
        &["-O2", "-pie", "-fPIE", "-pthread"],
    );
    pie_values_and_addresses(&dir, arch, &prog);
}

/// ELF `e_type` ET_DYN.
fn is_pie(prog: &Path) -> bool {
    let b = fs::read(prog).unwrap();
    let t = if b[5] == 2 {
        [b[17], b[16]]
    } else {
        [b[16], b[17]]
    };
    u16::from_le_bytes(t) == 3
}

fn pie_values_and_addresses(dir: &RunDir, arch: &str, prog: &Path) {
    // ET_DYN: really position independent.
    assert!(is_pie(prog), "{arch}: not a PIE");
    known_values_of(dir, arch, prog);
    let r = run_probe(dir, "pie", &["--json", "-p", "pr_*"], prog);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    let hits: Vec<Value> = r
        .out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(hits.len() > 10, "{arch}: {}", r.out);
    load_bias(arch, &hits, &nm_funcs(arch, prog, false));
}

per_guest!(pie_known_values: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// A static-pie program: QEMU starts in the program itself.
fn static_pie_known_values(arch: &str) {
    let dir = RunDir::new();
    let prog = build(
        &dir,
        arch,
        "probe",
        "probe-spie",
        &["-O2", "-static-pie", "-pthread"],
    );
    pie_values_and_addresses(&dir, arch, &prog);
}

// The guests whose Debian cross toolchain links -static-pie.
per_guest!(static_pie_known_values: aarch64, x86_64, i386);

/// `LIB:FUNC` probes in a position-independent program: the known values,
/// at the cross `nm -D` addresses of the library plus a load bias.
fn pie_library_functions(arch: &str) {
    let dir = RunDir::new();
    let prog = build(
        &dir,
        arch,
        "dyn_probe",
        "dyn_probe-pie",
        &["-O2", "-pie", "-fPIE"],
    );
    assert!(is_pie(&prog), "{arch}: not a PIE");
    let hits = library_functions_of(&dir, arch, &prog);
    let o = Command::new(probe_exe())
        .args(["--list", "libc:labs"])
        .arg(&prog)
        .output()
        .unwrap();
    let out = String::from_utf8(o.stdout).unwrap();
    let libc = PathBuf::from(out.split_whitespace().nth(3).expect("a libc path"));
    let labs: Vec<Value> = hits
        .into_iter()
        .filter(|h| h["function"] == "labs")
        .collect();
    assert_eq!(labs.len(), 6, "{arch}");
    load_bias(arch, &labs, &nm_funcs(arch, &libc, true));
}

per_guest!(pie_library_functions: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// A recording of a position-independent program: the program's mapping
/// event places it.
#[test]
fn pie_replayed() {
    let dir = RunDir::new();
    let prog = build(
        &dir,
        "aarch64",
        "dyn_probe",
        "dyn_probe-pie",
        &["-O2", "-pie", "-fPIE"],
    );
    let probes = [
        "-p",
        "main/1",
        "-p",
        "libc:labs/1",
        "-p",
        "libc:atoi:return",
    ];
    let live = replay_matches_live(&dir, &prog, &probes, &[], "pie.cnl");
    assert_eq!(live.out.lines().count(), 7, "{}", live.out);
}

/// A live probe is read as the program runs: a hit shows while the program
/// still sleeps in a syscall (here `read` of a pipe nobody writes yet), not
/// when it ends. The test does not let the program go on until it has read
/// the hit, so the order is the test's, not a matter of timing. Before the
/// hook library handed over a thread's events ahead of a syscall that
/// sleeps, and the probe flushed its output while running, the hit waited
/// in the thread's chunk (and then in the buffer) until the program exited.
fn hits_are_seen_while_the_program_sleeps(arch: &str) {
    let dir = RunDir::new();
    let prog = guest(arch, "busybox");
    let entry = tools::probe::elf::Image::read(&prog).unwrap().entry;
    let entry = format!("{entry:#x}");
    let w = e2e::line_before_input(
        probe_cmd(&dir).args(["-p", &entry]).arg(&prog).args([
            "sh",
            "-c",
            "read x; echo \"got $x\"",
        ]),
        |_| true,
    );
    let (rest, stderr) = (&w.rest, &w.stderr);
    let first = w.seen.as_deref().unwrap_or_else(|| {
        panic!("{arch}: no hit while the program waited in read; later: {rest:?}\n{stderr}")
    });
    assert!(
        first.contains(&format!(" {entry} ")),
        "{arch}: the first line is not the hit at {entry}: {first}\n{stderr}"
    );
    assert_eq!(w.status.code(), Some(0), "{arch}: {stderr}");
    assert_eq!(rest, &["got go"], "{arch}: {stderr}");
}

#[test]
fn hits_are_seen_while_the_program_sleeps_x86_64() {
    hits_are_seen_while_the_program_sleeps("x86_64");
}

#[test]
fn hits_are_seen_while_the_program_sleeps_mipsel() {
    hits_are_seen_while_the_program_sleeps("mipsel");
}

/// A hit reaches the live output while the program runs on without
/// sleeping: `probe spin` calls `pr_add6` once, then reads its stdin in a
/// non-blocking loop (syscalls that return at once, so no hand-over before
/// a sleep) until a line comes. The line is written only once the hit was
/// seen; until then the loop goes on (a hang guard ends the wait).
fn hits_are_seen_while_the_program_runs_on(arch: &str) {
    let dir = RunDir::new();
    let prog = guest(arch, "probe");
    let w = e2e::line_before_input(
        probe_cmd(&dir)
            // Three arguments: in registers on both guests, so the probe
            // asks for no stores (mipsel's fifth is on the stack), which
            // would fill a chunk in the loop.
            .args(["-p", "pr_add6/3"])
            .arg(&prog)
            .arg("spin"),
        |l| l.contains(" pr_add6/3 "),
    );
    let (before, rest, stderr) = (&w.before, &w.rest, &w.stderr);
    let hit = w.seen.as_deref().unwrap_or_else(|| {
        panic!("{arch}: no hit while the program ran on; before: {before:?}, later: {rest:?}\n{stderr}")
    });
    assert!(
        hit.contains("arg0=0x1 arg1=0x2 arg2=0x3"),
        "{arch}: not the call pr_add6(1, 2, ...): {hit}\n{stderr}"
    );
    assert_eq!(w.status.code(), Some(0), "{arch}: {stderr}");
    assert!(
        rest.iter().any(|l| l == "got go"),
        "{arch}: the program did not read the line: {rest:?}\n{stderr}"
    );
}

#[test]
fn hits_are_seen_while_the_program_runs_on_x86_64() {
    hits_are_seen_while_the_program_runs_on("x86_64");
}

#[test]
fn hits_are_seen_while_the_program_runs_on_mipsel() {
    hits_are_seen_while_the_program_runs_on("mipsel");
}

/// A Go program's functions, by Go's conventions (`tests/programs/goprobe.go`
/// prints every call's arguments and result): the arguments on every
/// guest, from Go's registers on x86_64 (not C's) and from the stack on
/// the ABI0 guests; the results, recursion included, from Go's result
/// register, or on the ABI0 guests from the stack slot the program's DWARF
/// places (without DWARF: `null`, and one warning line).
fn go_known_values(arch: &str) {
    let dir = RunDir::new();
    go_known_values_of(&dir, arch, &guest(arch, "goprobe"), true);
}

/// `dwarf`: the program has its DWARF, which places ABI0's results.
fn go_known_values_of(dir: &RunDir, arch: &str, prog: &Path, dwarf: bool) {
    let probes = [
        "main.mix/3",
        "main.mix:return",
        "main.fact/1",
        "main.fact:return",
        "main.wide/10",
        "main.wide:return",
        "main.leaf/2",
        "main.leaf:return",
    ];
    let mut opts = vec!["--json"];
    for p in probes {
        opts.extend(["-p", p]);
    }
    let r = run_probe(dir, arch, &opts, prog);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    // The program's word: `name args... = result`, in the order of returns.
    let said = |name: &str| -> Vec<(Vec<u64>, u64)> {
        r.stdout
            .lines()
            .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map(|l| {
                let (args, res) = l.split_once(" = ").expect("name args = result");
                let n = |s: &str| s.parse::<u64>().expect("a number");
                (args.split(' ').map(n).collect(), n(res))
            })
            .collect()
    };
    let (mix, fact, wide, leaf) = (said("mix"), said("fact"), said("wide"), said("leaf"));
    let counts = (mix.len(), fact.len(), wide.len(), leaf.len());
    assert_eq!(counts, (3, 5, 1, 1), "{arch}: {}", r.stdout);
    let by = hits_by_thread(&r.out);
    assert_eq!(by.len(), 1, "{arch}: one thread (LockOSThread): {}", r.out);
    let hits = &by[0].1;
    // A Go prologue whose stack the runtime moved (`morestack`) runs again
    // from the entry on the new stack: a second entry, the same call (see
    // the note in `Probe::entered`). No call of this program repeats the
    // one before it, so a hit equal to the one before is that, and is
    // dropped here.
    let of = |probe: &str| -> Vec<&Value> {
        let mut v: Vec<&Value> = hits.iter().filter(|h| h["probe"] == probe).collect();
        v.dedup_by(|b, a| {
            let known = a["at"] == "entry" || !a["ret"].is_null();
            known && a["args"] == b["args"] && a["ret"] == b["ret"]
        });
        v
    };
    let args = |h: &&Value| -> Vec<u64> {
        h["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| hex(a).expect("known"))
            .collect()
    };
    // Calls, in the order of their entries: mix returns before the next
    // call, fact's levels enter outermost first.
    let mix_args: Vec<Vec<u64>> = mix.iter().map(|(a, _)| a.clone()).collect();
    let fact_args: Vec<Vec<u64>> = fact.iter().rev().map(|(a, _)| a.clone()).collect();
    assert_eq!(
        of("main.mix/3").iter().map(args).collect::<Vec<_>>(),
        mix_args,
        "{arch}"
    );
    assert_eq!(
        of("main.fact/1").iter().map(args).collect::<Vec<_>>(),
        fact_args,
        "{arch}"
    );
    assert_eq!(
        of("main.wide/10").iter().map(args).collect::<Vec<_>>(),
        [wide[0].0.clone()],
        "{arch}: ten arguments"
    );
    assert_eq!(
        of("main.leaf/2").iter().map(args).collect::<Vec<_>>(),
        [leaf[0].0.clone()],
        "{arch}: a leaf"
    );
    let abi0 = matches!(arch, "mipsel" | "mips" | "mips64el" | "arm" | "i386");
    let unread = abi0 && !dwarf;
    let rets = [
        ("main.mix:return", &mix),
        ("main.fact:return", &fact),
        ("main.wide:return", &wide),
        ("main.leaf:return", &leaf),
    ];
    for (probe, said) in rets {
        let rets: Vec<Option<u64>> = of(probe).iter().map(|h| hex(&h["ret"])).collect();
        let want: Vec<Option<u64>> = said.iter().map(|(_, r)| (!unread).then_some(*r)).collect();
        assert_eq!(rets, want, "{arch}: {probe}");
    }
    let warned = r.stderr.contains("Go's ABI0");
    assert_eq!(warned, unread, "{arch}: {}", r.stderr);
}

per_guest!(go_known_values: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// Goroutines that block inside a probed function (`goprobe relay`: a ring
/// of four passing a token, each waiting for it inside `relay`): several
/// goroutines are inside `relay` at once on one thread, and a call often
/// returns on another thread than the one it entered on. Every call's
/// entry and return are there, with the arguments and result the program
/// printed, each at depth 1 of its own goroutine, and none taken for a
/// `longjmp` (`unwound`). Frames kept per thread nested the parked
/// goroutines' calls and lost the returns that came on another thread.
/// Not i386: Go keeps the running goroutine in thread-local storage there,
/// and its frames stay per thread.
fn go_goroutines(arch: &str) {
    let dir = RunDir::new();
    let opts = ["--json", "-p", "main.relay/2", "-p", "main.relay:return"];
    let r = run_probe_args(&dir, arch, &opts, &guest(arch, "goprobe"), &["relay"]);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    let mut said: Vec<(Vec<u64>, u64)> = r
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("relay "))
        .map(|l| {
            let (args, res) = l.split_once(" = ").expect("relay id round = result");
            let n = |s: &str| s.parse::<u64>().expect("a number");
            (args.split(' ').map(n).collect(), n(res))
        })
        .collect();
    assert_eq!(said.len(), 100, "{arch}: {}", r.stdout);
    let hits: Vec<Value> = json_lines(&r.out);
    let bad: Vec<&Value> = hits
        .iter()
        .filter(|h| h["depth"] != 1 || h["unwound"] == true)
        .collect();
    assert!(bad.is_empty(), "{arch}: nested or unwound: {bad:?}");
    let mut entries: Vec<Vec<u64>> = hits
        .iter()
        .filter(|h| h["at"] == "entry")
        .map(|h| {
            let a = h["args"].as_array().expect("args");
            a.iter().map(|a| hex(a).expect("known")).collect()
        })
        .collect();
    let mut rets: Vec<u64> = hits
        .iter()
        .filter(|h| h["at"] == "return")
        .map(|h| hex(&h["ret"]).expect("a result"))
        .collect();
    said.sort();
    entries.sort();
    rets.sort_unstable();
    let want_args: Vec<Vec<u64>> = said.iter().map(|(a, _)| a.clone()).collect();
    let mut want_rets: Vec<u64> = said.iter().map(|(_, v)| *v).collect();
    want_rets.sort_unstable();
    assert_eq!(entries, want_args, "{arch}: entries");
    assert_eq!(rets, want_rets, "{arch}: returns");
}

per_guest!(go_goroutines: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, ppc64le);

/// Go functions whose arguments are on the stack where `goprobe`'s are
/// not (`tests/programs/goasm`): `asmmix`, assembly on the guests where Go
/// has a register convention (under its stack one there, ABI0, its symbol
/// `main.asmmix.abi0`, probed by its Go name), and `many`, 18 arguments,
/// past every register convention's registers (Go's stack slots follow
/// the frame's fixed words: 8 bytes on aarch64 and riscv64, 32 on
/// ppc64le). Every entry's arguments are what the program printed, and
/// `many`'s result. An assembly function's result has no place anything
/// in the program gives: `null`, and one warning line naming it; the
/// other guests' `asmmix` is Go, whose result is read.
fn go_stack_arguments(arch: &str) {
    let dir = RunDir::new();
    let opts = [
        "--json",
        "-p",
        "main.asmmix/3",
        "-p",
        "main.asmmix:return",
        "-p",
        "main.many/18",
        "-p",
        "main.many:return",
    ];
    let r = run_probe_args(&dir, arch, &opts, &guest(arch, "goasm"), &[]);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    let said = |name: &str| -> Vec<(Vec<u64>, u64)> {
        r.stdout
            .lines()
            .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map(|l| {
                let (args, res) = l.split_once(" = ").expect("name args = result");
                let n = |s: &str| s.parse::<u64>().expect("a number");
                (args.split(' ').map(n).collect(), n(res))
            })
            .collect()
    };
    let (mix, many) = (said("asmmix"), said("many"));
    assert_eq!((mix.len(), many.len()), (2, 1), "{arch}: {}", r.stdout);
    let hits: Vec<Value> = json_lines(&r.out);
    let of = |probe: &str| -> Vec<&Value> { hits.iter().filter(|h| h["probe"] == probe).collect() };
    let args = known_args;
    let got: Vec<Vec<u64>> = of("main.asmmix/3").iter().map(|h| args(h)).collect();
    let want: Vec<Vec<u64>> = mix.iter().map(|(a, _)| a.clone()).collect();
    assert_eq!(got, want, "{arch}: asmmix's arguments");
    let got: Vec<Vec<u64>> = of("main.many/18").iter().map(|h| args(h)).collect();
    assert_eq!(got, vec![many[0].0.clone()], "{arch}: many's arguments");
    let rets = |p: &str| -> Vec<Option<u64>> { of(p).iter().map(|h| hex(&h["ret"])).collect() };
    assert_eq!(
        rets("main.many:return"),
        [Some(many[0].1)],
        "{arch}: many's result"
    );
    let asm = matches!(arch, "x86_64" | "aarch64" | "riscv64" | "ppc64le");
    let want: Vec<Option<u64>> = mix.iter().map(|&(_, v)| (!asm).then_some(v)).collect();
    assert_eq!(rets("main.asmmix:return"), want, "{arch}: asmmix's results");
    let warned = r.stderr.contains("is Go assembly") && r.stderr.contains("main.asmmix.abi0");
    assert_eq!(warned, asm, "{arch}: {}", r.stderr);
}

per_guest!(go_stack_arguments: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// A goroutine's stack that the runtime moves while probed frames are
/// open (`goprobe grow`: each of four new goroutines recurses 200 levels
/// of `deep` below `grown`, and its stack is copied to a larger one about
/// six times on the way down). Every frame moves with it: each `deep(k)`
/// shows one entry, whose argument is `k`, and one return at the same
/// depth, 202 - k, with `k(k+1)/2`; `grown`'s return gives what the
/// program printed; nothing is taken for a frame a panic unwound. Without
/// following the moves the frames kept their old stack pointers: a
/// prologue's re-run on the new stack was a second entry, and every
/// return after it ended the frames as `unwound`. On i386, where Go keeps
/// frames per thread (`g` is not in a register), the thread that moves
/// the stack moves its frames.
fn go_stack_moves(arch: &str) {
    let dir = RunDir::new();
    let opts = [
        "--json",
        "-p",
        "main.grown/2",
        "-p",
        "main.grown:return",
        "-p",
        "main.deep/1",
        "-p",
        "main.deep:return",
    ];
    let r = run_probe_args(&dir, arch, &opts, &guest(arch, "goprobe"), &["grow"]);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    let said: Vec<(u64, u64)> = r
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("grown "))
        .map(|l| {
            let (args, res) = l.split_once(" 200 = ").expect("grown id 200 = result");
            let n = |s: &str| s.parse::<u64>().expect("a number");
            (n(args), n(res))
        })
        .collect();
    assert_eq!(said.len(), 4, "{arch}: {}", r.stdout);
    let hits: Vec<Value> = json_lines(&r.out);
    let unwound: Vec<&Value> = hits.iter().filter(|h| h["unwound"] == true).collect();
    assert!(unwound.is_empty(), "{arch}: unwound: {unwound:?}");
    let of = |f: &str, at: &str| -> Vec<&Value> {
        hits.iter()
            .filter(|h| h["function"] == f && h["at"] == at)
            .collect()
    };
    let depth = |h: &Value| h["depth"].as_u64().expect("a depth");
    let args = known_args;
    let mut grown: Vec<Vec<u64>> = of("main.grown", "entry").iter().map(|h| args(h)).collect();
    grown.sort();
    let want: Vec<Vec<u64>> = said.iter().map(|&(id, _)| vec![id, 200]).collect();
    assert_eq!(grown, want, "{arch}: grown's entries");
    let mut rets: Vec<(u64, u64)> = of("main.grown", "return")
        .iter()
        .map(|h| (depth(h), hex(&h["ret"]).expect("a result")))
        .collect();
    rets.sort_unstable();
    let want: Vec<(u64, u64)> = said.iter().map(|&(_, v)| (1, v)).collect();
    assert_eq!(rets, want, "{arch}: grown's returns");
    // deep(k), at depth 202 - k, returns k(k+1)/2: (depth, k) at entries,
    // (depth, result) at returns, each level once per goroutine.
    let level = |k: u64| (202 - k, k);
    let mut entries: Vec<(u64, u64)> = of("main.deep", "entry")
        .iter()
        .map(|h| (depth(h), args(h)[0]))
        .collect();
    entries.sort_unstable();
    let mut want: Vec<(u64, u64)> = (0..=200).flat_map(|k| [level(k); 4]).collect();
    want.sort_unstable();
    assert_eq!(entries, want, "{arch}: deep's entries");
    let mut rets: Vec<(u64, u64)> = of("main.deep", "return")
        .iter()
        .map(|h| (depth(h), hex(&h["ret"]).expect("a result")))
        .collect();
    rets.sort_unstable();
    let mut want: Vec<(u64, u64)> = (0..=200u64)
        .flat_map(|k| [(202 - k, k * (k + 1) / 2); 4])
        .collect();
    want.sort_unstable();
    assert_eq!(rets, want, "{arch}: deep's returns");
    // Stripped, the runtime's functions come from its own table, and
    // `stackalloc`'s result from its signature (no DWARF): the same hits,
    // none unwound (no results on the ABI0 guests).
    let prog = strip(&dir, arch, &guest(arch, "goprobe"));
    let r = run_probe_args(&dir, arch, &opts, &prog, &["grow"]);
    assert_eq!(r.status, 0, "{arch}: {}", r.stderr);
    let stripped: Vec<Value> = json_lines(&r.out);
    let said = |h: &Value| {
        (
            h["function"].clone(),
            h["at"].clone(),
            depth(h),
            h["unwound"].clone(),
        )
    };
    let mut a: Vec<_> = hits.iter().map(said).collect();
    let mut b: Vec<_> = stripped.iter().map(said).collect();
    a.sort_by_key(|h| format!("{h:?}"));
    b.sort_by_key(|h| format!("{h:?}"));
    assert_eq!(a, b, "{arch}: stripped");
}

per_guest!(go_stack_moves: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// A real Go program, the host's own `gofmt` (Debian's golang-go: static
/// and stripped, so its functions come from `.gopclntab`), with every
/// function probed while it checks Go's `sort` package: some 2.7 million
/// calls on four to six threads, the collector's and the preemption
/// signals' handlers among them. Every call comes in its turn: the run is
/// complete (status 0, no `INCOMPLETE`). Before threads ran ahead waited
/// for the one behind (`goroutine::Table`), a thread's calls in a signal
/// handler came after half a million later ones, and the run ended
/// INCOMPLETE (exit 3) on every try on the 2-core VM.
#[test]
fn go_host_program() {
    let gofmt = Path::new("/usr/lib/go/bin/gofmt");
    let sort = Path::new("/usr/lib/go/src/sort");
    assert!(
        gofmt.exists() && sort.is_dir(),
        "{} or {}: not there; install golang-go (scripts/deps.sh)",
        gofmt.display(),
        sort.display()
    );
    let dir = RunDir::new();
    let o = probe_cmd(&dir)
        .args(["--json", "-p", "*", "-p", "*:return", "-o", "/dev/null"])
        .arg(gofmt)
        .arg("-l")
        .arg(sort)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("INCOMPLETE"), "{stderr}");
    // `gofmt -l` names the files it would change: none of Go's own.
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let hits: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("probe: ")?.split_once(" hits of "))
        .map(|(n, _)| n.parse().expect("a count"))
        .unwrap_or_else(|| panic!("no count of hits: {stderr}"));
    assert!(hits > 1_000_000, "{hits} hits: {stderr}");
}

/// A recording has no order numbers between its threads (`--hooks regs`):
/// a goroutine's return that comes before its entry (which another thread
/// ran, and whose stream comes later) is never lost silently. Either
/// every call of `goprobe relay` is there, or the run says how many calls
/// may be out of order, at least as many as the hits missing, is
/// INCOMPLETE, and exits 3.
#[test]
fn go_goroutines_replayed() {
    let dir = RunDir::new();
    let prog = guest("x86_64", "goprobe");
    let rec = dir.file("relay.cnl");
    record(&dir, Some("regs"), &rec, &prog, &["relay"]);
    let opts = [
        "--json",
        "--replay",
        rec.to_str().unwrap(),
        "-p",
        "main.relay/2",
        "-p",
        "main.relay:return",
    ];
    let r = run_probe(&dir, "replay", &opts, Path::new("--"));
    let at = |w: &str| r.out.lines().filter(|l| l.contains(w)).count();
    let missing = 200 - at("\"at\":\"entry\"") - at("\"at\":\"return\"");
    let said = r
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("probe: INCOMPLETE: "))
        .and_then(|l| l.split_once(" Go calls may be out of order"))
        .map(|(n, _)| n.parse::<usize>().expect("a count"));
    match said {
        None => assert_eq!((r.status, missing), (0, 0), "{}", r.stderr),
        Some(n) => {
            assert_eq!(r.status, 3, "{}", r.stderr);
            assert!(n >= missing, "{missing} hits missing: {}", r.stderr);
        }
    }
}

/// `prog` stripped by the guest's cross `strip` (symbols and DWARF gone,
/// as Go programs without source come), in `dir`.
fn strip(dir: &RunDir, arch: &str, prog: &Path) -> PathBuf {
    let stripped = dir.file("goprobe-stripped");
    let strip = match guest_info(arch).triple {
        Some(t) => format!("{t}-strip"),
        None => "strip".into(),
    };
    let o = Command::new(&strip)
        .arg("-o")
        .arg(&stripped)
        .arg(prog)
        .output()
        .unwrap_or_else(|e| panic!("{strip}: {e}; install it with scripts/deps.sh"));
    assert!(
        o.status.success(),
        "{strip}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        nm_funcs(arch, &stripped, false).is_empty(),
        "{arch}: {strip} left symbols"
    );
    stripped
}

/// A Go program stripped of its symbol table (the cross `strip`, as Go
/// programs without source come): its functions come from the runtime's
/// own table, `.gopclntab`, each at the address the cross `nm` of the
/// unstripped program gives it, and its probes give the known values (no
/// results on the ABI0 guests: its DWARF went too).
fn go_stripped(arch: &str) {
    let dir = RunDir::new();
    let prog = guest(arch, "goprobe");
    let stripped = strip(&dir, arch, &prog);
    let listed = listed(&dir, arch, &["--list", "*"], &stripped);
    let nm = nm_funcs(arch, &prog, false);
    let starts: BTreeSet<u64> = nm.values().copied().collect();
    assert!(listed.len() > 500, "{arch}: {} functions", listed.len());
    for (name, at) in &listed {
        // `nm_funcs` reads no name with a space in it (`struct { .. }`).
        if name.contains(' ') {
            continue;
        }
        assert!(starts.contains(at), "{arch}: no symbol at {at:#x} ({name})");
        // The runtime's table shortens long array types (`[...]`), and
        // names an assembly function without the symbol's `.abi0`.
        if !name.contains("[...]") {
            let abi0 = format!("{name}.abi0");
            assert!(
                nm.get(name) == Some(at) || nm.get(&abi0) == Some(at),
                "{arch}: {name} at {at:#x}, nm: {:x?} {:x?}",
                nm.get(name),
                nm.get(&abi0)
            );
        }
    }
    for f in ["main.mix", "main.fact", "main.main", "runtime.mallocgc"] {
        assert!(listed.iter().any(|(n, _)| n == f), "{arch}: {f} not listed");
    }
    go_known_values_of(&dir, arch, &stripped, false);
}

per_guest!(go_stripped: mipsel, mips, mips64el, arm, aarch64, riscv64, x86_64, i386, ppc64le);

/// Probes belong to the program they name: a shell that execs another
/// program keeps its pid, but the address of the other program's
/// `hb_leak` (which the shell never runs) is other code in the shell's
/// plan. Probed there, `heapbugs leak` run by itself hits it once; run
/// through the shell's exec, it is not probed, and a line says so.
fn exec_of_another_program(arch: &str) {
    let dir = RunDir::new();
    let sh = guest(arch, "busybox");
    let hb = guest(arch, "heapbugs");
    let at = nm_funcs(arch, &hb, false)["hb_leak"];
    let p = format!("{at:#x}");
    let alone = run_probe_args(&dir, "alone", &["--json", "-p", &p], &hb, &["leak"]);
    assert_eq!(json_lines(&alone.out).len(), 1, "{arch}: {}", alone.stderr);
    let script = format!("exec {} leak", hb.display());
    let r = run_probe_args(
        &dir,
        "sh",
        &["--json", "-p", &p],
        &sh,
        &["sh", "-c", &script],
    );
    let line = format!("exec'd {}, not {}", hb.display(), sh.display());
    assert!(
        r.status == 0 && json_lines(&r.out).is_empty() && r.stderr.contains(&line),
        "{arch}: exit {}\n{}\n{}",
        r.status,
        r.out,
        r.stderr
    );
}

per_guest!(exec_of_another_program: mipsel, x86_64, aarch64);
