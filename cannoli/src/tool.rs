// SPDX-License-Identifier: GPL-2.0-or-later
//! The tool contract: [`Cannoli`], what a trace analysis tool implements.
//!
//! Two kinds of callbacks. The parallel ones turn events into the tool's
//! own `Trace` values on worker threads; the serial one,
//! [`Cannoli::trace_flow`] (by default [`Cannoli::trace`]), receives them in
//! execution order and can stop the run or fail it.
//!
//! The seed's callbacks take their events as positional arguments; those
//! this project added take one struct each ([`Mapping`], [`Protection`],
//! [`Access`], [`Block`], [`Syscall`], [`Signal`]). The library calls the
//! struct forms, whose defaults forward to the positional ones, so a tool
//! written against the seed keeps working and a new tool overrides the
//! struct form it needs.

use std::sync::Arc;

use crate::event::{Access, Block, Mapping, Protection, Signal, Syscall};
use crate::flow::{Flow, ToolError};
use crate::ClientInfo;

/// How a replay ([`crate::recording`]) hands a tool the streams of a
/// process's threads, as a DynamoRIO drmemtrace analyzer chooses between
/// its shards one by one and interleaved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayOrder {
    /// Each thread's whole stream, one after the other, in the order they
    /// connected: the serial phase's calls in the same order every
    /// replay. For tools whose threads' serial phases do not wait on each
    /// other.
    InTurn,
    /// A process's threads side by side, as they ran: their chunks taken
    /// in the order the recorder wrote them (the order they reached it),
    /// a thread's stream ending as soon as its last chunk is delivered.
    /// For a tool whose serial phase holds one thread's events until
    /// another's have come (`cannoli heap`: a `pthread_join` waits for the
    /// joined thread's end), which one thread after the other would hold
    /// for the whole rest of that thread's stream.
    AsRecorded,
}

