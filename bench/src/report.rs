//! From samples to the report: medians, ratios, the cross-checks, the table.

use crate::config::{self, Config, Hooks, Kind};
use crate::run::Sample;
use crate::table::{self, Align};
use crate::workload::Workload;

/// All runs of one workload under one configuration.
pub struct Cell {
    pub workload: usize,
    pub config: &'static Config,
    pub samples: Vec<Sample>,
    pub errors: Vec<String>,
}

impl Cell {
    /// Median of QEMU's wall time over the runs.
    pub fn wall(&self) -> Option<f64> {
        table::median(&self.samples.iter().map(|s| s.wall).collect::<Vec<_>>())
    }
    /// "min-max" of QEMU's wall time, to show how noisy the median is.
    fn wall_range(&self) -> Option<String> {
        let w = self.samples.iter().map(|s| s.wall);
        let lo = w.clone().fold(f64::INFINITY, f64::min);
        let hi = w.fold(f64::NEG_INFINITY, f64::max);
        (lo <= hi).then(|| format!("{}-{}", table::secs(lo), table::secs(hi)))
    }
    fn total(&self) -> Option<f64> {
        table::median(&self.samples.iter().map(|s| s.total).collect::<Vec<_>>())
    }
    fn med(&self, f: impl Fn(&Sample) -> Option<u64>) -> Option<u64> {
        table::median_u64(&self.samples.iter().filter_map(f).collect::<Vec<_>>())
    }
    /// What the tool saw: the client's events, or the plugins' totals.
    fn events(&self) -> Option<u64> {
        match self.config.kind {
            Kind::Cannoli { .. } | Kind::Record { .. } | Kind::Replay { .. } => {
                self.med(|s| s.events)
            }
            Kind::Plugins(_) => self.med(|s| match (s.insns, s.mem) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
            }),
            Kind::Plain => None,
        }
    }
}

