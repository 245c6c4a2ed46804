// SPDX-License-Identifier: GPL-2.0-or-later
//! Opening a recording: its header, its frames (from the index, or by
//! scanning when the recorder did not finish), and the metadata frames.
//!
//! Chunk payloads are only read when replayed ([`Recording::read_frame`],
//! from several threads at once: reads are positional). Every length is
//! checked against [`MAX_PAYLOAD`] and the file's size before anything is
//! allocated, every payload against its checksum, and every decompressed
//! payload against its recorded size, so a damaged file gives an error,
//! never a panic or an allocation it names.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::format::{
    Codec, Exit, FrameHeader, IndexEntry, Info, Kind, StreamEnd, StreamStart, FORMAT_VERSION,
    FRAME_HEADER_BYTES, HEADER_BYTES, INDEX_ENTRY_BYTES, MAGIC, TRAILER_BYTES, TRAILER_MAGIC,
};
use super::{Error, Hooks};
use crate::Notes;

/// An open recording.
pub struct Recording {
    path: PathBuf,
    file: File,
    file_bytes: u64,
    info: Info,
    streams: Vec<StreamRec>,
    /// Table frames of each process, in file order.
    tables: BTreeMap<u32, Vec<IndexEntry>>,
    exit: Option<Exit>,
    /// Why the file ends before its trailer, if it does.
    cut: Option<String>,
    /// Frames by kind: count, stored bytes, raw bytes.
    totals: BTreeMap<Kind, (u64, u64, u64)>,
    /// How far the current replay has come.
    progress: Arc<Progress>,
    /// Where a replay's lines go (see [`Recording::with_notes`]).
    pub(super) notes: Notes,
}

/// How far a replay has come, for a progress display: it may be read from
/// any thread while the replay runs. Each replay starts it again from 0.
#[derive(Debug, Default)]
pub struct Progress {
    /// Decompressed chunk bytes delivered to the tool.
    bytes: AtomicU64,
    /// Events delivered to the tool.
    events: AtomicU64,
}

impl Progress {
    /// Decompressed chunk bytes delivered so far; the total is
    /// [`Recording::chunk_bytes`].
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Events delivered so far.
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    pub(super) fn add(&self, bytes: u64, events: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.events.fetch_add(events, Ordering::Relaxed);
    }

    pub(super) fn restart(&self) {
        self.bytes.store(0, Ordering::Relaxed);
        self.events.store(0, Ordering::Relaxed);
    }
}

/// One stream of a recording.
#[derive(Debug, Clone)]
pub struct StreamRec {
    /// Its number: streams are numbered in the order they connected.
    pub number: u32,
    /// Its [`Kind::Stream`](super::format::Kind::Stream) frame: whose stream it is, and its hello.
    pub start: StreamStart,
    /// Its chunk frames, by chunk seq (the file has them in the order
    /// the recorder's workers finished them).
    pub chunks: Vec<IndexEntry>,
    /// How it ended; `None` if the recording was cut short first.
    pub end: Option<StreamEnd>,
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// Reading the file failed.
    #[error(transparent)]
    Io(io::Error),
    /// The frame is not what the index says, or its checksum or size is
    /// wrong.
    #[error("{0}")]
    Damaged(String),
}

impl Recording {
    /// Sends a replay's lines about what the recording lost to `notes`
    /// instead of standard error.
    pub fn with_notes(mut self, notes: Notes) -> Recording {
        self.notes = notes;
        self
    }

    /// Opens `path` and reads everything but the chunks' bytes.
    pub fn open(path: &Path) -> Result<Recording, Error> {
        let io_err = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let format = |what: String| Error::Format {
            path: path.to_path_buf(),
            what,
        };
        let file = File::open(path).map_err(io_err)?;
        let meta = file.metadata().map_err(io_err)?;
        if !meta.is_file() {
            return Err(format("not a regular file".into()));
        }
        let file_bytes = meta.len();
        let mut h = [0u8; HEADER_BYTES];
        if file_bytes < HEADER_BYTES as u64 {
            return Err(format(
                "not a cannoli recording (shorter than its 16-byte header); make one with `cannoli record`"
                    .into(),
            ));
        }
        file.read_exact_at(&mut h, 0).map_err(io_err)?;
        if h[..8] != MAGIC {
            return Err(format(
                "not a cannoli recording (no CNLTRACE header); make one with `cannoli record`"
                    .into(),
            ));
        }
        let version = u32::from_le_bytes(h[8..12].try_into().unwrap());
        if version != FORMAT_VERSION {
            return Err(format(format!(
                "recorded in format version {version}; this cannoli ({}) reads version {FORMAT_VERSION}{}",
                env!("CARGO_PKG_VERSION"),
                if version > FORMAT_VERSION {
                    ": use a newer cannoli"
                } else {
                    ": record it again with this cannoli"
                }
            )));
        }
        let header_bytes = u32::from_le_bytes(h[12..16].try_into().unwrap()) as u64;
        if header_bytes != HEADER_BYTES as u64 {
            return Err(format(format!(
                "the header says it has {header_bytes} bytes; format {FORMAT_VERSION} has {HEADER_BYTES}: the file is damaged"
            )));
        }

        let mut rec = Recording {
            path: path.to_path_buf(),
            file,
            file_bytes,
            info: Info {
                writer: String::new(),
                hooks: Hooks::preset("custom"),
                command: Vec::new(),
                guest: None,
                started_unix_ns: 0,
            },
            streams: Vec::new(),
            tables: BTreeMap::new(),
            exit: None,
            cut: None,
            totals: BTreeMap::new(),
            progress: Arc::default(),
            notes: Notes::default(),
        };
        let entries = match rec.read_index() {
            Some(e) => e,
            None => rec.scan().map_err(io_err)?,
        };
        rec.take_entries(entries)?;
        Ok(rec)
    }

