// SPDX-License-Identifier: GPL-2.0-or-later
//! The cannoli client: what the parallel callbacks keep of each guest
//! thread's events, and the serial phase that walks them in order through
//! each thread's backtrace state and writes the lines.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use cannoli::{Cannoli, ClientInfo};

use crate::probe::shadow::AddrMap;

use super::arch::{self, Rules};
use super::output::emit;
use super::resolver::{Exe, Module, Resolver};
use super::run::Run;
use super::state::{BacktraceState, Regs};
use super::symbols::Functions;
use super::tables::{library_table, table_for};

/// What the parallel callbacks keep for the serial phase.
#[derive(Debug, Clone)]
pub(super) enum Item {
    /// A branch, or the instruction after one (or the first of a chunk,
    /// which may be after a branch at the end of the previous chunk).
    Insn {
        pc: u64,
        branch: bool,
        regs: Option<Regs>,
    },
    /// An 8-byte store by a branch instruction.
    Write {
        pc: u64,
        addr: u64,
        val: u64,
        sz: u8,
    },
    /// A file mapping.
    Map {
        base: u64,
        len: u64,
        exec: bool,
        offset: u64,
        path: Arc<str>,
    },
    Unmap {
        base: u64,
        len: u64,
    },
    /// A signal is delivered to this guest handler.
    Signal {
        handler: u64,
    },
    /// QEMU translated a block: its first pc and its instructions' lengths.
    Block {
        pc: u64,
        lens: Box<[u8]>,
    },
}

/// Per guest process: the backtrace state of each of its threads, and what
/// its mappings tell.
pub(super) struct Pid {
    pid: i32,
    state: Mutex<Proc>,
    run: Arc<Run>,
}

#[derive(Default)]
struct Proc {
    /// By tid.
    threads: HashMap<i32, BacktraceState>,
    /// Load bias of a position independent executable, once its mapping
    /// was seen.
    bias: Option<u64>,
    /// Load bias of each other mapped file, from its mapping at offset 0.
    loads: HashMap<Arc<str>, u64>,
    modules: Vec<Module>,
    /// The length of every instruction QEMU translated for the process
    /// (by any of its threads), by pc.
    lens: AddrMap<u8>,
}

/// Per guest thread: the symbols and how to read the registers.
pub(super) struct Tid {
    tid: i32,
    funcs: Arc<Functions>,
    /// The executable the symbols come from, as QEMU or --binary named it,
    /// and canonicalized.
    exe: Option<Exe>,
    rules: Option<Rules>,
    /// `rules.delay_slot`, for the parallel callbacks.
    delay_slot: bool,
    ra: Option<usize>,
    sp: Option<usize>,
    mask: u64,
}

impl Tid {
    fn read(&self, regs: &[u8], i: usize) -> Option<u64> {
        let w = regs.get(i * 8..i * 8 + 8)?;
        Some(u64::from_le_bytes(w.try_into().unwrap()) & self.mask)
    }

    fn regs(&self, regs: &[u8]) -> Option<Regs> {
        Some(Regs {
            ra: self.ra.and_then(|i| self.read(regs, i)),
            sp: self.read(regs, self.sp?)?,
        })
    }

    fn is_exe(&self, path: &str) -> bool {
        self.exe.as_ref().is_some_and(|e| e.is(path))
    }
}

/// Keep an instruction event: it may be where a branch went. With delay
/// slots, also the one after the instruction that follows a branch (that
/// one may be the delay slot).
fn after_branch(trace: &[Item], delay_slot: bool) -> bool {
    let mut kept = trace
        .iter()
        .rev()
        // A block event comes before the block's first instruction, which
        // may be where a branch went: look past it, as past mappings.
        .filter(|i| {
            !matches!(
                i,
                Item::Map { .. } | Item::Unmap { .. } | Item::Block { .. }
            )
        });
    match kept.next() {
        None => true,
        Some(Item::Insn { branch: true, .. })
        | Some(Item::Write { .. })
        | Some(Item::Signal { .. }) => true,
        Some(Item::Insn { pc, .. }) if delay_slot => match kept.next() {
            // The first of the chunk: it may follow a branch at the end of
            // the previous chunk.
            None => true,
            Some(Item::Insn {
                pc: b,
                branch: true,
                ..
            }) => *pc == b.wrapping_add(4),
            Some(_) => false,
        },
        Some(_) => false,
    }
}

