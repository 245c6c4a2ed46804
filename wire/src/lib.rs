//! The cannoli wire format: what QEMU's side (the jitter) writes into a
//! [mempipe] chunk and what the client parses back out, plus the one-line
//! JSON handshake on the control connection ([`channel`]).
//!
//! Both sides link this crate, so a change here changes both at once; bump
//! [`WIRE_VERSION`] whenever the layout changes so an old client refuses a new
//! QEMU side with a clear message instead of misparsing it.
//!
//! # Events
//!
//! A chunk is a sequence of little-endian `u64` words, every event starts on
//! an 8-byte boundary. The top byte of an event's first word is its [`Tag`];
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

use serde::{Deserialize, Serialize};

/// Version of the event layout and handshake. Both sides must agree.
pub const WIRE_VERSION: u32 = 6;

pub mod blocks;
pub mod channel;
pub mod fdplace;

pub use channel::{client_addr, Addr, RingRef, Token, ADDR_ENV, TOKEN_ENV};
pub use fdplace::FdPlace;

/// The guest architecture's name as users know it. QEMU reports
/// `UNAME_MACHINE` ("mips" for both endiannesses of 32-bit MIPS); a
/// little-endian MIPS guest is called "mipsel" like its qemu-mipsel binary.
pub fn arch_name(uname_machine: &str, big_endian: bool) -> String {
    match (uname_machine, big_endian) {
        ("mips", false) => "mipsel".into(),
        ("mips64", false) => "mips64el".into(),
        (m, _) => m.into(),
    }
}

/// Number of bits of the first word that carry the pc.
pub const PC_BITS: u32 = 56;
/// Mask selecting the pc bits of a first word.
pub const PC_MASK: u64 = (1 << PC_BITS) - 1;

/// Largest event the JIT writes, in bytes. A chunk always has at least this
/// much room left when the JIT starts an event.
pub const MAX_JIT_EVENT: usize = 40;

/// Event tags (the top byte of an event's first word).
pub mod tag {
    /// Executed instruction, pc in the low 56 bits.
    pub const EXEC: u8 = 0x00;
    /// Executed instruction, pc in the next word.
    pub const EXEC_LONG: u8 = 0x01;
    /// Load of 16 bytes: value in two words, low then high.
    pub const LOAD128: u8 = 0x02;
    /// Store of 16 bytes, laid out like [`LOAD128`].
    pub const STORE128: u8 = 0x03;
    /// A translated block starts: its [`crate::blocks`] entry id in the low
    /// 56 bits.
    pub const RUN: u8 = 0x04;
    /// The running block was left after the instruction at the pc in the
    /// low 56 bits.
    pub const CUT: u8 = 0x05;
    /// A cut with the pc in the next word.
    pub const CUT_LONG: u8 = 0x06;
    /// Load of `1 << (tag & 3)` bytes.
    pub const LOAD: u8 = 0x10;
    /// Store of `1 << (tag & 3)` bytes.
    pub const STORE: u8 = 0x18;
    /// Load of `1 << (tag & 3)` (at most 4) bytes by a 32-bit guest: address
    /// and value share the second word (a third less data than `LOAD`).
    pub const LOAD32: u8 = 0x14;
    /// Store, packed like [`LOAD32`].
    pub const STORE32: u8 = 0x1c;
    /// Memory access with the pc in the next word; the low byte of the first
    /// word is the `LOAD`/`STORE` tag it stands for.
    pub const MEM_LONG: u8 = 0x1f;
    /// First tag of the framed events; every tag from here on is framed.
    pub const FRAMED: u8 = 0x20;
    /// Guest registers at an instruction (Register and Branch hooks).
    pub const REGS: u8 = 0x20;
    /// A guest system call with its arguments and result.
    pub const SYSCALL: u8 = 0x21;
    /// A new guest mapping.
    pub const MMAP: u8 = 0x22;
    /// Guest memory unmapped.
    pub const MUNMAP: u8 = 0x23;
    /// Guest memory protection changed.
    pub const MPROTECT: u8 = 0x24;
    /// A signal delivered to the guest.
    pub const SIGNAL: u8 = 0x25;
    /// A translated block's instruction lengths.
    pub const BLOCK: u8 = 0x26;
}

