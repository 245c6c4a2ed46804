// SPDX-License-Identifier: GPL-2.0-or-later
//! Which QEMU runs a guest program: its ELF machine, class, byte order and
//! flags map to a QEMU linux-user target (`qemu-<name>`) and to the Debian
//! cross sysroot (`/usr/<triple>`) its dynamic linker lives in.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader};
use object::{Endianness, FileKind, ReadCache, ReadRef};

use crate::Error;

/// One guest architecture QEMU linux-user can run.
#[derive(Debug, PartialEq, Eq)]
pub struct Arch {
    /// QEMU's name for it: the binary is `qemu-<name>`, the configure target
    /// `<name>-linux-user`.
    pub name: &'static str,
    /// ELF `e_machine`.
    pub machine: u16,
    /// ELF class: 32 or 64.
    pub bits: u8,
    /// ELF data encoding: big-endian (`ELFDATA2MSB`).
    pub big_endian: bool,
    /// `e_flags & flags_mask == flags_value` must hold (both 0: any flags).
    pub flags_mask: u32,
    /// The value `e_flags & flags_mask` must have (see `flags_mask`).
    pub flags_value: u32,
    /// Debian's multiarch triple: the cross sysroot is `/usr/<triple>`.
    pub triple: Option<&'static str>,
    /// The Debian package that installs that sysroot's C library.
    pub libc_package: Option<&'static str>,
}

impl Arch {
    /// The QEMU binary's file name.
    pub fn qemu_binary(&self) -> String {
        format!("qemu-{}", self.name)
    }

    /// The `--target-list` entry that builds it.
    pub fn qemu_target(&self) -> String {
        format!("{}-linux-user", self.name)
    }

    /// The Debian cross sysroot, `/usr/<triple>`.
    pub fn sysroot(&self) -> Option<PathBuf> {
        self.triple.map(|t| Path::new("/usr").join(t))
    }

    /// Whether the host runs this architecture's programs natively (then a
    /// dynamically linked guest's interpreter is the host's own).
    pub fn is_host(&self) -> bool {
        let host = match std::env::consts::ARCH {
            "x86" => "i386",
            "powerpc" => "ppc",
            "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
            "powerpc64" => "ppc64",
            "mips" if cfg!(target_endian = "little") => "mipsel",
            "mips64" if cfg!(target_endian = "little") => "mips64el",
            "arm" => "arm",
            a => a,
        };
        self.name == host
    }
}

const EF_MIPS_ABI2: u32 = 0x20;
const EF_ARM_ABI_FLOAT_HARD: u32 = 0x400;

const fn arch(
    name: &'static str,
    machine: u16,
    bits: u8,
    big_endian: bool,
    triple: &'static str,
    pkg: &'static str,
) -> Arch {
    Arch {
        name,
        machine,
        bits,
        big_endian,
        flags_mask: 0,
        flags_value: 0,
        triple: Some(triple),
        libc_package: Some(pkg),
    }
}

const fn flags(mut a: Arch, mask: u32, value: u32) -> Arch {
    a.flags_mask = mask;
    a.flags_value = value;
    a
}

const fn no_sysroot(mut a: Arch) -> Arch {
    a.triple = None;
    a.libc_package = None;
    a
}

