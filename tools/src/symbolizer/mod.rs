// SPDX-License-Identifier: GPL-2.0-or-later
//! `symbolizer`: a cannoli client that prints every executed instruction and
//! memory access of the guest as `symbol+offset`.
//!
//! One command: `symbolizer [OPTIONS] ./prog ARGS...` starts the client,
//! runs `./prog` under the patched QEMU with `-cannoli libsymbolizer.so` (the
//! hook library of the `symbolizer` example, which records every
//! instruction and memory access) and exits with the program's status (see
//! the `launch` crate). Or, in two terminals, start it without a
//! program, then QEMU:
//!
//! ```text
//! $ symbolizer --binary ./prog > trace.txt &
//! $ qemu-mipsel -cannoli target/release/libsymbolizer.so ./prog
//! ```
//!
//! Or replay a recording of `cannoli record` (`--replay FILE`) without
//! running anything.
//!
//! Symbols are looked up in the worker threads (the parallel phase); the
//! serial phase only formats and prints.

pub mod symbols;

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cannoli::recording::Needs;
use cannoli::{Cannoli, ClientInfo};
use symbols::{Loc, Symbols};

/// One line for `--help` and the `cannoli` command's list.
pub const ABOUT: &str =
    "Prints every instruction and memory access traced by QEMU as symbol+offset";

/// The command line of `symbolizer`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Guest ELF to read symbols from (default: the guest's executable)
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Extra symbols in nm format (ADDR TYPE NAME or nm -S lines)
    #[arg(long, value_name = "FILE")]
    pub symbols: Option<PathBuf>,
    /// Load address to add to the symbols (PIE binaries)
    #[arg(long, value_name = "ADDR", default_value = "0", value_parser = parse_num)]
    pub base: u64,
    /// Worker threads per traced thread: by default one per core beyond QEMU's thread, 2 to 16
    #[arg(long, value_name = "N", default_value_t = cannoli::default_workers(), value_parser = crate::args::threads)]
    pub threads: usize,
    /// Without PROGRAM: address to listen on (default $CANNOLI_ADDR or
    /// 127.0.0.1:11458)
    #[arg(long, value_name = "ADDR", conflicts_with = "program")]
    pub listen: Option<String>,
    /// Write the trace to FILE instead of stdout
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Do not print memory accesses
    #[arg(long)]
    pub no_mem: bool,
    /// Print at most N trace lines (events are still consumed)
    #[arg(long, value_name = "N", value_parser = parse_num)]
    pub limit: Option<u64>,
    /// Colour the trace: auto (when it goes to a terminal), always or never
    #[arg(long, alias = "colour", value_name = "WHEN", default_value = "auto")]
    pub color: When,
    /// Show C++ and Rust symbols as the symbol table has them
    /// (`_ZN3geo3Box4areaEv`), not demangled (`geo::Box::area()`)
    #[arg(long)]
    pub no_demangle: bool,
    /// Read a recording made by `cannoli record` instead of running a
    /// program
    #[arg(long, value_name = "FILE", conflicts_with_all = ["program", "listen"])]
    pub replay: Option<PathBuf>,
    /// The program to run under the patched QEMU for its architecture
    /// (found via $CANNOLI_QEMU, $CANNOLI_QEMU_DIR or target/qemu.env), and
    /// its arguments; exits with its exit status once the trace is printed.
    /// Extra QEMU options go in $CANNOLI_QEMU_ARGS. Without one (and
    /// without --replay), listens for QEMU started separately with -cannoli
    /// libsymbolizer.so (start this first)
    #[arg(value_name = "PROGRAM", trailing_var_arg = true)]
    pub program: Vec<OsString>,
}

/// When to colour the trace.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Auto,
    Always,
    Never,
}

impl Args {
    /// Whether the trace is coloured (`auto`: when it goes to a terminal).
    fn color(&self) -> bool {
        match self.color {
            When::Always => true,
            When::Never => false,
            When::Auto => self.output.is_none() && io::stdout().is_terminal(),
        }
    }
}

/// A number in decimal or, with `0x`, in hex.
fn parse_num(s: &str) -> Result<u64, NotANumber> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| NotANumber)
}

/// An option's value that is not a number.
#[derive(Debug, thiserror::Error)]
#[error("wants a number")]
struct NotANumber;

/// What the callbacks need of the command line.
struct Settings {
    binary: Option<PathBuf>,
    symbols: Option<PathBuf>,
    base: u64,
    mem: bool,
    limit: Option<u64>,
    color: bool,
    /// C++ and Rust names shown demangled (no `--no-demangle`).
    demangle: bool,
}

