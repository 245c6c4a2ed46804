// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli-dump`: a cannoli client that writes the complete, ordered trace of
//! a guest to a text file, one event a line:
//!
//! ```text
//! X <pc>                              executed instruction
//! L <pc> <addr> <size> <value>        load
//! S <pc> <addr> <size> <value>        store
//! ```
//!
//! `pc`, `addr` and `value` are lowercase hex without `0x`; `size` is the
//! access size in bytes, in decimal. The end-to-end tests compare this file
//! against QEMU's own plugins (libinsn, libexeclog, libmem).
//!
//! usage: `cannoli-dump [--listen ADDR] [--threads N] [--out FILE] [-v]`
//!
//! The first line on stdout is `listening <addr>` (flushed at once), so a
//! caller that asked for port 0 learns the real port before starting QEMU.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use cannoli::{Cannoli, ClientInfo, Server};

/// Where `trace` writes; shared by every traced thread and process.
struct Output {
    w: Box<dyn Write + Send>,
    lines: u64,
    error: Option<io::Error>,
}

static OUT: OnceLock<Mutex<Output>> = OnceLock::new();
static VERBOSE: OnceLock<bool> = OnceLock::new();

/// One event, produced by the parallel callbacks and formatted by `trace`.
#[derive(Clone, Copy)]
enum Ev {
    Exec(u64),
    Load {
        pc: u64,
        addr: u64,
        val: u64,
        sz: u8,
    },
    Store {
        pc: u64,
        addr: u64,
        val: u64,
        sz: u8,
    },
}

struct Dump {
    buf: Vec<u8>,
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[inline]
fn push_hex(buf: &mut Vec<u8>, v: u64) {
    if v == 0 {
        buf.push(b'0');
        return;
    }
    let digits = (64 - v.leading_zeros()).div_ceil(4);
    for i in (0..digits).rev() {
        buf.push(HEX[((v >> (i * 4)) & 0xf) as usize]);
    }
}

#[inline]
fn push_dec(buf: &mut Vec<u8>, v: u8) {
    if v >= 100 {
        buf.push(b'0' + v / 100);
    }
    if v >= 10 {
        buf.push(b'0' + (v / 10) % 10);
    }
    buf.push(b'0' + v % 10);
}

#[inline]
fn push_mem(buf: &mut Vec<u8>, kind: u8, pc: u64, addr: u64, sz: u8, val: u64) {
    buf.push(kind);
    buf.push(b' ');
    push_hex(buf, pc);
    buf.push(b' ');
    push_hex(buf, addr);
    buf.push(b' ');
    push_dec(buf, sz);
    buf.push(b' ');
    push_hex(buf, val);
    buf.push(b'\n');
}

impl Cannoli for Dump {
    type Trace = Ev;
    type TidContext = ();
    type PidContext = ();

    fn init_pid(ci: &ClientInfo) -> Arc<Self::PidContext> {
        if *VERBOSE.get().unwrap_or(&false) {
            eprintln!(
                "cannoli-dump: process pid {} ppid {} arch {} ({}-bit, {}) exe {}",
                ci.pid,
                ci.ppid,
                ci.arch,
                ci.guest_bits,
                if ci.big_endian {
                    "big-endian"
                } else {
                    "little-endian"
                },
                ci.exe.as_deref().unwrap_or("?"),
            );
        }
        Arc::new(())
    }

    fn init_tid(_pid: &Self::PidContext, ci: &ClientInfo) -> (Self, Self::TidContext) {
        if *VERBOSE.get().unwrap_or(&false) {
            eprintln!("cannoli-dump: thread tid {} of pid {}", ci.tid, ci.pid);
        }
        (
            Dump {
                buf: Vec::with_capacity(1 << 16),
            },
            (),
        )
    }

    #[inline]
    fn exec(_pid: &(), _tid: &(), pc: u64, trace: &mut Vec<Ev>) {
        trace.push(Ev::Exec(pc));
    }

    #[inline]
    fn read(_pid: &(), _tid: &(), pc: u64, addr: u64, val: u64, sz: u8, trace: &mut Vec<Ev>) {
        trace.push(Ev::Load { pc, addr, val, sz });
    }

    #[inline]
    fn write(_pid: &(), _tid: &(), pc: u64, addr: u64, val: u64, sz: u8, trace: &mut Vec<Ev>) {
        trace.push(Ev::Store { pc, addr, val, sz });
    }

