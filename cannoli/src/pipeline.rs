//! One stream's way from its chunks to the tool, shared by a live run
//! (`server/workers.rs`, chunks from the ring) and a replay
//! (`recording/replay.rs`, chunks from the recording).
//!
//! Each worker takes a ticket ([`Reseq::claim`]), then the next chunk from
//! its [`Feed`], decodes it ([`decode`]) and hands it to the resequencer;
//! whoever delivers a chunk, in chunk order, stitches its head to the block
//! the chunks before it left open ([`stitch`]) and calls
//! [`Cannoli::trace`] ([`Due`], [`Stitched`]). At the stream's end the
//! block still open ran to its end ([`Pipeline::finish`]).
//!
//! Once the run's tool stopped or failed it ([`Halt`]), chunks are taken
//! from the feed as before but neither decoded nor delivered: no callback
//! runs after the one that ended the run.
//!
//! What differs between live and replay stays with the [`Feed`]: where the
//! chunks come from (and a tee), what is counted and said about them, and
//! whether a chunk is delivered at all (a replay stops at a damaged one).

use std::sync::{Mutex, MutexGuard};

use crate::blocks::BlockCache;
use crate::decode::{decode, finish, stitch, Carry, Decoded, Seam, Shape};
use crate::flow::Halt;
use crate::reseq::Reseq;
use crate::Cannoli;

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where one worker's chunks come from, and what its caller does around
/// decoding and delivering them.
pub(crate) trait Feed<T: Cannoli> {
    /// What a chunk carries from its worker to its delivery, besides its
    /// trace and seam.
    type Note;
    /// The caller's part of the delivery state (one deliverer at a time,
    /// in chunk order).
    type Serial: Default;

    /// The next chunk, with a ticket held. `None`: no more chunks for this
    /// worker.
    fn next(&mut self) -> Option<Next<'_, Self::Note>>;

    /// Chunk `seq`, `len` bytes, was decoded as `d` (on the worker, in any
    /// order). Returns its note.
    fn decoded(&mut self, seq: u64, len: usize, d: &Decoded) -> Self::Note;

    /// A chunk's turn (in chunk order): `due` stitches and delivers it;
    /// not using it skips the chunk.
    fn deliver(&mut self, serial: &mut Self::Serial, note: Self::Note, due: Due<'_, T>);
}

/// A chunk a [`Feed`] hands its worker.
pub(crate) struct Next<'b, N> {
    pub seq: u64,
    /// Its bytes, or, when it has none, the note for its delivery that
    /// says why.
    pub data: Result<&'b [u8], N>,
}

/// The state of a stream's in-order delivery: the block the chunks
/// delivered so far left open, and the caller's own.
pub(crate) struct Delivery<Tr, S> {
    carry: Carry<Tr>,
    pub state: S,
}

impl<Tr, S: Default> Default for Delivery<Tr, S> {
    fn default() -> Self {
        Delivery {
            carry: Carry::default(),
            state: S::default(),
        }
    }
}

/// One stream's decoding and in-order delivery to its tool. `N` and `S`:
/// its [`Feed`]'s note and serial state.
pub(crate) struct Pipeline<'a, T: Cannoli, N, S> {
    pid_ctx: &'a T::PidContext,
    tid_ctx: &'a T::TidContext,
    /// Taken out when the stream ends ([`Pipeline::end`]).
    tool: Mutex<Option<T>>,
    shape: Shape<'a>,
    /// The run's: whether its tool ended it.
    halt: &'a Halt,
    /// Chunks back in order, with what stitching each one needs, and the
    /// block the chunks delivered so far left open.
    reseq: InOrder<T::Trace, N, S>,
}

/// The resequencer of a [`Pipeline`].
type InOrder<Tr, N, S> = Reseq<Tr, (Seam, N), Delivery<Tr, S>>;

impl<'a, T: Cannoli, N, S: Default> Pipeline<'a, T, N, S> {
    /// `window`: how many chunks may be claimed and not delivered yet.
    pub fn new(
        pid_ctx: &'a T::PidContext,
        tid_ctx: &'a T::TidContext,
        tool: T,
        shape: Shape<'a>,
        halt: &'a Halt,
        window: usize,
    ) -> Self {
        Pipeline {
            pid_ctx,
            tid_ctx,
            tool: Mutex::new(Some(tool)),
            shape,
            halt,
            reseq: Reseq::new(0, window),
        }
    }

    /// One worker: claim a ticket, take a chunk from `feed`, decode it into
    /// a trace buffer (with the process's block `cache`), hand the buffer
    /// to the resequencer. Until `feed` has no more.
    pub fn work<F>(&self, cache: Option<&BlockCache>, feed: &mut F)
    where
        F: Feed<T, Note = N, Serial = S>,
    {
        while self.work_one(self.claim(), cache, feed) {}
    }

    /// A ticket: room in the resequencer's window for one more chunk (it
    /// waits for that), with a trace buffer. The chunk taken with it must
    /// be the stream's lowest not taken yet, or the window could fill with
    /// chunks after one that waits for a ticket.
    pub fn claim(&self) -> Vec<T::Trace> {
        self.reseq.claim()
    }

