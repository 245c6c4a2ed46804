/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * threads: a multi-threaded guest whose worker threads execute a
 * deterministic number of instructions, for e2e/tests/processes.rs.
 *
 *   threads [WORKERS] [WORK]      (defaults: 3 workers, WORK = 20000)
 *
 * main creates the workers one by one, waiting after each until it has
 * started, then releases them all, then joins them in creation order. Each
 * worker
 *
 *   0. writes a byte to the `started` pipe, which main waits for before it
 *      creates the next worker. This only narrows a window in which QEMU's
 *      libexeclog plugin (the tests' ground truth) can crash: it grows its
 *      per-vCPU array when a new vCPU starts, while other vCPUs may still
 *      use pointers into the old one (an upstream race). Blocked in read(),
 *      main executes nothing during most of the new thread's start;
 *   1. blocks in read() on a pipe until main writes its byte: the worker
 *      executes the same instructions however long it waits (the waiting is
 *      the host kernel's, inside one guest syscall instruction), and no
 *      worker can exit before main has created all of them. That matters:
 *      QEMU gives a new thread the lowest free vCPU index, so a worker that
 *      exited early would hand its index to the next one, and QEMU's plugins
 *      would add both threads' counts up under one index;
 *   2. computes WORK * (index + 1) iterations of arithmetic, no memory
 *      shared with other threads, no locks, no malloc, no stdio);
 *   3. stores its own thread id (gettid) in its slot, its result in another;
 *   4. blocks in read() on its own `leave` pipe until main, which lets the
 *      workers go one at a time, each after the one before it was joined;
 *   5. returns; glibc's thread exit path ends in the exit syscall. It
 *      decrements the process's thread count with an atomic read-modify-
 *      write, which on a load-linked/store-conditional guest (arm, aarch64,
 *      mips, riscv, ppc) is a retry loop: two workers leaving at once could
 *      make one of them loop once more, in one run and not in another (a
 *      loaded machine makes it likely). Leaving one at a time, no worker
 *      contends there, so its count does not depend on timing.
 *
 * A worker makes its syscalls with syscall(2), not glibc's read() and
 * write(): those are cancellation points, and each brackets the syscall
 * with a compare-and-swap on the thread's cancellation state. On a
 * load-reserved/store-conditional guest that is a loop whose load and store
 * sit in two translation blocks (ppc64le: `lwarx; cmpw; bne` then
 * `stwcx.; bne-`), and QEMU drops the reservation whenever it interrupts
 * the vCPU in between, as it does to every running vCPU for exclusive work
 * (for one, a plugin growing its per-vCPU scoreboard when main creates the
 * next worker): the loop then runs once more, 5 instructions on ppc64le, in
 * one run and not another. A fresh-clone CI run with two CPU hogs saw
 * ppc64le's worker 0 run 5 more instructions under libexeclog (2026-11-30).
 *
 * So worker i is vCPU i + 1 (main is vCPU 0) and its instruction count is
 * the same on every run. main's own count is not: pthread_join waits on a
 * futex only if the worker is still running, and the number of futex waits
 * depends on timing. Only main's instructions before `joins_begin` are
 * deterministic.
 *
 * stdout is the same on every run (the results); stderr gets one line
 * `worker I tid T` per worker, which maps thread ids to creation order.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_WORKERS 8

static int pipe_fds[2], started_fds[2];
static int leave_fds[MAX_WORKERS][2];
static long work = 20000;
static long worker_tid[MAX_WORKERS];
static uint32_t worker_result[MAX_WORKERS];

static void *worker(void *arg)
{
    long index = (long)arg;
    char c;

    if (syscall(SYS_write, started_fds[1], "s", 1) != 1)
        return (void *)1;
    if (syscall(SYS_read, pipe_fds[0], &c, 1) != 1)
        return (void *)1;
    uint32_t x = 0x9e3779b9u ^ (uint32_t)index;
    long n = work * (index + 1);
    for (long i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x += (uint32_t)i;
    }
    worker_result[index] = x;
    worker_tid[index] = syscall(SYS_gettid);
    if (syscall(SYS_read, leave_fds[index][0], &c, 1) != 1)
        return (void *)1;
    return NULL;
}

/* Where main's deterministic part ends (the tests look it up by name). */
__attribute__((noinline)) void joins_begin(void)
{
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
    long workers = argc > 1 ? atol(argv[1]) : 3;
    pthread_t th[MAX_WORKERS];

    if (argc > 2)
        work = atol(argv[2]);
    if (workers < 1 || workers > MAX_WORKERS) {
        fprintf(stderr, "threads: 1 to %d workers\n", MAX_WORKERS);
        return 2;
    }
    if (pipe(pipe_fds) != 0 || pipe(started_fds) != 0) {
        perror("pipe");
        return 1;
    }
    for (long i = 0; i < workers; i++) {
        if (pipe(leave_fds[i]) != 0) {
            perror("pipe");
            return 1;
        }
    }
    for (long i = 0; i < workers; i++) {
        int e = pthread_create(&th[i], NULL, worker, (void *)i);
        if (e != 0) {
            fprintf(stderr, "threads: pthread_create: error %d\n", e);
            return 1;
        }
        char s;
        if (read(started_fds[0], &s, 1) != 1) {
            perror("read");
            return 1;
        }
    }
    /* Release every worker at once. */
    char go[MAX_WORKERS] = { 0 };
    if (write(pipe_fds[1], go, (size_t)workers) != workers) {
        perror("write");
        return 1;
    }
    joins_begin();
    for (long i = 0; i < workers; i++) {
        void *ret;
        if (write(leave_fds[i][1], "l", 1) != 1) {
            perror("write");
            return 1;
        }
        pthread_join(th[i], &ret);
        if (ret != NULL) {
            fprintf(stderr, "threads: worker %ld failed\n", i);
            return 1;
        }
    }
    for (long i = 0; i < workers; i++)
        fprintf(stderr, "worker %ld tid %ld\n", i, worker_tid[i]);
    for (long i = 0; i < workers; i++)
        printf("threads: worker %ld result %08x\n", i, (unsigned)worker_result[i]);
    return 0;
}
