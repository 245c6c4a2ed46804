/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * loops: tight loops and integer / floating-point arithmetic.
 *
 * Deterministic output, no syscalls besides write/exit. Sized so that a
 * default run stays well under a million guest instructions.
 */
#include <stdint.h>
#include <stdio.h>

#define SIEVE_N 6000
#define MAT_N 12

static unsigned char sieve[SIEVE_N];
static int32_t ma[MAT_N][MAT_N], mb[MAT_N][MAT_N], mc[MAT_N][MAT_N];

/* Sum of squares with a data-dependent branch in the loop body. */
static uint32_t __attribute__((noinline)) sum_squares(uint32_t n)
{
    uint32_t s = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i & 1)
            s += i * i;
        else
            s ^= i << 3;
    }
    return s;
}

/* Longest Collatz chain below `limit` (exercises div-free arithmetic). */
static uint32_t __attribute__((noinline)) collatz_longest(uint32_t limit,
                                                          uint32_t *best_len)
{
    uint32_t best = 1, len_best = 1;
    for (uint32_t start = 1; start < limit; start++) {
        uint64_t x = start;
        uint32_t len = 1;
        while (x != 1) {
            x = (x & 1) ? 3 * x + 1 : x >> 1;
            len++;
        }
        if (len > len_best) {
            len_best = len;
            best = start;
        }
    }
    *best_len = len_best;
    return best;
}

/* Sieve of Eratosthenes: byte stores in a tight inner loop. */
static uint32_t __attribute__((noinline)) count_primes(void)
{
    uint32_t count = 0;
    for (uint32_t i = 0; i < SIEVE_N; i++)
        sieve[i] = 1;
    sieve[0] = sieve[1] = 0;
    for (uint32_t i = 2; i * i < SIEVE_N; i++) {
        if (!sieve[i])
            continue;
        for (uint32_t j = i * i; j < SIEVE_N; j += i)
            sieve[j] = 0;
    }
    for (uint32_t i = 0; i < SIEVE_N; i++)
        count += sieve[i];
    return count;
}

/* Integer matrix multiply: word loads/stores with strided access. */
static int64_t __attribute__((noinline)) matmul(void)
{
    int64_t trace = 0;
    for (int i = 0; i < MAT_N; i++)
        for (int j = 0; j < MAT_N; j++) {
            ma[i][j] = (i * 7 + j * 3) % 11 - 5;
            mb[i][j] = (i * 5 + j * 13) % 17 - 8;
        }
    for (int i = 0; i < MAT_N; i++)
        for (int j = 0; j < MAT_N; j++) {
            int32_t acc = 0;
            for (int k = 0; k < MAT_N; k++)
                acc += ma[i][k] * mb[k][j];
            mc[i][j] = acc;
        }
    for (int i = 0; i < MAT_N; i++)
        trace += mc[i][i] * (int64_t)(i + 1);
    return trace;
}

/* Division, modulo and 64-bit multiply (libgcc helpers on mipsel). */
static uint64_t __attribute__((noinline)) divmod_mix(uint32_t n)
{
    uint64_t acc = 0x9e3779b97f4a7c15ull;
    for (uint32_t i = 1; i <= n; i++) {
        acc += (acc / i) ^ (acc % (i + 3));
        acc *= 0x100000001b3ull;
        acc ^= acc >> 29;
    }
    return acc;
}

/* A little double-precision arithmetic (64-bit FP loads/stores on mipsel). */
static volatile double fp_in[8] = {1.5, -2.25, 3.125, 0.5, 10.0, -7.75, 2.0, 0.1};

static double __attribute__((noinline)) fp_poly(int rounds)
{
    double acc = 0.0;
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < 8; i++) {
            double x = fp_in[i];
            acc = acc * 0.5 + (x * x - 3.0 * x + 1.0) / (1.0 + (double)r);
        }
    return acc;
}

/* Bit twiddling: popcount / bit reverse by hand. */
static uint32_t __attribute__((noinline)) bits(uint32_t n)
{
    uint32_t acc = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t v = i * 2654435761u;
        uint32_t c = 0;
        while (v) {
            v &= v - 1;
            c++;
        }
        uint32_t r = i;
        r = ((r >> 1) & 0x55555555u) | ((r & 0x55555555u) << 1);
        r = ((r >> 2) & 0x33333333u) | ((r & 0x33333333u) << 2);
        r = ((r >> 4) & 0x0f0f0f0fu) | ((r & 0x0f0f0f0fu) << 4);
        acc += c ^ (r >> 20);
    }
    return acc;
}

int main(void)
{
    uint32_t best_len;
    uint32_t best = collatz_longest(300, &best_len);
    double fp = fp_poly(20);

    printf("sum_squares  %u\n", sum_squares(20000));
    printf("collatz      %u (len %u)\n", best, best_len);
    printf("primes       %u\n", count_primes());
    printf("matmul trace %lld\n", (long long)matmul());
    printf("divmod       %016llx\n", (unsigned long long)divmod_mix(300));
    printf("fp_poly      %.6f\n", fp);
    printf("bits         %u\n", bits(3000));
    return 0;
}
