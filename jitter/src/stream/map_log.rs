// SPDX-License-Identifier: GPL-2.0-or-later
//! The mapping log: every mapping event of the process, kept so that a
//! stream that starts without them (a forked child's, which inherited the
//! parent's mappings but not its stream, or the one after a failed exec)
//! can begin with them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::{append, Cursor};

/// Every mapping event of this process so far, replayed to the client by a
/// forked child (which inherits the mappings but not the parent's stream).
/// Written only under QEMU's mmap_lock, which fork holds, so the child never
/// inherits it locked.
static MAP_LOG: Mutex<Vec<(Vec<u64>, Vec<u8>)>> = Mutex::new(Vec::new());
/// Past this many entries the log stops growing (and says so once).
const MAP_LOG_MAX: usize = 1 << 16;
static MAP_LOG_FULL: AtomicBool = AtomicBool::new(false);
/// Set in a forked child until its new stream has the replay.
static REPLAY_OWED: AtomicBool = AtomicBool::new(false);

/// Remembers a mapping event for a forked child's replay.
pub fn log_map(words: &[u64], payload: &[u8]) {
    let mut log = MAP_LOG.lock().unwrap_or_else(|e| e.into_inner());
    if log.len() < MAP_LOG_MAX {
        log.push((words.to_vec(), payload.to_vec()));
    } else if !MAP_LOG_FULL.swap(true, Ordering::Relaxed) {
        eprintln!(
            "qemu: cannoli: more than {MAP_LOG_MAX} mapping changes: a forked child's \
                   trace will not start with all of its parent's mappings"
        );
    }
}

/// The next stream of this process starts with the mapping log: a forked
/// child's (it inherited the mappings, not the parent's stream), or the
/// stream after a failed exec.
pub fn owe_replay() {
    REPLAY_OWED.store(true, Ordering::Release);
}

/// Called when a thread gets a new window: a forked child's first stream
/// starts with the mappings it inherited.
pub(super) fn replay_if_owed(c: &mut Cursor) {
    if REPLAY_OWED.swap(false, Ordering::AcqRel) {
        let log = std::mem::take(&mut *MAP_LOG.lock().unwrap_or_else(|e| e.into_inner()));
        for (w, p) in &log {
            append(c, w, p);
        }
        *MAP_LOG.lock().unwrap_or_else(|e| e.into_inner()) = log;
    }
}
