// SPDX-License-Identifier: GPL-2.0-or-later
//! The probe points of the command line (`-p PROBE`), parsed before any
//! symbol is looked at, so that a typo is refused in one line before the
//! program runs:
//!
//! | PROBE | what is reported |
//! |---|---|
//! | `FUNC` | the entry, with the first 6 integer arguments |
//! | `FUNC/N` | the entry, with the first N integer arguments |
//! | `FUNC:return` | the return value |
//! | `FUNC+OFF` | every general register at that instruction |
//! | `0xADDR` | every general register at that instruction |
//! | `LIB:FUNC` | `FUNC` in the shared library whose file name starts with LIB |
//!
//! FUNC may be a glob (`*` any run of characters, `?` one character), and
//! may hold `/` (Go's `crypto/sha256.block`): N is what follows the last
//! `/` when that starts with a digit. It may hold `::` (C++'s and Rust's
//! `geo::Box::area`): LIB ends at the first colon that is not half of one.

use super::error::{SpecError, Why};

/// Arguments reported at an entry unless `FUNC/N` says otherwise.
pub const DEFAULT_ARGS: usize = 6;

/// The most arguments `FUNC/N` can ask for: past the most registers a
/// convention has (Go's 16 on aarch64 and riscv64).
pub const MAX_ARGS: usize = 32;

/// Where in a function a probe fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// The first instruction, with this many arguments.
    Entry(usize),
    /// Every return, with the return value.
    Return,
    /// The instruction this far from the function's start.
    Offset(u64),
    /// The instruction at this address (no function).
    Addr(u64),
}

/// One `-p PROBE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// As given: the `probe` of each hit.
    pub text: String,
    /// `LIB:` if given: a prefix of the library's file name.
    pub lib: Option<String>,
    /// The function glob (empty for an address).
    pub func: String,
    pub point: Point,
}

fn number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

impl Spec {
    /// Parses one PROBE; `Err` is the one line naming the problem and the
    /// fix.
    pub fn parse(text: &str) -> Result<Spec, SpecError> {
        let bad = |why| {
            Err(SpecError {
                text: text.into(),
                why,
            })
        };
        let t = text.trim();
        if t.is_empty() {
            return bad(Why::Empty);
        }
        if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            return match u64::from_str_radix(h, 16) {
                Ok(a) => Ok(Spec {
                    text: text.into(),
                    lib: None,
                    func: String::new(),
                    point: Point::Addr(a),
                }),
                Err(_) => bad(Why::NotHex),
            };
        }
        let (rest, ret) = match t.strip_suffix(":return") {
            Some(r) => (r, true),
            None => (t, false),
        };
        // `LIB:` ends at the first lone colon: C++'s `::` is part of a
        // name (`geo::Box::area`).
        let (lib, rest) = match lone_colon(rest) {
            Some(i) => {
                let (l, f) = (&rest[..i], &rest[i + 1..]);
                if l.is_empty() || lone_colon(f).is_some() {
                    return bad(Why::TooManyColons);
                }
                (Some(l.to_string()), f)
            }
            None => (None, rest),
        };
        // A `/` is N's only when a digit follows the last one: Go's
        // symbols have package paths (`crypto/sha256.block`).
        let slash_n = rest
            .rsplit_once('/')
            .filter(|(_, n)| n.starts_with(|c: char| c.is_ascii_digit()));
        let (func, point) = if let Some((f, n)) = slash_n {
            match n.parse::<usize>() {
                Ok(n) if n <= MAX_ARGS && !ret => (f, Point::Entry(n)),
                Ok(_) if ret => return bad(Why::EntryReturn),
                _ => return bad(Why::ArgCount),
            }
        } else if let Some((f, off)) = rest.split_once('+') {
            match number(off) {
                Some(o) if !ret => (f, Point::Offset(o)),
                Some(_) => return bad(Why::OffsetReturn),
                None => return bad(Why::OffsetNotNumber),
            }
        } else if ret {
            (rest, Point::Return)
        } else {
            (rest, Point::Entry(DEFAULT_ARGS))
        };
        if func.is_empty() {
            return bad(Why::NoName);
        }
        if func.contains(char::is_whitespace) {
            return bad(Why::Spaces);
        }
        Ok(Spec {
            text: text.into(),
            lib,
            func: func.into(),
            point,
        })
    }

    /// Whether the probe names functions by a glob rather than one name.
    pub fn is_glob(&self) -> bool {
        self.func.contains(['*', '?'])
    }
}