    /// The index's entries, if the file has a whole, consistent one.
    fn read_index(&self) -> Option<Vec<IndexEntry>> {
        let len = self.file_bytes;
        if len < (HEADER_BYTES + TRAILER_BYTES) as u64 {
            return None;
        }
        let mut t = [0u8; TRAILER_BYTES];
        self.file
            .read_exact_at(&mut t, len - TRAILER_BYTES as u64)
            .ok()?;
        if t[8..] != TRAILER_MAGIC {
            return None;
        }
        let data_end = len - TRAILER_BYTES as u64;
        let mut at = u64::from_le_bytes(t[..8].try_into().unwrap());
        let mut segments = Vec::new();
        // Each segment points at an earlier one, and ends before the one
        // that pointed at it begins: the segments never overlap, so
        // together they are at most the file's size, however a damaged
        // trailer chains them.
        let mut below = data_end;
        while at != 0 {
            if at < HEADER_BYTES as u64 || at >= below {
                return None;
            }
            let h = self.header_at(at).ok()?;
            if h.kind != Kind::Index || h.codec != Codec::Stored {
                return None;
            }
            if at + FRAME_HEADER_BYTES as u64 + h.stored_len as u64 > below {
                return None;
            }
            below = at;
            let p = self.payload(at, &h).ok()?;
            if p.len() < 8 || (p.len() - 8) % INDEX_ENTRY_BYTES != 0 {
                return None;
            }
            let prev = u64::from_le_bytes(p[..8].try_into().unwrap());
            if prev >= at {
                return None;
            }
            segments.push(p);
            at = prev;
        }
        let mut entries = Vec::new();
        let mut end = HEADER_BYTES as u64;
        for p in segments.iter().rev() {
            for b in p[8..].chunks_exact(INDEX_ENTRY_BYTES) {
                let e = IndexEntry::decode(b)?;
                // In file order, inside the data, not overlapping.
                let next = e.offset + FRAME_HEADER_BYTES as u64 + e.stored_len as u64;
                if e.offset < end || next > data_end {
                    return None;
                }
                end = next;
                entries.push(e);
            }
        }
        Some(entries)
    }

    /// The frames, read one header after the other from the start, up to
    /// the end or the first one that is not whole (then `cut` says why).
    fn scan(&mut self) -> io::Result<Vec<IndexEntry>> {
        let len = self.file_bytes;
        let mut at = HEADER_BYTES as u64;
        let mut entries = Vec::new();
        loop {
            let left = len - at;
            if left == 0 {
                self.cut = Some(format!(
                    "the recording has no index (the recorder did not finish); read up to its end, byte {len}"
                ));
                break;
            }
            if left == TRAILER_BYTES as u64 {
                let mut t = [0u8; TRAILER_BYTES];
                self.file.read_exact_at(&mut t, at)?;
                if t[8..] == TRAILER_MAGIC {
                    break; // whole, but its index was not usable
                }
            }
            if left < FRAME_HEADER_BYTES as u64 {
                self.cut = Some(format!(
                    "the recording is cut short at byte {at}, in a frame header"
                ));
                break;
            }
            let h = match self.header_at(at) {
                Ok(h) => h,
                Err(FrameError::Io(e)) => return Err(e),
                Err(FrameError::Damaged(w)) => {
                    self.cut = Some(format!(
                        "the recording is damaged at byte {at} ({w}); read up to there"
                    ));
                    break;
                }
            };
            let next = at + FRAME_HEADER_BYTES as u64 + h.stored_len as u64;
            if next > len {
                self.cut = Some(format!(
                    "the recording is cut short at byte {len}, in the middle of a frame that starts at byte {at}"
                ));
                break;
            }
            if h.kind != Kind::Index {
                entries.push(IndexEntry {
                    offset: at,
                    kind: h.kind,
                    codec: h.codec,
                    stream: h.stream,
                    seq: h.seq,
                    stored_len: h.stored_len,
                    raw_len: h.raw_len,
                });
            }
            at = next;
        }
        Ok(entries)
    }

