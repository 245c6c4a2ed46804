//! Recording instead of decoding (`cannoli record`): each chunk is
//! compressed on a worker and written to the recording.

use std::io::BufReader;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mempipe::{ChunkBuf, TableReader};
use wire::channel::Sock;

use super::connection::Stream;
use super::control::{control, stream_complete};
use crate::crew::Crew;
use crate::recording::{StreamEnd, Writer};
use crate::{Cannoli, ClientInfo, Stats};

/// The `Cannoli` of a recording run: never called (streams go to the
/// recording instead), it only gives the server its types.
pub(super) struct Recorder;

impl Cannoli for Recorder {
    type Trace = ();
    type TidContext = ();
    type PidContext = ();

    fn init_pid(_: &ClientInfo) -> Arc<()> {
        Arc::new(())
    }

    fn init_tid(_: &(), _: &ClientInfo) -> (Recorder, ()) {
        (Recorder, ())
    }
}

/// Records one stream: `threads` workers compress its chunks into the
/// recording while the control loop waits for the goodbye; then its end
/// frame. Returns its totals (chunks and bytes; events are not decoded).
pub(super) fn record_stream(
    writer: &Writer,
    stream: &Stream<'_>,
    crew: &Crew<'_>,
    line: &str,
    blocks: Option<Arc<TableReader>>,
    reader: &mut BufReader<Sock>,
) -> Stats {
    let log = writer.stream_start(line, blocks);
    let (chunks, bytes) = (AtomicU64::new(0), AtomicU64::new(0));
    let end = crew.run(
        |_, next| {
            let mut packer = writer.packer();
            let mut copy = ChunkBuf::new();
            while let Some(chunk) = next() {
                let seq = chunk.seq();
                chunk.copy_into(&mut copy);
                drop(chunk); // the slot goes back to QEMU; the copy is stored
                writer.chunk(&log, seq, copy.bytes(), &mut packer);
                chunks.fetch_add(1, Ordering::Relaxed);
                bytes.fetch_add(copy.len() as u64, Ordering::Relaxed);
            }
        },
        || control(reader, stream),
    );
    let written = chunks.into_inner();
    let complete = stream_complete(stream, &end, crew.failure(), written);
    writer.stream_end(
        &log,
        &StreamEnd {
            goodbye: end.goodbye,
            published: stream.consumer.published(),
            violation: stream.consumer.violation().map(|v| v.to_string()),
            written,
            end_ns: writer.now_ns(),
            control: end.violation,
        },
    );
    Stats {
        connections: 1,
        chunks: written,
        bytes: bytes.into_inner(),
        lost_events: stream.lost.load(Ordering::Relaxed),
        incomplete_streams: u64::from(!complete),
        ..Stats::default()
    }
}
