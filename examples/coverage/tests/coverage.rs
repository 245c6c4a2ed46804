// SPDX-License-Identifier: GPL-2.0-or-later
//! End-to-end tests of the coverage example: runs `coverage` on guest
//! programs under the patched QEMU, parses the drcov file it wrote (with a
//! parser of its own, strict about the format) and checks it against the
//! programs' symbol tables, their ELF segments, QEMU's own drcov plugin and
//! the tool's summary.
//!
//! Every guest of the matrix is covered: a static program on each (ARM
//! both in Thumb-2, Debian's default, and in A32), compared byte for byte
//! with QEMU's drcov plugin, and a dynamically linked one on each but
//! x86_64 (the host's own).
//!
//! Needs `cargo build --release` first (target/release/coverage and
//! libcoverage.so), the QEMU builds (`CANNOLI_QEMU_BUILD` /
//! `CANNOLI_QEMU_PLAIN`, else target/qemu.env), the guest programs
//! (built on demand by scripts/build-guests.sh), Debian's cross compilers
//! and sysroots, busybox for mipsel (scripts/fetch-busybox.sh) and a host
//! C compiler (for the shim that lets QEMU 10.0.13 load its drcov plugin,
//! see `qemu_drcov`).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use e2e::{guest, qemu_builds, qemu_common_args, tail, workspace_root, RunDir};
use object::{Object, ObjectSegment, ObjectSymbol};

// ---------------------------------------------------------------------------
// The drcov format
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Module {
    base: u64,
    end: u64,
    entry: u64,
    path: String,
}

#[derive(Debug)]
struct Drcov {
    flavor: String,
    modules: Vec<Module>,
    /// (module, start offset, size)
    bbs: Vec<(u16, u32, u16)>,
}

