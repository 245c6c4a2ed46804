// SPDX-License-Identifier: GPL-2.0-or-later
//! The cannoli client: the events each guest thread's chunks hand from the
//! parallel phase to the serial one, which files them in the process's
//! address space and the run's coverage.

use std::sync::{Arc, Mutex};

use cannoli::{Cannoli, ClientInfo};

use super::addr_space::AddrSpace;
use super::collected::{lock, Coverage, Run};

/// What the parallel callbacks hand to the serial phase.
pub(super) enum Ev {
    Exec(u64),
    /// A translated block: its first pc and its instructions' lengths.
    Block {
        pc: u64,
        lens: Box<[u8]>,
    },
    Map {
        base: u64,
        len: u64,
        exec: bool,
        file: Option<(Arc<str>, u64)>,
    },
    Unmap {
        base: u64,
        len: u64,
    },
    Protect {
        base: u64,
        len: u64,
        exec: bool,
    },
}
/// An address space shared by a process's threads. Dropping the last
/// reference takes the [`Run`]'s lock (see [`AddrSpace`]'s `Drop`):
/// never while holding it.
type Shared<T> = Arc<Mutex<T>>;

/// Per guest process: its current address space. An `execve` replaces it:
/// the new image's first thread (tid == pid) connects again.
pub(super) struct Proc {
    space: Mutex<(Shared<AddrSpace>, bool)>,
    run: Run,
}

/// Per guest thread: the address space it runs in.
pub(super) struct Thread {
    space: Shared<AddrSpace>,
}

pub(super) struct Tracer;

impl Cannoli for Tracer {
    type Trace = Ev;
    type TidContext = Thread;
    type PidContext = Proc;

    fn init_pid(ci: &ClientInfo) -> Arc<Proc> {
        let run = ci.expect_state::<Mutex<Coverage>>();
        let mut c = lock(&run);
        c.pids.insert(ci.pid);
        c.bits.get_or_insert(ci.guest_bits);
        drop(c);
        let space = AddrSpace::new(&ci.arch, ci.guest_bits, run.clone());
        Arc::new(Proc {
            space: Mutex::new((Arc::new(Mutex::new(space)), false)),
            run,
        })
    }

    fn init_tid(pid: &Proc, ci: &ClientInfo) -> (Tracer, Thread) {
        lock(&pid.run).threads += 1;
        let mut cur = lock(&pid.space);
        if ci.tid == ci.pid {
            // The process's first thread, or its image after an execve.
            if cur.1 {
                let space = AddrSpace::new(&ci.arch, ci.guest_bits, pid.run.clone());
                cur.0 = Arc::new(Mutex::new(space));
            }
            cur.1 = true;
        }
        (
            Tracer,
            Thread {
                space: cur.0.clone(),
            },
        )
    }

    fn exec(_pid: &Proc, _tid: &Thread, pc: u64, trace: &mut Vec<Ev>) {
        trace.push(Ev::Exec(pc));
    }

    fn block(_pid: &Proc, _tid: &Thread, pc: u64, lens: &[u8], trace: &mut Vec<Ev>) {
        trace.push(Ev::Block {
            pc,
            lens: lens.into(),
        });
    }

    fn mmap(
        _pid: &Proc,
        _tid: &Thread,
        base: u64,
        len: u64,
        anon: bool,
        _read: bool,
        _write: bool,
        exec: bool,
        path: &str,
        offset: u64,
        trace: &mut Vec<Ev>,
    ) {
        let file = (!anon).then(|| (Arc::from(path), offset));
        trace.push(Ev::Map {
            base,
            len,
            exec,
            file,
        });
    }

    fn munmap(_pid: &Proc, _tid: &Thread, base: u64, len: u64, trace: &mut Vec<Ev>) {
        trace.push(Ev::Unmap { base, len });
    }

    fn mprotect(
        _pid: &Proc,
        _tid: &Thread,
        base: u64,
        len: u64,
        _read: bool,
        _write: bool,
        exec: bool,
        trace: &mut Vec<Ev>,
    ) {
        trace.push(Ev::Protect { base, len, exec });
    }

    fn trace(&mut self, pid: &Proc, tid: &Thread, trace: &[Ev]) {
        let mut a = lock(&tid.space);
        let mut c = lock(&pid.run);
        let c = &mut *c;
        for ev in trace {
            match ev {
                Ev::Exec(pc) => {
                    c.exec_events += 1;
                    a.hit(c, *pc);
                }
                Ev::Block { pc, lens } => a.block(c, *pc, lens),
                Ev::Map {
                    base,
                    len,
                    exec,
                    file,
                } => {
                    a.space
                        .map(*base, *len, *exec, file.clone(), &mut c.modules);
                    if *exec {
                        a.settle(c);
                    }
                }
                Ev::Unmap { base, len } => a.space.unmap(*base, *len),
                Ev::Protect { base, len, exec } => {
                    a.space.protect(*base, *len, *exec, &mut c.modules);
                    if *exec {
                        a.settle(c);
                    }
                }
            }
        }
    }
}
