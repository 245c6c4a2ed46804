//! The control channel between QEMU's side and the client: where the client
//! listens, the run's secret, and how each side proves it holds it.
//!
//! # Who may talk to a client
//!
//! Only the traced QEMU. Two mechanisms, both always on:
//!
//! * **A Unix socket in a private directory** (the default): the directory
//!   is the user's own with mode `0700`, so no other user can even connect,
//!   and the client checks the peer's uid (`SO_PEERCRED`) and that the
//!   peer's pid is the one its hello names. The ring travels with the hello
//!   as a file descriptor (`SCM_RIGHTS`), so it has no name anyone could
//!   point elsewhere.
//! * **A per-run secret** ([`Token`], 32 random bytes), which QEMU gets in
//!   `CANNOLI_TOKEN` (QEMU hides every `CANNOLI_*` variable from the guest)
//!   or, for a client started by hand, from a token file only its user can
//!   read. The secret never crosses the socket: the client opens with a
//!   challenge (a fresh nonce), QEMU answers with its hello carrying its own
//!   nonce and an HMAC-SHA256 over both, and the client's welcome carries
//!   the HMAC the other way round. A process that took the client's TCP
//!   port first learns nothing it could replay, and QEMU does not stream
//!   into a ring nobody reads because a stranger said "welcome".
//!
//! TCP (`CANNOLI_ADDR=HOST:PORT`) is for a client QEMU cannot reach through
//! the file system (another mount or network namespace on the same
//! machine); it uses the same secret. Its ring is named as
//! `/proc/<pid>/fd/<n>` of QEMU's sealed memfd, which only QEMU's user can
//! open.
//!
//! # The handshake
//!
//! ```text
//! client -> QEMU   Challenge  {"magic":"cannoli","wire_version":5,"nonce":C}
//! QEMU -> client   Hello      {..., "nonce":Q, "proof":HMAC(k, "hello"|C|Q), "ring":...}
//! client -> QEMU   Welcome    {"error":null, "proof":HMAC(k, "welcome"|C|Q)}
//! QEMU -> client   Expect / Goodbye lines until the stream ends
//! ```
//!
//! Every line is one JSON object ending in `\n`, at most [`MAX_LINE`] bytes.

use std::fmt;
use std::fs;
use std::io::{self, BufRead, BufReader, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::{FdPlace, Hello, Welcome, MAGIC, WIRE_VERSION};

/// Environment variable naming the client's address, read by both sides.
pub const ADDR_ENV: &str = "CANNOLI_ADDR";
/// Environment variable carrying the run's secret (hex) to QEMU.
pub const TOKEN_ENV: &str = "CANNOLI_TOKEN";
/// Environment variable naming the token file, where the secret is when
/// [`TOKEN_ENV`] is unset.
pub const TOKEN_FILE_ENV: &str = "CANNOLI_TOKEN_FILE";

/// Longest line either side accepts.
pub const MAX_LINE: usize = 64 * 1024;
/// How long either side waits for the other's next handshake line.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the client listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Addr {
    /// `unix:PATH`: a Unix stream socket.
    Unix(PathBuf),
    /// `HOST:PORT`: TCP.
    Tcp(String),
}

impl Addr {
    /// `unix:PATH` is a Unix socket, anything else `HOST:PORT`.
    pub fn parse(s: &str) -> Addr {
        match s.trim().strip_prefix("unix:") {
            Some(p) => Addr::Unix(PathBuf::from(p)),
            None => Addr::Tcp(s.trim().to_string()),
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Unix(p) => write!(f, "unix:{}", p.display()),
            Addr::Tcp(a) => f.write_str(a),
        }
    }
}

/// The user's private directory for cannoli's sockets and token file:
/// `$XDG_RUNTIME_DIR/cannoli` if that is set (systemd makes it private),
/// else `/tmp/cannoli-<uid>`. [`private_dir`] creates or checks it.
pub fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() && Path::new(&d).is_absolute() => PathBuf::from(d).join("cannoli"),
        // SAFETY: geteuid has no preconditions.
        _ => PathBuf::from(format!("/tmp/cannoli-{}", unsafe { libc::geteuid() })),
    }
}

/// The default address of a client started by hand: a socket in
/// [`runtime_dir`].
pub fn default_addr() -> Addr {
    Addr::Unix(runtime_dir().join("cannoli.sock"))
}

/// The client's address as both sides see it: `CANNOLI_ADDR` unless unset
/// or blank, else [`default_addr`].
pub fn client_addr() -> Addr {
    match std::env::var(ADDR_ENV) {
        Ok(a) if !a.trim().is_empty() => Addr::parse(&a),
        _ => default_addr(),
    }
}

/// Makes `dir` a directory only the caller can enter: creates it (mode
/// 0700) if missing; otherwise it must be a real directory (not a symlink)
/// owned by the caller's uid and closed to group and others. A directory
/// someone else prepared (in `/tmp`, say) is refused, never used.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = fs::symlink_metadata(dir)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let problem = if !m.file_type().is_dir() {
        "is not a directory"
    } else if m.uid() != me {
        "belongs to another user"
    } else if m.mode() & 0o077 != 0 {
        "is open to other users (its mode should be 0700)"
    } else {
        return Ok(());
    };
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} {problem}; remove it, or point {ADDR_ENV} and {TOKEN_FILE_ENV} elsewhere",
            dir.display()
        ),
    ))
}

