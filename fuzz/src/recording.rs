// SPDX-License-Identifier: GPL-2.0-or-later
//! Target `recording`: opening and replaying a recording file
//! (`cannoli::recording`), which may come from anyone (a colleague's
//! trace, a file damaged on disk).
//!
//! Checked for every input:
//! - no panic, in opening or in replaying;
//! - a file that does not open is one line naming the file, without
//!   control characters.
//!
//! Input: a mode byte, then the file. With bit 0 of the mode set the
//! frames' checksums are recomputed first (walking the frame headers as
//! far as they are whole), so that mutations reach past the checksums into
//! the JSON, table and chunk contents.

use std::cell::RefCell;
use std::path::PathBuf;

use cannoli::recording::format::{FRAME_HEADER_BYTES, HEADER_BYTES};

thread_local! {
    /// This thread's scratch file (one per thread: the driver may run
    /// cases on several).
    static FILE: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// Runs the target on one input.
pub fn run(input: &[u8]) {
    let (mode, rest) = input.split_first().unwrap_or((&0, &[]));
    let mut file = rest.to_vec();
    if mode & 1 != 0 {
        fix_checksums(&mut file);
    }
    let path = FILE.with(|f| {
        f.borrow_mut()
            .get_or_insert_with(|| {
                let d = std::env::temp_dir().join("cannoli-fuzz-recording");
                std::fs::create_dir_all(&d).expect("a scratch directory");
                let id = format!("{:?}", std::thread::current().id());
                d.join(format!(
                    "{}-{}.cnl",
                    std::process::id(),
                    id.trim_matches(|c: char| !c.is_ascii_digit())
                ))
            })
            .clone()
    });
    std::fs::write(&path, &file).expect("the scratch file is writable");
    if let Err(e) = cannoli::fuzzing::replay_recording(&path) {
        let e = e.to_string();
        assert!(
            !e.chars().any(char::is_control),
            "an error is one printable line: {e:?}"
        );
        assert!(
            e.starts_with(&path.display().to_string()),
            "an error names the file: {e}"
        );
    }
}

/// Recomputes each frame's payload and header CRC-32, for as many frames
/// as are whole.
pub fn fix_checksums(file: &mut [u8]) {
    let mut at = HEADER_BYTES;
    while at + FRAME_HEADER_BYTES <= file.len() {
        let len = u32::from_le_bytes(file[at + 16..at + 20].try_into().unwrap()) as usize;
        let start = at + FRAME_HEADER_BYTES;
        let Some(end) = start.checked_add(len).filter(|&e| e <= file.len()) else {
            break;
        };
        let crc = crc32fast::hash(&file[start..end]);
        file[at + 24..at + 28].copy_from_slice(&crc.to_le_bytes());
        let hcrc = crc32fast::hash(&file[at..at + 28]);
        file[at + 28..at + 32].copy_from_slice(&hcrc.to_le_bytes());
        at = end;
    }
}

/// The seed: a small real recording (two threads, chunks out of order).
pub fn seed() -> Vec<u8> {
    let p = scratch("seed");
    cannoli::fuzzing::write_sample_recording(&p);
    let b = std::fs::read(&p).expect("the seed was written");
    let _ = std::fs::remove_file(&p);
    b
}

/// A scratch file name no other caller in this process is using: tests
/// run on several threads of one process, so the pid alone is shared.
fn scratch(what: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "cannoli-fuzz-{what}-{}-{n}.cnl",
        std::process::id()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_replays_whole_and_a_fixed_up_edit_is_read_past_its_checksums() {
        let s = seed();
        let mut input = vec![0u8];
        input.extend_from_slice(&s);
        run(&input);
        let p = scratch("t");
        std::fs::write(&p, &s).unwrap();
        assert_eq!(cannoli::fuzzing::replay_recording(&p).unwrap(), (250, true));
        // An edit inside the info frame's JSON with fixed checksums gets
        // to the JSON parser: a one-line error about what it holds.
        let mut e = s.clone();
        e[HEADER_BYTES + FRAME_HEADER_BYTES] = b'!';
        fix_checksums(&mut e);
        std::fs::write(&p, &e).unwrap();
        let err = cannoli::fuzzing::replay_recording(&p)
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not hold what it should"), "{err}");
        let _ = std::fs::remove_file(&p);
    }
}
