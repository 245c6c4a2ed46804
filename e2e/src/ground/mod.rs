// SPDX-License-Identifier: GPL-2.0-or-later
//! Ground truth for the hook-type and syscall tests (`tests/hooks.rs`,
//! `tests/syscalls.rs`): running a guest with the tests' own hook library
//! (`libe2e_hooks.so`, configured by `CANNOLI_TEST_*` variables), and parsing
//! what QEMU itself says about the same program under the same conditions:
//!
//! * `-strace` ([`parse_strace`]): every syscall with its arguments, as
//!   `linux-user/strace.c` prints them, and its result;
//! * `contrib/plugins/libexeclog.so,reg=*` ([`parse_execlog_regs`]): the pc
//!   sequence, each pc's disassembly, and the register *changes*: the plugin
//!   prints an instruction's line when the *next* instruction starts, after
//!   comparing every register with the values it saw last, so the changes on
//!   line `k` are the values *after* instruction `k` (and line 0's are
//!   relative to the values read when the vCPU was created). The state before
//!   instruction `k + 1` is therefore the state before `k` updated with line
//!   `k`'s changes ([`states_from_changes`]). QEMU's MIPS target exposes no
//!   registers to plugins (it has no gdb XML description), so on mipsel the
//!   log has no changes at all;
//! * `-one-insn-per-tb -d cpu,nochain` ([`parse_cpu_log`]): QEMU logs the
//!   whole CPU state before executing each translation block; with one
//!   instruction per block and no chaining that is the state before every
//!   instruction. This is the register ground truth on mipsel, and a second
//!   one on riscv64;
//! * `-d in_asm` ([`parse_in_asm`]): every translation block as QEMU
//!   translated it, in translation order;
//! * the guest ELF's symbol table and code ([`Elf`]).
//!
//! One file each: `strace.rs` (`-strace`), `regs.rs` (libexeclog's
//! registers, `-d cpu`, `-d in_asm`, the hook library's log), `elf.rs`;
//! running the guests is here.
//!
//! The `cannoli-dump` lines these tests look at are parsed by
//! [`crate::dump`] ([`DumpEvents`], [`SyscallEvent`], [`RegsEvent`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

pub use crate::dump::{parse_dump_events, DumpEvents};
pub use crate::lines::{for_lines, parse_hex};
pub use crate::model::{RegsEvent, SyscallEvent};
use crate::{
    assert_traced_success, finish_guest, qemu_builds, release_artifact, spawn_guest, DumpClient,
    GuestCmd, GuestRun, Plugin, RunDir,
};

mod elf;
mod regs;
mod strace;
#[cfg(test)]
mod tests;

pub use elf::*;
pub use regs::*;
pub use strace::*;

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

/// The tests' hook library (`e2e/hooks`), configured by `CANNOLI_TEST_*`.
pub fn hooks_lib() -> PathBuf {
    release_artifact("libe2e_hooks.so")
}

/// How to trace a run.
#[derive(Debug, Clone)]
pub struct TraceOpts {
    /// The hook library given to `-cannoli`.
    pub lib: PathBuf,
    /// `cannoli-dump --threads`.
    pub threads: usize,
    /// QEMU's environment besides `CANNOLI_ADDR` (e.g. `CANNOLI_TEST_HOOKS`;
    /// the patched QEMU hides every `CANNOLI_*` variable from the guest).
    pub env: Vec<(String, String)>,
    /// QEMU options placed before `-cannoli` (e.g. `-d in_asm -D file`).
    pub qemu_args: Vec<OsString>,
}

