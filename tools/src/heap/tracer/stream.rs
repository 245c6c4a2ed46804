// SPDX-License-Identifier: GPL-2.0-or-later
//! The library's side of a heap run: the parallel callbacks turn a chunk's
//! events into [`Item`]s (what the call stacks, the allocation functions'
//! registers and the checks need, see [`super::super::parallel`]); the
//! serial phase hands them to [`super::order`], which applies them in the
//! order kept between the threads.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};

use cannoli::{Cannoli, ClientInfo, ReplayOrder};

use super::{fork, lock, order, segment, table, Item, Layout, MemAccess, Pid, Proc, Thread};
use crate::backtrace::state::BacktraceState;
use crate::backtrace::{arch, Exe};
use crate::coverage::isa::Isa;
use crate::heap::blocks::Heap;
use crate::heap::parallel::SiteFilter;
use crate::heap::Run;
use crate::probe::conv::Abi;
use crate::probe::shadow::{AddrMap, Shadow};

/// The registers a thread's [`Layout`] reads away from the allocation
/// functions' sites, by name: the stack pointer and the link register (the
/// call stacks) and the return value. At the sites it reads the arguments
/// too, and the registers a MIPS delay slot reads: the hook library
/// reports every register there.
fn away_from_sites(abi: Abi, rules: Option<arch::Rules>) -> [Option<&'static str>; 3] {
    [
        Some(abi.sp_reg()),
        rules.and_then(|r| r.ra),
        Some(abi.ret_reg()),
    ]
}

/// The hook library's `regs=` setting for a guest of `abi`: the registers
/// of `away_from_sites`, by name (the hook library finds them among the
/// guest's own, see `jitter::register_mask`).
pub fn narrowed_registers(abi: Abi) -> Vec<&'static str> {
    away_from_sites(abi, arch::rules(abi.arch()))
        .into_iter()
        .flatten()
        .collect()
}

/// Whether QEMU loads a vector as 8-byte pieces that the serial phase
/// joins into one check on guests of `arch` (see [`Layout`]'s
/// `split_vectors`).
fn splits_vectors(arch: &str) -> bool {
    Isa::of(arch) == Isa::Arm || matches!(arch, "ppc64" | "ppc64le")
}

/// The hook library's `quiet=` and `quiet_words=` settings for a guest of
/// `abi`: its stack pointer, whose block starts then report their
/// registers only where it moved or another kind of event came between
/// (`jitter::quiet_block_starts`); those left out are idle ones (the
/// segments' `idle`), which the parallel phase drops anyway. Where
/// vectors are split, an idle block start right after an 8-byte load is
/// kept, so that two runs of one load are not joined as one vector's
/// pieces: there an 8-byte load is such an event too. Not on 32-bit Arm,
/// where every branch reports its registers (whether it goes to Arm or
/// Thumb code is not known at lift time), so that a block start always
/// comes after another kind of event and the comparison would cost QEMU
/// time for nothing (8 % more under busybox `sha256sum`).
pub fn quiet_sp(abi: Abi) -> (Option<&'static str>, bool) {
    let sp = (abi != Abi::Aapcs).then(|| abi.sp_reg());
    (sp, splits_vectors(abi.arch()))
}

/// A guest thread's stream: its state, which any thread of the process
/// may advance once what it waits for has happened (`order`).
pub struct Stream {
    thread: Arc<Mutex<Thread>>,
    owner: Weak<Pid>,
}

impl Cannoli for Stream {
    type Trace = Item;
    type TidContext = Arc<Layout>;
    type PidContext = Pid;

    /// A thread's events wait in the serial phase for other threads'
    /// (`order`): one thread after the other, a `pthread_join`'s wait
    /// would hold the rest of the joining thread's stream.
    const REPLAY_ORDER: ReplayOrder = ReplayOrder::AsRecorded;

    fn init_pid(ci: &ClientInfo) -> Arc<Pid> {
        let run = ci.expect_state::<Run>();
        let exe = ci.exe.as_ref().map(PathBuf::from);
        let funcs = exe
            .as_deref()
            .and_then(|p| table(&run, p))
            .unwrap_or_default();
        let word = u64::from(ci.guest_bits / 8).max(4);
        let plan = run.plan.for_image(ci.exe.as_deref());
        let n = plan.modules.len();
        let filter = SiteFilter::new();
        let pid = Arc::new_cyclic(|me| Pid {
            pid: ci.pid,
            me: me.clone(),
            plan,
            biases: Mutex::new(vec![None; n]),
            dead: Arc::new(Mutex::new(Vec::new())),
            advanced: Condvar::new(),
            filter,
            threaded: AtomicBool::new(false),
            heap_windows: segment::HeapWindows::default(),
            state: Mutex::new(Proc {
                heap: Heap::new(word),
                shadow: Shadow::default(),
                word,
                big_endian: run.plan.big_endian,
                funcs,
                exe: exe.map(Exe::new),
                bias: None,
                loads: HashMap::new(),
                modules: Vec::new(),
                lens: AddrMap::default(),
                names: HashMap::new(),
                seq: 0,
                alloc_modules: Vec::new(),
                exit_regs: Vec::new(),
                seen: Default::default(),
                order: order::Order::new(run.live),
                awaiting: false,
                fork_stack: None,
                execed: false,
            }),
            run,
        });
        for &pc in pid.plan.sites.keys() {
            pid.filter.allow(pc);
        }
        // Under the state's lock: a parent applying the fork meanwhile
        // waits for it, then finds the child waiting.
        let mut st = lock(&pid.state);
        let born = lock(&pid.run.forks).born(&pid, ci.ppid);
        match born {
            fork::Born::Inherits(inh) => fork::inherit(&pid, &mut st, Some(*inh)),
            fork::Born::Waits => st.awaiting = true,
            fork::Born::Empty => {}
        }
        drop(st);
        pid
    }

