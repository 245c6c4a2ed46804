// SPDX-License-Identifier: GPL-2.0-or-later
//! The target itself: an input to a stream description and a chunk, and
//! the properties every decoding of that chunk must have (the list is in
//! the module's own documentation, `decode`).

use arbitrary::Unstructured;
use cannoli::fuzzing::{self, Decoded};

use super::input::build;
use super::reference::reference;
use super::stream::Stream;
use super::tools::{Rec, Tally};

/// Runs the target on one input.
pub fn run(input: &[u8]) {
    let mut h = [0u8; 5];
    let n = input.len().min(5);
    h[..n].copy_from_slice(&input[..n]);
    let rest = &input[n..];
    let stream = Stream::from_bytes(&h);
    let chunk = if h[0] & 1 == 0 {
        rest.to_vec()
    } else {
        build(&mut Unstructured::new(rest), &stream)
    };
    check(&stream, &chunk);
}

/// Decodes `chunk` for `stream` and checks every property (panics if one
/// fails).
pub fn check(stream: &Stream, chunk: &[u8]) {
    let ci = stream.client_info();
    // The chunk at the asked misalignment inside a word-aligned buffer.
    let mut buf = vec![0u64; (chunk.len() + stream.misalign).div_ceil(8) + 1];
    let bytes = words_as_bytes_mut(&mut buf);
    let data = &mut bytes[stream.misalign..stream.misalign + chunk.len()];
    data.copy_from_slice(chunk);
    let data = &*data;

    // 1. A tool that allocates nothing: the decoder may allocate a
    //    word-aligned copy of a misaligned chunk and a lossy copy of a path
    //    that is not UTF-8 (3 bytes per bad byte, grown by doubling: up to
    //    7 bytes allocated in all per byte): linear in the chunk, whatever
    //    lengths the chunk states.
    let mut count: Vec<()> = Vec::new();
    fuzzing::fake_table(); // its first use fills the decoder's cache
    let before = crate::ALLOC.total_allocated();
    let d = fuzzing::decode::<Tally>(&(), &(), data, &ci, &mut count);
    let allocated = crate::ALLOC.total_allocated() - before;
    let strict = crate::STRICT_ALLOC.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        !strict || allocated <= 8 * chunk.len() + 64,
        "decoding {} bytes allocated {allocated} bytes",
        chunk.len()
    );
    assert_eq!(d.events, count.len() as u64, "events vs callbacks");

    // 2. The same again, recording, against the reference reading.
    let mut got = Vec::new();
    let d2 = fuzzing::decode::<Rec>(&(), &(), data, &ci, &mut got);
    assert_eq!(d, d2, "two decodings of one chunk differ");
    let r = reference(
        chunk,
        stream.bits,
        stream.reg_count as usize,
        stream.reg_bytes() as usize,
    );
    if got != r.events {
        let first = got
            .iter()
            .zip(&r.events)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(r.events.len()));
        panic!(
            "decoder and reference differ at event {first}: decoder {:?}, reference {:?} \
             ({} vs {} events)",
            got.get(first),
            r.events.get(first),
            got.len(),
            r.events.len()
        );
    }
    assert_eq!(d.events, r.events.len() as u64);
    assert_eq!(d.skipped, r.skipped, "skipped frames");
    assert_eq!(d.skipped_tag, r.skipped_tag, "first skipped tag");
    assert_eq!(d.error_offset(), r.error.map(|e| e.0), "malformed offset");
    assert_eq!(d.error_skipped_bytes(), r.error.map_or(0, |e| e.1));
    // 3. Every byte accounted for once.
    let total = 8 * (r.event_words + r.skipped_words + r.block_words) + d.error_skipped_bytes();
    assert_eq!(total, chunk.len(), "bytes accounted for: {d:?}");
    if let Some(off) = d.error_offset() {
        assert_eq!(off + d.error_skipped_bytes(), chunk.len());
        assert!(d.lost_events() >= 1);
        let m = d.error_message().expect("a message");
        assert!(
            !m.chars().any(char::is_control),
            "control characters in {m:?}"
        );
        assert!(m.len() < 300, "message of {} bytes", m.len());
    } else {
        assert_eq!(chunk.len() % 8, 0);
    }
    let _: &Decoded = &d;

    // 4. Cut into two or three chunks between events, decoded out of order
    //    and stitched back in order: the same events.
    if r.error.is_none() && !r.starts.is_empty() {
        let h = chunk.iter().fold(0x811c_9dc5u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        let s = &r.starts;
        let (a, b) = (
            s[h as usize % s.len()] * 8,
            s[(h >> 32) as usize % s.len()] * 8,
        );
        let (a, b) = (a.min(b), a.max(b));
        for cuts in [vec![a], vec![a, b]] {
            let mut parts = Vec::new();
            let mut from = 0;
            for &to in cuts.iter().chain([&chunk.len()]) {
                parts.push(&data[from..to]);
                from = to;
            }
            let mut split = Vec::new();
            let ds = fuzzing::decode_chunks::<Rec>(&(), &(), &parts, &ci, &mut split);
            assert_eq!(ds.error_offset(), None, "cut at {cuts:?}");
            assert_eq!(ds.events, d.events, "cut at {cuts:?}");
            assert!(split == got, "cut at {cuts:?}: the stitched events differ");
        }
    }
}

fn words_as_bytes_mut(w: &mut [u64]) -> &mut [u8] {
    // SAFETY: u8 has no alignment or validity requirements; the byte slice
    // covers exactly the words' memory and borrows them mutably.
    unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr().cast::<u8>(), w.len() * 8) }
}
