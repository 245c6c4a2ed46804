// SPDX-License-Identifier: GPL-2.0-or-later
//! A forked child's heap: its parent's at the fork.
//!
//! A child process starts as a copy of its parent, blocks and all: a
//! shell's child that frees one of the shell's blocks before it execs
//! frees a block, not a pointer it never got. memcheck has this for free
//! (the fork copies the tool along with the process). Here the child is a
//! process of its own to the library, with a context of its own, so the
//! parent's serial phase hands it a copy of the process's state when it
//! applies the fork ([`forked`]): the heap, the shadow memory, the
//! instruction lengths, the allocation numbers, and the forking thread's
//! call stack (the child's thread returns through the same frames).
//!
//! The two processes run side by side, so the child's first events can
//! come before the parent's serial phase reaches the fork. Then all of
//! the child's events wait (`Proc::awaiting`, see `order`) until the copy
//! comes, as a thread's first event waits for the `clone` that made it.
//! The hook library hands the parent's chunk over at the fork, so the
//! copy comes as soon as the parent's serial phase gets there. If the
//! parent's images all end without applying the fork (its events were
//! lost), the child runs with an empty heap, as it would untraced by its
//! parent.
//!
//! Which process is a forked child: the first image of a pid whose parent
//! is a traced process still being applied, or for which a copy is
//! already there. A later image of the same pid (after an exec) starts
//! empty, as a new program does.

use std::collections::HashMap;
use std::sync::Arc;

use super::super::blocks::Heap;
use super::{lock, order, Pid, Proc, Thread};
use crate::backtrace::state::BacktraceState;
use crate::probe::shadow::{AddrMap, Shadow};

/// What a child inherits from its parent at the fork.
pub struct Inherited {
    heap: Heap,
    shadow: Shadow,
    lens: AddrMap<u8>,
    seq: u64,
    alloc_modules: Vec<(u64, u64)>,
    /// The forking thread's call stack and stack pointer.
    stack: BacktraceState,
    sp: u64,
}

/// What became of a child pid.
enum Child {
    /// The parent applied the fork: the copy waits for the child.
    Ready(Box<Inherited>),
    /// The child came first and waits for its parent (kept alive here
    /// until then: its events are still to be applied).
    Waiting { parent: i32, pid: Arc<Pid> },
    /// Its first image has its heap; later images start empty.
    Taken,
}

/// The run's forks, one registry for all its processes.
#[derive(Default)]
pub struct Forks {
    /// Process contexts still applying events, by pid (an image after an
    /// exec may start before the one before it is done).
    live: HashMap<i32, u32>,
    children: HashMap<i32, Child>,
}

/// What a new process context starts with.
pub enum Born {
    /// Its parent's state at the fork.
    Inherits(Box<Inherited>),
    /// It waits for its parent to apply the fork.
    Waits,
    /// Nothing: not a forked child, or a later image.
    Empty,
}

impl Forks {
    /// `pid`, child of `ppid`, has a context now.
    pub fn born(&mut self, pid: &Arc<Pid>, ppid: i32) -> Born {
        let me = pid.pid;
        *self.live.entry(me).or_default() += 1;
        match self.children.get_mut(&me) {
            Some(c) => match std::mem::replace(c, Child::Taken) {
                Child::Ready(inh) => Born::Inherits(inh),
                later => {
                    *c = later;
                    Born::Empty
                }
            },
            None if ppid != me && self.live.contains_key(&ppid) => {
                self.children.insert(
                    me,
                    Child::Waiting {
                        parent: ppid,
                        pid: pid.clone(),
                    },
                );
                Born::Waits
            }
            None => Born::Empty,
        }
    }

    /// The context of `pid` ended: the children still waiting for it, if
    /// no image of it is left, wait no more (and get nothing).
    fn ended(&mut self, pid: i32) -> Vec<Arc<Pid>> {
        match self.live.get_mut(&pid) {
            Some(n) if *n > 1 => {
                *n -= 1;
                return Vec::new();
            }
            Some(_) => {
                self.live.remove(&pid);
            }
            None => return Vec::new(),
        }
        self.take_waiting(|parent| parent == pid)
    }

