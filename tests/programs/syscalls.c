/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * syscalls: a variety of system calls with known arguments, results and
 * buffers, for the syscall-event tests (e2e/tests/syscalls.rs):
 *
 *   openat (create, an existing file, a missing file), write (to a file, to
 *   stdout, longer than the 4096 bytes a syscall event carries), lseek,
 *   read (a full buffer, a short read, end of file), getrandom, close (a good
 *   and a bad descriptor), getpid, mmap/munmap, brk (through malloc),
 *   unlinkat; reads that fail (a bad descriptor, a bad buffer).
 *
 * It works in its current directory (the test's run directory) and removes
 * the file it creates, so two runs in the same directory behave the same.
 * Deterministic stdout; exit status 0 unless a syscall misbehaves.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FILE_NAME "syscalls-test.tmp"
#define MISSING_NAME "syscalls-missing.tmp"
#define BIG 5000

static char big[BIG];
/* An unmapped address (volatile: the compiler must not see it is bad). */
static volatile uintptr_t bad_buffer = 16;

static void fail(const char *what)
{
    static const char msg[] = "syscalls: unexpected result of ";
    (void)!write(1, msg, sizeof msg - 1);
    (void)!write(1, what, strlen(what));
    (void)!write(1, "\n", 1);
    _exit(1);
}

int main(void)
{
    static const char greeting[] = "hello, file\n";
    char buf[64];
    unsigned char rnd[16];

    if (getpid() <= 0)
        fail("getpid");

    /* A new file: write, seek back, read it all, read at EOF. */
    int fd = openat(AT_FDCWD, FILE_NAME, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0)
        fail("openat create");
    if (write(fd, greeting, sizeof greeting - 1) != (ssize_t)sizeof greeting - 1)
        fail("write file");
    for (int i = 0; i < BIG; i++)
        big[i] = 'a' + i % 26;
    if (write(fd, big, BIG) != BIG)
        fail("write big");
    if (lseek(fd, 0, SEEK_SET) != 0)
        fail("lseek");
    if (read(fd, buf, sizeof greeting - 1) != (ssize_t)sizeof greeting - 1)
        fail("read file");
    if (memcmp(buf, greeting, sizeof greeting - 1) != 0)
        fail("read file data");
    if (lseek(fd, 0, SEEK_END) != (off_t)(sizeof greeting - 1 + BIG))
        fail("lseek end");
    if (read(fd, buf, sizeof buf) != 0)
        fail("read at eof");
    if (close(fd) != 0)
        fail("close");

    /* The existing file again, read-only: a short read. */
    fd = openat(AT_FDCWD, FILE_NAME, O_RDONLY);
    if (fd < 0)
        fail("openat existing");
    if (read(fd, buf, 5) != 5 || memcmp(buf, "hello", 5) != 0)
        fail("short read");
    if (close(fd) != 0)
        fail("close 2");

    /* Failures: a missing file, a bad descriptor, a bad buffer. */
    if (openat(AT_FDCWD, MISSING_NAME, O_RDONLY) != -1)
        fail("openat missing");
    if (close(77) != -1)
        fail("close bad fd");
    if (read(77, buf, 8) != -1)
        fail("read bad fd");
    fd = openat(AT_FDCWD, FILE_NAME, O_RDONLY);
    if (fd < 0)
        fail("openat 3");
    if (read(fd, (void *)bad_buffer, 4) != -1)
        fail("read to a bad buffer");
    if (close(fd) != 0)
        fail("close 3");

    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        fail("getrandom");

    /* An anonymous mapping, used and removed. */
    size_t len = 3 * 4096;
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        fail("mmap");
    for (size_t i = 0; i < len; i += 4096)
        m[i] = (unsigned char)i;
    if (munmap(m, len) != 0)
        fail("munmap");

    /* malloc grows the heap with brk. */
    char *p = malloc(20000);
    if (!p)
        fail("malloc");
    memset(p, 1, 20000);
    char *q = malloc(90000);
    if (!q)
        fail("malloc 2");
    q[89999] = 2;

    if (unlinkat(AT_FDCWD, FILE_NAME, 0) != 0)
        fail("unlinkat");

    static const char done[] = "syscalls: done\n";
    if (write(1, done, sizeof done - 1) != (ssize_t)sizeof done - 1)
        fail("write stdout");
    return p[0] + q[89999] - 3;
}
