//! The crate's typed [`Error`].

use std::fmt;
use std::io;

#[allow(unused_imports)] // for the doc links
use crate::{Consumer, Producer, TableReader};

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed; the message says what was being done, on which file.
    #[error("mempipe: {0}")]
    Io(io::Error),
    /// The file is not a usable ring (wrong magic, version or sizes).
    #[error("mempipe: bad ring file: {0}")]
    BadHeader(String),
    /// The consumer closed the ring or its process exited.
    #[error(
        "mempipe: the consumer closed the ring or its process exited; \
         no more chunks can be delivered (see the analysis client's output for why it stopped)"
    )]
    ConsumerGone,
    /// An argument to [`Producer::create_memfd`] is out of range.
    #[error("mempipe: invalid ring parameters: {0}")]
    InvalidArgument(String),
    /// [`Producer::acquire`] / [`Producer::publish`] after [`Producer::close`].
    #[error(
        "mempipe: the producer already closed this ring; create a new ring to send more chunks"
    )]
    Closed,
    /// [`Producer::publish`] without a preceding [`Producer::acquire`].
    #[error("mempipe: publish() without a chunk; call acquire() before each publish()")]
    NotAcquired,
    /// [`Producer::publish`] with a length larger than the chunk size.
    #[error(
        "mempipe: publish() of {len} bytes exceeds the chunk size of {chunk_size} bytes; \
         publish at most chunk_size bytes per chunk or create the ring with larger chunks"
    )]
    TooLong {
        /// The length passed, in bytes.
        len: usize,
        /// The ring's chunk size, in bytes.
        chunk_size: usize,
    },
    /// [`Consumer::from_fd`] / [`Consumer::open_proc`] on a ring that another
    /// consumer already opened.
    #[error(
        "mempipe: the ring was already opened by consumer process {pid}; \
         a ring has exactly one consumer process"
    )]
    AlreadyOpened {
        /// The process that opened it first.
        pid: u32,
    },
    /// [`Consumer::from_fd`] / [`Consumer::open_proc`] refused the file
    /// before mapping it: not a regular file of this user, not sealed, not
    /// allocated, or an invalid pid/fd. The message says which.
    #[error("mempipe: refused the ring: {0}")]
    Refused(String),
    /// [`TableReader::from_fd`] / [`TableReader::open_proc`] refused the
    /// file: not a sealed regular file of this user of the block table's
    /// size, or not a block table (magic, version, sizes). The message
    /// says which.
    #[error("mempipe: refused the block table: {0}")]
    TableRefused(String),
}

/// Why a file was refused as not a regular file of this user
/// (`sys::check_owner`); carried as the message of [`Error::Refused`] or
/// [`Error::TableRefused`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OwnerError {
    /// Not a regular file: `fix` says what it should be.
    #[error("{what} is not a regular file; {fix}")]
    NotFile { what: String, fix: String },
    /// Another user's file.
    #[error(
        "{what} belongs to uid {uid}, not to this user ({me}); a ring is made by \
         the traced QEMU running as the same user"
    )]
    NotMine { what: String, uid: u32, me: u32 },
}

/// Wraps an `io::Error` with what was being done, keeping its kind.
pub(crate) fn io_error(context: impl fmt::Display, e: io::Error) -> Error {
    Error::Io(io::Error::new(e.kind(), format!("{context}: {e}")))
}
