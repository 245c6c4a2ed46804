// SPDX-License-Identifier: GPL-2.0-or-later
//! Writing a recording while the run streams (`cannoli record`).
//!
//! Nothing is decoded: a worker takes a chunk off the ring, first copies
//! whatever block-table entries its process published since the last
//! chunk (every entry a chunk names was published before the chunk was
//! written, so it is then in the file before the chunk), compresses the
//! chunk's bytes with zstd on its own thread and appends the frame. One
//! lock guards the file; compression happens outside it.
//!
//! A stream's chunks are written in chunk order, so that a recording cut
//! short loses only its tail: a worker that finishes a chunk before the
//! ones ahead of it holds it back (compressed) until they are written. A
//! worker stalled for long cannot make the others hold without bound: past
//! [`HELD_BYTES`] the held chunks are written as they are and the missing
//! ones follow when they come (readers accept any order).
//!
//! Memory stays bounded: a frame is written as soon as it is compressed
//! and due (or the held ones pass [`HELD_BYTES`]), and the index is written out every [`INDEX_ENTRIES_PER_FRAME`] frames,
//! each segment pointing at the one before.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use mempipe::TableReader;
use wire::blocks::entry_words;

use super::format::{
    file_header, Codec, Exit, FrameHeader, IndexEntry, Info, Kind, StreamEnd, StreamStart,
    INDEX_ENTRIES_PER_FRAME, MAX_PAYLOAD, TABLE_FRAME_WORDS, TRAILER_MAGIC,
};

/// The default zstd level: the fastest of the "normal" ones. The stream
/// is repetitive (the same run ids over and over), so it already shrinks
/// several times; higher levels cost more CPU than the ring can spare.
pub const DEFAULT_LEVEL: i32 = 1;

/// Bytes the file's buffer collects before a write.
const BUFFER: usize = 1 << 20;

/// Compressed bytes one stream may hold back while a chunk ahead of them
/// is still being compressed; past it, order gives way to memory.
pub(crate) const HELD_BYTES: usize = 16 << 20;

/// A recording being written. Shared by the recorder's connection threads.
pub struct Writer {
    path: PathBuf,
    out: Mutex<Out>,
    started: Instant,
    level: i32,
    next_stream: AtomicU32,
    processes: Mutex<Processes>,
}

struct Out {
    file: BufWriter<File>,
    /// Where the next frame goes.
    offset: u64,
    /// Index entries not written out yet.
    index: Vec<IndexEntry>,
    /// Offset of the last index frame written (0: none yet).
    last_index: u64,
    /// The first write error; nothing is written after it.
    error: Option<io::Error>,
    /// Bytes of chunk data written, stored (compressed) and raw.
    chunk_stored: u64,
    chunk_raw: u64,
}

/// The processes seen so far, by their block table (live ones only), and
/// the next process number.
#[derive(Default)]
struct Processes {
    by_table: HashMap<(u64, u64), Weak<ProcessLog>>,
    next: u32,
}

/// One process of the recording: its number, and its block table with how
/// much of it is in the file.
pub(crate) struct ProcessLog {
    number: u32,
    table: Option<Arc<TableReader>>,
    /// Entries copied into the file so far; `u64::MAX` once an entry could
    /// not be read (a damaged table: chunks naming the rest decode as
    /// malformed on replay, counted there).
    copied: Mutex<u64>,
}

/// A stream being recorded.
pub(crate) struct StreamLog {
    pub number: u32,
    process: Arc<ProcessLog>,
    order: Mutex<Order>,
}

/// The chunks of one stream that wait for the ones ahead of them.
#[derive(Default)]
struct Order {
    /// The chunk due next: every one before it is written (or was given up
    /// on, and is written whenever it comes).
    next: u64,
    /// Chunks after `next`, compressed: codec, stored bytes, raw length.
    held: BTreeMap<u64, (Codec, Vec<u8>, usize)>,
    held_bytes: usize,
}

/// A worker's compression state, reused chunk after chunk.
pub(crate) struct Packer {
    zstd: Option<zstd::bulk::Compressor<'static>>,
    buf: Vec<u8>,
}

