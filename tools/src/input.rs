// SPDX-License-Identifier: GPL-2.0-or-later
//! Where a tool's events come from: a program traced live (or, without
//! one, a QEMU started by hand), or a recording (`--replay FILE`).

use std::ffi::OsString;
use std::path::Path;

use cannoli::recording::Needs;
use cannoli::Cannoli;
use launch::{Error, Launcher, Report};

/// Runs `T` on the recording `replay` if given (which must hold what
/// `needs` says), else on `program` (`PROGRAM ARGS...`; empty: classic
/// mode) as [`Launcher::run`] does.
pub fn run<T: Cannoli>(
    launcher: Launcher,
    replay: Option<&Path>,
    needs: Needs,
    program: Vec<OsString>,
) -> Result<Report, Error> {
    match replay {
        Some(path) => launcher.replay::<T>(path, needs),
        None => launcher.run::<T>(program),
    }
}
