//! Target `decode`: the client's chunk decoder (`cannoli/src/decode.rs`)
//! against arbitrary chunks, guest widths, register counts and byte orders.
//!
//! Checked for every input:
//! - no panic, and no allocation by what the chunk says: decoding with a
//!   tool that allocates nothing allocates at most a copy of the chunk (the
//!   path for a misaligned chunk);
//! - the decoder agrees with [`reference`], a plain word-by-word reading of
//!   the wire format written from its documentation: the same events in
//!   the same order with the same values, the same count of skipped
//!   unknown frames, and the same malformed spot;
//! - every byte is accounted for exactly once: the words of the delivered
//!   events, of the skipped frames and the malformed rest add up to the
//!   chunk's length;
//! - the problem's description is one line without control characters.
//!
//! Input: 5 bytes of stream description (mode, guest width, register
//! count, flags), then either the raw chunk (mode even) or bytes from which
//! `arbitrary` builds a list of events, some of them damaged (mode odd).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use arbitrary::{Arbitrary, Unstructured};
use cannoli::fuzzing::{self, Decoded};
use cannoli::{Cannoli, ClientInfo, Signal, Syscall};
use wire::{tag, PC_MASK};

/// The stream description a chunk is decoded for.
#[derive(Debug, Clone)]
pub struct Stream {
    pub bits: u32,
    pub reg_count: u32,
    pub big_endian: bool,
    /// Bytes the chunk is placed off an 8-byte boundary.
    pub misalign: usize,
}

impl Stream {
    fn from_bytes(h: &[u8; 5]) -> Stream {
        const BITS: [u32; 8] = [32, 64, 32, 64, 0, 16, 63, 65];
        let count = u16::from_le_bytes([h[2], h[3]]) as u32;
        Stream {
            bits: BITS[h[1] as usize % BITS.len()],
            // Mostly counts a hello may announce; now and then any.
            reg_count: if h[4] & 0x10 != 0 {
                u32::MAX - count
            } else if h[4] & 0x20 != 0 {
                count
            } else {
                count % 65
            },
            big_endian: h[4] & 1 != 0,
            misalign: ((h[4] >> 1) & 7) as usize,
        }
    }

    /// The 5-byte header [`run`] reads this description from (`structured`
    /// picks the mode).
    pub fn header(bits: u32, reg_count: u16, big_endian: bool, structured: bool) -> [u8; 5] {
        let b = match bits {
            32 => 0,
            64 => 1,
            _ => 4,
        };
        let c = reg_count.to_le_bytes();
        [
            structured as u8,
            b,
            c[0],
            c[1],
            big_endian as u8 | if reg_count > 64 { 0x20 } else { 0 },
        ]
    }

    fn client_info(&self) -> ClientInfo {
        ClientInfo {
            stream: 0,
            pid: 1,
            ppid: 0,
            tid: 1,
            arch: "fuzz".into(),
            big_endian: self.big_endian,
            guest_bits: self.bits,
            comm: None,
            exe: None,
            jitter_version: "fuzz".into(),
            regs: wire::RegLayout {
                count: self.reg_count,
                bytes: 8,
                names: Vec::new(),
            },
            syscall_names: names().clone(),
            tool_state: Default::default(),
        }
    }
}

fn names() -> &'static BTreeMap<u64, String> {
    static N: OnceLock<BTreeMap<u64, String>> = OnceLock::new();
    N.get_or_init(|| {
        [(4004, "write"), (4001, "exit"), (0, "read"), (64, "write")]
            .into_iter()
            .map(|(n, s)| (n, s.to_string()))
            .collect()
    })
}

/// Runs the target on one input.
pub fn run(input: &[u8]) {
    let mut h = [0u8; 5];
    let n = input.len().min(5);
    h[..n].copy_from_slice(&input[..n]);
    let rest = &input[n..];
    let stream = Stream::from_bytes(&h);
    let chunk = if h[0] & 1 == 0 {
        rest.to_vec()
    } else {
        build(&mut Unstructured::new(rest), &stream)
    };
    check(&stream, &chunk);
}

