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

mod announce;
mod blocks;
mod by_hand;
mod client;
mod crew;
mod decode;
mod error;
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
mod stats;
mod tool;

pub use by_hand::{bind_by_hand, bind_by_hand_at, create_cannoli, default_addr, run, run_forever};
pub use client::ClientInfo;
pub use crew::default_workers;
pub use error::Error;
pub use event::{Access, Block, Mapping, Prot, Protection, Signal, Syscall};
pub use flow::{Flow, ToolError};
pub use notes::Notes;
pub use recording::{replay, replay_with, Recording, Replayed};
pub use server::{original_fd_limit, raise_fd_limit, Server, Waker};
pub use state::ToolState;
pub use stats::{Stats, EXIT_INCOMPLETE};
pub use tool::{Cannoli, ReplayOrder};

/// Re-export of the wire format crate (event tags, handshake messages).
pub use wire;
