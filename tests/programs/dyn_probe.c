/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * dyn_probe: calls of the dynamically linked C library with known
 * arguments and results, for `cannoli probe -p libc:FUNC` (through
 * pointers, so that GCC neither computes them nor inlines glibc's
 * `atoi`). The tests build it both -no-pie and -pie.
 */
#include <stdio.h>
#include <stdlib.h>
int (*volatile p_atoi)(const char *) = atoi;
long (*volatile p_labs)(long) = labs;
int main(void)
{
    const char *nums[] = {"1234", "-56", "7"};
    for (int i = 0; i < 3; i++)
        printf("atoi(%s)=%d\n", nums[i], p_atoi(nums[i]));
    long v[] = {-42, 42, -1};
    for (int i = 0; i < 3; i++)
        printf("labs(%ld)=%ld\n", v[i], p_labs(v[i]));
    return 0;
}