/// One run of the symbolizer: what [`main`] builds from the command line
/// and hands to the run, reached by each process's [`Pid`].
struct Run {
    settings: Settings,
    /// Symbol tables, one per guest executable (or `--binary`), shared by
    /// the processes running it.
    tables: Mutex<HashMap<Option<PathBuf>, Arc<Symbols>>>,
    /// The trace output; [`main`] takes it back after the run.
    out: Mutex<Option<Out>>,
}

// ---------------------------------------------------------------------------
// Symbol tables, one per guest executable, shared by the processes running it
// ---------------------------------------------------------------------------

/// The table for a process whose executable is `exe` (when no `--binary`).
fn table_for(run: &Run, exe: Option<&str>) -> Arc<Symbols> {
    let o = &run.settings;
    let path = o.binary.clone().or_else(|| exe.map(PathBuf::from));
    let mut tables = run.tables.lock().unwrap();
    if let Some(t) = tables.get(&path) {
        return t.clone();
    }
    let mut t = match &path {
        Some(p) => match Symbols::from_elf(p, o.base) {
            Ok(t) => {
                if t.pie && o.base == 0 {
                    eprintln!(
                        "symbolizer: {} is position independent; pass --base ADDR with its load address \
                         or the symbols will not match",
                        cannoli::wire::escape(&p.display().to_string())
                    );
                }
                t
            }
            Err(e) => {
                let e = e.to_string();
                eprintln!(
                    "symbolizer: {}; printing bare addresses",
                    cannoli::wire::escape(&e)
                );
                Symbols::default()
            }
        },
        None => Symbols::default(),
    };
    if let Some(nm) = &o.symbols {
        match std::fs::read_to_string(nm) {
            Ok(text) => t = t.merge(Symbols::from_nm(&text, o.base)),
            Err(e) => eprintln!("symbolizer: cannot read {}: {e}", nm.display()),
        }
    }
    if !t.is_empty() {
        let from: Vec<String> = path
            .iter()
            .chain(o.symbols.iter())
            .map(|p| cannoli::wire::escape(&p.display().to_string()).into_owned())
            .collect();
        eprintln!(
            "symbolizer: {} symbols from {}",
            t.len(),
            from.join(" and ")
        );
    }
    if t.is_empty() && path.is_none() && o.symbols.is_none() {
        eprintln!("symbolizer: QEMU did not say which program runs and no --binary was given; printing bare addresses");
    }
    if o.demangle {
        t = t.demangled();
    }
    let t = Arc::new(t);
    tables.insert(path, t.clone());
    t
}

// ---------------------------------------------------------------------------
// The tool
// ---------------------------------------------------------------------------

/// One printed line, symbolized in the parallel phase.
enum Line {
    Exec {
        pc: u64,
        at: Option<Loc>,
    },
    Mem {
        pc: u64,
        at: Option<Loc>,
        write: bool,
        sz: u8,
        addr: u64,
        val: u64,
        addr_at: Option<Loc>,
    },
}

struct Pid {
    pid: i32,
    run: Arc<Run>,
    syms: Arc<Symbols>,
    /// Print memory accesses (no --no-mem).
    mem: bool,
}

struct Tid {
    tid: i32,
    /// Hex digits of a guest address.
    width: usize,
}

struct Symbolizer;

/// The shared, buffered trace output (stdout or `-o FILE`).
struct Out {
    /// Keeps its first write error for the end (see `launch::Output`).
    w: launch::Output,
    /// Trace lines printed.
    lines: u64,
    /// --limit reached.
    stopped: bool,
    /// Thread whose lines were printed last.
    last: Option<(i32, i32)>,
}

const RESET: &str = "\x1b[0m";
const DIM: &str = "\x1b[2m";
const BOLD: &str = "\x1b[1m";
const CYAN: &str = "\x1b[36m";
const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const MAGENTA: &str = "\x1b[35m";

/// Colours, or empty strings.
struct Pal {
    reset: &'static str,
    dim: &'static str,
    bold: &'static str,
    sym: &'static str,
    read: &'static str,
    write: &'static str,
    val: &'static str,
}

impl Pal {
    fn new(color: bool) -> Pal {
        if color {
            Pal {
                reset: RESET,
                dim: DIM,
                bold: BOLD,
                sym: CYAN,
                read: GREEN,
                write: RED,
                val: MAGENTA,
            }
        } else {
            Pal {
                reset: "",
                dim: "",
                bold: "",
                sym: "",
                read: "",
                write: "",
                val: "",
            }
        }
    }
}

fn write_sym(w: &mut impl Write, syms: &Symbols, at: Option<Loc>, p: &Pal) -> io::Result<()> {
    if let Some(l) = at {
        let (name, off) = syms.name(l);
        // A symbol's name is the program's to choose: no control character
        // reaches the terminal.
        let name = cannoli::wire::escape(name);
        write!(w, " {}{name}+{off:#x}{}", p.sym, p.reset)?;
    }
    Ok(())
}

