// SPDX-License-Identifier: GPL-2.0-or-later
//! A client started by hand: the classic two-terminal mode, QEMU
//! started separately.

use std::io;

use crate::{Cannoli, Error, Server, Stats};

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
