// SPDX-License-Identifier: GPL-2.0-or-later
//! Damaged recordings that aim at the reader's memory, replayed in a child
//! process whose address space is limited (`RLIMIT_AS`, [`LIMIT`]): each
//! must open and replay, or give its one-line error, without a crash (an
//! allocation the limit refuses aborts the process), a hang or more memory
//! than the limit. The bounds they aim at (`cannoli/src/recording/`):
//!
//! | case | aims at | without the bound |
//! |---|---|---|
//! | `index-overlap` | index segments that overlap each other | every segment read whole: thousands of copies of the file |
//! | `meta-frame` | one stream start that decompresses to 64 MiB | a 64 MiB hello kept per stream |
//! | `meta-total` | stream starts of 500 KiB each, over the metadata budget | all of them kept |
//! | `tables` | six processes' block tables of 4 Mi entries each, their streams interleaved | every table kept at once |
//!
//! `cannoli-fuzz open-replay FILE` is the child; [`check`] runs it and
//! judges what it did. `fuzz/tests/recording_bounds.rs` runs every case,
//! and the `recording` corpus, that way.

use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cannoli::recording::format::{
    file_header, Codec, FrameHeader, IndexEntry, Kind, TRAILER_MAGIC,
};

/// The child's address space limit: room for what the reader may keep
/// (512 MiB of metadata, one live-sized block table and its cache) and for
/// its threads, but not for what any case would take without its bound.
pub const LIMIT: u64 = 2 << 30;

/// Longest a child may take: a hang guard, not a speed requirement.
pub const HANG_GUARD: Duration = Duration::from_secs(600);

/// What the child's exit status means.
pub const COMPLETE: i32 = 0;
pub const FAILED_TO_OPEN: i32 = 1;
pub const INCOMPLETE: i32 = 3;

/// A recording laid out frame by frame, with an index and a trailer.
struct File {
    buf: Vec<u8>,
    index: Vec<IndexEntry>,
}

impl File {
    fn new() -> File {
        File {
            buf: file_header().to_vec(),
            index: Vec::new(),
        }
    }

    /// Appends a frame of `raw` bytes, zstd-compressed if `zstd`.
    fn frame(&mut self, kind: Kind, stream: u32, seq: u64, raw: &[u8], zstd: bool) {
        let stored = if zstd {
            zstd::bulk::compress(raw, 3).expect("zstd compresses")
        } else {
            raw.to_vec()
        };
        self.frame_stored(kind, stream, seq, &stored, raw.len(), zstd);
    }

    fn frame_stored(
        &mut self,
        kind: Kind,
        stream: u32,
        seq: u64,
        stored: &[u8],
        raw_len: usize,
        zstd: bool,
    ) {
        let codec = if zstd { Codec::Zstd } else { Codec::Stored };
        let h = FrameHeader {
            kind,
            codec,
            stream,
            seq,
            stored_len: stored.len() as u32,
            raw_len: raw_len as u32,
            crc: crc32fast::hash(stored),
        };
        self.index.push(IndexEntry {
            offset: self.buf.len() as u64,
            kind,
            codec,
            stream,
            seq,
            stored_len: h.stored_len,
            raw_len: h.raw_len,
        });
        self.buf.extend_from_slice(&h.encode());
        self.buf.extend_from_slice(stored);
    }

    fn json(&mut self, kind: Kind, stream: u32, v: &serde_json::Value) {
        self.frame(kind, stream, 0, v.to_string().as_bytes(), false);
    }

    /// The index (one segment) and the trailer.
    fn finish(mut self) -> Vec<u8> {
        let at = self.buf.len() as u64;
        let mut p = 0u64.to_le_bytes().to_vec();
        for e in &self.index {
            e.encode(&mut p);
        }
        let index = std::mem::take(&mut self.index);
        self.frame(Kind::Index, 0, 0, &p, false);
        self.index = index;
        self.buf.extend_from_slice(&at.to_le_bytes());
        self.buf.extend_from_slice(&TRAILER_MAGIC);
        self.buf
    }
}

fn info() -> serde_json::Value {
    serde_json::json!({
        "writer": "bounds", "hooks": cannoli::recording::Hooks::preset("pc"),
        "command": ["prog"], "guest": "mipsel", "started_unix_ns": 1
    })
}

