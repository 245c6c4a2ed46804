//! The TCP side: accepting QEMU's connections, the handshake, and per
//! connection the worker threads that decode the ring and the control loop
//! that watches the socket for the goodbye.

use std::collections::{HashMap, HashSet};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use mempipe::Consumer;
use wire::{Expect, Goodbye, Hello, Welcome, MAGIC, WIRE_VERSION};

use crate::decode::{decode, Layout};
use crate::reseq::Reseq;
use crate::{Cannoli, ClientInfo, Error, Stats};

/// How long a new connection has to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest control line accepted.
const MAX_LINE: u64 = 64 * 1024;
/// How long [`Server::run`] keeps listening after the last connection ended,
/// for a forked child that has not connected yet.
const DEFAULT_LINGER: Duration = Duration::from_millis(100);
/// How often [`Server::run_until`] asks its condition while it is false.
const DONE_POLL: Duration = Duration::from_millis(10);

/// A listening client. Create it with [`Server::bind`], then call
/// [`Server::run`] or [`Server::run_forever`].
pub struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    linger: Duration,
}

impl Server {
    /// Listens on `addr` (`HOST:PORT`; port 0 picks a free one, see
    /// [`Server::local_addr`]).
    pub fn bind(addr: &str) -> Result<Server, Error> {
        let listener = TcpListener::bind(addr).map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                Error::AddrInUse {
                    addr: addr.to_string(),
                }
            } else {
                Error::Bind {
                    addr: addr.to_string(),
                    source: e,
                }
            }
        })?;
        let local = listener.local_addr().map_err(|e| Error::Bind {
            addr: addr.to_string(),
            source: e,
        })?;
        Ok(Server {
            listener,
            addr: local,
            linger: DEFAULT_LINGER,
        })
    }

    /// The address actually listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// How long [`Server::run`] waits, after the last live connection ended,
    /// for another one (say, of a forked child) before it returns. Default
    /// 100 ms.
    pub fn linger(mut self, linger: Duration) -> Server {
        self.linger = linger;
        self
    }

    /// Serves until every connection of the traced process tree has ended
    /// (the number of live connections dropped back to 0 after the first one,
    /// and stayed there for the linger time) and every event was delivered to
    /// [`Cannoli::trace`]. `threads` worker threads decode each connection's
    /// stream (at least 1).
    pub fn run<T: Cannoli>(self, threads: usize) -> Result<Stats, Error> {
        self.serve::<T>(threads, true, None)
    }

    /// Serves until `done()` has returned true and, after that, every
    /// connection made so far (those still waiting in the listen backlog
    /// included) has ended and every event was delivered to
    /// [`Cannoli::trace`]. Unlike [`Server::run`] it also returns when no
    /// connection ever arrived, and it does not linger.
    ///
    /// For a launcher: bind, start QEMU with this address, pass "QEMU has
    /// exited" as `done`. Once the traced process has exited, every
    /// connection it made is established (in the backlog at least), so none
    /// is missed. `done` is asked every 10 ms while it is false.
    pub fn run_until<T: Cannoli>(
        self,
        threads: usize,
        done: impl Fn() -> bool,
    ) -> Result<Stats, Error> {
        self.serve::<T>(threads, false, Some(&done))
    }

    /// Serves connections forever (returns only on an error).
    pub fn run_forever<T: Cannoli>(self, threads: usize) -> Result<(), Error> {
        self.serve::<T>(threads, false, None).map(|_| ())
    }

    fn serve<T: Cannoli>(
        self,
        threads: usize,
        until_idle: bool,
        done: Option<&dyn Fn() -> bool>,
    ) -> Result<Stats, Error> {
        let (wake_rx, wake_tx) = UnixStream::pair().map_err(|e| Error::Io {
            what: "creating the wake-up socket pair",
            source: e,
        })?;
        for s in [&wake_rx, &wake_tx] {
            s.set_nonblocking(true).map_err(|e| Error::Io {
                what: "setting up the wake-up socket pair",
                source: e,
            })?;
        }
        self.listener.set_nonblocking(true).map_err(|e| Error::Io {
            what: "making the listening socket non-blocking",
            source: e,
        })?;

        let shared = Arc::new(Shared::<T> {
            threads: threads.max(1),
            stats: Mutex::new(Stats::default()),
            live: Mutex::new(0),
            pids: Mutex::new(HashMap::new()),
            wake: wake_tx,
            expected: Mutex::new(HashSet::new()),
        });
        let mut handles: Vec<JoinHandle<()>> = Vec::new();
        let mut seen_any = false;

        loop {
            let none_live = *lock(&shared.live) == 0;
            let expecting = none_live && seen_any && shared.expecting();
            let idle = until_idle && seen_any && none_live && !expecting;
            // run_until: once done() holds, drain the backlog (a zero-timeout
            // poll) and the live connections (each wakes us when it ends).
            let finishing = done.is_some_and(|d| d());
            let timeout = match done {
                Some(_) if finishing && none_live => Some(Duration::ZERO),
                Some(_) if finishing => None,
                Some(_) => Some(DONE_POLL),
                None if idle => Some(self.linger),
                // Re-check now and then whether the announced process lives.
                None if expecting => Some(DONE_POLL),
                None => None,
            };
            let ready =
                poll2(self.listener.as_raw_fd(), wake_rx.as_raw_fd(), timeout).map_err(|e| {
                    Error::Io {
                        what: "waiting for connections (poll)",
                        source: e,
                    }
                })?;
            if ready == [false, false] && (idle || (finishing && none_live)) {
                break; // lingered long enough, or done with nothing pending
            }
            if ready[1] {
                let mut buf = [0u8; 64];
                while matches!((&wake_rx).read(&mut buf), Ok(n) if n > 0) {}
            }
            if ready[0] {
                loop {
                    match self.listener.accept() {
                        Ok((stream, peer)) => {
                            seen_any = true;
                            *lock(&shared.live) += 1;
                            let sh = shared.clone();
                            let spawned = std::thread::Builder::new()
                                .name("cannoli-conn".into())
                                .spawn(move || connection_thread(&sh, stream, peer));
                            match spawned {
                                Ok(h) => handles.push(h),
                                Err(e) => {
                                    *lock(&shared.live) -= 1;
                                    eprintln!("cannoli: cannot start a thread for the connection from {peer}: {e}; dropping it");
                                }
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            // ECONNABORTED, EMFILE, ...: report and go on.
                            eprintln!("cannoli: accepting a connection failed: {e}");
                            std::thread::sleep(Duration::from_millis(10));
                            break;
                        }
                    }
                }
            }
            // Reap finished connection threads.
            let mut i = 0;
            while i < handles.len() {
                if handles[i].is_finished() {
                    let _ = handles.swap_remove(i).join();
                } else {
                    i += 1;
                }
            }
        }
        for h in handles {
            let _ = h.join();
        }
        let stats = lock(&shared.stats).clone();
        Ok(stats)
    }
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits until `a` or `b` is readable, or the timeout passes. Returns which
/// are readable.
fn poll2(a: i32, b: i32, timeout: Option<Duration>) -> io::Result<[bool; 2]> {
    let ms: libc::c_int = match timeout {
        None => -1,
        Some(t) => t.as_millis().min(i32::MAX as u128) as libc::c_int,
    };
    let mut fds = [
        libc::pollfd {
            fd: a,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: b,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is a valid array of 2 pollfd for the whole call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if rc >= 0 {
            let r =
                |p: &libc::pollfd| p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0;
            return Ok([r(&fds[0]), r(&fds[1])]);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

type PidMap<T> = HashMap<i32, (Arc<<T as Cannoli>::PidContext>, usize)>;

/// State shared by the accept loop and the connection threads of one run.
struct Shared<T: Cannoli> {
    threads: usize,
    stats: Mutex<Stats>,
    /// Connections accepted whose thread has not finished.
    live: Mutex<usize>,
    /// The process contexts, keyed by pid, with the number of live threads.
    pids: Mutex<PidMap<T>>,
    /// Written to when a connection ends, to wake the accept loop.
    wake: UnixStream,
    /// Processes announced but not connected yet: a forked child, or a
    /// process that execs a program QEMU traces again.
    expected: Mutex<HashSet<i32>>,
}

impl<T: Cannoli> Shared<T> {
    /// Whether an announced process may still connect: forget the ones that
    /// no longer exist (a child killed before it ran, say).
    fn expecting(&self) -> bool {
        let mut e = lock(&self.expected);
        // SAFETY: kill with signal 0 only checks that the pid exists.
        e.retain(|&pid| unsafe {
            libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM
        });
        !e.is_empty()
    }

    fn pid_acquire(&self, ci: &ClientInfo) -> Arc<T::PidContext> {
        let mut pids = lock(&self.pids);
        if let Some((ctx, n)) = pids.get_mut(&ci.pid) {
            *n += 1;
            return ctx.clone();
        }
        let ctx = T::init_pid(ci);
        pids.insert(ci.pid, (ctx.clone(), 1));
        ctx
    }

    fn pid_release(&self, pid: i32) {
        let removed = {
            let mut pids = lock(&self.pids);
            match pids.get_mut(&pid) {
                Some((_, n)) if *n > 1 => {
                    *n -= 1;
                    None
                }
                Some(_) => pids.remove(&pid),
                None => None,
            }
        };
        drop(removed); // the tool's PidContext drop runs outside the lock
    }
}

/// Decrements the live count and wakes the accept loop when a connection
/// thread ends, however it ends.
struct LiveGuard<'a, T: Cannoli>(&'a Shared<T>);

impl<T: Cannoli> Drop for LiveGuard<'_, T> {
    fn drop(&mut self) {
        *lock(&self.0.live) -= 1;
        let _ = (&self.0.wake).write(&[1]);
    }
}

fn connection_thread<T: Cannoli>(shared: &Shared<T>, stream: TcpStream, peer: SocketAddr) {
    let _live = LiveGuard(shared);
    let r = catch_unwind(AssertUnwindSafe(|| connection::<T>(shared, stream, peer)));
    if r.is_err() {
        die_after_panic(&format!("the connection from {peer}"));
    }
}

/// A callback of the tool panicked. The stream cannot go on without it and
/// QEMU would wait forever for its ring to drain, so end the process.
fn die_after_panic(what: &str) -> ! {
    eprintln!("cannoli: the tool panicked while serving {what} (message above); exiting");
    std::process::exit(101);
}

/// Reads one `\n`-terminated line of at most [`MAX_LINE`] bytes. `Ok(None)`
/// at a clean EOF before any byte.
fn read_line(r: &mut BufReader<TcpStream>) -> io::Result<Option<String>> {
    let mut line = String::new();
    let n = r.by_ref().take(MAX_LINE).read_line(&mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if !line.ends_with('\n') {
        if n as u64 >= MAX_LINE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "line longer than 64 KiB",
            ));
        }
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed in the middle of a line",
        ));
    }
    Ok(Some(line))
}

