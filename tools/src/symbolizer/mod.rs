//! `symbolizer`: a cannoli client that prints every executed instruction and
//! memory access of the guest as `symbol+offset`.
//!
//! One command: `symbolizer [OPTIONS] ./prog ARGS...` starts the client,
//! runs `./prog` under the patched QEMU with `-cannoli libsymbolizer.so` (the
//! hook library of this package, which records every instruction and memory
//! access) and exits with the program's status (see the `cannoli-launch`
//! crate). Or, in two terminals, start it without a program, then QEMU:
//!
//! ```text
//! $ symbolizer --binary ./prog > trace.txt &
//! $ qemu-mipsel -cannoli target/release/libsymbolizer.so ./prog
//! ```
//!
//! Symbols are looked up in the worker threads (the parallel phase); the
//! serial phase only formats and prints.

mod symbols;

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use cannoli::{Cannoli, ClientInfo};
use symbols::{Loc, Symbols};

const USAGE: &str = "\
usage: symbolizer [OPTIONS] [--] PROGRAM [ARGS...]
       symbolizer [OPTIONS]

Prints every instruction and memory access traced by QEMU (-cannoli
libsymbolizer.so) as symbol+offset.

With a PROGRAM, runs it under the patched QEMU for its architecture (found
via $CANNOLI_QEMU, $CANNOLI_QEMU_DIR or target/qemu.env) and exits with its
exit status once the trace is printed; extra QEMU options go in
$CANNOLI_QEMU_ARGS. Without one, listens for QEMU started separately with
-cannoli libsymbolizer.so (start this first).

options:
  --binary PATH     guest ELF to read symbols from (default: the guest's exe)
  --symbols FILE    extra symbols in nm format (ADDR TYPE NAME or nm -S lines)
  --base ADDR       load address to add to the symbols (PIE binaries)
  --threads N       worker threads per traced thread (default 2)
  --listen ADDR     without PROGRAM: address to listen on
                    (default $CANNOLI_ADDR or 127.0.0.1:11458)
  -o, --output FILE write the trace to FILE instead of stdout
  --no-mem          do not print memory accesses
  --limit N         print at most N trace lines (events are still consumed)
  --color WHEN      auto, always or never (default auto: when the trace goes
                    to a terminal)
  -h, --help        this text";

#[derive(Debug, Clone)]
struct Opts {
    binary: Option<PathBuf>,
    symbols: Option<PathBuf>,
    base: u64,
    threads: usize,
    /// `--listen`, for the classic mode.
    listen: Option<String>,
    output: Option<PathBuf>,
    mem: bool,
    limit: Option<u64>,
    color: bool,
    /// `PROGRAM ARGS...`: launch mode when not empty.
    program: Vec<OsString>,
}

fn parse_num(s: &str, what: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("{what} wants a number, got {s:?}"))
}

fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Option<Opts>, String> {
    let mut o = Opts {
        binary: None,
        symbols: None,
        base: 0,
        threads: 2,
        listen: None,
        output: None,
        mem: true,
        limit: None,
        color: false,
        program: Vec::new(),
    };
    // None: auto.
    let mut color = None;
    use lexopt::Arg::{Long, Short, Value};
    let mut p = lexopt::Parser::from_args(args);
    // `--opt value` and `--opt=value` alike.
    let value = |p: &mut lexopt::Parser, name: &str| -> Result<String, String> {
        p.value()
            .map(|v| v.to_string_lossy().into_owned())
            .map_err(|_| format!("{name} needs a value"))
    };
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            // The first argument that is not an option (or the one after
            // `--`) is the program; it and everything after it are its
            // command line.
            Value(prog) => {
                o.program.push(prog);
                o.program.extend(p.raw_args().map_err(|e| e.to_string())?);
            }
            Short('h') | Long("help") => return Ok(None),
            Long("binary") => o.binary = Some(value(&mut p, "--binary")?.into()),
            Long("symbols") => o.symbols = Some(value(&mut p, "--symbols")?.into()),
            Long("base") => o.base = parse_num(&value(&mut p, "--base")?, "--base")?,
            Long("threads") => {
                o.threads = parse_num(&value(&mut p, "--threads")?, "--threads")? as usize;
                if o.threads == 0 {
                    return Err("--threads must be at least 1".into());
                }
            }
            Long("listen") => o.listen = Some(value(&mut p, "--listen")?),
            Short('o') | Long("output") => o.output = Some(value(&mut p, "--output")?.into()),
            Long("no-mem") => o.mem = false,
            Long("limit") => o.limit = Some(parse_num(&value(&mut p, "--limit")?, "--limit")?),
            Long("color" | "colour") => {
                color = match value(&mut p, "--color")?.as_str() {
                    "always" => Some(true),
                    "never" => Some(false),
                    "auto" => None,
                    v => return Err(format!("--color wants auto, always or never, got {v:?}")),
                }
            }
            Short(c) => return Err(format!("unknown argument \"-{c}\"")),
            Long(l) => return Err(format!("unknown argument \"--{l}\"")),
        }
    }
    if o.listen.is_some() && !o.program.is_empty() {
        return Err(
            "--listen is for the two-terminal mode; with a PROGRAM the client listens on a free port"
                .into(),
        );
    }
    o.color = color.unwrap_or_else(|| o.output.is_none() && io::stdout().is_terminal());
    Ok(Some(o))
}

