// SPDX-License-Identifier: GPL-2.0-or-later
//! A Go program's functions from its `.gopclntab`, the table its runtime
//! walks for stack traces: it stays in a program stripped of its symbol
//! table (`go build -ldflags=-s`, `strip`), as Go programs shipped
//! without source usually are.
//!
//! The table starts with a magic number that names its layout, in the
//! program's byte order; then the minimum instruction size and the
//! pointer size. What matters here, by layout:
//!
//! | magic | Go | header after the first 8 bytes (pointer-sized words) | function table entry | function record |
//! |---|---|---|---|---|
//! | `0xfffffffb` | 1.2 to 1.15 | count | (entry, record offset), words, from byte `8 + ptr` | entry word, name offset (i32, from the table) |
//! | `0xfffffffa` | 1.16, 1.17 | count, files, names, units, file table, pc table, function table | (entry, record offset), words | entry word, name offset (i32, from the names) |
//! | `0xfffffff0`, `0xfffffff1` | 1.18 and later | count, files, text start, names, units, file table, pc table, function table | (entry, record offset), u32 each, entries from the text start | entry (u32), name offset (i32, from the names) |
//!
//! Record offsets count from the function table (1.16 and later) or the
//! table's start (before). The table after the last function's entry
//! holds the end of the last function, so every function's end is the
//! next entry. Every offset is checked against the section: a damaged
//! table gives fewer functions, never a panic.

use object::{Object, ObjectSection};

/// One function: its name and its code, `start..end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoFunc {
    pub name: String,
    pub start: u64,
    pub end: u64,
}

/// The functions of `file`'s `.gopclntab`, if it has one that reads;
/// `None` otherwise.
pub fn functions(file: &object::File) -> Option<Vec<GoFunc>> {
    let section = file.section_by_name(".gopclntab")?;
    let data = section.data().ok()?;
    let text = file.section_by_name(".text").map_or(0, |s| s.address());
    parse(data, file.is_little_endian(), text)
}

/// Reads a table's bytes; `text`: the `.text` address, for a table whose
/// text start is 0 (a position-independent program's, relocated at load).
pub fn parse(data: &[u8], little: bool, text: u64) -> Option<Vec<GoFunc>> {
    let r = Reader { data, little };
    let r = &r;
    let magic = r.u32(0)?;
    let ptr = usize::from(*data.get(7)?);
    if ptr != 4 && ptr != 8 {
        return None;
    }
    let word = |at: usize| r.word(at, ptr);
    let header = |i: usize| word(8 + i * ptr);
    // Entry `i` of the function table: `None` once the table runs out of
    // the data, `Some(None)` for an entry whose record or name is not
    // there.
    type Entry = Option<Option<GoFunc>>;
    let (n, stride, one): (u64, usize, Box<dyn Fn(usize) -> Entry>) = match magic {
        0xffff_fffb => {
            let table = 8 + ptr;
            let one = move |i: usize| -> Entry {
                let at = table + i * 2 * ptr;
                let (start, rec) = (word(at)?, word(at + ptr)?);
                let end = word(at + 2 * ptr)?;
                let name = usize::try_from(rec)
                    .ok()
                    .and_then(|rec| r.i32(rec.checked_add(ptr)?))
                    .and_then(|off| r.name(0, off));
                Some(name.map(|name| GoFunc { name, start, end }))
            };
            (header(0)?, 2 * ptr, Box::new(one))
        }
        0xffff_fffa => {
            let names = usize::try_from(header(2)?).ok()?;
            let table = usize::try_from(header(6)?).ok()?;
            let one = move |i: usize| -> Entry {
                let at = table.checked_add(i * 2 * ptr)?;
                let (start, rec) = (word(at)?, word(at + ptr)?);
                let end = word(at + 2 * ptr)?;
                let name = usize::try_from(rec)
                    .ok()
                    .and_then(|rec| r.i32(table.checked_add(rec)?.checked_add(ptr)?))
                    .and_then(|off| r.name(names, off));
                Some(name.map(|name| GoFunc { name, start, end }))
            };
            (header(0)?, 2 * ptr, Box::new(one))
        }
        0xffff_fff0 | 0xffff_fff1 => {
            let text_start = header(2)?;
            let names = usize::try_from(header(3)?).ok()?;
            let table = usize::try_from(header(7)?).ok()?;
            let base = if text_start == 0 { text } else { text_start };
            let one = move |i: usize| -> Entry {
                let at = table.checked_add(i * 8)?;
                let (start, rec) = (r.u32(at)?, r.u32(at + 4)?);
                let end = r.u32(at + 8)?;
                let name = usize::try_from(rec)
                    .ok()
                    .and_then(|rec| r.i32(table.checked_add(rec)?.checked_add(4)?))
                    .and_then(|off| r.name(names, off));
                Some(name.map(|name| GoFunc {
                    name,
                    start: base.wrapping_add(u64::from(start)),
                    end: base.wrapping_add(u64::from(end)),
                }))
            };
            (header(0)?, 8, Box::new(one))
        }
        _ => return None,
    };
    let mut out = Vec::new();
    for i in 0..r.count(n, stride)? {
        match one(i) {
            Some(f) => out.extend(f),
            None => break,
        }
    }
    // A damaged table's entries may go backwards: such a function has no
    // code to speak of.
    out.retain(|f| f.start < f.end);
    Some(out)
}

/// Bounds-checked reads of the table in the program's byte order.
struct Reader<'a> {
    data: &'a [u8],
    little: bool,
}

