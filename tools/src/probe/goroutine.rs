// SPDX-License-Identifier: GPL-2.0-or-later
//! A Go program's probed calls, kept by goroutine.
//!
//! Go runs many goroutines on a few threads. A goroutine that blocks
//! inside a probed function (a channel receive, a lock) is parked, and its
//! thread runs another goroutine, which may enter the same function; the
//! first goroutine resumes later, often on another thread, and returns
//! there. Frames kept per thread, as C's are, would nest the calls of
//! different goroutines, leave the first call's frame behind on its old
//! thread, and take its return on the new one for a `longjmp`. So a Go
//! function's frames are kept per goroutine, told by the register where
//! Go's runtime keeps the running goroutine (`g`, see
//! [`super::conv::Abi::go_g_reg`]), in one table for the process
//! ([`Goroutines`]). On i386, where `g` is in thread-local storage, Go
//! frames stay per thread.
//!
//! The threads' events reach the serial phase in no order between
//! threads, so a goroutine's return on one thread may come before its
//! entry on another. The hook library has every probed pc take the next
//! number of the process's order (`jitter::order_here`, one counter the
//! threads share), and the table applies calls in that order: a call
//! whose number is ahead of the next one to apply waits here. Every number
//! a thread took reaches the table ([`Goroutines::offer`]), with its calls
//! or with none (a pc probe, a C function, a conditional return not
//! taken), so no number is waited for in vain. A thread that took a
//! number and then lags (its events not handed over yet, or its worker
//! behind the others') holds the numbers after it: once more than
//! [`WAIT_LIMIT`] calls wait, a live run's threads with calls after it
//! wait for it ([`Table`]), up to [`STALL`]; past that (and at once in a
//! replay) the earliest applies anyway, and a call that comes after its
//! turn is applied when it comes, counted ([`Goroutines::late`]). Calls without a
//! number (a recording made without them, `--hooks regs`) apply as they
//! come: a return whose entry, on another thread, comes after it finds no
//! frame, and an entry whose call before it has not returned yet looks
//! like the same call run again; both are counted
//! ([`Goroutines::unmatched`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::conv::returns_genuinely;
use super::out::At;
use super::plan::{Plan, StackMove};
use super::stackmove::{self, Moving};

/// The most calls and numbers passed over that wait for an earlier
/// number before the threads with more wait too (a live run) or the
/// earliest applies anyway (a replay): about 100 to 200 bytes each, so
/// some 50 MB at most.
pub const WAIT_LIMIT: usize = 1 << 18;

/// How long, in a live run, a thread whose calls would pass
/// [`WAIT_LIMIT`] waits for the number before them (see [`Table`]).
pub const STALL: Duration = Duration::from_secs(2);

/// A Go function's entry or return, as the thread that ran it read it.
#[derive(Debug, Clone)]
pub struct Call {
    /// The goroutine (its `g`).
    pub g: u64,
    pub tid: i32,
    /// Instructions the thread ran before this one.
    pub insn: u64,
    pub pc: u64,
    pub target: usize,
    /// The frame's key ([`super::conv`]).
    pub key: u64,
    pub what: What,
}

#[derive(Debug, Clone)]
pub enum What {
    /// The entry, with the arguments its probe reports.
    Entry { args: Vec<Option<u64>> },
    /// A return instruction of `target`: the result register's value, and
    /// the first word of `target`'s result slot where its convention puts
    /// the result in memory (ABI0).
    Return {
        value: Option<u64>,
        slot: Option<u64>,
    },
}

/// A hit the table's calls make: [`super::out::Hit`] without the borrowed
/// names (the plan gives them: `probe`, `target`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoHit {
    pub at: At,
    /// The `-p` (index into the plan's specs).
    pub probe: usize,
    pub target: usize,
    pub tid: i32,
    /// Instructions the thread ran before this one.
    pub insn: u64,
    pub pc: u64,
    pub args: Vec<Option<u64>>,
    pub ret: Option<u64>,
    pub unwound: bool,
    /// At a return: instructions since the entry, where both ran on the
    /// same thread (one thread's count says nothing of another's).
    pub insns: Option<u64>,
    /// Probed frames open in this goroutine, this one included.
    pub depth: usize,
    /// The goroutine's number, from 0 in the order they are first seen
    /// (its timeline track), and whether this is its first hit.
    pub goroutine: u64,
    pub first: bool,
    /// Where the hit is in the order the table applied calls in (the
    /// timeline's clock: goroutines' hits are ordered by it).
    pub ts: u64,
}

