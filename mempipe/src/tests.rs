use super::*;
use crate::error::io_error;
use crate::layout::SLOT_FREE;
use std::collections::HashSet;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

const CS: usize = 4096;

/// Deterministic content for `seq`: a length and a checksum-able pattern whose
/// first 8 bytes are the sequence number.
fn pattern_len(seq: u64, chunk_size: usize) -> usize {
    (8 + (seq.wrapping_mul(2_654_435_761) % (chunk_size as u64 - 7)) as usize).min(chunk_size)
}

fn fill(seq: u64, buf: &mut [u8]) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for b in &mut buf[8..] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

fn check(seq: u64, data: &[u8], chunk_size: usize) {
    assert_eq!(data.len(), pattern_len(seq, chunk_size), "len of seq {seq}");
    assert_eq!(data.as_ptr() as usize % 8, 0);
    let mut want = vec![0u8; data.len()];
    fill(seq, &mut want);
    assert!(data == &want[..], "content of seq {seq}");
}

fn send_pattern(p: &mut Producer, seq: u64) {
    let cs = p.chunk_size();
    let len = pattern_len(seq, cs);
    let buf = p.acquire_slice().unwrap();
    fill(seq, &mut buf[..len]);
    assert_eq!(p.publish(len).unwrap(), seq);
}

fn dup(fd: BorrowedFd<'_>) -> OwnedFd {
    fd.try_clone_to_owned().unwrap()
}

fn pair(chunk_size: usize, count: usize) -> (Producer, Consumer) {
    let p = Producer::create_memfd(chunk_size, count).unwrap();
    let c = Consumer::from_fd(dup(p.fd().unwrap())).unwrap();
    (p, c)
}

#[test]
fn thread_safety_markers() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<Producer>();
    send::<Consumer>();
    sync::<Consumer>();
    send::<Chunk<'static>>();
    sync::<Chunk<'static>>();
}

#[test]
fn roundtrip_close_and_drain() {
    let (mut p, c) = pair(CS, 4);
    assert_eq!(c.chunk_size(), CS);
    assert_eq!(c.chunk_count(), 4);
    assert_eq!(c.producer_pid(), std::process::id());
    assert!(p.consumer_attached());
    for seq in 0..3 {
        send_pattern(&mut p, seq);
    }
    assert_eq!(p.published(), 3);
    assert_eq!(c.published(), 3);
    assert!(!c.closed_by_producer());
    p.close();
    p.close(); // idempotent
    assert!(c.closed_by_producer());
    assert!(matches!(p.acquire(), Err(Error::Closed)));
    assert!(matches!(p.publish(0), Err(Error::Closed)));
    for seq in 0..3 {
        let ch = c.recv().unwrap();
        assert_eq!(ch.seq(), seq);
        check(seq, ch.copy().bytes(), CS);
    }
    assert!(c.recv().is_none());
    assert!(c.recv().is_none());
    assert!(c.is_finished());
}

#[test]
fn producer_gone_before_consumer_opens() {
    // A short run may finish before the client opens the ring.
    let mut p = Producer::create_memfd(CS, 8).unwrap();
    let fd = dup(p.fd().unwrap());
    for seq in 0..5 {
        send_pattern(&mut p, seq);
    }
    drop(p);
    let c = Consumer::from_fd(fd).unwrap();
    assert!(c.closed_by_producer());
    let seqs: Vec<u64> = std::iter::from_fn(|| c.recv().map(|ch| ch.seq())).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
}

#[test]
fn acquire_twice_same_chunk_and_publish_errors() {
    let (mut p, c) = pair(CS, 2);
    assert!(matches!(p.publish(1), Err(Error::NotAcquired)));
    let a = p.acquire().unwrap();
    let b = p.acquire().unwrap();
    assert_eq!(a, b);
    assert_eq!(a as usize % PAGE_SIZE, 0);
    assert!(
        matches!(p.publish(CS + 1), Err(Error::TooLong { len, chunk_size: CS }) if len == CS + 1)
    );
    assert_eq!(p.publish(CS).unwrap(), 0);
    assert!(matches!(p.publish(0), Err(Error::NotAcquired)));
    let ch = c.recv().unwrap();
    assert_eq!(ch.copy().bytes().len(), CS);
    // Zero-length chunks are fine.
    p.acquire().unwrap();
    assert_eq!(p.publish(0).unwrap(), 1);
    let ch1 = c.recv().unwrap();
    assert!(ch1.is_empty());
    assert_eq!(ch1.seq(), 1);
}