    /// Sorts the frames into streams, tables and metadata.
    fn take_entries(&mut self, entries: Vec<IndexEntry>) -> Result<(), Error> {
        let damaged = |what: String| Error::Format {
            path: self.path.clone(),
            what: format!("{what}: the file is damaged"),
        };
        let mut first = true;
        // Decompressed metadata kept so far (see META_BUDGET).
        let mut meta: u64 = 0;
        for e in entries {
            if let Some(most) = meta_frame_max(e.kind) {
                if e.raw_len as usize > most {
                    return Err(damaged(format!(
                        "the {} frame at byte {} holds {} bytes, more than such a frame ever does ({most})",
                        e.kind.name(),
                        e.offset,
                        e.raw_len
                    )));
                }
                meta += e.raw_len as u64;
                if meta > META_BUDGET {
                    return Err(Error::Format {
                        path: self.path.clone(),
                        what: format!(
                            "its streams' metadata (hellos, stream starts and ends) exceeds {} MiB at \
                             byte {}; this cannoli reads at most that much (a damaged file, or a run of \
                             more than 100,000 threads)",
                            META_BUDGET >> 20,
                            e.offset
                        ),
                    });
                }
            }
            let t = self.totals.entry(e.kind).or_default();
            t.0 += 1;
            t.1 += e.stored_len as u64;
            t.2 += e.raw_len as u64;
            if first != (e.kind == Kind::Info) {
                return Err(damaged(format!(
                    "frame at byte {} is a {} frame; the info frame comes first, once",
                    e.offset,
                    e.kind.name()
                )));
            }
            first = false;
            match e.kind {
                Kind::Info => self.info = self.json(&e)?,
                Kind::Stream => {
                    if e.stream as usize != self.streams.len() {
                        return Err(damaged(format!(
                            "stream {} starts after {} streams",
                            e.stream,
                            self.streams.len()
                        )));
                    }
                    let start: StreamStart = self.json(&e)?;
                    self.streams.push(StreamRec {
                        number: e.stream,
                        start,
                        chunks: Vec::new(),
                        end: None,
                    });
                }
                Kind::Table => self.tables.entry(e.stream).or_default().push(e),
                Kind::Chunk | Kind::End => {
                    let Some(s) = self.streams.get(e.stream as usize) else {
                        return Err(damaged(format!(
                            "a {} frame at byte {} names stream {}, which never started",
                            e.kind.name(),
                            e.offset,
                            e.stream
                        )));
                    };
                    if s.end.is_some() {
                        return Err(damaged(format!(
                            "a {} frame at byte {} comes after the end of stream {}",
                            e.kind.name(),
                            e.offset,
                            e.stream
                        )));
                    }
                    if e.kind == Kind::End {
                        let end: StreamEnd = self.json(&e)?;
                        self.streams[e.stream as usize].end = Some(end);
                    } else {
                        self.streams[e.stream as usize].chunks.push(e);
                    }
                }
                Kind::Exit => self.exit = Some(self.json(&e)?),
                Kind::Index => {}
            }
        }
        if first {
            return Err(damaged("no info frame".into()));
        }
        // Workers append a stream's chunks as they finish them: put them
        // back in order (a seq twice is damage; the replay stops there).
        for s in &mut self.streams {
            s.chunks.sort_by_key(|c| c.seq);
        }
        Ok(())
    }

    fn json<V: serde::de::DeserializeOwned>(&self, e: &IndexEntry) -> Result<V, Error> {
        let bytes = self.read_frame(e).map_err(|w| Error::Format {
            path: self.path.clone(),
            what: format!("the {} frame at byte {}: {w}", e.kind.name(), e.offset),
        })?;
        serde_json::from_slice(&bytes).map_err(|w| Error::Format {
            path: self.path.clone(),
            what: format!(
                "the {} frame at byte {} does not hold what it should ({}): the file is damaged",
                e.kind.name(),
                e.offset,
                printable(&w.to_string())
            ),
        })
    }

    fn header_at(&self, at: u64) -> Result<FrameHeader, FrameError> {
        let mut b = [0u8; FRAME_HEADER_BYTES];
        self.file
            .read_exact_at(&mut b, at)
            .map_err(FrameError::Io)?;
        FrameHeader::decode(&b).map_err(|e| FrameError::Damaged(e.to_string()))
    }