/// A number of the process's order that waits for earlier ones.
#[derive(Debug, Default)]
enum Slot {
    /// Not come yet.
    #[default]
    Open,
    /// Its calls: none (a number passed over), one (nearly always), or
    /// several (one pc can be several targets' entries).
    Calls(Vec<Call>),
}

/// A goroutine: its number, its frames (outermost first), and whether a
/// hit of it was made (its timeline track named).
#[derive(Debug, Default)]
struct Goroutine {
    n: u64,
    named: bool,
    frames: Vec<Frame>,
}

/// A probed Go call that has not returned.
#[derive(Debug)]
struct Frame {
    target: usize,
    key: u64,
    tid: i32,
    insn: u64,
}

/// The process's goroutines and their frames.
#[derive(Debug, Default)]
pub struct Goroutines {
    /// The next number to apply: every one before it was applied (or
    /// passed over past [`WAIT_LIMIT`]).
    next: u64,
    /// The numbers from `next` on, while one has not come: slot `i` is
    /// number `next + i`.
    waiting: VecDeque<Slot>,
    /// Slots of `waiting` that came, and the calls in them.
    arrived: usize,
    held: usize,
    /// The goroutines, by `g` (the runtime reuses a `g` for a later
    /// goroutine, which then keeps its number: one entry per `g`).
    goroutines: HashMap<u64, Goroutine>,
    /// Goroutines seen.
    seen: u64,
    /// Calls applied.
    applied: u64,
    /// Calls applied after a later number, which could not wait longer.
    pub late: u64,
    /// Calls without a number that may be out of their goroutine's order
    /// (see `ambiguous`): each hit missing is one of them.
    pub unmatched: u64,
    /// Stack moves under way, by the `g` that runs `copystack` (its
    /// thread's scheduler goroutine, `g0`).
    moving: HashMap<u64, Moving>,
    /// Stacks moved, their goroutines' frames with them.
    pub moved: u64,
    /// Calls past [`WAIT_LIMIT`] wait for the number before them in
    /// [`Table::offer`], rather than pass it over at once.
    patient: bool,
    /// Threads waiting in [`Table::offer`].
    waiters: usize,
}

/// A process's table, which its threads share, and where a live run's
/// thread waits. A thread whose calls would pass [`WAIT_LIMIT`] (another
/// thread took a number long before and its events have not come: its
/// worker lags, on a loaded machine, behind the others') waits for that
/// number, up to [`STALL`], before passing it over. Meanwhile its own
/// stream waits, so its ring fills and its QEMU thread stops too: the
/// threads that run ahead wait for the one that lags, as they do for a
/// full ring, rather than leave its calls out of order. A number that
/// does not come within [`STALL`] (its thread runs on without events
/// that would hand its chunk over, or it was lost) is passed over, as
/// before.
#[derive(Debug)]
pub struct Table {
    calls: Mutex<Goroutines>,
    advanced: Condvar,
    /// [`STALL`] (a test waits longer).
    stall: Duration,
}

