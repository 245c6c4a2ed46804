//! The record and replay table and the RSS comparison.

use super::check::truth;
use super::{checksum_vs_live, live_row, mb, per_event, replay_row, verdict, Cell};
use crate::config::Kind;
use crate::table::{self, Align};
use crate::workload::Workload;

/// The record and replay rows: file sizes, bytes per event, time against
/// the live trace and peak RSS, then the goals for record-pc,
/// record-pcmem and replay-pc-2w.
pub(super) fn recording_table(workloads: &[Workload], cells: &[Cell]) -> Option<String> {
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
pub(super) fn rss_comparison(workloads: &[Workload], cells: &[Cell]) -> Option<String> {
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
