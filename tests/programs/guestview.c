/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * guestview: what a guest sees of its descriptors, its limits and its
 * /proc, for e2e/tests/guestview.rs. Each mode writes what it observed to
 * the file OUT, so that a traced and an untraced run can be compared line
 * for line. The test starts it with a soft limit of 1024 descriptors.
 *
 *   guestview fds OUT         print the limits; raise the soft limit to the
 *                             hard one; hold 1,200 descriptors (open, dup,
 *                             fcntl F_DUPFD from 1250, dup2 to the 200
 *                             numbers below the limit, at least 2048)
 *                             while threads start and end; check and close
 *                             them; EMFILE at a lowered soft limit, and a
 *                             thread started with every descriptor taken;
 *                             lower the hard limit, raise it, and the
 *                             kernel's answers to out-of-range settings
 *   guestview exec OUT        lower the limits, then exec itself (mode
 *                             execd) to print what the new program sees
 *   guestview proc OUT        list /proc/self/fd, fdinfo, task/T/fd and
 *                             thread-self/fd, stat and readlink each entry,
 *                             print /proc/self/environ (and a thread's) and
 *                             the limits' open files line
 *   guestview reach OUT N     try to reach descriptors the guest did not
 *                             make: those /proc lists (none, untraced) and
 *                             every number from the hard limit up N, with
 *                             every kind of call; write a forged goodbye
 *                             to each socket found
 *
 * The hard limit is printed on a line of its own ("hard N"): a traced guest
 * that could not raise it sees a lower one (docs/guest-view.md); nothing
 * else depends on it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

static FILE *out;

__attribute__((format(printf, 1, 2)))
static void say(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fflush(out);
}

static const char *err_name(int e)
{
    switch (e) {
    case 0: return "ok";
    case EBADF: return "EBADF";
    case ENOENT: return "ENOENT";
    case EINVAL: return "EINVAL";
    case EPERM: return "EPERM";
    case EMFILE: return "EMFILE";
    case ENOTSOCK: return "ENOTSOCK";
    case ENOTDIR: return "ENOTDIR";
    case ENXIO: return "ENXIO";
    default: return "other";
    }
}

/* errno of a call that returns -1 on failure (0: it succeeded). */
static int err_of(long r)
{
    return r == -1 ? errno : 0;
}

static void limits_line(const char *what)
{
    struct rlimit r;

    if (getrlimit(RLIMIT_NOFILE, &r) != 0) {
        say("%s getrlimit %s\n", what, err_name(errno));
        return;
    }
    say("%s soft %llu\n", what, (unsigned long long)r.rlim_cur);
    say("hard %llu\n", (unsigned long long)r.rlim_max);
}

/* The "Max open files" line of /proc/self/limits, spaces squeezed. */
static void proc_limits(const char *what)
{
    char line[256];
    FILE *f = fopen("/proc/self/limits", "r");

    if (!f) {
        say("%s /proc/self/limits %s\n", what, err_name(errno));
        return;
    }
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "Max open files", 14) == 0) {
            char *w = line, *r = line;
            for (; *r; r++) {
                if (*r != ' ' || (w > line && w[-1] != ' ')) {
                    *w++ = *r;
                }
            }
            *w = 0;
            say("%s limits: %s", what, line);
        }
    }
    fclose(f);
}

/* Threads of this process, as /proc/self/task lists them. */
static int tasks(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;

    if (!d) {
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        n += e->d_name[0] != '.';
    }
    closedir(d);
    return n;
}

static void *nothing(void *arg)
{
    return arg;
}

/*
 * One thread started and gone, to the last host thread: the first thread
 * that exits makes glibc load its unwinder (libgcc_s) on QEMU's side, which
 * opens a file for a moment while the guest goes on after pthread_join. So
 * that happens before anything is observed. (Waiting for a count, not for
 * a time.)
 */
static void warm_up(void)
{
    int base = tasks();
    pthread_t t;

    if (pthread_create(&t, NULL, nothing, NULL) == 0) {
        pthread_join(t, NULL);
        while (tasks() > base) {
            sched_yield();
        }
    }
}

