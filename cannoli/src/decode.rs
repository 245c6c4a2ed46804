//! The hot loop: turns one chunk of wire events into calls of the tool's
//! parallel callbacks.
//!
//! Monomorphized over the tool (`T: Cannoli`), so every callback is a direct
//! (usually inlined) call. Each event costs one load of its first word and one
//! compare on the common path: an exec event is the bare pc, i.e. any word
//! whose top byte is zero.
//!
//! The rare framed events (tags from `0x20` on: registers, syscalls,
//! mappings, signals) are decoded out of line in [`framed`], after every
//! JIT event kind has been tried. A framed tag this client does not know is
//! skipped whole (its frame says how long it is) and counted in
//! [`Decoded::skipped`], so an older client can read a newer QEMU side's
//! stream.
//!
//! # Blocks
//!
//! A run event stands for the instructions of a translated block (its
//! entry in the process's block table, `wire::blocks`, looked up in the
//! [`BlockCache`]): the decoder keeps the stream's *open block* and the
//! index `next` of its first instruction not reported yet, and *expands*
//! instructions (one `exec` callback for each whose exec-mask bit is set)
//! as the events show how far the block ran:
//! - a run event closes the open block (expands the rest: it ran to its
//!   end) and opens its own ([`NO_ENTRY`]: none);
//! - an event that carries a pc (exec, memory, registers) is *placed*: if
//!   the pc is in the rest of the block, the instructions before it are
//!   expanded, then the instruction itself (if its bit is set), then the
//!   event is delivered; the instruction just placed takes further events
//!   without expansion; a pc not in the block closes it first;
//! - a cut expands through its pc's instruction and ends the block without
//!   the rest (not in the block: ends it with nothing expanded);
//! - every other event, and the end of the stream, closes the block.
//!
//! Chunks are decoded in parallel, so a chunk may start inside a block that
//! an earlier chunk opened. Its *head* (the in-block events and cuts it
//! starts with, up to the first cut) is therefore only copied on the worker
//! ([`Seam`]); the in-order delivery decodes it with the block the earlier
//! chunks left open ([`stitch`]) before it hands on the rest, the *body*,
//! which the worker decoded starting with no block open (its first event
//! closes the inherited block anyway).
//!
//! To add a JIT event: give it a tag in `wire::tag`, add a match arm in
//! [`decode_words`] that checks it has enough words, calls the callback and
//! advances `i` (adding the words after the first to `extra`), and a test;
//! if it belongs to an instruction, place it in the open block (and add it
//! to [`head_len`]), else close the block first.
//! To add a framed event: a tag from `0x27` on, its minimum length in
//! [`frame_min`], a match arm in [`framed`], and a test.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::blocks::{Block, BlockCache};
use crate::{Cannoli, ClientInfo, Signal, Syscall};
use wire::blocks::{EntryError, NO_ENTRY};
use wire::{map_flags, tag, PC_BITS, PC_MASK};

/// What went wrong in a chunk. Decoding stops at the first malformed event;
/// the rest of the chunk is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Problem {
    /// The event's tag is not one this client knows.
    UnknownTag,
    /// The event needs `need` words but only `have` are left in the chunk.
    Truncated { need: usize, have: usize },
    /// A `MEM_LONG` event whose kind byte is not a load or store tag.
    BadMemKind(u8),
    /// The chunk's length is not a multiple of 8: `len % 8` stray bytes at
    /// the end.
    TrailingBytes(usize),
    /// A framed event `len` words long that needs at least `min` words (for
    /// its fixed fields, registers, or the byte payload its length field
    /// announces).
    ShortFrame { len: u32, min: u64 },
    /// A registers event whose `aux` is not a `wire::RegsKind`.
    BadRegsKind(u32),
    /// A run event naming block `id`, which the block table does not have
    /// or has damaged.
    Block { id: u64, error: EntryError },
}

/// A malformed spot in a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed {
    /// Byte offset of the bad event in the chunk.
    pub offset: usize,
    /// Its tag (top byte of its first word).
    pub tag: u8,
    pub problem: Problem,
    /// Bytes skipped from `offset` to the end of the chunk.
    pub skipped_bytes: usize,
}

impl Malformed {
    /// Events lost by skipping the rest of the chunk, counted as one per
    /// skipped word (an upper bound: every event is at least one word, and
    /// almost all are exec events of exactly one), at least 1.
    pub fn lost_events(&self) -> u64 {
        ((self.skipped_bytes / 8) as u64).max(1)
    }
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.problem {
            Problem::UnknownTag => write!(f, "unknown event tag {:#04x}", self.tag)?,
            Problem::Truncated { need, have } => write!(
                f,
                "event with tag {:#04x} needs {need} words but the chunk ends after {have}",
                self.tag
            )?,
            Problem::BadMemKind(k) => write!(
                f,
                "long memory event (tag {:#04x}) has kind {k:#04x}, which is neither a load nor a store",
                self.tag
            )?,
            Problem::TrailingBytes(n) => write!(f, "chunk length is not a multiple of 8 ({n} stray bytes at the end)")?,
            Problem::ShortFrame { len, min } => write!(
                f,
                "framed event with tag {:#04x} is {len} words long but needs at least {min}",
                self.tag
            )?,
            Problem::BadRegsKind(k) => write!(
                f,
                "registers event (tag {:#04x}) has kind {k}, which is none of regs (0), branch-no (1), branch-yes (2)",
                self.tag
            )?,
            Problem::Block { id, error } => write!(
                f,
                "{error} (run event, tag {:#04x}, block {id})",
                self.tag
            )?,
        }
        write!(
            f,
            " at offset {} ({} bytes of the chunk skipped)",
            self.offset, self.skipped_bytes
        )
    }
}

/// Result of decoding one chunk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Decoded {
    /// Events handed to the callbacks.
    pub events: u64,
    /// Framed events of unknown tags, skipped.
    pub skipped: u64,
    /// The tag of the first of them.
    pub skipped_tag: Option<u8>,
    pub error: Option<Malformed>,
}

/// What decoding needs to know about a stream, from its [`ClientInfo`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout<'a> {
    /// From [`addr_mask`].
    pub addr_mask: u64,
    /// Register words in a registers event.
    pub reg_words: usize,
    pub syscall_names: &'a BTreeMap<u64, String>,
}

impl<'a> Layout<'a> {
    pub fn new(ci: &'a ClientInfo) -> Layout<'a> {
        Layout {
            addr_mask: addr_mask(ci.guest_bits),
            reg_words: ci.regs.count as usize,
            syscall_names: &ci.syscall_names,
        }
    }
}

/// Mask selecting the guest address bits.
#[inline]
pub(crate) fn addr_mask(guest_bits: u32) -> u64 {
    if guest_bits == 0 || guest_bits >= 64 {
        u64::MAX
    } else {
        (1u64 << guest_bits) - 1
    }
}

/// Value masks indexed by log2 of the access size.
const VAL_MASK: [u64; 4] = [0xff, 0xffff, 0xffff_ffff, u64::MAX];

/// The block a stream is in the middle of: the instructions of `block`
/// from `next` on have not been expanded yet.
#[derive(Debug, Clone)]
pub(crate) struct OpenBlock {
    pub block: Arc<Block>,
    pub next: usize,
}

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

/// Decodes one chunk's bytes on a worker, calling `T`'s callbacks in order
/// for its body, and leaves in `seam` what [`stitch`] needs to deliver it
/// in order. `cache`: the process's block table (none: every run event
/// names an unknown block, except [`NO_ENTRY`]'s).
///
/// Never panics on malformed input: it stops at the first bad event and
/// reports it.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    data: &[u8],
    lay: &Layout<'_>,
    cache: Option<&BlockCache>,
    trace: &mut Vec<T::Trace>,
    seam: &mut Seam,
) -> Decoded {
    let whole = data.len() & !7;
    let (body, tail) = data.split_at(whole);

    let mut d = with_words(body, |words| {
        decode_chunk::<T>(pid, tid, words, body, lay, cache, trace, seam)
    });
    match &mut d.error {
        // The stray bytes after the last whole word are skipped too: a
        // malformed event's `skipped_bytes` runs to the end of the chunk.
        Some(m) => m.skipped_bytes += tail.len(),
        None if !tail.is_empty() => {
            d.error = Some(Malformed {
                offset: whole,
                tag: tail.last().copied().unwrap_or(0), // the top byte of a would-be word
                problem: Problem::TrailingBytes(tail.len()),
                skipped_bytes: tail.len(),
            })
        }
        None => {}
    }
    d
}

/// [`decode`] over whole words.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn decode_chunk<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    words: &[u64],
    bytes: &[u8],
    lay: &Layout<'_>,
    cache: Option<&BlockCache>,
    trace: &mut Vec<T::Trace>,
    seam: &mut Seam,
) -> Decoded {
    let n = words.len();
    let h = head_len(words, lay.reg_words);
    seam.head.clear();
    seam.head.extend_from_slice(&words[..h]);
    seam.body = h < n;
    seam.tail = None;
    let mut cur = Cursor {
        i: h,
        ..Cursor::default()
    };
    let bad = loop {
        // One read lock per chunk (and per miss).
        let guard = cache.map(BlockCache::read);
        let slots: &[Option<Arc<Block>>] = guard.as_deref().map_or(&[], |v| &v[..]);
        let mut open = None;
        match decode_words::<T>(
            pid, tid, words, bytes, lay, slots, &mut open, &mut cur, trace,
        ) {
            Stop::End => {
                seam.tail = open.map(Open::to_owned);
                break None;
            }
            Stop::Bad(t, p) => break Some((t, p)),
            // The run event at `cur.i` names a block the cache does not
            // have yet; the block before it is closed (`open` is None).
            Stop::Miss(id) => {
                drop(guard);
                let filled = match cache {
                    Some(c) => c.fill(id),
                    None => Err(EntryError::NotPublished),
                };
                if let Err(error) = filled {
                    break Some((tag::RUN, Problem::Block { id, error }));
                }
            }
        }
    };
    Decoded {
        events: cur.events(h),
        skipped: cur.skipped.count,
        skipped_tag: cur.skipped.first,
        error: bad.map(|(tag, problem)| Malformed {
            offset: cur.i * 8,
            tag,
            problem,
            skipped_bytes: (n - cur.i) * 8,
        }),
    }
}