#[test]
fn ordering_and_integrity_single_consumer() {
    const N: u64 = 3000;
    let (mut p, c) = pair(2 * CS, 8);
    let prod = thread::spawn(move || {
        for seq in 0..N {
            send_pattern(&mut p, seq);
        }
        // dropped: closes
    });
    let mut expect = 0;
    while let Some(ch) = c.recv() {
        assert_eq!(ch.seq(), expect);
        check(ch.seq(), ch.copy().bytes(), 2 * CS);
        expect += 1;
    }
    assert_eq!(expect, N);
    prod.join().unwrap();
}

#[test]
fn spinning_receiver_gets_every_chunk_in_order_then_the_end() {
    // Both sides of the spin: chunks published while the reader polls
    // (the producer is quick) and after it fell asleep (a producer that
    // pauses longer than the budget now and then).
    const N: u64 = 2000;
    let (mut p, c) = pair(CS, 4);
    let prod = thread::spawn(move || {
        for seq in 0..N {
            if seq % 500 == 0 {
                thread::sleep(std::time::Duration::from_millis(5));
            }
            send_pattern(&mut p, seq);
        }
    });
    let budget = std::time::Duration::from_micros(200);
    let mut expect = 0;
    while let Some(ch) = c.recv_spinning(budget) {
        assert_eq!(ch.seq(), expect);
        check(ch.seq(), ch.copy().bytes(), CS);
        expect += 1;
    }
    assert_eq!(expect, N);
    assert!(c.recv_spinning(budget).is_none());
    prod.join().unwrap();
}

#[test]
fn several_consumers_out_of_order_release() {
    const N: u64 = 4000;
    const THREADS: usize = 3;
    let (mut p, c) = pair(CS, 16);
    let prod = thread::spawn(move || {
        for seq in 0..N {
            send_pattern(&mut p, seq);
        }
    });
    let seen = Mutex::new(Vec::new());
    thread::scope(|s| {
        for t in 0..THREADS {
            let c = &c;
            let seen = &seen;
            s.spawn(move || {
                let mut mine = Vec::new();
                let mut last = None;
                let mut take = |ch: &Chunk<'_>, mine: &mut Vec<u64>| {
                    // Claimed in increasing order, as seen by one thread.
                    assert!(last < Some(ch.seq()));
                    last = Some(ch.seq());
                    check(ch.seq(), ch.copy().bytes(), CS);
                    mine.push(ch.seq());
                };
                // Blocking recv only while holding nothing (holding a chunk while
                // blocked in recv could wait for a slot this thread holds).
                while let Some(first) = c.recv() {
                    take(&first, &mut mine);
                    let mut held = vec![first];
                    while held.len() <= t + 1 {
                        match c.try_recv() {
                            Some(ch) => {
                                take(&ch, &mut mine);
                                held.push(ch);
                            }
                            None => break,
                        }
                    }
                    // Release out of order: newest first, or oldest-but-one first.
                    if mine.len() % 2 == 0 {
                        while let Some(h) = held.pop() {
                            drop(h);
                        }
                    } else {
                        let second = if held.len() > 1 {
                            Some(held.remove(1))
                        } else {
                            None
                        };
                        drop(second);
                        drop(held);
                    }
                    if mine.len() % 64 < 2 {
                        thread::yield_now();
                    }
                }
                seen.lock().unwrap().extend(mine);
            });
        }
    });
    prod.join().unwrap();
    let mut all = seen.into_inner().unwrap();
    all.sort_unstable();
    assert_eq!(all, (0..N).collect::<Vec<_>>());
}

