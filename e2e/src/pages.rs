// SPDX-License-Identifier: GPL-2.0-or-later
//! QEMU's `-d page` log: the guest's address space layout right after the
//! program is loaded, and relocating one run's addresses into another's.
//!
//! Why: a 64-bit guest without `-R` gets its stack, vDSO and mmaps where
//! the host's `mmap` puts them, near QEMU's own mappings. QEMU's plugins
//! are shared objects that QEMU maps before it loads the guest, so under a
//! plugin the guest's small early mappings (the vDSO: one or two pages
//! placed in the first hole that fits, just below the host's libraries) can
//! land elsewhere than under the same QEMU without it, and elsewhere again
//! under another plugin. cannoli must not move anything: its runs are
//! compared with the bare QEMU's layout directly, while each plugin run's
//! addresses are first moved into that layout by [`Relocation`], region by
//! region, as the two runs' `-d page` logs say.
//!
//! The plugin runs log `-d page` into the same file as the plugin (`-d
//! plugin,page`): QEMU writes each page dump under its log lock, so the
//! dumps never tear the plugin's lines apart, and the plugin log parsers
//! skip them ([`is_page_log_line`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use crate::lines::{for_lines, parse_hex};
use crate::model::MemAccess;

/// The keys QEMU prints after the layout that follows the binary load.
const LOAD_KEYS: &[&str] = &[
    "guest_base",
    "end_code",
    "start_code",
    "start_data",
    "end_data",
    "start_stack",
    "brk",
    "entry",
    "argv_start",
    "env_start",
    "auxv_start",
];

/// `<start>-<end> <size> <prot>`, all hex but prot.
fn parse_region(line: &str) -> Option<Region> {
    let mut f = line.split(' ');
    let (range, size, prot) = (f.next()?, f.next()?, f.next()?);
    if f.next().is_some() {
        return None;
    }
    let (s, e) = range.split_once('-')?;
    let hex = |x: &str| {
        (!x.is_empty() && x.len() <= 16 && x.bytes().all(|c| c.is_ascii_hexdigit()))
            .then(|| u64::from_str_radix(x, 16).ok())
            .flatten()
    };
    let (start, end, size) = (hex(s)?, hex(e)?, hex(size)?);
    let p = prot.as_bytes();
    let prot_ok = p.len() == 3
        && matches!(p[0], b'r' | b'-')
        && matches!(p[1], b'w' | b'-')
        && matches!(p[2], b'x' | b'-');
    (prot_ok && end.checked_sub(start) == Some(size)).then(|| Region {
        start,
        end,
        prot: prot.to_string(),
    })
}

/// True for every line QEMU's `-d page` writes (and nothing a plugin
/// writes): the start-up lines, the headers of the dumps, their region
/// lines, and the values printed after the binary load.
pub fn is_page_log_line(line: &str) -> bool {
    if line.starts_with("host mmap_min_addr=0x")
        || line.starts_with("Locating guest address space ")
        || line.starts_with("page layout changed following ")
    {
        return true;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    if words == ["start", "end", "size", "prot"] {
        return true;
    }
    if let [k, v] = words[..] {
        if LOAD_KEYS.contains(&k) && (v.starts_with("0x") || v == "(nil)") {
            return true;
        }
    }
    parse_region(line).is_some()
}

/// One region of a page dump (adjacent pages with the same protection).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    /// Exclusive.
    pub end: u64,
    /// `rwx` with `-` for a missing right.
    pub prot: String,
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}-{:x} {}", self.start, self.end, self.prot)
    }
}

/// The layout after the binary load (`page layout changed following binary
/// load`, the values after it, and `guest_base` printed just before).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PageLayout {
    pub regions: Vec<Region>,
    /// `start_stack`, `brk`, `entry`, ... (`guest_base` as 0 for `(nil)`).
    pub values: BTreeMap<String, u64>,
}

impl PageLayout {
    /// A value printed after the load; panics if it was not.
    pub fn value(&self, key: &str) -> u64 {
        *self
            .values
            .get(key)
            .unwrap_or_else(|| panic!("no {key} in the page log"))
    }
}

