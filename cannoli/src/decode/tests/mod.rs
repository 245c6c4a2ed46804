//! The decoder's tests, by kind of event: [`events`] (exec and memory
//! events, malformed chunks), [`framed`] (framed events) and [`blocks`]
//! (run events, cuts, chunks stitched).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::blocks::BlockCache;
use crate::{Cannoli, ClientInfo, Signal, Syscall};
use place::OpenBlock;
use problem::Problem;
use seam::head_len;
use shape::addr_mask;
use wire::blocks::{EntryError, NO_ENTRY};
use wire::{tag, PC_MASK};

mod blocks;
mod events;
mod framed;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ev {
    Exec(u64),
    Read(u64, u64, u64, u8),
    Write(u64, u64, u64, u8),
    Regs(u64, Vec<u8>),
    Branch(u64, bool, Vec<u8>),
    Order(u64, u64),
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
    fn ordered(_: &(), _: &(), pc: u64, seq: u64, t: &mut Vec<Ev>) {
        t.push(Ev::Order(pc, seq));
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
    fn mprotect(_: &(), _: &(), base: u64, len: u64, r: bool, w: bool, x: bool, t: &mut Vec<Ev>) {
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

fn layout(bits: u32) -> Shape<'static> {
    Shape {
        addr_mask: addr_mask(bits),
        reg_words: REGS,
        reg_bytes: if bits == 64 { 8 } else { 4 },
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

/// Decodes `b` as a stream of one chunk, without a block table.
fn run_bytes(b: &[u8], bits: u32) -> (Vec<Ev>, Decoded) {
    let mut t = Vec::new();
    let d = decode_stream::<Rec>(&(), &(), &[b], &layout(bits), None, &mut t);
    (t, d)
}

fn top(t: u8) -> u64 {
    (t as u64) << 56
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