/// Words of the head of a chunk: the longest prefix of well-formed
/// in-block events (exec, memory, registers) and cuts, up to and including
/// the first cut. A malformed event ends it (it is reported by the body).
fn head_len(words: &[u64], reg_words: usize) -> usize {
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
            tag::REGS => {
                let (_, aux, len) = wire::unframe(w);
                if (len as usize) < frame_min(tag::REGS, reg_words) || aux > 2 {
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
    lay: &Layout<'_>,
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
        &seam.head,
        &bytes,
        lay,
        &[],
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
    match carry.take() {
        Some(o) => expand::<T>(pid, tid, &o.block, o.next, o.block.len(), trace),
        None => 0,
    }
}

/// Decodes a whole stream given as its chunks the way the server does:
/// each chunk on its own (last chunk first, to show that the order does
/// not matter), then in order each one's head stitched and its trace
/// appended to `trace`, then the block still open closed. The result adds
/// up the chunks' (offsets are within their chunk; the first error and the
/// first skipped tag in stream order).
pub(crate) fn decode_stream<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    chunks: &[&[u8]],
    lay: &Layout<'_>,
    cache: Option<&BlockCache>,
    trace: &mut Vec<T::Trace>,
) -> Decoded {
    let mut done: Vec<(Vec<T::Trace>, Seam, Decoded)> =
        (0..chunks.len()).map(|_| Default::default()).collect();
    for (c, (t, s, d)) in chunks.iter().zip(done.iter_mut()).rev() {
        *d = decode::<T>(pid, tid, c, lay, cache, t, s);
    }
    let mut all = Decoded::default();
    let mut carry = None;
    for (t, s, d) in done {
        all.events += d.events + stitch::<T>(pid, tid, lay, &mut carry, &s, trace);
        trace.extend(t);
        all.skipped += d.skipped;
        all.skipped_tag = all.skipped_tag.or(d.skipped_tag);
        all.error = all.error.or(d.error);
    }
    all.events += finish::<T>(pid, tid, &mut carry, trace);
    all
}

/// `words` as little-endian bytes: in place on a little-endian host.
fn le_bytes(words: &[u64]) -> Cow<'_, [u8]> {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: the bytes of `words` are initialized, u8 has no alignment
        // requirement, and the slice covers exactly the words' memory,
        // borrowed for as long as `words` is.
        Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 8)
        })
    }
    #[cfg(not(target_endian = "little"))]
    {
        Cow::Owned(words.iter().flat_map(|w| w.to_le_bytes()).collect())
    }
}

/// Runs `f` over `bytes` viewed as little-endian `u64` words: in place when
/// the host is little-endian and the bytes are 8-aligned (always the case for
/// mempipe chunks), else over a converted copy.
#[inline(always)]
fn with_words<R>(bytes: &[u8], f: impl FnOnce(&[u64]) -> R) -> R {
    debug_assert!(bytes.len() % 8 == 0);
    #[cfg(target_endian = "little")]
    {
        // SAFETY: every bit pattern is a valid u64; align_to only yields a
        // middle slice that is properly aligned and within `bytes`.
        let (pre, words, post) = unsafe { bytes.align_to::<u64>() };
        if pre.is_empty() && post.is_empty() {
            return f(words);
        }
    }
    let copy: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    f(&copy)
}

/// The open block inside the decode loop: borrowed from the cache's slots
/// (or from the carried [`OpenBlock`]).
#[derive(Debug, Clone, Copy)]
struct Open<'b> {
    block: &'b Arc<Block>,
    next: usize,
}

impl Open<'_> {
    fn to_owned(self) -> OpenBlock {
        OpenBlock {
            block: self.block.clone(),
            next: self.next,
        }
    }
}

/// Where [`decode_words`] is in a chunk, kept across its calls.
#[derive(Debug, Default)]
struct Cursor {
    /// Next word to decode.
    i: usize,
    /// Words consumed that did not start a delivered event.
    extra: usize,
    /// Exec callbacks of block instructions.
    expanded: u64,
    skipped: Skipped,
}

impl Cursor {
    /// Events delivered since word `from`.
    fn events(&self, from: usize) -> u64 {
        (self.i - from - self.extra) as u64 + self.expanded
    }
}

/// Why [`decode_words`] returned.
#[derive(Debug)]
enum Stop {
    /// At the end of the words.
    End,
    /// At a run event (word `i`) whose block is not in the slots; the block
    /// before it is closed.
    Miss(u64),
    /// At a malformed event (word `i`); the open block is closed.
    Bad(u8, Problem),
}

/// Calls `exec` for the instructions `from..to` of `b` that its mask
/// reports. Returns how many.
#[inline(always)]
fn expand<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    b: &Block,
    from: usize,
    to: usize,
    trace: &mut Vec<T::Trace>,
) -> u64 {
    let pcs = &b.pcs[from..to];
    if b.all {
        T::exec_run(pid, tid, pcs, trace);
        pcs.len() as u64
    } else {
        expand_masked::<T>(pid, tid, b, from, to, trace)
    }
}

/// [`expand`] of a block whose mask has clear bits.
#[inline(never)]
fn expand_masked<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    b: &Block,
    from: usize,
    to: usize,
    trace: &mut Vec<T::Trace>,
) -> u64 {
    // Runs of reported instructions go out whole.
    let mut n = 0;
    let mut k = from;
    while k < to {
        if !b.is_exec(k) {
            k += 1;
            continue;
        }
        let start = k;
        while k < to && b.is_exec(k) {
            k += 1;
        }
        T::exec_run(pid, tid, &b.pcs[start..k], trace);
        n += (k - start) as u64;
    }
    n
}

/// The open block ran to its end: expands the rest.
#[inline(always)]
fn close<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    o: Open<'_>,
    trace: &mut Vec<T::Trace>,
) -> u64 {
    expand::<T>(pid, tid, o.block, o.next, o.block.len(), trace)
}

/// Where the instruction at `pc` is in the unexpanded rest of `o`.
#[inline(always)]
fn find(o: &Open<'_>, pc: u64) -> Option<usize> {
    o.block.pcs[o.next..]
        .iter()
        .position(|&p| p == pc)
        .map(|k| o.next + k)
}

/// Places an event of the instruction at `pc` in the open block: expands
/// the instructions before it and, if reported, the instruction itself (an
/// event of the instruction just placed needs nothing). Returns false if
/// `pc` is not in the block: the block ran to its end (expanded) and is
/// closed.
#[inline(always)]
fn place<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    o: &mut Open<'_>,
    pc: u64,
    trace: &mut Vec<T::Trace>,
    expanded: &mut u64,
) -> bool {
    if let Some(j) = find(o, pc) {
        // Through the instruction itself (if it is reported).
        *expanded += expand::<T>(pid, tid, o.block, o.next, j + 1, trace);
        o.next = j + 1;
        true
    } else if o.next > 0 && o.block.pcs[o.next - 1] == pc {
        true
    } else {
        *expanded += close::<T>(pid, tid, *o, trace);
        false
    }
}

/// A cut at `pc`: the block ran through the instruction at `pc` and no
/// further. A pc that is not in the rest of the block (nor the instruction
/// just placed) is a cut of another block, one with no run event (no
/// instruction of it is hooked): the open block ran to its end.
#[inline(never)]
fn cut<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    o: Open<'_>,
    pc: u64,
    trace: &mut Vec<T::Trace>,
) -> u64 {
    let Some(j) = find(&o, pc) else {
        if o.next > 0 && o.block.pcs[o.next - 1] == pc {
            return 0;
        }
        return close::<T>(pid, tid, o, trace);
    };
    expand::<T>(pid, tid, o.block, o.next, j + 1, trace)
}

