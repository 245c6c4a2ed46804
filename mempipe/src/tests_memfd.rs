//! Memfd rings, and a consumer facing a hostile producer (one that writes
//! whatever it likes into the shared header and slots).

use super::*;
use crate::layout::{Header, SLOT_FULL};
use crate::producer::memfd_create;
use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

const CS: usize = 4096;

fn publish(p: &mut Producer, seq: u64, len: usize) {
    let buf = p.acquire_slice().unwrap();
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    assert_eq!(p.publish(len).unwrap(), seq);
}

fn dup(fd: BorrowedFd<'_>) -> OwnedFd {
    fd.try_clone_to_owned().unwrap()
}

fn memfd_pair(chunk_size: usize, count: usize) -> (Producer, Consumer) {
    let p = Producer::create_memfd(chunk_size, count).unwrap();
    let c = Consumer::from_fd(dup(p.fd().unwrap())).unwrap();
    (p, c)
}

fn seals_of(fd: BorrowedFd<'_>) -> libc::c_int {
    // SAFETY: F_GET_SEALS on a live fd.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) }
}

fn refused_with(r: Result<Consumer, Error>, needle: &str) {
    match r {
        Err(e @ Error::Refused(_)) => {
            let s = e.to_string();
            assert!(s.contains(needle), "{s}");
            assert!(!s.contains('\n'), "{s}");
        }
        other => panic!("expected Refused containing {needle:?}, got {other:?}"),
    }
}

/// A memfd of `len` bytes holding `content` at offset 0; allocated and
/// sealed as asked.
fn raw_memfd(content: &[u8], len: usize, allocate: bool, seals: libc::c_int) -> OwnedFd {
    let fd = memfd_create().unwrap();
    let f = File::from(fd);
    f.set_len(len as u64).unwrap();
    if allocate {
        // SAFETY: plain syscall on our fd.
        assert_eq!(
            unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len as libc::off_t) },
            0
        );
    }
    use std::os::unix::fs::FileExt;
    f.write_all_at(content, 0).unwrap();
    if seals != 0 {
        // SAFETY: F_ADD_SEALS with valid bits on our fd.
        assert_eq!(
            unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, seals) },
            0
        );
    }
    OwnedFd::from(f)
}

/// The first `n` bytes of a real ring's memfd.
fn ring_bytes(p: &Producer, n: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = File::from(dup(p.fd().unwrap()));
    let mut v = vec![0u8; n];
    f.read_exact_at(&mut v, 0).unwrap();
    v
}

#[test]
fn memfd_round_trip_sealed() {
    let (mut p, c) = memfd_pair(CS, 4);
    let fd = p.fd().unwrap();
    let seals = seals_of(fd);
    assert_eq!(
        seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL),
        libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL
    );
    assert_eq!(
        p.proc_path().unwrap(),
        format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd())
    );
    // No name anywhere: the link shows the memfd's name.
    let target = std::fs::read_link(p.proc_path().unwrap()).unwrap();
    assert!(
        target.to_string_lossy().starts_with("/memfd:cannoli-ring"),
        "{target:?}"
    );
    assert!(p.consumer_attached());
    assert_eq!((c.chunk_size(), c.chunk_count()), (CS, 4));
    for seq in 0..3 {
        publish(&mut p, seq, 8 + seq as usize);
    }
    // The producer keeps working once its fd is closed.
    p.release_fd();
    p.release_fd();
    assert!(p.fd().is_none() && p.proc_path().is_none());
    publish(&mut p, 3, 100);
    p.close();
    for seq in 0..4 {
        let ch = c.recv().unwrap();
        assert_eq!(ch.seq(), seq);
        assert!(!ch.is_refused());
        assert_eq!(ch.len(), if seq < 3 { 8 + seq as usize } else { 100 });
        assert_eq!(ch.copy().bytes()[..8], seq.to_le_bytes());
    }
    assert!(c.recv().is_none());
    assert!(c.is_finished());
    assert_eq!(c.refused_chunks(), 0);
    assert!(c.violation().is_none());
}