pub(super) struct Backtrace;

impl Cannoli for Backtrace {
    type Trace = Item;
    type TidContext = Tid;
    type PidContext = Pid;

    fn init_pid(ci: &ClientInfo) -> Arc<Pid> {
        Arc::new(Pid {
            pid: ci.pid,
            state: Mutex::new(Proc::default()),
            run: ci.expect_state::<Run>(),
        })
    }

    fn init_tid(pid: &Pid, ci: &ClientInfo) -> (Self, Tid) {
        let exe = pid
            .run
            .binary
            .clone()
            .or_else(|| ci.exe.as_ref().map(PathBuf::from));
        let rules = arch::rules(&ci.arch);
        if rules.is_none() {
            eprintln!(
                "backtrace: no call rules for guest arch {:?} (known: {}); thread {} is not traced",
                ci.arch,
                arch::KNOWN,
                ci.tid
            );
        }
        let index = |name: Option<&str>| ci.reg_index(name?);
        let ra = index(rules.and_then(|r| r.ra));
        let sp = index(rules.map(|r| r.sp));
        let mask = ci.reg_mask();
        // A thread id can come back (a new thread, a program after execve):
        // it starts with an empty backtrace.
        pid.state
            .lock()
            .unwrap()
            .threads
            .insert(ci.tid, BacktraceState::default());
        let tid = Tid {
            tid: ci.tid,
            funcs: table_for(&pid.run, exe.as_deref()),
            exe: exe.map(Exe::new),
            rules,
            delay_slot: rules.is_some_and(|r| r.delay_slot),
            ra,
            sp,
            mask,
        };
        (Backtrace, tid)
    }

    /// Only where [`Self::exec`] would keep one: the instructions of a
    /// block between two branches are counted, not visited.
    #[inline]
    fn wants_runs(_pid: &Pid, tid: &Tid, trace: &mut Vec<Item>) -> bool {
        after_branch(trace, tid.delay_slot)
    }

    #[inline]
    fn exec(_pid: &Pid, tid: &Tid, pc: u64, trace: &mut Vec<Item>) {
        if after_branch(trace, tid.delay_slot) {
            trace.push(Item::Insn {
                pc,
                branch: false,
                regs: None,
            });
        }
    }

    fn regs(_pid: &Pid, tid: &Tid, pc: u64, regs: &[u8], trace: &mut Vec<Item>) {
        if after_branch(trace, tid.delay_slot) {
            trace.push(Item::Insn {
                pc,
                branch: false,
                regs: tid.regs(regs),
            });
        }
    }

    fn branch(_pid: &Pid, tid: &Tid, pc: u64, branch: bool, regs: &[u8], trace: &mut Vec<Item>) {
        if branch || after_branch(trace, tid.delay_slot) {
            trace.push(Item::Insn {
                pc,
                branch,
                regs: tid.regs(regs),
            });
        }
    }

    /// A branch's store: kept right after the branch's own event, and at a
    /// chunk's start, where the branch may have ended the previous chunk
    /// (the serial phase checks it against the branch flag either way).
    fn write(_pid: &Pid, _tid: &Tid, pc: u64, addr: u64, val: u64, sz: u8, trace: &mut Vec<Item>) {
        let keep = match trace.last() {
            None => true,
            Some(Item::Insn {
                pc: b,
                branch: true,
                ..
            }) => *b == pc,
            Some(_) => false,
        };
        if keep {
            trace.push(Item::Write { pc, addr, val, sz });
        }
    }

    fn block(_pid: &Pid, _tid: &Tid, pc: u64, lens: &[u8], trace: &mut Vec<Item>) {
        trace.push(Item::Block {
            pc,
            lens: lens.into(),
        });
    }

    fn mmap(
        _pid: &Pid,
        _tid: &Tid,
        base: u64,
        len: u64,
        anon: bool,
        _read: bool,
        _write: bool,
        exec: bool,
        path: &str,
        offset: u64,
        trace: &mut Vec<Item>,
    ) {
        if !anon && !path.is_empty() {
            trace.push(Item::Map {
                base,
                len,
                exec,
                offset,
                path: path.into(),
            });
        }
    }

