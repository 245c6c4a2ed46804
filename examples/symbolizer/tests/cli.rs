//! Runs the `symbolizer` binary against a fake QEMU side (a real mempipe
//! ring and the handshake over TCP) and checks what it prints.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cannoli::wire::channel::{dial, Addr, RingOffer};
use cannoli::wire::{mem_tag, Goodbye, Hello, RingRef, Token, MAGIC, WIRE_VERSION};
use mempipe::Producer;

const NM: &str = "\
00400000 T _start
00400100 00000040 T main
00400200 T helper
00410000 00000010 D table
";

fn nm_file(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("symbolizer-test-{}-{name}.txt", std::process::id()));
    std::fs::write(&p, NM).unwrap();
    p
}

/// The run's secret the tests give the symbolizer (and present as QEMU).
fn token() -> &'static Token {
    static T: std::sync::OnceLock<Token> = std::sync::OnceLock::new();
    T.get_or_init(|| Token::generate().unwrap())
}

/// Starts the client; returns it and the address it listens on.
#[allow(clippy::zombie_processes)] // the callers wait for it
fn start(args: &[&str]) -> (Child, String, BufReader<std::process::ChildStderr>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_symbolizer"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env("CANNOLI_TOKEN", token().to_hex())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "symbolizer exited before listening"
        );
        if let Some(rest) = line.strip_prefix("symbolizer: listening on ") {
            let addr = rest.split(';').next().unwrap().to_string();
            return (child, addr, err);
        }
    }
}

fn top(t: u8) -> u64 {
    (t as u64) << 56
}

/// QEMU's side of one thread: streams `chunks` then says goodbye.
fn fake_qemu(addr: &str, tid: i32, chunks: &[Vec<u64>]) {
    let mut p = Producer::create_memfd(4096, 4).unwrap();
    // Over TCP the client opens the ring as /proc/<pid>/fd/<n>: the pid
    // must be ours.
    let hello = Hello {
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
        comm: Some("prog".into()),
        exe: None,
        regs: Default::default(),
        syscall_names: Default::default(),
        blocks: None,
        image: 0,
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&p.fd().unwrap());
    let mut s = dial(
        &Addr::parse(addr),
        Ok(token()),
        0,
        hello,
        &RingOffer::ProcFd(fd),
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    p.release_fd();
    for words in chunks {
        let buf = match p.acquire_slice() {
            Ok(b) => b,
            Err(_) => break,
        };
        for (i, x) in words.iter().enumerate() {
            buf[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
        }
        p.publish(words.len() * 8).unwrap();
    }
    p.close();
    let g = Goodbye {
        chunks: p.published(),
        lost_events: 0,
        exec: false,
    };
    s.write_all(format!("{}\n", serde_json::to_string(&g).unwrap()).as_bytes())
        .unwrap();
}

fn finish(mut child: Child, mut err: BufReader<std::process::ChildStderr>) -> (String, String) {
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "symbolizer failed: {status}\n{rest}");
    (out, rest)
}

fn sample() -> Vec<Vec<u64>> {
    vec![
        vec![0x400000, 0x400004, 0x400100],
        vec![
            0x400104,
            top(mem_tag(false, 2)) | 0x400108,
            0x410004,
            0xffff_ffff_0000_002a,
            top(mem_tag(true, 0)) | 0x40010c,
            0x7ffe_0010,
            0x1ff,
            0x400200,
            0x400300, // past main's size, after helper (unsized): helper
        ],
        vec![0x3f0000],
    ]
}

#[test]
fn prints_symbolized_trace() {
    let nm = nm_file("plain");
    let (child, addr, err) = start(&["--symbols", nm.to_str().unwrap(), "--color", "never"]);
    fake_qemu(&addr, 77, &sample());
    let (out, err) = finish(child, err);
    let _ = std::fs::remove_file(&nm);
    let want = format!("== pid {} tid 77 ==\n", std::process::id())
        + "  0x00400000 _start+0x0
  0x00400004 _start+0x4
  0x00400100 main+0x0
  0x00400104 main+0x4
  0x00400108 main+0x8   R4 [0x00410004 table+0x4] = 0x2a
  0x0040010c main+0xc   W1 [0x7ffe0010] = 0xff
  0x00400200 helper+0x0
  0x00400300 helper+0x100
  0x003f0000
";
    assert_eq!(out, want, "stderr:\n{err}");
    assert!(
        err.contains("symbolizer: 9 events in 3 chunks from 1 guest thread,"),
        "{err}"
    );
    assert!(err.contains("4 symbols from"), "{err}");
}

#[test]
fn color_limit_and_no_mem() {
    let nm = nm_file("limit");
    let (child, addr, err) = start(&[
        "--symbols",
        nm.to_str().unwrap(),
        "--color",
        "always",
        "--no-mem",
        "--limit",
        "3",
    ]);
    fake_qemu(&addr, 78, &sample());
    let (out, err) = finish(child, err);
    let _ = std::fs::remove_file(&nm);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[1].contains("\x1b[36m_start+0x0\x1b[0m"), "{out:?}");
    assert!(!out.contains("R4"));
    assert!(err.contains("printed 3 lines"), "{err}");
}

