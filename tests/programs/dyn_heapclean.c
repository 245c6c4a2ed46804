/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * dyn_heapclean: heapclean.c linked dynamically: the allocator is the
 * shared C library's, and Valgrind memcheck (which replaces malloc only in
 * a dynamically linked program) can run its x86_64 build.
 */
#include "heapclean.c"
