// SPDX-License-Identifier: GPL-2.0-or-later
//! Structured inputs: chunks laid out from a list of events that
//! `arbitrary` builds from the input's bytes, then damaged as it says, so
//! that most inputs are close to real chunks and reach past the first
//! word.

use arbitrary::{Arbitrary, Unstructured};
use wire::{tag, PC_MASK};

use super::stream::Stream;

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
    /// A `SOME_REGS` event: `mask` (mostly cut to the stream's registers),
    /// `fill` the values; `extra` lengthens or shortens the frame.
    SomeRegs {
        kind: u8,
        pc: u64,
        mask: u64,
        fill: u64,
        extra: u8,
    },
    /// An order event; `extra` shortens the frame.
    Order {
        pc: u64,
        seq: u64,
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

/// A word whose top byte is the tag `t`.
pub(super) fn top(t: u8) -> u64 {
    (t as u64) << 56
}

/// Lays out the events `u` describes, then damages them as it says.
pub(super) fn build(u: &mut Unstructured<'_>, s: &Stream) -> Vec<u8> {
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
            Piece::SomeRegs {
                kind,
                pc,
                mask,
                fill,
                extra,
            } => {
                let mask = if extra & 0x80 != 0 || regs >= 64 {
                    mask
                } else {
                    mask & ((1u64 << regs) - 1)
                };
                let n = wire::some_regs_words(mask, s.reg_bytes());
                let len = (3 + n + (extra % 3) as usize).saturating_sub((extra >> 6 & 1) as usize);
                w.push(wire::frame(tag::SOME_REGS, (kind % 4) as u32, len as u32));
                w.extend([pc, mask]);
                w.extend((0..len.saturating_sub(3) as u64).map(|k| fill ^ k));
            }
            Piece::Order { pc, seq, extra } => {
                let len = 3 - (extra % 4).min(2) as u32;
                w.extend([wire::frame(tag::ORDER, 0, len), pc, seq][..len as usize].iter());
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
                let t = 0x29 + t % (0x100 - 0x29) as u8;
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