fn write_lines(out: &mut Out, pid: &Pid, tid: &Tid, trace: &[Line]) -> io::Result<()> {
    let o = &pid.run.settings;
    let p = Pal::new(o.color);
    let width = tid.width;
    if out.last != Some((pid.pid, tid.tid)) {
        out.last = Some((pid.pid, tid.tid));
        writeln!(
            out.w,
            "{}== pid {} tid {} =={}",
            p.bold, pid.pid, tid.tid, p.reset
        )?;
    }
    for line in trace {
        if let Some(limit) = o.limit {
            if out.lines >= limit {
                out.stopped = true;
                break;
            }
        }
        out.lines += 1;
        match *line {
            Line::Exec { pc, at } => {
                write!(out.w, "  {}0x{pc:0width$x}{}", p.dim, p.reset)?;
                write_sym(&mut out.w, &pid.syms, at, &p)?;
                out.w.write_all(b"\n")?;
            }
            Line::Mem {
                pc,
                at,
                write,
                sz,
                addr,
                val,
                addr_at,
            } => {
                write!(out.w, "  {}0x{pc:0width$x}{}", p.dim, p.reset)?;
                write_sym(&mut out.w, &pid.syms, at, &p)?;
                let (c, rw) = if write { (p.write, 'W') } else { (p.read, 'R') };
                write!(out.w, "   {c}{rw}{sz}{} [0x{addr:0width$x}", p.reset)?;
                write_sym(&mut out.w, &pid.syms, addr_at, &p)?;
                writeln!(out.w, "] = {}{val:#x}{}", p.val, p.reset)?;
            }
        }
    }
    Ok(())
}

impl Cannoli for Symbolizer {
    type Trace = Line;
    type TidContext = Tid;
    type PidContext = Pid;

    fn init_pid(ci: &ClientInfo) -> Arc<Pid> {
        let run = ci.expect_state::<Run>();
        Arc::new(Pid {
            pid: ci.pid,
            syms: table_for(&run, ci.exe.as_deref()),
            mem: run.settings.mem,
            run,
        })
    }

    fn init_tid(_pid: &Pid, ci: &ClientInfo) -> (Self, Tid) {
        let width = if ci.guest_bits > 32 { 16 } else { 8 };
        (Symbolizer, Tid { tid: ci.tid, width })
    }

    #[inline]
    fn exec(pid: &Pid, _tid: &Tid, pc: u64, trace: &mut Vec<Line>) {
        trace.push(Line::Exec {
            pc,
            at: pid.syms.symbol(pc),
        });
    }

    #[inline]
    fn read(pid: &Pid, _tid: &Tid, pc: u64, addr: u64, val: u64, sz: u8, trace: &mut Vec<Line>) {
        mem(pid, pc, false, addr, val, sz, trace);
    }

    #[inline]
    fn write(pid: &Pid, _tid: &Tid, pc: u64, addr: u64, val: u64, sz: u8, trace: &mut Vec<Line>) {
        mem(pid, pc, true, addr, val, sz, trace);
    }

    fn trace(&mut self, pid: &Pid, tid: &Tid, trace: &[Line]) {
        let mut guard = pid.run.out.lock().unwrap();
        let Some(out) = guard.as_mut() else { return };
        // After a write error (or --limit) the events are still consumed,
        // so that QEMU does not block, but no longer formatted.
        if out.stopped || !out.w.is_writing() {
            return;
        }
        // `Output` keeps its errors for the end; only EINTR comes back,
        // after write_all has retried it.
        let _ = write_lines(out, pid, tid, trace);
    }
}

#[inline]
fn mem(pid: &Pid, pc: u64, write: bool, addr: u64, val: u64, sz: u8, trace: &mut Vec<Line>) {
    if pid.mem {
        trace.push(Line::Mem {
            pc,
            at: pid.syms.symbol(pc),
            write,
            sz,
            addr,
            val,
            addr_at: pid.syms.locate(addr),
        });
    }
}

