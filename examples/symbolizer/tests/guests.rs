// SPDX-License-Identifier: GPL-2.0-or-later
//! End to end on every guest of the matrix: `tests/programs/exitcode.c`,
//! built by Debian's cross compilers (32- and 64-bit, big- and
//! little-endian, ARM in Thumb-2 and in A32), traced by the `symbolizer`
//! binary under the patched QEMU. Every printed `name+offset` must be where
//! the cross `nm` puts that function (ARM Thumb symbols have bit 0 set, the
//! code does not), the first instruction must be the ELF entry point, and
//! `main`'s lines must be instructions of `main` as the cross `objdump`
//! disassembles it.
//!
//! Needs the cross compilers and binutils (`scripts/deps.sh`) and a patched
//! QEMU for each guest (`scripts/build-qemu.sh`, or `$CANNOLI_QEMU_BUILD`).
//! These tests fail when something is missing; they never skip.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use object::{Object, ObjectSymbol};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("symbolizer-guests-{}-{name}", std::process::id()))
}

/// `target/guests/<arch>/exitcode`, built once per arch and test process by
/// `scripts/build-guests.sh` (which skips what is up to date).
fn guest(arch: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap_or_else(|p| p.into_inner());
    if !built.contains(arch) {
        let out = Command::new("bash")
            .arg(workspace().join("scripts/build-guests.sh"))
            .args(["--quiet", arch])
            .current_dir(workspace())
            .stdin(Stdio::null())
            .output()
            .expect("cannot run scripts/build-guests.sh");
        assert!(
            out.status.success(),
            "scripts/build-guests.sh {arch} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        built.insert(arch.to_string());
    }
    let p = workspace()
        .join("target/guests")
        .join(arch)
        .join("exitcode");
    assert!(p.is_file(), "{} missing after build-guests.sh", p.display());
    p
}

/// `exitcode` in A32 (`-marm`), built here: its start-up code and C library
/// are Thumb-2, its own functions A32.
fn guest_a32() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = tmp("exitcode-a32");
            let o = Command::new("arm-linux-gnueabihf-gcc")
                .args(["-marm", "-O2", "-static", "-g0", "-o"])
                .arg(&out)
                .arg(workspace().join("tests/programs/exitcode.c"))
                .output()
                .expect("cannot run arm-linux-gnueabihf-gcc (scripts/deps.sh installs it)");
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            out
        })
        .clone()
}

/// The `symbolizer` binary, with its hook library built next to it.
fn symbolizer() -> PathBuf {
    e2e::tool_exe(env!("CARGO_BIN_EXE_symbolizer"))
}

/// Debian's cross binutils prefix for `arch`.
fn binutils(arch: &str) -> &'static str {
    match arch {
        "mipsel" => "mipsel-linux-gnu-",
        "mips" => "mips-linux-gnu-",
        "mips64el" => "mips64el-linux-gnuabi64-",
        "arm" => "arm-linux-gnueabihf-",
        "aarch64" => "aarch64-linux-gnu-",
        "riscv64" => "riscv64-linux-gnu-",
        "i386" => "i686-linux-gnu-",
        "ppc64le" => "powerpc64le-linux-gnu-",
        _ => "",
    }
}

fn tool_output(arch: &str, tool: &str, args: &[&str], prog: &Path) -> String {
    let cmd = format!("{}{tool}", binutils(arch));
    let o = Command::new(&cmd)
        .args(args)
        .arg(prog)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd} (scripts/deps.sh installs it): {e}"));
    assert!(
        o.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The functions `nm -S` lists: name -> every (address, size) it has
/// (static functions of different files may share a name; an assembler
/// function without a size, like `_start`, gets `u64::MAX`).
fn nm_functions(arch: &str, prog: &Path) -> HashMap<String, Vec<(u64, u64)>> {
    let mut m: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
    for l in tool_output(arch, "nm", &["-S", "--defined-only"], prog).lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (a, sz, t, n) = match f.as_slice() {
            [a, sz, t, n] => (*a, Some(*sz), *t, *n),
            [a, t, n] => (*a, None, *t, *n),
            _ => continue,
        };
        if matches!(t, "T" | "t" | "W" | "i") {
            let a = u64::from_str_radix(a, 16).unwrap();
            let sz = sz.map_or(u64::MAX, |s| u64::from_str_radix(s, 16).unwrap());
            m.entry(n.to_string()).or_default().push((a, sz));
        }
    }
    m
}

/// The instruction addresses of function `name`, as objdump disassembles
/// it (data in the code left out).
fn objdump_insns(arch: &str, prog: &Path, name: &str) -> HashSet<u64> {
    let text = tool_output(arch, "objdump", &["-d", "-w", "--no-show-raw-insn"], prog);
    let mut inside = false;
    let mut v = HashSet::new();
    for l in text.lines() {
        if let Some((_, r)) = l.split_once(" <") {
            if let Some(sym) = r.strip_suffix(">:") {
                inside = sym == name;
                continue;
            }
        }
        if !inside {
            continue;
        }
        if let Some((addr, insn)) = l.split_once(":\t") {
            if let Ok(a) = u64::from_str_radix(addr.trim(), 16) {
                if !insn.trim_start().starts_with('.') {
                    v.insert(a);
                }
            }
        }
    }
    v
}

