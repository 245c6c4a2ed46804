// SPDX-License-Identifier: GPL-2.0-or-later
//! The recording file format: its one owner. The README's "Recording file
//! format" section describes the same layout for people; the tests at the
//! bottom pin every offset.
//!
//! ```text
//! file    = header frame* [trailer]
//! header  = magic "CNLTRACE" (8) | format version u32 | header bytes u32 (16)
//! frame   = frame header (32) | payload (stored_len bytes)
//! trailer = offset of the last index frame u64 | magic "CNLINDEX" (8)
//! ```
//!
//! All integers are little-endian. A frame header:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | kind ([`Kind`]) |
//! | 1 | 1 | codec: 0 stored as is, 1 zstd |
//! | 2 | 2 | reserved, 0 |
//! | 4 | 4 | stream number (a table frame: process number) |
//! | 8 | 8 | chunk seq (a table frame: first entry id; else 0) |
//! | 16 | 4 | stored_len: payload bytes in the file |
//! | 20 | 4 | raw_len: payload bytes once decompressed |
//! | 24 | 4 | CRC-32 of the stored payload |
//! | 28 | 4 | CRC-32 of header bytes 0..28 |
//!
//! Frames are appended whole, one at a time, so a recording cut short
//! (the recorder killed, the disk full) is readable up to its last whole
//! frame: a reader that finds no trailer scans the frames from the start.
//! Frames of one stream are in chunk order (unless one chunk's worker fell
//! so far behind that the writer gave up waiting for it: a reader accepts
//! any order), and every block-table entry a chunk names is in a table
//! frame of its process before that chunk.

use crate::recording::Hooks;

/// First bytes of a recording.
pub const MAGIC: [u8; 8] = *b"CNLTRACE";
/// The format version this library writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of the file header.
pub const HEADER_BYTES: usize = 16;
/// Bytes of a frame header.
pub const FRAME_HEADER_BYTES: usize = 32;
/// Last bytes of a finished recording.
pub const TRAILER_MAGIC: [u8; 8] = *b"CNLINDEX";
/// Bytes of the trailer.
pub const TRAILER_BYTES: usize = 16;
/// Most payload bytes a frame may have, stored or raw: a chunk is at most
/// 64 MiB (`CANNOLI_CHUNK_KB`), every other frame is smaller. A reader
/// refuses anything larger before it allocates.
pub const MAX_PAYLOAD: usize = 64 << 20;
/// Most entries an index frame holds; the writer starts a new one after
/// that, so its memory stays bounded however long the run.
pub const INDEX_ENTRIES_PER_FRAME: usize = 1 << 16;
/// Bytes of one index entry.
pub const INDEX_ENTRY_BYTES: usize = 32;
/// Most words of block-table entries in one table frame.
pub const TABLE_FRAME_WORDS: usize = 1 << 17;

const _: () = assert!(HEADER_BYTES == 8 + 4 + 4);
const _: () = assert!(FRAME_HEADER_BYTES == 1 + 1 + 2 + 4 + 8 + 4 + 4 + 4 + 4);
const _: () = assert!(TRAILER_BYTES == 8 + TRAILER_MAGIC.len());
const _: () = assert!(INDEX_ENTRY_BYTES == 8 + 1 + 1 + 2 + 4 + 8 + 4 + 4);
const _: () = assert!(8 + INDEX_ENTRIES_PER_FRAME * INDEX_ENTRY_BYTES <= MAX_PAYLOAD);
const _: () = assert!(8 + TABLE_FRAME_WORDS * 8 <= MAX_PAYLOAD);

/// What a frame holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Kind {
    /// JSON [`Info`]: what was recorded, how. The first frame.
    Info = 1,
    /// JSON [`StreamStart`]: a guest thread's stream begins, with its
    /// hello line exactly as QEMU sent it.
    Stream = 2,
    /// Block-table entries of a process: words as `wire::blocks` lays an
    /// entry out (`n`, `n` pcs, the exec mask), one entry after the other,
    /// ids from the frame's seq on.
    Table = 3,
    /// One chunk of a stream, its bytes as the ring held them.
    Chunk = 4,
    /// JSON [`StreamEnd`]: how a stream ended.
    End = 5,
    /// JSON [`Exit`]: how the run ended. The last frame before the index.
    Exit = 6,
    /// A segment of the index: the offset of the previous index frame (0:
    /// none), then [`IndexEntry`]s.
    Index = 7,
}

