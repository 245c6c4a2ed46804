// SPDX-License-Identifier: GPL-2.0-or-later
//! Damaged recordings aimed at the reader's memory (`src/bounds.rs`), and
//! the `recording` corpus, each opened and replayed by a child process
//! whose address space is limited to `bounds::LIMIT`: a one-line error or
//! a replay that states its loss, never a crash, a hang or an abort.

use std::path::PathBuf;

use cannoli_fuzz::bounds::{self, COMPLETE, FAILED_TO_OPEN};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cannoli-fuzz"))
}

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("cannoli-fuzz-bounds-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn damaged_recordings_stay_within_the_memory_limit() {
    let dir = scratch();
    let mut failures = Vec::new();
    for (name, bytes) in bounds::cases() {
        let path = dir.join(format!("{name}.cnl"));
        std::fs::write(&path, &bytes).unwrap();
        drop(bytes);
        // What each case must end in, within the limit.
        let want = match name {
            // The overlapping index is not used: the frames are read one
            // after the other instead, and they are all whole.
            "index-overlap" | "tables" => COMPLETE,
            "meta-frame" | "meta-total" => FAILED_TO_OPEN,
            _ => unreachable!(),
        };
        match bounds::check(&exe(), &path) {
            Ok(got) if got == want => {}
            Ok(got) => failures.push(format!("{name}: exit status {got}, expected {want}")),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
        let _ = std::fs::remove_file(&path);
    }
    let _ = std::fs::remove_dir(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_recording_corpus_stays_within_the_memory_limit() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus/recording");
    let dir = scratch();
    let mut n = 0;
    for e in std::fs::read_dir(&corpus).unwrap().flatten() {
        // A corpus entry is a mode byte and the file (`src/recording.rs`).
        let input = std::fs::read(e.path()).unwrap();
        let (mode, rest) = input.split_first().unwrap_or((&0, &[]));
        let mut file = rest.to_vec();
        if mode & 1 != 0 {
            cannoli_fuzz::recording::fix_checksums(&mut file);
        }
        let path = dir.join(e.file_name());
        std::fs::write(&path, &file).unwrap();
        if let Err(m) = bounds::check(&exe(), &path) {
            panic!("{}: {m}", e.path().display());
        }
        let _ = std::fs::remove_file(&path);
        n += 1;
    }
    assert!(n > 0, "no corpus in {}", corpus.display());
}
