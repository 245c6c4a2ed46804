//! The hot loop: turns one chunk of wire events into calls of the tool's
//! parallel callbacks.
//!
//! Monomorphized over the tool (`T: Cannoli`), so every callback is a direct
//! (usually inlined) call. Each event costs one load of its first word and one
//! compare on the common path: an exec event is the bare pc, i.e. any word
//! whose top byte is zero.
//!
//! The rare framed events (tags from `0x20` on: registers, syscalls,
//! mappings, signals) are decoded out of line in [`framed`], after every
//! JIT event kind has been tried. A framed tag this client does not know is
//! skipped whole (its frame says how long it is) and counted in
//! [`Decoded::skipped`], so an older client can read a newer QEMU side's
//! stream.
//!
//! To add a JIT event: give it a tag in `wire::tag`, add a match arm in
//! [`decode_words`] that checks it has enough words, calls the callback and
//! advances `i` (adding the words after the first to `extra`), and a test.
//! To add a framed event: a tag from `0x27` on, its minimum length in
//! [`frame_min`], a match arm in [`framed`], and a test.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::{Cannoli, ClientInfo, Signal, Syscall};
use wire::{map_flags, tag, PC_BITS, PC_MASK};

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
    /// A framed event `len` words long that needs at least `min` words (for
    /// its fixed fields, registers, or the byte payload its length field
    /// announces).
    ShortFrame { len: u32, min: u64 },
    /// A registers event whose `aux` is not a `wire::RegsKind`.
    BadRegsKind(u32),
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
            Problem::ShortFrame { len, min } => write!(
                f,
                "framed event with tag {:#04x} is {len} words long but needs at least {min}",
                self.tag
            )?,
            Problem::BadRegsKind(k) => write!(
                f,
                "registers event (tag {:#04x}) has kind {k}, which is none of regs (0), branch-no (1), branch-yes (2)",
                self.tag
            )?,
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
    /// Framed events of unknown tags, skipped.
    pub skipped: u64,
    /// The tag of the first of them.
    pub skipped_tag: Option<u8>,
    pub error: Option<Malformed>,
}

/// What decoding needs to know about a stream, from its [`ClientInfo`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout<'a> {
    /// From [`addr_mask`].
    pub addr_mask: u64,
    /// Register words in a registers event.
    pub reg_words: usize,
    pub syscall_names: &'a BTreeMap<u64, String>,
}