/// Why there is no [`Token`]: one line, as QEMU's side prints it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TokenError {
    /// Not 64 hex digits ([`Token::from_hex`]).
    #[error("a cannoli token is 64 hex digits")]
    NotHex,
    /// [`TOKEN_ENV`] is set but not 64 hex digits ([`Token::from_env`]).
    #[error("{TOKEN_ENV} is not a cannoli token ({})", TokenError::NotHex)]
    EnvNotHex,
    /// [`TOKEN_ENV`] is unset and the token file cannot be used
    /// ([`Token::from_env`]).
    #[error(
        "no secret to present to the cannoli client: {TOKEN_ENV} is unset and the token file {} \
         cannot be used ({source}); start the client first (it writes that file), or pass the client's \
         token in {TOKEN_ENV}",
        .path.display()
    )]
    NoFile {
        /// The token file looked at ([`token_file`]).
        path: PathBuf,
        /// Why it cannot be used (shared, so that the error can be kept
        /// and handed out again).
        source: Arc<io::Error>,
    },
}

/// Why QEMU's side of the handshake ([`dial`]) failed: one line for
/// QEMU's stderr.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// No socket could be made for the connection.
    #[error("no socket for the connection to {addr}: {source}")]
    NoSocket {
        /// The client's address.
        addr: Addr,
        /// Why not.
        source: io::Error,
    },
    /// Nothing listens at the address.
    #[error(
        "no cannoli client is listening on {addr} ({source}): start your client first, or \
         point {ADDR_ENV} at it"
    )]
    NoClient {
        /// The client's address.
        addr: Addr,
        /// The connect error.
        source: io::Error,
    },
    /// No secret to prove this QEMU is the run's.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The connection failed while the handshake was under way.
    #[error("lost the client at {addr} during the handshake: {source}")]
    Lost {
        /// The client's address.
        addr: Addr,
        /// The failed read, write or setting.
        source: io::Error,
    },
    /// Reading the challenge failed.
    #[error("the client at {addr} did not open the handshake: {source}")]
    NoChallenge {
        /// The client's address.
        addr: Addr,
        /// The failed read.
        source: io::Error,
    },
    /// The peer closed the connection before its challenge.
    #[error("the client at {addr} closed the connection at once (is it a cannoli client?)")]
    ClosedAtOnce {
        /// The client's address.
        addr: Addr,
    },
    /// The challenge was refused ([`parse_challenge`]).
    #[error("{addr} {source}")]
    Challenge {
        /// The client's address.
        addr: Addr,
        /// What is wrong with it.
        source: ChallengeError,
    },
    /// Reading the welcome failed.
    #[error("the client at {addr} did not answer the hello: {source}")]
    NoWelcome {
        /// The client's address.
        addr: Addr,
        /// The failed read.
        source: io::Error,
    },
    /// The peer closed the connection instead of answering the hello.
    #[error("the client at {addr} closed the connection during the handshake")]
    ClosedInHandshake {
        /// The client's address.
        addr: Addr,
    },
    /// The answer to the hello is not a welcome.
    #[error("{addr} answered the hello with something that is not a cannoli welcome")]
    NotWelcome {
        /// The client's address.
        addr: Addr,
    },
    /// The client refused the trace, saying why.
    #[error("the client at {addr} refused the trace: {}", crate::tame(.reason, 400))]
    Refused {
        /// The client's address.
        addr: Addr,
        /// The client's reason, as it sent it.
        reason: String,
    },
    /// The welcome's proof does not check out.
    #[error(
        "the process listening on {addr} could not prove it holds this run's secret; \
         it is not the client this QEMU was started for"
    )]
    Unproved {
        /// The client's address.
        addr: Addr,
    },
}

/// Why a client's challenge was refused ([`parse_challenge`]): a phrase
/// that follows the peer's address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChallengeError {
    /// Not JSON.
    #[error("opened the handshake with something that is not a cannoli client's challenge")]
    NotJson,
    /// JSON without the cannoli magic.
    #[error("is not a cannoli client (no cannoli challenge)")]
    NotCannoli,
    /// A cannoli challenge of another wire version.
    #[error(
        "is a cannoli client speaking wire version {}, but this hook library speaks \
         wire version {WIRE_VERSION}; rebuild the client and the hook library from the same \
         cannoli version",
        .theirs.map_or_else(|| "none".to_string(), |t| t.to_string())
    )]
    Version {
        /// The version it names; `None` when it names none.
        theirs: Option<u64>,
    },
    /// Of our version, but malformed.
    #[error("sent a malformed challenge ({})", crate::tame(.reason, 200))]
    Malformed {
        /// The JSON parser's message.
        reason: String,
    },
    /// The nonce is not 32 hex digits.
    #[error("sent a challenge whose nonce is not 32 hex digits")]
    BadNonce,
}

