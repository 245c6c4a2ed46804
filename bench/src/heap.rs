// SPDX-License-Identifier: GPL-2.0-or-later
//! The `heap` row: `cannoli heap` on the workload, against plain QEMU on
//! the same run. Every load and store is checked against the live blocks,
//! every branch keeps the call stacks, and every allocation call is
//! interposed, so this row is what a user of `cannoli heap` waits for.
//!
//! The report (`--json`) goes to a file next to the guest's output. A run
//! counts only if it is clean: the tool exits 0, finds nothing, loses no
//! event and leaves no event unordered (the bench's programs are correct
//! and single-threaded). Its allocation events (calls of the allocation
//! functions) are the row's *events*; the report checks that every run
//! has the same number.

use std::ffi::OsStr;

use crate::run::{read_text, run_tool, Ctx, Sample};
use crate::workload::Workload;

/// Runs `cannoli heap` on `w`, as the other rows run QEMU ([`run_tool`]),
/// with the tool's default workers.
pub fn run(ctx: &Ctx, w: &Workload, name: &str) -> Result<Sample, String> {
    let report_path = ctx.out.join(format!("{}.{name}.json", w.name));
    let args = [
        OsStr::new("heap"),
        OsStr::new("--json"),
        OsStr::new("-o"),
        report_path.as_os_str(),
    ];
    let run = run_tool(ctx, w, name, &args)?;
    let report = read_text(&report_path)?;
    let events = clean_summary(&report).map_err(|e| format!("{}: {e}", report_path.display()))?;
    Ok(run.sample(events))
}

/// The allocation events of a clean report (`--json`: one object per
/// finding, the summary last), or what makes it not clean.
fn clean_summary(report: &str) -> Result<u64, String> {
    let last = report
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .ok_or("the report is empty")?;
    let v: serde_json::Value =
        serde_json::from_str(last).map_err(|e| format!("its last line is not JSON: {e}"))?;
    let s = v
        .get("summary")
        .ok_or("its last line is not the summary object")?;
    let number = |key: &str| {
        s.get(key)
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| format!("the summary has no {key}"))
    };
    let findings = s
        .get("findings")
        .and_then(serde_json::Value::as_object)
        .ok_or("the summary has no findings")?;
    let found: Vec<String> = findings
        .iter()
        .filter(|(_, n)| n.as_u64() != Some(0))
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect();
    if !found.is_empty() {
        return Err(format!("found {} in a correct program", found.join(", ")));
    }
    for key in ["lost_events", "unordered_events"] {
        let n = number(key)?;
        if n != 0 {
            return Err(format!("{key} is {n}, not 0"));
        }
    }
    number("events")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLEAN: &str = r#"{"summary":{"allocations":7,"bytes_allocated":8502,"events":9,"findings":{"double-free":0,"heap-buffer-overflow":0,"invalid-free":0,"leak":0,"use-after-free":0},"frees":2,"lost_events":0,"unordered_events":0}}"#;

    #[test]
    fn a_clean_report_gives_its_events() {
        assert_eq!(clean_summary(CLEAN), Ok(9));
        assert_eq!(clean_summary(&format!("\n{CLEAN}\n\n")), Ok(9));
    }

    #[test]
    fn anything_else_is_an_error() {
        let finding = CLEAN.replace(r#""leak":0"#, r#""leak":2"#);
        assert_eq!(
            clean_summary(&format!("{{\"kind\":\"leak\"}}\n{finding}")),
            Err("found 2 leak in a correct program".into())
        );
        let lost = CLEAN.replace(r#""lost_events":0"#, r#""lost_events":5"#);
        assert_eq!(clean_summary(&lost), Err("lost_events is 5, not 0".into()));
        let unordered = CLEAN.replace(r#""unordered_events":0"#, r#""unordered_events":1"#);
        assert!(clean_summary(&unordered).is_err());
        assert!(clean_summary("").is_err());
        assert!(clean_summary(r#"{"kind":"leak"}"#).is_err());
        assert!(clean_summary("{\"summary\":").is_err());
        let no_events = CLEAN.replace(r#""events":9,"#, "");
        assert_eq!(
            clean_summary(&no_events),
            Err("the summary has no events".into())
        );
    }
}
