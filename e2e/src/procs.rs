// SPDX-License-Identifier: GPL-2.0-or-later
//! Helpers for the tests of threads, processes, signals, dynamic linking
//! and misbehaving clients (`tests/processes.rs`):
//!
//! * [`Client`]: `cannoli-dump` with any options (`--split`, `--delay-us`,
//!   ...), and [`Summary`], its closing stderr line;
//! * [`Traced`] / [`run_traced`]: one guest run under `-cannoli` with extra
//!   QEMU options and environment (e.g. `-L`, `CANNOLI_CHUNK_KB`);
//! * [`run_plugin_retrying`]: a ground-truth plugin run, again while QEMU
//!   crashes in the plugin;
//! * [`Streams`]: the `--split` directory's `streams.txt` and files;
//! * [`elf_symbols`]: a program's symbol table, read directly from the ELF.
//!
//! The client's formats (its summary line, `streams.txt`, the `Y`, `G` and
//! `M` lines) are parsed by [`crate::dump`].

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::dump::STREAMS_FILE;
use crate::*;

// ---------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------

/// A running `cannoli-dump --listen 127.0.0.1:0 --out <tag>.dump <args>`.
pub struct Client {
    pub child: ChildGuard,
    /// The address it listens on (its first stdout line).
    pub addr: String,
    /// The run's secret it holds, for QEMU's `CANNOLI_TOKEN`.
    pub token: String,
    /// Its `--out` file.
    pub out: PathBuf,
    pub stderr_path: PathBuf,
    stdout_rest: Option<std::thread::JoinHandle<Vec<u8>>>,
}