    /// [`Pipeline::work`] of one chunk, `buf` being its ticket
    /// ([`Pipeline::claim`]). Returns whether `feed` had one.
    pub fn work_one<F>(
        &self,
        mut buf: Vec<T::Trace>,
        cache: Option<&BlockCache>,
        feed: &mut F,
    ) -> bool
    where
        F: Feed<T, Note = N, Serial = S>,
    {
        let Some(Next { seq, data }) = feed.next() else {
            self.reseq.unclaim(buf);
            return false;
        };
        let mut seam = Seam::default();
        let note = match data {
            Ok(data) if self.halt.is_halted() => {
                let len = data.len();
                buf.clear();
                feed.decoded(seq, len, &Decoded::default())
            }
            Ok(data) => {
                let len = data.len();
                let d = decode::<T>(
                    self.pid_ctx,
                    self.tid_ctx,
                    data,
                    &self.shape,
                    cache,
                    &mut buf,
                    &mut seam,
                );
                feed.decoded(seq, len, &d)
            }
            Err(note) => {
                buf.clear();
                note
            }
        };
        self.reseq
            .complete(seq, buf, (seam, note), |trace, (seam, note), d| {
                let due = Due {
                    pid_ctx: self.pid_ctx,
                    tid_ctx: self.tid_ctx,
                    tool: &self.tool,
                    shape: &self.shape,
                    halt: self.halt,
                    carry: &mut d.carry,
                    seam: &seam,
                    trace,
                };
                feed.deliver(&mut d.state, note, due);
            });
        true
    }

    /// The delivery state, once every chunk is delivered (the stream's
    /// end).
    pub fn take_serial(&self) -> Delivery<T::Trace, S> {
        self.reseq.take_serial()
    }

    /// The stream ended after the chunks delivered into `d`: the block the
    /// last one left open ran to its end (delivered as one last trace).
    /// Returns the events delivered.
    pub fn finish(&self, d: &mut Delivery<T::Trace, S>) -> u64 {
        if self.halt.is_halted() {
            return 0;
        }
        let carry = &mut d.carry;
        carry.buf.clear();
        let n = finish::<T>(self.pid_ctx, self.tid_ctx, &mut carry.open, &mut carry.buf);
        if !carry.buf.is_empty() {
            if let Some(tool) = lock(&self.tool).as_mut() {
                let flow = tool.trace_flow(self.pid_ctx, self.tid_ctx, &carry.buf);
                self.halt.note(flow);
            }
        }
        n
    }

    /// The stream's tool, once its stream ended ([`Pipeline::finish`]):
    /// dropped by the caller, whose `Drop` may report, before the stream's
    /// `TidContext`. Nothing is delivered to it after this.
    pub fn end(&self) -> Option<T> {
        lock(&self.tool).take()
    }
}

/// A chunk whose turn it is: [`Due::stitch`] decodes its head with the
/// block the chunks before it left open, then [`Stitched::trace`] hands the
/// head's trace and the chunk's own to the tool.
pub(crate) struct Due<'d, T: Cannoli> {
    pid_ctx: &'d T::PidContext,
    tid_ctx: &'d T::TidContext,
    tool: &'d Mutex<Option<T>>,
    shape: &'d Shape<'d>,
    halt: &'d Halt,
    carry: &'d mut Carry<T::Trace>,
    seam: &'d Seam,
    trace: &'d [T::Trace],
}

impl<'d, T: Cannoli> Due<'d, T> {
    /// The chunk's head, with the block the chunks before it left open, is
    /// delivered before its body. Returns the events stitched.
    pub fn stitch(self) -> (u64, Stitched<'d, T>) {
        let carry = self.carry;
        carry.buf.clear();
        if self.halt.is_halted() {
            let none = Stitched {
                pid_ctx: self.pid_ctx,
                tid_ctx: self.tid_ctx,
                tool: self.tool,
                halt: self.halt,
                head: &[],
                trace: &[],
            };
            return (0, none);
        }
        let n = stitch::<T>(
            self.pid_ctx,
            self.tid_ctx,
            self.shape,
            &mut carry.open,
            self.seam,
            &mut carry.buf,
        );
        let stitched = Stitched {
            pid_ctx: self.pid_ctx,
            tid_ctx: self.tid_ctx,
            tool: self.tool,
            halt: self.halt,
            head: &carry.buf,
            trace: self.trace,
        };
        (n, stitched)
    }
}

/// A chunk whose head is stitched, to be handed to the tool.
pub(crate) struct Stitched<'d, T: Cannoli> {
    pid_ctx: &'d T::PidContext,
    tid_ctx: &'d T::TidContext,
    tool: &'d Mutex<Option<T>>,
    halt: &'d Halt,
    head: &'d [T::Trace],
    trace: &'d [T::Trace],
}

impl<T: Cannoli> Stitched<'_, T> {
    /// Hands the head's trace, then the chunk's, to the tool, unless the
    /// run was ended (before, or by the head).
    pub fn trace(self) {
        let (head, trace) = (self.head, self.trace);
        if head.is_empty() && trace.is_empty() {
            return;
        }
        let mut tool = lock(self.tool);
        let Some(tool) = tool.as_mut() else {
            return; // the stream ended: nothing is its any more
        };
        for part in [head, trace] {
            if part.is_empty() || self.halt.is_halted() {
                continue;
            }
            let flow = tool.trace_flow(self.pid_ctx, self.tid_ctx, part);
            self.halt.note(flow);
        }
    }
}
