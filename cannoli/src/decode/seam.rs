//! The seams between chunks: a chunk's head, set aside on its worker, is
//! decoded in order with the block the chunks before it left open.

use super::chunk::le_bytes;
use super::framed::{frame_min, some_regs_len};
use super::place::{close, expand, Open, OpenBlock};
use super::words::{decode_words, Cursor, Input, Stop};
use super::Shape;
use crate::Cannoli;
use wire::{tag, PC_BITS};

/// What the in-order delivery of a chunk needs besides its trace: the
/// chunk's head (decoded there, with the block the previous chunks left
/// open) and the block its body leaves open.
#[derive(Debug, Default)]
pub(crate) struct Seam {
    /// The head's words: the longest prefix of in-block events and cuts
    /// (up to and including the first cut).
    pub head: Vec<u64>,
    /// The chunk has events after its head (its body, decoded on the
    /// worker), the first of which closes the block the head left open.
    pub body: bool,
    /// The block open at the end of the body (with `body` only).
    pub tail: Option<OpenBlock>,
}

/// The state of a stream's in-order delivery: the block open after the
/// chunks delivered so far, and a buffer for the trace of stitching.
#[derive(Debug)]
pub(crate) struct Carry<Tr> {
    pub open: Option<OpenBlock>,
    pub buf: Vec<Tr>,
}

impl<Tr> Default for Carry<Tr> {
    fn default() -> Self {
        Carry {
            open: None,
            buf: Vec::new(),
        }
    }
}

/// Words of the head of a chunk: the longest prefix of well-formed
/// in-block events (exec, memory, registers, order) and cuts, up to and
/// including the first cut. A malformed event ends it (it is reported by the body).
pub(super) fn head_len(words: &[u64], lay: &Shape<'_>) -> usize {
    let n = words.len();
    let mut i = 0;
    while i < n {
        let w = words[i];
        let len = match (w >> PC_BITS) as u8 {
            tag::EXEC => 1,
            tag::EXEC_LONG | 0x14..=0x16 | 0x1c..=0x1e => 2,
            0x10..=0x13 | 0x18..=0x1b => 3,
            tag::LOAD128 | tag::STORE128 => 4,
            tag::MEM_LONG => match w as u8 {
                tag::LOAD128 | tag::STORE128 => 5,
                0x10..=0x13 | 0x18..=0x1b => 4,
                _ => return i,
            },
            tag::CUT => return i + 1,
            tag::CUT_LONG => return if n - i >= 2 { i + 2 } else { i },
            t @ (tag::REGS | tag::SOME_REGS | tag::ORDER) => {
                let (_, aux, len) = wire::unframe(w);
                let min = if t == tag::SOME_REGS {
                    match words.get(i + 2).and_then(|&m| some_regs_len(m, lay)) {
                        Some(min) => min,
                        None => return i,
                    }
                } else {
                    frame_min(t, lay.reg_words)
                };
                if (len as usize) < min || t != tag::ORDER && aux > 2 {
                    return i;
                }
                len as usize
            }
            _ => return i,
        };
        if n - i < len {
            return i;
        }
        i += len;
    }
    n
}

/// Delivers a chunk's head with the block the chunks before it left open
/// (`carry`), then closes that block if the chunk has a body, and leaves in
/// `carry` the block open after the chunk. Serial: called in chunk order,
/// before the chunk's own trace is delivered. Returns the events delivered.
pub(crate) fn stitch<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    lay: &Shape<'_>,
    carry: &mut Option<OpenBlock>,
    seam: &Seam,
    trace: &mut Vec<T::Trace>,
) -> u64 {
    let mut open = carry.as_ref().map(|o| Open {
        block: &o.block,
        next: o.next,
    });
    let mut cur = Cursor::default();
    let bytes = le_bytes(&seam.head);
    let stop = decode_words::<T>(
        pid,
        tid,
        Input {
            words: &seam.head,
            bytes: &bytes,
            lay,
            slots: &[],
        },
        &mut open,
        &mut cur,
        trace,
    );
    // A head has no run event, and ends before a malformed event.
    debug_assert!(matches!(stop, Stop::End), "{stop:?}");
    let next = if seam.body {
        if let Some(o) = open.take() {
            cur.expanded += close::<T>(pid, tid, o, trace);
        }
        seam.tail.clone()
    } else {
        open.map(Open::to_owned)
    };
    *carry = next;
    T::decoded(pid, tid, trace);
    cur.events(0)
}

/// The end of a stream: the block still open ran to its end. Returns the
/// events delivered.
pub(crate) fn finish<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    carry: &mut Option<OpenBlock>,
    trace: &mut Vec<T::Trace>,
) -> u64 {
    let n = match carry.take() {
        Some(o) => expand::<T>(pid, tid, &o.block, o.next, o.block.len(), trace),
        None => 0,
    };
    T::decoded(pid, tid, trace);
    n
}
