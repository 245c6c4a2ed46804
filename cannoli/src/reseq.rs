//! Puts decoded chunks back into execution order.
//!
//! Workers decode chunks in parallel and finish them in any order. The worker
//! that finishes the next chunk due (`next`) delivers it, then every buffered
//! successor, one at a time, to the serial callback. Nobody waits for the
//! deliverer: a worker that finishes an out-of-order chunk parks its trace in
//! `pending` and goes back for more.
//!
//! Memory stays bounded by a window of claims: a worker takes a ticket before
//! it asks the ring for a chunk, and at most `window` tickets are out at once.
//! The ring hands chunks out in increasing seq order, so a claimed seq is
//! always below `next + window`.
//!
//! Trace buffers are recycled through a small free list, their items
//! dropped by the worker that takes one, not by the deliverer.
//!
//! Each chunk also carries a value `M` for its delivery (the decoder's
//! [`Seam`](crate::decode::Seam)), and the delivery loop has a state `S` of
//! its own (the block the chunks delivered so far left open): whoever
//! delivers holds it, one deliverer at a time, in seq order.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};

pub(crate) struct Reseq<Tr, M = (), S = ()> {
    state: Mutex<State<Tr, M, S>>,
    /// Signalled whenever `next` advances (tickets come back).
    room: Condvar,
    window: usize,
    max_free: usize,
}

struct State<Tr, M, S> {
    /// Seq of the next chunk to deliver.
    next: u64,
    /// Tickets taken and not yet given back.
    outstanding: usize,
    /// Decoded chunks waiting for their turn.
    pending: BTreeMap<u64, (Vec<Tr>, M)>,
    /// Somebody is running the delivery loop (and holds `serial`).
    delivering: bool,
    /// The delivery loop's state, between deliveries.
    serial: Option<S>,
    free: Vec<Vec<Tr>>,
}

