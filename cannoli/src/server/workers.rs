//! The workers of a decoded stream: claim, decode, resequence, stitch,
//! `trace`; and the stream's end.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use mempipe::{Chunk, ChunkBuf};

use super::connection::Conn;
use super::lock;
use crate::blocks::{cache_for, BlockCache};
use crate::decode::{decode, finish, stitch, Seam};
use crate::Cannoli;

/// Every chunk is delivered: the block the last one left open ran to its
/// end (delivered as one last trace), if the stream is `complete`; if
/// events are missing after it, nobody knows how far it ran.
pub(super) fn end_of_stream<T: Cannoli>(conn: &Conn<'_, T>, complete: bool) {
    let mut carry = conn.reseq.take_serial();
    if !complete {
        return;
    }
    carry.buf.clear();
    let n = finish::<T>(conn.pid_ctx, conn.tid_ctx, &mut carry.open, &mut carry.buf);
    conn.events.fetch_add(n, Ordering::Relaxed);
    if !carry.buf.is_empty() {
        lock(&conn.tool).trace(conn.pid_ctx, conn.tid_ctx, &carry.buf);
    }
}

/// One worker: claim a chunk, decode it into a trace buffer, release it,
/// hand the buffer to the resequencer. Until the ring is finished.
pub(super) fn worker<'a, T: Cannoli>(
    conn: &Conn<'a, T>,
    next: &mut dyn FnMut() -> Option<Chunk<'a>>,
) {
    let (mut events, mut chunks, mut bytes, mut lost, mut skipped) = (0u64, 0u64, 0u64, 0u64, 0u64);
    // The process's block cache (shared by its streams, as the table is).
    let cache: Option<Arc<BlockCache>> = conn.blocks.clone().map(|t| cache_for(t));
    let mut packer = conn.record.as_ref().map(|(w, _)| w.packer());
    // The chunk's bytes in this worker's own memory (`Chunk::copy_into`).
    let mut copy = ChunkBuf::new();
    loop {
        let mut buf = conn.reseq.claim();
        let chunk = next();
        let Some(chunk) = chunk else {
            conn.reseq.unclaim(buf);
            break;
        };
        let seq = chunk.seq();
        chunk.copy_into(&mut copy);
        // The slot goes back to QEMU at once: what is decoded is the copy.
        drop(chunk);
        chunks += 1;
        let data = copy.bytes();
        if let (Some((w, log)), Some(p)) = (&conn.record, packer.as_mut()) {
            w.chunk(log, seq, data, p);
        }
        let mut seam = Seam::default();
        let d = decode::<T>(
            conn.pid_ctx,
            conn.tid_ctx,
            data,
            &conn.layout,
            cache.as_deref(),
            &mut buf,
            &mut seam,
        );
        bytes += data.len() as u64;
        events += d.events;
        if let Some(t) = d.skipped_tag {
            skipped += d.skipped;
            let _ = conn.skipped_tag.compare_exchange(
                0,
                t as u32 + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        if let Some(m) = d.error {
            lost += m.lost_events();
            eprintln!(
                "cannoli: pid {} tid {}: malformed chunk {seq}: {m}",
                conn.pid, conn.tid
            );
        }
        conn.reseq.complete(seq, buf, seam, |trace, seam, carry| {
            // The chunk's head, with the block the chunks before it left
            // open, is delivered before its body.
            carry.buf.clear();
            events += stitch::<T>(
                conn.pid_ctx,
                conn.tid_ctx,
                &conn.layout,
                &mut carry.open,
                &seam,
                &mut carry.buf,
            );
            if carry.buf.is_empty() && trace.is_empty() {
                return;
            }
            let mut tool = lock(&conn.tool);
            if !carry.buf.is_empty() {
                tool.trace(conn.pid_ctx, conn.tid_ctx, &carry.buf);
            }
            if !trace.is_empty() {
                tool.trace(conn.pid_ctx, conn.tid_ctx, trace);
            }
        });
    }
    conn.events.fetch_add(events, Ordering::Relaxed);
    conn.chunks.fetch_add(chunks, Ordering::Relaxed);
    conn.bytes.fetch_add(bytes, Ordering::Relaxed);
    conn.stream.lost.fetch_add(lost, Ordering::Relaxed);
    conn.skipped.fetch_add(skipped, Ordering::Relaxed);
}
