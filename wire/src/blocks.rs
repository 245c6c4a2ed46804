//! The block table: what a translated block's run events stand for.
//!
//! The JIT writes one [`tag::RUN`](crate::tag::RUN) event each time a
//! translated block starts, instead of one exec event per instruction. The
//! instructions that event stands for are in this table, which QEMU's side
//! keeps per guest process in a shared-memory file (a sealed memfd passed to
//! the client with every hello of the process). An entry is written when
//! the block is translated, before its code can run on any thread, so a
//! reader that sees a run event in any thread's stream finds the entry
//! already published: the chunk hand-over is a release and the reader's
//! claim an acquire, and the entry was published (release) before the block
//! was made reachable.
//!
//! # Layout (all words little-endian `u64`)
//!
//! | words | what |
//! |-------|------|
//! | 0 | [`MAGIC`] |
//! | 1 | [`TABLE_VERSION`] |
//! | 2 | `capacity`: entries the index has room for |
//! | 3 | `data_words`: words the data region has room for |
//! | 4 | `published`: entries written so far (atomic; the writer stores it with release after the entry) |
//! | 5 | `data_used`: data words written so far (atomic, stored before `published`) |
//! | 6..8 | zero |
//! | 8.. | index: `capacity` words, entry `i`'s word offset in the data region |
//! | 8 + capacity .. | data region: `data_words` words of entries |
//!
//! An entry is `n` (the block's instruction count, 1..=[`MAX_BLOCK_INSNS`],
//! in the low 32 bits; the high 32 bits are zero), then the `n` guest pcs in
//! execution order, then `ceil(n / 64)` words of the *exec mask*: bit `i`
//! (bit `i % 64` of mask word `i / 64`) is set when instruction `i` is
//! reported as executed each time the block runs (an `Always` hook).
//! Instructions whose bit is clear are in the entry only so that their own
//! events (memory accesses, registers, `Once` execs, a cut) can be placed
//! between the right instructions.
//!
//! Entries never change once published and are never removed: a block that
//! QEMU translates again (after a flush, say) gets a new entry. The table
//! only grows; when it is full the JIT reports the blocks it translates
//! later the old way, one exec event per instruction.
//!
//! A reader treats everything in the file as untrusted: [`Table::entry`]
//! checks every offset and count against the sizes the reader mapped.

/// First word of a block table file: "cnlblk01" as little-endian bytes.
pub const MAGIC: u64 = u64::from_le_bytes(*b"cnlblk01");
/// Version of this layout (part of the wire version too).
pub const TABLE_VERSION: u64 = 1;
/// Words of the header before the index.
pub const HEADER_WORDS: usize = 8;
/// Index of the `published` word.
pub const PUBLISHED_WORD: usize = 4;
/// Index of the `data_used` word.
pub const DATA_USED_WORD: usize = 5;
/// Most instructions in one block: QEMU's TCG_MAX_INSNS.
pub const MAX_BLOCK_INSNS: usize = 512;
/// Index entries a table has room for (a run event's id is below this).
pub const CAPACITY: usize = 1 << 22;
/// Data words a table has room for (256 MiB; the file is sparse, only the
/// pages written cost memory).
pub const DATA_WORDS: usize = 1 << 25;
/// Size in bytes of a table file with [`CAPACITY`] and [`DATA_WORDS`].
pub const FILE_BYTES: usize = (HEADER_WORDS + CAPACITY + DATA_WORDS) * 8;

/// The id a run event carries for a block that has no table entry: it ends
/// the previous block (which therefore ran to its end) and stands for no
/// instructions itself.
pub const NO_ENTRY: u64 = crate::PC_MASK;

/// Words of an entry of `n` instructions.
#[inline]
pub const fn entry_words(n: usize) -> usize {
    1 + n + n.div_ceil(64)
}

/// Writes the entry for a block of `pcs` (with `exec[i]` telling whether
/// instruction `i` is reported) into `out`, which must hold
/// [`entry_words`]`(pcs.len())` words.
pub fn encode_entry(pcs: &[u64], exec: impl Fn(usize) -> bool, out: &mut [u64]) {
    let n = pcs.len();
    debug_assert!((1..=MAX_BLOCK_INSNS).contains(&n) && out.len() >= entry_words(n));
    out[0] = n as u64;
    out[1..=n].copy_from_slice(pcs);
    let masks = &mut out[1 + n..1 + n + n.div_ceil(64)];
    masks.fill(0);
    for i in (0..n).filter(|&i| exec(i)) {
        masks[i / 64] |= 1 << (i % 64);
    }
}

/// One checked entry, copied out of a table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Entry {
    /// The block's instruction pcs, in execution order.
    pub pcs: Vec<u64>,
    /// Exec mask words (see the module doc).
    pub exec: Vec<u64>,
}

impl Entry {
    /// True if instruction `i` is reported as executed when the block runs.
    #[inline]
    pub fn is_exec(&self, i: usize) -> bool {
        self.exec
            .get(i / 64)
            .is_some_and(|w| w >> (i % 64) & 1 != 0)
    }
}

/// Why an entry cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryError {
    /// The id is at or past the published count (or the capacity).
    NotPublished,
    /// The index or the entry points outside the data region, or the count
    /// is 0 or above [`MAX_BLOCK_INSNS`].
    Damaged,
}

impl std::fmt::Display for EntryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EntryError::NotPublished => "a run event names a block the table does not have",
            EntryError::Damaged => "the block table is damaged",
        })
    }
}

