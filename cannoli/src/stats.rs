// SPDX-License-Identifier: GPL-2.0-or-later
//! A run's totals, and what they say about loss.

#[cfg(doc)]
use crate::Flow;

/// Exit status of a tool whose trace is incomplete ([`Stats::is_complete`]
/// is false), whatever the program's own status: its output cannot be
/// trusted, and a script must be able to tell.
pub const EXIT_INCOMPLETE: i32 = 3;

/// Totals over all connections of a run.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Guest threads traced (connections that completed the handshake).
    pub connections: u64,
    /// Events decoded and handed to the callbacks.
    pub events: u64,
    /// Chunks received.
    pub chunks: u64,
    /// Bytes of event data received.
    pub bytes: u64,
    /// Events known to be lost: those QEMU could not record (reported in its
    /// goodbye) plus those skipped in malformed chunks (counted as one per
    /// skipped 8-byte word).
    pub lost_events: u64,
    /// Streams whose QEMU ended without its goodbye, so their last partial
    /// chunk never arrived.
    pub incomplete_streams: u64,
    /// Framed events of a kind this client does not know (written by a newer
    /// QEMU side), skipped. Not part of `events` nor of `lost_events`.
    pub skipped_events: u64,
    /// Cannoli hellos refused (another wire version, a wrong secret, a ring
    /// that could not be opened): if one was a guest thread, all of its
    /// events are missing.
    pub refused_connections: u64,
    /// Processes QEMU announced (a fork, an exec) that ended without ever
    /// connecting: if one ran guest code, its events are missing.
    pub missing_processes: u64,
    /// Connections that were not this run's QEMU at all (another user, not
    /// a cannoli hello, nothing said within the deadline): ignored, not loss.
    pub strangers: u64,
    /// Replays only: recordings that end before their run did (the
    /// recorder was stopped before its end record), so whatever came after
    /// is unknown.
    pub cut_recordings: u64,
    /// The tool stopped the run ([`Flow::Stop`]): the events after that
    /// were not decoded, by choice (not loss).
    pub stopped: bool,
}

impl Stats {
    pub(crate) fn add(&mut self, o: &Stats) {
        self.connections += o.connections;
        self.events += o.events;
        self.chunks += o.chunks;
        self.bytes += o.bytes;
        self.lost_events += o.lost_events;
        self.incomplete_streams += o.incomplete_streams;
        self.skipped_events += o.skipped_events;
        self.refused_connections += o.refused_connections;
        self.missing_processes += o.missing_processes;
        self.strangers += o.strangers;
        self.cut_recordings += o.cut_recordings;
        self.stopped |= o.stopped;
    }

    /// True if every event of every stream arrived: nothing lost, no stream
    /// cut short, no stream refused, no announced process missing, no
    /// recording cut short.
    pub fn is_complete(&self) -> bool {
        self.lost_events == 0
            && self.incomplete_streams == 0
            && self.refused_connections == 0
            && self.missing_processes == 0
            && self.cut_recordings == 0
    }

    /// What was lost, for a tool's summary line: `0 lost` only when
    /// [`Stats::is_complete`]; a stream cut short or a refused connection
    /// lost an unknown number of events, and says so.
    pub fn loss_summary(&self) -> String {
        if self.is_complete() {
            return "0 lost".into();
        }
        let mut parts = Vec::new();
        if self.lost_events > 0 {
            parts.push(format!("{} events lost", self.lost_events));
        }
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        if self.incomplete_streams > 0 {
            let n = self.incomplete_streams;
            parts.push(format!(
                "{n} stream{} cut short (events lost: unknown)",
                plural(n)
            ));
        }
        if self.refused_connections > 0 {
            let n = self.refused_connections;
            parts.push(format!(
                "{n} connection{} refused (events lost: unknown)",
                plural(n)
            ));
        }
        if self.missing_processes > 0 {
            let n = self.missing_processes;
            parts.push(format!(
                "{n} announced process{} never connected (events lost: unknown)",
                if n == 1 { "" } else { "es" }
            ));
        }
        if self.cut_recordings > 0 {
            parts.push("the recording is cut short (events lost: unknown)".into());
        }
        format!("INCOMPLETE: {}", parts.join(", "))
    }
}
