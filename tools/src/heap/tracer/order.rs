// SPDX-License-Identifier: GPL-2.0-or-later
//! The order the serial phase keeps between a process's threads.
//!
//! Each guest thread's events reach the serial phase in that thread's
//! execution order, but nothing orders two threads' streams: one thread's
//! chunks may be decoded well before another's events of the same moment
//! (a quiet thread's events wait in its ring). Applied as they come, a
//! block the main thread frees after `pthread_join` can be freed before
//! the joined thread's last accesses to it are checked: a use after free
//! that never happened. So a thread's event waits here, in order with the
//! events after it, until what it synchronises with has been applied:
//!
//! * a new thread's first event waits for the `clone` that created it, in
//!   its parent's stream;
//! * a load that reads 0 from a thread's id word (`clone`'s parent-tid
//!   pointer, which the kernel clears when that thread exits; glibc's
//!   `pthread_join` waits for it) waits for that thread's last event;
//! * an allocation function's entry or return waits for those of the
//!   other threads that ran before it: the hook library has each take the
//!   next number of the process's order (`jitter::order_here`, one counter
//!   the threads share), and number `n` waits until `0..n` were applied.
//!   So one thread's `free` is applied before another thread's `malloc`
//!   that got the same memory back, with the first thread's accesses
//!   before its `free`.
//! * every event of a forked child waits for its parent's state at the
//!   fork (`fork`), which the parent's serial phase hands over when it
//!   applies the fork.
//!
//! A number can be slow to come: the thread that took it has not handed
//! its chunk over yet, or the worker with its chunk lags (a loaded
//! machine) behind those with the other threads'. Once the process's
//! threads hold [`ORDER_WAIT_LIMIT`] events, a live run's thread with
//! events held waits for it ([`wait_turn`]), up to [`STALL`]: meanwhile its
//! own stream waits, its ring fills and its QEMU thread stops, as for a
//! full ring, so the threads that run ahead wait for the one behind. Past
//! that (and at once in a replay, whose threads come one after the other)
//! a number waits no longer: the ones before it, when they come, are
//! applied at once and counted in [`Order::late`] (the summary says the
//! run is incomplete), and the order between those threads' allocations
//! falls back to what follows.
//!
//! An allocation that returns memory inside a live block of another
//! thread does not wait any further (a recording made without numbers,
//! or a number that waited too long): the two cannot both have been live,
//! and which came first the streams do not say (the other thread's free
//! may still be on its way, or this allocation and its free came before
//! the other block was allocated, from an arena the threads shared). The
//! other block is set aside while the new one is live, and live again
//! once it is freed; meanwhile the other thread's accesses to it are its
//! own (not checked against the new block: `Heap::aside_holds`), and its
//! free, if it comes, frees the block set aside (`Heap::free`).
//!
//! What this cannot order: loads and stores between two threads'
//! allocation calls. A block handed between two running threads through
//! other synchronisation (a queue under a mutex, an atomic flag) is
//! ordered only as far as the threads' nearest allocation calls order it,
//! so such a hand-off can show as a false use after free or invalid free,
//! and a real race
//! (two threads touching a block with nothing ordering them) is reported
//! only when its events happen to arrive in the racy order. A thread
//! holds at most [`HELD_LIMIT`] events for the whole process; past it the
//! oldest run anyway, counted in [`Order::forced`]: the summary says so
//! and the run exits as incomplete.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::super::blocks::Bad;
use super::{lock, Item, MemAccess, Pid, Proc, Symbolize, Thread};
use crate::probe::shadow::AddrMap;

/// The most events a process's threads hold back, together (about 50
/// bytes each).
const HELD_LIMIT: usize = 1 << 22;

/// Held events past which a number of the process's order waits no longer
/// for the numbers before it (well under [`HELD_LIMIT`]: waiting for a
/// number alone never makes the run incomplete).
const ORDER_WAIT_LIMIT: usize = 1 << 20;

