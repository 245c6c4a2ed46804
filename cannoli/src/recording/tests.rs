// SPDX-License-Identifier: GPL-2.0-or-later
//! A recording written by [`Writer`] and read back by [`Recording`] and
//! [`replay_with`], without QEMU: the round trip, and every way of damaging the
//! file (cut at every length, any byte flipped, another version) giving an
//! error or a replay that says what it lost, never a panic, and never a
//! "complete" replay of other events than were recorded.

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::format::FORMAT_VERSION;
use super::{replay_with, Hooks, Lacks, Needs, Recording, RegsAt};
use crate::{Cannoli, ClientInfo};

/// What one replay's test tool saw: (tid, pc) in trace order. Each replay
/// carries its own (tests run in parallel), as the run's state.
type Seen1 = Mutex<Vec<(i32, u64)>>;

/// Records every exec with its stream's tid into its replay's [`Seen1`].
struct ExecLog {
    tid: i32,
}

impl Cannoli for ExecLog {
    type Trace = u64;
    type TidContext = ();
    type PidContext = Arc<Seen1>;

    fn init_pid(ci: &ClientInfo) -> Arc<Arc<Seen1>> {
        Arc::new(ci.expect_state::<Seen1>())
    }

    fn init_tid(_: &Arc<Seen1>, ci: &ClientInfo) -> (ExecLog, ()) {
        (ExecLog { tid: ci.tid }, ())
    }

    fn exec(_: &Arc<Seen1>, _: &(), pc: u64, t: &mut Vec<u64>) {
        t.push(pc);
    }

    fn trace(&mut self, seen: &Arc<Seen1>, _: &(), t: &[u64]) {
        seen.lock()
            .unwrap()
            .extend(t.iter().map(|&pc| (self.tid, pc)));
    }
}

/// What [`replay_file`] saw: (tid, pc) in order, whether the replay was
/// complete, and the recorded status.
type Seen = (Vec<(i32, u64)>, bool, Option<i32>);

/// Replays `path`; `None` if it would not open.
fn replay_file(path: &Path) -> Option<Seen> {
    let key = path.display().to_string();
    let seen = Arc::new(Seen1::default());
    let r = match replay_with::<ExecLog>(path, 2, seen.clone()) {
        Ok(r) => r,
        Err(e) => {
            let line = e.to_string();
            assert!(!line.contains('\n'), "one line: {line}");
            assert!(line.starts_with(&key), "names the file: {line}");
            return None;
        }
    };
    let mine = std::mem::take(&mut *seen.lock().unwrap());
    Some((mine, r.stats.is_complete(), r.status))
}

fn temp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("cannoli-rec-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn a_recording_replays_every_stream_in_order_with_its_status() {
    let path = temp("whole.cnl");
    let expect = crate::fuzzing::write_sample_recording(&path);
    let (seen, complete, status) = replay_file(&path).unwrap();
    assert!(complete);
    assert_eq!(status, Some(7));
    assert_eq!(seen, expect);
    let rec = Recording::open(&path).unwrap();
    assert_eq!(rec.streams().len(), 2);
    assert!(rec.cut().is_none(), "{:?}", rec.cut());
    assert_eq!(rec.hooks().preset, "pc");
    let seqs: Vec<u64> = rec.streams()[0].chunks.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, [0, 1, 2]);
}

#[test]
fn a_cut_recording_replays_what_it_holds_and_says_so() {
    let path = temp("cut-src.cnl");
    let expect = crate::fuzzing::write_sample_recording(&path);
    let bytes = std::fs::read(&path).unwrap();
    let cut = temp("cut.cnl");
    let mut complete_at = None;
    for len in 0..bytes.len() {
        std::fs::write(&cut, &bytes[..len]).unwrap();
        let Some((seen, complete, status)) = replay_file(&cut) else {
            continue;
        };
        // Whatever arrives is a prefix of each stream's pcs.
        for tid in [10, 11] {
            let got: Vec<u64> = seen.iter().filter(|s| s.0 == tid).map(|s| s.1).collect();
            let all: Vec<u64> = expect.iter().filter(|s| s.0 == tid).map(|s| s.1).collect();
            assert!(all.starts_with(&got), "cut at {len}: tid {tid}");
        }
        if complete {
            // Only once everything but the index is there.
            assert_eq!(seen, expect, "cut at {len}");
            assert_eq!(status, Some(7));
            complete_at.get_or_insert(len);
        }
    }
    // Losing only the index loses nothing; anything before the exit frame
    // is incomplete.
    let first = complete_at.expect("some cut is complete");
    assert!(first < bytes.len() && first > bytes.len() / 2, "{first}");
}