impl TraceOpts {
    /// [`hooks_lib`] with `CANNOLI_TEST_HOOKS=mode`, two client threads.
    pub fn hooks(mode: &str) -> TraceOpts {
        TraceOpts {
            lib: hooks_lib(),
            threads: 2,
            env: vec![("CANNOLI_TEST_HOOKS".into(), mode.into())],
            qemu_args: Vec::new(),
        }
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
    pub fn qemu_arg(mut self, a: impl Into<OsString>) -> Self {
        self.qemu_args.push(a.into());
        self
    }
}

/// One traced run.
pub struct Traced {
    pub guest: GuestRun,
    /// QEMU's process id: the guest's pid and main thread id.
    pub pid: u32,
    pub client_status: ExitStatus,
    pub client_stderr: String,
    /// The `cannoli-dump` output.
    pub dump: PathBuf,
}

impl Traced {
    /// Panics unless QEMU and the client both exited 0.
    pub fn assert_success(&self) {
        assert_traced_success(&self.guest, &self.client_status, &self.client_stderr);
    }
}

/// Like [`crate::run_cannoli`], with any hook library, environment and
/// extra QEMU options, and QEMU's pid.
pub fn run_traced(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
    opts: &TraceOpts,
) -> Traced {
    let q = qemu_builds();
    let mut client = DumpClient::start(dir, tag, opts.threads);
    let mut cmd = GuestCmd::new(arch, q.qemu(arch), prog, args);
    for a in &opts.qemu_args {
        cmd = cmd.qemu_arg(a.clone());
    }
    cmd = cmd
        .qemu_arg("-cannoli")
        .qemu_arg(&opts.lib)
        .env("CANNOLI_ADDR", &client.addr)
        .env("CANNOLI_TOKEN", &client.token);
    for (k, v) in &opts.env {
        cmd = cmd.env(k, v);
    }
    let child = spawn_guest(dir, tag, &cmd);
    let pid = child.id();
    let guest = finish_guest(dir, tag, &cmd, child);
    let (client_status, client_stderr) = client.finish(&guest);
    Traced {
        guest,
        pid,
        client_status,
        client_stderr,
        dump: client.out.clone(),
    }
}

/// Runs `prog args` under the patched QEMU (no cannoli) with `qemu_args`,
/// which are expected to log to `<tag>.log` (`-D`); returns the run, the
/// log's path and QEMU's pid.
pub fn run_logged(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
    qemu_args: &[OsString],
) -> (GuestRun, PathBuf, u32) {
    let q = qemu_builds();
    let log = dir.file(&format!("{tag}.log"));
    let mut cmd = GuestCmd::new(arch, q.qemu(arch), prog, args);
    for a in qemu_args {
        cmd = cmd.qemu_arg(a.clone());
    }
    cmd = cmd.qemu_arg("-D").qemu_arg(log.clone());
    let child = spawn_guest(dir, tag, &cmd);
    let pid = child.id();
    let run = finish_guest(dir, tag, &cmd, child);
    (run, log, pid)
}

/// QEMU's `-strace`, logged to `<tag>.log` with `-D` (so that the guest's
/// own stderr cannot interleave with it). Note that the log file is QEMU's
/// descriptor 3, as the client connection is under cannoli: the guest's
/// first free descriptor is 4 in both runs.
pub fn run_strace(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
) -> (GuestRun, PathBuf, u32) {
    run_logged(dir, tag, arch, prog, args, &["-strace".into()])
}

/// libexeclog with `reg=*` (every register the target exposes), and `-d
/// page` in the same log (see [`crate::pages`]); returns the run, the log
/// and QEMU's pid.
pub fn run_execlog_regs(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
) -> (GuestRun, PathBuf, u32) {
    let mut spec = qemu_builds().plugin(Plugin::Execlog).into_os_string();
    spec.push(",reg=*");
    run_logged(
        dir,
        tag,
        arch,
        prog,
        args,
        &["-plugin".into(), spec, "-d".into(), "plugin,page".into()],
    )
}

/// The CPU state before every instruction (`-one-insn-per-tb -d
/// cpu,nochain`); returns the run, the log and QEMU's pid.
pub fn run_cpu_log(
    dir: &RunDir,
    tag: &str,
    arch: &str,
    prog: &Path,
    args: &[&str],
) -> (GuestRun, PathBuf, u32) {
    run_logged(
        dir,
        tag,
        arch,
        prog,
        args,
        &["-one-insn-per-tb".into(), "-d".into(), "cpu,nochain".into()],
    )
}

// ---------------------------------------------------------------------------
// Small parsing helpers
// ---------------------------------------------------------------------------

/// `v` reduced to `bits` bits.
pub fn mask(v: u64, bits: u32) -> u64 {
    if bits >= 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    }
}
