//! The tool's own value a run carries to its callbacks.
//!
//! [`Cannoli::init_pid`](crate::Cannoli::init_pid) is an associated function:
//! it gets no `self`, so a tool had nowhere to find its configuration (the
//! command line it was started with, its output, its run-wide totals) but in
//! module statics, which let it run only once per process. Instead, the run
//! carries one value of the tool's choosing ([`Server::with_state`],
//! [`Recording::replay_with`], [`replay_with`]) and every [`ClientInfo`] of
//! the run holds it: `init_pid` clones the `Arc` into its `PidContext`
//! ([`ClientInfo::state`]), and the tool reads the same `Arc` after the run
//! returns. The seed trait is unchanged, and a run started without a value
//! hands `None`.
//!
//! [`Server::with_state`]: crate::Server::with_state
//! [`Recording::replay_with`]: crate::Recording::replay_with
//! [`replay_with`]: crate::recording::replay_with
//! [`ClientInfo`]: crate::ClientInfo
//! [`ClientInfo::state`]: crate::ClientInfo::state

use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// One run's tool value, of any type, or none. Cloning it clones the `Arc`.
#[derive(Clone, Default)]
pub struct ToolState(Option<Arc<dyn Any + Send + Sync>>);

impl ToolState {
    /// Carries `state` (an `Arc` of any `Send + Sync` type).
    pub fn new<S: Any + Send + Sync>(state: Arc<S>) -> ToolState {
        ToolState(Some(state))
    }

    /// The value, if there is one and it is an `S`.
    pub fn get<S: Any + Send + Sync>(&self) -> Option<Arc<S>> {
        self.0.clone()?.downcast::<S>().ok()
    }
}

/// The usual way to hand a run its value: `Arc::new(MyState { .. })`.
impl<S: Any + Send + Sync> From<Arc<S>> for ToolState {
    fn from(state: Arc<S>) -> ToolState {
        ToolState::new(state)
    }
}

// The value itself need not be Debug: say only whether there is one.
impl fmt::Debug for ToolState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(_) => f.write_str("ToolState(Some(..))"),
            None => f.write_str("ToolState(None)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_back_only_the_type_it_was_given() {
        let s = ToolState::new(Arc::new(7u32));
        assert_eq!(s.get::<u32>().as_deref(), Some(&7));
        assert!(s.get::<u64>().is_none());
        assert!(ToolState::default().get::<u32>().is_none());
        assert_eq!(format!("{s:?}"), "ToolState(Some(..))");
    }
}
