/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * hostile: ordinary guest behaviour that used to cut the trace short, for
 * e2e/tests/hostile.rs. Each mode writes what it observed (fd numbers,
 * results) to the file OUT, so a traced and an untraced run can be compared
 * byte for byte.
 *
 *   hostile close_range OUT   close every fd from 3 up (as daemons do), then
 *                             open OUT and write to it
 *   hostile dup2 OUT          dup2 a file onto fds 3..11 (as `exec 3>file`
 *                             in a shell), close them, then open OUT
 *   hostile sigdfl OUT        set SIGTERM back to SIG_DFL (as posix_spawn,
 *                             shells and Python do) and die of SIGTERM
 *   hostile fcntl OUT         F_DUPFD at a high fd, close fds far up
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile unsigned long sink;

/* Some work before and after, so the trace has something to lose. */
static void work(int n)
{
    for (int i = 0; i < n; i++) {
        sink = sink * 31 + (unsigned long)i;
    }
}

static void report(const char *out, const char *what, long value)
{
    int fd = open(out, O_WRONLY | O_CREAT | O_APPEND, 0644);
    char line[128];
    int n;

    if (fd < 0) {
        _exit(90);
    }
    n = snprintf(line, sizeof line, "%s %ld fd %d\n", what, value, fd);
    if (write(fd, line, (size_t)n) != n) {
        _exit(91);
    }
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: hostile close_range|dup2|sigdfl|fcntl OUT\n");
        return 2;
    }
    const char *mode = argv[1], *out = argv[2];
    work(20000);
    if (strcmp(mode, "close_range") == 0) {
        long r = syscall(SYS_close_range, 3, ~0U, 0);
        report(out, "close_range", r);
    } else if (strcmp(mode, "dup2") == 0) {
        int f = open("/dev/null", O_WRONLY);
        for (int fd = 3; fd <= 11; fd++) {
            if (fd != f && dup2(f, fd) != fd) {
                report(out, "dup2-failed", fd);
            }
        }
        for (int fd = 3; fd <= 11; fd++) {
            close(fd);
        }
        report(out, "dup2", f);
    } else if (strcmp(mode, "fcntl") == 0) {
        struct rlimit r;
        getrlimit(RLIMIT_NOFILE, &r);
        /* Close a range near the top of the fd table, one fd at a time. */
        for (long fd = (long)r.rlim_cur - 100; fd < (long)r.rlim_cur; fd++) {
            close((int)fd);
        }
        report(out, "fcntl", fcntl(1, F_DUPFD, 100));
    } else if (strcmp(mode, "sigdfl") == 0) {
        signal(SIGTERM, SIG_IGN);
        signal(SIGTERM, SIG_DFL);
        report(out, "sigdfl", 0);
        work(20000);
        raise(SIGTERM);
        report(out, "survived", 1);
        return 1;
    } else {
        return 2;
    }
    work(20000);
    report(out, "end", (long)(sink & 0xff));
    return 0;
}