/// Reads the layout after the binary load from a log with `-d page` output
/// (possibly interleaved with a plugin's).
pub fn parse_page_layout(path: &Path) -> Result<PageLayout, String> {
    #[derive(PartialEq)]
    enum State {
        Before,
        Header,
        Regions,
        Values,
        Done,
    }
    let mut st = State::Before;
    let mut l = PageLayout::default();
    for_lines(path, |_, line| {
        match st {
            State::Before => {
                if line == "page layout changed following binary load" {
                    st = State::Header;
                } else if let Some(v) = line.strip_prefix("guest_base  ") {
                    // Printed just before that layout.
                    let v = if v == "(nil)" { 0 } else { parse_hex(v)? };
                    l.values.insert("guest_base".into(), v);
                }
            }
            State::Header => {
                if line.split_whitespace().collect::<Vec<_>>() != ["start", "end", "size", "prot"] {
                    return Err("expected the page dump's header".into());
                }
                st = State::Regions;
            }
            State::Regions | State::Values => {
                if st == State::Regions {
                    if let Some(r) = parse_region(line) {
                        l.regions.push(r);
                        return Ok(());
                    }
                    st = State::Values;
                }
                let words: Vec<&str> = line.split_whitespace().collect();
                match words[..] {
                    [k, v] if LOAD_KEYS.contains(&k) => {
                        let v = if v == "(nil)" { 0 } else { parse_hex(v)? };
                        l.values.insert(k.to_string(), v);
                        if k == "auxv_start" {
                            st = State::Done;
                        }
                    }
                    _ => return Err("expected a value after the page dump".into()),
                }
            }
            State::Done => {}
        }
        Ok(())
    })?;
    if st != State::Done {
        return Err(format!(
            "{}: no complete page layout after the binary load (was -d page given?)",
            path.display()
        ));
    }
    Ok(l)
}

/// Moves addresses of one run's regions to where another run has them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Relocation {
    /// (start in the first run, length, start in the second run), for the
    /// regions that moved.
    pub moves: Vec<(u64, u64, u64)>,
}

