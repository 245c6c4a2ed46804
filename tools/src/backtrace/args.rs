// SPDX-License-Identifier: GPL-2.0-or-later
//! The command line of `backtrace` (and `cannoli backtrace`): its options,
//! and the one line that `--help` and the `cannoli` command's list show.

use std::ffi::OsString;
use std::path::PathBuf;

/// One line for `backtrace --help` and `cannoli --help`.
pub const ABOUT: &str =
    "The call stack of every guest thread as JSON lines, at every function entry and exit";

/// The command line of `backtrace` (and `cannoli backtrace`).
// No doc comment on the struct: clap would take it for the command's about.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "\
Prints one JSON line at every function entry and exit, with the whole
backtrace:

  {\"event\":\"enter\",\"pid\":7,\"tid\":7,\"function\":\"bt_leaf\",\"pc\":\"0x400760\",
   \"via\":\"call\",\"from\":\"0x40059c\",\"return\":\"0x4005a4\",\"depth\":5,
   \"backtrace\":[\"__start\",\"__libc_start_main_impl\",\"__libc_start_call_main\",\"main\",\"bt_leaf\"]}
  {\"event\":\"exit\",\"pid\":7,\"tid\":7,\"function\":\"bt_leaf\",\"pc\":\"0x4005a4\",
   \"from\":\"0x400778\",\"depth\":4,\"backtrace\":[...]}

via: call, jump (a tail call), signal (a handler) or start (a thread's first
frame). pc: the function's first instruction (enter), where execution goes
on (exit). from: the branch instruction. return: where the frame returns to.

With a PROGRAM, runs it under the patched QEMU for its architecture (found
via $CANNOLI_QEMU, $CANNOLI_QEMU_DIR, $CANNOLI_QEMU_BUILD or target/qemu.env)
and exits with its exit status once the trace is processed; extra QEMU
options go in $CANNOLI_QEMU_ARGS. Without one, listens for QEMU started
separately with -cannoli libbacktrace.so (start this first).

Guests: mipsel, mips, mips64el, riscv64, arm (A32 and Thumb), aarch64,
ppc64le, x86_64, i386.")]
pub struct Args {
    /// Guest ELF to read symbols from (default: the guest's exe)
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    #[command(flatten)]
    pub workers: crate::args::Workers,
    /// Without PROGRAM: address to listen on (default $CANNOLI_ADDR or
    /// 127.0.0.1:11458); with a PROGRAM the client listens on a free port
    #[arg(long, value_name = "ADDR", conflicts_with = "program")]
    pub listen: Option<String>,
    /// Write the JSON lines to FILE instead of stdout
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// No summary line on stderr
    #[arg(short, long)]
    pub quiet: bool,
    /// Read a recording made by `cannoli record` instead of running a
    /// program
    #[arg(long, value_name = "FILE", conflicts_with_all = ["program", "listen"])]
    pub replay: Option<PathBuf>,
    /// Show C++ and Rust function names as the symbol table has them
    /// (`_ZN3geo3Box4areaEv`), not demangled (`geo::Box::area()`)
    #[arg(long)]
    pub no_demangle: bool,
    /// The program to trace and its arguments (options after PROGRAM are
    /// its own); without one, listens for a QEMU started separately
    #[arg(value_name = "PROGRAM", trailing_var_arg = true)]
    pub program: Vec<OsString>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// `s` as backtrace's command line; `Err` is clap's one-line message.
    fn parse(s: &str) -> Result<Args, String> {
        crate::args::parse_line("backtrace", s)
    }

    #[test]
    fn options() {
        let o = parse("--binary /bin/x --threads 4 -o /tmp/t.jsonl -q").unwrap();
        assert_eq!(o.binary.as_deref(), Some(Path::new("/bin/x")));
        assert_eq!(o.output.as_deref(), Some(Path::new("/tmp/t.jsonl")));
        assert_eq!((o.workers.threads, o.quiet), (4, true));
        assert!(o.program.is_empty() && o.replay.is_none());
        let o = parse("").unwrap();
        assert_eq!(
            (o.workers.threads, o.quiet),
            (cannoli::default_workers(), false)
        );
        let o = parse("--listen=127.0.0.1:5").unwrap();
        assert_eq!(o.listen.as_deref(), Some("127.0.0.1:5"));
        assert!(parse("--threads").unwrap_err().contains("--threads"));
        assert!(parse("--threads 0").unwrap_err().contains("at least 1"));
        assert!(parse("--bogus").unwrap_err().contains("--bogus"));
    }

    #[test]
    fn program_and_its_arguments() {
        let o = parse("-q ./prog -o x --threads 3").unwrap();
        assert!(o.quiet);
        assert_eq!(o.output, None);
        assert_eq!(o.program, crate::args::words("./prog -o x --threads 3"));
        let o = parse("-- --odd-name a").unwrap();
        assert_eq!(o.program, crate::args::words("--odd-name a"));
        assert!(parse("--listen 127.0.0.1:1 prog")
            .unwrap_err()
            .contains("--listen"));
    }

    #[test]
    fn a_replay_runs_no_program_and_listens_nowhere() {
        let o = parse("--replay run.rec -o x").unwrap();
        assert_eq!(o.replay.as_deref(), Some(Path::new("run.rec")));
        assert!(parse("--replay run.rec prog")
            .unwrap_err()
            .contains("--replay"));
        let e = parse("--replay run.rec --listen 127.0.0.1:1").unwrap_err();
        assert!(e.contains("--replay") && e.contains("--listen"), "{e}");
    }
}
