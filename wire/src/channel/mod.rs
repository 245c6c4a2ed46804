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
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::{FdPlace, Hello, Welcome, MAGIC, WIRE_VERSION};

mod error;
mod sock;
#[cfg(test)]
mod tests;

pub use error::{ChallengeError, DialError, TokenError};
pub use sock::*;

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