/// A hello line of thread `tid` of process `pid`.
fn hello(pid: i32, tid: i32) -> String {
    serde_json::json!({
        "magic": cannoli::wire::MAGIC, "wire_version": cannoli::wire::WIRE_VERSION,
        "jitter_version": "bounds", "pid": pid, "ppid": 1, "tid": tid, "arch": "mipsel",
        "big_endian": false, "guest_bits": 32, "ring": "attached", "nonce": "", "proof": "",
        "comm": null, "exe": null
    })
    .to_string()
}

/// A whole stream: its start, one chunk of exec events, its end.
fn stream(f: &mut File, number: u32, process: u32, pid: i32, tid: i32) {
    f.json(
        Kind::Stream,
        number,
        &serde_json::json!({"process": process, "start_ns": 1, "hello": hello(pid, tid)}),
    );
    let chunk: Vec<u8> = (0..64u64)
        .flat_map(|i| (0x1000 + 4 * i).to_le_bytes())
        .collect();
    f.frame(Kind::Chunk, number, 0, &chunk, true);
    f.json(
        Kind::End,
        number,
        &serde_json::json!({
            "goodbye": {"chunks": 1, "lost_events": 0, "exec": false},
            "published": 1, "violation": null, "written": 1, "end_ns": 2
        }),
    );
}

fn exit(f: &mut File) {
    f.json(
        Kind::Exit,
        0,
        &serde_json::json!({
            "status": 0, "refused_connections": 0, "missing_processes": 0,
            "strangers": 0, "end_ns": 3
        }),
    );
}

/// A stream start whose hello is `len` bytes of `a` (a JSON string).
fn fat_start(len: usize) -> Vec<u8> {
    let mut v = br#"{"process":0,"start_ns":1,"hello":""#.to_vec();
    v.resize(v.len() + len, b'a');
    v.extend_from_slice(br#""}"#);
    v
}

/// The damaged recordings, by name.
pub fn cases() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("index-overlap", index_overlap()),
        ("meta-frame", meta_frame()),
        ("meta-total", meta_total()),
        ("tables", tables()),
    ]
}

/// A whole recording followed by 4096 index segments, each starting 64
/// bytes after the one before and all running to the same end (4 MiB),
/// chained by the trailer: checksums right, so only their overlap is
/// wrong.
fn index_overlap() -> Vec<u8> {
    let mut f = File::new();
    f.json(Kind::Info, 0, &info());
    stream(&mut f, 0, 0, 10, 10);
    exit(&mut f);
    let mut buf = f.buf;
    const K: usize = 4096;
    const REGION: usize = (4 << 20) + 8; // payloads: 8 + a multiple of 32
    let base = buf.len();
    buf.resize(base + REGION, 0);
    let end = base + REGION;
    // From the last segment down: each one's payload holds the headers of
    // those above it, which are final by then.
    for k in (0..K).rev() {
        let at = base + 64 * k;
        let prev = if k == 0 { 0 } else { (at - 64) as u64 };
        buf[at + 32..at + 40].copy_from_slice(&prev.to_le_bytes());
        let payload = &buf[at + 32..end];
        let h = FrameHeader {
            kind: Kind::Index,
            codec: Codec::Stored,
            stream: 0,
            seq: 0,
            stored_len: payload.len() as u32,
            raw_len: payload.len() as u32,
            crc: crc32fast::hash(payload),
        };
        buf[at..at + 32].copy_from_slice(&h.encode());
    }
    buf.extend_from_slice(&((base + 64 * (K - 1)) as u64).to_le_bytes());
    buf.extend_from_slice(&TRAILER_MAGIC);
    buf
}

/// 40 stream starts of 64 MiB each once decompressed (a few KiB stored).
fn meta_frame() -> Vec<u8> {
    let mut f = File::new();
    f.json(Kind::Info, 0, &info());
    let raw = fat_start((64 << 20) - 64);
    let stored = zstd::bulk::compress(&raw, 3).expect("zstd compresses");
    for n in 0..40 {
        f.frame_stored(Kind::Stream, n, 0, &stored, raw.len(), true);
    }
    exit(&mut f);
    f.finish()
}

