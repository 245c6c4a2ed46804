#![warn(missing_docs)]
//! # cannoli: the client side of the cannoli execution tracer
//!
//! A patched QEMU (linux-user) streams every executed instruction and memory
//! access of the guest, and the rarer events (registers at chosen
//! instructions, system calls, mappings, signals), into shared-memory rings,
//! one per guest thread, and
//! tells this library about each ring over an authenticated connection (a
//! Unix socket by default, or TCP; see [`wire::channel`]). You implement
//! [`Cannoli`] for your tool and call [`run`]; the library decodes the events
//! on worker threads, calls your parallel callbacks ([`Cannoli::exec`],
//! [`Cannoli::read`], [`Cannoli::write`], ...) which turn them into your own
//! `Trace` values, and then hands those to [`Cannoli::trace`] strictly in
//! execution order.
//!
//! ```no_run
//! use std::sync::Arc;
//! use cannoli::{Cannoli, ClientInfo};
//!
//! struct Coverage;
//!
//! impl Cannoli for Coverage {
//!     type Trace = u64;
//!     type TidContext = ();
//!     type PidContext = ();
//!
//!     fn init_pid(_ci: &ClientInfo) -> Arc<()> { Arc::new(()) }
//!     fn init_tid(_pid: &(), _ci: &ClientInfo) -> (Self, ()) { (Coverage, ()) }
//!
//!     fn exec(_pid: &(), _tid: &(), pc: u64, trace: &mut Vec<u64>) {
//!         trace.push(pc);
//!     }
//!
//!     fn trace(&mut self, _pid: &(), _tid: &(), trace: &[u64]) {
//!         for pc in trace {
//!             println!("{pc:#x}");
//!         }
//!     }
//! }
//!
//! fn main() -> Result<(), cannoli::Error> {
//!     let stats = cannoli::run::<Coverage>(2)?;
//!     eprintln!("{} events", stats.events);
//!     Ok(())
//! }
//! ```
//!
//! The library prints nothing on stdout (that is your tool's); warnings, such
//! as a QEMU that died before handing over its last events, are single lines
//! starting with `cannoli:`, to stderr unless the tool gives the run its own
//! [`Notes`] ([`Server::with_notes`], [`Recording::with_notes`]).
//!
//! When a thread's stream ends, its `Self` value is dropped (after its last
//! [`Cannoli::trace`] call), then its `TidContext`; the `PidContext` is dropped
//! when the last thread of the process has ended. Put end-of-thread reporting
//! in a `Drop` impl.
//!
//! ## A tool's own state
//!
//! `init_pid` gets no `self`; a tool that needs its configuration or
//! run-wide results there starts the run with a value of its own,
//! [`Server::with_state`] or [`replay_with`], reads it in `init_pid` with
//! [`ClientInfo::state`] (cloning the `Arc` into its `PidContext`, so the hot
//! callbacks reach it with no lookup), and reads the same `Arc` after the run
//! returns. Two runs in one process, each with its own value, do not meet.

#![deny(unsafe_op_in_unsafe_fn)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::{fmt, io};

mod announce;
mod blocks;
mod crew;
mod decode;
mod event;
mod flow;
#[doc(hidden)]
pub mod fuzzing;
mod handshake;
pub mod notes;
mod pipeline;
pub mod recording;
mod reseq;
mod server;
mod state;
mod tool;

pub use crew::default_workers;
pub use event::{Access, Block, Mapping, Prot, Protection, Signal, Syscall};
pub use flow::{Flow, ToolError};
pub use notes::Notes;
pub use recording::{replay, replay_with, Recording, Replayed};
pub use server::{original_fd_limit, raise_fd_limit, Server, Waker};
pub use state::ToolState;
pub use tool::{Cannoli, ReplayOrder};

/// Re-export of the wire format crate (event tags, handshake messages).
pub use wire;