    fn munmap(_pid: &Pid, _tid: &Tid, base: u64, len: u64, trace: &mut Vec<Item>) {
        trace.push(Item::Unmap { base, len });
    }

    fn signal(_pid: &Pid, _tid: &Tid, sig: &cannoli::Signal, trace: &mut Vec<Item>) {
        if let Some(handler) = sig.handler {
            trace.push(Item::Signal { handler });
        }
    }

    fn trace(&mut self, pid: &Pid, tid: &Tid, trace: &[Item]) {
        let Some(rules) = tid.rules else { return };
        let mut guard = pid.state.lock().unwrap();
        let Proc {
            threads,
            bias,
            loads,
            modules,
            lens,
        } = &mut *guard;
        let st = threads.entry(tid.tid).or_default();
        let blind = st.blind_landings;
        let run = &*pid.run;
        let mut out = run.out.lock().unwrap();
        let Some(out) = out.as_mut() else { return };
        for item in trace {
            match item {
                Item::Insn { pc, branch, regs } => {
                    let r = Resolver {
                        funcs: &tid.funcs,
                        bias: bias.unwrap_or(0),
                        modules,
                        lens,
                    };
                    st.insn(&rules, &r, *pc, *branch, *regs, &mut |c, s| {
                        emit(run, out, pid.pid, tid.tid, c, s)
                    });
                }
                Item::Write { pc, addr, val, sz } => st.write(&rules, *pc, *addr, *val, *sz),
                Item::Block { pc, lens: l } => {
                    // A length of 0 (unknown) leaves the rest unsized.
                    for (at, n) in (cannoli::Block { pc: *pc, lens: l }).insns() {
                        lens.insert(at, n);
                    }
                }
                Item::Map {
                    base,
                    len,
                    exec,
                    offset,
                    path,
                } => {
                    if tid.is_exe(path) {
                        if bias.is_none() && tid.funcs.pie && *offset == 0 {
                            *bias = Some(base.wrapping_sub(tid.funcs.first_page));
                        }
                        continue;
                    }
                    if *offset == 0 {
                        if let Some(f) = library_table(run, path) {
                            loads.insert(path.clone(), base.wrapping_sub(f.first_page));
                        }
                    }
                    if *exec {
                        let funcs = library_table(run, path);
                        // Without the mapping at offset 0: the usual layout,
                        // code at the same offset in file and memory.
                        let bias = loads
                            .get(path)
                            .copied()
                            .unwrap_or_else(|| base.wrapping_sub(*offset));
                        modules.push(Module {
                            base: *base,
                            end: base.saturating_add(*len),
                            offset: *offset,
                            name: path.rsplit('/').next().unwrap_or(path).into(),
                            path: path.clone(),
                            funcs,
                            bias,
                        });
                    }
                }
                Item::Signal { handler } => st.signal(*handler),
                Item::Unmap { base, len } => {
                    let end = base.saturating_add(*len);
                    modules.retain(|m| m.end <= *base || m.base >= end);
                }
            }
        }
        run.blind
            .fetch_add(st.blind_landings - blind, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_what_follows_a_branch() {
        let insn = |pc, branch| Item::Insn {
            pc,
            branch,
            regs: None,
        };
        assert!(after_branch(&[], false));
        assert!(after_branch(&[insn(0, true)], false));
        assert!(!after_branch(&[insn(0, false)], false));
        assert!(!after_branch(&[insn(0, true), insn(4, false)], false));
        let map = Item::Map {
            base: 0,
            len: 1,
            exec: true,
            offset: 0,
            path: "x".into(),
        };
        assert!(after_branch(&[insn(0, true), map.clone()], false));
        assert!(!after_branch(&[insn(0, false), map.clone()], false));
        // Delay slots: the instruction after the next one too.
        assert!(after_branch(&[insn(0, true), insn(4, false)], true));
        assert!(after_branch(&[insn(4, false)], true));
        assert!(after_branch(&[insn(0, true), insn(4, false), map], true));
        assert!(!after_branch(&[insn(0, true), insn(8, false)], true));
        assert!(!after_branch(&[insn(0, false), insn(4, false)], true));
    }
}
