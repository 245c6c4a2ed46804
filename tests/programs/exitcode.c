/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * exitcode: for the launcher's tests. Prints its arguments, optionally
 * sleeps, then exits with a chosen status.
 *
 *   exitcode [CODE [SECONDS]]    CODE defaults to 3, SECONDS to 0
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int code = argc > 1 ? atoi(argv[1]) : 3;
    unsigned seconds = argc > 2 ? (unsigned)atoi(argv[2]) : 0;

    printf("exitcode: argc %d", argc);
    for (int i = 1; i < argc; i++)
        printf(" [%s]", argv[i]);
    printf("\n");
    fflush(stdout);
    if (seconds)
        sleep(seconds);
    return code;
}