fn hex(s: &str) -> u64 {
    let s = s.trim();
    let h = s
        .strip_prefix("0x")
        .unwrap_or_else(|| panic!("{s:?} is not 0x-prefixed hex"));
    u64::from_str_radix(h, 16).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// Parses a drcov file as DynamoRIO's drcov v2 (module table version 2,
/// Linux columns) defines it, panicking on anything else.
fn parse_drcov(data: &[u8]) -> Drcov {
    let mut pos = 0;
    let mut line = || -> String {
        let nl = data[pos..]
            .iter()
            .position(|&b| b == b'\n')
            .expect("header line without a newline");
        let l = std::str::from_utf8(&data[pos..pos + nl]).expect("header is not UTF-8");
        pos += nl + 1;
        l.to_string()
    };
    assert_eq!(line(), "DRCOV VERSION: 2");
    let flavor = line()
        .strip_prefix("DRCOV FLAVOR: ")
        .expect("DRCOV FLAVOR line")
        .to_string();
    let mt = line();
    let count: usize = mt
        .strip_prefix("Module Table: version 2, count ")
        .unwrap_or_else(|| panic!("bad module table line {mt:?}"))
        .parse()
        .unwrap();
    assert_eq!(line(), "Columns: id, base, end, entry, path");
    let mut modules = Vec::new();
    for want_id in 0..count {
        let l = line();
        let f: Vec<&str> = l.splitn(5, ", ").collect();
        assert_eq!(f.len(), 5, "module line {l:?}");
        assert_eq!(f[0].trim().parse::<usize>().unwrap(), want_id, "{l:?}");
        let m = Module {
            base: hex(f[1]),
            end: hex(f[2]),
            entry: hex(f[3]),
            path: f[4].to_string(),
        };
        modules.push(m);
    }
    let bt = line();
    let n: usize = bt
        .strip_prefix("BB Table: ")
        .and_then(|r| r.strip_suffix(" bbs"))
        .unwrap_or_else(|| panic!("bad BB table line {bt:?}"))
        .parse()
        .unwrap();
    let body = &data[pos..];
    assert_eq!(
        body.len(),
        n * 8,
        "BB table: {n} entries announced, {} bytes",
        body.len()
    );
    let bbs = body
        .chunks_exact(8)
        .map(|e| {
            let start = u32::from_le_bytes(e[0..4].try_into().unwrap());
            let size = u16::from_le_bytes(e[4..6].try_into().unwrap());
            let module = u16::from_le_bytes(e[6..8].try_into().unwrap());
            (module, start, size)
        })
        .collect();
    Drcov {
        flavor,
        modules,
        bbs,
    }
}

impl Drcov {
    fn module(&self, name: &str) -> usize {
        let found: Vec<usize> = (0..self.modules.len())
            .filter(|&i| Path::new(&self.modules[i].path).file_name() == Some(name.as_ref()))
            .collect();
        assert_eq!(found.len(), 1, "modules named {name}: {:#?}", self.modules);
        found[0]
    }

    /// Absolute `[start, end)` of each block of module `m`.
    fn blocks(&self, m: usize) -> Vec<(u64, u64)> {
        let base = self.modules[m].base;
        let mut v: Vec<(u64, u64)> = self
            .bbs
            .iter()
            .filter(|b| b.0 as usize == m)
            .map(|&(_, s, z)| (base + s as u64, base + s as u64 + z as u64))
            .collect();
        v.sort();
        v
    }

    /// Covered bytes of module `m`.
    fn bytes(&self, m: usize) -> BTreeSet<u64> {
        self.blocks(m).into_iter().flat_map(|(s, e)| s..e).collect()
    }

    fn covered(&self, m: usize, addr: u64) -> bool {
        self.blocks(m).iter().any(|&(s, e)| s <= addr && addr < e)
    }

    fn any_covered(&self, m: usize, lo: u64, hi: u64) -> bool {
        self.blocks(m).iter().any(|&(s, e)| s < hi && lo < e)
    }
}

// ---------------------------------------------------------------------------
// The guest's ELF files
// ---------------------------------------------------------------------------

struct Elf {
    data: Vec<u8>,
}

impl Elf {
    fn read(path: &Path) -> Elf {
        Elf {
            data: fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        }
    }
    fn file(&self) -> object::File<'_> {
        object::File::parse(&*self.data).unwrap()
    }
    /// Address and size of function `name` (symbol table, else dynamic
    /// symbols), as linked. An ARM Thumb function's symbol has bit 0 set
    /// (the interworking bit); its code starts at the even address.
    fn func(&self, name: &str) -> (u64, u64) {
        let f = self.file();
        let found = f
            .symbols()
            .chain(f.dynamic_symbols())
            .find(|s| s.name() == Ok(name) && s.address() != 0)
            .unwrap_or_else(|| panic!("no symbol {name}"));
        let thumb_bit = match f.architecture() {
            object::Architecture::Arm => 1,
            _ => 0,
        };
        (found.address() & !thumb_bit, found.size())
    }
    /// Where a call of function `name` starts running it, as linked: its
    /// start, or on ppc64le (ELFv2) its local entry point, past the two
    /// instructions that set up the TOC pointer, which a call from code
    /// sharing the TOC skips (`st_other` holds the distance: 0 and 1 mean
    /// none, n means `1 << n` bytes). A function reached only that way never
    /// runs its first instructions.
    fn entry_point(&self, name: &str) -> u64 {
        let (start, _) = self.func(name);
        let f = self.file();
        if f.architecture() != object::Architecture::PowerPc64 {
            return start;
        }
        let sym = f
            .symbols()
            .chain(f.dynamic_symbols())
            .find(|s| s.name() == Ok(name) && s.address() != 0)
            .unwrap();
        match sym.flags() {
            object::SymbolFlags::Elf { st_other, .. } if st_other >> 5 >= 2 => {
                start + (1 << (st_other >> 5))
            }
            _ => start,
        }
    }
    /// The linked address of file offset 0 (what drcov offsets count from).
    fn vaddr0(&self) -> u64 {
        let f = self.file();
        let s = f
            .segments()
            .find(|s| s.file_range().0 == 0)
            .expect("no segment at file offset 0");
        s.address()
    }
    /// Linked `[start, end)` of the executable segments.
    fn exec_segments(&self) -> Vec<(u64, u64)> {
        use object::read::elf::ProgramHeader;
        let mut v = Vec::new();
        match self.file() {
            object::File::Elf32(f) => {
                let e = f.endian();
                for ph in f.elf_program_headers() {
                    if ph.p_type(e) == object::elf::PT_LOAD
                        && ph.p_flags(e) & object::elf::PF_X != 0
                    {
                        v.push((ph.p_vaddr(e) as u64, (ph.p_vaddr(e) + ph.p_memsz(e)) as u64));
                    }
                }
            }
            object::File::Elf64(f) => {
                let e = f.endian();
                for ph in f.elf_program_headers() {
                    if ph.p_type(e) == object::elf::PT_LOAD
                        && ph.p_flags(e) & object::elf::PF_X != 0
                    {
                        v.push((ph.p_vaddr(e), ph.p_vaddr(e) + ph.p_memsz(e)));
                    }
                }
            }
            _ => panic!("not ELF"),
        }
        assert!(!v.is_empty());
        v
    }
}