static OPTS: OnceLock<Opts> = OnceLock::new();

fn opts() -> &'static Opts {
    OPTS.get()
        .expect("options are set before the server starts")
}

// ---------------------------------------------------------------------------
// Symbol tables, one per guest executable, shared by the processes running it
// ---------------------------------------------------------------------------

static TABLES: Mutex<Option<HashMap<Option<PathBuf>, Arc<Symbols>>>> = Mutex::new(None);

/// The table for a process whose executable is `exe` (when no `--binary`).
fn table_for(exe: Option<&str>) -> Arc<Symbols> {
    let o = opts();
    let path = o.binary.clone().or_else(|| exe.map(PathBuf::from));
    let mut tables = TABLES.lock().unwrap();
    let tables = tables.get_or_insert_with(HashMap::new);
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
                        p.display()
                    );
                }
                t
            }
            Err(e) => {
                eprintln!("symbolizer: {e}; printing bare addresses");
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
            .map(|p| p.display().to_string())
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

static OUT: Mutex<Option<Out>> = Mutex::new(None);

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
        write!(w, " {}{name}+{off:#x}{}", p.sym, p.reset)?;
    }
    Ok(())
}

fn write_lines(out: &mut Out, pid: &Pid, tid: &Tid, trace: &[Line]) -> io::Result<()> {
    let o = opts();
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
        Arc::new(Pid {
            pid: ci.pid,
            syms: table_for(ci.exe.as_deref()),
            mem: opts().mem,
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
        let mut guard = OUT.lock().unwrap();
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

fn main() {
    let o = match parse_args(std::env::args_os().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("symbolizer: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let w = launch::Output::to_or_exit(o.output.as_deref(), "the trace");
    let mut launcher = launch::Launcher::new(launch::Options {
        hooks: "symbolizer",
        threads: o.threads,
    });
    if let Some(addr) = &o.listen {
        launcher = launcher.listen(addr.clone());
    }
    let program = o.program.clone();
    OPTS.set(o).expect("options set once");
    *OUT.lock().unwrap() = Some(Out {
        w,
        lines: 0,
        stopped: false,
        last: None,
    });

    let start = Instant::now();
    let result = launcher.run::<Symbolizer>(program);
    let secs = start.elapsed().as_secs_f64();

    let out = OUT.lock().unwrap().take().expect("set above");
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
            std::process::exit(report.finish_with_output("symbolizer", written));
        }
        Err(e) => {
            eprintln!("symbolizer: {e}");
            if let Err(w) = written {
                w.report("symbolizer");
            }
            std::process::exit(e.exit_code());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn options() {
        let o = parse_args(args(
            "--binary /bin/x --threads 4 --no-mem --limit 10 --color never --base 0x1000",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(o.binary.as_deref(), Some(std::path::Path::new("/bin/x")));
        assert_eq!(
            (o.threads, o.mem, o.limit, o.color, o.base),
            (4, false, Some(10), false, 0x1000)
        );
        let o = parse_args(args("--listen=127.0.0.1:5 --color=always"))
            .unwrap()
            .unwrap();
        assert_eq!(o.listen.as_deref(), Some("127.0.0.1:5"));
        assert!(o.color);
        assert!(o.program.is_empty());
        assert!(parse_args(args("--help")).unwrap().is_none());
        assert!(parse_args(args("--threads"))
            .unwrap_err()
            .contains("needs a value"));
        assert!(parse_args(args("--threads x"))
            .unwrap_err()
            .contains("number"));
        assert!(parse_args(args("--bogus")).unwrap_err().contains("--bogus"));
        assert!(parse_args(args("--color sometimes")).is_err());
    }

    #[test]
    fn program_and_its_arguments() {
        let o = parse_args(args("--no-mem ./prog --limit 3 -x"))
            .unwrap()
            .unwrap();
        assert!(!o.mem);
        assert_eq!(o.limit, None);
        assert_eq!(o.program, args("./prog --limit 3 -x"));
        let o = parse_args(args("--threads 1 -- --weird-name a"))
            .unwrap()
            .unwrap();
        assert_eq!((o.threads, o.program), (1, args("--weird-name a")));
        let o = parse_args(args("-o /tmp/t.txt prog")).unwrap().unwrap();
        assert_eq!(
            o.output.as_deref(),
            Some(std::path::Path::new("/tmp/t.txt"))
        );
        assert!(!o.color, "auto colour is off when the trace goes to a file");
        assert!(parse_args(args("--listen 127.0.0.1:1 prog"))
            .unwrap_err()
            .contains("--listen"));
    }
}
