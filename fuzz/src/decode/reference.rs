// SPDX-License-Identifier: GPL-2.0-or-later
//! The reference reading: the wire format read word by word from its
//! documentation, with none of the decoder's fast paths, so that the two
//! can be compared event by event.

use wire::{tag, PC_MASK};

use super::stream::names;
use super::tools::Ev;

/// What [`reference()`] found.
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
/// registers, order): the events placed in the running block.
fn insn_pc(e: &Ev) -> Option<u64> {
    match *e {
        Ev::Exec(pc)
        | Ev::Read(pc, ..)
        | Ev::Write(pc, ..)
        | Ev::ReadWide(pc, ..)
        | Ev::WriteWide(pc, ..)
        | Ev::Regs(pc, _)
        | Ev::Branch(pc, ..)
        | Ev::Order(pc, _) => Some(pc),
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
pub fn reference(chunk: &[u8], bits: u32, reg_words: usize, reg_bytes: usize) -> Reading {
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
            t if t >= tag::FRAMED => {
                framed(&w[i..], &chunk[i * 8..whole], amask, (reg_words, reg_bytes))
            }
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
/// `regs`: the registers a registers event has, and the bytes of each in a
/// `SOME_REGS` event.
fn framed(
    w: &[u64],
    b: &[u8],
    m: u64,
    (reg_words, reg_bytes): (usize, usize),
) -> Option<(Option<Ev>, usize)> {
    let first = w[0];
    let t = (first >> 56) as u8;
    let aux = ((first >> 32) & 0xff_ffff) as u32;
    let len = first as u32 as u64;
    // Fewest words (header and fixed fields) each known kind has.
    let min: u64 = match t {
        tag::REGS => 2 + reg_words as u64,
        tag::SOME_REGS | tag::ORDER => 3,
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
        tag::REGS | tag::SOME_REGS => {
            let regs = if t == tag::REGS {
                b[16..16 + reg_words * 8].to_vec()
            } else {
                // The mask's registers, `reg_bytes` each, one after the
                // other from word 3; a word per register to the tool.
                let mask = f[2];
                let named: Vec<usize> = (0..64).filter(|i| mask >> i & 1 == 1).collect();
                if reg_words > 64 || named.iter().any(|&i| i >= reg_words) {
                    return None;
                }
                payload(3, (named.len() * reg_bytes) as u64)?;
                let mut regs = vec![0u8; reg_words * 8];
                for (k, &i) in named.iter().enumerate() {
                    let at = 24 + k * reg_bytes;
                    regs[i * 8..i * 8 + reg_bytes].copy_from_slice(&b[at..at + reg_bytes]);
                }
                regs
            };
            match aux {
                0 => Ev::Regs(f[1], regs),
                1 | 2 => Ev::Branch(f[1], aux == 2, regs),
                _ => return None,
            }
        }
        tag::ORDER => Ev::Order(f[1], f[2]),
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
