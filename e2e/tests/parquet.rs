// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli export parquet`, queried with DuckDB (`e2e::parquet::duckdb`),
//! against ground truth nobody here wrote:
//!
//! * `count(*)` of `insns` is QEMU's `libinsn` total of the same program
//!   under the same conditions, `count(*)` of `mem` is the number of
//!   accesses `libmem` prints;
//! * the last writer of an address before a point (the store with the
//!   highest seq below it), for loads sampled over the whole run, is the
//!   last `S` line to that address before the load's line in the
//!   recording's dump (`cannoli-dump --replay`; a stream's seq is its line
//!   number there), and the exported (seq, pc) pairs are the dump's;
//! * the top functions by executed instructions (insns joined with
//!   symbols) have the counts of the dump's `X` lines inside each
//!   function's `[start, end)` as the ELF file says (`e2e::ground::Elf`,
//!   read with `object`, not the exporter's symbol code), and every table
//!   is readable;
//! * every row of `insns` and `mem`, by sums weighted with the row's seq,
//!   is the dump's, and every `offset` is `pc` less its module's base
//!   (the exporter writes these pages itself, so every value is checked).
//!
//! On `sortcrc 300` (not stripped, so it has symbols), mipsel and riscv64
//! (a 32- and a 64-bit guest), and the host's own `/usr/bin/sha256sum` as
//! the x86_64 guest (shared libraries, 16-byte accesses). Needs `cargo build --release --workspace`,
//! the QEMU builds and DuckDB's Python wheel (`scripts/deps.sh`).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use e2e::ground::Elf;
use e2e::parquet::duckdb;
use e2e::recording::Tool;
use e2e::*;

/// A hang guard, not a time limit: runs take seconds.
const LIMIT: Duration = Duration::from_secs(600);

/// The dump of one stream: X lines' pcs by line number, S and L lines.
struct Dump {
    /// (line, pc) of every `X` line.
    exec: Vec<(u64, u64)>,
    /// (line, pc, address, value, size) of every `L` line.
    loads: Vec<(u64, u64, u64, u128, u64)>,
    /// (line, pc, address, value, size) of every `S` line.
    stores: Vec<(u64, u64, u64, u128, u64)>,
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s, 16).unwrap_or_else(|_| panic!("not hex: {s}"))
}