/* ---- fds ---- */

#define HELD 1200

static void *short_thread(void *arg)
{
    int fd = open("/dev/null", O_RDONLY);

    *(int *)arg = fd;
    if (fd >= 0) {
        close(fd);
    }
    return NULL;
}

static int fds_mode(void)
{
    static int fds[HELD];
    struct rlimit r;
    int n = 0, fail[4] = { 0 }, i;
    long sum[4] = { 0 };

    warm_up();
    limits_line("start");
    getrlimit(RLIMIT_NOFILE, &r);
    r.rlim_cur = r.rlim_max;
    say("raise soft to hard: %s\n", err_name(err_of(setrlimit(RLIMIT_NOFILE, &r))));
    long lim = (long)r.rlim_max;

    for (i = 0; i < 400; i++, n++) {
        fds[n] = open("/dev/null", O_RDONLY);
        fail[0] += fds[n] < 0;
        sum[0] += fds[n];
    }
    for (i = 0; i < 300; i++, n++) {
        fds[n] = dup(fds[i]);
        fail[1] += fds[n] < 0;
        sum[1] += fds[n];
    }
    for (i = 0; i < 300; i++, n++) {
        fds[n] = fcntl(fds[i], i % 2 ? F_DUPFD : F_DUPFD_CLOEXEC, 1250 + i);
        fail[2] += fds[n] < 0;
        sum[2] += fds[n] - (1250 + i);
    }
    for (i = 0; i < 200; i++, n++) {
        int to = (int)(lim - 1 - i);

        fds[n] = dup2(fds[i], to);
        fail[3] += fds[n] != to;
        sum[3] += fds[n] - to;
    }
    say("open: %d failed, fd sum %ld\n", fail[0], sum[0]);
    say("dup: %d failed, fd sum %ld\n", fail[1], sum[1]);
    say("fcntl F_DUPFD: %d failed, above the asked %ld\n", fail[2], sum[2]);
    say("dup2 below the limit: %d failed, off by %ld\n", fail[3], sum[3]);

    /* Threads start and end while the table is crowded, one at a time
     * (each gets the lowest free descriptor: the same one). */
    int got[16], tfail = 0, same = 1;
    for (i = 0; i < 16; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, short_thread, &got[i]) != 0) {
            tfail++;
            got[i] = -1;
            continue;
        }
        pthread_join(t, NULL);
        same &= got[i] == got[0];
    }
    say("threads: %d failed, their descriptor %d%s\n", tfail, got[0],
        same ? "" : " (not always)");

    int getfd = 0, closed = 0, reclose = 0;
    for (i = 0; i < n; i++) {
        getfd += fcntl(fds[i], F_GETFD) < 0;
    }
    for (i = 0; i < n; i++) {
        closed += close(fds[i]) != 0;
    }
    for (i = 0; i < n; i++) {
        reclose += close(fds[i]) == 0;
    }
    say("F_GETFD failed %d, close failed %d, second close worked %d\n",
        getfd, closed, reclose);

    /* EMFILE exactly at a lowered soft limit. */
    r.rlim_cur = 1100;
    say("soft to 1100: %s\n", err_name(err_of(setrlimit(RLIMIT_NOFILE, &r))));
    int opened = 0, last = -1, e = 0;
    for (;;) {
        int fd = open("/dev/null", O_RDONLY);
        if (fd < 0) {
            e = errno;
            break;
        }
        fds[opened++ % HELD] = fd;
        last = fd;
    }
    say("opened %d up to fd %d, then %s\n", opened, last, err_name(e));
    /* A thread starts while every descriptor the guest may have is taken
     * (traced, QEMU needs some of its own for it). */
    int at_limit = 0;
    pthread_t full;
    if (pthread_create(&full, NULL, short_thread, &at_limit) == 0) {
        pthread_join(full, NULL);
        say("a thread at the limit: its open %s\n", at_limit < 0 ? "failed" : "worked");
    } else {
        say("a thread at the limit: not started\n");
    }
    say("dup2 to 1100: %s\n", err_name(err_of(dup2(0, 1100))));
    say("F_DUPFD at 1100: %s\n", err_name(err_of(fcntl(0, F_DUPFD, 1100))));
    for (i = 0; i < opened && i < HELD; i++) {
        close(fds[i]);
    }

    /* The hard limit, lowered and raised. */
    r.rlim_cur = 1024;
    r.rlim_max = 1500;
    say("hard to 1500: %s\n", err_name(err_of(setrlimit(RLIMIT_NOFILE, &r))));
    r.rlim_max = 1600;
    int raised = err_of(setrlimit(RLIMIT_NOFILE, &r));
    say("hard back up to 1600: %s\n", raised == 0 ? "ok" : err_name(raised));
    limits_line("now");
    r.rlim_cur = r.rlim_max + 1;
    say("soft above hard: %s\n", err_name(err_of(setrlimit(RLIMIT_NOFILE, &r))));
    proc_limits("now");
