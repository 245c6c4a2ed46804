//! Accepting QEMU's connections (a Unix socket or TCP), and per connection,
//! after the handshake (`handshake.rs`), the worker threads that decode the
//! ring and the control loop that watches the socket for the goodbye.
//!
//! # Files
//!
//! - [`listen`]: the [`Server`], its settings, and the accept loop;
//! - [`pending`]: connections challenged and not yet heard from;
//! - [`fd_limit`]: the descriptor limit, raised for the streams;
//! - [`shared`]: what the accept loop and the connection threads share;
//! - [`connection`]: one connection, from its handshake to its totals;
//! - [`control`]: its control connection, the goodbye, and whether the
//!   stream is whole;
//! - [`workers`]: the workers that decode a stream and deliver it in order;
//! - [`record`]: recording a stream instead of decoding it.

use std::sync::{Mutex, MutexGuard};

mod connection;
mod control;
mod fd_limit;
mod listen;
mod pending;
mod record;
mod shared;
mod workers;

pub use fd_limit::{original_fd_limit, raise_fd_limit};
pub use listen::{Server, Waker};

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