#[test]
fn a_hostile_producer_cannot_resize_a_sealed_ring() {
    let (p, c) = memfd_pair(CS, 2);
    let len = Producer::mapped_len(CS, 2).unwrap() as u64;
    // Through its own fd and through a fresh open of it.
    let again = File::options()
        .read(true)
        .write(true)
        .open(p.proc_path().unwrap())
        .unwrap();
    for f in [File::from(dup(p.fd().unwrap())), again] {
        for size in [0, 4096, len - 1, len + 4096] {
            let e = f.set_len(size).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EPERM), "set_len({size}): {e}");
        }
        // Punching a hole is allowed by these seals (only a write seal would
        // stop it), but it is harmless: the size stays, so a later access
        // reads fresh zero pages instead of faulting.
        // SAFETY: plain syscall on our fd.
        let rc = unsafe {
            libc::fallocate(
                f.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                0,
                len as libc::off_t,
            )
        };
        assert_eq!(rc, 0);
        // No seal can be removed or added.
        // SAFETY: F_ADD_SEALS with valid bits on our fd.
        let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_WRITE) };
        assert_eq!(rc, -1);
        assert_eq!(f.metadata().unwrap().len(), len);
    }
    // The consumer reads the punched chunk as zeros, without a fault.
    let mut p = p;
    let buf = p.acquire_slice().unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    p.publish(CS).unwrap();
    let ch = c.recv().unwrap();
    assert!(ch.copy().bytes().iter().all(|&b| b == 0) && ch.len() == CS);
}