/// How long, in a live run, a thread with events held waits for the
/// number they wait for once the process holds [`ORDER_WAIT_LIMIT`].
pub const STALL: Duration = Duration::from_secs(2);

/// `clone`'s flags: a thread of the same process, and the parent-tid
/// pointer written.
const CLONE_THREAD: u64 = 0x0001_0000;
const CLONE_PARENT_SETTID: u64 = 0x0010_0000;

/// What the process's applied events say about its threads.
#[derive(Default)]
pub struct Order {
    /// Threads whose creating `clone` was applied.
    started: HashSet<i32>,
    /// Threads whose every event was applied.
    ended: HashSet<i32>,
    /// The id word of each thread created, by its address.
    tid_words: AddrMap<i32>,
    /// The streams with events waiting.
    waiting: Vec<Arc<Mutex<Thread>>>,
    /// Events held back, all threads together.
    held: usize,
    /// Events run before what they waited for, past [`HELD_LIMIT`].
    pub forced: u64,
    /// Allocation functions' events applied after a later number of the
    /// process's order, whose wait ended past [`ORDER_WAIT_LIMIT`].
    pub late: u64,
    /// The next number of the process's order to apply: every one before
    /// it was applied, or waited past [`ORDER_WAIT_LIMIT`].
    next: u64,
    /// A live run's: past [`ORDER_WAIT_LIMIT`] the threads wait
    /// ([`wait_turn`]) before a number is given up.
    patient: bool,
    /// A wait past [`ORDER_WAIT_LIMIT`] ended without the number: the
    /// numbers held wait no longer, until the events held fall to half
    /// the limit.
    gave_up: bool,
    /// Threads waiting in [`wait_turn`].
    waiters: usize,
    /// [`ORDER_WAIT_LIMIT`], or `$CANNOLI_HEAP_ORDER_WAIT` events (a test
    /// reaches the limit with a small program); 0 for the default.
    wait_limit: usize,
    /// [`STALL`], or `$CANNOLI_HEAP_STALL_MS` milliseconds: a test that
    /// requires every wait to end with its number sets it well past any
    /// lag of a loaded machine, so that only a wait that never ends fails
    /// it.
    stall: Duration,
}

