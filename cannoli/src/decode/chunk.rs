//! A chunk on a worker, and a whole stream decoded the way the server does.

use std::borrow::Cow;

use super::place::Open;
use super::problem::Problem;
use super::seam::head_len;
use super::words::{decode_words, Cursor, Input, Stop};
use super::{finish, stitch, Decoded, Malformed, Seam, Shape};
use crate::blocks::{Block, BlockCache};
use crate::Cannoli;
use wire::blocks::EntryError;
use wire::tag;

/// Decodes one chunk's bytes on a worker, calling `T`'s callbacks in order
/// for its body, and leaves in `seam` what [`stitch`] needs to deliver it
/// in order. `cache`: the process's block table (none: every run event
/// names an unknown block, except
/// [`NO_ENTRY`](wire::blocks::NO_ENTRY)'s).
///
/// Never panics on malformed input: it stops at the first bad event and
/// reports it.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    data: &[u8],
    lay: &Shape<'_>,
    cache: Option<&BlockCache>,
    trace: &mut Vec<T::Trace>,
    seam: &mut Seam,
) -> Decoded {
    let whole = data.len() & !7;
    let (body, tail) = data.split_at(whole);

    let mut d = with_words(body, |words| {
        decode_chunk::<T>(pid, tid, words, body, lay, cache, trace, seam)
    });
    T::decoded(pid, tid, trace);
    match &mut d.error {
        // The stray bytes after the last whole word are skipped too: a
        // malformed event's `skipped_bytes` runs to the end of the chunk.
        Some(m) => m.skipped_bytes += tail.len(),
        None if !tail.is_empty() => {
            d.error = Some(Malformed {
                offset: whole,
                tag: tail.last().copied().unwrap_or(0), // the top byte of a would-be word
                problem: Problem::TrailingBytes(tail.len()),
                skipped_bytes: tail.len(),
            })
        }
        None => {}
    }
    d
}

/// [`decode`] over whole words.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn decode_chunk<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    words: &[u64],
    bytes: &[u8],
    lay: &Shape<'_>,
    cache: Option<&BlockCache>,
    trace: &mut Vec<T::Trace>,
    seam: &mut Seam,
) -> Decoded {
    let n = words.len();
    let h = head_len(words, lay);
    seam.head.clear();
    seam.head.extend_from_slice(&words[..h]);
    seam.body = h < n;
    seam.tail = None;
    let mut cur = Cursor {
        i: h,
        ..Cursor::default()
    };
    let bad = loop {
        // One read lock per chunk (and per miss).
        let guard = cache.map(BlockCache::read);
        let slots: &[Option<Block>] = guard.as_deref().map_or(&[], |v| &v[..]);
        let mut open = None;
        match decode_words::<T>(
            pid,
            tid,
            Input {
                words,
                bytes,
                lay,
                slots,
            },
            &mut open,
            &mut cur,
            trace,
        ) {
            Stop::End => {
                seam.tail = open.map(Open::to_owned);
                break None;
            }
            Stop::Bad(t, p) => break Some((t, p)),
            // The run event at `cur.i` names a block the cache does not
            // have yet; the block before it is closed (`open` is None).
            Stop::Miss(id) => {
                drop(guard);
                let filled = match cache {
                    Some(c) => c.fill(id),
                    None => Err(EntryError::NotPublished),
                };
                if let Err(error) = filled {
                    break Some((tag::RUN, Problem::Block { id, error }));
                }
            }
        }
    };
    Decoded {
        events: cur.events(h),
        skipped: cur.skipped.count,
        skipped_tag: cur.skipped.first,
        error: bad.map(|(tag, problem)| Malformed {
            offset: cur.i * 8,
            tag,
            problem,
            skipped_bytes: (n - cur.i) * 8,
        }),
    }
}

/// Decodes a whole stream given as its chunks the way the server does:
/// each chunk on its own (last chunk first, to show that the order does
/// not matter), then in order each one's head stitched and its trace
/// appended to `trace`, then the block still open closed. The result adds
/// up the chunks' (offsets are within their chunk; the first error and the
/// first skipped tag in stream order).
pub(crate) fn decode_stream<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    chunks: &[&[u8]],
    lay: &Shape<'_>,
    cache: Option<&BlockCache>,
    trace: &mut Vec<T::Trace>,
) -> Decoded {
    let mut done: Vec<(Vec<T::Trace>, Seam, Decoded)> =
        (0..chunks.len()).map(|_| Default::default()).collect();
    for (c, (t, s, d)) in chunks.iter().zip(done.iter_mut()).rev() {
        *d = decode::<T>(pid, tid, c, lay, cache, t, s);
    }
    let mut all = Decoded::default();
    let mut carry = None;
    for (t, s, d) in done {
        all.events += d.events + stitch::<T>(pid, tid, lay, &mut carry, &s, trace);
        trace.extend(t);
        all.skipped += d.skipped;
        all.skipped_tag = all.skipped_tag.or(d.skipped_tag);
        all.error = all.error.or(d.error);
    }
    all.events += finish::<T>(pid, tid, &mut carry, trace);
    all
}

/// `words` as little-endian bytes: in place on a little-endian host.
pub(super) fn le_bytes(words: &[u64]) -> Cow<'_, [u8]> {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: the bytes of `words` are initialized, u8 has no alignment
        // requirement, and the slice covers exactly the words' memory,
        // borrowed for as long as `words` is.
        Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 8)
        })
    }
    #[cfg(not(target_endian = "little"))]
    {
        Cow::Owned(words.iter().flat_map(|w| w.to_le_bytes()).collect())
    }
}

/// Runs `f` over `bytes` viewed as little-endian `u64` words: in place when
/// the host is little-endian and the bytes are 8-aligned (always the case for
/// mempipe chunks), else over a converted copy.
#[inline(always)]
fn with_words<R>(bytes: &[u8], f: impl FnOnce(&[u64]) -> R) -> R {
    debug_assert!(bytes.len() % 8 == 0);
    #[cfg(target_endian = "little")]
    {
        // SAFETY: every bit pattern is a valid u64; align_to only yields a
        // middle slice that is properly aligned and within `bytes`.
        let (pre, words, post) = unsafe { bytes.align_to::<u64>() };
        if pre.is_empty() && post.is_empty() {
            return f(words);
        }
    }
    let copy: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    f(&copy)
}