/// A trace analysis tool. One value of `Self` exists per traced guest thread.
///
/// The parallel callbacks (`exec`, `exec_run`, `regs`, `branch`, `read`,
/// `write`, `access_wide` with `read_wide` and `write_wide`, `translated`
/// with `block`, `mapped` with `mmap`, `munmap`, `protected` with
/// `mprotect`, `syscall`, `signal`) run on several worker threads at once,
/// on different chunks of the same guest thread's stream, in no particular
/// order between chunks (but in execution order within a chunk). They get
/// shared references to the contexts and append whatever they want to keep
/// to `trace`. Where two names go together, the library calls the first
/// (it takes the event as a struct) and its default calls the second (the
/// positional form): override either.
///
/// [`Cannoli::trace_flow`] then receives each chunk's `trace` values, one
/// chunk at a time, strictly in execution order, with `&mut self`, and
/// says whether the run goes on ([`Flow`]); by default it calls
/// [`Cannoli::trace`] and goes on.
pub trait Cannoli: Send + Sync + Sized + 'static {
    /// What the parallel callbacks produce for the serial phase.
    type Trace: Send + 'static;
    /// Per traced guest thread, shared by `&` with the parallel callbacks.
    type TidContext: Send + Sync + 'static;
    /// Per traced guest process, shared by all its threads.
    type PidContext: Send + Sync + 'static;

    /// How a replay hands this tool the threads of a process (a live run
    /// always runs them side by side). By default [`ReplayOrder::InTurn`].
    const REPLAY_ORDER: ReplayOrder = ReplayOrder::InTurn;

    /// Called once per guest process, when its first thread connects.
    ///
    /// It runs before that thread is welcomed, so the guest thread waits
    /// for it: the context must exist before any of the process's threads
    /// can run, start others and end. Keep it short (reading a symbol table
    /// once per run is fine): the guest side gives up on a handshake after
    /// [`wire::channel::HANDSHAKE_TIMEOUT`].
    fn init_pid(ci: &ClientInfo) -> Arc<Self::PidContext>;

    /// Called once per guest thread, when it connects.
    fn init_tid(pid: &Self::PidContext, ci: &ClientInfo) -> (Self, Self::TidContext);

    /// An instruction at `pc` is about to execute.
    #[inline(always)]
    fn exec(
        _pid: &Self::PidContext,
        _tid: &Self::TidContext,
        _pc: u64,
        _trace: &mut Vec<Self::Trace>,
    ) {
    }

    /// The instructions at `pcs` are about to execute, in this order, with
    /// nothing else between them: a run of a translated block (QEMU reports
    /// a block's execution as one event, which the library expands). The
    /// default calls [`Cannoli::exec`] for each pc, which is all most tools
    /// need. A tool that keeps running state per instruction can fold a
    /// whole run in registers here instead of going through `trace` once
    /// per instruction (see `examples/benchmark`); it must then do for every
    /// pc what its `exec` does.
    #[inline(always)]
    fn exec_run(
        pid: &Self::PidContext,
        tid: &Self::TidContext,
        pcs: &[u64],
        trace: &mut Vec<Self::Trace>,
    ) {
        for &pc in pcs {
            Self::exec(pid, tid, pc, trace);
        }
    }

    /// Whether [`Cannoli::exec_run`] could do anything now, were the next
    /// instructions given to it. By default true. A tool that wants only a
    /// few instructions after some of its events (the heap wants the one or
    /// two after a branch, the call stacks the one where a branch landed)
    /// answers false in between; the library then counts the instructions
    /// it would have given instead of expanding them (finding the runs
    /// between the gaps a block's hooked instructions leave in its mask,
    /// or calling `exec` once a pc, cost more than the tool's work on
    /// them). Asked before each expansion. False must mean that
    /// `exec_run`, and `exec`, would leave `trace` and every context as
    /// they are.
    #[inline(always)]
    fn wants_runs(
        _pid: &Self::PidContext,
        _tid: &Self::TidContext,
        _trace: &mut Vec<Self::Trace>,
    ) -> bool {
        true
    }

    /// The instruction at `pc` is about to execute (a `Register` hook), with
    /// the guest's general purpose registers: `regs` holds one little-endian
    /// `u64` word per register, [`ClientInfo::regs`]`.count` of them, in the
    /// order of [`ClientInfo::regs`]`.names`. Read them with
    /// [`ClientInfo::reg_values`] or [`ClientInfo::reg`].
    #[inline(always)]
    fn regs(
        _pid: &Self::PidContext,
        _tid: &Self::TidContext,
        _pc: u64,
        _regs: &[u8],
        _trace: &mut Vec<Self::Trace>,
    ) {
    }

    /// The instruction at `pc` is about to execute (a `Branch` hook), with the
    /// guest registers as for [`Cannoli::regs`]. `_branch` tells whether the
    /// instruction can end a basic block (a branch, jump, call, return or
    /// trap); whether it is taken shows in the next executed pc.
    ///
    /// By default it is [`Cannoli::regs`]: a tool that does not follow
    /// branches still gets the registers of every instruction they were
    /// asked for at (a `--hooks regs` recording flags its branches).
    #[inline(always)]
    fn branch(
        pid: &Self::PidContext,
        tid: &Self::TidContext,
        pc: u64,
        _branch: bool,
        regs: &[u8],
        trace: &mut Vec<Self::Trace>,
    ) {
        Self::regs(pid, tid, pc, regs, trace)
    }

    /// The instruction at `pc`, about to execute, took number `seq` of its
    /// process's order: the hook library asked for one there
    /// (`jitter::order_here`), and its registers event follows. The numbers
    /// are one counter that every thread of the process shares, from 0, so
    /// they say which of two threads' ordered instructions ran first, which
    /// the threads' streams alone do not. A run that lost no events has
    /// every number once.
    #[inline(always)]
    fn ordered(
        _pid: &Self::PidContext,
        _tid: &Self::TidContext,
        _pc: u64,
        _seq: u64,
        _trace: &mut Vec<Self::Trace>,
    ) {
    }

    /// The instruction at `pc` loaded `val` (masked to `sz` bytes: 1, 2, 4 or
    /// 8) from guest address `addr`. 16-byte accesses come through
    /// [`Cannoli::read_wide`], which calls this by default.
    #[inline(always)]
    fn read(
        _pid: &Self::PidContext,
        _tid: &Self::TidContext,
        _pc: u64,
        _addr: u64,
        _val: u64,
        _sz: u8,
        _trace: &mut Vec<Self::Trace>,
    ) {
    }

    /// The instruction at `pc` stored `val` (masked to `sz` bytes: 1, 2, 4 or
    /// 8) to guest address `addr`.
    #[inline(always)]
    fn write(
        _pid: &Self::PidContext,
        _tid: &Self::TidContext,
        _pc: u64,
        _addr: u64,
        _val: u64,
        _sz: u8,
        _trace: &mut Vec<Self::Trace>,
    ) {
    }

    /// The instruction at `pc` loaded 16 bytes (`sz` is 16) from guest
    /// address `addr`: an SSE, NEON, VSX or 128-bit atomic access. `val` is
    /// the value as the guest sees it in memory order of a little-endian
    /// load (as QEMU's plugins report it). By default this calls
    /// [`Cannoli::read`] with the low 64 bits, so a tool written for
    /// narrower accesses still sees every access; override it for the whole
    /// value.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn read_wide(
        pid: &Self::PidContext,
        tid: &Self::TidContext,
        pc: u64,
        addr: u64,
        val: u128,
        sz: u8,
        trace: &mut Vec<Self::Trace>,
    ) {
        Self::read(pid, tid, pc, addr, val as u64, sz, trace)
    }

    /// The instruction at `pc` stored 16 bytes to `addr`; see
    /// [`Cannoli::read_wide`]. By default this calls [`Cannoli::write`] with
    /// the low 64 bits.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn write_wide(
        pid: &Self::PidContext,
        tid: &Self::TidContext,
        pc: u64,
        addr: u64,
        val: u128,
        sz: u8,
        trace: &mut Vec<Self::Trace>,
    ) {
        Self::write(pid, tid, pc, addr, val as u64, sz, trace)
    }

    /// QEMU translated a block starting at `pc`; `lens[i]` is the length in
    /// bytes of its i-th instruction (0 if QEMU could not tell). Sent by the
    /// thread that translated the block, before the block first runs; any
    /// thread of the process may run it later. This is how a tool learns an
    /// instruction's size where the pc does not tell (Thumb, x86, RISC-V
    /// compressed instructions).
    #[inline(always)]
    fn block(
        _pid: &Self::PidContext,
        _tid: &Self::TidContext,
        _pc: u64,
        _lens: &[u8],
        _trace: &mut Vec<Self::Trace>,
    ) {
    }

    /// The guest mapped `len` bytes at `base` (an `mmap`, or a mapping QEMU
    /// made for it, e.g. of the program and its interpreter). `anon`: not
    /// backed by a file, `path` is then empty; otherwise `path` names the file
    /// (lossily converted if it is not UTF-8) and `offset` is the offset in
    /// it. `read`/`write`/`exec`: the protection.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn mmap(
        _pid: &Self::PidContext,
        _tid: &Self::TidContext,
        _base: u64,
        _len: u64,
        _anon: bool,
        _read: bool,
        _write: bool,
        _exec: bool,
        _path: &str,
        _offset: u64,
        _trace: &mut Vec<Self::Trace>,
    ) {
    }

    /// The guest unmapped `len` bytes at `base`.
    #[inline(always)]
    fn munmap(
        _pid: &Self::PidContext,
        _tid: &Self::TidContext,
        _base: u64,
        _len: u64,
        _trace: &mut Vec<Self::Trace>,
    ) {
    }

    /// The guest changed the protection of `len` bytes at `base`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn mprotect(
        _pid: &Self::PidContext,
        _tid: &Self::TidContext,
        _base: u64,
        _len: u64,
        _read: bool,
        _write: bool,
        _exec: bool,
        _trace: &mut Vec<Self::Trace>,
    ) {
    }

    /// The guest made a system call (see [`Syscall`]): its number, name,
    /// arguments, result (`None` if it did not return to the guest, like
    /// `exit` or a successful `execve`) and the buffer it read or wrote.
    #[inline(always)]
    fn syscall(
        _pid: &Self::PidContext,
        _tid: &Self::TidContext,
        _sc: &Syscall<'_>,
        _trace: &mut Vec<Self::Trace>,
    ) {
    }

    /// A signal is being delivered to the guest (see [`Signal`]).
    #[inline(always)]
    fn signal(
        _pid: &Self::PidContext,
        _tid: &Self::TidContext,
        _sig: &Signal,
        _trace: &mut Vec<Self::Trace>,
    ) {
    }

    /// The guest mapped memory (see [`Mapping`]). By default this calls
    /// [`Cannoli::mmap`].
    #[inline(always)]
    fn mapped(
        pid: &Self::PidContext,
        tid: &Self::TidContext,
        m: &Mapping<'_>,
        trace: &mut Vec<Self::Trace>,
    ) {
        let Mapping {
            base,
            len,
            anon,
            prot,
            path,
            offset,
        } = *m;
        Self::mmap(
            pid, tid, base, len, anon, prot.read, prot.write, prot.exec, path, offset, trace,
        );
    }

    /// The guest changed a mapping's protection (see [`Protection`]). By
    /// default this calls [`Cannoli::mprotect`].
    #[inline(always)]
    fn protected(
        pid: &Self::PidContext,
        tid: &Self::TidContext,
        p: &Protection,
        trace: &mut Vec<Self::Trace>,
    ) {
        let Protection { base, len, prot } = *p;
        Self::mprotect(pid, tid, base, len, prot.read, prot.write, prot.exec, trace);
    }

    /// A 16-byte load or store (see [`Access`]; narrower ones come to
    /// [`Cannoli::read`] and [`Cannoli::write`]). By default this calls
    /// [`Cannoli::read_wide`] or [`Cannoli::write_wide`].
    #[inline(always)]
    fn access_wide(
        pid: &Self::PidContext,
        tid: &Self::TidContext,
        a: &Access,
        trace: &mut Vec<Self::Trace>,
    ) {
        if a.store {
            Self::write_wide(pid, tid, a.pc, a.addr, a.val, a.size, trace);
        } else {
            Self::read_wide(pid, tid, a.pc, a.addr, a.val, a.size, trace);
        }
    }

    /// QEMU translated a block (see [`Block`]). By default this calls
    /// [`Cannoli::block`].
    #[inline(always)]
    fn translated(
        pid: &Self::PidContext,
        tid: &Self::TidContext,
        b: &Block<'_>,
        trace: &mut Vec<Self::Trace>,
    ) {
        Self::block(pid, tid, b.pc, b.lens, trace);
    }

    /// The events of one piece of a stream were all delivered to `trace`:
    /// a chunk's body (on the worker that decoded it), a chunk's head
    /// stitched in order, or the block still open at the stream's end.
    /// A tool that builds something across a chunk's callbacks (the heap's
    /// folded segments) finishes it here, before the trace goes to the
    /// serial phase. Called on the thread that decoded the events; by
    /// default nothing.
    #[inline(always)]
    fn decoded(_pid: &Self::PidContext, _tid: &Self::TidContext, _trace: &mut Vec<Self::Trace>) {}

    /// Serial phase: called with each chunk's trace values strictly in
    /// execution order, one chunk at a time. Chunks that produced no trace
    /// values are skipped.
    fn trace(&mut self, _pid: &Self::PidContext, _tid: &Self::TidContext, _trace: &[Self::Trace]) {}

    /// The serial phase as the library calls it: [`Cannoli::trace`], then
    /// whether the run goes on. Return [`Flow::Stop`] once the tool has
    /// what it wants, or an error to fail the run; either way it is not
    /// called again for any thread, no more chunks are decoded, the guest
    /// runs on as it would untraced, and the run returns
    /// [`Stats::stopped`] or [`Error::Tool`].
    ///
    /// [`Stats::stopped`]: crate::Stats::stopped
    /// [`Error::Tool`]: crate::Error::Tool
    fn trace_flow(
        &mut self,
        pid: &Self::PidContext,
        tid: &Self::TidContext,
        trace: &[Self::Trace],
    ) -> Result<Flow, ToolError> {
        self.trace(pid, tid, trace);
        Ok(Flow::Continue)
    }
}