impl Relocation {
    /// The relocation from layout `from` to layout `to`: both must have the
    /// same regions (size and protection) but for where they are. Regions
    /// are paired in address order within each (size, protection) class.
    pub fn between(from: &PageLayout, to: &PageLayout) -> Result<Relocation, String> {
        let class = |l: &PageLayout| {
            let mut m: BTreeMap<(u64, String), Vec<u64>> = BTreeMap::new();
            for r in &l.regions {
                m.entry((r.end - r.start, r.prot.clone()))
                    .or_default()
                    .push(r.start);
            }
            m
        };
        let (a, b) = (class(from), class(to));
        let show = |l: &PageLayout| {
            l.regions
                .iter()
                .map(|r| format!("    {r}"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        if a.len() != b.len()
            || a.iter()
                .zip(&b)
                .any(|((ka, va), (kb, vb))| ka != kb || va.len() != vb.len())
        {
            return Err(format!(
                "the two layouts differ in more than where their regions are:\n  --- one\n{}\n  --- other\n{}",
                show(from),
                show(to)
            ));
        }
        let mut moves = Vec::new();
        for (((len, _), sa), (_, sb)) in a.iter().zip(&b) {
            for (&x, &y) in sa.iter().zip(sb) {
                if x != y {
                    moves.push((x, *len, y));
                }
            }
        }
        moves.sort_unstable();
        Ok(Relocation { moves })
    }

    pub fn is_identity(&self) -> bool {
        self.moves.is_empty()
    }

    /// `a` in the second run's layout.
    pub fn addr(&self, a: u64) -> u64 {
        for &(from, len, to) in &self.moves {
            if a >= from && a - from < len {
                return a - from + to;
            }
        }
        a
    }

    /// Relocates an access's pc and address, and in its value each
    /// pointer-sized (`ptr_bytes`) lane that points into a moved region (a
    /// 16-byte access often copies two pointers at once). Returns true if
    /// anything changed.
    pub fn access(&self, m: &mut MemAccess, ptr_bytes: u8) -> bool {
        let old = *m;
        m.pc = self.addr(m.pc);
        m.addr = self.addr(m.addr);
        if m.size >= ptr_bytes && ptr_bytes > 0 {
            let bits = 8 * ptr_bytes as u32;
            let mask = if bits >= 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            };
            let mut v = 0u128;
            for lane in 0..(m.size / ptr_bytes) as u32 {
                let x = (m.value >> (lane * bits)) as u64 & mask;
                v |= ((self.addr(x) & mask) as u128) << (lane * bits);
            }
            m.value = v;
        }
        *m != old
    }
}

impl fmt::Display for Relocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.moves.is_empty() {
            return f.write_str("none");
        }
        let parts: Vec<String> = self
            .moves
            .iter()
            .map(|&(from, len, to)| format!("{from:x}+{len:x} -> {to:x}"))
            .collect();
        f.write_str(&parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MemKind;
    use crate::run::RunDir;

    const LOG: &str = "host mmap_min_addr=0x10000\n\
        Locating guest address space @ 0x0\n\
        page layout changed following mmap\n\
        start            end              size             prot\n\
        0000000000010000-0000000000085000 0000000000075000 ---\n\
        guest_base  (nil)\n\
        page layout changed following binary load\n\
        start            end              size             prot\n\
        0000000000010000-0000000000079000 0000000000069000 r-x\n\
        00007fffeea00000-00007fffef200000 0000000000800000 rw-\n\
        00007ffff7fbf000-00007ffff7fc0000 0000000000001000 r-x\n\
        end_code    0x0000000000078754\n\
        start_code  0x0000000000010000\n\
        start_data  0x0000000000079db8\n\
        end_data    0x000000000007f418\n\
        start_stack 0x00007fffef1ffe50\n\
        brk         0x0000000000085000\n\
        entry       0x00000000000106e0\n\
        argv_start  0x00007fffef1ffe58\n\
        env_start   0x00007fffef1ffe68\n\
        auxv_start  0x00007fffef1ffe70\n\
        0x400634,_start,0x49a018,0x0,32,load,0x0040a000\n";

    #[test]
    fn page_lines() {
        let page = LOG.lines().filter(|l| is_page_log_line(l)).count();
        assert_eq!(page, LOG.lines().count() - 1);
        for not in [
            "0x400634,_start,0x49a018,0x0,32,load,0x0040a000",
            "0, 0x10, 0x0, \"nop\"",
            "cpu 0 insns: 12",
            "0000000000010000-0000000000079000 0000000000069001 r-x",
            "brk 12",
        ] {
            assert!(!is_page_log_line(not), "{not}");
        }
    }

    #[test]
    fn layouts_and_relocation() {
        let d = RunDir::new();
        let p = d.file("a.log");
        std::fs::write(&p, LOG).unwrap();
        let a = parse_page_layout(&p).unwrap();
        assert_eq!(a.regions.len(), 3);
        assert_eq!(a.value("start_stack"), 0x7fff_ef1f_fe50);
        assert_eq!(a.value("guest_base"), 0);
        std::fs::write(
            &p,
            LOG.replace(
                "00007ffff7fbf000-00007ffff7fc0000",
                "00007ffff7fb8000-00007ffff7fb9000",
            ),
        )
        .unwrap();
        let b = parse_page_layout(&p).unwrap();
        let r = Relocation::between(&b, &a).unwrap();
        assert_eq!(r.moves, vec![(0x7fff_f7fb_8000, 0x1000, 0x7fff_f7fb_f000)]);
        assert_eq!(r.addr(0x7fff_f7fb_8123), 0x7fff_f7fb_f123);
        assert_eq!(r.addr(0x7fff_f7fb_9000), 0x7fff_f7fb_9000);
        let mut m = MemAccess {
            pc: 0x7fff_f7fb_8010,
            addr: 0x10,
            size: 8,
            kind: MemKind::Load,
            value: 0x7fff_f7fb_8000,
        };
        assert!(r.access(&mut m, 8));
        assert_eq!(
            (m.pc, m.addr, m.value),
            (0x7fff_f7fb_f010, 0x10, 0x7fff_f7fb_f000)
        );
        let mut m = MemAccess {
            size: 4,
            value: 0x7fff_f7fb_8000,
            ..m
        };
        r.access(&mut m, 8);
        assert_eq!(m.value, 0x7fff_f7fb_8000);
        assert!(Relocation::between(&a, &a).unwrap().is_identity());
        std::fs::write(
            &p,
            LOG.replace(
                "00007ffff7fbf000-00007ffff7fc0000 0000000000001000",
                "00007ffff7fbe000-00007ffff7fc0000 0000000000002000",
            ),
        )
        .unwrap();
        let c = parse_page_layout(&p).unwrap();
        assert!(Relocation::between(&c, &a).is_err());
        std::fs::write(&p, "page layout changed following binary load\n").unwrap();
        assert!(parse_page_layout(&p).is_err());
    }
}
