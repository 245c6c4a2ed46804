//! Entry points for the fuzzers of the `cannoli-fuzz` crate. Not part of the
//! API: hidden from the documentation, and free to change with the
//! decoder. They exist because the decoder is private (its types are the
//! server's business) while the fuzzers must drive it with chunks and
//! stream descriptions of their own making, exactly as the server does.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use crate::blocks::{BlockCache, BlockSource};
use crate::decode::{self, Seam, Shape};
use crate::{Cannoli, ClientInfo};
use wire::blocks::Entry;

/// What `decode` found in a chunk: the decoder's own summary, as the
/// server reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Events handed to the callbacks.
    pub events: u64,
    /// Framed events of unknown tags skipped whole.
    pub skipped: u64,
    /// The tag of the first of them.
    pub skipped_tag: Option<u8>,
    error: Option<decode::Malformed>,
}

impl Decoded {
    /// Byte offset of the malformed event that stopped decoding, if any.
    pub fn error_offset(&self) -> Option<usize> {
        self.error.map(|m| m.offset)
    }

    /// Bytes skipped from that offset to the end of the chunk (0 if none).
    pub fn error_skipped_bytes(&self) -> usize {
        self.error.map_or(0, |m| m.skipped_bytes)
    }

    /// The tag the decoder reports for the malformed event.
    pub fn error_tag(&self) -> Option<u8> {
        self.error.map(|m| m.tag)
    }

    /// Events the server counts as lost for the malformed rest.
    pub fn lost_events(&self) -> u64 {
        self.error.map_or(0, |m| m.lost_events())
    }

    /// The server's one-line description of the malformed event.
    pub fn error_message(&self) -> Option<String> {
        self.error.map(|m| m.to_string())
    }
}

impl From<decode::Decoded> for Decoded {
    fn from(d: decode::Decoded) -> Decoded {
        Decoded {
            events: d.events,
            skipped: d.skipped,
            skipped_tag: d.skipped_tag,
            error: d.error,
        }
    }
}

/// The block table run events are read with: [`FAKE_TABLE`]'s entries, as
/// a source and as a cache filled up front (so that decoding allocates
/// nothing for it).
struct Fake {
    entries: Arc<Vec<Entry>>,
    cache: BlockCache,
}

fn fake() -> &'static Fake {
    static F: OnceLock<Fake> = OnceLock::new();
    F.get_or_init(|| {
        let entries: Vec<Entry> = FAKE_TABLE
            .iter()
            .map(|(pcs, exec)| {
                let mut w = vec![0; wire::blocks::entry_words(pcs.len())];
                wire::blocks::encode_entry(pcs, exec, &mut w);
                Entry {
                    pcs: pcs.to_vec(),
                    exec: w[1 + pcs.len()..].to_vec(),
                }
            })
            .collect();
        let entries = Arc::new(entries);
        let cache = BlockCache::new(entries.clone() as Arc<dyn BlockSource>);
        for id in 0..entries.len() as u64 {
            cache.fill(id).expect("the fake table's entries are sound");
        }
        Fake { entries, cache }
    })
}

/// The blocks of the fuzzers' table: (pcs, exec bit of instruction `i`).
/// Run event `id` names entry `id`; an id past the end is unknown (a
/// malformed chunk). Small pcs, and pcs the other events of the fuzzers'
/// inputs use, so that random events fall into them now and then.
#[allow(clippy::type_complexity)]
pub const FAKE_TABLE: &[(&[u64], fn(usize) -> bool)] = &[
    (&[0x1000, 0x1004, 0x1008, 0x100c], |_| true),
    (&[0x1010, 0x1014, 0x1018], |i| i != 1),
    (&[0x2000], |_| false),
    (&SEVENTY, |i| i % 5 != 0),
    (&[0x1004, 0x1000], |_| true),
    (&[0x10, 0x14, 0x18, 0x1c], |_| true),
    (&[0, 1, 2, 3, 4, 5, 6, 7], |i| i != 7),
    (&[0x400000, 0x400004, 0x400008], |i| i < 2),
];

/// A block of 70 instructions (two mask words).
const SEVENTY: [u64; 70] = {
    let mut a = [0; 70];
    let mut i = 0;
    while i < 70 {
        a[i] = 0x3000 + 4 * i as u64;
        i += 1;
    }
    a
};

/// The entries of [`FAKE_TABLE`], as `wire::blocks` checks them. The first
/// call also fills the decoder's cache of them (it allocates).
pub fn fake_table() -> &'static [Entry] {
    &fake().entries
}

