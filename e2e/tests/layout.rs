// SPDX-License-Identifier: GPL-2.0-or-later
//! Tracing must not move anything in the guest's address space.
//!
//! On the 64-bit guests x86_64, aarch64, riscv64, mips64el and ppc64le,
//! without `-R` (so the guest's stack, vDSO, heap mappings and thread
//! stacks go where the host's `mmap` puts them, next to QEMU's own
//! mappings), and with the host's address space randomisation off for every
//! run (`setarch -R`, see `e2e::run::GuestCmd`), the guest program
//! `tests/programs/layout.c` prints its own addresses (`&main`, a global, a
//! stack variable, `sbrk(0)` before and after a small malloc, that block, a
//! large malloc'd block, an mmap, a thread's stack variable, the vDSO), and
//! QEMU's `-d page` log gives the layout after loading (every region, and
//! `start_stack`, `brk`, `entry`, ...). The program is static
//! (`<arch>::pinned`, `<arch>::default`) or a dynamically linked PIE
//! (`tests/programs/dyn_layout.c`, `*_pie`: QEMU also picks where the
//! program, its interpreter and its brk heap go; libraries from Debian's
//! cross sysroot, `-L /usr/<triple>`). Its layout under `-cannoli` must be
//! one the same program gets without tracing:
//!
//! * `pinned_*`: with `MALLOC_ARENA_MAX=1` in QEMU's environment (hidden
//!   from the guest with `-U`), which every other e2e test uses, QEMU's own
//!   layout is deterministic: plain QEMU (where it is built), the patched
//!   QEMU without `-cannoli` and the patched QEMU with `-cannoli` must give
//!   exactly the same layout;
//! * `default_*`: with QEMU's environment empty, as a user runs it. Then
//!   plain QEMU's own layout varies from run to run: its RCU thread creates
//!   a malloc arena with a 64 MiB mmap at a moment that races with QEMU
//!   mapping its code buffer, and which comes first moves the guest's stack
//!   and mmaps. So the reference is run several times (more when a traced
//!   layout has not shown up yet, up to [`MAX_REFERENCE_RUNS`]), and every
//!   traced run's layout must equal one the reference produced. The
//!   reference is plain QEMU where it is built, else the patched QEMU
//!   without `-cannoli` (mips64el, ppc64le); the patched QEMU without
//!   `-cannoli` must also give a layout plain QEMU gives. The RCU thread
//!   reserves 128 MiB and trims it to an aligned 64 MiB arena; on a busy
//!   machine it can be preempted between the two while the main thread
//!   maps the guest's stack under the whole reservation (seen once in a
//!   suite run with two CPU hogs, in a traced run, never in 200 reference
//!   runs). So a run whose layout the reference never gave is made again,
//!   up to [`TRIES`] times: tracing that moves the guest moves it in every
//!   try.

use std::collections::BTreeMap;
use std::path::Path;

use e2e::procs::{run_traced, traced_cmd};
use e2e::*;

/// Reference runs made in any case in `default_*`.
const REFERENCE_RUNS: usize = 4;
/// At most this many reference runs in all, looking for a traced layout. A
/// busy machine makes rarer orderings of QEMU's threads show (a third
/// layout, seen once with two CPU hogs running beside the suite), so the
/// reference may run long before it shows the one a traced run got: it runs
/// more, the check stays as strict (each run takes well under a second).
const MAX_REFERENCE_RUNS: usize = 200;
/// Traced (and patched-without-cannoli) runs in `default_*`.
const TRACED_RUNS: usize = 3;
/// Tries of each of them: one whose layout the reference never gave is made
/// again, this many times in all (see `default`).
const TRIES: usize = 3;

/// One run's layout: what the guest printed and what `-d page` said.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Layout {
    printed: Vec<(String, u64)>,
    /// `start_stack`, `brk`, `entry`, ... after the load.
    values: Vec<(String, u64)>,
    /// `start-end prot` after the load.
    regions: Vec<String>,
}

impl Layout {
    fn show(&self) -> String {
        let p: Vec<String> = self
            .printed
            .iter()
            .map(|(k, v)| format!("{k} {v:#x}"))
            .collect();
        let v: Vec<String> = self
            .values
            .iter()
            .map(|(k, v)| format!("{k} {v:#x}"))
            .collect();
        format!(
            "printed: {}\n      -d page: {}\n      regions: {}",
            p.join(", "),
            v.join(", "),
            self.regions.join(", ")
        )
    }
}