impl Kind {
    /// The kind with this number in a frame header; `None` for one this
    /// version does not know.
    pub fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Info,
            2 => Kind::Stream,
            3 => Kind::Table,
            4 => Kind::Chunk,
            5 => Kind::End,
            6 => Kind::Exit,
            7 => Kind::Index,
            _ => return None,
        })
    }

    /// Its lowercase name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Info => "info",
            Kind::Stream => "stream",
            Kind::Table => "table",
            Kind::Chunk => "chunk",
            Kind::End => "end",
            Kind::Exit => "exit",
            Kind::Index => "index",
        }
    }
}

/// How a payload is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Codec {
    /// As is: `stored_len == raw_len`.
    Stored = 0,
    /// zstd-compressed; the writer keeps a frame stored when compressing it
    /// would not make it smaller.
    Zstd = 1,
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the payload holds.
    pub kind: Kind,
    /// How the payload is stored.
    pub codec: Codec,
    /// The stream number; in a [`Kind::Table`] frame, the process number.
    pub stream: u32,
    /// The chunk's sequence number in its stream; in a [`Kind::Table`] frame,
    /// the id of its first entry; else 0.
    pub seq: u64,
    /// Payload bytes in the file.
    pub stored_len: u32,
    /// Payload bytes once decompressed.
    pub raw_len: u32,
    /// CRC-32 of the stored payload (as in the file, before decompression).
    pub crc: u32,
}

/// Why a frame header is not one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// Its own checksum does not match: damaged (or not a frame).
    Checksum,
    /// A kind or codec this version does not know (a newer writer).
    Unknown(String),
    /// A length above [`MAX_PAYLOAD`].
    TooLarge(u64),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Checksum => f.write_str("a frame header is damaged (checksum mismatch)"),
            HeaderError::Unknown(w) => write!(f, "a frame of {w} this version does not know"),
            HeaderError::TooLarge(n) => write!(
                f,
                "a frame claims {n} bytes, more than the {MAX_PAYLOAD} a frame may hold"
            ),
        }
    }
}

impl FrameHeader {
    /// The header's 32 bytes, its own checksum (bytes 28..32) computed here.
    pub fn encode(&self) -> [u8; FRAME_HEADER_BYTES] {
        let mut b = [0u8; FRAME_HEADER_BYTES];
        b[0] = self.kind as u8;
        b[1] = self.codec as u8;
        b[4..8].copy_from_slice(&self.stream.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.stored_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.raw_len.to_le_bytes());
        b[24..28].copy_from_slice(&self.crc.to_le_bytes());
        let hcrc = crc32fast::hash(&b[..28]);
        b[28..32].copy_from_slice(&hcrc.to_le_bytes());
        b
    }

    /// Checks the header's checksum, then its kind, codec and lengths.
    pub fn decode(b: &[u8; FRAME_HEADER_BYTES]) -> Result<FrameHeader, HeaderError> {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        if crc32fast::hash(&b[..28]) != u32_at(28) {
            return Err(HeaderError::Checksum);
        }
        let kind =
            Kind::from_u8(b[0]).ok_or_else(|| HeaderError::Unknown(format!("kind {}", b[0])))?;
        let codec = match b[1] {
            0 => Codec::Stored,
            1 => Codec::Zstd,
            c => return Err(HeaderError::Unknown(format!("codec {c}"))),
        };
        let (stored_len, raw_len) = (u32_at(16), u32_at(20));
        for n in [stored_len, raw_len] {
            if n as usize > MAX_PAYLOAD {
                return Err(HeaderError::TooLarge(n.into()));
            }
        }
        Ok(FrameHeader {
            kind,
            codec,
            stream: u32_at(4),
            seq: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            stored_len,
            raw_len,
            crc: u32_at(24),
        })
    }
}

