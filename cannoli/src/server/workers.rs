//! The workers of a decoded stream, fed from its ring (the shared
//! pipeline, `pipeline.rs`, decodes and delivers); and the stream's end.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use mempipe::{Chunk, ChunkBuf};

use super::connection::Conn;
use crate::blocks::{cache_for, BlockCache};
use crate::decode::Decoded;
use crate::notes::note;
use crate::pipeline::{Due, Feed, Next};
use crate::recording::Packer;
use crate::Cannoli;

/// Every chunk is delivered: the block the last one left open ran to its
/// end (delivered as one last trace), if the stream is `complete`; if
/// events are missing after it, nobody knows how far it ran.
pub(super) fn end_of_stream<T: Cannoli>(conn: &Conn<'_, T>, complete: bool) {
    let mut delivery = conn.pipe.take_serial();
    if !complete {
        return;
    }
    let n = conn.pipe.finish(&mut delivery);
    conn.events.fetch_add(n, Ordering::Relaxed);
}

/// One worker: claim a chunk, decode it into a trace buffer, release it,
/// hand the buffer to the resequencer. Until the ring is finished.
pub(super) fn worker<'a, T: Cannoli>(
    conn: &Conn<'a, T>,
    next: &mut dyn FnMut() -> Option<Chunk<'a>>,
) {
    // The process's block cache (shared by its streams, as the table is).
    let cache: Option<Arc<BlockCache>> = conn.blocks.clone().map(|t| cache_for(t));
    let mut ring = Ring {
        conn,
        next,
        packer: conn.record.as_ref().map(|(w, _)| w.packer()),
        copy: ChunkBuf::new(),
        events: 0,
        chunks: 0,
        bytes: 0,
        lost: 0,
        skipped: 0,
    };
    conn.pipe.work(cache.as_deref(), &mut ring);
    conn.events.fetch_add(ring.events, Ordering::Relaxed);
    conn.chunks.fetch_add(ring.chunks, Ordering::Relaxed);
    conn.bytes.fetch_add(ring.bytes, Ordering::Relaxed);
    conn.stream.lost.fetch_add(ring.lost, Ordering::Relaxed);
    conn.skipped.fetch_add(ring.skipped, Ordering::Relaxed);
}

/// One worker's chunks from the stream's ring (each one also written to a
/// tee's recording), and its totals, added to the connection's at its end.
struct Ring<'c, 'a, T: Cannoli> {
    conn: &'c Conn<'a, T>,
    next: &'c mut dyn FnMut() -> Option<Chunk<'a>>,
    packer: Option<Packer>,
    /// The chunk's bytes in this worker's own memory (`Chunk::copy_into`).
    copy: ChunkBuf,
    events: u64,
    chunks: u64,
    bytes: u64,
    lost: u64,
    skipped: u64,
}

impl<T: Cannoli> Feed<T> for Ring<'_, '_, T> {
    type Note = ();
    type Serial = ();

    fn next(&mut self) -> Option<Next<'_, ()>> {
        let chunk = (self.next)()?;
        let seq = chunk.seq();
        chunk.copy_into(&mut self.copy);
        // The slot goes back to QEMU at once: what is decoded is the copy.
        drop(chunk);
        self.chunks += 1;
        let data = self.copy.bytes();
        if let (Some((w, log)), Some(p)) = (&self.conn.record, self.packer.as_mut()) {
            w.chunk(log, seq, data, p);
        }
        Some(Next {
            seq,
            data: Ok(data),
        })
    }

    fn decoded(&mut self, seq: u64, len: usize, d: &Decoded) {
        let conn = self.conn;
        self.bytes += len as u64;
        self.events += d.events;
        if let Some(t) = d.skipped_tag {
            self.skipped += d.skipped;
            let _ = conn.skipped_tag.compare_exchange(
                0,
                t as u32 + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        if let Some(m) = d.error {
            self.lost += m.lost_events();
            note!(
                conn.stream.notes,
                "cannoli: pid {} tid {}: malformed chunk {seq}: {m}",
                conn.pid,
                conn.tid
            );
        }
    }

    fn deliver(&mut self, _: &mut (), _: (), due: Due<'_, T>) {
        let (stitched, chunk) = due.stitch();
        self.events += stitched;
        chunk.trace();
    }
}