/// What [`Writer::finish`] reports.
#[derive(Debug, Clone, Copy, Default)]
pub struct Written {
    /// Bytes of the whole file.
    pub file_bytes: u64,
    /// Chunk bytes as QEMU wrote them.
    pub chunk_raw: u64,
    /// Chunk bytes as stored in the file (after compression).
    pub chunk_stored: u64,
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Writer {
    /// Creates (or truncates) `path` and writes the header and `info`.
    /// `level`: zstd's compression level (0 and below: faster levels).
    pub fn create(path: &Path, info: &Info, level: i32) -> io::Result<Writer> {
        let file = File::create(path)?;
        let w = Writer {
            path: path.to_path_buf(),
            out: Mutex::new(Out {
                file: BufWriter::with_capacity(BUFFER, file),
                offset: 0,
                index: Vec::new(),
                last_index: 0,
                error: None,
                chunk_stored: 0,
                chunk_raw: 0,
            }),
            started: Instant::now(),
            level,
            next_stream: AtomicU32::new(0),
            processes: Mutex::new(Processes::default()),
        };
        {
            let mut out = lock(&w.out);
            let h = file_header();
            out.put(&h);
            out.offset = h.len() as u64;
        }
        w.json(Kind::Info, 0, info);
        w.check()?;
        Ok(w)
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Nanoseconds since the recording began.
    pub fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// A compression state for one worker.
    pub(crate) fn packer(&self) -> Packer {
        Packer {
            zstd: zstd::bulk::Compressor::new(self.level).ok(),
            buf: Vec::new(),
        }
    }

    /// A stream begins: its hello `line`, and its process's block table
    /// (`None`: QEMU's side has none). Writes its stream frame.
    pub(crate) fn stream_start(&self, line: &str, table: Option<Arc<TableReader>>) -> StreamLog {
        let process = self.process_of(table);
        let start = StreamStart {
            process: process.number,
            start_ns: self.now_ns(),
            hello: line.trim_end().to_string(),
        };
        let bytes = serde_json::to_vec(&start).expect("recording metadata serializes");
        // Numbered under the file's lock: a reader takes stream frames in
        // number order, and two threads starting at once would otherwise
        // write theirs the other way round.
        let mut out = lock(&self.out);
        let number = self.next_stream.fetch_add(1, Ordering::Relaxed);
        out.frame(Kind::Stream, Codec::Stored, number, 0, &bytes, bytes.len());
        drop(out);
        StreamLog {
            number,
            process,
            order: Mutex::new(Order::default()),
        }
    }

    /// The process of a stream with `table`: the one already seen with that
    /// table file, else a new one. A stream without a table is a process of
    /// its own (its runs carry no entries anyway).
    fn process_of(&self, table: Option<Arc<TableReader>>) -> Arc<ProcessLog> {
        let mut ps = lock(&self.processes);
        let key = table.as_ref().map(|t| t.file_id());
        if let Some(p) = key
            .and_then(|k| ps.by_table.get(&k))
            .and_then(Weak::upgrade)
        {
            return p;
        }
        ps.by_table.retain(|_, p| p.strong_count() > 0);
        let p = Arc::new(ProcessLog {
            number: ps.next,
            table,
            copied: Mutex::new(0),
        });
        ps.next += 1;
        if let Some(k) = key {
            ps.by_table.insert(k, Arc::downgrade(&p));
        }
        p
    }

    /// Appends chunk `seq` of `stream`, after the table entries it may
    /// name, and after the chunks before it (see the module's doc). Called
    /// by the stream's workers, in any order.
    pub(crate) fn chunk(&self, stream: &StreamLog, seq: u64, data: &[u8], packer: &mut Packer) {
        self.copy_table(&stream.process);
        let (codec, stored) = packer.pack(data);
        let mut order = lock(&stream.order);
        if seq > order.next {
            order.held_bytes += stored.len();
            order.held.insert(seq, (codec, stored.to_vec(), data.len()));
            if order.held_bytes > HELD_BYTES {
                // Give up on the missing ones: what is held goes out now.
                let last = *order.held.keys().next_back().expect("just held");
                self.release(stream, &mut order, last);
            }
            return;
        }
        self.chunk_frame(stream.number, seq, codec, stored, data.len());
        if seq == order.next {
            order.next += 1;
            self.release(stream, &mut order, seq);
        }
    }

    /// Writes the held chunks up to `through`, and those after it that
    /// are then due; `next` moves past them.
    fn release(&self, stream: &StreamLog, order: &mut Order, through: u64) {
        while let Some(entry) = order.held.first_entry() {
            let seq = *entry.key();
            if seq > through && seq != order.next {
                break;
            }
            let (codec, stored, raw) = entry.remove();
            order.held_bytes -= stored.len();
            self.chunk_frame(stream.number, seq, codec, &stored, raw);
            order.next = order.next.max(seq + 1);
        }
    }

    fn chunk_frame(&self, stream: u32, seq: u64, codec: Codec, stored: &[u8], raw: usize) {
        let mut out = lock(&self.out);
        out.chunk_raw += raw as u64;
        out.chunk_stored += stored.len() as u64;
        out.frame(Kind::Chunk, codec, stream, seq, stored, raw);
    }

    /// Copies the entries `process`'s table published since the last call.
    fn copy_table(&self, process: &ProcessLog) {
        let Some(table) = &process.table else { return };
        let mut copied = lock(&process.copied);
        let published = table.published();
        if *copied >= published {
            return;
        }
        let mut words: Vec<u64> = Vec::new();
        let mut first = *copied;
        let mut id = first;
        let flush = |words: &mut Vec<u64>, first: u64| {
            if words.is_empty() {
                return;
            }
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let mut out = lock(&self.out);
            out.frame(
                Kind::Table,
                Codec::Stored,
                process.number,
                first,
                &bytes,
                bytes.len(),
            );
            words.clear();
        };
        while id < published {
            let e = match table.entry(id) {
                Ok(e) => e,
                Err(_) => {
                    flush(&mut words, first);
                    *copied = u64::MAX;
                    return;
                }
            };
            let n = e.pcs.len();
            if words.len() + entry_words(n) > TABLE_FRAME_WORDS {
                flush(&mut words, first);
                first = id;
            }
            words.push(n as u64);
            words.extend_from_slice(&e.pcs);
            words.extend_from_slice(&e.exec);
            id += 1;
        }
        flush(&mut words, first);
        *copied = published;
    }

    /// A stream ended: what it still held (chunks after one that never
    /// came), then its end frame.
    pub(crate) fn stream_end(&self, stream: &StreamLog, end: &StreamEnd) {
        {
            let mut order = lock(&stream.order);
            self.release(stream, &mut order, u64::MAX);
        }
        self.json(Kind::End, stream.number, end);
    }

    /// Writes the run's end, the last index segment and the trailer, and
    /// flushes. Returns the first error of the whole recording, if any.
    pub fn finish(&self, exit: &Exit) -> io::Result<Written> {
        self.json(Kind::Exit, 0, exit);
        let mut out = lock(&self.out);
        out.write_index();
        let trailer_at = out.last_index;
        let mut t = [0u8; 16];
        t[..8].copy_from_slice(&trailer_at.to_le_bytes());
        t[8..].copy_from_slice(&TRAILER_MAGIC);
        out.put(&t);
        out.offset += t.len() as u64;
        if out.error.is_none() {
            if let Err(e) = out.file.flush() {
                out.error = Some(e);
            }
        }
        match out.error.take() {
            Some(e) => Err(e),
            None => Ok(Written {
                file_bytes: out.offset,
                chunk_raw: out.chunk_raw,
                chunk_stored: out.chunk_stored,
            }),
        }
    }

    /// The first write error so far.
    pub fn check(&self) -> io::Result<()> {
        match &lock(&self.out).error {
            Some(e) => Err(io::Error::new(e.kind(), e.to_string())),
            None => Ok(()),
        }
    }

    fn json<V: serde::Serialize>(&self, kind: Kind, stream: u32, v: &V) {
        let bytes = serde_json::to_vec(v).expect("recording metadata serializes");
        lock(&self.out).frame(kind, Codec::Stored, stream, 0, &bytes, bytes.len());
    }
}

impl Packer {
    /// `data` compressed, or as is where that is not smaller.
    fn pack<'a>(&'a mut self, data: &'a [u8]) -> (Codec, &'a [u8]) {
        if let Some(z) = &mut self.zstd {
            self.buf.clear();
            self.buf
                .reserve(zstd::zstd_safe::compress_bound(data.len()));
            if let Ok(n) = z.compress_to_buffer(data, &mut self.buf) {
                if n < data.len() {
                    return (Codec::Zstd, &self.buf[..n]);
                }
            }
        }
        (Codec::Stored, data)
    }
}

impl Out {
    fn put(&mut self, bytes: &[u8]) {
        if self.error.is_none() {
            if let Err(e) = self.file.write_all(bytes) {
                self.error = Some(e);
            }
        }
    }