fn read_dump(p: &Path) -> Dump {
    let mut d = Dump {
        exec: Vec::new(),
        loads: Vec::new(),
        stores: Vec::new(),
    };
    let mut n = 0u64;
    e2e::lines::for_each_line(p, |_, line| {
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "X" => d.exec.push((n, hex(f[1]))),
            "L" | "S" => {
                let v = u128::from_str_radix(f[4], 16).map_err(|e| e.to_string())?;
                let size = f[3].parse().map_err(|e| format!("size {}: {e}", f[3]))?;
                let row = (n, hex(f[1]), hex(f[2]), v, size);
                if f[0] == "L" {
                    d.loads.push(row)
                } else {
                    d.stores.push(row)
                }
            }
            _ => {}
        }
        n += 1;
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    d
}

/// `sortcrc 300` (ours, with symbols: the top functions are checked), or
/// on x86_64 the host's own dynamically linked `/usr/bin/sha256sum` (the
/// loader and libc as modules, 16-byte accesses).
fn case(arch: &str) {
    let start = Instant::now();
    let dir = RunDir::new();
    let host = arch == "x86_64";
    let (prog, args) = if host {
        std::fs::write(dir.file("in.txt"), words(3000)).expect("in.txt");
        (std::path::PathBuf::from("/usr/bin/sha256sum"), ["in.txt"])
    } else {
        (guest(arch, "sortcrc"), ["300"])
    };
    let f = Failures::new(format!("export parquet: {} on {arch}", prog.display()));

    // Ground truth: QEMU's plugins.
    let (_, log) = run_plugin(&dir, "insn", arch, Plugin::Insn, &prog, &args);
    let insns = parse_insn(&log).unwrap_or_else(|e| panic!("{e}")).total;
    let (_, log) = run_plugin(&dir, "mem", arch, Plugin::Mem, &prog, &args);
    let accesses = parse_mem(&log).unwrap_or_else(|e| panic!("{e}")).len() as u64;

    let rec = dir.file("run.cnl");
    let out = dir.file("pq");
    let dump = dir.file("dump.txt");
    let runs = [
        (
            "record",
            Tool::new("cannoli")
                .args(["record", "--hooks", "mem", "-o"])
                .arg(&rec)
                .arg(&prog)
                .args(args),
        ),
        (
            "export",
            Tool::new("cannoli")
                .args(["export", "parquet"])
                .arg(&rec)
                .arg("-o")
                .arg(&out),
        ),
        (
            "dump",
            Tool::new("cannoli-dump")
                .arg("--replay")
                .arg(&rec)
                .arg("--out")
                .arg(&dump),
        ),
    ];
    for (tag, t) in runs {
        match t.run(&dir, tag, LIMIT) {
            Ok(r) => {
                if !f.check(tag, r.expect_code(0)) {
                    f.finish();
                    return;
                }
            }
            Err(e) => {
                f.fail(tag, e);
                f.finish();
                return;
            }
        }
    }
    let d = read_dump(&dump);

    // Loads sampled over the run whose address was stored to before.
    let mut last_store: HashMap<u64, (u64, u64, u128)> = HashMap::new();
    let mut samples = Vec::new();
    let mut si = 0;
    let step = (d.loads.len() / 40).max(1);
    for (i, &(line, _, addr, _, _)) in d.loads.iter().enumerate() {
        while si < d.stores.len() && d.stores[si].0 < line {
            let (l, pc, a, v, _) = d.stores[si];
            last_store.insert(a, (l, pc, v));
            si += 1;
        }
        if i % step == 0 {
            if let Some(&w) = last_store.get(&addr) {
                samples.push((addr, line, w));
            }
        }
    }
    let values: Vec<String> = samples
        .iter()
        .map(|(a, p, _)| format!("({a}, {p})"))
        .collect();
    let xs: Vec<String> = d
        .exec
        .iter()
        .step_by((d.exec.len() / 50).max(1))
        .map(|(l, pc)| format!("({l}, {pc})"))
        .collect();

    let q = |t: &str| format!("read_parquet('{{dir}}/{t}/*.parquet')");
    let queries = vec![
        format!("select count(*) from {}", q("insns")),
        format!("select count(*) from {}", q("mem")),
        // The last writer of each sampled address before each point.
        format!(
            "select t.a, t.p, w.seq, w.pc, w.value, w.size from (values {}) t(a, p), \
             lateral (select seq, pc, value, size from {} m where m.kind = 'store' \
             and m.address = t.a and m.seq < t.p order by m.seq desc limit 1) w order by t.p",
            values.join(", "),
            q("mem")
        ),
        // Exported (seq, pc) pairs that are the dump's.
        format!(
            "select count(*) from {} i join (values {}) v(s, p) on i.seq = v.s and i.pc = v.p",
            q("insns"),
            xs.join(", ")
        ),
        format!(
            "select s.name, count(*) as n from {} i join {} s on i.symbol = s.id \
             group by s.name order by n desc, s.name limit 8",
            q("insns"),
            q("symbols")
        ),
        format!(
            "select (select count(*) from {}), (select count(*) from {}), (select count(*) from {}), \
             (select count(*) from {}), (select count(*) from {})",
            q("syscalls"),
            q("mappings"),
            q("threads"),
            q("modules"),
            q("signals")
        ),
        // Every row, by sums weighted with the row's place: a value in
        // another row, or in another column, changes them.
        format!(
            "select count(*), sum(seq), sum(pc::hugeint * (seq + 1)) from {}",
            q("insns")
        ),
        format!(
            "select count(*), sum(seq), sum(pc::hugeint * (seq + 1)), \
             sum(address::hugeint * (seq + 1)), sum(size::hugeint * (seq + 1)), \
             sum(case when kind = 'store' then seq + 1 else 0 end), \
             sum(value::hugeint * (seq + 1)), count(value_hi), \
             sum(coalesce(value_hi, 0)::hugeint * (seq + 1)) from {}",
            q("mem")
        ),
        // Offsets are from their module's base.
        format!(
            "select count(*), count(i.module), \
             count(*) filter (where i.\"offset\" = i.pc - m.base) \
             from {} i left join {} m on i.module = m.id",
            q("insns"),
            q("modules")
        ),
    ];
    let res = match duckdb(&out, &queries) {
        Ok(r) => r,
        Err(e) => {
            f.fail("duckdb", e);
            f.finish();
            return;
        }
    };
    let one = |i: usize| res[i][0][0].parse::<u64>().unwrap_or(u64::MAX);
    if one(0) != insns {
        f.fail(
            "insns",
            format!("count(*) {}, libinsn counted {insns}", one(0)),
        );
    }
    if one(1) != accesses {
        f.fail(
            "mem",
            format!("count(*) {}, libmem printed {accesses}", one(1)),
        );
    }

    // Last writers.
    let got = &res[2];
    if samples.len() < 10 || got.len() != samples.len() {
        f.fail(
            "last writer",
            format!("{} sampled loads, {} answers", samples.len(), got.len()),
        );
    }
    for (row, (a, p, (wl, wpc, wv))) in got.iter().zip(&samples) {
        let want = [
            a.to_string(),
            p.to_string(),
            wl.to_string(),
            wpc.to_string(),
            ((*wv as u64) as i64).to_string(),
        ];
        if row[..5] != want {
            f.fail(
                "last writer",
                format!("address {a:#x} before seq {p}: DuckDB {row:?}, the dump {want:?}"),
            );
            break;
        }
    }
    if one(3) != xs.len() as u64 {
        f.fail(
            "seq",
            format!(
                "{} of {} (seq, pc) pairs of the dump in insns",
                one(3),
                xs.len()
            ),
        );
    }

    // Top functions against the ELF file and the dump (the program's own
    // functions: sortcrc's).
    let elf = Elf::open(&prog).unwrap_or_else(|e| panic!("{e}"));
    let top = if host { &[][..] } else { &res[4][..] };
    if top.len() < 5 && !host {
        f.fail("top functions", format!("only {top:?}"));
    }
    let mut prev = u64::MAX;
    for row in top {
        let (name, n) = (&row[0], row[1].parse::<u64>().unwrap_or(0));
        let want = match elf.function(name) {
            Ok((lo, hi)) => d
                .exec
                .iter()
                .filter(|(_, pc)| (lo..hi).contains(pc))
                .count() as u64,
            Err(e) => {
                f.fail("top functions", format!("{name}: {e}"));
                continue;
            }
        };
        if n != want || n > prev {
            f.fail(
                "top functions",
                format!("{name}: {n} in SQL, {want} X lines in its range (previous {prev}); top {top:?}"),
            );
        }
        prev = n;
    }
    // Every row against the dump.
    let w = |line: u64| line as i128 + 1;
    let want_insns = [
        d.exec.len() as i128,
        d.exec.iter().map(|e| e.0 as i128).sum(),
        d.exec.iter().map(|e| e.1 as i128 * w(e.0)).sum(),
    ];
    let mut acc: Vec<_> = d.loads.iter().map(|a| (a, false)).collect();
    acc.extend(d.stores.iter().map(|a| (a, true)));
    let as_i64 = |v: u128| v as u64 as i64 as i128;
    let want_mem = [
        acc.len() as i128,
        acc.iter().map(|(a, _)| a.0 as i128).sum(),
        acc.iter().map(|(a, _)| a.1 as i128 * w(a.0)).sum(),
        acc.iter().map(|(a, _)| a.2 as i128 * w(a.0)).sum(),
        acc.iter().map(|(a, _)| a.4 as i128 * w(a.0)).sum(),
        acc.iter().filter(|(_, st)| *st).map(|(a, _)| w(a.0)).sum(),
        acc.iter().map(|(a, _)| as_i64(a.3) * w(a.0)).sum(),
        acc.iter().filter(|(a, _)| a.4 == 16).count() as i128,
        acc.iter()
            .filter(|(a, _)| a.4 == 16)
            .map(|(a, _)| as_i64(a.3 >> 64) * w(a.0))
            .sum(),
    ];
    for (what, row, want) in [
        ("insns rows", &res[6][0], &want_insns[..]),
        ("mem rows", &res[7][0], &want_mem[..]),
    ] {
        let got: Vec<i128> = row.iter().map(|v| v.parse().unwrap_or(i128::MIN)).collect();
        if got != want {
            f.fail(what, format!("DuckDB sums {got:?}, the dump's {want:?}"));
        }
    }
    let offsets: Vec<u64> = res[8][0].iter().map(|v| v.parse().unwrap_or(0)).collect();
    if offsets[1] == 0 || offsets[1] != offsets[2] {
        f.fail(
            "offsets",
            format!("rows, with a module, with offset = pc - base: {offsets:?}"),
        );
    }
    let small: Vec<u64> = res[5][0].iter().map(|v| v.parse().unwrap_or(0)).collect();
    if small[0] == 0 || small[1] == 0 || small[2] != 1 || small[3] == 0 {
        f.fail(
            "small tables",
            format!("syscalls, mappings, threads, modules, signals: {small:?}"),
        );
    }
    eprintln!(
        "e2e: export parquet on {arch}: {insns} insns, {accesses} accesses ({} of 16 bytes), {} last writers, top {:?}; {:.1} s",
        want_mem[7],
        samples.len(),
        top.first(),
        start.elapsed().as_secs_f64()
    );
    f.finish();
}

#[test]
fn sortcrc_mipsel() {
    case("mipsel");
}

#[test]
fn sortcrc_riscv64() {
    case("riscv64");
}

#[test]
fn host_sha256sum_x86_64() {
    case("x86_64");
}
