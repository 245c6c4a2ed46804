/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * sortcrc: a compute kernel for benchmarking. Generates N pseudo-random
 * ints (xorshift32), sorts them (hand-written quicksort with an insertion
 * sort cutoff), verifies the order, and CRC32s the sorted buffer.
 *
 * usage: sortcrc [N] [ROUNDS]     (defaults: N = 4000, ROUNDS = 1)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define DEFAULT_N 4000

static uint32_t crc_table[256];

static void crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32(uint32_t crc, const unsigned char *buf, size_t len)
{
    crc = ~crc;
    for (size_t i = 0; i < len; i++)
        crc = crc_table[(crc ^ buf[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static void insertion_sort(int32_t *a, long lo, long hi)
{
    for (long i = lo + 1; i <= hi; i++) {
        int32_t v = a[i];
        long j = i - 1;
        while (j >= lo && a[j] > v) {
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = v;
    }
}

static void quicksort(int32_t *a, long lo, long hi)
{
    while (hi - lo > 16) {
        long mid = lo + (hi - lo) / 2;
        /* median of three */
        if (a[mid] < a[lo]) { int32_t t = a[mid]; a[mid] = a[lo]; a[lo] = t; }
        if (a[hi] < a[lo]) { int32_t t = a[hi]; a[hi] = a[lo]; a[lo] = t; }
        if (a[hi] < a[mid]) { int32_t t = a[hi]; a[hi] = a[mid]; a[mid] = t; }
        int32_t pivot = a[mid];
        long i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) {
                int32_t t = a[i]; a[i] = a[j]; a[j] = t;
                i++;
                j--;
            }
        }
        /* recurse into the smaller half, loop on the larger */
        if (j - lo < hi - i) {
            quicksort(a, lo, j);
            lo = i;
        } else {
            quicksort(a, i, hi);
            hi = j;
        }
    }
    insertion_sort(a, lo, hi);
}

int main(int argc, char **argv)
{
    long n = DEFAULT_N, rounds = 1;
    if (argc > 1)
        n = strtol(argv[1], NULL, 0);
    if (argc > 2)
        rounds = strtol(argv[2], NULL, 0);
    if (n < 1 || rounds < 1) {
        fprintf(stderr, "usage: %s [N>0] [ROUNDS>0]\n", argv[0]);
        return 2;
    }

    int32_t *a = malloc((size_t)n * sizeof(*a));
    if (!a) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    crc32_init();

    uint32_t state = 2463534242u, crc = 0;
    long inversions = 0;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < n; i++) {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            a[i] = (int32_t)(state % 2000003u) - 1000000;
        }
        quicksort(a, 0, n - 1);
        for (long i = 1; i < n; i++)
            inversions += a[i - 1] > a[i];
        crc = crc32(crc, (const unsigned char *)a, (size_t)n * sizeof(*a));
    }

    printf("n %ld rounds %ld min %d max %d median %d\n", n, rounds, (int)a[0],
           (int)a[n - 1], (int)a[n / 2]);
    printf("inversions %ld crc32 %08x\n", inversions, crc);
    free(a);
    return inversions != 0;
}
