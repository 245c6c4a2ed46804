// SPDX-License-Identifier: GPL-2.0-or-later
//! A recording written by [`Writer`] and read back by [`Recording`] and
//! [`replay`], without QEMU: the round trip, and every way of damaging the
//! file (cut at every length, any byte flipped, another version) giving an
//! error or a replay that says what it lost, never a panic, and never a
//! "complete" replay of other events than were recorded.

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::format::FORMAT_VERSION;
use super::{replay, Recording};
use crate::{Cannoli, ClientInfo};

/// What the test tool saw: (tid, pc) in trace order, per test file.
static SEEN: Mutex<Vec<(String, i32, u64)>> = Mutex::new(Vec::new());

/// Records every exec with its stream's tid and the file being replayed
/// (tests run in parallel; each one keeps its own file's lines).
struct ExecLog {
    tid: i32,
    file: String,
}

thread_local! {
    static FILE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

impl Cannoli for ExecLog {
    type Trace = u64;
    type TidContext = ();
    type PidContext = ();

    fn init_pid(_: &ClientInfo) -> Arc<()> {
        Arc::new(())
    }

    fn init_tid(_: &(), ci: &ClientInfo) -> (ExecLog, ()) {
        let file = FILE.with(|f| f.borrow().clone());
        (ExecLog { tid: ci.tid, file }, ())
    }

    fn exec(_: &(), _: &(), pc: u64, t: &mut Vec<u64>) {
        t.push(pc);
    }

    fn trace(&mut self, _: &(), _: &(), t: &[u64]) {
        let mut s = SEEN.lock().unwrap();
        s.extend(t.iter().map(|&pc| (self.file.clone(), self.tid, pc)));
    }
}

/// What [`replay_file`] saw: (tid, pc) in order, whether the replay was
/// complete, and the recorded status.
type Seen = (Vec<(i32, u64)>, bool, Option<i32>);

/// Replays `path`; `None` if it would not open.
fn replay_file(path: &Path) -> Option<Seen> {
    let key = path.display().to_string();
    FILE.with(|f| *f.borrow_mut() = key.clone());
    let r = match replay::<ExecLog>(path, 2) {
        Ok(r) => r,
        Err(e) => {
            let line = e.to_string();
            assert!(!line.contains('\n'), "one line: {line}");
            assert!(line.starts_with(&key), "names the file: {line}");
            return None;
        }
    };
    let mut seen = SEEN.lock().unwrap();
    let mine: Vec<(i32, u64)> = seen
        .iter()
        .filter(|(f, _, _)| *f == key)
        .map(|&(_, t, pc)| (t, pc))
        .collect();
    seen.retain(|(f, _, _)| *f != key);
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
