//! Target `ring`: the mempipe consumer against a hostile producer. An
//! honest producer publishes chunks while a third mapping of the same memfd
//! scribbles on the shared header, the slot descriptors and the chunks, in
//! between the consumer's `recv`, `try_recv`, `backlog`, `is_finished`,
//! `abandon` and releases of held chunks.
//!
//! Checked for every input:
//! - no panic, and every case ends in bounded time (a `recv` that would
//!   wait is only made with a watchdog that abandons the ring, as the
//!   client does when the control connection ends);
//! - the consumer hands out sequence numbers 0, 1, 2, ... in order, each
//!   once, whatever the producer wrote;
//! - a chunk is either refused (empty, with a violation recorded, and the
//!   last one of the stream) or at most a chunk long, and while nobody
//!   scribbled it is exactly what the producer published;
//! - at most one chunk is refused, none while nobody scribbled; `backlog`
//!   never exceeds the ring; a finished stream stays finished;
//! - refusing to attach (header scribbled before the consumer came) is one
//!   line.
//!
//! Input: a byte choosing the geometry (and whether the header is damaged
//! before attaching), then bytes from which `arbitrary` builds the steps.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use mempipe::{Chunk, Consumer, Error, Producer, HEADER_SIZE, SLOT_SIZE};

/// One step of a case.
#[derive(Debug, Arbitrary)]
enum Step {
    Publish(u16),
    TryRecv,
    /// `recv`, with a watchdog if it could wait.
    Recv,
    Hold,
    Release(u8),
    Backlog,
    IsFinished,
    /// A word anywhere in the header and slot descriptors.
    Scribble {
        off: u16,
        val: u64,
        wide: bool,
    },
    Slot {
        slot: u8,
        field: u8,
        val: u64,
    },
    /// `published` set outright, or moved by a small amount.
    Published(u64),
    PublishedBy(i8),
    Chunk {
        off: u32,
        val: u64,
    },
    Close,
    Abandon,
    ConsumerClose,
}

/// A hostile writer's view of the ring: a mapping of its own.
struct Hostile {
    map: memmap2::MmapRaw,
}

impl Hostile {
    fn new(fd: &OwnedFd, len: usize) -> Hostile {
        let f = File::from(fd.try_clone().expect("dup of the memfd"));
        let map = memmap2::MmapOptions::new()
            .len(len)
            .map_raw(&f)
            .expect("mapping the memfd");
        Hostile { map }
    }

    /// Writes `val` (8 bytes if `wide`, else 4) at `off`, rounded down to
    /// its alignment and kept inside the mapping.
    fn write(&self, off: usize, val: u64, wide: bool) {
        let size = if wide { 8 } else { 4 };
        let off = (off % (self.map.len() - 8)) & !(size - 1);
        // SAFETY: off + size <= len (off < len - 8), aligned to the size,
        // inside our shared mapping. The consumer and the producer only
        // access these words atomically or read them as untrusted bytes; a
        // plain volatile store is what another process would do.
        unsafe {
            let p = self.map.as_mut_ptr().add(off);
            if wide {
                (p as *mut u64).write_volatile(val);
            } else {
                (p as *mut u32).write_volatile(val as u32);
            }
        }
    }
}

const PUBLISHED: usize = 64;

