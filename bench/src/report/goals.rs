//! The goals of the tools' rows against plain QEMU on the same workload:
//! `cannoli probe` at most 1.1x plain, and `cannoli heap` at most 3x plain
//! on a many-core machine (its serial phase and its workers are what
//! bound it; on fewer cores the row is measured, not judged).

use super::{verdict, Cell};
use crate::table;
use crate::workload::Workload;

/// Fewest usable CPUs on which the heap's goal is judged.
const MANY_CORES: usize = 8;

/// The goal lines of the probe and heap rows that ran beside plain, on a
/// machine of `cpus` usable CPUs; `None` if there are none.
pub(super) fn tool_goals(workloads: &[Workload], cells: &[Cell], cpus: usize) -> Option<String> {
    let mut goals = Vec::new();
    for (wi, w) in workloads.iter().enumerate() {
        let find = |name: &str| {
            cells
                .iter()
                .find(|c| c.workload == wi && c.config.name == name)
                .and_then(Cell::wall)
        };
        let Some(plain) = find("plain").filter(|&p| p > 0.0) else {
            continue;
        };
        let line = |row: &str, wall: f64| {
            format!(
                "{}: {row} {} s = {} plain's {} s",
                w.name,
                table::secs(wall),
                table::ratio(wall / plain),
                table::secs(plain)
            )
        };
        if let Some(wall) = find("probe") {
            goals.push(format!(
                "{}, at most 1.1x: {}",
                line("probe", wall),
                verdict(wall / plain <= 1.1)
            ));
        }
        if let Some(wall) = find("heap") {
            let judged = if cpus >= MANY_CORES {
                verdict(wall / plain <= 3.0).to_string()
            } else {
                format!("not judged on {cpus} CPUs (the goal is for {MANY_CORES} or more)")
            };
            goals.push(format!(
                "{}, at most 3x on a many-core machine: {judged}",
                line("heap", wall)
            ));
        }
    }
    if goals.is_empty() {
        return None;
    }
    let mut out = String::from("Goals of the tools against plain QEMU:\n");
    for g in goals {
        out += &format!("- {g}\n");
    }
    Some(out)
}
