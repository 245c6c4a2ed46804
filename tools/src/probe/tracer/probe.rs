// SPDX-License-Identifier: GPL-2.0-or-later
//! A guest thread of a probe run, the type that implements `Cannoli`: its
//! parallel callbacks, and the serial phase that runs its probed call
//! stack (entries, returns, pc probes, Go calls) and writes the hits.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use cannoli::{Cannoli, ClientInfo};

use super::super::conv::{returns_genuinely, Conv};
use super::super::goroutine::{Call, Table, What};
use super::super::hex;
use super::super::isa;
use super::super::out::{self, At, Hit, Regs};
use super::super::plan::{Plan, Site, StackMove};
use super::super::shadow::Shadow;
use super::super::stackmove::{self, Moving};
use super::super::{Mode, RunState};
use super::placement::DEFER_LIMIT;
use super::process::write_go;
use super::worker::{count, lines, tail};
use super::{Item, Pid, ThreadRegs};

/// A probed call that has not returned.
struct Frame {
    target: usize,
    key: u64,
    insn: Option<u64>,
}

/// A conditional return seen, not yet known to be taken.
pub(super) struct Pending {
    /// Its number of the process's order.
    seq: Option<u64>,
    pc: u64,
    target: usize,
    ret: isa::Ret,
    regs: Box<[u64]>,
    insn: u64,
}

/// A guest thread.
pub struct Probe {
    pub(super) run: Arc<RunState>,
    pid: i32,
    tid: i32,
    pub(super) plan: Arc<Plan>,
    layout: Arc<ThreadRegs>,
    stack: Vec<Frame>,
    shadow: Shadow,
    insns: u64,
    hits: u64,
    pub(super) pending: Option<Pending>,
    /// The load bias of each library this thread saw mapped.
    pub(super) biases: Vec<Option<u64>>,
    buf: Vec<u8>,
    /// A position-independent program, and every shared library with
    /// probes, is placed by its mapping event, in the stream of the thread
    /// that mapped it (the main thread, for what the loader maps), which
    /// may reach the serial phase after another thread's hits (a quiet
    /// thread's events wait in its ring): this thread's events from its
    /// first hit that needs a placement wait here, in order, until it is
    /// known. A thread that ends still waiting is parked in its process
    /// ([`Pid::parked`]) and finished there.
    pub(super) deferred: VecDeque<Item>,
    parked: Arc<Mutex<Vec<Probe>>>,
    goroutines: Arc<Table>,
    /// The number of the process's order the next hooked pc took.
    seq: Option<u64>,
    /// The Go calls of the hooked pc at hand, for [`Self::offer_go`].
    go_calls: Vec<Call>,
    /// A goroutine's stack this thread is moving, where Go frames are
    /// kept per thread ([`Self::stack_moved`]).
    moving: Option<Moving>,
}

fn reg(regs: &[u64], i: Option<usize>) -> Option<u64> {
    i.and_then(|i| regs.get(i).copied())
}

impl Cannoli for Probe {
    type Trace = Item;
    type TidContext = Arc<ThreadRegs>;
    type PidContext = Pid;

    fn init_pid(ci: &ClientInfo) -> Arc<Pid> {
        let run = ci.expect_state::<RunState>();
        let plan = run.plan.for_image(ci.exe.as_deref());
        let exe = ci.exe.as_deref().unwrap_or("?");
        if !Arc::ptr_eq(&plan, &run.plan) && super::super::lock(&run.others).insert(exe.into()) {
            eprintln!(
                "probe: process {} exec'd {exe}, not {}: only probes in shared libraries \
                 apply to it (here and in any other process that runs it)",
                ci.pid,
                plan.exe.0.display()
            );
        }
        let n = plan.modules.len();
        Arc::new(Pid {
            pid: ci.pid,
            plan,
            biases: Mutex::new(vec![None; n]),
            parked: Arc::new(Mutex::new(Vec::new())),
            goroutines: Arc::new(Table::new(run.live)),
            run,
        })
    }

