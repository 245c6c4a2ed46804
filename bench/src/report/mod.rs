//! From samples to the report: medians, ratios, the cross-checks, the table.
//!
//! - `check.rs`: the reference counts and the cross-checks
//! - `recording.rs`: the record and replay table and the RSS comparison
//! - `goals.rs`: the probe and heap rows against plain

mod check;
mod goals;
mod recording;
#[cfg(test)]
mod tests;

use crate::config::{self, Config, Hooks, Kind};
use crate::run::Sample;
use crate::table::{self, Align};
use crate::workload::Workload;

pub use check::guest_insns;
use check::{check, truth};
use goals::tool_goals;
use recording::{recording_table, rss_comparison};

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
    /// Median of QEMU's CPU seconds, where bench started QEMU itself.
    fn qemu_cpu(&self) -> Option<f64> {
        let v: Vec<f64> = self
            .samples
            .iter()
            .filter_map(|s| s.qemu_cpu)
            .map(|c| c.0)
            .collect();
        table::median(&v)
    }
    /// Medians of QEMU's voluntary and involuntary context switches.
    fn qemu_switches(&self) -> Option<(u64, u64)> {
        Some((
            self.med(|s| s.qemu_cpu.map(|c| c.1))?,
            self.med(|s| s.qemu_cpu.map(|c| c.2))?,
        ))
    }
    fn med(&self, f: impl Fn(&Sample) -> Option<u64>) -> Option<u64> {
        table::median_u64(&self.samples.iter().filter_map(f).collect::<Vec<_>>())
    }
    /// What the tool saw: the client's events, or the plugins' totals.
    fn events(&self) -> Option<u64> {
        match self.config.kind {
            Kind::Cannoli { .. }
            | Kind::Record { .. }
            | Kind::Replay { .. }
            | Kind::Probe
            | Kind::Heap => self.med(|s| s.events),
            Kind::Plugins(_) => self.med(|s| match (s.insns, s.mem) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
            }),
            Kind::Plain => None,
        }
    }
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
        "QEMU CPU s",
        "QEMU switches vol/invol",
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
                cell.qemu_cpu().map(table::secs).unwrap_or_else(dash),
                cell.qemu_switches()
                    .map(|(v, i)| format!("{}/{}", table::count(v), table::count(i)))
                    .unwrap_or_else(dash),
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
    out += " exited (it lingers 100 ms for forked children); *wall min-max* over the runs;";
    out += " *QEMU CPU s* its user and system CPU time, and *QEMU switches* how often it";
    out += " blocked (voluntary: waiting for a free slot of a full ring, or for a lock) and was";
    out += " preempted (involuntary: another thread took its CPU), from wait4's rusage, where";
    out += " bench started QEMU itself; *guest insn/s* = guest insns / QEMU wall;";
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

    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(g) = tool_goals(workloads, cells, cpus) {
        out += "\n";
        out += &g;
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