/// Decodes `data` for a stream described by `ci`, calling `T`'s parallel
/// callbacks, exactly as the server does for a stream of this one chunk:
/// its body as a worker does, then its head (with no block open before it),
/// then the end of the stream. Run events name [`FAKE_TABLE`]'s blocks.
pub fn decode<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    data: &[u8],
    ci: &ClientInfo,
    trace: &mut Vec<T::Trace>,
) -> Decoded {
    let lay = Shape::new(ci);
    let mut seam = Seam::default();
    let mut body = Vec::new();
    let mut d = decode::decode::<T>(
        pid,
        tid,
        data,
        &lay,
        Some(&fake().cache),
        &mut body,
        &mut seam,
    );
    let mut open = None;
    d.events += decode::stitch::<T>(pid, tid, &lay, &mut open, &seam, trace);
    trace.append(&mut body);
    d.events += decode::finish::<T>(pid, tid, &mut open, trace);
    d.into()
}

/// Decodes a stream given as its chunks the way the server does: each
/// chunk on its own, in reverse order, then their heads stitched and their
/// traces delivered in order, then the end of the stream. The counts add up
/// the chunks'; the error is the first (its offset within its chunk).
pub fn decode_chunks<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    chunks: &[&[u8]],
    ci: &ClientInfo,
    trace: &mut Vec<T::Trace>,
) -> Decoded {
    let lay = Shape::new(ci);
    decode::decode_stream::<T>(pid, tid, chunks, &lay, Some(&fake().cache), trace).into()
}

/// The [`ClientInfo`] the server makes of an accepted hello.
pub fn client_info(h: &wire::Hello) -> ClientInfo {
    ClientInfo::from_hello(h)
}

/// A recorded thread's hello line, as QEMU's side writes it.
pub(crate) fn hello_line(tid: i32) -> String {
    let h = wire::Hello {
        magic: wire::MAGIC.into(),
        wire_version: wire::WIRE_VERSION,
        jitter_version: "test".into(),
        pid: 4242,
        ppid: 1,
        tid,
        arch: "mipsel".into(),
        big_endian: false,
        guest_bits: 32,
        ring: wire::RingRef::Attached,
        nonce: String::new(),
        proof: String::new(),
        comm: None,
        exe: None,
        regs: wire::RegLayout::default(),
        syscall_names: Default::default(),
        blocks: None,
        image: 0,
    };
    serde_json::to_string(&h).unwrap()
}

/// A chunk of exec events for pcs `from..from + n` (step 4).
pub(crate) fn exec_chunk(from: u64, n: u64) -> Vec<u8> {
    (0..n).flat_map(|i| (from + 4 * i).to_le_bytes()).collect()
}

/// Writes a small recording to `path` (the recording tests' and the
/// `recording` fuzzer's seed): two threads of one process, 3 and 2 chunks,
/// chunks handed to the writer out of order as the recorder's workers
/// may (it writes each stream's in order). Returns
/// the pcs each thread ran, in order.
pub fn write_sample_recording(path: &Path) -> Vec<(i32, u64)> {
    let info = crate::recording::Info {
        writer: "test".into(),
        hooks: crate::recording::Hooks::preset("pc"),
        command: vec!["prog".into()],
        guest: Some("mipsel".into()),
        started_unix_ns: 1,
    };
    let w = crate::recording::Writer::create(path, &info, 1).unwrap();
    let mut p = w.packer();
    let mut expect = Vec::new();
    for (tid, chunks) in [(10, 3u64), (11, 2)] {
        let log = w.stream_start(&hello_line(tid), None);
        let data: Vec<Vec<u8>> = (0..chunks)
            .map(|c| exec_chunk(0x1000 * (tid as u64) + 0x100 * c, 50))
            .collect();
        for c in (0..chunks).rev() {
            w.chunk(&log, c, &data[c as usize], &mut p);
        }
        for c in 0..chunks {
            expect.extend((0..50).map(|i| (tid, 0x1000 * (tid as u64) + 0x100 * c + 4 * i)));
        }
        let end = crate::recording::StreamEnd {
            goodbye: Some(crate::recording::Goodbye {
                chunks,
                lost_events: 0,
                exec: false,
            }),
            published: chunks,
            violation: None,
            written: chunks,
            end_ns: 5,
            control: None,
        };
        w.stream_end(&log, &end);
    }
    let exit = crate::recording::Exit {
        status: Some(7),
        refused_connections: 0,
        missing_processes: 0,
        strangers: 0,
        end_ns: 9,
    };
    w.finish(&exit).unwrap();
    expect
}

/// Counts what a replay hands to the callbacks.
struct Count;

impl Cannoli for Count {
    type Trace = ();
    type TidContext = ();
    type PidContext = ();

    fn init_pid(_: &ClientInfo) -> Arc<()> {
        Arc::new(())
    }

    fn init_tid(_: &(), _: &ClientInfo) -> (Count, ()) {
        (Count, ())
    }
}

/// Opens and replays the recording at `path` as any tool would:
/// `Ok((events, complete))`, or the one-line error of opening it.
pub fn replay_recording(path: &Path) -> Result<(u64, bool), crate::recording::Error> {
    let r = crate::recording::replay::<Count>(path, 2)?;
    Ok((r.stats.events, r.stats.is_complete()))
}