    fn init_tid(pid: &Pid, ci: &ClientInfo) -> (Probe, Arc<ThreadRegs>) {
        let plan = &pid.plan;
        pid.run.threads.fetch_add(1, Ordering::Relaxed);
        let names: Vec<String> = ci.regs.names.clone();
        let find = |n: &str| ci.reg_index(n);
        let abi = plan.abi;
        let layout = Arc::new(ThreadRegs {
            args: abi.arg_regs().iter().map(|n| find(n)).collect(),
            go_args: Conv::new(abi, true)
                .arg_regs()
                .iter()
                .map(|n| find(n))
                .collect(),
            g: plan
                .by_goroutine()
                .then(|| abi.go_g_reg().and_then(find))
                .flatten(),
            ret: find(abi.ret_reg()),
            sp: find(abi.sp_reg()),
            mask: ci.reg_mask(),
            bits64: ci.guest_bits == 64,
            lines: pid.run.mode == Mode::Text && !plan.count && pid.run.timeline.is_none(),
            split: match pid.run.mode {
                _ if pid.run.timeline.is_some() => None,
                Mode::Text => Some(out::Split::Text),
                Mode::Json => Some(out::Split::Json),
                Mode::Flow => Some(out::Split::Flow),
            },
            json_keys: out::json_keys(&names),
            pid: ci.pid,
            tid: ci.tid,
            keys: hex::keys(&names),
            names,
        });
        let p = Probe {
            run: pid.run.clone(),
            pid: ci.pid,
            tid: ci.tid,
            plan: plan.clone(),
            layout: layout.clone(),
            stack: Vec::new(),
            shadow: Shadow::default(),
            insns: 0,
            hits: 0,
            pending: None,
            biases: vec![None; plan.modules.len()],
            buf: Vec::new(),
            deferred: VecDeque::new(),
            parked: pid.parked.clone(),
            goroutines: pid.goroutines.clone(),
            seq: None,
            go_calls: Vec::new(),
            moving: None,
        };
        (p, layout)
    }

    fn exec_run(_p: &Pid, _l: &Arc<ThreadRegs>, pcs: &[u64], trace: &mut Vec<Item>) {
        count(trace, pcs.len() as u64);
    }

    fn ordered(_p: &Pid, _l: &Arc<ThreadRegs>, _pc: u64, seq: u64, trace: &mut Vec<Item>) {
        trace.push(Item::Order(seq));
    }

    fn regs(pid: &Pid, l: &Arc<ThreadRegs>, pc: u64, regs: &[u8], trace: &mut Vec<Item>) {
        let plan = &pid.plan;
        let sites = plan.sites.get(&pc);
        // A library's pcs are known once it is mapped (serial phase).
        if sites.is_none() && plan.modules.is_empty() {
            // A recording with registers everywhere: not ours.
            count(trace, 1);
            return;
        }
        let n = (regs.len() / 8).min(l.names.len());
        if let Some(sites) = sites {
            if l.lines && sites.iter().all(|s| matches!(s, Site::Pc(_))) {
                lines(plan, l, pc, sites, regs, n, trace);
                return;
            }
            if let (Some(split), [Site::Pc(p)]) = (l.split, &sites[..]) {
                tail(plan, l, split, pc, *p, regs, n, trace);
                return;
            }
        }
        let v: Box<[u64]> = (0..n)
            .map(|i| u64::from_le_bytes(regs[i * 8..i * 8 + 8].try_into().unwrap()) & l.mask)
            .collect();
        trace.push(Item::Hit { pc, regs: v });
    }

    #[allow(clippy::too_many_arguments)]
    fn mmap(
        pid: &Pid,
        _l: &Arc<ThreadRegs>,
        base: u64,
        _len: u64,
        anon: bool,
        _read: bool,
        _write: bool,
        _exec: bool,
        path: &str,
        offset: u64,
        trace: &mut Vec<Item>,
    ) {
        if anon || offset != 0 || pid.plan.modules.is_empty() {
            return;
        }
        let p = std::path::Path::new(path);
        let p = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        if let Some(module) = pid.plan.module_of(&p) {
            // Made known to the process only in the serial phase, in the
            // mapping thread's order ([`Probe::apply`]): workers decode a
            // thread's chunks out of order, and a later mapping of the
            // file's first page seen first gives a wrong bias for a moment,
            // which another thread would keep. A thread whose hits reach
            // the serial phase before this event waits for it
            // ([`Probe::waits`]) and is run when it comes ([`unpark`]).
            trace.push(Item::Map { module, base });
        }
    }

    fn write(
        pid: &Pid,
        _l: &Arc<ThreadRegs>,
        _pc: u64,
        addr: u64,
        value: u64,
        size: u8,
        trace: &mut Vec<Item>,
    ) {
        if pid.plan.stores {
            trace.push(Item::Store { addr, value, size });
        }
    }

