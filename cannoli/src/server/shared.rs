//! What the accept loop and the connection threads of one run share.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wire::Token;

use super::lock;
use crate::announce::Announced;
use crate::crew::Machine;
use crate::flow::Halt;
use crate::handshake::Tables;
use crate::notes::{note, Notes};
use crate::recording::Writer;
use crate::{Cannoli, ClientInfo, Stats, ToolState};

/// The process contexts by pid and image ([`ClientInfo::image`]: an exec
/// keeps the pid, and its successor may connect while the program before
/// it is still decoding), with the number of live threads of each.
type PidMap<T> = HashMap<(i32, u32), (Arc<<T as Cannoli>::PidContext>, usize)>;

/// State shared by the accept loop and the connection threads of one run.
pub(super) struct Shared<T: Cannoli> {
    pub(super) threads: usize,
    pub(super) stats: Mutex<Stats>,
    /// Where the run's lines go.
    pub(super) notes: Notes,
    /// Whether the tool stopped or failed the run (`flow.rs`).
    pub(super) halt: Halt,
    /// Connections accepted whose thread has not finished.
    pub(super) live: Mutex<usize>,
    /// The process contexts.
    pub(super) pids: Mutex<PidMap<T>>,
    /// Written to when a connection ends, to wake the accept loop.
    pub(super) wake: UnixStream,
    /// Processes announced and not connected yet (`announce.rs`).
    pub(super) announced: Mutex<Announced>,
    /// The run's secret.
    pub(super) token: Token,
    pub(super) handshake_timeout: Duration,
    pub(super) trust_hello_pids: bool,
    /// A QEMU has connected (a stream, or a cannoli hello refused). Set by
    /// connection threads (Release) before their live count drops, read by
    /// the accept loop (Acquire).
    pub(super) seen_qemu: AtomicBool,
    /// The block tables of the processes streaming (one per process).
    pub(super) tables: Tables,
    /// Where the streams are recorded: instead of `T` (`!decode`), or as
    /// well (a tee).
    pub(super) recorder: Option<Arc<Writer>>,
    pub(super) decode: bool,
    /// The cores the crews share (`crew.rs`).
    pub(super) machine: Machine,
    /// The tool's value, put in every stream's `ClientInfo`.
    pub(super) state: ToolState,
}

impl<T: Cannoli> Shared<T> {
    /// Whether an announced process may still connect (one that no longer
    /// exists, a child killed before it ran say, cannot).
    pub(super) fn expecting(&self) -> bool {
        lock(&self.announced).expecting(process_alive)
    }

    /// Announced processes that ended without ever connecting: if one of
    /// them ran guest code, its events are missing. Says so for each.
    pub(super) fn never_connected(&self) -> u64 {
        let missing = lock(&self.announced).take_missing();
        for pid in &missing {
            note!(
                self.notes,
                "cannoli: process {pid} was announced (fork or exec) but never connected; \
                 if it ran, its events are missing"
            );
        }
        missing.len() as u64
    }

    pub(super) fn pid_acquire(&self, ci: &ClientInfo) -> Arc<T::PidContext> {
        let key = (ci.pid, ci.image);
        let mut pids = lock(&self.pids);
        if let Some((ctx, n)) = pids.get_mut(&key) {
            *n += 1;
            return ctx.clone();
        }
        let ctx = T::init_pid(ci);
        pids.insert(key, (ctx.clone(), 1));
        ctx
    }

    pub(super) fn pid_release(&self, ci: &ClientInfo) {
        let key = (ci.pid, ci.image);
        let removed = {
            let mut pids = lock(&self.pids);
            match pids.get_mut(&key) {
                Some((_, n)) if *n > 1 => {
                    *n -= 1;
                    None
                }
                Some(_) => pids.remove(&key),
                None => None,
            }
        };
        drop(removed); // the tool's PidContext drop runs outside the lock
    }
}

/// Decrements the live count and wakes the accept loop when a connection
/// thread ends, however it ends.
pub(super) struct LiveGuard<'a, T: Cannoli>(pub(super) &'a Shared<T>);

impl<T: Cannoli> Drop for LiveGuard<'_, T> {
    fn drop(&mut self) {
        *lock(&self.0.live) -= 1;
        let _ = (&self.0.wake).write(&[1]);
    }
}

/// Whether `pid` exists and is not a zombie.
fn process_alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that the pid exists.
    let exists = unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM };
    if !exists {
        return false;
    }
    // "pid (comm) S ...": the state follows the last ')'.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .map_or(true, |state| state != 'Z' && state != 'X'),
        Err(_) => true,
    }
}