/// The reference counts of one workload.
struct Truth {
    /// Guest instructions, and where the number came from.
    insns: Option<(u64, &'static str)>,
    /// The configuration that gave `insns` and `mem` (none for the client).
    insns_config: Option<&'static str>,
    mem_config: Option<&'static str>,
    /// Guest memory accesses (libmem.so).
    mem: Option<u64>,
    /// The pc stream's checksum and the configuration that gave it: the TB
    /// peer's (every other configuration that reports one must agree).
    pc_checksum: Option<(u64, &'static str)>,
}

fn truth(cells: &[&Cell]) -> Truth {
    let plugin = |names: &[&'static str], f: fn(&Sample) -> Option<u64>| {
        names.iter().find_map(|&name| {
            cells
                .iter()
                .find(|c| c.config.name == name)
                .and_then(|c| c.med(f))
                .map(|n| (n, name))
        })
    };
    let from_libinsn = plugin(&["plugin-insn", "plugin-insn-mem"], |s| s.insns);
    let insns = from_libinsn.map(|(n, _)| (n, "libinsn.so")).or_else(|| {
        // Without a plugin run, the client's count of cannoli-pc (checked
        // equal to libinsn.so's wherever both ran) is the best we have.
        cells
            .iter()
            .find(|c| c.config.hooks() == Some(Hooks::Pc))
            .and_then(|c| c.med(|s| s.events))
            .map(|n| (n, "client"))
    });
    let mem = plugin(&["plugin-mem", "plugin-insn-mem"], |s| s.mem);
    // The first run's, not a median: checksums are equal or wrong.
    let pc_checksum = ["plugin-tb", "plugin-tb-mem"]
        .iter()
        .chain(cells.iter().map(|c| &c.config.name))
        .find_map(|&name| {
            let cell = cells.iter().find(|c| c.config.name == name)?;
            cell.samples
                .iter()
                .find_map(|s| s.pc_checksum)
                .map(|h| (h, cell.config.name))
        });
    Truth {
        insns,
        insns_config: from_libinsn.map(|(_, c)| c),
        mem_config: mem.map(|(_, c)| c),
        mem: mem.map(|(n, _)| n),
        pc_checksum,
    }
}

/// Guest instructions of workload `workload`, as the table's *guest insns*
/// column gives them: libinsn.so's count, else the client's event count of a
/// cannoli-pc row (`"client"`), with where the number came from.
pub fn guest_insns(cells: &[Cell], workload: usize) -> Option<(u64, &'static str)> {
    let wc: Vec<&Cell> = cells.iter().filter(|c| c.workload == workload).collect();
    truth(&wc).insns
}

/// The checks of one cell, as warning texts.
fn check(cell: &Cell, truth: &Truth, reference_stdout: Option<&str>) -> Vec<String> {
    let mut warn = Vec::new();
    let runs = cell.samples.len() + cell.errors.len();
    if let Some(e) = cell.errors.first() {
        warn.push(format!("{} of {runs} runs failed: {e}", cell.errors.len()));
    }
    // A replay runs no guest.
    let replay = matches!(cell.config.kind, Kind::Replay { .. });
    if let (Some(want), false) = (reference_stdout, replay) {
        if let Some(s) = cell.samples.iter().find(|s| s.stdout != want) {
            warn.push(format!(
                "guest stdout {:?} differs from {:?}",
                s.stdout.lines().next().unwrap_or(""),
                want.lines().next().unwrap_or("")
            ));
        }
    }
    for (what, f) in [
        (
            "instruction",
            (|s: &Sample| s.insns) as fn(&Sample) -> Option<u64>,
        ),
        ("memory access", |s| s.mem),
    ] {
        let v: Vec<u64> = cell.samples.iter().filter_map(f).collect();
        if let (Some(lo), Some(hi)) = (v.iter().min(), v.iter().max()) {
            if lo != hi {
                warn.push(format!("{what} count varies between runs: {lo} to {hi}"));
            }
        }
    }
    // A plugin configuration other than the reference (the TB peer, or
    // libmem.so loaded beside it) must count what the reference counts.
    let reference = [
        (
            "instruction",
            truth.insns.map(|(n, _)| n),
            truth.insns_config,
            "libinsn.so",
            (|s: &Sample| s.insns) as fn(&Sample) -> Option<u64>,
        ),
        (
            "memory access",
            truth.mem,
            truth.mem_config,
            "libmem.so",
            |s| s.mem,
        ),
    ];
    for (what, want, source, lib, f) in reference {
        let (Some(want), Some(source)) = (want, source) else {
            continue;
        };
        if cell.config.name == source {
            continue;
        }
        if let Some(got) = cell.samples.iter().filter_map(f).find(|&n| n != want) {
            warn.push(format!(
                "{what} count {} differs from {lib}'s {} in {source} (difference {:+})",
                table::count(got),
                table::count(want),
                got as i128 - want as i128
            ));
        }
    }
    // `never` traces no pc: its client folds nothing.
    let traces_pcs = cell.config.hooks() != Some(Hooks::Never);
    if let (Some((want, source)), true) = (truth.pc_checksum, traces_pcs) {
        if let Some(got) = cell
            .samples
            .iter()
            .filter_map(|s| s.pc_checksum)
            .find(|&h| h != want)
        {
            warn.push(format!(
                "pc checksum {got:#018x} differs from {source}'s {want:#018x}"
            ));
        }
    }
    if cell.config.record_hooks().is_some() {
        let lost: u64 = cell.samples.iter().filter_map(|s| s.lost).sum();
        if lost > 0 {
            warn.push(format!(
                "the recording says {} events were lost",
                table::count(lost)
            ));
        }
    }
    if let Some(hooks) = cell.config.client_hooks() {
        let expected = match hooks {
            Hooks::Never => Some((0, "no events with hooks that never trace".to_string())),
            Hooks::Pc => match truth.insns {
                Some((n, src)) if src != "client" => {
                    Some((n, format!("{src}'s instruction count")))
                }
                _ => None,
            },
            Hooks::PcMem => match (truth.insns, truth.mem) {
                (Some((n, src)), Some(m)) if src != "client" => Some((
                    n + m,
                    format!("{src}'s instructions + libmem.so's accesses"),
                )),
                _ => None,
            },
        };
        if let Some((want, what)) = expected {
            if let Some(got) = cell
                .samples
                .iter()
                .filter_map(|s| s.events)
                .find(|&e| e != want)
            {
                warn.push(format!(
                    "client counted {} events, {what} is {} (difference {:+})",
                    table::count(got),
                    table::count(want),
                    got as i128 - want as i128
                ));
            }
        }
        let lost: u64 = cell.samples.iter().filter_map(|s| s.lost).sum();
        if lost > 0 {
            warn.push(format!(
                "the client reported {} lost events",
                table::count(lost)
            ));
        }
    }
    warn
}

/// The report: host lines, the table, its legend, warnings and the RSS
/// comparison.
pub fn render(
    host: &[String],
    runs: usize,
    workloads: &[Workload],
    cells: &[Cell],
    skipped: &[String],
) -> String {
    let headers = [
        "workload",
        "config",
        "guest insns",
        "events",
        "QEMU wall s",
        "wall min-max",
        "total s",
        "guest insn/s",
        "slowdown vs plain",
        "speedup vs peer",
        "speedup vs best plugin",
        "QEMU RSS MiB",
        "client RSS MiB",
        "check",
    ];
    let mut align = vec![Align::Right; headers.len()];
    align[0] = Align::Left;
    align[1] = Align::Left;
    align[headers.len() - 1] = Align::Left;

    let mut rows = Vec::new();
    let mut warnings = Vec::new();
    let mut client_counted = false;
    for (wi, w) in workloads.iter().enumerate() {
        let wc: Vec<&Cell> = cells.iter().filter(|c| c.workload == wi).collect();
        if wc.is_empty() {
            continue;
        }
        let truth = truth(&wc);
        let find = |name: &str| wc.iter().find(|c| c.config.name == name);
        let plain_wall = find("plain").and_then(|c| c.wall());
        let reference_stdout = w.expect_stdout.clone().or_else(|| {
            find("plain")
                .or(wc.first())
                .and_then(|c| c.samples.first())
                .map(|s| s.stdout.clone())
        });
        for cell in &wc {
            let warn = check(cell, &truth, reference_stdout.as_deref());
            for m in &warn {
                warnings.push(format!("{}/{}: {m}", w.name, cell.config.name));
            }
            let wall = cell.wall();
            let dash = || "-".to_string();
            let peer_wall = cell.config.peer.and_then(find).and_then(|p| p.wall());
            let best_wall = cell.config.best_peer.and_then(find).and_then(|p| p.wall());
            let speedup = |peer: Option<f64>| match (wall, peer) {
                (Some(a), Some(p)) if a > 0.0 => table::ratio(p / a),
                _ => "-".to_string(),
            };
            let insns = truth.insns.map(|(n, src)| {
                client_counted |= src == "client";
                if src == "client" {
                    format!("{}*", table::count(n))
                } else {
                    table::count(n)
                }
            });
            rows.push(vec![
                w.name.to_string(),
                cell.config.name.to_string(),
                insns.unwrap_or_else(dash),
                cell.events().map(table::count).unwrap_or_else(dash),
                wall.map(table::secs).unwrap_or_else(dash),
                cell.wall_range().unwrap_or_else(dash),
                cell.total().map(table::secs).unwrap_or_else(dash),
                match (truth.insns, wall) {
                    (Some((n, _)), Some(s)) => table::rate(n, s),
                    _ => dash(),
                },
                match (wall, plain_wall) {
                    (Some(a), Some(p)) if p > 0.0 => table::ratio(a / p),
                    _ => dash(),
                },
                speedup(peer_wall),
                speedup(best_wall),
                cell.med(|s| Some(s.qemu_rss_kb))
                    .filter(|_| !cell.samples.is_empty() && !replay_row(cell))
                    .map(table::mib)
                    .unwrap_or_else(dash),
                cell.med(|s| s.client_rss_kb)
                    .map(table::mib)
                    .unwrap_or_else(dash),
                if cell.samples.is_empty() {
                    "FAILED".into()
                } else if warn.is_empty() {
                    "ok".into()
                } else {
                    "WARN".into()
                },
            ]);
        }
    }

    let mut out = String::new();
    out += "## cannoli benchmark\n\n";
    for h in host {
        out += h;
        out += "\n";
    }
    out += &format!(
        "- Medians of {runs} run{} per row\n\n",
        if runs == 1 { "" } else { "s" }
    );
    out += &table::render(&headers, &align, &rows);
    out += "\n";
    out += "Workloads (all mipsel, `-seed 1`, empty environment, stdout to a file):\n";
    for w in workloads
        .iter()
        .filter(|w| cells.iter().any(|c| workloads[c.workload].name == w.name))
    {
        out += &format!("- {}: {}\n", w.name, w.about);
    }
    out +=
        "\nColumns: *guest insns* is libinsn.so's count for the workload (the same for every row);";
    out += " *events* what the tool saw (client events, or the plugins' totals);";
    out += " *QEMU wall s* from starting QEMU to its exit, *total s* until the client had also";
    out += " exited (it lingers 100 ms for forked children); *wall min-max* over the runs; *guest insn/s* = guest insns / QEMU wall;";
    out += " *slowdown vs plain* = QEMU wall / plain's; *speedup vs peer* = the QEMU plugin";
    out += " doing the same job's wall / this wall: cannoli-pc vs plugin-insn, cannoli-pcmem vs";
    out +=
        " plugin-insn-mem (libinsn.so and libmem.so together: every instruction and every access,";
    out += " as cannoli-pcmem does; plugin-mem alone counts only the accesses);";
    out += " *speedup vs best plugin* = the same against the fastest plugin we know for the job:";
    out += " plugin-tb (bench/plugins/tbpeer.c: one callback per executed block appends the";
    out += " block's id to a per-thread buffer, expanded into the block's pcs recorded at";
    out += " translation and folded into a checksum when full) for cannoli-pc, plugin-tb-mem";
    out += " (the same with libmem.so's callback per access) for cannoli-pcmem;";
    out += " RSS = peak (ru_maxrss), in MiB.\n";
    if client_counted {
        out += "\n\\* no plugin run for this workload: the instruction count is the client's event count.\n";
    }

    if let Some(rec) = recording_table(workloads, cells) {
        out += "\n";
        out += &rec;
    }

    if let Some(rss) = rss_comparison(workloads, cells) {
        out += "\n";
        out += &rss;
    }

    if !warnings.is_empty() || !skipped.is_empty() {
        out += "\nWarnings:\n";
        for s in skipped {
            out += &format!("- skipped {s}\n");
        }
        for w in &warnings {
            out += &format!("- {w}\n");
        }
    } else {
        out += "\nAll checks passed: every guest printed the same output in every configuration,";
        out +=
            " plugin counts were stable, and cannoli's event counts equal QEMU's plugins' counts";
        out += " (the TB peer's instruction count equals libinsn.so's, and every pc checksum";
        out += " reported equals the TB peer's).\n";
    }
    out
}

fn replay_row(cell: &Cell) -> bool {
    matches!(cell.config.kind, Kind::Replay { .. })
}

/// The live row a record or replay row is compared with: the same hooks,
/// 2 worker threads (the recorder compresses on 2 threads per guest thread).
fn live_row(c: &Config) -> Option<&'static str> {
    match c.kind {
        Kind::Replay { .. }
        | Kind::Record {
            hooks: Hooks::Pc, ..
        } => Some("cannoli-pc-2w"),
        Kind::Record {
            hooks: Hooks::PcMem,
            ..
        } => Some("cannoli-pcmem-2w"),
        _ => None,
    }
}

/// Bytes per event, to 3 significant digits.
pub fn per_event(bytes: u64, events: u64) -> String {
    if events == 0 {
        return "-".into();
    }
    let b = bytes as f64 / events as f64;
    if b >= 10.0 {
        format!("{b:.1}")
    } else if b >= 1.0 {
        format!("{b:.2}")
    } else {
        format!("{b:.3}")
    }
}

/// Megabytes (10^6 bytes), as `cannoli record` prints them.
pub fn mb(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1e6)
}