/// First word of a framed event: tag, 24 bits of `aux`, length in words.
#[inline]
pub fn frame(tag: u8, aux: u32, len_words: u32) -> u64 {
    debug_assert!(tag >= tag::FRAMED && aux < 1 << 24 && len_words >= 1);
    (tag as u64) << 56 | ((aux & 0xff_ffff) as u64) << 32 | len_words as u64
}

/// Splits a framed event's first word into (tag, aux, length in words).
#[inline]
pub fn unframe(w: u64) -> (u8, u32, u32) {
    ((w >> 56) as u8, ((w >> 32) & 0xff_ffff) as u32, w as u32)
}

/// `aux` of a registers event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum RegsKind {
    /// A Register hook: `regs` callback.
    Regs = 0,
    /// A Branch hook on an instruction that cannot end a basic block.
    BranchNo = 1,
    /// A Branch hook on an instruction that can end a basic block.
    BranchYes = 2,
}

/// Bits of the `aux` of mmap and mprotect events.
pub mod map_flags {
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    pub const EXEC: u32 = 4;
    /// Not backed by a file (the path is empty).
    pub const ANON: u32 = 8;
    /// MAP_SHARED.
    pub const SHARED: u32 = 16;
}

/// Most bytes of a syscall's buffer carried in its event.
pub const MAX_SYSCALL_DATA: usize = 4096;

/// Words a framed event needs for `payload_bytes` bytes after `fixed_words`.
#[inline]
pub fn framed_len(fixed_words: usize, payload_bytes: usize) -> usize {
    fixed_words + payload_bytes.div_ceil(8)
}

/// Where a guest's general purpose registers are, as QEMU describes them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RegLayout {
    /// Number of registers in a registers event (one word each, the guest
    /// value zero-extended to 64 bits).
    pub count: u32,
    /// Bytes each register has in the guest (4 or 8).
    pub bytes: u32,
    /// Their names, in event order (empty when the arch is unknown here).
    pub names: Vec<String>,
}

/// The general purpose register names of `arch` (as [`arch_name`] gives it),
/// in the order QEMU keeps them; empty for an arch this crate doesn't know.
pub fn reg_names(arch: &str) -> &'static [&'static str] {
    const MIPS: [&str; 32] = [
        "zero", "at", "v0", "v1", "a0", "a1", "a2", "a3", "t0", "t1", "t2", "t3", "t4", "t5", "t6",
        "t7", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "t8", "t9", "k0", "k1", "gp", "sp",
        "fp", "ra",
    ];
    const RISCV: [&str; 32] = [
        "zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", "a0", "a1", "a2", "a3", "a4",
        "a5", "a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4",
        "t5", "t6",
    ];
    const AARCH64: [&str; 32] = [
        "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13",
        "x14", "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26",
        "x27", "x28", "x29", "x30", "sp",
    ];
    const X86_64: [&str; 16] = [
        "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12",
        "r13", "r14", "r15",
    ];
    const ARM: [&str; 16] = [
        "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12", "sp",
        "lr", "pc",
    ];
    // QEMU's env->regs of a 32-bit x86 guest: the same order as x86_64's
    // first eight (the ModRM register numbers).
    const I386: [&str; 8] = ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi"];
    // env->gpr of PowerPC: r1 is the stack pointer and r2 the TOC pointer by
    // the ABI, not by the hardware, so the hardware names are the useful
    // ones (they are also what objdump and gdb print). LR and CTR are not
    // general purpose registers and are not in the event.
    const PPC: [&str; 32] = [
        "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12", "r13",
        "r14", "r15", "r16", "r17", "r18", "r19", "r20", "r21", "r22", "r23", "r24", "r25", "r26",
        "r27", "r28", "r29", "r30", "r31",
    ];
    match arch {
        "mips" | "mipsel" | "mips64" | "mips64el" | "mipsn32" | "mipsn32el" => &MIPS,
        "riscv32" | "riscv64" => &RISCV,
        "aarch64" | "aarch64_be" => &AARCH64,
        "x86_64" => &X86_64,
        // QEMU's linux-user calls a 32-bit x86 guest `i686` (its uname
        // machine), the launcher and Debian `i386`.
        "i386" | "i486" | "i586" | "i686" | "x86" => &I386,
        "ppc" | "ppc64" | "ppc64le" | "powerpc" | "powerpc64" | "powerpc64le" => &PPC,
        // QEMU's linux-user calls an ARM guest `armv5tel` / `armv5teb`
        // (its uname machine), the launcher `arm` / `armeb`, the kernel
        // `armv7l` and the like.
        "arm" | "armeb" => &ARM,
        a if a.starts_with("armv") => &ARM,
        _ => &[],
    }
}