    fn frame(
        &mut self,
        kind: Kind,
        codec: Codec,
        stream: u32,
        seq: u64,
        stored: &[u8],
        raw: usize,
    ) {
        debug_assert!(stored.len() <= MAX_PAYLOAD && raw <= MAX_PAYLOAD);
        let h = FrameHeader {
            kind,
            codec,
            stream,
            seq,
            stored_len: stored.len() as u32,
            raw_len: raw as u32,
            crc: crc32fast::hash(stored),
        };
        let offset = self.offset;
        self.put(&h.encode());
        self.put(stored);
        self.offset += (h.encode().len() + stored.len()) as u64;
        if kind != Kind::Index {
            self.index.push(IndexEntry {
                offset,
                kind,
                codec,
                stream,
                seq,
                stored_len: h.stored_len,
                raw_len: h.raw_len,
            });
            if self.index.len() >= INDEX_ENTRIES_PER_FRAME {
                self.write_index();
            }
        }
    }

    /// Writes the pending index entries as one index frame.
    fn write_index(&mut self) {
        let mut p = Vec::with_capacity(8 + self.index.len() * super::format::INDEX_ENTRY_BYTES);
        p.extend_from_slice(&self.last_index.to_le_bytes());
        for e in self.index.drain(..) {
            e.encode(&mut p);
        }
        let at = self.offset;
        self.frame(Kind::Index, Codec::Stored, 0, 0, &p, p.len());
        self.last_index = at;
    }
}
