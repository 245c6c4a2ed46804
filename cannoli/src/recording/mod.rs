// SPDX-License-Identifier: GPL-2.0-or-later
//! Recordings: a traced run written to one file while it streams
//! (`cannoli record`), and replayed later, as often as wanted, through the
//! same decoder and callbacks as a live run ([`replay`]).
//!
//! A recording keeps what QEMU sent, not what a tool made of it: each
//! stream's hello line as QEMU wrote it, its chunks' bytes (compressed),
//! the block-table entries those name, how each stream ended and how the
//! run ended. So a replay sees exactly the [`ClientInfo`](crate::ClientInfo),
//! events and losses the live run would have, and one recording serves
//! every tool whose events it holds ([`Hooks`], [`Needs`]).
//!
//! Modules: [`format`](mod@format) owns the file layout; `writer` writes it during a
//! run (the server's recording mode); `reader` opens it; `replay` feeds it
//! to a tool.

use std::io;
use std::path::{Path, PathBuf};

use crate::{Cannoli, Stats, ToolState};

pub mod format;
mod reader;
mod replay;
mod side_by_side;
mod writer;

pub use format::{Exit, Goodbye, Info, Kind, StreamEnd, StreamStart};
pub use reader::{FrameError, Progress, Recording, StreamRec};
pub(crate) use writer::{Packer, StreamLog};
pub use writer::{Writer, Written, DEFAULT_LEVEL};

/// What the hook library of a recording asked QEMU for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Hooks {
    /// The preset's name (see [`Hooks::PRESETS`]), or `custom`.
    pub preset: String,
    /// Every executed instruction is an exec event ([`Cannoli::exec`]).
    pub exec: bool,
    /// Every load and store ([`Cannoli::read`], [`Cannoli::write`]).
    pub mem: bool,
    /// Which instructions carry registers.
    pub regs: RegsAt,
    /// Branch instructions come as `Branch` events ([`Cannoli::branch`]),
    /// so a replay can follow calls and returns. `false` in recordings made
    /// before the `regs` preset flagged them (they said nothing of it).
    #[serde(default)]
    pub branch_flags: bool,
}

/// Which instructions carry registers in a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegsAt {
    /// No instruction: no `Register` or `Branch` events.
    None,
    /// `Branch` events at branches, `Register` events where they land, and
    /// the stores of branches (what `backtrace` needs).
    Branches,
    /// A `Register` event at every instruction.
    All,
}

impl Hooks {
    /// The presets of `cannoli record --hooks`, with what each holds.
    pub const PRESETS: [(&'static str, &'static str); 4] = [
        ("pc", "every executed instruction"),
        ("mem", "every executed instruction and every memory access"),
        (
            "branches",
            "registers at branches and where they land, and the stores of branches (backtrace)",
        ),
        (
            "regs",
            "registers at every instruction (branches flagged), and every memory access",
        ),
    ];

    /// The preset `name` (anything not in [`Hooks::PRESETS`] is `custom`:
    /// nothing is known about it).
    pub fn preset(name: &str) -> Hooks {
        let (exec, mem, regs) = match name {
            "pc" => (true, false, RegsAt::None),
            "mem" => (true, true, RegsAt::None),
            "branches" => (false, false, RegsAt::Branches),
            "regs" => (false, true, RegsAt::All),
            _ => {
                return Hooks {
                    preset: "custom".into(),
                    exec: false,
                    mem: false,
                    regs: RegsAt::None,
                    branch_flags: false,
                }
            }
        };
        Hooks {
            preset: name.into(),
            exec,
            mem,
            regs,
            branch_flags: regs != RegsAt::None,
        }
    }
}

/// What a tool needs from a recording.
#[derive(Debug, Clone, Copy, Default)]
pub struct Needs {
    /// Every executed instruction as an exec event.
    pub exec: bool,
    /// Every memory access.
    pub mem: bool,
    /// Registers, at these instructions.
    pub regs: Option<RegsAt>,
    /// The tool's option that does without the memory accesses, if it
    /// has one (named in the message when they are missing).
    pub mem_optional: Option<&'static str>,
    /// Branch instructions flagged ([`Hooks::branch_flags`]): the tool
    /// follows calls and returns.
    pub branch_flags: bool,
}

