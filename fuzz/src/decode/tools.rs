// SPDX-License-Identifier: GPL-2.0-or-later
//! The two tools the chunks are decoded with: [`Tally`], which allocates
//! nothing (so that what the decoder allocates can be counted), and
//! [`Rec`], which records every callback as an [`Ev`] to compare with the
//! reference reading.

use std::sync::Arc;

use cannoli::{Cannoli, ClientInfo, Signal, Syscall};

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
    fn ordered(_: &(), _: &(), _: u64, _: u64, t: &mut Vec<()>) {
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
    Order(u64, u64),
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
    fn ordered(_: &(), _: &(), pc: u64, seq: u64, t: &mut Vec<Ev>) {
        t.push(Ev::Order(pc, seq))
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