/// True if `pc` fits in the first word of an event.
#[inline]
pub fn pc_fits(pc: u64) -> bool {
    pc >> PC_BITS == 0
}

/// Tag of a memory access of `size_log2` (0..=4) bytes: a 16-byte access
/// has its own tag, as its value takes two words.
#[inline]
pub fn mem_tag(store: bool, size_log2: u8) -> u8 {
    debug_assert!(size_log2 <= 4);
    match (size_log2, store) {
        (4, false) => tag::LOAD128,
        (4, true) => tag::STORE128,
        _ => (if store { tag::STORE } else { tag::LOAD }) | size_log2,
    }
}

/// Words of a memory event with tag `t` (as [`mem_tag`] gives it) and a
/// pc that fits the first word.
#[inline]
pub fn mem_words(t: u8) -> usize {
    if t == tag::LOAD128 || t == tag::STORE128 {
        4
    } else {
        3
    }
}

/// Tag of a packed (two-word) access of `size_log2` (0..=2) bytes by a
/// 32-bit guest.
#[inline]
pub fn mem32_tag(store: bool, size_log2: u8) -> u8 {
    debug_assert!(size_log2 <= 2);
    (if store { tag::STORE32 } else { tag::LOAD32 }) | size_log2
}

/// First message on a connection, sent by QEMU's side as one JSON line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Hello {
    /// Always `"cannoli"`: lets the client reject a stray connection.
    pub magic: String,
    /// [`WIRE_VERSION`] of the sender.
    pub wire_version: u32,
    /// Version of the jitter crate, for error messages.
    pub jitter_version: String,
    pub pid: i32,
    pub ppid: i32,
    pub tid: i32,
    /// QEMU's `UNAME_MACHINE` for the guest, e.g. `mipsel`, `riscv64`.
    pub arch: String,
    pub big_endian: bool,
    /// Guest virtual address width: 32 or 64.
    pub guest_bits: u32,
    /// Where the mempipe ring carrying this thread's events is.
    pub ring: RingRef,
    /// QEMU's nonce (hex), see [`channel`].
    pub nonce: String,
    /// HMAC over both nonces with the run's secret: QEMU holds it.
    pub proof: String,
    /// Guest program name and path, where known.
    pub comm: Option<String>,
    pub exe: Option<String>,
    /// What a registers event carries.
    #[serde(default)]
    pub regs: RegLayout,
    /// Syscall names by the guest's own syscall numbers, where QEMU knows them.
    #[serde(default)]
    pub syscall_names: std::collections::BTreeMap<u64, String>,
    /// Where the process's block table ([`blocks`]) is: passed with the
    /// hello after the ring's fd (`Attached`), or QEMU's fd of that number
    /// (TCP). `None`: the sender has no table.
    #[serde(default)]
    pub blocks: Option<RingRef>,
}

/// Magic string of [`Hello`].
pub const MAGIC: &str = "cannoli";

/// The client's answer to [`Hello`], one JSON line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Welcome {
    /// `None` when the client accepts the stream; otherwise why it refuses.
    pub error: Option<String>,
    /// HMAC over both nonces with the run's secret: the client holds it
    /// (absent in a refusal).
    #[serde(default)]
    pub proof: Option<String>,
}

/// Last message of a connection, sent by QEMU's side after it published its
/// final chunk and closed the ring. A connection that ends without it means
/// QEMU died before it could hand over its last partial chunk.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Goodbye {
    /// Chunks published on the ring, in total.
    pub chunks: u64,
    /// Events the JIT could not record (always 0 unless the client went away).
    pub lost_events: u64,
    /// The stream ends because the process execs a program that QEMU runs
    /// traced again: a new connection of the same pid follows.
    #[serde(default)]
    pub exec: bool,
}