/// A replay row's pc checksums against its live row's: "= live" if every
/// run's equals the live row's first, else the first that differs.
fn checksum_vs_live(cell: &Cell, live: Option<&&Cell>) -> String {
    let mine: Vec<u64> = cell.samples.iter().filter_map(|s| s.pc_checksum).collect();
    let want = live.and_then(|l| l.samples.iter().find_map(|s| s.pc_checksum));
    match (mine.first(), want) {
        (None, _) => "-".into(),
        (Some(&h), None) => format!("{h:#018x}"),
        (Some(_), Some(w)) => match mine.iter().find(|&&h| h != w) {
            None => format!("= live ({} runs)", mine.len()),
            Some(h) => format!("{h:#018x} != live {w:#018x}"),
        },
    }
}

/// "met" or "NOT met".
fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

/// The record and replay rows: file sizes, bytes per event, time against
/// the live trace and peak RSS, then the goals for record-pc,
/// record-pcmem and replay-pc-2w.
fn recording_table(workloads: &[Workload], cells: &[Cell]) -> Option<String> {
    let headers = [
        "workload",
        "config",
        "zstd level",
        "wall s",
        "vs live total",
        "vs live QEMU wall",
        "file MB",
        "events",
        "B/event",
        "B/insn",
        "recorder/client RSS MiB",
        "QEMU RSS MiB",
        "pc checksum",
    ];
    let mut align = vec![Align::Right; headers.len()];
    align[0] = Align::Left;
    align[1] = Align::Left;
    align[headers.len() - 1] = Align::Left;
    let mut rows = Vec::new();
    let mut goals = Vec::new();
    for (wi, w) in workloads.iter().enumerate() {
        let wc: Vec<&Cell> = cells.iter().filter(|c| c.workload == wi).collect();
        let find = |name: &str| {
            wc.iter()
                .find(|c| c.config.name == name && !c.samples.is_empty())
        };
        let truth = truth(&wc);
        let insns = truth.insns.map(|(n, _)| n);
        let file_of = |c: &Cell| c.med(|s| s.file_bytes);
        for cell in wc.iter().filter(|c| {
            matches!(c.config.kind, Kind::Record { .. } | Kind::Replay { .. })
                && !c.samples.is_empty()
        }) {
            let dash = || "-".to_string();
            let live = live_row(cell.config).and_then(find);
            let wall = cell.wall();
            let vs = |l: Option<f64>| match (wall, l) {
                (Some(a), Some(b)) if b > 0.0 => table::ratio(a / b),
                _ => dash(),
            };
            let file = match cell.config.kind {
                Kind::Replay { .. } => find("record-pc").and_then(|c| file_of(c)),
                _ => file_of(cell),
            };
            let events = cell.med(|s| s.events);
            let recorded = cell.config.record_hooks().is_some();
            rows.push(vec![
                w.name.to_string(),
                cell.config.name.to_string(),
                match cell.config.kind {
                    Kind::Record { level: Some(l), .. } => l.to_string(),
                    Kind::Record { level: None, .. } => "default".into(),
                    _ => dash(),
                },
                wall.map(table::secs).unwrap_or_else(dash),
                vs(live.and_then(|l| l.total())),
                vs(live.and_then(|l| l.wall())),
                file.map(mb).unwrap_or_else(dash),
                events.map(table::count).unwrap_or_else(dash),
                match (recorded, file, events) {
                    (true, Some(f), Some(e)) => per_event(f, e),
                    _ => dash(),
                },
                match (recorded, file, insns) {
                    (true, Some(f), Some(n)) => per_event(f, n),
                    _ => dash(),
                },
                cell.med(|s| s.client_rss_kb)
                    .map(table::mib)
                    .unwrap_or_else(dash),
                if recorded {
                    cell.med(|s| Some(s.qemu_rss_kb))
                        .map(table::mib)
                        .unwrap_or_else(dash)
                } else {
                    dash()
                },
                checksum_vs_live(cell, live),
            ]);
        }
        // The goals, where their rows ran.
        let (pc, pcmem, replay) = (
            find("record-pc"),
            find("record-pcmem"),
            find("replay-pc-2w"),
        );
        let live_pc = find("cannoli-pc-2w");
        let against = |c: &Cell, live: Option<&&Cell>, limit: f64, goal: &str| {
            let Some(live) = live else {
                return format!("{goal}: no cannoli-pc-2w row to compare with");
            };
            let (a, t, q) = (
                c.wall().unwrap_or(f64::NAN),
                live.total().unwrap_or(f64::NAN),
                live.wall().unwrap_or(f64::NAN),
            );
            let (rt, rq) = (a / t, a / q);
            format!(
                "{goal}: {} {} s = {} the live trace's total {} s (QEMU start to client exit), {} its QEMU wall {} s: {}",
                c.config.name,
                table::secs(a),
                table::ratio(rt),
                table::secs(t),
                table::ratio(rq),
                table::secs(q),
                match (rt <= limit, rq <= limit) {
                    (true, true) => "met".to_string(),
                    (true, false) => "met against the total, not against QEMU's wall".to_string(),
                    _ => "NOT met".to_string(),
                }
            )
        };
        if let Some(c) = pc {
            goals.push(format!(
                "{}: {}",
                w.name,
                against(
                    c,
                    live_pc,
                    1.5,
                    "(1) record-pc at most 1.5x the live PC trace"
                )
            ));
            if let (Some(f), Some(n)) = (file_of(c), insns) {
                let b = f as f64 / n as f64;
                goals.push(format!(
                    "{}: (2) PC only at most 1 byte per instruction: {} bytes / {} instructions = {} B/insn: {}",
                    w.name,
                    table::count(f),
                    table::count(n),
                    per_event(f, n),
                    verdict(b <= 1.0)
                ));
            }
        }
        if let Some(c) = pcmem {
            if let (Some(f), Some(e)) = (file_of(c), c.med(|s| s.events)) {
                let b = f as f64 / e as f64;
                goals.push(format!(
                    "{}: (2) PC + memory at most 4 bytes per event: {} bytes / {} events (instructions + accesses) = {} B/event: {}",
                    w.name,
                    table::count(f),
                    table::count(e),
                    per_event(f, e),
                    verdict(b <= 4.0)
                ));
            }
        }
        if let Some(c) = replay {
            goals.push(format!(
                "{}: {}",
                w.name,
                against(
                    c,
                    live_pc,
                    1.0,
                    "(3) replay-pc-2w at least as fast as the live PC trace"
                )
            ));
        }
        let rss: Vec<String> = [pc, pcmem, replay, live_pc]
            .into_iter()
            .flatten()
            .filter_map(|c| {
                c.med(|s| s.client_rss_kb)
                    .map(|kb| format!("{} {} MiB", c.config.name, table::mib(kb)))
            })
            .collect();
        if !rss.is_empty() {
            goals.push(format!(
                "{}: (4) peak RSS of the recorder / replaying client (live client for comparison): {}",
                w.name,
                rss.join(", ")
            ));
        }
    }
    if rows.is_empty() {
        return None;
    }
    let mut out = String::from("Recording and replay:\n\n");
    out += &table::render(&headers, &align, &rows);
    out += "\n*wall s*: from starting `cannoli record` (or `benchmark --replay`) to its exit;";
    out += " *vs live* = that / the live row's (cannoli-pc-2w for record-pc* and replay-pc-2w,";
    out += " cannoli-pcmem-2w for record-pcmem*) *total s* (QEMU start to client exit, with";
    out += " the client's 100 ms linger) and *QEMU wall s*; *file MB* the recording (10^6";
    out += " bytes; a replay's is the record-pc file it replays); *B/event* = file bytes /";
    out += " (instructions + memory accesses, from `cannoli info --json`), *B/insn* = file bytes";
    out += " / guest instructions; RSS = peak (the recorder's and QEMU's VmHWM, read every 20 ms;";
    out += " the replaying client's ru_maxrss), in MiB.\n";
    if !goals.is_empty() {
        out += "\nGoals:\n";
        for g in goals {
            out += &format!("- {g}\n");
        }
    }
    Some(out)
}

