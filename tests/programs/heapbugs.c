/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * heapbugs: one planted heap bug per run, picked by argv[1], for the
 * `cannoli heap` tests (e2e/tests/heap.rs), whose expected findings come
 * from Valgrind memcheck's run of the x86_64 build (e2e/src/memcheck.rs):
 *
 *   uaf-read uaf-write        a freed block read / written
 *   overflow-read overflow-write   one byte past the end
 *   underflow                 one byte before the start
 *   double-free               the same block freed twice
 *   free-interior free-stack  free of a pointer that is no block's start
 *   leak                      a dropped pointer beside a reachable block
 *   realloc-move              the old pointer used after realloc moved it
 *   fnptr                     an overflow inside a function called by pointer
 *   uaf-join                  a block a thread freed, read after joining it
 *   uaf-fork                  a forked child frees two of its parent's
 *                             blocks, then reads one
 *
 * Every function of this program is named hb_* (main aside), is noinline
 * and ends with a barrier after its bad call, so that the innermost
 * program frame of each finding is the function named here (no inlining,
 * no tail call into free). Pointers and indexes go through volatile
 * variables, so -O2 can neither see the bug (no -Wuse-after-free or
 * -Warray-bounds) nor fold it away.
 *
 * glibc's own checks abort on some bad frees ("free(): invalid pointer");
 * memcheck replaces free and never gets there. So that both runs go on to
 * the same exit (and the same leak check), SIGABRT is caught and the run
 * jumps back to main, which frees what is left and returns 0. The double
 * free is planted where glibc does not check it: the block is freed to a
 * fastbin (tcache for its size already full) with another block freed in
 * between, so fastbin's "fasttop" check does not see it either.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
/* dyn_heapbugs.c includes this file: the same program, dynamically linked */

#define HB __attribute__((noinline))
#define BARRIER() __asm__ volatile("" ::: "memory")

/* Opaque to the compiler: what goes through here may be anything. */
static void *volatile launder_slot;
static volatile size_t launder_index;
static volatile int sink;

/* The block that stays reachable in `leak` (a global points to it). */
static void *volatile reachable;

static sigjmp_buf back;

HB static void *hb_launder(void *p)
{
    launder_slot = p;
    return launder_slot;
}

HB static size_t hb_index(size_t i)
{
    launder_index = i;
    return launder_index;
}

HB static void hb_uaf_read(void)
{
    char *p = malloc(48);
    memset(p, 'a', 48);
    volatile char *q = hb_launder(p);
    free(p);
    sink = q[hb_index(24)];
    BARRIER();
}

HB static void hb_uaf_write(void)
{
    char *p = malloc(40);
    memset(p, 'b', 40);
    volatile char *q = hb_launder(p);
    free(p);
    q[hb_index(20)] = 'x';
    BARRIER();
}

HB static void hb_overflow_read(void)
{
    char *p = malloc(37);
    memset(p, 'c', 37);
    volatile char *q = hb_launder(p);
    sink = q[hb_index(37)];
    BARRIER();
    free(p);
}

HB static void hb_overflow_write(void)
{
    char *p = malloc(29);
    memset(p, 'd', 29);
    volatile char *q = hb_launder(p);
    q[hb_index(29)] = 'x';
    BARRIER();
    free(p);
}

HB static void hb_underflow(void)
{
    char *p = malloc(52);
    memset(p, 'e', 52);
    volatile char *q = hb_launder(p);
    sink = *(q - hb_index(1));
    BARRIER();
    free(p);
}

HB static void hb_double_free(void)
{
    /* Fill the tcache of this size (7 entries), then free `a` to a
     * fastbin, `b` after it, and `a` again: glibc sees neither. */
    void *fill[7];
    for (int i = 0; i < 7; i++)
        fill[i] = hb_launder(malloc(24));
    void *a = hb_launder(malloc(24));
    void *b = hb_launder(malloc(24)); /* used: -O2 drops an unused pair */
    void *again = hb_launder(a);
    for (int i = 0; i < 7; i++)
        free(fill[i]);
    free(a);
    free(b);
    free(again);
    BARRIER();
}

HB static void hb_free_interior(void)
{
    /* Two words in, where glibc's chunk alignment holds (MIPS traps a
     * misaligned load in glibc's free): glibc reads the zeros before it as
     * the chunk's size and refuses it. */
    char *p = malloc(64);
    memset(p, 0, 64);
    free(hb_launder(p + 2 * sizeof(size_t)));
    BARRIER();
}

