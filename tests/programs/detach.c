/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * detach: for the launcher's signal tests (e2e/tests/launch.rs). Leaves
 * the terminal's process group, as a daemon does, then waits for a signal
 * whose default action ends it.
 *
 *   detach         calls setsid, prints "detach: ready", waits
 *   detach fork    forks; the child calls setsid and prints
 *                  "detach: child ready", the parent prints
 *                  "detach: parent ready"; both wait
 *
 * Only a signal ends it (it has no handler), so the launcher's exit status
 * says which one reached QEMU's first process; in the fork case the run
 * ends only once the child got one too.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "fork") == 0) {
        pid_t pid;

        fflush(stdout);
        pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            if (setsid() < 0) {
                perror("setsid");
                return 1;
            }
            printf("detach: child ready\n");
        } else {
            printf("detach: parent ready\n");
        }
    } else {
        if (setsid() < 0) {
            perror("setsid");
            return 1;
        }
        printf("detach: ready\n");
    }
    fflush(stdout);
    for (;;)
        pause();
}
