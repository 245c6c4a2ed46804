// SPDX-License-Identifier: GPL-2.0-or-later
//! What a coverage run collects over all its guest processes and threads,
//! shared by them behind one lock.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(doc)]
use super::report::finish;
use super::space::Modules;
#[cfg(doc)]
use super::tracer::Proc;

/// Everything the run collected, over all guest processes and threads.
#[derive(Default)]
pub(super) struct Coverage {
    pub(super) modules: Modules,
    /// Instruction starts by module id.
    pub(super) hits: Vec<HashSet<u64>>,
    /// Instruction lengths QEMU reported, by module id and pc.
    pub(super) lens: Vec<HashMap<u64, u8>>,
    /// Reported pcs in no executable mapping.
    pub(super) outside: HashSet<u64>,
    pub(super) exec_events: u64,
    pub(super) pids: HashSet<i32>,
    pub(super) threads: u64,
    /// The first stream's guest address width.
    pub(super) bits: Option<u32>,
}

/// One run's coverage: the run's own value (see [`cannoli::ToolState`]),
/// reached from each process's [`Proc`] and read by [`finish`] after it.
pub(super) type Run = Arc<Mutex<Coverage>>;

impl Coverage {
    /// The instruction at `pc` of module `m` ran.
    pub(super) fn hit(&mut self, m: u32, pc: u64) {
        if self.hits.len() <= m as usize {
            self.hits.resize_with(m as usize + 1, HashSet::new);
        }
        self.hits[m as usize].insert(pc);
    }

    /// The instruction at `pc` of module `m` is `len` bytes long.
    pub(super) fn len(&mut self, m: u32, pc: u64, len: u8) {
        if self.lens.len() <= m as usize {
            self.lens.resize_with(m as usize + 1, HashMap::new);
        }
        self.lens[m as usize].insert(pc, len);
    }
}
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
