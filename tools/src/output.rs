// SPDX-License-Identifier: GPL-2.0-or-later
//! Where a tool's report goes: `-o FILE`, created before the program runs
//! so that a bad path costs no run, or else the tool's own stream.

use std::path::Path;

use launch::Output;

/// `what` (e.g. "the trace") to the file `path`, else to `default`
/// ([`Output::stdout`] or [`Output::stderr`]). `None` once the one line
/// `tool: cannot create FILE: why` is on stderr: the tool then exits 1,
/// nothing having run.
pub fn open(
    tool: &str,
    path: Option<&Path>,
    what: &str,
    default: fn(&str) -> Output,
) -> Option<Output> {
    Output::create_or(path, what, default)
        .map_err(|e| eprintln!("{tool}: {e}"))
        .ok()
}
