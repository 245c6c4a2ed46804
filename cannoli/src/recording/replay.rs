// SPDX-License-Identifier: GPL-2.0-or-later
//! Replaying a recording through a tool: the same decoder, callbacks and
//! ordering as a live run.
//!
//! As the tool asks ([`Cannoli::REPLAY_ORDER`]), streams are replayed one
//! after the other, in the order they connected, each one's chunks decoded
//! by `threads` workers at once and handed to [`Cannoli::trace`] in order,
//! as live; or a process's streams side by side (`side_by_side`). A
//! process's `PidContext` is made when its first stream starts and dropped
//! after its last one ends (a stream's `Self` first, then its
//! `TidContext`), as live; its block table is read from the recording's
//! table frames first.
//!
//! What a live run would have said about loss, a replay says too (QEMU's
//! lost events, a stream without its goodbye, a malformed chunk), and also
//! what the file itself lost: a stream the recording ends before, a damaged
//! chunk (the stream's events stop there).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use wire::blocks::{Entry, EntryError, MAX_BLOCK_INSNS};
use wire::parse_hello;

use super::format::{IndexEntry, StreamEnd};
use super::reader::{FrameError, Recording, StreamRec};
use super::{Error, Replayed};
use crate::blocks::BlockCache;
use crate::decode::{Decoded, Shape};
use crate::flow::Halt;
use crate::notes::{note, Notes};
use crate::pipeline::{Due, Feed, Next, Pipeline};
use crate::{Cannoli, ClientInfo, ReplayOrder, Stats, ToolState};

impl Recording {
    /// Feeds every stream through `T` (see the module doc), with `threads`
    /// decoding workers per stream.
    pub fn replay<T: Cannoli>(&self, threads: usize) -> Result<Replayed, Error> {
        self.replay_saying::<T>(threads, &self.notes, ToolState::default())
    }

    /// [`Recording::replay`] with `state` in every stream's [`ClientInfo`]
    /// (see [`ToolState`]).
    pub fn replay_with<T: Cannoli>(
        &self,
        threads: usize,
        state: impl Into<ToolState>,
    ) -> Result<Replayed, Error> {
        self.replay_saying::<T>(threads, &self.notes, state.into())
    }

    /// [`Recording::replay`] without its lines (see [`Recording::with_notes`]) about what the
    /// recording lost (the returned totals still count it): for a tool's
    /// second pass over a recording whose first pass said them.
    pub fn replay_quietly<T: Cannoli>(&self, threads: usize) -> Result<Replayed, Error> {
        self.replay_saying::<T>(threads, &Notes::quiet(), ToolState::default())
    }

    /// [`Recording::replay_quietly`] with `state`, as
    /// [`Recording::replay_with`].
    pub fn replay_quietly_with<T: Cannoli>(
        &self,
        threads: usize,
        state: impl Into<ToolState>,
    ) -> Result<Replayed, Error> {
        self.replay_saying::<T>(threads, &Notes::quiet(), state.into())
    }

    fn replay_saying<T: Cannoli>(
        &self,
        threads: usize,
        notes: &Notes,
        state: ToolState,
    ) -> Result<Replayed, Error> {
        let threads = threads.max(1);
        self.progress().restart();
        let halt = Halt::default();
        let pass = Pass {
            threads,
            notes,
            halt: &halt,
        };
        let mut stats = match T::REPLAY_ORDER {
            ReplayOrder::InTurn => self.replay_in_turn::<T>(&pass, &state),
            ReplayOrder::AsRecorded => self.replay_side_by_side::<T>(&pass, &state),
        };
        let status = match self.exit() {
            Some(x) => {
                stats.refused_connections += x.refused_connections;
                stats.missing_processes += x.missing_processes;
                stats.strangers += x.strangers;
                x.status
            }
            None => {
                note!(
                    notes,
                    "cannoli: {}: {}; the run's end and exit status are not in it, its last events may be missing",
                    self.path().display(),
                    self.cut().unwrap_or("the recording has no end record")
                );
                stats.cut_recordings += 1;
                None
            }
        };
        if let Some(e) = halt.take_error() {
            return Err(Error::Tool(e));
        }
        stats.stopped = halt.stopped();
        Ok(Replayed { stats, status })
    }

