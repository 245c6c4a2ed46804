#![warn(missing_docs)]
//! The cannoli wire format: what QEMU's side (the jitter) writes into a
//! `mempipe` chunk and what the client parses back out, plus the one-line
//! JSON handshake on the control connection ([`channel`]).
//!
//! Both sides link this crate, so a change here changes both at once; bump
//! [`WIRE_VERSION`] whenever the layout changes so an old client refuses a new
//! QEMU side with a clear message instead of misparsing it.
//!
//! # Events
//!
//! A chunk is a sequence of little-endian `u64` words, every event starts on
//! an 8-byte boundary. The top byte of an event's first word is its [`tag`];
//! the low 56 bits hold the guest pc. The most common event, an executed
//! instruction, is therefore just the pc itself (tag 0): one store in the JIT
//! and one compare in the client's decode loop.
//!
//! | tag | event | words |
//! |-----|-------|-------|
//! | `0x00` | exec: `pc` | 1 |
//! | `0x01` | exec of a pc that needs more than 56 bits: `tag`, `pc` | 2 |
//! | `0x10 \| log2(size)` | load: `tag\|pc`, `addr`, `value` | 3 |
//! | `0x18 \| log2(size)` | store: `tag\|pc`, `addr`, `value` | 3 |
//! | `0x1f` | memory access whose pc needs more than 56 bits: `tag\|kind`, `pc`, `addr`, `value` | 4 |
//! | `0x14 \| log2(size)` | load of at most 4 bytes by a 32-bit guest: `tag\|pc`, `addr \| value << 32` | 2 |
//! | `0x1c \| log2(size)` | store of at most 4 bytes by a 32-bit guest: `tag\|pc`, `addr \| value << 32` | 2 |
//! | `0x02` | 16-byte load: `tag\|pc`, `addr`, `value` low 64 bits, high 64 bits | 4 |
//! | `0x03` | 16-byte store: `tag\|pc`, `addr`, `value` low 64 bits, high 64 bits | 4 |
//! | `0x04` | run of a translated block: `tag\|id` ([`blocks`] entry `id`, or [`blocks::NO_ENTRY`]) | 1 |
//! | `0x05` | cut: the running block was left after the instruction at `pc`: `tag\|pc` | 1 |
//! | `0x06` | cut at a pc that needs more than 56 bits: `tag`, `pc` | 2 |
//! | `0x20`.. | framed event (below) | `len` |
//!
//! ## Blocks
//!
//! Most instructions are not reported one by one: a run event stands for
//! the instructions of a translated block that its [`blocks`] table entry
//! marks as executed. They ran in order, before the next run event or the
//! next event of another kind (a syscall, a mapping, a signal, a block
//! translation). The events of the block's own instructions (memory
//! accesses, registers, `Once` execs) come between, each placed right after
//! the instruction whose pc it carries (a block's pcs are distinct). A cut
//! ends the block early: the instructions after its pc did not run (a
//! fault, an exception, a syscall, a branch out of the middle of a block).
//! A reader that finds an event's pc (or a cut's) nowhere in the rest of the
//! running block, nor at the instruction just placed, takes it for an event
//! of a block with no run event (none of its instructions is hooked): the
//! running block ran to its end.
//!
//! A `0x1f` event whose kind byte is `0x02` or `0x03` carries a 16-byte
//! access: `tag\|kind`, `pc`, `addr`, low, high (5 words).
//!
//! `addr` and `value` are the raw host register contents: the reader masks
//! `addr` to the guest's address width and `value` to the access size.
//!
//! ## Framed events
//!
//! Rare events (registers, syscalls, mappings, signals) share one frame so a
//! reader can always skip them: the first word is
//! `tag << 56 | aux << 32 | len`, where `len` is the event's total length in
//! words (header included, at least 1) and `aux` is 24 bits whose meaning
//! depends on the tag. Byte payloads are padded with zeros to whole words.
//!
//! | tag | event | aux | words after the header |
//! |-----|-------|-----|------------------------|
//! | `0x20` | registers | [`RegsKind`] | `pc`, then one word per register ([`Hello::regs`] of them) |
//! | `0x21` | syscall | bit 0: returned | `num`, `ret`, `arg0`..`arg5`, `data_len`, `data_total`, then `data_len` bytes |
//! | `0x22` | mmap | [`map_flags`] | `base`, `len`, `offset`, `path_len`, then `path_len` bytes of path |
//! | `0x23` | munmap | 0 | `base`, `len` |
//! | `0x24` | mprotect | [`map_flags`] (prot bits only) | `base`, `len` |
//! | `0x25` | signal | 0 | `signo`, `code`, `fault_addr`, `handler` (0: default action) |
//! | `0x26` | block | instruction count `n` | `pc`, then `n` length bytes (one per instruction, 0: unknown) |
//! | `0x27` | some registers | [`RegsKind`] | `pc`, `mask`, then the registers whose bits `mask` sets, [`Hello::regs`]`.bytes` each, packed ([`some_regs_words`]) |
//! | `0x28` | order | 0 | `pc`, `seq` |
//!
//! Registers come in either form. The jitter writes `0x27` where the hook
//! library asked for fewer registers than the guest has (`cannoli heap`
//! at branches wants the stack pointer, the link register and the return
//! value, not 32 registers), and for all of them where they are 4 bytes
//! (half the words of `0x20`); `0x20` for all of a 64-bit guest's. A
//! reader gives a tool the same slice of one word per register for both,
//! the registers the mask leaves out reading as zero. `mask` names none past
//! [`Hello::regs`]`.count`, and a guest with more than [`MAX_SOME_REGS`]
//! registers has only `0x20` events.
//!
//! An order event belongs to the instruction at its `pc`, like a registers
//! event, and comes right before that instruction's registers event: where
//! the hook library asked for it (`jitter::order_here`), the instruction
//! takes the next number `seq` of one counter that every thread of the
//! process shares, from 0 (a forked child starts again from 0). So the
//! numbers of a process's threads say which of those instructions ran
//! first: the allocation functions' entries and returns, whose order
//! between threads the streams alone do not give. A reader that lost no
//! events sees every number once.
//!
//! A block event is written when QEMU translates a block, by the thread
//! that translates it and before the block first runs: it tells a reader
//! the exact length of each instruction (which a Thumb or x86 pc alone
//! does not).
//!
//! A syscall's `data` is the buffer it read or wrote where that is known
//! (`read`, `write`, `pread64`, `pwrite64`, `getrandom`, `readlink`: the bytes;
//! `open`, `openat`, `execve`, ...: the path), `data_total` its full length
//! when the capture was cut at [`MAX_SYSCALL_DATA`].

