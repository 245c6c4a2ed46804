//! The rare framed events (registers, syscalls, mappings, signals, block
//! lengths), decoded out of line.

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
pub(super) fn framed<T: Cannoli>(
    pid: &T::PidContext,
    tid: &T::TidContext,
    words: &[u64],
    bytes: &[u8],
    i: usize,
    lay: &Shape<'_>,
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

/// A mapping frame's protection bits.
fn prot(aux: u32) -> Prot {
    Prot {
        read: aux & map_flags::READ != 0,
        write: aux & map_flags::WRITE != 0,
        exec: aux & map_flags::EXEC != 0,
    }
}