#if defined(SYS_ugetrlimit) || defined(SYS_getrlimit)
    unsigned long old[2] = { 0, 0 };
#ifdef SYS_ugetrlimit
    long rc = syscall(SYS_ugetrlimit, RLIMIT_NOFILE, old);
#else
    long rc = syscall(SYS_getrlimit, RLIMIT_NOFILE, old);
#endif
    say("old getrlimit: %s %lu %lu\n", err_name(err_of(rc)), old[0], old[1]);
#else
    say("old getrlimit: none\n");
#endif
    struct rlimit p;
    say("prlimit64(own pid): %s", err_name(err_of(prlimit(getpid(), RLIMIT_NOFILE, NULL, &p))));
    say(" %llu %llu\n", (unsigned long long)p.rlim_cur, (unsigned long long)p.rlim_max);
    say("end\n");
    return 0;
}

/* ---- exec ---- */

static int exec_mode(char *self, const char *outname)
{
    struct rlimit r = { 700, 900 };

    say("limits to 700/900: %s\n", err_name(err_of(setrlimit(RLIMIT_NOFILE, &r))));
    fclose(out);
    execl(self, self, "execd", outname, (char *)NULL);
    out = fopen(outname, "a");
    say("exec failed: %s\n", strerror(errno));
    return 1;
}

static int execd_mode(void)
{
    struct rlimit r;

    getrlimit(RLIMIT_NOFILE, &r);
    say("after exec: soft %llu hard %llu\n", (unsigned long long)r.rlim_cur,
        (unsigned long long)r.rlim_max);
    proc_limits("after exec");
    r.rlim_max = 901;
    int e = err_of(setrlimit(RLIMIT_NOFILE, &r));
    say("after exec, hard up by one: %s\n", e == 0 ? "ok" : err_name(e));
    return 0;
}

/* ---- proc ---- */

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The names in a directory, as sorted numbers (-1: not a number). */
static int list_dir(const char *path, int *names, int cap)
{
    DIR *d = opendir(path);
    struct dirent *e;
    int n = 0;

    if (!d) {
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        if (n < cap) {
            char *end;
            long v = strtol(e->d_name, &end, 10);
            names[n++] = *end ? -1 : (int)v;
        }
    }
    closedir(d);
    qsort(names, n, sizeof(int), cmp_int);
    return n;
}

static void print_dir(const char *what, const char *path)
{
    int names[4096], n = list_dir(path, names, 4096);

    if (n < 0) {
        say("%s: %s\n", what, err_name(errno));
        return;
    }
    say("%s:", what);
    for (int i = 0; i < n; i++) {
        say(" %d", names[i]);
    }
    say("\n");
}

static char thread_dir[64];
static void *listing_thread(void *arg)
{
    print_dir("thread-self/fd in a thread", "/proc/thread-self/fd");
    snprintf(thread_dir, sizeof thread_dir, "/proc/self/task/%ld/fd", (long)syscall(SYS_gettid));
    print_dir("task/<thread>/fd", thread_dir);
    return NULL;
}