/// Every block of module `m` lies in an executable segment of its file,
/// inside the module's `[base, end)`; blocks do not overlap; sizes are
/// multiples of `align`.
fn check_blocks(d: &Drcov, m: usize, align: u64) {
    let module = &d.modules[m];
    let elf = Elf::read(Path::new(&module.path));
    let segs = elf.exec_segments();
    let v0 = elf.vaddr0();
    let blocks = d.blocks(m);
    assert!(!blocks.is_empty(), "module {} has no blocks", module.path);
    let mut prev_end = 0;
    for &(s, e) in &blocks {
        assert!(
            s >= prev_end,
            "{}: overlapping blocks at {s:#x}",
            module.path
        );
        prev_end = e;
        assert!(
            module.base <= s && e <= module.end,
            "{}: block {s:#x}-{e:#x} outside the module {:#x}-{:#x}",
            module.path,
            module.base,
            module.end
        );
        assert_eq!((e - s) % align, 0, "{}: block {s:#x}-{e:#x}", module.path);
        let (ls, le) = (s - module.base + v0, e - module.base + v0);
        assert!(
            segs.iter().any(|&(a, b)| a <= ls && le <= b),
            "{}: block at linked {ls:#x}-{le:#x} is not in an executable segment {segs:x?}",
            module.path
        );
    }
}

// ---------------------------------------------------------------------------
// Running things
// ---------------------------------------------------------------------------

fn coverage_exe() -> PathBuf {
    e2e::tool_exe(env!("CARGO_BIN_EXE_coverage"))
}

struct Run {
    stdout: String,
    stderr: String,
    drcov: Drcov,
}

/// One summary row: (id, blocks, insns, path).
fn summary(stderr: &str) -> Vec<(usize, usize, usize, String)> {
    let mut rows = Vec::new();
    let mut inside = false;
    for l in stderr.lines() {
        if l.trim_start().starts_with("id ") && l.contains("blocks") {
            inside = true;
            continue;
        }
        if inside {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.first().and_then(|x| x.parse::<usize>().ok()) {
                Some(id) if f.len() >= 7 => rows.push((
                    id,
                    f[1].parse().unwrap(),
                    f[2].parse().unwrap(),
                    f[6..].join(" "),
                )),
                _ => inside = false,
            }
        }
    }
    rows
}

/// `N instructions from M exec events` of the summary.
fn counts(stderr: &str) -> (u64, u64) {
    let l = stderr
        .lines()
        .find(|l| l.starts_with("coverage: wrote "))
        .unwrap_or_else(|| panic!("no summary line in:\n{stderr}"));
    let w: Vec<&str> = l.split_whitespace().collect();
    let at = |word: &str| -> u64 {
        let i = w.iter().position(|x| *x == word).unwrap();
        w[i - 1].parse().unwrap()
    };
    let events_i = w.iter().position(|x| *x == "from").unwrap() + 1;
    (at("instructions"), w[events_i].parse().unwrap())
}