    /// The stored payload of the frame at `at` with header `h`, checked.
    fn payload(&self, at: u64, h: &FrameHeader) -> Result<Vec<u8>, FrameError> {
        let start = at + FRAME_HEADER_BYTES as u64;
        if start + h.stored_len as u64 > self.file_bytes {
            return Err(FrameError::Damaged(
                "the frame runs past the end of the file".into(),
            ));
        }
        let mut p = vec![0u8; h.stored_len as usize];
        self.file
            .read_exact_at(&mut p, start)
            .map_err(FrameError::Io)?;
        if crc32fast::hash(&p) != h.crc {
            return Err(FrameError::Damaged(
                "its bytes do not match their checksum".into(),
            ));
        }
        Ok(p)
    }

    /// Frame `e`'s payload, checked and decompressed.
    pub fn read_frame(&self, e: &IndexEntry) -> Result<Vec<u8>, FrameError> {
        let mut out = Vec::new();
        self.read_frame_into(e, &mut out, None)?;
        Ok(out)
    }

    /// [`Recording::read_frame`] into `out` (replaced), with a reusable
    /// decompression context.
    pub(crate) fn read_frame_into(
        &self,
        e: &IndexEntry,
        out: &mut Vec<u8>,
        ctx: Option<&mut zstd::bulk::Decompressor<'static>>,
    ) -> Result<(), FrameError> {
        let h = self.header_at(e.offset)?;
        if !e.matches(&h) {
            return Err(FrameError::Damaged(
                "its header is not the one the index names".into(),
            ));
        }
        let stored = self.payload(e.offset, &h)?;
        out.clear();
        match h.codec {
            Codec::Stored => {
                if stored.len() != h.raw_len as usize {
                    return Err(FrameError::Damaged("its sizes disagree".into()));
                }
                *out = stored;
            }
            Codec::Zstd => {
                out.reserve_exact(h.raw_len as usize);
                let n = match ctx {
                    Some(d) => d.decompress_to_buffer(&stored, out),
                    None => zstd::bulk::Decompressor::new()
                        .and_then(|mut d| d.decompress_to_buffer(&stored, out)),
                }
                .map_err(|e| FrameError::Damaged(format!("it does not decompress ({e})")))?;
                if n != h.raw_len as usize {
                    return Err(FrameError::Damaged(
                        "it decompresses to another size than recorded".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What was recorded, and how.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// What the hook library reported.
    pub fn hooks(&self) -> &Hooks {
        &self.info.hooks
    }

    /// The streams, in the order they connected.
    pub fn streams(&self) -> &[StreamRec] {
        &self.streams
    }

    /// The table frames of process `process`, in file order.
    pub fn table_frames(&self, process: u32) -> &[IndexEntry] {
        self.tables.get(&process).map_or(&[], Vec::as_slice)
    }

    /// How the run ended; `None` if the recording was cut short first.
    pub fn exit(&self) -> Option<&Exit> {
        self.exit.as_ref()
    }

    /// Why the recording ends early (no index, damaged, cut short), if it
    /// does.
    pub fn cut(&self) -> Option<&str> {
        self.cut.as_deref()
    }

    /// The file's size.
    pub fn file_bytes(&self) -> u64 {
        self.file_bytes
    }

    /// Frames by kind: (count, stored bytes, raw bytes).
    pub fn totals(&self) -> &BTreeMap<Kind, (u64, u64, u64)> {
        &self.totals
    }

    /// The chunks' decompressed bytes: what a whole replay delivers, for
    /// [`Progress::bytes`].
    pub fn chunk_bytes(&self) -> u64 {
        self.totals.get(&Kind::Chunk).map_or(0, |t| t.2)
    }

    /// How far the current (or last) replay has come.
    pub fn progress(&self) -> Arc<Progress> {
        Arc::clone(&self.progress)
    }
}

/// Most decompressed bytes of metadata frames (info, stream starts and
/// ends, exit) a recording may hold, all kept in memory while it is open:
/// a run's threads and processes each have a stream start (its hello, a
/// few KiB) and an end; a damaged file, whose zstd frames can decompress
/// to a thousand times their size, is refused at that much.
pub const META_BUDGET: u64 = 512 << 20;

/// Most decompressed bytes of one metadata frame of `kind` (`None`: not a
/// metadata frame). A stream start holds a hello line (at most 64 KiB,
/// JSON-escaped once more); the info frame the command line.
fn meta_frame_max(kind: Kind) -> Option<usize> {
    match kind {
        Kind::Stream => Some(8 * wire::channel::MAX_LINE),
        Kind::End | Kind::Exit => Some(64 << 10),
        Kind::Info => Some(super::format::MAX_PAYLOAD),
        Kind::Table | Kind::Chunk | Kind::Index => None,
    }
}

/// `s` with control characters escaped: a message quoting a damaged file
/// stays one printable line.
fn printable(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}