    /// Every stream whole, one after the other ([`ReplayOrder::InTurn`]).
    /// Returns the totals.
    fn replay_in_turn<T: Cannoli>(&self, pass: &Pass<'_>, state: &ToolState) -> Stats {
        let notes = pass.notes;
        let mut stats = Stats::default();
        // Streams left per process: its context goes after the last one.
        let mut left: HashMap<u32, usize> = HashMap::new();
        for s in self.streams() {
            *left.entry(s.start.process).or_default() += 1;
        }
        let mut live: HashMap<u32, Arc<T::PidContext>> = HashMap::new();
        let mut tables = LiveTables::default();
        for s in self.streams() {
            if pass.halt.is_halted() {
                break; // the tool ended the run: nothing more is its
            }
            let process = s.start.process;
            let Some(ci) = self.client_info(s, state, notes) else {
                stats.refused_connections += 1;
                release(&mut left, &mut live, &mut tables, process);
                continue;
            };
            let pid_ctx = live
                .entry(process)
                .or_insert_with(|| T::init_pid(&ci))
                .clone();
            let cache = tables.get(process, self, |r| {
                r.load_table(process, ci.pid, ci.tid, notes)
            });
            let totals = self.replay_stream::<T>(s, &ci, &pid_ctx, &cache, pass);
            stats.add(&totals);
            drop((pid_ctx, cache));
            release(&mut left, &mut live, &mut tables, process);
        }
        stats
    }

    /// The [`ClientInfo`] of stream `s`, from its hello as QEMU sent it,
    /// with `state`; `None` (said on `notes`) if the hello cannot be read.
    pub(super) fn client_info(
        &self,
        s: &StreamRec,
        state: &ToolState,
        notes: &Notes,
    ) -> Option<ClientInfo> {
        match parse_hello(&s.start.hello) {
            Ok(hello) => {
                let mut ci = ClientInfo::from_hello(&hello);
                ci.stream = s.number.into();
                ci.tool_state = state.clone();
                Some(ci)
            }
            Err(e) => {
                note!(
                    notes,
                    "cannoli: {}: stream {}: its hello cannot be read ({e}); its events are missing",
                    self.path().display(),
                    s.number
                );
                None
            }
        }
    }

    /// Words of process `process`'s block table frames, at most what a
    /// live table holds: what loading it will take.
    fn table_words(&self, process: u32) -> usize {
        self.table_frames(process)
            .iter()
            .map(|f| f.raw_len as usize / 8)
            .sum::<usize>()
            .min(TABLE_MAX_WORDS)
    }

    /// Process `process`'s block table, from its table frames: the entries
    /// from id 0 on, up to the first that is missing or damaged (a run
    /// naming a later one is then malformed, and counted).
    pub(super) fn load_table(&self, process: u32, pid: i32, tid: i32, notes: &Notes) -> FlatTable {
        let mut table = FlatTable::default();
        let mut words_read = 0usize;
        for f in self.table_frames(process) {
            if f.seq != table.len() as u64 {
                break; // a gap: the entries after it cannot be placed
            }
            // No more than a live table's data, whatever a damaged file
            // says.
            words_read += f.raw_len as usize / 8;
            if words_read > TABLE_MAX_WORDS {
                break;
            }
            let words = match self.read_frame(f) {
                Ok(b) if b.len() % 8 == 0 => b
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                    .collect::<Vec<u64>>(),
                Ok(_) | Err(_) => {
                    note!(
                        notes,
                        "cannoli: pid {pid} tid {tid}: the recording's block table frame at byte {} is damaged; \
                         the blocks from id {} on are unknown",
                        f.offset,
                        table.len()
                    );
                    break;
                }
            };
            if !table.push_entries(&words) {
                break;
            }
        }
        table.words.shrink_to_fit();
        table.starts.shrink_to_fit();
        table
    }

