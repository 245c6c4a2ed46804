// SPDX-License-Identifier: GPL-2.0-or-later
//! Unit tests of the control channel: addresses, tokens, the handshake
//! over real socket pairs.
use super::*;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;

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