fn send_welcome(w: &mut TcpStream, error: Option<String>) -> io::Result<()> {
    let mut line = serde_json::to_string(&Welcome { error }).map_err(io::Error::other)?;
    line.push('\n');
    w.write_all(line.as_bytes())
}

/// Reads and checks the hello, opens the ring and answers with a welcome.
/// On failure it tells both QEMU (in the welcome) and the user (stderr).
fn handshake(
    reader: &mut BufReader<TcpStream>,
    writer: &mut TcpStream,
    peer: SocketAddr,
) -> Option<(Hello, Consumer)> {
    let _ = writer.set_read_timeout(Some(HELLO_TIMEOUT));
    let line = match read_line(reader) {
        Ok(Some(l)) => l,
        Ok(None) => {
            eprintln!("cannoli: connection from {peer} closed before it said hello; ignoring it");
            return None;
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            eprintln!(
                "cannoli: connection from {peer} sent no hello within {} s; closing it",
                HELLO_TIMEOUT.as_secs()
            );
            return None;
        }
        Err(e) => {
            eprintln!(
                "cannoli: reading the hello of the connection from {peer} failed: {e}; closing it"
            );
            return None;
        }
    };
    let _ = writer.set_read_timeout(None);

    let reject = |writer: &mut TcpStream, who: String, msg: String| {
        eprintln!("cannoli: rejected {who}: {msg}");
        let _ = send_welcome(writer, Some(msg));
    };

    // Look at magic and version before the full parse, so that a QEMU side
    // speaking another wire version gets a version message, not a parse error.
    let value: serde_json::Value = match serde_json::from_str(line.trim_end()) {
        Ok(v) => v,
        Err(e) => {
            reject(
                writer,
                format!("connection from {peer}"),
                format!("not a cannoli hello (invalid JSON: {e})"),
            );
            return None;
        }
    };
    if value.get("magic").and_then(|m| m.as_str()) != Some(MAGIC) {
        reject(
            writer,
            format!("connection from {peer}"),
            format!("not a cannoli hello (magic is not \"{MAGIC}\")"),
        );
        return None;
    }
    let who = match (
        value.get("pid").and_then(|v| v.as_i64()),
        value.get("tid").and_then(|v| v.as_i64()),
    ) {
        (Some(p), Some(t)) => format!("pid {p} tid {t}"),
        _ => format!("connection from {peer}"),
    };
    let theirs = value.get("wire_version").and_then(|v| v.as_u64());
    if theirs != Some(WIRE_VERSION as u64) {
        let jv = value
            .get("jitter_version")
            .and_then(|v| v.as_str())
            .unwrap_or("unknown version");
        let theirs = theirs.map_or_else(|| "none".to_string(), |v| v.to_string());
        reject(
            writer,
            who,
            format!(
                "wire version mismatch: QEMU's cannoli hook library (jitter {jv}) speaks wire version {theirs}, \
                 this client (cannoli {}) speaks wire version {WIRE_VERSION}; \
                 rebuild the hook library against the same cannoli version as the client",
                env!("CARGO_PKG_VERSION")
            ),
        );
        return None;
    }
    let hello: Hello = match serde_json::from_value(value) {
        Ok(h) => h,
        Err(e) => {
            reject(writer, who, format!("malformed hello: {e}"));
            return None;
        }
    };
    let consumer = match Consumer::open(Path::new(&hello.ring)) {
        Ok(c) => c,
        Err(e) => {
            reject(
                writer,
                who,
                format!("cannot open the event ring {}: {e}", hello.ring),
            );
            return None;
        }
    };
    if let Err(e) = send_welcome(writer, None) {
        eprintln!("cannoli: {who}: sending the welcome failed: {e}; dropping the connection");
        return None;
    }
    Some((hello, consumer))
}