/// The file header for this version.
pub fn file_header() -> [u8; HEADER_BYTES] {
    let mut b = [0u8; HEADER_BYTES];
    b[..8].copy_from_slice(&MAGIC);
    b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
    b
}

/// One index entry: where a frame is, and its header's fields (a reader
/// checks them against the header when it reads the frame).
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 8 | the frame's offset in the file |
/// | 8 | 1 | kind |
/// | 9 | 1 | codec |
/// | 10 | 2 | reserved, 0 |
/// | 12 | 4 | stream |
/// | 16 | 8 | seq |
/// | 24 | 4 | stored_len |
/// | 28 | 4 | raw_len |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Where the frame's header starts, in bytes from the start of the file.
    pub offset: u64,
    /// The frame's kind, as in its header.
    pub kind: Kind,
    /// Its codec, as in its header.
    pub codec: Codec,
    /// Its stream (or process) number, as in its header.
    pub stream: u32,
    /// Its seq, as in its header.
    pub seq: u64,
    /// Its stored length, as in its header.
    pub stored_len: u32,
    /// Its decompressed length, as in its header.
    pub raw_len: u32,
}

impl IndexEntry {
    /// Appends the entry's [`INDEX_ENTRY_BYTES`] bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&[self.kind as u8, self.codec as u8, 0, 0]);
        out.extend_from_slice(&self.stream.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.stored_len.to_le_bytes());
        out.extend_from_slice(&self.raw_len.to_le_bytes());
    }

    /// `None` if the bytes cannot be an entry (unknown kind or codec, a
    /// length above [`MAX_PAYLOAD`]).
    pub fn decode(b: &[u8]) -> Option<IndexEntry> {
        let b: &[u8; INDEX_ENTRY_BYTES] = b.try_into().ok()?;
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let e = IndexEntry {
            offset: u64::from_le_bytes(b[0..8].try_into().unwrap()),
            kind: Kind::from_u8(b[8])?,
            codec: match b[9] {
                0 => Codec::Stored,
                1 => Codec::Zstd,
                _ => return None,
            },
            stream: u32_at(12),
            seq: u64::from_le_bytes(b[16..24].try_into().unwrap()),
            stored_len: u32_at(24),
            raw_len: u32_at(28),
        };
        (e.stored_len as usize <= MAX_PAYLOAD && e.raw_len as usize <= MAX_PAYLOAD).then_some(e)
    }

    /// Whether `h` is the header this entry describes.
    pub fn matches(&self, h: &FrameHeader) -> bool {
        h.kind == self.kind
            && h.codec == self.codec
            && h.stream == self.stream
            && h.seq == self.seq
            && h.stored_len == self.stored_len
            && h.raw_len == self.raw_len
    }
}

/// The [`Kind::Info`] frame.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Info {
    /// Version of the `cannoli` crate that wrote the file.
    pub writer: String,
    /// What the hook library reported.
    pub hooks: Hooks,
    /// The traced command line (`PROGRAM ARGS...`), lossily as UTF-8.
    pub command: Vec<String>,
    /// QEMU's machine name for the program, where the recorder knew it.
    pub guest: Option<String>,
    /// When recording began: nanoseconds since the Unix epoch.
    pub started_unix_ns: u64,
}

/// The [`Kind::Stream`] frame.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StreamStart {
    /// The process the stream belongs to: streams sharing a block table
    /// (the threads of one process image) share this number.
    pub process: u32,
    /// Nanoseconds since recording began.
    pub start_ns: u64,
    /// QEMU's hello line, as it sent it.
    pub hello: String,
}

/// What QEMU's goodbye said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Goodbye {
    /// Chunks QEMU published on the ring, in total.
    pub chunks: u64,
    /// Events the JIT could not record (0 unless the recorder went away).
    pub lost_events: u64,
    /// The stream ended because the process exec'd a program that QEMU
    /// traces again: a stream of the same pid follows.
    pub exec: bool,
}

