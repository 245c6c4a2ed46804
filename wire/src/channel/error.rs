// SPDX-License-Identifier: GPL-2.0-or-later
//! Why a handshake step failed: one type per operation, each a line as
//! the side that fails prints it.

use super::{Addr, ADDR_ENV, TOKEN_ENV};
use crate::WIRE_VERSION;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Why there is no [`Token`](super::Token): one line, as QEMU's side prints it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TokenError {
    /// Not 64 hex digits ([`Token::from_hex`](super::Token::from_hex)).
    #[error("a cannoli token is 64 hex digits")]
    NotHex,
    /// [`TOKEN_ENV`] is set but not 64 hex digits ([`Token::from_env`](super::Token::from_env)).
    #[error("{TOKEN_ENV} is not a cannoli token ({})", TokenError::NotHex)]
    EnvNotHex,
    /// [`TOKEN_ENV`] is unset and the token file cannot be used
    /// ([`Token::from_env`](super::Token::from_env)).
    #[error(
        "no secret to present to the cannoli client: {TOKEN_ENV} is unset and the token file {} \
         cannot be used ({source}); start the client first (it writes that file), or pass the client's \
         token in {TOKEN_ENV}",
        .path.display()
    )]
    NoFile {
        /// The token file looked at ([`token_file`](super::token_file)).
        path: PathBuf,
        /// Why it cannot be used (shared, so that the error can be kept
        /// and handed out again).
        source: Arc<io::Error>,
    },
}

/// Why QEMU's side of the handshake ([`dial`](super::dial)) failed: one line for
/// QEMU's stderr.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// No socket could be made for the connection.
    #[error("no socket for the connection to {addr}: {source}")]
    NoSocket {
        /// The client's address.
        addr: Addr,
        /// Why not.
        source: io::Error,
    },
    /// Nothing listens at the address.
    #[error(
        "no cannoli client is listening on {addr} ({source}): start your client first, or \
         point {ADDR_ENV} at it"
    )]
    NoClient {
        /// The client's address.
        addr: Addr,
        /// The connect error.
        source: io::Error,
    },
    /// No secret to prove this QEMU is the run's.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The connection failed while the handshake was under way.
    #[error("lost the client at {addr} during the handshake: {source}")]
    Lost {
        /// The client's address.
        addr: Addr,
        /// The failed read, write or setting.
        source: io::Error,
    },
    /// Reading the challenge failed.
    #[error("the client at {addr} did not open the handshake: {source}")]
    NoChallenge {
        /// The client's address.
        addr: Addr,
        /// The failed read.
        source: io::Error,
    },
    /// The peer closed the connection before its challenge.
    #[error("the client at {addr} closed the connection at once (is it a cannoli client?)")]
    ClosedAtOnce {
        /// The client's address.
        addr: Addr,
    },
    /// The challenge was refused ([`parse_challenge`](super::parse_challenge)).
    #[error("{addr} {source}")]
    Challenge {
        /// The client's address.
        addr: Addr,
        /// What is wrong with it.
        source: ChallengeError,
    },
    /// Reading the welcome failed.
    #[error("the client at {addr} did not answer the hello: {source}")]
    NoWelcome {
        /// The client's address.
        addr: Addr,
        /// The failed read.
        source: io::Error,
    },
    /// The peer closed the connection instead of answering the hello.
    #[error("the client at {addr} closed the connection during the handshake")]
    ClosedInHandshake {
        /// The client's address.
        addr: Addr,
    },
    /// The answer to the hello is not a welcome.
    #[error("{addr} answered the hello with something that is not a cannoli welcome")]
    NotWelcome {
        /// The client's address.
        addr: Addr,
    },
    /// The client refused the trace, saying why.
    #[error("the client at {addr} refused the trace: {}", crate::tame(.reason, 400))]
    Refused {
        /// The client's address.
        addr: Addr,
        /// The client's reason, as it sent it.
        reason: String,
    },
    /// The welcome's proof does not check out.
    #[error(
        "the process listening on {addr} could not prove it holds this run's secret; \
         it is not the client this QEMU was started for"
    )]
    Unproved {
        /// The client's address.
        addr: Addr,
    },
}

/// Why a client's challenge was refused ([`parse_challenge`](super::parse_challenge)): a phrase
/// that follows the peer's address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChallengeError {
    /// Not JSON.
    #[error("opened the handshake with something that is not a cannoli client's challenge")]
    NotJson,
    /// JSON without the cannoli magic.
    #[error("is not a cannoli client (no cannoli challenge)")]
    NotCannoli,
    /// A cannoli challenge of another wire version.
    #[error(
        "is a cannoli client speaking wire version {}, but this hook library speaks \
         wire version {WIRE_VERSION}; rebuild the client and the hook library from the same \
         cannoli version",
        .theirs.map_or_else(|| "none".to_string(), |t| t.to_string())
    )]
    Version {
        /// The version it names; `None` when it names none.
        theirs: Option<u64>,
    },
    /// Of our version, but malformed.
    #[error("sent a malformed challenge ({})", crate::tame(.reason, 200))]
    Malformed {
        /// The JSON parser's message.
        reason: String,
    },
    /// The nonce is not 32 hex digits.
    #[error("sent a challenge whose nonce is not 32 hex digits")]
    BadNonce,
}