impl<Tr, M, S: Default> Reseq<Tr, M, S> {
    /// `first` is the seq of the first chunk; at most `window` chunks may be
    /// claimed and not yet delivered.
    pub fn new(first: u64, window: usize) -> Self {
        let window = window.max(1);
        Reseq {
            state: Mutex::new(State {
                next: first,
                outstanding: 0,
                pending: BTreeMap::new(),
                delivering: false,
                serial: Some(S::default()),
                free: Vec::new(),
            }),
            room: Condvar::new(),
            window,
            max_free: window + 1,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<Tr, M, S>> {
        // A poisoned lock means a callback panicked; the process is being
        // torn down anyway (see `server`), the state itself is still sound.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a ticket, waiting while the window is full, and returns an empty
    /// buffer to decode the next chunk into.
    pub fn claim(&self) -> Vec<Tr> {
        let mut st = self.lock();
        while st.outstanding >= self.window {
            st = self.room.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.outstanding += 1;
        let mut buf = st.free.pop().unwrap_or_default();
        drop(st);
        // The deliverer gives buffers back with their items (see
        // `complete`): a worker drops them, outside the lock.
        buf.clear();
        buf
    }

    /// Gives back a ticket that did not turn into a chunk (the ring is done).
    pub fn unclaim(&self, buf: Vec<Tr>) {
        let mut st = self.lock();
        st.outstanding -= 1;
        if st.free.len() < self.max_free {
            st.free.push(buf);
        }
        drop(st);
        // One ticket came back: one waiter can take it.
        self.room.notify_one();
    }

    /// Hands in the decoded trace of chunk `seq` and its `meta`. If it is
    /// the one due, this call delivers it and every buffered successor
    /// through `deliver` (with the delivery state), in seq order; otherwise
    /// it parks it and returns at once.
    pub fn complete(
        &self,
        seq: u64,
        buf: Vec<Tr>,
        meta: M,
        mut deliver: impl FnMut(&[Tr], M, &mut S),
    ) {
        let mut st = self.lock();
        let (mut cur, mut meta) = if !st.delivering && seq == st.next {
            (buf, meta)
        } else {
            debug_assert!(
                seq >= st.next,
                "chunk {seq} completed twice or out of window"
            );
            st.pending.insert(seq, (buf, meta));
            return;
        };
        st.delivering = true;
        // Only the deliverer takes it, and gives it back before it stops
        // delivering (a panicking callback ends the process).
        let mut serial = st.serial.take().unwrap_or_default();
        loop {
            drop(st);
            deliver(&cur, meta, &mut serial);
            st = self.lock();
            st.next += 1;
            st.outstanding -= 1;
            // Not cleared here: the deliverer is the one thread every chunk
            // waits for, and dropping a trace's items (a heap trace's boxed
            // registers and shared deltas) is work the worker that claims
            // the buffer next does instead (a sixth of the heap's serial
            // thread, once its call stacks were cheap).
            if st.free.len() < self.max_free {
                st.free.push(cur);
            }
            // One ticket came back, so one waiter is woken, not all: with
            // many workers held at a full window (a tool whose serial part
            // is the slowest, as heap's is) waking them all made each of
            // them take this lock in turn, the deliverer's too, for every
            // chunk delivered.
            self.room.notify_one();
            let next = st.next;
            match st.pending.remove(&next) {
                Some((b, m)) => (cur, meta) = (b, m),
                None => {
                    st.serial = Some(serial);
                    st.delivering = false;
                    return;
                }
            }
        }
    }

    /// The delivery state, once every chunk is delivered (the stream's
    /// end).
    pub fn take_serial(&self) -> S {
        self.lock().serial.take().unwrap_or_default()
    }

    /// Seq of the next chunk due.
    #[cfg(test)]
    pub fn next(&self) -> u64 {
        self.lock().next
    }

    /// Chunks decoded but not delivered yet.
    #[cfg(test)]
    pub fn parked(&self) -> usize {
        self.lock().pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn out_of_order_completions_are_delivered_in_order() {
        let r = Reseq::<u64>::new(0, 8);
        let mut out = Vec::new();
        let mut bufs: Vec<Vec<u64>> = (0..5).map(|_| r.claim()).collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            b.push(i as u64 * 10);
            b.push(i as u64 * 10 + 1);
        }
        let mut bufs: Vec<Option<Vec<u64>>> = bufs.into_iter().map(Some).collect();
        // Completion order 3, 1, 4, 0, 2.
        for seq in [3u64, 1, 4] {
            r.complete(seq, bufs[seq as usize].take().unwrap(), (), |t, (), _| {
                out.extend_from_slice(t)
            });
            assert!(out.is_empty());
        }
        assert_eq!(r.parked(), 3);
        r.complete(0, bufs[0].take().unwrap(), (), |t, (), _| {
            out.extend_from_slice(t)
        });
        assert_eq!(out, vec![0, 1, 10, 11]);
        assert_eq!(r.next(), 2);
        r.complete(2, bufs[2].take().unwrap(), (), |t, (), _| {
            out.extend_from_slice(t)
        });
        assert_eq!(out, vec![0, 1, 10, 11, 20, 21, 30, 31, 40, 41]);
        assert_eq!(r.next(), 5);
        assert_eq!(r.parked(), 0);
        // Buffers come back empty.
        assert!(r.claim().is_empty());
    }

    #[test]
    fn metas_and_the_serial_state_follow_the_delivery_order() {
        let r = Reseq::<u64, u64, Vec<u64>>::new(0, 8);
        let bufs: Vec<Vec<u64>> = (0..4).map(|_| r.claim()).collect();
        let mut seen = Vec::new();
        for (seq, b) in bufs.into_iter().enumerate().rev() {
            r.complete(seq as u64, b, seq as u64 * 100, |_, m, s| {
                s.push(m);
                seen.push(s.len());
            });
        }
        assert_eq!(seen, [1, 2, 3, 4]);
        assert_eq!(r.take_serial(), [0, 100, 200, 300]);
    }

    #[test]
    fn window_blocks_claims_until_delivery() {
        let r = Arc::new(Reseq::<u64>::new(10, 2));
        let b0 = r.claim();
        let b1 = r.claim();
        let claimed = Arc::new(AtomicU64::new(0));
        let t = {
            let (r, claimed) = (r.clone(), claimed.clone());
            std::thread::spawn(move || {
                let b = r.claim();
                claimed.store(1, Ordering::SeqCst);
                b
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(claimed.load(Ordering::SeqCst), 0, "third claim must wait");
        // Out of order completion does not free a ticket...
        r.complete(11, b1, (), |_, (), _| {});
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(claimed.load(Ordering::SeqCst), 0);
        // ...delivery does.
        let mut n = 0;
        r.complete(10, b0, (), |_, (), _| n += 1);
        assert_eq!(n, 2);
        t.join().unwrap();
        assert_eq!(claimed.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn many_threads_random_order() {
        const CHUNKS: u64 = 2000;
        const WORKERS: usize = 4;
        let r = Reseq::<u64>::new(0, 2 * WORKERS + 4);
        let seqs = AtomicU64::new(0);
        let out = Mutex::new(Vec::new());
        let max_ahead = AtomicU64::new(0);
        std::thread::scope(|s| {
            for w in 0..WORKERS {
                let (r, seqs, out, max_ahead) = (&r, &seqs, &out, &max_ahead);
                s.spawn(move || {
                    let mut rng = 0x9e37_79b9u64.wrapping_mul(w as u64 + 1);
                    loop {
                        let mut b = r.claim();
                        let seq = seqs.fetch_add(1, Ordering::SeqCst);
                        if seq >= CHUNKS {
                            r.unclaim(b);
                            return;
                        }
                        let ahead = seq - r.next();
                        max_ahead.fetch_max(ahead, Ordering::SeqCst);
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        for _ in 0..(rng % 2000) {
                            std::hint::spin_loop();
                        }
                        b.push(seq);
                        r.complete(seq, b, (), |t, (), _| {
                            out.lock().unwrap().extend_from_slice(t)
                        });
                    }
                });
            }
        });
        let out = out.into_inner().unwrap();
        assert_eq!(out, (0..CHUNKS).collect::<Vec<_>>());
        assert!(max_ahead.load(Ordering::SeqCst) < (2 * WORKERS + 4) as u64);
    }

    /// More workers than the window holds, and a slow deliverer (heap's
    /// serial phase): most claims wait at a full window, and each ticket
    /// given back wakes one of them. A wake-up lost there would hang
    /// this test; every chunk still arrives, in order.
    #[test]
    fn crowded_window_wakes_one_waiter_per_ticket() {
        const CHUNKS: u64 = 3000;
        const WORKERS: usize = 16;
        let r = Reseq::<u64>::new(0, 2);
        let seqs = AtomicU64::new(0);
        let out = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..WORKERS {
                let (r, seqs, out) = (&r, &seqs, &out);
                s.spawn(move || loop {
                    let mut b = r.claim();
                    let seq = seqs.fetch_add(1, Ordering::SeqCst);
                    if seq >= CHUNKS {
                        r.unclaim(b);
                        return;
                    }
                    b.push(seq);
                    r.complete(seq, b, (), |t, (), _| {
                        for _ in 0..500 {
                            std::hint::spin_loop();
                        }
                        out.lock().unwrap().extend_from_slice(t)
                    });
                });
            }
        });
        let out = out.into_inner().unwrap();
        assert_eq!(out, (0..CHUNKS).collect::<Vec<_>>());
    }
}