#[test]
fn release_from_other_thread() {
    let (mut p, c) = pair(CS, 4);
    for seq in 0..4 {
        send_pattern(&mut p, seq);
    }
    p.close();
    let chunks: Vec<Chunk<'_>> = std::iter::from_fn(|| c.recv()).collect();
    assert_eq!(chunks.len(), 4);
    thread::scope(|s| {
        for ch in chunks {
            s.spawn(move || {
                check(ch.seq(), ch.copy().bytes(), CS);
                drop(ch);
            });
        }
    });
    for idx in 0..4 {
        assert_eq!(c.ring.slot(idx).state.load(Ordering::SeqCst), SLOT_FREE);
    }
}

#[test]
fn backpressure_blocks_until_the_right_slot_is_released() {
    let (mut p, c) = pair(CS, 4);
    for seq in 0..4 {
        send_pattern(&mut p, seq);
    }
    assert!(p
        .acquire_timeout(Duration::from_millis(20))
        .unwrap()
        .is_none());
    let (tx, rx) = mpsc::channel();
    let prod = thread::spawn(move || {
        for seq in 4..12 {
            send_pattern(&mut p, seq);
            tx.send(seq).unwrap();
        }
        p
    });
    // Ring full: the producer must wait.
    let held: Vec<Chunk<'_>> = (0..4).map(|_| c.recv().unwrap()).collect();
    assert!(rx.recv_timeout(Duration::from_millis(150)).is_err());
    let mut held: Vec<Option<Chunk<'_>>> = held.into_iter().map(Some).collect();
    // Releasing seq 2 frees slot 2, but seq 4 needs slot 0.
    held[2] = None;
    assert!(rx.recv_timeout(Duration::from_millis(150)).is_err());
    held[0] = None;
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 4);
    // seq 5 needs slot 1, still held.
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    drop(held);
    let mut got = Vec::new();
    while got.len() < 8 {
        let ch = c.recv().unwrap();
        check(ch.seq(), ch.copy().bytes(), CS);
        got.push(ch.seq());
    }
    assert_eq!(got, (4..12).collect::<Vec<_>>());
    let mut p = prod.join().unwrap();
    assert_eq!(rx.try_iter().count(), 7);
    p.close();
    assert!(c.recv().is_none());
}

#[test]
fn blocked_consumers_wake_on_publish_and_close() {
    let (mut p, c) = pair(CS, 4);
    thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0;
                    while let Some(ch) = c.recv() {
                        check(ch.seq(), ch.copy().bytes(), CS);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(30)); // let them sleep
        for seq in 0..10 {
            send_pattern(&mut p, seq);
            if seq % 3 == 0 {
                thread::sleep(Duration::from_millis(5));
            }
        }
        p.close();
        let total: i32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 10);
    });
    // Every sleep ended by a wake-up (publish, close), none by its slice.
    assert_eq!(
        c.sleeps_timed_out(),
        0,
        "publish and close should wake the consumers"
    );
}

#[test]
fn abandon_drains_then_returns_none() {
    let (mut p, c) = pair(CS, 4);
    send_pattern(&mut p, 0);
    send_pattern(&mut p, 1);
    thread::scope(|s| {
        let h = s.spawn(|| {
            let mut seqs = Vec::new();
            while let Some(ch) = c.recv() {
                seqs.push(ch.seq());
            }
            seqs
        });
        thread::sleep(Duration::from_millis(50)); // drained, now asleep
        c.abandon();
        assert_eq!(h.join().unwrap(), vec![0, 1]);
    });
    assert_eq!(c.sleeps_timed_out(), 0, "abandon should wake the consumer");
    assert!(!c.closed_by_producer());
    assert!(c.recv().is_none());
    assert!(c.is_finished());
}

#[test]
fn abandon_before_recv_still_drains() {
    let (mut p, c) = pair(CS, 4);
    for seq in 0..3 {
        send_pattern(&mut p, seq);
    }
    c.abandon();
    let seqs: Vec<u64> = std::iter::from_fn(|| c.recv().map(|ch| ch.seq())).collect();
    assert_eq!(seqs, vec![0, 1, 2]);
}

