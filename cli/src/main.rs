// SPDX-License-Identifier: GPL-2.0-or-later
//! The `cannoli` command (placeholder).

fn main() {}
