// SPDX-License-Identifier: GPL-2.0-or-later
//! The tool: the cannoli client that symbolizes each event in the parallel
//! phase, and prints the lines in the serial one to the shared output.

use std::io::{self, Write};
use std::sync::Arc;

use cannoli::{Cannoli, ClientInfo};

use super::palette::Pal;
use super::run::Run;
use super::symbols::{Loc, Symbols};
use super::tables::table_for;

/// One printed line, symbolized in the parallel phase.
pub(super) enum Line {
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

pub(super) struct Pid {
    pid: i32,
    run: Arc<Run>,
    syms: Arc<Symbols>,
    /// Print memory accesses (no --no-mem).
    mem: bool,
}

pub(super) struct Tid {
    tid: i32,
    /// Hex digits of a guest address.
    width: usize,
}

pub(super) struct Symbolizer;

/// The shared, buffered trace output (stdout or `-o FILE`).
pub(super) struct Out {
    /// Keeps its first write error for the end (see `launch::Output`).
    pub(super) w: launch::Output,
    /// Trace lines printed.
    pub(super) lines: u64,
    /// --limit reached.
    pub(super) stopped: bool,
    /// Thread whose lines were printed last.
    pub(super) last: Option<(i32, i32)>,
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
