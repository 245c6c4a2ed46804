//! The crate's typed [`Error`].

use std::fmt;
use std::io;

#[allow(unused_imports)] // for the doc links
use crate::{Consumer, Producer, TableReader};

/// Errors of this crate.
#[derive(Debug)]
pub enum Error {
    /// A system call failed; the message says what was being done, on which file.
    Io(io::Error),
    /// The file is not a usable ring (wrong magic, version or sizes).
    BadHeader(String),
    /// The consumer closed the ring or its process exited.
    ConsumerGone,
    /// An argument to [`Producer::create_memfd`] is out of range.
    InvalidArgument(String),
    /// [`Producer::acquire`] / [`Producer::publish`] after [`Producer::close`].
    Closed,
    /// [`Producer::publish`] without a preceding [`Producer::acquire`].
    NotAcquired,
    /// [`Producer::publish`] with a length larger than the chunk size.
    TooLong {
        /// The length passed, in bytes.
        len: usize,
        /// The ring's chunk size, in bytes.
        chunk_size: usize,
    },
    /// [`Consumer::from_fd`] / [`Consumer::open_proc`] on a ring that another
    /// consumer already opened.
    AlreadyOpened {
        /// The process that opened it first.
        pid: u32,
    },
    /// [`Consumer::from_fd`] / [`Consumer::open_proc`] refused the file
    /// before mapping it: not a regular file of this user, not sealed, not
    /// allocated, or an invalid pid/fd. The message says which.
    Refused(String),
    /// [`TableReader::from_fd`] / [`TableReader::open_proc`] refused the
    /// file: not a sealed regular file of this user of the block table's
    /// size, or not a block table (magic, version, sizes). The message
    /// says which.
    TableRefused(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "mempipe: {e}"),
            Error::BadHeader(msg) => write!(f, "mempipe: bad ring file: {msg}"),
            Error::ConsumerGone => write!(
                f,
                "mempipe: the consumer closed the ring or its process exited; \
                 no more chunks can be delivered (see the analysis client's output for why it stopped)"
            ),
            Error::InvalidArgument(msg) => write!(f, "mempipe: invalid ring parameters: {msg}"),
            Error::Closed => write!(
                f,
                "mempipe: the producer already closed this ring; create a new ring to send more chunks"
            ),
            Error::NotAcquired => {
                write!(f, "mempipe: publish() without a chunk; call acquire() before each publish()")
            }
            Error::TooLong { len, chunk_size } => write!(
                f,
                "mempipe: publish() of {len} bytes exceeds the chunk size of {chunk_size} bytes; \
                 publish at most chunk_size bytes per chunk or create the ring with larger chunks"
            ),
            Error::AlreadyOpened { pid } => write!(
                f,
                "mempipe: the ring was already opened by consumer process {pid}; \
                 a ring has exactly one consumer process"
            ),
            Error::Refused(msg) => write!(f, "mempipe: refused the ring: {msg}"),
            Error::TableRefused(msg) => write!(f, "mempipe: refused the block table: {msg}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => e.source(),
            _ => None,
        }
    }
}

/// Why a file was refused as not a regular file of this user
/// (`sys::check_owner`); carried as the message of [`Error::Refused`] or
/// [`Error::TableRefused`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OwnerError {
    /// Not a regular file: `fix` says what it should be.
    NotFile { what: String, fix: String },
    /// Another user's file.
    NotMine { what: String, uid: u32, me: u32 },
}

impl fmt::Display for OwnerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OwnerError::NotFile { what, fix } => write!(f, "{what} is not a regular file; {fix}"),
            OwnerError::NotMine { what, uid, me } => write!(
                f,
                "{what} belongs to uid {uid}, not to this user ({me}); a ring is made by \
                 the traced QEMU running as the same user"
            ),
        }
    }
}

/// Wraps an `io::Error` with what was being done, keeping its kind.
pub(crate) fn io_error(context: impl fmt::Display, e: io::Error) -> Error {
    Error::Io(io::Error::new(e.kind(), format!("{context}: {e}")))
}