impl Order {
    /// `patient`: a live run's (see [`wait_turn`]).
    pub fn new(patient: bool) -> Order {
        let wait_limit = std::env::var("CANNOLI_HEAP_ORDER_WAIT")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(0, |n: usize| n.clamp(1, ORDER_WAIT_LIMIT));
        let stall = std::env::var("CANNOLI_HEAP_STALL_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(STALL, Duration::from_millis);
        Order {
            patient,
            wait_limit,
            stall,
            ..Order::default()
        }
    }

    /// Held events past which a number stops waiting, or waits in
    /// [`wait_turn`].
    fn wait_limit(&self) -> usize {
        if self.wait_limit == 0 {
            ORDER_WAIT_LIMIT
        } else {
            self.wait_limit
        }
    }

    /// Whether the process ever had a second thread (a `clone` applied).
    pub fn threads_created(&self) -> bool {
        !self.started.is_empty()
    }

    /// The next number of the process's order to apply.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// `child` was created, with its id word at `tid_word`.
    pub fn created(&mut self, child: i32, tid_word: Option<u64>) {
        self.started.insert(child);
        if let Some(w) = tid_word {
            self.tid_words.insert(w, child);
        }
    }

    /// Number `seq` of the process's order was applied.
    pub fn took(&mut self, seq: u64) {
        if seq < self.next {
            self.late += 1;
        }
        self.next = self.next.max(seq.saturating_add(1));
    }

    /// Whether number `seq` of the process's order waits for earlier ones
    /// still to come (see the module's doc).
    fn earlier_to_come(&self, seq: u64) -> bool {
        seq > self.next && (self.held < self.wait_limit() || self.waits_past_limit())
    }

    /// Whether numbers still wait past [`ORDER_WAIT_LIMIT`]: a live run's,
    /// until a wait for one ended without it.
    fn waits_past_limit(&self) -> bool {
        self.patient && !self.gave_up
    }

    /// Whether a live run's threads with events held wait for the next
    /// number ([`wait_turn`]).
    fn stalled(&self) -> bool {
        self.held >= self.wait_limit() && self.waits_past_limit()
    }

    /// The streams with events waiting.
    pub(super) fn waiting(&self) -> &[Arc<Mutex<Thread>>] {
        &self.waiting
    }

    /// Whether thread `tid` has events still to apply.
    fn running(&self, tid: i32) -> bool {
        !self.ended.contains(&tid)
    }
}

/// A `clone` that created a thread, as an event for the serial phase.
/// Every guest here passes the flags first and the parent-tid pointer
/// third, whichever order the others take (QEMU's `do_fork` call).
pub fn clone_item(sc: &cannoli::Syscall) -> Option<Item> {
    if sc.name != Some("clone") {
        return None;
    }
    let child = i32::try_from(sc.ret?).ok().filter(|&c| c > 0)?;
    let flags = sc.args[0];
    (flags & CLONE_THREAD != 0).then_some(Item::Clone {
        child,
        tid_word: (flags & CLONE_PARENT_SETTID != 0).then_some(sc.args[2]),
    })
}

/// A fork, seen from the parent: `fork`, `vfork` (which QEMU runs as a
/// fork), or a `clone` that makes a process.
pub fn fork_item(sc: &cannoli::Syscall) -> Option<Item> {
    let child = i32::try_from(sc.ret?).ok().filter(|&c| c > 0)?;
    match sc.name? {
        "fork" | "vfork" => Some(Item::Fork { child }),
        "clone" if sc.args[0] & CLONE_THREAD == 0 => Some(Item::Fork { child }),
        _ => None,
    }
}

/// Runs a chunk of `thread`'s events, holding back those that must wait.
pub fn run(pid: &Pid, st: &mut Proc, thread: &Arc<Mutex<Thread>>, items: &[Item]) {
    {
        let mut t = lock(thread);
        if st.fork_stack.is_some() {
            t.adopt(st);
        }
        if !t.deferred.is_empty() {
            t.drain(pid, st, false);
        }
        let mut items = items;
        if st.awaiting && t.deferred.is_empty() {
            // A forked child waiting for its parent's state holds
            // everything (`fork`): its first event, and so the rest behind
            // it (nothing ends the wait while this holds the lock).
            if let Some((first, rest)) = items.split_first() {
                t.hold(pid, st, thread, first);
                items = rest;
            }
        }
        // Most chunks wait for nothing: a started thread with nothing held,
        // in a process that knows no thread's id word (one of one thread),
        // applies its loads, stores and instructions without asking
        // `waits`. Only the rare kinds can change that (a `clone`, say), so
        // it is asked again after each.
        let mut free = t.waits_for_nothing(st);
        // A segment is being applied: only a rare kind starts or ends one.
        let mut seg = t.in_segment();
        let mut at = 0;
        while let Some(item) = items.get(at) {
            at += 1;
            if free {
                // As `Thread::apply` would, without asking its kind again.
                match *item {
                    Item::Access(ref a) => {
                        if seg {
                            t.step(st);
                        }
                        let half_load = t.take_half_load();
                        if seg && t.folded(a.zone) {
                            t.skipped(a, half_load);
                        } else {
                            t.access(st, *a, half_load);
                        }
                        continue;
                    }
                    Item::Insn {
                        pc,
                        branch,
                        regs,
                        value,
                    } => {
                        if seg {
                            t.step(st);
                        }
                        t.take_half_load();
                        t.insn(pid, st, pc, branch, regs, value);
                        continue;
                    }
                    _ => {}
                }
            }
            if !t.deferred.is_empty() || t.waits(st, item) {
                t.hold(pid, st, thread, item);
            } else {
                t.apply(pid, st, item);
            }
            free = t.waits_for_nothing(st);
            seg = t.in_segment();
        }
    }
    release(pid, st, false);
}

/// After a chunk of `thread`'s events ran (`next`: the next number of
/// the process's order before it): where the process's threads hold
/// [`ORDER_WAIT_LIMIT`] events and this one holds some, waits, the state
/// unlocked, until the next number moves, up to [`STALL`] (or the
/// test's `$CANNOLI_HEAP_STALL_MS`); past that the
/// numbers held wait no longer. Wakes the threads waiting here when the
/// next number moved.
pub fn wait_turn(pid: &Pid, mut st: MutexGuard<'_, Proc>, thread: &Arc<Mutex<Thread>>, next: u64) {
    let waits = |st: &mut Proc| {
        st.order.stalled() && st.order.next == next && !lock(thread).deferred.is_empty()
    };
    if waits(&mut st) {
        st.order.waiters += 1;
        let stall = st.order.stall;
        let (g, waited) = pid
            .advanced
            .wait_timeout_while(st, stall, waits)
            .unwrap_or_else(|p| p.into_inner());
        st = g;
        st.order.waiters -= 1;
        if waited.timed_out() {
            st.order.gave_up = true;
            release(pid, &mut st, false);
        }
    }
    if st.order.held < st.order.wait_limit() / 2 {
        st.order.gave_up = false;
    }
    moved(pid, &st, next);
}

/// Wakes the threads waiting in [`wait_turn`] if the next number of the
/// process's order is no longer `next`.
pub fn moved(pid: &Pid, st: &Proc, next: u64) {
    if st.order.next != next && st.order.waiters > 0 {
        pid.advanced.notify_all();
    }
}

/// `thread`'s stream ended: it finishes now, or once its waiting events
/// have run.
pub fn stream_ended(pid: &Pid, st: &mut Proc, thread: &Arc<Mutex<Thread>>) {
    let mut t = lock(thread);
    t.ended = true;
    t.drain(pid, st, false);
    if t.deferred.is_empty() {
        t.finish(st);
        drop(t);
        release(pid, st, false);
    }
}

/// Runs the waiting events that no longer wait, until nothing moves;
/// `last`: the process ended, so all of them.
pub fn release(pid: &Pid, st: &mut Proc, last: bool) {
    loop {
        let waiting = std::mem::take(&mut st.order.waiting);
        if waiting.is_empty() {
            return;
        }
        let mut moved = false;
        for thread in waiting {
            let mut t = lock(&thread);
            let before = t.deferred.len();
            t.drain(pid, st, last);
            moved |= t.deferred.len() != before;
            if !t.deferred.is_empty() {
                drop(t);
                st.order.waiting.push(thread);
                continue;
            }
            t.queued = false;
            if t.ended {
                t.finish(st);
            }
        }
        if !moved {
            return;
        }
    }
}

impl Thread {
    /// Whether no load, store or instruction of this thread can wait
    /// ([`Thread::waits`]): it started, holds nothing, and no thread's id
    /// word is known for a load of 0 to wait on. Applying a load, store
    /// or instruction keeps it so; a rare kind may not.
    fn waits_for_nothing(&self, st: &Proc) -> bool {
        self.started.get() && self.deferred.is_empty() && st.order.tid_words.is_empty()
    }