/// A control message in the middle of a stream: the process forked, and the
/// child (which connects on its own, maybe after the parent has gone) is
/// part of the traced tree.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Expect {
    pub expect_pid: i32,
}

/// What may follow the handshake on a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    Expect(Expect),
    Goodbye(Goodbye),
}

/// Most registers a registers event may announce.
pub const MAX_REGS: u32 = 256;
/// Most syscall names a hello may carry.
pub const MAX_SYSCALL_NAMES: usize = 4096;
/// Longest string field (paths) in a hello.
pub const MAX_HELLO_STRING: usize = 4096;
/// Longest name (arch, register, syscall, version) in a hello.
pub const MAX_HELLO_NAME: usize = 64;

/// Why a hello line was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelloError {
    /// Not a cannoli hello at all (not JSON, or no `"magic":"cannoli"`).
    NotCannoli,
    /// A cannoli hello of another wire version: `theirs` (None when it
    /// names none) from jitter `jitter_version`.
    Version {
        theirs: Option<u64>,
        jitter_version: Option<String>,
    },
    /// Of our version but malformed or out of bounds.
    Malformed(String),
}

impl std::fmt::Display for HelloError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HelloError::NotCannoli => f.write_str("not a cannoli hello"),
            HelloError::Version {
                theirs,
                jitter_version,
            } => write!(
                f,
                "wire version mismatch: QEMU's cannoli hook library (jitter {}) speaks wire version {}, \
                 this client speaks wire version {WIRE_VERSION}; rebuild the hook library against the \
                 same cannoli version as the client",
                jitter_version
                    .as_deref()
                    .map_or_else(|| "of unknown version".into(), |v| tame(v, MAX_HELLO_NAME)),
                theirs.map_or_else(|| "none".to_string(), |t| t.to_string()),
            ),
            HelloError::Malformed(m) => write!(f, "malformed hello: {}", tame(m, 300)),
        }
    }
}

/// Untrusted text made fit for one line of a message: control characters
/// escaped (a terminal sees no escape sequence, a log no line break), at
/// most `max` bytes of it kept (escapes included), `…` marking a cut.
pub fn tame(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let before = out.len();
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
        if out.len() > max {
            out.truncate(before);
            out.push('…');
            break;
        }
    }
    out
}

/// Untrusted text (a program's or a file's name from a trace, a recorded
/// command line) fit to print: control characters escaped (`\u{1b}`,
/// `\n`, ...), so that a terminal sees no escape sequence and a line stays
/// one line; unchanged (and not copied) when it has none.
pub fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Parses and bounds-checks QEMU's hello line: every size it states is one
/// the client may allocate by. Magic and version are looked at first, so a
/// QEMU side of another wire version gets a version message, not a parse
/// error.
pub fn parse_hello(line: &str) -> Result<Hello, HelloError> {
    let v: serde_json::Value =
        serde_json::from_str(line.trim_end()).map_err(|_| HelloError::NotCannoli)?;
    if v.get("magic").and_then(|m| m.as_str()) != Some(MAGIC) {
        return Err(HelloError::NotCannoli);
    }
    let theirs = v.get("wire_version").and_then(|w| w.as_u64());
    if theirs != Some(WIRE_VERSION as u64) {
        let jitter_version = v
            .get("jitter_version")
            .and_then(|j| j.as_str())
            .map(|j| j.chars().take(MAX_HELLO_NAME).collect());
        return Err(HelloError::Version {
            theirs,
            jitter_version,
        });
    }
    let h: Hello = serde_json::from_value(v).map_err(|e| HelloError::Malformed(e.to_string()))?;
    check_hello(&h).map_err(HelloError::Malformed)?;
    Ok(h)
}