/// Who is on the other end of a connection: one guest thread.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    /// The guest process's id: QEMU's own pid, as linux-user runs each
    /// guest process in a QEMU of its own.
    pub pid: i32,
    /// The pid of the guest process's parent.
    pub ppid: i32,
    /// The guest thread's id (`pid` for a process's first thread).
    pub tid: i32,
    /// Which image of process `pid` the thread belongs to: each traced
    /// `execve` makes a new one under the same pid, with a `PidContext`
    /// of its own (see `wire::Hello::image`).
    pub image: u32,
    /// This stream's number in the run, from 0 in the order the streams
    /// connected; in a replay, its number in the recording (the `stream`
    /// of `cannoli info` and of the exports).
    pub stream: u64,
    /// QEMU's machine name for the guest, e.g. `mipsel`, `riscv64`.
    pub arch: String,
    /// Whether the guest is big-endian: the byte order of its memory values.
    pub big_endian: bool,
    /// Guest virtual address width: 32 or 64.
    pub guest_bits: u32,
    /// Guest program name, where known.
    pub comm: Option<String>,
    /// Path of the guest executable, where known.
    pub exe: Option<String>,
    /// Version of QEMU's cannoli hook library.
    pub jitter_version: String,
    /// What a registers event ([`Cannoli::regs`], [`Cannoli::branch`])
    /// carries. `names` has at least `count` entries: QEMU's own, else the
    /// arch's usual ones ([`wire::reg_names`]), else `r<i>` for the rest.
    pub regs: wire::RegLayout,
    /// Syscall names by the guest's syscall numbers, where QEMU knows them.
    pub syscall_names: BTreeMap<u64, String>,
    /// The value the run was started with ([`Server::with_state`],
    /// [`Recording::replay_with`]), the same for every stream of the run;
    /// read it with [`ClientInfo::state`].
    pub tool_state: ToolState,
}

impl ClientInfo {
    pub(crate) fn from_hello(h: &wire::Hello) -> ClientInfo {
        ClientInfo {
            pid: h.pid,
            ppid: h.ppid,
            tid: h.tid,
            image: h.image,
            stream: 0,
            arch: h.arch.clone(),
            big_endian: h.big_endian,
            guest_bits: h.guest_bits,
            comm: h.comm.clone(),
            exe: h.exe.clone(),
            jitter_version: h.jitter_version.clone(),
            regs: reg_layout(h),
            syscall_names: h.syscall_names.clone(),
            tool_state: ToolState::default(),
        }
    }

    /// The value the run was started with, if it was started with an `S`:
    /// what `init_pid` clones into its `PidContext`, so that a tool's
    /// configuration and run-wide results need no module statics (see
    /// [`ToolState`]). `None` in a run started without one ([`run`],
    /// [`Server::run`], [`replay`]).
    pub fn state<S: std::any::Any + Send + Sync>(&self) -> Option<Arc<S>> {
        self.tool_state.get::<S>()
    }

    /// [`ClientInfo::state`] for a tool that is only ever run with its `S`.
    ///
    /// # Panics
    ///
    /// If the run was started without an `S`: a tool bug, not a runtime
    /// condition.
    pub fn expect_state<S: std::any::Any + Send + Sync>(&self) -> Arc<S> {
        self.state::<S>().unwrap_or_else(|| {
            panic!(
                "cannoli: this run carries no {}; start it with Server::with_state or replay_with",
                std::any::type_name::<S>()
            )
        })
    }

    /// The registers of a registers event as (name, value) pairs, in event
    /// order. `regs` is the callback's byte slice; each value is masked to
    /// the guest register width (`regs.bytes`).
    pub fn reg_values<'a>(&'a self, regs: &'a [u8]) -> impl Iterator<Item = (&'a str, u64)> + 'a {
        let mask = self.reg_mask();
        self.regs
            .names
            .iter()
            .zip(regs.chunks_exact(8))
            .map(move |(n, w)| (n.as_str(), u64::from_le_bytes(w.try_into().unwrap()) & mask))
    }

    /// The value of the register called `name` in a registers event, masked
    /// to the guest register width; `None` if there is no such register.
    pub fn reg(&self, regs: &[u8], name: &str) -> Option<u64> {
        let i = self.regs.names.iter().position(|n| n == name)?;
        let w = regs.get(i * 8..i * 8 + 8)?;
        Some(u64::from_le_bytes(w.try_into().unwrap()) & self.reg_mask())
    }

    /// The name of guest syscall number `num`, where QEMU's side knows it.
    pub fn syscall_name(&self, num: u64) -> Option<&str> {
        self.syscall_names.get(&num).map(String::as_str)
    }

    /// Mask of a register value: `regs.bytes` wide (all 64 bits if unknown).
    fn reg_mask(&self) -> u64 {
        match self.regs.bytes {
            1..=7 => (1u64 << (self.regs.bytes * 8)) - 1,
            _ => u64::MAX,
        }
    }
}

