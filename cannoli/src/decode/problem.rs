//! What decoding a chunk reports: its events, skipped framed events, and
//! the first malformed spot.

use wire::blocks::EntryError;

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
    /// A `SOME_REGS` event whose mask names a register past the guest's,
    /// or of a guest with more registers than such an event may carry.
    BadRegsMask(u64),
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
            Problem::BadRegsMask(m) => write!(
                f,
                "registers event (tag {:#04x}) names registers {m:#x}, past the guest's (or the guest has more than 64)",
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
