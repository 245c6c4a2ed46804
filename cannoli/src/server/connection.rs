//! One connection, from its handshake to its totals: the stream's ring
//! decoded by a crew of workers (or recorded) while the control loop
//! watches the socket.

use std::io::BufReader;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mempipe::{Consumer, TableReader};
use wire::channel::Sock;

use super::control::{control, stream_complete};
use super::lock;
use super::record::record_stream;
use super::shared::{LiveGuard, Shared};
use super::workers::{end_of_stream, worker};
use crate::announce::Announced;
use crate::crew::Crew;
use crate::decode::Shape;
use crate::handshake::{handshake, refuse, Accepted, Opened, Refusal};
use crate::notes::{note, Notes};
use crate::pipeline::Pipeline;
use crate::recording::{StreamEnd, StreamLog, Writer};
use crate::{Cannoli, ClientInfo, Stats};

/// Streams served at once (guest threads of the traced tree).
const MAX_STREAMS: usize = 8192;

pub(super) fn connection_thread<T: Cannoli>(
    shared: &Shared<T>,
    stream: Sock,
    peer: String,
    opened: Opened,
) {
    let _live = LiveGuard(shared);
    let r = catch_unwind(AssertUnwindSafe(|| {
        connection::<T>(shared, stream, peer.clone(), opened)
    }));
    if r.is_err() {
        die_after_panic(&format!("the connection from {peer}"));
    }
}

/// A callback of the tool panicked. The stream cannot go on without it and
/// QEMU would wait forever for its ring to drain, so end the process.
/// (Written without `eprintln!`, which panics where stderr is a closed pipe:
/// a second panic here would leave the process hanging.)
pub(super) fn die_after_panic(what: &str) -> ! {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "cannoli: the tool panicked while serving {what} (message above); exiting"
    );
    std::process::exit(101);
}

/// Everything the workers of one connection share.
pub(super) struct Conn<'a, T: Cannoli> {
    /// The tool, and the decoding and in-order delivery of the stream to
    /// it.
    pub(super) pipe: Pipeline<'a, T, (), ()>,
    /// The block table of the stream's process (shared by its streams), if
    /// QEMU's side sent one.
    pub(crate) blocks: Option<Arc<TableReader>>,
    /// What the control loop and the chunk hand-out need.
    pub(super) stream: Stream<'a>,
    pub(super) pid: i32,
    pub(super) tid: i32,
    pub(super) events: AtomicU64,
    pub(super) chunks: AtomicU64,
    pub(super) bytes: AtomicU64,
    /// Framed events of unknown tags skipped, and the first such tag (+1; 0:
    /// none yet).
    pub(super) skipped: AtomicU64,
    pub(super) skipped_tag: AtomicU32,
    /// A tee's recording, and this stream in it.
    pub(super) record: Option<(&'a Writer, StreamLog)>,
}

/// One stream's ring and control connection, decoded or recorded.
pub(super) struct Stream<'a> {
    pub(super) consumer: &'a Consumer,
    pub(super) announced: &'a Mutex<Announced>,
    /// Where the run's lines go.
    pub(super) notes: &'a Notes,
    /// This connection's number among the run's connections (`Announced`).
    pub(super) seq: u64,
    pub(super) pid: i32,
    pub(super) tid: i32,
    /// Events known lost: QEMU's (its goodbye), and a worker's.
    pub(super) lost: AtomicU64,
}

/// What a connection does with its stream.
enum Role<'a, P> {
    /// Record it, decoding nothing (`cannoli record` without a tool).
    Record(&'a Writer),
    /// Decode it, holding its process's shared context.
    Decode(Arc<P>),
}

/// A stream we would not take: said, and counted.
fn refused<T: Cannoli>(shared: &Shared<T>, why: &str) {
    note!(shared.notes, "cannoli: rejected {why}");
    lock(&shared.stats).refused_connections += 1;
}

