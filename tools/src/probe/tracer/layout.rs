// SPDX-License-Identifier: GPL-2.0-or-later
//! A guest thread's register layout: where its arguments, results, stack
//! pointer and goroutine are, and how a pc probe's line is written.

#[cfg(doc)]
use super::super::hex;
use super::super::hex::Key;
use super::super::out;

/// A thread's register layout, by the plan's needs.
pub struct ThreadRegs {
    pub(super) names: Vec<String>,
    /// The names as a pc probe's line writes them ([`hex::keys`]).
    pub(super) keys: Vec<Key>,
    pub(super) mask: u64,
    pub(super) args: Vec<Option<usize>>,
    /// The argument registers of a Go function ([`super::super::conv::Conv`]).
    pub(super) go_args: Vec<Option<usize>>,
    /// Where Go keeps the running goroutine, when the plan keeps Go frames
    /// by goroutine ([`super::super::goroutine`]).
    pub(super) g: Option<usize>,
    pub(super) ret: Option<usize>,
    pub(super) sp: Option<usize>,
    pub(super) bits64: bool,
    /// Whether a pc probe's line can be written whole by a worker: in text
    /// mode without `--insns` or a timeline it holds nothing that needs the
    /// thread's serial state (the instruction index, the depth), so the
    /// formatting, most of a hit's cost, runs in the parallel phase.
    pub(super) lines: bool,
    /// Otherwise, without a timeline, how a pc probe's line is split
    /// between the workers and the serial phase ([`out::Split`]), and the
    /// registers' JSON keys.
    pub(super) split: Option<out::Split>,
    pub(super) json_keys: Vec<(usize, Vec<u8>)>,
    pub(super) pid: i32,
    pub(super) tid: i32,
}