/// The run's secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Token([u8; 32]);

impl Token {
    /// A fresh secret from the kernel's random source.
    pub fn generate() -> io::Result<Token> {
        let mut b = [0u8; 32];
        getrandom::getrandom(&mut b).map_err(io::Error::other)?;
        Ok(Token(b))
    }

    /// The secret as 64 hex digits, as [`TOKEN_ENV`] and the token file
    /// carry it.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hex digits (surrounding white space ignored).
    pub fn from_hex(s: &str) -> Result<Token, TokenError> {
        let mut b = [0u8; 32];
        hex::decode_to_slice(s.trim(), &mut b).map_err(|_| TokenError::NotHex)?;
        Ok(Token(b))
    }

    /// The secret QEMU's side uses: [`TOKEN_ENV`] if set, else the token
    /// file ([`token_file`]) a client started by hand wrote.
    pub fn from_env() -> Result<Token, TokenError> {
        if let Some(v) = std::env::var_os(TOKEN_ENV).filter(|v| !v.is_empty()) {
            return Token::from_hex(&v.to_string_lossy()).map_err(|_| TokenError::EnvNotHex);
        }
        let path = token_file();
        Token::read_file(&path).map_err(|e| TokenError::NoFile {
            path,
            source: Arc::new(e),
        })
    }

    /// Reads a token file: a regular file (not a symlink) of the caller's
    /// uid that group and others cannot read.
    pub fn read_file(path: &Path) -> io::Result<Token> {
        let mut f = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)?;
        let m = f.metadata()?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if !m.file_type().is_file() || m.uid() != me || m.mode() & 0o077 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "it must be a regular file of yours that only you can read",
            ));
        }
        let mut s = String::new();
        Read::by_ref(&mut f).take(256).read_to_string(&mut s)?;
        Token::from_hex(&s).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Writes the token file atomically: a temporary file of mode 0600,
    /// renamed over `path`. (The default file's directory is
    /// [`runtime_dir`], which [`private_dir`] makes private.)
    pub fn write_file(&self, path: &Path) -> io::Result<()> {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let _ = fs::remove_file(&tmp);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(format!("{}\n", self.to_hex()).as_bytes())?;
        drop(f);
        fs::rename(&tmp, path)
    }

    fn mac(&self, role: &[u8], client_nonce: &str, qemu_nonce: &str) -> Hmac<Sha256> {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        // Lengths make the encoding unambiguous; the role keeps a hello's
        // proof from passing as a welcome's.
        for part in [role, client_nonce.as_bytes(), qemu_nonce.as_bytes()] {
            m.update(&(part.len() as u64).to_le_bytes());
            m.update(part);
        }
        m
    }

    /// The proof one side sends: HMAC-SHA256 over the role and both nonces.
    pub fn prove(&self, role: Role, client_nonce: &str, qemu_nonce: &str) -> String {
        hex::encode(
            self.mac(role.label(), client_nonce, qemu_nonce)
                .finalize()
                .into_bytes(),
        )
    }

    /// Checks the other side's proof, in constant time.
    pub fn check(&self, role: Role, client_nonce: &str, qemu_nonce: &str, proof: &str) -> bool {
        let Ok(bytes) = hex::decode(proof) else {
            return false;
        };
        self.mac(role.label(), client_nonce, qemu_nonce)
            .verify_slice(&bytes)
            .is_ok()
    }
}

// The secret never shows up in a log or a panic message.
impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(..)")
    }
}

/// The token file: `$CANNOLI_TOKEN_FILE`, else `token` in [`runtime_dir`].
pub fn token_file() -> PathBuf {
    match std::env::var_os(TOKEN_FILE_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => runtime_dir().join("token"),
    }
}

/// Which message a proof is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// QEMU's hello.
    Hello,
    /// The client's welcome.
    Welcome,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::Hello => b"cannoli hello",
            Role::Welcome => b"cannoli welcome",
        }
    }
}

/// A fresh nonce: 16 random bytes in hex.
pub fn nonce() -> io::Result<String> {
    let mut b = [0u8; 16];
    getrandom::getrandom(&mut b).map_err(io::Error::other)?;
    Ok(hex::encode(b))
}

/// The client's first line on a new connection.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Challenge {
    /// Always [`MAGIC`].
    pub magic: String,
    /// The client's [`WIRE_VERSION`], so QEMU's side can say which one it
    /// would need.
    pub wire_version: u32,
    /// The client's nonce, hex.
    pub nonce: String,
}

/// How the client finds a stream's ring.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RingRef {
    /// Sent with the hello as a file descriptor (`SCM_RIGHTS`; Unix sockets).
    Attached,
    /// QEMU's fd of that number: open `/proc/<hello.pid>/fd/<n>` (TCP).
    ProcFd(i32),
}

/// The connection to the client, either kind.
#[derive(Debug)]
pub enum Sock {
    /// A Unix-domain socket: the default, and the only kind that can pass
    /// a ring's fd ([`RingRef::Attached`]).
    Unix(UnixStream),
    /// A TCP connection (`HOST:PORT`).
    Tcp(TcpStream),
}

