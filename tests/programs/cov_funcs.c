/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * cov_funcs: functions whose coverage is known, for the coverage example's
 * tests (examples/coverage/tests/coverage.rs).
 *
 *   cov_funcs          runs cov_always, cov_loop (a hot loop of 1,000,000
 *                      iterations) and the even half of cov_branch
 *   cov_funcs extra    also runs cov_extra and the odd half of cov_branch
 *
 * cov_never is never called (only with more than 1000 arguments). Prints one
 * line and exits with status 0. Built static like every test program (and
 * dynamically by the coverage tests themselves).
 */
#include <stdio.h>
#include <string.h>

#define NOIPA __attribute__((noipa))

NOIPA unsigned cov_always(unsigned x)
{
    return x * 2654435761u ^ (x >> 7);
}

NOIPA unsigned cov_loop(unsigned n)
{
    unsigned h = 5381;
    for (unsigned i = 0; i < n; i++)
        h = h * 33 + (i ^ (h >> 11));
    return h;
}

NOIPA unsigned cov_odd(unsigned x)
{
    return x * 3 + 1;
}

NOIPA unsigned cov_even(unsigned x)
{
    return x / 2;
}

NOIPA unsigned cov_branch(unsigned x)
{
    if (x & 1)
        return cov_odd(x);
    return cov_even(x);
}

NOIPA unsigned cov_extra(unsigned x)
{
    unsigned r = 0;
    for (int i = 0; i < 7; i++)
        r = (r << 3) ^ (x >> i);
    return r;
}

NOIPA unsigned cov_never(unsigned x)
{
    return (x << 5) ^ (x >> 3) ^ 0x5a5a5a5au;
}

int main(int argc, char **argv)
{
    int extra = argc > 1 && strcmp(argv[1], "extra") == 0;
    unsigned r = cov_always((unsigned)argc);
    r += cov_loop(1000000);
    r += cov_branch(extra ? 7 : 8);
    if (extra)
        r += cov_extra(r);
    if (argc > 1000)
        r += cov_never(r);
    printf("cov_funcs: %08x\n", r);
    return 0;
}