/// Every guest the launcher knows, first match wins. `scripts/build-qemu.sh`
/// builds QEMU for the tested matrix (mipsel, mips, mips64el, arm, aarch64,
/// riscv64, x86_64, i386, ppc64le); the others need
/// `CANNOLI_QEMU_TARGETS=<name>-linux-user,...` there.
#[rustfmt::skip]
pub static ARCHES: &[Arch] = &[
    flags(arch("mipsel", elf::EM_MIPS, 32, false, "mipsel-linux-gnu", "libc6-mipsel-cross"), EF_MIPS_ABI2, 0),
    flags(arch("mips", elf::EM_MIPS, 32, true, "mips-linux-gnu", "libc6-mips-cross"), EF_MIPS_ABI2, 0),
    flags(no_sysroot(arch("mipsn32el", elf::EM_MIPS, 32, false, "", "")), EF_MIPS_ABI2, EF_MIPS_ABI2),
    flags(no_sysroot(arch("mipsn32", elf::EM_MIPS, 32, true, "", "")), EF_MIPS_ABI2, EF_MIPS_ABI2),
    arch("mips64el", elf::EM_MIPS, 64, false, "mips64el-linux-gnuabi64", "libc6-mips64el-cross"),
    arch("mips64", elf::EM_MIPS, 64, true, "mips64-linux-gnuabi64", "libc6-mips64-cross"),
    arch("riscv64", elf::EM_RISCV, 64, false, "riscv64-linux-gnu", "libc6-riscv64-cross"),
    no_sysroot(arch("riscv32", elf::EM_RISCV, 32, false, "", "")),
    arch("aarch64", elf::EM_AARCH64, 64, false, "aarch64-linux-gnu", "libc6-arm64-cross"),
    no_sysroot(arch("aarch64_be", elf::EM_AARCH64, 64, true, "", "")),
    flags(
        arch("arm", elf::EM_ARM, 32, false, "arm-linux-gnueabihf", "libc6-armhf-cross"),
        EF_ARM_ABI_FLOAT_HARD,
        EF_ARM_ABI_FLOAT_HARD,
    ),
    arch("arm", elf::EM_ARM, 32, false, "arm-linux-gnueabi", "libc6-armel-cross"),
    no_sysroot(arch("armeb", elf::EM_ARM, 32, true, "", "")),
    arch("x86_64", elf::EM_X86_64, 64, false, "x86_64-linux-gnu", "libc6-amd64-cross"),
    arch("i386", elf::EM_386, 32, false, "i686-linux-gnu", "libc6-i386-cross"),
    arch("ppc", elf::EM_PPC, 32, true, "powerpc-linux-gnu", "libc6-powerpc-cross"),
    arch("ppc64", elf::EM_PPC64, 64, true, "powerpc64-linux-gnu", "libc6-ppc64-cross"),
    arch("ppc64le", elf::EM_PPC64, 64, false, "powerpc64le-linux-gnu", "libc6-ppc64el-cross"),
    arch("s390x", elf::EM_S390, 64, true, "s390x-linux-gnu", "libc6-s390x-cross"),
    arch("loongarch64", elf::EM_LOONGARCH, 64, false, "loongarch64-linux-gnu", "libc6-loong64-cross"),
    arch("sparc64", elf::EM_SPARCV9, 64, true, "sparc64-linux-gnu", "libc6-sparc64-cross"),
    arch("m68k", elf::EM_68K, 32, true, "m68k-linux-gnu", "libc6-m68k-cross"),
    arch("sh4", elf::EM_SH, 32, false, "sh4-linux-gnu", "libc6-sh4-cross"),
    arch("hppa", elf::EM_PARISC, 32, true, "hppa-linux-gnu", "libc6-hppa-cross"),
    arch("alpha", elf::EM_ALPHA, 64, false, "alpha-linux-gnu", "libc6-alpha-cross"),
];

/// The architecture of an ELF with these header fields, if QEMU has one.
pub fn lookup(machine: u16, bits: u8, big_endian: bool, e_flags: u32) -> Option<&'static Arch> {
    ARCHES.iter().find(|a| {
        a.machine == machine
            && a.bits == bits
            && a.big_endian == big_endian
            && e_flags & a.flags_mask == a.flags_value
    })
}

/// What the launcher needs to know about a guest program.
#[derive(Debug)]
pub struct Guest {
    /// Path of the guest program.
    pub path: PathBuf,
    /// The QEMU target that runs it.
    pub arch: &'static Arch,
    /// The `PT_INTERP` path of a dynamically linked program.
    pub interp: Option<String>,
}

/// The ELF header fields that select QEMU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfInfo {
    /// ELF `e_machine`.
    pub machine: u16,
    /// ELF class: 32 or 64.
    pub bits: u8,
    /// ELF data encoding: big-endian (`ELFDATA2MSB`).
    pub big_endian: bool,
    /// ELF `e_flags`: tells apart the targets of one machine (MIPS ABIs, ...).
    pub flags: u32,
    /// The `PT_INTERP` path; `None` for a statically linked program.
    pub interp: Option<String>,
}