fn connection<T: Cannoli>(shared: &Shared<T>, mut stream: Sock, peer: String, opened: Opened) {
    let accepted = handshake(
        &mut stream,
        &peer,
        opened,
        &shared.token,
        shared.handshake_timeout,
        shared.trust_hello_pids,
        &shared.tables,
    );
    if !matches!(accepted, Err(Refusal::Stranger(_))) {
        shared.seen_qemu.store(true, Ordering::Release);
    }
    let live_streams = *lock(&shared.live);
    let accepted = match accepted {
        Ok(_) if live_streams > MAX_STREAMS => Err(refuse(
            &mut stream,
            format!("{peer}: more than {MAX_STREAMS} streams at once"),
        )),
        other => other,
    };
    let accepted = match accepted {
        Ok(a) => a,
        Err(Refusal::Stranger(m)) => {
            note!(shared.notes, "cannoli: ignored {m}");
            lock(&shared.stats).strangers += 1;
            return;
        }
        Err(Refusal::Refused(m)) => {
            refused(shared, &m);
            return;
        }
    };
    let mut ci = ClientInfo::from_hello(&accepted.hello);
    let seq = lock(&shared.announced).connected(ci.pid);
    ci.stream = seq - 1;
    ci.tool_state = shared.state.clone();
    // A record-only run decodes nothing, so it needs no process context.
    // A decoding stream takes its process's context before the welcome
    // lets its thread run (`Accepted::welcome`): a thread that starts and
    // ends early must not find the context already dropped.
    let role = match (&shared.recorder, shared.decode) {
        (Some(writer), false) => Role::Record(writer),
        _ => Role::Decode(shared.pid_acquire(&ci)),
    };
    if let Err(Refusal::Stranger(m) | Refusal::Refused(m)) = accepted.welcome(&mut stream) {
        refused(shared, &m);
        if let Role::Decode(pid_ctx) = role {
            shared.pid_release(&ci);
            drop(pid_ctx);
        }
        return;
    }
    let Accepted {
        line,
        consumer,
        blocks,
        ..
    } = accepted;
    // The stream's one descriptor: its ring and block table are mapped
    // and their descriptors closed (`mempipe`).
    let mut reader = BufReader::new(stream);
    let stream = Stream {
        consumer: &consumer,
        announced: &shared.announced,
        notes: &shared.notes,
        seq,
        pid: ci.pid,
        tid: ci.tid,
        lost: AtomicU64::new(0),
    };
    let threads = shared.threads;
    let crew = Crew::new(&consumer, &shared.machine, threads, Some((ci.pid, ci.tid)));
    let pid_ctx = match role {
        Role::Record(writer) => {
            let st = record_stream(writer, &stream, &crew, &line, blocks, &mut reader);
            lock(&shared.stats).add(&st);
            return;
        }
        Role::Decode(pid_ctx) => pid_ctx,
    };
    let record = shared
        .recorder
        .as_deref()
        .map(|w| (w, w.stream_start(&line, blocks.clone())));
    let (tool, tid_ctx) = T::init_tid(&pid_ctx, &ci);
    let conn = Conn::<T> {
        pipe: Pipeline::new(
            &*pid_ctx,
            &tid_ctx,
            tool,
            Shape::new(&ci),
            &shared.halt,
            2 * threads + 4,
        ),
        blocks,
        stream,
        pid: ci.pid,
        tid: ci.tid,
        events: AtomicU64::new(0),
        chunks: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        skipped: AtomicU64::new(0),
        skipped_tag: AtomicU32::new(0),
        record,
    };

    let end = crew.run(
        |_, next| {
            if catch_unwind(AssertUnwindSafe(|| worker(&conn, next))).is_err() {
                die_after_panic(&format!("pid {} tid {}", conn.pid, conn.tid));
            }
        },
        || control(&mut reader, &conn.stream),
    );
    let complete = stream_complete(
        &conn.stream,
        &end,
        crew.failure(),
        conn.chunks.load(Ordering::Relaxed),
    );
    let incomplete = u64::from(!complete);
    end_of_stream(&conn, complete);
    if let Some((w, log)) = &conn.record {
        w.stream_end(
            log,
            &StreamEnd {
                goodbye: end.goodbye,
                published: consumer.published(),
                violation: consumer.violation().map(|v| v.to_string()),
                written: conn.chunks.load(Ordering::Relaxed),
                end_ns: w.now_ns(),
                control: end.violation.clone(),
            },
        );
    }

    let Conn {
        pipe,
        events,
        chunks,
        bytes,
        stream,
        skipped,
        skipped_tag,
        ..
    } = conn;
    let lost = stream.lost.into_inner();
    let skipped = skipped.into_inner();
    if skipped > 0 {
        note!(
            stream.notes,
            "cannoli: pid {} tid {}: skipped {skipped} event{} of a kind this client does not know \
             (framed tag {:#04x}, ...); QEMU's hook library is newer than this client (cannoli {}): \
             rebuild the client against the same cannoli version",
            ci.pid,
            ci.tid,
            if skipped == 1 { "" } else { "s" },
            skipped_tag.into_inner().saturating_sub(1),
            env!("CARGO_PKG_VERSION")
        );
    }
    drop(pipe); // the tool's per-thread value: its Drop may report
    drop(tid_ctx);
    drop(consumer);
    shared.pid_release(&ci);
    drop(pid_ctx);

    let mut st = lock(&shared.stats);
    st.add(&Stats {
        connections: 1,
        events: events.into_inner(),
        chunks: chunks.into_inner(),
        bytes: bytes.into_inner(),
        lost_events: lost,
        incomplete_streams: incomplete,
        skipped_events: skipped,
        ..Stats::default()
    });
}
