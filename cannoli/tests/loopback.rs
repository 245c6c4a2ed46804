//! End-to-end tests of the client over a Unix socket (TCP for some) and a
//! real mempipe ring, with a fake QEMU side written here (it speaks the
//! handshake through `wire::channel::dial`, as the jitter does).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::time::Duration;

use cannoli::{Cannoli, ClientInfo, Error, Server, Signal, Stats, Syscall};
use mempipe::Producer;
use wire::channel::{dial, Addr, RingOffer, Sock};
use wire::{tag, Goodbye, Hello, RegLayout, RingRef, Token, MAGIC, WIRE_VERSION};

/// Where a fake QEMU finds the server, and the secret it presents.
type Peer = (Addr, Token);

fn peer(server: &Server) -> Peer {
    (server.addr().clone(), server.token().clone())
}

/// A hello as the jitter builds it (`dial` fills in nonce, proof, ring).
fn fake_hello(pid: i32, tid: i32, wire_version: u32, regs: RegLayout) -> Hello {
    Hello {
        magic: MAGIC.into(),
        wire_version,
        jitter_version: "9.9.9-test".into(),
        pid,
        ppid: 1,
        tid,
        arch: "mipsel".into(),
        big_endian: false,
        guest_bits: 32,
        ring: RingRef::Attached,
        nonce: String::new(),
        proof: String::new(),
        comm: Some("fake".into()),
        exe: Some("/bin/fake".into()),
        regs,
        syscall_names: fake_syscall_names(),
        blocks: None,
        image: 0,
    }
}

/// Connects a fake QEMU thread: the handshake, handing over `ring`.
fn connect_fake(peer: &Peer, hello: Hello, ring: &Producer) -> Result<Sock, String> {
    dial(
        &peer.0,
        Ok(&peer.1),
        0,
        hello,
        &RingOffer::Fd(ring.fd().expect("the ring's fd")),
        None,
    )
    .map_err(|e| e.to_string())
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Exec(u64),
    Read(u64, u64, u64, u8),
    Write(u64, u64, u64, u8),
    /// pc, branch (None: a regs event), sp, a0
    Regs(u64, Option<bool>, u64, u64),
    Syscall(u64, Option<String>, Option<i64>, [u64; 6], Vec<u8>, u64),
    Mmap(u64, u64, bool, String, u64, [bool; 3]),
    Munmap(u64, u64),
    Mprotect(u64, u64, [bool; 3]),
    Signal(Signal),
}

/// The register layout and syscall names the fake QEMU side announces.
fn fake_regs() -> RegLayout {
    RegLayout {
        count: 32,
        bytes: 4,
        names: vec![],
    }
}

fn fake_syscall_names() -> std::collections::BTreeMap<u64, String> {
    [(4004, "write"), (4090, "mmap"), (4246, "exit_group")]
        .into_iter()
        .map(|(n, s)| (n, s.to_string()))
        .collect()
}

type Traces = HashMap<(i32, i32), Vec<Ev>>;

/// Finished threads' traces, keyed by (pid, tid). Tests run at once share
/// it, so each test plays pids no other test uses.
static RESULTS: Mutex<Option<Traces>> = Mutex::new(None);
/// init_pid calls, keyed by pid.
static PID_INITS: Mutex<Option<HashMap<i32, u32>>> = Mutex::new(None);

fn take_result(pid: i32, tid: i32) -> Option<Vec<Ev>> {
    RESULTS
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .remove(&(pid, tid))
}

fn count_pid_init(pid: i32) {
    *PID_INITS
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .entry(pid)
        .or_default() += 1;
}

fn pid_inits(pid: i32) -> u32 {
    PID_INITS
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .get(&pid)
        .copied()
        .unwrap_or(0)
}

struct PidCtx {
    pid: i32,
    threads_seen: AtomicU64,
    ci: ClientInfo,
}

struct Rec {
    pid: i32,
    tid: i32,
    out: Vec<Ev>,
}

impl Drop for Rec {
    fn drop(&mut self) {
        RESULTS
            .lock()
            .unwrap()
            .get_or_insert_with(HashMap::new)
            .insert((self.pid, self.tid), std::mem::take(&mut self.out));
    }
}

/// Makes chunks finish out of order: some events take a while to "analyse".
fn jitter_work(pc: u64) {
    if pc % 97 == 0 {
        for _ in 0..((pc * 2654435761) % 20_000) {
            std::hint::spin_loop();
        }
    }
}

impl Cannoli for Rec {
    type Trace = Ev;
    type TidContext = i32;
    type PidContext = PidCtx;

    fn init_pid(ci: &ClientInfo) -> Arc<PidCtx> {
        // The TCP tests play this process's own pid, which could be one a
        // fake plays elsewhere: only fakes' contexts are counted.
        if ci.pid != std::process::id() as i32 {
            count_pid_init(ci.pid);
        }
        Arc::new(PidCtx {
            pid: ci.pid,
            threads_seen: AtomicU64::new(0),
            ci: ci.clone(),
        })
    }

    fn init_tid(pid: &PidCtx, ci: &ClientInfo) -> (Self, i32) {
        assert_eq!(pid.pid, ci.pid);
        assert_eq!(ci.arch, "mipsel");
        assert_eq!(ci.guest_bits, 32);
        assert_eq!(ci.exe.as_deref(), Some("/bin/fake"));
        assert_eq!((ci.regs.count, ci.regs.bytes), (32, 4));
        assert_eq!(ci.regs.names[29], "sp", "names filled in from the arch");
        assert_eq!(ci.syscall_name(4004), Some("write"));
        pid.threads_seen.fetch_add(1, Ordering::Relaxed);
        (
            Rec {
                pid: ci.pid,
                tid: ci.tid,
                out: Vec::new(),
            },
            ci.tid,
        )
    }

    fn exec(_: &PidCtx, _: &i32, pc: u64, t: &mut Vec<Ev>) {
        jitter_work(pc);
        t.push(Ev::Exec(pc));
    }

    fn read(_: &PidCtx, _: &i32, pc: u64, a: u64, v: u64, s: u8, t: &mut Vec<Ev>) {
        t.push(Ev::Read(pc, a, v, s));
    }

    fn write(_: &PidCtx, _: &i32, pc: u64, a: u64, v: u64, s: u8, t: &mut Vec<Ev>) {
        t.push(Ev::Write(pc, a, v, s));
    }

    fn regs(pid: &PidCtx, _: &i32, pc: u64, regs: &[u8], t: &mut Vec<Ev>) {
        let (sp, a0) = (
            pid.ci.reg(regs, "sp").unwrap(),
            pid.ci.reg(regs, "a0").unwrap(),
        );
        t.push(Ev::Regs(pc, None, sp, a0));
    }

    fn branch(pid: &PidCtx, _: &i32, pc: u64, b: bool, regs: &[u8], t: &mut Vec<Ev>) {
        let (sp, a0) = (
            pid.ci.reg(regs, "sp").unwrap(),
            pid.ci.reg(regs, "a0").unwrap(),
        );
        t.push(Ev::Regs(pc, Some(b), sp, a0));
    }

    fn syscall(_: &PidCtx, _: &i32, sc: &Syscall<'_>, t: &mut Vec<Ev>) {
        t.push(Ev::Syscall(
            sc.num,
            sc.name.map(str::to_string),
            sc.ret,
            sc.args,
            sc.data.to_vec(),
            sc.data_total,
        ));
    }

    fn mmap(
        _: &PidCtx,
        _: &i32,
        base: u64,
        len: u64,
        anon: bool,
        r: bool,
        w: bool,
        x: bool,
        path: &str,
        offset: u64,
        t: &mut Vec<Ev>,
    ) {
        t.push(Ev::Mmap(
            base,
            len,
            anon,
            path.to_string(),
            offset,
            [r, w, x],
        ));
    }

    fn munmap(_: &PidCtx, _: &i32, base: u64, len: u64, t: &mut Vec<Ev>) {
        t.push(Ev::Munmap(base, len));
    }

    fn mprotect(
        _: &PidCtx,
        _: &i32,
        base: u64,
        len: u64,
        r: bool,
        w: bool,
        x: bool,
        t: &mut Vec<Ev>,
    ) {
        t.push(Ev::Mprotect(base, len, [r, w, x]));
    }

