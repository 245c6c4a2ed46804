// SPDX-License-Identifier: GPL-2.0-or-later
//! The trace's colours (ANSI escapes), or none when the trace is not
//! coloured.

const RESET: &str = "\x1b[0m";
const DIM: &str = "\x1b[2m";
const BOLD: &str = "\x1b[1m";
const CYAN: &str = "\x1b[36m";
const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const MAGENTA: &str = "\x1b[35m";

/// Colours, or empty strings.
pub(super) struct Pal {
    pub(super) reset: &'static str,
    pub(super) dim: &'static str,
    pub(super) bold: &'static str,
    pub(super) sym: &'static str,
    pub(super) read: &'static str,
    pub(super) write: &'static str,
    pub(super) val: &'static str,
}

impl Pal {
    pub(super) fn new(color: bool) -> Pal {
        if color {
            Pal {
                reset: RESET,
                dim: DIM,
                bold: BOLD,
                sym: CYAN,
                read: GREEN,
                write: RED,
                val: MAGENTA,
            }
        } else {
            Pal {
                reset: "",
                dim: "",
                bold: "",
                sym: "",
                read: "",
                write: "",
                val: "",
            }
        }
    }
}
