//! The cross-checks: each cell against its workload's reference counts.

use super::Cell;
use crate::config::{Hooks, Kind};
use crate::run::Sample;
use crate::table;

/// The reference counts of one workload.
pub(super) struct Truth {
    /// Guest instructions, and where the number came from.
    pub(super) insns: Option<(u64, &'static str)>,
    /// The configuration that gave `insns` and `mem` (none for the client).
    insns_config: Option<&'static str>,
    mem_config: Option<&'static str>,
    /// Guest memory accesses (libmem.so).
    mem: Option<u64>,
    /// The pc stream's checksum and the configuration that gave it: the TB
    /// peer's (every other configuration that reports one must agree).
    pc_checksum: Option<(u64, &'static str)>,
}

pub(super) fn truth(cells: &[&Cell]) -> Truth {
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
    // The first run's, not a median: checksums are equal or wrong. Not
    // `never`'s: its client folds no pc, so its checksum is the empty
    // stream's, which every row that traces pcs would differ from.
    let pc_checksum = ["plugin-tb", "plugin-tb-mem"]
        .iter()
        .chain(cells.iter().map(|c| &c.config.name))
        .find_map(|&name| {
            let cell = cells
                .iter()
                .find(|c| c.config.name == name && c.config.hooks() != Some(Hooks::Never))?;
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

/// A count a run reports.
type Count = fn(&Sample) -> Option<u64>;

/// The checks of one cell, as warning texts.
pub(super) fn check(cell: &Cell, truth: &Truth, reference_stdout: Option<&str>) -> Vec<String> {
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
    let mut counts: Vec<(&str, Count)> =
        vec![("instruction", |s| s.insns), ("memory access", |s| s.mem)];
    // The heap row's events are the program's calls of the allocation
    // functions: the same in every run of one guest.
    if cell.config.kind == Kind::Heap {
        counts.push(("allocation event", |s| s.events));
    }
    for (what, f) in counts {
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