    fn signal(_: &PidCtx, _: &i32, sig: &Signal, t: &mut Vec<Ev>) {
        t.push(Ev::Signal(*sig));
    }

    fn trace(&mut self, pid: &PidCtx, tid: &i32, trace: &[Ev]) {
        assert_eq!(pid.pid, self.pid);
        assert_eq!(*tid, self.tid);
        self.out.extend_from_slice(trace);
    }
}

/// A stream of `chunks` chunks of events for one thread: mostly exec, with a
/// load or store every few instructions (with junk in the upper bits of the
/// address and value, which the client must mask off). Returns the chunks'
/// words and the events the tool must see.
fn make_stream(chunks: usize, chunk_size: usize, salt: u64) -> (Vec<Vec<u64>>, Vec<Ev>) {
    let per_chunk = chunk_size / 8;
    let mut out = Vec::new();
    let mut want = Vec::new();
    let mut pc = 0x0040_0000 + salt * 0x10_0000;
    for c in 0..chunks {
        // Vary the fill so some chunks are partial.
        let limit = if c % 5 == 4 { per_chunk / 3 } else { per_chunk };
        let mut words = Vec::with_capacity(limit);
        while words.len() + 3 <= limit {
            pc += 4;
            if pc % 40 == 0 {
                let store = pc % 80 == 0;
                let lg = ((pc / 40) % 4) as u8;
                words.push(((wire::mem_tag(store, lg) as u64) << 56) | pc);
                words.push(0xabcd_0000_0000_0000 | (0x7ffe_0000 + pc % 4096));
                words.push(0x0102_0304_0506_0708 ^ pc);
                let v = (0x0102_0304_0506_0708 ^ pc)
                    & [0xff, 0xffff, 0xffff_ffff, u64::MAX][lg as usize];
                let a = 0x7ffe_0000 + pc % 4096;
                want.push(if store {
                    Ev::Write(pc, a, v, 1 << lg)
                } else {
                    Ev::Read(pc, a, v, 1 << lg)
                });
            } else {
                words.push(pc);
                want.push(Ev::Exec(pc));
            }
        }
        out.push(words);
    }
    (out, want)
}

enum Ending {
    /// Close the ring, say goodbye with this lost-events count.
    Goodbye { lost: u64 },
    /// Just drop the socket, as a crashed QEMU would (ring left open).
    Crash,
    /// What a guest that forges QEMU's control lines could send: these
    /// lines (`{n}` is replaced by the chunks published), the ring closed
    /// first or not.
    Forged {
        close: bool,
        lines: &'static [&'static str],
    },
}

struct Fake {
    pid: i32,
    tid: i32,
    wire_version: u32,
    chunk_size: usize,
    chunk_count: usize,
    /// Waited on after the welcome, before streaming.
    barrier: Option<Arc<Barrier>>,
    /// The hello's image of the pid (traced execs before it).
    image: u32,
}

impl Fake {
    fn new(pid: i32, tid: i32) -> Fake {
        Fake {
            pid,
            tid,
            wire_version: WIRE_VERSION,
            chunk_size: 4096,
            chunk_count: 4,
            barrier: None,
            image: 0,
        }
    }

    /// Plays QEMU's side of one thread. Returns the welcome's error, if any.
    fn play(&self, addr: Peer, chunks: &[Vec<u64>], ending: Ending) -> Option<String> {
        let mut p = Producer::create_memfd(self.chunk_size, self.chunk_count).expect("create ring");
        let mut hello = fake_hello(self.pid, self.tid, self.wire_version, fake_regs());
        hello.image = self.image;
        let mut s = match connect_fake(&addr, hello, &p) {
            Ok(s) => s,
            Err(e) => return Some(e),
        };
        p.release_fd();
        if let Some(b) = &self.barrier {
            b.wait();
        }
        for words in chunks {
            let buf = p.acquire_slice().expect("acquire");
            for (i, wd) in words.iter().enumerate() {
                buf[i * 8..i * 8 + 8].copy_from_slice(&wd.to_le_bytes());
            }
            p.publish(words.len() * 8).expect("publish");
        }
        match ending {
            Ending::Goodbye { lost } => {
                p.close();
                let g = Goodbye {
                    chunks: p.published(),
                    lost_events: lost,
                    exec: false,
                };
                let mut line = serde_json::to_string(&g).unwrap();
                line.push('\n');
                s.write_all(line.as_bytes()).unwrap();
            }
            Ending::Crash => {
                drop(s);
                // A dead QEMU never closes its ring: keep it open.
                std::mem::forget(p);
            }
            Ending::Forged { close, lines } => {
                if close {
                    p.close();
                }
                let n = p.published().to_string();
                for l in lines {
                    s.write_all(l.replace("{n}", &n).as_bytes()).unwrap();
                    s.write_all(b"\n").unwrap();
                }
                drop(s);
                // An unclosed ring stays so (dropping it would close it).
                std::mem::forget(p);
            }
        }
        None
    }
}

/// Runs `server` with `threads` workers on another thread; fails the test
/// instead of hanging forever.
fn run_with_timeout(server: Server, threads: usize) -> Stats {
    run_with_timeout_as::<Rec>(server, threads)
}

/// [`run_with_timeout`] with the tool `T`.
fn run_with_timeout_as<T: Cannoli>(server: Server, threads: usize) -> Stats {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(server.run::<T>(threads));
    });
    rx.recv_timeout(Duration::from_secs(300))
        .expect("Server::run did not return within 300 s (a hang)")
        .expect("Server::run failed")
}

/// A server on a fresh Unix socket, trusting the fake pids of the hellos
/// (the fakes are threads of this test process).
fn bind() -> Server {
    use std::sync::atomic::AtomicU32;
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!("cannoli-loopback-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.sock", N.fetch_add(1, Ordering::Relaxed)));
    Server::bind(&format!("unix:{}", path.display()))
        .expect("bind")
        .trust_hello_pids()
}

#[test]
fn events_arrive_in_order_with_1_2_4_threads() {
    for (i, threads) in [1usize, 2, 4].into_iter().enumerate() {
        let (pid, tid) = (1000 + i as i32, 1000 + i as i32);
        let (chunks, want) = make_stream(300, 4096, i as u64);
        let bytes: u64 = chunks.iter().map(|c| c.len() as u64 * 8).sum();
        let server = bind();
        let addr = peer(&server);
        let fake = std::thread::spawn(move || {
            Fake::new(pid, tid).play(addr, &chunks, Ending::Goodbye { lost: 0 })
        });
        let stats = run_with_timeout(server, threads);
        assert_eq!(fake.join().unwrap(), None);

        let got = take_result(pid, tid).expect("tool value dropped at the end of the stream");
        assert_eq!(got.len(), want.len(), "threads={threads}");
        assert!(
            got == want,
            "threads={threads}: events out of order or wrong"
        );
        assert_eq!(stats.connections, 1);
        assert_eq!(stats.events, want.len() as u64);
        assert_eq!(stats.chunks, 300);
        assert_eq!(stats.bytes, bytes);
        assert_eq!(stats.lost_events, 0);
        assert_eq!(stats.incomplete_streams, 0);
        assert_eq!(pid_inits(pid), 1);
    }
}

#[test]
fn concurrent_threads_and_processes() {
    let server = bind();
    let addr = peer(&server);
    let pid = 2000;
    let barrier = Arc::new(Barrier::new(3));
    let mut fakes = Vec::new();
    let mut wants = Vec::new();
    // Two threads of pid 2000 and one of pid 2001, all connected before any
    // of them streams, so their connections overlap.
    for (k, (p, t)) in [(pid, 2000), (pid, 2002), (pid + 1, 2001)]
        .into_iter()
        .enumerate()
    {
        let (chunks, want) = make_stream(60 + 10 * k, 4096, 10 + k as u64);
        wants.push(((p, t), want));
        let barrier = barrier.clone();
        let addr = addr.clone();
        fakes.push(std::thread::spawn(move || {
            let mut f = Fake::new(p, t);
            f.chunk_count = 2;
            f.barrier = Some(barrier);
            f.play(addr, &chunks, Ending::Goodbye { lost: 0 })
        }));
    }
    let stats = run_with_timeout(server, 2);
    for f in fakes {
        assert_eq!(f.join().unwrap(), None);
    }
    assert_eq!(stats.connections, 3);
    let mut total = 0;
    for ((p, t), want) in wants {
        total += want.len() as u64;
        assert!(take_result(p, t).unwrap() == want, "pid {p} tid {t}");
    }
    assert_eq!(stats.events, total);
    assert_eq!(stats.chunks, 60 + 70 + 80);
    assert_eq!(pid_inits(pid), 1);
    assert_eq!(pid_inits(pid + 1), 1);
}