/// Runs `coverage -o <dir>/<tag>.drcov prog args` with an empty environment
/// (plus where QEMU is, and the options every e2e run gets), stdout to a
/// file, in `dir`.
fn run_coverage(dir: &RunDir, tag: &str, arch: &str, prog: &Path, args: &[&str]) -> Run {
    let q = qemu_builds();
    let out = dir.file(&format!("{tag}.drcov"));
    let stdout = dir.file(&format!("{tag}.stdout"));
    let mut cmd = Command::new(coverage_exe());
    cmd.arg("-o")
        .arg(&out)
        .arg(prog)
        .args(args)
        .env_clear()
        .env("CANNOLI_QEMU_BUILD", &q.build)
        .env("CANNOLI_QEMU_ARGS", common_args(arch).join(" "))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(fs::File::create(&stdout).unwrap())
        .stderr(Stdio::piped());
    let o = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        o.status.success(),
        "coverage {} {args:?} failed: {}\n{}",
        prog.display(),
        o.status,
        tail(&stderr, 30)
    );
    let data = fs::read(&out).unwrap_or_else(|e| panic!("{}: {e}\n{stderr}", out.display()));
    let drcov = parse_drcov(&data);
    for m in &drcov.modules {
        assert!(m.base < m.end, "{m:?}");
    }
    // The summary matches the file: one row per module, same block counts.
    let rows = summary(&stderr);
    assert_eq!(rows.len(), drcov.modules.len(), "{stderr}");
    for (id, blocks, insns, path) in &rows {
        assert_eq!(path, &drcov.modules[*id].path, "{stderr}");
        let n = drcov.bbs.iter().filter(|b| b.0 as usize == *id).count();
        assert_eq!(*blocks, n, "module {id} block count\n{stderr}");
        assert!(*insns >= *blocks, "{stderr}");
    }
    Run {
        stdout: fs::read_to_string(&stdout).unwrap(),
        stderr,
        drcov,
    }
}

/// The options every e2e run gets, but no `-R` for x86-64 and mips64el:
/// QEMU cannot place the x86-64 vsyscall page (0xffffffffff600000) in a
/// reserved space ("Cannot allocate vsyscall page"), and a mips64el
/// program is linked at 0x120000000, above the 4 GiB reservation. Static
/// code does not move without it, and the comparisons are per module.
fn common_args(arch: &str) -> Vec<&'static str> {
    let mut v = qemu_common_args(arch);
    if arch == "x86_64" || arch == "mips64el" {
        if let Some(i) = v.iter().position(|a| *a == "-R") {
            v.drain(i..i + 2);
        }
    }
    v
}

/// QEMU's `contrib/plugins/libdrcov.so`, built if missing.
fn drcov_plugin() -> PathBuf {
    // One build at a time: the tests run on parallel threads.
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = BUILDING.lock().unwrap_or_else(|p| p.into_inner());
    let q = qemu_builds();
    let lib = q.build.join("contrib/plugins/libdrcov.so");
    if !lib.is_file() {
        let st = Command::new("ninja")
            .arg("-C")
            .arg(&q.build)
            .arg("contrib/plugins/libdrcov.so")
            .stdout(Stdio::null())
            .status();
        assert!(
            matches!(st, Ok(s) if s.success()) && lib.is_file(),
            "cannot build {} (`ninja -C {} contrib/plugins/libdrcov.so`: {st:?})",
            lib.display(),
            q.build.display()
        );
    }
    lib
}

/// QEMU 10.0.13's linux-user binaries do not export
/// `qemu_plugin_path_to_binary`, `qemu_plugin_start_code`,
/// `qemu_plugin_end_code` and `qemu_plugin_entry_code` (linux-user/meson.build
/// adds plugin-api.c under `CONFIG_TCG_PLUGINS`, a symbol 10.0 does not
/// define), so libdrcov.so fails to load ("undefined symbol"). The drcov
/// plugin only prints them in its module line, so a preloaded shim that
/// defines them lets it run; its BB table (absolute pcs of executed
/// translation blocks, QEMU's `start` field) is what we compare.
fn shim(dir: &RunDir) -> PathBuf {
    let src = dir.file("shim.c");
    let so = dir.file("shim.so");
    fs::write(
        &src,
        "#include <stdint.h>\n\
         const char *qemu_plugin_path_to_binary(void) { return \"shim\"; }\n\
         uint64_t qemu_plugin_start_code(void) { return 0; }\n\
         uint64_t qemu_plugin_end_code(void) { return 0; }\n\
         uint64_t qemu_plugin_entry_code(void) { return 0; }\n",
    )
    .unwrap();
    let st = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .status();
    assert!(
        matches!(st, Ok(s) if s.success()),
        "cannot compile the plugin API shim with the host's cc: {st:?}"
    );
    so
}