/// One trace line: pc, and the name and offset, if any (code in no symbol
/// or section, like QEMU's signal trampoline page, is the pc alone).
type Step = (u64, Option<(String, u64)>);

fn parse_line(l: &str) -> Option<Step> {
    let l = l.trim_start();
    let (pc, loc) = l.split_once(' ').unwrap_or((l, ""));
    let pc = u64::from_str_radix(pc.strip_prefix("0x")?, 16).ok()?;
    if loc.is_empty() {
        return Some((pc, None));
    }
    let (name, off) = loc.rsplit_once('+')?;
    let off = u64::from_str_radix(off.strip_prefix("0x")?, 16).ok()?;
    Some((pc, Some((name.to_string(), off))))
}

fn symbolizes(arch: &str, prog: &Path) {
    let out_file = tmp(&format!(
        "{arch}-{}.txt",
        prog.file_name().unwrap().to_string_lossy()
    ));
    let o = Command::new(symbolizer())
        .args(["--no-mem", "-o"])
        .arg(&out_file)
        .arg(prog)
        .args(["3", "four"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{arch}: {err}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "exitcode: argc 3 [3] [four]\n",
        "{arch}: {err}"
    );
    assert!(err.contains(" 0 lost"), "{arch}: {err}");
    let text = std::fs::read_to_string(&out_file).unwrap();
    let _ = std::fs::remove_file(&out_file);

    let data = std::fs::read(prog).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let arm = elf.architecture() == object::Architecture::Arm;
    let funcs = nm_functions(arch, prog);
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("== pid "), "{text:.200}");
    let steps: Vec<Step> = lines
        .map(|l| parse_line(l).unwrap_or_else(|| panic!("{arch}: bad line {l:?}")))
        .collect();
    assert!(steps.len() > 10_000, "{arch}: {} lines", steps.len());

    // The first instruction is the ELF entry point (without the Thumb
    // bit), at the start of the function there (`_start`, MIPS `__start`).
    let entry = elf.entry() & if arm { !1 } else { !0 };
    let (pc, loc) = &steps[0];
    assert_eq!(*pc, entry, "{arch}: entry {:#x}", elf.entry());
    let (name, off) = loc.as_ref().expect("the entry point has a name");
    assert_eq!(*off, 0, "{arch}: {name}");
    assert!(
        funcs[name].iter().any(|&(a, _)| a == entry),
        "{arch}: {name} is not at the entry point"
    );

    // Every line naming a sized function is where nm puts it.
    let mut checked = 0;
    for (pc, loc) in &steps {
        let Some((name, off)) = loc else { continue };
        let Some(places) = funcs.get(name) else {
            continue;
        };
        assert!(
            places.iter().any(|&(a, sz)| a + off == *pc && *off < sz),
            "{arch}: {pc:#x} {name}+{off:#x}, nm has {name} at {places:x?}"
        );
        checked += 1;
    }
    assert!(
        checked * 10 > steps.len() * 9,
        "{arch}: only {checked} of {} lines name a function nm knows",
        steps.len()
    );

    // main's lines are main's instructions, from its first.
    let insns = objdump_insns(arch, prog, "main");
    let in_main: Vec<u64> = steps
        .iter()
        .filter(|s| s.1.as_ref().is_some_and(|(n, _)| n == "main"))
        .map(|s| s.0)
        .collect();
    assert!(in_main.len() >= 5, "{arch}: {in_main:x?}");
    for pc in &in_main {
        assert!(
            insns.contains(pc),
            "{arch}: {pc:#x} is no instruction of main"
        );
    }
    let main_start = elf
        .symbols()
        .find(|s| s.name() == Ok("main"))
        .unwrap()
        .address()
        & if arm { !1 } else { !0 };
    assert_eq!(in_main[0], main_start, "{arch}");
}

#[test]
fn mipsel() {
    symbolizes("mipsel", &guest("mipsel"));
}

/// Big-endian, 32-bit.
#[test]
fn mips() {
    symbolizes("mips", &guest("mips"));
}

/// 64-bit, linked above 4 GiB.
#[test]
fn mips64el() {
    symbolizes("mips64el", &guest("mips64el"));
}

/// Thumb-2: function symbols with bit 0 set.
#[test]
fn arm_thumb() {
    symbolizes("arm", &guest("arm"));
}

/// A32 functions next to the C library's Thumb-2 ones.
#[test]
fn arm_a32() {
    symbolizes("arm", &guest_a32());
}

#[test]
fn aarch64() {
    symbolizes("aarch64", &guest("aarch64"));
}

#[test]
fn riscv64() {
    symbolizes("riscv64", &guest("riscv64"));
}

#[test]
fn x86_64() {
    symbolizes("x86_64", &guest("x86_64"));
}

#[test]
fn i386() {
    symbolizes("i386", &guest("i386"));
}

/// ELFv2: main is called at its global entry (through a function pointer),
/// other functions at their local entry, 8 bytes in.
#[test]
fn ppc64le() {
    symbolizes("ppc64le", &guest("ppc64le"));
}