/// Peak RSS of cannoli-pc-1w on the nop loop and on the 10x longer loop,
/// side by side: the client's memory must not grow with the trace.
fn rss_comparison(workloads: &[Workload], cells: &[Cell]) -> Option<String> {
    let pick = |name: &str, config: &str| {
        cells.iter().find(|c| {
            workloads[c.workload].name == name && c.config.name == config && !c.samples.is_empty()
        })
    };
    // The live client, the recorder and the replaying client.
    let pairs: Vec<(&str, &Cell, &Cell)> = ["cannoli-pc-1w", "record-pc", "replay-pc-2w"]
        .into_iter()
        .filter_map(|c| Some((c, pick("nop-loop", c)?, pick("rss-10x", c)?)))
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let headers = [
        "config",
        "on",
        "events",
        "wall s",
        "client (recorder) peak RSS MiB",
        "QEMU peak RSS MiB",
    ];
    let mut align = vec![Align::Right; headers.len()];
    align[0] = Align::Left;
    align[1] = Align::Left;
    let row = |config: &str, name: &str, c: &Cell| {
        vec![
            config.to_string(),
            name.to_string(),
            c.med(|s| s.events).map(table::count).unwrap_or_default(),
            c.wall().map(table::secs).unwrap_or_default(),
            c.med(|s| s.client_rss_kb)
                .map(table::mib)
                .unwrap_or_default(),
            if replay_row(c) {
                "-".into()
            } else {
                c.med(|s| Some(s.qemu_rss_kb))
                    .map(table::mib)
                    .unwrap_or_default()
            },
        ]
    };
    let rows: Vec<Vec<String>> = pairs
        .iter()
        .flat_map(|(c, short, long)| [row(c, "nop-loop", short), row(c, "rss-10x", long)])
        .collect();
    let mut out = String::from("Peak RSS against trace length:\n\n");
    out += &table::render(&headers, &align, &rows);
    out += "\n";
    for (c, short, long) in &pairs {
        if let (Some(a), Some(b)) = (
            short.med(|s| s.client_rss_kb),
            long.med(|s| s.client_rss_kb),
        ) {
            let growth = (b as f64 / a.max(1) as f64 - 1.0) * 100.0;
            let who = match c.split('-').next() {
                Some("record") => "recorder",
                Some("replay") => "replaying client",
                _ => "client",
            };
            out += &format!(
                "The {who}'s peak RSS ({c}) changed by {growth:+.1}% for 10x the events ({} vs {} MiB).\n",
                table::mib(a),
                table::mib(b)
            );
        }
    }
    Some(out)
}

