// SPDX-License-Identifier: GPL-2.0-or-later
//! The export's typed [`Error`]: one line each, naming the file or
//! directory it concerns; `run::main` prints it once.

use std::io;
use std::path::PathBuf;

use arrow_schema::ArrowError;
use parquet::errors::ParquetError;

/// Errors of an export.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The recording could not be opened or replayed.
    #[error(transparent)]
    Recording(#[from] cannoli::recording::Error),
    /// `-o DIR` holds an export already.
    #[error(
        "{} already holds an export (insns/); remove it or choose another -o DIR",
        .0.display()
    )]
    AlreadyExported(PathBuf),
    /// `--parquet DIR` of `cannoli heap` holds an allocations table already.
    #[error(
        "{} already holds an allocations table (allocations/); remove it or choose another DIR",
        .0.display()
    )]
    TableExists(PathBuf),
    /// `-o DIR` is a file.
    #[error("{} is not a directory; choose another -o DIR", .0.display())]
    NotDir(PathBuf),
    /// A table's directory or part file could not be created.
    #[error("cannot create {}: {source}", path.display())]
    Create {
        /// The directory or file.
        path: PathBuf,
        /// What creating it failed with.
        #[source]
        source: io::Error,
    },
    /// A part file's writer could not be set up (or, for an empty table's
    /// file, written).
    #[error("{}: {source}", path.display())]
    Open {
        /// The part file.
        path: PathBuf,
        /// What the writer failed with.
        #[source]
        source: ParquetError,
    },
    /// Writing a row group or a footer into a table's part file failed.
    #[error("writing {}: {source}", dir.display())]
    Write {
        /// The table's directory.
        dir: PathBuf,
        /// What writing failed with.
        #[source]
        source: ParquetError,
    },
    /// Writing a part file's last bytes failed.
    #[error("writing {}: {source}", dir.display())]
    Finish {
        /// The table's directory.
        dir: PathBuf,
        /// What the file's write failed with.
        #[source]
        source: io::Error,
    },
    /// zstd could not be set up or failed to compress a page.
    #[error("zstd: {0}")]
    Zstd(#[source] io::Error),
    /// Building a page, a column chunk's metadata or the schema failed.
    #[error(transparent)]
    Parquet(#[from] ParquetError),
    /// A small table's builders did not make a record batch.
    #[error(transparent)]
    Arrow(#[from] ArrowError),
    /// A stream's exporter outlived the replay.
    #[error("the replay kept a stream open")]
    StreamOpen,
    /// An encoding thread panicked.
    #[error("an encoding thread panicked")]
    EncoderPanicked,
}

/// The export's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_file() {
        let e = Error::Create {
            path: "/o/insns".into(),
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        };
        assert_eq!(e.to_string(), "cannot create /o/insns: permission denied");
        assert_eq!(
            Error::AlreadyExported("/o".into()).to_string(),
            "/o already holds an export (insns/); remove it or choose another -o DIR"
        );
        let e = Error::Zstd(io::Error::other("bad level"));
        assert_eq!(e.to_string(), "zstd: bad level");
    }
}