/// Decodes `chunk` for `stream` and checks every property (panics if one
/// fails).
pub fn check(stream: &Stream, chunk: &[u8]) {
    let ci = stream.client_info();
    // The chunk at the asked misalignment inside a word-aligned buffer.
    let mut buf = vec![0u64; (chunk.len() + stream.misalign).div_ceil(8) + 1];
    let bytes = words_as_bytes_mut(&mut buf);
    let data = &mut bytes[stream.misalign..stream.misalign + chunk.len()];
    data.copy_from_slice(chunk);
    let data = &*data;

    // 1. A tool that allocates nothing: the decoder may allocate a
    //    word-aligned copy of a misaligned chunk and a lossy copy of a path
    //    that is not UTF-8 (3 bytes per bad byte, grown by doubling: up to
    //    7 bytes allocated in all per byte): linear in the chunk, whatever
    //    lengths the chunk states.
    let mut count: Vec<()> = Vec::new();
    fuzzing::fake_table(); // its first use fills the decoder's cache
    let before = crate::ALLOC.total_allocated();
    let d = fuzzing::decode::<Tally>(&(), &(), data, &ci, &mut count);
    let allocated = crate::ALLOC.total_allocated() - before;
    let strict = crate::STRICT_ALLOC.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        !strict || allocated <= 8 * chunk.len() + 64,
        "decoding {} bytes allocated {allocated} bytes",
        chunk.len()
    );
    assert_eq!(d.events, count.len() as u64, "events vs callbacks");

    // 2. The same again, recording, against the reference reading.
    let mut got = Vec::new();
    let d2 = fuzzing::decode::<Rec>(&(), &(), data, &ci, &mut got);
    assert_eq!(d, d2, "two decodings of one chunk differ");
    let r = reference(chunk, stream.bits, stream.reg_count as usize);
    if got != r.events {
        let first = got
            .iter()
            .zip(&r.events)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(r.events.len()));
        panic!(
            "decoder and reference differ at event {first}: decoder {:?}, reference {:?} \
             ({} vs {} events)",
            got.get(first),
            r.events.get(first),
            got.len(),
            r.events.len()
        );
    }
    assert_eq!(d.events, r.events.len() as u64);
    assert_eq!(d.skipped, r.skipped, "skipped frames");
    assert_eq!(d.skipped_tag, r.skipped_tag, "first skipped tag");
    assert_eq!(d.error_offset(), r.error.map(|e| e.0), "malformed offset");
    assert_eq!(d.error_skipped_bytes(), r.error.map_or(0, |e| e.1));
    // 3. Every byte accounted for once.
    let total = 8 * (r.event_words + r.skipped_words + r.block_words) + d.error_skipped_bytes();
    assert_eq!(total, chunk.len(), "bytes accounted for: {d:?}");
    if let Some(off) = d.error_offset() {
        assert_eq!(off + d.error_skipped_bytes(), chunk.len());
        assert!(d.lost_events() >= 1);
        let m = d.error_message().expect("a message");
        assert!(
            !m.chars().any(char::is_control),
            "control characters in {m:?}"
        );
        assert!(m.len() < 300, "message of {} bytes", m.len());
    } else {
        assert_eq!(chunk.len() % 8, 0);
    }
    let _: &Decoded = &d;

    // 4. Cut into two or three chunks between events, decoded out of order
    //    and stitched back in order: the same events.
    if r.error.is_none() && !r.starts.is_empty() {
        let h = chunk.iter().fold(0x811c_9dc5u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        let s = &r.starts;
        let (a, b) = (
            s[h as usize % s.len()] * 8,
            s[(h >> 32) as usize % s.len()] * 8,
        );
        let (a, b) = (a.min(b), a.max(b));
        for cuts in [vec![a], vec![a, b]] {
            let mut parts = Vec::new();
            let mut from = 0;
            for &to in cuts.iter().chain([&chunk.len()]) {
                parts.push(&data[from..to]);
                from = to;
            }
            let mut split = Vec::new();
            let ds = fuzzing::decode_chunks::<Rec>(&(), &(), &parts, &ci, &mut split);
            assert_eq!(ds.error_offset(), None, "cut at {cuts:?}");
            assert_eq!(ds.events, d.events, "cut at {cuts:?}");
            assert!(split == got, "cut at {cuts:?}: the stitched events differ");
        }
    }
}

fn words_as_bytes_mut(w: &mut [u64]) -> &mut [u8] {
    // SAFETY: u8 has no alignment or validity requirements; the byte slice
    // covers exactly the words' memory and borrows them mutably.
    unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr().cast::<u8>(), w.len() * 8) }
}

// ---------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------

/// Counts callbacks without allocating (a `Vec<()>` never allocates).
pub struct Tally;

