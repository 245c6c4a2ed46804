// SPDX-License-Identifier: GPL-2.0-or-later
//! The client proper: how each guest thread's register reports become the
//! lines of the instructions that changed them, in parallel per chunk and
//! then in order, and where those lines go.

use std::fmt::Write as _;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use cannoli::{Cannoli, ClientInfo};

use super::filter::{Filter, ReplayRanges};
#[cfg(doc)]
use super::main;

/// What a chunk's parallel phase hands to the serial phase.
pub(super) enum Item {
    /// The chunk's first instruction: its pc and registers.
    Head { pc: u64, regs: Vec<u64> },
    /// The lines of the chunk's instructions but the last, each written
    /// when the following instruction's registers arrived.
    Text {
        buf: String,
        lines: u64,
        changed: u64,
    },
    /// The chunk's last instruction (its line needs the next chunk).
    Tail { pc: u64, regs: Vec<u64> },
}

/// One run of regtrace: what [`main`] builds from the command line and
/// hands to the run (each process's [`Pid`] holds it), and what it counts,
/// which `main` reports after the run.
pub(super) struct Run {
    /// --changed: print only the instructions that changed a register.
    pub(super) changed_only: bool,
    pub(super) out: Mutex<Out>,
    /// --range and --func of a replay (a live run's hook library already
    /// left the rest out), resolved by the first process.
    pub(super) replay: Option<ReplayRanges>,
    pub(super) resolved: OnceLock<Arc<[(u64, u64)]>>,
    pub(super) insns: AtomicU64,
    pub(super) changed: AtomicU64,
    pub(super) threads: AtomicU64,
}

/// Where lines go, and which thread wrote last (a header when it changes).
pub(super) struct Out {
    /// Keeps its first write error for the end (see `launch::Output`);
    /// `None` once finished.
    pub(super) w: Option<launch::Output>,
    pub(super) last: Option<(i32, i32)>,
}