/// Everything the workers of one connection share.
struct Conn<'a, T: Cannoli> {
    pid_ctx: &'a T::PidContext,
    tid_ctx: &'a T::TidContext,
    tool: Mutex<T>,
    consumer: &'a Consumer,
    reseq: Reseq<T::Trace>,
    layout: Layout<'a>,
    pid: i32,
    tid: i32,
    events: AtomicU64,
    chunks: AtomicU64,
    bytes: AtomicU64,
    lost: AtomicU64,
    /// Framed events of unknown tags skipped, and the first such tag (+1; 0:
    /// none yet).
    skipped: AtomicU64,
    skipped_tag: AtomicU32,
    relay: Relay,
    expected: &'a Mutex<HashSet<i32>>,
}

/// How the first worker of a connection calls the others in.
///
/// On two cores QEMU needs one of them; more workers than the ring's
/// producer can keep busy only compete with it and with each other. So the
/// first worker alone waits on the ring (briefly spinning, then a futex);
/// the others sleep here and are woken only when that worker finds chunks
/// piling up behind the one it took (the ring full: QEMU is waiting), and
/// take chunks only while that lasts. A second worker thus never costs
/// anything when one keeps up, and helps as soon as one does not.
struct Relay {
    lock: Mutex<()>,
    wake: Condvar,
    /// Helpers asleep in `wait` (so the first worker can skip the wake-up
    /// syscall when nobody sleeps).
    sleeping: AtomicU32,
    done: std::sync::atomic::AtomicBool,
}

