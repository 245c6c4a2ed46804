//! Accepting QEMU's connections (a Unix socket or TCP), and per connection,
//! after the handshake (`handshake.rs`), the worker threads that decode the
//! ring and the control loop that watches the socket for the goodbye.

use std::collections::{HashMap, VecDeque};
use std::io::{self, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mempipe::{Chunk, ChunkBuf, Consumer, TableReader};
use wire::channel::{private_dir, read_line, runtime_dir, Addr, Sock};
use wire::{parse_control, Control, Token};

use crate::announce::Announced;
use crate::blocks::{cache_for, BlockCache};
use crate::crew::{Crew, Machine};
use crate::decode::{decode, finish, stitch, Carry, Layout, Seam};
use crate::handshake::{challenge, handshake, Accepted, Opened, Refusal, Tables};
use crate::recording::{Goodbye, StreamEnd, StreamLog, Writer};
use crate::reseq::Reseq;
use crate::{Cannoli, ClientInfo, Error, Stats};

/// Streams served at once (guest threads of the traced tree).
const MAX_STREAMS: usize = 8192;
/// How long [`Server::run`] keeps listening after the last connection ended,
/// for a forked child that has not connected yet.
const DEFAULT_LINGER: Duration = Duration::from_millis(100);
/// How often [`Server::run_until`] asks its condition while it is false.
const DONE_POLL: Duration = Duration::from_millis(10);

/// A listening client. Create it with [`Server::bind`], then call
/// [`Server::run`] or [`Server::run_forever`].
pub struct Server {
    listener: Listener,
    addr: Addr,
    token: Token,
    linger: Duration,
    handshake_timeout: Duration,
    trust_hello_pids: bool,
    /// Also write every stream to this recording (see [`Server::tee`]).
    tee: Option<Arc<Writer>>,
}

enum Listener {
    /// The socket file is removed when the server is dropped.
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

impl Listener {
    fn as_raw_fd(&self) -> i32 {
        match self {
            Listener::Unix(l, _) => l.as_raw_fd(),
            Listener::Tcp(l) => l.as_raw_fd(),
        }
    }

    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Listener::Unix(l, _) => l.set_nonblocking(true),
            Listener::Tcp(l) => l.set_nonblocking(true),
        }
    }

    /// The next connection and a name for it in messages.
    fn accept(&self) -> io::Result<(Sock, String)> {
        match self {
            Listener::Unix(l, path) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                Ok((Sock::Unix(s), format!("a connection on {}", path.display())))
            }
            Listener::Tcp(l) => {
                let (s, peer) = l.accept()?;
                s.set_nonblocking(false)?;
                let _ = s.set_nodelay(true);
                Ok((Sock::Tcp(s), format!("the connection from {peer}")))
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Server {
    /// Listens on `addr`: `unix:PATH` (a Unix socket; the default's
    /// directory is created private) or `HOST:PORT` (port 0 picks a free
    /// one, see [`Server::addr`]). The server makes up a fresh secret
    /// ([`Server::token`]) that QEMU must prove it holds.
    pub fn bind(addr: &str) -> Result<Server, Error> {
        raise_fd_limit();
        let parsed = Addr::parse(addr);
        let bind_err = |e: io::Error| {
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
        };
        let token = Token::generate().map_err(|e| Error::Io {
            what: "making up the run's secret",
            source: e,
        })?;
        let (listener, addr) = match parsed {
            Addr::Unix(path) => {
                if path.parent() == Some(runtime_dir().as_path()) {
                    private_dir(&runtime_dir()).map_err(bind_err)?;
                }
                let l = bind_unix(&path).map_err(bind_err)?;
                (Listener::Unix(l, path.clone()), Addr::Unix(path))
            }
            Addr::Tcp(a) => {
                let l = TcpListener::bind(a.as_str()).map_err(bind_err)?;
                let local = l.local_addr().map_err(bind_err)?;
                (Listener::Tcp(l), Addr::Tcp(local.to_string()))
            }
        };
        Ok(Server {
            listener,
            addr,
            token,
            linger: DEFAULT_LINGER,
            handshake_timeout: wire::channel::HANDSHAKE_TIMEOUT,
            trust_hello_pids: false,
            tee: None,
        })
    }

    /// The address actually listened on, as `CANNOLI_ADDR` takes it.
    pub fn addr(&self) -> &Addr {
        &self.addr
    }

    /// The secret QEMU must hold: give it to QEMU as `CANNOLI_TOKEN`
    /// ([`wire::TOKEN_ENV`]), or in the token file.
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// How long a new connection may take to say its hello (default 10 s).
    pub fn handshake_timeout(mut self, t: Duration) -> Server {
        self.handshake_timeout = t;
        self
    }

    /// Takes the pid a hello names without checking it against the
    /// connecting process (Unix sockets check it by default): for a test
    /// whose threads play several QEMU processes.
    #[doc(hidden)]
    pub fn trust_hello_pids(mut self) -> Server {
        self.trust_hello_pids = true;
        self
    }

    /// Decodes as usual and also writes every stream, as it comes, to the
    /// recording `writer`: a live run and its recording at once (a replay
    /// of it must give the same callbacks). Finish the recording with
    /// [`Writer::finish`] after the run.
    pub fn tee(mut self, writer: Arc<Writer>) -> Server {
        self.tee = Some(writer);
        self
    }

    /// Uses `token` instead of the fresh one (a client whose QEMU gets the
    /// secret some other way).
    pub fn with_token(mut self, token: Token) -> Server {
        self.token = token;
        self
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
        self.serve::<T>(threads, true, None, None)
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
        self.serve::<T>(threads, false, Some(&done), None)
    }

    /// [`Server::run_until`], but instead of decoding, writes every stream
    /// to the recording `writer` (`cannoli record`): each chunk is
    /// compressed on a worker and appended as it comes, after the block
    /// table entries it may name. Nothing is decoded, so the returned
    /// totals have no event count. Finish the recording with
    /// [`Writer::finish`] afterwards.
    pub fn record_until(
        self,
        writer: Arc<Writer>,
        threads: usize,
        done: impl Fn() -> bool,
    ) -> Result<Stats, Error> {
        self.serve::<Recorder>(threads, false, Some(&done), Some(writer))
    }

    /// [`Server::run`] (serves until the traced process tree is done), but
    /// records as [`Server::record_until`] does.
    pub fn record(self, writer: Arc<Writer>, threads: usize) -> Result<Stats, Error> {
        self.serve::<Recorder>(threads, true, None, Some(writer))
    }

    /// Serves connections forever (returns only on an error).
    pub fn run_forever<T: Cannoli>(self, threads: usize) -> Result<(), Error> {
        self.serve::<T>(threads, false, None, None).map(|_| ())
    }

    fn serve<T: Cannoli>(
        self,
        threads: usize,
        until_idle: bool,
        done: Option<&dyn Fn() -> bool>,
        recorder: Option<Arc<Writer>>,
    ) -> Result<Stats, Error> {
        // Recording only (no tool), or decoding and maybe a tee.
        let (recorder, decode) = match recorder {
            Some(w) => (Some(w), false),
            None => (self.tee.clone(), true),
        };
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
        self.listener.set_nonblocking().map_err(|e| Error::Io {
            what: "making the listening socket non-blocking",
            source: e,
        })?;

        let shared = Arc::new(Shared::<T> {
            threads: threads.max(1),
            stats: Mutex::new(Stats::default()),
            live: Mutex::new(0),
            pids: Mutex::new(HashMap::new()),
            wake: wake_tx,
            announced: Mutex::new(Announced::default()),
            token: self.token.clone(),
            handshake_timeout: self.handshake_timeout,
            trust_hello_pids: self.trust_hello_pids,
            seen_qemu: AtomicBool::new(false),
            tables: Tables::default(),
            recorder,
            decode,
            machine: Machine::new(),
        });
        let mut handles: Vec<JoinHandle<()>> = Vec::new();
        let mut pending = Waiting::new(max_pending());

        loop {
            // Only a QEMU counts as the start of the run: a stranger that
            // connects first must not make `run` return before it.
            let seen_any = shared.seen_qemu.load(Ordering::Acquire);
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
            // ... and wake for the first connection whose hello is due.
            let timeout = match (timeout, pending.next_deadline(self.handshake_timeout)) {
                (Some(t), Some(d)) => Some(t.min(d)),
                (t, d) => t.or(d),
            };
            let ready = poll_all(
                self.listener.as_raw_fd(),
                wake_rx.as_raw_fd(),
                &mut pending,
                timeout,
            )
            .map_err(|e| Error::Io {
                what: "waiting for connections (poll)",
                source: e,
            })?;
            if ready == [false, false] && pending.is_empty() && (idle || (finishing && none_live)) {
                break; // lingered long enough, or done with nothing pending
            }
            if ready[1] {
                let mut buf = [0u8; 64];
                while matches!((&wake_rx).read(&mut buf), Ok(n) if n > 0) {}
            }
            // Connections that said something go on to their thread.
            for w in pending.take_ready() {
                let sh = shared.clone();
                let peer = w.peer.clone();
                let spawned = std::thread::Builder::new()
                    .name("cannoli-conn".into())
                    .spawn(move || connection_thread(&sh, w.sock, w.peer, w.opened));
                match spawned {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        *lock(&shared.live) -= 1;
                        lock(&shared.stats).refused_connections += 1;
                        eprintln!("cannoli: cannot start a thread for {peer}: {e}; dropping it");
                    }
                }
            }
            // Those that said nothing in time are strangers.
            for w in pending.take_expired(self.handshake_timeout) {
                eprintln!(
                    "cannoli: ignored {}: sent no hello within {:.1} s",
                    w.peer,
                    self.handshake_timeout.as_secs_f64()
                );
                *lock(&shared.live) -= 1;
                lock(&shared.stats).strangers += 1;
            }
            if ready[0] {
                // A bounded burst, so that a flood of connections cannot
                // keep this loop from handing out the ones that spoke.
                for _ in 0..ACCEPT_BURST {
                    match self.listener.accept() {
                        Ok((stream, peer)) => {
                            let opened = match challenge(&stream, &peer) {
                                Ok(o) => o,
                                Err(Refusal::Stranger(m) | Refusal::Refused(m)) => {
                                    eprintln!("cannoli: ignored {m}");
                                    lock(&shared.stats).strangers += 1;
                                    continue;
                                }
                            };
                            *lock(&shared.live) += 1;
                            if pending
                                .push(Waiting1 {
                                    sock: stream,
                                    peer,
                                    opened,
                                    since: Instant::now(),
                                })
                                .is_some()
                            {
                                // The oldest silent one made room.
                                *lock(&shared.live) -= 1;
                                lock(&shared.stats).strangers += 1;
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
        if pending.dropped > 0 {
            eprintln!(
                "cannoli: dropped {} connections that had said nothing while {} others waited \
                 for their hello (the oldest went first); counted as strangers",
                pending.dropped, pending.cap
            );
        }
        let mut stats = lock(&shared.stats).clone();
        stats.missing_processes += shared.never_connected();
        Ok(stats)
    }
}

/// Connections accepted at most per wake-up of the accept loop.
const ACCEPT_BURST: usize = 64;

/// Connections that were challenged and have said nothing yet: the accept
/// loop polls them (no thread each), and hands one to a thread of its own
/// as soon as it has something to say. QEMU answers the challenge at once,
/// so a connection that stays silent is a stranger: it is dropped at its
/// deadline, or, when [`Waiting::cap`] of them wait, the oldest is dropped
/// for a new one. A flood of silent connections (TCP: anyone on the
/// machine can connect) thus costs a descriptor each, at most `cap`, and
/// cannot keep QEMU out: QEMU's connection is handed on the moment its
/// hello arrives, and would only be dropped if `cap` others connected
/// before QEMU could answer.
struct Waiting {
    /// Oldest first.
    list: VecDeque<Waiting1>,
    cap: usize,
    /// Dropped for newer ones.
    dropped: u64,
    /// Which of `list` the last poll found readable.
    ready: Vec<bool>,
}

/// One connection waiting for its hello.
struct Waiting1 {
    sock: Sock,
    peer: String,
    opened: Opened,
    since: Instant,
}

impl Waiting {
    fn new(cap: usize) -> Waiting {
        Waiting {
            list: VecDeque::new(),
            cap: cap.max(1),
            dropped: 0,
            ready: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Adds `w`; returns the oldest, dropped, if the cap was reached.
    fn push(&mut self, w: Waiting1) -> Option<Waiting1> {
        let old = if self.list.len() >= self.cap {
            self.dropped += 1;
            self.ready.clear();
            self.list.pop_front()
        } else {
            None
        };
        self.list.push_back(w);
        old
    }

    /// How long until the oldest one's deadline.
    fn next_deadline(&self, timeout: Duration) -> Option<Duration> {
        self.list
            .front()
            .map(|w| (w.since + timeout).saturating_duration_since(Instant::now()))
    }

    /// Those the last poll found readable (data, or their end).
    fn take_ready(&mut self) -> Vec<Waiting1> {
        let ready = std::mem::take(&mut self.ready);
        if !ready.iter().any(|&r| r) {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut keep = VecDeque::with_capacity(self.list.len());
        for (i, w) in std::mem::take(&mut self.list).into_iter().enumerate() {
            if ready.get(i).copied().unwrap_or(false) {
                out.push(w);
            } else {
                keep.push_back(w);
            }
        }
        self.list = keep;
        out
    }

    /// Those whose deadline has passed.
    fn take_expired(&mut self, timeout: Duration) -> Vec<Waiting1> {
        let now = Instant::now();
        let mut out = Vec::new();
        while self.list.front().is_some_and(|w| w.since + timeout <= now) {
            out.extend(self.list.pop_front());
            self.ready.clear();
        }
        out
    }
}

/// How many silent connections may wait at once: 1024, or a quarter of
/// this process's descriptor limit if that is less (at least 16).
fn max_pending() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `lim`.
    let cur = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    };
    ((cur / 4).min(1024) as usize).max(16)
}

/// Raises this process's soft limit on open descriptors to its hard limit
/// (as servers do): a stream costs the client a descriptor (its control
/// connection), and a program may have thousands of threads. Once per
/// process; the limit before is kept for the processes this one starts
/// ([`original_fd_limit`]), since a program that uses `select` needs
/// the usual one.
pub fn raise_fd_limit() {
    ORIGINAL_FD_LIMIT.get_or_init(|| {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into `lim`.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return None;
        }
        let before = lim.rlim_cur;
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            // SAFETY: setrlimit reads `lim`; raising the soft limit up to
            // the hard one needs no privilege.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
        }
        Some(before)
    });
}

static ORIGINAL_FD_LIMIT: std::sync::OnceLock<Option<libc::rlim_t>> = std::sync::OnceLock::new();

/// This process's soft descriptor limit before [`raise_fd_limit`] raised
/// it (`None` if it did not run): give it back to a child before it execs.
pub fn original_fd_limit() -> Option<u64> {
    ORIGINAL_FD_LIMIT.get().copied().flatten()
}

/// Binds a Unix socket at `path`, mode 0600. A socket file left there by a
/// client that died is replaced; a live one is "address in use"; anything
/// else at that path is left alone.
fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        // SAFETY: geteuid has no preconditions.
        let ours = m.file_type().is_socket() && m.uid() == unsafe { libc::geteuid() };
        if !ours {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "something other than a socket of ours is at that path",
            ));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(io::ErrorKind::AddrInUse.into());
        }
        std::fs::remove_file(path)?;
    }
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits until `a` or `b` is readable, or one of the waiting connections
/// is (or ends), or the timeout passes. Returns which of `a` and `b` are
/// readable; the waiting ones' are left in `w.ready`.
fn poll_all(a: i32, b: i32, w: &mut Waiting, timeout: Option<Duration>) -> io::Result<[bool; 2]> {
    let ms: libc::c_int = match timeout {
        None => -1,
        // Rounded up: a deadline 0.3 ms away must not poll 0 ms in a loop.
        Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
    };
    let mut fds: Vec<libc::pollfd> = [a, b]
        .into_iter()
        .chain(w.list.iter().map(|x| x.sock.as_raw_fd()))
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        // SAFETY: `fds` is a valid array of fds.len() pollfd for the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if rc >= 0 {
            let r = |p: &libc::pollfd| {
                p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP | libc::POLLRDHUP) != 0
            };
            w.ready = fds[2..].iter().map(r).collect();
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
    /// Processes announced and not connected yet (`announce.rs`).
    announced: Mutex<Announced>,
    /// The run's secret.
    token: Token,
    handshake_timeout: Duration,
    trust_hello_pids: bool,
    /// A QEMU has connected (a stream, or a cannoli hello refused). Set by
    /// connection threads (Release) before their live count drops, read by
    /// the accept loop (Acquire).
    seen_qemu: AtomicBool,
    /// The block tables of the processes streaming (one per process).
    tables: Tables,
    /// Where the streams are recorded: instead of `T` (`!decode`), or as
    /// well (a tee).
    recorder: Option<Arc<Writer>>,
    decode: bool,
    /// The cores the crews share (`crew.rs`).
    machine: Machine,
}

impl<T: Cannoli> Shared<T> {
    /// Whether an announced process may still connect (one that no longer
    /// exists, a child killed before it ran say, cannot).
    fn expecting(&self) -> bool {
        lock(&self.announced).expecting(process_alive)
    }

    /// Announced processes that ended without ever connecting: if one of
    /// them ran guest code, its events are missing. Says so for each.
    fn never_connected(&self) -> u64 {
        let missing = lock(&self.announced).take_missing();
        for pid in &missing {
            eprintln!(
                "cannoli: process {pid} was announced (fork or exec) but never connected; \
                 if it ran, its events are missing"
            );
        }
        missing.len() as u64
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

fn connection_thread<T: Cannoli>(shared: &Shared<T>, stream: Sock, peer: String, opened: Opened) {
    let _live = LiveGuard(shared);
    let r = catch_unwind(AssertUnwindSafe(|| {
        connection::<T>(shared, stream, peer.clone(), opened)
    }));
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

/// Everything the workers of one connection share.
struct Conn<'a, T: Cannoli> {
    pid_ctx: &'a T::PidContext,
    tid_ctx: &'a T::TidContext,
    tool: Mutex<T>,
    /// The block table of the stream's process (shared by its streams), if
    /// QEMU's side sent one.
    pub(crate) blocks: Option<Arc<TableReader>>,
    /// Chunks back in order, with what stitching each one needs, and the
    /// block the chunks delivered so far left open.
    reseq: Reseq<T::Trace, Seam, Carry<T::Trace>>,
    layout: Layout<'a>,
    /// What the control loop and the chunk hand-out need.
    stream: Stream<'a>,
    pid: i32,
    tid: i32,
    events: AtomicU64,
    chunks: AtomicU64,
    bytes: AtomicU64,
    /// Framed events of unknown tags skipped, and the first such tag (+1; 0:
    /// none yet).
    skipped: AtomicU64,
    skipped_tag: AtomicU32,
    /// A tee's recording, and this stream in it.
    record: Option<(&'a Writer, StreamLog)>,
}

/// One stream's ring and control connection, decoded or recorded.
struct Stream<'a> {
    consumer: &'a Consumer,
    announced: &'a Mutex<Announced>,
    /// This connection's number among the run's connections (`Announced`).
    seq: u64,
    pid: i32,
    tid: i32,
    /// Events known lost: QEMU's (its goodbye), and a worker's.
    lost: AtomicU64,
}

fn connection<T: Cannoli>(shared: &Shared<T>, mut stream: Sock, peer: String, opened: Opened) {
    let accepted = handshake(
        &mut stream,
        &peer,
        opened,
        &shared.token,
        shared.handshake_timeout,
        shared.trust_hello_pids,
        &shared.tables,
    );
    if !matches!(accepted, Err(Refusal::Stranger(_))) {
        shared.seen_qemu.store(true, Ordering::Release);
    }
    let live_streams = *lock(&shared.live);
    let Accepted {
        hello,
        line,
        consumer,
        blocks,
    } = match accepted {
        Ok(_) if live_streams > MAX_STREAMS => {
            eprintln!("cannoli: rejected {peer}: more than {MAX_STREAMS} streams at once");
            lock(&shared.stats).refused_connections += 1;
            return;
        }
        Ok(a) => a,
        Err(Refusal::Stranger(m)) => {
            eprintln!("cannoli: ignored {m}");
            lock(&shared.stats).strangers += 1;
            return;
        }
        Err(Refusal::Refused(m)) => {
            eprintln!("cannoli: rejected {m}");
            lock(&shared.stats).refused_connections += 1;
            return;
        }
    };
    // The stream's one descriptor: its ring and block table are mapped
    // and their descriptors closed (`mempipe`).
    let mut reader = BufReader::new(stream);
    let mut ci = ClientInfo::from_hello(&hello);
    let seq = lock(&shared.announced).connected(ci.pid);
    ci.stream = seq - 1;
    if let (Some(writer), false) = (&shared.recorder, shared.decode) {
        let stream = Stream {
            consumer: &consumer,
            announced: &shared.announced,
            seq,
            pid: ci.pid,
            tid: ci.tid,
            lost: AtomicU64::new(0),
        };
        let crew = Crew::new(
            &consumer,
            &shared.machine,
            shared.threads,
            Some((ci.pid, ci.tid)),
        );
        let st = record_stream(writer, &stream, &crew, &line, blocks, &mut reader);
        lock(&shared.stats).add(&st);
        return;
    }

    let record = shared
        .recorder
        .as_deref()
        .map(|w| (w, w.stream_start(&line, blocks.clone())));
    let pid_ctx = shared.pid_acquire(&ci);
    let (tool, tid_ctx) = T::init_tid(&pid_ctx, &ci);
    let threads = shared.threads;
    let conn = Conn::<T> {
        pid_ctx: &pid_ctx,
        tid_ctx: &tid_ctx,
        tool: Mutex::new(tool),
        blocks,
        reseq: Reseq::new(0, 2 * threads + 4),
        layout: Layout::new(&ci),
        stream: Stream {
            consumer: &consumer,
            announced: &shared.announced,
            seq,
            pid: ci.pid,
            tid: ci.tid,
            lost: AtomicU64::new(0),
        },
        pid: ci.pid,
        tid: ci.tid,
        events: AtomicU64::new(0),
        chunks: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        skipped: AtomicU64::new(0),
        skipped_tag: AtomicU32::new(0),
        record,
    };

    let crew = Crew::new(&consumer, &shared.machine, threads, Some((ci.pid, ci.tid)));
    let end = crew.run(
        |_, next| {
            if catch_unwind(AssertUnwindSafe(|| worker(&conn, next))).is_err() {
                die_after_panic(&format!("pid {} tid {}", conn.pid, conn.tid));
            }
        },
        || control(&mut reader, &conn.stream),
    );
    let complete = stream_complete(
        &conn.stream,
        &end,
        crew.failure(),
        conn.chunks.load(Ordering::Relaxed),
    );
    let incomplete = u64::from(!complete);
    end_of_stream(&conn, complete);
    if let Some((w, log)) = &conn.record {
        w.stream_end(
            log,
            &StreamEnd {
                goodbye: end.goodbye,
                published: consumer.published(),
                violation: consumer.violation().map(|v| v.to_string()),
                written: conn.chunks.load(Ordering::Relaxed),
                end_ns: w.now_ns(),
                control: end.violation.clone(),
            },
        );
    }

    let Conn {
        tool,
        events,
        chunks,
        bytes,
        stream,
        skipped,
        skipped_tag,
        ..
    } = conn;
    let lost = stream.lost.into_inner();
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
        lost_events: lost,
        incomplete_streams: incomplete,
        skipped_events: skipped,
        ..Stats::default()
    });
}

/// How long the control connection is read after the goodbye for its end:
/// QEMU shuts it down right after saying goodbye, so only a peer that
/// breaks the protocol makes this wait.
const AFTER_GOODBYE: Duration = Duration::from_secs(30);

/// How a stream's control connection ended.
struct ControlEnd {
    /// QEMU's goodbye (the first one), if it said one.
    goodbye: Option<Goodbye>,
    /// How the connection broke the protocol, if it did (a second goodbye,
    /// a goodbye before the ring was closed, anything after the goodbye):
    /// the stream is then incomplete, whatever the counts say.
    violation: Option<String>,
}

/// Watches the control socket until the goodbye or EOF, and ends the ring
/// accordingly. After the goodbye it reads on until the connection's end
/// (at most [`AFTER_GOODBYE`]): the goodbye is the last word of a stream,
/// said once.
fn control(reader: &mut BufReader<Sock>, conn: &Stream<'_>) -> ControlEnd {
    let (pid, tid) = (conn.pid, conn.tid);
    // No deadline here: the stream lasts as long as its guest thread. The
    // peer is this run's QEMU (the handshake proved it), and its end closes
    // the socket, which ends this read.
    let goodbye = loop {
        match read_line(reader) {
            Ok(Some(line)) => match parse_control(&line) {
                Ok(Control::Goodbye(g)) => break Some(g),
                Ok(Control::Expect(e)) => lock(conn.announced).forked(e.expect_pid),
                Err(e) => {
                    eprintln!("cannoli: pid {pid} tid {tid}: ignoring a control message: {e}");
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
    let Some(g) = goodbye else {
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
        return ControlEnd {
            goodbye: None,
            violation: None,
        };
    };
    // QEMU closes its ring before it says goodbye. If it did not, the
    // goodbye is not QEMU's last word: end the ring where it is.
    let mut violation = None;
    if !consumer.closed_by_producer() {
        consumer.abandon();
        violation = Some("its goodbye came before its ring was closed".to_string());
    }
    let after = after_goodbye(reader);
    violation = violation.or(after);
    if g.exec {
        lock(conn.announced).exec(pid, conn.seq);
    }
    if g.lost_events > 0 {
        eprintln!(
            "cannoli: pid {pid} tid {tid}: QEMU could not record {} events; the trace has gaps",
            g.lost_events
        );
        conn.lost.fetch_add(g.lost_events, Ordering::Relaxed);
    }
    ControlEnd {
        goodbye: Some(Goodbye {
            chunks: g.chunks,
            lost_events: g.lost_events,
            exec: g.exec,
        }),
        violation,
    }
}

/// Reads the control connection after the goodbye until its end: anything
/// there breaks the protocol (says what), as does a connection left open.
fn after_goodbye(reader: &mut BufReader<Sock>) -> Option<String> {
    let _ = reader.get_ref().set_read_timeout(Some(AFTER_GOODBYE));
    match read_line(reader) {
        Ok(None) => None,
        Ok(Some(line)) => Some(match parse_control(&line) {
            Ok(Control::Goodbye(_)) => "it said goodbye twice".to_string(),
            _ => "its control connection went on after its goodbye".to_string(),
        }),
        Err(e) => match e.kind() {
            io::ErrorKind::ConnectionReset => None,
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Some(format!(
                "its control connection stayed open {} s after its goodbye",
                AFTER_GOODBYE.as_secs()
            )),
            _ => Some("its control connection went on after its goodbye".to_string()),
        },
    }
}

/// Whether a stream whose control connection ended as `end`, after
/// `delivered` chunks were taken from its ring, is whole; says on stderr
/// why not (one line). A stream is whole when its ring kept the protocol,
/// its workers ran, and QEMU closed its ring, then said goodbye once with
/// the number of chunks the ring holds and this client took: the client's
/// own count, which nothing in QEMU's process can change.
fn stream_complete(
    conn: &Stream<'_>,
    end: &ControlEnd,
    crew_failure: Option<&str>,
    delivered: u64,
) -> bool {
    let (pid, tid) = (conn.pid, conn.tid);
    let consumer = conn.consumer;
    if let Some(e) = crew_failure {
        eprintln!("cannoli: pid {pid} tid {tid}: {e}; the stream's events are missing");
        return false;
    }
    // A chunk the ring refused (a producer that broke the ring protocol)
    // ended the stream early: what came after it is unknown.
    if let Some(v) = consumer.violation() {
        eprintln!(
            "cannoli: pid {pid} tid {tid}: the ring broke its protocol ({v}); the events after it are missing"
        );
        return false;
    }
    if let Some(v) = &end.violation {
        eprintln!(
            "cannoli: pid {pid} tid {tid}: QEMU's side broke the control protocol ({v}); \
             the stream counts as incomplete"
        );
        return false;
    }
    let Some(g) = &end.goodbye else {
        return false; // said in `control`
    };
    let published = consumer.published();
    if g.chunks != published {
        eprintln!(
            "cannoli: pid {pid} tid {tid}: QEMU says it published {} chunks but the ring holds {published}",
            g.chunks
        );
        return false;
    }
    if g.chunks != delivered {
        eprintln!(
            "cannoli: pid {pid} tid {tid}: QEMU says it published {} chunks but {delivered} were \
             taken from its ring; the stream counts as incomplete",
            g.chunks
        );
        return false;
    }
    true
}

/// Every chunk is delivered: the block the last one left open ran to its
/// end (delivered as one last trace), if the stream is `complete`; if
/// events are missing after it, nobody knows how far it ran.
fn end_of_stream<T: Cannoli>(conn: &Conn<'_, T>, complete: bool) {
    let mut carry = conn.reseq.take_serial();
    if !complete {
        return;
    }
    carry.buf.clear();
    let n = finish::<T>(conn.pid_ctx, conn.tid_ctx, &mut carry.open, &mut carry.buf);
    conn.events.fetch_add(n, Ordering::Relaxed);
    if !carry.buf.is_empty() {
        lock(&conn.tool).trace(conn.pid_ctx, conn.tid_ctx, &carry.buf);
    }
}

/// One worker: claim a chunk, decode it into a trace buffer, release it,
/// hand the buffer to the resequencer. Until the ring is finished.
fn worker<'a, T: Cannoli>(conn: &Conn<'a, T>, next: &mut dyn FnMut() -> Option<Chunk<'a>>) {
    let (mut events, mut chunks, mut bytes, mut lost, mut skipped) = (0u64, 0u64, 0u64, 0u64, 0u64);
    // The process's block cache (shared by its streams, as the table is).
    let cache: Option<Arc<BlockCache>> = conn.blocks.clone().map(|t| cache_for(t));
    let mut packer = conn.record.as_ref().map(|(w, _)| w.packer());
    // The chunk's bytes in this worker's own memory (`Chunk::copy_into`).
    let mut copy = ChunkBuf::new();
    loop {
        let mut buf = conn.reseq.claim();
        let chunk = next();
        let Some(chunk) = chunk else {
            conn.reseq.unclaim(buf);
            break;
        };
        let seq = chunk.seq();
        chunk.copy_into(&mut copy);
        // The slot goes back to QEMU at once: what is decoded is the copy.
        drop(chunk);
        chunks += 1;
        let data = copy.bytes();
        if let (Some((w, log)), Some(p)) = (&conn.record, packer.as_mut()) {
            w.chunk(log, seq, data, p);
        }
        let mut seam = Seam::default();
        let d = decode::<T>(
            conn.pid_ctx,
            conn.tid_ctx,
            data,
            &conn.layout,
            cache.as_deref(),
            &mut buf,
            &mut seam,
        );
        bytes += data.len() as u64;
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
        conn.reseq.complete(seq, buf, seam, |trace, seam, carry| {
            // The chunk's head, with the block the chunks before it left
            // open, is delivered before its body.
            carry.buf.clear();
            events += stitch::<T>(
                conn.pid_ctx,
                conn.tid_ctx,
                &conn.layout,
                &mut carry.open,
                &seam,
                &mut carry.buf,
            );
            if carry.buf.is_empty() && trace.is_empty() {
                return;
            }
            let mut tool = lock(&conn.tool);
            if !carry.buf.is_empty() {
                tool.trace(conn.pid_ctx, conn.tid_ctx, &carry.buf);
            }
            if !trace.is_empty() {
                tool.trace(conn.pid_ctx, conn.tid_ctx, trace);
            }
        });
    }
    conn.events.fetch_add(events, Ordering::Relaxed);
    conn.chunks.fetch_add(chunks, Ordering::Relaxed);
    conn.bytes.fetch_add(bytes, Ordering::Relaxed);
    conn.stream.lost.fetch_add(lost, Ordering::Relaxed);
    conn.skipped.fetch_add(skipped, Ordering::Relaxed);
}

/// The `Cannoli` of a recording run: never called (streams go to the
/// recording instead), it only gives the server its types.
struct Recorder;

impl Cannoli for Recorder {
    type Trace = ();
    type TidContext = ();
    type PidContext = ();

    fn init_pid(_: &ClientInfo) -> Arc<()> {
        Arc::new(())
    }

    fn init_tid(_: &(), _: &ClientInfo) -> (Recorder, ()) {
        (Recorder, ())
    }
}

/// Records one stream: `threads` workers compress its chunks into the
/// recording while the control loop waits for the goodbye; then its end
/// frame. Returns its totals (chunks and bytes; events are not decoded).
fn record_stream(
    writer: &Writer,
    stream: &Stream<'_>,
    crew: &Crew<'_>,
    line: &str,
    blocks: Option<Arc<TableReader>>,
    reader: &mut BufReader<Sock>,
) -> Stats {
    let log = writer.stream_start(line, blocks);
    let (chunks, bytes) = (AtomicU64::new(0), AtomicU64::new(0));
    let end = crew.run(
        |_, next| {
            let mut packer = writer.packer();
            let mut copy = ChunkBuf::new();
            while let Some(chunk) = next() {
                let seq = chunk.seq();
                chunk.copy_into(&mut copy);
                drop(chunk); // the slot goes back to QEMU; the copy is stored
                writer.chunk(&log, seq, copy.bytes(), &mut packer);
                chunks.fetch_add(1, Ordering::Relaxed);
                bytes.fetch_add(copy.len() as u64, Ordering::Relaxed);
            }
        },
        || control(reader, stream),
    );
    let written = chunks.into_inner();
    let complete = stream_complete(stream, &end, crew.failure(), written);
    writer.stream_end(
        &log,
        &StreamEnd {
            goodbye: end.goodbye,
            published: stream.consumer.published(),
            violation: stream.consumer.violation().map(|v| v.to_string()),
            written,
            end_ns: writer.now_ns(),
            control: end.violation,
        },
    );
    Stats {
        connections: 1,
        chunks: written,
        bytes: bytes.into_inner(),
        lost_events: stream.lost.load(Ordering::Relaxed),
        incomplete_streams: u64::from(!complete),
        ..Stats::default()
    }
}