impl Client {
    /// Starts the client with `args` after `--listen 127.0.0.1:0 --out
    /// <tag>.dump` and waits (at most 60 s) for its `listening` line.
    pub fn start(dir: &RunDir, tag: &str, args: &[&str]) -> Client {
        let DumpClient {
            child,
            addr,
            token,
            out,
            stderr_path,
            stdout_rest,
        } = DumpClient::start_args(dir, tag, args);
        Client {
            child,
            addr,
            token,
            out,
            stderr_path,
            stdout_rest,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its stderr so far.
    pub fn stderr(&self) -> String {
        read_text(&self.stderr_path)
    }

    /// Waits at most `limit` for it to exit: its status (`None` on time-out,
    /// after killing it) and its stderr.
    pub fn wait(&mut self, limit: Duration) -> (Option<ExitStatus>, String) {
        let st = self.child.wait_timeout(limit);
        if let Some(h) = self.stdout_rest.take() {
            let _ = h.join();
        }
        (st, self.stderr())
    }

    /// SIGKILLs it (and reaps it).
    pub fn kill_9(&mut self) {
        self.child.kill();
        if let Some(h) = self.stdout_rest.take() {
            let _ = h.join();
        }
    }
}

// ---------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------

/// `qemu-<arch> <common args> -cannoli libjitter_always.so prog args` (the
/// patched QEMU); add options with [`GuestCmd::qemu_arg`] (they go before
/// the program, after `-cannoli`).
pub fn traced_cmd(arch: &str, prog: &Path, args: &[&str]) -> GuestCmd {
    GuestCmd::new(arch, qemu_builds().qemu(arch), prog, args)
        .qemu_arg("-cannoli")
        .qemu_arg(jitter_lib())
}

/// Runs a ground-truth plugin on a multi-threaded guest, again (at most
/// `attempts` times) while QEMU dies of an internal SIGSEGV, a glibc heap
/// abort or a guest SIGSEGV: QEMU 10.0's
/// libexeclog grows its per-vCPU array when a vCPU starts while other vCPUs
/// may still use pointers into the old one (`get_cpu` returns a pointer
/// after dropping its lock), and sometimes crashes when a guest creates a
/// thread. That is the ground truth failing, with plain QEMU too, not
/// cannoli. Returns the successful run and its log (with `-d page`, see
/// [`crate::pages`]); panics if every attempt crashed.
pub fn run_plugin_retrying(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    plugin: Plugin,
    prog: &Path,
    args: &[&str],
    attempts: usize,
) -> (GuestRun, PathBuf) {
    let mut crashes = Vec::new();
    for n in 0..attempts {
        let tag = format!("{tag}-{n}");
        let log = dir.file(&format!("{tag}.log"));
        let run = run_guest(dir, &tag, &paged_plugin_cmd(arch, plugin, prog, args, &log));
        let internal = run.status.code().is_none() && plugin_race_crash(&run.stderr_text());
        if !internal {
            if !crashes.is_empty() {
                eprintln!(
                    "e2e: {tag}: QEMU with the {} plugin crashed in {} earlier attempt(s) (the upstream race)",
                    plugin.name(),
                    crashes.len()
                );
            }
            return (run, log);
        }
        let _ = fs::remove_file(&log);
        crashes.push(format!("{}: {}", run.status, tail(&run.stderr_text(), 2)));
    }
    panic!(
        "`{}` crashed inside QEMU in all {attempts} attempts:\n{}",
        plugin_cmd(arch, plugin, prog, args, Path::new("<log>")).display(),
        crashes.join("\n")
    )
}

/// Whether QEMU's stderr shows the plugin race: a wild access caught by
/// QEMU's own handler, glibc aborting on the heap it corrupts (freeing
/// the stale pointer, or finding a chunk too small in `malloc`: "Fatal
/// glibc error: malloc assertion failure in _int_malloc", seen in a
/// fresh-clone CI run with two CPU hogs, 2026-11-28, on x86_64
/// `threads`), or the guest dying of a SIGSEGV after the stale write
/// landed in QEMU's state for it (seen once in CI, 2026-11-24, on
/// mips64el `threads`, whose bare run had just succeeded: the only caller
/// runs the program without the plugin first and asserts that).
fn plugin_race_crash(stderr: &str) -> bool {
    stderr.contains("QEMU internal SIGSEGV")
        || stderr.contains("uncaught target signal 11 (Segmentation fault)")
        || GLIBC_HEAP_ABORTS.iter().any(|m| stderr.contains(m))
}

/// What glibc prints when it aborts on a corrupted heap (its malloc
/// checks' messages).
const GLIBC_HEAP_ABORTS: &[&str] = &[
    "invalid pointer",
    "corrupted",
    "double free",
    "malloc assertion failure",
    "malloc(): ",
    "malloc_consolidate(): ",
    "free(): ",
    "realloc(): ",
];

/// A change made to every command of a comparison (extra QEMU options,
/// the environment): ground truth and traced runs must get the same.
pub type Tweak<'a> = &'a dyn Fn(GuestCmd) -> GuestCmd;

/// No change.
pub fn same(cmd: GuestCmd) -> GuestCmd {
    cmd
}

/// The bare patched QEMU's layout for `prog args` (`-d page`, logged to
/// `<tag>.page`), its command changed by `tweak`.
pub fn bare_layout(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
    tweak: Tweak,
) -> PageLayout {
    let log = dir.file(&format!("{tag}.page"));
    let cmd = tweak(GuestCmd::new(arch, qemu_builds().qemu(arch), prog, args))
        .qemu_arg("-d")
        .qemu_arg("page")
        .qemu_arg("-D")
        .qemu_arg(&log);
    run_guest(dir, tag, &cmd);
    parse_page_layout(&log).unwrap_or_else(|e| panic!("{e}"))
}

/// libexeclog on a single-threaded `prog args` (its command changed by
/// `tweak`), its pcs and addresses moved into the bare QEMU's layout (where
/// the plugin moved the guest's vDSO, see [`crate::pages`]). Returns the run
/// (whatever its status) and the log.
pub fn execlog_in_bare_layout(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
    tweak: Tweak,
) -> (GuestRun, Execlog) {
    let log = dir.file(&format!("{tag}.log"));
    let cmd = tweak(paged_plugin_cmd(arch, Plugin::Execlog, prog, args, &log));
    let run = run_guest(dir, tag, &cmd);
    let mut e = parse_execlog(&log).unwrap_or_else(|e| panic!("{e}"));
    let bare = bare_layout(dir, &format!("{tag}-bare"), arch, prog, args, tweak);
    let layout = parse_page_layout(&log).unwrap_or_else(|e| panic!("{e}"));
    let r = Relocation::between(&layout, &bare)
        .unwrap_or_else(|e| panic!("{tag}: the layout under libexeclog: {e}"));
    let n = e.relocate(&r);
    if n > 0 {
        eprintln!("e2e: {tag}: libexeclog moved {r}: {n} pcs and addresses moved back");
    }
    (run, e)
}

/// One traced run.
pub struct Traced {
    pub guest: GuestRun,
    /// QEMU's wall time.
    pub elapsed: Duration,
    /// `None`: the client did not exit in time (it was killed).
    pub client_status: Option<ExitStatus>,
    pub client_stderr: String,
    /// The client's `--out` file.
    pub dump: PathBuf,
    /// The `--split` directory, if `split` was asked for.
    pub split: Option<PathBuf>,
}

impl Traced {
    /// The client's summary line.
    pub fn summary(&self) -> Result<Summary, String> {
        Summary::parse(&self.client_stderr)
    }

    /// Ok if the client exited 0 and reported nothing lost and no
    /// incomplete stream.
    pub fn client_ok(&self) -> Result<(), String> {
        let s = self.summary()?;
        if self.client_status.map(|s| s.success()) != Some(true) || s.lost != 0 || s.incomplete != 0
        {
            return Err(format!(
                "cannoli-dump exited with {:?}, {} events lost, {} incomplete streams\n--- its stderr ---\n{}",
                self.client_status,
                s.lost,
                s.incomplete,
                tail(&self.client_stderr, 20)
            ));
        }
        Ok(())
    }

    /// The streams of a `--split` run.
    pub fn streams(&self) -> Result<Streams, String> {
        Streams::read(self.split.as_deref().ok_or("not a --split run")?)
    }
}

/// Runs `cmd` (see [`traced_cmd`]) traced by a fresh `cannoli-dump
/// <client_args>` (plus `--split <tag>.split` if `split`), with
/// `CANNOLI_ADDR` added to QEMU's environment.
pub fn run_traced(
    dir: &RunDir,
    tag: &str,
    cmd: GuestCmd,
    client_args: &[&str],
    split: bool,
) -> Traced {
    let split_dir = dir.file(&format!("{tag}.split"));
    let split_str = split_dir.to_string_lossy().into_owned();
    let mut args: Vec<&str> = client_args.to_vec();
    if split {
        args.extend(["--split", &split_str]);
    }
    let mut client = Client::start(dir, tag, &args);
    let cmd = cmd
        .env("CANNOLI_ADDR", &client.addr)
        .env("CANNOLI_TOKEN", &client.token);
    let start = Instant::now();
    let child = spawn_guest(dir, tag, &cmd);
    let guest = finish_guest(dir, tag, &cmd, child);
    let elapsed = start.elapsed();
    let (client_status, client_stderr) = client.wait(Duration::from_secs(60).min(timeout()));
    Traced {
        guest,
        elapsed,
        client_status,
        client_stderr,
        dump: client.out.clone(),
        split: split.then_some(split_dir),
    }
}

/// Exit code of a run, or a message naming the signal that killed it.
pub fn exit_code(st: &ExitStatus) -> Result<i32, String> {
    st.code().ok_or_else(|| format!("killed by a signal: {st}"))
}

// ---------------------------------------------------------------------------
// --split output and dumps of two runs
// ---------------------------------------------------------------------------

/// The streams of a `--split` run, in connection order.
#[derive(Debug, Clone)]
pub struct Streams(pub Vec<StreamInfo>);

impl Streams {
    pub fn read(dir: &Path) -> Result<Streams, String> {
        let index = dir.join(STREAMS_FILE);
        let text = fs::read_to_string(&index)
            .map_err(|e| format!("cannot read {}: {e}", index.display()))?;
        text.lines()
            .map(|line| {
                StreamInfo::parse(dir, line).map_err(|e| format!("{}: {e}", index.display()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Streams)
    }

    /// The streams of thread `tid` of process `pid`, in connection order.
    pub fn of(&self, pid: i32, tid: i32) -> Vec<&StreamInfo> {
        self.0
            .iter()
            .filter(|s| s.pid == pid && s.tid == tid)
            .collect()
    }

    /// A one-line-per-stream description, for messages.
    pub fn describe(&self) -> String {
        self.0
            .iter()
            .map(|s| {
                format!(
                    "  pid {} ppid {} tid {} exe {} ({})",
                    s.pid,
                    s.ppid,
                    s.tid,
                    s.exe,
                    s.file.display()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// For two dumps of the same program from different runs: per `L`/`S` line,
/// whether its value differs (see [`volatile_values`]); an error if they
/// differ in anything else about the accesses.
pub fn dump_volatile(a: &DumpTrace, b: &DumpTrace) -> Result<Vec<bool>, String> {
    volatile_values(&a.mem, &b.mem)
}

// ---------------------------------------------------------------------------
// ELF symbols
// ---------------------------------------------------------------------------

/// The `.symtab` of an ELF file of either byte order: name -> value
/// (first wins). On ARM a Thumb function's value has bit 0 set, as in the
/// file.
pub fn elf_symbols(path: &Path) -> Result<HashMap<String, u64>, String> {
    use object::{Object, ObjectSymbol};
    let d = fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let f = object::File::parse(&*d).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = HashMap::new();
    for sym in f.symbols() {
        if let Ok(name) = sym.name() {
            if !name.is_empty() {
                out.entry(name.to_string()).or_insert(sym.address());
            }
        }
    }
    if out.is_empty() {
        return Err(format!("{}: no symbol table", path.display()));
    }
    Ok(out)
}

/// The value of symbol `name` in `path`.
pub fn elf_symbol(syms: &HashMap<String, u64>, path: &Path, name: &str) -> u64 {
    *syms
        .get(name)
        .unwrap_or_else(|| panic!("{}: no symbol {name}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crashes of QEMU's libexeclog race seen in CI, and not a guest's
    /// own failure.
    #[test]
    fn plugin_race_crashes() {
        for seen in [
            "Fatal glibc error: malloc assertion failure in _int_malloc: (unsigned long) (size) >= (unsigned long) (nb)",
            "free(): invalid pointer",
            "malloc(): unaligned tcache chunk detected",
            "double free or corruption (out)",
            "QEMU internal SIGSEGV {code=MAPERR, addr=0x8}",
            "qemu: uncaught target signal 11 (Segmentation fault) - core dumped",
        ] {
            assert!(plugin_race_crash(seen), "{seen}");
        }
        assert!(!plugin_race_crash("threads: bad argument\n"));
        assert!(!plugin_race_crash(""));
    }

    #[test]
    fn streams_file() {
        let d = RunDir::new();
        fs::write(
            d.file("streams.txt"),
            "dump-1-1.txt pid 1 ppid 0 tid 1 exe /a b\ndump-1-1.1.txt pid 1 ppid 0 tid 1 exe -\n",
        )
        .unwrap();
        let s = Streams::read(d.path()).unwrap();
        assert_eq!(s.0.len(), 2);
        assert_eq!(s.0[0].exe, "/a b");
        assert_eq!(s.of(1, 1).len(), 2);
    }
}