/// What is wrong with a file that starts like an ELF file: the phrase
/// after "malformed ELF: " in [`Error::NotElf`].
#[derive(Debug, thiserror::Error)]
enum BadElf {
    /// The `object` crate could not parse it.
    #[error("{0}")]
    Parse(#[from] object::read::Error),
    /// Not an ELF file after all (another kind `object` knows).
    #[error("unexpected file kind {0:?}")]
    Kind(FileKind),
    /// A relocatable object.
    #[error("an object file (.o), not a linked program")]
    Object,
    /// A core dump.
    #[error("a core dump, not a program")]
    Core,
    /// Another ELF type.
    #[error("ELF type {0} is not a program")]
    Type(u16),
    /// A `PT_INTERP` segment naming nothing.
    #[error("empty PT_INTERP")]
    EmptyInterp,
}

/// Reads the ELF header and program headers of `path` (only those bytes).
pub fn elf_info(path: &Path) -> Result<ElfInfo, Error> {
    let not_elf = |what: String| Error::NotElf {
        path: path.to_path_buf(),
        what,
    };
    let mut file = File::open(path).map_err(|e| Error::Io {
        what: format!("cannot open {}", path.display()),
        source: e,
    })?;
    let mut magic = [0u8; 4];
    let n = file.read(&mut magic).unwrap_or(0);
    if n < 4 || magic != *b"\x7fELF" {
        let what = if n == 0 {
            "it is empty".to_string()
        } else if magic.starts_with(b"#!") {
            "it is a script; run the interpreter's guest binary on it instead".to_string()
        } else {
            "no ELF magic".to_string()
        };
        return Err(not_elf(what));
    }
    let data = ReadCache::new(file);
    let parsed = match FileKind::parse(&data) {
        Ok(FileKind::Elf32) => header::<elf::FileHeader32<Endianness>, _>(&data, 32),
        Ok(FileKind::Elf64) => header::<elf::FileHeader64<Endianness>, _>(&data, 64),
        Ok(k) => Err(BadElf::Kind(k)),
        Err(e) => Err(BadElf::Parse(e)),
    };
    parsed.map_err(|e| not_elf(format!("malformed ELF: {e}")))
}

fn header<'d, H: FileHeader<Endian = Endianness>, R: ReadRef<'d>>(
    data: R,
    bits: u8,
) -> Result<ElfInfo, BadElf> {
    let h = H::parse(data)?;
    let endian = h.endian()?;
    match h.e_type(endian) {
        elf::ET_EXEC | elf::ET_DYN => {}
        elf::ET_REL => return Err(BadElf::Object),
        elf::ET_CORE => return Err(BadElf::Core),
        t => return Err(BadElf::Type(t)),
    }
    let mut interp = None;
    for ph in h.program_headers(endian, data)? {
        if ph.p_type(endian) == elf::PT_INTERP {
            let i = ph.interpreter(endian, data)?.ok_or(BadElf::EmptyInterp)?;
            interp = Some(String::from_utf8_lossy(i).into_owned());
        }
    }
    Ok(ElfInfo {
        machine: h.e_machine(endian),
        bits,
        big_endian: endian == Endianness::Big,
        flags: h.e_flags(endian),
        interp,
    })
}

/// Reads `path`'s ELF header and finds its QEMU architecture.
pub fn inspect(path: &Path) -> Result<Guest, Error> {
    let info = elf_info(path)?;
    let arch = lookup(info.machine, info.bits, info.big_endian, info.flags).ok_or_else(|| {
        Error::UnsupportedArch {
            path: path.to_path_buf(),
            machine: info.machine,
            bits: info.bits,
            big_endian: info.big_endian,
        }
    })?;
    Ok(Guest {
        path: path.to_path_buf(),
        arch,
        interp: info.interp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(machine: u16, bits: u8, be: bool, flags: u32) -> Option<&'static str> {
        lookup(machine, bits, be, flags).map(|a| a.name)
    }

    #[test]
    fn table() {
        assert_eq!(name(elf::EM_MIPS, 32, false, 0x7000_1007), Some("mipsel"));
        assert_eq!(name(elf::EM_MIPS, 32, true, 0x7000_1007), Some("mips"));
        assert_eq!(name(elf::EM_MIPS, 32, false, 0x20), Some("mipsn32el"));
        assert_eq!(name(elf::EM_MIPS, 64, false, 0), Some("mips64el"));
        assert_eq!(name(elf::EM_RISCV, 64, false, 5), Some("riscv64"));
        assert_eq!(name(elf::EM_AARCH64, 64, false, 0), Some("aarch64"));
        assert_eq!(name(elf::EM_X86_64, 64, false, 0), Some("x86_64"));
        assert_eq!(name(elf::EM_PPC64, 64, false, 2), Some("ppc64le"));
        assert_eq!(name(0x1234, 64, false, 0), None);
        let hf = lookup(elf::EM_ARM, 32, false, 0x0500_0400).unwrap();
        assert_eq!(hf.triple, Some("arm-linux-gnueabihf"));
        let el = lookup(elf::EM_ARM, 32, false, 0x0500_0200).unwrap();
        assert_eq!(el.triple, Some("arm-linux-gnueabi"));
        let m = lookup(elf::EM_MIPS, 32, false, 0).unwrap();
        assert_eq!(m.qemu_binary(), "qemu-mipsel");
        assert_eq!(m.qemu_target(), "mipsel-linux-user");
        assert_eq!(m.sysroot().unwrap(), Path::new("/usr/mipsel-linux-gnu"));
        assert_eq!(m.libc_package, Some("libc6-mipsel-cross"));
        assert!(
            lookup(elf::EM_X86_64, 64, false, 0).unwrap().is_host() == cfg!(target_arch = "x86_64")
        );
    }

    /// A minimal ELF header (no program headers).
    fn ehdr64(machine: u16, big_endian: bool, e_type: u16) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2; // ELFCLASS64
        h[5] = if big_endian { 2 } else { 1 };
        h[6] = 1; // EV_CURRENT
        let put16 = |h: &mut Vec<u8>, at: usize, v: u16| {
            let b = if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            };
            h[at..at + 2].copy_from_slice(&b);
        };
        put16(&mut h, 16, e_type);
        put16(&mut h, 18, machine);
        h[20] = if big_endian { 0 } else { 1 }; // e_version, low byte
        if big_endian {
            h[23] = 1;
        }
        put16(&mut h, 52, 64); // e_ehsize
        put16(&mut h, 54, 56); // e_phentsize
        h
    }

