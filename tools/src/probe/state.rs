// SPDX-License-Identifier: GPL-2.0-or-later
//! What every guest thread's probe shares during a run: the plan, how hits
//! are written and where, and the run's counts.

use std::io::Write;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

use super::plan::Plan;
#[cfg(doc)]
use super::run::main;

/// How hits are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Text,
    Json,
    Flow,
}

/// What every guest thread's probe shares: the plan and the output. One
/// value per run, made by [`main`] and handed to the run
/// ([`launch::Launcher::state`]); each process's `PidContext` holds it
/// (`ClientInfo::expect_state`), so that probe can run twice in one process.
pub struct RunState {
    pub plan: Arc<Plan>,
    pub mode: Mode,
    pub(super) out: Mutex<Option<launch::Output>>,
    pub timeline: Option<Mutex<Vec<serde_json::Value>>>,
    pub hits: AtomicU64,
    pub threads: AtomicU64,
    /// A live run (its hook library asks for registers only at sites),
    /// not a replay.
    pub live: bool,
    /// Hits lost because their library's placement was not known in time
    /// (see `tracer::DEFER_LIMIT`).
    pub unplaced: AtomicU64,
    /// Go calls applied after a later number of their process's order
    /// (see `goroutine::WAIT_LIMIT`): their frames may be wrong.
    pub late: AtomicU64,
    /// Go calls without a number that may be out of their goroutine's
    /// order (`goroutine::Goroutines::unmatched`).
    pub unmatched: AtomicU64,
    /// Programs other than the plan's that a process exec'd, each said
    /// once (`Plan::for_image`).
    pub others: Mutex<std::collections::HashSet<String>>,
}

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RunState {
    /// Writes `text`; after a write error nothing more is written, but
    /// events are still consumed (QEMU is never held up).
    pub fn write(&self, text: &[u8]) {
        if let Some(w) = lock(&self.out).as_mut().filter(|w| w.is_writing()) {
            let _ = w.write_all(text);
        }
    }
}
