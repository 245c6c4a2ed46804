/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * layout: prints where things are in its own address space, for
 * e2e/tests/layout.rs (tracing must not move anything).
 *
 * One `name 0x<address>` line each on stdout: `&main`, a global, a stack
 * variable of main, the program break (sbrk(0)) before and after a small
 * malloc, that malloc'd block, a large (mmap'd by malloc) block, an
 * anonymous mmap of its own, a stack variable of a second thread, and the
 * vDSO QEMU maps for the guest (AT_SYSINFO_EHDR, 0 if none). The
 * thread is joined before anything else is printed, so the output does not
 * depend on scheduling.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

static int global = 1;
static uintptr_t thread_stack;

static void *thread_main(void *arg)
{
    volatile int local = 2;
    thread_stack = (uintptr_t)&local;
    return arg;
}

int main(void)
{
    volatile int local = 3;
    void *brk0 = sbrk(0);
    void *small = malloc(100);
    void *brk1 = sbrk(0);
    void *large = malloc(4 << 20);
    void *map = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pthread_t t;

    if (small == NULL || large == NULL || map == MAP_FAILED) {
        perror("layout");
        return 1;
    }
    if (pthread_create(&t, NULL, thread_main, NULL) != 0 || pthread_join(t, NULL) != 0) {
        fprintf(stderr, "layout: thread failed\n");
        return 1;
    }
    printf("main %#lx\n", (unsigned long)(uintptr_t)&main);
    printf("global %#lx\n", (unsigned long)(uintptr_t)&global);
    printf("stack %#lx\n", (unsigned long)(uintptr_t)&local);
    printf("brk0 %#lx\n", (unsigned long)(uintptr_t)brk0);
    printf("small %#lx\n", (unsigned long)(uintptr_t)small);
    printf("brk1 %#lx\n", (unsigned long)(uintptr_t)brk1);
    printf("large %#lx\n", (unsigned long)(uintptr_t)large);
    printf("mmap %#lx\n", (unsigned long)(uintptr_t)map);
    printf("thread_stack %#lx\n", (unsigned long)thread_stack);
    printf("vdso %#lx\n", (unsigned long)getauxval(AT_SYSINFO_EHDR));
    return 0;
}