/// The decode loop proper, over whole words from `cur.i` on, with `open`
/// the block open at `cur.i`. `bytes` are the same words as little-endian
/// bytes (for the byte payloads of framed events); `slots` the block
/// cache's (read-locked).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn decode_words<'b, T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    words: &[u64],
    bytes: &[u8],
    lay: &Layout<'_>,
    slots: &'b [Option<Arc<Block>>],
    state: &mut Option<Open<'b>>,
    cur: &mut Cursor,
    trace: &mut Vec<T::Trace>,
) -> Stop {
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
        let t = (w >> PC_BITS) as u8;
        // The bulk of a block-granular stream: close the running block,
        // open the next.
        if t == tag::RUN {
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
        match t {
            // Inside a block (outside one, the loop above took it).
            tag::EXEC => {
                place!(w);
                T::exec(pid, tid, w, trace);
                i += 1;
            }
            // Loads 0x10..=0x13, stores 0x18..=0x1b.
            0x10..=0x13 | 0x18..=0x1b => {
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
            }
            // Packed accesses of 32-bit guests: address and value share
            // the second word.
            0x14..=0x16 | 0x1c..=0x1e => {
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
                // A registers event belongs to its instruction; any other
                // framed event (a known kind or not) ends the block. (A
                // malformed one ends it too, placed or not: the rest of the
                // block is expanded either way.)
                if open.is_some() {
                    if t == tag::REGS && i + 1 < n {
                        place!(words[i + 1]);
                    } else {
                        close_open!();
                    }
                }
                match framed::<T>(pid, tid, words, bytes, i, lay, trace) {
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

/// Framed events of unknown tags seen in a chunk.
#[derive(Debug, Clone, Copy, Default)]
struct Skipped {
    count: u64,
    first: Option<u8>,
}

impl Skipped {
    #[cold]
    fn add(&mut self, t: u8) {
        self.count += 1;
        self.first.get_or_insert(t);
    }
}

/// A well-formed framed event: its length in words, and whether it was
/// delivered (a tag this client knows) or skipped.
enum Frame {
    Known(usize),
    Unknown(usize),
}

/// Fewest words a framed event of tag `t` can have, before its byte payload;
/// 1 (the header) for a tag this client does not know.
#[inline]
fn frame_min(t: u8, reg_words: usize) -> usize {
    match t {
        tag::REGS => 2 + reg_words,
        tag::SYSCALL => 11,
        tag::MMAP => 5,
        tag::MUNMAP | tag::MPROTECT => 3,
        tag::SIGNAL => 5,
        tag::BLOCK => 2,
        _ => 1,
    }
}

/// Decodes the framed event at word `i` of `words` (`bytes`: the same, as
/// little-endian bytes) and calls its callback. Out of line: framed events
/// are rare, and this keeps the hot loop small (slicing here, not in the
/// loop, spares the loop a byte-offset induction variable).
#[inline(never)]
fn framed<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    words: &[u64],
    bytes: &[u8],
    i: usize,
    lay: &Layout<'_>,
    trace: &mut Vec<T::Trace>,
) -> Result<Frame, Problem> {
    let (words, bytes) = (&words[i..], &bytes[i * 8..]);
    let (t, aux, len32) = wire::unframe(words[0]);
    let len = len32 as usize;
    let min = frame_min(t, lay.reg_words);
    if len < min {
        return Err(Problem::ShortFrame {
            len: len32,
            min: min as u64,
        });
    }
    if len > words.len() {
        return Err(Problem::Truncated {
            need: len,
            have: words.len(),
        });
    }
    let f = &words[..len];
    // `n` payload bytes from word `at` on, if the frame has room for them.
    let payload = |at: usize, n: u64| -> Result<&[u8], Problem> {
        let need = at as u64 + n.div_ceil(8);
        if need > len as u64 {
            return Err(Problem::ShortFrame {
                len: len32,
                min: need,
            });
        }
        Ok(&bytes[at * 8..at * 8 + n as usize])
    };
    let m = lay.addr_mask;
    match t {
        tag::REGS => {
            let regs = &bytes[16..16 + lay.reg_words * 8];
            match aux {
                0 => T::regs(pid, tid, f[1], regs, trace),
                1 | 2 => T::branch(pid, tid, f[1], aux == 2, regs, trace),
                _ => return Err(Problem::BadRegsKind(aux)),
            }
        }
        tag::SYSCALL => {
            let data = payload(11, f[9])?;
            let num = f[1];
            let sc = Syscall {
                num,
                name: lay.syscall_names.get(&num).map(String::as_str),
                args: [f[3] & m, f[4] & m, f[5] & m, f[6] & m, f[7] & m, f[8] & m],
                ret: if aux & 1 != 0 {
                    Some(f[2] as i64)
                } else {
                    None
                },
                data,
                data_total: f[10],
            };
            T::syscall(pid, tid, &sc, trace);
        }
        tag::MMAP => {
            // Borrowed unless the path is not UTF-8.
            let path: Cow<'_, str> = String::from_utf8_lossy(payload(5, f[4])?);
            T::mmap(
                pid,
                tid,
                f[1] & m,
                f[2],
                aux & map_flags::ANON != 0,
                aux & map_flags::READ != 0,
                aux & map_flags::WRITE != 0,
                aux & map_flags::EXEC != 0,
                &path,
                f[3],
                trace,
            );
        }
        tag::MUNMAP => T::munmap(pid, tid, f[1] & m, f[2], trace),
        tag::MPROTECT => T::mprotect(
            pid,
            tid,
            f[1] & m,
            f[2],
            aux & map_flags::READ != 0,
            aux & map_flags::WRITE != 0,
            aux & map_flags::EXEC != 0,
            trace,
        ),
        tag::SIGNAL => {
            let sig = Signal {
                signo: f[1] as i32,
                code: f[2] as i32,
                fault_addr: f[3] & m,
                handler: if f[4] == 0 { None } else { Some(f[4] & m) },
            };
            T::signal(pid, tid, &sig, trace);
        }
        tag::BLOCK => {
            let count = aux as usize;
            let lens = bytes
                .get(16..16 + count)
                .filter(|_| 2 + count.div_ceil(8) <= len);
            let Some(lens) = lens else {
                return Err(Problem::ShortFrame {
                    len: len32,
                    min: (2 + count.div_ceil(8)) as u64,
                });
            };
            T::block(pid, tid, words[1] & lay.addr_mask, lens, trace);
        }
        _ => return Ok(Frame::Unknown(len)),
    }
    Ok(Frame::Known(len))
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
    if t == tag::LOAD128 {
        T::read_wide(pid, tid, pc, addr, val, 16, trace);
    } else {
        T::write_wide(pid, tid, pc, addr, val, 16, trace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClientInfo;
    use std::sync::Arc;

    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Ev {
        Exec(u64),
        Read(u64, u64, u64, u8),
        Write(u64, u64, u64, u8),
        Regs(u64, Vec<u8>),
        Branch(u64, bool, Vec<u8>),
        Read128(u64, u64, u128),
        Write128(u64, u64, u128),
        Block(u64, Vec<u8>),
        Mmap {
            base: u64,
            len: u64,
            anon: bool,
            prot: &'static str,
            path: String,
            offset: u64,
        },
        Munmap(u64, u64),
        Mprotect(u64, u64, &'static str),
        Syscall {
            num: u64,
            name: Option<String>,
            args: [u64; 6],
            ret: Option<i64>,
            data: Vec<u8>,
            total: u64,
        },
        Signal(Signal),
    }

    fn prot(r: bool, w: bool, x: bool) -> &'static str {
        ["---", "--x", "-w-", "-wx", "r--", "r-x", "rw-", "rwx"]
            [(r as usize) << 2 | (w as usize) << 1 | x as usize]
    }

    pub struct Rec;
    impl Cannoli for Rec {
        type Trace = Ev;
        type TidContext = ();
        type PidContext = ();
        fn init_pid(_: &ClientInfo) -> Arc<()> {
            Arc::new(())
        }
        fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
            (Rec, ())
        }
        fn exec(_: &(), _: &(), pc: u64, t: &mut Vec<Ev>) {
            t.push(Ev::Exec(pc));
        }
        fn read(_: &(), _: &(), pc: u64, a: u64, v: u64, s: u8, t: &mut Vec<Ev>) {
            t.push(Ev::Read(pc, a, v, s));
        }
        fn write(_: &(), _: &(), pc: u64, a: u64, v: u64, s: u8, t: &mut Vec<Ev>) {
            t.push(Ev::Write(pc, a, v, s));
        }
        fn regs(_: &(), _: &(), pc: u64, regs: &[u8], t: &mut Vec<Ev>) {
            t.push(Ev::Regs(pc, regs.to_vec()));
        }
        fn branch(_: &(), _: &(), pc: u64, b: bool, regs: &[u8], t: &mut Vec<Ev>) {
            t.push(Ev::Branch(pc, b, regs.to_vec()));
        }
        fn mmap(
            _: &(),
            _: &(),
            base: u64,
            len: u64,
            anon: bool,
            r: bool,
            w: bool,
            x: bool,
            path: &str,
            offset: u64,
            t: &mut Vec<Ev>,
        ) {
            t.push(Ev::Mmap {
                base,
                len,
                anon,
                prot: prot(r, w, x),
                path: path.to_string(),
                offset,
            });
        }
        fn munmap(_: &(), _: &(), base: u64, len: u64, t: &mut Vec<Ev>) {
            t.push(Ev::Munmap(base, len));
        }
        fn mprotect(
            _: &(),
            _: &(),
            base: u64,
            len: u64,
            r: bool,
            w: bool,
            x: bool,
            t: &mut Vec<Ev>,
        ) {
            t.push(Ev::Mprotect(base, len, prot(r, w, x)));
        }
        fn syscall(_: &(), _: &(), sc: &Syscall<'_>, t: &mut Vec<Ev>) {
            t.push(Ev::Syscall {
                num: sc.num,
                name: sc.name.map(str::to_string),
                args: sc.args,
                ret: sc.ret,
                data: sc.data.to_vec(),
                total: sc.data_total,
            });
        }
        fn signal(_: &(), _: &(), sig: &Signal, t: &mut Vec<Ev>) {
            t.push(Ev::Signal(*sig));
        }
        fn read_wide(_: &(), _: &(), pc: u64, a: u64, v: u128, s: u8, t: &mut Vec<Ev>) {
            assert_eq!(s, 16);
            t.push(Ev::Read128(pc, a, v));
        }
        fn write_wide(_: &(), _: &(), pc: u64, a: u64, v: u128, s: u8, t: &mut Vec<Ev>) {
            assert_eq!(s, 16);
            t.push(Ev::Write128(pc, a, v));
        }
        fn block(_: &(), _: &(), pc: u64, lens: &[u8], t: &mut Vec<Ev>) {
            t.push(Ev::Block(pc, lens.to_vec()));
        }
    }

    /// Register words in the tests' registers events.
    const REGS: usize = 3;

    fn names() -> &'static BTreeMap<u64, String> {
        static N: std::sync::OnceLock<BTreeMap<u64, String>> = std::sync::OnceLock::new();
        N.get_or_init(|| {
            [(4004, "write".to_string()), (4001, "exit".to_string())]
                .into_iter()
                .collect()
        })
    }

    fn layout(bits: u32) -> Layout<'static> {
        Layout {
            addr_mask: addr_mask(bits),
            reg_words: REGS,
            syscall_names: names(),
        }
    }

    /// `b` as little-endian words, zero-padded.
    fn pad(b: &[u8]) -> Vec<u64> {
        b.chunks(8)
            .map(|c| {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                u64::from_le_bytes(w)
            })
            .collect()
    }

    fn bytes(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn run(words: &[u64], bits: u32) -> (Vec<Ev>, Decoded) {
        run_bytes(&bytes(words), bits)
    }

    /// Decodes `b` as a stream of one chunk, without a block table.
    fn run_bytes(b: &[u8], bits: u32) -> (Vec<Ev>, Decoded) {
        let mut t = Vec::new();
        let d = decode_stream::<Rec>(&(), &(), &[b], &layout(bits), None, &mut t);
        (t, d)
    }

    fn top(t: u8) -> u64 {
        (t as u64) << 56
    }

    #[test]
    fn exec_events() {
        let (t, d) = run(&[0x400000, 0x400004, 0, PC_MASK], 64);
        assert_eq!(
            t,
            vec![
                Ev::Exec(0x400000),
                Ev::Exec(0x400004),
                Ev::Exec(0),
                Ev::Exec(PC_MASK)
            ]
        );
        assert_eq!(
            d,
            Decoded {
                events: 4,
                ..Default::default()
            }
        );
    }

    #[test]
    fn empty_chunk() {
        let (t, d) = run(&[], 32);
        assert!(t.is_empty());
        assert_eq!(
            d,
            Decoded {
                events: 0,
                ..Default::default()
            }
        );
    }

    #[test]
    fn all_mem_tags_and_masking() {
        let mut words = Vec::new();
        let mut want = Vec::new();
        for store in [false, true] {
            for lg in 0..4u8 {
                let t = wire::mem_tag(store, lg);
                let pc = 0x1000 + lg as u64;
                // Garbage in the upper bits of addr and value must be masked.
                words.extend([top(t) | pc, 0xdead_beef_0040_1234, 0x1122_3344_5566_7788]);
                let sz = 1u8 << lg;
                let v = [0x88, 0x7788, 0x5566_7788, 0x1122_3344_5566_7788][lg as usize];
                want.push(if store {
                    Ev::Write(pc, 0x0040_1234, v, sz)
                } else {
                    Ev::Read(pc, 0x0040_1234, v, sz)
                });
            }
        }
        let (t, d) = run(&words, 32);
        assert_eq!(t, want);
        assert_eq!(
            d,
            Decoded {
                events: 8,
                ..Default::default()
            }
        );

        // 64-bit guests keep the whole address.
        let (t, _) = run(&[top(tag::LOAD | 3) | 0x10, 0xffff_8000_0000_0010, 7], 64);
        assert_eq!(t, vec![Ev::Read(0x10, 0xffff_8000_0000_0010, 7, 8)]);
    }

    #[test]
    fn packed_32bit_mem_events() {
        // Address in the low half, value in the high half; mixed with runs of
        // exec events on both sides of the eight-word look-ahead.
        let mut words: Vec<u64> = (0..9).map(|i| 0x400000 + 4 * i).collect();
        words.extend([
            top(wire::mem32_tag(false, 2)) | 0x400024,
            0x8765_4321_7fff_0010,
        ]);
        words.extend([
            top(wire::mem32_tag(true, 0)) | 0x400028,
            0x0000_01ab_7fff_0011,
        ]);
        words.extend([
            top(wire::mem32_tag(true, 1)) | 0x40002c,
            0xffff_beef_7fff_0012,
        ]);
        words.extend((0..3).map(|i| 0x400030 + 4 * i));
        let (t, d) = run(&words, 32);
        let mut want: Vec<Ev> = (0..9).map(|i| Ev::Exec(0x400000 + 4 * i)).collect();
        want.extend([
            Ev::Read(0x400024, 0x7fff_0010, 0x8765_4321, 4),
            Ev::Write(0x400028, 0x7fff_0011, 0xab, 1),
            Ev::Write(0x40002c, 0x7fff_0012, 0xbeef, 2),
        ]);
        want.extend((0..3).map(|i| Ev::Exec(0x400030 + 4 * i)));
        assert_eq!(t, want);
        assert_eq!(
            d,
            Decoded {
                events: 15,
                ..Default::default()
            }
        );
        // Cut after the tag word: truncated.
        let (_, d) = run(&[top(wire::mem32_tag(false, 0)) | 0x10], 32);
        assert!(matches!(
            d.error.map(|e| e.problem),
            Some(Problem::Truncated { need: 2, have: 1 })
        ));
    }

    #[test]
    fn long_events() {
        let big = 0xff00_0000_0000_1234u64;
        let words = [
            top(tag::EXEC_LONG),
            big,
            0x10,
            top(tag::MEM_LONG) | (tag::STORE | 2) as u64,
            big + 4,
            0xffff_ffff_ffff_fff0,
            0xaaaa_bbbb_cccc_dddd,
            top(tag::MEM_LONG) | (tag::LOAD) as u64,
            big + 8,
            0x20,
            0x1ff,
        ];
        let (t, d) = run(&words, 64);
        assert_eq!(
            t,
            vec![
                Ev::Exec(big),
                Ev::Exec(0x10),
                Ev::Write(big + 4, 0xffff_ffff_ffff_fff0, 0xcccc_dddd, 4),
                Ev::Read(big + 8, 0x20, 0xff, 1),
            ]
        );
        assert_eq!(
            d,
            Decoded {
                events: 4,
                ..Default::default()
            }
        );
    }

    #[test]
    fn wide_accesses_keep_their_whole_value() {
        let big = 0xff00_0000_0000_1234u64;
        let words = [
            top(tag::LOAD128) | 0x400,
            0xffff_ffff_0000_1000,
            0x0706_0504_0302_0100,
            0x0f0e_0d0c_0b0a_0908,
            0x404,
            top(tag::MEM_LONG) | tag::STORE128 as u64,
            big,
            0x2000,
            1,
            2,
        ];
        let (t, d) = run(&words, 32);
        assert_eq!(
            t,
            vec![
                Ev::Read128(0x400, 0x1000, 0x0f0e_0d0c_0b0a_0908_0706_0504_0302_0100),
                Ev::Exec(0x404),
                Ev::Write128(big, 0x2000, 2 << 64 | 1),
            ]
        );
        assert_eq!(d.events, 3);
        assert!(d.error.is_none());
        // One word short of the value's high half.
        let (_, d) = run(&words[..3], 64);
        assert_eq!(
            d.error.unwrap().problem,
            Problem::Truncated { need: 4, have: 3 }
        );
    }

    #[test]
    fn wide_accesses_default_to_the_narrow_callbacks() {
        struct Narrow;
        impl Cannoli for Narrow {
            type Trace = (u64, u64, u8);
            type TidContext = ();
            type PidContext = ();
            fn init_pid(_: &ClientInfo) -> Arc<()> {
                Arc::new(())
            }
            fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
                (Narrow, ())
            }
            fn write(_: &(), _: &(), _: u64, a: u64, v: u64, s: u8, t: &mut Vec<(u64, u64, u8)>) {
                t.push((a, v, s));
            }
        }
        let words = [top(tag::STORE128) | 0x400, 0x1000, 0x1111, 0x2222];
        let mut t = Vec::new();
        let d = decode_stream::<Narrow>(&(), &(), &[&bytes(&words)], &layout(64), None, &mut t);
        assert_eq!(t, vec![(0x1000, 0x1111, 16)]);
        assert_eq!(d.events, 1);
    }

    #[test]
    fn block_events_carry_instruction_lengths() {
        let words = [
            wire::frame(tag::BLOCK, 3, 3),
            0x1_0000,
            u64::from_le_bytes([2, 4, 2, 0, 0, 0, 0, 0]),
            0x1_0000,
        ];
        let (t, d) = run(&words, 32);
        assert_eq!(
            t,
            vec![Ev::Block(0x1_0000, vec![2, 4, 2]), Ev::Exec(0x1_0000)]
        );
        assert_eq!(d.events, 2);
        // Nine instructions need two words of lengths.
        let short = [
            wire::frame(tag::BLOCK, 9, 3),
            0x1_0000,
            0x0202_0202_0202_0202,
        ];
        let (_, d) = run(&short, 32);
        assert!(matches!(
            d.error.unwrap().problem,
            Problem::ShortFrame { .. }
        ));
    }

    #[test]
    fn unknown_tag_stops_and_reports() {
        let words = [0x10, 0x14, top(0x07) | 0x18, 0x1c, 0x20];
        let (t, d) = run(&words, 32);
        assert_eq!(t, vec![Ev::Exec(0x10), Ev::Exec(0x14)]);
        let e = d.error.unwrap();
        assert_eq!(d.events, 2);
        assert_eq!(e.offset, 16);
        assert_eq!(e.tag, 0x07);
        assert_eq!(e.problem, Problem::UnknownTag);
        assert_eq!(e.skipped_bytes, 24);
        assert_eq!(e.lost_events(), 3);
        let msg = e.to_string();
        assert!(msg.contains("0x07") && msg.contains("offset 16"), "{msg}");
    }

    #[test]
    fn truncated_events() {
        // Load with only addr, no value.
        let (t, d) = run(&[0x10, top(tag::LOAD | 2) | 0x14, 0x1000], 32);
        assert_eq!(t, vec![Ev::Exec(0x10)]);
        let e = d.error.unwrap();
        assert_eq!(
            (e.offset, e.tag, e.problem),
            (8, 0x12, Problem::Truncated { need: 3, have: 2 })
        );

        let (t, d) = run(&[top(tag::EXEC_LONG)], 64);
        assert!(t.is_empty());
        assert_eq!(
            d.error.unwrap().problem,
            Problem::Truncated { need: 2, have: 1 }
        );

        let (_, d) = run(&[top(tag::MEM_LONG) | 0x18, 1, 2], 64);
        assert_eq!(
            d.error.unwrap().problem,
            Problem::Truncated { need: 4, have: 3 }
        );
    }

    #[test]
    fn bad_mem_long_kind() {
        let (t, d) = run(&[0x8, top(tag::MEM_LONG) | 0x05, 1, 2, 3], 64);
        assert_eq!(t, vec![Ev::Exec(0x8)]);
        let e = d.error.unwrap();
        assert_eq!(e.problem, Problem::BadMemKind(5));
        assert_eq!(e.offset, 8);
        assert!(e.to_string().contains("neither a load nor a store"));
    }

    #[test]
    fn trailing_bytes() {
        let mut b = bytes(&[0x10, 0x14]);
        b.extend([1, 2, 3]);
        let (t, d) = run_bytes(&b, 32);
        assert_eq!(t, vec![Ev::Exec(0x10), Ev::Exec(0x14)]);
        let e = d.error.unwrap();
        assert_eq!(e.problem, Problem::TrailingBytes(3));
        assert_eq!(e.offset, 16);
        assert_eq!(e.lost_events(), 1);
    }

    #[test]
    fn unaligned_input_is_decoded_too() {
        let b = bytes(&[0x10, top(tag::STORE) | 0x14, 0x100, 0x1ff, 0x18]);
        let mut storage = vec![0u8; b.len() + 1];
        storage[1..].copy_from_slice(&b);
        let (t, d) = run_bytes(&storage[1..], 32);
        assert_eq!(
            t,
            vec![
                Ev::Exec(0x10),
                Ev::Write(0x14, 0x100, 0xff, 1),
                Ev::Exec(0x18)
            ]
        );
        assert_eq!(d.events, 3);
    }

    /// A syscall event's words.
    #[allow(clippy::too_many_arguments)]
    fn syscall_words(
        returned: bool,
        num: u64,
        ret: u64,
        args: [u64; 6],
        data: &[u8],
        total: u64,
    ) -> Vec<u64> {
        let len = wire::framed_len(11, data.len());
        let mut w = vec![
            wire::frame(tag::SYSCALL, returned as u32, len as u32),
            num,
            ret,
        ];
        w.extend(args);
        w.extend([data.len() as u64, total]);
        w.extend(pad(data));
        assert_eq!(w.len(), len);
        w
    }

    fn mmap_words(flags: u32, base: u64, len: u64, offset: u64, path: &[u8]) -> Vec<u64> {
        let n = wire::framed_len(5, path.len());
        let mut w = vec![
            wire::frame(tag::MMAP, flags, n as u32),
            base,
            len,
            offset,
            path.len() as u64,
        ];
        w.extend(pad(path));
        w
    }

    #[test]
    fn regs_and_branch_events() {
        use wire::RegsKind;
        let r = [0x11u64, 0xffff_ffff_8000_0000, 0x33];
        let mut words = vec![
            0x400000,
            wire::frame(tag::REGS, RegsKind::Regs as u32, 5),
            0x400004,
        ];
        words.extend(r);
        words.extend([
            wire::frame(tag::REGS, RegsKind::BranchNo as u32, 5),
            0x400008,
        ]);
        words.extend(r);
        words.extend([
            wire::frame(tag::REGS, RegsKind::BranchYes as u32, 5),
            0x40000c,
        ]);
        words.extend(r);
        // A longer frame (a newer writer's extra word) is fine; the extra
        // word is not a register.
        words.extend([wire::frame(tag::REGS, RegsKind::Regs as u32, 6), 0x400010]);
        words.extend(r);
        words.push(0xdead);
        words.push(0x400014);
        let (t, d) = run(&words, 32);
        let rb = bytes(&r);
        assert_eq!(
            t,
            vec![
                Ev::Exec(0x400000),
                Ev::Regs(0x400004, rb.clone()),
                Ev::Branch(0x400008, false, rb.clone()),
                Ev::Branch(0x40000c, true, rb.clone()),
                Ev::Regs(0x400010, rb.clone()),
                Ev::Exec(0x400014),
            ]
        );
        assert_eq!(
            d,
            Decoded {
                events: 6,
                ..Default::default()
            }
        );
    }

    #[test]
    fn reg_values_by_name() {
        let mut h = wire::Hello {
            magic: wire::MAGIC.into(),
            wire_version: wire::WIRE_VERSION,
            jitter_version: "t".into(),
            pid: 1,
            ppid: 0,
            tid: 1,
            arch: "mipsel".into(),
            big_endian: false,
            guest_bits: 32,
            ring: wire::RingRef::Attached,
            nonce: String::new(),
            proof: String::new(),
            comm: None,
            exe: None,
            regs: wire::RegLayout {
                count: 32,
                bytes: 4,
                names: vec![],
            },
            syscall_names: [(4004, "write".to_string())].into_iter().collect(),
            blocks: None,
        };
        let ci = ClientInfo::from_hello(&h);
        assert_eq!(ci.regs.names.len(), 32);
        assert_eq!(ci.regs.names[29], "sp");
        let mut words: Vec<u64> = (0..32u64).map(|i| 0xabcd_0000_0000_0000 | i).collect();
        words[29] = 0x7fff_fff0;
        let b = bytes(&words);
        assert_eq!(ci.reg(&b, "sp"), Some(0x7fff_fff0));
        assert_eq!(ci.reg(&b, "a0"), Some(4)); // upper bits masked to 4 bytes
        assert_eq!(ci.reg(&b, "rip"), None);
        assert_eq!(ci.reg(&b[..8], "sp"), None);
        let v: Vec<(&str, u64)> = ci.reg_values(&b).take(3).collect();
        assert_eq!(v, vec![("zero", 0), ("at", 1), ("v0", 2)]);
        assert_eq!(ci.reg_values(&b).count(), 32);
        assert_eq!(ci.syscall_name(4004), Some("write"));
        assert_eq!(ci.syscall_name(4005), None);

        // The hello's own names win; missing ones are made up; 8-byte
        // registers are not masked.
        h.arch = "sparc64".into();
        h.regs = wire::RegLayout {
            count: 3,
            bytes: 8,
            names: vec!["pc".into()],
        };
        let ci = ClientInfo::from_hello(&h);
        assert_eq!(ci.regs.names, ["pc", "r1", "r2"]);
        let b = bytes(&[u64::MAX, 1, 2]);
        assert_eq!(
            ci.reg_values(&b).collect::<Vec<_>>(),
            vec![("pc", u64::MAX), ("r1", 1), ("r2", 2)]
        );
    }

    #[test]
    fn syscall_events() {
        let junk = 0xabcd_0000_0000_0000u64;
        let mut words = vec![0x10];
        // write(1, buf, 6) = 6 on a 32-bit guest: args masked.
        words.extend(syscall_words(
            true,
            4004,
            6,
            [1, junk | 0x7ffe_0010, 6, junk, 0, 0],
            b"hello\n",
            6,
        ));
        // An unknown syscall failing with -ENOENT, its data cut short.
        words.extend(syscall_words(
            true,
            4999,
            (-2i64) as u64,
            [0; 6],
            &[0xff; 9],
            100,
        ));
        // exit(3): did not return.
        words.extend(syscall_words(false, 4001, 0, [3, 0, 0, 0, 0, 0], b"", 0));
        words.push(0x14);
        let (t, d) = run(&words, 32);
        assert_eq!(
            t,
            vec![
                Ev::Exec(0x10),
                Ev::Syscall {
                    num: 4004,
                    name: Some("write".into()),
                    args: [1, 0x7ffe_0010, 6, 0, 0, 0],
                    ret: Some(6),
                    data: b"hello\n".to_vec(),
                    total: 6
                },
                Ev::Syscall {
                    num: 4999,
                    name: None,
                    args: [0; 6],
                    ret: Some(-2),
                    data: vec![0xff; 9],
                    total: 100
                },
                Ev::Syscall {
                    num: 4001,
                    name: Some("exit".into()),
                    args: [3, 0, 0, 0, 0, 0],
                    ret: None,
                    data: vec![],
                    total: 0
                },
                Ev::Exec(0x14),
            ]
        );
        assert_eq!(
            d,
            Decoded {
                events: 5,
                ..Default::default()
            }
        );

        // A 64-bit guest keeps whole arguments.
        let (t, _) = run(&syscall_words(true, 64, 1, [junk; 6], b"", 0), 64);
        assert!(matches!(&t[0], Ev::Syscall { args, .. } if *args == [junk; 6]));
    }

    #[test]
    fn mapping_events() {
        use wire::map_flags::*;
        let mut words = vec![0x10];
        words.extend(mmap_words(
            READ | EXEC,
            0xffff_ffff_7700_0000,
            0x1000,
            0x2000,
            b"/lib/libc.so.6",
        ));
        words.extend(mmap_words(
            READ | WRITE | ANON | SHARED,
            0x7600_0000,
            0x3000,
            0,
            b"",
        ));
        words.extend(mmap_words(0, 0x7500_0000, 0x1000, 0, b"/tmp/\xff\xfex"));
        words.extend([wire::frame(tag::MPROTECT, READ, 3), 0x7600_1000, 0x1000]);
        words.extend([wire::frame(tag::MUNMAP, 0, 3), 0x7600_0000, 0x3000]);
        words.push(0x14);
        let (t, d) = run(&words, 32);
        assert_eq!(
            t,
            vec![
                Ev::Exec(0x10),
                Ev::Mmap {
                    base: 0x7700_0000,
                    len: 0x1000,
                    anon: false,
                    prot: "r-x",
                    path: "/lib/libc.so.6".into(),
                    offset: 0x2000
                },
                Ev::Mmap {
                    base: 0x7600_0000,
                    len: 0x3000,
                    anon: true,
                    prot: "rw-",
                    path: "".into(),
                    offset: 0
                },
                Ev::Mmap {
                    base: 0x7500_0000,
                    len: 0x1000,
                    anon: false,
                    prot: "---",
                    path: "/tmp/\u{fffd}\u{fffd}x".into(),
                    offset: 0
                },
                Ev::Mprotect(0x7600_1000, 0x1000, "r--"),
                Ev::Munmap(0x7600_0000, 0x3000),
                Ev::Exec(0x14),
            ]
        );
        assert_eq!(
            d,
            Decoded {
                events: 7,
                ..Default::default()
            }
        );
    }

    #[test]
    fn signal_events() {
        let words = [
            wire::frame(tag::SIGNAL, 0, 5),
            11,
            1, // SEGV_MAPERR
            0xffff_ffff_0000_0008,
            0,
            wire::frame(tag::SIGNAL, 0, 5),
            10,
            (-6i64) as u64, // SI_TKILL, sign-extended
            0,
            0x0040_1234,
            wire::frame(tag::SIGNAL, 0, 5),
            2,
            0xffff_fffa, // SI_TKILL, zero-extended
            0,
            0x0040_1234,
        ];
        let (t, d) = run(&words, 32);
        assert_eq!(
            t,
            vec![
                Ev::Signal(Signal {
                    signo: 11,
                    code: 1,
                    fault_addr: 8,
                    handler: None
                }),
                Ev::Signal(Signal {
                    signo: 10,
                    code: -6,
                    fault_addr: 0,
                    handler: Some(0x401234)
                }),
                Ev::Signal(Signal {
                    signo: 2,
                    code: -6,
                    fault_addr: 0,
                    handler: Some(0x401234)
                }),
            ]
        );
        assert_eq!(d.events, 3);
    }

    #[test]
    fn unknown_framed_tags_are_skipped() {
        let words = [
            0x10,
            wire::frame(0x2a, 0x123, 3),
            0x1111,
            top(0x05), // would be an unknown JIT tag, but it is payload
            0x14,
            wire::frame(0xff, 0, 1),
            wire::frame(0x30, 0, 2),
            u64::MAX,
            wire::frame(tag::MUNMAP, 0, 3),
            0x1000,
            0x2000,
        ];
        let (t, d) = run(&words, 32);
        assert_eq!(
            t,
            vec![Ev::Exec(0x10), Ev::Exec(0x14), Ev::Munmap(0x1000, 0x2000)]
        );
        assert_eq!(
            d,
            Decoded {
                events: 3,
                skipped: 3,
                skipped_tag: Some(0x2a),
                error: None
            }
        );

        // An unknown framed tag must still have a sane length.
        let (t, d) = run(&[0x10, wire::frame(0x2a, 0, 4), 1, 2], 32);
        assert_eq!(t, vec![Ev::Exec(0x10)]);
        let e = d.error.unwrap();
        assert_eq!((e.offset, e.tag), (8, 0x2a));
        assert_eq!(e.problem, Problem::Truncated { need: 4, have: 3 });
        let (_, d) = run(&[0x2a << 56], 32);
        assert_eq!(
            d.error.unwrap().problem,
            Problem::ShortFrame { len: 0, min: 1 }
        );
    }

    #[test]
    fn malformed_frames() {
        let check = |words: &[u64], t: u8, p: Problem| {
            let mut all = vec![0x10];
            all.extend_from_slice(words);
            let (evs, d) = run(&all, 32);
            assert_eq!(evs, vec![Ev::Exec(0x10)], "{words:x?}");
            assert_eq!(d.events, 1);
            let e = d.error.unwrap();
            assert_eq!((e.offset, e.tag, e.problem), (8, t, p), "{words:x?}");
            assert_eq!(e.skipped_bytes, words.len() * 8);
            assert!(e.to_string().contains(&format!("{t:#04x}")), "{e}");
        };
        // Shorter than the tag's fixed fields.
        for (t, min) in [
            (tag::REGS, 2 + REGS),
            (tag::SYSCALL, 11),
            (tag::MMAP, 5),
            (tag::MUNMAP, 3),
            (tag::MPROTECT, 3),
            (tag::SIGNAL, 5),
        ] {
            let len = min as u32 - 1;
            let mut w = vec![wire::frame(t, 0, len)];
            w.resize(len as usize + 4, 0); // room in the chunk is not enough
            check(
                &w,
                t,
                Problem::ShortFrame {
                    len,
                    min: min as u64,
                },
            );
            let mut w = vec![(t as u64) << 56];
            w.resize(8, 0);
            check(
                &w,
                t,
                Problem::ShortFrame {
                    len: 0,
                    min: min as u64,
                },
            );
        }
        // Running past the end of the chunk.
        let mut w = syscall_words(true, 4004, 0, [0; 6], b"abcdefghij", 10);
        w.pop();
        check(&w, tag::SYSCALL, Problem::Truncated { need: 13, have: 12 });
        check(
            &[wire::frame(tag::SIGNAL, 0, 5), 11, 0],
            tag::SIGNAL,
            Problem::Truncated { need: 5, have: 3 },
        );
        check(
            &[wire::frame(tag::MUNMAP, 0, u32::MAX), 0, 0],
            tag::MUNMAP,
            Problem::Truncated {
                need: u32::MAX as usize,
                have: 3,
            },
        );
        // Payload lengths that do not fit in the frame.
        let mut w = syscall_words(true, 4004, 0, [0; 6], b"abcdefghij", 10);
        w[9] = 17;
        check(&w, tag::SYSCALL, Problem::ShortFrame { len: 13, min: 14 });
        w[9] = u64::MAX;
        check(
            &w,
            tag::SYSCALL,
            Problem::ShortFrame {
                len: 13,
                min: 11 + u64::MAX.div_ceil(8),
            },
        );
        let mut w = mmap_words(0, 0, 0, 0, b"/bin/sh");
        w[4] = 9;
        check(&w, tag::MMAP, Problem::ShortFrame { len: 6, min: 7 });
        // Registers event of an unknown kind.
        let mut w = vec![wire::frame(tag::REGS, 3, 5), 0x14];
        w.extend([0; REGS]);
        check(&w, tag::REGS, Problem::BadRegsKind(3));
    }

    #[test]
    fn framed_events_in_unaligned_input() {
        let mut words = vec![0x10];
        words.extend(syscall_words(true, 4004, 3, [0; 6], b"abc", 3));
        words.extend(mmap_words(wire::map_flags::READ, 0x1000, 0x1000, 0, b"/x"));
        let b = bytes(&words);
        let mut storage = vec![0u8; b.len() + 1];
        storage[1..].copy_from_slice(&b);
        let (t, d) = run_bytes(&storage[1..], 32);
        assert_eq!(
            d,
            Decoded {
                events: 3,
                ..Default::default()
            }
        );
        assert!(matches!(&t[1], Ev::Syscall { data, .. } if data == b"abc"));
        assert!(matches!(&t[2], Ev::Mmap { path, .. } if path == "/x"));
    }

    // ------------------------------------------------------------------
    // Blocks
    // ------------------------------------------------------------------

    /// The test table: 0: four instructions, all reported; 1: three, the
    /// middle one not reported; 2: two, all; 3: 70 (two mask words), every
    /// third not reported; 4: damaged (no mask).
    fn cache() -> BlockCache {
        use crate::blocks::tests::entry;
        let seventy: Vec<u64> = (0..70).map(|k| 0x1000 + 4 * k).collect();
        let every: Vec<bool> = (0..70).map(|k| k % 3 != 0).collect();
        let mut damaged = entry(&[0x500], &[true]);
        damaged.exec.clear();
        let table = vec![
            entry(&[0x100, 0x104, 0x108, 0x10c], &[true; 4]),
            entry(&[0x200, 0x204, 0x208], &[true, false, true]),
            entry(&[0x300, 0x304], &[true; 2]),
            entry(&seventy, &every),
            damaged,
        ];
        BlockCache::new(Arc::new(table))
    }

    fn run_w(id: u64) -> u64 {
        top(tag::RUN) | id
    }

    fn cut_w(pc: u64) -> u64 {
        top(tag::CUT) | pc
    }

    fn load(pc: u64) -> [u64; 3] {
        [top(tag::LOAD | 2) | pc, 0x7000 + pc, pc]
    }

    fn store(pc: u64) -> [u64; 3] {
        [top(tag::STORE | 2) | pc, 0x8000 + pc, pc]
    }

    fn rd(pc: u64) -> Ev {
        Ev::Read(pc, 0x7000 + pc, pc, 4)
    }

    fn wr(pc: u64) -> Ev {
        Ev::Write(pc, 0x8000 + pc, pc, 4)
    }

    fn ex(pcs: &[u64]) -> Vec<Ev> {
        pcs.iter().map(|&p| Ev::Exec(p)).collect()
    }

    /// Decodes `words` as a stream of one chunk with the test table.
    fn run_blocks(words: &[u64], c: Option<&BlockCache>) -> (Vec<Ev>, Decoded) {
        let mut t = Vec::new();
        let d = decode_stream::<Rec>(&(), &(), &[&bytes(words)], &layout(32), c, &mut t);
        assert_eq!(d.events, t.len() as u64, "{words:x?}");
        (t, d)
    }

    fn expect(words: &[u64], want: Vec<Ev>) {
        let (t, d) = run_blocks(words, Some(&cache()));
        assert_eq!(d.error, None, "{words:x?}");
        assert_eq!(t, want, "{words:x?}");
    }

    fn cat(parts: &[&[u64]]) -> Vec<u64> {
        parts.concat()
    }

    /// A tool that takes runs whole (`exec_run`) sees the same pcs in the
    /// same order as one taking them one by one, and each run is a stretch
    /// of reported instructions with nothing else between them.
    #[test]
    fn exec_run_gets_the_same_pcs_in_contiguous_runs() {
        pub struct Runs;
        impl Cannoli for Runs {
            type Trace = (bool, Vec<u64>);
            type TidContext = ();
            type PidContext = ();
            fn init_pid(_: &ClientInfo) -> Arc<()> {
                Arc::new(())
            }
            fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
                (Runs, ())
            }
            fn exec(_: &(), _: &(), pc: u64, t: &mut Vec<(bool, Vec<u64>)>) {
                t.push((false, vec![pc]));
            }
            fn exec_run(_: &(), _: &(), pcs: &[u64], t: &mut Vec<(bool, Vec<u64>)>) {
                t.push((true, pcs.to_vec()));
            }
            fn read(_: &(), _: &(), pc: u64, _: u64, _: u64, _: u8, t: &mut Vec<(bool, Vec<u64>)>) {
                t.push((false, vec![!pc]));
            }
        }
        let words = cat(&[
            &[run_w(0), run_w(1)],
            &load(0x204),
            &[run_w(3)],
            &load(0x1000 + 4 * 40),
            &[cut_w(0x1000 + 4 * 50), 0x10, run_w(2)],
        ]);
        let (want, _) = run_blocks(&words, Some(&cache()));
        let mut got = Vec::new();
        let d = decode_stream::<Runs>(
            &(),
            &(),
            &[&bytes(&words)],
            &layout(32),
            Some(&cache()),
            &mut got,
        );
        assert_eq!(d.error, None);
        let flat: Vec<Ev> = got
            .iter()
            .flat_map(|(_, pcs)| {
                pcs.iter().map(|&pc| {
                    if pc > u64::MAX / 2 {
                        rd(!pc)
                    } else {
                        Ev::Exec(pc)
                    }
                })
            })
            .collect();
        assert_eq!(flat, want);
        // Block 0 whole, block 1 around its unreported middle instruction
        // and its load, block 3 in runs split by its mask and its load.
        assert_eq!(got[0], (true, vec![0x100, 0x104, 0x108, 0x10c]));
        assert_eq!(got[1], (true, vec![0x200]));
        assert!(got.iter().all(|(run, pcs)| !run || !pcs.is_empty()));
        assert!(got.iter().filter(|(run, _)| *run).count() > 10);
    }

    #[test]
    fn a_run_after_a_run_expands_the_whole_first_block() {
        expect(
            &[run_w(0), run_w(2)],
            ex(&[0x100, 0x104, 0x108, 0x10c, 0x300, 0x304]),
        );
        // The mask: the unreported instruction is left out.
        expect(&[run_w(1), run_w(1)], ex(&[0x200, 0x208, 0x200, 0x208]));
        // At the end of the stream the open block ran to its end too.
        expect(&[0x10, run_w(2)], ex(&[0x10, 0x300, 0x304]));
        // 70 instructions, two mask words.
        let want: Vec<u64> = (0..70)
            .filter(|k| k % 3 != 0)
            .map(|k| 0x1000 + 4 * k)
            .collect();
        expect(&[run_w(3)], ex(&want));
    }

    #[test]
    fn memory_events_are_placed_after_their_instruction() {
        let mut want = ex(&[0x100, 0x104]);
        want.push(rd(0x104));
        want.extend(ex(&[0x108, 0x10c]));
        want.push(wr(0x10c));
        want.extend(ex(&[0x300, 0x304]));
        expect(
            &cat(&[&[run_w(0)], &load(0x104), &store(0x10c), &[run_w(2)]]),
            want,
        );
        // The first instruction, and one in the second mask word whose bit
        // is clear (0x1000 + 4 * 66).
        let mut want = ex(&[0x100]);
        want.push(rd(0x100));
        want.extend(ex(&[0x104, 0x108, 0x10c]));
        want.extend(
            (0..70)
                .filter(|k| k % 3 != 0 && *k < 66)
                .map(|k| Ev::Exec(0x1000 + 4 * k)),
        );
        want.push(wr(0x1000 + 4 * 66));
        want.extend(ex(&[0x1000 + 4 * 67, 0x1000 + 4 * 68]));
        expect(
            &cat(&[
                &[run_w(0)],
                &load(0x100),
                &[run_w(3)],
                &store(0x1000 + 4 * 66),
                &[cut_w(0x1000 + 4 * 68)],
            ]),
            want,
        );
    }

    #[test]
    fn two_accesses_of_one_instruction() {
        let mut want = ex(&[0x100, 0x104]);
        want.extend([rd(0x104), wr(0x104)]);
        want.extend(ex(&[0x108, 0x10c]));
        expect(&cat(&[&[run_w(0)], &load(0x104), &store(0x104)]), want);
        // Every kind of memory event, all of one instruction.
        let big = 0x108;
        let words = cat(&[
            &[run_w(0)],
            &[top(wire::mem32_tag(false, 2)) | big, 0x1234_0000_1000],
            &[top(tag::LOAD128) | big, 0x2000, 1, 2],
            &[top(tag::MEM_LONG) | tag::STORE as u64, big, 0x3000, 0xff],
            &[top(tag::MEM_LONG) | tag::STORE128 as u64, big, 0x4000, 3, 4],
        ]);
        let mut want = ex(&[0x100, 0x104, 0x108]);
        want.extend([
            Ev::Read(big, 0x1000, 0x1234, 4),
            Ev::Read128(big, 0x2000, 2 << 64 | 1),
            Ev::Write(big, 0x3000, 0xff, 1),
            Ev::Write128(big, 0x4000, 4 << 64 | 3),
        ]);
        want.extend(ex(&[0x10c]));
        expect(&words, want);
    }

    #[test]
    fn registers_of_an_unreported_instruction() {
        let r = [1u64, 2, 3];
        let mut words = vec![run_w(1), wire::frame(tag::REGS, 0, 5), 0x204];
        words.extend(r);
        words.extend([wire::frame(tag::REGS, 2, 5), 0x208]);
        words.extend(r);
        let rb = bytes(&r);
        expect(
            &words,
            vec![
                Ev::Exec(0x200),
                Ev::Regs(0x204, rb.clone()),
                Ev::Exec(0x208),
                Ev::Branch(0x208, true, rb),
            ],
        );
    }

    #[test]
    fn once_style_exec_in_a_block() {
        // Unreported by the block: the exec event is the only one.
        expect(&[run_w(1), 0x204], ex(&[0x200, 0x204, 0x208]));
        expect(
            &[run_w(1), top(tag::EXEC_LONG), 0x204],
            ex(&[0x200, 0x204, 0x208]),
        );
        // Reported too: both (the block's, then the event's own).
        expect(&[run_w(0), 0x104], ex(&[0x100, 0x104, 0x104, 0x108, 0x10c]));
        // A pc not in the block: the block ran to its end before it.
        expect(&[run_w(2), 0x999], ex(&[0x300, 0x304, 0x999]));
        // Placed after an earlier one: no going back.
        let mut want = ex(&[0x100, 0x104, 0x108]);
        want.push(rd(0x108));
        want.extend(ex(&[0x10c, 0x100]));
        expect(&cat(&[&[run_w(0)], &load(0x108), &[0x100]]), want);
    }

    #[test]
    fn cuts() {
        // In the middle: the rest did not run.
        expect(
            &[run_w(0), cut_w(0x104), run_w(2)],
            ex(&[0x100, 0x104, 0x300, 0x304]),
        );
        // The last instruction.
        expect(&[run_w(0), cut_w(0x10c)], ex(&[0x100, 0x104, 0x108, 0x10c]));
        // The first.
        expect(&[run_w(0), cut_w(0x100), 0x500], ex(&[0x100, 0x500]));
        // Of an unreported instruction: through the one before.
        expect(&[run_w(1), cut_w(0x204)], ex(&[0x200]));
        // No block open: nothing.
        expect(&[cut_w(0x104), 0x500], ex(&[0x500]));
        expect(
            &[run_w(0), cut_w(0x104), cut_w(0x108), 0x500],
            ex(&[0x100, 0x104, 0x500]),
        );
        // Not in the block (a cut of a block without a run event): the
        // open block ran to its end.
        let mut want = ex(&[0x100, 0x104]);
        want.push(rd(0x104));
        let mut all = want.clone();
        all.extend(ex(&[0x108, 0x10c]));
        expect(&cat(&[&[run_w(0)], &load(0x104), &[cut_w(0x999)]]), all);
        // The instruction just placed.
        expect(&cat(&[&[run_w(0)], &load(0x104), &[cut_w(0x104)]]), want);
        // The long form.
        expect(
            &[run_w(0), top(tag::CUT_LONG), 0x108],
            ex(&[0x100, 0x104, 0x108]),
        );
        let (_, d) = run_blocks(&[run_w(0), top(tag::CUT_LONG)], Some(&cache()));
        assert_eq!(
            d.error.unwrap().problem,
            Problem::Truncated { need: 2, have: 1 }
        );
    }

    #[test]
    fn a_run_of_no_entry_closes_the_block() {
        let mut want = ex(&[0x100, 0x104, 0x108, 0x10c, 0x500]);
        // An access of a pc of the closed block is not placed in it.
        want.push(rd(0x104));
        expect(
            &cat(&[&[run_w(0), run_w(NO_ENTRY), 0x500], &load(0x104)]),
            want,
        );
        expect(&[run_w(NO_ENTRY), run_w(NO_ENTRY)], vec![]);
    }

    #[test]
    fn other_events_close_the_block_first() {
        let sc = syscall_words(true, 4004, 3, [1, 2, 3, 0, 0, 0], b"", 0);
        let (t, d) = run_blocks(&cat(&[&[run_w(0)], &load(0x104), &sc]), Some(&cache()));
        assert_eq!(d.events, 6);
        assert_eq!(
            t[..5],
            [ex(&[0x100, 0x104]), vec![rd(0x104)], ex(&[0x108, 0x10c])].concat()[..]
        );
        assert!(matches!(t[5], Ev::Syscall { num: 4004, .. }));
        // A block translation, an unknown frame, a signal, mappings.
        for w in [
            vec![wire::frame(tag::BLOCK, 1, 3), 0x900, 4],
            vec![wire::frame(0x30, 0, 2), 0x104],
            vec![wire::frame(tag::MUNMAP, 0, 3), 0x1000, 0x1000],
            vec![wire::frame(tag::SIGNAL, 0, 5), 11, 1, 0, 0],
        ] {
            let (t, _) = run_blocks(&cat(&[&[run_w(2)], &w, &[0x104]]), Some(&cache()));
            assert_eq!(t[..2], ex(&[0x300, 0x304])[..], "{w:x?}");
            assert_eq!(t.last(), Some(&Ev::Exec(0x104)), "{w:x?}");
        }
    }

    #[test]
    fn unknown_or_damaged_blocks_are_malformed() {
        let words = [0x10, run_w(0), run_w(99), 0x20];
        let (t, d) = run_blocks(&words, Some(&cache()));
        // The block before the bad run ran to its end.
        assert_eq!(t, ex(&[0x10, 0x100, 0x104, 0x108, 0x10c]));
        let e = d.error.unwrap();
        assert_eq!((e.offset, e.tag, e.skipped_bytes), (16, tag::RUN, 16));
        assert_eq!(
            e.problem,
            Problem::Block {
                id: 99,
                error: EntryError::NotPublished
            }
        );
        assert_eq!(e.lost_events(), 2);
        let m = e.to_string();
        assert!(
            m.contains("block 99") && m.contains("offset 16") && !m.contains('\n'),
            "{m}"
        );
        // Damaged.
        let (_, d) = run_blocks(&[run_w(4)], Some(&cache()));
        assert_eq!(
            d.error.unwrap().problem,
            Problem::Block {
                id: 4,
                error: EntryError::Damaged
            }
        );
        // No table at all.
        let (t, d) = run_blocks(&[0x10, run_w(0)], None);
        assert_eq!(t, ex(&[0x10]));
        assert_eq!(
            d.error.unwrap().problem,
            Problem::Block {
                id: 0,
                error: EntryError::NotPublished
            }
        );
        // Huge ids.
        let (_, d) = run_blocks(&[run_w(NO_ENTRY - 1)], Some(&cache()));
        assert!(matches!(d.error.unwrap().problem, Problem::Block { .. }));
    }

    #[test]
    fn a_malformed_event_closes_the_block() {
        let (t, d) = run_blocks(&[run_w(0), top(tag::LOAD) | 0x104, 0x1000], Some(&cache()));
        assert_eq!(t, ex(&[0x100, 0x104, 0x108, 0x10c]));
        assert_eq!(d.error.unwrap().offset, 8);
    }

    /// The events of the stream the splitting tests cut into chunks, each
    /// as its words (chunks are cut between events).
    fn block_stream() -> Vec<Vec<u64>> {
        let sc = syscall_words(true, 4004, 3, [1, 2, 3, 0, 0, 0], b"hi", 2);
        let mut regs = vec![wire::frame(tag::REGS, 1, 5), 0x204];
        regs.extend([7, 8, 9]);
        vec![
            vec![0x10],
            vec![run_w(0)],
            load(0x104).to_vec(),
            store(0x104).to_vec(),
            vec![run_w(1)],
            regs,
            vec![0x204],
            vec![run_w(0)],
            vec![cut_w(0x104)],
            vec![0x11, 0x12],
            vec![run_w(2)],
            sc.clone(),
            vec![run_w(3)],
            store(0x1000 + 4 * 33).to_vec(),
            load(0x1000 + 4 * 66).to_vec(),
            vec![top(tag::CUT_LONG), 0x1000 + 4 * 67],
            vec![run_w(0)],
            vec![run_w(NO_ENTRY)],
            vec![0x20],
            load(0x104).to_vec(),
            vec![run_w(1)],
            vec![top(tag::EXEC_LONG), 0x208],
            vec![cut_w(0x999)],
            vec![run_w(2)],
            vec![cut_w(0x300)],
            vec![cut_w(0x300)],
            vec![run_w(0)],
            vec![wire::frame(tag::BLOCK, 1, 3), 0x900, 4],
            vec![run_w(2)],
            vec![0x304],
            vec![0x999],
            vec![run_w(0)],
            load(0x108).to_vec(),
            vec![run_w(1)],
        ]
    }

    /// Decodes the stream cut at the event boundaries `cuts` (indexes into
    /// [`block_stream`]'s events), chunks decoded out of order.
    fn split(events: &[Vec<u64>], cuts: &[usize], c: &BlockCache) -> (Vec<Ev>, Decoded) {
        let mut chunks = Vec::new();
        let mut from = 0;
        for &to in cuts.iter().chain([&events.len()]) {
            chunks.push(bytes(&events[from..to].concat()));
            from = to;
        }
        let refs: Vec<&[u8]> = chunks.iter().map(|c| &c[..]).collect();
        let mut t = Vec::new();
        let d = decode_stream::<Rec>(&(), &(), &refs, &layout(32), Some(c), &mut t);
        (t, d)
    }

    #[test]
    fn chunks_split_anywhere_stitch_to_the_whole() {
        let events = block_stream();
        let c = cache();
        let (whole, d) = split(&events, &[], &c);
        assert_eq!(d.error, None);
        assert_eq!(d.events, whole.len() as u64);
        // Spot checks of the whole against the rules.
        assert_eq!(
            whole[..6],
            [
                ex(&[0x10, 0x100, 0x104]),
                vec![rd(0x104), wr(0x104)],
                ex(&[0x108])
            ]
            .concat()[..]
        );
        assert_eq!(
            whole
                .iter()
                .filter(|e| matches!(e, Ev::Syscall { .. }))
                .count(),
            1
        );
        let n = events.len();
        for a in 0..=n {
            let (t, d) = split(&events, &[a], &c);
            assert_eq!(d.error, None, "split at {a}");
            assert_eq!(t, whole, "split at {a}");
            assert_eq!(d.events, whole.len() as u64, "split at {a}");
            for b in a..=n {
                let (t, d) = split(&events, &[a, b], &c);
                assert_eq!(t, whole, "split at {a}, {b}");
                assert_eq!(d.events, whole.len() as u64, "split at {a}, {b}");
            }
        }
        // Every event its own chunk.
        let each: Vec<usize> = (1..n).collect();
        assert_eq!(split(&events, &each, &c).0, whole);
    }

    #[test]
    fn heads_stop_at_the_first_cut_or_other_event() {
        let lay = layout(32);
        let w = cat(&[&[0x10], &load(0x104), &[cut_w(0x104), 0x20]]);
        assert_eq!(head_len(&w, lay.reg_words), 5);
        assert_eq!(head_len(&[0x10, run_w(0), 0x20], lay.reg_words), 1);
        assert_eq!(head_len(&[0x10, top(tag::LOAD) | 4, 1], lay.reg_words), 1);
        assert_eq!(head_len(&[0x10, top(tag::CUT_LONG)], lay.reg_words), 1);
        assert_eq!(
            head_len(&[wire::frame(tag::REGS, 3, 5), 0, 0, 0, 0], lay.reg_words),
            0
        );
        assert_eq!(
            head_len(&[wire::frame(tag::REGS, 0, 5), 0, 0, 0, 0], lay.reg_words),
            5
        );
        assert_eq!(head_len(&[0x10, 0x14], lay.reg_words), 2);
        // A chunk that is all head leaves the carried block open; one with
        // a body replaces it.
        let c = cache();
        let mut carry = Some(OpenBlock {
            block: c.get(0).unwrap(),
            next: 1,
        });
        let mut seam = Seam::default();
        let mut t = Vec::new();
        let d = decode::<Rec>(
            &(),
            &(),
            &bytes(&load(0x108)),
            &lay,
            Some(&c),
            &mut t,
            &mut seam,
        );
        assert!(t.is_empty() && d.events == 0 && !seam.body);
        let n = stitch::<Rec>(&(), &(), &lay, &mut carry, &seam, &mut t);
        assert_eq!(t, [ex(&[0x104, 0x108]), vec![rd(0x108)]].concat());
        assert_eq!((n, carry.as_ref().map(|o| o.next)), (3, Some(3)));
        t.clear();
        let d = decode::<Rec>(
            &(),
            &(),
            &bytes(&[0x10c, run_w(2), 0x300]),
            &lay,
            Some(&c),
            &mut t,
            &mut seam,
        );
        // The block's exec of 0x300, then the event's own.
        assert_eq!(t, ex(&[0x300, 0x300]));
        assert_eq!(d.events, 2);
        assert_eq!(seam.tail.as_ref().map(|o| o.next), Some(1));
        t.clear();
        let n = stitch::<Rec>(&(), &(), &lay, &mut carry, &seam, &mut t);
        assert_eq!((n, t), (2, ex(&[0x10c, 0x10c])));
        t = Vec::new();
        assert_eq!(finish::<Rec>(&(), &(), &mut carry, &mut t), 1);
        assert_eq!(t, ex(&[0x304]));
        assert!(carry.is_none());
    }

    /// Random words, biased towards framed tags with plausible lengths and
    /// towards run and cut events of the test table, never panic the
    /// decoder, and what it reports adds up; split in two, the same.
    #[test]
    fn random_chunks_never_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let c = cache();
        for _ in 0..20_000 {
            let n = (next() % 24) as usize;
            let words: Vec<u64> = (0..n)
                .map(|_| {
                    let r = next();
                    match r % 9 {
                        0 => r >> 8,
                        // Any length, 0 too (`wire::frame` would refuse it).
                        1 => {
                            top(0x20 + (r >> 8) as u8 % 8)
                                | ((r >> 16) & 0xff_ffff) << 32
                                | ((r >> 40) % 16)
                        }
                        2 => r % 64,
                        3 => top(tag::RUN) | ((r >> 8) % 6),
                        4 => top(tag::RUN) | NO_ENTRY,
                        5 => {
                            let t = [tag::CUT, tag::CUT_LONG, tag::LOAD | 2, tag::EXEC]
                                [(r >> 62) as usize];
                            top(t) | [0x100, 0x104, 0x204, 0x1000, 0x1004, 7][(r >> 8) as usize % 6]
                        }
                        6 => [0x100, 0x104, 0x108, 0x10c, 0x200, 0x204][(r >> 8) as usize % 6],
                        _ => r,
                    }
                })
                .collect();
            let (t, d) = run_blocks(&words, Some(&c));
            assert_eq!(t.len() as u64, d.events);
            if let Some(e) = d.error {
                assert_eq!(e.offset + e.skipped_bytes, n * 8);
                assert!(!e.to_string().chars().any(char::is_control));
            }
            let at = (next() % (n as u64 + 1)) as usize;
            let (a, b) = (bytes(&words[..at]), bytes(&words[at..]));
            let mut t2 = Vec::new();
            let d2 = decode_stream::<Rec>(&(), &(), &[&a, &b], &layout(32), Some(&c), &mut t2);
            assert_eq!(t2.len() as u64, d2.events);
            if d.error.is_none() && d2.error.is_none() {
                assert_eq!(t, t2, "{words:x?} split at {at}");
            }
        }
    }

    /// A RUN-heavy chunk, decoded whole: the stream of blocks of `len`
    /// instructions, `chunk_words` words of run events.
    fn run_chunk(blocks: u64, chunk_words: usize) -> Vec<u64> {
        (0..chunk_words as u64)
            .map(|k| top(tag::RUN) | ((k * 7919) % blocks))
            .collect()
    }

    /// Decode speed of run events, expanded into exec callbacks. Run with
    /// `cargo test -p cannoli --release -- --ignored --nocapture run_speed`.
    #[test]
    #[ignore]
    fn run_speed() {
        use std::time::Instant;

        /// `examples/benchmark`'s callbacks: fold the pcs into the chunk's
        /// one checksum (`s1 += pc; s2 += s1`), a run at a time.
        #[derive(Clone, Copy, Default)]
        struct Fold(u64, u64, u64);
        struct Bench;
        impl Cannoli for Bench {
            type Trace = Fold;
            type TidContext = ();
            type PidContext = ();
            fn init_pid(_: &ClientInfo) -> Arc<()> {
                Arc::new(())
            }
            fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
                (Bench, ())
            }
            #[inline(always)]
            fn exec(p: &(), t: &(), pc: u64, tr: &mut Vec<Fold>) {
                Self::exec_run(p, t, &[pc], tr);
            }
            #[inline(always)]
            fn exec_run(_: &(), _: &(), pcs: &[u64], t: &mut Vec<Fold>) {
                if t.is_empty() {
                    t.push(Fold::default());
                }
                let f = t.last_mut().expect("pushed");
                let (mut s1, mut s2) = (f.0, f.1);
                for &pc in pcs {
                    s1 = s1.wrapping_add(pc);
                    s2 = s2.wrapping_add(s1);
                }
                *f = Fold(s1, s2, f.2 + pcs.len() as u64);
            }
        }

        for (len, blocks) in [(5usize, 64u64), (5, 4096), (100, 64), (100, 4096)] {
            let table: Vec<_> = (0..blocks)
                .map(|b| {
                    let pcs: Vec<u64> = (0..len as u64)
                        .map(|i| 0x40_0000 + b * 0x1000 + 4 * i)
                        .collect();
                    crate::blocks::tests::entry(&pcs, &vec![true; len])
                })
                .collect();
            let c = BlockCache::new(Arc::new(table));
            // 1 MiB chunks.
            let words = run_chunk(blocks, 1 << 17);
            let b = bytes(&words);
            let lay = layout(64);
            let mut t = Vec::new();
            let mut seam = Seam::default();
            let per = (words.len() * len) as u64;
            let rounds = (2_000_000_000 / per).max(2);
            // Warm: fill the cache.
            decode::<Bench>(&(), &(), &b, &lay, Some(&c), &mut t, &mut seam);
            let start = Instant::now();
            let mut ev = 0;
            for _ in 0..rounds {
                t.clear();
                let d = decode::<Bench>(
                    &(),
                    &(),
                    std::hint::black_box(&b),
                    &lay,
                    Some(&c),
                    &mut t,
                    &mut seam,
                );
                ev += d.events;
                std::hint::black_box(&t);
            }
            let s = start.elapsed().as_secs_f64();
            // The last block stays open (the next chunk's stitch closes it).
            assert_eq!(ev, rounds * (per - len as u64));
            eprintln!(
                "{blocks} blocks of {len}: {:.3} ns per expanded instruction, {:.1} ns per run event ({:.2} G instructions/s)",
                s * 1e9 / ev as f64,
                s * 1e9 / (rounds as f64 * words.len() as f64),
                ev as f64 / s / 1e9
            );
        }
        // For comparison: the same instructions as exec events, with no
        // head (a run of no block first: the JIT's fallback when the table
        // is full) and all head (an old stream: decoded in the stitch).
        for (name, first) in [
            ("after a run", Some(top(tag::RUN) | NO_ENTRY)),
            ("all head", None),
        ] {
            let pure: Vec<u64> = first
                .into_iter()
                .chain((0..(1u64 << 17) - 1).map(|i| 0x40_0000 + 4 * i))
                .collect();
            let b = bytes(&pure);
            let mut t = Vec::new();
            let rounds = 2000;
            let start = Instant::now();
            let mut ev = 0;
            let lay = layout(64);
            for _ in 0..rounds {
                t.clear();
                let mut seam = Seam::default();
                let d = decode::<Bench>(
                    &(),
                    &(),
                    std::hint::black_box(&b),
                    &lay,
                    None,
                    &mut t,
                    &mut seam,
                );
                let mut open = None;
                ev += d.events + stitch::<Bench>(&(), &(), &lay, &mut open, &seam, &mut t);
            }
            let s = start.elapsed().as_secs_f64();
            eprintln!(
                "exec events ({name}): {:.3} ns per instruction",
                s * 1e9 / ev as f64
            );
        }
    }

    #[test]
    fn stray_bytes_after_a_malformed_event_are_skipped_too() {
        // A truncated load, then three stray bytes: the malformed rest runs
        // to the chunk's end (found by the cannoli-fuzz decode target).
        let mut b = bytes(&[0x400000, top(tag::LOAD | 2) | 0x400004, 0x1000]);
        b.extend([1, 2, 3]);
        let (t, d) = run_bytes(&b, 32);
        assert_eq!(t, vec![Ev::Exec(0x400000)]);
        let e = d.error.unwrap();
        assert_eq!(e.problem, Problem::Truncated { need: 3, have: 2 });
        assert_eq!((e.offset, e.skipped_bytes), (8, b.len() - 8));
        assert_eq!(e.lost_events(), 2);
    }

    #[test]
    fn addr_masks() {
        assert_eq!(addr_mask(32), 0xffff_ffff);
        assert_eq!(addr_mask(64), u64::MAX);
        assert_eq!(addr_mask(0), u64::MAX);
        assert_eq!(addr_mask(48), 0xffff_ffff_ffff);
    }

    /// Decode speed of exec events. Run with
    /// `cargo test -p cannoli --release -- --ignored --nocapture decode_speed`.
    #[test]
    #[ignore]
    fn decode_speed() {
        use std::time::Instant;

        struct Count;
        impl Cannoli for Count {
            type Trace = u64;
            type TidContext = ();
            type PidContext = ();
            fn init_pid(_: &ClientInfo) -> Arc<()> {
                Arc::new(())
            }
            fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
                (Count, ())
            }
            fn exec(_: &(), _: &(), pc: u64, t: &mut Vec<u64>) {
                t.push(pc);
            }
        }
        struct Nothing;
        impl Cannoli for Nothing {
            type Trace = ();
            type TidContext = std::sync::atomic::AtomicU64;
            type PidContext = ();
            fn init_pid(_: &ClientInfo) -> Arc<()> {
                Arc::new(())
            }
            fn init_tid(_: &(), _: &ClientInfo) -> (Self, Self::TidContext) {
                (Nothing, Default::default())
            }
        }

        // 1 MiB chunk: exec events with a load every 8th instruction.
        let mut words = Vec::new();
        let mut pc = 0x400000u64;
        while words.len() + 3 < (1 << 17) {
            words.push(pc);
            if pc % 32 == 0 {
                words.extend([top(tag::LOAD | 2) | pc, 0x7ffe_0000 + pc % 4096, pc]);
            }
            pc += 4;
        }
        let mut pure = vec![0u64; 1 << 17];
        for (i, w) in pure.iter_mut().enumerate() {
            *w = 0x400000 + 4 * i as u64;
        }
        let lay = layout(32);
        for (name, words) in [("exec+loads", &words), ("exec only", &pure)] {
            let b = bytes(words);
            let mut t = Vec::with_capacity(words.len());
            let rounds = 2000;
            let start = Instant::now();
            let mut ev = 0;
            for _ in 0..rounds {
                t.clear();
                let d = decode_stream::<Count>(
                    &(),
                    &(),
                    &[std::hint::black_box(&b)],
                    &lay,
                    None,
                    &mut t,
                );
                ev += d.events;
                std::hint::black_box(&t);
            }
            let s = start.elapsed().as_secs_f64();
            eprintln!(
                "{name}, push pc: {:.2} G events/s ({:.2} GB/s)",
                ev as f64 / s / 1e9,
                (b.len() * rounds) as f64 / s / 1e9
            );

            let start = Instant::now();
            let mut ev = 0;
            let mut t2 = Vec::new();
            for _ in 0..rounds {
                let d = decode_stream::<Nothing>(
                    &(),
                    &Default::default(),
                    &[std::hint::black_box(&b)],
                    &lay,
                    None,
                    &mut t2,
                );
                ev += d.events;
            }
            let s = start.elapsed().as_secs_f64();
            eprintln!(
                "{name}, empty callbacks: {:.2} G events/s",
                ev as f64 / s / 1e9
            );
        }
    }
}
