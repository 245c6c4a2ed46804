// SPDX-License-Identifier: GPL-2.0-or-later
//! probe's typed errors: [`SpecError`], a PROBE that does not parse, and
//! [`Error`], everything else that stops a run before the program starts.
//! Each displays as one line; `main` prints it once.

use std::io;
use std::path::PathBuf;

use super::spec::MAX_ARGS;

/// Why a PROBE does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Why {
    #[error("empty")]
    Empty,
    #[error("the address is not hex")]
    NotHex,
    #[error("too many ':'")]
    TooManyColons,
    #[error("FUNC/N is an entry, not a return")]
    EntryReturn,
    #[error("N of FUNC/N must be 0 to {MAX_ARGS}")]
    ArgCount,
    #[error("FUNC+OFF is an instruction, not a return")]
    OffsetReturn,
    #[error("OFF of FUNC+OFF must be a number (0x.. for hex)")]
    OffsetNotNumber,
    #[error("no function name")]
    NoName,
    #[error("a function name has no spaces")]
    Spaces,
}

/// A PROBE that does not parse: the text, why, and what to write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("probe {text:?}: {why}; write FUNC, FUNC/N, FUNC:return, FUNC+OFF, 0xADDR or LIB:FUNC")]
pub struct SpecError {
    /// The PROBE as given.
    pub text: String,
    /// What is wrong with it.
    pub why: Why,
}

/// Errors of probe before the program runs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A PROBE does not parse.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// Finding the program, its architecture or its sysroot failed.
    #[error(transparent)]
    Launch(#[from] launch::Error),
    /// `--replay FILE` is not a readable recording.
    #[error(transparent)]
    Recording(#[from] cannoli::recording::Error),
    /// Neither a PROGRAM nor `--replay`.
    #[error("give a PROGRAM to run (or --replay FILE)")]
    NoProgram,
    /// The recording's header names no program.
    #[error("{}: the recording does not say which program ran", .0.display())]
    NoCommand(PathBuf),
    /// An ELF file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file is not ELF (object's reason).
    #[error("{} is not an ELF file: {source}", path.display())]
    NotElf {
        path: PathBuf,
        #[source]
        source: object::read::Error,
    },
    /// A file object parsed, but as another format than ELF.
    #[error("{} is not an ELF file", .0.display())]
    NotElfFormat(PathBuf),
    /// No calling convention is known for the file's architecture.
    #[error(
        "{}: no calling convention known for {arch:?}; probes work on mips, mipsel, mips64el, \
         arm, aarch64, riscv64, x86_64, i386 and ppc64le",
        path.display()
    )]
    NoAbi {
        path: PathBuf,
        arch: object::Architecture,
    },
    /// `LIB:...` for a statically linked program.
    #[error(
        "{}: {lib}:... names a shared library, but the program is statically linked; \
         probe its own functions (they include the C library's)",
        program.display()
    )]
    Static { program: PathBuf, lib: String },
    /// No file of library `lib` in the sysroot's directories.
    #[error(
        "no shared library {lib}.so* for {} in {}; name it by its file name's start (libc, libm, \
         libpthread)",
        program.display(),
        dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NoLibrary {
        program: PathBuf,
        lib: String,
        /// The directories looked in.
        dirs: Vec<PathBuf>,
    },
    /// The dynamic loader is not in the sysroot.
    #[error(
        "{}: its dynamic loader {interp} is not in {} (the sysroot QEMU will use)",
        program.display(),
        root.display()
    )]
    NoLoader {
        program: PathBuf,
        interp: String,
        root: PathBuf,
    },
    /// A probe's library could not be found.
    #[error("probe {text:?}: {source}")]
    ProbeLib {
        /// The PROBE as given.
        text: String,
        #[source]
        source: Box<Error>,
    },
    /// FUNC+OFF beyond the function's end.
    #[error("probe {text:?}: {func} is {len} bytes long, so +{off:#x} is outside it")]
    Outside {
        text: String,
        func: String,
        len: u64,
        off: u64,
    },
    /// No function matches a probe's FUNC.
    #[error(
        "probe {text:?}: no function {func} in {}; `cannoli probe --list PATTERN PROGRAM` \
         lists the functions of the program and its libraries",
        path.display()
    )]
    NoFunction {
        text: String,
        func: String,
        path: PathBuf,
    },
    /// No function of the program matches a probe's FUNC, but one of a
    /// library it loads does.
    #[error(
        "probe {text:?}: no function {func} in {}, but its library {lib} has one; \
         probe it as {with_lib}",
        path.display()
    )]
    InLibrary {
        text: String,
        func: String,
        path: PathBuf,
        lib: String,
        /// The probe, with the library named.
        with_lib: String,
    },
    /// FUNC is a GNU indirect function whose implementations have no
    /// symbols.
    #[error(
        "probe {text:?}: {func} in {} is an indirect function (its symbol is the resolver \
         that picks an implementation when the program is loaded), and no symbol names its \
         implementations; install the library's debug symbols (Debian: libc6-dbg for the \
         C library), or probe the implementation by address",
        path.display()
    )]
    Ifunc {
        text: String,
        func: String,
        path: PathBuf,
    },
}
