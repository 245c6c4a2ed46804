//! Tests with the producer and the consumer in different processes. The test
//! binary re-executes itself (running only `child_entry`, with
//! `MEMPIPE_TEST_CHILD` naming the role) to get the second process. The
//! rings are memfds: the consumer opens `/proc/<pid>/fd/<fd>` of the
//! producer, as the real client does.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use std::os::fd::AsRawFd;

use mempipe::{Consumer, Error, Producer};

const ROLE_ENV: &str = "MEMPIPE_TEST_CHILD";
/// `<pid> <fd>` of the producer's memfd, for a consumer child.
const RING_ENV: &str = "MEMPIPE_TEST_RING";
const COUNT_ENV: &str = "MEMPIPE_TEST_COUNT";
const CHUNK_SIZE: usize = 16 * 1024;
const CHUNKS: u64 = 2000;

fn pattern_len(seq: u64) -> usize {
    // Multiple of 8 between 8 and CHUNK_SIZE, varying with seq.
    8 * (1 + (seq.wrapping_mul(2_654_435_761) % (CHUNK_SIZE as u64 / 8)) as usize)
}

fn word(seq: u64, i: usize) -> u64 {
    let mut x =
        seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    x ^= x >> 29;
    x
}

fn fill(seq: u64, buf: &mut [u8]) {
    for (i, w) in buf.chunks_exact_mut(8).enumerate() {
        let v = if i == 0 { seq } else { word(seq, i) };
        w.copy_from_slice(&v.to_le_bytes());
    }
}

fn verify(seq: u64, data: &[u8]) {
    assert_eq!(data.len(), pattern_len(seq), "length of seq {seq}");
    assert_eq!(data.as_ptr() as usize % 8, 0, "alignment of seq {seq}");
    for (i, w) in data.chunks_exact(8).enumerate() {
        let v = u64::from_le_bytes(w.try_into().unwrap());
        let want = if i == 0 { seq } else { word(seq, i) };
        assert_eq!(v, want, "word {i} of seq {seq}");
    }
}

/// Entry point of the child processes; a no-op in a normal test run.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    match role.as_str() {
        "producer" => {
            let n: u64 = std::env::var(COUNT_ENV).unwrap().parse().unwrap();
            let mut p = Producer::create_memfd(CHUNK_SIZE, 8).unwrap();
            let fd = p.fd().unwrap().as_raw_fd();
            println!("MEMPIPE_RING={} {fd}", std::process::id());
            std::io::stdout().flush().unwrap();
            for seq in 0..n {
                let Some(ptr) = p.acquire_timeout(Duration::from_secs(30)).unwrap() else {
                    panic!("child producer: consumer never drained seq {seq}");
                };
                let len = pattern_len(seq);
                // SAFETY: acquire returned chunk_size writable bytes, ours until publish.
                let buf = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
                fill(seq, buf);
                assert_eq!(p.publish(len).unwrap(), seq);
            }
            p.close();
        }
        "consumer" => {
            let (pid, fd) = parse_ring(&std::env::var(RING_ENV).unwrap());
            let c = Consumer::open_proc(pid, fd).unwrap();
            println!("OPENED");
            std::io::stdout().flush().unwrap();
            // Exit without reading, without running destructors: the producer
            // must notice through the pid check alone.
            std::mem::forget(c);
            std::process::exit(0);
        }
        other => panic!("unknown {ROLE_ENV}={other}"),
    }
}

fn parse_ring(s: &str) -> (i32, i32) {
    let (pid, fd) = s.split_once(' ').unwrap();
    (pid.parse().unwrap(), fd.parse().unwrap())
}

/// Starts this test binary as a child running only `child_entry`; returns it
/// and a channel that yields its stdout lines (the rest is drained).
fn spawn_child(role: &str, envs: &[(&str, String)]) -> (Child, mpsc::Receiver<String>) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, role)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

fn wait_line(rx: &mpsc::Receiver<String>, prefix: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                // libtest may print "test child_entry ... " before our output.
                if let Some(at) = line.find(prefix) {
                    return line[at + prefix.len()..].trim().to_owned();
                }
            }
            Err(e) => panic!("child never printed {prefix:?}: {e}"),
        }
    }
}

#[test]
fn two_process_stream_three_consumer_threads() {
    let (mut child, rx) = spawn_child("producer", &[(COUNT_ENV, CHUNKS.to_string())]);
    let (pid, fd) = parse_ring(&wait_line(&rx, "MEMPIPE_RING="));
    assert_eq!(pid as u32, child.id());
    let consumer = Consumer::open_proc(pid, fd).unwrap();
    assert_eq!(consumer.chunk_size(), CHUNK_SIZE);
    assert_eq!(consumer.producer_pid(), child.id());

    let seen = Mutex::new(vec![0u32; CHUNKS as usize]);
    let status = thread::scope(|s| {
        // Like the real client on control-socket EOF: once the producer
        // process is gone, drain and stop instead of waiting forever.
        let watchdog = s.spawn(|| {
            let status = child.wait().unwrap();
            consumer.abandon();
            status
        });
        for _ in 0..3 {
            s.spawn(|| {
                let mut mine = Vec::new();
                while let Some(ch) = consumer.recv() {
                    verify(ch.seq(), ch.copy().bytes());
                    mine.push(ch.seq());
                }
                assert!(
                    mine.windows(2).all(|w| w[0] < w[1]),
                    "claims must increase per thread"
                );
                let mut seen = seen.lock().unwrap();
                for s in mine {
                    seen[s as usize] += 1;
                }
            });
        }
        watchdog.join().unwrap()
    });
    assert!(status.success(), "child producer failed: {status}");
    assert!(consumer.closed_by_producer());
    assert_eq!(consumer.published(), CHUNKS);
    let seen = seen.into_inner().unwrap();
    let bad: Vec<_> = seen
        .iter()
        .enumerate()
        .filter(|(_, &n)| n != 1)
        .take(10)
        .collect();
    assert!(
        bad.is_empty(),
        "seqs not seen exactly once (seq, times): {bad:?}"
    );
}

#[test]
fn blocked_producer_sees_consumer_process_exit() {
    let mut p = Producer::create_memfd(4096, 2).unwrap();
    let ring = format!("{} {}", std::process::id(), p.fd().unwrap().as_raw_fd());
    let (mut child, rx) = spawn_child("consumer", &[(RING_ENV, ring)]);
    wait_line(&rx, "OPENED");
    assert!(p.consumer_attached());
    // The consumer has its own fd and mapping now; ours can go.
    p.release_fd();
    // Reap the child as soon as it exits: a zombie still exists for kill(pid, 0).
    let reaper = thread::spawn(move || child.wait().unwrap());
    for _ in 0..2 {
        p.acquire().unwrap();
        p.publish(8).unwrap();
    }
    // The consumer's death is noticed between wait slices: ConsumerGone,
    // not the timeout's Ok(None).
    match p.acquire_timeout(Duration::from_secs(120)) {
        Err(Error::ConsumerGone) => {}
        other => panic!("expected ConsumerGone, got {other:?}"),
    }
    assert!(reaper.join().unwrap().success());
}
