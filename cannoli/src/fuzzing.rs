//! Entry points for the fuzzers of the `cannoli-fuzz` crate. Not part of the
//! API: hidden from the documentation, and free to change with the
//! decoder. They exist because the decoder is private (its types are the
//! server's business) while the fuzzers must drive it with chunks and
//! stream descriptions of their own making, exactly as the server does.

use crate::decode::{self, Layout};
use crate::{Cannoli, ClientInfo};

/// What [`decode`] found in a chunk: the decoder's own summary, as the
/// server reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Events handed to the callbacks.
    pub events: u64,
    /// Framed events of unknown tags skipped whole.
    pub skipped: u64,
    /// The tag of the first of them.
    pub skipped_tag: Option<u8>,
    error: Option<decode::Malformed>,
}

impl Decoded {
    /// Byte offset of the malformed event that stopped decoding, if any.
    pub fn error_offset(&self) -> Option<usize> {
        self.error.map(|m| m.offset)
    }

    /// Bytes skipped from that offset to the end of the chunk (0 if none).
    pub fn error_skipped_bytes(&self) -> usize {
        self.error.map_or(0, |m| m.skipped_bytes)
    }

    /// The tag the decoder reports for the malformed event.
    pub fn error_tag(&self) -> Option<u8> {
        self.error.map(|m| m.tag)
    }

    /// Events the server counts as lost for the malformed rest.
    pub fn lost_events(&self) -> u64 {
        self.error.map_or(0, |m| m.lost_events())
    }

    /// The server's one-line description of the malformed event.
    pub fn error_message(&self) -> Option<String> {
        self.error.map(|m| m.to_string())
    }
}

/// Decodes `data` (one chunk) for a stream described by `ci`, calling `T`'s
/// parallel callbacks, exactly as a worker of the server does.
pub fn decode<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    data: &[u8],
    ci: &ClientInfo,
    trace: &mut Vec<T::Trace>,
) -> Decoded {
    let lay = Layout::new(ci);
    let d = decode::decode::<T>(pid, tid, data, &lay, trace);
    Decoded {
        events: d.events,
        skipped: d.skipped,
        skipped_tag: d.skipped_tag,
        error: d.error,
    }
}

/// The [`ClientInfo`] the server makes of an accepted hello.
pub fn client_info(h: &wire::Hello) -> ClientInfo {
    ClientInfo::from_hello(h)
}
