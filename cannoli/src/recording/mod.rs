//! Recordings: a traced run written to one file by `cannoli record`, and
//! replayed later through the same decoder and callbacks as a live run.
//!
//! Placeholder API (filled in by the recording work).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::{Cannoli, Stats};

/// What the hook library of a recording reported.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Hooks {
    /// The preset's name (`pc`, `mem`, `branches`, `regs`), or `custom`.
    pub preset: String,
    /// Every executed instruction is an exec event ([`Cannoli::exec`]).
    pub exec: bool,
    /// Every load and store ([`Cannoli::read`], [`Cannoli::write`]).
    pub mem: bool,
    /// Where registers events are.
    pub regs: RegsAt,
}

/// Which instructions carry registers in a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegsAt {
    None,
    /// `Branch` events at branches, `Register` events where they land, and
    /// the stores of branches (what `backtrace` needs).
    Branches,
    /// A `Register` event at every instruction.
    All,
}

/// What a tool needs from a recording.
#[derive(Debug, Clone, Copy, Default)]
pub struct Needs {
    pub exec: bool,
    pub mem: bool,
    pub regs: Option<RegsAt>,
}

impl Needs {
    /// `Err` names what `hooks` lack and the `cannoli record --hooks` preset
    /// that has it.
    pub fn check(&self, hooks: &Hooks) -> Result<(), String> {
        let _ = hooks;
        Ok(())
    }
}

/// How a replay ended.
#[derive(Debug, Clone)]
pub struct Replayed {
    /// The totals, as a live run counts them.
    pub stats: Stats,
    /// The recorded program's exit status (128 + N for signal N); `None` if
    /// the recording was cut short before it.
    pub status: Option<i32>,
}

/// Errors of reading a recording: one line each.
#[derive(Debug)]
pub enum Error {
    Io { path: PathBuf, source: io::Error },
    Format { path: PathBuf, what: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Format { path, what } => write!(f, "{}: {what}", path.display()),
        }
    }
}

impl std::error::Error for Error {}

/// An open recording.
pub struct Recording {
    hooks: Hooks,
}

impl Recording {
    pub fn open(path: &Path) -> Result<Recording, Error> {
        Err(Error::Format {
            path: path.into(),
            what: "not implemented yet".into(),
        })
    }

    pub fn hooks(&self) -> &Hooks {
        &self.hooks
    }
}

/// Feeds the recording at `path` through `T` as a live run would.
pub fn replay<T: Cannoli>(path: &Path, threads: usize) -> Result<Replayed, Error> {
    let _ = threads;
    Recording::open(path).map(|_| unreachable!())
}
