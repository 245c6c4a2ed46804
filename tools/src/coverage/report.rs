// SPDX-License-Identifier: GPL-2.0-or-later
//! The end of a run: the drcov file written from the collected coverage,
//! and the per-module summary on stderr.

use super::blocks::build;
use super::collected::{lock, Run};
use super::drcov::{self, Bb, DrcovModule};

/// More modules than drcov's 16-bit module ids can number.
#[derive(Debug, thiserror::Error)]
#[error("{0} modules: more than drcov's 65535")]
pub(super) struct TooManyModules(usize);

/// Writes the file `w` (created before the run, so that a bad path fails
/// before the program runs) and prints the summary on stderr. Returns
/// whether writing the file worked (`Err` is a problem with the coverage
/// itself).
pub(super) fn finish(
    mut w: launch::Output,
    report: &launch::Report,
    run: &Run,
) -> Result<Result<(), launch::OutputError>, TooManyModules> {
    let c = lock(run);
    let mods = build(&c);
    let mut bbs = Vec::new();
    let mut dropped = 0usize;
    for (id, m) in mods.iter().enumerate() {
        for &(s, e) in &m.blocks {
            match u32::try_from(s - m.row.base) {
                Ok(start) => bbs.push(Bb {
                    module: id as u16,
                    start,
                    size: (e - s) as u16,
                }),
                Err(_) => dropped += 1,
            }
        }
    }
    if mods.len() > u16::MAX as usize {
        return Err(TooManyModules(mods.len()));
    }
    let rows: Vec<DrcovModule> = mods.iter().map(|m| m.row.clone()).collect();
    // `Output` keeps write errors; `finish` returns the first.
    let _ = drcov::write(&mut w, c.bits.unwrap_or(64), &rows, &bbs);
    let dest = w.dest().to_string();
    let written = w.finish();

    let insns: usize = mods.iter().map(|m| m.insns).sum();
    let mut s = format!(
        "coverage: {} {dest}: {} modules, {} blocks, {} instructions from {} exec events \
         ({} process{}, {} thread{})\n",
        // On failure the line after the table says what went wrong.
        if written.is_ok() { "wrote" } else { "for" },
        mods.len(),
        bbs.len(),
        insns,
        c.exec_events,
        c.pids.len(),
        if c.pids.len() == 1 { "" } else { "es" },
        c.threads,
        if c.threads == 1 { "" } else { "s" },
    );
    let w = if c.bits.unwrap_or(64) <= 32 { 8 } else { 12 };
    s += &format!(
        "{:>4} {:>8} {:>8} {:>9}  {:<w$}  {:<w$}  module\n",
        "id", "blocks", "insns", "bytes", "base", "end"
    );
    for (id, m) in mods.iter().enumerate() {
        s += &format!(
            "{id:>4} {:>8} {:>8} {:>9}  {:<w$x}  {:<w$x}  {}\n",
            m.blocks.len(),
            m.insns,
            m.bytes,
            m.row.base,
            m.row.end,
            // The guest's file names: no control character to the terminal.
            cannoli::wire::escape(&m.row.path)
        );
    }
    if !c.outside.is_empty() {
        let mut v: Vec<u64> = c.outside.iter().copied().collect();
        v.sort_unstable();
        let shown: Vec<String> = v.iter().take(4).map(|pc| format!("{pc:#x}")).collect();
        s += &format!(
            "coverage: {} instructions ran outside any executable mapping the trace reported \
             (not in the file): {}{}\n",
            v.len(),
            shown.join(", "),
            if v.len() > 4 { ", ..." } else { "" }
        );
    }
    if dropped > 0 {
        s += &format!(
            "coverage: {dropped} blocks more than 4 GiB past their module's base were left out\n"
        );
    }
    if !report.stats.is_complete() {
        s += &format!(
            "coverage: the trace is incomplete ({}): coverage is a lower bound\n",
            report.stats.loss_summary()
        );
    }
    eprint!("{s}");
    Ok(written)
}
