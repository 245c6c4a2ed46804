//! The hot loop: turns one chunk of wire events into calls of the tool's
//! parallel callbacks.
//!
//! Monomorphized over the tool (`T: Cannoli`), so every callback is a direct
//! (usually inlined) call. Each event costs one load of its first word and one
//! compare on the common path: an exec event is the bare pc, i.e. any word
//! whose top byte is zero.
//!
//! To add an event: give it a tag in `wire::tag`, add a match arm in
//! [`decode_words`] that checks it has enough words, calls the callback and
//! advances `i` (adding the words after the first to `extra`), and a test.

use crate::Cannoli;
use wire::{tag, PC_BITS, PC_MASK};

/// What went wrong in a chunk. Decoding stops at the first malformed event;
/// the rest of the chunk is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Problem {
    /// The event's tag is not one this client knows.
    UnknownTag,
    /// The event needs `need` words but only `have` are left in the chunk.
    Truncated { need: usize, have: usize },
    /// A `MEM_LONG` event whose kind byte is not a load or store tag.
    BadMemKind(u8),
    /// The chunk's length is not a multiple of 8: `len % 8` stray bytes at
    /// the end.
    TrailingBytes(usize),
}

/// A malformed spot in a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed {
    /// Byte offset of the bad event in the chunk.
    pub offset: usize,
    /// Its tag (top byte of its first word).
    pub tag: u8,
    pub problem: Problem,
    /// Bytes skipped from `offset` to the end of the chunk.
    pub skipped_bytes: usize,
}

impl Malformed {
    /// Events lost by skipping the rest of the chunk, counted as one per
    /// skipped word (an upper bound: every event is at least one word, and
    /// almost all are exec events of exactly one), at least 1.
    pub fn lost_events(&self) -> u64 {
        ((self.skipped_bytes / 8) as u64).max(1)
    }
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.problem {
            Problem::UnknownTag => write!(f, "unknown event tag {:#04x}", self.tag)?,
            Problem::Truncated { need, have } => write!(
                f,
                "event with tag {:#04x} needs {need} words but the chunk ends after {have}",
                self.tag
            )?,
            Problem::BadMemKind(k) => write!(
                f,
                "long memory event (tag {:#04x}) has kind {k:#04x}, which is neither a load nor a store",
                self.tag
            )?,
            Problem::TrailingBytes(n) => write!(f, "chunk length is not a multiple of 8 ({n} stray bytes at the end)")?,
        }
        write!(
            f,
            " at offset {} ({} bytes of the chunk skipped)",
            self.offset, self.skipped_bytes
        )
    }
}

/// Result of decoding one chunk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Decoded {
    /// Events handed to the callbacks.
    pub events: u64,
    pub error: Option<Malformed>,
}

/// Mask selecting the guest address bits.
#[inline]
pub(crate) fn addr_mask(guest_bits: u32) -> u64 {
    if guest_bits == 0 || guest_bits >= 64 {
        u64::MAX
    } else {
        (1u64 << guest_bits) - 1
    }
}

/// Value masks indexed by log2 of the access size.
const VAL_MASK: [u64; 4] = [0xff, 0xffff, 0xffff_ffff, u64::MAX];

/// Decodes one chunk's bytes, calling `T`'s callbacks in order.
///
/// `addr_mask` comes from [`addr_mask`]. Never panics on malformed input: it
/// stops at the first bad event and reports it.
#[inline]
pub(crate) fn decode<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    data: &[u8],
    addr_mask: u64,
    trace: &mut Vec<T::Trace>,
) -> Decoded {
    let whole = data.len() & !7;
    let (body, tail) = data.split_at(whole);

    let mut d = with_words(body, |words| {
        decode_words::<T>(pid, tid, words, addr_mask, trace)
    });
    if d.error.is_none() && !tail.is_empty() {
        d.error = Some(Malformed {
            offset: whole,
            tag: tail.last().copied().unwrap_or(0), // the top byte of a would-be word
            problem: Problem::TrailingBytes(tail.len()),
            skipped_bytes: tail.len(),
        });
    }
    d
}

/// Runs `f` over `bytes` viewed as little-endian `u64` words: in place when
/// the host is little-endian and the bytes are 8-aligned (always the case for
/// mempipe chunks), else over a converted copy.
#[inline(always)]
fn with_words<R>(bytes: &[u8], f: impl FnOnce(&[u64]) -> R) -> R {
    debug_assert!(bytes.len() % 8 == 0);
    #[cfg(target_endian = "little")]
    {
        // SAFETY: every bit pattern is a valid u64; align_to only yields a
        // middle slice that is properly aligned and within `bytes`.
        let (pre, words, post) = unsafe { bytes.align_to::<u64>() };
        if pre.is_empty() && post.is_empty() {
            return f(words);
        }
    }
    let copy: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    f(&copy)
}