    fn trace(&mut self, pid: &Pid, _l: &Arc<ThreadRegs>, trace: &[Item]) {
        if !self.deferred.is_empty() {
            self.drain(pid, false);
        }
        for item in trace {
            match item {
                // Known now, not behind this thread's own waiting hits,
                // which may be waiting for it (applied again in order).
                Item::Map { module, base } if !self.deferred.is_empty() => {
                    self.place(pid, *module, *base)
                }
                _ => {}
            }
            if !self.deferred.is_empty() || self.needs_placement(pid, item) {
                self.deferred.push_back(item.clone());
                if self.deferred.len() > DEFER_LIMIT {
                    self.run_oldest(pid);
                    self.drain(pid, false);
                }
            } else {
                self.apply(pid, item);
            }
        }
        self.flush();
    }
}

impl Probe {
    pub(super) fn apply(&mut self, pid: &Pid, item: &Item) {
        match item {
            Item::Map { module, base } => self.place(pid, *module, *base),
            Item::Count(n) => self.insns += n,
            Item::Order(seq) => {
                // The pc that took the number before made no hit.
                if let Some(s) = self.seq.replace(*seq) {
                    self.offer_go(Some(s));
                }
            }
            Item::Lines {
                text, hits, pcs, ..
            } => {
                let seq = self.seq.take();
                self.offer_go(seq);
                // As [`Self::hit`] at a pc with no conditional return's
                // fall-through: a pending return was taken, before these.
                self.settle_pending();
                // One write per chunk, as [`Self::trace`]'s flush: what
                // waits in `buf` goes first.
                if self.buf.is_empty() {
                    self.run.write(text);
                } else {
                    self.buf.extend_from_slice(text);
                    self.flush();
                }
                self.hits += hits;
                self.insns += pcs;
            }
            Item::Store { addr, value, size } => {
                self.shadow
                    .store(*addr, *value, *size, self.plan.big_endian)
            }
            Item::Tail(text) => {
                let seq = self.seq.take();
                self.offer_go(seq);
                // As [`Self::hit`] at a pc whose one site is a pc probe.
                self.settle_pending();
                let split = self.layout.split.expect("only made with a split");
                let insn = self.insn();
                out::pc_head(split, self.tid, insn, self.stack.len(), &mut self.buf);
                self.buf.extend_from_slice(text);
                self.hits += 1;
                self.insns += 1;
                if self.buf.len() > 1 << 16 {
                    self.flush();
                }
            }
            Item::Hit { pc, regs } => {
                self.hit(pid, *pc, regs);
                self.insns += 1;
            }
        }
    }

    fn insn(&self) -> Option<u64> {
        self.plan.count.then_some(self.insns)
    }

    fn hit(&mut self, pid: &Pid, pc: u64, regs: &[u64]) {
        let seq = self.seq.take();
        let plan = self.plan.clone();
        let sites = self.sites_in(&plan, pid, pc);
        if let Some(p) = self.pending.take() {
            if !sites.contains(&Site::NotTaken(p.ret.pc)) {
                self.returned(p.pc, p.target, &p.ret, &p.regs, p.insn);
            }
            self.offer_go(p.seq);
        }
        for s in sites {
            match *s {
                Site::Entry(t) => self.entered(pc, t, regs),
                Site::Return(target, ret) if ret.cond_next.is_some() => {
                    self.pending = Some(Pending {
                        seq: None,
                        pc,
                        target,
                        ret,
                        regs: regs.into(),
                        insn: self.insns,
                    });
                }
                Site::Return(t, r) => self.returned(pc, t, &r, regs, self.insns),
                Site::NotTaken(_) => {}
                Site::Pc(p) => {
                    let layout = self.layout.clone();
                    let h = Hit {
                        regs: Regs {
                            names: &layout.names,
                            values: regs,
                            keys: &layout.keys,
                        },
                        ..self.base(At::Pc, &plan.specs[p].text, None, pc)
                    };
                    self.emit(&h);
                }
            }
        }
        match &mut self.pending {
            // A conditional return made here and decided later keeps this
            // pc's number (Go emits none: another site's Go call here then
            // goes unordered).
            Some(p) => {
                p.seq = seq;
                self.offer_go(None);
            }
            None => self.offer_go(seq),
        }
    }

    /// A conditional return still pending was taken: nothing that could
    /// tell otherwise came.
    fn settle_pending(&mut self) {
        if let Some(p) = self.pending.take() {
            self.returned(p.pc, p.target, &p.ret, &p.regs, p.insn);
            self.offer_go(p.seq);
        }
    }

    /// Hands the Go calls of the hooked pc that took number `seq` of the
    /// process's order to the process's goroutines ([`super::super::goroutine`]),
    /// and writes the hits they make; with no calls, the number is passed
    /// over.
    fn offer_go(&mut self, seq: Option<u64>) {
        if self.go_calls.is_empty() && seq.is_none() {
            return;
        }
        let calls = std::mem::take(&mut self.go_calls);
        let mut hits = Vec::new();
        self.goroutines.offer(&self.plan, seq, calls, &mut hits);
        for h in &hits {
            write_go(&self.run, &self.plan, self.pid, h, &mut self.buf);
        }
        self.hits += hits.len() as u64;
        if self.buf.len() > 1 << 16 {
            self.flush();
        }
    }

