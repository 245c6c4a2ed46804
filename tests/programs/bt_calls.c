/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * bt_calls: a known call structure for the backtrace example's tests.
 *
 *   main
 *     bt_middle          nested calls: calls bt_leaf twice
 *       bt_leaf
 *       bt_leaf
 *     bt_fact(5)         direct recursion, five frames deep
 *       bt_fact(4) ... bt_fact(1)
 *     bt_tail1           ends in a tail call (a jump at -O2) ...
 *       bt_tail2         ... which ends in another tail call ...
 *         bt_tail_end    ... to a function that makes a real call
 *           bt_leaf
 *     bt_leaf            through a function pointer
 *
 * Built with -O2; every function is noinline, and the tests check the
 * machine code: the tail calls must be jumps (no link), the recursion must
 * stay a recursion. Prints one line and exits 0.
 */
#include <stdio.h>

#define NOINLINE __attribute__((noinline))

/* Volatile so that GCC can neither fold the calls away nor turn the
 * recursion into a loop. */
static volatile int salt;
static volatile unsigned deepest;

NOINLINE int bt_leaf(int x)
{
    return 2 * x + salt;
}

NOINLINE int bt_middle(int x)
{
    int a = bt_leaf(x);
    int b = bt_leaf(x + 1);
    return a * b + 1;
}

/* The store after the recursive call keeps it a real call (GCC would turn
 * `n * bt_fact(n - 1)` into a loop with an accumulator). */
NOINLINE unsigned bt_fact(unsigned n)
{
    unsigned r;

    if (n <= 1)
        return 1 + salt;
    r = n * bt_fact(n - 1);
    deepest = n;
    return r;
}

/* Tail calls: at -O2 each `return f(...)` in tail position is a jump. */
NOINLINE int bt_tail_end(int x)
{
    return bt_leaf(x) + 7;
}

NOINLINE int bt_tail2(int x)
{
    return bt_tail_end(x * 3 + salt);
}

NOINLINE int bt_tail1(int x)
{
    return bt_tail2(x + 1 + salt);
}

/* Read through a volatile so the call stays indirect. */
static int (*volatile bt_pointer)(int) = bt_leaf;

int main(int argc, char **argv)
{
    int r = 0;

    r += bt_middle(argc);
    r += (int)bt_fact(5);
    r += bt_tail1(argc);
    r += bt_pointer(argc);
    printf("bt_calls: %d\n", r);
    return 0;
}
