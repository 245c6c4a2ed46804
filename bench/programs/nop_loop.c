/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * nop_loop: the seed's throughput workload. Runs ITERATIONS passes over a
 * block of 100 `nop` instructions, so nearly every executed guest
 * instruction is a nop and the benchmark measures the per-instruction cost
 * of tracing, not the cost of emulating interesting instructions.
 *
 * usage: nop_loop [ITERATIONS]     (default 10000000: about 1.03 G instructions)
 */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    long iterations = 10000000;
    if (argc > 1)
        iterations = strtol(argv[1], NULL, 0);
    if (iterations < 0) {
        fprintf(stderr, "usage: %s [ITERATIONS>=0]\n", argv[0]);
        return 2;
    }
    for (long i = 0; i < iterations; i++) {
        /* volatile: the compiler must neither drop nor hoist the block. */
        __asm__ volatile(".rept 100\n\tnop\n\t.endr" ::: "memory");
    }
    printf("nop_loop: %ld x 100 nops\n", iterations);
    return 0;
}
