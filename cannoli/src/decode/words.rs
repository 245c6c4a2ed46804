//! The hot loop over a chunk's words: the JIT events, one compare each on
//! the common path.

use super::framed::{framed, Frame, RegScratch, Skipped};
use super::place::{close, cut, place, Open};
use super::problem::Problem;
use super::Shape;
use crate::blocks::Block;
use crate::event::Access;
use crate::Cannoli;
use wire::blocks::NO_ENTRY;
use wire::{tag, PC_BITS, PC_MASK};

/// The bits of a run event's word above its id: the [`tag::RUN`] tag.
const RUN_WORD: u64 = (tag::RUN as u64) << PC_BITS;

/// Value masks indexed by log2 of the access size.
const VAL_MASK: [u64; 4] = [0xff, 0xffff, 0xffff_ffff, u64::MAX];

/// Where [`decode_words`] is in a chunk, kept across its calls.
#[derive(Debug, Default)]
pub(super) struct Cursor {
    /// Next word to decode.
    pub i: usize,
    /// Words consumed that did not start a delivered event.
    pub extra: usize,
    /// Exec callbacks of block instructions.
    pub expanded: u64,
    pub skipped: Skipped,
    /// Where a `SOME_REGS` event's registers are spread for the tool.
    pub regs: RegScratch,
}

impl Cursor {
    /// Events delivered since word `from`.
    pub fn events(&self, from: usize) -> u64 {
        (self.i - from - self.extra) as u64 + self.expanded
    }
}

/// Why [`decode_words`] returned.
#[derive(Debug)]
pub(super) enum Stop {
    /// At the end of the words.
    End,
    /// At a run event (word `i`) whose block is not in the slots; the block
    /// before it is closed.
    Miss(u64),
    /// At a malformed event (word `i`); the open block is closed.
    Bad(u8, Problem),
}

/// What [`decode_words`] reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Input<'a, 'b> {
    /// The whole words to decode.
    pub words: &'a [u64],
    /// The same words as little-endian bytes (for the byte payloads of
    /// framed events).
    pub bytes: &'a [u8],
    pub lay: &'a Shape<'a>,
    /// The block cache's slots (read-locked).
    pub slots: &'b [Option<Block>],
}

