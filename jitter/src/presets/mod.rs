// SPDX-License-Identifier: GPL-2.0-or-later
//! Hook decisions that more than one hook library makes, so that each one
//! calls them instead of keeping a copy: a tool's own library and `cannoli
//! record`'s presets ask QEMU for the same events.

pub mod branches;
pub mod plan;