/// The decode loop proper, over whole words.
#[inline(always)]
fn decode_words<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    words: &[u64],
    addr_mask: u64,
    trace: &mut Vec<T::Trace>,
) -> Decoded {
    let n = words.len();
    let mut i = 0usize;
    // Words consumed that did not start an event: events = i - extra.
    let mut extra = 0usize;

    while i < n {
        let w = words[i];
        if w <= PC_MASK {
            // Tag 0: exec, the word is the pc.
            T::exec(pid, tid, w, trace);
            i += 1;
            continue;
        }
        let t = (w >> PC_BITS) as u8;
        match t {
            // Loads 0x10..=0x13, stores 0x18..=0x1b.
            0x10..=0x13 | 0x18..=0x1b => {
                if n - i < 3 {
                    return malformed(
                        i,
                        n,
                        extra,
                        t,
                        Problem::Truncated {
                            need: 3,
                            have: n - i,
                        },
                    );
                }
                mem::<T>(
                    pid,
                    tid,
                    t,
                    w & PC_MASK,
                    words[i + 1],
                    words[i + 2],
                    addr_mask,
                    trace,
                );
                i += 3;
                extra += 2;
            }
            tag::EXEC_LONG => {
                if n - i < 2 {
                    return malformed(
                        i,
                        n,
                        extra,
                        t,
                        Problem::Truncated {
                            need: 2,
                            have: n - i,
                        },
                    );
                }
                T::exec(pid, tid, words[i + 1], trace);
                i += 2;
                extra += 1;
            }
            tag::MEM_LONG => {
                if n - i < 4 {
                    return malformed(
                        i,
                        n,
                        extra,
                        t,
                        Problem::Truncated {
                            need: 4,
                            have: n - i,
                        },
                    );
                }
                let kind = w as u8;
                if !matches!(kind, 0x10..=0x13 | 0x18..=0x1b) {
                    return malformed(i, n, extra, t, Problem::BadMemKind(kind));
                }
                mem::<T>(
                    pid,
                    tid,
                    kind,
                    words[i + 1],
                    words[i + 2],
                    words[i + 3],
                    addr_mask,
                    trace,
                );
                i += 4;
                extra += 3;
            }
            _ => return malformed(i, n, extra, t, Problem::UnknownTag),
        }
    }
    Decoded {
        events: (i - extra) as u64,
        error: None,
    }
}

/// A load or store: `t` is its `LOAD`/`STORE` tag.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn mem<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    t: u8,
    pc: u64,
    addr: u64,
    val: u64,
    addr_mask: u64,
    trace: &mut Vec<T::Trace>,
) {
    let lg = (t & 3) as usize;
    let sz = 1u8 << lg;
    let addr = addr & addr_mask;
    let val = val & VAL_MASK[lg];
    if t & 0x08 == 0 {
        T::read(pid, tid, pc, addr, val, sz, trace);
    } else {
        T::write(pid, tid, pc, addr, val, sz, trace);
    }
}