impl Table {
    /// `patient`: a live run's (see [`Table`]); a replay's threads come
    /// one after the other, and never wait.
    pub fn new(patient: bool) -> Table {
        Table {
            calls: Mutex::new(Goroutines {
                patient,
                ..Goroutines::default()
            }),
            advanced: Condvar::new(),
            stall: STALL,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Goroutines> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`Goroutines::offer`], and the wait for the number before the
    /// calls waiting where they would pass [`WAIT_LIMIT`].
    pub fn offer(&self, plan: &Plan, seq: Option<u64>, calls: Vec<Call>, out: &mut Vec<GoHit>) {
        let mut gs = self.lock();
        let before = gs.next;
        gs.offer(plan, seq, calls, out);
        // Only a thread whose own calls wait: the thread whose number the
        // others wait for may have calls before it to hand over first.
        let waits = |gs: &mut Goroutines| seq.is_some_and(|s| s >= gs.next) && gs.stalled();
        if waits(&mut gs) {
            gs.waiters += 1;
            let (g, waited) = self
                .advanced
                .wait_timeout_while(gs, self.stall, waits)
                .unwrap_or_else(|p| p.into_inner());
            gs = g;
            gs.waiters -= 1;
            if waited.timed_out() {
                gs.pass_over(plan, out);
            }
        }
        if gs.next != before && gs.waiters > 0 {
            self.advanced.notify_all();
        }
    }
}

impl Goroutines {
    /// `calls` ran at one hooked pc, which took number `seq` of the
    /// process's order (none: a pc that is no Go call, passed over), or
    /// none: they apply now, else when their turn comes. The hits they
    /// make, and those of the calls they let run, go to `out`.
    pub fn offer(&mut self, plan: &Plan, seq: Option<u64>, calls: Vec<Call>, out: &mut Vec<GoHit>) {
        let Some(seq) = seq else {
            for c in calls {
                if self.ambiguous(&c) {
                    self.unmatched += 1;
                }
                self.apply(plan, c, out);
            }
            return;
        };
        if seq < self.next {
            // Its turn was given up ([`WAIT_LIMIT`]), or a number came
            // twice (a damaged recording): as it comes.
            self.late += calls.len() as u64;
            for c in calls {
                self.apply(plan, c, out);
            }
            return;
        }
        if seq == self.next && self.waiting.is_empty() {
            // Its turn, with nothing waiting (most calls): at once.
            self.next = seq.saturating_add(1);
            for c in calls {
                self.apply(plan, c, out);
            }
            return;
        }
        let at = seq - self.next;
        if at >= WAIT_LIMIT as u64 && !self.patient {
            // So far ahead (or a damaged recording's number) that the
            // numbers before it would pass the limit anyway. (In a live
            // run, whose numbers are the hook library's, such a thread
            // waits, see [`Table`].)
            self.finish(plan, out);
            self.next = seq.saturating_add(1);
            for c in calls {
                self.apply(plan, c, out);
            }
            return;
        }
        let at = at as usize;
        if at >= self.waiting.len() {
            self.waiting.resize_with(at + 1, Slot::default);
        }
        self.held += calls.len();
        match &mut self.waiting[at] {
            slot @ Slot::Open => {
                self.arrived += 1;
                *slot = Slot::Calls(calls);
            }
            // A number twice (a damaged recording).
            Slot::Calls(v) => v.extend(calls),
        }
        if self.patient {
            self.apply_come(plan, out);
        } else {
            self.pass_over(plan, out);
        }
    }

    /// Whether the number `next` has not come while calls after it would
    /// pass [`WAIT_LIMIT`].
    pub fn stalled(&self) -> bool {
        matches!(self.waiting.front(), Some(Slot::Open)) && self.held + self.arrived > WAIT_LIMIT
    }

    /// Applies the numbers from `next` on that came.
    fn apply_come(&mut self, plan: &Plan, out: &mut Vec<GoHit>) {
        while matches!(self.waiting.front(), Some(Slot::Calls(_))) {
            self.run_first(plan, out);
        }
    }

    /// Applies the numbers from `next` on that came, passing over those
    /// that did not while the calls after them pass [`WAIT_LIMIT`].
    fn pass_over(&mut self, plan: &Plan, out: &mut Vec<GoHit>) {
        while let Some(front) = self.waiting.front() {
            if matches!(front, Slot::Open) && !self.stalled() {
                break;
            }
            self.run_first(plan, out);
        }
    }

    /// Applies every call still waiting, in order (nothing more will
    /// come: the process ended).
    pub fn finish(&mut self, plan: &Plan, out: &mut Vec<GoHit>) {
        while !self.waiting.is_empty() {
            self.run_first(plan, out);
        }
    }

    /// Applies the calls of number `next`, come or not.
    fn run_first(&mut self, plan: &Plan, out: &mut Vec<GoHit>) {
        if let Some(slot) = self.waiting.pop_front() {
            self.next = self.next.saturating_add(1);
            if let Slot::Calls(calls) = slot {
                self.arrived -= 1;
                self.held -= calls.len();
                for c in calls {
                    self.apply(plan, c, out);
                }
            }
        }
    }

    /// Whether `call`, without a number, may be out of its goroutine's
    /// order: a return that finds no frame to end (its entry has not come
    /// yet), or an entry on a frame of the same function that has not
    /// returned (the same call run again by `morestack`, or the next call
    /// from the same place whose return before it has not come yet).
    fn ambiguous(&self, call: &Call) -> bool {
        let top = self.goroutines.get(&call.g).and_then(|gr| gr.frames.last());
        match call.what {
            What::Return { .. } => !top.is_some_and(|f| f.key <= call.key),
            What::Entry { .. } => top.is_some_and(|f| f.target == call.target && f.key == call.key),
        }
    }