fn check_hello(h: &Hello) -> Result<(), String> {
    let long = |what: &str, s: &str, max: usize| {
        if s.len() > max {
            Err(format!("{what} is longer than {max} bytes"))
        } else {
            Ok(())
        }
    };
    // Names QEMU's side makes up itself (not the guest's file names, which
    // may hold anything and are escaped where printed): never a control
    // character, which a tool would print as is.
    let name = |what: &str, s: &str, max: usize| {
        long(what, s, max)?;
        if s.chars().any(char::is_control) {
            return Err(format!("{what} holds a control character"));
        }
        Ok(())
    };
    if h.pid <= 0 || h.tid <= 0 || h.ppid < 0 {
        return Err("pid, tid and ppid must be positive".into());
    }
    if h.guest_bits != 32 && h.guest_bits != 64 {
        return Err(format!("guest_bits is {}, not 32 or 64", h.guest_bits));
    }
    name("arch", &h.arch, MAX_HELLO_NAME)?;
    name("jitter_version", &h.jitter_version, MAX_HELLO_NAME)?;
    long("nonce", &h.nonce, MAX_HELLO_NAME)?;
    long("proof", &h.proof, 2 * MAX_HELLO_NAME)?;
    for s in [&h.comm, &h.exe].into_iter().flatten() {
        long("a program name", s, MAX_HELLO_STRING)?;
    }
    if h.regs.count > MAX_REGS {
        return Err(format!(
            "regs.count is {}, more than {MAX_REGS}",
            h.regs.count
        ));
    }
    if h.regs.count > 0 && h.regs.bytes != 4 && h.regs.bytes != 8 {
        return Err(format!("regs.bytes is {}, not 4 or 8", h.regs.bytes));
    }
    if h.regs.names.len() > h.regs.count as usize {
        return Err("more register names than registers".into());
    }
    for n in &h.regs.names {
        name("a register name", n, MAX_HELLO_NAME)?;
    }
    if h.syscall_names.len() > MAX_SYSCALL_NAMES {
        return Err(format!("more than {MAX_SYSCALL_NAMES} syscall names"));
    }
    for n in h.syscall_names.values() {
        name("a syscall name", n, MAX_HELLO_NAME)?;
    }
    if let RingRef::ProcFd(fd) = h.ring {
        if fd < 0 {
            return Err("the ring's fd number is negative".into());
        }
    }
    if let Some(RingRef::ProcFd(fd)) = h.blocks {
        if fd < 0 {
            return Err("the block table's fd number is negative".into());
        }
    }
    Ok(())
}

