// SPDX-License-Identifier: GPL-2.0-or-later
//! A guest process: its plan, the load biases of its libraries, its parked
//! threads and its goroutines, and the hits its goroutines make.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::super::goroutine::{GoHit, Table};
use super::super::out::{self, Hit, Regs};
use super::super::plan::Plan;
use super::super::{Mode, RunState};
use super::placement::unpark;
use super::Probe;

/// A process: the plan, and the load bias of each library with probes as
/// its threads learn it (the thread that maps a library sees the event;
/// its other threads look here).
pub struct Pid {
    pub(super) pid: i32,
    pub(super) run: Arc<RunState>,
    pub(super) plan: Arc<Plan>,
    pub(super) biases: Mutex<Vec<Option<u64>>>,
    /// Threads that ended with hits waiting for the program's placement
    /// (see [`Probe::deferred`]).
    pub(super) parked: Arc<Mutex<Vec<Probe>>>,
    /// A Go program's frames, by goroutine.
    pub(super) goroutines: Arc<Table>,
}

impl Drop for Pid {
    fn drop(&mut self) {
        // The last thread ended: what is known is all there will be.
        unpark(self, true);
        let mut hits = Vec::new();
        let mut gs = self.goroutines.lock();
        gs.finish(&self.plan, &mut hits);
        let (late, unmatched) = (gs.late, gs.unmatched);
        drop(gs);
        let mut buf = Vec::new();
        for h in &hits {
            write_go(&self.run, &self.plan, self.pid, h, &mut buf);
        }
        self.run.write(&buf);
        self.run
            .hits
            .fetch_add(hits.len() as u64, Ordering::Relaxed);
        self.run.late.fetch_add(late, Ordering::Relaxed);
        self.run.unmatched.fetch_add(unmatched, Ordering::Relaxed);
    }
}

/// Writes a goroutine's hit `h` of process `pid` to `buf`, and to the
/// timeline on the goroutine's own track (its calls may run on several
/// threads; the track's clock is the order the calls were applied in).
pub(super) fn write_go(run: &RunState, plan: &Plan, pid: i32, h: &GoHit, buf: &mut Vec<u8>) {
    let target = &plan.targets[h.target];
    let hit = Hit {
        pid,
        tid: h.tid,
        insn: plan.count.then_some(h.insn),
        at: h.at,
        probe: &plan.specs[h.probe].text,
        function: Some(&target.name),
        shown: plan.shown(h.target),
        pc: h.pc,
        args: h.args.clone(),
        ret: h.ret,
        unwound: h.unwound,
        insns: if plan.count { h.insns } else { None },
        regs: Regs::default(),
        depth: h.depth,
    };
    match run.mode {
        Mode::Text => hit.text(buf),
        Mode::Json => hit.json(buf),
        Mode::Flow => hit.flow(buf),
    }
    if let Some(tl) = &run.timeline {
        let track = out::goroutine_track(h.goroutine);
        let mut tl = super::super::lock(tl);
        if h.first {
            tl.push(out::track_name(
                pid,
                track,
                &format!("goroutine {}", h.goroutine),
            ));
        }
        let mut v = hit.timeline(h.ts);
        v["tid"] = track.into();
        tl.push(v);
    }
}
