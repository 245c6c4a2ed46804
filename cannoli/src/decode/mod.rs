//! The hot loop: turns one chunk of wire events into calls of the tool's
//! parallel callbacks.
//!
//! Monomorphized over the tool (`T: Cannoli`), so every callback is a direct
//! (usually inlined) call. Each event costs one load of its first word and one
//! compare on the common path: an exec event is the bare pc, i.e. any word
//! whose top byte is zero.
//!
//! The rare framed events (tags from `0x20` on: registers, syscalls,
//! mappings, signals) are decoded out of line in
//! [`framed`](framed::framed), after every JIT event kind has been tried.
//! A framed tag this client does not know is skipped whole (its frame says
//! how long it is) and counted in [`Decoded::skipped`], so an older client
//! can read a newer QEMU side's stream.
//!
//! # Blocks
//!
//! A run event stands for the instructions of a translated block (its
//! entry in the process's block table, `wire::blocks`, looked up in the
//! [`BlockCache`](crate::blocks::BlockCache)): the decoder keeps the
//! stream's *open block* and the index `next` of its first instruction not
//! reported yet, and *expands* instructions (one `exec` callback for each
//! whose exec-mask bit is set) as the events show how far the block ran:
//! - a run event closes the open block (expands the rest: it ran to its
//!   end) and opens its own ([`NO_ENTRY`](wire::blocks::NO_ENTRY): none);
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
//! [`decode_words`](words::decode_words) that checks it has enough words,
//! calls the callback and advances `i` (adding the words after the first to
//! `extra`), and a test;
//! if it belongs to an instruction, place it in the open block (and add it
//! to [`head_len`](seam::head_len)), else close the block first.
//! To add a framed event: a tag from `0x27` on, its minimum length in
//! [`frame_min`](framed::frame_min), a match arm in
//! [`framed`](framed::framed), and a test.
//!
//! # Files
//!
//! - [`chunk`]: a chunk on a worker ([`decode`]: its words, its head set
//!   aside) and a whole stream the way the server decodes it
//!   ([`decode_stream`]);
//! - [`seam`]: the in-order delivery of a chunk's head ([`stitch`]) and
//!   the end of a stream ([`finish`]);
//! - [`words`]: the hot loop over a chunk's words (JIT events);
//! - [`place`]: the open block, and placing events in it;
//! - [`framed`]: the rare framed events;
//! - [`shape`]: what decoding needs to know about a stream;
//! - [`problem`]: what a chunk's decoding reports, malformed spots included.

mod chunk;
mod framed;
mod place;
mod problem;
mod seam;
mod shape;
mod words;

#[cfg(test)]
mod tests;

pub(crate) use chunk::{decode, decode_stream};
pub(crate) use problem::{Decoded, Malformed};
pub(crate) use seam::{finish, stitch, Carry, Seam};
pub(crate) use shape::Shape;