    /// One stream, decoded in parallel and delivered in order. Returns its
    /// totals (one connection).
    fn replay_stream<T: Cannoli>(
        &self,
        s: &StreamRec,
        ci: &ClientInfo,
        pid_ctx: &T::PidContext,
        cache: &BlockCache,
        pass: &Pass<'_>,
    ) -> Stats {
        let Pass {
            threads,
            notes,
            halt,
        } = *pass;
        let (pid, tid) = (ci.pid, ci.tid);
        let (tool, tid_ctx) = T::init_tid(pid_ctx, ci);
        let shape = Shape::new(ci);
        let chunks = dense_chunks(s, pid, tid, notes);
        let next = AtomicUsize::new(0);
        let pipe: ReplayPipeline<'_, T> =
            Pipeline::new(pid_ctx, &tid_ctx, tool, shape, halt, 2 * threads + 4);
        let worker = || {
            let mut frames = Frames::new(self, pass);
            frames.point(chunks, Take::Shared(&next), None, pid, tid);
            pipe.work(Some(cache), &mut frames);
        };
        std::thread::scope(|sc| {
            for _ in 1..threads {
                sc.spawn(worker);
            }
            worker();
        });
        let totals = end_stream(s, &pipe, pid, tid, pass);
        drop(pipe);
        drop(tid_ctx);
        totals
    }
}

/// The chunks of `s` the file holds, in order from 0: a gap ends them
/// (said on `notes`).
pub(super) fn dense_chunks<'s>(
    s: &'s StreamRec,
    pid: i32,
    tid: i32,
    notes: &Notes,
) -> &'s [IndexEntry] {
    let dense = s
        .chunks
        .iter()
        .enumerate()
        .take_while(|(i, c)| c.seq == *i as u64)
        .count();
    if dense < s.chunks.len() {
        note!(
            notes,
            "cannoli: pid {pid} tid {tid}: the recording lacks chunk {dense} of this stream (or has it twice); \
             the events from there on are missing"
        );
    }
    &s.chunks[..dense]
}

/// Stream `s` ended, its chunks delivered through `pipe`: the block the
/// last one left open is delivered, what is missing is said, and its tool
/// is dropped (its `Drop` may report). Returns its totals (one
/// connection).
pub(super) fn end_stream<T: Cannoli>(
    s: &StreamRec,
    pipe: &ReplayPipeline<'_, T>,
    pid: i32,
    tid: i32,
    pass: &Pass<'_>,
) -> Stats {
    let mut delivery = pipe.take_serial();
    let d = &mut delivery.state;
    // A run the tool ended is not checked for what it did not read.
    let complete = pass.halt.is_halted()
        || stream_complete(s, d.chunks, pid, tid, &mut d.lost, pass.notes) && !d.stopped;
    // The block the last chunk left open ran to its end, if the stream
    // ended there; if events are missing after it, who knows.
    if complete {
        delivery.state.events += pipe.finish(&mut delivery);
    }
    let d = delivery.state;
    drop(pipe.end());
    Stats {
        connections: 1,
        events: d.events,
        chunks: d.chunks,
        bytes: d.bytes,
        lost_events: d.lost,
        incomplete_streams: u64::from(!complete),
        skipped_events: d.skipped,
        ..Stats::default()
    }
}

/// A stream's pipeline in a replay.
pub(super) type ReplayPipeline<'a, T> = Pipeline<'a, T, Result<Done, Damaged>, Delivered>;

/// How a replay goes, the same for each of its streams.
#[derive(Clone, Copy)]
pub(super) struct Pass<'h> {
    /// Decoding workers per stream (side by side: per process).
    pub threads: usize,
    /// Where its lines go.
    pub notes: &'h Notes,
    /// Whether the tool ended the replay.
    pub halt: &'h Halt,
}

/// A chunk decoded on a worker, for its in-order delivery.
pub(super) struct Done {
    events: u64,
    lost: u64,
    skipped: u64,
    bytes: u64,
}

/// A chunk that could not be read: it stops its stream's delivery there.
#[derive(Debug, thiserror::Error)]
#[error(
    "the recording's chunk {chunk} (byte {offset}) is damaged ({source}); the events from there \
     on are missing"
)]
pub(super) struct Damaged {
    /// Its index in the stream.
    chunk: usize,
    /// Where its frame starts in the file.
    offset: u64,
    /// What is wrong with it.
    source: FrameError,
}