#[cold]
#[inline(never)]
fn malformed(i: usize, n: usize, extra: usize, tag: u8, problem: Problem) -> Decoded {
    Decoded {
        events: (i - extra) as u64,
        error: Some(Malformed {
            offset: i * 8,
            tag,
            problem,
            skipped_bytes: (n - i) * 8,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClientInfo;
    use std::sync::Arc;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Ev {
        Exec(u64),
        Read(u64, u64, u64, u8),
        Write(u64, u64, u64, u8),
    }

    pub struct Rec;
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
            t.push(Ev::Exec(pc));
        }
        fn read(_: &(), _: &(), pc: u64, a: u64, v: u64, s: u8, t: &mut Vec<Ev>) {
            t.push(Ev::Read(pc, a, v, s));
        }
        fn write(_: &(), _: &(), pc: u64, a: u64, v: u64, s: u8, t: &mut Vec<Ev>) {
            t.push(Ev::Write(pc, a, v, s));
        }
    }

    fn bytes(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn run(words: &[u64], bits: u32) -> (Vec<Ev>, Decoded) {
        run_bytes(&bytes(words), bits)
    }

    fn run_bytes(b: &[u8], bits: u32) -> (Vec<Ev>, Decoded) {
        let mut t = Vec::new();
        let d = decode::<Rec>(&(), &(), b, addr_mask(bits), &mut t);
        (t, d)
    }

    fn top(t: u8) -> u64 {
        (t as u64) << 56
    }

    #[test]
    fn exec_events() {
        let (t, d) = run(&[0x400000, 0x400004, 0, PC_MASK], 64);
        assert_eq!(
            t,
            vec![
                Ev::Exec(0x400000),
                Ev::Exec(0x400004),
                Ev::Exec(0),
                Ev::Exec(PC_MASK)
            ]
        );
        assert_eq!(
            d,
            Decoded {
                events: 4,
                error: None
            }
        );
    }

    #[test]
    fn empty_chunk() {
        let (t, d) = run(&[], 32);
        assert!(t.is_empty());
        assert_eq!(
            d,
            Decoded {
                events: 0,
                error: None
            }
        );
    }

    #[test]
    fn all_mem_tags_and_masking() {
        let mut words = Vec::new();
        let mut want = Vec::new();
        for store in [false, true] {
            for lg in 0..4u8 {
                let t = wire::mem_tag(store, lg);
                let pc = 0x1000 + lg as u64;
                // Garbage in the upper bits of addr and value must be masked.
                words.extend([top(t) | pc, 0xdead_beef_0040_1234, 0x1122_3344_5566_7788]);
                let sz = 1u8 << lg;
                let v = [0x88, 0x7788, 0x5566_7788, 0x1122_3344_5566_7788][lg as usize];
                want.push(if store {
                    Ev::Write(pc, 0x0040_1234, v, sz)
                } else {
                    Ev::Read(pc, 0x0040_1234, v, sz)
                });
            }
        }
        let (t, d) = run(&words, 32);
        assert_eq!(t, want);
        assert_eq!(
            d,
            Decoded {
                events: 8,
                error: None
            }
        );

        // 64-bit guests keep the whole address.
        let (t, _) = run(&[top(tag::LOAD | 3) | 0x10, 0xffff_8000_0000_0010, 7], 64);
        assert_eq!(t, vec![Ev::Read(0x10, 0xffff_8000_0000_0010, 7, 8)]);
    }

    #[test]
    fn long_events() {
        let big = 0xff00_0000_0000_1234u64;
        let words = [
            top(tag::EXEC_LONG),
            big,
            0x10,
            top(tag::MEM_LONG) | (tag::STORE | 2) as u64,
            big + 4,
            0xffff_ffff_ffff_fff0,
            0xaaaa_bbbb_cccc_dddd,
            top(tag::MEM_LONG) | (tag::LOAD) as u64,
            big + 8,
            0x20,
            0x1ff,
        ];
        let (t, d) = run(&words, 64);
        assert_eq!(
            t,
            vec![
                Ev::Exec(big),
                Ev::Exec(0x10),
                Ev::Write(big + 4, 0xffff_ffff_ffff_fff0, 0xcccc_dddd, 4),
                Ev::Read(big + 8, 0x20, 0xff, 1),
            ]
        );
        assert_eq!(
            d,
            Decoded {
                events: 4,
                error: None
            }
        );
    }

    #[test]
    fn unknown_tag_stops_and_reports() {
        let words = [0x10, 0x14, top(0x42) | 0x18, 0x1c, 0x20];
        let (t, d) = run(&words, 32);
        assert_eq!(t, vec![Ev::Exec(0x10), Ev::Exec(0x14)]);
        let e = d.error.unwrap();
        assert_eq!(d.events, 2);
        assert_eq!(e.offset, 16);
        assert_eq!(e.tag, 0x42);
        assert_eq!(e.problem, Problem::UnknownTag);
        assert_eq!(e.skipped_bytes, 24);
        assert_eq!(e.lost_events(), 3);
        let msg = e.to_string();
        assert!(msg.contains("0x42") && msg.contains("offset 16"), "{msg}");
    }

    #[test]
    fn truncated_events() {
        // Load with only addr, no value.
        let (t, d) = run(&[0x10, top(tag::LOAD | 2) | 0x14, 0x1000], 32);
        assert_eq!(t, vec![Ev::Exec(0x10)]);
        let e = d.error.unwrap();
        assert_eq!(
            (e.offset, e.tag, e.problem),
            (8, 0x12, Problem::Truncated { need: 3, have: 2 })
        );

        let (t, d) = run(&[top(tag::EXEC_LONG)], 64);
        assert!(t.is_empty());
        assert_eq!(
            d.error.unwrap().problem,
            Problem::Truncated { need: 2, have: 1 }
        );

        let (_, d) = run(&[top(tag::MEM_LONG) | 0x18, 1, 2], 64);
        assert_eq!(
            d.error.unwrap().problem,
            Problem::Truncated { need: 4, have: 3 }
        );
    }

    #[test]
    fn bad_mem_long_kind() {
        let (t, d) = run(&[0x8, top(tag::MEM_LONG) | 0x05, 1, 2, 3], 64);
        assert_eq!(t, vec![Ev::Exec(0x8)]);
        let e = d.error.unwrap();
        assert_eq!(e.problem, Problem::BadMemKind(5));
        assert_eq!(e.offset, 8);
        assert!(e.to_string().contains("neither a load nor a store"));
    }

    #[test]
    fn trailing_bytes() {
        let mut b = bytes(&[0x10, 0x14]);
        b.extend([1, 2, 3]);
        let (t, d) = run_bytes(&b, 32);
        assert_eq!(t, vec![Ev::Exec(0x10), Ev::Exec(0x14)]);
        let e = d.error.unwrap();
        assert_eq!(e.problem, Problem::TrailingBytes(3));
        assert_eq!(e.offset, 16);
        assert_eq!(e.lost_events(), 1);
    }

    #[test]
    fn unaligned_input_is_decoded_too() {
        let b = bytes(&[0x10, top(tag::STORE) | 0x14, 0x100, 0x1ff, 0x18]);
        let mut storage = vec![0u8; b.len() + 1];
        storage[1..].copy_from_slice(&b);
        let (t, d) = run_bytes(&storage[1..], 32);
        assert_eq!(
            t,
            vec![
                Ev::Exec(0x10),
                Ev::Write(0x14, 0x100, 0xff, 1),
                Ev::Exec(0x18)
            ]
        );
        assert_eq!(d.events, 3);
    }

    #[test]
    fn addr_masks() {
        assert_eq!(addr_mask(32), 0xffff_ffff);
        assert_eq!(addr_mask(64), u64::MAX);
        assert_eq!(addr_mask(0), u64::MAX);
        assert_eq!(addr_mask(48), 0xffff_ffff_ffff);
    }

    /// Decode speed of exec events. Run with
    /// `cargo test -p cannoli --release -- --ignored --nocapture decode_speed`.
    #[test]
    #[ignore]
    fn decode_speed() {
        use std::time::Instant;

        struct Count;
        impl Cannoli for Count {
            type Trace = u64;
            type TidContext = ();
            type PidContext = ();
            fn init_pid(_: &ClientInfo) -> Arc<()> {
                Arc::new(())
            }
            fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
                (Count, ())
            }
            fn exec(_: &(), _: &(), pc: u64, t: &mut Vec<u64>) {
                t.push(pc);
            }
        }
        struct Nothing;
        impl Cannoli for Nothing {
            type Trace = ();
            type TidContext = std::sync::atomic::AtomicU64;
            type PidContext = ();
            fn init_pid(_: &ClientInfo) -> Arc<()> {
                Arc::new(())
            }
            fn init_tid(_: &(), _: &ClientInfo) -> (Self, Self::TidContext) {
                (Nothing, Default::default())
            }
        }

        // 1 MiB chunk: exec events with a load every 8th instruction.
        let mut words = Vec::new();
        let mut pc = 0x400000u64;
        while words.len() + 3 < (1 << 17) {
            words.push(pc);
            if pc % 32 == 0 {
                words.extend([top(tag::LOAD | 2) | pc, 0x7ffe_0000 + pc % 4096, pc]);
            }
            pc += 4;
        }
        let mut pure = vec![0u64; 1 << 17];
        for (i, w) in pure.iter_mut().enumerate() {
            *w = 0x400000 + 4 * i as u64;
        }
        for (name, words) in [("exec+loads", &words), ("exec only", &pure)] {
            let b = bytes(words);
            let mut t = Vec::with_capacity(words.len());
            let rounds = 2000;
            let start = Instant::now();
            let mut ev = 0;
            for _ in 0..rounds {
                t.clear();
                let d =
                    decode::<Count>(&(), &(), std::hint::black_box(&b), u32::MAX as u64, &mut t);
                ev += d.events;
                std::hint::black_box(&t);
            }
            let s = start.elapsed().as_secs_f64();
            eprintln!(
                "{name}, push pc: {:.2} G events/s ({:.2} GB/s)",
                ev as f64 / s / 1e9,
                (b.len() * rounds) as f64 / s / 1e9
            );

            let start = Instant::now();
            let mut ev = 0;
            let mut t2 = Vec::new();
            for _ in 0..rounds {
                let d = decode::<Nothing>(
                    &(),
                    &Default::default(),
                    std::hint::black_box(&b),
                    u32::MAX as u64,
                    &mut t2,
                );
                ev += d.events;
            }
            let s = start.elapsed().as_secs_f64();
            eprintln!(
                "{name}, empty callbacks: {:.2} G events/s",
                ev as f64 / s / 1e9
            );
        }
    }
}