impl Sock {
    /// Connects to `addr`.
    pub fn connect(addr: &Addr) -> io::Result<Sock> {
        Self::connect_placed(addr, FdPlace::Floor(0))
    }

    /// Connects to `addr` from a socket that `place` made where it belongs,
    /// before the connect (which may wait a while for the client).
    pub fn connect_placed(addr: &Addr, place: FdPlace) -> io::Result<Sock> {
        Self::connect_made(addr, place).map_err(|e| match e {
            Unconnected::NotMade(e) | Unconnected::Refused(e) => e,
        })
    }

    fn connect_made(addr: &Addr, place: FdPlace) -> Result<Sock, Unconnected> {
        let make = |family| {
            place
                .make(&mut || new_socket(family))
                .map_err(Unconnected::NotMade)
        };
        match addr {
            Addr::Unix(p) => {
                // SAFETY: sockaddr_un is plain data; all zeroes is valid.
                let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
                sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
                let path = p.as_os_str().as_encoded_bytes();
                if path.is_empty() || path.len() >= sa.sun_path.len() || path.contains(&0) {
                    return Err(Unconnected::Refused(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "a Unix socket path has 1 to {} bytes and no NUL",
                            sa.sun_path.len() - 1
                        ),
                    )));
                }
                for (d, b) in sa.sun_path.iter_mut().zip(path) {
                    *d = *b as libc::c_char;
                }
                let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + path.len() + 1;
                let fd = make(libc::AF_UNIX)?;
                connect_fd(&fd, &sa as *const _ as *const libc::sockaddr, len, true)
                    .map_err(Unconnected::Refused)?;
                Ok(Sock::Unix(UnixStream::from(fd)))
            }
            Addr::Tcp(a) => {
                let mut last = io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{a} resolves to no address"),
                );
                for sa in a.as_str().to_socket_addrs().map_err(Unconnected::Refused)? {
                    let family = if sa.is_ipv4() {
                        libc::AF_INET
                    } else {
                        libc::AF_INET6
                    };
                    let fd = make(family)?;
                    let (raw, len) = inet_sockaddr(&sa);
                    match connect_fd(&fd, &raw as *const _ as *const libc::sockaddr, len, false) {
                        Ok(()) => {
                            let s = TcpStream::from(fd);
                            let _ = s.set_nodelay(true);
                            return Ok(Sock::Tcp(s));
                        }
                        Err(e) => last = e,
                    }
                }
                Err(Unconnected::Refused(last))
            }
        }
    }

    /// Sets the socket's read timeout (`None`: block forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Sock::Unix(s) => s.set_read_timeout(t),
            Sock::Tcp(s) => s.set_read_timeout(t),
        }
    }

    /// Sets the socket's write timeout (`None`: block forever).
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Sock::Unix(s) => s.set_write_timeout(t),
            Sock::Tcp(s) => s.set_write_timeout(t),
        }
    }

    /// Shuts both directions of the connection down; errors are ignored
    /// (the peer may be gone already).
    pub fn shutdown(&self) {
        let _ = match self {
            Sock::Unix(s) => s.shutdown(Shutdown::Both),
            Sock::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }

    /// A second handle on the same connection (a dup of its fd).
    pub fn try_clone(&self) -> io::Result<Sock> {
        Ok(match self {
            Sock::Unix(s) => Sock::Unix(s.try_clone()?),
            Sock::Tcp(s) => Sock::Tcp(s.try_clone()?),
        })
    }

    /// Gives up the socket without closing it (a forked child closes its
    /// copy of the parent's connection this way: see
    /// jitter's `Stream::abandon_inherited`).
    pub fn into_raw_fd(self) -> RawFd {
        match self {
            Sock::Unix(s) => s.into_raw_fd(),
            Sock::Tcp(s) => s.into_raw_fd(),
        }
    }

    /// Writes all of `line`, passing `fd` along with its first byte
    /// (`SCM_RIGHTS`; Unix sockets only).
    pub fn send_with_fd(&mut self, line: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
        self.send_with_fds(line, &[fd])
    }

    /// Writes all of `line`, passing `fds` (1 to [`MAX_PASSED_FDS`] of
    /// them, in this order) along with its first byte, in one
    /// `SCM_RIGHTS` message (Unix sockets only).
    pub fn send_with_fds(&mut self, line: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        self.send_fds(line, fds)
    }

    /// [`Sock::send_with_fds`] on a shared socket (the handshake reads from
    /// it meanwhile).
    fn send_fds(&self, line: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let Sock::Unix(s) = self else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "file descriptors only travel over Unix sockets",
            ));
        };
        if fds.is_empty() || fds.len() > MAX_PASSED_FDS || line.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a line passes 1 to {MAX_PASSED_FDS} file descriptors, and has bytes to \
                     carry them"
                ),
            ));
        }
        let payload = 4 * fds.len() as u32;
        // SAFETY: CMSG_SPACE is arithmetic on its argument.
        let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
        let mut cbuf = vec![0u8; space];
        let iov = [IoSlice::new(line)];
        // SAFETY: msghdr is plain data; every pointer set below refers to a
        // buffer that outlives the sendmsg call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` bytes, room for one
        // SCM_RIGHTS header and `fds.len()` ints (CMSG_SPACE(payload));
        // CMSG_FIRSTHDR and the ints written from CMSG_DATA stay inside it.
        let sent = unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(payload) as _;
            let data = libc::CMSG_DATA(c) as *mut i32;
            for (i, fd) in fds.iter().enumerate() {
                std::ptr::write_unaligned(data.add(i), fd.as_raw_fd());
            }
            libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        // The rest of the line, if the kernel took only part of it.
        (&*s).write_all(&line[sent as usize..])
    }
}