/// Two streams of `pid` overlap: thread A (tid `pid`, image 0) says hello
/// and holds its stream open until thread B (tid `pid + 1`, image
/// `b_image`) has played a whole stream; A then reports one instruction
/// at 0x1234 and says goodbye (`a_execs`: its goodbye says an exec
/// follows). Checks both threads' events.
fn overlapping_streams(pid: i32, b_image: u32, a_execs: bool) {
    let server = bind();
    let addr = peer(&server);
    let addr2 = addr.clone();
    let (b_done_tx, b_done_rx) = mpsc::channel::<()>();
    let (a_welcomed_tx, a_welcomed_rx) = mpsc::channel::<()>();
    let a = std::thread::spawn(move || {
        let mut p = Producer::create_memfd(4096, 2).unwrap();
        let mut s = connect_fake(&addr, fake_hello(pid, pid, WIRE_VERSION, fake_regs()), &p)
            .expect("welcomed");
        a_welcomed_tx.send(()).unwrap();
        b_done_rx.recv().unwrap();
        let buf = p.acquire_slice().unwrap();
        buf[..8].copy_from_slice(&0x1234u64.to_le_bytes());
        p.publish(8).unwrap();
        p.close();
        let bye = format!("{{\"chunks\":1,\"lost_events\":0,\"exec\":{a_execs}}}\n");
        s.write_all(bye.as_bytes()).unwrap();
    });
    let (chunks, want) = make_stream(5, 4096, 7);
    let b = std::thread::spawn(move || {
        // B connects only once A holds its welcome, and so its context: a
        // fixed sleep let a loaded machine take B first, end it and drop
        // the context before A came.
        a_welcomed_rx.recv().unwrap();
        let mut f = Fake::new(pid, pid + 1);
        f.image = b_image;
        let r = f.play(addr2, &chunks, Ending::Goodbye { lost: 0 });
        b_done_tx.send(()).unwrap();
        r
    });
    let stats = run_with_timeout(server, 2);
    a.join().unwrap();
    assert_eq!(b.join().unwrap(), None);
    assert_eq!(stats.connections, 2);
    assert_eq!(take_result(pid, pid).unwrap(), vec![Ev::Exec(0x1234)]);
    assert!(take_result(pid, pid + 1).unwrap() == want);
}

#[test]
fn overlapping_threads_get_one_pid_context() {
    overlapping_streams(2500, 0, false);
    assert_eq!(pid_inits(2500), 1);
}

/// A program a traced exec started connects under its pid while the
/// image before it still streams (the client may be far behind it): it is
/// another process image, with a context of its own, not one more thread
/// of the first. (B's own tid only keeps the two results apart here: the
/// key is the image.)
#[test]
fn an_exec_successor_gets_a_pid_context_of_its_own() {
    overlapping_streams(2600, 1, true);
    assert_eq!(pid_inits(2600), 2, "one context per image");
}

/// Pids whose fake QEMU thread got its welcome.
static WELCOMED: Mutex<Vec<i32>> = Mutex::new(Vec::new());
/// Per pid: whether its context was taken after its thread was welcomed.
static LATE: Mutex<Vec<(i32, bool)>> = Mutex::new(Vec::new());

/// A tool whose process context notes whether its thread was already
/// welcomed (and so may have run, ended and been joined).
struct Gap;

impl Cannoli for Gap {
    type Trace = ();
    type TidContext = ();
    type PidContext = ();
    fn init_pid(ci: &ClientInfo) -> Arc<()> {
        // Long enough for a welcome already sent to reach the fake.
        std::thread::sleep(Duration::from_millis(300));
        let late = WELCOMED.lock().unwrap().contains(&ci.pid);
        LATE.lock().unwrap().push((ci.pid, late));
        Arc::new(())
    }
    fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
        (Gap, ())
    }
    fn trace(&mut self, _: &(), _: &(), _: &[()]) {}
}

/// A thread's process context is taken before its welcome lets it run: a
/// thread welcomed first could run, end and be joined, and its process's
/// last other stream end, before it took the context, which a new one
/// would then replace (a tool's process state, such as where a library
/// was placed, lost).
#[test]
fn the_process_context_is_taken_before_the_welcome() {
    let server = bind();
    let addr = peer(&server);
    let pid = 2700;
    let q = std::thread::spawn(move || {
        let mut p = Producer::create_memfd(4096, 2).unwrap();
        let mut s = connect_fake(&addr, fake_hello(pid, pid, WIRE_VERSION, fake_regs()), &p)
            .expect("welcomed");
        WELCOMED.lock().unwrap().push(pid);
        p.close();
        s.write_all(b"{\"chunks\":0,\"lost_events\":0}\n").unwrap();
    });
    let stats = run_with_timeout_as::<Gap>(server, 1);
    q.join().unwrap();
    assert_eq!(stats.connections, 1);
    assert_eq!(*LATE.lock().unwrap(), vec![(pid, false)]);
}

#[test]
fn crashed_qemu_is_an_incomplete_stream() {
    let server = bind();
    let addr = peer(&server);
    let (pid, tid) = (3000, 3000);
    let (chunks, want) = make_stream(6, 4096, 3);
    let n_events: usize = {
        // Events in the 6 chunks: all of `want`.
        want.len()
    };
    let fake = std::thread::spawn(move || Fake::new(pid, tid).play(addr, &chunks, Ending::Crash));
    let stats = run_with_timeout(server, 2);
    assert_eq!(fake.join().unwrap(), None);
    assert_eq!(stats.incomplete_streams, 1);
    assert_eq!(stats.chunks, 6);
    assert_eq!(stats.events, n_events as u64);
    assert!(take_result(pid, tid).unwrap() == want);
}

#[test]
fn goodbye_lost_events_and_malformed_chunks_are_counted() {
    let server = bind();
    let addr = peer(&server);
    let (pid, tid) = (4000, 4000);
    let bad = vec![
        vec![0x100, 0x104],
        // Unknown (non-framed) tag 0x05 after one good event; 3 words skipped.
        vec![0x108, (0x07u64 << 56) | 0x10c, 0x110, 0x114],
        // A load cut short.
        vec![0x118, ((tag::LOAD as u64) << 56) | 0x11c, 0x1000],
        vec![0x120],
    ];
    let fake = std::thread::spawn(move || {
        Fake::new(pid, tid).play(addr, &bad, Ending::Goodbye { lost: 7 })
    });
    let stats = run_with_timeout(server, 2);
    assert_eq!(fake.join().unwrap(), None);
    assert_eq!(
        take_result(pid, tid).unwrap(),
        vec![
            Ev::Exec(0x100),
            Ev::Exec(0x104),
            Ev::Exec(0x108),
            Ev::Exec(0x118),
            Ev::Exec(0x120)
        ]
    );
    assert_eq!(stats.events, 5);
    assert_eq!(stats.chunks, 4);
    // 7 from the goodbye, 3 words of chunk 1, 2 words of chunk 2.
    assert_eq!(stats.lost_events, 7 + 3 + 2);
    assert_eq!(stats.incomplete_streams, 0);
}

