//! A guest thread's event stream: its connection to the client (control
//! and liveness; see `channel`) and its mempipe ring (the events
//! themselves), plus the one way QEMU's C code appends events to it
//! ([`append`]).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wire::channel::Sock;
use wire::Goodbye;

mod map_log;

use map_log::replay_if_owed;
pub use map_log::{log_map, owe_replay};

/// Per-vCPU stream position, embedded in QEMU's CPUNegativeOffsetState
/// (`CannoliCursor` in include/cannoli.h). Outside the JIT it is the truth
/// about where this thread's next event goes; `cursor == 0` means the
/// thread has no window (no stream yet, or it ended).
#[repr(C)]
pub struct Cursor {
    pub cursor: u64,
    pub end: u64,
    /// Guest pc of the instruction that called a helper; 0 outside the JIT.
    pub pc: u64,
}

/// Chunk geometry: (chunk bytes, chunks); `CANNOLI_CHUNK_KB` and
/// `CANNOLI_CHUNKS` override it.
pub fn geometry() -> (usize, usize) {
    let get = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let kb = get("CANNOLI_CHUNK_KB", 128).clamp(8, 64 * 1024);
    let chunk = (kb * 1024 + 4095) & !4095;
    // At most MAX_RING_BYTES a ring: fewer chunks when they are large (a
    // power of two, at least 2).
    let fit = (MAX_RING_BYTES / chunk).max(2);
    let fit = 1 << (usize::BITS - 1 - fit.leading_zeros());
    let n = get("CANNOLI_CHUNKS", 32)
        .clamp(2, 4096)
        .next_power_of_two()
        .min(fit);
    (chunk, n)
}

/// Bytes between a window's end and its chunk's end. The JIT checks the
/// cursor after every event it writes (see `codegen`), so this only has to
/// hold the last event written past the window's end (and a run event
/// before a memory event); it is kept generous.
pub const HEADROOM: usize = 1024;

/// Where, from a window's end, the chunk's last word is: the stack
/// pointer of the last register event a quiet block start wrote in this
/// window, or all ones where another kind of event came since (see
/// `codegen::regs`, quiet block starts). Events never reach it: the JIT's
/// end before `end + 8 + MAX_JIT_EVENT`, and one written here that
/// reaches past the window's end is followed by a flush, which gives a
/// new window whose word is all ones again.
pub const SP_SLOT: i32 = HEADROOM as i32 - 8;
const _: () = assert!(8 + wire::MAX_JIT_EVENT <= SP_SLOT as usize);

impl Window {
    /// The window `[start, end)`, its chunk's stack pointer word
    /// ([`SP_SLOT`]) forgotten.
    fn fresh(start: u64, end: u64) -> Window {
        forget_sp(end);
        Window { cursor: start, end }
    }
}

/// Forgets the stack pointer of the window ending at `end` ([`SP_SLOT`]):
/// an event of another kind than an instruction or an access was written,
/// so the next quiet block start reports its registers.
fn forget_sp(end: u64) {
    // SAFETY: `end` is the end of this thread's current window, whose
    // chunk (or untraced buffer) reaches `HEADROOM` bytes past it; only
    // this thread writes the chunk until it publishes it, and the client
    // reads no byte past the events it was handed. A raw write, no
    // reference: the memory is shared with the client.
    unsafe { ((end + SP_SLOT as u64) as *mut u64).write(u64::MAX) };
}

/// Largest ring [`geometry`] gives (well below `mempipe::MAX_RING_LEN`).
const MAX_RING_BYTES: usize = 4 << 30;

/// The window the JIT may fill: events start below `end`. Returned by the
/// flush function in rax:rdx (SysV returns a pair of u64 in registers), which
/// the flush stub moves into r14:r15.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Window {
    pub cursor: u64,
    pub end: u64,
}

pub struct Stream {
    ring: mempipe::Producer,
    /// Where `ring` is mapped, if in the arena (dropped after `ring`, which
    /// leaves the slot reserved again).
    slot: Option<crate::arena::Slot>,
    sock: Sock,
    addr: String,
    /// Start of the chunk being filled (or of `scratch` once the client is gone).
    chunk: *mut u8,
    /// Where events go once the client has gone away (which QEMU has then
    /// said, in one line).
    scratch: Option<Box<[u64]>>,
    lost_bytes: u64,
}