impl Cannoli for Tally {
    type Trace = ();
    type TidContext = ();
    type PidContext = ();
    fn init_pid(_: &ClientInfo) -> Arc<()> {
        Arc::new(())
    }
    fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
        (Tally, ())
    }
    fn exec(_: &(), _: &(), _: u64, t: &mut Vec<()>) {
        t.push(())
    }
    fn regs(_: &(), _: &(), _: u64, _: &[u8], t: &mut Vec<()>) {
        t.push(())
    }
    fn branch(_: &(), _: &(), _: u64, _: bool, _: &[u8], t: &mut Vec<()>) {
        t.push(())
    }
    fn read(_: &(), _: &(), _: u64, _: u64, _: u64, _: u8, t: &mut Vec<()>) {
        t.push(())
    }
    fn write(_: &(), _: &(), _: u64, _: u64, _: u64, _: u8, t: &mut Vec<()>) {
        t.push(())
    }
    fn read_wide(_: &(), _: &(), _: u64, _: u64, _: u128, _: u8, t: &mut Vec<()>) {
        t.push(())
    }
    fn write_wide(_: &(), _: &(), _: u64, _: u64, _: u128, _: u8, t: &mut Vec<()>) {
        t.push(())
    }
    fn block(_: &(), _: &(), _: u64, _: &[u8], t: &mut Vec<()>) {
        t.push(())
    }
    fn mmap(
        _: &(),
        _: &(),
        _: u64,
        _: u64,
        _: bool,
        _: bool,
        _: bool,
        _: bool,
        _: &str,
        _: u64,
        t: &mut Vec<()>,
    ) {
        t.push(())
    }
    fn munmap(_: &(), _: &(), _: u64, _: u64, t: &mut Vec<()>) {
        t.push(())
    }
    fn mprotect(_: &(), _: &(), _: u64, _: u64, _: bool, _: bool, _: bool, t: &mut Vec<()>) {
        t.push(())
    }
    fn syscall(_: &(), _: &(), _: &Syscall<'_>, t: &mut Vec<()>) {
        t.push(())
    }
    fn signal(_: &(), _: &(), _: &Signal, t: &mut Vec<()>) {
        t.push(())
    }
}

/// An event as the callbacks saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ev {
    Exec(u64),
    Read(u64, u64, u64, u8),
    Write(u64, u64, u64, u8),
    ReadWide(u64, u64, u128),
    WriteWide(u64, u64, u128),
    Regs(u64, Vec<u8>),
    Branch(u64, bool, Vec<u8>),
    Block(u64, Vec<u8>),
    Mmap(u64, u64, u8, String, u64),
    Munmap(u64, u64),
    Mprotect(u64, u64, u8),
    Syscall {
        num: u64,
        name: Option<String>,
        args: [u64; 6],
        ret: Option<i64>,
        data: Vec<u8>,
        total: u64,
    },
    Signal(i32, i32, u64, Option<u64>),
}

/// Records every callback.
pub struct Rec;

fn flags(anon: bool, r: bool, w: bool, x: bool) -> u8 {
    (anon as u8) << 3 | (x as u8) << 2 | (w as u8) << 1 | r as u8
}

impl Cannoli for Rec {
    type Trace = Ev;
    type TidContext = ();
    type PidContext = ();
    fn init_pid(_: &ClientInfo) -> Arc<()> {
        Arc::new(())
    }
    fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
        (Rec, ())
    }
    fn exec(_: &(), _: &(), pc: u64, t: &mut Vec<Ev>) {
        t.push(Ev::Exec(pc))
    }
    fn regs(_: &(), _: &(), pc: u64, r: &[u8], t: &mut Vec<Ev>) {
        t.push(Ev::Regs(pc, r.to_vec()))
    }
    fn branch(_: &(), _: &(), pc: u64, b: bool, r: &[u8], t: &mut Vec<Ev>) {
        t.push(Ev::Branch(pc, b, r.to_vec()))
    }
    fn read(_: &(), _: &(), pc: u64, a: u64, v: u64, s: u8, t: &mut Vec<Ev>) {
        t.push(Ev::Read(pc, a, v, s))
    }
    fn write(_: &(), _: &(), pc: u64, a: u64, v: u64, s: u8, t: &mut Vec<Ev>) {
        t.push(Ev::Write(pc, a, v, s))
    }
    fn read_wide(_: &(), _: &(), pc: u64, a: u64, v: u128, s: u8, t: &mut Vec<Ev>) {
        assert_eq!(s, 16);
        t.push(Ev::ReadWide(pc, a, v))
    }
    fn write_wide(_: &(), _: &(), pc: u64, a: u64, v: u128, s: u8, t: &mut Vec<Ev>) {
        assert_eq!(s, 16);
        t.push(Ev::WriteWide(pc, a, v))
    }
    fn block(_: &(), _: &(), pc: u64, lens: &[u8], t: &mut Vec<Ev>) {
        t.push(Ev::Block(pc, lens.to_vec()))
    }
    fn mmap(
        _: &(),
        _: &(),
        base: u64,
        len: u64,
        anon: bool,
        r: bool,
        w: bool,
        x: bool,
        path: &str,
        off: u64,
        t: &mut Vec<Ev>,
    ) {
        t.push(Ev::Mmap(base, len, flags(anon, r, w, x), path.into(), off))
    }
    fn munmap(_: &(), _: &(), base: u64, len: u64, t: &mut Vec<Ev>) {
        t.push(Ev::Munmap(base, len))
    }
    fn mprotect(_: &(), _: &(), base: u64, len: u64, r: bool, w: bool, x: bool, t: &mut Vec<Ev>) {
        t.push(Ev::Mprotect(base, len, flags(false, r, w, x)))
    }
    fn syscall(_: &(), _: &(), sc: &Syscall<'_>, t: &mut Vec<Ev>) {
        t.push(Ev::Syscall {
            num: sc.num,
            name: sc.name.map(Into::into),
            args: sc.args,
            ret: sc.ret,
            data: sc.data.to_vec(),
            total: sc.data_total,
        })
    }
    fn signal(_: &(), _: &(), s: &Signal, t: &mut Vec<Ev>) {
        t.push(Ev::Signal(s.signo, s.code, s.fault_addr, s.handler))
    }
}

