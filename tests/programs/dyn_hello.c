/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * dyn_hello: a dynamically linked guest (scripts/build-guests.sh builds
 * every dyn_*.c without -static), for e2e/tests/processes.rs. Runs under
 * QEMU with `-L /usr/<triple>` (Debian's libc6-<arch>-cross): QEMU loads the
 * interpreter from there, which loads libc.so.6 from there. It calls into
 * libc (qsort, snprintf, strlen, printf) so libc's code runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int v[64];
    unsigned s = 12345;
    for (int i = 0; i < 64; i++) {
        s = s * 1103515245u + 12345u;
        v[i] = (int)(s >> 16);
    }
    qsort(v, 64, sizeof v[0], cmp);
    char buf[128];
    snprintf(buf, sizeof buf, "min %d max %d", v[0], v[63]);
    printf("dyn_hello: %s (%zu chars), %d arguments\n", buf, strlen(buf), argc);
    return 0;
}
