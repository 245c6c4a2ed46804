// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A custom allocator in a shared library of the program's own, and a
 * program that uses it with planted bugs (one case per run, by name).
 *
 *   built with -DPOOL_LIB -shared: libpool.so, whose pool_get and
 *   pool_put hand out blocks of a static arena, never reusing one;
 *   built without it: the program, linked against libpool.so and finding
 *   it through its DT_RUNPATH ($ORIGIN), as programs ship their own
 *   libraries.
 *
 *   pool uaf      reads a block after pool_put     (hb_pool_uaf)
 *   pool double   puts one block twice             (hb_pool_double)
 *   pool leak     drops the only pointer to one    (hb_pool_leak)
 *   pool clean    puts every block it gets
 *
 * `cannoli heap --alloc pool_get=malloc --alloc pool_put=free` must find
 * what memcheck finds. memcheck learns of the blocks from client requests
 * (its MALLOCLIKE and FREELIKE blocks), where its header is there (the
 * x86_64 build, the only one memcheck runs); elsewhere they are nothing.
 * It has a directory of its own: scripts/build-guests.sh builds each
 * tests/programs/*.c as a program by itself, which this one is not (the
 * e2e test builds both halves).
 */
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) && defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#endif
#endif
#ifndef VALGRIND_MALLOCLIKE_BLOCK
#define VALGRIND_MALLOCLIKE_BLOCK(addr, size, rz, zeroed) ((void)0)
#define VALGRIND_FREELIKE_BLOCK(addr, rz) ((void)0)
#endif

#ifdef POOL_LIB

/* 16 bytes between blocks, so that no block touches the next. */
#define GAP 16

static unsigned char arena[1 << 16];
static unsigned long used;

void *pool_get(unsigned long n)
{
    unsigned char *p = arena + used + GAP;
    used += GAP + ((n + 15) & ~15UL);
    VALGRIND_MALLOCLIKE_BLOCK(p, n, 0, 0);
    return p;
}

void pool_put(void *p)
{
    VALGRIND_FREELIKE_BLOCK(p, 0);
}

#else

void *pool_get(unsigned long n);
void pool_put(void *p);

/* Reachable at exit: no leak (external, so that the store stays). */
char *keep;

__attribute__((noinline)) static int hb_pool_uaf(void)
{
    volatile char *a = pool_get(24);
    memset((char *)a, 7, 24);
    pool_put((char *)a);
    return a[3];
}

__attribute__((noinline)) static void hb_pool_double(void)
{
    char *a = pool_get(40);
    memset(a, 1, 40);
    pool_put(a);
    pool_put(a);
}

__attribute__((noinline)) static void hb_pool_leak(void)
{
    char *volatile a = pool_get(56);
    memset(a, 2, 56);
    a = 0;
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    int r = 0;
    keep = pool_get(32);
    memset(keep, 3, 32);
    printf("%s\n", c);
    fflush(stdout);
    if (!strcmp(c, "uaf"))
        r = hb_pool_uaf() == 7 ? 0 : 1;
    else if (!strcmp(c, "double"))
        hb_pool_double();
    else if (!strcmp(c, "leak"))
        hb_pool_leak();
    else if (!strcmp(c, "clean")) {
        char *b = pool_get(8);
        memset(b, 4, 8);
        pool_put(b);
    } else {
        puts("uaf\ndouble\nleak\nclean");
    }
    return r;
}

#endif