// ---------------------------------------------------------------------------
// The reference reading
// ---------------------------------------------------------------------------

/// What [`reference`] found.
#[derive(Debug, Default)]
pub struct Reading {
    pub events: Vec<Ev>,
    /// Words of the delivered events.
    pub event_words: usize,
    /// Unknown frames skipped, their words, the first one's tag.
    pub skipped: u64,
    pub skipped_words: usize,
    pub skipped_tag: Option<u8>,
    /// Offset and skipped bytes of the malformed rest.
    pub error: Option<(usize, usize)>,
    /// Words of run and cut events (they stand for the block instructions
    /// among `events`, or for nothing).
    pub block_words: usize,
    /// The word each event (run and cut events too) starts at: where the
    /// chunk may be cut in two.
    pub starts: Vec<usize>,
}

/// The pc an event of an instruction carries, if it is one (exec, memory,
/// registers): the events placed in the running block.
fn insn_pc(e: &Ev) -> Option<u64> {
    match *e {
        Ev::Exec(pc)
        | Ev::Read(pc, ..)
        | Ev::Write(pc, ..)
        | Ev::ReadWide(pc, ..)
        | Ev::WriteWide(pc, ..)
        | Ev::Regs(pc, _)
        | Ev::Branch(pc, ..) => Some(pc),
        _ => None,
    }
}