    /// Whether `item` must wait for another thread's events (see the
    /// module's list).
    #[inline(always)]
    fn waits(&self, st: &Proc, item: &Item) -> bool {
        if !self.started.get() {
            if !st.order.started.contains(&self.tid) {
                return true;
            }
            self.started.set(true);
        }
        match item {
            Item::Access(MemAccess {
                addr,
                val: 0,
                store: false,
                ..
            }) => st
                .order
                .tid_words
                .get(addr)
                .is_some_and(|&t| t != self.tid && st.order.running(t)),
            Item::Order { seq } => st.order.earlier_to_come(*seq),
            _ => false,
        }
    }

    /// Whether freeing `p` is the C library's teardown (see
    /// [`Thread::library_teardown`]) giving back a cached chunk that
    /// another thread's allocation, whose events came first, already
    /// holds: the cache had it before that allocation. Not a free of the
    /// other thread's block.
    pub(super) fn stale_teardown_free(&self, st: &Proc, p: u64) -> bool {
        st.heap
            .live_at(p)
            .is_some_and(|b| b.addr == p && b.tid != self.tid)
            && self
                .bt
                .return_stack()
                .last()
                .and_then(|r| r.addr)
                .is_some_and(|c| self.library_teardown(st, c))
    }

    /// Whether an access at `pc` is the C library's own: `pc` in a
    /// function it does not export, called from nothing but the C library
    /// (a thread's exit giving its cache back, walking the chunks' links
    /// and headers). A program's bug has a frame of the program on its
    /// stack. Out of order threads leave blocks over memory the allocator
    /// already handed to the exiting thread, so without this its cache's
    /// walk would read as use after free or overflow.
    pub(super) fn library_teardown(&self, st: &Proc, pc: u64) -> bool {
        st.in_allocator_module(pc)
            && st.resolver().function(pc).is_none()
            && self
                .bt
                .return_stack()
                .iter()
                .filter_map(|r| r.addr)
                .all(|a| st.in_allocator_module(a))
    }

