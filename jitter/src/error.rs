//! The jitter's typed [`Error`]: why QEMU's side could not start or
//! connect. Each is one line, printed once by `ffi` (into QEMU's error
//! buffer) or by the stream code (on QEMU's stderr).

/// Errors of QEMU's side.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The host lacks XSAVE, which the flush stub needs.
    #[error("the host CPU or OS lacks XSAVE (OSXSAVE), which cannoli needs")]
    NoXsave,
    /// QEMU initialised the jitter a second time.
    #[error("cannoli was initialised twice")]
    InitTwice,
    /// A stream was asked for before init.
    #[error("cannoli used before init")]
    NotInit,
    /// The process's block table could not be made.
    #[error("cannot create the block table: {0}")]
    BlockTable(#[source] mempipe::Error),
    /// A thread's event ring could not be made.
    #[error("cannot create the event ring: {0}")]
    Ring(#[source] mempipe::Error),
    /// The ring has no fd to hand to the client.
    #[error("the event ring has no file descriptor to hand over")]
    NoRingFd,
    /// The handshake with the client failed.
    #[error(transparent)]
    Dial(#[from] wire::channel::DialError),
}

/// The jitter's results.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;