    /// A call of a function that moves a goroutine's stack: once the
    /// old stack is given up, the moved goroutine's frames take their
    /// place on the new one (the same distance from its high end).
    fn stack_move(&mut self, plan: &Plan, what: StackMove, call: &Call) {
        let t = &plan.targets[call.target];
        let (entry, value) = match &call.what {
            What::Entry { args } => (Some(args.as_slice()), None),
            What::Return { value, slot } => (
                None,
                if t.conv.ret_reg().is_some() {
                    *value
                } else {
                    *slot
                },
            ),
        };
        let mut moving = self.moving.remove(&call.g);
        let moved = stackmove::step(&mut moving, what, entry, value);
        if let Some(m) = moving {
            self.moving.insert(call.g, m);
        }
        let Some(moved) = moved else {
            return;
        };
        if let Some(gr) = self.goroutines.get_mut(&moved.gp) {
            for f in &mut gr.frames {
                f.key = moved.key(f.key);
            }
        }
        self.moved += 1;
    }

    fn apply(&mut self, plan: &Plan, call: Call, out: &mut Vec<GoHit>) {
        self.applied += 1;
        if let Some(what) = plan.targets[call.target].stack_move {
            self.stack_move(plan, what, &call);
        }
        let seen = &mut self.seen;
        let gr = self.goroutines.entry(call.g).or_insert_with(|| {
            *seen += 1;
            Goroutine {
                n: *seen - 1,
                ..Goroutine::default()
            }
        });
        let goroutine = gr.n;
        let stack = &mut gr.frames;
        let hit = |at, probe, depth| GoHit {
            at,
            probe,
            target: call.target,
            tid: call.tid,
            insn: call.insn,
            pc: call.pc,
            args: Vec::new(),
            ret: None,
            unwound: false,
            insns: None,
            depth,
            goroutine,
            first: false,
            ts: self.applied,
        };
        let start = out.len();
        let t = call.target;
        match call.what {
            What::Entry { args } => {
                // A goroutine's stack holds its calls in order: a call made
                // at `key` leaves every frame below it dead, and, once one
                // was, the frames at the same place too. Each was left
                // without its return (the scheduler's `gogo` and `mcall`
                // never return, a panic unwinds past frames): `unwound`,
                // here. A frame at the same place with none dead below it
                // is live: the same call run again (below), or one that
                // jumped to this function (assembly's tail jumps, such as
                // `memhash32`'s to `memhash32Fallback`, which returns for
                // both).
                let mut dead = false;
                while let Some(f) = stack.last() {
                    if f.key > call.key || (f.key == call.key && !dead) {
                        break;
                    }
                    dead = true;
                    let depth = stack.len();
                    let f = stack.pop().expect("looked at above");
                    if let Some(probe) = plan.return_probe(f.target) {
                        out.push(GoHit {
                            target: f.target,
                            unwound: true,
                            insns: (f.tid == call.tid).then(|| call.insn.wrapping_sub(f.insn)),
                            ..hit(At::Return, probe, depth)
                        });
                    }
                }
                // A prologue's `morestack` runs the function again from its
                // entry on the same frame, with none below it: the same
                // call (see `Probe::entered`).
                if stack
                    .last()
                    .is_some_and(|f| f.target == t && f.key == call.key)
                {
                    return;
                }
                stack.push(Frame {
                    target: t,
                    key: call.key,
                    tid: call.tid,
                    insn: call.insn,
                });
                if let Some((p, n)) = plan.targets[t].on_entry {
                    let mut args = args;
                    args.truncate(n);
                    out.push(GoHit {
                        args,
                        ..hit(At::Entry, p, stack.len())
                    });
                }
            }
            What::Return { value, slot } => {
                // As `Probe::returned`, on the goroutine's frames.
                let key = call.key;
                let genuine = returns_genuinely(stack, key, t, |f| (f.key, f.target));
                while let Some(top) = stack.last() {
                    if top.key > key {
                        break;
                    }
                    let unwound = top.key < key || !genuine;
                    let depth = stack.len();
                    let f = stack.pop().expect("looked at above");
                    let target = &plan.targets[f.target];
                    let Some(probe) = plan.return_probe(f.target) else {
                        continue;
                    };
                    let ret = match (target.conv.ret_reg(), target.ret_slot) {
                        _ if unwound => None,
                        (Some(_), _) => value,
                        (None, Some(_)) if f.target == t => slot,
                        _ => None,
                    };
                    out.push(GoHit {
                        target: f.target,
                        ret,
                        unwound,
                        insns: (f.tid == call.tid).then(|| call.insn.wrapping_sub(f.insn)),
                        ..hit(At::Return, probe, depth)
                    });
                }
            }
        }
        if !gr.named {
            if let Some(h) = out.get_mut(start) {
                h.first = true;
                gr.named = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::conv::{Abi, Conv};
    use super::super::plan::Target;
    use super::super::spec::Spec;
    use super::*;

    /// One Go function, `relay`, probed at its entry (two arguments) and
    /// its returns, on x86_64.
    fn plan() -> Plan {
        Plan {
            abi: Abi::SysV,
            big_endian: false,
            specs: vec![
                Spec::parse("main.*/2").unwrap(),
                Spec::parse("main.*:return").unwrap(),
            ],
            targets: ["main.relay", "main.fallback"]
                .iter()
                .enumerate()
                .map(|(i, name)| Target {
                    name: name.to_string(),
                    entry: 0x1000 + 0x100 * i as u64,
                    on_entry: Some((0, 2)),
                    on_return: Some(1),
                    hidden: false,
                    conv: Conv::new(Abi::SysV, true),
                    ret_slot: None,
                    by_goroutine: true,
                    stack_move: None,
                })
                .collect(),
            sites: Default::default(),
            modules: Vec::new(),
            exe: ("prog".into(), 0),
            anchor: None,
            stores: false,
            count: true,
            flow: false,
            narrow: None,
            quiet: None,
            quiet_words: false,
            shown: Vec::new(),
        }
    }

    fn entry(g: u64, tid: i32, key: u64, a: u64) -> Call {
        Call {
            g,
            tid,
            insn: 10,
            pc: 0x1000,
            target: 0,
            key,
            what: What::Entry {
                args: vec![Some(a), Some(a + 1)],
            },
        }
    }

    fn ret(g: u64, tid: i32, key: u64, v: u64) -> Call {
        Call {
            g,
            tid,
            insn: 25,
            pc: 0x1040,
            target: 0,
            key,
            what: What::Return {
                value: Some(v),
                slot: None,
            },
        }
    }

    /// What the hits say: (at, tid, first argument or result, unwound,
    /// depth, goroutine).
    fn said(hits: &[GoHit]) -> Vec<(At, i32, Option<u64>, bool, usize, u64)> {
        hits.iter()
            .map(|h| {
                let v = match h.at {
                    At::Entry => h.args[0],
                    _ => h.ret,
                };
                (h.at, h.tid, v, h.unwound, h.depth, h.goroutine)
            })
            .collect()
    }

    /// Two goroutines parked in `relay` on one thread, the first resumed
    /// on another thread: each return ends its own goroutine's call, none
    /// is taken for a `longjmp`, and depths are per goroutine.
    #[test]
    fn goroutines_keep_their_own_frames() {
        let p = plan();
        let mut gs = Goroutines::default();
        let mut out = Vec::new();
        gs.offer(&p, Some(0), vec![entry(0xa0, 1, 0x5000, 1)], &mut out);
        gs.offer(&p, Some(1), vec![entry(0xb0, 1, 0x9000, 2)], &mut out);
        gs.offer(&p, Some(2), vec![ret(0xb0, 1, 0x9000, 20)], &mut out);
        gs.offer(&p, Some(3), vec![ret(0xa0, 2, 0x5000, 10)], &mut out);
        assert_eq!(
            said(&out),
            [
                (At::Entry, 1, Some(1), false, 1, 0),
                (At::Entry, 1, Some(2), false, 1, 1),
                (At::Return, 1, Some(20), false, 1, 1),
                (At::Return, 2, Some(10), false, 1, 0),
            ]
        );
        // Instructions since the entry only where one thread ran both.
        assert_eq!(out[2].insns, Some(15));
        assert_eq!(out[3].insns, None);
        assert!(out[0].first && out[1].first && !out[2].first);
        assert_eq!(gs.late, 0);
    }

    /// A return whose thread's events came first waits for its entry, by
    /// the process's order; numbers passed over are not waited for.
    #[test]
    fn calls_apply_in_the_order_the_threads_ran_them() {
        let p = plan();
        let mut gs = Goroutines::default();
        let mut out = Vec::new();
        gs.offer(&p, Some(3), vec![ret(0xa0, 2, 0x5000, 10)], &mut out);
        gs.offer(&p, Some(2), Vec::new(), &mut out);
        assert!(out.is_empty());
        gs.offer(&p, Some(0), Vec::new(), &mut out);
        assert!(out.is_empty());
        gs.offer(&p, Some(1), vec![entry(0xa0, 1, 0x5000, 1)], &mut out);
        assert_eq!(
            said(&out),
            [
                (At::Entry, 1, Some(1), false, 1, 0),
                (At::Return, 2, Some(10), false, 1, 0),
            ]
        );
        // The timeline's clock follows the order.
        assert!(out[0].ts < out[1].ts);
    }

    /// A prologue's `morestack` runs the entry again on the same frame:
    /// one call. A call of the same function again from the same frame,
    /// after a return, is a new one.
    #[test]
    fn an_entry_run_again_is_one_call() {
        let p = plan();
        let mut gs = Goroutines::default();
        let mut out = Vec::new();
        gs.offer(&p, Some(0), vec![entry(0xa0, 1, 0x5000, 1)], &mut out);
        gs.offer(&p, Some(1), vec![entry(0xa0, 1, 0x5000, 1)], &mut out);
        gs.offer(&p, Some(2), vec![ret(0xa0, 1, 0x5000, 10)], &mut out);
        gs.offer(&p, Some(3), vec![entry(0xa0, 1, 0x5000, 3)], &mut out);
        gs.offer(&p, Some(4), vec![ret(0xa0, 1, 0x5000, 30)], &mut out);
        let at: Vec<At> = out.iter().map(|h| h.at).collect();
        assert_eq!(at, [At::Entry, At::Return, At::Entry, At::Return]);
    }

    /// The runtime moves goroutine 0xa0's stack from [0x4000, 0x6000) to
    /// [0x10000, 0x14000) while its call at 0x5f00 is open (`copystack`,
    /// on the thread's scheduler goroutine 0x90): the call's entry run
    /// again on the new stack, at 0x13f00, is the same call, and its
    /// return there ends it, not unwound. Another goroutine's frames stay.
    #[test]
    fn frames_move_with_their_stack() {
        let mut p = plan();
        p.targets[0].on_entry = Some((0, 1));
        for (what, name) in StackMove::FUNCTIONS {
            let mut t = p.targets[0].clone();
            t.name = name.to_string();
            t.on_entry = None;
            t.on_return = None;
            t.hidden = true;
            t.stack_move = Some(what);
            p.targets.push(t);
        }
        let [copy, alloc, free] = [2, 3, 4];
        let on = |target: usize, what: What| Call {
            g: 0x90,
            tid: 1,
            insn: 12,
            pc: 0x2000,
            target,
            key: 0x9000,
            what,
        };
        let args = |a: u64, b: u64| What::Entry {
            args: vec![Some(a), Some(b)],
        };
        let returned = |v: u64| What::Return {
            value: Some(v),
            slot: None,
        };
        let mut gs = Goroutines::default();
        let mut out = Vec::new();
        let calls = [
            entry(0xa0, 1, 0x5f00, 1),
            entry(0xb0, 2, 0x5f00, 2),
            on(copy, args(0xa0, 0x4000)),
            on(alloc, args(0, 0)),
            on(alloc, returned(0x10000)),
            on(free, args(0x4000, 0x6000)),
            on(free, returned(0)),
            on(copy, returned(0)),
            entry(0xa0, 1, 0x13f00, 1),
            ret(0xa0, 1, 0x13f00, 10),
            ret(0xb0, 2, 0x5f00, 20),
        ];
        for (seq, c) in calls.into_iter().enumerate() {
            gs.offer(&p, Some(seq as u64), vec![c], &mut out);
        }
        assert_eq!(
            said(&out),
            [
                (At::Entry, 1, Some(1), false, 1, 0),
                (At::Entry, 2, Some(2), false, 1, 1),
                (At::Return, 1, Some(10), false, 1, 0),
                (At::Return, 2, Some(20), false, 1, 1),
            ]
        );
        assert_eq!(gs.moved, 1);
        // An entry's hit shows as many arguments as its probe asked for,
        // whatever its call read (a stack move's function reads two).
        assert_eq!(out[0].args.len(), 1);
    }

    /// A return of an outer frame leaves the goroutine's deeper frames
    /// unwound (a panic recovered above them), not another goroutine's.
    #[test]
    fn unwinding_stays_in_its_goroutine() {
        let p = plan();
        let mut gs = Goroutines::default();
        let mut out = Vec::new();
        gs.offer(&p, None, vec![entry(0xa0, 1, 0x5000, 1)], &mut out);
        gs.offer(&p, None, vec![entry(0xa0, 1, 0x4f00, 2)], &mut out);
        gs.offer(&p, None, vec![entry(0xb0, 1, 0x4e00, 3)], &mut out);
        out.clear();
        gs.offer(&p, None, vec![ret(0xa0, 1, 0x5000, 10)], &mut out);
        assert_eq!(
            said(&out),
            [
                (At::Return, 1, None, true, 2, 0),
                (At::Return, 1, Some(10), false, 1, 0),
            ]
        );
        out.clear();
        gs.offer(&p, None, vec![ret(0xb0, 1, 0x4e00, 30)], &mut out);
        assert_eq!(said(&out), [(At::Return, 1, Some(30), false, 1, 1)]);
        // A call made above frames left without returning (the scheduler
        // starting over at the top of its stack) ends them, unwound.
        out.clear();
        gs.offer(&p, None, vec![entry(0xc0, 1, 0x8000, 4)], &mut out);
        gs.offer(&p, None, vec![entry(0xc0, 1, 0x7f00, 5)], &mut out);
        gs.offer(&p, None, vec![entry(0xc0, 1, 0x8000, 6)], &mut out);
        assert_eq!(
            said(&out)[2..],
            [
                (At::Return, 1, None, true, 2, 2),
                (At::Return, 1, None, true, 1, 2),
                (At::Entry, 1, Some(6), false, 1, 2),
            ]
        );
    }

    /// Without numbers, a return that comes before its entry (from
    /// another thread's stream) finds no frame: counted.
    #[test]
    fn a_return_before_its_entry_is_counted_without_numbers() {
        let p = plan();
        let mut gs = Goroutines::default();
        let mut out = Vec::new();
        gs.offer(&p, None, vec![ret(0xa0, 2, 0x5000, 10)], &mut out);
        gs.offer(&p, None, vec![entry(0xa0, 1, 0x5000, 1)], &mut out);
        gs.offer(&p, None, vec![ret(0xa0, 1, 0x5000, 10)], &mut out);
        assert_eq!(gs.unmatched, 1);
        assert_eq!(out.len(), 2);
        // The next call from the same frame, before the return of the one
        // before it: taken for the same call run again, and counted.
        gs.offer(&p, None, vec![entry(0xa0, 1, 0x5000, 1)], &mut out);
        gs.offer(&p, None, vec![entry(0xa0, 2, 0x5000, 3)], &mut out);
        assert_eq!(gs.unmatched, 2);
        // With numbers the order is kept and nothing is counted.
        let mut gs = Goroutines::default();
        gs.offer(&p, Some(1), vec![ret(0xa0, 2, 0x5000, 10)], &mut out);
        gs.offer(&p, Some(0), vec![entry(0xa0, 1, 0x5000, 1)], &mut out);
        assert_eq!((gs.unmatched, gs.late), (0, 0));
    }

    /// A function that jumps to another (assembly's tail jumps): the
    /// second's entry is at the first's place, and both are live until
    /// the second returns for both.
    #[test]
    fn a_tail_jump_returns_for_both() {
        let p = plan();
        let mut gs = Goroutines::default();
        let mut out = Vec::new();
        gs.offer(&p, Some(0), vec![entry(0xa0, 1, 0x5000, 1)], &mut out);
        let mut jumped = entry(0xa0, 1, 0x5000, 2);
        jumped.target = 1;
        gs.offer(&p, Some(1), vec![jumped], &mut out);
        let mut back = ret(0xa0, 1, 0x5000, 10);
        back.target = 1;
        gs.offer(&p, Some(2), vec![back], &mut out);
        let targets: Vec<(At, usize, bool, usize)> = out
            .iter()
            .map(|h| (h.at, h.target, h.unwound, h.depth))
            .collect();
        assert_eq!(
            targets,
            [
                (At::Entry, 0, false, 1),
                (At::Entry, 1, false, 2),
                (At::Return, 1, false, 2),
                (At::Return, 0, false, 1),
            ]
        );
        assert_eq!(out[3].ret, Some(10));
    }

    /// A live run's table: a thread whose calls pass the limit waits for
    /// the number before them, which another thread brings; nothing comes
    /// late, and the thread that brings it does not wait. (A table that
    /// passed the number over failed here: the thread ahead did not wait.)
    #[test]
    fn a_live_thread_waits_for_the_number_it_needs() {
        let p = std::sync::Arc::new(plan());
        let table = std::sync::Arc::new(Table {
            stall: Duration::from_secs(600),
            ..Table::new(true)
        });
        let mut out = Vec::new();
        for s in 1..=WAIT_LIMIT as u64 {
            table.offer(&p, Some(s), Vec::new(), &mut out);
        }
        let (t, q) = (table.clone(), p.clone());
        let ahead = std::thread::spawn(move || {
            let mut out = Vec::new();
            let call = ret(0xa0, 1, 0x5000, 10);
            t.offer(&q, Some(WAIT_LIMIT as u64 + 1), vec![call], &mut out);
            out
        });
        while table.lock().waiters == 0 {
            assert!(!ahead.is_finished(), "the thread ahead did not wait");
            std::thread::yield_now();
        }
        table.offer(&p, Some(0), vec![entry(0xa0, 2, 0x5000, 1)], &mut out);
        let theirs = ahead.join().expect("the thread ahead");
        // The thread that brought the number applies what waited for it.
        assert_eq!(
            said(&out),
            [
                (At::Entry, 2, Some(1), false, 1, 0),
                (At::Return, 1, Some(10), false, 1, 0)
            ]
        );
        assert!(theirs.is_empty());
        let gs = table.lock();
        assert_eq!((gs.late, gs.waiters), (0, 0));
        assert!(gs.waiting.is_empty());
    }

    /// A number that never comes is waited for only while the limit
    /// allows; the calls after it then run, and it is late when it comes.
    #[test]
    fn a_number_held_back_is_waited_for_up_to_the_limit() {
        let p = plan();
        let mut gs = Goroutines::default();
        let mut out = Vec::new();
        for s in 1..=WAIT_LIMIT as u64 {
            gs.offer(&p, Some(s), Vec::new(), &mut out);
        }
        gs.offer(
            &p,
            Some(WAIT_LIMIT as u64 + 1),
            vec![entry(0xa0, 1, 0x5000, 1)],
            &mut out,
        );
        assert_eq!(out.len(), 1, "the limit let the calls after the gap run");
        assert!(gs.waiting.is_empty());
        gs.offer(&p, Some(0), vec![ret(0xa0, 1, 0x5000, 10)], &mut out);
        assert_eq!(gs.late, 1);
        assert_eq!(out.len(), 2);
        // A number far ahead (a damaged recording's) waits for nothing and
        // holds no room for the numbers before it.
        let mut gs = Goroutines::default();
        out.clear();
        gs.offer(&p, Some(1), vec![entry(0xa0, 1, 0x5000, 1)], &mut out);
        gs.offer(
            &p,
            Some(u64::MAX - 1),
            vec![ret(0xa0, 1, 0x5000, 10)],
            &mut out,
        );
        assert_eq!(out.len(), 2);
        assert!(gs.waiting.capacity() < 1024);
        gs.offer(&p, Some(0), vec![entry(0xb0, 1, 0x5000, 1)], &mut out);
        assert_eq!((gs.late, out.len()), (1, 3));
        // What waits at the end runs then, in order.
        let mut gs = Goroutines::default();
        out.clear();
        gs.offer(&p, Some(5), vec![ret(0xa0, 1, 0x5000, 10)], &mut out);
        gs.offer(&p, Some(4), vec![entry(0xa0, 1, 0x5000, 1)], &mut out);
        assert!(out.is_empty());
        gs.finish(&p, &mut out);
        let at: Vec<At> = out.iter().map(|h| h.at).collect();
        assert_eq!(at, [At::Entry, At::Return]);
    }
}