/// Per guest process: its filter, and the run.
pub(super) struct Pid {
    filter: Filter,
    run: Arc<Run>,
}
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes `text` for thread (pid, tid). After a write error (or a closed
/// pipe) nothing more is written, but the rest of the trace is still
/// consumed, so that QEMU does not block; the error is reported at the end.
fn emit(run: &Run, pid: i32, tid: i32, text: &str) {
    let mut guard = lock(&run.out);
    let o = &mut *guard;
    let Some(w) = o.w.as_mut().filter(|w| w.is_writing()) else {
        return;
    };
    if text.is_empty() {
        return;
    }
    // `Output` keeps its errors for the end.
    if o.last != Some((pid, tid)) {
        o.last = Some((pid, tid));
        let _ = writeln!(w, "== pid {pid} tid {tid} ==");
    }
    let _ = w.write_all(text.as_bytes());
}

/// Per guest thread: the register layout.
pub(super) struct ThreadRegs {
    names: Vec<String>,
    /// Shown: all but the program counter (ARM's r15).
    shown: Vec<bool>,
    mask: u64,
    /// Hex digits of a pc.
    pc_digits: usize,
    /// --changed (see [`Run`]).
    changed_only: bool,
}

impl ThreadRegs {
    fn value(&self, regs: &[u8], i: usize) -> u64 {
        u64::from_le_bytes(regs[i * 8..i * 8 + 8].try_into().unwrap()) & self.mask
    }

    fn count(&self, regs: &[u8]) -> usize {
        (regs.len() / 8).min(self.names.len())
    }

    /// The line of the instruction at `pc` whose registers were `old` before
    /// and `new` after it. Returns whether it changed any.
    fn line(&self, buf: &mut String, pc: u64, old: &[u64], new: impl Fn(usize) -> u64) -> bool {
        let start = buf.len();
        let _ = write!(buf, "{:#0w$x}", pc, w = self.pc_digits + 2);
        let mut changed = false;
        for (i, &o) in old.iter().enumerate() {
            let n = new(i);
            if n != o && self.shown.get(i) == Some(&true) {
                buf.push_str(if changed { ", " } else { "  " });
                let _ = write!(buf, "{}: {o:x} -> {n:x}", self.names[i]);
                changed = true;
            }
        }
        if !changed && self.changed_only {
            buf.truncate(start);
        } else {
            buf.push('\n');
        }
        changed
    }
}

/// Per guest thread, serial phase: the last instruction seen.
pub(super) struct Tracer {
    run: Arc<Run>,
    pid: i32,
    tid: i32,
    layout: Arc<ThreadRegs>,
    pending: Option<(u64, Vec<u64>)>,
    insns: u64,
    changed: u64,
}

impl Cannoli for Tracer {
    type Trace = Item;
    type TidContext = Arc<ThreadRegs>;
    type PidContext = Pid;

    fn init_pid(ci: &ClientInfo) -> Arc<Pid> {
        let run = ci.expect_state::<Run>();
        Arc::new(Pid {
            filter: Filter::of(&run, ci),
            run,
        })
    }

    fn init_tid(pid: &Pid, ci: &ClientInfo) -> (Tracer, Arc<ThreadRegs>) {
        pid.run.threads.fetch_add(1, Ordering::Relaxed);
        let bytes = ci.regs.bytes;
        let layout = Arc::new(ThreadRegs {
            names: ci.regs.names.clone(),
            shown: ci.regs.names.iter().map(|n| n != "pc").collect(),
            mask: if (1..8).contains(&bytes) {
                (1u64 << (bytes * 8)) - 1
            } else {
                u64::MAX
            },
            pc_digits: if ci.guest_bits <= 32 { 8 } else { 16 },
            changed_only: pid.run.changed_only,
        });
        (
            Tracer {
                run: pid.run.clone(),
                pid: ci.pid,
                tid: ci.tid,
                layout: layout.clone(),
                pending: None,
                insns: 0,
                changed: 0,
            },
            layout,
        )
    }

    fn regs(p: &Pid, l: &Arc<ThreadRegs>, pc: u64, regs: &[u8], trace: &mut Vec<Item>) {
        if !p.filter.traces(pc) {
            return;
        }
        let n = l.count(regs);
        if trace.is_empty() {
            let v: Vec<u64> = (0..n).map(|i| l.value(regs, i)).collect();
            trace.push(Item::Head {
                pc,
                regs: v.clone(),
            });
            trace.push(Item::Text {
                buf: String::new(),
                lines: 0,
                changed: 0,
            });
            trace.push(Item::Tail { pc, regs: v });
            return;
        }
        let [_, Item::Text {
            buf,
            lines,
            changed,
        }, Item::Tail {
            pc: tpc,
            regs: tregs,
        }] = &mut trace[..]
        else {
            unreachable!("a chunk's trace is head, text, tail")
        };
        tregs.resize(n, 0);
        if l.line(buf, *tpc, tregs, |i| l.value(regs, i)) {
            *changed += 1;
        }
        *lines += 1;
        *tpc = pc;
        for (i, r) in tregs.iter_mut().enumerate() {
            *r = l.value(regs, i);
        }
    }

    fn trace(&mut self, _pid: &Pid, _l: &Arc<ThreadRegs>, trace: &[Item]) {
        let mut s = String::new();
        for item in trace {
            match item {
                Item::Head { pc, regs } => match &self.pending {
                    Some((ppc, pregs)) => {
                        self.insns += 1;
                        if self
                            .layout
                            .line(&mut s, *ppc, pregs, |i| regs.get(i).copied().unwrap_or(0))
                        {
                            self.changed += 1;
                        }
                    }
                    None => {
                        let _ = write!(
                            s,
                            "registers at {:#0w$x}:",
                            pc,
                            w = self.layout.pc_digits + 2
                        );
                        for (i, v) in regs.iter().enumerate() {
                            if *v != 0 && self.layout.shown.get(i) == Some(&true) {
                                let _ = write!(s, " {}={v:x}", self.layout.names[i]);
                            }
                        }
                        s.push('\n');
                    }
                },
                Item::Text {
                    buf,
                    lines,
                    changed,
                } => {
                    s.push_str(buf);
                    self.insns += lines;
                    self.changed += changed;
                }
                Item::Tail { pc, regs } => self.pending = Some((*pc, regs.clone())),
            }
        }
        emit(&self.run, self.pid, self.tid, &s);
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if let Some((pc, _)) = self.pending.take() {
            self.insns += 1;
            let line = format!(
                "{:#0w$x}  (end of trace)\n",
                pc,
                w = self.layout.pc_digits + 2
            );
            emit(&self.run, self.pid, self.tid, &line);
        }
        self.run.insns.fetch_add(self.insns, Ordering::Relaxed);
        self.run.changed.fetch_add(self.changed, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_counter_is_no_change() {
        // ARM's layout: r0..r12, sp, lr, pc.
        let names: Vec<String> = cannoli::wire::reg_names("armv5tel")
            .iter()
            .map(|s| s.to_string())
            .collect();
        let l = ThreadRegs {
            shown: names.iter().map(|n| n != "pc").collect(),
            names,
            mask: 0xffff_ffff,
            pc_digits: 8,
            changed_only: false,
        };
        let old = [0u64; 16];
        let mut new = [0u64; 16];
        new[15] = 0x104cc;
        let mut buf = String::new();
        assert!(!l.line(&mut buf, 0x104c8, &old, |i| new[i]));
        assert_eq!(buf, "0x000104c8\n");
        new[0] = 0x9e37_79b1;
        new[13] = 0x4080_0800;
        buf.clear();
        assert!(l.line(&mut buf, 0x104c8, &old, |i| new[i]));
        assert_eq!(buf, "0x000104c8  r0: 0 -> 9e3779b1, sp: 0 -> 40800800\n");
    }
}