HB static void hb_free_stack(void)
{
    /* Looks like a chunk of size 0 to glibc: its first check refuses it. */
    struct {
        size_t hdr[2];
        char data[32];
    } __attribute__((aligned(16))) fake;
    memset(&fake, 0, sizeof fake);
    free(hb_launder(fake.data));
    BARRIER();
}

HB static void hb_leak(void)
{
    reachable = malloc(72);
    void *lost = malloc(33);
    memset(lost, 'f', 33);
    hb_launder(lost);
    launder_slot = 0; /* the last pointer to it is gone */
    BARRIER();
}

HB static void hb_realloc_move(void)
{
    char *p = malloc(32);
    memset(p, 'g', 32);
    /* A neighbour after it: realloc cannot grow it in place (laundered,
     * or GCC drops the malloc and free of a block nobody uses). */
    void *guard = hb_launder(malloc(32));
    char *old = hb_launder(p);
    char *n = realloc(p, 4000);
    volatile char *q = hb_launder(old);
    q[hb_index(3)] = 'y';
    BARRIER();
    free(n);
    free(hb_launder(guard));
}

HB static void hb_fnptr_target(char *p, size_t n)
{
    volatile char *q = hb_launder(p);
    q[hb_index(n)] = 'z';
    BARRIER();
}

static void (*volatile hb_handler)(char *, size_t) = hb_fnptr_target;

HB static void hb_fnptr(void)
{
    char *p = malloc(44);
    memset(p, 'h', 44);
    hb_handler(p, 44);
    BARRIER();
    free(p);
}

/* uaf-join's thread: its block is freed before the thread returns the
 * pointer, so only pthread_join orders the free before main's read. */
HB static void *hb_join_worker(void *arg)
{
    char *p = malloc(24);
    memset(p, 't', 24);
    void *q = hb_launder(p);
    free(p);
    BARRIER();
    return q;
}

HB static void hb_uaf_join(void)
{
    pthread_t t;
    void *p = 0;
    if (pthread_create(&t, 0, hb_join_worker, 0) != 0 || pthread_join(t, &p) != 0)
        return;
    volatile char *q = hb_launder(p);
    sink = q[hb_index(5)];
    BARRIER();
}

/* uaf-fork's child: the blocks were its parent's before the fork, so
 * freeing them is fine (a shell's child does as much before it execs);
 * reading one after that is not. */
HB static void hb_fork_child(char *p, char *q)
{
    free(hb_launder(q));
    free(hb_launder(p));
    volatile char *r = hb_launder(p);
    sink = r[hb_index(7)];
    BARRIER();
}

HB static void hb_uaf_fork(void)
{
    char *p = malloc(40);
    char *q = malloc(56);
    memset(p, 'k', 40);
    memset(q, 'l', 56);
    pid_t child = fork();
    if (child == 0) {
        hb_fork_child(p, q);
        _exit(0);
    }
    int status;
    if (child > 0)
        waitpid(child, &status, 0);
    /* The parent's copies are still its own. */
    free(hb_launder(q));
    free(hb_launder(p));
    BARRIER();
}

static void hb_on_abort(int sig)
{
    siglongjmp(back, 1);
}

static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    {"uaf-read", hb_uaf_read},
    {"uaf-write", hb_uaf_write},
    {"overflow-read", hb_overflow_read},
    {"overflow-write", hb_overflow_write},
    {"underflow", hb_underflow},
    {"double-free", hb_double_free},
    {"free-interior", hb_free_interior},
    {"free-stack", hb_free_stack},
    {"leak", hb_leak},
    {"realloc-move", hb_realloc_move},
    {"fnptr", hb_fnptr},
    {"uaf-join", hb_uaf_join},
    {"uaf-fork", hb_uaf_fork},
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[1], cases[i].name) != 0)
            continue;
        /* stdout's buffer is allocated here, before the bug: no large
         * malloc after a double free consolidates the broken fastbin. */
        printf("%s\n", argv[1]);
        fflush(stdout);
        signal(SIGABRT, hb_on_abort);
        if (sigsetjmp(back, 1) == 0)
            cases[i].fn();
        else
            printf("glibc aborted\n");
        /* The interior free left its block live: free it for real. */
        if (launder_slot && strcmp(argv[1], "free-interior") == 0)
            free((char *)launder_slot - 2 * sizeof(size_t));
        printf("%s done\n", argv[1]);
        return 0;
    }
    fprintf(stderr, "heapbugs: unknown case %s\n", argv[1]);
    return 2;
}