    fn trace(&mut self, _pid: &(), _tid: &(), trace: &[Ev]) {
        if trace.is_empty() {
            return;
        }
        let buf = &mut self.buf;
        buf.clear();
        for ev in trace {
            match *ev {
                Ev::Exec(pc) => {
                    buf.extend_from_slice(b"X ");
                    push_hex(buf, pc);
                    buf.push(b'\n');
                }
                Ev::Load { pc, addr, val, sz } => push_mem(buf, b'L', pc, addr, sz, val),
                Ev::Store { pc, addr, val, sz } => push_mem(buf, b'S', pc, addr, sz, val),
            }
        }
        let mut out = OUT
            .get()
            .expect("output initialised")
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if out.error.is_none() {
            if let Err(e) = out.w.write_all(buf) {
                out.error = Some(e);
            }
        }
        out.lines += trace.len() as u64;
    }
}

struct Args {
    listen: String,
    threads: usize,
    out: String,
    verbose: bool,
}

const USAGE: &str = "\
usage: cannoli-dump [--listen ADDR] [--threads N] [--out FILE|-] [-v]
  --listen ADDR   address to listen on (default 127.0.0.1:0 = any free port)
  --threads N     worker threads for the parallel callbacks (default: number of cpus)
  --out FILE      where to write the trace, '-' for stdout (default -)
  -v, --verbose   log every traced process and thread to stderr
Prints 'listening <addr>' as the first line on stdout, then serves until the
first traced process and all its children have exited.";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        listen: "127.0.0.1:0".to_string(),
        threads: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        out: "-".to_string(),
        verbose: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => it.next().ok_or_else(|| format!("{name} needs a value")),
            }
        };
        match name.as_str() {
            "--listen" | "-l" => args.listen = value(&name)?,
            "--threads" | "-t" => {
                let v = value(&name)?;
                args.threads =
                    v.parse().ok().filter(|&n: &usize| n > 0).ok_or_else(|| {
                        format!("--threads: expected a positive integer, got '{v}'")
                    })?;
            }
            "--out" | "-o" => args.out = value(&name)?,
            "--verbose" | "-v" => args.verbose = true,
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument '{arg}'")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cannoli-dump: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let _ = VERBOSE.set(args.verbose);

    // Open the output first so a bad path fails before anyone connects.
    let w: Box<dyn Write + Send> = if args.out == "-" {
        Box::new(BufWriter::with_capacity(1 << 20, io::stdout()))
    } else {
        match File::create(&args.out) {
            Ok(f) => Box::new(BufWriter::with_capacity(1 << 20, f)),
            Err(e) => {
                eprintln!("cannoli-dump: cannot create {}: {e}", args.out);
                return ExitCode::from(1);
            }
        }
    };

    let server = match Server::bind(&args.listen) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannoli-dump: {e}");
            return ExitCode::from(1);
        }
    };
    {
        let mut stdout = io::stdout().lock();
        let ok = writeln!(stdout, "listening {}", server.local_addr()).and_then(|_| stdout.flush());
        if let Err(e) = ok {
            eprintln!("cannoli-dump: cannot write to stdout: {e}");
            return ExitCode::from(1);
        }
    }
    let _ = OUT.set(Mutex::new(Output {
        w,
        lines: 0,
        error: None,
    }));

    let start = Instant::now();
    let result = server.run::<Dump>(args.threads);
    let secs = start.elapsed().as_secs_f64();

    let mut out = OUT.get().unwrap().lock().unwrap_or_else(|e| e.into_inner());
    if out.error.is_none() {
        if let Err(e) = out.w.flush() {
            out.error = Some(e);
        }
    }
    let stats = match result {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannoli-dump: {e}");
            return ExitCode::from(1);
        }
    };
    let dest = if args.out == "-" { "stdout" } else { &args.out };
    eprintln!(
        "cannoli-dump: {} connections, {} events in {} chunks, {} lost, {} incomplete streams; \
         {} lines to {} in {:.3}s ({} threads)",
        stats.connections,
        stats.events,
        stats.chunks,
        stats.lost_events,
        stats.incomplete_streams,
        out.lines,
        dest,
        secs,
        args.threads
    );
    if let Some(e) = &out.error {
        eprintln!("cannoli-dump: error writing {dest}: {e}");
        return ExitCode::from(4);
    }
    if stats.lost_events != 0 || stats.incomplete_streams != 0 {
        eprintln!(
            "cannoli-dump: the trace is incomplete ({} events lost, {} streams ended without goodbye)",
            stats.lost_events, stats.incomplete_streams
        );
        return ExitCode::from(3);
    }
    ExitCode::SUCCESS
}
