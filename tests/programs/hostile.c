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
 *
 * Processes and threads (issue 11):
 *   hostile exit_blocked OUT  threads blocked in read, futex wait and
 *                             nanosleep, one whose read returns just then,
 *                             one making syscalls in a loop; main exit(0)s
 *   hostile fork_blocked OUT  fork while another thread is blocked in read;
 *                             the child works and exits 7, then the parent
 *                             wakes the thread
 *   hostile spawn OUT         posix_spawn (clone CLONE_VM|CLONE_VFORK) and
 *                             vfork + execve of this program's `child` mode
 *   hostile exec_fail OUT     execs that fail: ENOENT, a readable but not
 *                             executable copy of this program (EACCES), a
 *                             directory (EACCES), an executable file that
 *                             is no program (ENOEXEC); the program goes on
 *   hostile execveat OUT      execveat with a dirfd and a relative path,
 *                             fexecve (AT_EMPTY_PATH), AT_SYMLINK_NOFOLLOW
 *                             on a symlink (ELOOP) and on a file, through
 *                             a symlink; each success in a forked child
 *   hostile fork_when OUT FLAG  says it is ready, waits for the file FLAG
 *                             (the test kills the client meanwhile), forks;
 *                             the child works and exits 7
 *   hostile child OUT         what the execs run: works, says so, exits 7
 *
 * The modes that exec print no fd numbers, pids or paths: an untraced
 * x86_64 run (whose execs run natively) is their reference on every guest.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

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


/* A line without an fd number (for modes whose reference ran elsewhere). */
__attribute__((format(printf, 2, 3)))
static void say(const char *out, const char *fmt, ...)
{
    int fd = open(out, O_WRONLY | O_CREAT | O_APPEND, 0644);
    char line[256];
    va_list ap;
    int n;

    if (fd < 0) {
        _exit(90);
    }
    va_start(ap, fmt);
    n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (write(fd, line, (size_t)n) != n) {
        _exit(91);
    }
    close(fd);
}

static const char *errno_name(int e)
{
    switch (e) {
    case 0: return "0";
    case ENOENT: return "ENOENT";
    case EACCES: return "EACCES";
    case ENOEXEC: return "ENOEXEC";
    case ELOOP: return "ELOOP";
    case ENOTDIR: return "ENOTDIR";
    case EBADF: return "EBADF";
    case EINVAL: return "EINVAL";
    case ENOSYS: return "ENOSYS";
    default: return "other";
    }
}

static const char *status_text(int st)
{
    static char buf[64];

    if (WIFEXITED(st)) {
        snprintf(buf, sizeof buf, "exit %d", WEXITSTATUS(st));
    } else if (WIFSIGNALED(st)) {
        snprintf(buf, sizeof buf, "signal %d", WTERMSIG(st));
    } else {
        snprintf(buf, sizeof buf, "status %#x", st);
    }
    return buf;
}

/* ---- exit_blocked ---- */

static int pipe_block[2], pipe_wake[2];
static int futex_word;
static volatile int threads_up;

static void *blocked_read(void *arg)
{
    char c;
    __atomic_add_fetch(&threads_up, 1, __ATOMIC_SEQ_CST);
    if (read(*(int *)arg, &c, 1) < 0) {
        work(1000);
    }
    work(1000);
    return NULL;
}

static void *blocked_futex(void *arg)
{
    __atomic_add_fetch(&threads_up, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    }
    return NULL;
}