/// A thread's stream, reachable from other threads so that the thread
/// ending the process can hand over everybody's events.
type Shared = Arc<Mutex<Option<Stream>>>;

thread_local! {
    /// This thread's stream; the JIT's flush stub reaches it from here.
    static STREAM: Shared = Arc::new(Mutex::new(None));
    /// The vCPU cursor this thread's stream is registered under, if any.
    static MY_CURSOR: Cell<usize> = const { Cell::new(0) };
    /// When this thread's stream took the chunk it is filling.
    static CHUNK_TAKEN: Cell<Option<Instant>> = const { Cell::new(None) };
    /// The same, on the coarse clock ([`coarse_ms`]), or when [`enter`]
    /// last found the chunk held no event.
    static TAKEN_MS: Cell<u64> = const { Cell::new(0) };
}

/// Every thread's stream by the address of its vCPU cursor, with the pid
/// that owns it (a forked child inherits the map but not the streams).
static STREAMS: Mutex<BTreeMap<usize, (u32, Shared)>> = Mutex::new(BTreeMap::new());

/// STREAMS's part in the fork protocol (see `forkguard`): the child must not
/// inherit STREAMS locked by a thread it does not have (one ending its
/// stream then).
pub(crate) const FORK_LOCK: crate::forkguard::Entry =
    crate::forkguard::entry!(STREAMS, BTreeMap<usize, (u32, Shared)>);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on this thread's stream slot.
fn with_mine<R>(f: impl FnOnce(&mut Option<Stream>) -> R) -> R {
    STREAM.with(|s| f(&mut lock(s)))
}

impl Stream {
    /// Connects this guest thread to the client and opens its ring.
    pub fn connect() -> crate::error::Result<Stream> {
        let guest = &crate::config::get()
            .ok_or(crate::error::Error::NotInit)?
            .guest;
        let addr = wire::client_addr();
        let (chunk_size, chunks) = geometry();
        let slot = crate::arena::Slot::take();
        // SAFETY: the slot is an arena range of a ring's mapped length,
        // reserved and used by nothing else while we hold it; it is held by
        // the Stream, which drops it after the ring.
        let mut ring = unsafe {
            mempipe::Producer::create_memfd_at(
                chunk_size,
                chunks,
                slot.as_ref().map(|s| s.addr().as_ptr() as usize),
                crate::fds::fd_place(),
            )
        }
        .map_err(crate::error::Error::Ring)?;
        let sock =
            crate::blocks::with_fd(|table| crate::channel::connect(&addr, guest, &ring, table))?;
        // The client has its own descriptor of the ring now.
        ring.release_fd();
        Ok(Stream {
            ring,
            slot,
            sock,
            addr: addr.to_string(),
            chunk: std::ptr::null_mut(),
            scratch: None,
            lost_bytes: 0,
        })
    }

    /// Bytes of the chunk being filled.
    fn chunk_len(&self) -> usize {
        match &self.scratch {
            Some(s) => s.len() * 8,
            None => self.ring.chunk_size(),
        }
    }

    fn window(&self) -> Window {
        let start = self.chunk as u64;
        Window::fresh(start, start + (self.chunk_len() - HEADROOM) as u64)
    }

    /// Takes the next chunk; switches to untraced mode if the client is gone.
    fn next_chunk(&mut self) -> Window {
        CHUNK_TAKEN.with(|t| t.set(Some(Instant::now())));
        TAKEN_MS.with(|t| t.set(coarse_ms()));
        if self.scratch.is_none() {
            match self.ring.acquire() {
                Ok(p) => {
                    self.chunk = p;
                    return self.window();
                }
                Err(e) => self.client_gone(&e.to_string()),
            }
        }
        self.window()
    }

    fn client_gone(&mut self, why: &str) {
        eprintln!(
            "qemu: cannoli: the client at {} stopped reading ({why}); the program goes on \
                   untraced",
            self.addr
        );
        let s = self.scratch.insert(vec![0u64; 8 * 1024].into_boxed_slice());
        self.chunk = s.as_mut_ptr() as *mut u8;
    }

    /// Hands over the chunk filled up to `cursor` and returns the next window.
    pub fn flush(&mut self, cursor: u64) -> Window {
        let len = cursor.saturating_sub(self.chunk as u64) as usize;
        if self.scratch.is_some() {
            self.lost_bytes += len as u64;
        } else if let Err(e) = self.ring.publish(len) {
            self.lost_bytes += len as u64;
            self.client_gone(&e.to_string());
        }
        self.next_chunk()
    }

