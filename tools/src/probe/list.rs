// SPDX-License-Identifier: GPL-2.0-or-later
//! `--list`: the functions of a program or library that can be probed, one
//! line each, as `stap -L` lists them.

use super::elf::Image;

/// `--list`: every function of `img` matching `pattern`, like `stap -L`.
pub(super) fn list(img: &Image, pattern: &str) -> String {
    let mut s = String::new();
    let digits = if img.abi.word() == 4 { 8 } else { 16 };
    for f in img.matching(pattern) {
        s.push_str(&format!(
            "{} {:#0w$x} {} {}\n",
            f.name,
            f.start,
            f.size,
            img.path.display(),
            w = digits + 2
        ));
    }
    s
}