impl Needs {
    /// `Err` says in one phrase what `hooks` lack and which `cannoli record
    /// --hooks` preset has it. A `custom` recording is taken as it is.
    pub fn check(&self, hooks: &Hooks) -> Result<(), Lacks> {
        if hooks.preset == "custom" {
            return Ok(());
        }
        let preset = || hooks.preset.clone();
        if self.exec && !hooks.exec {
            return Err(Lacks::Exec {
                preset: preset(),
                mem: self.mem,
            });
        }
        if self.mem && !hooks.mem {
            return Err(Lacks::Mem {
                preset: preset(),
                optional: self.mem_optional,
            });
        }
        match self.regs {
            Some(RegsAt::All) if hooks.regs != RegsAt::All => {
                Err(Lacks::RegsEverywhere { preset: preset() })
            }
            Some(RegsAt::Branches) if hooks.regs != RegsAt::Branches => {
                Err(Lacks::RegsAtBranches { preset: preset() })
            }
            _ if self.branch_flags && !hooks.branch_flags => {
                Err(Lacks::BranchFlags { preset: preset() })
            }
            _ => Ok(()),
        }
    }
}

/// What a recording lacks that a tool needs ([`Needs::check`]): one
/// phrase naming the `--hooks` preset it was recorded with and the one
/// that has what is missing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Lacks {
    /// No exec event for every instruction.
    #[error(
        "recorded with --hooks {preset}, which has no exec event for every instruction; \
         record it again with --hooks {}",
        if *.mem { "mem" } else { "pc" }
    )]
    Exec {
        /// The preset it was recorded with.
        preset: String,
        /// The tool needs the memory accesses too.
        mem: bool,
    },
    /// No memory accesses.
    #[error(
        "recorded with --hooks {preset}, which has no memory accesses; record it again with \
         --hooks mem{}",
        .optional.map_or_else(String::new, |opt| format!(", or pass {opt}"))
    )]
    Mem {
        /// The preset it was recorded with.
        preset: String,
        /// The tool's option that does without them, if it has one.
        optional: Option<&'static str>,
    },
    /// No registers at every instruction.
    #[error(
        "recorded with --hooks {preset}, which has no registers at every instruction; record \
         it again with --hooks regs"
    )]
    RegsEverywhere {
        /// The preset it was recorded with.
        preset: String,
    },
    /// No registers at branches.
    #[error(
        "recorded with --hooks {preset}, which has no registers at branches; record it again \
         with --hooks branches"
    )]
    RegsAtBranches {
        /// The preset it was recorded with.
        preset: String,
    },
    /// Made before its preset flagged branches.
    #[error(
        "recorded with --hooks {preset} by an older cannoli, whose recordings do not flag \
         branches (calls and returns cannot be followed); record it again with --hooks {preset}"
    )]
    BranchFlags {
        /// The preset it was recorded with.
        preset: String,
    },
}

/// How a replay ended.
#[derive(Debug, Clone)]
pub struct Replayed {
    /// The totals, as a live run counts them (and what the file lost).
    pub stats: Stats,
    /// The recorded program's exit status (128 + N for signal N); `None` if
    /// the recording was cut short before the run ended, or the recorder
    /// did not start the program.
    pub status: Option<i32>,
}

/// Errors of opening a recording: one line each, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The recording.
        path: PathBuf,
        /// What reading it failed with.
        source: io::Error,
    },
    /// Not a recording, another format version, or damaged beyond use.
    #[error("{}: {what}", path.display())]
    Format {
        /// The recording.
        path: PathBuf,
        /// What is wrong with it, where in the file.
        what: String,
    },
    /// The tool failed the replay ([`crate::Cannoli::trace_flow`]
    /// returned an error).
    #[error("{0}")]
    Tool(#[source] crate::ToolError),
}

/// Feeds the recording at `path` through `T` as the live run would have:
/// the same [`ClientInfo`](crate::ClientInfo)s, contexts and lifetimes,
/// callbacks, and [`Cannoli::trace`] calls in execution order per stream.
/// Streams are replayed one after another, in the order they connected;
/// `threads` workers decode each one.
pub fn replay<T: Cannoli>(path: &Path, threads: usize) -> Result<Replayed, Error> {
    Recording::open(path)?.replay::<T>(threads)
}

/// [`replay`] with `state` in every stream's [`ClientInfo`](crate::ClientInfo)
/// (see [`ToolState`]).
pub fn replay_with<T: Cannoli>(
    path: &Path,
    threads: usize,
    state: impl Into<ToolState>,
) -> Result<Replayed, Error> {
    Recording::open(path)?.replay_with::<T>(threads, state)
}

#[cfg(test)]
mod tests;
