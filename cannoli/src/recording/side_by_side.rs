// SPDX-License-Identifier: GPL-2.0-or-later
//! Replaying a process's threads side by side
//! ([`ReplayOrder::AsRecorded`](crate::ReplayOrder::AsRecorded)), as a
//! live run hands them to a tool.
//!
//! The processes go one after the other, in the order of their first
//! streams. Within one, every thread's stream is open at once, and the
//! replay's workers take chunks from all of them in the order the
//! recorder wrote them: each stream's next chunk waits in a queue keyed by
//! where its frame is in the file, and the lowest goes first. The file's
//! order is the order chunks reached the recorder, so a thread's chunk is
//! delivered about when the others' chunks of the same moment are, and a
//! serial phase that holds one thread's events until another's have come
//! holds them about as long as live.
//!
//! A stream ends as soon as its last chunk is delivered: its tool is
//! dropped there, while the others go on (a thread that a `pthread_join`
//! waits for ends when it did, not when the process does). A stream
//! without chunks ends before any chunk is taken.
//!
//! The ticket of each chunk ([`Pipeline::claim`]) is taken in its
//! stream's chunk order, under the queue's lock: a worker waiting for room
//! in one stream's window then holds up the others until that stream's
//! chunks before it are delivered, which needs no chunk not taken yet.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::format::IndexEntry;
use super::reader::{Recording, StreamRec};
use super::replay::{dense_chunks, end_stream, Frames, LiveTables, Pass, ReplayPipeline, Take};
use crate::decode::Shape;
use crate::pipeline::Pipeline;
use crate::{Cannoli, ClientInfo, Stats, ToolState};

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One thread's stream in a side-by-side replay.
struct Side<'r> {
    rec: &'r StreamRec,
    chunks: &'r [IndexEntry],
    /// Its chunks whose turn came, delivered or not.
    passed: AtomicUsize,
    /// Its stream was ended ([`end_stream`]).
    ended: AtomicBool,
    pid: i32,
    tid: i32,
}

/// The next chunk of each stream, the one written first on top: `(its
/// frame's offset, its stream, its index)`.
type Queue = BinaryHeap<Reverse<(u64, usize, usize)>>;

impl Recording {
    /// Every process's threads side by side (see the module doc). Returns
    /// the totals.
    pub(super) fn replay_side_by_side<T: Cannoli>(
        &self,
        pass: &Pass<'_>,
        state: &ToolState,
    ) -> Stats {
        let mut order: Vec<u32> = Vec::new();
        let mut by_process: HashMap<u32, Vec<&StreamRec>> = HashMap::new();
        for s in self.streams() {
            let p = s.start.process;
            by_process
                .entry(p)
                .or_insert_with(|| {
                    order.push(p);
                    Vec::new()
                })
                .push(s);
        }
        let mut stats = Stats::default();
        for p in order {
            if pass.halt.is_halted() {
                break; // the tool ended the run: nothing more is its
            }
            stats.add(&self.replay_process::<T>(p, &by_process[&p], pass, state));
        }
        stats
    }

    /// The streams of process `process`, side by side.
    fn replay_process<T: Cannoli>(
        &self,
        process: u32,
        streams: &[&StreamRec],
        pass: &Pass<'_>,
        state: &ToolState,
    ) -> Stats {
        let notes = pass.notes;
        let mut stats = Stats::default();
        let mut infos: Vec<(&StreamRec, ClientInfo)> = Vec::new();
        for &s in streams {
            match self.client_info(s, state, notes) {
                Some(ci) => infos.push((s, ci)),
                None => stats.refused_connections += 1,
            }
        }
        let Some((_, first)) = infos.first() else {
            return stats;
        };
        let pid_ctx = T::init_pid(first);
        let cache = LiveTables::default().get(process, self, |r| {
            r.load_table(process, first.pid, first.tid, notes)
        });
        let mut tools = Vec::new();
        let mut tid_ctxs = Vec::new();
        for (_, ci) in &infos {
            let (tool, tid_ctx) = T::init_tid(&pid_ctx, ci);
            tools.push(tool);
            tid_ctxs.push(tid_ctx);
        }
        let sides: Vec<Side<'_>> = infos
            .iter()
            .map(|(s, ci)| Side {
                rec: s,
                chunks: dense_chunks(s, ci.pid, ci.tid, notes),
                passed: AtomicUsize::new(0),
                ended: AtomicBool::new(false),
                pid: ci.pid,
                tid: ci.tid,
            })
            .collect();
        let window = 2 * pass.threads + 4;
        let pipes: Vec<ReplayPipeline<'_, T>> = tools
            .into_iter()
            .zip(&tid_ctxs)
            .zip(&infos)
            .map(|((tool, tid_ctx), (_, ci))| {
                Pipeline::new(&*pid_ctx, tid_ctx, tool, Shape::new(ci), pass.halt, window)
            })
            .collect();
        let totals = Mutex::new(Stats::default());
        // Ends stream `k` once, by whoever sees its last chunk's turn come.
        let end = |k: usize| {
            let side = &sides[k];
            if !side.ended.swap(true, Ordering::AcqRel) {
                let st = end_stream(side.rec, &pipes[k], side.pid, side.tid, pass);
                lock(&totals).add(&st);
            }
        };
        let mut queue = Queue::new();
        for (k, side) in sides.iter().enumerate() {
            match side.chunks.first() {
                Some(c) => queue.push(Reverse((c.offset, k, 0))),
                None => end(k),
            }
        }
        let queue = Mutex::new(queue);
        let worker = || {
            let mut frames = Frames::new(self, pass);
            loop {
                if pass.halt.is_halted() {
                    break;
                }
                let (k, i, ticket) = {
                    let mut q = lock(&queue);
                    let Some(Reverse((_, k, i))) = q.pop() else {
                        break;
                    };
                    if let Some(c) = sides[k].chunks.get(i + 1) {
                        q.push(Reverse((c.offset, k, i + 1)));
                    }
                    // In the stream's chunk order (see the module doc).
                    (k, i, pipes[k].claim())
                };
                let side = &sides[k];
                let take = Take::One(Some(i));
                frames.point(side.chunks, take, Some(&side.passed), side.pid, side.tid);
                pipes[k].work_one(ticket, Some(&cache), &mut frames);
                if side.passed.load(Ordering::Acquire) == side.chunks.len() {
                    end(k);
                }
            }
        };
        std::thread::scope(|sc| {
            for _ in 1..pass.threads {
                sc.spawn(worker);
            }
            worker();
        });
        // Streams the tool's end of the run left open.
        for k in 0..sides.len() {
            end(k);
        }
        stats.add(&totals.into_inner().unwrap_or_else(|p| p.into_inner()));
        drop(pipes);
        drop(tid_ctxs);
        stats
    }
}
