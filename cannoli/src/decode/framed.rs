//! The rare framed events (registers, order, syscalls, mappings, signals,
//! block lengths), decoded out of line.

use std::borrow::Cow;

use super::problem::Problem;
use super::Shape;
use crate::event::{Block, Mapping, Prot, Protection};
use crate::{Cannoli, Signal, Syscall};
use wire::{map_flags, tag};

/// Framed events of unknown tags seen in a chunk.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Skipped {
    pub count: u64,
    pub first: Option<u8>,
}

impl Skipped {
    #[cold]
    pub fn add(&mut self, t: u8) {
        self.count += 1;
        self.first.get_or_insert(t);
    }
}

/// A word per register, where a `SOME_REGS` event's registers are spread
/// for the tool: all zero between events (an event clears the words it
/// wrote once the tool has them), so that an event costs the stores of its
/// own registers, not a zeroed array.
#[derive(Debug)]
pub(crate) struct RegScratch([u8; wire::MAX_SOME_REGS as usize * 8]);

impl Default for RegScratch {
    fn default() -> Self {
        RegScratch([0; wire::MAX_SOME_REGS as usize * 8])
    }
}

/// A well-formed framed event: its length in words, and whether it was
/// delivered (a tag this client knows) or skipped.
pub(super) enum Frame {
    Known(usize),
    Unknown(usize),
}

/// Fewest words a framed event of tag `t` can have, before its byte payload;
/// 1 (the header) for a tag this client does not know.
#[inline]
pub(super) fn frame_min(t: u8, reg_words: usize) -> usize {
    match t {
        tag::REGS => 2 + reg_words,
        tag::SOME_REGS | tag::ORDER => 3,
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
#[allow(clippy::too_many_arguments)] // the decode loop's state, passed apart
pub(super) fn framed<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    words: &[u64],
    bytes: &[u8],
    i: usize,
    lay: &Shape<'_>,
    scratch: &mut RegScratch,
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
    // A registers event's registers, one word each, to the tool.
    let regs = |regs: &[u8], trace: &mut Vec<T::Trace>| {
        match aux {
            0 => T::regs(pid, tid, f[1], regs, trace),
            1 | 2 => T::branch(pid, tid, f[1], aux == 2, regs, trace),
            _ => return Err(Problem::BadRegsKind(aux)),
        }
        Ok(())
    };
    match t {
        tag::REGS => regs(&bytes[16..16 + lay.reg_words * 8], trace)?,
        tag::SOME_REGS => {
            let mask = f[2];
            let need = some_regs_len(mask, lay).ok_or(Problem::BadRegsMask(mask))?;
            if need > len {
                return Err(Problem::ShortFrame {
                    len: len32,
                    min: need as u64,
                });
            }
            // `some_regs_len` checked that the guest has at most 64.
            let out = &mut scratch.0[..lay.reg_words * 8];
            spread_regs(mask, &f[3..need], lay.reg_bytes == 4, out);
            let delivered = regs(out, trace);
            clear_regs(mask, out);
            delivered?
        }
        tag::ORDER => T::ordered(pid, tid, f[1], f[2], trace),
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
            let map = Mapping {
                base: f[1] & m,
                len: f[2],
                anon: aux & map_flags::ANON != 0,
                prot: prot(aux),
                path: &path,
                offset: f[3],
            };
            T::mapped(pid, tid, &map, trace);
        }
        tag::MUNMAP => T::munmap(pid, tid, f[1] & m, f[2], trace),
        tag::MPROTECT => {
            let p = Protection {
                base: f[1] & m,
                len: f[2],
                prot: prot(aux),
            };
            T::protected(pid, tid, &p, trace);
        }
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
            let b = Block {
                pc: words[1] & lay.addr_mask,
                lens,
            };
            T::translated(pid, tid, &b, trace);
        }
        _ => return Ok(Frame::Unknown(len)),
    }
    Ok(Frame::Known(len))
}

/// Words a `SOME_REGS` event with `mask` needs; `None` if the mask names a
/// register the guest does not have, or the guest has more registers than
/// such an event may carry ([`wire::MAX_SOME_REGS`]).
#[inline]
pub(super) fn some_regs_len(mask: u64, lay: &Shape<'_>) -> Option<usize> {
    if lay.reg_words > wire::MAX_SOME_REGS as usize
        || (lay.reg_words < 64 && mask >> lay.reg_words != 0)
    {
        return None;
    }
    Some(3 + wire::some_regs_words(mask, lay.reg_bytes as u32))
}

/// Spreads the packed registers of a `SOME_REGS` event (`packed`: 8 bytes
/// each, or 4 where `half`, in the order of `mask`'s bits) to one
/// little-endian word per register in `out`, whose other words stay zero.
/// The caller checked that `packed` holds them all and that `out` has a
/// word for each bit.
#[inline(always)]
fn spread_regs(mask: u64, packed: &[u64], half: bool, out: &mut [u8]) {
    if half && is_every_reg(mask, out) {
        // Every register of a 32-bit guest (a probe's event): widened a
        // word of two at a time, with no walk over the mask's bits and no
        // index to check per register.
        let (pairs, odd) = out.split_at_mut(out.len() / 16 * 16);
        for (o, &w) in pairs.chunks_exact_mut(16).zip(packed) {
            o[..8].copy_from_slice(&(w as u32 as u64).to_le_bytes());
            o[8..].copy_from_slice(&(w >> 32).to_le_bytes());
        }
        if !odd.is_empty() {
            // The caller checked that `packed` holds every register.
            let w = packed[pairs.len() / 16];
            odd.copy_from_slice(&(w as u32 as u64).to_le_bytes());
        }
        return;
    }
    let mut m = mask;
    let mut k = 0;
    while m != 0 {
        let i = m.trailing_zeros() as usize;
        m &= m - 1;
        let v = if half {
            (packed[k / 2] >> (32 * (k % 2))) as u32 as u64
        } else {
            packed[k]
        };
        out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        k += 1;
    }
}

/// Zeroes again the words of `out` that [`spread_regs`] wrote for `mask`.
#[inline(always)]
fn clear_regs(mask: u64, out: &mut [u8]) {
    if is_every_reg(mask, out) {
        out.fill(0);
        return;
    }
    let mut m = mask;
    while m != 0 {
        let i = m.trailing_zeros() as usize;
        m &= m - 1;
        out[i * 8..i * 8 + 8].fill(0);
    }
}

/// Whether `mask` names every register `out` has a word for.
#[inline(always)]
fn is_every_reg(mask: u64, out: &[u8]) -> bool {
    let n = out.len() / 8;
    n < 64 && mask == (1u64 << n) - 1
}

/// A mapping frame's protection bits.
fn prot(aux: u32) -> Prot {
    Prot {
        read: aux & map_flags::READ != 0,
        write: aux & map_flags::WRITE != 0,
        exec: aux & map_flags::EXEC != 0,
    }
}