/// The running block of the reference reading: its entry in
/// `fuzzing::fake_table()` and the first instruction not reported yet.
type Running = Option<(&'static wire::blocks::Entry, usize)>;

/// Reports the instructions `from..to` of `e` whose exec bit is set.
fn expand(e: &wire::blocks::Entry, from: usize, to: usize, out: &mut Vec<Ev>) {
    for k in from..to {
        if e.is_exec(k) {
            out.push(Ev::Exec(e.pcs[k]));
        }
    }
}

/// The running block ran to its end.
fn close(run: &mut Running, out: &mut Vec<Ev>) {
    if let Some((e, next)) = run.take() {
        expand(e, next, e.pcs.len(), out);
    }
}

/// An event of the instruction at `pc` (before the event itself), or a
/// cut at `pc`, as `wire/src/lib.rs`'s Blocks section describes them.
fn place(run: &mut Running, pc: u64, is_cut: bool, out: &mut Vec<Ev>) {
    let Some((e, next)) = *run else { return };
    if let Some(j) = (next..e.pcs.len()).find(|&j| e.pcs[j] == pc) {
        expand(e, next, j + 1, out);
        *run = if is_cut { None } else { Some((e, j + 1)) };
    } else if next > 0 && e.pcs[next - 1] == pc {
        if is_cut {
            *run = None;
        }
    } else {
        // Not in the block (a cut of a block with no run event): the
        // block ran to its end.
        close(run, out);
    }
}

/// Reads a chunk word by word as the wire format documents it (the tables
/// in `wire/src/lib.rs`), independently of the decoder's fast paths.
pub fn reference(chunk: &[u8], bits: u32, reg_words: usize) -> Reading {
    let amask = if bits == 0 || bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let vmask = |lg: u8| -> u64 {
        if lg >= 3 {
            u64::MAX
        } else {
            (1u64 << (8 << lg)) - 1
        }
    };
    let whole = chunk.len() / 8 * 8;
    let w: Vec<u64> = chunk[..whole]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let n = w.len();
    let mut r = Reading::default();
    let mut i = 0;
    let mem = |t: u8, pc: u64, addr: u64, val: u64| -> Ev {
        let lg = t & 3;
        let (a, v, s) = (addr & amask, val & vmask(lg), 1u8 << lg);
        if t & 8 == 0 {
            Ev::Read(pc, a, v, s)
        } else {
            Ev::Write(pc, a, v, s)
        }
    };
    let wide = |t: u8, pc: u64, addr: u64, lo: u64, hi: u64| -> Ev {
        let v = (hi as u128) << 64 | lo as u128;
        if t == tag::LOAD128 {
            Ev::ReadWide(pc, addr & amask, v)
        } else {
            Ev::WriteWide(pc, addr & amask, v)
        }
    };
    let table = cannoli::fuzzing::fake_table();
    let mut run: Running = None;
    while i < n {
        let first = w[i];
        let t = (first >> 56) as u8;
        let left = n - i;
        r.starts.push(i);
        // Run and cut events.
        let pc = first & PC_MASK;
        let block_event = match t {
            tag::RUN if pc == wire::blocks::NO_ENTRY => Some(Some(None)),
            tag::RUN => Some(table.get(pc as usize).map(Some)),
            tag::CUT => Some(Some(None)),
            tag::CUT_LONG => Some((left >= 2).then_some(None)),
            _ => None,
        };
        match block_event {
            Some(Some(opened)) => {
                let len = if t == tag::CUT_LONG { 2 } else { 1 };
                if t == tag::RUN {
                    close(&mut run, &mut r.events);
                    run = opened.map(|e| (e, 0));
                } else {
                    place(
                        &mut run,
                        if len == 2 { w[i + 1] } else { pc },
                        true,
                        &mut r.events,
                    );
                }
                r.block_words += len;
                i += len;
                continue;
            }
            Some(None) => {
                close(&mut run, &mut r.events);
                r.error = Some((i * 8, chunk.len() - i * 8));
                return r;
            }
            None => {}
        }
        // (event, its words) or None for a malformed event.
        let ev: Option<(Option<Ev>, usize)> = match t {
            tag::EXEC => Some((Some(Ev::Exec(first)), 1)),
            tag::EXEC_LONG => (left >= 2).then(|| (Some(Ev::Exec(w[i + 1])), 2)),
            0x10..=0x13 | 0x18..=0x1b => {
                (left >= 3).then(|| (Some(mem(t, first & PC_MASK, w[i + 1], w[i + 2])), 3))
            }
            0x14..=0x16 | 0x1c..=0x1e => (left >= 2).then(|| {
                let av = w[i + 1];
                (Some(mem(t, first & PC_MASK, av & 0xffff_ffff, av >> 32)), 2)
            }),
            tag::LOAD128 | tag::STORE128 => (left >= 4).then(|| {
                (
                    Some(wide(t, first & PC_MASK, w[i + 1], w[i + 2], w[i + 3])),
                    4,
                )
            }),
            tag::MEM_LONG => {
                let kind = first as u8;
                if left < 4 {
                    None
                } else if kind == tag::LOAD128 || kind == tag::STORE128 {
                    (left >= 5)
                        .then(|| (Some(wide(kind, w[i + 1], w[i + 2], w[i + 3], w[i + 4])), 5))
                } else if matches!(kind, 0x10..=0x13 | 0x18..=0x1b) {
                    Some((Some(mem(kind, w[i + 1], w[i + 2], w[i + 3])), 4))
                } else {
                    None
                }
            }
            t if t >= tag::FRAMED => framed(&w[i..], &chunk[i * 8..whole], amask, reg_words),
            _ => None,
        };
        match ev {
            Some((Some(e), len)) => {
                match insn_pc(&e) {
                    Some(pc) => place(&mut run, pc, false, &mut r.events),
                    None => close(&mut run, &mut r.events),
                }
                r.events.push(e);
                r.event_words += len;
                i += len;
            }
            Some((None, len)) => {
                close(&mut run, &mut r.events);
                r.skipped += 1;
                r.skipped_tag.get_or_insert(t);
                r.skipped_words += len;
                i += len;
            }
            None => {
                close(&mut run, &mut r.events);
                r.error = Some((i * 8, chunk.len() - i * 8));
                return r;
            }
        }
    }
    // The end of the stream (of this one chunk).
    close(&mut run, &mut r.events);
    if whole != chunk.len() {
        r.error = Some((whole, chunk.len() - whole));
    }
    r
}

/// A framed event at the start of `w` (`b`: the same as bytes, to the end
/// of the chunk): `Some((Some(event), len))`, `Some((None, len))` for an
/// unknown tag, `None` if malformed.
fn framed(w: &[u64], b: &[u8], m: u64, reg_words: usize) -> Option<(Option<Ev>, usize)> {
    let first = w[0];
    let t = (first >> 56) as u8;
    let aux = ((first >> 32) & 0xff_ffff) as u32;
    let len = first as u32 as u64;
    // Fewest words (header and fixed fields) each known kind has.
    let min: u64 = match t {
        tag::REGS => 2 + reg_words as u64,
        tag::SYSCALL => 11,
        tag::MMAP => 5,
        tag::MUNMAP | tag::MPROTECT => 3,
        tag::SIGNAL => 5,
        tag::BLOCK => 2,
        _ => 1,
    };
    if len < min || len > w.len() as u64 {
        return None;
    }
    let len = len as usize;
    let f = &w[..len];
    // `n` payload bytes from word `at`, inside the frame.
    let payload = |at: usize, n: u64| -> Option<&[u8]> {
        let words = n.div_ceil(8);
        if at as u64 + words > len as u64 {
            return None;
        }
        Some(&b[at * 8..at * 8 + n as usize])
    };
    let rwx = |a: u32| (a & 7) as u8;
    let ev = match t {
        tag::REGS => {
            let regs = b[16..16 + reg_words * 8].to_vec();
            match aux {
                0 => Ev::Regs(f[1], regs),
                1 | 2 => Ev::Branch(f[1], aux == 2, regs),
                _ => return None,
            }
        }
        tag::SYSCALL => Ev::Syscall {
            num: f[1],
            name: names().get(&f[1]).cloned(),
            args: [f[3], f[4], f[5], f[6], f[7], f[8]].map(|a| a & m),
            ret: (aux & 1 != 0).then_some(f[2] as i64),
            data: payload(11, f[9])?.to_vec(),
            total: f[10],
        },
        tag::MMAP => Ev::Mmap(
            f[1] & m,
            f[2],
            rwx(aux) | (aux & 8) as u8,
            String::from_utf8_lossy(payload(5, f[4])?).into_owned(),
            f[3],
        ),
        tag::MUNMAP => Ev::Munmap(f[1] & m, f[2]),
        tag::MPROTECT => Ev::Mprotect(f[1] & m, f[2], rwx(aux)),
        tag::SIGNAL => Ev::Signal(
            f[1] as i32,
            f[2] as i32,
            f[3] & m,
            (f[4] != 0).then_some(f[4] & m),
        ),
        tag::BLOCK => Ev::Block(f[1] & m, payload(2, aux as u64)?.to_vec()),
        _ => return Some((None, len)),
    };
    Some((Some(ev), len))
}

// ---------------------------------------------------------------------------
// Structured inputs
// ---------------------------------------------------------------------------

/// One event (or one deliberately wrong word) of a structured input.
#[derive(Debug, Arbitrary)]
enum Piece {
    Execs {
        n: u8,
        base: u32,
        step: u8,
    },
    ExecLong(u64),
    Mem {
        store: bool,
        lg: u8,
        pc: u64,
        addr: u64,
        val: u64,
    },
    Mem32 {
        store: bool,
        lg: u8,
        pc: u32,
        addr: u32,
        val: u32,
    },
    Wide {
        store: bool,
        pc: u64,
        addr: u64,
        lo: u64,
        hi: u64,
    },
    MemLong {
        kind: u8,
        pc: u64,
        addr: u64,
        val: u64,
        hi: u64,
    },
    Regs {
        kind: u8,
        pc: u64,
        fill: u64,
        extra: u8,
    },
    Syscall {
        num: u16,
        ret: i64,
        returned: bool,
        args: [u64; 6],
        data: Vec<u8>,
        total: u16,
    },
    Mmap {
        flags: u8,
        base: u64,
        len: u64,
        off: u64,
        path: Vec<u8>,
    },
    Munmap {
        base: u64,
        len: u64,
    },
    Mprotect {
        flags: u8,
        base: u64,
        len: u64,
    },
    Signal {
        signo: i32,
        code: i32,
        addr: u64,
        handler: u64,
    },
    Block {
        pc: u64,
        lens: Vec<u8>,
    },
    Unknown {
        tag: u8,
        aux: u32,
        words: Vec<u64>,
    },
    /// A frame whose length field is anything.
    BadFrame {
        tag: u8,
        aux: u32,
        len: u32,
        words: Vec<u64>,
    },
    Raw(u64),
    /// A run event: `id` modulo the fake table's length plus two (the
    /// length itself: an unknown block; plus one: `NO_ENTRY`).
    Run(u8),
    /// A cut at instruction `k` of block `id` of the fake table.
    Cut {
        id: u8,
        k: u16,
        long: bool,
    },
    /// An exec (`kind` 0), load (1) or store (2) event of instruction `k`
    /// of block `id` of the fake table.
    InBlock {
        id: u8,
        k: u16,
        kind: u8,
    },
}

/// The pc of instruction `k` of block `id` of the fake table.
fn table_pc(id: u8, k: u16) -> u64 {
    let t = cannoli::fuzzing::fake_table();
    let pcs = &t[id as usize % t.len()].pcs;
    pcs[k as usize % pcs.len()]
}

/// A change to the bytes after the events are laid out.
#[derive(Debug, Arbitrary)]
enum Damage {
    FlipBit { at: u16, bit: u8 },
    SetByte { at: u16, val: u8 },
    SetTop { word: u16, tag: u8 },
    Cut { keep: u16 },
}

fn push_payload(w: &mut Vec<u64>, bytes: &[u8]) {
    for c in bytes.chunks(8) {
        let mut x = [0u8; 8];
        x[..c.len()].copy_from_slice(c);
        w.push(u64::from_le_bytes(x));
    }
}

fn top(t: u8) -> u64 {
    (t as u64) << 56
}

/// Lays out the events `u` describes, then damages them as it says.
fn build(u: &mut Unstructured<'_>, s: &Stream) -> Vec<u8> {
    let pieces: Vec<Piece> = u.arbitrary().unwrap_or_default();
    let damage: Vec<Damage> = u.arbitrary().unwrap_or_default();
    let regs = (s.reg_count as usize).min(300);
    let mut w: Vec<u64> = Vec::new();
    for p in pieces {
        match p {
            Piece::Execs { n, base, step } => {
                for k in 0..n as u64 {
                    w.push(base as u64 + k * step as u64);
                }
            }
            Piece::ExecLong(pc) => w.extend([top(tag::EXEC_LONG), pc]),
            Piece::Mem {
                store,
                lg,
                pc,
                addr,
                val,
            } => w.extend([top(wire::mem_tag(store, lg % 4)) | pc & PC_MASK, addr, val]),
            Piece::Mem32 {
                store,
                lg,
                pc,
                addr,
                val,
            } => w.extend([
                top(wire::mem32_tag(store, lg % 3)) | pc as u64,
                addr as u64 | (val as u64) << 32,
            ]),
            Piece::Wide {
                store,
                pc,
                addr,
                lo,
                hi,
            } => w.extend([top(wire::mem_tag(store, 4)) | pc & PC_MASK, addr, lo, hi]),
            Piece::MemLong {
                kind,
                pc,
                addr,
                val,
                hi,
            } => {
                w.extend([top(tag::MEM_LONG) | kind as u64, pc, addr, val]);
                if kind == tag::LOAD128 || kind == tag::STORE128 {
                    w.push(hi);
                }
            }
            Piece::Regs {
                kind,
                pc,
                fill,
                extra,
            } => {
                let n = regs + (extra % 3) as usize;
                w.push(wire::frame(tag::REGS, (kind % 4) as u32, (2 + n) as u32));
                w.push(pc);
                w.extend((0..n as u64).map(|k| fill ^ k));
            }
            Piece::Syscall {
                num,
                ret,
                returned,
                args,
                data,
                total,
            } => {
                let len = wire::framed_len(11, data.len());
                w.push(wire::frame(tag::SYSCALL, returned as u32, len as u32));
                w.extend([num as u64, ret as u64]);
                w.extend(args);
                w.extend([data.len() as u64, total as u64]);
                push_payload(&mut w, &data);
            }
            Piece::Mmap {
                flags,
                base,
                len,
                off,
                path,
            } => {
                let n = wire::framed_len(5, path.len());
                w.push(wire::frame(tag::MMAP, (flags & 31) as u32, n as u32));
                w.extend([base, len, off, path.len() as u64]);
                push_payload(&mut w, &path);
            }
            Piece::Munmap { base, len } => w.extend([wire::frame(tag::MUNMAP, 0, 3), base, len]),
            Piece::Mprotect { flags, base, len } => {
                w.extend([wire::frame(tag::MPROTECT, (flags & 7) as u32, 3), base, len])
            }
            Piece::Signal {
                signo,
                code,
                addr,
                handler,
            } => w.extend([
                wire::frame(tag::SIGNAL, 0, 5),
                signo as u32 as u64,
                code as u32 as u64,
                addr,
                handler,
            ]),
            Piece::Block { pc, lens } => {
                let n = wire::framed_len(2, lens.len());
                w.push(wire::frame(tag::BLOCK, lens.len() as u32, n as u32));
                w.push(pc);
                push_payload(&mut w, &lens);
            }
            Piece::Unknown { tag: t, aux, words } => {
                let t = 0x27 + t % (0x100 - 0x27) as u8;
                w.push(wire::frame(t, aux & 0xff_ffff, 1 + words.len() as u32));
                w.extend(words);
            }
            Piece::BadFrame {
                tag: t,
                aux,
                len,
                words,
            } => {
                let t = tag::FRAMED.saturating_add(t % 0x10);
                w.push(top(t) | ((aux & 0xff_ffff) as u64) << 32 | len as u64);
                w.extend(words);
            }
            Piece::Raw(x) => w.push(x),
            Piece::Run(id) => {
                let len = cannoli::fuzzing::fake_table().len() as u64;
                let id = id as u64 % (len + 2);
                w.push(
                    top(tag::RUN)
                        | if id == len + 1 {
                            wire::blocks::NO_ENTRY
                        } else {
                            id
                        },
                );
            }
            Piece::Cut { id, k, long } => {
                let pc = table_pc(id, k);
                if long {
                    w.extend([top(tag::CUT_LONG), pc]);
                } else {
                    w.push(top(tag::CUT) | pc);
                }
            }
            Piece::InBlock { id, k, kind } => {
                let pc = table_pc(id, k);
                match kind % 3 {
                    0 => w.push(pc),
                    k => w.extend([top(wire::mem_tag(k == 2, 2)) | pc, 0x1000, 0x2000]),
                }
            }
        }
        if w.len() > 1 << 16 {
            break;
        }
    }
    let mut b: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
    for d in damage {
        if b.is_empty() {
            break;
        }
        match d {
            Damage::FlipBit { at, bit } => {
                let i = at as usize % b.len();
                b[i] ^= 1 << (bit % 8);
            }
            Damage::SetByte { at, val } => {
                let i = at as usize % b.len();
                b[i] = val;
            }
            Damage::SetTop { word, tag } => {
                let words = b.len() / 8;
                if words > 0 {
                    b[(word as usize % words) * 8 + 7] = tag;
                }
            }
            Damage::Cut { keep } => {
                let k = keep as usize % (b.len() + 1);
                b.truncate(k);
            }
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(bits: u32, reg_count: u32) -> Stream {
        Stream {
            bits,
            reg_count,
            big_endian: false,
            misalign: 0,
        }
    }

    #[test]
    fn reference_reads_the_documented_events() {
        let words = [
            0x400000,
            top(wire::mem32_tag(true, 2)) | 0x400004,
            0x1234_5678_0000_1000,
            wire::frame(tag::MUNMAP, 0, 3),
            0xffff_0000_1000,
            0x2000,
        ];
        let b: Vec<u8> = words.iter().flat_map(|x| x.to_le_bytes()).collect();
        let r = reference(&b, 32, 0);
        assert_eq!(
            r.events,
            vec![
                Ev::Exec(0x400000),
                Ev::Write(0x400004, 0x1000, 0x1234_5678, 4),
                Ev::Munmap(0x1000, 0x2000),
            ]
        );
        assert_eq!((r.event_words, r.error), (6, None));
        check(&stream(32, 0), &b);
    }

    #[test]
    fn damaged_chunks_agree_and_are_accounted() {
        // An unknown frame, then a frame longer than the chunk, then a
        // stray byte.
        let mut w = vec![
            0x10,
            wire::frame(0x30, 7, 2),
            99,
            wire::frame(tag::SIGNAL, 0, 9),
        ];
        w.extend([1, 2, 3]);
        let mut b: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        b.push(0xff);
        for bits in [32, 64] {
            for mis in 0..8 {
                let mut s = stream(bits, 3);
                s.misalign = mis;
                check(&s, &b);
                check(&s, &b[..b.len() - 1]);
                check(&s, &b[..17]);
            }
        }
        let r = reference(&b, 64, 3);
        assert_eq!(
            (r.skipped, r.skipped_tag, r.skipped_words),
            (1, Some(0x30), 2)
        );
        assert_eq!(r.error, Some((24, b.len() - 24)));
    }

    #[test]
    fn registers_with_any_count() {
        for count in [0u32, 1, 32, 256, 300, u32::MAX] {
            let n = count.min(4) as usize;
            let mut w = vec![wire::frame(tag::REGS, 1, (2 + n) as u32), 0x40];
            w.extend((0..n as u64).map(|k| k * 3));
            let b: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
            check(&stream(64, count), &b);
        }
    }
}
