//! The client's side of the handshake (protocol: `wire::channel`): check
//! who connected, challenge it, take its hello and ring, and welcome it.
//!
//! Who may stream to us: a peer of our own uid (Unix sockets, checked with
//! `SO_PEERCRED`, and its pid must be the one its hello names), holding the
//! run's secret (its hello's proof), offering a ring that is a sealed memfd
//! of our uid (`mempipe::Consumer::from_fd`), and, if it has one, its
//! process's block table, another sealed memfd of our uid
//! (`mempipe::TableReader::from_fd`). Every read has a deadline.

use std::collections::HashMap;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use mempipe::{Consumer, TableReader};
use wire::channel::{cmsg_space_for_one_fd, nonce, Challenge, Role, Sock, MAX_LINE};
use wire::{parse_hello, Hello, HelloError, RingRef, Token, Welcome, MAGIC, WIRE_VERSION};

/// Why a connection did not become a stream.
pub(crate) enum Refusal {
    /// Not this run's QEMU at all (another user, not a cannoli hello, gone
    /// before saying anything): said on stderr, not counted as loss.
    Stranger(String),
    /// A cannoli hello we could not take (wrong version, wrong secret, bad
    /// ring): if it was one of our guest threads, its events are lost.
    Refused(String),
}

/// A stream the handshake accepted.
pub(crate) struct Accepted {
    pub(crate) hello: Hello,
    /// The hello line as QEMU sent it (a recording keeps it).
    pub(crate) line: String,
    /// Its ring.
    pub(crate) consumer: Consumer,
    /// Its process's block table, shared by every stream of the process
    /// (`None`: QEMU's side has none).
    pub(crate) blocks: Option<Arc<TableReader>>,
    /// Our welcome, not sent yet: see [`Accepted::welcome`].
    welcome: String,
}

impl Accepted {
    /// Sends the welcome, which lets the guest thread run. The caller first
    /// makes the stream known (its process's context taken, its place in
    /// the announcements), so that a thread which runs, ends and is joined
    /// at once never leaves its process looking finished: were its
    /// process's last other stream to end in that gap, the process's
    /// context (a library's placement, say) would go before this stream
    /// took it, and this stream would get a new one that knows nothing.
    pub(crate) fn welcome(&self, sock: &mut Sock) -> Result<(), Refusal> {
        let who = format!("pid {} tid {}", self.hello.pid, self.hello.tid);
        sock.write_all(self.welcome.as_bytes())
            .map_err(|e| Refusal::Refused(format!("{who}: sending the welcome failed: {e}")))?;
        let _ = sock.set_read_timeout(None);
        let _ = sock.set_write_timeout(None);
        Ok(())
    }
}

/// The block tables mapped for the processes streaming, by pid, so that the
/// streams of one process share one mapping. Only weak references: a
/// table goes when the last stream of its process ends.
#[derive(Default)]
pub(crate) struct Tables(Mutex<HashMap<i32, Weak<TableReader>>>);