#[test]
fn what_a_guest_could_forge_on_its_control_socket_is_an_incomplete_stream() {
    // Each forgery against an honest ending: the events all arrive, but
    // the stream is not called complete.
    const GOODBYE: &str = r#"{"chunks":{n},"lost_events":0}"#;
    let cases: [(&str, bool, &'static [&'static str]); 6] = [
        ("honest", true, &[GOODBYE]),
        ("twice", true, &[GOODBYE, GOODBYE]),
        (
            "a line after it",
            true,
            &[GOODBYE, r#"{"expect_pid":77777}"#],
        ),
        ("before the ring is closed", false, &[GOODBYE]),
        ("another count", true, &[r#"{"chunks":99,"lost_events":0}"#]),
        (
            "a second one with another count",
            true,
            &[GOODBYE, r#"{"chunks":99,"lost_events":0}"#],
        ),
    ];
    for (i, (what, close, lines)) in cases.into_iter().enumerate() {
        let server = bind();
        let addr = peer(&server);
        let (pid, tid) = (9100 + i as i32, 9100 + i as i32);
        let (chunks, want) = make_stream(4, 4096, 17 + i as u64);
        let fake = std::thread::spawn(move || {
            Fake::new(pid, tid).play(addr, &chunks, Ending::Forged { close, lines })
        });
        let stats = run_with_timeout(server, 2);
        assert_eq!(fake.join().unwrap(), None, "{what}");
        assert_eq!(stats.chunks, 4, "{what}");
        assert!(take_result(pid, tid).unwrap() == want, "{what}");
        let honest = what == "honest";
        assert_eq!(
            (stats.is_complete(), stats.incomplete_streams),
            (honest, u64::from(!honest)),
            "{what}: {}",
            stats.loss_summary()
        );
    }
}

/// Little-endian words of `b`, zero-padded.
fn pad(b: &[u8]) -> Vec<u64> {
    b.chunks(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect()
}

/// A stream with every framed event kind (and one of a kind this client
/// does not know) between exec events, as the jitter writes them.
fn make_framed_stream() -> (Vec<Vec<u64>>, Vec<Ev>) {
    let mut chunks = Vec::new();
    let mut want = Vec::new();
    let mut pc = 0x0040_0000u64;
    for c in 0..40u64 {
        let mut w = Vec::new();
        for _ in 0..20 {
            pc += 4;
            w.push(pc);
            want.push(Ev::Exec(pc));
        }
        // Registers: sp = 0x7fff0000 + c, a0 with junk above 32 bits.
        let mut regs = [0u64; 32];
        regs[29] = 0x7fff_0000 + c;
        regs[4] = 0xdead_0000_0000_0000 | c;
        let kind = (c % 3) as u32;
        w.extend([wire::frame(tag::REGS, kind, 34), pc]);
        w.extend(regs);
        want.push(Ev::Regs(
            pc,
            [None, Some(false), Some(true)][kind as usize],
            0x7fff_0000 + c,
            c,
        ));
        // write(1, buf, n) = n with the bytes, junk above 32 bits in an arg.
        let data = format!("line {c}\n").into_bytes();
        let n = data.len() as u64;
        w.extend([
            wire::frame(tag::SYSCALL, 1, wire::framed_len(11, data.len()) as u32),
            4004,
            n,
            1,
            0xffff_ffff_0041_0000,
            n,
            0,
            0,
            0,
            n,
            n,
        ]);
        w.extend(pad(&data));
        want.push(Ev::Syscall(
            4004,
            Some("write".into()),
            Some(n as i64),
            [1, 0x0041_0000, n, 0, 0, 0],
            data,
            n,
        ));
        match c % 5 {
            0 => {
                let path = b"/lib/ld.so.1";
                w.extend([
                    wire::frame(tag::MMAP, 1 | 4, wire::framed_len(5, path.len()) as u32),
                    0x7700_0000,
                    0x2000,
                    0x1000,
                    path.len() as u64,
                ]);
                w.extend(pad(path));
                want.push(Ev::Mmap(
                    0x7700_0000,
                    0x2000,
                    false,
                    "/lib/ld.so.1".into(),
                    0x1000,
                    [true, false, true],
                ));
            }
            1 => {
                w.extend([wire::frame(tag::MPROTECT, 1, 3), 0x7700_1000, 0x1000]);
                want.push(Ev::Mprotect(0x7700_1000, 0x1000, [true, false, false]));
            }
            2 => {
                w.extend([wire::frame(tag::MUNMAP, 0, 3), 0x7700_0000, 0x2000]);
                want.push(Ev::Munmap(0x7700_0000, 0x2000));
            }
            3 => {
                // A framed event from the future: skipped.
                w.extend([wire::frame(0x3f, 7, 4), 1, 2, 3]);
            }
            _ => {
                w.extend([wire::frame(tag::SIGNAL, 0, 5), 11, 1, 0x10, 0x0040_2000]);
                want.push(Ev::Signal(Signal {
                    signo: 11,
                    code: 1,
                    fault_addr: 0x10,
                    handler: Some(0x0040_2000),
                }));
            }
        }
        chunks.push(w);
    }
    // exit_group(0): does not return.
    let mut last = vec![
        wire::frame(tag::SYSCALL, 0, 11),
        4246,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    last.push(pc + 4);
    want.push(Ev::Syscall(
        4246,
        Some("exit_group".into()),
        None,
        [0; 6],
        vec![],
        0,
    ));
    want.push(Ev::Exec(pc + 4));
    chunks.push(last);
    (chunks, want)
}

#[test]
fn framed_events_arrive_in_order() {
    for threads in [1usize, 3] {
        let (pid, tid) = (6000 + threads as i32, 6000);
        let (chunks, want) = make_framed_stream();
        let server = bind();
        let addr = peer(&server);
        let fake = std::thread::spawn(move || {
            Fake::new(pid, tid).play(addr, &chunks, Ending::Goodbye { lost: 0 })
        });
        let stats = run_with_timeout(server, threads);
        assert_eq!(fake.join().unwrap(), None);
        let got = take_result(pid, tid).unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "event {i}, threads={threads}");
        }
        assert_eq!(stats.events, want.len() as u64);
        assert_eq!(stats.skipped_events, 8);
        assert_eq!(stats.lost_events, 0);
        assert_eq!(stats.chunks, 41);
    }
}

#[test]
fn wrong_wire_version_is_rejected_with_both_versions() {
    let server = bind();
    let addr = peer(&server);
    let fake = std::thread::spawn(move || {
        let mut f = Fake::new(5000, 5000);
        f.wire_version = WIRE_VERSION + 41;
        f.play(addr, &[], Ending::Goodbye { lost: 0 })
    });
    let stats = run_with_timeout(server, 1);
    let err = fake.join().unwrap().expect("a welcome error");
    assert!(
        err.contains(&format!("wire version {}", WIRE_VERSION + 41)),
        "{err}"
    );
    assert!(
        err.contains(&format!("wire version {WIRE_VERSION}")),
        "{err}"
    );
    assert!(err.contains("rebuild"), "{err}");
    assert_eq!(stats.connections, 0);
    assert_eq!(pid_inits(5000), 0);
}

/// Reads the server's challenge on a raw connection.
fn read_challenge(s: &std::os::unix::net::UnixStream) -> wire::channel::Challenge {
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    wire::channel::parse_challenge(&line).expect("a challenge")
}

#[test]
fn stray_connection_is_ignored_not_counted_as_loss() {
    let server = bind();
    let addr = peer(&server);
    let Addr::Unix(path) = addr.0.clone() else {
        unreachable!()
    };
    let (chunks, want) = make_stream(2, 4096, 19);
    let c = std::thread::spawn(move || {
        let mut s = std::os::unix::net::UnixStream::connect(path).unwrap();
        read_challenge(&s);
        s.write_all(b"GET / HTTP/1.0\n").unwrap();
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut s, &mut rest);
        // The run itself (`run` waits for a QEMU).
        let r = Fake::new(5600, 5600).play(addr, &chunks, Ending::Goodbye { lost: 0 });
        (rest, r)
    });
    let stats = run_with_timeout(server, 1);
    let (rest, r) = c.join().unwrap();
    // No welcome for a stranger: the server just closes.
    assert_eq!(rest, "");
    assert_eq!(r, None);
    assert_eq!((stats.connections, stats.strangers), (1, 1));
    assert!(stats.is_complete(), "{}", stats.loss_summary());
    assert!(take_result(5600, 5600).unwrap() == want);
}

#[test]
fn a_stranger_first_does_not_end_the_run() {
    // `run` returns once the traced tree is done; a stranger that comes and
    // goes before QEMU's first connection is not the start of that tree.
    let server = bind();
    let addr = peer(&server);
    let Addr::Unix(path) = addr.0.clone() else {
        unreachable!()
    };
    let (chunks, want) = make_stream(3, 4096, 17);
    let fake = std::thread::spawn(move || {
        let s = std::os::unix::net::UnixStream::connect(&path).unwrap();
        read_challenge(&s);
        drop(s);
        // Well past the linger time.
        std::thread::sleep(Duration::from_millis(500));
        Fake::new(5500, 5500).play(addr, &chunks, Ending::Goodbye { lost: 0 })
    });
    let stats = run_with_timeout(server, 1);
    assert_eq!(fake.join().unwrap(), None);
    assert_eq!((stats.connections, stats.strangers), (1, 1));
    assert!(take_result(5500, 5500).unwrap() == want);
}

#[test]
fn a_wrong_secret_is_refused_and_counted() {
    let server = bind();
    let (addr, _) = peer(&server);
    let fake = std::thread::spawn(move || {
        let wrong = (addr, Token::generate().unwrap());
        Fake::new(5100, 5100).play(wrong, &[], Ending::Goodbye { lost: 0 })
    });
    let stats = run_with_timeout(server, 1);
    let err = fake.join().unwrap().expect("refused");
    assert!(err.contains("refused") && err.contains("secret"), "{err}");
    assert_eq!((stats.connections, stats.refused_connections), (0, 1));
    assert!(!stats.is_complete());
    assert_eq!(pid_inits(5100), 0);
}

#[test]
fn the_hello_pid_must_be_the_connecting_process() {
    // Without trust_hello_pids: a hello naming another pid is refused.
    let dir = std::env::temp_dir().join(format!("cannoli-loopback-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server = Server::bind(&format!("unix:{}", dir.join("strict.sock").display())).unwrap();
    let addr = peer(&server);
    let fake = std::thread::spawn(move || {
        Fake::new(5200, 5200).play(addr, &[], Ending::Goodbye { lost: 0 })
    });
    let stats = run_with_timeout(server, 1);
    let err = fake.join().unwrap().expect("refused");
    assert!(
        err.contains(&format!(
            "names pid 5200 but process {} sent it",
            std::process::id()
        )),
        "{err}"
    );
    assert_eq!(stats.refused_connections, 1);
}

#[test]
fn a_silent_connection_times_out() {
    // The timeout applies to the real stream's hello too: long enough for
    // a thread of a loaded machine to answer, short for the silent one.
    let server = bind().handshake_timeout(Duration::from_secs(3));
    let addr = peer(&server);
    let Addr::Unix(path) = addr.0.clone() else {
        unreachable!()
    };
    // The silent connection stays open until `run` has returned (or, if it
    // never does, for a long while): `run` must end while it is still open,
    // by the handshake's timeout, not because the peer went away.
    let (ran, run_done) = std::sync::mpsc::channel::<()>();
    let c = std::thread::spawn(move || {
        let s = std::os::unix::net::UnixStream::connect(path).unwrap();
        read_challenge(&s);
        // A real stream meanwhile; then say nothing: the server must give
        // up on its own, and `run` return.
        let r = Fake::new(5700, 5700).play(addr, &[], Ending::Goodbye { lost: 0 });
        let returned_while_open = run_done.recv_timeout(Duration::from_secs(120)).is_ok();
        drop(s);
        (r, returned_while_open)
    });
    let stats = run_with_timeout(server, 1);
    let _ = ran.send(());
    assert_eq!((stats.connections, stats.strangers), (1, 1));
    let (r, returned_while_open) = c.join().unwrap();
    assert_eq!(r, None);
    assert!(
        returned_while_open,
        "run waited for the silent peer to hang up instead of timing its handshake out"
    );
}

#[test]
fn silent_connections_cannot_keep_qemu_out() {
    // 100 connections that never say hello (each waits in the accept
    // loop's poll; `a_flood_of_silent_tcp_connections_cannot_keep_qemu_out`
    // goes past the cap), then a real stream: it is served, and the run
    // ends once the silent ones hang up.
    let server = bind();
    let addr = peer(&server);
    let Addr::Unix(path) = addr.0.clone() else {
        unreachable!()
    };
    let (chunks, want) = make_stream(5, 4096, 11);
    let fake = std::thread::spawn(move || {
        let silent: Vec<_> = (0..100)
            .map(|_| std::os::unix::net::UnixStream::connect(&path).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        let r = Fake::new(5300, 5300).play(addr, &chunks, Ending::Goodbye { lost: 0 });
        drop(silent);
        r
    });
    let stats = run_with_timeout(server, 1);
    assert_eq!(fake.join().unwrap(), None);
    assert_eq!(stats.connections, 1);
    assert!(stats.is_complete(), "{}", stats.loss_summary());
    assert!(take_result(5300, 5300).unwrap() == want);
}

#[test]
fn an_impostor_client_is_detected_by_qemu() {
    // Something listens where QEMU expects its client and says welcome
    // without knowing the secret: QEMU's side must not stream to it.
    let dir = std::env::temp_dir().join(format!("cannoli-loopback-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("impostor.sock");
    let _ = std::fs::remove_file(&path);
    let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let imp = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let ch = format!(
            "{{\"magic\":\"cannoli\",\"wire_version\":{WIRE_VERSION},\"nonce\":\"{}\"}}\n",
            "ab".repeat(16)
        );
        s.write_all(ch.as_bytes()).unwrap();
        let mut hello = String::new();
        BufReader::new(&s).read_line(&mut hello).unwrap();
        // The hello carries a proof, never the secret itself.
        s.write_all(b"{\"error\":null,\"proof\":null}\n").unwrap();
        hello
    });
    let token = Token::generate().unwrap();
    let p = Producer::create_memfd(4096, 2).unwrap();
    let r = connect_fake(
        &(Addr::Unix(path), token.clone()),
        fake_hello(5400, 5400, WIRE_VERSION, fake_regs()),
        &p,
    );
    let err = r.expect_err("an impostor welcome is refused");
    assert!(err.contains("could not prove"), "{err}");
    let hello = imp.join().unwrap();
    assert!(
        !hello.contains(&token.to_hex()),
        "the secret crossed the socket"
    );
}

#[test]
fn tcp_streams_name_the_ring_through_proc() {
    // Over TCP the ring is QEMU's memfd, opened through /proc/<pid>/fd/<n>;
    // the pid must be real for that, so the fake uses ours.
    let server = Server::bind("127.0.0.1:0").unwrap();
    let (addr, token) = peer(&server);
    let pid = std::process::id() as i32;
    let (chunks, want) = make_stream(7, 4096, 13);
    let fake = std::thread::spawn(move || {
        let mut p = Producer::create_memfd(4096, 4).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&p.fd().unwrap());
        let mut s = dial(
            &addr,
            Ok(&token),
            0,
            fake_hello(pid, pid + 7, WIRE_VERSION, fake_regs()),
            &RingOffer::ProcFd(fd),
            None,
        )
        .expect("welcomed over TCP");
        p.release_fd();
        for words in &chunks {
            let buf = p.acquire_slice().unwrap();
            for (i, wd) in words.iter().enumerate() {
                buf[i * 8..i * 8 + 8].copy_from_slice(&wd.to_le_bytes());
            }
            p.publish(words.len() * 8).unwrap();
        }
        p.close();
        let g = format!("{{\"chunks\":{},\"lost_events\":0}}\n", p.published());
        s.write_all(g.as_bytes()).unwrap();
    });
    let stats = run_with_timeout(server, 2);
    fake.join().unwrap();
    assert_eq!(stats.connections, 1);
    assert!(stats.is_complete(), "{}", stats.loss_summary());
    assert!(take_result(pid, pid + 7).unwrap() == want);
}

#[test]
fn a_stream_costs_the_client_one_descriptor() {
    // 40 streams open at once: the client holds each one's control
    // socket, and nothing else of it (its ring and block table are
    // mapped, their descriptors closed). In a child process (this test
    // again), where no other test opens descriptors meanwhile.
    const N: usize = 40;
    const CHILD: &str = "CANNOLI_TEST_FD_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_stream_costs_the_client_one_descriptor",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "the child failed: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let server = bind();
    let addr = peer(&server);
    let connected = Arc::new(Barrier::new(N + 1));
    let counted = Arc::new(Barrier::new(N + 1));
    let mut fakes = Vec::new();
    for i in 0..N {
        let (addr, connected, counted) = (addr.clone(), connected.clone(), counted.clone());
        let (chunks, _) = make_stream(2, 4096, 60 + i as u64);
        fakes.push(std::thread::spawn(move || {
            let table = mempipe::TableWriter::create(0).unwrap();
            let mut p = Producer::create_memfd(4096, 4).unwrap();
            let hello = fake_hello(7000 + i as i32, 7000 + i as i32, WIRE_VERSION, fake_regs());
            let s = dial(
                &addr.0,
                Ok(&addr.1),
                0,
                hello,
                &RingOffer::Fd(p.fd().unwrap()),
                Some(&RingOffer::Fd(table.fd())),
            )
            .expect("welcomed");
            p.release_fd();
            connected.wait();
            counted.wait();
            stream_and_say_goodbye(p, s, &chunks);
            drop(table);
        }));
    }
    let served = std::thread::spawn(move || run_with_timeout(server, 1));
    connected.wait();
    // This process is both sides: the fakes hold their sockets and block
    // tables, the client its sockets.
    let kinds = |what: &str| {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().contains(what))
            })
            .count()
    };
    let (sockets, rings, tables) = (
        kinds("socket:"),
        kinds("cannoli-ring"),
        kinds("cannoli-blocks"),
    );
    counted.wait();
    for f in fakes {
        f.join().unwrap();
    }
    let stats = served.join().unwrap();
    assert!(stats.is_complete(), "{}", stats.loss_summary());
    assert_eq!(stats.connections, N as u64);
    assert_eq!(rings, 0, "ring descriptors held");
    assert_eq!(tables, N, "only the fakes' own block tables");
    // N sockets on each side, and a few of the server's own (listener,
    // wake-up pair).
    assert!(sockets <= 2 * N + 4, "{sockets} sockets for {N} streams");
}

#[test]
fn a_flood_of_silent_tcp_connections_cannot_keep_qemu_out() {
    // Over TCP anyone on the machine can connect. A flood thread keeps
    // more silent connections open than the client lets wait, opening a
    // new one as fast as it can (each one the client drops is replaced),
    // and QEMU's threads connect while the wait list is full: every one of
    // them gets in.
    use std::net::TcpStream;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::AtomicBool;
    let server = Server::bind("127.0.0.1:0").unwrap();
    let (addr, token) = peer(&server);
    let Addr::Tcp(tcp) = addr.clone() else {
        unreachable!()
    };
    use std::sync::atomic::AtomicUsize;
    let pid = std::process::id() as i32;
    let stop = Arc::new(AtomicBool::new(false));
    // QEMU threads between their connect and their welcome. The flood
    // holds off meanwhile: the wait list is full when one connects, but
    // 1024 newer connections before a thread of a loaded machine answers
    // its challenge would push it out, as they would any silent one.
    let handshaking = Arc::new(AtomicUsize::new(0));
    let (opened_tx, opened_rx) = mpsc::channel::<u64>();
    let flood = {
        let stop = stop.clone();
        let handshaking = handshaking.clone();
        std::thread::spawn(move || {
            let mut conns: std::collections::VecDeque<TcpStream> = Default::default();
            let (mut opened, mut dropped) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                if handshaking.load(Ordering::SeqCst) > 0 {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                let Ok(s) = TcpStream::connect(&tcp) else {
                    continue;
                };
                s.set_nonblocking(true).unwrap();
                conns.push_back(s);
                opened += 1;
                if opened % 256 == 0 {
                    // Those the client dropped (end of file after its
                    // challenge) are replaced by the next ones.
                    conns.retain(|c| {
                        let mut buf = [0u8; 512];
                        loop {
                            match std::io::Read::read(&mut &*c, &mut buf) {
                                Ok(0) => {
                                    dropped += 1;
                                    return false;
                                }
                                Ok(_) => continue,
                                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                                    return true
                                }
                                Err(_) => {
                                    dropped += 1;
                                    return false;
                                }
                            }
                        }
                    });
                    let _ = opened_tx.send(opened);
                }
                // Our own descriptors stay bounded: the oldest (long
                // dropped by the client) go.
                while conns.len() > 3000 {
                    conns.pop_front();
                }
            }
            (opened, dropped)
        })
    };
    let served = std::thread::spawn(move || run_with_timeout(server, 1));
    // The flood is at the client's cap (1024 waiting) and beyond.
    while opened_rx.recv().unwrap() < 4096 {}
    let mut wants = Vec::new();
    let mut fakes = Vec::new();
    for i in 0..8 {
        let (chunks, want) = make_stream(3, 4096, 40 + i);
        wants.push(want);
        let (addr, token) = (addr.clone(), token.clone());
        let handshaking = handshaking.clone();
        fakes.push(std::thread::spawn(move || {
            let mut p = Producer::create_memfd(4096, 4).unwrap();
            let fd = p.fd().unwrap().as_raw_fd();
            handshaking.fetch_add(1, Ordering::SeqCst);
            let s = dial(
                &addr,
                Ok(&token),
                0,
                fake_hello(pid, pid + 100 + i as i32, WIRE_VERSION, fake_regs()),
                &RingOffer::ProcFd(fd),
                None,
            );
            handshaking.fetch_sub(1, Ordering::SeqCst);
            let s = s.unwrap_or_else(|e| panic!("QEMU thread {i} was kept out: {e}"));
            p.release_fd();
            stream_and_say_goodbye(p, s, &chunks);
        }));
        // The next one connects once the flood has opened 256 more.
        let _ = opened_rx.recv();
    }
    for f in fakes {
        f.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let (opened, dropped) = flood.join().unwrap();
    let stats = served.join().unwrap();
    assert!(
        opened > 4096 && dropped > 1024,
        "the flood never filled the client's wait list ({opened} opened, {dropped} dropped)"
    );
    assert_eq!(stats.connections, 8, "{}", stats.loss_summary());
    assert!(stats.is_complete(), "{}", stats.loss_summary());
    assert!(stats.strangers > 1024, "{} strangers", stats.strangers);
    for (i, want) in wants.iter().enumerate() {
        assert!(take_result(pid, pid + 100 + i as i32).unwrap() == *want);
    }
}

/// Threads of user `uid`, all processes together (what RLIMIT_NPROC counts).
fn threads_of_user(uid: u32) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        // Processes only (not `self`, `thread-self`).
        if !e
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(st) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let field = |k: &str| {
            st.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if field("Uid:") == Some(uid as u64) {
            n += field("Threads:").unwrap_or(0);
        }
    }
    n
}

