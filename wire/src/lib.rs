//! The cannoli wire format: what QEMU's side (the jitter) writes into a
//! [mempipe] chunk and what the client parses back out, plus the one-line
//! JSON handshake on the TCP control connection.
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
//!
//! `addr` and `value` are the raw host register contents: the reader masks
//! `addr` to the guest's address width and `value` to the access size.

use serde::{Deserialize, Serialize};

/// Version of the event layout and handshake. Both sides must agree.
pub const WIRE_VERSION: u32 = 1;

/// Default address of the client; `CANNOLI_ADDR` overrides it on both sides.
pub const DEFAULT_ADDR: &str = "127.0.0.1:11458";

/// Environment variable naming the client's address, read by both sides.
pub const ADDR_ENV: &str = "CANNOLI_ADDR";

/// The client's address as both sides see it: `CANNOLI_ADDR` unless unset
/// or blank, else [`DEFAULT_ADDR`].
pub fn client_addr() -> String {
    match std::env::var(ADDR_ENV) {
        Ok(a) if !a.trim().is_empty() => a.trim().to_string(),
        _ => DEFAULT_ADDR.to_string(),
    }
}

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
pub const MAX_JIT_EVENT: usize = 32;

/// Event tags (the top byte of an event's first word).
pub mod tag {
    /// Executed instruction, pc in the low 56 bits.
    pub const EXEC: u8 = 0x00;
    /// Executed instruction, pc in the next word.
    pub const EXEC_LONG: u8 = 0x01;
    /// Load of `1 << (tag & 3)` bytes.
    pub const LOAD: u8 = 0x10;
    /// Store of `1 << (tag & 3)` bytes.
    pub const STORE: u8 = 0x18;
    /// Memory access with the pc in the next word; the low byte of the first
    /// word is the `LOAD`/`STORE` tag it stands for.
    pub const MEM_LONG: u8 = 0x1f;
}

/// True if `pc` fits in the first word of an event.
#[inline]
pub fn pc_fits(pc: u64) -> bool {
    pc >> PC_BITS == 0
}

/// Tag of a memory access of `size_log2` (0..=3) bytes.
#[inline]
pub fn mem_tag(store: bool, size_log2: u8) -> u8 {
    debug_assert!(size_log2 <= 3);
    (if store { tag::STORE } else { tag::LOAD }) | size_log2
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
    /// Path of the mempipe ring carrying this thread's events.
    pub ring: String,
    /// Guest program name and path, where known.
    pub comm: Option<String>,
    pub exe: Option<String>,
}

/// Magic string of [`Hello`].
pub const MAGIC: &str = "cannoli";

/// The client's answer to [`Hello`], one JSON line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Welcome {
    /// `None` when the client accepts the stream; otherwise why it refuses.
    pub error: Option<String>,
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
        }
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
            ring: "/dev/shm/x".into(),
            comm: None,
            exe: Some("/bin/true".into()),
        };
        let s = serde_json::to_string(&h).unwrap();
        assert!(!s.contains('\n'));
        assert_eq!(serde_json::from_str::<Hello>(&s).unwrap(), h);
    }

    #[test]
    fn arch_names() {
        assert_eq!(arch_name("mips", false), "mipsel");
        assert_eq!(arch_name("mips", true), "mips");
        assert_eq!(arch_name("mips64", false), "mips64el");
        assert_eq!(arch_name("riscv64", false), "riscv64");
    }

    #[test]
    fn pc_fits_boundaries() {
        assert!(pc_fits(0x00ff_ffff_ffff_ffff));
        assert!(!pc_fits(0x0100_0000_0000_0000));
    }
}