static void print_environ(const char *what, const char *path)
{
    char buf[65536];
    int fd = open(path, O_RDONLY);
    ssize_t n = 0, r;

    if (fd < 0) {
        say("%s: %s\n", what, err_name(errno));
        return;
    }
    while ((r = read(fd, buf + n, sizeof buf - 1 - n)) > 0) {
        n += r;
    }
    close(fd);
    buf[n] = 0;
    say("%s: %zd bytes\n", what, n);
    for (ssize_t i = 0; i < n; i += strlen(buf + i) + 1) {
        say("  %s\n", buf + i);
    }
}

static int proc_mode(void)
{
    int p[2], names[4096];
    char path[128], link[256];
    struct rlimit r = { 1024, 2000 };

    warm_up();
    say("limits to 1024/2000: %s\n", err_name(err_of(setrlimit(RLIMIT_NOFILE, &r))));
    if (pipe(p) != 0 || open("/dev/null", O_RDONLY) < 0 || socket(AF_UNIX, SOCK_STREAM, 0) < 0) {
        return 3;
    }
    print_dir("self/fd", "/proc/self/fd");
    print_dir("self/fdinfo", "/proc/self/fdinfo");
    snprintf(path, sizeof path, "/proc/%d/fd", getpid());
    print_dir("<pid>/fd", path);
    snprintf(path, sizeof path, "/proc/self/task/%d/fd", getpid());
    print_dir("task/<main>/fd", path);
    snprintf(path, sizeof path, "/proc/self/task/%d/fdinfo", getpid());
    print_dir("task/<main>/fdinfo", path);
    print_dir("thread-self/fd", "/proc/thread-self/fd");
    print_dir("/dev/fd", "/dev/fd");
    pthread_t t;
    if (pthread_create(&t, NULL, listing_thread, NULL) == 0) {
        pthread_join(t, NULL);
    }
    /* Every entry: readlink, stat and its fdinfo. */
    int n = list_dir("/proc/self/fd", names, 4096), bad = 0;
    for (int i = 0; i < n; i++) {
        struct stat st;
        snprintf(path, sizeof path, "/proc/self/fd/%d", names[i]);
        bad += readlink(path, link, sizeof link) < 0;
        bad += stat(path, &st) != 0 && errno != ENXIO;
        snprintf(path, sizeof path, "/proc/self/fdinfo/%d", names[i]);
        bad += access(path, R_OK) != 0;
    }
    say("entries %d, failed lookups %d\n", n, bad);
    print_environ("self/environ", "/proc/self/environ");
    snprintf(path, sizeof path, "/proc/%d/environ", getpid());
    print_environ("<pid>/environ", path);
    print_environ("thread-self/environ", "/proc/thread-self/environ");
    snprintf(path, sizeof path, "/proc/self/task/%d/environ", getpid());
    print_environ("task/<main>/environ", path);
    proc_limits("proc");
    say("end\n");
    return 0;
}

/* ---- reach ---- */

enum { C_GETFD, C_DUPFD, C_DUP, C_DUP2, C_DUP3, C_FSTAT, C_WRITE, C_PWRITE,
       C_READ, C_LSEEK, C_IOCTL, C_MMAP, C_SEND, C_SENDMSG, C_GETSOCKOPT,
       C_EPOLL, C_SCM_RIGHTS, C_FCHDIR, C_FSTATAT, C_READLINK, C_OPEN_FD,
       C_OPEN_FDINFO, C_STAT_DEV_FD, C_THREAD_SELF, C_SHUTDOWN, C_CLOSE,
       C_COUNT };
static const char *call_names[C_COUNT] = {
    "fcntl F_GETFD", "fcntl F_DUPFD", "dup", "dup2", "dup3", "fstat",
    "write", "pwrite", "read", "lseek", "ioctl FIONREAD", "mmap", "send",
    "sendmsg", "getsockopt", "epoll_ctl", "SCM_RIGHTS", "fchdir",
    "fstatat(fd, \"\")", "readlink fd/N", "open fd/N", "open fdinfo/N",
    "stat /dev/fd/N", "thread-self/fd/N", "shutdown", "close",
};
static int tally[C_COUNT][10];

