// SPDX-License-Identifier: GPL-2.0-or-later
//! The drcov format (DynamoRIO's `drcov` tool, version 2, module table
//! version 2 with the Linux column set), as Lighthouse, bncov and Cutter
//! read it and as QEMU's own `contrib/plugins/drcov.c` writes it:
//!
//! ```text
//! DRCOV VERSION: 2
//! DRCOV FLAVOR: drcov-32
//! Module Table: version 2, count 2
//! Columns: id, base, end, entry, path
//!   0, 0x00400000, 0x0048b000, 0x004006d0, /path/to/program
//!   1, 0x2b2ac000, 0x2b2ad000, 0x00000000, [anon]
//! BB Table: 812 bbs
//! <812 binary entries: u32 start (offset from the module's base), u16 size
//!  in bytes, u16 module id; little-endian>
//! ```
//!
//! The flavor is `drcov-32` or `drcov-64` by the guest's address width (what
//! DynamoRIO's drcov writes for a 32- or 64-bit process; QEMU's plugin always
//! says `drcov-64`). Addresses are zero-padded to the guest's pointer width,
//! as DynamoRIO prints them. A path must not contain `", "` for the readers,
//! which split the line there; such paths are written with `,` replaced by `_`
//! (none occur in practice).

use std::io::{self, Write};

/// One row of the module table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrcovModule {
    pub base: u64,
    pub end: u64,
    pub entry: u64,
    pub path: String,
}

/// One covered block: offset from its module's base, size in bytes, module
/// (row of the module table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bb {
    pub module: u16,
    pub start: u32,
    pub size: u16,
}

/// Writes a drcov file.
pub fn write(w: &mut impl Write, bits: u32, modules: &[DrcovModule], bbs: &[Bb]) -> io::Result<()> {
    let width = if bits <= 32 { 10 } else { 18 };
    let mut head = String::new();
    head.push_str("DRCOV VERSION: 2\n");
    head.push_str(&format!(
        "DRCOV FLAVOR: drcov-{}\n",
        if bits <= 32 { 32 } else { 64 }
    ));
    head.push_str(&format!(
        "Module Table: version 2, count {}\n",
        modules.len()
    ));
    head.push_str("Columns: id, base, end, entry, path\n");
    for (id, m) in modules.iter().enumerate() {
        head.push_str(&format!(
            "{id:3}, {:#0width$x}, {:#0width$x}, {:#0width$x}, {}\n",
            m.base,
            m.end,
            m.entry,
            m.path.replace(", ", "_ ").replace('\n', "_")
        ));
    }
    head.push_str(&format!("BB Table: {} bbs\n", bbs.len()));
    w.write_all(head.as_bytes())?;
    let mut buf = Vec::with_capacity(bbs.len() * 8);
    for b in bbs {
        buf.extend_from_slice(&b.start.to_le_bytes());
        buf.extend_from_slice(&b.size.to_le_bytes());
        buf.extend_from_slice(&b.module.to_le_bytes());
    }
    w.write_all(&buf)
}

/// Coalesces instruction starts into blocks: `pcs` sorted and unique,
/// `len(pc)` the length of the instruction at `pc`. A block is a maximal
/// run of instructions each of which starts where the previous one ends,
/// cut before it would exceed `max` bytes. Returns `(start, end)` pairs.
pub fn coalesce(pcs: &[u64], max: u64, mut len: impl FnMut(u64) -> u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut cur: Option<(u64, u64)> = None;
    for &pc in pcs {
        let end = pc.saturating_add(len(pc).max(1));
        cur = match cur {
            // Contiguous, or starting inside the previous instruction (a
            // misaligned decode path): extend.
            Some((s, e)) if pc <= e && end.max(e) - s <= max => Some((s, end.max(e))),
            Some(b) => {
                out.push(b);
                Some((pc, end))
            }
            None => Some((pc, end)),
        };
    }
    out.extend(cur);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalescing() {
        let four = |_| 4;
        assert_eq!(coalesce(&[], 0xffff, four), vec![]);
        assert_eq!(
            coalesce(&[0x100, 0x104, 0x108, 0x110, 0x114], 0xffff, four),
            vec![(0x100, 0x10c), (0x110, 0x118)]
        );
        // Size cap at instruction boundaries.
        let pcs: Vec<u64> = (0..10).map(|i| 0x1000 + 4 * i).collect();
        assert_eq!(
            coalesce(&pcs, 12, four),
            vec![
                (0x1000, 0x100c),
                (0x100c, 0x1018),
                (0x1018, 0x1024),
                (0x1024, 0x1028)
            ]
        );
        // Variable lengths (RISC-V: 2 and 4 bytes).
        let len = |pc| if pc == 0x10 || pc == 0x16 { 2 } else { 4 };
        assert_eq!(
            coalesce(&[0x10, 0x12, 0x16, 0x18, 0x20], 0xffff, len),
            vec![(0x10, 0x1c), (0x20, 0x24)]
        );
        // Overlap.
        assert_eq!(coalesce(&[0x10, 0x12], 0xffff, four), vec![(0x10, 0x16)]);
    }

    #[test]
    fn file_layout() {
        let mods = vec![
            DrcovModule {
                base: 0x400000,
                end: 0x48b000,
                entry: 0x4006d0,
                path: "/x/prog".into(),
            },
            DrcovModule {
                base: 0x2b2ac000,
                end: 0x2b2ad000,
                entry: 0,
                path: "[anon]".into(),
            },
        ];
        let bbs = [
            Bb {
                module: 0,
                start: 0x6d0,
                size: 12,
            },
            Bb {
                module: 1,
                start: 0x10,
                size: 0x204,
            },
        ];
        let mut out = Vec::new();
        write(&mut out, 32, &mods, &bbs).unwrap();
        let want_head = "DRCOV VERSION: 2\nDRCOV FLAVOR: drcov-32\n\
            Module Table: version 2, count 2\nColumns: id, base, end, entry, path\n  \
            0, 0x00400000, 0x0048b000, 0x004006d0, /x/prog\n  \
            1, 0x2b2ac000, 0x2b2ad000, 0x00000000, [anon]\nBB Table: 2 bbs\n";
        assert_eq!(&out[..want_head.len()], want_head.as_bytes());
        assert_eq!(
            &out[want_head.len()..],
            &[0xd0, 6, 0, 0, 12, 0, 0, 0, 0x10, 0, 0, 0, 4, 2, 1, 0]
        );
        let mut out = Vec::new();
        write(&mut out, 64, &mods[..1], &[]).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("drcov-64\n"), "{s}");
        assert!(
            s.contains(
                "  0, 0x0000000000400000, 0x000000000048b000, 0x00000000004006d0, /x/prog\n"
            ),
            "{s}"
        );
        assert!(s.ends_with("BB Table: 0 bbs\n"), "{s}");
    }
}
