//! Syscalls: which buffers are worth carrying, the syscall each thread
//! has in progress, and the events for their start and end.

use super::exec::close_exec_fd;
use super::guest::{env, read_guest, read_guest_str};
use crate::stream::{self, Cursor};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use wire::{frame, tag, MAX_SYSCALL_DATA};

/// Which buffer of a syscall is worth carrying, by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Capture {
    None,
    /// A path at argument `n`, read when the syscall starts.
    Path(usize),
    /// `ret` bytes at argument `buf`, read when it returns (data in).
    Filled {
        buf: usize,
    },
    /// `arg[len]` bytes at argument `buf` (data out).
    Given {
        buf: usize,
        len: usize,
    },
}

fn capture_for(name: &str) -> Capture {
    match name {
        "read" | "pread64" | "recv" | "recvfrom" => Capture::Filled { buf: 1 },
        "getrandom" => Capture::Filled { buf: 0 },
        "readlink" => Capture::Filled { buf: 1 },
        "readlinkat" => Capture::Filled { buf: 2 },
        "getcwd" => Capture::Filled { buf: 0 },
        "write" | "pwrite64" | "send" | "sendto" => Capture::Given { buf: 1, len: 2 },
        "open" | "creat" | "stat" | "stat64" | "lstat" | "lstat64" | "access" | "unlink"
        | "mkdir" | "rmdir" | "execve" | "chdir" | "truncate" | "truncate64" | "statfs"
        | "statfs64" | "chmod" | "chown" | "lchown" | "chroot" | "symlink" | "link" | "rename" => {
            Capture::Path(0)
        }
        "openat" | "openat2" | "unlinkat" | "fstatat64" | "newfstatat" | "faccessat"
        | "faccessat2" | "mkdirat" | "execveat" | "statx" | "fchmodat" | "fchownat"
        | "utimensat" | "mknodat" | "renameat" | "renameat2" => Capture::Path(1),
        _ => Capture::None,
    }
}

/// The capture rule of each syscall number, from QEMU's names.
static CAPTURES: OnceLock<std::collections::HashMap<u64, Capture>> = OnceLock::new();

/// Syscalls that make a process: (number, whether it's `clone`, whose
/// flags decide between a thread and a process).
static FORKS: OnceLock<std::collections::HashMap<u64, bool>> = OnceLock::new();

pub fn set_syscall_names(names: &std::collections::BTreeMap<u64, String>) {
    super::sleeps::set_syscall_names(names);
    let _ = CAPTURES.set(
        names
            .iter()
            .map(|(&n, name)| (n, capture_for(name)))
            .filter(|(_, c)| *c != Capture::None)
            .collect(),
    );
    let _ = FORKS.set(
        names
            .iter()
            .filter_map(|(&n, name)| match name.as_str() {
                "fork" | "vfork" => Some((n, false)),
                "clone" => Some((n, true)),
                _ => None,
            })
            .collect(),
    );
}

/// Whether a `clone` with these flags makes a process. Without CLONE_VM
/// it is a fork; with CLONE_VFORK too, because QEMU runs a vfork as a fork
/// (do_fork: the child gets its own copy of memory, and the fork_child
/// hook), which is what posix_spawn and vfork() do.
fn clone_makes_process(flags: u64) -> bool {
    const CLONE_VM: u64 = 0x100;
    const CLONE_VFORK: u64 = 0x4000;
    flags & CLONE_VM == 0 || flags & CLONE_VFORK != 0
}

/// In the parent, after a syscall returned `ret`: if it forked a process,
/// tell the client to wait for the child. Whether it did.
fn note_fork(num: u64, args: &[u64; 6], ret: i64) -> bool {
    if ret <= 0 {
        return false;
    }
    let forked = match FORKS.get().and_then(|f| f.get(&num)) {
        Some(false) => true,
        Some(true) => clone_makes_process(args[0]),
        None => false,
    };
    if forked {
        stream::expect_child(ret as i32);
    }
    forked
}

/// A syscall that started and has not returned yet.
#[derive(Clone)]
pub(super) struct Pending {
    /// False for a fork the user's filter excluded: kept only to tell the
    /// client about the child.
    pub(super) report: bool,
    num: u64,
    args: [u64; 6],
    data: Vec<u8>,
    total: u64,
}

/// A thread's syscall in progress. The thread that ends the process reaches
/// it too: a thread blocked in a syscall then (read, futex, nanosleep)
/// cannot report it itself, so its stream ends with the syscall unfinished.
pub(super) type PendingSlot = Arc<Mutex<Option<Pending>>>;

thread_local! {
    pub(super) static PENDING: PendingSlot = Arc::new(Mutex::new(None));
    /// The vCPU cursor this thread's PENDING is registered under.
    static PENDING_KEY: Cell<usize> = const { Cell::new(0) };
}

/// Every thread's PENDING by the address of its vCPU cursor. A forked child
/// inherits entries of threads it does not have; it never looks them up
/// (its exit_group sees only its own vCPU).
static PENDING_OF: Mutex<BTreeMap<usize, PendingSlot>> = Mutex::new(BTreeMap::new());