#[test]
fn a_flipped_byte_is_caught() {
    let path = temp("flip-src.cnl");
    let expect = crate::fuzzing::write_sample_recording(&path);
    let bytes = std::fs::read(&path).unwrap();
    let flip = temp("flip.cnl");
    for at in 0..bytes.len() {
        let mut b = bytes.clone();
        b[at] ^= 0x20;
        std::fs::write(&flip, &b).unwrap();
        if let Some((seen, complete, _)) = replay_file(&flip) {
            if complete {
                assert_eq!(seen, expect, "byte {at} flipped");
            }
        }
    }
}

#[test]
fn another_version_or_not_a_recording_is_one_line() {
    let path = temp("v2.cnl");
    crate::fuzzing::write_sample_recording(&path);
    let mut b = std::fs::read(&path).unwrap();
    b[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    std::fs::write(&path, &b).unwrap();
    let e = Recording::open(&path).err().unwrap().to_string();
    assert!(
        e.contains("format version 2") && e.contains("newer cannoli"),
        "{e}"
    );
    std::fs::write(&path, b"hello, world, this is not one").unwrap();
    let e = Recording::open(&path).err().unwrap().to_string();
    assert!(e.contains("not a cannoli recording"), "{e}");
}

/// The chunk seqs of stream 0's chunk frames, in file order.
fn chunk_order(path: &Path) -> Vec<u64> {
    use super::format::{Kind, FRAME_HEADER_BYTES, HEADER_BYTES};
    let b = std::fs::read(path).unwrap();
    let mut at = HEADER_BYTES;
    let mut seqs = Vec::new();
    while at + FRAME_HEADER_BYTES <= b.len() {
        let word = |o: usize, n: usize| {
            let mut w = [0u8; 8];
            w[..n].copy_from_slice(&b[at + o..at + o + n]);
            u64::from_le_bytes(w)
        };
        if b[at] == Kind::Chunk as u8 && word(4, 4) == 0 {
            seqs.push(word(8, 8));
        }
        at += FRAME_HEADER_BYTES + word(16, 4) as usize;
    }
    seqs
}

/// What the test recordings say they hold: `--hooks pc` of `prog` on
/// mipsel.
fn test_info() -> super::Info {
    super::Info {
        writer: "test".into(),
        hooks: super::Hooks::preset("pc"),
        command: vec!["prog".into()],
        guest: Some("mipsel".into()),
        started_unix_ns: 1,
    }
}

/// Writes chunks of stream 0 in `order`, each `len` bytes that do not
/// compress; returns the file's chunk order.
fn write_in(name: &str, order: &[u64], len: usize) -> Vec<u64> {
    let path = temp(name);
    let info = test_info();
    let w = super::Writer::create(&path, &info, 1).unwrap();
    let mut p = w.packer();
    let log = w.stream_start(&crate::fuzzing::hello_line(10), None);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for &seq in order {
        let data: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        w.chunk(&log, seq, &data, &mut p);
    }
    let end = super::StreamEnd {
        goodbye: None,
        published: 0,
        violation: None,
        written: order.len() as u64,
        end_ns: 1,
        control: None,
    };
    w.stream_end(&log, &end);
    w.finish(&super::Exit {
        status: Some(0),
        refused_connections: 0,
        missing_processes: 0,
        strangers: 0,
        end_ns: 2,
    })
    .unwrap();
    let got = chunk_order(&path);
    let _ = std::fs::remove_file(&path);
    got
}

/// Workers hand chunks over in any order; the file has them in chunk
/// order, so that a recording cut short loses only its tail.
#[test]
fn chunks_are_written_in_chunk_order() {
    assert_eq!(
        write_in("order.cnl", &[2, 0, 1, 5, 3, 4, 6], 1000),
        [0, 1, 2, 3, 4, 5, 6]
    );
    // A chunk that never comes: the ones after it still reach the file
    // when the stream ends.
    assert_eq!(write_in("gap.cnl", &[0, 2, 3], 1000), [0, 2, 3]);
}

/// A chunk that takes long (its worker stalled) cannot make the stream
/// hold more than `HELD_BYTES`: past it the held chunks are written, and
/// the late one follows when it comes.
#[test]
fn held_chunks_stay_bounded() {
    let len = 1 << 20;
    let ahead = (super::writer::HELD_BYTES / len) as u64 + 1;
    let mut order: Vec<u64> = (1..=ahead).collect();
    order.extend([0, ahead + 1]);
    assert_eq!(write_in("held.cnl", &order, len), order);
}

/// How [`Ender`] ends the run, and what it saw: trace calls, per tid.
struct EndPlan {
    /// After this many trace calls (over all threads)...
    after: usize,
    /// ...fail (else stop).
    fail: bool,
    calls: Mutex<Vec<i32>>,
}

/// A tool that ends the run after `EndPlan::after` serial calls.
struct Ender {
    tid: i32,
}

impl Cannoli for Ender {
    type Trace = u64;
    type TidContext = ();
    type PidContext = Arc<EndPlan>;

    fn init_pid(ci: &ClientInfo) -> Arc<Arc<EndPlan>> {
        Arc::new(ci.expect_state::<EndPlan>())
    }

    fn init_tid(_: &Arc<EndPlan>, ci: &ClientInfo) -> (Ender, ()) {
        (Ender { tid: ci.tid }, ())
    }

    fn exec(_: &Arc<EndPlan>, _: &(), pc: u64, t: &mut Vec<u64>) {
        t.push(pc);
    }

    fn trace_flow(
        &mut self,
        plan: &Arc<EndPlan>,
        _: &(),
        _: &[u64],
    ) -> Result<crate::Flow, crate::ToolError> {
        let mut calls = plan.calls.lock().unwrap();
        calls.push(self.tid);
        if calls.len() < plan.after {
            Ok(crate::Flow::Continue)
        } else if plan.fail {
            Err(crate::ToolError::new(format!(
                "gave up after {} chunks",
                calls.len()
            )))
        } else {
            Ok(crate::Flow::Stop)
        }
    }
}

fn replay_ending(
    name: &str,
    after: usize,
    fail: bool,
) -> (Result<super::Replayed, super::Error>, Vec<i32>) {
    let path = temp(name);
    crate::fuzzing::write_sample_recording(&path);
    let plan = Arc::new(EndPlan {
        after,
        fail,
        calls: Mutex::new(Vec::new()),
    });
    // Several workers: chunks decoded ahead of the one that ends the run
    // must not reach the tool either.
    let r = replay_with::<Ender>(&path, 4, plan.clone());
    let calls = plan.calls.lock().unwrap().clone();
    (r, calls)
}

/// A tool that has what it wants stops the run: it is not called again,
/// for this thread or the next, and the run says it was stopped (which is
/// not loss).
#[test]
fn a_tool_can_stop_the_run() {
    let (r, calls) = replay_ending("stop.cnl", 2, false);
    let r = r.unwrap();
    assert_eq!(calls, [10, 10], "the first thread's first two chunks");
    assert!(r.stats.stopped && r.stats.is_complete(), "{:?}", r.stats);
    // Without the stop, every chunk of both threads arrives.
    let (r, calls) = replay_ending("nostop.cnl", 100, false);
    assert!(!r.unwrap().stats.stopped);
    assert_eq!(calls, [10, 10, 10, 11, 11]);
}

/// A tool's error fails the run with that error, and nothing after it
/// reaches the tool.
#[test]
fn a_tool_can_fail_the_run() {
    let (r, calls) = replay_ending("fail.cnl", 1, true);
    match r {
        Err(super::Error::Tool(e)) => assert_eq!(e.to_string(), "gave up after 1 chunks"),
        Err(e) => panic!("another error: {e}"),
        Ok(r) => panic!("the run went on: {:?}", r.stats),
    }
    assert_eq!(calls, [10]);
}

/// What a replay says about what the recording lost goes to the notes the
/// tool gave, not to stderr.
#[test]
fn a_replay_says_its_lines_to_the_tools_notes() {
    let path = temp("notes-src.cnl");
    crate::fuzzing::write_sample_recording(&path);
    let bytes = std::fs::read(&path).unwrap();
    let cut = temp("notes-cut.cnl");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let l = lines.clone();
    let rec = Recording::open(&cut)
        .unwrap()
        .with_notes(crate::Notes::to(move |s| l.lock().unwrap().push(s.into())));
    let r = rec
        .replay_with::<ExecLog>(2, Arc::new(Seen1::default()))
        .unwrap();
    assert!(!r.stats.is_complete());
    let lines = lines.lock().unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("cannoli: ") && l.contains("cut short")),
        "{lines:?}"
    );
    assert!(lines.iter().all(|l| !l.contains('\n')), "{lines:?}");
}