    /// Tells the client about a forked child to wait for.
    fn expect(&mut self, pid: i32) {
        let Ok(line) = serde_json::to_string(&wire::Expect { expect_pid: pid }) else {
            return;
        };
        let _ = self.sock.write_all((line + "\n").as_bytes());
    }

    /// Hands over everything up to `cursor` and ends the stream cleanly;
    /// `exec`: a traced successor of the same pid follows.
    pub fn finish(mut self, cursor: u64, exec: bool) {
        if cursor != 0 {
            let len = cursor.saturating_sub(self.chunk as u64) as usize;
            // Undeliverable: the client is gone, or went away just now.
            if self.scratch.is_some() || (len > 0 && self.ring.publish(len).is_err()) {
                self.lost_bytes += len as u64;
            }
        }
        self.ring.close();
        let bye = Goodbye {
            chunks: self.ring.published(),
            lost_events: self.lost_bytes / 8,
            exec,
        };
        // (A struct of numbers always serializes; nothing to say otherwise.)
        if let Ok(line) = serde_json::to_string(&bye) {
            let _ = self.sock.write_all((line + "\n").as_bytes());
        }
        self.sock.shutdown();
        // Once the client is gone it was said; the events QEMU then drops
        // are the untraced rest of the program.
        if self.lost_bytes > 0 && self.scratch.is_none() {
            eprintln!(
                "qemu: cannoli: {} bytes of events (up to {} events) could not be delivered \
                       to the client",
                self.lost_bytes,
                self.lost_bytes / 8
            );
        }
    }

    /// In a forked child: let go of the parent's stream without touching it
    /// (the ring is shared memory the parent still writes, the socket is the
    /// parent's connection).
    fn abandon_inherited(self) {
        let Stream {
            ring, sock, slot, ..
        } = self;
        if let Some(s) = slot {
            s.keep_forever();
        }
        // SAFETY: the fd is ours (a copy made by fork); closing it leaves the
        // parent's copy open.
        unsafe { libc::close(sock.into_raw_fd()) };
        // Dropping the producer would mark the shared ring closed.
        ring.forget_in_forked_child();
    }
}

// SAFETY: `chunk` points into memory the Stream owns (its ring mapping or
// its scratch buffer); whoever holds the Stream (through its mutex) is the
// only writer, whichever thread that is.
unsafe impl Send for Stream {}

/// Makes `stream` this thread's stream.
pub fn install(stream: Stream) {
    with_mine(|s| *s = Some(stream));
}

/// Set once a connect of this process failed: its threads (and forked
/// children) go on untraced instead of trying again, and QEMU has said so.
static UNTRACED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Bytes of events this process's untraced threads made (see
/// [`Untraced`]); the next goodbye of a stream of the process counts them
/// as lost, so the client knows the trace has gaps.
static UNDELIVERED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Where a thread without a stream writes: its connect failed, so the
/// client cannot have its events. They are discarded and counted.
struct Untraced;

thread_local! {
    /// [`Untraced::buffer`], once made.
    static UNTRACED_BUF: Cell<*mut u8> = const { Cell::new(std::ptr::null_mut()) };
}

impl Untraced {
    /// Words of the buffer, which is far larger than [`HEADROOM`].
    const WORDS: usize = 8 * 1024;

    /// This thread's buffer (made on first use and kept for the thread's
    /// life: the JIT may still hold a window into it).
    fn buffer() -> *mut u8 {
        UNTRACED_BUF.with(|b| {
            if b.get().is_null() {
                let v = vec![0u64; Self::WORDS].into_boxed_slice();
                b.set(Box::leak(v).as_mut_ptr() as *mut u8);
            }
            b.get()
        })
    }

    fn window() -> Window {
        let start = Self::buffer() as u64;
        Window::fresh(start, start + (8 * Self::WORDS - HEADROOM) as u64)
    }

    /// Counts what was written up to `cursor` and starts over.
    fn flush(cursor: u64) -> Window {
        Self::count(cursor);
        Self::window()
    }

