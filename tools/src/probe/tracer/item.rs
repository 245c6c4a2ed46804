// SPDX-License-Identifier: GPL-2.0-or-later
//! What the parallel callbacks hand to the serial phase: hooked pcs and
//! their registers, stores, counts, lines the workers wrote, mappings.

#[cfg(doc)]
use super::super::out;

/// What the parallel phase hands on.
#[derive(Clone)]
pub enum Item {
    /// A hooked pc and the registers before it ran.
    Hit { pc: u64, regs: Box<[u64]> },
    /// A store of this thread (only when arguments are on the stack).
    Store { addr: u64, value: u64, size: u8 },
    /// Instructions that ran without a hook of ours (`--insns`).
    Count(u64),
    /// Hits of pc probes formatted by a worker (`ThreadRegs::lines`):
    /// their `text`, how many lines (`hits`) and hooked instructions
    /// (`pcs`) that is; `values`: the worker's room for a hit's registers,
    /// reused hit after hit, of no use in the serial phase (a stack array
    /// for the most registers of any guest cost a kilobyte's memset and
    /// copy a hit).
    Lines {
        text: Vec<u8>,
        hits: u64,
        pcs: u64,
        values: Vec<u64>,
    },
    /// A hooked pc whose one site is a pc probe, where the line needs the
    /// thread's serial state (`ThreadRegs::split`): the worker wrote all
    /// of it after that ([`out::Hit::pc_tail`]).
    Tail(Box<[u8]>),
    /// A library with probes was mapped: its offset 0 is at `base`.
    Map { module: usize, base: u64 },
    /// The next hooked pc took this number of the process's order
    /// ([`super::super::goroutine`]).
    Order(u64),
}