#[test]
fn needs_say_what_the_recording_lacks() {
    let hooks = |preset: &str, exec, mem, regs| Hooks {
        preset: preset.into(),
        exec,
        mem,
        regs,
        branch_flags: regs != RegsAt::None,
    };
    let pc = hooks("pc", true, false, RegsAt::None);
    let mem = Needs {
        exec: true,
        mem: true,
        ..Needs::default()
    };
    assert_eq!(
        mem.check(&pc).unwrap_err().to_string(),
        "recorded with --hooks pc, which has no memory accesses; record it again with --hooks mem"
    );
    let optional = Needs {
        mem_optional: Some("--no-mem"),
        ..mem
    };
    assert_eq!(
        optional.check(&pc).unwrap_err().to_string(),
        "recorded with --hooks pc, which has no memory accesses; record it again with --hooks \
         mem, or pass --no-mem"
    );
    let none = hooks("none", false, false, RegsAt::None);
    assert_eq!(
        mem.check(&none),
        Err(Lacks::Exec {
            preset: "none".into(),
            mem: true
        })
    );
    assert_eq!(
        mem.check(&none).unwrap_err().to_string(),
        "recorded with --hooks none, which has no exec event for every instruction; record it \
         again with --hooks mem"
    );
    let regs = |at| Needs {
        regs: Some(at),
        ..Needs::default()
    };
    assert_eq!(
        regs(RegsAt::All).check(&pc).unwrap_err().to_string(),
        "recorded with --hooks pc, which has no registers at every instruction; record it again \
         with --hooks regs"
    );
    assert_eq!(
        regs(RegsAt::Branches).check(&pc).unwrap_err().to_string(),
        "recorded with --hooks pc, which has no registers at branches; record it again with \
         --hooks branches"
    );
    assert!(regs(RegsAt::All)
        .check(&hooks("custom", false, false, RegsAt::None))
        .is_ok());
    // A `regs` recording of an older cannoli: registers everywhere, no
    // branch flags (its header has no `branch_flags`).
    let old: Hooks =
        serde_json::from_str(r#"{"preset":"regs","exec":false,"mem":true,"regs":"all"}"#).unwrap();
    assert!(!old.branch_flags);
    let flags = Needs {
        branch_flags: true,
        ..regs(RegsAt::All)
    };
    assert_eq!(
        flags.check(&old).unwrap_err().to_string(),
        "recorded with --hooks regs by an older cannoli, whose recordings do not flag branches \
         (calls and returns cannot be followed); record it again with --hooks regs"
    );
    assert!(flags.check(&Hooks::preset("regs")).is_ok());
    assert!(regs(RegsAt::All).check(&old).is_ok());
}

/// Records every exec with its stream's tid, and `(tid, ENDED)` when its
/// stream ends, replayed side by side.
struct SideLog {
    tid: i32,
    seen: Arc<Seen1>,
}

/// The pc [`SideLog`] logs when its stream ends.
const ENDED: u64 = u64::MAX;

impl Cannoli for SideLog {
    type Trace = u64;
    type TidContext = ();
    type PidContext = Arc<Seen1>;
    const REPLAY_ORDER: crate::ReplayOrder = crate::ReplayOrder::AsRecorded;

    fn init_pid(ci: &ClientInfo) -> Arc<Arc<Seen1>> {
        Arc::new(ci.expect_state::<Seen1>())
    }

    fn init_tid(seen: &Arc<Seen1>, ci: &ClientInfo) -> (SideLog, ()) {
        let seen = seen.clone();
        (SideLog { tid: ci.tid, seen }, ())
    }

    fn exec(_: &Arc<Seen1>, _: &(), pc: u64, t: &mut Vec<u64>) {
        t.push(pc);
    }

    fn trace(&mut self, seen: &Arc<Seen1>, _: &(), t: &[u64]) {
        seen.lock()
            .unwrap()
            .extend(t.iter().map(|&pc| (self.tid, pc)));
    }
}

impl Drop for SideLog {
    fn drop(&mut self) {
        self.seen.lock().unwrap().push((self.tid, ENDED));
    }
}

/// Threads 10 and 11 of one process, their chunks written in the order
/// `(tid, chunk)` of `file`; thread 12 has no chunk. Returns the path.
fn write_side_by_side(name: &str, file: &[(i32, u64)]) -> std::path::PathBuf {
    use crate::fuzzing::{exec_chunk, hello_line};
    let path = temp(name);
    let info = test_info();
    let w = super::Writer::create(&path, &info, 1).unwrap();
    let mut p = w.packer();
    // One process: its threads' streams share its block table.
    let table = mempipe::TableWriter::create(0).unwrap();
    let fd = table.fd().try_clone_to_owned().unwrap();
    let reader = Arc::new(mempipe::TableReader::from_fd(fd).unwrap());
    let logs: Vec<_> = [10, 11, 12]
        .map(|tid| (tid, w.stream_start(&hello_line(tid), Some(reader.clone()))))
        .into();
    for &(tid, c) in file {
        let log = &logs.iter().find(|l| l.0 == tid).unwrap().1;
        let data = exec_chunk(0x1000 * tid as u64 + 0x100 * c, 4);
        w.chunk(log, c, &data, &mut p);
    }
    for (tid, log) in &logs {
        let n = file.iter().filter(|f| f.0 == *tid).count() as u64;
        let end = super::StreamEnd {
            goodbye: Some(super::Goodbye {
                chunks: n,
                lost_events: 0,
                exec: false,
            }),
            published: n,
            violation: None,
            written: n,
            end_ns: 5,
            control: None,
        };
        w.stream_end(log, &end);
    }
    let exit = super::Exit {
        status: Some(0),
        refused_connections: 0,
        missing_processes: 0,
        strangers: 0,
        end_ns: 9,
    };
    w.finish(&exit).unwrap();
    path
}

/// A tool whose threads wait on each other ([`crate::ReplayOrder::AsRecorded`])
/// gets a process's streams side by side: one worker delivers the chunks
/// in the order of the file, and a stream ends (its tool dropped) as soon
/// as its last chunk is delivered, not when the process ends; a stream
/// without chunks ends first. Several workers keep each stream's order.
#[test]
fn side_by_side_streams_go_in_file_order_and_end_with_their_last_chunk() {
    let file = [(10, 0), (11, 0), (10, 1), (11, 1), (10, 2), (10, 3)];
    let path = write_side_by_side("side.cnl", &file);
    let pcs =
        |tid: i32, c: u64| (0..4).map(move |i| (tid, 0x1000 * tid as u64 + 0x100 * c + 4 * i));
    let mut expect = vec![(12, ENDED)];
    for (i, &(tid, c)) in file.iter().enumerate() {
        expect.extend(pcs(tid, c));
        if i == 3 {
            expect.push((11, ENDED));
        }
    }
    // The block the last chunk left open, at each stream's end, adds no
    // exec events (each chunk's events are whole).
    expect.push((10, ENDED));
    let seen = Arc::new(Seen1::default());
    let r = replay_with::<SideLog>(&path, 1, seen.clone()).unwrap();
    assert!(r.stats.is_complete(), "{:?}", r.stats);
    assert_eq!(r.stats.connections, 3);
    assert_eq!(*seen.lock().unwrap(), expect);

    for _ in 0..20 {
        let seen = Arc::new(Seen1::default());
        let r = replay_with::<SideLog>(&path, 4, seen.clone()).unwrap();
        assert!(r.stats.is_complete());
        let seen = seen.lock().unwrap();
        for tid in [10, 11, 12] {
            let got: Vec<_> = seen.iter().filter(|s| s.0 == tid).collect();
            let want: Vec<_> = expect.iter().filter(|s| s.0 == tid).collect();
            assert_eq!(got, want, "tid {tid}");
        }
    }

    // The same file one stream after the other.
    let seen = Arc::new(Seen1::default());
    replay_with::<ExecLog>(&path, 1, seen.clone()).unwrap();
    let tids: Vec<i32> = seen.lock().unwrap().iter().map(|s| s.0).collect();
    assert!(tids.is_sorted(), "{tids:?}");
    let _ = std::fs::remove_file(&path);
}

/// Side by side, a recording cut at any length replays what it holds (a
/// prefix of each stream) without a panic or a hang, and is complete only
/// once whole but for its index.
#[test]
fn side_by_side_replay_of_a_cut_recording_gives_prefixes() {
    let file = [(10, 0), (11, 0), (10, 1), (11, 1), (10, 2)];
    let path = write_side_by_side("side-cut-src.cnl", &file);
    let whole = Arc::new(Seen1::default());
    replay_with::<SideLog>(&path, 2, whole.clone()).unwrap();
    let whole = std::mem::take(&mut *whole.lock().unwrap());
    let bytes = std::fs::read(&path).unwrap();
    let cut = temp("side-cut.cnl");
    for len in 0..bytes.len() {
        std::fs::write(&cut, &bytes[..len]).unwrap();
        let seen = Arc::new(Seen1::default());
        let Ok(r) = replay_with::<SideLog>(&cut, 2, seen.clone()) else {
            continue;
        };
        let seen = seen.lock().unwrap();
        for tid in [10, 11] {
            let pcs = |v: &[(i32, u64)]| -> Vec<u64> {
                v.iter()
                    .filter(|s| s.0 == tid && s.1 != ENDED)
                    .map(|s| s.1)
                    .collect()
            };
            assert!(
                pcs(&whole).starts_with(&pcs(&seen)),
                "cut at {len}: tid {tid}"
            );
        }
        if r.stats.is_complete() {
            assert_eq!(seen.len(), whole.len(), "cut at {len}");
        }
    }
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&cut);
}

/// Threads whose streams start at once (QEMU's threads connecting
/// together) get their stream frames written in number order, which is
/// how a reader takes them: before, a stream numbered after another could
/// reach the file first, and the recording read as damaged.
#[test]
fn streams_started_at_once_are_written_in_number_order() {
    use crate::fuzzing::hello_line;
    let path = temp("racing-starts.cnl");
    let info = test_info();
    let w = super::Writer::create(&path, &info, 1).unwrap();
    let starts = std::sync::Barrier::new(8);
    std::thread::scope(|sc| {
        for t in 0..8 {
            let (w, starts) = (&w, &starts);
            sc.spawn(move || {
                starts.wait();
                for i in 0..200 {
                    w.stream_start(&hello_line(1000 * t + i), None);
                }
            });
        }
    });
    w.finish(&super::Exit {
        status: Some(0),
        refused_connections: 0,
        missing_processes: 0,
        strangers: 0,
        end_ns: 2,
    })
    .unwrap();
    let rec = Recording::open(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rec.streams().len(), 1600);
    let _ = std::fs::remove_file(&path);
}