/// PENDING_OF's part in the fork protocol (see `forkguard`): as for
/// STREAMS, the child must not inherit it locked by a thread it does not
/// have.
pub(crate) const FORK_LOCK: crate::forkguard::Entry =
    crate::forkguard::entry!(PENDING_OF, BTreeMap<usize, PendingSlot>);

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn set_pending(p: Option<Pending>) {
    PENDING.with(|q| *lock(q) = p);
}

fn take_pending() -> Option<Pending> {
    PENDING.with(|q| lock(q).take())
}

fn wanted(num: u64) -> bool {
    // A match, not `is_none_or`: that needs Rust 1.82 (the workspace's
    // rust-version is 1.80).
    env().is_some_and(|e| match e.hook_syscall {
        Some(f) => f(num),
        None => true,
    })
}

pub fn syscall_enter(c: &mut Cursor, num: i32, args: [i64; 6]) {
    let key = c as *const Cursor as usize;
    if super::sleeps::hand_over_before(num as u32 as u64, &args) {
        stream::hand_over(c);
    }
    if PENDING_KEY.with(|k| k.replace(key)) != key {
        lock(&PENDING_OF).insert(key, PENDING.with(Arc::clone));
    }
    let num = num as u32 as u64;
    let report = wanted(num);
    if !report && !FORKS.get().is_some_and(|f| f.contains_key(&num)) {
        set_pending(None);
        return;
    }
    let args = args.map(|a| a as u64);
    let mut p = Pending {
        report,
        num,
        args,
        data: Vec::new(),
        total: 0,
    };
    if let Some(Capture::Path(i)) = CAPTURES.get().and_then(|c| c.get(&num)) {
        if let Some(s) = read_guest_str(args[*i]) {
            p.total = s.len() as u64;
            p.data = s;
        }
    }
    set_pending(Some(p));
}

pub fn syscall_exit(c: &mut Cursor, num: i32, ret: i64) {
    // An exec came back (it failed): QEMU got on with the guest.
    close_exec_fd();
    let num = num as u32 as u64;
    let Some((report, args)) = PENDING.with(|q| {
        lock(q)
            .as_ref()
            .filter(|p| p.num == num)
            .map(|p| (p.report, p.args))
    }) else {
        set_pending(None);
        return;
    };
    let forked = note_fork(num, &args, ret);
    if !report {
        set_pending(None);
        if forked {
            stream::hand_over(c);
        }
        return;
    }
    // Taken under the stream's lock: a thread ending the process meanwhile
    // reports it unfinished instead, never neither.
    stream::append_with(c, || {
        let mut p = take_pending()?;
        match CAPTURES.get().and_then(|c| c.get(&p.num)) {
            Some(Capture::Filled { buf }) if ret > 0 => {
                let n = (ret as usize).min(MAX_SYSCALL_DATA);
                p.data = read_guest(p.args[*buf], n).unwrap_or_default();
                p.total = ret as u64;
            }
            Some(Capture::Given { buf, len }) => {
                let want = p.args[*len] as usize;
                p.data = read_guest(p.args[*buf], want.min(MAX_SYSCALL_DATA)).unwrap_or_default();
                p.total = want as u64;
            }
            _ => {}
        }
        Some(encode_syscall(&p, Some(ret)))
    });
    if forked {
        // The child's client side may wait for the parent's state at the
        // fork (`cannoli heap`): the fork goes out now, not when the chunk
        // fills (a shell's chunk would wait in `wait4` for the child).
        stream::hand_over(c);
    }
}

/// A syscall of this thread that will not return (exit, exit_group,
/// execve) is reported before its stream ends.
pub fn syscall_unfinished(c: &mut Cursor) {
    if let Some(p) = take_pending().filter(|p| p.report) {
        write_syscall(c, &p, None);
    }
}

/// The thread ending the process is ending the stream of the thread whose
/// vCPU cursor is at `cursor_key` (in a syscall, or stopped before the JIT
/// for good): that thread's syscall, if it is in one, unfinished, for
/// [`stream::finish_with`].
pub fn other_thread_unfinished(cursor_key: usize) -> Option<stream::Event> {
    let slot = lock(&PENDING_OF).remove(&cursor_key)?;
    let p = lock(&slot).take().filter(|p| p.report)?;
    Some(encode_syscall(&p, None))
}

/// This thread ends: its PENDING goes out of the registry.
pub fn thread_ends() {
    let key = PENDING_KEY.with(|k| k.replace(0));
    if key != 0 {
        lock(&PENDING_OF).remove(&key);
    }
}

fn encode_syscall(p: &Pending, ret: Option<i64>) -> stream::Event {
    let data = &p.data[..p.data.len().min(MAX_SYSCALL_DATA)];
    let len = wire::framed_len(11, data.len()) as u32;
    let mut w = vec![0u64; 11];
    w[0] = frame(tag::SYSCALL, ret.is_some() as u32, len);
    w[1] = p.num;
    w[2] = ret.unwrap_or(0) as u64;
    w[3..9].copy_from_slice(&p.args);
    w[9] = data.len() as u64;
    w[10] = p.total;
    (w, data.to_vec())
}

pub(super) fn write_syscall(c: &mut Cursor, p: &Pending, ret: Option<i64>) {
    let (w, data) = encode_syscall(p, ret);
    stream::append(c, &w, &data);
}