/// A stream's in-order delivery: what was delivered (a chunk counts once
/// it is delivered, not when decoded).
#[derive(Default)]
pub(super) struct Delivered {
    /// A damaged chunk was reached: nothing more is delivered.
    stopped: bool,
    chunks: u64,
    events: u64,
    lost: u64,
    skipped: u64,
    bytes: u64,
}

/// Which chunk a worker's [`Frames`] hands it next.
#[derive(Clone, Copy)]
pub(super) enum Take<'r> {
    /// The next of the stream's chunks not taken yet, shared by the
    /// workers.
    Shared(&'r AtomicUsize),
    /// This one, once.
    One(Option<usize>),
}

/// One worker's chunks from the recording: the next chunk of the stream
/// not taken yet, read (and decompressed) into `raw`. A damaged one is
/// delivered as its message, and stops the stream there.
pub(super) struct Frames<'r> {
    rec: &'r Recording,
    /// The chunks the file holds, in order from 0.
    chunks: &'r [IndexEntry],
    take: Take<'r>,
    /// Counts the chunks whose turn came (delivered or not), if asked.
    passed: Option<&'r AtomicUsize>,
    raw: Vec<u8>,
    ctx: Option<zstd::bulk::Decompressor<'static>>,
    pid: i32,
    tid: i32,
    notes: &'r Notes,
    /// The tool ended the run: no more chunks are read.
    halt: &'r Halt,
}

impl<'r> Frames<'r> {
    /// A worker's, pointed at no stream yet.
    pub(super) fn new(rec: &'r Recording, pass: &Pass<'r>) -> Self {
        Frames {
            rec,
            chunks: &[],
            take: Take::One(None),
            passed: None,
            raw: Vec::new(),
            ctx: zstd::bulk::Decompressor::new().ok(),
            pid: 0,
            tid: 0,
            notes: pass.notes,
            halt: pass.halt,
        }
    }

    /// Points the worker at the stream of `chunks` (thread `pid` `tid`).
    pub(super) fn point(
        &mut self,
        chunks: &'r [IndexEntry],
        take: Take<'r>,
        passed: Option<&'r AtomicUsize>,
        pid: i32,
        tid: i32,
    ) {
        self.chunks = chunks;
        self.take = take;
        self.passed = passed;
        self.pid = pid;
        self.tid = tid;
    }
}

impl<T: Cannoli> Feed<T> for Frames<'_> {
    type Note = Result<Done, Damaged>;
    type Serial = Delivered;

    fn next(&mut self) -> Option<Next<'_, Self::Note>> {
        let i = match &mut self.take {
            Take::Shared(next) => next.fetch_add(1, Ordering::Relaxed),
            Take::One(one) => one.take()?,
        };
        if i >= self.chunks.len() || self.halt.is_halted() {
            return None;
        }
        let read = self
            .rec
            .read_frame_into(&self.chunks[i], &mut self.raw, self.ctx.as_mut());
        let data = match read {
            Ok(()) => Ok(&self.raw[..]),
            Err(source) => Err(Err(Damaged {
                chunk: i,
                offset: self.chunks[i].offset,
                source,
            })),
        };
        Some(Next {
            seq: i as u64,
            data,
        })
    }

    fn decoded(&mut self, i: u64, len: usize, d: &Decoded) -> Self::Note {
        let (pid, tid) = (self.pid, self.tid);
        let lost = d.error.map_or(0, |m| {
            note!(
                self.notes,
                "cannoli: pid {pid} tid {tid}: malformed chunk {i}: {m}"
            );
            m.lost_events()
        });
        Ok(Done {
            events: d.events,
            lost,
            skipped: d.skipped,
            bytes: len as u64,
        })
    }

    // Delivered in chunk order: a damaged chunk stops the stream there,
    // whatever the workers decoded after it.
    fn deliver(&mut self, d: &mut Delivered, done: Self::Note, due: Due<'_, T>) {
        self.deliver_chunk(d, done, due);
        if let Some(p) = self.passed {
            // After the delivery: whoever reads the last count finds the
            // stream's tool done with its chunks.
            p.fetch_add(1, Ordering::Release);
        }
    }
}

