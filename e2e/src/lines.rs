// SPDX-License-Identifier: GPL-2.0-or-later
//! Reading big log files line by line, the number formats of QEMU's own
//! logs (`0x`-prefixed or bare hex, decimal), and the last lines of a text.
//! The `cannoli-dump` format has its own, stricter, parsers in
//! [`crate::dump`].

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

/// Opens a file for reading with a large buffer (logs run to gigabytes).
pub fn open_log(path: &Path) -> Result<BufReader<File>, String> {
    File::open(path)
        .map(|f| BufReader::with_capacity(1 << 20, f))
        .map_err(|e| format!("cannot open {}: {e}", path.display()))
}

/// Calls `f` with each line (without its newline) and its 1-based number,
/// without keeping the lines; a line that is not UTF-8 is an error. Errors
/// name the file and line.
pub fn for_each_line(
    path: &Path,
    mut f: impl FnMut(usize, &str) -> Result<(), String>,
) -> Result<(), String> {
    each_line(path, |n, buf| {
        let line = std::str::from_utf8(buf)
            .map_err(|_| format!("not UTF-8: {:?}", String::from_utf8_lossy(buf)))?;
        f(n, line).map_err(|e| format!("{e}: {line:?}"))
    })
}

/// Like [`for_each_line`], but converts lines that are not UTF-8 lossily
/// (QEMU's logs quote guest strings).
pub fn for_lines(
    path: &Path,
    mut f: impl FnMut(usize, &str) -> Result<(), String>,
) -> Result<(), String> {
    each_line(path, |n, buf| {
        let line = String::from_utf8_lossy(buf);
        f(n, &line).map_err(|e| format!("{e}: {line:?}"))
    })
}

fn each_line(
    path: &Path,
    mut f: impl FnMut(usize, &[u8]) -> Result<(), String>,
) -> Result<(), String> {
    let mut r = open_log(path)?;
    let mut buf = Vec::with_capacity(256);
    let mut n = 0usize;
    loop {
        buf.clear();
        let got = r
            .read_until(b'\n', &mut buf)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        if got == 0 {
            return Ok(());
        }
        n += 1;
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        f(n, &buf).map_err(|e| format!("{}:{n}: {e}", path.display()))?;
    }
}

/// A hex number of at most 16 digits, with or without `0x`
/// ([`cannoli::wire::parse_hex`], with an error naming the text).
pub fn parse_hex(s: &str) -> Result<u64, String> {
    cannoli::wire::parse_hex(s).ok_or_else(|| format!("bad hex number {s:?}"))
}

/// A hex number of at most 128 bits, with or without `0x` (libmem prints a
/// 16-byte access's value as 32 digits).
pub fn parse_hex128(s: &str) -> Result<u128, String> {
    let t = s.trim();
    let d = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if d.is_empty() || d.len() > 32 || !d.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("bad hex number {s:?}"));
    }
    u128::from_str_radix(d, 16).map_err(|_| format!("bad hex number {s:?}"))
}

/// A decimal number.
pub fn dec<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("bad decimal number {s:?}"))
}

/// Last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let from = lines.len().saturating_sub(n);
    lines[from..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(parse_hex("0x10"), Ok(16));
        assert_eq!(parse_hex("ff"), Ok(255));
        assert_eq!(parse_hex("0x0000000000000001"), Ok(1));
        assert!(parse_hex("0x00000000000000001").is_err());
        assert!(parse_hex("0x").is_err());
        assert!(parse_hex("+1").is_err());
        assert_eq!(
            parse_hex128(&format!("0x{}", "f".repeat(32))),
            Ok(u128::MAX)
        );
        assert!(parse_hex128(&"f".repeat(33)).is_err());
        assert_eq!(dec::<u32>(" 12 "), Ok(12));
        assert!(dec::<u32>("x").is_err());
    }

    #[test]
    fn line_errors_name_the_line() {
        let d = crate::run::RunDir::new();
        let p = d.file("l");
        std::fs::write(&p, b"a\nb\xff\n").unwrap();
        let e = for_each_line(&p, |_, _| Ok(())).unwrap_err();
        assert!(e.contains(":2:") && e.contains("not UTF-8"), "{e}");
        let mut seen = Vec::new();
        for_lines(&p, |n, l| {
            seen.push((n, l.to_string()));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![(1, "a".to_string()), (2, "b\u{fffd}".to_string())]
        );
        let e = for_lines(&p, |_, _| Err("no".into())).unwrap_err();
        assert!(e.contains(":1: no: \"a\""), "{e}");
    }
}