    /// The goroutine running now, where Go frames are kept by goroutine
    /// and `t`'s are ([`super::super::plan::Target::by_goroutine`]).
    fn goroutine(&self, t: usize, regs: &[u64]) -> Option<u64> {
        let by_goroutine = self.plan.targets[t].by_goroutine;
        reg(regs, self.layout.g.filter(|_| by_goroutine))
    }

    fn base<'a>(&self, at: At, probe: &'a str, function: Option<&'a str>, pc: u64) -> Hit<'a> {
        Hit {
            pid: self.pid,
            tid: self.tid,
            insn: self.insn(),
            at,
            probe,
            function,
            shown: None,
            pc,
            args: Vec::new(),
            ret: None,
            unwound: false,
            insns: None,
            regs: Regs::default(),
            depth: self.stack.len(),
        }
    }

    fn entered(&mut self, pc: u64, t: usize, regs: &[u64]) {
        let plan = self.plan.clone();
        let l = self.layout.clone();
        let sp = reg(regs, l.sp).unwrap_or(0);
        let target = &plan.targets[t];
        let conv = target.conv;
        let key = conv.abi.entry_key(sp);
        // A Go function's frame is its goroutine's, kept by the process
        // ([`super::super::goroutine`]) where the guest has Go's `g` register.
        let g = self.goroutine(t, regs);
        // A runtime function that moves a goroutine's stack, hooked for
        // that alone, has no frame among a thread's.
        let move_only = g.is_none() && target.hidden && target.stack_move.is_some();
        if g.is_none() && !move_only {
            // A Go function's prologue that found its stack short calls
            // the runtime's `morestack`, which runs the function again
            // from its entry, on the same frame: the same call, not a new
            // one (a call of its own would have a lower key, and Go makes
            // no tail calls). After the stack was grown, and so moved, the
            // frame's key moved with it ([`Self::stack_moved`]).
            if conv.go
                && self
                    .stack
                    .last()
                    .is_some_and(|f| f.target == t && f.key == key)
            {
                return;
            }
            self.stack.push(Frame {
                target: t,
                key,
                insn: self.insn(),
            });
        }
        // What the probe reports, or more where the goroutine table needs
        // it (a stack move's).
        let shown = target.on_entry.map_or(0, |(_, n)| n);
        let n = shown.max(target.stack_move.map_or(0, |m| m.args()));
        let in_regs = if conv.go { &l.go_args } else { &l.args };
        let args: Vec<Option<u64>> = (0..n)
            .map(|i| {
                if conv.on_stack(i) {
                    let w = conv.word();
                    self.shadow.load(conv.stack_slot(sp, i), w, plan.big_endian)
                } else {
                    reg(regs, in_regs[i])
                }
            })
            .collect();
        if let (None, Some(what)) = (g, target.stack_move) {
            self.stack_moved(what, Some(&args), None);
        }
        if move_only {
            return;
        }
        if let Some(g) = g {
            self.go_calls.push(Call {
                g,
                tid: self.tid,
                insn: self.insns,
                pc,
                target: t,
                key,
                what: What::Entry { args },
            });
            return;
        }
        let Some((p, _)) = target.on_entry else {
            return;
        };
        let mut args = args;
        args.truncate(shown);
        let h = Hit {
            args,
            shown: plan.shown(t),
            ..self.base(At::Entry, &plan.specs[p].text, Some(&target.name), pc)
        };
        self.emit(&h);
    }