/// The hello's register layout, with names filled in where it has none.
fn reg_layout(h: &wire::Hello) -> wire::RegLayout {
    let mut l = h.regs.clone();
    if l.names.is_empty() {
        l.names = wire::reg_names(&h.arch)
            .iter()
            .map(|s| s.to_string())
            .collect();
    }
    while l.names.len() < l.count as usize {
        l.names.push(format!("r{}", l.names.len()));
    }
    l
}

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

/// Errors of the client library. Each displays as one line saying what
/// failed and what to do about it.
pub enum Error {
    /// Another process already listens on the address.
    AddrInUse {
        /// The address, as given.
        addr: String,
    },
    /// Binding the listening socket failed for another reason.
    Bind {
        /// The address, as given.
        addr: String,
        /// What the bind failed with.
        source: io::Error,
    },
    /// A system call the server loop needs failed.
    Io {
        /// What the server was doing, for the message.
        what: &'static str,
        /// What the call failed with.
        source: io::Error,
    },
    /// The tool failed the run ([`Cannoli::trace_flow`] returned an
    /// error); the run went on to its end without it.
    Tool(ToolError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::AddrInUse { addr } => write!(
                f,
                "cannot listen on {addr}: address already in use (another cannoli client is probably running); \
                 stop it, or set {}=unix:PATH (or HOST:PORT) to a free address for both this client and QEMU",
                wire::ADDR_ENV
            ),
            Error::Bind { addr, source } => write!(
                f,
                "cannot listen on {addr}: {source}; set {}=unix:PATH or HOST:PORT (default {}) for both this \
                 client and QEMU",
                wire::ADDR_ENV,
                wire::channel::default_addr()
            ),
            Error::Io { what, source } => write!(f, "cannoli: {what}: {source}"),
            Error::Tool(e) => write!(f, "{e}"),
        }
    }
}

// Debug shows the same single line, so `fn main() -> Result<(), Error>` and
// `.unwrap()` print something readable.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::AddrInUse { .. } => None,
            Error::Tool(e) => Some(e),
            Error::Bind { source, .. } | Error::Io { source, .. } => Some(source),
        }
    }
}

/// Address to listen on: `$CANNOLI_ADDR` if set and non-empty, else
/// [`wire::channel::default_addr`] (a Unix socket in the user's private
/// runtime directory).
pub fn default_addr() -> String {
    wire::client_addr().to_string()
}

/// The server of a client started by hand (QEMU started separately):
/// listens on [`default_addr`], with the secret from `$CANNOLI_TOKEN` if
/// set, else a fresh one written to the token file
/// ([`wire::channel::token_file`]), where QEMU of the same user finds it.
pub fn bind_by_hand() -> Result<Server, Error> {
    bind_by_hand_at(&default_addr())
}

/// [`bind_by_hand`] on `addr`.
pub fn bind_by_hand_at(addr: &str) -> Result<Server, Error> {
    let server = Server::bind(addr)?;
    match std::env::var_os(wire::TOKEN_ENV).filter(|v| !v.is_empty()) {
        Some(v) => {
            let t = wire::Token::from_hex(&v.to_string_lossy()).map_err(|e| Error::Io {
                what: "reading CANNOLI_TOKEN",
                source: io::Error::new(io::ErrorKind::InvalidInput, e),
            })?;
            Ok(server.with_token(t))
        }
        None => {
            let path = wire::channel::token_file();
            let dir = wire::channel::runtime_dir();
            if path.parent() == Some(dir.as_path()) {
                wire::channel::private_dir(&dir).map_err(|e| Error::Io {
                    what: "preparing the private directory of the token file",
                    source: e,
                })?;
            }
            server.token().write_file(&path).map_err(|e| Error::Io {
                what: "writing the token file QEMU reads the run's secret from",
                source: e,
            })?;
            Ok(server)
        }
    }
}

/// Listens on [`default_addr`] and traces until every connection of the
/// traced process tree has ended; returns the totals.
pub fn run<T: Cannoli>(threads: usize) -> Result<Stats, Error> {
    bind_by_hand()?.run::<T>(threads)
}

/// Listens on [`default_addr`] and serves connections forever.
pub fn run_forever<T: Cannoli>(threads: usize) -> Result<(), Error> {
    bind_by_hand()?.run_forever::<T>(threads)
}

/// The original Cannoli's name for [`run_forever`].
pub fn create_cannoli<T: Cannoli>(threads: usize) -> Result<(), Error> {
    run_forever::<T>(threads)
}