/// The configurations `w` runs under, in table order: without a `--config`
/// filter the default set, with the cannoli rows of `workers`
/// (`--workers`); with one the rows it names (a generated cannoli row for
/// any worker count, in `workers` or not).
pub fn configs_for(w: &Workload, filter: &[String], workers: &[usize]) -> Vec<&'static Config> {
    // With a filter, the worker counts of the generated rows it names.
    let workers: Vec<usize> = if filter.is_empty() {
        workers.to_vec()
    } else {
        filter
            .iter()
            .filter_map(|f| config::parse_generated(f))
            .map(|(_, n)| n)
            .collect()
    };
    config::all(&workers)
        .into_iter()
        .filter(|c| w.runs_config(c.name))
        .filter(|c| {
            if filter.is_empty() {
                c.in_default_set()
            } else {
                filter.iter().any(|f| f == c.name)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(wall: f64, events: Option<u64>, insns: Option<u64>) -> Sample {
        Sample {
            wall,
            total: wall,
            qemu_rss_kb: 1024,
            events,
            lost: events.map(|_| 0),
            insns,
            stdout: "x\n".into(),
            ..Sample::default()
        }
    }

    fn checked(s: Sample, h: u64) -> Sample {
        Sample {
            pc_checksum: Some(h),
            ..s
        }
    }

    #[test]
    fn table_has_ratios_and_flags_count_mismatch() {
        let root = std::path::Path::new("/nonexistent");
        let mut ws = crate::workload::all(root, true);
        ws.truncate(1);
        ws[0].expect_stdout = Some("x\n".into());
        let cells = vec![
            Cell {
                workload: 0,
                config: config::by_name("plain").unwrap(),
                samples: vec![
                    sample(1.0, None, None),
                    sample(3.0, None, None),
                    sample(2.0, None, None),
                ],
                errors: vec![],
            },
            Cell {
                workload: 0,
                config: config::by_name("plugin-insn").unwrap(),
                samples: vec![sample(10.0, None, Some(1000))],
                errors: vec![],
            },
            Cell {
                workload: 0,
                config: config::by_name("never").unwrap(),
                samples: vec![checked(sample(2.0, Some(0), None), 0)],
                errors: vec![],
            },
            Cell {
                workload: 0,
                config: config::by_name("plugin-tb").unwrap(),
                samples: vec![checked(sample(6.0, None, Some(1000)), 0xabc)],
                errors: vec![],
            },
            Cell {
                workload: 0,
                config: config::by_name("plugin-tb-mem").unwrap(),
                samples: vec![checked(sample(8.0, None, Some(1001)), 0xabc)],
                errors: vec![],
            },
            Cell {
                workload: 0,
                config: config::by_name("cannoli-pc-1w").unwrap(),
                samples: vec![checked(sample(4.0, Some(1000), None), 0xabc)],
                errors: vec![],
            },
            Cell {
                workload: 0,
                config: config::by_name("cannoli-pc-2w").unwrap(),
                samples: vec![checked(sample(5.0, Some(999), None), 0xabd)],
                errors: vec![],
            },
            // A generated row of a large machine: checked as the others.
            Cell {
                workload: 0,
                config: config::by_name("cannoli-pc-15w").unwrap(),
                samples: vec![
                    checked(sample(2.0, Some(1000), None), 0xabc),
                    checked(sample(2.0, Some(1000), None), 0xabe),
                ],
                errors: vec![],
            },
        ];
        let r = render(&["- host".into()], 3, &ws, &cells, &[]);
        let row = |name: &str| {
            r.lines()
                .find(|l| l.contains(&format!("| {name} ")))
                .unwrap()
                .to_string()
        };
        // plain's median wall is 2 s; cannoli-pc-1w takes 4 s (2x plain) and
        // is 2.5x faster than plugin-insn's 10 s.
        assert!(row("plain").contains(" 1.000-3.000 |"), "{r}");
        assert!(row("cannoli-pc-1w").contains("2.00x"), "{r}");
        assert!(row("cannoli-pc-1w").contains("2.50x"), "{r}");
        // ... and 1.5x faster than plugin-tb's 6 s (the best plugin column,
        // right after the peer's).
        let speedups = |name: &str| {
            let row = row(name);
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            (cells[10].to_string(), cells[11].to_string())
        };
        assert!(r.contains("| speedup vs peer | speedup vs best plugin |"));
        assert_eq!(speedups("cannoli-pc-1w"), ("2.50x".into(), "1.50x".into()));
        assert_eq!(speedups("cannoli-pc-2w"), ("2.00x".into(), "1.20x".into()));
        assert_eq!(speedups("plugin-tb"), ("-".into(), "-".into()));
        assert!(row("cannoli-pc-1w").contains("| ok "), "{r}");
        assert!(row("plugin-tb").contains("| ok "), "{r}");
        assert!(row("cannoli-pc-2w").contains("WARN"), "{r}");
        assert!(
            r.contains("cannoli-pc-2w: client counted 999 events"),
            "{r}"
        );
        // The TB peers' counts are checked against libinsn.so's, and every
        // pc checksum against plugin-tb's.
        assert!(row("plugin-tb-mem").contains("WARN"), "{r}");
        assert!(
            r.contains("plugin-tb-mem: instruction count 1,001 differs from libinsn.so's 1,000 in plugin-insn"),
            "{r}"
        );
        assert!(
            r.contains("cannoli-pc-2w: pc checksum 0x0000000000000abd differs from plugin-tb's 0x0000000000000abc"),
            "{r}"
        );
        assert!(
            r.contains("cannoli-pc-15w: pc checksum 0x0000000000000abe differs from plugin-tb's 0x0000000000000abc"),
            "{r}"
        );
        assert!(row("cannoli-pc-15w").contains("WARN"), "{r}");
        assert_eq!(speedups("cannoli-pc-15w"), ("5.00x".into(), "3.00x".into()));
        assert!(!r.contains("cannoli-pc-1w: "), "{r}");
        assert!(row("never").contains("| ok "), "{r}");
    }

    #[test]
    fn recording_table_and_goals() {
        assert_eq!(per_event(38_173_566, 1_168_436_496), "0.033");
        assert_eq!(per_event(5, 2), "2.50");
        assert_eq!(per_event(25, 2), "12.5");
        assert_eq!(per_event(1, 0), "-");
        assert_eq!(mb(38_173_566), "38.2");
        let root = std::path::Path::new("/nonexistent");
        let mut ws = crate::workload::all(root, true);
        ws.truncate(1);
        ws[0].expect_stdout = Some("x\n".into());
        let rec = |wall: f64, file: u64, insns: u64, mem: Option<u64>| Sample {
            file_bytes: Some(file),
            client_rss_kb: Some(10 * 1024),
            mem,
            events: Some(insns + mem.unwrap_or(0)),
            ..sample(wall, None, Some(insns))
        };
        let cell = |name: &str, samples: Vec<Sample>| Cell {
            workload: 0,
            config: config::by_name(name).unwrap(),
            samples,
            errors: vec![],
        };
        let cells = vec![
            cell("plugin-insn", vec![sample(10.0, None, Some(1000))]),
            cell(
                "plugin-mem",
                vec![Sample {
                    mem: Some(500),
                    ..sample(10.0, None, None)
                }],
            ),
            cell(
                "cannoli-pc-2w",
                vec![Sample {
                    total: 2.1,
                    ..checked(sample(2.0, Some(1000), None), 0xabc)
                }],
            ),
            cell("record-pc", vec![rec(2.5, 100, 1000, None)]),
            // 6100 bytes for 1500 events: over 4 bytes per event.
            cell("record-pcmem", vec![rec(5.0, 6100, 1000, Some(500))]),
            cell(
                "replay-pc-2w",
                vec![
                    checked(sample(1.9, Some(1000), None), 0xabc),
                    checked(sample(2.05, Some(1000), None), 0xabc),
                    checked(sample(2.2, Some(1000), None), 0xabc),
                ],
            ),
        ];
        let r = render(&["- host".into()], 1, &ws, &cells, &[]);
        let row = |name: &str| {
            let t = r.split("Recording and replay:").nth(1).unwrap();
            let l = t
                .lines()
                .find(|l| l.contains(&format!("| {name} ")))
                .unwrap();
            l.split('|')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        };
        // | workload | config | level | wall | vs total | vs QEMU wall | MB | events
        // | B/event | B/insn | RSS | QEMU RSS | checksum |
        let pc = row("record-pc");
        assert_eq!(&pc[3..7], ["default", "2.500", "1.19x", "1.25x"], "{r}");
        assert_eq!(&pc[8..11], ["1,000", "0.100", "0.100"], "{r}");
        assert_eq!(pc[11], "10.0");
        let mem = row("record-pcmem");
        assert_eq!(&mem[8..11], ["1,500", "4.07", "6.10"], "{r}");
        assert_eq!(mem[5], "-", "no cannoli-pcmem-2w row: {r}");
        let replay = row("replay-pc-2w");
        assert_eq!(replay[4], "2.050");
        assert_eq!(replay[7], "0.0", "the record-pc file: {r}");
        assert_eq!(replay[13], "= live (3 runs)", "{r}");
        assert!(
            r.contains("(1) record-pc at most 1.5x the live PC trace: record-pc 2.500 s = 1.19x"),
            "{r}"
        );
        assert!(
            r.contains("100 bytes / 1,000 instructions = 0.100 B/insn: met"),
            "{r}"
        );
        assert!(
            r.contains(
                "6,100 bytes / 1,500 events (instructions + accesses) = 4.07 B/event: NOT met"
            ),
            "{r}"
        );
        assert!(r.contains("0.98x the live trace's total 2.100 s (QEMU start to client exit), 1.02x its QEMU wall 2.000 s: met against the total, not against QEMU's wall"), "{r}");
        assert!(
            r.contains("(4) peak RSS of the recorder / replaying client (live client for comparison): record-pc 10.0 MiB, record-pcmem 10.0 MiB\n"),
            "{r}"
        );
        // The main table's checks: counts against the plugins, no guest
        // output from a replay.
        assert!(r.contains("All checks passed"), "{r}");
        // A replay whose checksum differs is flagged in both tables.
        let mut bad = cells;
        bad[5].samples[1].pc_checksum = Some(0xabd);
        let r = render(&["- host".into()], 1, &ws, &bad, &[]);
        assert!(
            r.contains("0x0000000000000abd != live 0x0000000000000abc"),
            "{r}"
        );
        assert!(
            r.contains("replay-pc-2w: pc checksum 0x0000000000000abd differs"),
            "{r}"
        );
    }

    #[test]
    fn rows_of_the_worker_list_and_of_the_filter() {
        let root = std::path::Path::new("/nonexistent");
        let ws = crate::workload::all(root, true);
        let w = |name: &str| ws.iter().find(|w| w.name == name).unwrap();
        let names = |w: &Workload, filter: &[&str], workers: &[usize]| {
            let filter: Vec<String> = filter.iter().map(|s| s.to_string()).collect();
            configs_for(w, &filter, workers)
                .iter()
                .map(|c| c.name)
                .collect::<Vec<_>>()
        };
        // The default set: every generated row of the list, no explicit
        // zstd levels.
        let all = names(w("nop-loop"), &[], &[1, 2, 15]);
        for n in [
            "plain",
            "cannoli-pc-1w",
            "cannoli-pc-2w",
            "cannoli-pc-15w",
            "cannoli-pcmem-15w",
            "record-pc",
            "replay-pc-2w",
        ] {
            assert!(all.contains(&n), "{n}: {all:?}");
        }
        assert!(!all.contains(&"cannoli-pc-4w"), "{all:?}");
        assert!(!all.contains(&"record-pc-l1"), "{all:?}");
        // Named rows run whatever the list, in table order.
        assert_eq!(
            names(
                w("nop-loop"),
                &[
                    "cannoli-pcmem-12w",
                    "plain",
                    "cannoli-pc-12w",
                    "record-pc-l1"
                ],
                &[1, 2]
            ),
            [
                "plain",
                "cannoli-pc-12w",
                "cannoli-pcmem-12w",
                "record-pc-l1"
            ]
        );
        // rss-10x runs only its rows.
        assert_eq!(
            names(w("rss-10x"), &[], &[1, 2, 15]),
            ["cannoli-pc-1w", "record-pc", "replay-pc-2w"]
        );
    }
}