impl Frames<'_> {
    fn deliver_chunk<T: Cannoli>(
        &mut self,
        d: &mut Delivered,
        done: Result<Done, Damaged>,
        due: Due<'_, T>,
    ) {
        if d.stopped {
            return;
        }
        let done = match done {
            Ok(done) => done,
            Err(m) => {
                let (pid, tid) = (self.pid, self.tid);
                note!(self.notes, "cannoli: pid {pid} tid {tid}: {m}");
                d.stopped = true;
                return;
            }
        };
        d.chunks += 1;
        d.events += done.events;
        d.lost += done.lost;
        d.skipped += done.skipped;
        d.bytes += done.bytes;
        let (stitched, chunk) = due.stitch();
        d.events += stitched;
        self.rec.progress().add(done.bytes, done.events + stitched);
        chunk.trace();
    }
}

/// Whether stream `s` is whole, `delivered` of its chunks having been
/// replayed: says on stderr what is missing (as a live run would, and what
/// the file lost), and adds QEMU's lost events to `lost`.
fn stream_complete(
    s: &StreamRec,
    delivered: u64,
    pid: i32,
    tid: i32,
    lost: &mut u64,
    notes: &Notes,
) -> bool {
    let Some(StreamEnd {
        goodbye,
        published,
        violation,
        written,
        control,
        ..
    }) = &s.end
    else {
        note!(
            notes,
            "cannoli: pid {pid} tid {tid}: the recording ends before this stream did (the recorder was stopped); \
             events from chunk {delivered} on are missing"
        );
        return false;
    };
    let mut complete = true;
    if let Some(v) = violation {
        note!(
            notes,
            "cannoli: pid {pid} tid {tid}: the ring broke its protocol ({v}); the events after it are missing"
        );
        complete = false;
    }
    if let Some(v) = control {
        note!(
            notes,
            "cannoli: pid {pid} tid {tid}: QEMU's side broke the control protocol ({}); \
             the stream counts as incomplete",
            wire::tame(v, 200)
        );
        complete = false;
    }
    match goodbye {
        Some(g) => {
            if g.chunks != *published {
                note!(
                    notes,
                    "cannoli: pid {pid} tid {tid}: QEMU says it published {} chunks but the ring holds {published}",
                    g.chunks
                );
                complete = false;
            } else if complete && delivered > g.chunks {
                // More chunks than the goodbye counts: not what the ring
                // held (fewer is said below).
                note!(
                    notes,
                    "cannoli: pid {pid} tid {tid}: QEMU says it published {} chunks but the recording \
                     holds {delivered}; the stream counts as incomplete",
                    g.chunks
                );
                complete = false;
            }
            if g.lost_events > 0 {
                note!(
                    notes,
                    "cannoli: pid {pid} tid {tid}: QEMU could not record {} events; the trace has gaps",
                    g.lost_events
                );
                *lost += g.lost_events;
            }
        }
        None => {
            note!(
                notes,
                "cannoli: pid {pid} tid {tid}: QEMU exited without handing over its last chunk; \
                 events after chunk {} are missing",
                published.saturating_sub(1)
            );
            complete = false;
        }
    }
    if delivered < *published {
        if delivered == s.chunks.len() as u64 && s.chunks.len() as u64 == *written {
            note!(
                notes,
                "cannoli: pid {pid} tid {tid}: the recorder wrote {delivered} of the stream's {published} chunks; \
                 the events after them are missing"
            );
        }
        complete = false;
    }
    complete
}

/// The stream of a process ended: its context and table go with its last
/// one.
fn release<P>(
    left: &mut HashMap<u32, usize>,
    live: &mut HashMap<u32, P>,
    tables: &mut LiveTables,
    process: u32,
) {
    let n = left.entry(process).or_insert(1);
    *n -= 1;
    if *n == 0 {
        left.remove(&process);
        live.remove(&process);
        tables.remove(process);
    }
}

/// Most words of one process's table a replay reads: what a live table
/// holds (its entries and their data), whatever a damaged file says.
const TABLE_MAX_WORDS: usize = wire::blocks::DATA_WORDS + wire::blocks::CAPACITY;

/// Most words of block tables a replay keeps at once, all processes
/// together: one table as large as a live one. A table is kept from its
/// process's first stream to its last; when the streams of many processes
/// interleave, the tables of the others are dropped to make room and read
/// again from the file when their process's next stream comes.
const TABLE_BUDGET_WORDS: usize = TABLE_MAX_WORDS;

