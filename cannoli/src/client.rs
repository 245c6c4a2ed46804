// SPDX-License-Identifier: GPL-2.0-or-later
//! Who a connection is: the guest thread, its process and its machine.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::ToolState;
#[cfg(doc)]
use crate::{replay, run, Cannoli, Recording, Server};

/// Who is on the other end of a connection: one guest thread.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    /// The guest process's id: QEMU's own pid, as linux-user runs each
    /// guest process in a QEMU of its own.
    pub pid: i32,
    /// The pid of the guest process's parent.
    pub ppid: i32,
    /// The guest thread's id (`pid` for a process's first thread).
    pub tid: i32,
    /// Which image of process `pid` the thread belongs to: each traced
    /// `execve` makes a new one under the same pid, with a `PidContext`
    /// of its own (see `wire::Hello::image`).
    pub image: u32,
    /// This stream's number in the run, from 0 in the order the streams
    /// connected; in a replay, its number in the recording (the `stream`
    /// of `cannoli info` and of the exports).
    pub stream: u64,
    /// QEMU's machine name for the guest, e.g. `mipsel`, `riscv64`.
    pub arch: String,
    /// Whether the guest is big-endian: the byte order of its memory values.
    pub big_endian: bool,
    /// Guest virtual address width: 32 or 64.
    pub guest_bits: u32,
    /// Guest program name, where known.
    pub comm: Option<String>,
    /// Path of the guest executable, where known.
    pub exe: Option<String>,
    /// Version of QEMU's cannoli hook library.
    pub jitter_version: String,
    /// What a registers event ([`Cannoli::regs`], [`Cannoli::branch`])
    /// carries. `names` has at least `count` entries: QEMU's own, else the
    /// arch's usual ones ([`wire::reg_names`]), else `r<i>` for the rest.
    pub regs: wire::RegLayout,
    /// Syscall names by the guest's syscall numbers, where QEMU knows them.
    pub syscall_names: BTreeMap<u64, String>,
    /// The value the run was started with ([`Server::with_state`],
    /// [`Recording::replay_with`]), the same for every stream of the run;
    /// read it with [`ClientInfo::state`].
    pub tool_state: ToolState,
}

impl ClientInfo {
    pub(crate) fn from_hello(h: &wire::Hello) -> ClientInfo {
        ClientInfo {
            pid: h.pid,
            ppid: h.ppid,
            tid: h.tid,
            image: h.image,
            stream: 0,
            arch: h.arch.clone(),
            big_endian: h.big_endian,
            guest_bits: h.guest_bits,
            comm: h.comm.clone(),
            exe: h.exe.clone(),
            jitter_version: h.jitter_version.clone(),
            regs: reg_layout(h),
            syscall_names: h.syscall_names.clone(),
            tool_state: ToolState::default(),
        }
    }

    /// The value the run was started with, if it was started with an `S`:
    /// what `init_pid` clones into its `PidContext`, so that a tool's
    /// configuration and run-wide results need no module statics (see
    /// [`ToolState`]). `None` in a run started without one ([`run`],
    /// [`Server::run`], [`replay`]).
    pub fn state<S: std::any::Any + Send + Sync>(&self) -> Option<Arc<S>> {
        self.tool_state.get::<S>()
    }

    /// [`ClientInfo::state`] for a tool that is only ever run with its `S`.
    ///
    /// # Panics
    ///
    /// If the run was started without an `S`: a tool bug, not a runtime
    /// condition.
    pub fn expect_state<S: std::any::Any + Send + Sync>(&self) -> Arc<S> {
        self.state::<S>().unwrap_or_else(|| {
            panic!(
                "cannoli: this run carries no {}; start it with Server::with_state or replay_with",
                std::any::type_name::<S>()
            )
        })
    }

    /// The registers of a registers event as (name, value) pairs, in event
    /// order. `regs` is the callback's byte slice; each value is masked to
    /// the guest register width (`regs.bytes`).
    pub fn reg_values<'a>(&'a self, regs: &'a [u8]) -> impl Iterator<Item = (&'a str, u64)> + 'a {
        let mask = self.reg_mask();
        self.regs
            .names
            .iter()
            .zip(regs.chunks_exact(8))
            .map(move |(n, w)| (n.as_str(), u64::from_le_bytes(w.try_into().unwrap()) & mask))
    }

    /// The value of the register called `name` in a registers event, masked
    /// to the guest register width; `None` if there is no such register.
    pub fn reg(&self, regs: &[u8], name: &str) -> Option<u64> {
        let i = self.reg_index(name)?;
        let w = regs.get(i * 8..i * 8 + 8)?;
        Some(u64::from_le_bytes(w.try_into().unwrap()) & self.reg_mask())
    }

    /// Where the register called `name` is in a registers event (its
    /// index, in words); `None` if the event has no such register.
    pub fn reg_index(&self, name: &str) -> Option<usize> {
        let count = (self.regs.count as usize).min(self.regs.names.len());
        self.regs.names[..count].iter().position(|n| n == name)
    }

    /// The name of guest syscall number `num`, where QEMU's side knows it.
    pub fn syscall_name(&self, num: u64) -> Option<&str> {
        self.syscall_names.get(&num).map(String::as_str)
    }

    /// Mask of a register value: `regs.bytes` wide (all 64 bits if unknown).
    pub fn reg_mask(&self) -> u64 {
        match self.regs.bytes {
            1..=7 => (1u64 << (self.regs.bytes * 8)) - 1,
            _ => u64::MAX,
        }
    }
}

/// The hello's register layout, with names filled in where it has none.
fn reg_layout(h: &wire::Hello) -> wire::RegLayout {
    let mut l = h.regs.clone();
    if l.names.is_empty() {
        l.names = wire::reg_names(&h.arch)
            .iter()
            .map(|s| s.to_string())
            .collect();
    }
    while l.names.len() < l.count as usize {
        l.names.push(format!("r{}", l.names.len()));
    }
    l
}