    fn tmp(name: &str, bytes: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("launch-test-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn synthetic_headers() {
        let p = tmp("s390x", &ehdr64(elf::EM_S390, true, elf::ET_EXEC));
        let g = inspect(&p).unwrap();
        assert_eq!((g.arch.name, g.interp), ("s390x", None));

        let p2 = tmp("weird", &ehdr64(0x4242, false, elf::ET_DYN));
        let e = inspect(&p2).unwrap_err().to_string();
        assert!(
            e.contains("0x4242") && e.contains("64-bit little-endian"),
            "{e}"
        );

        let p3 = tmp("rel", &ehdr64(elf::EM_X86_64, false, elf::ET_REL));
        let e = inspect(&p3).unwrap_err().to_string();
        assert!(e.contains("object file"), "{e}");

        let p4 = tmp("script", b"#!/bin/sh\necho hi\n");
        let e = inspect(&p4).unwrap_err().to_string();
        assert!(e.contains("not an ELF") && e.contains("script"), "{e}");

        let p5 = tmp("empty", b"");
        assert!(inspect(&p5).unwrap_err().to_string().contains("empty"));
        for p in [p, p2, p3, p4, p5] {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Programs built by Debian's cross compiler for each guest of the
    /// tested matrix (static and dynamic, ARM in Thumb-2 and A32) run under
    /// that guest's QEMU, and a dynamic one finds its interpreter in the
    /// guest's sysroot. A compiler that is not installed is skipped
    /// (scripts/deps.sh installs them all).
    #[test]
    fn every_guest_of_the_matrix() {
        let dir = std::env::temp_dir().join(format!("launch-matrix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("p.c");
        std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
        let mut tried = 0;
        for (arch, cc, flags) in [
            ("mipsel", "mipsel-linux-gnu-gcc", ""),
            ("mips", "mips-linux-gnu-gcc", ""),
            ("mips64el", "mips64el-linux-gnuabi64-gcc", ""),
            ("arm", "arm-linux-gnueabihf-gcc", ""),
            ("arm", "arm-linux-gnueabihf-gcc", "-marm"),
            ("aarch64", "aarch64-linux-gnu-gcc", ""),
            ("riscv64", "riscv64-linux-gnu-gcc", ""),
            ("i386", "i686-linux-gnu-gcc", ""),
            ("ppc64le", "powerpc64le-linux-gnu-gcc", ""),
        ] {
            for link in ["-static", "-O1"] {
                let exe = dir.join(format!("{arch}{flags}{link}"));
                let built = std::process::Command::new(cc)
                    .args([link, "-o"])
                    .arg(&exe)
                    .arg(&src)
                    .args(flags.split_whitespace())
                    .status();
                if !matches!(built, Ok(s) if s.success()) {
                    eprintln!("skipping {arch}: {cc} is not installed");
                    continue;
                }
                tried += 1;
                let g = inspect(&exe).unwrap();
                assert_eq!(g.arch.name, arch, "{cc} {flags} {link}");
                match (&g.interp, link) {
                    (None, "-static") => {}
                    (Some(interp), "-O1") => {
                        let root = g.arch.sysroot().unwrap();
                        let ld = root.join(interp.trim_start_matches('/'));
                        assert!(ld.exists(), "{arch}: {} missing", ld.display());
                    }
                    (i, _) => panic!("{arch} {link}: interpreter {i:?}"),
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!("{tried} guest programs classified");
    }

    #[test]
    fn host_binary_is_dynamic() {
        // Any dynamically linked host program will do.
        let exe = Path::new("/bin/sh");
        if cfg!(target_arch = "x86_64") && exe.exists() {
            let g = inspect(exe).unwrap();
            assert_eq!(g.arch.name, "x86_64");
            assert!(g.interp.is_some());
        }
    }
}