/// Parses a control line (after the handshake): an [`Expect`] or a
/// [`Goodbye`]. A pid QEMU announces must be a real child's: above 1.
pub fn parse_control(line: &str) -> Result<Control, String> {
    let line = line.trim_end();
    if let Ok(e) = serde_json::from_str::<Expect>(line) {
        if e.expect_pid <= 1 {
            return Err(format!(
                "announces pid {}, which cannot be a child",
                e.expect_pid
            ));
        }
        return Ok(Control::Expect(e));
    }
    serde_json::from_str::<Goodbye>(line)
        .map(Control::Goodbye)
        .map_err(|_| "neither an expect nor a goodbye".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_do_not_overlap() {
        let mut seen = std::collections::BTreeSet::new();
        for t in [tag::EXEC, tag::EXEC_LONG, tag::MEM_LONG] {
            assert!(seen.insert(t));
        }
        for s in [false, true] {
            for l in 0..4 {
                assert!(seen.insert(mem_tag(s, l)));
            }
            for l in 0..3 {
                assert!(seen.insert(mem32_tag(s, l)));
            }
        }
        assert!(seen.iter().all(|&t| t < tag::FRAMED));
    }

    #[test]
    fn hello_roundtrip() {
        let h = Hello {
            magic: MAGIC.into(),
            wire_version: WIRE_VERSION,
            jitter_version: "0.1.0".into(),
            pid: 1,
            ppid: 0,
            tid: 1,
            arch: "mipsel".into(),
            big_endian: false,
            guest_bits: 32,
            ring: RingRef::ProcFd(7),
            nonce: "00".repeat(16),
            proof: "11".repeat(32),
            comm: None,
            exe: Some("/bin/true".into()),
            regs: RegLayout {
                count: 32,
                bytes: 4,
                names: vec!["zero".into()],
            },
            syscall_names: [(4001, "exit".to_string())].into_iter().collect(),
            blocks: Some(RingRef::ProcFd(8)),
        };
        let s = serde_json::to_string(&h).unwrap();
        assert!(!s.contains('\n'));
        assert_eq!(serde_json::from_str::<Hello>(&s).unwrap(), h);
    }

    fn good_hello() -> Hello {
        Hello {
            magic: MAGIC.into(),
            wire_version: WIRE_VERSION,
            jitter_version: "0.1.0".into(),
            pid: 10,
            ppid: 1,
            tid: 10,
            arch: "x86_64".into(),
            big_endian: false,
            guest_bits: 64,
            ring: RingRef::Attached,
            nonce: "00".repeat(16),
            proof: "11".repeat(32),
            comm: None,
            exe: None,
            regs: RegLayout {
                count: 16,
                bytes: 8,
                names: vec![],
            },
            syscall_names: Default::default(),
            blocks: None,
        }
    }

    #[test]
    fn escaped_text_prints_as_one_harmless_line() {
        assert!(matches!(escape("/bin/ls"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(escape("a\u{1b}[31mb\nc"), "a\\u{1b}[31mb\\nc");
        assert!(!escape("\u{1b}]0;title\u{7}").chars().any(char::is_control));
    }

    #[test]
    fn hello_bounds() {
        let line = |h: &Hello| serde_json::to_string(h).unwrap() + "\n";
        assert_eq!(parse_hello(&line(&good_hello())).unwrap(), good_hello());
        // A hello without a block table (the field absent) is fine.
        let mut v = serde_json::to_value(good_hello()).unwrap();
        v.as_object_mut().unwrap().remove("blocks");
        assert_eq!(parse_hello(&v.to_string()).unwrap().blocks, None);
        let mut h = good_hello();
        h.blocks = Some(RingRef::Attached);
        assert_eq!(parse_hello(&line(&h)).unwrap(), h);
        // Each spoils one field of a good hello.
        type Spoil = Box<dyn Fn(&mut Hello)>;
        let bad: Vec<(&str, Spoil)> = vec![
            ("regs.count", Box::new(|h| h.regs.count = u32::MAX)),
            ("regs.bytes", Box::new(|h| h.regs.bytes = 3)),
            ("guest_bits", Box::new(|h| h.guest_bits = 48)),
            ("positive", Box::new(|h| h.pid = 0)),
            ("arch", Box::new(|h| h.arch = "x".repeat(1000))),
            ("program name", Box::new(|h| h.exe = Some("/".repeat(5000)))),
            (
                "register names",
                Box::new(|h| h.regs.names = vec!["r".into(); 17]),
            ),
            (
                "syscall names",
                Box::new(|h| h.syscall_names = (0..5000).map(|n| (n, "x".to_string())).collect()),
            ),
            (
                "control character",
                Box::new(|h| h.arch = "mips\u{1b}[2J".into()),
            ),
            (
                "a register name holds a control character",
                Box::new(|h| h.regs.names = vec!["r\n0".into()]),
            ),
            (
                "a syscall name holds a control character",
                Box::new(|h| h.syscall_names = [(1, "ex\u{7}it".to_string())].into()),
            ),
            ("negative", Box::new(|h| h.ring = RingRef::ProcFd(-1))),
            (
                "table's fd number is negative",
                Box::new(|h| h.blocks = Some(RingRef::ProcFd(-2))),
            ),
        ];
        for (what, f) in bad {
            let mut h = good_hello();
            f(&mut h);
            match parse_hello(&line(&h)) {
                Err(HelloError::Malformed(m)) => assert!(m.contains(what), "{what}: {m}"),
                other => panic!("{what}: {other:?}"),
            }
        }
        assert_eq!(parse_hello("GET / HTTP/1.0"), Err(HelloError::NotCannoli));
        assert_eq!(
            parse_hello("{\"magic\":\"x\"}"),
            Err(HelloError::NotCannoli)
        );
        let old = line(&good_hello()).replace(
            &format!("\"wire_version\":{WIRE_VERSION}"),
            "\"wire_version\":4",
        );
        let e = parse_hello(&old).unwrap_err();
        assert!(
            matches!(
                e,
                HelloError::Version {
                    theirs: Some(4),
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("jitter 0.1.0"), "{e}");
    }

    #[test]
    fn refusals_are_one_tame_line() {
        let line = |h: &Hello| serde_json::to_string(h).unwrap() + "\n";
        let mut bad = Vec::new();
        let mut v = serde_json::to_value(good_hello()).unwrap();
        v["pid"] = "x\u{1b}[31m\n".repeat(2000).into();
        bad.push(v.to_string());
        let mut v = serde_json::to_value(good_hello()).unwrap();
        v["ring"] = "\u{1b}]0;title\u{7}\nnext".into();
        bad.push(v.to_string());
        let mut h = good_hello();
        h.wire_version = 4;
        h.jitter_version = "\u{1b}[2J\n".repeat(50);
        bad.push(line(&h));
        for l in bad {
            let e = parse_hello(&l).unwrap_err().to_string();
            assert!(!e.chars().any(char::is_control), "{e:?}");
            assert!(e.len() < 1024, "{} bytes", e.len());
        }
        assert_eq!(tame("a\nb\u{1b}", 10), "a\\nb\\u{1b}");
        assert_eq!(tame("abcdef", 3), "abc…");
        assert_eq!(tame("ab\u{0}", 4), "ab…", "an escape is not cut in two");
    }

    #[test]
    fn control_lines() {
        assert_eq!(
            parse_control("{\"expect_pid\":42}\n"),
            Ok(Control::Expect(Expect { expect_pid: 42 }))
        );
        assert!(parse_control("{\"expect_pid\":1}").is_err());
        assert!(parse_control("{\"expect_pid\":-5}").is_err());
        assert_eq!(
            parse_control("{\"chunks\":3,\"lost_events\":0}"),
            Ok(Control::Goodbye(Goodbye {
                chunks: 3,
                lost_events: 0,
                exec: false
            }))
        );
        assert!(parse_control("{}").is_err());
        assert!(parse_control("garbage").is_err());
    }

    #[test]
    fn arch_names() {
        assert_eq!(arch_name("mips", false), "mipsel");
        assert_eq!(arch_name("mips", true), "mips");
        assert_eq!(arch_name("mips64", false), "mips64el");
        assert_eq!(arch_name("riscv64", false), "riscv64");
    }

    #[test]
    fn frames_roundtrip() {
        let w = frame(tag::SYSCALL, 1, 12);
        assert_eq!(w >> 56, tag::SYSCALL as u64);
        assert_eq!(unframe(w), (tag::SYSCALL, 1, 12));
        assert_eq!(
            unframe(frame(tag::SIGNAL, 0xff_ffff, u32::MAX)),
            (tag::SIGNAL, 0xff_ffff, u32::MAX)
        );
        assert_eq!(framed_len(10, 0), 10);
        assert_eq!(framed_len(10, 1), 11);
        assert_eq!(framed_len(10, 8), 11);
        assert_eq!(framed_len(10, 9), 12);
    }

    #[test]
    fn register_names() {
        assert_eq!(reg_names("mipsel")[29], "sp");
        assert_eq!(reg_names("riscv64")[1], "ra");
        assert_eq!(reg_names("x86_64")[4], "rsp");
        assert!(reg_names("sparc").is_empty());
        // 32-bit x86 under either of its names: QEMU's env->regs order.
        for a in ["i386", "i686"] {
            assert_eq!(
                reg_names(a),
                ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi"]
            );
        }
        // PowerPC: env->gpr, r1 the stack pointer.
        for a in ["ppc", "ppc64", "ppc64le"] {
            let n = reg_names(a);
            assert_eq!((n.len(), n[0], n[1], n[31]), (32, "r0", "r1", "r31"));
        }
        // ARM under QEMU's uname name as well as the launcher's.
        for a in ["arm", "armeb", "armv5tel", "armv5teb", "armv7l"] {
            let n = reg_names(a);
            assert_eq!(
                (n.len(), n[13], n[14], n[15]),
                (16, "sp", "lr", "pc"),
                "{a}"
            );
        }
        assert_eq!(reg_names("mips64el")[31], "ra");
        assert_eq!(reg_names("aarch64")[30], "x30");
        assert_eq!(reg_names("aarch64")[31], "sp");
        // Only `armv...` machine names are taken as ARM, not any `arm...`.
        assert!(reg_names("armhf").is_empty());
    }

    #[test]
    fn pc_fits_boundaries() {
        assert!(pc_fits(0x00ff_ffff_ffff_ffff));
        assert!(!pc_fits(0x0100_0000_0000_0000));
    }
}
