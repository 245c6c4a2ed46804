// SPDX-License-Identifier: GPL-2.0-or-later
// A known memory access pattern for `cannoli viz`'s test
// (e2e/tests/viz.rs): a forward write of a 64 KiB buffer, byte by byte at
// increasing addresses, then a backward read of it, byte by byte at
// decreasing addresses. Prints the buffer's address and size first, so the
// test knows where the pattern is.
#include <stdio.h>

#define SIZE (64 * 1024)

static unsigned char buf[SIZE] __attribute__((aligned(4096)));

int main(void) {
    printf("buffer %p %d\n", (void *)buf, SIZE);
    fflush(stdout);
    volatile unsigned char *p = buf;
    for (int i = 0; i < SIZE; i++)
        p[i] = (unsigned char)(i * 7 + 1);
    unsigned sum = 0;
    for (int i = SIZE - 1; i >= 0; i--)
        sum = sum * 31 + p[i];
    printf("sum %08x\n", sum);
    return 0;
}
