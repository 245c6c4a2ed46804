// SPDX-License-Identifier: GPL-2.0-or-later
//! The replay's tool: one [`Exporter`] per stream. Its parallel callbacks
//! gather a chunk's events into a batch; its serial phase numbers them,
//! applies mapping events to the process's address space, writes the small
//! tables and hands the instructions and accesses to the encoders.

use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};

use cannoli::{Access, Cannoli, ClientInfo, Signal, Syscall};
use tools::coverage::space::{Modules, Space};

use crate::batch::{access, batch, next_seq, other, Ev, Slot, Spares};
use crate::encode::Job;
use crate::error::{Error, Result};
use crate::resolve::{ModInfo, Snapshot};
use crate::small::{self, Small};

/// What the serial phase shares across streams (they are replayed one
/// after another, so the lock is never contended).
pub struct Serial {
    pub small: Small,
    modules: Modules,
    infos: Vec<Arc<ModInfo>>,
    next_symbol: i32,
    /// Process number in the recording, by stream.
    process_of: Vec<u32>,
    /// The first error of the serial phase, which ends the export.
    pub error: Option<Error>,
}

impl Serial {
    /// Before the replay: no module, no symbol, no error yet.
    pub fn new(small: Small, process_of: Vec<u32>) -> Serial {
        Serial {
            small,
            modules: Modules::default(),
            infos: Vec::new(),
            next_symbol: 0,
            process_of,
            error: None,
        }
    }

    /// Adds the modules `Space` interned since the last call: their rows,
    /// their symbols.
    fn new_modules(&mut self) -> Result<()> {
        let known = self.infos.len();
        let new: Vec<_> = self
            .modules
            .iter()
            .skip(known)
            .map(|(id, m)| (id, m.clone()))
            .collect();
        for (id, m) in new {
            let info = ModInfo::load(&m, self.next_symbol);
            self.small.module(id as i32, &m)?;
            if let Some(s) = &info.syms {
                for (i, (name, a, b)) in s.entries().enumerate() {
                    self.small.symbol(
                        self.next_symbol + i as i32,
                        id as i32,
                        name,
                        a.wrapping_add(info.bias),
                        b - a,
                    )?;
                }
                self.next_symbol += s.len() as i32;
            }
            self.infos.push(Arc::new(info));
        }
        Ok(())
    }

    fn check(&mut self, r: Result<()>) {
        if let (Err(e), None) = (r, &self.error) {
            self.error = Some(e);
        }
    }
}

/// One export's state: `run` builds it and replays with it; each
/// stream's [`Exporter`] holds it, and the export takes it back after the
/// replay.
pub struct Shared {
    pub serial: Mutex<Serial>,
    pub jobs: SyncSender<Job>,
    /// The batches the encoders gave back; the encoders hold it too.
    pub spares: Arc<Spares>,
}

/// A process's address space and its current snapshot.
pub struct Proc {
    space: Space,
    snap: Arc<Snapshot>,
}

/// One stream.
pub struct Exporter {
    shared: Arc<Shared>,
    stream: i32,
    events: u64,
}

impl Cannoli for Exporter {
    type Trace = Slot;
    /// The export's spare batches: the parallel callbacks take a chunk's
    /// batch from them, and they see no other value of the run.
    type TidContext = Arc<Spares>;
    type PidContext = Mutex<Proc>;

    fn init_pid(ci: &ClientInfo) -> Arc<Mutex<Proc>> {
        Arc::new(Mutex::new(Proc {
            space: Space::new(&ci.arch, ci.guest_bits),
            snap: Arc::default(),
        }))
    }

    fn init_tid(_: &Mutex<Proc>, ci: &ClientInfo) -> (Exporter, Arc<Spares>) {
        let shared = ci.expect_state::<Shared>();
        let stream = ci.stream as i32;
        let spares = shared.spares.clone();
        {
            let mut s = shared.serial.lock().unwrap_or_else(|p| p.into_inner());
            let process = s.process_of.get(ci.stream as usize).copied().unwrap_or(0);
            s.small.thread(ci, process as i32);
        }
        (
            Exporter {
                shared,
                stream,
                events: 0,
            },
            spares,
        )
    }

    #[inline(always)]
    fn exec(p: &Mutex<Proc>, sp: &Arc<Spares>, pc: u64, tr: &mut Vec<Slot>) {
        Self::exec_run(p, sp, &[pc], tr)
    }

    #[inline(always)]
    fn exec_run(_: &Mutex<Proc>, sp: &Arc<Spares>, pcs: &[u64], t: &mut Vec<Slot>) {
        if pcs.is_empty() {
            return;
        }
        let b = batch(sp, t);
        let first = b.events;
        let n = pcs.len() as u32;
        b.events += n;
        match b.insn_seq.last_mut() {
            Some((start, count)) if *start + *count == first => *count += n,
            _ => b.insn_seq.push((first, n)),
        }
        b.insn_pc.extend(pcs.iter().map(|&p| p as i64));
    }

    /// Registers at every instruction (`--hooks regs`): an instruction.
    fn regs(p: &Mutex<Proc>, sp: &Arc<Spares>, pc: u64, _: &[u8], tr: &mut Vec<Slot>) {
        Self::exec(p, sp, pc, tr)
    }

    /// Registers at branches (`--hooks branches`) are not every
    /// instruction: not in `insns`, but they take their place in `seq`.
    fn branch(_: &Mutex<Proc>, sp: &Arc<Spares>, _: u64, _: bool, _: &[u8], t: &mut Vec<Slot>) {
        next_seq(batch(sp, t));
    }