    /// Whether `bad`, an access at `pc`, is a load past a block's end by
    /// one of the C library's string functions: named so by a symbol, or
    /// found by its code in a stripped static program or a stripped shared
    /// C library (the host's `libc.so.6` names `strcmp`, an IFUNC, but not
    /// the `__strcmp_avx2` it picks). Their optimized loads read whole
    /// aligned words and vectors past a string's end, never across a page;
    /// memcheck replaces them, so it never sees such a read. Underflows,
    /// reads of freed blocks and stores stay findings.
    pub(super) fn string_overread(&self, st: &Proc, pc: u64, bad: &Bad, store: bool) -> bool {
        if store || !bad.past_end() {
            return false;
        }
        let link = pc.wrapping_sub(st.bias.unwrap_or(0));
        let in_range = |r: &[(u64, u64)], at: u64| r.iter().any(|&(a, b)| a <= at && at < b);
        in_range(&self.run.strings, link)
            || st
                .resolver()
                .function(pc)
                .is_some_and(|f| super::super::sig::is_string_func(&f.name))
            || st
                .modules
                .iter()
                .find(|m| m.base <= pc && pc < m.end)
                .filter(|m| super::super::sig::is_c_library(&m.name))
                .is_some_and(|m| {
                    in_range(&self.run.library_strings(&m.path), pc.wrapping_sub(m.bias))
                })
    }

    /// Holds `item` back, behind any held before it; past [`HELD_LIMIT`]
    /// the oldest runs anyway.
    #[inline(always)]
    fn hold(&mut self, pid: &Pid, st: &mut Proc, me: &Arc<Mutex<Thread>>, item: &Item) {
        // Only a process's thread among others waits, and such a thread
        // folds no segment ([`Thread::segment`]); were one being applied,
        // its words go in now rather than after another thread's events.
        self.fold(st);
        if !self.queued {
            self.queued = true;
            st.order.waiting.push(me.clone());
        }
        self.deferred.push_back(item.clone());
        st.order.held += 1;
        if st.order.held > HELD_LIMIT {
            st.order.forced += 1;
            self.run_oldest(pid, st);
            self.drain(pid, st, false);
        }
    }

    /// Runs the waiting events up to the first that must still wait;
    /// `last`: all of them.
    fn drain(&mut self, pid: &Pid, st: &mut Proc, last: bool) {
        while let Some(item) = self.deferred.front() {
            if !last && (st.awaiting || self.waits(st, item)) {
                break;
            }
            self.run_oldest(pid, st);
        }
    }