#[test]
fn a_worker_that_cannot_start_ends_its_stream_counted() {
    // In a child process (this test again) whose user may start no more
    // threads than the server's connection thread: the stream's first
    // worker cannot start, the crew closes the ring (QEMU goes on
    // untraced), and the stream is counted incomplete.
    const CHILD: &str = "CANNOLI_TEST_NPROC_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_worker_that_cannot_start_ends_its_stream_counted",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "the child failed: {}\n{err}",
            out.status
        );
        assert!(
            err.contains("cannot start a worker thread") && err.contains("events are missing"),
            "{err}"
        );
        return;
    }
    // SAFETY: plain system calls; as root, a uid nobody uses (so that
    // RLIMIT_NPROC, which root ignores, applies and counts only us; as
    // another user the limit counts its other programs' threads too).
    unsafe {
        if libc::geteuid() == 0 {
            assert_eq!(libc::setgid(54_321), 0);
            assert_eq!(libc::setuid(54_321), 0);
        }
    }
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("cannoli-nproc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server = Server::bind(&format!("unix:{}", dir.join("s.sock").display()))
        .unwrap()
        .trust_hello_pids();
    let addr = peer(&server);
    let (go, wait) = mpsc::channel::<()>();
    let fake = std::thread::spawn(move || {
        wait.recv().unwrap();
        let mut p = Producer::create_memfd(4096, 2).unwrap();
        let hello = fake_hello(7700, 7700, WIRE_VERSION, fake_regs());
        let mut s = connect_fake(&addr, hello, &p).expect("welcomed");
        p.release_fd();
        // The client closes the ring when it cannot read it: publishing
        // then fails, as it does for QEMU, which goes on untraced.
        let mut published = 0;
        for _ in 0..3 {
            let ok = p.acquire_slice().is_ok() && p.publish(8).is_ok();
            published += u64::from(ok);
        }
        p.close();
        let g = format!("{{\"chunks\":{published},\"lost_events\":0}}\n");
        let _ = s.write_all(g.as_bytes());
    });
    // The threads there are now, and one more: the connection's.
    let n = threads_of_user(uid) + 1;
    let lim = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: setrlimit reads `lim`.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &lim) }, 0);
    go.send(()).unwrap();
    let stats = server.run::<Rec>(2).expect("the server runs");
    fake.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(stats.connections, 1, "{}", stats.loss_summary());
    assert_eq!(stats.incomplete_streams, 1, "{}", stats.loss_summary());
    assert!(!stats.is_complete());
}

