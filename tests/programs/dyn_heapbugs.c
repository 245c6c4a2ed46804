/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * dyn_heapbugs: heapbugs.c linked dynamically, so that malloc and free are
 * the shared C library's (found through its .dynsym, at the address the
 * dynamic loader picked). Valgrind memcheck can only replace malloc in a
 * dynamically linked program (its preload needs the dynamic loader), so
 * the x86_64 build of this file is also the one memcheck runs.
 */
#include "heapbugs.c"
