// SPDX-License-Identifier: GPL-2.0-or-later
//! Where a thread's hits wait for a placement: a position-independent
//! program, or a library with probes, is placed by its mapping event, in
//! the stream of the thread that mapped it, which may reach the serial
//! phase after another thread's hits (see [`Probe::deferred`]).

use std::sync::atomic::Ordering;

use super::super::plan::{Plan, Site};
use super::{Item, Pid, Probe};

/// Runs the hits of the threads parked waiting for a placement, as far as
/// what is known now allows; `last`: nothing more will be known (the
/// process ended), so every event runs.
pub(super) fn unpark(pid: &Pid, last: bool) {
    let parked = std::mem::take(&mut *super::super::lock(&pid.parked));
    for mut p in parked {
        // A thread still waiting parks itself again when dropped.
        p.drain(pid, last);
    }
}

/// The most events a thread holds back waiting for a placement. Past it
/// the oldest run with what is known, and a hit that finds no site is
/// counted as lost ([`super::super::RunState::unplaced`]): a thread cannot make
/// the client hold its whole trace because a library never shows up.
pub(super) const DEFER_LIMIT: usize = 1 << 20;

/// The load bias of `m` after a mapping of its offset 0 at `base`, given
/// the one `known`. A mapping inside the file as placed, above its start,
/// is a later segment mapping the file's first page again (a small file's
/// data segment starts in it), not a new placement; one below the start
/// but overlapping it is the real start seen late.
pub fn bias_after(m: &super::super::plan::Module, known: Option<u64>, base: u64) -> u64 {
    let bias = base.wrapping_sub(m.low);
    match known {
        Some(b) => {
            let start = b.wrapping_add(m.low);
            if base > start && base - start < m.span {
                b
            } else {
                bias
            }
        }
        None => bias,
    }
}

impl Probe {
    /// A mapping of `module`'s offset 0 at `base`, in this thread's order:
    /// its bias for this thread and the process, and the threads parked
    /// waiting for it run. Applying it again is a no-op.
    pub(super) fn place(&mut self, pid: &Pid, module: usize, base: u64) {
        let m = &self.plan.modules[module];
        let known = self.biases[module];
        self.biases[module] = Some(bias_after(m, known, base));
        let mut biases = super::super::lock(&pid.biases);
        let first = biases[module].is_none();
        biases[module] = Some(bias_after(m, biases[module], base));
        drop(biases);
        if first {
            unpark(pid, false);
        }
    }

    /// Whether the position-independent program's placement is known.
    pub(super) fn placed(&mut self, pid: &Pid) -> bool {
        if self.plan.anchor.is_none() {
            return true;
        }
        if self.biases[0].is_none() {
            self.biases[0] = super::super::lock(&pid.biases)[0];
        }
        self.biases[0].is_some()
    }

    /// Whether `item` must wait for a placement: a hooked pc that is not
    /// the program's at a fixed address, while the position-independent
    /// program is not placed, or (live) that is no placed module's site
    /// while a library with probes is not placed yet. A live run's hook
    /// library asks for registers only at sites, so such a pc is the site
    /// of a library whose mapping event has not reached this client yet;
    /// a replay with registers everywhere has every pc here, most of them
    /// no site at all, and does not wait.
    pub(super) fn needs_placement(&mut self, pid: &Pid, item: &Item) -> bool {
        match item {
            Item::Hit { pc, .. } => self.waits(pid, *pc),
            _ => false,
        }
    }

    /// Whether a hit at `pc` must wait for a placement (see
    /// [`Self::needs_placement`]).
    pub(super) fn waits(&mut self, pid: &Pid, pc: u64) -> bool {
        if self.plan.sites.contains_key(&pc) {
            return false;
        }
        if !self.placed(pid) {
            return true;
        }
        let plan = self.plan.clone();
        self.run.live && !self.all_placed(pid) && self.sites_in(&plan, pid, pc).is_empty()
    }

    /// Whether every library with probes is placed in this process.
    pub(super) fn all_placed(&mut self, pid: &Pid) -> bool {
        if self.biases.iter().all(Option::is_some) {
            return true;
        }
        let known = super::super::lock(&pid.biases);
        for (mine, theirs) in self.biases.iter_mut().zip(known.iter()) {
            if mine.is_none() {
                *mine = *theirs;
            }
        }
        self.biases.iter().all(Option::is_some)
    }

    /// Runs the events that waited for a placement, up to the first that
    /// must still wait; `last`: all of them, with what is known (a process
    /// that never placed a module loses its hits there, counted).
    pub(super) fn drain(&mut self, pid: &Pid, last: bool) {
        while let Some(item) = self.deferred.front() {
            let pc = match item {
                Item::Hit { pc, .. } => Some(*pc),
                _ => None,
            };
            if !last && pc.is_some_and(|pc| self.waits(pid, pc)) {
                break;
            }
            self.run_oldest(pid);
        }
        self.flush();
    }

    /// Runs the oldest waiting event with what is known; a hit that finds
    /// no site then is lost, and counted.
    pub(super) fn run_oldest(&mut self, pid: &Pid) {
        let Some(item) = self.deferred.pop_front() else {
            return;
        };
        if let Item::Hit { pc, .. } = &item {
            let plan = self.plan.clone();
            if self.run.live && self.pending.is_none() && self.sites_in(&plan, pid, *pc).is_empty()
            {
                self.run.unplaced.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.apply(pid, &item);
    }

    /// The sites at `pc`: the program's, or a mapped library's (the
    /// libraries' placements refreshed from the process first), borrowed
    /// from `plan` (this thread's) without a copy: a hit's hot path.
    pub(super) fn sites_in<'p>(&mut self, plan: &'p Plan, pid: &Pid, pc: u64) -> &'p [Site] {
        if let Some(v) = plan.sites.get(&pc) {
            return v;
        }
        for (m, module) in plan.modules.iter().enumerate() {
            if self.biases[m].is_none() {
                self.biases[m] = super::super::lock(&pid.biases)[m];
            }
            if let Some(b) = self.biases[m] {
                if let Some(v) = module.sites.get(&pc.wrapping_sub(b)) {
                    return v;
                }
            }
        }
        &[]
    }
}