static int tally_index(int e)
{
    static const int known[] = { 0, EBADF, ENOENT, EINVAL, ENOTSOCK, ENXIO };
    for (int i = 0; i < 6; i++) {
        if (known[i] == e) {
            return i;
        }
    }
    return 9;
}

static const char goodbye[] = "{\"chunks\":0,\"lost_events\":0,\"exec\":false}\n";

static int sv[2], ep;

static void try_fd(int fd)
{
    char path[64], buf[16];
    struct stat st;
    int e[C_COUNT];
    struct msghdr m;
    struct iovec iov = { (void *)goodbye, sizeof goodbye - 1 };
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } c;
    struct epoll_event ev = { .events = EPOLLIN };
    int v = 0;
    socklen_t vl = sizeof v;
    long r;

    e[C_GETFD] = err_of(fcntl(fd, F_GETFD));
    r = fcntl(fd, F_DUPFD, 0);
    e[C_DUPFD] = err_of(r);
    if (r >= 0) {
        close((int)r);
    }
    r = dup(fd);
    e[C_DUP] = err_of(r);
    if (r >= 0) {
        close((int)r);
    }
    r = dup2(fd, 500);
    e[C_DUP2] = err_of(r);
    close(500);
    r = dup3(fd, 501, O_CLOEXEC);
    e[C_DUP3] = err_of(r);
    close(501);
    e[C_FSTAT] = err_of(fstat(fd, &st));
    e[C_WRITE] = err_of(write(fd, goodbye, sizeof goodbye - 1));
    e[C_PWRITE] = err_of(pwrite(fd, goodbye, sizeof goodbye - 1, 0));
    e[C_READ] = err_of(read(fd, buf, 0));
    e[C_LSEEK] = err_of(lseek(fd, 0, SEEK_CUR));
    e[C_IOCTL] = err_of(ioctl(fd, FIONREAD, &v));
    void *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    e[C_MMAP] = p == MAP_FAILED ? errno : 0;
    if (p != MAP_FAILED) {
        munmap(p, 4096);
    }
    e[C_SEND] = err_of(send(fd, goodbye, sizeof goodbye - 1, MSG_NOSIGNAL | MSG_DONTWAIT));
    memset(&m, 0, sizeof m);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    e[C_SENDMSG] = err_of(sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT));
    e[C_GETSOCKOPT] = err_of(getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &vl));
    e[C_EPOLL] = err_of(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, &ev);
    memset(&c, 0, sizeof c);
    m.msg_control = c.b;
    m.msg_controllen = sizeof c.b;
    c.h.cmsg_level = SOL_SOCKET;
    c.h.cmsg_type = SCM_RIGHTS;
    c.h.cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(&c.h), &fd, sizeof fd);
    e[C_SCM_RIGHTS] = err_of(sendmsg(sv[0], &m, MSG_NOSIGNAL | MSG_DONTWAIT));
    if (e[C_SCM_RIGHTS] == 0) {
        /* Drain it, closing whatever came across. */
        char cb[CMSG_SPACE(sizeof(int))];
        struct msghdr rm = { .msg_iov = &iov, .msg_iovlen = 1,
                             .msg_control = cb, .msg_controllen = sizeof cb };
        char sink[128];
        struct iovec riov = { sink, sizeof sink };
        rm.msg_iov = &riov;
        if (recvmsg(sv[1], &rm, MSG_DONTWAIT) >= 0 && rm.msg_controllen > 0) {
            int got;
            memcpy(&got, CMSG_DATA(CMSG_FIRSTHDR(&rm)), sizeof got);
            close(got);
        }
    }
    e[C_FCHDIR] = err_of(fchdir(fd));
    if (e[C_FCHDIR] == 0 && chdir("/") != 0) {
        e[C_FCHDIR] = EIO;
    }
    e[C_FSTATAT] = err_of(fstatat(fd, "", &st, AT_EMPTY_PATH));
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    e[C_READLINK] = err_of(readlink(path, buf, sizeof buf));
    r = open(path, O_RDONLY);
    e[C_OPEN_FD] = err_of(r);
    if (r >= 0) {
        close((int)r);
    }
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    r = open(path, O_RDONLY);
    e[C_OPEN_FDINFO] = err_of(r);
    if (r >= 0) {
        close((int)r);
    }
    snprintf(path, sizeof path, "/dev/fd/%d", fd);
    e[C_STAT_DEV_FD] = err_of(stat(path, &st));
    snprintf(path, sizeof path, "/proc/thread-self/fd/%d", fd);
    e[C_THREAD_SELF] = err_of(lstat(path, &st));
    e[C_SHUTDOWN] = err_of(shutdown(fd, SHUT_RDWR));
    e[C_CLOSE] = err_of(close(fd));
    for (int i = 0; i < C_COUNT; i++) {
        tally[i][tally_index(e[i])]++;
    }
}

