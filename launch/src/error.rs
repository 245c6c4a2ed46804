// SPDX-License-Identifier: GPL-2.0-or-later
//! What can go wrong before the program runs, one line each.

use std::io;
use std::path::{Path, PathBuf};

use crate::arch::Arch;
use crate::find;

/// Everything that can go wrong before the program runs. Each displays as
/// one line that names the fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The program does not exist.
    #[error("{}: no such program", program.display())]
    NoProgram {
        /// The program, as given.
        program: PathBuf,
    },
    /// The program is a directory, not executable, ...
    #[error("{}: cannot run it: {why}", path.display())]
    NotExecutable {
        /// The program.
        path: PathBuf,
        /// Why not, e.g. `it is a directory`.
        why: String,
    },
    /// The program is not an ELF executable.
    #[error("{}: not an ELF program ({what})", path.display())]
    NotElf {
        /// The program.
        path: PathBuf,
        /// What its header is instead, or why it could not be read.
        what: String,
    },
    /// No QEMU target for the program's machine.
    #[error("{}", unsupported_arch(path, *machine, *bits, *big_endian))]
    UnsupportedArch {
        /// The program.
        path: PathBuf,
        /// Its ELF `e_machine`.
        machine: u16,
        /// Its ELF class: 32 or 64.
        bits: u8,
        /// Whether it is big-endian.
        big_endian: bool,
    },
    /// No patched QEMU for the program's architecture.
    #[error("{}", no_qemu(arch, looked))]
    NoQemu {
        /// The program's architecture.
        arch: &'static Arch,
        /// Every place looked at, each with why it would not do.
        looked: Vec<String>,
    },
    /// No hook library.
    #[error("{}", no_hooks(name, looked))]
    NoHooks {
        /// The library asked for: a tool's name, or a path.
        name: String,
        /// Every place looked at, each with why it would not do.
        looked: Vec<String>,
    },
    /// A dynamically linked program and no sysroot with its interpreter.
    #[error("{}", no_sysroot(path, arch, interp))]
    NoSysroot {
        /// The program.
        path: PathBuf,
        /// Its architecture.
        arch: &'static Arch,
        /// Its `PT_INTERP` path.
        interp: String,
    },
    /// Binding the listening socket failed.
    #[error("{0}")]
    Listen(#[source] cannoli::Error),
    /// Starting QEMU failed.
    #[error("cannot start {}: {source}", qemu.display())]
    Spawn {
        /// The QEMU binary.
        qemu: PathBuf,
        /// What starting it failed with.
        source: io::Error,
    },
    /// The server failed.
    #[error("{0}")]
    Server(#[source] cannoli::Error),
    /// Another system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What the launcher was doing, for the message.
        what: String,
        /// What the call failed with.
        source: io::Error,
    },
    /// A recording could not be read, or lacks what the tool needs.
    #[error("{0}")]
    Recording(String),
}

impl Error {
    /// The exit status for this error, as shells use them: 127 for a
    /// program that does not exist, 126 for one that cannot be run, else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::NoProgram { .. } => 127,
            Error::NotExecutable { .. } | Error::NotElf { .. } | Error::UnsupportedArch { .. } => {
                126
            }
            _ => 1,
        }
    }
}

fn machine_name(m: u16) -> Option<&'static str> {
    use object::elf::*;
    Some(match m {
        EM_386 => "i386",
        EM_X86_64 => "x86-64",
        EM_ARM => "ARM",
        EM_AARCH64 => "AArch64",
        EM_MIPS => "MIPS",
        EM_RISCV => "RISC-V",
        EM_PPC => "PowerPC",
        EM_PPC64 => "PowerPC64",
        EM_S390 => "S/390",
        EM_SPARC | EM_SPARCV9 => "SPARC",
        EM_LOONGARCH => "LoongArch",
        EM_68K => "m68k",
        EM_SH => "SuperH",
        EM_PARISC => "PA-RISC",
        EM_ALPHA => "Alpha",
        EM_XTENSA => "Xtensa",
        EM_MICROBLAZE => "MicroBlaze",
        EM_OPENRISC => "OpenRISC",
        EM_HEXAGON => "Hexagon",
        _ => return None,
    })
}

fn built_targets_hint(arch: &Arch) -> String {
    format!(
        "build it with `bash scripts/build-qemu.sh` (which builds the targets in its \
         CANNOLI_QEMU_TARGETS; add {} there if it is not one of them)",
        arch.qemu_target()
    )
}

/// [`Error::UnsupportedArch`]'s line.
fn unsupported_arch(path: &Path, machine: u16, bits: u8, big_endian: bool) -> String {
    let endian = if big_endian { "big" } else { "little" };
    let name = machine_name(machine)
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    format!(
        "{}: a {bits}-bit {endian}-endian ELF for machine {machine:#x}{name}, \
         which has no QEMU linux-user target cannoli knows",
        path.display()
    )
}

/// [`Error::NoQemu`]'s line.
fn no_qemu(arch: &Arch, looked: &[String]) -> String {
    format!(
        "no patched QEMU for {} ({} with -cannoli); looked at {}; {}, or set {}=/path/to/{}",
        arch.name,
        arch.qemu_binary(),
        looked.join(", "),
        built_targets_hint(arch),
        find::QEMU_ENV,
        arch.qemu_binary()
    )
}

/// [`Error::NoHooks`]'s line.
fn no_hooks(name: &str, looked: &[String]) -> String {
    format!(
        "no hook library {}: looked in {}; build it with `cargo build --release` \
         (the tool's cdylib), or set {}=/path/to/lib.so",
        if name.contains('/') || name.ends_with(".so") {
            name.to_string()
        } else {
            find::hooks_file(name)
        },
        looked.join(", "),
        find::HOOKS_ENV
    )
}

/// [`Error::NoSysroot`]'s line.
fn no_sysroot(path: &Path, arch: &Arch, interp: &str) -> String {
    let fix = match (arch.sysroot(), arch.libc_package) {
        (Some(root), Some(pkg)) => format!(
            "{} has no {interp}: install it with `apt-get install {pkg}`, or",
            root.display()
        ),
        _ => format!("there is no Debian cross sysroot for {}:", arch.name),
    };
    format!(
        "{} is dynamically linked ({} interpreter {interp}) and {fix} \
         give QEMU a sysroot with CANNOLI_QEMU_ARGS=\"-L /path\" or QEMU_LD_PREFIX=/path",
        path.display(),
        arch.name
    )
}
