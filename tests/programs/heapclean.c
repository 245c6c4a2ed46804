/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * heapclean: a correct program that allocates heavily, for the `cannoli
 * heap` tests: nothing may be reported on it (and memcheck agrees on the
 * x86_64 build). Many sizes (1 byte to 256 KiB, past glibc's mmap
 * threshold), realloc growth and shrinking, calloc, posix_memalign and
 * aligned_alloc, frees in odd orders (every third, then backwards), and
 * four threads allocating and freeing at once, one freeing blocks another
 * thread allocated. Every block is freed before exit, so memcheck's "in
 * use at exit" is what the C library keeps for itself (stdio's buffer).
 *
 * It prints one checksum over the data it wrote, so the blocks are used.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HC __attribute__((noinline))
#define NBLK 200

static uint32_t mix(uint32_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

/* Sizes 1..~256 KiB, a deterministic spread. */
static size_t size_of(unsigned i)
{
    static const size_t base[] = {1, 7, 8, 15, 16, 24, 31, 33, 64, 100, 127, 128,
                                  255, 500, 1024, 1500, 4096, 9000, 70000, 262144};
    return base[i % (sizeof base / sizeof base[0])] + (i / 20);
}

HC static uint32_t hc_sizes(uint32_t h)
{
    unsigned char *b[NBLK];
    for (unsigned i = 0; i < NBLK; i++) {
        size_t n = size_of(i);
        b[i] = malloc(n);
        memset(b[i], (int)i, n);
    }
    /* every third, then the rest backwards */
    for (unsigned i = 0; i < NBLK; i += 3) {
        h = mix(h, b[i], size_of(i) < 64 ? size_of(i) : 64);
        free(b[i]);
        b[i] = 0;
    }
    for (unsigned i = NBLK; i-- > 0;) {
        if (!b[i])
            continue;
        h = mix(h, b[i] + size_of(i) - 1, 1);
        free(b[i]);
    }
    return h;
}

HC static uint32_t hc_realloc(uint32_t h)
{
    size_t n = 1;
    unsigned char *p = malloc(n);
    p[0] = 1;
    void *hold[12];
    int nh = 0;
    while (n < 100000) {
        size_t m = n * 2 + 3;
        p = realloc(p, m);
        memset(p + n, (int)m, m - n);
        n = m;
        if (nh < 12)
            hold[nh++] = malloc(n / 3 + 1); /* neighbours: some moves */
    }
    p = realloc(p, 10); /* shrink */
    h = mix(h, p, 10);
    free(p);
    while (nh > 0)
        free(hold[--nh]);
    p = realloc(NULL, 77); /* realloc as malloc */
    memset(p, 3, 77);
    h = mix(h, p, 77);
    free(p);
    return h;
}

HC static uint32_t hc_calloc_aligned(uint32_t h)
{
    unsigned *c = calloc(1000, sizeof *c);
    for (int i = 0; i < 1000; i++)
        c[i] += (unsigned)i;
    h = mix(h, (unsigned char *)c, 1000 * sizeof *c);
    void *a[6];
    size_t align[] = {16, 32, 64, 256, 4096, 64};
    for (int i = 0; i < 6; i++) {
        if (posix_memalign(&a[i], align[i], 100 + (size_t)i * 50) != 0)
            return 0;
        memset(a[i], i, 100 + (size_t)i * 50);
        h = mix(h, a[i], 8);
        h ^= (uint32_t)((uintptr_t)a[i] & (align[i] - 1)); /* 0 */
    }
    void *al = aligned_alloc(128, 1024);
    memset(al, 9, 1024);
    h = mix(h, al, 16);
    free(a[3]);
    free(a[0]);
    free(al);
    free(a[5]);
    free(c);
    free(a[1]);
    free(a[4]);
    free(a[2]);
    return h;
}

struct work {
    int id;
    void *handoff[16]; /* allocated here, freed by main */
    uint32_t h;
};

static void *hc_thread(void *arg)
{
    struct work *w = arg;
    uint32_t h = 0;
    for (int round = 0; round < 50; round++) {
        unsigned char *p[8];
        for (int i = 0; i < 8; i++) {
            size_t n = 8 + (size_t)((round * 8 + i) * (w->id + 1)) % 700;
            p[i] = malloc(n);
            memset(p[i], w->id + i, n);
        }
        for (int i = 7; i >= 0; i -= 2)
            free(p[i]);
        for (int i = 0; i < 8; i += 2) {
            h = mix(h, p[i], 8);
            free(p[i]);
        }
    }
    for (int i = 0; i < 16; i++) {
        w->handoff[i] = malloc(16 + (size_t)i * 8);
        memset(w->handoff[i], i, 16 + (size_t)i * 8);
    }
    w->h = h;
    return 0;
}

HC static uint32_t hc_threads(uint32_t h)
{
    pthread_t t[4];
    struct work *w = calloc(4, sizeof *w);
    for (int i = 0; i < 4; i++) {
        w[i].id = i;
        pthread_create(&t[i], 0, hc_thread, &w[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], 0);
    for (int i = 0; i < 4; i++) {
        h ^= w[i].h;
        for (int j = 15; j >= 0; j--) {
            h = mix(h, w[i].handoff[j], 1);
            free(w[i].handoff[j]);
        }
    }
    free(w);
    return h;
}

int main(int argc, char **argv)
{
    uint32_t h = 2166136261u;
    h = hc_sizes(h);
    h = hc_realloc(h);
    h = hc_calloc_aligned(h);
    if (argc < 2 || strcmp(argv[1], "nothreads") != 0)
        h = hc_threads(h);
    printf("heapclean %08x\n", h);
    return 0;
}
