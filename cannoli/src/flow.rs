// SPDX-License-Identifier: GPL-2.0-or-later
//! A tool ending the run early: [`Flow`] and [`ToolError`], what
//! [`Cannoli::trace_flow`] returns, and [`Halt`], the run-wide state every
//! stream's pipeline checks.
//!
//! Once a tool stops the run (it has what it wants) or fails it (an error
//! it cannot go on after), its serial callback is not called again, for
//! any thread, and no chunk is decoded any more (a worker already decoding
//! one when it happened finishes it: its parallel callbacks may still run,
//! their trace is dropped). Chunks still arriving are taken off their
//! rings undecoded, so the guest runs on undisturbed (as it would
//! untraced) and the run ends when it does; a replay ends at once. The run then returns [`Stats::stopped`] set, or the
//! tool's error as [`Error::Tool`]. The first stop or failure wins.
//!
//! [`Cannoli::trace_flow`]: crate::Cannoli::trace_flow
//! [`Stats::stopped`]: crate::Stats::stopped
//! [`Error::Tool`]: crate::Error::Tool

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// What the serial callback tells the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flow {
    /// Go on.
    #[default]
    Continue,
    /// The tool has what it wants: no more callbacks, for any thread.
    Stop,
}

/// Why a tool failed the run: any error, with its message.
pub struct ToolError(Box<dyn std::error::Error + Send + Sync>);

impl ToolError {
    /// A failure with `source` as its cause.
    pub fn new(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> ToolError {
        ToolError(source.into())
    }

    /// The tool's own error.
    pub fn inner(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for ToolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

const RUNNING: u8 = 0;
const STOPPED: u8 = 1;
const FAILED: u8 = 2;

/// Whether the run's tool has stopped or failed it: shared by all of a
/// run's streams.
#[derive(Default)]
pub(crate) struct Halt {
    state: AtomicU8,
    error: Mutex<Option<ToolError>>,
}

impl Halt {
    /// True once the tool stopped or failed the run.
    #[inline]
    pub fn is_halted(&self) -> bool {
        self.state.load(Ordering::Acquire) != RUNNING
    }

    /// What a serial callback returned.
    pub fn note(&self, r: Result<Flow, ToolError>) {
        match r {
            Ok(Flow::Continue) => {}
            Ok(Flow::Stop) => {
                let _ = self.state.compare_exchange(
                    RUNNING,
                    STOPPED,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
            }
            Err(e) => {
                let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
                if self
                    .state
                    .compare_exchange(RUNNING, FAILED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    *slot = Some(e);
                }
            }
        }
    }

    /// True if the tool stopped the run (not failed it).
    pub fn stopped(&self) -> bool {
        self.state.load(Ordering::Acquire) == STOPPED
    }

    /// The tool's error, if it failed the run.
    pub fn take_error(&self) -> Option<ToolError> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_stop_or_failure_wins() {
        let h = Halt::default();
        assert!(!h.is_halted());
        h.note(Ok(Flow::Continue));
        assert!(!h.is_halted());
        h.note(Ok(Flow::Stop));
        h.note(Err(ToolError::new("late")));
        assert!(h.is_halted() && h.stopped());
        assert!(h.take_error().is_none());

        let h = Halt::default();
        h.note(Err(ToolError::new("the disk is full")));
        h.note(Ok(Flow::Stop));
        assert!(h.is_halted() && !h.stopped());
        assert_eq!(h.take_error().unwrap().to_string(), "the disk is full");
    }
}