impl Reader<'_> {
    fn bytes<const N: usize>(&self, at: usize) -> Option<[u8; N]> {
        self.data.get(at..at.checked_add(N)?)?.try_into().ok()
    }

    fn u32(&self, at: usize) -> Option<u32> {
        let b = self.bytes::<4>(at)?;
        Some(if self.little {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    }

    fn i32(&self, at: usize) -> Option<i32> {
        self.u32(at).map(|v| v as i32)
    }

    /// A pointer-sized word (`ptr`: 4 or 8).
    fn word(&self, at: usize, ptr: usize) -> Option<u64> {
        if ptr == 4 {
            return self.u32(at).map(u64::from);
        }
        let b = self.bytes::<8>(at)?;
        Some(if self.little {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        })
    }

    /// How many of `n` table entries of `stride` bytes the data can hold
    /// (a damaged count must not make the loop long).
    fn count(&self, n: u64, stride: usize) -> Option<usize> {
        let fit = self.data.len() / stride;
        Some(usize::try_from(n).ok()?.min(fit))
    }

    /// The NUL-terminated name at `base + off`.
    fn name(&self, base: usize, off: i32) -> Option<String> {
        let at = base.checked_add(usize::try_from(off).ok()?)?;
        let rest = self.data.get(at..)?;
        let len = rest.iter().position(|&b| b == 0)?;
        let name = std::str::from_utf8(&rest[..len]).ok()?;
        (!name.is_empty()).then(|| name.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Go 1.18 table of two functions, 4-byte pointers.
    fn table118(little: bool) -> Vec<u8> {
        let w = |v: u32| {
            if little {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            }
        };
        let mut t = Vec::new();
        t.extend(w(0xffff_fff0));
        t.extend([0, 0, 4, 4]);
        // count, files, text start, names, units, file table, pc table,
        // function table
        let names = 8 + 8 * 4;
        let table = names + 16;
        for v in [2, 0, 0x1000, names, 0, 0, 0, table] {
            t.extend(w(v as u32));
        }
        t.extend(b"main.a\0main.bb\0\0");
        // entries 0x10 and 0x40, end 0x90; records right after the table
        let rec = 5 * 4;
        for v in [0x10, rec, 0x40, rec + 8, 0x90] {
            t.extend(w(v));
        }
        for (entry, name) in [(0x10, 0), (0x40, 7)] {
            t.extend(w(entry));
            t.extend(w(name));
        }
        t
    }

    #[test]
    fn go118_functions_in_either_byte_order() {
        for little in [false, true] {
            let f = parse(&table118(little), little, 0).expect("a table");
            let got: Vec<(&str, u64, u64)> = f
                .iter()
                .map(|f| (f.name.as_str(), f.start, f.end))
                .collect();
            assert_eq!(
                got,
                [("main.a", 0x1010, 0x1040), ("main.bb", 0x1040, 0x1090)]
            );
        }
    }

    /// Pointer-sized words in either byte order.
    fn words(v: &[u64], ptr: usize, little: bool) -> Vec<u8> {
        v.iter()
            .flat_map(|&v| match (ptr, little) {
                (4, true) => (v as u32).to_le_bytes().to_vec(),
                (4, false) => (v as u32).to_be_bytes().to_vec(),
                (_, true) => v.to_le_bytes().to_vec(),
                (_, false) => v.to_be_bytes().to_vec(),
            })
            .collect()
    }

    #[test]
    fn go116_functions_big_endian_8_byte_pointers() {
        let mut t = vec![0xff, 0xff, 0xff, 0xfa, 0, 0, 4, 8];
        // count, files, names, units, file table, pc table, function table
        let names = 8 + 7 * 8;
        let table = names + 8;
        t.extend(words(&[2, 0, names, 0, 0, 0, table], 8, false));
        t.extend(b"f\0g.h\0\0\0");
        // (entry, record) twice and the end; the records from the table
        let rec = 5 * 8;
        t.extend(words(&[0x4000, rec, 0x4020, rec + 16, 0x4100], 8, false));
        t.extend(words(&[0x4000], 8, false));
        t.extend([0, 0, 0, 0, 0, 0, 0, 0]);
        t.extend(words(&[0x4020], 8, false));
        t.extend([0, 0, 0, 2, 0, 0, 0, 0]);
        let f = parse(&t, false, 0).expect("a table");
        let got: Vec<(&str, u64, u64)> = f
            .iter()
            .map(|f| (f.name.as_str(), f.start, f.end))
            .collect();
        assert_eq!(got, [("f", 0x4000, 0x4020), ("g.h", 0x4020, 0x4100)]);
    }

    #[test]
    fn go12_functions_little_endian_4_byte_pointers() {
        let mut t = vec![0xfb, 0xff, 0xff, 0xff, 0, 0, 1, 4];
        t.extend(words(&[1], 4, true));
        // (entry, record), the end, then the record and the name, both
        // from the table's start
        let rec = 8 + 4 + 3 * 4;
        t.extend(words(&[0x8000, rec, 0x8040], 4, true));
        t.extend(words(&[0x8000, rec + 8], 4, true));
        t.extend(b"main.main\0");
        let f = parse(&t, true, 0).expect("a table");
        assert_eq!(
            f,
            [GoFunc {
                name: "main.main".into(),
                start: 0x8000,
                end: 0x8040
            }]
        );
    }

    #[test]
    fn damaged_tables_give_less_and_never_panic() {
        let good = table118(true);
        assert!(parse(&[], true, 0).is_none());
        assert!(parse(&good[..7], true, 0).is_none());
        for cut in 8..good.len() {
            let _ = parse(&good[..cut], true, 0);
        }
        // A count far past the data, and every byte flipped in turn.
        let mut huge = good.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse(&huge, true, 0).is_some_and(|f| f.len() <= good.len() / 8));
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0xff;
            let _ = parse(&bad, true, 0);
        }
    }
}