/// Streams `chunks` on `p` (connected as `s`), then says goodbye.
fn stream_and_say_goodbye(p: Producer, s: Sock, chunks: &[Vec<u64>]) {
    stream_and_say_goodbye_after(p, s, chunks, None)
}

/// [`stream_and_say_goodbye`], waiting at `before_goodbye` (if any) once
/// every chunk is published.
fn stream_and_say_goodbye_after(
    mut p: Producer,
    mut s: Sock,
    chunks: &[Vec<u64>],
    before_goodbye: Option<&Barrier>,
) {
    for words in chunks {
        let buf = p.acquire_slice().unwrap();
        for (i, wd) in words.iter().enumerate() {
            buf[i * 8..i * 8 + 8].copy_from_slice(&wd.to_le_bytes());
        }
        p.publish(words.len() * 8).unwrap();
    }
    if let Some(b) = before_goodbye {
        b.wait();
    }
    p.close();
    let g = format!("{{\"chunks\":{},\"lost_events\":0}}\n", p.published());
    s.write_all(g.as_bytes()).unwrap();
}

#[test]
fn every_thread_of_a_process_hands_over_its_block_table() {
    // Two threads of one process, each passing the ring and the process's
    // block table with its hello (two fds in one message): both streams
    // are served as without a table.
    let server = bind();
    let addr = peer(&server);
    let table = Arc::new(mempipe::TableWriter::create(0).unwrap());
    table.append(&[0x40_0000, 0x40_0004], |_| true).unwrap();
    // Neither says goodbye before both have streamed all their chunks
    // (through a 4-chunk ring, so both are being served): otherwise, on a
    // busy machine, the first can end (and its process context go) before
    // the second connects, and the process is initialised twice, rightly.
    let both = Arc::new(Barrier::new(2));
    let fakes: Vec<_> = (0..2)
        .map(|i| {
            let (addr, table, both) = (addr.clone(), table.clone(), both.clone());
            let (chunks, want) = make_stream(20, 4096, 40 + i as u64);
            let t = std::thread::spawn(move || {
                let mut p = Producer::create_memfd(4096, 4).unwrap();
                let s = dial(
                    &addr.0,
                    Ok(&addr.1),
                    0,
                    fake_hello(5800, 5800 + i, WIRE_VERSION, fake_regs()),
                    &RingOffer::Fd(p.fd().unwrap()),
                    Some(&RingOffer::Fd(table.fd())),
                )
                .expect("welcomed with a block table");
                p.release_fd();
                stream_and_say_goodbye_after(p, s, &chunks, Some(&both));
            });
            (t, want)
        })
        .collect();
    let stats = run_with_timeout(server, 2);
    for (i, (t, want)) in fakes.into_iter().enumerate() {
        t.join().unwrap();
        assert!(take_result(5800, 5800 + i as i32).unwrap() == want);
    }
    assert_eq!(stats.connections, 2);
    assert!(stats.is_complete(), "{}", stats.loss_summary());
    assert_eq!(pid_inits(5800), 1);
}

