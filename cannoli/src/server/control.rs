//! A stream's control connection: the goodbye (or its absence), what it
//! says about the stream, and whether the stream is whole.

use std::io::{self, BufReader};
use std::sync::atomic::Ordering;
use std::time::Duration;

use wire::channel::{read_line, Sock};
use wire::{parse_control, Control};

use super::connection::Stream;
use super::lock;
use crate::notes::note;
use crate::recording::Goodbye;

/// How long the control connection is read after the goodbye for its end:
/// QEMU shuts it down right after saying goodbye, so only a peer that
/// breaks the protocol makes this wait.
const AFTER_GOODBYE: Duration = Duration::from_secs(30);

/// How a stream's control connection ended.
pub(super) struct ControlEnd {
    /// QEMU's goodbye (the first one), if it said one.
    pub(super) goodbye: Option<Goodbye>,
    /// How the connection broke the protocol, if it did (a second goodbye,
    /// a goodbye before the ring was closed, anything after the goodbye):
    /// the stream is then incomplete, whatever the counts say.
    pub(super) violation: Option<String>,
}

/// Watches the control socket until the goodbye or EOF, and ends the ring
/// accordingly. After the goodbye it reads on until the connection's end
/// (at most [`AFTER_GOODBYE`]): the goodbye is the last word of a stream,
/// said once.
pub(super) fn control(reader: &mut BufReader<Sock>, conn: &Stream<'_>) -> ControlEnd {
    let (pid, tid) = (conn.pid, conn.tid);
    // No deadline here: the stream lasts as long as its guest thread. The
    // peer is this run's QEMU (the handshake proved it), and its end closes
    // the socket, which ends this read.
    let goodbye = loop {
        match read_line(reader) {
            Ok(Some(line)) => match parse_control(&line) {
                Ok(Control::Goodbye(g)) => break Some(g),
                Ok(Control::Expect(e)) => lock(conn.announced).forked(e.expect_pid),
                Err(e) => {
                    note!(
                        conn.notes,
                        "cannoli: pid {pid} tid {tid}: ignoring a control message: {e}"
                    );
                }
            },
            Ok(None) => break None,
            Err(e) => {
                if e.kind() != io::ErrorKind::ConnectionReset
                    && e.kind() != io::ErrorKind::UnexpectedEof
                {
                    note!(
                        conn.notes,
                        "cannoli: pid {pid} tid {tid}: reading the control connection failed: {e}"
                    );
                }
                break None;
            }
        }
    };
    let consumer = conn.consumer;
    let Some(g) = goodbye else {
        consumer.abandon();
        let published = consumer.published();
        if published == 0 {
            note!(
                conn.notes,
                "cannoli: pid {pid} tid {tid}: QEMU exited without handing over its last chunk; \
                 no chunk arrived, all of its events are missing"
            );
        } else {
            note!(
                conn.notes,
                "cannoli: pid {pid} tid {tid}: QEMU exited without handing over its last chunk; \
                 events after chunk {} are missing",
                published - 1
            );
        }
        return ControlEnd {
            goodbye: None,
            violation: None,
        };
    };
    // QEMU closes its ring before it says goodbye. If it did not, the
    // goodbye is not QEMU's last word: end the ring where it is.
    let mut violation = None;
    if !consumer.closed_by_producer() {
        consumer.abandon();
        violation = Some("its goodbye came before its ring was closed".to_string());
    }
    let after = after_goodbye(reader);
    violation = violation.or(after);
    if g.exec {
        lock(conn.announced).exec(pid, conn.seq);
    }
    if g.lost_events > 0 {
        note!(
            conn.notes,
            "cannoli: pid {pid} tid {tid}: QEMU could not record {} events; the trace has gaps",
            g.lost_events
        );
        conn.lost.fetch_add(g.lost_events, Ordering::Relaxed);
    }
    ControlEnd {
        goodbye: Some(Goodbye {
            chunks: g.chunks,
            lost_events: g.lost_events,
            exec: g.exec,
        }),
        violation,
    }
}

/// Reads the control connection after the goodbye until its end: anything
/// there breaks the protocol (says what), as does a connection left open.
fn after_goodbye(reader: &mut BufReader<Sock>) -> Option<String> {
    let _ = reader.get_ref().set_read_timeout(Some(AFTER_GOODBYE));
    match read_line(reader) {
        Ok(None) => None,
        Ok(Some(line)) => Some(match parse_control(&line) {
            Ok(Control::Goodbye(_)) => "it said goodbye twice".to_string(),
            _ => "its control connection went on after its goodbye".to_string(),
        }),
        Err(e) => match e.kind() {
            io::ErrorKind::ConnectionReset => None,
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Some(format!(
                "its control connection stayed open {} s after its goodbye",
                AFTER_GOODBYE.as_secs()
            )),
            _ => Some("its control connection went on after its goodbye".to_string()),
        },
    }
}

/// Whether a stream whose control connection ended as `end`, after
/// `delivered` chunks were taken from its ring, is whole; says on stderr
/// why not (one line). A stream is whole when its ring kept the protocol,
/// its workers ran, and QEMU closed its ring, then said goodbye once with
/// the number of chunks the ring holds and this client took: the client's
/// own count, which nothing in QEMU's process can change.
pub(super) fn stream_complete(
    conn: &Stream<'_>,
    end: &ControlEnd,
    crew_failure: Option<&str>,
    delivered: u64,
) -> bool {
    let (pid, tid) = (conn.pid, conn.tid);
    let consumer = conn.consumer;
    if let Some(e) = crew_failure {
        note!(
            conn.notes,
            "cannoli: pid {pid} tid {tid}: {e}; the stream's events are missing"
        );
        return false;
    }
    // A chunk the ring refused (a producer that broke the ring protocol)
    // ended the stream early: what came after it is unknown.
    if let Some(v) = consumer.violation() {
        note!(
 conn.notes,
            "cannoli: pid {pid} tid {tid}: the ring broke its protocol ({v}); the events after it are missing"
        );
        return false;
    }
    if let Some(v) = &end.violation {
        note!(
            conn.notes,
            "cannoli: pid {pid} tid {tid}: QEMU's side broke the control protocol ({v}); \
             the stream counts as incomplete"
        );
        return false;
    }
    let Some(g) = &end.goodbye else {
        return false; // said in `control`
    };
    let published = consumer.published();
    if g.chunks != published {
        note!(
 conn.notes,
            "cannoli: pid {pid} tid {tid}: QEMU says it published {} chunks but the ring holds {published}",
            g.chunks
        );
        return false;
    }
    if g.chunks != delivered {
        note!(
            conn.notes,
            "cannoli: pid {pid} tid {tid}: QEMU says it published {} chunks but {delivered} were \
             taken from its ring; the stream counts as incomplete",
            g.chunks
        );
        return false;
    }
    true
}
