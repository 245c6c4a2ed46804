// SPDX-License-Identifier: GPL-2.0-or-later
//! The stream description a chunk is decoded for: the guest width, the
//! register count and the byte order a hello would have announced, read
//! from the input's first bytes.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use cannoli::ClientInfo;

/// The stream description a chunk is decoded for.
#[derive(Debug, Clone)]
pub struct Stream {
    pub bits: u32,
    pub reg_count: u32,
    pub big_endian: bool,
    /// Bytes the chunk is placed off an 8-byte boundary.
    pub misalign: usize,
}

impl Stream {
    pub(super) fn from_bytes(h: &[u8; 5]) -> Stream {
        const BITS: [u32; 8] = [32, 64, 32, 64, 0, 16, 63, 65];
        let count = u16::from_le_bytes([h[2], h[3]]) as u32;
        Stream {
            bits: BITS[h[1] as usize % BITS.len()],
            // Mostly counts a hello may announce; now and then any.
            reg_count: if h[4] & 0x10 != 0 {
                u32::MAX - count
            } else if h[4] & 0x20 != 0 {
                count
            } else {
                count % 65
            },
            big_endian: h[4] & 1 != 0,
            misalign: ((h[4] >> 1) & 7) as usize,
        }
    }

    /// The 5-byte header [`run`](super::run) reads this description from (`structured`
    /// picks the mode).
    pub fn header(bits: u32, reg_count: u16, big_endian: bool, structured: bool) -> [u8; 5] {
        let b = match bits {
            32 => 0,
            64 => 1,
            _ => 4,
        };
        let c = reg_count.to_le_bytes();
        [
            structured as u8,
            b,
            c[0],
            c[1],
            big_endian as u8 | if reg_count > 64 { 0x20 } else { 0 },
        ]
    }

    /// Bytes a register has: 4 on a 32-bit guest, as a hello of one says.
    pub fn reg_bytes(&self) -> u32 {
        if self.bits == 32 {
            4
        } else {
            8
        }
    }

    pub(super) fn client_info(&self) -> ClientInfo {
        ClientInfo {
            stream: 0,
            pid: 1,
            ppid: 0,
            tid: 1,
            image: 0,
            arch: "fuzz".into(),
            big_endian: self.big_endian,
            guest_bits: self.bits,
            comm: None,
            exe: None,
            jitter_version: "fuzz".into(),
            regs: wire::RegLayout {
                count: self.reg_count,
                bytes: self.reg_bytes(),
                names: Vec::new(),
            },
            syscall_names: names().clone(),
            tool_state: Default::default(),
        }
    }
}

/// The syscall names the fuzzed streams know: a few numbers, so that
/// syscall events come both with a name and without one.
pub(super) fn names() -> &'static BTreeMap<u64, String> {
    static N: OnceLock<BTreeMap<u64, String>> = OnceLock::new();
    N.get_or_init(|| {
        [(4004, "write"), (4001, "exit"), (0, "read"), (64, "write")]
            .into_iter()
            .map(|(n, s)| (n, s.to_string()))
            .collect()
    })
}