/// The [`Kind::End`] frame.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StreamEnd {
    /// QEMU's goodbye; `None` if it ended without one (killed).
    pub goodbye: Option<Goodbye>,
    /// Chunks the ring held at the end.
    pub published: u64,
    /// The ring broke its protocol (and the stream ends there).
    pub violation: Option<String>,
    /// Chunks the recorder wrote (the rest it could not read).
    pub written: u64,
    /// Nanoseconds since recording began.
    pub end_ns: u64,
    /// QEMU's side broke the control protocol (a second goodbye, a goodbye
    /// before its ring was closed, anything after the goodbye): the stream
    /// is incomplete whatever its counts say. Absent when it did not (and
    /// in recordings made before the field existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<String>,
}

/// The [`Kind::Exit`] frame.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Exit {
    /// The program's exit status (128 + N if it died of signal N); `None`
    /// when the recorder did not start it (QEMU started by hand).
    pub status: Option<i32>,
    /// Connections refused (their events are missing).
    pub refused_connections: u64,
    /// Processes announced that never connected.
    pub missing_processes: u64,
    /// Connections that were not this run's QEMU.
    pub strangers: u64,
    /// Nanoseconds since recording began.
    pub end_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_header_round_trips_at_the_documented_offsets() {
        let h = FrameHeader {
            kind: Kind::Chunk,
            codec: Codec::Zstd,
            stream: 0x0102_0304,
            seq: 0x1112_1314_1516_1718,
            stored_len: 0x2122_2324,
            raw_len: 0x0000_0031,
            crc: 0x4142_4344,
        };
        let b = h.encode();
        assert_eq!(b[0], 4);
        assert_eq!(b[1], 1);
        assert_eq!(&b[2..4], &[0, 0]);
        assert_eq!(&b[4..8], &[4, 3, 2, 1]);
        assert_eq!(&b[8..16], &0x1112_1314_1516_1718u64.to_le_bytes());
        assert_eq!(&b[24..28], &[0x44, 0x43, 0x42, 0x41]);
        assert_eq!(b[28..32], crc32fast::hash(&b[..28]).to_le_bytes());
        // 0x21222324 is above MAX_PAYLOAD: refused, but only after the
        // checksum matched.
        assert_eq!(
            FrameHeader::decode(&b),
            Err(HeaderError::TooLarge(0x2122_2324))
        );
        let h = FrameHeader {
            stored_len: 100,
            ..h
        };
        assert_eq!(FrameHeader::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn a_damaged_or_unknown_header_is_refused() {
        let h = FrameHeader {
            kind: Kind::End,
            codec: Codec::Stored,
            stream: 1,
            seq: 0,
            stored_len: 3,
            raw_len: 3,
            crc: 0,
        };
        let mut b = h.encode();
        b[5] ^= 1;
        assert_eq!(FrameHeader::decode(&b), Err(HeaderError::Checksum));
        let mut b = h.encode();
        b[0] = 99;
        let c = crc32fast::hash(&b[..28]);
        b[28..32].copy_from_slice(&c.to_le_bytes());
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(HeaderError::Unknown(_))
        ));
    }

    #[test]
    fn file_header_and_index_entry_layout() {
        let h = file_header();
        assert_eq!(&h[..8], b"CNLTRACE");
        assert_eq!(&h[8..12], &1u32.to_le_bytes());
        assert_eq!(&h[12..16], &16u32.to_le_bytes());
        let e = IndexEntry {
            offset: 7,
            kind: Kind::Table,
            codec: Codec::Zstd,
            stream: 9,
            seq: 11,
            stored_len: 13,
            raw_len: 15,
        };
        let mut v = Vec::new();
        e.encode(&mut v);
        assert_eq!(v.len(), INDEX_ENTRY_BYTES);
        assert_eq!(
            (v[8], v[9], v[12], v[16], v[24], v[28]),
            (3, 1, 9, 11, 13, 15)
        );
        assert_eq!(IndexEntry::decode(&v), Some(e));
    }
}