/// Why [`Sock::connect_made`] has no connection.
enum Unconnected {
    /// No socket: its [`FdPlace`] failed.
    NotMade(io::Error),
    /// The connect failed.
    Refused(io::Error),
}

/// A new stream socket of `family`, close-on-exec.
fn new_socket(family: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) makes a new fd or fails.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `sa` as a sockaddr_in or sockaddr_in6, and its length.
fn inet_sockaddr(sa: &SocketAddr) -> (libc::sockaddr_storage, usize) {
    // SAFETY: sockaddr_storage is plain data; all zeroes is valid.
    let mut raw: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match sa {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for any
            // sockaddr.
            unsafe { std::ptr::write(&mut raw as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { std::ptr::write(&mut raw as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (raw, len)
}

/// connect(2) on a blocking socket, through signals: a Unix socket simply
/// tries again; a TCP connect goes on in the background after EINTR, so
/// wait until it is done and take its result.
fn connect_fd(fd: &OwnedFd, sa: *const libc::sockaddr, len: usize, unix: bool) -> io::Result<()> {
    loop {
        // SAFETY: `sa` points to `len` bytes of a sockaddr of the socket's
        // family (the callers build it just before).
        if unsafe { libc::connect(fd.as_raw_fd(), sa, len as libc::socklen_t) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
        if unix {
            continue;
        }
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        while unsafe { libc::poll(&mut p, 1, -1) } < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        let mut err: libc::c_int = 0;
        let mut n = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: SO_ERROR writes one int into `err`, `n` says its size.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                &mut err as *mut _ as *mut libc::c_void,
                &mut n,
            )
        };
        return match (rc, err) {
            (0, 0) => Ok(()),
            (0, e) => Err(io::Error::from_raw_os_error(e)),
            _ => Err(io::Error::last_os_error()),
        };
    }
}

/// Most file descriptors [`Sock::send_with_fds`] passes with one line (a
/// hello passes its ring and its block table).
pub const MAX_PASSED_FDS: usize = 2;

/// Bytes of control buffer for one passed fd.
pub fn cmsg_space_for_one_fd() -> usize {
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    unsafe { libc::CMSG_SPACE(4) as usize }
}

impl Read for Sock {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => s.read(b),
            Sock::Tcp(s) => s.read(b),
        }
    }
}

impl Read for &Sock {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => (&*s).read(b),
            Sock::Tcp(s) => (&*s).read(b),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => s.write(b),
            Sock::Tcp(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &Sock {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => (&*s).write(b),
            Sock::Tcp(s) => (&*s).write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for Sock {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Sock::Unix(s) => s.as_raw_fd(),
            Sock::Tcp(s) => s.as_raw_fd(),
        }
    }
}

/// Reads one line of at most [`MAX_LINE`] bytes. `Ok(None)` at a clean EOF
/// before any byte.
pub fn read_line(r: &mut impl BufRead) -> io::Result<Option<String>> {
    let mut line = String::new();
    let n = r.take(MAX_LINE as u64).read_line(&mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if !line.ends_with('\n') {
        if n >= MAX_LINE {
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

/// How QEMU's side hands its ring over.
pub enum RingOffer<'a> {
    /// Pass this fd with the hello (Unix sockets).
    Fd(BorrowedFd<'a>),
    /// Name this fd number of ours (TCP: the client opens
    /// `/proc/<pid>/fd/<n>`).
    ProcFd(i32),
}

impl RingOffer<'_> {
    /// How a hello names this offer.
    fn named(&self) -> RingRef {
        match self {
            RingOffer::Fd(_) => RingRef::Attached,
            RingOffer::ProcFd(n) => RingRef::ProcFd(*n),
        }
    }
}

/// QEMU's side of the handshake: connects to `addr`, answers the client's
/// challenge with `hello` (whose `nonce`, `proof`, `ring` and `blocks` it
/// fills in), and checks the welcome (`token`: the run's secret, or why
/// there is none). `ring` gives the ring and `blocks` the process's block
/// table, if any: passed as fds over a Unix socket (both in one
/// `SCM_RIGHTS` message, the ring's first), named by fd number over TCP.
/// `place` puts the socket where it belongs before it connects (`0`:
/// anywhere; QEMU's side: out of the guest's reach); the handshake makes
/// no other descriptor. Errors are one line for QEMU's stderr.
pub fn dial(
    addr: &Addr,
    token: Result<&Token, TokenError>,
    place: impl Into<FdPlace>,
    mut hello: Hello,
    ring: &RingOffer<'_>,
    blocks: Option<&RingOffer<'_>>,
) -> Result<Sock, DialError> {
    let addr_ = || addr.clone();
    let sock = match Sock::connect_made(addr, place.into()) {
        Ok(s) => s,
        Err(Unconnected::NotMade(source)) => {
            return Err(DialError::NoSocket {
                addr: addr_(),
                source,
            })
        }
        Err(Unconnected::Refused(source)) => {
            return Err(DialError::NoClient {
                addr: addr_(),
                source,
            })
        }
    };
    // The secret is looked at only now, so that a missing client is
    // reported as such rather than as a missing secret.
    let token = token?;
    let lost = |source: io::Error| DialError::Lost {
        addr: addr_(),
        source,
    };
    sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(lost)?;
    sock.set_write_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(lost)?;
    let mut reader = BufReader::new(&sock);
    let line = read_line(&mut reader)
        .map_err(|source| DialError::NoChallenge {
            addr: addr_(),
            source,
        })?
        .ok_or_else(|| DialError::ClosedAtOnce { addr: addr_() })?;
    let challenge = parse_challenge(&line).map_err(|source| DialError::Challenge {
        addr: addr_(),
        source,
    })?;
    hello.nonce = nonce().map_err(lost)?;
    hello.proof = token.prove(Role::Hello, &challenge.nonce, &hello.nonce);
    hello.ring = ring.named();
    hello.blocks = blocks.map(RingOffer::named);
    let mut out = serde_json::to_string(&hello).expect("a Hello serializes");
    out.push('\n');
    let fds: Vec<BorrowedFd<'_>> = [Some(ring), blocks]
        .into_iter()
        .flatten()
        .filter_map(|o| match o {
            RingOffer::Fd(fd) => Some(*fd),
            RingOffer::ProcFd(_) => None,
        })
        .collect();
    if fds.is_empty() {
        (&sock).write_all(out.as_bytes())
    } else {
        sock.send_fds(out.as_bytes(), &fds)
    }
    .map_err(lost)?;
    let reply = read_line(&mut reader)
        .map_err(|source| DialError::NoWelcome {
            addr: addr_(),
            source,
        })?
        .ok_or_else(|| DialError::ClosedInHandshake { addr: addr_() })?;
    let welcome: Welcome = serde_json::from_str(reply.trim_end())
        .map_err(|_| DialError::NotWelcome { addr: addr_() })?;
    if let Some(reason) = welcome.error {
        return Err(DialError::Refused {
            addr: addr_(),
            reason,
        });
    }
    let proved = welcome
        .proof
        .as_deref()
        .is_some_and(|p| token.check(Role::Welcome, &challenge.nonce, &hello.nonce, p));
    if !proved {
        return Err(DialError::Unproved { addr: addr_() });
    }
    drop(reader);
    let _ = sock.set_read_timeout(None);
    let _ = sock.set_write_timeout(None);
    Ok(sock)
}

/// Parses the client's challenge, refusing a wire version other than ours
/// with a message naming both.
pub fn parse_challenge(line: &str) -> Result<Challenge, ChallengeError> {
    let v: serde_json::Value =
        serde_json::from_str(line.trim_end()).map_err(|_| ChallengeError::NotJson)?;
    if v.get("magic").and_then(|m| m.as_str()) != Some(MAGIC) {
        return Err(ChallengeError::NotCannoli);
    }
    let theirs = v.get("wire_version").and_then(|w| w.as_u64());
    if theirs != Some(WIRE_VERSION as u64) {
        return Err(ChallengeError::Version { theirs });
    }
    let c: Challenge = serde_json::from_value(v).map_err(|e| ChallengeError::Malformed {
        reason: e.to_string(),
    })?;
    if c.nonce.len() != 32 || !c.nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ChallengeError::BadNonce);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_print_back() {
        for s in ["unix:/tmp/x/cannoli.sock", "127.0.0.1:11458", "[::1]:9"] {
            assert_eq!(Addr::parse(s).to_string(), s);
        }
        assert_eq!(Addr::parse("unix:/a b"), Addr::Unix(PathBuf::from("/a b")));
        assert!(matches!(Addr::parse("localhost:1"), Addr::Tcp(_)));
    }

    #[test]
    fn proofs_bind_secret_role_and_both_nonces() {
        let t = Token::generate().unwrap();
        let (c, q) = (nonce().unwrap(), nonce().unwrap());
        let p = t.prove(Role::Hello, &c, &q);
        assert!(t.check(Role::Hello, &c, &q, &p));
        assert!(
            !t.check(Role::Welcome, &c, &q, &p),
            "a hello proof is no welcome proof"
        );
        assert!(!t.check(Role::Hello, &q, &c, &p), "nonces swapped");
        assert!(
            !t.check(Role::Hello, &c, &nonce().unwrap(), &p),
            "another nonce"
        );
        let other = Token::generate().unwrap();
        assert!(!other.check(Role::Hello, &c, &q, &p), "another secret");
        assert!(!t.check(Role::Hello, &c, &q, "zz"));
        assert!(!t.check(Role::Hello, &c, &q, ""));
    }

    #[test]
    fn token_hex_roundtrip_and_redacted_debug() {
        let t = Token::generate().unwrap();
        assert_eq!(Token::from_hex(&t.to_hex()).unwrap(), t);
        assert_eq!(Token::from_hex(&format!(" {}\n", t.to_hex())).unwrap(), t);
        assert!(Token::from_hex("abcd").is_err());
        assert!(Token::from_hex(&"g".repeat(64)).is_err());
        assert!(!format!("{t:?}").contains(&t.to_hex()[..8]));
    }

    #[test]
    fn errors_say_what_they_said_as_strings() {
        assert_eq!(
            Token::from_hex("abcd").unwrap_err().to_string(),
            "a cannoli token is 64 hex digits"
        );
        assert_eq!(
            TokenError::EnvNotHex.to_string(),
            "CANNOLI_TOKEN is not a cannoli token (a cannoli token is 64 hex digits)"
        );
        let nofile = TokenError::NoFile {
            path: "/r/token".into(),
            source: Arc::new(io::Error::other("gone")),
        };
        assert_eq!(
            nofile.to_string(),
            "no secret to present to the cannoli client: CANNOLI_TOKEN is unset and the token file \
             /r/token cannot be used (gone); start the client first (it writes that file), or pass \
             the client's token in CANNOLI_TOKEN"
        );
        let addr = Addr::parse("unix:/r/s");
        assert_eq!(
            DialError::Challenge {
                addr: addr.clone(),
                source: ChallengeError::Version { theirs: None },
            }
            .to_string(),
            format!(
                "unix:/r/s is a cannoli client speaking wire version none, but this hook library \
                 speaks wire version {WIRE_VERSION}; rebuild the client and the hook library from \
                 the same cannoli version"
            )
        );
        assert_eq!(
            DialError::Refused {
                addr: addr.clone(),
                reason: "no\nway".into(),
            }
            .to_string(),
            "the client at unix:/r/s refused the trace: no\\nway"
        );
        assert_eq!(
            DialError::from(TokenError::NotHex).to_string(),
            "a cannoli token is 64 hex digits"
        );
        assert_eq!(
            DialError::NoClient {
                addr,
                source: io::Error::other("refused"),
            }
            .to_string(),
            "no cannoli client is listening on unix:/r/s (refused): start your client first, or \
             point CANNOLI_ADDR at it"
        );
    }

    #[test]
    fn token_file_must_be_private() {
        let dir = std::env::temp_dir().join(format!("cannoli-wire-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).unwrap();
        private_dir(&dir.join("sub")).unwrap();
        let path = dir.join("sub").join("token");
        let t = Token::generate().unwrap();
        t.write_file(&path).unwrap();
        assert_eq!(Token::read_file(&path).unwrap(), t);
        let mode = fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777,
            0o700
        );
        // Readable by others: refused.
        fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        assert!(Token::read_file(&path).is_err());
        // A symlink to a good file: refused (O_NOFOLLOW).
        fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(Token::read_file(&link).is_err());
        // A directory open to others is not private.
        let open = dir.join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let e = private_dir(&open).unwrap_err();
        assert!(e.to_string().contains("open to other users"), "{e}");
        // A symlink to a private directory is not one either.
        let dlink = dir.join("dlink");
        std::os::unix::fs::symlink(path.parent().unwrap(), &dlink).unwrap();
        assert!(private_dir(&dlink).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn challenges_are_checked() {
        let good = format!(
            "{{\"magic\":\"cannoli\",\"wire_version\":{WIRE_VERSION},\"nonce\":\"{}\"}}\n",
            "ab".repeat(16)
        );
        assert!(parse_challenge(&good).is_ok());
        let old = good.replace(&format!(":{WIRE_VERSION},"), ":4,");
        let e = parse_challenge(&old).unwrap_err().to_string();
        assert!(
            e.contains("wire version 4") && e.contains(&WIRE_VERSION.to_string()),
            "{e}"
        );
        assert!(parse_challenge("HTTP/1.1 200 OK\n").is_err());
        assert!(parse_challenge(&good.replace("cannoli", "other")).is_err());
        assert!(parse_challenge(&good.replace(&"ab".repeat(16), "short")).is_err());
    }

    /// Receives one message and the fds that came with it (test only).
    fn recv_with_fds(s: &UnixStream) -> (Vec<u8>, Vec<std::os::fd::OwnedFd>, usize) {
        let mut buf = vec![0u8; MAX_LINE];
        let mut cbuf = vec![0u8; cmsg_space_for_one_fd() * 4];
        let mut iov = [io::IoSliceMut::new(&mut buf)];
        let mut fds = Vec::new();
        let mut messages = 0;
        // SAFETY: test-only recvmsg into buffers that outlive the call; the
        // fds in each SCM_RIGHTS message are ours.
        let n = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = iov.as_mut_ptr() as *mut libc::iovec;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = cbuf.len() as _;
            let n = libc::recvmsg(s.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
            assert!(n > 0);
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                messages += 1;
                let k = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
                let data = libc::CMSG_DATA(c) as *const i32;
                for i in 0..k {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    fds.push(std::os::fd::OwnedFd::from_raw_fd(fd));
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
            n as usize
        };
        buf.truncate(n);
        (buf, fds, messages)
    }

    fn same_file(a: &impl std::os::fd::AsRawFd, b: &impl std::os::fd::AsRawFd) -> bool {
        let m = |f: &dyn std::os::fd::AsRawFd| {
            fs::metadata(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap()
        };
        let (m1, m2) = (m(a), m(b));
        (m1.dev(), m1.ino()) == (m2.dev(), m2.ino())
    }

    #[test]
    fn two_fds_travel_with_their_line_in_one_message() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut a = Sock::Unix(a);
        let f1 = fs::File::open("/proc/self/exe").unwrap();
        let f2 = fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsFd;
        a.send_with_fds(b"two\n", &[f1.as_fd(), f2.as_fd()])
            .unwrap();
        let (line, fds, messages) = recv_with_fds(&b);
        assert_eq!(line, b"two\n");
        assert_eq!((fds.len(), messages), (2, 1));
        assert!(same_file(&fds[0], &f1) && same_file(&fds[1], &f2));
        assert!(a.send_with_fds(b"x\n", &[]).is_err());
        let three = [f1.as_fd(), f2.as_fd(), f1.as_fd()];
        assert!(a.send_with_fds(b"x\n", &three).is_err());
    }

    #[test]
    fn dial_passes_the_ring_and_the_table_with_the_hello() {
        let dir = std::env::temp_dir().join(format!("cannoli-wire-dial-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).unwrap();
        let path = dir.join("c.sock");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let token = Token::generate().unwrap();
        let client_token = token.clone();
        // A client: challenge, hello with its fds, welcome.
        let client = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let ours = nonce().unwrap();
            let ch = format!(
                "{{\"magic\":\"cannoli\",\"wire_version\":{WIRE_VERSION},\"nonce\":\"{ours}\"}}\n"
            );
            s.write_all(ch.as_bytes()).unwrap();
            let (line, fds, messages) = recv_with_fds(&s);
            let hello = crate::parse_hello(std::str::from_utf8(&line).unwrap()).unwrap();
            let proof = client_token.prove(Role::Welcome, &ours, &hello.nonce);
            let w = format!("{{\"error\":null,\"proof\":\"{proof}\"}}\n");
            s.write_all(w.as_bytes()).unwrap();
            (hello, fds, messages)
        });
        let ring = fs::File::open("/proc/self/exe").unwrap();
        let table = fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsFd;
        let hello: Hello = serde_json::from_str(
            &serde_json::json!({
                "magic": MAGIC, "wire_version": WIRE_VERSION, "jitter_version": "t",
                "pid": 1, "ppid": 1, "tid": 1, "arch": "mipsel", "big_endian": false,
                "guest_bits": 32, "ring": "attached", "nonce": "", "proof": "",
                "comm": null, "exe": null
            })
            .to_string(),
        )
        .unwrap();
        dial(
            &Addr::Unix(path),
            Ok(&token),
            0,
            hello,
            &RingOffer::Fd(ring.as_fd()),
            Some(&RingOffer::Fd(table.as_fd())),
        )
        .unwrap();
        let (hello, fds, messages) = client.join().unwrap();
        assert_eq!(
            (hello.ring, hello.blocks),
            (RingRef::Attached, Some(RingRef::Attached))
        );
        assert_eq!((fds.len(), messages), (2, 1));
        assert!(same_file(&fds[0], &ring) && same_file(&fds[1], &table));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_fd_travels_with_its_line() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut a = Sock::Unix(a);
        let f = fs::File::open("/proc/self/exe").unwrap();
        a.send_with_fd(b"hello\n", std::os::fd::AsFd::as_fd(&f))
            .unwrap();
        let mut buf = [0u8; 16];
        let mut cbuf = vec![0u8; cmsg_space_for_one_fd()];
        let mut iov = [io::IoSliceMut::new(&mut buf)];
        // SAFETY: test-only recvmsg into buffers that outlive the call.
        let (n, fd) = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = iov.as_mut_ptr() as *mut libc::iovec;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = cbuf.len() as _;
            let n = libc::recvmsg(b.as_raw_fd(), &mut msg, 0);
            let c = libc::CMSG_FIRSTHDR(&msg);
            assert!(!c.is_null());
            (
                n,
                std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const i32),
            )
        };
        assert_eq!(&buf[..n as usize], b"hello\n");
        let (m1, m2) = (
            fs::metadata(format!("/proc/self/fd/{fd}")).unwrap(),
            f.metadata().unwrap(),
        );
        assert_eq!((m1.dev(), m1.ino()), (m2.dev(), m2.ino()));
        // SAFETY: `fd` was just received and is ours.
        unsafe { libc::close(fd) };
    }
}