impl Relay {
    fn new() -> Relay {
        Relay {
            lock: Mutex::new(()),
            wake: Condvar::new(),
            sleeping: AtomicU32::new(0),
            done: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A helper worker sleeps until called in (or a timeout, to re-check).
    fn wait(&self, backlog: impl Fn() -> bool) {
        let g = lock(&self.lock);
        self.sleeping.fetch_add(1, Ordering::SeqCst);
        if !self.done.load(Ordering::SeqCst) && !backlog() {
            let _ = self.wake.wait_timeout(g, Duration::from_millis(50));
        }
        self.sleeping.fetch_sub(1, Ordering::SeqCst);
    }

    /// The first worker saw a backlog: call one helper in.
    fn call_in(&self) {
        if self.sleeping.load(Ordering::SeqCst) > 0 {
            let _g = lock(&self.lock);
            self.wake.notify_one();
        }
    }

    fn finish(&self) {
        self.done.store(true, Ordering::SeqCst);
        let _g = lock(&self.lock);
        self.wake.notify_all();
    }
}

fn connection<T: Cannoli>(shared: &Shared<T>, stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_nonblocking(false);
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("cannoli: connection from {peer}: {e}; dropping it");
            return;
        }
    };
    let mut reader = BufReader::new(stream);
    let Some((hello, consumer)) = handshake(&mut reader, &mut writer, peer) else {
        lock(&shared.stats).add(&Stats {
            refused_connections: 1,
            ..Stats::default()
        });
        return;
    };
    let ci = ClientInfo::from_hello(&hello);
    lock(&shared.expected).remove(&ci.pid);