static int reach_mode(long range)
{
    static const char *dirs[] = { "/proc/self/fd", "/proc/self/fdinfo",
                                  "/proc/thread-self/fd", "/dev/fd" };
    static const char *kinds[10] = { "ok", "EBADF", "ENOENT", "EINVAL",
                                     "ENOTSOCK", "ENXIO", 0, 0, 0, "other" };
    int names[4096], foreign[4096], nforeign = 0;
    struct rlimit r;

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || (ep = epoll_create1(0)) < 0) {
        return 3;
    }
    /* Descriptors nobody here made: any listed that is not ours. */
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        int n = list_dir(dirs[d], names, 4096);
        for (int i = 0; i < n; i++) {
            int fd = names[i], known = fd <= 2 || fd == sv[0] || fd == sv[1] || fd == ep
                                       || fd == fileno(out);
            /* (the listing's own directory: one above ours) */
            known |= fd == ep + 1;
            for (int k = 0; k < nforeign; k++) {
                known |= foreign[k] == fd;
            }
            if (!known && nforeign < 4096) {
                foreign[nforeign++] = fd;
            }
        }
    }
    say("foreign descriptors listed: %d\n", nforeign);
    int sockets = 0;
    for (int i = 0; i < nforeign; i++) {
        struct stat st;
        if (fstat(foreign[i], &st) == 0 && S_ISSOCK(st.st_mode)) {
            sockets++;
            if (write(foreign[i], goodbye, sizeof goodbye - 1) < 0) {
                sockets += 1000;
            }
        }
    }
    say("foreign sockets written to: %d\n", sockets);
    for (int i = 0; i < nforeign; i++) {
        try_fd(foreign[i]);
    }
    getrlimit(RLIMIT_NOFILE, &r);
    for (long fd = (long)r.rlim_max; fd < (long)r.rlim_max + range; fd++) {
        try_fd((int)fd);
    }
    say("close_range(hard, ~0): %s\n",
        err_name(err_of(syscall(SYS_close_range, (unsigned)r.rlim_max, ~0U, 0))));
    for (int i = 0; i < C_COUNT; i++) {
        say("%s:", call_names[i]);
        for (int k = 0; k < 10; k++) {
            if (tally[i][k]) {
                say(" %s %d", kinds[k], tally[i][k]);
            }
        }
        say("\n");
    }
    say("end\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: guestview MODE OUT [N] (see guestview.c)\n");
        return 2;
    }
    const char *mode = argv[1];
    out = fopen(argv[2], "a");
    if (!out) {
        return 90;
    }
    if (strcmp(mode, "fds") == 0) {
        return fds_mode();
    } else if (strcmp(mode, "exec") == 0) {
        return exec_mode(argv[0], argv[2]);
    } else if (strcmp(mode, "execd") == 0) {
        return execd_mode();
    } else if (strcmp(mode, "proc") == 0) {
        return proc_mode();
    } else if (strcmp(mode, "reach") == 0 && argc == 4) {
        return reach_mode(strtol(argv[3], NULL, 10));
    }
    return 2;
}