    fn run_oldest(&mut self, pid: &Pid, st: &mut Proc) {
        if let Some(item) = self.deferred.pop_front() {
            st.order.held -= 1;
            self.apply(pid, st, &item);
        }
    }

    /// Every event of the thread was applied.
    fn finish(&mut self, st: &mut Proc) {
        if !st.order.ended.insert(self.tid) {
            return;
        }
        if self.sp_lo <= self.sp_last {
            // Below the last stack pointer: frames already returned from.
            lock(&self.dead).push((self.sp_lo.saturating_sub(4096), self.sp_last));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Item;
    use super::{clone_item, fork_item, Order, ORDER_WAIT_LIMIT};

    fn call(name: &str, flags: u64, ret: Option<i64>) -> cannoli::Syscall<'_> {
        cannoli::Syscall {
            num: 0,
            name: Some(name),
            args: [flags, 0, 0x7000, 0, 0, 0],
            ret,
            data: &[],
            data_total: 0,
        }
    }

    #[test]
    fn forks_and_threads_are_told_apart() {
        let fork = |sc: &cannoli::Syscall| match fork_item(sc) {
            Some(Item::Fork { child }) => Some(child),
            _ => None,
        };
        // glibc's fork, a vfork (QEMU runs it as a fork), posix_spawn's
        // clone(CLONE_VM | CLONE_VFORK), the fork syscall.
        assert_eq!(fork(&call("clone", 0x1200011, Some(42))), Some(42));
        assert_eq!(fork(&call("vfork", 0, Some(43))), Some(43));
        assert_eq!(fork(&call("clone", 0x4111, Some(44))), Some(44));
        assert_eq!(fork(&call("fork", 0, Some(45))), Some(45));
        // In the child, a failure, a thread, another call.
        assert_eq!(fork(&call("fork", 0, Some(0))), None);
        assert_eq!(fork(&call("fork", 0, Some(-11))), None);
        let thread = call("clone", 0x3d0f00, Some(46));
        assert_eq!(fork(&thread), None);
        assert!(matches!(
            clone_item(&thread),
            Some(Item::Clone {
                child: 46,
                tid_word: Some(0x7000)
            })
        ));
        assert!(clone_item(&call("clone", 0x1200011, Some(42))).is_none());
        assert_eq!(fork(&call("write", 0, Some(46))), None);
    }

    #[test]
    fn a_number_waits_for_the_ones_before_it_within_a_limit() {
        let mut o = Order::default();
        assert!(!o.earlier_to_come(0));
        assert!(o.earlier_to_come(1));
        o.took(0);
        assert!(!o.earlier_to_come(1) && o.earlier_to_come(2));
        // Taken past a gap (a number that waited too long): the ones
        // before it no longer wait, and a late one moves nothing back.
        o.took(5);
        assert!(!o.earlier_to_come(6) && o.earlier_to_come(7));
        assert_eq!(o.late, 0);
        o.took(2);
        assert!(o.earlier_to_come(7));
        assert_eq!(o.late, 1, "after a later one");
        // Past the limit of held events nothing waits for a number.
        o.held = ORDER_WAIT_LIMIT;
        assert!(!o.earlier_to_come(100));
        // A damaged recording's largest number.
        o.took(u64::MAX);
        assert!(!o.earlier_to_come(u64::MAX));
    }

    #[test]
    fn a_live_runs_number_waits_past_the_limit_until_a_wait_ends_without_it() {
        let mut o = Order::new(true);
        o.took(0);
        o.held = ORDER_WAIT_LIMIT;
        assert!(o.earlier_to_come(5) && o.stalled());
        o.gave_up = true;
        assert!(!o.earlier_to_come(5) && !o.stalled());
        // Under the limit a replay's waits as a live run's.
        let mut o = Order::new(false);
        assert!(o.earlier_to_come(5) && !o.stalled());
        o.held = ORDER_WAIT_LIMIT;
        assert!(!o.earlier_to_come(5) && !o.stalled());
    }
}
