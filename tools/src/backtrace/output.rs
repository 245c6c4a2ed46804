// SPDX-License-Identifier: GPL-2.0-or-later
//! The JSON lines backtrace writes, one at every function entry and exit,
//! and the totals it counts while writing them.

use std::io::Write;
use std::sync::atomic::Ordering;

use serde::{Serialize, Serializer};

use super::run::Run;
use super::state::{BacktraceState, Change};

pub(super) struct Out {
    /// Keeps its first write error for the end (see `launch::Output`):
    /// the events are still consumed, so that QEMU does not block.
    pub(super) w: launch::Output,
}

/// An address, serialized as a `"0x..."` string.
struct Hex(u64);

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:#x}", self.0))
    }
}

/// One JSON line.
#[derive(Serialize)]
struct Line<'a> {
    event: &'static str,
    pid: i32,
    tid: i32,
    function: &'a str,
    /// enter: the function's first executed instruction; exit: where
    /// execution goes on.
    pc: Hex,
    #[serde(skip_serializing_if = "Option::is_none")]
    via: Option<&'static str>,
    /// The branch instruction that entered or left the function.
    #[serde(skip_serializing_if = "Option::is_none")]
    from: Option<Hex>,
    /// enter: where the frame will return to.
    #[serde(rename = "return", skip_serializing_if = "Option::is_none")]
    ret: Option<Hex>,
    depth: usize,
    backtrace: Vec<&'a str>,
}

pub(super) fn emit(run: &Run, out: &mut Out, pid: i32, tid: i32, c: &Change, st: &BacktraceState) {
    let depth = st.depth();
    let line = match c {
        Change::Enter { from, ret } => {
            run.enters.fetch_add(1, Ordering::Relaxed);
            run.deepest.fetch_max(depth, Ordering::Relaxed);
            let top = st.backtrace.last().expect("a frame was entered");
            Line {
                event: "enter",
                pid,
                tid,
                function: &top.name,
                pc: Hex(top.entry),
                via: Some(top.via.as_str()),
                from: from.map(Hex),
                ret: ret.map(Hex),
                depth,
                backtrace: st.names().collect(),
            }
        }
        Change::Exit { frame, pc, from } => {
            run.exits.fetch_add(1, Ordering::Relaxed);
            Line {
                event: "exit",
                pid,
                tid,
                function: &frame.name,
                pc: Hex(*pc),
                via: None,
                from: Some(Hex(*from)),
                ret: None,
                depth,
                backtrace: st.names().collect(),
            }
        }
    };
    if !out.w.is_writing() {
        return;
    }
    // `Output` keeps write errors for the end; serializing these types
    // cannot fail.
    let _ = serde_json::to_writer(&mut out.w, &line);
    let _ = out.w.write_all(b"\n");
}
