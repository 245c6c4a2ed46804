/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * calls: direct calls, recursion, mutual recursion, sibling (tail) calls,
 * many-argument calls (stack-passed arguments) and struct returns.
 */
#include <stdint.h>
#include <stdio.h>

#define NOINLINE __attribute__((noinline))

/* Plain double recursion. */
static NOINLINE uint32_t fib(uint32_t n)
{
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

/* Deep, non-tail recursion with a small stack frame. */
static NOINLINE uint32_t ackermann(uint32_t m, uint32_t n)
{
    if (m == 0)
        return n + 1;
    if (n == 0)
        return ackermann(m - 1, 1);
    return ackermann(m - 1, ackermann(m, n - 1));
}

/* Mutual recursion; the volatile keeps GCC from folding it into a loop. */
static volatile int mutual_salt = 0;
static NOINLINE int is_odd(uint32_t n);
static NOINLINE int is_even(uint32_t n)
{
    if (n == 0)
        return 1 + mutual_salt;
    return is_odd(n - 1);
}
static NOINLINE int is_odd(uint32_t n)
{
    if (n == 0)
        return 0 + mutual_salt;
    return is_even(n - 1);
}

/* Tail-call-ish chain: each stage ends with a call in tail position, which
 * GCC -O2 emits as a jump (sibling call). */
static NOINLINE uint32_t stage_c(uint32_t x, uint32_t depth);
static NOINLINE uint32_t stage_a(uint32_t x, uint32_t depth)
{
    if (depth == 0)
        return x;
    return stage_c(x * 3 + 1, depth - 1);
}
static NOINLINE uint32_t stage_b(uint32_t x, uint32_t depth)
{
    if (depth == 0)
        return x ^ 0x5a5a;
    return stage_a(x + 7, depth - 1);
}
static NOINLINE uint32_t stage_c(uint32_t x, uint32_t depth)
{
    if (depth == 0)
        return x >> 1;
    if (x & 4)
        return stage_a(x ^ 0x1234, depth - 1);
    return stage_b(x - 1, depth - 1);
}

/* Self tail recursion (turned into a loop by the compiler). */
static NOINLINE uint32_t gcd(uint32_t a, uint32_t b)
{
    return b == 0 ? a : gcd(b, a % b);
}

/* More arguments than argument registers on both targets. */
static NOINLINE int64_t many_args(int32_t a, int32_t b, int32_t c, int32_t d,
                                  int32_t e, int32_t f, int32_t g, int32_t h,
                                  int32_t i, int32_t j, int64_t k, int64_t l)
{
    return (int64_t)a - b + c * d - e + f * g - h + i * j + k * 3 - l;
}

struct triple {
    int32_t x, y, z;
    int64_t w;
};

/* Struct returned through memory (hidden pointer argument). */
static NOINLINE struct triple make_triple(int32_t seed)
{
    struct triple t;
    t.x = seed * 3;
    t.y = seed ^ 0x77;
    t.z = -seed;
    t.w = (int64_t)seed * 1000003;
    return t;
}

static NOINLINE int64_t sum_triple(struct triple t)
{
    return t.x + t.y + t.z + t.w;
}

/* Recursion with a large-ish frame (local array). */
static NOINLINE uint32_t frame_rec(uint32_t n)
{
    volatile uint32_t local[16];
    for (int i = 0; i < 16; i++)
        local[i] = n * (uint32_t)i;
    if (n == 0)
        return local[15];
    return local[n & 15] + frame_rec(n - 1);
}

int main(void)
{
    uint32_t chain = 0, g = 0;
    int64_t margs = 0, tsum = 0;

    for (uint32_t i = 0; i < 50; i++)
        chain += stage_c(i, 40 + (i & 7));
    for (uint32_t i = 1; i < 200; i++)
        g += gcd(i * 7919u, 1000u + i * 31u);
    for (int32_t i = 0; i < 40; i++)
        margs += many_args(i, i + 1, i + 2, i + 3, i + 4, i + 5, i + 6, i + 7,
                           i + 8, i + 9, (int64_t)i << 33, -(int64_t)i);
    for (int32_t i = 0; i < 40; i++)
        tsum += sum_triple(make_triple(i));

    printf("fib(20)        %u\n", fib(20));
    printf("ackermann(2,3) %u\n", ackermann(2, 3));
    printf("is_even(301)   %d\n", is_even(301));
    printf("is_odd(300)    %d\n", is_odd(300));
    printf("chain          %u\n", chain);
    printf("gcd sum        %u\n", g);
    printf("many_args      %lld\n", (long long)margs);
    printf("triples        %lld\n", (long long)tsum);
    printf("frame_rec(60)  %u\n", frame_rec(60));
    return 0;
}
