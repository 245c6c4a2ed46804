/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * dyn_layout: layout.c linked dynamically, a PIE: QEMU also picks where the
 * program itself, its interpreter and its brk heap go (e2e/tests/layout.rs).
 */
#include "layout.c"