/// A table's words as a reader sees them. `word(i)` reads word `i` of the
/// file (the reader's own atomic or volatile load; it returns `None` past
/// the mapped size).
pub trait Words {
    /// Word `i`, or `None` past the end of the table's mapping.
    fn word(&self, i: usize) -> Option<u64>;
}

impl Words for [u64] {
    fn word(&self, i: usize) -> Option<u64> {
        self.get(i).copied()
    }
}

impl<T: ?Sized + Words> Words for &T {
    fn word(&self, i: usize) -> Option<u64> {
        (**self).word(i)
    }
}

/// Why a block table's header was refused ([`Table::check_header`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Not a block table.
    #[error("the block table has the wrong magic (not a cannoli block table)")]
    Magic,
    /// A block table of another version (the one it names).
    #[error(
        "the block table is version {0}, this client reads version {TABLE_VERSION}; \
         rebuild the client and the hook library from the same cannoli"
    )]
    Version(u64),
    /// Sizes that do not fit the file.
    #[error("the block table's sizes do not fit its file")]
    Sizes,
}

/// Reads and checks entries of a table laid out as above.
pub struct Table<W: Words>(pub W);

impl<W: Words> Table<W> {
    /// Checks the header: magic, version, and sizes that fit `mapped_words`.
    pub fn check_header(words: &W, mapped_words: usize) -> Result<(usize, usize), HeaderError> {
        let w = |i| words.word(i).unwrap_or(0);
        if w(0) != MAGIC {
            return Err(HeaderError::Magic);
        }
        if w(1) != TABLE_VERSION {
            return Err(HeaderError::Version(w(1)));
        }
        let (cap, data) = (w(2) as usize, w(3) as usize);
        if cap > CAPACITY || data > DATA_WORDS || HEADER_WORDS + cap + data > mapped_words {
            return Err(HeaderError::Sizes);
        }
        Ok((cap, data))
    }

    /// Entry `id`, checked against `published` (as read once by the caller,
    /// with acquire), `cap` and `data` (from [`Table::check_header`]).
    pub fn entry(
        &self,
        id: u64,
        published: u64,
        cap: usize,
        data: usize,
    ) -> Result<Entry, EntryError> {
        if id >= published || id >= cap as u64 {
            return Err(EntryError::NotPublished);
        }
        let base = HEADER_WORDS + cap;
        let at = self
            .0
            .word(HEADER_WORDS + id as usize)
            .ok_or(EntryError::Damaged)? as usize;
        if at >= data {
            return Err(EntryError::Damaged);
        }
        let n = self.0.word(base + at).ok_or(EntryError::Damaged)? as usize;
        if n == 0 || n > MAX_BLOCK_INSNS || at + entry_words(n) > data {
            return Err(EntryError::Damaged);
        }
        let read = |i: usize| self.0.word(base + at + i).ok_or(EntryError::Damaged);
        let pcs = (1..=n).map(read).collect::<Result<Vec<_>, _>>()?;
        let exec = (1 + n..entry_words(n))
            .map(read)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Entry { pcs, exec })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&[u64], &[bool])]) -> (Vec<u64>, usize, usize) {
        let (cap, data) = (16, 1024);
        let mut w = vec![0u64; HEADER_WORDS + cap + data];
        w[0] = MAGIC;
        w[1] = TABLE_VERSION;
        w[2] = cap as u64;
        w[3] = data as u64;
        let mut used = 0;
        for (i, (pcs, exec)) in entries.iter().enumerate() {
            w[HEADER_WORDS + i] = used as u64;
            let n = entry_words(pcs.len());
            let at = HEADER_WORDS + cap + used;
            encode_entry(pcs, |k| exec[k], &mut w[at..at + n]);
            used += n;
        }
        w[PUBLISHED_WORD] = entries.len() as u64;
        w[DATA_USED_WORD] = used as u64;
        (w, cap, data)
    }

    #[test]
    fn entries_round_trip() {
        let pcs: Vec<u64> = (0..70).map(|i| 0x1000 + 4 * i).collect();
        let exec: Vec<bool> = (0..70).map(|i| i % 3 != 0).collect();
        let (w, cap, data) = table(&[(&[0x400000], &[true]), (&pcs, &exec)]);
        assert_eq!(Table::check_header(&&w[..], w.len()), Ok((cap, data)));
        let t = Table(&w[..]);
        let e = t.entry(1, 2, cap, data).unwrap();
        assert_eq!(e.pcs, pcs);
        assert!((0..70).all(|i| e.is_exec(i) == exec[i]));
        assert_eq!(t.entry(0, 2, cap, data).unwrap().pcs, [0x400000]);
        assert_eq!(t.entry(2, 2, cap, data), Err(EntryError::NotPublished));
    }

    #[test]
    fn damaged_entries_are_refused() {
        let (mut w, cap, data) = table(&[(&[1, 2, 3], &[true, true, true])]);
        w[HEADER_WORDS] = data as u64; // index points past the data
        assert_eq!(
            Table(&w[..]).entry(0, 1, cap, data),
            Err(EntryError::Damaged)
        );
        w[HEADER_WORDS] = 0;
        w[HEADER_WORDS + cap] = MAX_BLOCK_INSNS as u64 + 1;
        assert_eq!(
            Table(&w[..]).entry(0, 1, cap, data),
            Err(EntryError::Damaged)
        );
        w[HEADER_WORDS + cap] = (data - 2) as u64; // runs past the end
        assert_eq!(
            Table(&w[..]).entry(0, 1, cap, data),
            Err(EntryError::Damaged)
        );
        assert!(Table::check_header(&&w[..], w.len() - 1).is_err());
        w[0] = 0;
        assert!(Table::check_header(&&w[..], w.len()).is_err());
    }
}