impl Tables {
    /// Process `pid`'s table: the one already mapped if its file is `file`
    /// (`st_dev`, `st_ino`; a process that exec'd has a new table under the
    /// same pid), else `open()`'s, remembered for the next stream.
    fn get(
        &self,
        pid: i32,
        file: Option<(u64, u64)>,
        open: impl FnOnce() -> Result<TableReader, mempipe::Error>,
    ) -> Result<Arc<TableReader>, mempipe::Error> {
        let mapped = |map: &HashMap<i32, Weak<TableReader>>, file: Option<(u64, u64)>| {
            map.get(&pid)
                .and_then(Weak::upgrade)
                .filter(|t| file == Some(t.file_id()))
        };
        if let Some(t) = mapped(&self.lock(), file) {
            return Ok(t);
        }
        // Opened without the lock: other connections need not wait for it.
        let new = open()?;
        let mut map = self.lock();
        if let Some(t) = mapped(&map, Some(new.file_id())) {
            return Ok(t); // another stream of the process was quicker
        }
        // Bounded: only live tables stay (at most one per live stream).
        map.retain(|_, t| t.strong_count() > 0);
        let new = Arc::new(new);
        map.insert(pid, Arc::downgrade(&new));
        Ok(new)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Weak<TableReader>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// `(st_dev, st_ino)` of `m`.
fn file_id(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

/// A connection we challenged: what the rest of the handshake needs.
pub(crate) struct Opened {
    /// Our nonce, which the hello's proof must cover.
    nonce: String,
    /// Who connected (Unix sockets).
    cred: Option<libc::ucred>,
}

/// The first half of the handshake, on the accept loop: checks who
/// connected (Unix sockets: our uid) and sends our challenge, without ever
/// waiting (a fresh socket's send buffer takes it at once). QEMU answers it
/// with its hello at once, so a connection that has said nothing after it
/// is the one to drop when too many wait (`server/pending.rs`).
pub(crate) fn challenge(sock: &Sock, peer: &str) -> Result<Opened, Refusal> {
    let cred =
        match sock {
            Sock::Unix(_) => Some(peer_cred(sock).map_err(|e| {
                Refusal::Stranger(format!("{peer}: cannot tell who connected ({e})"))
            })?),
            Sock::Tcp(_) => None,
        };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if let Some(c) = cred {
        if c.uid != me {
            return Err(Refusal::Stranger(format!(
                "{peer}: a process of uid {} connected; only this user's QEMU may stream here",
                c.uid
            )));
        }
    }
    let nonce = nonce().map_err(|e| Refusal::Stranger(format!("{peer}: no random nonce: {e}")))?;
    let challenge = Challenge {
        magic: MAGIC.into(),
        wire_version: WIRE_VERSION,
        nonce: nonce.clone(),
    };
    let line = serde_json::to_string(&challenge).expect("a Challenge serializes") + "\n";
    // SAFETY: send of a live buffer on a socket we own; MSG_DONTWAIT never
    // blocks, MSG_NOSIGNAL turns a closed peer into EPIPE.
    let sent = unsafe {
        libc::send(
            sock.as_raw_fd(),
            line.as_ptr().cast(),
            line.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if sent != line.len() as isize {
        let why = if sent < 0 {
            io::Error::last_os_error().to_string()
        } else {
            "its socket took only part of our challenge".into()
        };
        return Err(Refusal::Stranger(format!(
            "{peer}: closed before the handshake ({why})"
        )));
    }
    Ok(Opened { nonce, cred })
}

/// The rest of the handshake, once the challenged connection has something
/// to say; `peer` names it in messages. `timeout` bounds each read and
/// write; `trust_pid`: take the hello's pid without checking it against the
/// connecting process. A block table comes from `tables` when its
/// process's other streams already mapped it. It ends before the welcome:
/// the caller sends it ([`Accepted::welcome`]) or refuses the stream.
pub(crate) fn handshake(
    sock: &mut Sock,
    peer: &str,
    opened: Opened,
    token: &Token,
    timeout: Duration,
    trust_pid: bool,
    tables: &Tables,
) -> Result<Accepted, Refusal> {
    let _ = sock.set_read_timeout(Some(timeout));
    let _ = sock.set_write_timeout(Some(timeout));
    let Opened { nonce: ours, cred } = opened;
    let (line, fds) = recv_line(sock).map_err(|e| {
        Refusal::Stranger(match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => format!(
                "{peer}: sent no hello within {:.1} s",
                timeout.as_secs_f64()
            ),
            _ => format!("{peer}: reading its hello failed: {e}"),
        })
    })?;
    let hello = match parse_hello(&line) {
        Ok(h) => h,
        Err(HelloError::NotCannoli) => {
            return Err(Refusal::Stranger(format!(
                "{peer}: did not send a cannoli hello"
            )))
        }
        Err(e) => return Err(refuse(sock, format!("{peer}: {e}"))),
    };
    let who = format!("pid {} tid {}", hello.pid, hello.tid);
    if !token.check(Role::Hello, &ours, &hello.nonce, &hello.proof) {
        return Err(refuse(
            sock,
            format!(
                "{who} ({peer}): its hello does not prove it holds this run's secret; a QEMU started \
                 by hand needs this client's token (the client's token file, or {})",
                wire::TOKEN_ENV
            ),
        ));
    }
    if let Some(c) = cred.filter(|_| !trust_pid) {
        if c.pid != hello.pid {
            return Err(refuse(
                sock,
                format!(
                    "{who}: the hello names pid {} but process {} sent it",
                    hello.pid, c.pid
                ),
            ));
        }
    }
    // The ring, and the table's fd if it came with the hello.
    let (consumer, table_fd) = match (hello.ring, hello.blocks) {
        (RingRef::Attached, Some(RingRef::Attached)) => match <[OwnedFd; 2]>::try_from(fds) {
            Ok([r, t]) => (Consumer::from_fd(r), Some(t)),
            Err(v) => {
                return Err(refuse(
                    sock,
                    format!(
                        "{who}: its hello came with {} file descriptors, not its ring and its \
                         block table",
                        v.len()
                    ),
                ))
            }
        },
        (RingRef::Attached, None | Some(RingRef::ProcFd(_))) => {
            match <[OwnedFd; 1]>::try_from(fds) {
                Ok([r]) => (Consumer::from_fd(r), None),
                Err(v) => {
                    return Err(refuse(
                        sock,
                        format!(
                            "{who}: its hello came with {} file descriptors, not its ring alone",
                            v.len()
                        ),
                    ))
                }
            }
        }
        (RingRef::ProcFd(_), Some(RingRef::Attached)) => {
            return Err(refuse(
                sock,
                format!(
                    "{who}: its hello says its block table comes with it but its ring does not; \
                     both come with the hello (Unix socket) or neither (TCP)"
                ),
            ))
        }
        (RingRef::ProcFd(n), None | Some(RingRef::ProcFd(_))) => {
            (Consumer::open_proc(hello.pid, n), None)
        }
    };
    let consumer =
        consumer.map_err(|e| refuse(sock, format!("{who}: cannot open its event ring: {e}")))?;
    let blocks = match (hello.blocks, table_fd) {
        (_, Some(fd)) => {
            let file = std::fs::File::from(fd);
            let id = file.metadata().ok().map(|m| file_id(&m));
            Some(tables.get(hello.pid, id, || TableReader::from_fd(file.into())))
        }
        (Some(RingRef::ProcFd(n)), None) => {
            // stat follows the /proc link without opening anything.
            let id = std::fs::metadata(format!("/proc/{}/fd/{n}", hello.pid))
                .ok()
                .map(|m| file_id(&m));
            Some(tables.get(hello.pid, id, || TableReader::open_proc(hello.pid, n)))
        }
        (_, None) => None,
    };
    let blocks = blocks
        .transpose()
        .map_err(|e| refuse(sock, format!("{who}: cannot open its block table: {e}")))?;
    let welcome = Welcome {
        error: None,
        proof: Some(token.prove(Role::Welcome, &ours, &hello.nonce)),
    };
    Ok(Accepted {
        hello,
        line,
        consumer,
        blocks,
        welcome: serde_json::to_string(&welcome).expect("a Welcome serializes") + "\n",
    })
}

/// Tells QEMU why its stream is refused (QEMU prints it) and returns the
/// refusal.
pub(crate) fn refuse(sock: &mut Sock, msg: String) -> Refusal {
    let w = Welcome {
        error: Some(msg.clone()),
        proof: None,
    };
    let line = serde_json::to_string(&w).expect("a Welcome serializes") + "\n";
    let _ = sock.write_all(line.as_bytes());
    Refusal::Refused(msg)
}

fn peer_cred(sock: &Sock) -> io::Result<libc::ucred> {
    // SAFETY: ucred is plain data.
    let mut c: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes into `c`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(c)
}

/// Most descriptors one message before the welcome may bring; any beyond
/// are closed by the kernel (and the hello refused).
const MAX_FDS: usize = 4;
/// Most descriptors a hello brings in all: its ring and its block table.
/// A peer that has not proven anything yet sends no more, across however
/// many messages: beyond that the connection is refused and every one of
/// them closed, so a stranger cannot pile up descriptors here.
const MAX_HELLO_FDS: usize = 2;

/// Reads the hello line and the descriptors that came with it. QEMU sends
/// nothing after its hello until our welcome, so the line is all there is;
/// anything after its newline is a protocol violation.
fn recv_line(sock: &Sock) -> io::Result<(String, Vec<OwnedFd>)> {
    let mut line = Vec::new();
    let mut fds = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let space = cmsg_space_for_one_fd() * MAX_FDS;
    let mut cbuf = vec![0u8; space];
    loop {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: msghdr is plain data; its pointers refer to `iov`, `buf`
        // and `cbuf`, which outlive the recvmsg call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: see above; MSG_CMSG_CLOEXEC makes received fds close-on-exec.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: the kernel filled `msg`'s control buffer; CMSG_FIRSTHDR /
        // CMSG_NXTHDR walk only inside msg_controllen, and each SCM_RIGHTS
        // payload holds (cmsg_len - CMSG_LEN(0)) / 4 descriptors now ours.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    let data = libc::CMSG_DATA(c) as *const i32;
                    for i in 0..bytes / 4 {
                        fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 || fds.len() > MAX_HELLO_FDS {
            // `fds` (those received so far) are closed as the error returns.
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("more file descriptors than a hello brings (at most {MAX_HELLO_FDS})"),
            ));
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before the end of the hello",
            ));
        }
        let got = &buf[..n as usize];
        if let Some(end) = got.iter().position(|&b| b == b'\n') {
            if end + 1 != got.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "data after the hello before the welcome",
                ));
            }
            line.extend_from_slice(got);
            break;
        }
        line.extend_from_slice(got);
        if line.len() > MAX_LINE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "hello longer than 64 KiB",
            ));
        }
    }
    let line = String::from_utf8(line)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "hello is not UTF-8"))?;
    Ok((line, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, AsRawFd};
    use std::os::unix::net::UnixListener;
    use wire::channel::{dial, Addr, RingOffer};
    use wire::RegLayout;

    /// A hello as the jitter builds it, from this process (so the pid
    /// checks and /proc/<pid>/fd hold).
    fn hello(tid: i32) -> Hello {
        Hello {
            magic: MAGIC.into(),
            wire_version: WIRE_VERSION,
            jitter_version: "test".into(),
            pid: std::process::id() as i32,
            ppid: 1,
            tid,
            arch: "mipsel".into(),
            big_endian: false,
            guest_bits: 32,
            ring: RingRef::Attached,
            nonce: String::new(),
            proof: String::new(),
            comm: None,
            exe: None,
            regs: RegLayout::default(),
            syscall_names: Default::default(),
            blocks: None,
            image: 0,
        }
    }

    /// The listening side of one test: a Unix socket or TCP.
    enum Listener {
        Unix(UnixListener, std::path::PathBuf),
        Tcp(std::net::TcpListener),
    }

    impl Listener {
        fn unix() -> Listener {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!("cannoli-hs-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(format!("{}.sock", N.fetch_add(1, Ordering::Relaxed)));
            let _ = std::fs::remove_file(&path);
            Listener::Unix(UnixListener::bind(&path).unwrap(), path)
        }

        fn addr(&self) -> Addr {
            match self {
                Listener::Unix(_, p) => Addr::Unix(p.clone()),
                Listener::Tcp(l) => Addr::Tcp(l.local_addr().unwrap().to_string()),
            }
        }

        fn accept(&self) -> Sock {
            match self {
                Listener::Unix(l, _) => Sock::Unix(l.accept().unwrap().0),
                Listener::Tcp(l) => Sock::Tcp(l.accept().unwrap().0),
            }
        }
    }

    /// Serves one handshake on `l` while `qemu` (on another thread) dials
    /// it with the token; returns both outcomes.
    fn serve<R: Send + 'static>(
        l: &Listener,
        tables: &Tables,
        qemu: impl FnOnce(Addr, Token) -> R + Send + 'static,
    ) -> (Result<Accepted, Refusal>, R) {
        let token = Token::generate().unwrap();
        let (addr, t) = (l.addr(), token.clone());
        let q = std::thread::spawn(move || qemu(addr, t));
        let mut s = l.accept();
        let r = challenge(&s, "test").and_then(|o| {
            handshake(
                &mut s,
                "test",
                o,
                &token,
                Duration::from_secs(10),
                false,
                tables,
            )
        });
        let r = r.and_then(|a| a.welcome(&mut s).map(|()| a));
        (r, q.join().unwrap())
    }

    /// This process's open descriptors of `file`.
    fn open_of(file: &std::path::Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == file))
            .count()
    }

    #[test]
    fn a_peer_that_piles_up_descriptors_before_its_hello_is_refused() {
        let l = Listener::unix();
        let tables = Tables::default();
        let Addr::Unix(path) = l.addr() else {
            unreachable!()
        };
        // Held by the "peer" until the end, so that only our copies count.
        let file = std::env::temp_dir().join(format!("cannoli-hs-fds-{}", std::process::id()));
        std::fs::write(&file, b"x").unwrap();
        let files: Vec<std::fs::File> = (0..12)
            .map(|_| std::fs::File::open(&file).unwrap())
            .collect();
        let before = open_of(&file);
        assert_eq!(before, 12);
        let peer = std::thread::spawn(move || {
            let s = std::os::unix::net::UnixStream::connect(path).unwrap();
            let mut line = String::new();
            use std::io::BufRead;
            std::io::BufReader::new(&s).read_line(&mut line).unwrap();
            let mut sock = Sock::Unix(s);
            // Messages of one byte and two descriptors each, no newline:
            // what a hello never is.
            for chunk in files.chunks(2) {
                let fds: Vec<_> = chunk.iter().map(|f| f.as_fd()).collect();
                if sock.send_with_fds(b"{", &fds).is_err() {
                    break; // refused already
                }
            }
            // Hold the connection (and our files) until the server is done.
            let mut buf = [0u8; 1];
            let _ = std::io::Read::read(&mut sock_reader(&sock), &mut buf);
            drop(files);
        });
        let mut s = l.accept();
        let r = challenge(&s, "test").and_then(|o| {
            handshake(
                &mut s,
                "test",
                o,
                &Token::generate().unwrap(),
                Duration::from_secs(10),
                false,
                &tables,
            )
        });
        match r {
            Err(Refusal::Stranger(m)) => {
                assert!(
                    m.contains("more file descriptors than a hello brings"),
                    "{m}"
                )
            }
            Err(Refusal::Refused(m)) => panic!("refused as QEMU: {m}"),
            Ok(_) => panic!("accepted"),
        }
        // Every descriptor it passed is closed again: only the peer's own
        // are open.
        assert_eq!(open_of(&file), before);
        drop(s);
        peer.join().unwrap();
        let _ = std::fs::remove_file(&file);
    }

    fn sock_reader(s: &Sock) -> std::os::unix::net::UnixStream {
        match s {
            Sock::Unix(u) => u.try_clone().unwrap(),
            Sock::Tcp(_) => unreachable!(),
        }
    }

    fn accepted(r: Result<Accepted, Refusal>) -> Accepted {
        match r {
            Ok(a) => a,
            Err(Refusal::Stranger(m) | Refusal::Refused(m)) => panic!("refused: {m}"),
        }
    }

    #[test]
    fn the_table_comes_with_the_hello_and_its_process_shares_it() {
        let l = Listener::unix();
        let tables = Tables::default();
        let table = Arc::new(mempipe::TableWriter::create(0).unwrap());
        table.append(&[0x1000, 0x1004], |_| true).unwrap();
        let dial_with = |table: Arc<mempipe::TableWriter>, tid| {
            move |addr: Addr, token: Token| {
                let ring = mempipe::Producer::create_memfd(4096, 2).unwrap();
                let s = dial(
                    &addr,
                    Ok(&token),
                    0,
                    hello(tid),
                    &RingOffer::Fd(ring.fd().unwrap()),
                    Some(&RingOffer::Fd(table.fd())),
                );
                (s.map(drop), ring)
            }
        };
        let (a, (r, _ring)) = serve(&l, &tables, dial_with(table.clone(), 1));
        r.unwrap();
        let a = accepted(a);
        assert_eq!(a.hello.blocks, Some(RingRef::Attached));
        let reader = a.blocks.expect("a block table");
        assert_eq!(reader.entry(0).unwrap().pcs, [0x1000, 0x1004]);
        // An entry appended later is seen through the same mapping.
        assert_eq!(table.append(&[0x2000], |i| i == 0), Some(1));
        assert_eq!(reader.published(), 2);
        assert_eq!(reader.entry(1).unwrap().pcs, [0x2000]);
        // Another thread of the process: the same reader.
        let (b, (r, _ring2)) = serve(&l, &tables, dial_with(table.clone(), 2));
        r.unwrap();
        assert!(Arc::ptr_eq(&reader, accepted(b).blocks.as_ref().unwrap()));
        // The process exec'd (same pid, a new table): a new reader.
        let other = Arc::new(mempipe::TableWriter::create(0).unwrap());
        let (c, (r, _ring3)) = serve(&l, &tables, dial_with(other.clone(), 3));
        r.unwrap();
        let c = accepted(c).blocks.unwrap();
        assert!(!Arc::ptr_eq(&reader, &c));
        assert_eq!(c.published(), 0);
        assert_eq!(tables.len(), 1);
        // Without a table: none.
        let (d, r) = serve(&l, &tables, |addr, token| {
            let ring = mempipe::Producer::create_memfd(4096, 2).unwrap();
            let o = RingOffer::Fd(ring.fd().unwrap());
            dial(&addr, Ok(&token), 0, hello(4), &o, None).map(drop)
        });
        r.unwrap();
        assert!(accepted(d).blocks.is_none());
    }

    #[test]
    fn over_tcp_the_table_is_named_through_proc() {
        let l = Listener::Tcp(std::net::TcpListener::bind("127.0.0.1:0").unwrap());
        let tables = Tables::default();
        let table = Arc::new(mempipe::TableWriter::create(0).unwrap());
        let t = table.clone();
        let (a, (r, _ring)) = serve(&l, &tables, move |addr, token| {
            let ring = mempipe::Producer::create_memfd(4096, 2).unwrap();
            let s = dial(
                &addr,
                Ok(&token),
                0,
                hello(1),
                &RingOffer::ProcFd(ring.fd().unwrap().as_raw_fd()),
                Some(&RingOffer::ProcFd(t.fd().as_raw_fd())),
            );
            (s.map(drop), ring)
        });
        r.unwrap();
        let a = accepted(a);
        assert!(matches!(a.hello.blocks, Some(RingRef::ProcFd(_))));
        table.append(&[7], |_| true).unwrap();
        assert_eq!(a.blocks.unwrap().entry(0).unwrap().pcs, [7]);
    }

    #[test]
    fn a_bad_table_refuses_the_stream() {
        let l = Listener::unix();
        let tables = Tables::default();
        // An unsealed memfd in the table's place.
        let (a, (r, _ring)) = serve(&l, &tables, |addr, token| {
            let ring = mempipe::Producer::create_memfd(4096, 2).unwrap();
            let fake = std::fs::File::open("/proc/self/exe").unwrap();
            let s = dial(
                &addr,
                Ok(&token),
                0,
                hello(1),
                &RingOffer::Fd(ring.fd().unwrap()),
                Some(&RingOffer::Fd(fake.as_fd())),
            );
            (s.map(drop), ring)
        });
        let e = r.unwrap_err().to_string();
        assert!(e.contains("cannot open its block table"), "{e}");
        assert!(e.contains("not sealed"), "{e}");
        assert!(matches!(a, Err(Refusal::Refused(_))));
        assert_eq!(tables.len(), 0);
    }
}