/// The block tables (with their caches of decoded blocks) a replay keeps,
/// within [`TABLE_BUDGET_WORDS`].
#[derive(Default)]
pub(super) struct LiveTables {
    map: HashMap<u32, (Arc<BlockCache>, usize)>,
    words: usize,
}

impl LiveTables {
    /// Process `process`'s table: the one kept, or `load`'s, after making
    /// room for it.
    pub(super) fn get(
        &mut self,
        process: u32,
        rec: &Recording,
        load: impl FnOnce(&Recording) -> FlatTable,
    ) -> Arc<BlockCache> {
        if let Some((c, _)) = self.map.get(&process) {
            return c.clone();
        }
        let need = rec.table_words(process);
        while self.words + need > TABLE_BUDGET_WORDS {
            let Some(&other) = self.map.keys().next() else {
                break;
            };
            self.remove(other);
        }
        let table = load(rec);
        let words = table.words.len();
        let cache = Arc::new(BlockCache::new(Arc::new(table)));
        self.words += words;
        self.map.insert(process, (cache.clone(), words));
        cache
    }

    fn remove(&mut self, process: u32) {
        if let Some((_, w)) = self.map.remove(&process) {
            self.words -= w;
        }
    }
}

/// A process's block table read from a recording: its entries' words as
/// the table frames lay them out (`n`, `n` pcs, the exec mask), one after
/// the other, and where each entry starts. Compact (a word per word of the
/// frames, and 4 bytes per entry), whatever the entries' sizes.
#[derive(Default)]
pub(crate) struct FlatTable {
    words: Vec<u64>,
    /// Index in `words` of each entry's `n`.
    starts: Vec<u32>,
}

impl FlatTable {
    fn len(&self) -> usize {
        self.starts.len()
    }

    /// Appends the entries in `words` (the table frame layout). False if
    /// they are malformed, or more than a live table holds (the rest is
    /// then unusable).
    fn push_entries(&mut self, mut words: &[u64]) -> bool {
        while let Some((&n, rest)) = words.split_first() {
            let n = n as usize;
            let len = 1 + n + n.div_ceil(64);
            if n == 0 || n > MAX_BLOCK_INSNS || words.len() < len {
                return false;
            }
            // No more than a live table holds (its entries and data
            // words), whatever a damaged file says.
            if self.len() >= wire::blocks::CAPACITY || self.words.len() + len > TABLE_MAX_WORDS {
                return false;
            }
            self.starts.push(self.words.len() as u32);
            self.words.push(n as u64);
            self.words.extend_from_slice(&rest[..len - 1]);
            words = &rest[len - 1..];
        }
        true
    }
}

impl crate::blocks::BlockSource for FlatTable {
    fn entry(&self, id: u64) -> Result<Entry, EntryError> {
        let start = *usize::try_from(id)
            .ok()
            .and_then(|i| self.starts.get(i))
            .ok_or(EntryError::NotPublished)? as usize;
        let n = self.words[start] as usize;
        let pcs = &self.words[start + 1..start + 1 + n];
        let exec = &self.words[start + 1 + n..start + 1 + n + n.div_ceil(64)];
        Ok(Entry {
            pcs: pcs.to_vec(),
            exec: exec.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::BlockSource;

    #[test]
    fn table_words_become_entries_and_garbage_stops_them() {
        let mut t = FlatTable::default();
        assert!(t.push_entries(&[2, 0x10, 0x14, 0b11, 1, 0x20, 0b1]));
        assert_eq!(t.len(), 2);
        assert_eq!(t.entry(0).unwrap().pcs, vec![0x10, 0x14]);
        assert_eq!(t.entry(1).unwrap().exec, vec![1]);
        assert!(t.entry(2).is_err());
        assert!(!t.push_entries(&[3, 0x10]));
        assert!(!t.push_entries(&[0]));
        assert!(!t.push_entries(&[MAX_BLOCK_INSNS as u64 + 1]));
        assert_eq!(t.len(), 2);
        assert_eq!(t.words.len(), 7);
    }
}