#[test]
fn unsealed_unallocated_and_other_fds_are_refused() {
    let p = Producer::create_memfd(CS, 2).unwrap();
    let len = Producer::mapped_len(CS, 2).unwrap();
    let header = ring_bytes(&p, HEADER_SIZE);
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    // A valid header in an unsealed memfd, or one sealed against one
    // direction only.
    refused_with(
        Consumer::from_fd(raw_memfd(&header, len, true, 0)),
        "not sealed against shrinking and growing;",
    );
    refused_with(
        Consumer::from_fd(raw_memfd(&header, len, true, libc::F_SEAL_GROW)),
        "not sealed",
    );
    // Sealed but with holes: mapping it would allocate here.
    refused_with(
        Consumer::from_fd(raw_memfd(&header, len, false, seals)),
        "allocated",
    );
    // A regular file (no seals possible) and a pipe.
    let tmp = std::env::temp_dir().join(format!("mempipe-notmemfd-{}", std::process::id()));
    std::fs::write(&tmp, &header).unwrap();
    let f = File::options().read(true).write(true).open(&tmp).unwrap();
    std::fs::remove_file(&tmp).unwrap();
    refused_with(Consumer::from_fd(OwnedFd::from(f)), "(not a memfd)");
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two-element array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both fds are new and ours.
    let (r, _w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    refused_with(Consumer::from_fd(r), "not a regular file");
    // A sealed, allocated memfd whose size does not match its header, and
    // one whose header is junk: BadHeader, which never shows the bytes.
    match Consumer::from_fd(raw_memfd(&header, len + 4096, true, seals)) {
        Err(e @ Error::BadHeader(_)) => assert!(e.to_string().contains("truncated or extended")),
        other => panic!("{other:?}"),
    }
    let junk = b"\x1b[31mEVIL\x07not a ring at all".repeat(100);
    match Consumer::from_fd(raw_memfd(&junk, len, true, seals)) {
        Err(e @ Error::BadHeader(_)) => {
            let s = e.to_string();
            assert!(
                s.contains("magic") && !s.contains("EVIL") && !s.contains('\x1b'),
                "{s}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A header claiming a ring larger than MAX_RING_LEN is refused before
    // anything is mapped.
    let mut huge = header.clone();
    let cc = (MAX_RING_LEN / CS) as u64 * 2;
    huge[32..40].copy_from_slice(&cc.to_ne_bytes());
    match Consumer::from_fd(raw_memfd(&huge, len, true, seals)) {
        Err(e @ Error::BadHeader(_)) => assert!(e.to_string().contains("too large"), "{e}"),
        other => panic!("{other:?}"),
    }
    // None of this attached to the real ring.
    assert!(!p.consumer_attached());
}

#[test]
fn header_validation_errors() {
    let p = Producer::create_memfd(CS, 4).unwrap();
    let len = Producer::mapped_len(CS, 4).unwrap();
    let header = ring_bytes(&p, HEADER_SIZE);
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    let expect_bad_header = |content: &[u8], len: usize, needle: &str| match Consumer::from_fd(
        raw_memfd(content, len, true, seals),
    ) {
        Err(e @ Error::BadHeader(_)) => {
            let s = e.to_string();
            assert!(s.contains(needle), "{s}");
            assert!(!s.contains('\n'));
        }
        other => panic!("expected BadHeader containing {needle:?}, got {other:?}"),
    };
    let patched = |off: usize, bytes: &[u8]| {
        let mut h = header.clone();
        h[off..off + bytes.len()].copy_from_slice(bytes);
        h
    };
    // Not a ring at all.
    expect_bad_header(&[0xAB; 3 * 4096], 3 * 4096, "magic");
    // Too short.
    expect_bad_header(b"MEMPIPE1", 8, "smaller than");
    // Wrong version.
    expect_bad_header(&patched(8, &7u32.to_ne_bytes()), len, "version 7");
    // Corrupt chunk_count (not a power of two).
    expect_bad_header(&patched(32, &3u64.to_ne_bytes()), len, "power of two");
    // Corrupt chunk_size (data_offset/file_len no longer match).
    expect_bad_header(
        &patched(24, &(2 * CS as u64).to_ne_bytes()),
        len,
        "corrupted",
    );
    // None of this attached to the real ring.
    assert!(!p.consumer_attached());
}

#[test]
fn open_proc_of_our_own_fd() {
    let mut p = Producer::create_memfd(CS, 2).unwrap();
    let fd = p.fd().unwrap().as_raw_fd();
    let pid = std::process::id() as i32;
    let c = Consumer::open_proc(pid, fd).unwrap();
    assert_eq!(c.producer_pid(), pid as u32);
    publish(&mut p, 0, 64);
    let ch = c.recv().unwrap();
    assert_eq!((ch.seq(), ch.len()), (0, 64));
    drop(ch);
    // A second consumer is refused by the attach protocol.
    match Consumer::open_proc(pid, fd) {
        Err(Error::AlreadyOpened { pid: who }) => assert_eq!(who, pid as u32),
        other => panic!("{other:?}"),
    }
    for (pid, fd) in [(0, fd), (-1, fd), (pid, -1)] {
        refused_with(Consumer::open_proc(pid, fd), "cannot name a ring");
    }
    // An fd that is not open: one line, saying why that happens.
    match Consumer::open_proc(pid, 1 << 20) {
        Err(e @ Error::Io(_)) => {
            let s = e.to_string();
            assert!(s.contains("exited or closed the fd"), "{s}");
            assert!(!s.contains('\n'));
        }
        other => panic!("{other:?}"),
    }
    // stdin or a pipe through /proc: refused, without blocking.
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two-element array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both fds are new and ours.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    refused_with(
        Consumer::open_proc(pid, r.as_raw_fd()),
        "not a regular file",
    );
    drop((r, w));
    // A device behind the fd is only looked at, never opened.
    let null = File::open("/dev/null").unwrap();
    refused_with(
        Consumer::open_proc(pid, null.as_raw_fd()),
        "not a regular file",
    );
}

#[test]
fn memfd_moves_to_the_fd_floor_and_maps_where_asked() {
    // A floor well above the fds in use, below the usual limit of 1024.
    let floor = 700;
    let p = unsafe { Producer::create_memfd_at(CS, 2, None, floor) }.unwrap();
    let fd = p.fd().unwrap().as_raw_fd();
    assert!(fd >= floor, "fd {fd}");
    // SAFETY: F_GETFD on a live fd.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
    // A second one takes the next fd up.
    let q = unsafe { Producer::create_memfd_at(CS, 2, None, floor) }.unwrap();
    assert!(q.fd().unwrap().as_raw_fd() > floor);
    // A floor above the fd limit: the memfd stays where it was made.
    let r = unsafe { Producer::create_memfd_at(CS, 2, None, i32::MAX) }.unwrap();
    assert!(r.fd().unwrap().as_raw_fd() < floor);

    // Placement in a reserved range, as the jitter's arena does.
    let len = Producer::mapped_len(CS, 2).unwrap();
    let res = crate::mapping::reserve_for_test(len);
    // SAFETY: `res` is our reservation of `len` bytes.
    let mut p = unsafe { Producer::create_memfd_at(CS, 2, Some(res as usize), 0) }.unwrap();
    let ptr = p.acquire().unwrap();
    assert_eq!(ptr as usize, res as usize + HEADER_SIZE + PAGE_SIZE);
    let c = Consumer::from_fd(dup(p.fd().unwrap())).unwrap();
    p.publish(16).unwrap();
    assert_eq!(c.recv().unwrap().len(), 16);
    drop((p, c));
    // SAFETY: still our reservation (the producer re-reserved it).
    unsafe { libc::munmap(res, len) };
    // Address 0 is refused.
    match unsafe { Producer::create_memfd_at(CS, 2, Some(0), 0) } {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("is 0")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn forget_in_forked_child_leaves_the_parents_ring_alone() {
    let (mut p, c) = memfd_pair(CS, 4);
    publish(&mut p, 0, 8);
    let fd = p.fd().unwrap().as_raw_fd();
    let chunk = p.acquire().unwrap() as usize;
    // SAFETY: the child only makes system calls and closes an fd (no
    // allocation, no locks), then _exits.
    let child = unsafe { libc::fork() };
    assert!(child >= 0);
    if child == 0 {
        // The child's copy of the parent's producer (what a forked QEMU
        // thread inherits).
        let mine: Producer = unsafe { std::ptr::read(&p) };
        mine.forget_in_forked_child();
        // Its fd is closed, its mapping still there.
        // SAFETY: F_GETFD on a number; failure is the expected answer.
        let fd_gone = unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1;
        // SAFETY: reading a byte of the still mapped chunk.
        let mapped = unsafe { std::ptr::read_volatile(chunk as *const u8) } == 0;
        let code = if fd_gone && mapped { 0 } else { 1 };
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{status:#x}"
    );
    // The ring is not closed; the parent's fd is still open; it keeps
    // publishing and the consumer sees everything.
    assert!(!c.closed_by_producer());
    assert!(seals_of(p.fd().unwrap()) >= 0);
    assert_eq!(p.publish(8).unwrap(), 1);
    let prod = thread::spawn(move || {
        for seq in 2..50 {
            publish(&mut p, seq, 8);
        }
    });
    let mut seqs = Vec::new();
    while seqs.len() < 50 {
        let ch = c.recv().unwrap();
        if ch.seq() != 1 {
            assert_eq!(ch.copy().bytes()[..8], ch.seq().to_le_bytes());
        }
        seqs.push(ch.seq());
    }
    prod.join().unwrap(); // dropped: closes
    assert!(c.recv().is_none());
    assert_eq!(seqs, (0..50).collect::<Vec<_>>());
}

// ---------------------------------------------------------------------------
// A hostile producer
// ---------------------------------------------------------------------------

/// The producer's view of the shared memory, to scribble on.
fn hdr(p: &Producer) -> &Header {
    p.ring.header()
}

fn expect_refused(c: &Consumer, seq: u64, v: Violation) {
    let ch = c.recv().expect("the refused chunk is handed out");
    assert_eq!(ch.seq(), seq);
    assert!(ch.is_refused() && ch.is_empty() && ch.copy().bytes().is_empty());
    drop(ch);
    assert_eq!(c.violation(), Some(v));
    assert_eq!(c.refused_chunks(), 1);
    let s = v.to_string();
    assert!(s.starts_with("mempipe: ") && !s.contains('\n'), "{s}");
    // The stream ends there, whatever else is published.
    assert!(c.recv().is_none());
    assert!(c.try_recv().is_none());
    assert!(c.is_finished());
    assert_eq!(c.backlog(), 0);
}

#[test]
fn published_beyond_what_was_written_is_refused() {
    let (mut p, c) = memfd_pair(CS, 4);
    publish(&mut p, 0, 8);
    hdr(&p).producer.published.store(u64::MAX, Ordering::SeqCst);
    assert_eq!(c.backlog(), 4, "backlog is bounded by the ring");
    assert_eq!(c.recv().unwrap().seq(), 0);
    expect_refused(&c, 1, Violation::SlotNotFull { seq: 1 });
    // The producer is told: it does not wait for a slot forever.
    assert!(matches!(p.acquire(), Err(Error::ConsumerGone)));
}

#[test]
fn a_slot_holding_another_seq_is_refused() {
    let (mut p, c) = memfd_pair(CS, 4);
    for seq in 0..3 {
        publish(&mut p, seq, 8);
    }
    // Published twice: slot 1 claims to hold seq 5.
    p.ring.slot(1).seq.store(5, Ordering::SeqCst);
    assert_eq!(c.recv().unwrap().seq(), 0);
    expect_refused(&c, 1, Violation::WrongSeq { seq: 1, found: 5 });
    // The refused chunk did not touch its slot.
    assert_eq!(p.ring.slot(1).state.load(Ordering::SeqCst), SLOT_FULL);
}

#[test]
fn a_length_beyond_the_chunk_is_refused() {
    let (mut p, c) = memfd_pair(CS, 2);
    publish(&mut p, 0, 8);
    p.ring.slot(0).len.store(CS as u64 + 1, Ordering::SeqCst);
    expect_refused(
        &c,
        0,
        Violation::TooLong {
            seq: 0,
            len: CS as u64 + 1,
            chunk_size: CS,
        },
    );
}

#[test]
fn published_going_backwards_then_abandon() {
    let (mut p, c) = memfd_pair(CS, 4);
    for seq in 0..3 {
        publish(&mut p, seq, 8);
    }
    assert_eq!(c.recv().unwrap().seq(), 0);
    hdr(&p).producer.published.store(0, Ordering::SeqCst);
    assert!(c.try_recv().is_none());
    assert_eq!(c.backlog(), 0);
    assert!(!c.is_finished());
    // The control channel says the producer is gone: recv ends at once.
    c.abandon();
    assert!(c.recv().is_none());
    assert!(c.is_finished());
    // A producer scribbling `published` up again after that changes nothing.
    hdr(&p).producer.published.store(3, Ordering::SeqCst);
    assert!(c.recv().is_none());
    assert_eq!(c.refused_chunks(), 0);
}

#[test]
fn nothing_beyond_the_end_seen_at_close() {
    let (mut p, c) = memfd_pair(CS, 4);
    publish(&mut p, 0, 8);
    p.close();
    assert!(!c.is_finished());
    assert_eq!(c.recv().unwrap().seq(), 0);
    assert!(c.recv().is_none());
    // After the close was seen, "more" chunks (validly laid out, even) are
    // not handed out.
    let slot = p.ring.slot(1);
    slot.seq.store(1, Ordering::SeqCst);
    slot.state.store(SLOT_FULL, Ordering::SeqCst);
    hdr(&p).producer.published.store(2, Ordering::SeqCst);
    assert!(c.recv().is_none() && c.is_finished());
}

#[test]
fn scribbled_consumer_fields_change_nothing() {
    let (mut p, c) = memfd_pair(CS, 4);
    for seq in 0..2 {
        publish(&mut p, seq, 8);
    }
    let h = hdr(&p);
    h.consumer.claimed.store(u64::MAX, Ordering::SeqCst);
    h.ident.consumer_pid.store(1, Ordering::SeqCst);
    h.wait.sleepers.store(u32::MAX, Ordering::SeqCst);
    h.wait.wake.store(12345, Ordering::SeqCst);
    // Geometry scribbled after the consumer attached: it kept its copy.
    // SAFETY: a plain write into the shared header, as a hostile producer
    // would make it (nothing reads these fields through a reference).
    unsafe {
        let base = p.ring.map.as_mut_ptr();
        (base.add(32) as *mut u64).write_volatile(1 << 40); // chunk_count
        (base.add(24) as *mut u64).write_volatile(u64::MAX); // chunk_size
    }
    assert_eq!(c.chunk_count(), 4);
    let seqs: Vec<u64> = (0..2).map(|_| c.recv().unwrap().seq()).collect();
    assert_eq!(seqs, [0, 1]);
    h.consumer.claimed.store(0, Ordering::SeqCst);
    publish(&mut p, 2, 8);
    let h = hdr(&p);
    assert_eq!(c.recv().unwrap().seq(), 2, "never seq 0 twice");
    // A sleeping consumer still wakes up (bounded futex slices) despite the
    // scribbled wake word, and ends at abandon.
    thread::scope(|s| {
        let t = s.spawn(|| c.recv().map(|ch| ch.seq()));
        thread::sleep(Duration::from_millis(50));
        h.wait.wake.store(0, Ordering::SeqCst);
        c.abandon();
        assert_eq!(t.join().unwrap(), None);
    });
}

#[test]
fn sequence_numbers_stay_dense_across_threads_when_a_slot_is_refused() {
    // Several threads claim concurrently; one slot is broken. Every seq up
    // to and including the refused one is handed out exactly once, and
    // nothing after it.
    for round in 0..20u64 {
        let (mut p, c) = memfd_pair(CS, 8);
        let bad = round % 8;
        for seq in 0..8 {
            publish(&mut p, seq, 8);
        }
        p.ring.slot(bad as usize).seq.store(99, Ordering::SeqCst);
        let mut all: Vec<(u64, bool)> = thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|_| {
                    s.spawn(|| {
                        let mut v = Vec::new();
                        while let Some(ch) = c.try_recv() {
                            v.push((ch.seq(), ch.is_refused()));
                        }
                        v
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        all.sort_unstable();
        let seqs: Vec<u64> = all.iter().map(|x| x.0).collect();
        assert_eq!(seqs, (0..=bad).collect::<Vec<_>>(), "round {round}");
        assert_eq!(all.iter().filter(|x| x.1).count(), 1);
        assert!(
            all.last().unwrap().1,
            "the last one handed out is the refused one"
        );
        assert_eq!(c.refused_chunks(), 1);
        assert!(c.is_finished());
        drop(p);
    }
}

#[test]
fn violations_display_one_line() {
    for v in [
        Violation::SlotNotFull { seq: 3 },
        Violation::WrongSeq { seq: 3, found: 9 },
        Violation::TooLong {
            seq: 3,
            len: 1 << 40,
            chunk_size: 4096,
        },
    ] {
        let s = v.to_string();
        assert!(s.starts_with("mempipe: ") && !s.contains('\n'), "{s}");
        assert!(s.contains("chunk 3"), "{s}");
        assert_eq!(v.seq(), 3);
    }
    let e = Error::Refused("x".into()).to_string();
    assert!(e.starts_with("mempipe: refused the ring: "));
}

#[test]
fn a_chunk_is_copied_exactly_into_private_memory() {
    let (mut p, c) = memfd_pair(CS, 4);
    // Lengths of no whole word, one word, a whole chunk, and nothing.
    let lens = [13usize, 8, CS, 0];
    for (seq, &len) in lens.iter().enumerate() {
        let buf = p.acquire_slice().unwrap();
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(7).wrapping_add(seq as u8);
        }
        p.publish(len).unwrap();
    }
    p.close();
    let mut copy = crate::ChunkBuf::new();
    for (seq, &len) in lens.iter().enumerate() {
        let ch = c.recv().unwrap();
        ch.copy_into(&mut copy);
        // The slot goes back at once; the copy stays.
        drop(ch);
        assert_eq!(copy.len(), len);
        let want: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seq as u8))
            .collect();
        assert_eq!(copy.bytes(), &want[..], "chunk {seq}");
        // Aligned for the decoder's in-place word view.
        assert_eq!(copy.bytes().as_ptr() as usize % 8, 0);
    }
    assert!(c.recv().is_none());
}