    let pid_ctx = shared.pid_acquire(&ci);
    let (tool, tid_ctx) = T::init_tid(&pid_ctx, &ci);
    let threads = shared.threads;
    let conn = Conn::<T> {
        pid_ctx: &pid_ctx,
        tid_ctx: &tid_ctx,
        tool: Mutex::new(tool),
        consumer: &consumer,
        reseq: Reseq::new(0, 2 * threads + 4),
        layout: Layout::new(&ci),
        pid: ci.pid,
        tid: ci.tid,
        events: AtomicU64::new(0),
        chunks: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        skipped: AtomicU64::new(0),
        skipped_tag: AtomicU32::new(0),
        relay: Relay::new(),
        expected: &shared.expected,
    };

    let mut incomplete = 0;
    std::thread::scope(|s| {
        for index in 0..threads {
            let conn = &conn;
            let spawned = std::thread::Builder::new()
                .name(format!("cannoli-{}", ci.tid))
                .spawn_scoped(s, move || {
                    if catch_unwind(AssertUnwindSafe(|| worker(conn, index))).is_err() {
                        die_after_panic(&format!("pid {} tid {}", conn.pid, conn.tid));
                    }
                });
            if let Err(e) = spawned {
                eprintln!(
                    "cannoli: pid {} tid {}: cannot start a worker thread: {e}",
                    ci.pid, ci.tid
                );
            }
        }
        if !control(&mut reader, &conn) {
            incomplete = 1;
        }
    });

    let Conn {
        tool,
        events,
        chunks,
        bytes,
        lost,
        skipped,
        skipped_tag,
        ..
    } = conn;
    let skipped = skipped.into_inner();
    if skipped > 0 {
        eprintln!(
            "cannoli: pid {} tid {}: skipped {skipped} event{} of a kind this client does not know \
             (framed tag {:#04x}, ...); QEMU's hook library is newer than this client (cannoli {}): \
             rebuild the client against the same cannoli version",
            ci.pid,
            ci.tid,
            if skipped == 1 { "" } else { "s" },
            skipped_tag.into_inner().saturating_sub(1),
            env!("CARGO_PKG_VERSION")
        );
    }
    drop(tool); // the tool's per-thread value: its Drop may report
    drop(tid_ctx);
    drop(consumer);
    shared.pid_release(ci.pid);
    drop(pid_ctx);

    let mut st = lock(&shared.stats);
    st.add(&Stats {
        connections: 1,
        events: events.into_inner(),
        chunks: chunks.into_inner(),
        bytes: bytes.into_inner(),
        lost_events: lost.into_inner(),
        incomplete_streams: incomplete,
        skipped_events: skipped,
        refused_connections: 0,
    });
}