/// 1100 stream starts of 500 KiB each once decompressed: each one within
/// a stream start's bound, together over the metadata budget.
fn meta_total() -> Vec<u8> {
    let mut f = File::new();
    f.json(Kind::Info, 0, &info());
    let raw = fat_start(500 << 10);
    let stored = zstd::bulk::compress(&raw, 3).expect("zstd compresses");
    for n in 0..1100 {
        f.frame_stored(Kind::Stream, n, 0, &stored, raw.len(), true);
    }
    exit(&mut f);
    f.finish()
}

/// Six processes, each with a block table of 4 Mi one-instruction entries
/// (two frames of 48 MiB decompressed, a few KiB stored), and two streams
/// each, interleaved: every table is needed from its process's first
/// stream to its last.
fn tables() -> Vec<u8> {
    let mut f = File::new();
    f.json(Kind::Info, 0, &info());
    let half: usize = 1 << 21; // entries per frame
    let words: Vec<u8> = (0..half)
        .flat_map(|_| [1u64, 0x1000, 1])
        .flat_map(u64::to_le_bytes)
        .collect();
    let stored = zstd::bulk::compress(&words, 3).expect("zstd compresses");
    for p in 0..6u32 {
        f.frame_stored(Kind::Table, p, 0, &stored, words.len(), true);
        f.frame_stored(Kind::Table, p, half as u64, &stored, words.len(), true);
    }
    let mut n = 0;
    for round in 0..2 {
        for p in 0..6u32 {
            stream(&mut f, n, p, 100 + p as i32, 1 + 1000 * round + p as i32);
            n += 1;
        }
    }
    exit(&mut f);
    f.finish()
}

/// Runs `exe open-replay file` with its address space limited to
/// [`LIMIT`] and judges the outcome: `Ok(status)` (one of [`COMPLETE`],
/// [`FAILED_TO_OPEN`], [`INCOMPLETE`]) if it behaved, else what went
/// wrong.
pub fn check(exe: &Path, file: &Path) -> Result<i32, String> {
    let mut cmd = Command::new(exe);
    cmd.arg("open-replay")
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only setrlimit between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: LIMIT,
                rlim_max: LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let mut stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            break st;
        }
        if start.elapsed() > HANG_GUARD {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {HANG_GUARD:?}: a hang"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = reader.join().unwrap_or_default();
    let shown = file.display().to_string();
    let lines: Vec<&str> = err.lines().collect();
    let printable = |l: &str| !l.chars().any(char::is_control);
    match (status.code(), status.signal()) {
        (None, Some(sig)) => Err(format!(
            "died of signal {sig} (an abort is an allocation the {} GiB limit refused); stderr:\n{}",
            LIMIT >> 30,
            tail(&err)
        )),
        (Some(FAILED_TO_OPEN), _) => {
            if lines.len() == 1 && lines[0].starts_with(&shown) && printable(lines[0]) {
                Ok(FAILED_TO_OPEN)
            } else {
                Err(format!(
                    "an error must be one printable line naming the file; got:\n{}",
                    tail(&err)
                ))
            }
        }
        (Some(COMPLETE), _) => Ok(COMPLETE),
        (Some(INCOMPLETE), _) => {
            // The loss is stated, each line one printable line of its own.
            if !lines.is_empty() && lines.iter().all(|l| l.starts_with("cannoli: ") && printable(l))
            {
                Ok(INCOMPLETE)
            } else {
                Err(format!(
                    "an incomplete replay must say what it lost, in lines of its own; got:\n{}",
                    tail(&err)
                ))
            }
        }
        (code, _) => Err(format!("exited with {code:?}; stderr:\n{}", tail(&err))),
    }
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The child: opens and replays `file` (stderr: what the replay says; an
/// error is its one line), exits [`COMPLETE`], [`INCOMPLETE`] or
/// [`FAILED_TO_OPEN`].
pub fn open_replay(file: &Path) -> i32 {
    match cannoli::fuzzing::replay_recording(file) {
        Ok((_, true)) => COMPLETE,
        Ok((_, false)) => INCOMPLETE,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "{e}");
            FAILED_TO_OPEN
        }
    }
}
