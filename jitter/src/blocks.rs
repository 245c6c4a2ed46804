//! The process's block table (layout: `wire::blocks`): what each run event
//! stands for. Created at init (behind QEMU's fence, so it does not move
//! the guest), appended to when a block is translated, handed to the client
//! with every hello of the process, and copied when the process forks (the
//! child's translations must not land in the parent's table, and the blocks
//! it inherited keep their ids).

use crate::error::Error;
use mempipe::TableWriter;
use std::os::fd::BorrowedFd;
use std::sync::{Mutex, MutexGuard};

/// The table, once `create` succeeded. Taken by translation (one block at a
/// time: QEMU translates under its mmap lock) and by connecting threads.
static TABLE: Mutex<Option<TableWriter>> = Mutex::new(None);

fn lock() -> MutexGuard<'static, Option<TableWriter>> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Creates the table, its fd out of the guest's reach. Without one every
/// block is reported an instruction at a time, as before tables.
pub fn create() -> crate::error::Result<()> {
    let t = TableWriter::create(crate::fds::fd_place()).map_err(Error::BlockTable)?;
    *lock() = Some(t);
    Ok(())
}

/// Publishes a translated block: its instruction pcs, and which of them are
/// reported each time it runs. `None`: no table, or it is full.
pub fn append(pcs: &[u64], exec: impl Fn(usize) -> bool) -> Option<u64> {
    lock().as_ref()?.append(pcs, exec)
}

/// Runs `f` with the table's fd, for a hello. The table stays locked
/// meanwhile (a handshake with the local client: translation on other
/// threads waits that long).
pub fn with_fd<R>(f: impl FnOnce(Option<BorrowedFd<'_>>) -> R) -> R {
    let g = lock();
    f(g.as_ref().map(|t| t.fd()))
}

/// In a forked child: a private copy of the table at the same address.
pub fn forked_child() {
    let mut g = lock();
    if let Some(t) = g.as_mut() {
        if let Err(e) = t.copy_in_forked_child(crate::fds::fd_place()) {
            // The inherited mapping is the parent's: never write it again.
            eprintln!(
                "qemu: cannoli: {e}; this process reports its blocks one instruction at a time"
            );
            *g = None;
        }
    }
}

/// TABLE's part in the fork protocol (see `forkguard`): the child must not
/// inherit TABLE locked by a thread it does not have.
pub(crate) const FORK_LOCK: crate::forkguard::Entry =
    crate::forkguard::entry!(TABLE, Option<TableWriter>);