/// Watches the control socket until the goodbye or EOF, and ends the ring
/// accordingly. Returns false when the stream is incomplete.
fn control<T: Cannoli>(reader: &mut BufReader<TcpStream>, conn: &Conn<'_, T>) -> bool {
    let (pid, tid) = (conn.pid, conn.tid);
    let goodbye = loop {
        match read_line(reader) {
            Ok(Some(line)) => match serde_json::from_str::<Goodbye>(line.trim_end()) {
                Ok(g) => {
                    if g.exec {
                        lock(conn.expected).insert(pid);
                    }
                    break Some(g);
                }
                Err(_) if serde_json::from_str::<Expect>(line.trim_end()).is_ok() => {
                    let e: Expect = serde_json::from_str(line.trim_end()).expect("checked");
                    lock(conn.expected).insert(e.expect_pid);
                }
                Err(e) => {
                    let shown: String = line.trim_end().chars().take(80).collect();
                    eprintln!("cannoli: pid {pid} tid {tid}: ignoring unexpected control message {shown:?} ({e})");
                }
            },
            Ok(None) => break None,
            Err(e) => {
                if e.kind() != io::ErrorKind::ConnectionReset
                    && e.kind() != io::ErrorKind::UnexpectedEof
                {
                    eprintln!(
                        "cannoli: pid {pid} tid {tid}: reading the control connection failed: {e}"
                    );
                }
                break None;
            }
        }
    };
    let consumer = conn.consumer;
    match goodbye {
        Some(g) => {
            // QEMU closed the ring before saying goodbye; if it somehow did
            // not, nothing more will come either way.
            if !consumer.closed_by_producer() {
                consumer.abandon();
            }
            let published = consumer.published();
            let all_there = g.chunks == published;
            if !all_there {
                eprintln!(
                    "cannoli: pid {pid} tid {tid}: QEMU says it published {} chunks but the ring holds {published}",
                    g.chunks
                );
            }
            if g.lost_events > 0 {
                eprintln!(
                    "cannoli: pid {pid} tid {tid}: QEMU could not record {} events; the trace has gaps",
                    g.lost_events
                );
                conn.lost.fetch_add(g.lost_events, Ordering::Relaxed);
            }
            all_there
        }
        None => {
            consumer.abandon();
            let published = consumer.published();
            if published == 0 {
                eprintln!(
                    "cannoli: pid {pid} tid {tid}: QEMU exited without handing over its last chunk; \
                     no chunk arrived, all of its events are missing"
                );
            } else {
                eprintln!(
                    "cannoli: pid {pid} tid {tid}: QEMU exited without handing over its last chunk; \
                     events after chunk {} are missing",
                    published - 1
                );
            }
            false
        }
    }
}

/// One worker: claim a chunk, decode it into a trace buffer, release it,
/// hand the buffer to the resequencer. Until the ring is finished.
fn worker<T: Cannoli>(conn: &Conn<'_, T>, index: usize) {
    let (mut events, mut chunks, mut bytes, mut lost, mut skipped) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let call_in_at = (conn.consumer.chunk_count() as u64 - 1).max(1);
    loop {
        let mut buf = conn.reseq.claim();
        let chunk = if index == 0 {
            let c = conn.consumer.recv();
            match c {
                // A full ring means QEMU waits for us and its core is idle:
                // only then can a helper run without taking CPU from QEMU
                // (on a 2-core machine anything earlier slows both down).
                Some(_) if conn.consumer.backlog() >= call_in_at => conn.relay.call_in(),
                None => conn.relay.finish(),
                _ => {}
            }
            c
        } else {
            // A helper takes a chunk only while the ring is (nearly) full,
            // i.e. while QEMU waits and its core is free.
            let full = || conn.consumer.backlog() >= call_in_at;
            loop {
                if full() {
                    if let Some(c) = conn.consumer.try_recv() {
                        break Some(c);
                    }
                }
                if conn.consumer.is_finished() {
                    break None;
                }
                conn.relay.wait(full);
            }
        };
        let Some(chunk) = chunk else {
            conn.reseq.unclaim(buf);
            break;
        };
        let seq = chunk.seq();
        let data = chunk.data();
        let d = decode::<T>(conn.pid_ctx, conn.tid_ctx, data, &conn.layout, &mut buf);
        bytes += data.len() as u64;
        drop(chunk); // give the slot back to QEMU before the serial phase
        chunks += 1;
        events += d.events;
        if let Some(t) = d.skipped_tag {
            skipped += d.skipped;
            let _ = conn.skipped_tag.compare_exchange(
                0,
                t as u32 + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        if let Some(m) = d.error {
            lost += m.lost_events();
            eprintln!(
                "cannoli: pid {} tid {}: malformed chunk {seq}: {m}",
                conn.pid, conn.tid
            );
        }
        conn.reseq.complete(seq, buf, |trace| {
            if !trace.is_empty() {
                lock(&conn.tool).trace(conn.pid_ctx, conn.tid_ctx, trace);
            }
        });
    }
    conn.events.fetch_add(events, Ordering::Relaxed);
    conn.chunks.fetch_add(chunks, Ordering::Relaxed);
    conn.bytes.fetch_add(bytes, Ordering::Relaxed);
    conn.lost.fetch_add(lost, Ordering::Relaxed);
    conn.skipped.fetch_add(skipped, Ordering::Relaxed);
}