/// Runs the target on one input.
pub fn run(input: &[u8]) {
    let t0 = Instant::now();
    let (g, rest) = input.split_first().unwrap_or((&0, &[]));
    let chunk_count = 2usize << (g & 3);
    let chunk_size = 4096 * (1 + ((g >> 2) & 1) as usize);
    let damage_first = g & 8 != 0;
    let mut u = Unstructured::new(rest);
    let steps: Vec<Step> = u.arbitrary().unwrap_or_default();

    let mut p = Producer::create_memfd(chunk_size, chunk_count).expect("a memfd ring");
    let len = Producer::mapped_len(chunk_size, chunk_count).unwrap();
    let fd = p.fd().unwrap().try_clone_to_owned().expect("dup");
    let hostile = Hostile::new(&fd, len);
    let control_len = HEADER_SIZE + chunk_count * SLOT_SIZE;
    let mut steps = steps.into_iter().peekable();
    if damage_first {
        // The header is damaged before the consumer attaches: it refuses
        // in one line, or attaches to something it can use.
        while let Some(Step::Scribble { off, val, wide }) = steps.peek() {
            hostile.write(*off as usize % 256, *val, *wide);
            steps.next();
        }
    }
    let c = match Consumer::from_fd(fd) {
        Ok(c) => c,
        Err(e) => {
            assert!(damage_first, "an undamaged ring refused: {e}");
            let m = e.to_string();
            assert!(
                !m.contains('\n') && !m.chars().any(char::is_control),
                "{m:?}"
            );
            assert!(
                matches!(e, Error::BadHeader(_) | Error::AlreadyOpened { .. }),
                "{e:?}"
            );
            return;
        }
    };
    let mut st = State {
        chunk_size,
        chunk_count,
        scribbled: damage_first,
        data_scribbled: false,
        sent: Vec::new(),
        next: 0,
        refused_seen: false,
    };
    let mut held: Vec<Chunk<'_>> = Vec::new();
    let mut finished = false;

    for step in steps {
        match step {
            Step::Publish(l) => {
                if let Ok(Some(ptr)) = p.acquire_timeout(Duration::ZERO) {
                    let l = l as usize % (chunk_size + 1);
                    if l >= 8 {
                        // SAFETY: acquire handed us chunk_size writable bytes.
                        unsafe {
                            (ptr as *mut [u8; 8]).write((st.sent.len() as u64).to_le_bytes())
                        };
                    }
                    if p.publish(l).is_ok() {
                        st.sent.push(l);
                    }
                }
            }
            Step::TryRecv | Step::Hold => {
                let ch = c.try_recv();
                if finished {
                    assert!(ch.is_none(), "a chunk after the stream finished");
                }
                st.take(&c, ch, &mut held);
            }
            Step::Recv => {
                let ch = if c.backlog() > 0 || c.is_finished() {
                    c.recv()
                } else {
                    // It may wait: the client's control thread abandons the
                    // ring when the producer's connection ends.
                    std::thread::scope(|s| {
                        s.spawn(|| {
                            std::thread::sleep(Duration::from_millis(1));
                            c.abandon();
                        });
                        c.recv()
                    })
                };
                if finished {
                    assert!(ch.is_none(), "a chunk after the stream finished");
                }
                if ch.is_none() {
                    finished = true;
                    assert!(c.is_finished());
                }
                st.take(&c, ch, &mut held);
            }
            Step::Release(i) => {
                if !held.is_empty() {
                    held.remove(i as usize % held.len());
                }
            }
            Step::Backlog => assert!(c.backlog() <= chunk_count as u64),
            Step::IsFinished => {
                if c.is_finished() {
                    finished = true;
                    assert!(c.try_recv().is_none());
                }
            }
            Step::Scribble { off, val, wide } => {
                hostile.write(off as usize % control_len, val, wide);
                st.scribbled = true;
            }
            Step::Slot { slot, field, val } => {
                let off = HEADER_SIZE
                    + (slot as usize % chunk_count) * SLOT_SIZE
                    + [0, 8, 16][field as usize % 3];
                hostile.write(off, val, field % 3 != 0);
                st.scribbled = true;
            }
            Step::Published(v) => {
                hostile.write(PUBLISHED, v, true);
                st.scribbled = true;
            }
            Step::PublishedBy(d) => {
                let now = c.published();
                hostile.write(PUBLISHED, now.wrapping_add(d as i64 as u64), true);
                st.scribbled = true;
            }
            Step::Chunk { off, val } => {
                let data = len - control_len.next_multiple_of(4096);
                hostile.write(len - data + off as usize % data, val, true);
                st.data_scribbled = true;
            }
            Step::Close => p.close(),
            Step::Abandon => c.abandon(),
            Step::ConsumerClose => {
                c.close();
                finished = true;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "a case ran for {:?}",
            t0.elapsed()
        );
    }
    if !st.scribbled {
        assert!(c.violation().is_none() && c.refused_chunks() == 0);
    }
    drop(held);
    drop(c);
    // The producer hears that the consumer is gone.
    assert!(matches!(
        p.acquire_timeout(Duration::ZERO),
        Err(Error::ConsumerGone) | Err(Error::Closed) | Ok(_)
    ));
    let _ = p.fd().map(|f| f.as_raw_fd());
}

/// What a case knows about the stream so far.
struct State {
    chunk_size: usize,
    chunk_count: usize,
    /// The header or a slot was written by the hostile mapping.
    scribbled: bool,
    /// A chunk's bytes were.
    data_scribbled: bool,
    /// What the honest producer published: the length of each seq.
    sent: Vec<usize>,
    /// The sequence number the next chunk must have.
    next: u64,
    refused_seen: bool,
}

impl State {
    /// Checks a chunk the consumer handed out and holds on to it.
    fn take<'c>(&mut self, c: &'c Consumer, ch: Option<Chunk<'c>>, held: &mut Vec<Chunk<'c>>) {
        let Some(ch) = ch else { return };
        assert!(!self.refused_seen, "a chunk after a refused one");
        assert_eq!(ch.seq(), self.next, "sequence numbers in order, each once");
        self.next += 1;
        if ch.is_refused() {
            assert!(self.scribbled, "refused without a scribble");
            assert!(ch.copy().bytes().is_empty());
            assert!(c.violation().is_some_and(|v| v.seq() == ch.seq()));
            self.refused_seen = true;
        } else {
            assert!(ch.len() <= self.chunk_size && ch.copy().bytes().len() == ch.len());
            if !self.scribbled {
                let want = self.sent[ch.seq() as usize];
                assert_eq!(ch.len(), want, "length of seq {}", ch.seq());
                if want >= 8 && !self.data_scribbled {
                    assert_eq!(ch.copy().bytes()[..8], ch.seq().to_le_bytes());
                }
            }
        }
        assert!(c.refused_chunks() <= 1);
        held.push(ch);
        if held.len() > self.chunk_count + 2 {
            held.remove(0);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn empty_and_tiny_inputs() {
        for input in [&[][..], &[0], &[8, 1, 2, 3], &[3; 64]] {
            super::run(input);
        }
    }
}
