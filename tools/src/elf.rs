// SPDX-License-Identifier: GPL-2.0-or-later
//! Why a program's symbols could not be read (symbolizer, backtrace): one
//! line naming the file; the tool prints it once.

use std::path::PathBuf;

/// Errors of reading an ELF file's symbols.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What reading it failed with.
        #[source]
        source: std::io::Error,
    },
    /// object could not parse it.
    #[error("{} is not a usable ELF file: {source}", path.display())]
    Unusable {
        /// The file.
        path: PathBuf,
        /// What parsing it failed with.
        #[source]
        source: object::read::Error,
    },
    /// object parsed it, as another format than ELF.
    #[error("{} is not an ELF file", .0.display())]
    NotElf(PathBuf),
}

/// `path`'s bytes and their parse.
pub fn read(path: &std::path::Path) -> Result<Vec<u8>, ReadError> {
    std::fs::read(path).map_err(|source| ReadError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// `data` (of `path`) parsed.
pub fn parse<'d>(path: &std::path::Path, data: &'d [u8]) -> Result<object::File<'d>, ReadError> {
    object::File::parse(data).map_err(|source| ReadError::Unusable {
        path: path.to_path_buf(),
        source,
    })
}

/// Where the separate debug file of `file` is installed, by its build id
/// (`/usr/lib/debug/.build-id/NN/REST.debug`, where Debian's `-dbg`
/// packages put them), if it is.
pub fn debug_file(file: &object::File) -> Option<PathBuf> {
    use object::Object;
    let id = file.build_id().ok()??;
    let (first, rest) = id.split_first()?;
    let hex: String = rest.iter().map(|b| format!("{b:02x}")).collect();
    let path = PathBuf::from(format!("/usr/lib/debug/.build-id/{first:02x}/{hex}.debug"));
    path.is_file().then_some(path)
}