#[test]
fn consumer_drop_gives_consumer_gone() {
    let (mut p, c) = pair(CS, 2);
    send_pattern(&mut p, 0);
    send_pattern(&mut p, 1);
    let (tx, rx) = mpsc::channel();
    let prod = thread::spawn(move || {
        let r = p.acquire().map(|_| ());
        tx.send(()).unwrap();
        (p, r)
    });
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    drop(c);
    rx.recv_timeout(Duration::from_secs(60)).unwrap();
    let (mut p, r) = prod.join().unwrap();
    assert_eq!(
        p.sleeps_timed_out(),
        0,
        "dropping the consumer should wake the producer"
    );
    assert!(matches!(r, Err(Error::ConsumerGone)), "{r:?}");
    assert!(matches!(p.acquire(), Err(Error::ConsumerGone)));
}

#[test]
fn consumer_close_with_free_slot() {
    let (mut p, c) = pair(CS, 2);
    p.acquire().unwrap();
    c.close();
    c.close();
    assert!(matches!(p.publish(1), Err(Error::ConsumerGone)));
    assert!(matches!(p.acquire(), Err(Error::ConsumerGone)));
    assert!(c.recv().is_none());
}

#[test]
fn create_validates_arguments() {
    for (cs, cc) in [
        (0, 4),
        (1000, 4),
        (4097, 4),
        (8192 + 1, 4),
        (CS, 0),
        (CS, 1),
        (CS, 3),
        (CS, 6),
        (usize::MAX & !4095, 1 << 20),
    ] {
        match Producer::create_memfd(cs, cc) {
            Err(Error::InvalidArgument(m)) => assert!(!m.is_empty()),
            other => panic!("({cs}, {cc}): {other:?}"),
        }
    }
    // Header page, slot page, then the chunks.
    assert_eq!(Producer::mapped_len(CS, 2).unwrap(), 4096 + 4096 + 2 * CS);
}

#[test]
fn second_consumer_is_refused() {
    let p = Producer::create_memfd(CS, 2).unwrap();
    let _c = Consumer::from_fd(dup(p.fd().unwrap())).unwrap();
    match Consumer::from_fd(dup(p.fd().unwrap())) {
        Err(e @ Error::AlreadyOpened { pid }) => {
            assert_eq!(pid, std::process::id());
            assert!(e.to_string().contains("already opened"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn errors_display_one_line() {
    let errs = [
        io_error(
            "opening ring file /x",
            io::Error::from(io::ErrorKind::NotFound),
        ),
        Error::BadHeader("x".into()),
        Error::ConsumerGone,
        Error::InvalidArgument("y".into()),
        Error::Closed,
        Error::NotAcquired,
        Error::TooLong {
            len: 5,
            chunk_size: 4,
        },
        Error::AlreadyOpened { pid: 3 },
    ];
    for e in errs {
        let s = e.to_string();
        assert!(s.starts_with("mempipe: ") && !s.contains('\n'), "{s}");
        let _: &dyn std::error::Error = &e;
    }
    let e = io_error(
        "opening ring file /x",
        io::Error::from(io::ErrorKind::NotFound),
    );
    assert!(e.to_string().contains("opening ring file /x"));
}

#[test]
fn concurrent_stress_small_ring() {
    // Tight ring, several consumers with tiny chunks: exercises the sleep and
    // wake paths on both sides.
    const N: u64 = 20_000;
    let (mut p, c) = pair(CS, 2);
    let c = Arc::new(c);
    let prod = thread::spawn(move || {
        for seq in 0..N {
            p.acquire().unwrap();
            assert_eq!(p.publish((seq % 64) as usize).unwrap(), seq);
        }
    });
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let c = Arc::clone(&c);
            thread::spawn(move || {
                let mut v = Vec::new();
                while let Some(ch) = c.recv() {
                    assert_eq!(ch.len() as u64, ch.seq() % 64);
                    v.push(ch.seq());
                }
                v
            })
        })
        .collect();
    prod.join().unwrap();
    let mut set = HashSet::new();
    for h in handles {
        for s in h.join().unwrap() {
            assert!(set.insert(s), "seq {s} twice");
        }
    }
    assert_eq!(set.len() as u64, N);
}