/// The bytes QEMU's drcov plugin reports covered in `[lo, hi)` for
/// `prog args`, run like [`run_coverage`] runs it (same empty guest
/// environment: `-U LD_PRELOAD` hides the shim from the guest).
fn qemu_drcov(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
    lo: u64,
    hi: u64,
) -> BTreeSet<u64> {
    let q = qemu_builds();
    let out = dir.file(&format!("{tag}.qemu.drcov"));
    let mut spec = drcov_plugin().into_os_string();
    spec.push(",filename=");
    spec.push(&out);
    let o = Command::new(q.qemu(arch))
        .args(common_args(arch))
        .args(["-U", "LD_PRELOAD", "-plugin"])
        .arg(spec)
        .arg(prog)
        .args(args)
        .env_clear()
        .env("LD_PRELOAD", shim(dir))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(fs::File::create(dir.file(&format!("{tag}.qemu.stdout"))).unwrap())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let d = parse_drcov(&fs::read(&out).unwrap());
    assert_eq!(d.modules.len(), 1);
    let mut bytes = BTreeSet::new();
    // QEMU writes the absolute pc truncated to 32 bits as the start: a
    // module above 4 GiB (mips64el programs are linked at 0x120000000) gets
    // its high bits back, as long as it does not straddle a 4 GiB line.
    let high = lo & !0xffff_ffff;
    assert_eq!((hi - 1) & !0xffff_ffff, high, "{lo:#x}-{hi:#x}");
    for &(m, start, size) in &d.bbs {
        assert_eq!(m, 0);
        let s = high | start as u64;
        if s >= lo && s < hi {
            bytes.extend(s..s + size as u64);
        }
    }
    assert!(!bytes.is_empty());
    bytes
}