#[test]
fn closed_stdout_is_quiet_and_consumption_goes_on() {
    let (mut child, addr, err) = start(&["--color", "never"]);
    // Close our end of stdout at once: every write fails with EPIPE.
    drop(child.stdout.take());
    let chunks: Vec<Vec<u64>> = (0..200u64)
        .map(|c| (0..500).map(|i| 0x400000 + 4 * (c * 500 + i)).collect())
        .collect();
    fake_qemu(&addr, 79, &chunks);
    let mut rest = String::new();
    let mut err = err;
    err.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}\n{rest}");
    assert!(!rest.contains("panicked"), "{rest}");
    assert!(!rest.contains("failed"), "{rest}");
    assert!(rest.contains("100000 events in 200 chunks"), "{rest}");
}

#[test]
fn busy_address_is_one_clear_line() {
    let (child, addr, err) = start(&[]);
    let out = Command::new(env!("CARGO_BIN_EXE_symbolizer"))
        .args(["--listen", &addr])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("address already in use") && e.contains(&addr),
        "{e}"
    );
    // Let the first one finish.
    fake_qemu(&addr, 80, &[vec![0x10]]);
    let _ = finish(child, err);
    std::thread::sleep(Duration::from_millis(1));
}

/// A C++ symbol is shown as binutils' `c++filt` shows it, and as the
/// table has it with `--no-demangle`.
#[test]
fn cxx_symbols_are_shown_as_cxxfilt_shows_them() {
    const MANGLED: &str = "_ZN3geo5scaleEli";
    let o = Command::new("c++filt").arg(MANGLED).output().unwrap();
    assert!(o.status.success(), "c++filt");
    let shown = String::from_utf8(o.stdout).unwrap().trim().to_string();
    assert_eq!(shown, "geo::scale(long, int)");
    let nm = std::env::temp_dir().join(format!("symbolizer-test-{}-cxx.txt", std::process::id()));
    std::fs::write(&nm, format!("00400100 00000040 T {MANGLED}\n")).unwrap();
    let mut outs = Vec::new();
    for opts in [&[][..], &["--no-demangle"][..]] {
        let mut args = vec!["--symbols", nm.to_str().unwrap(), "--color", "never"];
        args.extend_from_slice(opts);
        let (child, addr, err) = start(&args);
        fake_qemu(&addr, 79, &[vec![0x400100, 0x400104]]);
        outs.push(finish(child, err).0);
    }
    let _ = std::fs::remove_file(&nm);
    assert!(outs[0].contains(&format!(" {shown}+0x4\n")), "{}", outs[0]);
    assert!(
        outs[1].contains(&format!(" {MANGLED}+0x4\n")),
        "{}",
        outs[1]
    );
}