    fn init_tid(pid: &Pid, ci: &ClientInfo) -> (Stream, Arc<Layout>) {
        let find = |n: &str| ci.reg_index(n);
        let rules = arch::rules(&ci.arch);
        let abi = pid.run.plan.abi;
        let [sp, ra, ret] = away_from_sites(abi, rules).map(|n| n.and_then(find));
        let layout = Arc::new(Layout {
            mask: ci.reg_mask(),
            args: abi.arg_regs().iter().map(|n| find(n)).collect(),
            ret,
            sp,
            ra,
            bits64: ci.guest_bits == 64,
            red_zone: match &*ci.arch {
                "x86_64" => 128,
                "ppc64" | "ppc64le" => 288,
                _ => 0,
            },
            split_vectors: splits_vectors(&ci.arch),
            // Without rules, cautious.
            plain_needed: if rules.is_some_and(|r| !r.delay_slot) {
                1
            } else {
                2
            },
        });
        lock(&pid.run.threads).insert(ci.tid);
        let t = Thread {
            run: pid.run.clone(),
            pid: ci.pid,
            tid: ci.tid,
            rules,
            layout: layout.clone(),
            bt: BacktraceState::unnamed(),
            calls: Vec::new(),
            pending: None,
            sp_lo: u64::MAX,
            sp_last: 0,
            dead: pid.dead.clone(),
            deferred: VecDeque::new(),
            ended: false,
            queued: false,
            half_load: None,
            segments: segment::Segments::default(),
            started: Cell::new(ci.tid == ci.pid),
        };
        let s = Stream {
            thread: Arc::new(Mutex::new(t)),
            owner: pid.me.clone(),
        };
        (s, layout)
    }

    #[inline]
    fn exec(pid: &Pid, l: &Arc<Layout>, pc: u64, trace: &mut Vec<Item>) {
        Self::exec_run(pid, l, &[pc], trace);
    }

    /// None once the serial phase needs no more ([`Self::exec_run`]).
    #[inline(always)]
    fn wants_runs(_pid: &Pid, l: &Arc<Layout>, trace: &mut Vec<Item>) -> bool {
        segment::plain_wanted(trace, l.plain_needed) > 0
    }

    /// Only the instructions [`plain_wanted`](crate::heap::parallel::plain_wanted)
    /// says the serial phase needs.
    #[inline(always)]
    fn exec_run(_pid: &Pid, l: &Arc<Layout>, pcs: &[u64], trace: &mut Vec<Item>) {
        let n = segment::plain_wanted(trace, l.plain_needed).min(pcs.len());
        if n > 0 {
            for &pc in &pcs[..n] {
                trace.push(Item::Insn {
                    pc,
                    branch: false,
                    regs: None,
                    value: None,
                });
            }
            segment::plain_pushed(trace, n);
        }
    }

    fn regs(pid: &Pid, l: &Arc<Layout>, pc: u64, regs: &[u8], trace: &mut Vec<Item>) {
        Self::branch(pid, l, pc, false, regs, trace)
    }

    fn branch(
        pid: &Pid,
        l: &Arc<Layout>,
        pc: u64,
        branch: bool,
        regs: &[u8],
        trace: &mut Vec<Item>,
    ) {
        let bt = l.bt(regs);
        let mut open_after = false;
        let idle = match bt {
            Some(r) if pid.run.fold => {
                // Decided before the head learns this stack pointer.
                let idle = !branch && segment::idle(trace, r.sp, l.plain_needed);
                let open = !pid.threaded.load(Ordering::Relaxed);
                open_after = segment::regs(trace, r.sp, l.red_zone, open);
                idle
            }
            Some(r) => segment::sp_seen(trace, r.sp, !branch, l.plain_needed),
            None => false,
        };
        if branch {
            segment::branch(trace, pc);
        } else {
            segment::plain_pushed(trace, 1);
        }
        let site = pid.is_site(pc);
        if idle && !site {
            return;
        }
        trace.push(Item::Insn {
            pc,
            branch,
            regs: bt,
            value: l.ret.and_then(|i| l.read(regs, i)),
        });
        if site {
            segment::close(trace);
            segment::event(trace);
            let n = regs.len() / 8;
            let v: Box<[u64]> = (0..n).filter_map(|i| l.read(regs, i)).collect();
            trace.push(Item::Hit { pc, regs: v });
        } else if open_after {
            segment::open_after(trace);
        }
    }

