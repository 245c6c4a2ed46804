/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * forkexec: fork, exec, wait, for e2e/tests/processes.rs.
 *
 *   forkexec           fork; the child execs argv[0] with the argument
 *                      "child"; the parent waits and reports its status
 *   forkexec child     what the child execs: prints and exits with 42
 *   forkexec noexec    the same without the exec: the child calls the
 *                      "child" code directly. Prints exactly what
 *                      `forkexec` prints, for a reference run under a QEMU
 *                      that cannot run the exec'd guest program itself
 *                      (plain linux-user QEMU hands execve to the host
 *                      kernel, which needs binfmt_misc for a foreign ELF).
 *
 * Exit status: 3 when the child exited with 42, else 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILD_STATUS 42

static int child_main(int argc)
{
    unsigned sum = 0;
    for (int i = 0; i < 5000; i++)
        sum = sum * 33 + (unsigned)i;
    printf("forkexec: child runs with %d arguments, sum %08x\n", argc, sum);
    return CHILD_STATUS;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "child") == 0)
        return child_main(argc);
    int noexec = argc > 1 && strcmp(argv[1], "noexec") == 0;

    printf("forkexec: parent forks\n");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        if (noexec)
            exit(child_main(2));
        char *args[] = { argv[0], "child", NULL };
        execv(argv[0], args);
        perror("execv");
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) {
        perror("waitpid");
        return 1;
    }
    if (WIFEXITED(status))
        printf("forkexec: child exited with status %d\n", WEXITSTATUS(status));
    else
        printf("forkexec: child ended with wait status %#x\n", status);
    return WIFEXITED(status) && WEXITSTATUS(status) == CHILD_STATUS ? 3 : 1;
}