/// The guest's lines `name 0x<addr>`.
fn parse_printed(stdout: &[u8]) -> Result<Vec<(String, u64)>, String> {
    let text = String::from_utf8_lossy(stdout);
    let mut v = Vec::new();
    for line in text.lines() {
        let (k, a) = line
            .split_once(' ')
            .ok_or_else(|| format!("bad line {line:?}"))?;
        let a = if a == "0" {
            0
        } else {
            e2e::lines::parse_hex(a)?
        };
        v.push((k.to_string(), a));
    }
    let names: Vec<&str> = v.iter().map(|(k, _)| k.as_str()).collect();
    let want = [
        "main",
        "global",
        "stack",
        "brk0",
        "small",
        "brk1",
        "large",
        "mmap",
        "thread_stack",
        "vdso",
    ];
    if names != want {
        return Err(format!("the guest printed {names:?}, want {want:?}"));
    }
    Ok(v)
}

fn layout_of(run: &GuestRun, page_log: &Path) -> Layout {
    run.assert_success();
    let printed = parse_printed(&run.stdout)
        .unwrap_or_else(|e| panic!("`{}`: {e}\n{}", run.cmdline, text(&run.stdout)));
    let p = parse_page_layout(page_log).unwrap_or_else(|e| panic!("{e}"));
    Layout {
        printed,
        values: p.values.into_iter().collect(),
        regions: p.regions.iter().map(|r| r.to_string()).collect(),
    }
}

/// The program: `layout` (static) or `dyn_layout` (a PIE, with its
/// libraries from Debian's cross sysroot `-L /usr/<triple>` unless the
/// guest is the host's architecture).
#[derive(Clone, Copy)]
struct Prog {
    arch: &'static str,
    pie: bool,
}

impl Prog {
    fn path(self) -> std::path::PathBuf {
        guest(self.arch, if self.pie { "dyn_layout" } else { "layout" })
    }
}

/// `cmd` with `-d page -D <tag>.page` (and `-L` for a PIE), unpinned if
/// asked.
fn paged(
    cmd: GuestCmd,
    p: Prog,
    dir: &RunDir,
    tag: &str,
    pinned: bool,
) -> (GuestCmd, std::path::PathBuf) {
    let log = dir.file(&format!("{tag}.page"));
    let mut cmd = if pinned { cmd } else { cmd.unpinned() };
    if let (true, Some(t)) = (p.pie, guest_info(p.arch).triple) {
        cmd = cmd.qemu_arg("-L").qemu_arg(format!("/usr/{t}"));
    }
    (
        cmd.qemu_arg("-d")
            .qemu_arg("page")
            .qemu_arg("-D")
            .qemu_arg(&log),
        log,
    )
}

/// A run of the plain (`plain`) or patched QEMU without cannoli.
fn bare(dir: &RunDir, tag: &str, p: Prog, plain: bool, pinned: bool) -> Layout {
    let q = qemu_builds();
    let arch = p.arch;
    let exe = if plain {
        q.plain_qemu(arch)
    } else {
        q.qemu(arch)
    };
    let cmd = GuestCmd::new(arch, exe, &p.path(), &[]);
    let (cmd, log) = paged(cmd, p, dir, tag, pinned);
    let run = run_guest(dir, tag, &cmd);
    layout_of(&run, &log)
}

/// A run under `-cannoli`, traced by `cannoli-dump --counts`.
fn traced(dir: &RunDir, tag: &str, p: Prog, pinned: bool) -> Result<Layout, String> {
    let (cmd, log) = paged(traced_cmd(p.arch, &p.path(), &[]), p, dir, tag, pinned);
    let t = run_traced(dir, tag, cmd, &["--threads", "2", "--counts"], false);
    t.client_ok()?;
    let s = t.summary()?;
    if s.connections != 2 {
        return Err(format!(
            "{} connections, want 2 (main and its thread)",
            s.connections
        ));
    }
    Ok(layout_of(&t.guest, &log))
}

fn pinned(p: Prog) {
    let arch = p.arch;
    let g = guest_info(arch);
    let dir = RunDir::new();
    let f = Failures::new(format!(
        "layout{} on {arch}, QEMU's arena pinned",
        pie_name(p)
    ));
    let build = bare(&dir, "build", p, false, true);
    if g.plain {
        let plain = bare(&dir, "plain", p, true, true);
        if plain != build {
            f.fail(
                "patched QEMU vs plain QEMU",
                format!(
                    "layouts differ:\n  plain:   {}\n  patched: {}",
                    plain.show(),
                    build.show()
                ),
            );
        }
    }
    match traced(&dir, "cannoli", p, true) {
        Ok(t) if t == build => {}
        Ok(t) => f.fail(
            "traced vs untraced",
            format!(
                "layouts differ:\n  untraced: {}\n  traced:   {}",
                build.show(),
                t.show()
            ),
        ),
        Err(e) => f.fail("traced run", e),
    }
    eprintln!(
        "e2e: layout{} on {arch} (pinned): {}",
        pie_name(p),
        build.show()
    );
    f.finish();
}