/// Runs the symbolizer; returns the exit status (the program's, or 1 or
/// 2 when something went wrong before or around it).
pub fn main(args: Args) -> i32 {
    let w = match &args.output {
        None => launch::Output::stdout("the trace"),
        Some(path) => match launch::Output::create(path, "the trace") {
            Ok(w) => w,
            Err(e) => {
                eprintln!("symbolizer: {e}");
                return 1;
            }
        },
    };
    let mut launcher = launch::Launcher::new(launch::Options {
        hooks: "symbolizer",
        threads: args.threads,
    });
    if let Some(addr) = &args.listen {
        launcher = launcher.listen(addr.clone());
    }
    let needs = Needs {
        exec: true,
        mem: !args.no_mem,
        regs: None,
        mem_optional: Some("--no-mem"),
        branch_flags: false,
    };
    let settings = Settings {
        color: args.color(),
        binary: args.binary,
        symbols: args.symbols,
        base: args.base,
        mem: !args.no_mem,
        limit: args.limit,
        demangle: !args.no_demangle,
    };
    let run = Arc::new(Run {
        settings,
        tables: Mutex::new(HashMap::new()),
        out: Mutex::new(Some(Out {
            w,
            lines: 0,
            stopped: false,
            last: None,
        })),
    });
    let launcher = launcher.state(run.clone());

    let start = Instant::now();
    let flush = || {
        if let Ok(mut out) = run.out.lock() {
            if let Some(o) = out.as_mut() {
                let _ = o.w.flush();
            }
        }
    };
    let result = launch::flushing_while(args.replay.is_none(), flush, || {
        crate::input::run::<Symbolizer>(launcher, args.replay.as_deref(), needs, args.program)
    });
    let secs = start.elapsed().as_secs_f64();

    let out = run.out.lock().unwrap().take().expect("set above");
    let (lines, stopped) = (out.lines, out.stopped || out.w.reader_gone());
    let written = out.w.finish();
    match result {
        Ok(report) => {
            let st = &report.stats;
            let mut extra = format!(", {}", st.loss_summary());
            if stopped {
                extra += &format!(", printed {lines} lines");
            }
            eprintln!(
                "symbolizer: {} events in {} chunks from {} guest thread{}, {secs:.3} s, {:.1} M events/s{extra}",
                st.events,
                st.chunks,
                st.connections,
                if st.connections == 1 { "" } else { "s" },
                st.events as f64 / secs.max(1e-9) / 1e6
            );
            report.finish_with_output("symbolizer", written)
        }
        Err(e) => {
            eprintln!("symbolizer: {e}");
            if let Err(w) = written {
                w.report("symbolizer");
            }
            e.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// `s` as symbolizer's command line; `Err` is clap's one-line message.
    fn parse(s: &str) -> Result<Args, String> {
        crate::args::parse_line("symbolizer", s)
    }

    #[test]
    fn options() {
        let o =
            parse("--binary /bin/x --threads 4 --no-mem --limit 10 --color never --base 0x1000")
                .unwrap();
        assert_eq!(o.binary.as_deref(), Some(std::path::Path::new("/bin/x")));
        assert_eq!(
            (o.threads, o.no_mem, o.limit, o.color(), o.base),
            (4, true, Some(10), false, 0x1000)
        );
        let o = parse("--listen=127.0.0.1:5 --colour=always").unwrap();
        assert_eq!(o.listen.as_deref(), Some("127.0.0.1:5"));
        assert!(o.color());
        assert!(o.program.is_empty());
        let o = parse("").unwrap();
        assert_eq!((o.threads, o.base, o.no_mem, o.limit), (2, 0, false, None));
        assert!(parse("--threads").unwrap_err().contains("--threads"));
        assert!(parse("--threads x").unwrap_err().contains("number"));
        assert!(parse("--threads 0").unwrap_err().contains("at least 1"));
        assert!(parse("--bogus").unwrap_err().contains("--bogus"));
        assert!(parse("--color sometimes").is_err());
    }

    #[test]
    fn program_and_its_arguments() {
        let o = parse("--no-mem ./prog --limit 3 -x").unwrap();
        assert!(o.no_mem);
        assert_eq!(o.limit, None);
        assert_eq!(o.program, crate::args::words("./prog --limit 3 -x"));
        let o = parse("--threads 1 -- --weird-name a").unwrap();
        assert_eq!(
            (o.threads, o.program),
            (1, crate::args::words("--weird-name a"))
        );
        let o = parse("-o /tmp/t.txt prog").unwrap();
        assert_eq!(
            o.output.as_deref(),
            Some(std::path::Path::new("/tmp/t.txt"))
        );
        assert!(
            !o.color(),
            "auto colour is off when the trace goes to a file"
        );
        assert!(parse("--listen 127.0.0.1:1 prog")
            .unwrap_err()
            .contains("--listen"));
    }

    #[test]
    fn replay_is_instead_of_a_program_or_listening() {
        let o = parse("--replay run.rec --no-mem").unwrap();
        assert_eq!(o.replay.as_deref(), Some(std::path::Path::new("run.rec")));
        assert!(o.program.is_empty());
        for bad in [
            "--replay run.rec prog",
            "--replay run.rec --listen 127.0.0.1:1",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("--replay") && !e.contains('\n'), "{bad}: {e}");
        }
    }
}
