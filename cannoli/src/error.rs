// SPDX-License-Identifier: GPL-2.0-or-later
//! The client library's errors, one line each.

use std::{fmt, io};

use crate::ToolError;

/// Errors of the client library. Each displays as one line saying what
/// failed and what to do about it.
#[derive(thiserror::Error)]
pub enum Error {
    /// Another process already listens on the address.
    #[error(
        "cannot listen on {addr}: address already in use (another cannoli client is probably running); \
         stop it, or set {}=unix:PATH (or HOST:PORT) to a free address for both this client and QEMU",
        wire::ADDR_ENV
    )]
    AddrInUse {
        /// The address, as given.
        addr: String,
    },
    /// Binding the listening socket failed for another reason.
    #[error(
        "cannot listen on {addr}: {source}; set {}=unix:PATH or HOST:PORT (default {}) for both this \
         client and QEMU",
        wire::ADDR_ENV,
        wire::channel::default_addr()
    )]
    Bind {
        /// The address, as given.
        addr: String,
        /// What the bind failed with.
        source: io::Error,
    },
    /// A system call the server loop needs failed.
    #[error("cannoli: {what}: {source}")]
    Io {
        /// What the server was doing, for the message.
        what: &'static str,
        /// What the call failed with.
        source: io::Error,
    },
    /// The tool failed the run ([`Cannoli::trace_flow`](crate::Cannoli::trace_flow) returned an
    /// error); the run went on to its end without it.
    #[error("{0}")]
    Tool(#[source] ToolError),
}

// Debug shows the same single line, so `fn main() -> Result<(), Error>` and
// `.unwrap()` print something readable.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