fn pie_name(p: Prog) -> &'static str {
    if p.pie {
        " (PIE)"
    } else {
        ""
    }
}

fn default(p: Prog) {
    let arch = p.arch;
    let g = guest_info(arch);
    let dir = RunDir::new();
    let f = Failures::new(format!(
        "layout{} on {arch}, QEMU's default environment",
        pie_name(p)
    ));
    let reference_is_plain = g.plain;
    let ref_name = if reference_is_plain {
        "plain QEMU"
    } else {
        "the patched QEMU without -cannoli"
    };
    // layout -> how often the reference gave it
    let mut seen: BTreeMap<Layout, usize> = BTreeMap::new();
    let mut runs = 0;
    let reference = |seen: &mut BTreeMap<Layout, usize>, runs: &mut usize| {
        let l = bare(&dir, &format!("ref{runs}"), p, reference_is_plain, false);
        *runs += 1;
        *seen.entry(l).or_default() += 1;
    };
    for _ in 0..REFERENCE_RUNS {
        reference(&mut seen, &mut runs);
    }
    // Each traced (and patched-without-cannoli) run must give a layout the
    // reference gave. One that does not is made again, up to TRIES times:
    // a layout tracing moves is moved every time, while QEMU's own race
    // (its RCU thread preempted between reserving its arena and trimming
    // it, while the main thread maps the guest) shows rarely, in any build.
    let mut retried = 0;
    for i in 0..TRACED_RUNS {
        let mut kinds: Vec<(String, bool)> = vec![(format!("traced run {i}"), true)];
        if reference_is_plain {
            kinds.push((format!("patched QEMU without -cannoli, run {i}"), false));
        }
        for (what, is_traced) in kinds {
            let mut misses: Vec<String> = Vec::new();
            for t in 0..TRIES {
                let tag = format!("{}{i}.{t}", if is_traced { "cannoli" } else { "build" });
                let l = if is_traced {
                    match traced(&dir, &tag, p, false) {
                        Ok(l) => l,
                        Err(e) => {
                            f.fail(&what, e);
                            break;
                        }
                    }
                } else {
                    bare(&dir, &tag, p, false, false)
                };
                while !seen.contains_key(&l) && runs < MAX_REFERENCE_RUNS {
                    reference(&mut seen, &mut runs);
                }
                if seen.contains_key(&l) {
                    misses.clear();
                    break;
                }
                retried += 1;
                eprintln!("e2e: layout on {arch}: {what}, try {t}: a layout {ref_name} did not give in {runs} runs; again");
                misses.push(format!("  try {t}: {}", l.show()));
            }
            if !misses.is_empty() {
                let known: Vec<String> = seen
                    .iter()
                    .map(|(l, n)| format!("  {n} of {runs} runs: {}", l.show()))
                    .collect();
                f.fail(
                    &what,
                    format!(
                        "in {TRIES} tries, its layout was none that {ref_name} gave in {runs} runs:\n{}\n{}",
                        misses.join("\n"),
                        known.join("\n")
                    ),
                );
            }
        }
    }
    eprintln!(
        "e2e: layout{} on {arch} (default): {} layout(s) in {runs} runs of {ref_name}, {retried} run(s) made again",
        pie_name(p),
        seen.len()
    );
    f.finish();
}

macro_rules! layout_tests {
    ($($arch:ident),*) => {$(
        mod $arch {
            use super::Prog;
            const STATIC: Prog = Prog { arch: stringify!($arch), pie: false };
            const PIE: Prog = Prog { arch: stringify!($arch), pie: true };
            #[test]
            fn pinned() {
                super::pinned(STATIC);
            }
            #[test]
            fn default() {
                super::default(STATIC);
            }
            #[test]
            fn pinned_pie() {
                super::pinned(PIE);
            }
            #[test]
            fn default_pie() {
                super::default(PIE);
            }
        }
    )*};
}

layout_tests!(x86_64, aarch64, riscv64, mips64el, ppc64le);
