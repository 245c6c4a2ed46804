// SPDX-License-Identifier: GPL-2.0-or-later
//! Hex numbers as people, logs and environment variables write them.

/// A 64-bit hex number: at most 16 digits, with or without `0x` (or `0X`),
/// surrounding whitespace ignored; `None` for anything else (no sign, no
/// empty number). The one parser of the address ranges the hook libraries
/// and tools take, and of QEMU's logs in the end-to-end tests.
pub fn parse_hex(s: &str) -> Option<u64> {
    let t = s.trim();
    let d = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if d.is_empty() || d.len() > 16 || !d.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(d, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_numbers() {
        assert_eq!(parse_hex("0x10"), Some(16));
        assert_eq!(parse_hex("0X10"), Some(16));
        assert_eq!(parse_hex(" ff\n"), Some(255));
        assert_eq!(parse_hex("0x0000000000000001"), Some(1));
        assert_eq!(parse_hex("ffffffffffffffff"), Some(u64::MAX));
        for bad in ["", "0x", "+1", "-1", "0x00000000000000001", "1g", "0x 1"] {
            assert_eq!(parse_hex(bad), None, "{bad:?}");
        }
    }
}