#![deny(unsafe_op_in_unsafe_fn)]

/// Version of the event layout and handshake. Both sides must agree.
pub const WIRE_VERSION: u32 = 8;

pub mod blocks;
pub mod channel;
pub mod fdplace;

// The crate's root items, one file per concept: `events` the event
// layout's tags, frames and memory tags; `handshake` the hello, welcome and
// control lines; `registers` guest architectures and their registers;
// `text` untrusted text made printable; `hex` hex numbers as people and
// logs write them.
mod events;
mod handshake;
mod hex;
mod registers;
mod text;

pub use channel::{client_addr, Addr, RingRef, Token, TokenError, ADDR_ENV, TOKEN_ENV};
pub use events::{
    frame, framed_len, map_flags, mem32_tag, mem_tag, mem_words, pc_fits, some_regs_words, tag,
    unframe, RegsKind, MAX_JIT_EVENT, MAX_SOME_REGS, MAX_SYSCALL_DATA, PC_BITS, PC_MASK,
};
pub use fdplace::FdPlace;
pub use handshake::{
    parse_control, parse_hello, BadHello, Control, ControlError, Expect, Goodbye, Hello,
    HelloError, Welcome, MAGIC, MAX_HELLO_NAME, MAX_HELLO_STRING, MAX_REGS, MAX_SYSCALL_NAMES,
};
pub use hex::parse_hex;
pub use registers::{arch_name, reg_names, RegLayout};
pub use text::{escape, tame};