    fn ordered(_pid: &Pid, _l: &Arc<Layout>, _pc: u64, seq: u64, trace: &mut Vec<Item>) {
        segment::barrier(trace);
        trace.push(Item::Order { seq });
    }

    #[inline(always)]
    fn read(p: &Pid, l: &Arc<Layout>, pc: u64, addr: u64, val: u64, sz: u8, trace: &mut Vec<Item>) {
        let a = MemAccess {
            pc,
            addr,
            val,
            hi: 0,
            size: sz,
            store: false,
            zone: 0,
        };
        p.access(l, a, trace);
    }

    #[inline(always)]
    fn write(
        p: &Pid,
        l: &Arc<Layout>,
        pc: u64,
        addr: u64,
        val: u64,
        sz: u8,
        trace: &mut Vec<Item>,
    ) {
        let a = MemAccess {
            pc,
            addr,
            val,
            hi: 0,
            size: sz,
            store: true,
            zone: 0,
        };
        p.access(l, a, trace);
    }

    #[inline(always)]
    fn access_wide(p: &Pid, l: &Arc<Layout>, a: &cannoli::Access, trace: &mut Vec<Item>) {
        let a = MemAccess {
            pc: a.pc,
            addr: a.addr,
            val: a.val as u64,
            hi: (a.val >> 64) as u64,
            size: a.size,
            store: a.store,
            zone: 0,
        };
        p.access(l, a, trace);
    }

    fn block(_p: &Pid, _l: &Arc<Layout>, pc: u64, lens: &[u8], trace: &mut Vec<Item>) {
        segment::event(trace);
        trace.push(Item::Block {
            pc,
            lens: lens.into(),
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn mmap(
        pid: &Pid,
        _l: &Arc<Layout>,
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
        if !anon && offset == 0 && !pid.plan.modules.is_empty() {
            let p = Path::new(path);
            let p = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
            if let Some(m) = pid.plan.module_of(&p) {
                let module = &pid.plan.modules[m];
                let mut b = lock(&pid.biases);
                let bias = crate::probe::tracer::bias_after(module, b[m], base);
                if b[m] != Some(bias) {
                    for &pc in module.sites.keys() {
                        pid.filter.allow(pc.wrapping_add(bias));
                    }
                }
                b[m] = Some(bias);
            }
        }
        segment::barrier(trace);
        trace.push(Item::Map {
            base,
            len,
            exec,
            offset,
            path: if anon { "".into() } else { path.into() },
        });
    }

    fn munmap(_p: &Pid, _l: &Arc<Layout>, base: u64, len: u64, trace: &mut Vec<Item>) {
        segment::barrier(trace);
        trace.push(Item::Unmap { base, len });
    }

    fn signal(_p: &Pid, _l: &Arc<Layout>, sig: &cannoli::Signal, trace: &mut Vec<Item>) {
        if let Some(handler) = sig.handler {
            segment::barrier(trace);
            trace.push(Item::Signal { handler });
        }
    }

    fn syscall(p: &Pid, _l: &Arc<Layout>, sc: &cannoli::Syscall, trace: &mut Vec<Item>) {
        // Every call ends a segment: a `clone`, a fork, an exec or the
        // exit, and a call that maps or unmaps memory.
        segment::barrier(trace);
        let clone = order::clone_item(sc);
        if clone.is_some() {
            p.threaded.store(true, Ordering::Relaxed);
        }
        if let Some(item) = clone.or_else(|| order::fork_item(sc)) {
            trace.push(item);
        }
        match sc.name {
            Some("exit_group") => trace.push(Item::Exit { args: sc.args }),
            Some("execve" | "execveat") => trace.push(Item::Exec {
                ok: sc.ret.is_none(),
            }),
            _ => {}
        }
    }

    /// The open segment ends with the chunk's events.
    fn decoded(_pid: &Pid, _l: &Arc<Layout>, trace: &mut Vec<Item>) {
        segment::close(trace);
    }

    fn trace(&mut self, pid: &Pid, _l: &Arc<Layout>, trace: &[Item]) {
        let mut st = lock(&pid.state);
        let next = st.order.next();
        order::run(pid, &mut st, &self.thread, trace);
        order::wait_turn(pid, st, &self.thread, next);
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // The library drops the process's context after its threads'
        // streams, so it is there.
        if let Some(pid) = self.owner.upgrade() {
            let mut st = lock(&pid.state);
            let next = st.order.next();
            order::stream_ended(&pid, &mut st, &self.thread);
            order::moved(&pid, &st, next);
        }
    }
}