    /// Counts what this thread wrote up to `cursor`, if that is in its
    /// buffer.
    fn count(cursor: u64) {
        let start = UNTRACED_BUF.with(|b| b.get()) as u64;
        if start != 0 && (start..=start + 8 * Self::WORDS as u64).contains(&cursor) {
            UNDELIVERED.fetch_add(cursor - start, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Connects this thread if it has no stream. Without a client (it went
/// away, or never took this process) the thread goes on untraced: QEMU says
/// so in one line for the process, and the client counts a process it was
/// told about and that never connected (or, for a thread, the lost events
/// come with the process's next goodbye). None: untraced.
fn connect_if_needed(s: &mut Option<Stream>) -> Option<&mut Stream> {
    if s.is_none() && !UNTRACED.load(std::sync::atomic::Ordering::Relaxed) {
        match Stream::connect() {
            Ok(st) => *s = Some(st),
            Err(e) => {
                if !UNTRACED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    eprintln!(
                        "qemu: cannoli: {e}; process {} goes on untraced",
                        std::process::id()
                    );
                }
            }
        }
    }
    s.as_mut()
}

/// The process's first connect, at init, failed: the successor of a traced
/// exec goes on untraced rather than failing the guest's exec.
pub fn go_untraced(why: impl std::fmt::Display) {
    UNTRACED.store(true, std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "qemu: cannoli: {why}; process {} goes on untraced",
        std::process::id()
    );
}

/// Gives the vCPU a window if it has none and its stream has not ended;
/// reports whether it is new (the stream may be new too, and owe the client
/// the process's mappings).
///
/// Decided under the thread's stream lock, which a thread ending the whole
/// process holds while it finishes this thread's stream (exit_group does
/// not wait for threads in syscalls, which come back here).
fn ensure_window(c: &mut Cursor) -> bool {
    if c.cursor != 0 {
        return false;
    }
    let key = c as *mut Cursor as usize;
    with_mine(|s| {
        if c.cursor != 0 || has_ended(c) {
            return false;
        }
        let w = match connect_if_needed(s) {
            Some(st) => {
                let w = st.next_chunk();
                if MY_CURSOR.with(|m| m.replace(key)) != key {
                    lock(&STREAMS).insert(key, (std::process::id(), STREAM.with(Arc::clone)));
                }
                w
            }
            None => {
                MY_CURSOR.with(|m| m.set(key));
                Untraced::window()
            }
        };
        c.cursor = w.cursor;
        c.end = w.end;
        true
    })
}

/// A vCPU thread is about to run guest code: after a syscall, a signal,
/// an exception, or QEMU's own exit from translated code.
///
/// Also where a chunk that fills slowly is handed over: a thread whose
/// tool hooks little (a probe on a function called now and then) and that
/// does not sleep (a loop making syscalls that return at once) would
/// otherwise hold its events until its chunk fills, which can take the
/// whole run. Coming back here more than [`LIVE_AT_MOST_MS`] after it took
/// its chunk, it hands over what the chunk holds. One read of the coarse
/// clock (the vDSO's, a memory load) each time. A thread that only
/// computes, with no syscall, does not come here, and its events wait for
/// its chunk to fill.
pub fn enter(c: &mut Cursor) {
    if ensure_window(c) {
        replay_if_owed(c);
        return;
    }
    if c.cursor == 0 {
        return;
    }
    // One look at the thread-local (a call, in a library QEMU loaded).
    let due = TAKEN_MS.with(|t| {
        let now = coarse_ms();
        let due = now.saturating_sub(t.get()) > LIVE_AT_MOST_MS;
        if due {
            // If the chunk holds no event (no hand-over), it is not looked
            // at again before another LIVE_AT_MOST_MS.
            t.set(now);
        }
        due
    });
    if due {
        hand_over(c);
    }
}

/// How long, in milliseconds, a thread that comes back to [`enter`] keeps
/// events in a chunk: about the client's own flush interval for live
/// output, and a hand-over at most ten times a second a thread.
const LIVE_AT_MOST_MS: u64 = 100;

/// Milliseconds on the coarse monotonic clock (a few milliseconds'
/// resolution, read without a syscall).
fn coarse_ms() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

/// The JIT filled its window.
pub fn flush(cursor: u64) -> Window {
    with_mine(|s| match s.as_mut() {
        Some(st) => st.flush(cursor),
        None => Untraced::flush(cursor),
    })
}

/// How long a thread's chunk holds an event that other threads' events
/// wait for, at most, while the thread goes on making such events
/// ([`hand_over_if_held`]).
const HELD_AT_MOST: Duration = Duration::from_millis(1);

/// Hands over the chunk this thread is filling if it took it more than
/// [`HELD_AT_MOST`] ago, before an event whose number of the process's
/// order a client may keep other threads' events waiting for (see
/// `events::order`): a thread that makes such events slowly (a goroutine
/// computing between calls, while other threads make many) would otherwise
/// hold its numbers for as long as its chunk takes to fill, and every
/// other thread's events behind them. One clock read (the vDSO's) a
/// numbered event; a hand-over at most once a millisecond a thread.
pub fn hand_over_if_held(c: &mut Cursor) {
    let held = CHUNK_TAKEN.with(|t| t.get());
    if held.is_some_and(|t| t.elapsed() > HELD_AT_MOST) {
        hand_over(c);
    }
}

/// Hands over the events written so far, however few, outside the JIT:
/// the chunk is published as it is and the vCPU gets a fresh window. For
/// an event a client may be waiting on while this thread goes on without
/// filling its chunk (a fork, whose parent then often sleeps in `wait4`).
pub fn hand_over(c: &mut Cursor) {
    if c.cursor == 0 {
        return; // no window: nothing written since the last hand-over
    }
    with_mine(|s| {
        let Some(st) = s.as_mut() else {
            return;
        };
        // Checked under the lock, as in `append_in`: the stream may have
        // ended meanwhile, and the cursor must be in this stream's chunk.
        let start = st.chunk as u64;
        if c.cursor <= start || c.cursor > start + st.chunk_len() as u64 {
            return;
        }
        let w = st.flush(c.cursor);
        c.cursor = w.cursor;
        c.end = w.end;
    });
}

/// Whether `c` is the cursor of the calling thread's vCPU.
pub fn is_mine(c: &Cursor) -> bool {
    MY_CURSOR.with(|m| m.get()) == c as *const Cursor as usize
}

/// What becomes of a thread after [`finish`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// It exits (or the whole process does): nothing more is reported.
    Exit,
    /// It execs; `successor`: a traced program of the same pid follows
    /// (see [`Goodbye::exec`]). If the exec fails the thread goes on and
    /// traces again, in a new stream.
    Exec { successor: bool },
}

/// The thread owning `c` is exiting, or about to execve, or (for another
/// thread's cursor) the whole process is ending and that thread is outside
/// the JIT (stopped, or in a syscall): hand over every event.
pub fn finish(c: &mut Cursor, after: After) {
    finish_with(c, after, || None);
}

/// [`finish`], with a last event: what `last` gives, under the stream's
/// lock (for another thread: the syscall it is in, which it cannot report
/// any more). `last` must not call into this module.
pub fn finish_with(c: &mut Cursor, after: After, last: impl FnOnce() -> Option<Event>) {
    let key = c as *mut Cursor as usize;
    let mine = is_mine(c) || (c.cursor == 0 && MY_CURSOR.with(|m| m.get()) == 0);
    let slot = if mine {
        MY_CURSOR.with(|m| {
            if m.get() == key {
                m.set(0)
            }
        });
        // Stays in STREAMS until the goodbye is out (see below).
        Some(STREAM.with(Arc::clone))
    } else {
        lock(&STREAMS)
            .remove(&key)
            .filter(|(pid, _)| *pid == std::process::id())
            .map(|(_, s)| s)
    };
    let end = match after {
        After::Exit => ENDED,
        After::Exec { .. } => 0,
    };
    let Some(slot) = slot else {
        c.cursor = 0;
        c.end = end;
        return;
    };
    // The cursor is read and reset under the thread's lock: another thread
    // coming back from a syscall waits, then sees the stream ended.
    let mut guard = lock(&slot);
    if mine && guard.is_none() {
        Untraced::count(c.cursor);
    }
    if guard.is_some() && c.cursor != 0 {
        if let Some((words, payload)) = last() {
            append_in(&mut guard, c, &words, &payload);
        }
    }
    if let Some(mut st) = guard.take() {
        st.lost_bytes += UNDELIVERED.swap(0, std::sync::atomic::Ordering::Relaxed);
        let exec = matches!(after, After::Exec { successor: true });
        st.finish(c.cursor, exec);
    }
    if mine {
        // Only now, with the goodbye sent and the lock still held: a thread
        // ending the process meanwhile (its exit_group does not wait for
        // threads in syscalls, this one's exit or execve) either finds the
        // stream here and waits for the lock, or finds it gone and finished.
        // Had it gone earlier, the process could exit between the two, its
        // last chunk published and no goodbye said.
        lock(&STREAMS).remove(&key);
    }
    c.cursor = 0;
    c.end = end;
}

/// `Cursor::end` of a vCPU whose thread's stream has ended for good (thread
/// exit, exit_group), with `cursor` 0. QEMU may still report events for it:
/// an x86 guest thread's GDT is unmapped while its vCPU is freed, after the
/// stream's goodbye. Those must not open a new stream (which would then
/// never say goodbye); they go out with another thread's events.
const ENDED: u64 = u64::MAX;

/// Whether `c`'s thread has ended its stream for good.
pub fn has_ended(c: &Cursor) -> bool {
    c.cursor == 0 && c.end == ENDED
}

/// In the parent of a fork: the client should wait for `child` too.
pub fn expect_child(child: i32) {
    with_mine(|s| {
        if let Some(st) = s.as_mut() {
            st.expect(child)
        }
    });
}

/// In a forked child: forget the parent's stream; the child connects anew.
pub fn forked_child(c: &mut Cursor) {
    if let Some(st) = with_mine(|s| s.take()) {
        st.abandon_inherited();
    }
    // The other threads' streams came along as copies too (their threads
    // did not): let go of their sockets. A stream whose lock a thread held
    // at the fork (it was appending after a syscall) stays as it is.
    let me = std::process::id();
    let inherited: Vec<Shared> = match STREAMS.try_lock() {
        Ok(mut m) => {
            let keys: Vec<usize> = m
                .iter()
                .filter(|(_, (pid, _))| *pid != me)
                .map(|(k, _)| *k)
                .collect();
            keys.into_iter()
                .filter_map(|k| m.remove(&k).map(|(_, s)| s))
                .collect()
        }
        Err(_) => Vec::new(),
    };
    for shared in inherited {
        if let Ok(mut g) = shared.try_lock() {
            if let Some(st) = g.take() {
                st.abandon_inherited();
            }
        }
    }
    // The parent's untraced bytes are the parent's to count.
    UNDELIVERED.store(0, std::sync::atomic::Ordering::Relaxed);
    MY_CURSOR.with(|m| m.set(0));
    c.cursor = 0;
    c.end = 0;
}

/// Appends one event, `words` then `payload` padded to whole words, at the
/// vCPU's cursor, outside the JIT. Leaves the cursor inside the window.
pub fn append(c: &mut Cursor, words: &[u64], payload: &[u8]) {
    if has_window(c) {
        with_mine(|s| append_in(s, c, words, payload));
    }
}

/// Writes an event of `head` then `n` more words, the first `n` that
/// `words` yields (it yields at least `n`), straight into the window when
/// it fits there whole, without the stream's lock. Returns false, having
/// written nothing, where the caller must take [`append`]'s path (no
/// window yet, the stream ended, or the event would reach the window's
/// end and so needs a flush).
///
/// Only for helpers the JIT calls: they run on the vCPU's own thread between
/// the JIT's own lock-free writes to the same window (the call site stored
/// the JIT's cursor into `c` before the call and reloads it after), so they
/// may write the window as the JIT does. This is the path of a hooked
/// instruction's register event, where the lock, the thread-local and a
/// copy through a buffer cost more than the event itself. The lines a few
/// such events ahead are then asked for ([`crate::prefetch`]).
#[inline]
pub fn append_in_window<const H: usize>(
    c: &mut Cursor,
    head: &[u64; H],
    n: usize,
    words: impl Iterator<Item = u64>,
) -> bool {
    let len = 8 * (H + n) as u64;
    let fits = c.cursor.checked_add(len).is_some_and(|e| e < c.end);
    if c.cursor == 0 || !fits {
        return false;
    }
    let p = c.cursor as *mut u64;
    // SAFETY (both blocks): [cursor, cursor + len) lies below the window's
    // end, inside this thread's current chunk (or untraced buffer), which
    // nothing else writes or reads until this thread publishes it (see the
    // contract above); the cursor is 8-byte aligned. Only raw writes reach
    // the shared memory, no reference to it is made.
    // (`H` words, a constant: stores, not a call of memcpy.)
    unsafe { p.cast::<[u64; H]>().write(*head) };
    let tail = unsafe { p.add(H) };
    let mut written = 0;
    for w in words.take(n) {
        // SAFETY: as above (`written < n`).
        unsafe { tail.add(written).write(w) };
        written += 1;
    }
    debug_assert_eq!(written, n, "fewer words than the event's length");
    c.cursor += len;
    forget_sp(c.end);
    crate::prefetch::ring_lines_ahead(c.cursor, c.end);
    true
}

/// Whether `c`'s thread may report (its stream has not ended); gives it a
/// window (and the stream the mappings it owes) if it has none.
fn has_window(c: &mut Cursor) -> bool {
    if has_ended(c) {
        // Process-wide facts go through append_or_keep; nothing else is
        // reported for a thread that has exited.
        return false;
    }
    if ensure_window(c) {
        replay_if_owed(c);
    }
    true
}

/// An encoded event: its words and its payload.
pub type Event = (Vec<u64>, Vec<u8>);

/// Like [`append`], for the event `make` gives, made under the thread's
/// stream lock (so that taking what it reports and reporting it are one
/// step for a thread that may end this stream: see [`finish_with`]).
/// `make` must not call into this module.
pub fn append_with(c: &mut Cursor, make: impl FnOnce() -> Option<Event>) {
    if !has_window(c) {
        return;
    }
    with_mine(|s| {
        if c.cursor != 0 {
            if let Some((words, payload)) = make() {
                append_in(s, c, &words, &payload);
            }
        }
    });
}

/// Appends an event to `s`, the stream slot of `c`'s thread, locked by the
/// caller (that thread, or the one ending the process).
fn append_in(s: &mut Option<Stream>, c: &mut Cursor, words: &[u64], payload: &[u8]) {
    // Checked under the lock: a thread ending the process may have finished
    // this stream since this thread looked (it was in a syscall). What comes
    // back then is after the end: no guest code sees it.
    if c.cursor == 0 {
        return;
    }
    let len = 8 * words.len() + payload.len().next_multiple_of(8);
    let (chunk, chunk_len) = match s.as_ref() {
        Some(st) => (st.chunk as u64, st.chunk_len()),
        None => (Untraced::buffer() as u64, 8 * Untraced::WORDS),
    };
    let flush = |s: &mut Option<Stream>, cursor: u64| match s.as_mut() {
        Some(st) => st.flush(cursor),
        None => Untraced::flush(cursor),
    };
    if len > chunk_len || !(chunk..chunk + chunk_len as u64).contains(&c.cursor) {
        // Cannot happen (events are far smaller than a chunk, and the
        // cursor is in this stream's chunk); dropped rather than written out
        // of bounds, and counted.
        UNDELIVERED.fetch_add(len as u64, std::sync::atomic::Ordering::Relaxed);
        return;
    }
    if c.cursor + len as u64 > chunk + chunk_len as u64 {
        let w = flush(s, c.cursor);
        c.cursor = w.cursor;
        c.end = w.end;
    }
    // SAFETY: [cursor, cursor + len) lies inside the current chunk (the
    // cursor was in it, the event fits in what is left of it or in a whole
    // new one: checked above), which nobody else writes until it is
    // published: outside the JIT only the holder of the stream's lock, and
    // the JIT of `c`'s thread is not running (it is this thread, or stopped
    // by exit_group); the cursor is 8-byte aligned.
    unsafe {
        let p = c.cursor as *mut u8;
        std::ptr::copy_nonoverlapping(words.as_ptr() as *const u8, p, 8 * words.len());
        let q = p.add(8 * words.len());
        std::ptr::copy_nonoverlapping(payload.as_ptr(), q, payload.len());
        std::ptr::write_bytes(
            q.add(payload.len()),
            0,
            len - 8 * words.len() - payload.len(),
        );
    }
    c.cursor += len as u64;
    if c.cursor >= c.end {
        let w = flush(s, c.cursor);
        c.cursor = w.cursor;
        c.end = w.end;
    } else {
        forget_sp(c.end);
    }
}

/// Appends an event at this thread's own vCPU cursor, for code that has no
/// cursor at hand: translation, which runs on the vCPU thread outside the
/// JIT, after `cpu_enter` gave the thread its window.
pub fn append_mine(words: &[u64], payload: &[u8]) {
    let key = MY_CURSOR.with(|m| m.get());
    if key == 0 {
        return;
    }
    // SAFETY: MY_CURSOR holds the address of this thread's vCPU cursor,
    // registered by `ensure_window` and cleared by `finish` and
    // `forked_child` before the vCPU goes away. Outside the JIT only this
    // thread writes it: `exit_group` finishes other threads' cursors only
    // once they are stopped outside the JIT, never in translation.
    let c = unsafe { &mut *(key as *mut Cursor) };
    append(c, words, payload);
}

/// Events that happened where no vCPU was at hand (QEMU-internal threads);
/// they go out with the next event of any thread.
static ORPHANS: Mutex<Vec<(Vec<u64>, Vec<u8>)>> = Mutex::new(Vec::new());

/// Like [`append`], for a caller that may have no vCPU.
pub fn append_or_keep(c: Option<&mut Cursor>, words: &[u64], payload: &[u8]) {
    match c {
        Some(c) if !has_ended(c) => {
            let orphans = std::mem::take(&mut *ORPHANS.lock().unwrap_or_else(|e| e.into_inner()));
            for (w, p) in &orphans {
                append(c, w, p);
            }
            append(c, words, payload)
        }
        _ => ORPHANS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((words.to_vec(), payload.to_vec())),
    }
}

/// A longjmp is leaving the JIT (QEMU's `cpu_loop_exit`): the block that
/// was running ends at the instruction in `c.pc` (none: outside the JIT).
pub fn cut(c: &mut Cursor, words: &[u64]) {
    if c.pc != 0 && c.cursor != 0 && !has_ended(c) {
        append(c, words, &[]);
    }
}

/// Appends a memory access made by a QEMU helper (outside the JIT);
/// `value_hi` is the high half of a 16-byte access.
pub fn helper_mem(
    c: &mut Cursor,
    addr: u64,
    value: u64,
    value_hi: u64,
    size_log2: u8,
    store: bool,
) {
    let pc = c.pc;
    // pc 0: not inside a guest instruction (the JIT's exit code clears it).
    if pc == 0 || size_log2 > 4 || !crate::user_hook_mem(pc, store, 1 << size_log2) {
        return;
    }
    let t = wire::mem_tag(store, size_log2) as u64;
    let mut words = [0u64; 5];
    let n = if wire::pc_fits(pc) {
        words[..3].copy_from_slice(&[t << 56 | pc, addr, value]);
        3
    } else {
        words[..4].copy_from_slice(&[(wire::tag::MEM_LONG as u64) << 56 | t, pc, addr, value]);
        4
    };
    if size_log2 == 4 {
        words[n] = value_hi;
        append(c, &words[..n + 1], &[]);
    } else {
        append(c, &words[..n], &[]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_stays_bounded() {
        // The only test here that sets these variables.
        std::env::set_var("CANNOLI_CHUNK_KB", "65536");
        std::env::set_var("CANNOLI_CHUNKS", "4096");
        let (c, n) = geometry();
        assert_eq!((c, n), (64 << 20, 64));
        assert!(c * n <= MAX_RING_BYTES);
        assert!(c * n <= mempipe::MAX_RING_LEN);
        std::env::set_var("CANNOLI_CHUNK_KB", "1");
        std::env::set_var("CANNOLI_CHUNKS", "3");
        assert_eq!(geometry(), (8192, 4));
        std::env::remove_var("CANNOLI_CHUNK_KB");
        std::env::remove_var("CANNOLI_CHUNKS");
        assert_eq!(geometry(), (128 << 10, 32));
    }

    #[test]
    fn append_in_window_writes_only_below_the_end() {
        // A window of 6 words and its chunk's headroom.
        let mut buf = vec![0u64; 6 + HEADROOM / 8];
        let start = buf.as_mut_ptr() as u64;
        let mut c = Cursor {
            cursor: start,
            end: start + 6 * 8,
            pc: 0,
        };
        // 2 + 3 words end at word 5, below the end (word 6).
        assert!(append_in_window(&mut c, &[7, 8], 3, 10..));
        assert_eq!(c.cursor, start + 5 * 8);
        // One more word would reach the end: refused, nothing written.
        assert!(!append_in_window(&mut c, &[9], 0, 0..));
        assert_eq!(c.cursor, start + 5 * 8);
        assert_eq!(buf[..8], [7, 8, 10, 11, 12, 0, 0, 0]);
        // The event forgot the stack pointer of the last quiet block
        // start, in the chunk's last word; no other word was written.
        assert_eq!(buf.last(), Some(&u64::MAX));
        assert!(buf[8..buf.len() - 1].iter().all(|&w| w == 0));
        // No window: refused.
        let mut none = Cursor {
            cursor: 0,
            end: 0,
            pc: 0,
        };
        assert!(!append_in_window(&mut none, &[1], 0, 0..));
    }
}