static void *blocked_sleep(void *arg)
{
    struct timespec ts = { 1000, 0 };
    __atomic_add_fetch(&threads_up, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* In and out of syscalls that carry data (the trace copies it), so that
 * some are coming back while the process exits. */
static void *busy_syscalls(void *arg)
{
    static char buf[4096];
    int fd = open("/dev/null", O_WRONLY);

    __atomic_add_fetch(&threads_up, 1, __ATOMIC_SEQ_CST);
    struct timespec ts = { 0, 10 * 1000 };

    for (;;) {
        if (write(fd, buf, sizeof buf) < 0) {
            work(10);
        }
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static int exit_blocked(const char *out)
{
    pthread_t t;
    void *(*fns[])(void *) = { blocked_read, blocked_read, blocked_futex,
                               blocked_sleep, busy_syscalls, busy_syscalls,
                               busy_syscalls, busy_syscalls };
    int *args[] = { &pipe_block[0], &pipe_wake[0], NULL, NULL,
                    NULL, NULL, NULL, NULL };
    int n = (int)(sizeof fns / sizeof fns[0]);

    if (pipe(pipe_block) || pipe(pipe_wake)) {
        return 92;
    }
    for (int i = 0; i < n; i++) {
        if (pthread_create(&t, NULL, fns[i], args[i])) {
            return 93;
        }
    }
    while (__atomic_load_n(&threads_up, __ATOMIC_SEQ_CST) < n) {
        sched_yield();
    }
    /* Give them time to block in their syscalls. */
    struct timespec ts = { 0, 200 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    say(out, "exit_blocked %d threads\n", n);
    work(20000);
    /* One read returns while the process exits. */
    if (write(pipe_wake[1], "x", 1) != 1) {
        return 94;
    }
    exit(0);
}

/* ---- fork_blocked ---- */

static int fork_blocked(const char *out)
{
    pthread_t t;
    int st;

    if (pipe(pipe_block) || pthread_create(&t, NULL, blocked_read, &pipe_block[0])) {
        return 92;
    }
    while (__atomic_load_n(&threads_up, __ATOMIC_SEQ_CST) < 1) {
        sched_yield();
    }
    struct timespec ts = { 0, 100 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    pid_t pid = fork();
    if (pid < 0) {
        return 93;
    }
    if (pid == 0) {
        work(20000);
        say(out, "fork_blocked child\n");
        exit(7);
    }
    if (waitpid(pid, &st, 0) != pid) {
        return 94;
    }
    say(out, "fork_blocked child %s\n", status_text(st));
    work(20000);
    if (write(pipe_block[1], "x", 1) != 1 || pthread_join(t, NULL)) {
        return 95;
    }
    say(out, "fork_blocked thread joined\n");
    return 0;
}

/* ---- fork_when ---- */

static int fork_when(const char *out, const char *flag)
{
    struct timespec ts = { 0, 10 * 1000 * 1000 };
    int st;

    say(out, "fork_when ready\n");
    for (int i = 0; access(flag, F_OK) != 0; i++) {
        if (i == 3000) {
            return 92;
        }
        nanosleep(&ts, NULL);
    }
    pid_t pid = fork();
    if (pid == 0) {
        work(20000);
        say(out, "fork_when child\n");
        exit(7);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid) {
        return 93;
    }
    say(out, "fork_when child %s\n", status_text(st));
    work(20000);
    return 0;
}

/* ---- spawn ---- */

static int spawn(const char *self, const char *out)
{
    char *argv[] = { (char *)self, "child", (char *)out, NULL };
    pid_t pid;
    int st, r;

    /* Nothing said before the child ends: QEMU runs the vfork as a fork,
     * and the child says something too. */
    r = posix_spawn(&pid, self, NULL, NULL, argv, environ);
    if (r == 0 && waitpid(pid, &st, 0) == pid) {
        say(out, "posix_spawn %s, child %s\n", errno_name(r), status_text(st));
    } else {
        say(out, "posix_spawn %s\n", errno_name(r));
    }
    work(20000);
    pid = vfork();
    if (pid == 0) {
        execve(self, argv, environ);
        _exit(127);
    }
    if (pid > 0 && waitpid(pid, &st, 0) == pid) {
        say(out, "vfork child %s\n", status_text(st));
    }
    work(20000);
    say(out, "spawn end\n");
    return 0;
}

/* ---- exec_fail ---- */

static int copy_file(const char *from, const char *to, mode_t mode)
{
    char buf[65536];
    int in = open(from, O_RDONLY), o;
    ssize_t n;

    unlink(to);
    o = open(to, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (in < 0 || o < 0) {
        return -1;
    }
    while ((n = read(in, buf, sizeof buf)) > 0) {
        if (write(o, buf, (size_t)n) != n) {
            return -1;
        }
    }
    close(in);
    close(o);
    return chmod(to, mode);
}

static void try_exec(const char *out, const char *what, int dirfd,
                     const char *path, int flags, const char *self)
{
    char *argv[] = { (char *)self, "child", (char *)out, NULL };
    long r;

    errno = 0;
    r = syscall(SYS_execveat, dirfd, path, argv, environ, flags);
    say(out, "%s ret %ld errno %s\n", what, r, errno_name(errno));
    work(5000);
}

static int exec_fail(const char *self, const char *out)
{
    int fd;

    if (copy_file(self, "noexec-copy", 0644)) {
        return 92;
    }
    fd = open("garbage", O_WRONLY | O_CREAT | O_TRUNC, 0755);
    if (fd < 0 || write(fd, "no program\n", 11) != 11) {
        return 93;
    }
    close(fd);
    errno = 0;
    {
        char *argv[] = { (char *)self, "child", (char *)out, NULL };
        long r = syscall(SYS_execve, "./does-not-exist", argv, environ);
        say(out, "execve missing ret %ld errno %s\n", r, errno_name(errno));
    }
    try_exec(out, "missing", AT_FDCWD, "./does-not-exist", 0, self);
    try_exec(out, "not executable", AT_FDCWD, "noexec-copy", 0, self);
    try_exec(out, "directory", AT_FDCWD, ".", 0, self);
    try_exec(out, "no program", AT_FDCWD, "garbage", 0, self);
    fd = open("noexec-copy", O_RDONLY);
    try_exec(out, "fd not executable", fd, "", AT_EMPTY_PATH, self);
    close(fd);
    try_exec(out, "empty path", AT_FDCWD, "", 0, self);
    work(20000);
    say(out, "exec_fail end\n");
    return 0;
}

/* ---- execveat ---- */

/* In a forked child, execveat; the parent reports how the child ended. */
static void exec_in_child(const char *out, const char *what, int dirfd,
                          const char *path, int flags, const char *self)
{
    int st;
    pid_t pid = fork();

    if (pid == 0) {
        try_exec(out, what, dirfd, path, flags, self);
        _exit(100 + errno);
    }
    if (pid > 0 && waitpid(pid, &st, 0) == pid) {
        say(out, "%s: %s\n", what, status_text(st));
    }
    work(5000);
}

static int execveat_modes(const char *self, const char *out)
{
    char dir[4096];
    const char *slash = strrchr(self, '/');
    int dirfd, fd;

    if (!slash || slash - self >= (long)sizeof dir) {
        return 92;
    }
    memcpy(dir, self, (size_t)(slash - self));
    dir[slash - self] = 0;
    /* Close-on-exec, as a careful program opens them. */
    dirfd = open(dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    fd = open(self, O_RDONLY | O_CLOEXEC);
    unlink("link");
    if (dirfd < 0 || fd < 0 || symlink(self, "link")) {
        return 93;
    }
    exec_in_child(out, "dirfd relative", dirfd, slash + 1, 0, self);
    exec_in_child(out, "fexecve", fd, "", AT_EMPTY_PATH, self);
    exec_in_child(out, "symlink followed", AT_FDCWD, "link", 0, self);
    exec_in_child(out, "nofollow file", AT_FDCWD, self, AT_SYMLINK_NOFOLLOW,
                  self);
    try_exec(out, "nofollow symlink", AT_FDCWD, "link", AT_SYMLINK_NOFOLLOW,
             self);
    try_exec(out, "dirfd missing", dirfd, "does-not-exist", 0, self);
    work(20000);
    say(out, "execveat end\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: hostile MODE OUT (see hostile.c)\n");
        return 2;
    }
    const char *mode = argv[1], *out = argv[2];
    work(20000);
    if (strcmp(mode, "child") == 0) {
        say(out, "child ran\n");
        return 7;
    } else if (strcmp(mode, "exit_blocked") == 0) {
        return exit_blocked(out);
    } else if (strcmp(mode, "fork_blocked") == 0) {
        return fork_blocked(out);
    } else if (strcmp(mode, "fork_when") == 0 && argc == 4) {
        return fork_when(out, argv[3]);
    } else if (strcmp(mode, "spawn") == 0) {
        return spawn(argv[0], out);
    } else if (strcmp(mode, "exec_fail") == 0) {
        return exec_fail(argv[0], out);
    } else if (strcmp(mode, "execveat") == 0) {
        return execveat_modes(argv[0], out);
    }
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
