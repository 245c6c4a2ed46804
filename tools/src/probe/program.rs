// SPDX-License-Identifier: GPL-2.0-or-later
//! Which program probe reads its functions from: the one to run (or to
//! list), or the one a recording names.

use std::ffi::OsString;
use std::path::Path;

use super::args::Args;
use super::elf::Image;
use super::error::Error;

/// The program a live run or `--list` reads; `Err` is one line.
pub(super) fn program_image(args: &Args) -> Result<Image, Error> {
    // `--list PATTERN PROGRAM`: the program is the last word.
    let program = if args.list {
        args.program.last()
    } else {
        args.program.first()
    };
    let Some(program) = program else {
        return Err(Error::NoProgram);
    };
    let path = launch::find::resolve_program(program)?;
    Image::read(&path)
}

/// The recorded program of `--replay FILE`.
pub(super) fn replay_image(path: &Path) -> Result<Image, Error> {
    let rec = cannoli::Recording::open(path)?;
    let exe = rec
        .info()
        .command
        .first()
        .cloned()
        .ok_or_else(|| Error::NoCommand(path.to_path_buf()))?;
    let exe = launch::find::resolve_program(&OsString::from(exe))?;
    Image::read(&exe)
}
