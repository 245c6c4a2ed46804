// SPDX-License-Identifier: GPL-2.0-or-later
//! Target `decode`: the client's chunk decoder (`cannoli/src/decode/`)
//! against arbitrary chunks, guest widths, register counts and byte orders.
//!
//! Checked for every input:
//! - no panic, and no allocation by what the chunk says: decoding with a
//!   tool that allocates nothing allocates at most a copy of the chunk (the
//!   path for a misaligned chunk);
//! - the decoder agrees with [`reference()`], a plain word-by-word reading of
//!   the wire format written from its documentation: the same events in
//!   the same order with the same values, the same count of skipped
//!   unknown frames, and the same malformed spot;
//! - every byte is accounted for exactly once: the words of the delivered
//!   events, of the skipped frames and the malformed rest add up to the
//!   chunk's length;
//! - the problem's description is one line without control characters.
//!
//! Input: 5 bytes of stream description (mode, guest width, register
//! count, flags), then either the raw chunk (mode even) or bytes from which
//! `arbitrary` builds a list of events, some of them damaged (mode odd).
//!
//! The files: `check` (the target: an input to a chunk, and the properties
//! above), `stream` (the stream description), `tools` (the two tools the
//! chunk is decoded with), `reference` (the reference reading) and `input`
//! (structured inputs); the target's own regressions are in `tests`.

mod check;
mod input;
mod reference;
mod stream;
mod tools;

#[cfg(test)]
mod tests;

pub use check::{check, run};
pub use reference::{reference, Reading};
pub use stream::Stream;
pub use tools::{Ev, Rec, Tally};