    fn take_waiting(&mut self, of: impl Fn(i32) -> bool) -> Vec<Arc<Pid>> {
        let gone: Vec<i32> = self
            .children
            .iter()
            .filter(|(_, c)| matches!(c, Child::Waiting { parent, .. } if of(*parent)))
            .map(|(&k, _)| k)
            .collect();
        gone.into_iter()
            .filter_map(|k| match self.children.insert(k, Child::Taken) {
                Some(Child::Waiting { pid, .. }) => Some(pid),
                _ => None,
            })
            .collect()
    }
}

/// `thread` of `st`'s process forked `child`: the copy goes to the child,
/// now if it waits for it.
pub fn forked(pid: &Pid, st: &Proc, thread: &Thread, child: i32) {
    let inh = Box::new(Inherited {
        heap: st.heap.forked(child),
        shadow: st.shadow.clone(),
        lens: st.lens.clone(),
        seq: st.seq,
        alloc_modules: st.alloc_modules.clone(),
        stack: thread.bt.clone(),
        sp: thread.sp_last,
    });
    let waiting = {
        let mut forks = lock(&pid.run.forks);
        let slot = forks.children.entry(child).or_insert(Child::Taken);
        match std::mem::replace(slot, Child::Taken) {
            Child::Waiting { pid, .. } => pid,
            _ => {
                *slot = Child::Ready(inh);
                return;
            }
        }
    };
    // The child's lock is taken under the parent's: always in that order
    // (a child never takes its parent's), so no two workers wait on each
    // other. The child's context may end here, when the last reference goes.
    let mut cst = lock(&waiting.state);
    inherit(&waiting, &mut cst, Some(*inh));
    drop(cst);
}

/// `st`, the state of child `pid`, takes what it inherits (nothing: it
/// waits no more, empty) and runs the events that waited.
pub fn inherit(pid: &Pid, st: &mut Proc, inh: Option<Inherited>) {
    st.awaiting = false;
    if let Some(inh) = inh {
        st.heap = inh.heap;
        st.shadow = inh.shadow;
        st.lens = inh.lens;
        st.seq = inh.seq;
        st.alloc_modules = inh.alloc_modules;
        st.fork_stack = Some((inh.stack, inh.sp));
    }
    adopt_stack_waiting(pid, st);
    order::release(pid, st, false);
}

/// Gives the inherited call stack to the child's first thread if it has
/// events waiting already (else it takes it when it first runs, see
/// [`Thread::adopt`]).
fn adopt_stack_waiting(pid: &Pid, st: &mut Proc) {
    if st.fork_stack.is_none() {
        return;
    }
    let first = st
        .order
        .waiting()
        .iter()
        .find(|t| lock(t).tid == pid.pid)
        .cloned();
    if let Some(t) = first {
        lock(&t).adopt(st);
    }
}

impl Thread {
    /// The child's first thread takes the forking thread's call stack.
    pub(super) fn adopt(&mut self, st: &mut Proc) {
        if self.tid == self.pid {
            if let Some((stack, sp)) = st.fork_stack.take() {
                self.bt = stack;
                self.sp_last = sp;
            }
        }
    }
}

/// The context of `pid` ends: children still waiting for it go on empty.
pub fn ended(pid: &Pid) {
    let left = lock(&pid.run.forks).ended(pid.pid);
    release_all(left);
}

/// The run is over: any child still waiting goes on empty (its parent
/// never applied the fork), and copies no child took are dropped.
pub fn settle(forks: &std::sync::Mutex<Forks>) {
    let left = {
        let mut f = lock(forks);
        let left = f.take_waiting(|_| true);
        f.children.clear();
        left
    };
    release_all(left);
}

fn release_all(children: Vec<Arc<Pid>>) {
    for c in children {
        let mut st = lock(&c.state);
        inherit(&c, &mut st, None);
        drop(st);
        drop(c);
    }
}