/// Where the first colon of `s` that is not half of a `::` is.
pub fn lone_colon(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b':' {
            if b.get(i + 1) == Some(&b':') {
                i += 2;
                continue;
            }
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Whether `name` matches `pat` (`*`: any run, `?`: one character).
pub fn glob(pat: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pat.chars().collect(), name.chars().collect());
    // Backtracking over the last `*` only: linear enough for symbol names.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form() {
        let s = Spec::parse("strlen").unwrap();
        assert_eq!(
            (s.lib, s.func.as_str(), s.point),
            (None, "strlen", Point::Entry(6))
        );
        assert_eq!(Spec::parse("f/2").unwrap().point, Point::Entry(2));
        assert_eq!(Spec::parse("f:return").unwrap().point, Point::Return);
        assert_eq!(Spec::parse("f+0x10").unwrap().point, Point::Offset(16));
        assert_eq!(Spec::parse("f+12").unwrap().point, Point::Offset(12));
        assert_eq!(
            Spec::parse("0x4000a0").unwrap().point,
            Point::Addr(0x4000a0)
        );
        let s = Spec::parse("libc:str*:return").unwrap();
        assert_eq!((s.lib.as_deref(), s.func.as_str()), (Some("libc"), "str*"));
        assert_eq!(s.point, Point::Return);
        assert!(s.is_glob());
        assert_eq!(Spec::parse("libc:strlen/1").unwrap().text, "libc:strlen/1");
        // C++'s qualified names, alone or in a library.
        let s = Spec::parse("geo::Box::area:return").unwrap();
        assert_eq!(
            (s.lib.as_deref(), s.func.as_str(), s.point),
            (None, "geo::Box::area", Point::Return)
        );
        let s = Spec::parse("libgeo:geo::*/2").unwrap();
        assert_eq!(
            (s.lib.as_deref(), s.func.as_str(), s.point),
            (Some("libgeo"), "geo::*", Point::Entry(2))
        );
        assert!(Spec::parse("a:b:c").is_err());
        // Go's package paths.
        let s = Spec::parse("crypto/sha256.block:return").unwrap();
        assert_eq!(
            (s.func.as_str(), s.point),
            ("crypto/sha256.block", Point::Return)
        );
        let s = Spec::parse("crypto/sha256.block/3").unwrap();
        assert_eq!(
            (s.func.as_str(), s.point),
            ("crypto/sha256.block", Point::Entry(3))
        );
    }

    #[test]
    fn bad_probes_say_what_to_write() {
        for bad in [
            "",
            "0xzz",
            "f/2x",
            "f/99",
            "f+y",
            "a:b:c",
            "f/2:return",
            "/3",
            "f g",
        ] {
            let e = Spec::parse(bad).unwrap_err().to_string();
            assert!(e.contains("write FUNC") && !e.contains('\n'), "{bad}: {e}");
        }
        let e = Spec::parse("f/99").unwrap_err();
        assert_eq!(e.why, Why::ArgCount);
        assert_eq!(
            e.to_string(),
            "probe \"f/99\": N of FUNC/N must be 0 to 32; write FUNC, FUNC/N, FUNC:return, \
             FUNC+OFF, 0xADDR or LIB:FUNC"
        );
    }

    #[test]
    fn globs() {
        assert!(glob("str*", "strlen") && glob("str*", "str"));
        assert!(!glob("str*", "memcpy"));
        assert!(glob("*", "anything") && glob("pr_?ec", "pr_rec"));
        assert!(glob("*len", "strlen") && !glob("*len", "strlent"));
        assert!(glob("a*b*c", "aXXbYYc") && !glob("a*b*c", "aXXbYY"));
        assert!(glob("exact", "exact") && !glob("exact", "exactly"));
    }
}