/// The decode loop proper, over `input`'s words from `cur.i` on, with
/// `state` the block open at `cur.i`.
#[inline(always)]
pub(super) fn decode_words<'b, T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    input: Input<'_, 'b>,
    state: &mut Option<Open<'b>>,
    cur: &mut Cursor,
    trace: &mut Vec<T::Trace>,
) -> Stop {
    let Input {
        words,
        bytes,
        lay,
        slots,
    } = input;
    debug_assert_eq!(words.len() * 8, bytes.len());
    let addr_mask = lay.addr_mask;
    let n = words.len();
    let mut i = cur.i;
    let mut extra = cur.extra;
    let mut expanded = cur.expanded;
    let mut open = *state;
    macro_rules! stop {
        ($s:expr) => {{
            cur.i = i;
            cur.extra = extra;
            cur.expanded = expanded;
            *state = open;
            return $s;
        }};
    }
    // Every other kind of event (and a malformed one: what comes after it
    // is unknown) ends the open block: it ran to its end.
    macro_rules! close_open {
        () => {
            if let Some(o) = open.take() {
                expanded += close::<T>(pid, tid, o, trace);
            }
        };
    }
    macro_rules! malformed {
        ($t:expr, $problem:expr $(,)?) => {{
            close_open!();
            stop!(Stop::Bad($t, $problem))
        }};
    }
    // An event of the instruction at `pc`, before its callback.
    macro_rules! place {
        ($pc:expr) => {
            if let Some(o) = &mut open {
                if !place::<T>(pid, tid, o, $pc, trace, &mut expanded) {
                    open = None;
                }
            }
        };
    }

    'events: while i < n {
        if open.is_none() {
            // Runs of exec events (outside a block: the per-instruction
            // events of blocks the table has no room for, and old streams)
            // take eight words at once when none of them has a tag (one
            // OR-reduction and one compare for eight events).
            if let Some(run) = words.get(i..i + 8) {
                let run: &[u64; 8] = run.try_into().expect("eight words");
                if run.iter().fold(0, |a, &w| a | w) <= PC_MASK {
                    for &pc in run {
                        T::exec(pid, tid, pc, trace);
                    }
                    i += 8;
                    continue;
                }
            }
            // A tagged word is near: step through exec events (tag 0, the
            // word is the pc) up to it, then decode it, before looking
            // ahead again.
            let mut w = words[i];
            while w <= PC_MASK {
                T::exec(pid, tid, w, trace);
                i += 1;
                if i == n {
                    break 'events;
                }
                w = words[i];
            }
        }
        let w = words[i];
        // The bulk of a block-granular stream: close the running block,
        // open the next. Tested on the whole word (its top byte is the
        // tag), so that it stays one compare ahead of the match below: as
        // a test of `t`, the compiler folds it into the match's jump
        // table, an indirect jump per run event.
        if w & !PC_MASK == RUN_WORD {
            close_open!();
            let id = w & PC_MASK;
            if id != NO_ENTRY {
                match slots.get(id as usize) {
                    Some(Some(b)) => open = Some(Open { block: b, next: 0 }),
                    _ => stop!(Stop::Miss(id)),
                }
            }
            i += 1;
            extra += 1;
            continue;
        }
        let t = (w >> PC_BITS) as u8;
        // The other bulk of a memory trace: loads and stores (0x10..=0x16,
        // 0x18..=0x1e), also ahead of the jump table.
        if t & 0xf0 == 0x10 && t & 7 != 7 {
            if t & 4 == 0 {
                // Loads 0x10..=0x13, stores 0x18..=0x1b.
                if n - i < 3 {
                    malformed!(
                        t,
                        Problem::Truncated {
                            need: 3,
                            have: n - i,
                        },
                    );
                }
                place!(w & PC_MASK);
                mem::<T>(
                    pid,
                    tid,
                    t,
                    w & PC_MASK,
                    words[i + 1],
                    words[i + 2],
                    addr_mask,
                    trace,
                );
                i += 3;
                extra += 2;
            } else {
                // Packed accesses of 32-bit guests (0x14..=0x16,
                // 0x1c..=0x1e): address and value share the second word.
                if n - i < 2 {
                    malformed!(
                        t,
                        Problem::Truncated {
                            need: 2,
                            have: n - i,
                        },
                    );
                }
                place!(w & PC_MASK);
                let av = words[i + 1];
                mem::<T>(
                    pid,
                    tid,
                    t,
                    w & PC_MASK,
                    av & 0xffff_ffff,
                    av >> 32,
                    addr_mask,
                    trace,
                );
                i += 2;
                extra += 1;
            }
            continue;
        }
        match t {
            // Inside a block (outside one, the loop above took it).
            tag::EXEC => {
                place!(w);
                T::exec(pid, tid, w, trace);
                i += 1;
            }
            tag::LOAD128 | tag::STORE128 => {
                if n - i < 4 {
                    malformed!(
                        t,
                        Problem::Truncated {
                            need: 4,
                            have: n - i,
                        },
                    );
                }
                place!(w & PC_MASK);
                let val = (words[i + 3] as u128) << 64 | words[i + 2] as u128;
                mem128::<T>(
                    pid,
                    tid,
                    t,
                    w & PC_MASK,
                    words[i + 1] & addr_mask,
                    val,
                    trace,
                );
                i += 4;
                extra += 3;
            }
            tag::EXEC_LONG => {
                if n - i < 2 {
                    malformed!(
                        t,
                        Problem::Truncated {
                            need: 2,
                            have: n - i,
                        },
                    );
                }
                place!(words[i + 1]);
                T::exec(pid, tid, words[i + 1], trace);
                i += 2;
                extra += 1;
            }
            tag::CUT => {
                if let Some(o) = open.take() {
                    expanded += cut::<T>(pid, tid, o, w & PC_MASK, trace);
                }
                i += 1;
                extra += 1;
            }
            tag::CUT_LONG => {
                if n - i < 2 {
                    malformed!(
                        t,
                        Problem::Truncated {
                            need: 2,
                            have: n - i,
                        },
                    );
                }
                if let Some(o) = open.take() {
                    expanded += cut::<T>(pid, tid, o, words[i + 1], trace);
                }
                i += 2;
                extra += 2;
            }
            tag::MEM_LONG => {
                if n - i < 4 {
                    malformed!(
                        t,
                        Problem::Truncated {
                            need: 4,
                            have: n - i,
                        },
                    );
                }
                let kind = w as u8;
                if kind == tag::LOAD128 || kind == tag::STORE128 {
                    if n - i < 5 {
                        malformed!(
                            t,
                            Problem::Truncated {
                                need: 5,
                                have: n - i,
                            },
                        );
                    }
                    place!(words[i + 1]);
                    let val = (words[i + 4] as u128) << 64 | words[i + 3] as u128;
                    mem128::<T>(
                        pid,
                        tid,
                        kind,
                        words[i + 1],
                        words[i + 2] & addr_mask,
                        val,
                        trace,
                    );
                    i += 5;
                    extra += 4;
                    continue;
                }
                if !matches!(kind, 0x10..=0x13 | 0x18..=0x1b) {
                    malformed!(t, Problem::BadMemKind(kind));
                }
                place!(words[i + 1]);
                mem::<T>(
                    pid,
                    tid,
                    kind,
                    words[i + 1],
                    words[i + 2],
                    words[i + 3],
                    addr_mask,
                    trace,
                );
                i += 4;
                extra += 3;
            }
            t if t >= tag::FRAMED => {
                // A registers or order event belongs to its instruction;
                // any other framed event (a known kind or not) ends the
                // block. (A malformed one ends it too, placed or not: the
                // rest of the block is expanded either way.)
                if open.is_some() {
                    if matches!(t, tag::REGS | tag::SOME_REGS | tag::ORDER) && i + 1 < n {
                        place!(words[i + 1]);
                    } else {
                        close_open!();
                    }
                }
                match framed::<T>(pid, tid, words, bytes, i, lay, &mut cur.regs, trace) {
                    Ok(Frame::Known(len)) => {
                        i += len;
                        extra += len - 1;
                    }
                    Ok(Frame::Unknown(len)) => {
                        cur.skipped.add(t);
                        i += len;
                        extra += len;
                    }
                    Err(p) => malformed!(t, p),
                }
            }
            _ => malformed!(t, Problem::UnknownTag),
        }
    }
    stop!(Stop::End)
}

/// A load or store: `t` is its `LOAD`/`STORE` tag.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn mem<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    t: u8,
    pc: u64,
    addr: u64,
    val: u64,
    addr_mask: u64,
    trace: &mut Vec<T::Trace>,
) {
    let lg = (t & 3) as usize;
    let sz = 1u8 << lg;
    let addr = addr & addr_mask;
    let val = val & VAL_MASK[lg];
    if t & 0x08 == 0 {
        T::read(pid, tid, pc, addr, val, sz, trace);
    } else {
        T::write(pid, tid, pc, addr, val, sz, trace);
    }
}

/// A 16-byte load or store: `t` is `LOAD128` or `STORE128`, `addr` masked.
#[inline(never)]
fn mem128<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    t: u8,
    pc: u64,
    addr: u64,
    val: u128,
    trace: &mut Vec<T::Trace>,
) {
    let a = Access {
        pc,
        addr,
        val,
        size: 16,
        store: t != tag::LOAD128,
    };
    T::access_wide(pid, tid, &a, trace);
}