#[test]
fn a_block_table_announced_but_not_sent_is_refused_in_one_line() {
    // A hello that says its table comes with it, with the ring's fd alone.
    let server = bind();
    let (addr, token) = peer(&server);
    let Addr::Unix(path) = addr else {
        unreachable!()
    };
    let fake = std::thread::spawn(move || {
        let s = std::os::unix::net::UnixStream::connect(path).unwrap();
        let challenge = read_challenge(&s);
        let mut hello = fake_hello(5900, 5900, WIRE_VERSION, fake_regs());
        hello.nonce = wire::channel::nonce().unwrap();
        hello.proof = token.prove(wire::channel::Role::Hello, &challenge.nonce, &hello.nonce);
        hello.blocks = Some(RingRef::Attached);
        let ring = Producer::create_memfd(4096, 2).unwrap();
        let mut sock = Sock::Unix(s.try_clone().unwrap());
        let line = serde_json::to_string(&hello).unwrap() + "\n";
        sock.send_with_fd(line.as_bytes(), ring.fd().unwrap())
            .unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut &s, &mut rest).unwrap();
        rest
    });
    let stats = run_with_timeout(server, 1);
    let rest = fake.join().unwrap();
    let welcome: wire::Welcome = serde_json::from_str(rest.trim_end()).expect("one welcome line");
    assert_eq!(rest.matches('\n').count(), 1, "{rest:?}");
    let err = welcome.error.expect("refused");
    assert!(
        err.contains("came with 1 file descriptors, not its ring and its block table"),
        "{err}"
    );
    assert!(!err.chars().any(char::is_control), "{err:?}");
    assert_eq!((stats.connections, stats.refused_connections), (0, 1));
    assert_eq!(pid_inits(5900), 0);
}

#[test]
fn bind_in_use_names_address_cause_and_fix() {
    let first = bind();
    let tcp = Server::bind("127.0.0.1:0").unwrap();
    for addr in [first.addr().to_string(), tcp.addr().to_string()] {
        let e = match Server::bind(&addr) {
            Err(e) => e,
            Ok(_) => panic!("second bind of {addr} succeeded"),
        };
        assert!(matches!(e, Error::AddrInUse { .. }), "{addr}: {e}");
        let msg = e.to_string();
        assert!(msg.contains(&addr), "{msg}");
        assert!(msg.contains("address already in use"), "{msg}");
        assert!(msg.contains("CANNOLI_ADDR"), "{msg}");
        assert!(!msg.contains('\n'));
    }
    // A socket left by a dead server (the file stays, nobody listens) is
    // replaced.
    let Addr::Unix(path) = first.addr().clone() else {
        unreachable!()
    };
    drop(first);
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let again = Server::bind(&format!("unix:{}", path.display()));
    assert!(again.is_ok(), "a stale socket blocks the address");
}

/// Loopback throughput with a real ring: a producer thread republishes
/// pre-filled 256 KiB chunks of exec events. Run with
/// `cargo test -p cannoli --release --test loopback -- --ignored --nocapture throughput`.
#[test]
#[ignore]
fn throughput() {
    struct Sum(u64);
    impl Cannoli for Sum {
        type Trace = u64;
        type TidContext = ();
        type PidContext = ();
        fn init_pid(_: &ClientInfo) -> Arc<()> {
            Arc::new(())
        }
        fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
            (Sum(0), ())
        }
        fn exec(_: &(), _: &(), pc: u64, t: &mut Vec<u64>) {
            t.push(pc);
        }
        fn trace(&mut self, _: &(), _: &(), t: &[u64]) {
            self.0 = self.0.wrapping_add(t.len() as u64);
        }
    }

    const CHUNK: usize = 256 * 1024;
    const COUNT: usize = 16;
    const CHUNKS: u64 = 16_000; // 4 GB, 512 M events
    for threads in [1usize, 2] {
        let server = bind();
        let addr = peer(&server);
        let prod = std::thread::spawn(move || {
            let mut p = Producer::create_memfd(CHUNK, COUNT).unwrap();
            let hello = fake_hello(
                9000 + threads as i32,
                9000,
                WIRE_VERSION,
                RegLayout::default(),
            );
            let mut s = connect_fake(&addr, hello, &p).expect("welcomed");
            for c in 0..CHUNKS {
                let buf = p.acquire_slice().unwrap();
                if c < COUNT as u64 {
                    for (i, b) in buf.chunks_exact_mut(8).enumerate() {
                        b.copy_from_slice(&(0x400000 + 4 * i as u64).to_le_bytes());
                    }
                }
                p.publish(CHUNK).unwrap();
            }
            p.close();
            s.write_all(format!("{{\"chunks\":{CHUNKS},\"lost_events\":0}}\n").as_bytes())
                .unwrap();
        });
        let start = std::time::Instant::now();
        let stats = server.linger(Duration::ZERO).run::<Sum>(threads).unwrap();
        let secs = start.elapsed().as_secs_f64();
        prod.join().unwrap();
        eprintln!(
            "{threads} worker(s): {} events in {secs:.2} s = {:.2} G events/s ({:.1} GB/s)",
            stats.events,
            stats.events as f64 / secs / 1e9,
            stats.bytes as f64 / secs / 1e9
        );
        assert_eq!(stats.events, CHUNKS * (CHUNK as u64 / 8));
    }
}

