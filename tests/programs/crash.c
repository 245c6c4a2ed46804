/* SPDX-License-Identifier: GPL-2.0-or-later
 * Dies of SIGSEGV after some work: the trace must still be complete, up to
 * and including the faulting instruction. */
#include <stdio.h>
#include <stdlib.h>

/* Opaque to the compiler, so it cannot see the fault coming. */
volatile unsigned long bad_address = 16;

int main(int argc, char **argv)
{
    unsigned sum = 0;
    for (int i = 0; i < 1000 + argc; i++) {
        sum = sum * 31 + i;
    }
    printf("sum %u\n", sum);
    fflush(stdout);
    *(volatile int *)bad_address = (int)sum;   /* faults */
    return 0;
}
