/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * orphan: for the launcher's tests. Forks; the parent exits at once with
 * status 4, the child outlives it by SECONDS (default 1), prints and exits.
 * The traced process tree is done only when the child is.
 *
 *   orphan [SECONDS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    unsigned seconds = argc > 1 ? (unsigned)atoi(argv[1]) : 1;
    pid_t pid;

    fflush(stdout);
    pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        sleep(seconds);
        printf("orphan: child done\n");
        return 0;
    }
    printf("orphan: parent exits\n");
    return 4;
}