fn summarize(b: &BTreeSet<u64>) -> String {
    let v: Vec<String> = b.iter().take(8).map(|a| format!("{a:#x}")).collect();
    format!("{} bytes: {}", b.len(), v.join(" "))
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

fn static_program(dir: &RunDir, arch: &str, prog: &Path, insn_align: u64, flavor: &str) {
    let prog = prog.to_path_buf();
    let name = prog.file_name().unwrap().to_str().unwrap();
    let elf = Elf::read(&prog);
    let plain = run_coverage(dir, "plain", arch, &prog, &[]);
    let extra = run_coverage(dir, "extra", arch, &prog, &["extra"]);
    assert!(plain.stdout.starts_with("cov_funcs: "), "{}", plain.stdout);

    for (run, with_extra) in [(&plain, false), (&extra, true)] {
        let d = &run.drcov;
        assert_eq!(d.flavor, flavor);
        let m = d.module(name);
        let module = &d.modules[m];
        assert_eq!(Path::new(&module.path), prog, "{:#?}", d.modules);
        // A static non-PIE program: linked addresses are run addresses.
        assert_eq!(module.base, elf.vaddr0());
        assert_eq!(module.entry, elf.file().entry());
        // The first instruction that ran.
        assert!(
            d.covered(m, module.entry),
            "entry {:#x} not covered",
            module.entry
        );
        for f in ["main", "cov_always", "cov_loop", "cov_branch", "printf"] {
            let a = elf.entry_point(f);
            assert!(
                d.covered(m, a),
                "{f} at {a:#x} not covered ({})",
                run.stderr
            );
        }
        let (never, never_size) = elf.func("cov_never");
        assert!(never_size > 0);
        assert!(
            !d.any_covered(m, never, never + never_size),
            "cov_never covered"
        );
        let odd = elf.entry_point("cov_odd");
        let even = elf.entry_point("cov_even");
        let x = elf.entry_point("cov_extra");
        assert_eq!(d.covered(m, x), with_extra, "cov_extra");
        assert_eq!(d.covered(m, odd), with_extra, "cov_odd");
        assert_eq!(d.covered(m, even), !with_extra, "cov_even");
        check_blocks(d, m, insn_align);
        // No other file module in a static program; anonymous code (the
        // signal trampoline page) would be listed only if it ran.
        for (i, other) in d.modules.iter().enumerate() {
            if i != m {
                assert_eq!(other.path, "[anon]", "{:#?}", d.modules);
            }
        }
        // Once per translation: the million-iteration loop did not make a
        // million events.
        let (insns, events) = counts(&run.stderr);
        assert!(
            insns > 1000 && events >= insns && events < 2 * insns,
            "{}",
            run.stderr
        );
    }

    // Against QEMU's own drcov plugin: the same bytes of the program.
    let d = &plain.drcov;
    let m = d.module(name);
    let ours = d.bytes(m);
    let theirs = qemu_drcov(
        dir,
        "plain",
        arch,
        &prog,
        &[],
        d.modules[m].base,
        d.modules[m].end,
    );
    assert!(
        ours == theirs,
        "covered bytes differ from QEMU's drcov plugin: only ours {}; only QEMU's {}",
        summarize(&ours.difference(&theirs).copied().collect()),
        summarize(&theirs.difference(&ours).copied().collect())
    );
}

#[test]
fn static_program_mipsel() {
    let dir = RunDir::new();
    static_program(&dir, "mipsel", &guest("mipsel", "cov_funcs"), 4, "drcov-32");
}

#[test]
fn static_program_riscv64() {
    let dir = RunDir::new();
    static_program(
        &dir,
        "riscv64",
        &guest("riscv64", "cov_funcs"),
        2,
        "drcov-64",
    );
}

/// x86-64 (variable-length instructions, decoded for the blocks' sizes),
/// built with the host's compiler.
#[test]
fn static_program_x86_64() {
    let dir = RunDir::new();
    let q = qemu_builds();
    assert!(
        q.qemu("x86_64").is_file(),
        "{} is missing: scripts/build-qemu.sh builds it (x86_64-linux-user is a default target)",
        q.qemu("x86_64").display()
    );
    let prog = dir.file("cov_funcs");
    let o = Command::new("cc")
        .args(["-O2", "-static", "-g0", "-o"])
        .arg(&prog)
        .arg(workspace_root().join("tests/programs/cov_funcs.c"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cc -static: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    static_program(&dir, "x86_64", &prog, 1, "drcov-64");
}

/// Debian's cross compiler for `arch`.
fn cross_gcc(arch: &str) -> &'static str {
    match arch {
        "mipsel" => "mipsel-linux-gnu-gcc",
        "mips" => "mips-linux-gnu-gcc",
        "mips64el" => "mips64el-linux-gnuabi64-gcc",
        "arm" => "arm-linux-gnueabihf-gcc",
        "aarch64" => "aarch64-linux-gnu-gcc",
        "riscv64" => "riscv64-linux-gnu-gcc",
        "i386" => "i686-linux-gnu-gcc",
        "ppc64le" => "powerpc64le-linux-gnu-gcc",
        _ => panic!("no cross compiler for {arch}"),
    }
}

/// `cov_funcs` for ARM in A32 (`-marm`), built here: the program's own
/// functions are A32, the C library linked in is Thumb-2.
fn cov_funcs_a32(dir: &RunDir) -> PathBuf {
    let out = dir.file("cov_funcs");
    let o = Command::new(cross_gcc("arm"))
        .args(["-marm", "-O2", "-static", "-g0", "-o"])
        .arg(&out)
        .arg(workspace_root().join("tests/programs/cov_funcs.c"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run arm-linux-gnueabihf-gcc: {e}"));
    assert!(
        o.status.success(),
        "arm-linux-gnueabihf-gcc -marm: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn static_program_mips() {
    let dir = RunDir::new();
    static_program(&dir, "mips", &guest("mips", "cov_funcs"), 4, "drcov-32");
}

#[test]
fn static_program_mips64el() {
    let dir = RunDir::new();
    let prog = guest("mips64el", "cov_funcs");
    static_program(&dir, "mips64el", &prog, 4, "drcov-64");
}

/// Thumb-2 (Debian's default for armhf): 2- and 4-byte instructions, and a
/// pc that does not say which. Before QEMU reported instruction lengths,
/// every instruction was one byte here.
#[test]
fn static_program_arm_thumb() {
    let dir = RunDir::new();
    static_program(&dir, "arm", &guest("arm", "cov_funcs"), 2, "drcov-32");
}

/// A32 code calling the Thumb-2 C library.
#[test]
fn static_program_arm_a32() {
    let dir = RunDir::new();
    let prog = cov_funcs_a32(&dir);
    static_program(&dir, "arm", &prog, 2, "drcov-32");
    // The program's own functions are A32: 4-byte blocks.
    let elf = Elf::read(&prog);
    let run = run_coverage(&dir, "a32", "arm", &prog, &[]);
    let d = &run.drcov;
    let m = d.module("cov_funcs");
    let (lo, size) = elf.func("cov_always");
    let blocks: Vec<(u64, u64)> = d
        .blocks(m)
        .into_iter()
        .filter(|&(s, e)| s < lo + size && lo < e)
        .collect();
    assert!(!blocks.is_empty());
    for (s, e) in blocks {
        assert_eq!((s % 4, (e - s) % 4), (0, 0), "{s:#x}-{e:#x}");
    }
}

#[test]
fn static_program_aarch64() {
    let dir = RunDir::new();
    let prog = guest("aarch64", "cov_funcs");
    static_program(&dir, "aarch64", &prog, 4, "drcov-64");
}

/// 32-bit x86: variable-length instructions whose decoding differs from
/// x86_64's.
#[test]
fn static_program_i386() {
    let dir = RunDir::new();
    static_program(&dir, "i386", &guest("i386", "cov_funcs"), 1, "drcov-32");
}

#[test]
fn static_program_ppc64le() {
    let dir = RunDir::new();
    let prog = guest("ppc64le", "cov_funcs");
    static_program(&dir, "ppc64le", &prog, 4, "drcov-64");
}

/// The program built dynamically here (the test programs are static).
fn dynamic_cov_funcs(dir: &RunDir, arch: &str) -> PathBuf {
    let cc = cross_gcc(arch);
    let out = dir.file("cov_funcs_dyn");
    let src = workspace_root().join("tests/programs/cov_funcs.c");
    let o = Command::new(cc)
        .args(["-O2", "-g0", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e} (scripts/deps.sh installs it)"));
    assert!(
        o.status.success(),
        "{cc}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn dynamic_program(arch: &str, ld_so: &str, insn_align: u64) {
    let dir = RunDir::new();
    let prog = dynamic_cov_funcs(&dir, arch);
    let run = run_coverage(&dir, "dyn", arch, &prog, &["extra"]);
    assert!(run.stdout.starts_with("cov_funcs: "), "{}", run.stdout);
    let d = &run.drcov;
    let p = d.module("cov_funcs_dyn");
    let ld = d.module(ld_so);
    let libc = d.module("libc.so.6");
    // A dynamically linked program starts in its interpreter.
    let ld_elf = Elf::read(Path::new(&d.modules[ld].path));
    assert_eq!(
        d.modules[ld].entry,
        d.modules[ld].base + ld_elf.file().entry() - ld_elf.vaddr0()
    );
    assert!(
        d.covered(ld, d.modules[ld].entry),
        "ld.so's entry not covered"
    );
    let pe = Elf::read(&prog);
    for f in ["main", "cov_always", "cov_loop", "cov_extra", "cov_odd"] {
        let a = pe.entry_point(f);
        let at = d.modules[p].base + a - pe.vaddr0();
        assert!(d.covered(p, at), "{f} at {at:#x} not covered");
    }
    let (never, size) = pe.func("cov_never");
    let at = d.modules[p].base + never - pe.vaddr0();
    assert!(!d.any_covered(p, at, at + size));
    let le = Elf::read(Path::new(&d.modules[libc].path));
    for f in ["printf", "__libc_start_main", "exit"] {
        let a = le.entry_point(f);
        let at = d.modules[libc].base + a - le.vaddr0();
        assert!(d.covered(libc, at), "libc's {f} at {at:#x} not covered");
    }
    for m in [p, ld, libc] {
        check_blocks(d, m, insn_align);
    }
    for (i, other) in d.modules.iter().enumerate() {
        if ![p, ld, libc].contains(&i) {
            assert_eq!(other.path, "[anon]", "{:#?}", d.modules);
        }
    }
}

#[test]
fn dynamic_program_mipsel() {
    dynamic_program("mipsel", "ld.so.1", 4);
}

#[test]
fn dynamic_program_riscv64() {
    dynamic_program("riscv64", "ld-linux-riscv64-lp64d.so.1", 2);
}

#[test]
fn dynamic_program_mips() {
    dynamic_program("mips", "ld.so.1", 4);
}

#[test]
fn dynamic_program_mips64el() {
    dynamic_program("mips64el", "ld.so.1", 4);
}

/// Thumb-2 throughout: the program, ld.so and libc.
#[test]
fn dynamic_program_arm() {
    dynamic_program("arm", "ld-linux-armhf.so.3", 2);
}

#[test]
fn dynamic_program_aarch64() {
    dynamic_program("aarch64", "ld-linux-aarch64.so.1", 4);
}

#[test]
fn dynamic_program_i386() {
    dynamic_program("i386", "ld-linux.so.2", 1);
}

#[test]
fn dynamic_program_ppc64le() {
    dynamic_program("ppc64le", "ld64.so.2", 4);
}

/// A multi-threaded program: the workers' first chunks can reach the
/// client before the main thread's, which holds the program's mapping; their
/// code is still attributed to the program, nothing is left outside.
fn threads_program(arch: &str) {
    let dir = RunDir::new();
    let prog = guest(arch, "threads");
    let run = run_coverage(&dir, "threads", arch, &prog, &["3", "20000"]);
    assert!(
        !run.stderr.contains("outside any executable mapping"),
        "{arch}: {}",
        run.stderr
    );
    assert!(
        run.stderr.contains("(1 process, 4 threads)"),
        "{}",
        run.stderr
    );
    let d = &run.drcov;
    let m = d.module("threads");
    let elf = Elf::read(&prog);
    for f in ["main", "worker"] {
        let a = elf.entry_point(f);
        assert!(d.covered(m, a), "{arch}: {f} at {a:#x} not covered");
    }
    check_blocks(d, m, if arch == "arm" { 2 } else { 1 });
}

#[test]
fn threads_mipsel() {
    threads_program("mipsel");
}

#[test]
fn threads_arm() {
    threads_program("arm");
}

#[test]
fn threads_x86_64() {
    threads_program("x86_64");
}

#[test]
fn threads_ppc64le() {
    threads_program("ppc64le");
}

/// Debian's busybox-static: a large program we did not write.
#[test]
fn busybox_sha256sum_mipsel() {
    let dir = RunDir::new();
    let bb = guest("mipsel", "busybox");
    // 8 MiB: enough hashing (a few hundred million guest instructions) for
    // the cost of running code to show next to the fixed start-up costs.
    let input = dir.file("input.bin");
    let data: Vec<u8> = (0..8u32 << 20)
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    fs::write(&input, &data).unwrap();
    let want = Command::new("sha256sum").arg(&input).output().unwrap();
    let want = String::from_utf8_lossy(&want.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(want.len(), 64);

    let args = ["sha256sum", input.to_str().unwrap()];
    let run = run_coverage(&dir, "bb", "mipsel", &bb, &args);
    assert!(run.stdout.starts_with(&want), "{}", run.stdout);
    let d = &run.drcov;
    let m = d.module("busybox");
    check_blocks(d, m, 4);
    let (insns, events) = counts(&run.stderr);
    assert!(insns > 2000 && events < 2 * insns, "{}", run.stderr);
    assert_eq!(
        d.modules[m].entry,
        Elf::read(&bb).file().entry(),
        "{:#?}",
        d.modules
    );

    // Low overhead is the bench's to measure, never a timed test's: what
    // makes it low shows here by count (each block reported about once,
    // `events < 2 * insns` above, however long the run took).

    // Against QEMU's drcov plugin, on the whole of busybox.
    let ours = d.bytes(m);
    let theirs = qemu_drcov(
        &dir,
        "bb",
        "mipsel",
        &bb,
        &args,
        d.modules[m].base,
        d.modules[m].end,
    );
    assert!(
        ours == theirs,
        "covered bytes differ from QEMU's drcov plugin: only ours {}; only QEMU's {}",
        summarize(&ours.difference(&theirs).copied().collect()),
        summarize(&theirs.difference(&ours).copied().collect())
    );
}

/// Bad command lines are one line and exit 2; a missing program 127.
#[test]
fn usage_errors() {
    let exe = coverage_exe();
    let o = Command::new(&exe).arg("--bogus").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).starts_with("coverage: unexpected argument '--bogus'")
    );
    let o = Command::new(&exe).arg("-o").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = Command::new(&exe)
        .arg("/nonexistent/prog")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
}