impl<'a> Layout<'a> {
    pub fn new(ci: &'a ClientInfo) -> Layout<'a> {
        Layout {
            addr_mask: addr_mask(ci.guest_bits),
            reg_words: ci.regs.count as usize,
            syscall_names: &ci.syscall_names,
        }
    }
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
/// Never panics on malformed input: it stops at the first bad event and
/// reports it.
#[inline]
pub(crate) fn decode<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    data: &[u8],
    lay: &Layout<'_>,
    trace: &mut Vec<T::Trace>,
) -> Decoded {
    let whole = data.len() & !7;
    let (body, tail) = data.split_at(whole);

    let mut d = with_words(body, |words| {
        decode_words::<T>(pid, tid, words, body, lay, trace)
    });
    match &mut d.error {
        // The stray bytes after the last whole word are skipped too: a
        // malformed event's `skipped_bytes` runs to the end of the chunk.
        Some(m) => m.skipped_bytes += tail.len(),
        None if !tail.is_empty() => {
            d.error = Some(Malformed {
                offset: whole,
                tag: tail.last().copied().unwrap_or(0), // the top byte of a would-be word
                problem: Problem::TrailingBytes(tail.len()),
                skipped_bytes: tail.len(),
            })
        }
        None => {}
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

/// The decode loop proper, over whole words. `bytes` are the same words as
/// little-endian bytes (for the byte payloads of framed events).
#[inline(always)]
fn decode_words<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    words: &[u64],
    bytes: &[u8],
    lay: &Layout<'_>,
    trace: &mut Vec<T::Trace>,
) -> Decoded {
    debug_assert_eq!(words.len() * 8, bytes.len());
    let addr_mask = lay.addr_mask;
    let n = words.len();
    let mut i = 0usize;
    // Words consumed that did not start a delivered event: events = i - extra.
    let mut extra = 0usize;
    let mut skipped = Skipped::default();
    macro_rules! malformed {
        ($t:expr, $problem:expr $(,)?) => {
            return malformed(i, n, extra, skipped, $t, $problem)
        };
    }

    'events: while i < n {
        // Runs of exec events are the bulk of every trace: take eight words
        // at once when none of them has a tag (one OR-reduction and one
        // compare for eight events).
        if let Some(run) = words.get(i..i + 8) {
            let run: &[u64; 8] = run.try_into().expect("eight words");
            if run.iter().fold(0, |a, &w| a | w) <= PC_MASK {
                for &pc in run {
                    T::exec(pid, tid, pc, trace);
                }
                i += 8;
                continue;
            }
        }
        // A tagged word is near: step through exec events (tag 0, the word
        // is the pc) up to it, then decode it, before looking ahead again.
        let mut w = words[i];
        while w <= PC_MASK {
            T::exec(pid, tid, w, trace);
            i += 1;
            if i == n {
                break 'events;
            }
            w = words[i];
        }
        let t = (w >> PC_BITS) as u8;
        match t {
            // Loads 0x10..=0x13, stores 0x18..=0x1b.
            0x10..=0x13 | 0x18..=0x1b => {
                if n - i < 3 {
                    malformed!(
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
            // Packed accesses of 32-bit guests: address and value share
            // the second word.
            0x14..=0x16 | 0x1c..=0x1e => {
                if n - i < 2 {
                    malformed!(
                        t,
                        Problem::Truncated {
                            need: 2,
                            have: n - i,
                        },
                    );
                }
                let av = words[i + 1];
                mem::<T>(
                    pid,
                    tid,
                    t,
                    w & PC_MASK,
                    av & 0xffff_ffff,
                    av >> 32,
                    addr_mask,
                    trace,
                );
                i += 2;
                extra += 1;
            }
            tag::LOAD128 | tag::STORE128 => {
                if n - i < 4 {
                    malformed!(
                        t,
                        Problem::Truncated {
                            need: 4,
                            have: n - i,
                        },
                    );
                }
                let val = (words[i + 3] as u128) << 64 | words[i + 2] as u128;
                mem128::<T>(
                    pid,
                    tid,
                    t,
                    w & PC_MASK,
                    words[i + 1] & addr_mask,
                    val,
                    trace,
                );
                i += 4;
                extra += 3;
            }
            tag::EXEC_LONG => {
                if n - i < 2 {
                    malformed!(
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
                    malformed!(
                        t,
                        Problem::Truncated {
                            need: 4,
                            have: n - i,
                        },
                    );
                }
                let kind = w as u8;
                if kind == tag::LOAD128 || kind == tag::STORE128 {
                    if n - i < 5 {
                        malformed!(
                            t,
                            Problem::Truncated {
                                need: 5,
                                have: n - i,
                            },
                        );
                    }
                    let val = (words[i + 4] as u128) << 64 | words[i + 3] as u128;
                    mem128::<T>(
                        pid,
                        tid,
                        kind,
                        words[i + 1],
                        words[i + 2] & addr_mask,
                        val,
                        trace,
                    );
                    i += 5;
                    extra += 4;
                    continue;
                }
                if !matches!(kind, 0x10..=0x13 | 0x18..=0x1b) {
                    malformed!(t, Problem::BadMemKind(kind));
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
            t if t >= tag::FRAMED => match framed::<T>(pid, tid, words, bytes, i, lay, trace) {
                Ok(Frame::Known(len)) => {
                    i += len;
                    extra += len - 1;
                }
                Ok(Frame::Unknown(len)) => {
                    skipped.add(t);
                    i += len;
                    extra += len;
                }
                Err(p) => malformed!(t, p),
            },
            _ => malformed!(t, Problem::UnknownTag),
        }
    }
    Decoded {
        events: (i - extra) as u64,
        skipped: skipped.count,
        skipped_tag: skipped.first,
        error: None,
    }
}

/// Framed events of unknown tags seen in a chunk.
#[derive(Debug, Clone, Copy, Default)]
struct Skipped {
    count: u64,
    first: Option<u8>,
}

impl Skipped {
    #[cold]
    fn add(&mut self, t: u8) {
        self.count += 1;
        self.first.get_or_insert(t);
    }
}

/// A well-formed framed event: its length in words, and whether it was
/// delivered (a tag this client knows) or skipped.
enum Frame {
    Known(usize),
    Unknown(usize),
}

/// Fewest words a framed event of tag `t` can have, before its byte payload;
/// 1 (the header) for a tag this client does not know.
#[inline]
fn frame_min(t: u8, reg_words: usize) -> usize {
    match t {
        tag::REGS => 2 + reg_words,
        tag::SYSCALL => 11,
        tag::MMAP => 5,
        tag::MUNMAP | tag::MPROTECT => 3,
        tag::SIGNAL => 5,
        tag::BLOCK => 2,
        _ => 1,
    }
}

/// Decodes the framed event at word `i` of `words` (`bytes`: the same, as
/// little-endian bytes) and calls its callback. Out of line: framed events
/// are rare, and this keeps the hot loop small (slicing here, not in the
/// loop, spares the loop a byte-offset induction variable).
#[inline(never)]
fn framed<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    words: &[u64],
    bytes: &[u8],
    i: usize,
    lay: &Layout<'_>,
    trace: &mut Vec<T::Trace>,
) -> Result<Frame, Problem> {
    let (words, bytes) = (&words[i..], &bytes[i * 8..]);
    let (t, aux, len32) = wire::unframe(words[0]);
    let len = len32 as usize;
    let min = frame_min(t, lay.reg_words);
    if len < min {
        return Err(Problem::ShortFrame {
            len: len32,
            min: min as u64,
        });
    }
    if len > words.len() {
        return Err(Problem::Truncated {
            need: len,
            have: words.len(),
        });
    }
    let f = &words[..len];
    // `n` payload bytes from word `at` on, if the frame has room for them.
    let payload = |at: usize, n: u64| -> Result<&[u8], Problem> {
        let need = at as u64 + n.div_ceil(8);
        if need > len as u64 {
            return Err(Problem::ShortFrame {
                len: len32,
                min: need,
            });
        }
        Ok(&bytes[at * 8..at * 8 + n as usize])
    };
    let m = lay.addr_mask;
    match t {
        tag::REGS => {
            let regs = &bytes[16..16 + lay.reg_words * 8];
            match aux {
                0 => T::regs(pid, tid, f[1], regs, trace),
                1 | 2 => T::branch(pid, tid, f[1], aux == 2, regs, trace),
                _ => return Err(Problem::BadRegsKind(aux)),
            }
        }
        tag::SYSCALL => {
            let data = payload(11, f[9])?;
            let num = f[1];
            let sc = Syscall {
                num,
                name: lay.syscall_names.get(&num).map(String::as_str),
                args: [f[3] & m, f[4] & m, f[5] & m, f[6] & m, f[7] & m, f[8] & m],
                ret: if aux & 1 != 0 {
                    Some(f[2] as i64)
                } else {
                    None
                },
                data,
                data_total: f[10],
            };
            T::syscall(pid, tid, &sc, trace);
        }
        tag::MMAP => {
            // Borrowed unless the path is not UTF-8.
            let path: Cow<'_, str> = String::from_utf8_lossy(payload(5, f[4])?);
            T::mmap(
                pid,
                tid,
                f[1] & m,
                f[2],
                aux & map_flags::ANON != 0,
                aux & map_flags::READ != 0,
                aux & map_flags::WRITE != 0,
                aux & map_flags::EXEC != 0,
                &path,
                f[3],
                trace,
            );
        }
        tag::MUNMAP => T::munmap(pid, tid, f[1] & m, f[2], trace),
        tag::MPROTECT => T::mprotect(
            pid,
            tid,
            f[1] & m,
            f[2],
            aux & map_flags::READ != 0,
            aux & map_flags::WRITE != 0,
            aux & map_flags::EXEC != 0,
            trace,
        ),
        tag::SIGNAL => {
            let sig = Signal {
                signo: f[1] as i32,
                code: f[2] as i32,
                fault_addr: f[3] & m,
                handler: if f[4] == 0 { None } else { Some(f[4] & m) },
            };
            T::signal(pid, tid, &sig, trace);
        }
        tag::BLOCK => {
            let count = aux as usize;
            let lens = bytes
                .get(16..16 + count)
                .filter(|_| 2 + count.div_ceil(8) <= len);
            let Some(lens) = lens else {
                return Err(Problem::ShortFrame {
                    len: len32,
                    min: (2 + count.div_ceil(8)) as u64,
                });
            };
            T::block(pid, tid, words[1] & lay.addr_mask, lens, trace);
        }
        _ => return Ok(Frame::Unknown(len)),
    }
    Ok(Frame::Known(len))
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

/// A 16-byte load or store: `t` is `LOAD128` or `STORE128`, `addr` masked.
#[inline(never)]
fn mem128<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    t: u8,
    pc: u64,
    addr: u64,
    val: u128,
    trace: &mut Vec<T::Trace>,
) {
    if t == tag::LOAD128 {
        T::read_wide(pid, tid, pc, addr, val, 16, trace);
    } else {
        T::write_wide(pid, tid, pc, addr, val, 16, trace);
    }
}

#[cold]
#[inline(never)]
fn malformed(
    i: usize,
    n: usize,
    extra: usize,
    skipped: Skipped,
    tag: u8,
    problem: Problem,
) -> Decoded {
    Decoded {
        events: (i - extra) as u64,
        skipped: skipped.count,
        skipped_tag: skipped.first,
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

    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Ev {
        Exec(u64),
        Read(u64, u64, u64, u8),
        Write(u64, u64, u64, u8),
        Regs(u64, Vec<u8>),
        Branch(u64, bool, Vec<u8>),
        Read128(u64, u64, u128),
        Write128(u64, u64, u128),
        Block(u64, Vec<u8>),
        Mmap {
            base: u64,
            len: u64,
            anon: bool,
            prot: &'static str,
            path: String,
            offset: u64,
        },
        Munmap(u64, u64),
        Mprotect(u64, u64, &'static str),
        Syscall {
            num: u64,
            name: Option<String>,
            args: [u64; 6],
            ret: Option<i64>,
            data: Vec<u8>,
            total: u64,
        },
        Signal(Signal),
    }

    fn prot(r: bool, w: bool, x: bool) -> &'static str {
        ["---", "--x", "-w-", "-wx", "r--", "r-x", "rw-", "rwx"]
            [(r as usize) << 2 | (w as usize) << 1 | x as usize]
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
        fn regs(_: &(), _: &(), pc: u64, regs: &[u8], t: &mut Vec<Ev>) {
            t.push(Ev::Regs(pc, regs.to_vec()));
        }
        fn branch(_: &(), _: &(), pc: u64, b: bool, regs: &[u8], t: &mut Vec<Ev>) {
            t.push(Ev::Branch(pc, b, regs.to_vec()));
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
            offset: u64,
            t: &mut Vec<Ev>,
        ) {
            t.push(Ev::Mmap {
                base,
                len,
                anon,
                prot: prot(r, w, x),
                path: path.to_string(),
                offset,
            });
        }
        fn munmap(_: &(), _: &(), base: u64, len: u64, t: &mut Vec<Ev>) {
            t.push(Ev::Munmap(base, len));
        }
        fn mprotect(
            _: &(),
            _: &(),
            base: u64,
            len: u64,
            r: bool,
            w: bool,
            x: bool,
            t: &mut Vec<Ev>,
        ) {
            t.push(Ev::Mprotect(base, len, prot(r, w, x)));
        }
        fn syscall(_: &(), _: &(), sc: &Syscall<'_>, t: &mut Vec<Ev>) {
            t.push(Ev::Syscall {
                num: sc.num,
                name: sc.name.map(str::to_string),
                args: sc.args,
                ret: sc.ret,
                data: sc.data.to_vec(),
                total: sc.data_total,
            });
        }
        fn signal(_: &(), _: &(), sig: &Signal, t: &mut Vec<Ev>) {
            t.push(Ev::Signal(*sig));
        }
        fn read_wide(_: &(), _: &(), pc: u64, a: u64, v: u128, s: u8, t: &mut Vec<Ev>) {
            assert_eq!(s, 16);
            t.push(Ev::Read128(pc, a, v));
        }
        fn write_wide(_: &(), _: &(), pc: u64, a: u64, v: u128, s: u8, t: &mut Vec<Ev>) {
            assert_eq!(s, 16);
            t.push(Ev::Write128(pc, a, v));
        }
        fn block(_: &(), _: &(), pc: u64, lens: &[u8], t: &mut Vec<Ev>) {
            t.push(Ev::Block(pc, lens.to_vec()));
        }
    }

    /// Register words in the tests' registers events.
    const REGS: usize = 3;

    fn names() -> &'static BTreeMap<u64, String> {
        static N: std::sync::OnceLock<BTreeMap<u64, String>> = std::sync::OnceLock::new();
        N.get_or_init(|| {
            [(4004, "write".to_string()), (4001, "exit".to_string())]
                .into_iter()
                .collect()
        })
    }

    fn layout(bits: u32) -> Layout<'static> {
        Layout {
            addr_mask: addr_mask(bits),
            reg_words: REGS,
            syscall_names: names(),
        }
    }

    /// `b` as little-endian words, zero-padded.
    fn pad(b: &[u8]) -> Vec<u64> {
        b.chunks(8)
            .map(|c| {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                u64::from_le_bytes(w)
            })
            .collect()
    }

    fn bytes(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn run(words: &[u64], bits: u32) -> (Vec<Ev>, Decoded) {
        run_bytes(&bytes(words), bits)
    }

    fn run_bytes(b: &[u8], bits: u32) -> (Vec<Ev>, Decoded) {
        let mut t = Vec::new();
        let d = decode::<Rec>(&(), &(), b, &layout(bits), &mut t);
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
                ..Default::default()
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
                ..Default::default()
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
                ..Default::default()
            }
        );

        // 64-bit guests keep the whole address.
        let (t, _) = run(&[top(tag::LOAD | 3) | 0x10, 0xffff_8000_0000_0010, 7], 64);
        assert_eq!(t, vec![Ev::Read(0x10, 0xffff_8000_0000_0010, 7, 8)]);
    }

    #[test]
    fn packed_32bit_mem_events() {
        // Address in the low half, value in the high half; mixed with runs of
        // exec events on both sides of the eight-word look-ahead.
        let mut words: Vec<u64> = (0..9).map(|i| 0x400000 + 4 * i).collect();
        words.extend([
            top(wire::mem32_tag(false, 2)) | 0x400024,
            0x8765_4321_7fff_0010,
        ]);
        words.extend([
            top(wire::mem32_tag(true, 0)) | 0x400028,
            0x0000_01ab_7fff_0011,
        ]);
        words.extend([
            top(wire::mem32_tag(true, 1)) | 0x40002c,
            0xffff_beef_7fff_0012,
        ]);
        words.extend((0..3).map(|i| 0x400030 + 4 * i));
        let (t, d) = run(&words, 32);
        let mut want: Vec<Ev> = (0..9).map(|i| Ev::Exec(0x400000 + 4 * i)).collect();
        want.extend([
            Ev::Read(0x400024, 0x7fff_0010, 0x8765_4321, 4),
            Ev::Write(0x400028, 0x7fff_0011, 0xab, 1),
            Ev::Write(0x40002c, 0x7fff_0012, 0xbeef, 2),
        ]);
        want.extend((0..3).map(|i| Ev::Exec(0x400030 + 4 * i)));
        assert_eq!(t, want);
        assert_eq!(
            d,
            Decoded {
                events: 15,
                ..Default::default()
            }
        );
        // Cut after the tag word: truncated.
        let (_, d) = run(&[top(wire::mem32_tag(false, 0)) | 0x10], 32);
        assert!(matches!(
            d.error.map(|e| e.problem),
            Some(Problem::Truncated { need: 2, have: 1 })
        ));
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
                ..Default::default()
            }
        );
    }

    #[test]
    fn wide_accesses_keep_their_whole_value() {
        let big = 0xff00_0000_0000_1234u64;
        let words = [
            top(tag::LOAD128) | 0x400,
            0xffff_ffff_0000_1000,
            0x0706_0504_0302_0100,
            0x0f0e_0d0c_0b0a_0908,
            0x404,
            top(tag::MEM_LONG) | tag::STORE128 as u64,
            big,
            0x2000,
            1,
            2,
        ];
        let (t, d) = run(&words, 32);
        assert_eq!(
            t,
            vec![
                Ev::Read128(0x400, 0x1000, 0x0f0e_0d0c_0b0a_0908_0706_0504_0302_0100),
                Ev::Exec(0x404),
                Ev::Write128(big, 0x2000, 2 << 64 | 1),
            ]
        );
        assert_eq!(d.events, 3);
        assert!(d.error.is_none());
        // One word short of the value's high half.
        let (_, d) = run(&words[..3], 64);
        assert_eq!(
            d.error.unwrap().problem,
            Problem::Truncated { need: 4, have: 3 }
        );
    }

    #[test]
    fn wide_accesses_default_to_the_narrow_callbacks() {
        struct Narrow;
        impl Cannoli for Narrow {
            type Trace = (u64, u64, u8);
            type TidContext = ();
            type PidContext = ();
            fn init_pid(_: &ClientInfo) -> Arc<()> {
                Arc::new(())
            }
            fn init_tid(_: &(), _: &ClientInfo) -> (Self, ()) {
                (Narrow, ())
            }
            fn write(_: &(), _: &(), _: u64, a: u64, v: u64, s: u8, t: &mut Vec<(u64, u64, u8)>) {
                t.push((a, v, s));
            }
        }
        let words = [top(tag::STORE128) | 0x400, 0x1000, 0x1111, 0x2222];
        let mut t = Vec::new();
        let d = decode_words::<Narrow>(&(), &(), &words, &bytes(&words), &layout(64), &mut t);
        assert_eq!(t, vec![(0x1000, 0x1111, 16)]);
        assert_eq!(d.events, 1);
    }

    #[test]
    fn block_events_carry_instruction_lengths() {
        let words = [
            wire::frame(tag::BLOCK, 3, 3),
            0x1_0000,
            u64::from_le_bytes([2, 4, 2, 0, 0, 0, 0, 0]),
            0x1_0000,
        ];
        let (t, d) = run(&words, 32);
        assert_eq!(
            t,
            vec![Ev::Block(0x1_0000, vec![2, 4, 2]), Ev::Exec(0x1_0000)]
        );
        assert_eq!(d.events, 2);
        // Nine instructions need two words of lengths.
        let short = [
            wire::frame(tag::BLOCK, 9, 3),
            0x1_0000,
            0x0202_0202_0202_0202,
        ];
        let (_, d) = run(&short, 32);
        assert!(matches!(
            d.error.unwrap().problem,
            Problem::ShortFrame { .. }
        ));
    }

    #[test]
    fn unknown_tag_stops_and_reports() {
        let words = [0x10, 0x14, top(0x05) | 0x18, 0x1c, 0x20];
        let (t, d) = run(&words, 32);
        assert_eq!(t, vec![Ev::Exec(0x10), Ev::Exec(0x14)]);
        let e = d.error.unwrap();
        assert_eq!(d.events, 2);
        assert_eq!(e.offset, 16);
        assert_eq!(e.tag, 0x05);
        assert_eq!(e.problem, Problem::UnknownTag);
        assert_eq!(e.skipped_bytes, 24);
        assert_eq!(e.lost_events(), 3);
        let msg = e.to_string();
        assert!(msg.contains("0x05") && msg.contains("offset 16"), "{msg}");
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

    /// A syscall event's words.
    #[allow(clippy::too_many_arguments)]
    fn syscall_words(
        returned: bool,
        num: u64,
        ret: u64,
        args: [u64; 6],
        data: &[u8],
        total: u64,
    ) -> Vec<u64> {
        let len = wire::framed_len(11, data.len());
        let mut w = vec![
            wire::frame(tag::SYSCALL, returned as u32, len as u32),
            num,
            ret,
        ];
        w.extend(args);
        w.extend([data.len() as u64, total]);
        w.extend(pad(data));
        assert_eq!(w.len(), len);
        w
    }

    fn mmap_words(flags: u32, base: u64, len: u64, offset: u64, path: &[u8]) -> Vec<u64> {
        let n = wire::framed_len(5, path.len());
        let mut w = vec![
            wire::frame(tag::MMAP, flags, n as u32),
            base,
            len,
            offset,
            path.len() as u64,
        ];
        w.extend(pad(path));
        w
    }

    #[test]
    fn regs_and_branch_events() {
        use wire::RegsKind;
        let r = [0x11u64, 0xffff_ffff_8000_0000, 0x33];
        let mut words = vec![
            0x400000,
            wire::frame(tag::REGS, RegsKind::Regs as u32, 5),
            0x400004,
        ];
        words.extend(r);
        words.extend([
            wire::frame(tag::REGS, RegsKind::BranchNo as u32, 5),
            0x400008,
        ]);
        words.extend(r);
        words.extend([
            wire::frame(tag::REGS, RegsKind::BranchYes as u32, 5),
            0x40000c,
        ]);
        words.extend(r);
        // A longer frame (a newer writer's extra word) is fine; the extra
        // word is not a register.
        words.extend([wire::frame(tag::REGS, RegsKind::Regs as u32, 6), 0x400010]);
        words.extend(r);
        words.push(0xdead);
        words.push(0x400014);
        let (t, d) = run(&words, 32);
        let rb = bytes(&r);
        assert_eq!(
            t,
            vec![
                Ev::Exec(0x400000),
                Ev::Regs(0x400004, rb.clone()),
                Ev::Branch(0x400008, false, rb.clone()),
                Ev::Branch(0x40000c, true, rb.clone()),
                Ev::Regs(0x400010, rb.clone()),
                Ev::Exec(0x400014),
            ]
        );
        assert_eq!(
            d,
            Decoded {
                events: 6,
                ..Default::default()
            }
        );
    }

    #[test]
    fn reg_values_by_name() {
        let mut h = wire::Hello {
            magic: wire::MAGIC.into(),
            wire_version: wire::WIRE_VERSION,
            jitter_version: "t".into(),
            pid: 1,
            ppid: 0,
            tid: 1,
            arch: "mipsel".into(),
            big_endian: false,
            guest_bits: 32,
            ring: wire::RingRef::Attached,
            nonce: String::new(),
            proof: String::new(),
            comm: None,
            exe: None,
            regs: wire::RegLayout {
                count: 32,
                bytes: 4,
                names: vec![],
            },
            syscall_names: [(4004, "write".to_string())].into_iter().collect(),
            blocks: None,
        };
        let ci = ClientInfo::from_hello(&h);
        assert_eq!(ci.regs.names.len(), 32);
        assert_eq!(ci.regs.names[29], "sp");
        let mut words: Vec<u64> = (0..32u64).map(|i| 0xabcd_0000_0000_0000 | i).collect();
        words[29] = 0x7fff_fff0;
        let b = bytes(&words);
        assert_eq!(ci.reg(&b, "sp"), Some(0x7fff_fff0));
        assert_eq!(ci.reg(&b, "a0"), Some(4)); // upper bits masked to 4 bytes
        assert_eq!(ci.reg(&b, "rip"), None);
        assert_eq!(ci.reg(&b[..8], "sp"), None);
        let v: Vec<(&str, u64)> = ci.reg_values(&b).take(3).collect();
        assert_eq!(v, vec![("zero", 0), ("at", 1), ("v0", 2)]);
        assert_eq!(ci.reg_values(&b).count(), 32);
        assert_eq!(ci.syscall_name(4004), Some("write"));
        assert_eq!(ci.syscall_name(4005), None);

        // The hello's own names win; missing ones are made up; 8-byte
        // registers are not masked.
        h.arch = "sparc64".into();
        h.regs = wire::RegLayout {
            count: 3,
            bytes: 8,
            names: vec!["pc".into()],
        };
        let ci = ClientInfo::from_hello(&h);
        assert_eq!(ci.regs.names, ["pc", "r1", "r2"]);
        let b = bytes(&[u64::MAX, 1, 2]);
        assert_eq!(
            ci.reg_values(&b).collect::<Vec<_>>(),
            vec![("pc", u64::MAX), ("r1", 1), ("r2", 2)]
        );
    }

    #[test]
    fn syscall_events() {
        let junk = 0xabcd_0000_0000_0000u64;
        let mut words = vec![0x10];
        // write(1, buf, 6) = 6 on a 32-bit guest: args masked.
        words.extend(syscall_words(
            true,
            4004,
            6,
            [1, junk | 0x7ffe_0010, 6, junk, 0, 0],
            b"hello\n",
            6,
        ));
        // An unknown syscall failing with -ENOENT, its data cut short.
        words.extend(syscall_words(
            true,
            4999,
            (-2i64) as u64,
            [0; 6],
            &[0xff; 9],
            100,
        ));
        // exit(3): did not return.
        words.extend(syscall_words(false, 4001, 0, [3, 0, 0, 0, 0, 0], b"", 0));
        words.push(0x14);
        let (t, d) = run(&words, 32);
        assert_eq!(
            t,
            vec![
                Ev::Exec(0x10),
                Ev::Syscall {
                    num: 4004,
                    name: Some("write".into()),
                    args: [1, 0x7ffe_0010, 6, 0, 0, 0],
                    ret: Some(6),
                    data: b"hello\n".to_vec(),
                    total: 6
                },
                Ev::Syscall {
                    num: 4999,
                    name: None,
                    args: [0; 6],
                    ret: Some(-2),
                    data: vec![0xff; 9],
                    total: 100
                },
                Ev::Syscall {
                    num: 4001,
                    name: Some("exit".into()),
                    args: [3, 0, 0, 0, 0, 0],
                    ret: None,
                    data: vec![],
                    total: 0
                },
                Ev::Exec(0x14),
            ]
        );
        assert_eq!(
            d,
            Decoded {
                events: 5,
                ..Default::default()
            }
        );

        // A 64-bit guest keeps whole arguments.
        let (t, _) = run(&syscall_words(true, 64, 1, [junk; 6], b"", 0), 64);
        assert!(matches!(&t[0], Ev::Syscall { args, .. } if *args == [junk; 6]));
    }

    #[test]
    fn mapping_events() {
        use wire::map_flags::*;
        let mut words = vec![0x10];
        words.extend(mmap_words(
            READ | EXEC,
            0xffff_ffff_7700_0000,
            0x1000,
            0x2000,
            b"/lib/libc.so.6",
        ));
        words.extend(mmap_words(
            READ | WRITE | ANON | SHARED,
            0x7600_0000,
            0x3000,
            0,
            b"",
        ));
        words.extend(mmap_words(0, 0x7500_0000, 0x1000, 0, b"/tmp/\xff\xfex"));
        words.extend([wire::frame(tag::MPROTECT, READ, 3), 0x7600_1000, 0x1000]);
        words.extend([wire::frame(tag::MUNMAP, 0, 3), 0x7600_0000, 0x3000]);
        words.push(0x14);
        let (t, d) = run(&words, 32);
        assert_eq!(
            t,
            vec![
                Ev::Exec(0x10),
                Ev::Mmap {
                    base: 0x7700_0000,
                    len: 0x1000,
                    anon: false,
                    prot: "r-x",
                    path: "/lib/libc.so.6".into(),
                    offset: 0x2000
                },
                Ev::Mmap {
                    base: 0x7600_0000,
                    len: 0x3000,
                    anon: true,
                    prot: "rw-",
                    path: "".into(),
                    offset: 0
                },
                Ev::Mmap {
                    base: 0x7500_0000,
                    len: 0x1000,
                    anon: false,
                    prot: "---",
                    path: "/tmp/\u{fffd}\u{fffd}x".into(),
                    offset: 0
                },
                Ev::Mprotect(0x7600_1000, 0x1000, "r--"),
                Ev::Munmap(0x7600_0000, 0x3000),
                Ev::Exec(0x14),
            ]
        );
        assert_eq!(
            d,
            Decoded {
                events: 7,
                ..Default::default()
            }
        );
    }

    #[test]
    fn signal_events() {
        let words = [
            wire::frame(tag::SIGNAL, 0, 5),
            11,
            1, // SEGV_MAPERR
            0xffff_ffff_0000_0008,
            0,
            wire::frame(tag::SIGNAL, 0, 5),
            10,
            (-6i64) as u64, // SI_TKILL, sign-extended
            0,
            0x0040_1234,
            wire::frame(tag::SIGNAL, 0, 5),
            2,
            0xffff_fffa, // SI_TKILL, zero-extended
            0,
            0x0040_1234,
        ];
        let (t, d) = run(&words, 32);
        assert_eq!(
            t,
            vec![
                Ev::Signal(Signal {
                    signo: 11,
                    code: 1,
                    fault_addr: 8,
                    handler: None
                }),
                Ev::Signal(Signal {
                    signo: 10,
                    code: -6,
                    fault_addr: 0,
                    handler: Some(0x401234)
                }),
                Ev::Signal(Signal {
                    signo: 2,
                    code: -6,
                    fault_addr: 0,
                    handler: Some(0x401234)
                }),
            ]
        );
        assert_eq!(d.events, 3);
    }

    #[test]
    fn unknown_framed_tags_are_skipped() {
        let words = [
            0x10,
            wire::frame(0x2a, 0x123, 3),
            0x1111,
            top(0x05), // would be an unknown JIT tag, but it is payload
            0x14,
            wire::frame(0xff, 0, 1),
            wire::frame(0x30, 0, 2),
            u64::MAX,
            wire::frame(tag::MUNMAP, 0, 3),
            0x1000,
            0x2000,
        ];
        let (t, d) = run(&words, 32);
        assert_eq!(
            t,
            vec![Ev::Exec(0x10), Ev::Exec(0x14), Ev::Munmap(0x1000, 0x2000)]
        );
        assert_eq!(
            d,
            Decoded {
                events: 3,
                skipped: 3,
                skipped_tag: Some(0x2a),
                error: None
            }
        );

        // An unknown framed tag must still have a sane length.
        let (t, d) = run(&[0x10, wire::frame(0x2a, 0, 4), 1, 2], 32);
        assert_eq!(t, vec![Ev::Exec(0x10)]);
        let e = d.error.unwrap();
        assert_eq!((e.offset, e.tag), (8, 0x2a));
        assert_eq!(e.problem, Problem::Truncated { need: 4, have: 3 });
        let (_, d) = run(&[0x2a << 56], 32);
        assert_eq!(
            d.error.unwrap().problem,
            Problem::ShortFrame { len: 0, min: 1 }
        );
    }

    #[test]
    fn malformed_frames() {
        let check = |words: &[u64], t: u8, p: Problem| {
            let mut all = vec![0x10];
            all.extend_from_slice(words);
            let (evs, d) = run(&all, 32);
            assert_eq!(evs, vec![Ev::Exec(0x10)], "{words:x?}");
            assert_eq!(d.events, 1);
            let e = d.error.unwrap();
            assert_eq!((e.offset, e.tag, e.problem), (8, t, p), "{words:x?}");
            assert_eq!(e.skipped_bytes, words.len() * 8);
            assert!(e.to_string().contains(&format!("{t:#04x}")), "{e}");
        };
        // Shorter than the tag's fixed fields.
        for (t, min) in [
            (tag::REGS, 2 + REGS),
            (tag::SYSCALL, 11),
            (tag::MMAP, 5),
            (tag::MUNMAP, 3),
            (tag::MPROTECT, 3),
            (tag::SIGNAL, 5),
        ] {
            let len = min as u32 - 1;
            let mut w = vec![wire::frame(t, 0, len)];
            w.resize(len as usize + 4, 0); // room in the chunk is not enough
            check(
                &w,
                t,
                Problem::ShortFrame {
                    len,
                    min: min as u64,
                },
            );
            let mut w = vec![(t as u64) << 56];
            w.resize(8, 0);
            check(
                &w,
                t,
                Problem::ShortFrame {
                    len: 0,
                    min: min as u64,
                },
            );
        }
        // Running past the end of the chunk.
        let mut w = syscall_words(true, 4004, 0, [0; 6], b"abcdefghij", 10);
        w.pop();
        check(&w, tag::SYSCALL, Problem::Truncated { need: 13, have: 12 });
        check(
            &[wire::frame(tag::SIGNAL, 0, 5), 11, 0],
            tag::SIGNAL,
            Problem::Truncated { need: 5, have: 3 },
        );
        check(
            &[wire::frame(tag::MUNMAP, 0, u32::MAX), 0, 0],
            tag::MUNMAP,
            Problem::Truncated {
                need: u32::MAX as usize,
                have: 3,
            },
        );
        // Payload lengths that do not fit in the frame.
        let mut w = syscall_words(true, 4004, 0, [0; 6], b"abcdefghij", 10);
        w[9] = 17;
        check(&w, tag::SYSCALL, Problem::ShortFrame { len: 13, min: 14 });
        w[9] = u64::MAX;
        check(
            &w,
            tag::SYSCALL,
            Problem::ShortFrame {
                len: 13,
                min: 11 + u64::MAX.div_ceil(8),
            },
        );
        let mut w = mmap_words(0, 0, 0, 0, b"/bin/sh");
        w[4] = 9;
        check(&w, tag::MMAP, Problem::ShortFrame { len: 6, min: 7 });
        // Registers event of an unknown kind.
        let mut w = vec![wire::frame(tag::REGS, 3, 5), 0x14];
        w.extend([0; REGS]);
        check(&w, tag::REGS, Problem::BadRegsKind(3));
    }

    #[test]
    fn framed_events_in_unaligned_input() {
        let mut words = vec![0x10];
        words.extend(syscall_words(true, 4004, 3, [0; 6], b"abc", 3));
        words.extend(mmap_words(wire::map_flags::READ, 0x1000, 0x1000, 0, b"/x"));
        let b = bytes(&words);
        let mut storage = vec![0u8; b.len() + 1];
        storage[1..].copy_from_slice(&b);
        let (t, d) = run_bytes(&storage[1..], 32);
        assert_eq!(
            d,
            Decoded {
                events: 3,
                ..Default::default()
            }
        );
        assert!(matches!(&t[1], Ev::Syscall { data, .. } if data == b"abc"));
        assert!(matches!(&t[2], Ev::Mmap { path, .. } if path == "/x"));
    }

    /// Random words, biased towards framed tags with plausible lengths, never
    /// panic the decoder, and what it reports adds up.
    #[test]
    fn random_chunks_never_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let n = (next() % 24) as usize;
            let words: Vec<u64> = (0..n)
                .map(|_| {
                    let r = next();
                    match r % 6 {
                        0 => r >> 8,
                        1 => wire::frame(
                            0x20 + (r >> 8) as u8 % 8,
                            (r >> 16) as u32 & 0xff_ffff,
                            (r >> 40) as u32 % 16,
                        ),
                        2 => r % 64,
                        _ => r,
                    }
                })
                .collect();
            let (t, d) = run(&words, 32);
            assert_eq!(t.len() as u64, d.events);
            if let Some(e) = d.error {
                assert_eq!(e.offset + e.skipped_bytes, n * 8);
            }
        }
    }

    #[test]
    fn stray_bytes_after_a_malformed_event_are_skipped_too() {
        // A truncated load, then three stray bytes: the malformed rest runs
        // to the chunk's end (found by the cannoli-fuzz decode target).
        let mut b = bytes(&[0x400000, top(tag::LOAD | 2) | 0x400004, 0x1000]);
        b.extend([1, 2, 3]);
        let (t, d) = run_bytes(&b, 32);
        assert_eq!(t, vec![Ev::Exec(0x400000)]);
        let e = d.error.unwrap();
        assert_eq!(e.problem, Problem::Truncated { need: 3, have: 2 });
        assert_eq!((e.offset, e.skipped_bytes), (8, b.len() - 8));
        assert_eq!(e.lost_events(), 2);
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
        let lay = layout(32);
        for (name, words) in [("exec+loads", &words), ("exec only", &pure)] {
            let b = bytes(words);
            let mut t = Vec::with_capacity(words.len());
            let rounds = 2000;
            let start = Instant::now();
            let mut ev = 0;
            for _ in 0..rounds {
                t.clear();
                let d = decode::<Count>(&(), &(), std::hint::black_box(&b), &lay, &mut t);
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
                    &lay,
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