    fn returned(&mut self, pc: u64, t: usize, r: &isa::Ret, regs: &[u64], insn: u64) {
        let plan = self.plan.clone();
        let l = self.layout.clone();
        let after = r.after(regs, l.bits64);
        let Some(sp) = after.get(l.sp) else {
            return;
        };
        let key = sp.wrapping_add(r.pops);
        let value = after.get(l.ret);
        if let Some(g) = self.goroutine(t, regs) {
            let slot = plan.targets[t].ret_slot;
            let slot = slot.and_then(|s| {
                self.shadow
                    .load(key.wrapping_add(s.offset), s.len, plan.big_endian)
            });
            self.go_calls.push(Call {
                g,
                tid: self.tid,
                insn,
                pc,
                target: t,
                key,
                what: What::Return { value, slot },
            });
            return;
        }
        let target = &plan.targets[t];
        if let Some(what) = target.stack_move {
            let value = self.result(&plan, t, key, value);
            self.stack_moved(what, None, value);
            if target.hidden {
                return;
            }
        }
        // A return leaves the innermost frame (a function that jumped into
        // the middle of another, as `__mempcpy` into `__memcpy`, returns
        // through the other's instruction), or its own function's frame
        // and the deeper ones a longjmp skipped. Otherwise the "return"
        // only restored a caller's stack pointer (glibc's `__longjmp` ends
        // in `ret` or `jr ra`): every frame it leaves, even one with this
        // key, was left without returning.
        let genuine = returns_genuinely(&self.stack, key, t, |f| (f.key, f.target));
        while let Some(top) = self.stack.last() {
            if top.key > key {
                break;
            }
            let unwound = top.key < key || !genuine;
            let depth = self.stack.len();
            let f = self.stack.pop().expect("looked at above");
            let target = &plan.targets[f.target];
            let Some(probe) = plan.return_probe(f.target) else {
                continue;
            };
            let ret = if unwound {
                None
            } else {
                self.result(&plan, f.target, f.key, value)
            };
            let h = Hit {
                insn: plan.count.then_some(insn),
                ret,
                unwound,
                insns: f.insn.map(|i| insn - i),
                depth,
                shown: plan.shown(f.target),
                ..self.base(At::Return, &plan.specs[probe].text, Some(&target.name), pc)
            };
            self.emit(&h);
        }
    }

    /// The first result of target `t` returning from the frame `key`:
    /// `value` (the return register after the return) where its convention
    /// returns in a register, else, for an ABI0 Go function, the slot in
    /// its caller's frame its DWARF says (see `godwarf`).
    fn result(&self, plan: &Plan, t: usize, key: u64, value: Option<u64>) -> Option<u64> {
        let target = &plan.targets[t];
        match (target.conv.ret_reg(), target.ret_slot) {
            (Some(_), _) => value,
            (None, Some(s)) => self
                .shadow
                .load(key.wrapping_add(s.offset), s.len, plan.big_endian),
            (None, None) => None,
        }
    }

    /// A call of a runtime function that moves a goroutine's stack
    /// ([`super::super::stackmove`]), where Go frames are kept per thread (i386,
    /// where `g` is not in a register): the thread that grows a
    /// goroutine's stack runs that goroutine, so its frames on the old
    /// stack are this thread's, and they move with it. (Frames of it kept
    /// by another thread, one it ran on before, or where the collector
    /// shrinks a stack from another thread, are not followed.)
    fn stack_moved(&mut self, what: StackMove, entry: Option<&[Option<u64>]>, value: Option<u64>) {
        if let Some(moved) = stackmove::step(&mut self.moving, what, entry, value) {
            for f in &mut self.stack {
                f.key = moved.key(f.key);
            }
        }
    }

    fn emit(&mut self, h: &Hit) {
        self.hits += 1;
        let run = &self.run;
        match run.mode {
            Mode::Text => h.text(&mut self.buf),
            Mode::Json => h.json(&mut self.buf),
            Mode::Flow => h.flow(&mut self.buf),
        }
        if let Some(tl) = &run.timeline {
            let ts = h.insn.unwrap_or(self.hits);
            super::super::lock(tl).push(h.timeline(ts));
        }
        if self.buf.len() > 1 << 16 {
            self.flush();
        }
    }

    pub(super) fn flush(&mut self) {
        if !self.buf.is_empty() {
            self.run.write(&self.buf);
            self.buf.clear();
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if !self.deferred.is_empty() {
            // Finished by the process once the program is placed.
            let parked = self.parked.clone();
            let me = Probe {
                run: self.run.clone(),
                pid: self.pid,
                tid: self.tid,
                plan: self.plan.clone(),
                layout: self.layout.clone(),
                stack: std::mem::take(&mut self.stack),
                shadow: std::mem::take(&mut self.shadow),
                insns: self.insns,
                hits: std::mem::take(&mut self.hits),
                pending: self.pending.take(),
                biases: self.biases.clone(),
                buf: std::mem::take(&mut self.buf),
                deferred: std::mem::take(&mut self.deferred),
                parked: self.parked.clone(),
                goroutines: self.goroutines.clone(),
                seq: self.seq.take(),
                go_calls: Vec::new(),
                moving: self.moving.take(),
            };
            super::super::lock(&parked).push(me);
            return;
        }
        self.settle_pending();
        let seq = self.seq.take();
        self.offer_go(seq);
        self.flush();
        self.run.hits.fetch_add(self.hits, Ordering::Relaxed);
    }
}
