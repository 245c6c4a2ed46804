//! The [`Server`]: binding its socket, its settings, and the accept loop
//! that challenges new connections and hands each one that answers to a
//! thread of its own.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wire::channel::{private_dir, runtime_dir, Addr, Sock};
use wire::Token;

use super::connection::connection_thread;
use super::fd_limit::raise_fd_limit;
use super::lock;
use super::pending::{max_pending, poll_all, Waiting, Waiting1, ACCEPT_BURST};
use super::record::Recorder;
use super::shared::Shared;
use crate::announce::Announced;
use crate::crew::Machine;
use crate::flow::Halt;
use crate::handshake::{challenge, Refusal, Tables};
use crate::notes::{note, Notes};
use crate::recording::Writer;
use crate::{Cannoli, Error, Stats, ToolState};

/// How long [`Server::run`] keeps listening after the last connection ended,
/// for a forked child that has not connected yet.
const DEFAULT_LINGER: Duration = Duration::from_millis(100);
/// How often [`Server::run_until`] asks its condition while it is false
/// (and nobody calls its [`Waker`]).
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
    /// The tool's value (see [`Server::with_state`]).
    state: ToolState,
    /// Where the run's lines go (see [`Server::with_notes`]).
    notes: Notes,
    /// The accept loop's wake-up pair: a byte written to `wake_tx` (a
    /// connection ended, or a [`Waker`]) ends its wait on `wake_rx`.
    wake_rx: UnixStream,
    wake_tx: UnixStream,
}

/// Wakes a server's accept loop from another thread, so that
/// [`Server::run_until`] asks its `done` again at once rather than at its
/// next poll: a launcher calls [`Waker::wake`] once QEMU has exited, and
/// the run ends with it instead of up to 10 ms later.
pub struct Waker(UnixStream);

impl Waker {
    /// Makes the accept loop look again now (its condition, its
    /// connections, its backlog).
    pub fn wake(&self) {
        // Non-blocking: a full socket buffer already holds a wake-up.
        let _ = (&self.0).write(&[1]);
    }
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
        Ok(Server {
            listener,
            addr,
            token,
            linger: DEFAULT_LINGER,
            handshake_timeout: wire::channel::HANDSHAKE_TIMEOUT,
            trust_hello_pids: false,
            tee: None,
            state: ToolState::default(),
            notes: Notes::default(),
            wake_rx,
            wake_tx,
        })
    }

    /// A [`Waker`] of this server's accept loop.
    pub fn waker(&self) -> Result<Waker, Error> {
        self.wake_tx.try_clone().map(Waker).map_err(|e| Error::Io {
            what: "sharing the wake-up socket",
            source: e,
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

    /// Hands `state` to every stream of the run, in its [`ClientInfo`]
    /// ([`ClientInfo::state`]): the tool's configuration and run-wide
    /// results, which `init_pid` has no `self` to find them in. The caller
    /// keeps its own clone to read after the run.
    ///
    /// [`ClientInfo`]: crate::ClientInfo
    /// [`ClientInfo::state`]: crate::ClientInfo::state
    pub fn with_state(mut self, state: impl Into<ToolState>) -> Server {
        self.state = state.into();
        self
    }

    /// Sends the library's lines about the run (what was lost and why,
    /// connections refused) to `notes` instead of standard error.
    pub fn with_notes(mut self, notes: Notes) -> Server {
        self.notes = notes;
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
    /// is missed. `done` is asked every 10 ms while it is false, and at
    /// once when a [`Waker`] of this server ([`Server::waker`]) is woken.
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
        let wake_rx = self.wake_rx;
        let wake_tx = self.wake_tx;
        self.listener.set_nonblocking().map_err(|e| Error::Io {
            what: "making the listening socket non-blocking",
            source: e,
        })?;

        let shared = Arc::new(Shared::<T> {
            threads: threads.max(1),
            stats: Mutex::new(Stats::default()),
            halt: Halt::default(),
            live: Mutex::new(0),
            pids: Mutex::new(HashMap::new()),
            wake: wake_tx,
            announced: Mutex::new(Announced::saying_to(self.notes.clone())),
            notes: self.notes.clone(),
            token: self.token.clone(),
            handshake_timeout: self.handshake_timeout,
            trust_hello_pids: self.trust_hello_pids,
            seen_qemu: AtomicBool::new(false),
            tables: Tables::default(),
            recorder,
            decode,
            machine: Machine::new(),
            state: self.state.clone(),
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
                        note!(
                            shared.notes,
                            "cannoli: cannot start a thread for {peer}: {e}; dropping it"
                        );
                    }
                }
            }
            // Those that said nothing in time are strangers.
            for w in pending.take_expired(self.handshake_timeout) {
                note!(
                    shared.notes,
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
                                    note!(shared.notes, "cannoli: ignored {m}");
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
                            note!(shared.notes, "cannoli: accepting a connection failed: {e}");
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
            note!(
                shared.notes,
                "cannoli: dropped {} connections that had said nothing while {} others waited \
                 for their hello (the oldest went first); counted as strangers",
                pending.dropped,
                pending.cap
            );
        }
        if let Some(e) = shared.halt.take_error() {
            return Err(Error::Tool(e));
        }
        let mut stats = lock(&shared.stats).clone();
        stats.missing_processes += shared.never_connected();
        stats.stopped = shared.halt.stopped();
        Ok(stats)
    }
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