/// `run_forever` keeps serving: two processes at once, then, long after
/// both ended (when `run` would have returned), a third.
#[test]
fn run_forever_serves_any_number_of_processes() {
    let server = bind();
    let addr = peer(&server);
    std::thread::spawn(move || {
        let _ = server.run_forever::<Rec>(2);
    });
    let play = |pid: i32, salt: u64| {
        let (chunks, want) = make_stream(40, 4096, salt);
        let addr = addr.clone();
        let h = std::thread::spawn(move || {
            Fake::new(pid, pid).play(addr, &chunks, Ending::Goodbye { lost: 0 })
        });
        (h, want)
    };
    let wait_result = |pid: i32| {
        let start = std::time::Instant::now();
        loop {
            if let Some(r) = take_result(pid, pid) {
                return r;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "pid {pid} was never traced"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let (a, want_a) = play(3500, 30);
    let (b, want_b) = play(3501, 31);
    assert_eq!(a.join().unwrap(), None);
    assert_eq!(b.join().unwrap(), None);
    assert!(wait_result(3500) == want_a);
    assert!(wait_result(3501) == want_b);
    std::thread::sleep(Duration::from_millis(300));
    let (c, want_c) = play(3502, 32);
    assert_eq!(c.join().unwrap(), None);
    assert!(wait_result(3502) == want_c);
}

/// One run's own value: what a tool keeps instead of module statics.
struct RunTotals {
    name: &'static str,
    execs: AtomicU64,
    pids: Mutex<Vec<i32>>,
}

/// Counts its run's exec events into the run's [`RunTotals`], found through
/// `ClientInfo::state` in `init_pid` only.
struct Counting;

impl Cannoli for Counting {
    type Trace = ();
    type TidContext = ();
    type PidContext = Option<Arc<RunTotals>>;

    fn init_pid(ci: &ClientInfo) -> Arc<Self::PidContext> {
        let totals = ci.state::<RunTotals>();
        if let Some(t) = &totals {
            t.pids.lock().unwrap().push(ci.pid);
        }
        Arc::new(totals)
    }

    fn init_tid(_: &Self::PidContext, _: &ClientInfo) -> (Self, ()) {
        (Counting, ())
    }

    fn exec(_: &Self::PidContext, _: &(), _: u64, trace: &mut Vec<()>) {
        trace.push(());
    }

    fn trace(&mut self, pid: &Self::PidContext, _: &(), trace: &[()]) {
        if let Some(t) = pid {
            t.execs.fetch_add(trace.len() as u64, Ordering::Relaxed);
        }
    }
}

#[test]
fn two_runs_at_once_each_get_their_own_state() {
    let runs: Vec<_> = [("a", 3100, 40usize), ("b", 3200, 70)]
        .into_iter()
        .map(|(name, pid, chunks)| {
            let totals = Arc::new(RunTotals {
                name,
                execs: AtomicU64::new(0),
                pids: Mutex::new(Vec::new()),
            });
            let server = bind().with_state(totals.clone());
            let addr = peer(&server);
            let (stream, want) = make_stream(chunks, 4096, pid as u64);
            let execs = want.iter().filter(|e| matches!(e, Ev::Exec(_))).count() as u64;
            let fake = std::thread::spawn(move || {
                Fake::new(pid, pid).play(addr, &stream, Ending::Goodbye { lost: 0 })
            });
            let run = std::thread::spawn(move || server.run::<Counting>(2));
            (totals, pid, execs, fake, run)
        })
        .collect();
    for (totals, pid, execs, fake, run) in runs {
        assert_eq!(fake.join().unwrap(), None);
        let stats = run.join().unwrap().expect("Server::run failed");
        assert_eq!(stats.connections, 1);
        assert_eq!(*totals.pids.lock().unwrap(), [pid], "run {}", totals.name);
        assert_eq!(
            totals.execs.load(Ordering::Relaxed),
            execs,
            "run {}",
            totals.name
        );
    }

    // A run started the old way carries no state.
    let server = bind();
    let addr = peer(&server);
    let (stream, _) = make_stream(2, 4096, 1);
    let fake = std::thread::spawn(move || {
        Fake::new(3300, 3300).play(addr, &stream, Ending::Goodbye { lost: 0 })
    });
    run_with_timeout_as::<Counting>(server, 2);
    assert_eq!(fake.join().unwrap(), None);
}

/// How [`Ender`] ends a live run, and the serial calls it got.
struct EndPlan {
    after: usize,
    fail: bool,
    calls: AtomicU64,
}

/// A tool that stops or fails the run at its `after`-th serial call.
struct Ender;

impl Cannoli for Ender {
    type Trace = u64;
    type TidContext = ();
    type PidContext = Arc<EndPlan>;

    fn init_pid(ci: &ClientInfo) -> Arc<Arc<EndPlan>> {
        Arc::new(ci.expect_state::<EndPlan>())
    }

    fn init_tid(_: &Arc<EndPlan>, _: &ClientInfo) -> (Ender, ()) {
        (Ender, ())
    }

    fn exec(_: &Arc<EndPlan>, _: &(), pc: u64, t: &mut Vec<u64>) {
        t.push(pc);
    }

    fn trace_flow(
        &mut self,
        plan: &Arc<EndPlan>,
        _: &(),
        _: &[u64],
    ) -> Result<cannoli::Flow, cannoli::ToolError> {
        let n = plan.calls.fetch_add(1, Ordering::Relaxed) + 1;
        if (n as usize) < plan.after {
            Ok(cannoli::Flow::Continue)
        } else if plan.fail {
            Err(cannoli::ToolError::new(format!(
                "the tool gave up at call {n}"
            )))
        } else {
            Ok(cannoli::Flow::Stop)
        }
    }
}

/// A live run whose tool ends it: QEMU's side streams all of its chunks
/// through a 4-chunk ring (so the client must go on taking them, or the
/// fake would wait forever), the tool is not called again, and the run
/// returns the stop or the tool's error.
fn run_ended_by_tool(pid: i32, fail: bool) -> (Result<Stats, Error>, u64) {
    let plan = Arc::new(EndPlan {
        after: 3,
        fail,
        calls: AtomicU64::new(0),
    });
    let server = bind().with_state(plan.clone());
    let addr = peer(&server);
    let (stream, _) = make_stream(200, 4096, pid as u64);
    let fake = std::thread::spawn(move || {
        Fake::new(pid, pid).play(addr, &stream, Ending::Goodbye { lost: 0 })
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(server.run::<Ender>(4));
    });
    let r = rx
        .recv_timeout(Duration::from_secs(300))
        .expect("Server::run did not return within 300 s (a hang)");
    assert_eq!(
        fake.join().unwrap(),
        None,
        "QEMU's side streamed to its end"
    );
    (r, plan.calls.load(Ordering::Relaxed))
}

#[test]
fn a_tool_can_stop_a_live_run() {
    let (r, calls) = run_ended_by_tool(3300, false);
    let stats = r.expect("a stopped run is not an error");
    assert_eq!(calls, 3, "not called after it stopped the run");
    assert!(stats.stopped, "{stats:?}");
    assert_eq!(stats.chunks, 200, "every chunk taken off the ring");
    assert!(stats.is_complete(), "{}", stats.loss_summary());
}

#[test]
fn a_tool_can_fail_a_live_run() {
    let (r, calls) = run_ended_by_tool(3400, true);
    match r {
        Err(Error::Tool(e)) => assert_eq!(e.to_string(), "the tool gave up at call 3"),
        Err(e) => panic!("another error: {e}"),
        Ok(s) => panic!("the run went on: {s:?}"),
    }
    assert_eq!(calls, 3);
}
