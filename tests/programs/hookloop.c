/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * hookloop: loops, calls and integer arithmetic for the hook-type tests
 * (e2e/tests/hooks.rs: Once, Register, Branch, and a pc range).
 *
 * usage: hookloop [ROUNDS]   (default 100)
 *
 * The work grows with ROUNDS, the code executed does not (beyond the first
 * round), so a coverage-style trace stays the same size while the number of
 * executed instructions grows. `hookloop_kernel` is the function the range
 * tests look up in the symbol table: a loop with a call and arithmetic.
 * Output goes through write(2) only (no stdio), to keep the run short.
 */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static volatile uint32_t salt = 0x9e3779b9u;

/* Arithmetic: multiply, shifts, rotates, xor, add, subtract, compare. */
NOINLINE uint32_t hookloop_mix(uint32_t a, uint32_t b)
{
    uint32_t x = a * 0x85ebca6bu + (b ^ salt);
    x ^= x >> 13;
    x = (x << 7) | (x >> 25);
    x -= b;
    if (x > a)
        x += 3;
    return x ^ (x >> 16);
}

/* Non-tail recursion: calls and returns with a stack frame. */
NOINLINE uint32_t hookloop_fact(uint32_t n)
{
    return n < 2 ? 1 : n * hookloop_fact(n - 1);
}

/* 64-bit arithmetic (register pairs on mipsel), division and remainder. */
NOINLINE int64_t hookloop_wide(int64_t a, int64_t b)
{
    int64_t q = b != 0 ? a / b : 0;
    int64_t r = b != 0 ? a % b : 0;
    return q * 31 + r - (a >> 3);
}

/* The range tests' function: a loop with a call, loads and arithmetic. */
NOINLINE uint32_t hookloop_kernel(const uint32_t *v, int n, uint32_t seed)
{
    uint32_t acc = seed;
    for (int i = 0; i < n; i++) {
        if (v[i] & 1)
            acc += hookloop_mix(v[i], acc);
        else
            acc ^= v[i] << (i & 7);
    }
    return acc;
}

static NOINLINE void put_u64(const char *label, uint64_t v)
{
    char buf[64];
    size_t n = strlen(label);
    memcpy(buf, label, n);
    char digits[24];
    int d = 0;
    do {
        digits[d++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (d)
        buf[n++] = digits[--d];
    buf[n++] = '\n';
    (void)!write(1, buf, n);
}

int main(int argc, char **argv)
{
    int rounds = 100;
    if (argc > 1) {
        rounds = 0;
        for (const char *s = argv[1]; *s >= '0' && *s <= '9'; s++)
            rounds = rounds * 10 + (*s - '0');
    }
    uint32_t v[16];
    for (int i = 0; i < 16; i++)
        v[i] = (uint32_t)i * 2654435761u;

    uint32_t acc = 1;
    int64_t wide = 0;
    for (int r = 0; r < rounds; r++) {
        acc = hookloop_kernel(v, 16, acc);
        acc += hookloop_fact((uint32_t)r % 9);
        wide += hookloop_wide((int64_t)acc * (r + 1), (int64_t)(r % 7) - 3);
        v[r & 15] ^= acc;
    }
    put_u64("acc ", acc);
    put_u64("wide ", (uint64_t)wide);
    return 0;
}