    fn read(_: &Mutex<Proc>, sp: &Arc<Spares>, pc: u64, a: u64, v: u64, sz: u8, t: &mut Vec<Slot>) {
        access(sp, t, pc, a, v as u128, sz, false)
    }

    fn write(
        _: &Mutex<Proc>,
        sp: &Arc<Spares>,
        pc: u64,
        a: u64,
        v: u64,
        sz: u8,
        t: &mut Vec<Slot>,
    ) {
        access(sp, t, pc, a, v as u128, sz, true)
    }

    /// Loads and stores of 16 bytes, one row each as the narrower ones.
    fn access_wide(_: &Mutex<Proc>, sp: &Arc<Spares>, a: &Access, t: &mut Vec<Slot>) {
        access(sp, t, a.pc, a.addr, a.val, a.size, a.store)
    }

    fn syscall(_: &Mutex<Proc>, sp: &Arc<Spares>, sc: &Syscall<'_>, t: &mut Vec<Slot>) {
        other(sp, t, Ev::Syscall(small::SyscallRow::new(sc)))
    }

    #[allow(clippy::too_many_arguments)]
    fn mmap(
        _: &Mutex<Proc>,
        sp: &Arc<Spares>,
        base: u64,
        len: u64,
        anon: bool,
        r: bool,
        w: bool,
        x: bool,
        path: &str,
        offset: u64,
        t: &mut Vec<Slot>,
    ) {
        let path = (!anon).then(|| path.to_string());
        other(
            sp,
            t,
            Ev::Mmap {
                base,
                len,
                prot: [r, w, x],
                path,
                offset,
            },
        )
    }

    fn munmap(_: &Mutex<Proc>, sp: &Arc<Spares>, base: u64, len: u64, t: &mut Vec<Slot>) {
        other(sp, t, Ev::Munmap { base, len })
    }

    #[allow(clippy::too_many_arguments)]
    fn mprotect(
        _: &Mutex<Proc>,
        sp: &Arc<Spares>,
        base: u64,
        len: u64,
        r: bool,
        w: bool,
        x: bool,
        t: &mut Vec<Slot>,
    ) {
        other(
            sp,
            t,
            Ev::Mprotect {
                base,
                len,
                prot: [r, w, x],
            },
        )
    }

    fn signal(_: &Mutex<Proc>, sp: &Arc<Spares>, sig: &Signal, t: &mut Vec<Slot>) {
        other(sp, t, Ev::Signal(*sig))
    }

    fn trace(&mut self, pid: &Mutex<Proc>, sp: &Arc<Spares>, trace: &[Slot]) {
        for slot in trace {
            let Some(mut b) = slot.take() else { continue };
            let base = self.events as i64;
            self.events += b.events as u64;
            let mut proc = pid.lock().unwrap_or_else(|p| p.into_inner());
            let mut snaps = vec![(0, proc.snap.clone())];
            if !b.other.is_empty() {
                let mut s = self.shared.serial.lock().unwrap_or_else(|p| p.into_inner());
                for o in b.other.drain(..) {
                    let seq = base + o.seq as i64;
                    let stream = self.stream;
                    let r = match o.ev {
                        Ev::Syscall(row) => s.small.syscall(stream, seq, row),
                        Ev::Signal(sig) => s.small.signal(stream, seq, &sig),
                        Ev::Mmap {
                            base,
                            len,
                            prot,
                            path,
                            offset,
                        } => {
                            let file = path.as_deref().map(|p| (Arc::from(p), offset));
                            proc.space.map(base, len, prot[2], file, &mut s.modules);
                            s.small.mapping(
                                stream,
                                seq,
                                "mmap",
                                base,
                                len,
                                Some(prot),
                                path,
                                offset,
                            )
                        }
                        Ev::Munmap { base, len } => {
                            proc.space.unmap(base, len);
                            s.small
                                .mapping(stream, seq, "munmap", base, len, None, None, 0)
                        }
                        Ev::Mprotect { base, len, prot } => {
                            proc.space.protect(base, len, prot[2], &mut s.modules);
                            s.small
                                .mapping(stream, seq, "mprotect", base, len, Some(prot), None, 0)
                        }
                    };
                    s.check(r);
                    if s.modules.iter().nth(s.infos.len()).is_some() {
                        let r = s.new_modules();
                        s.check(r);
                    }
                    if let Some(snap) = fresh_snapshot(&mut proc, &s) {
                        snaps.push((o.insns, snap));
                    }
                }
            }
            drop(proc);
            if b.insn_pc.is_empty() && b.mem_pc.is_empty() {
                sp.give_back(b);
                continue;
            }
            let job = Job {
                stream: self.stream,
                base,
                batch: b,
                snaps,
            };
            // An encoder that failed has stopped; its error is reported.
            let _ = self.shared.jobs.send(job);
        }
    }
}

/// A new snapshot of `proc`'s code regions if a mapping event changed
/// them.
fn fresh_snapshot(proc: &mut Proc, s: &Serial) -> Option<Arc<Snapshot>> {
    let snap = Snapshot::new(&proc.space, &s.infos);
    if snap.same_code(&proc.snap) {
        return None;
    }
    let snap = Arc::new(snap);
    proc.snap = snap.clone();
    Some(snap)
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let mut s = self.shared.serial.lock().unwrap_or_else(|p| p.into_inner());
        s.small.thread_events(self.stream, self.events);
    }
}
