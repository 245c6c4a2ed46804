/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * probe: functions with known arguments and results, for `cannoli probe`.
 * Every call prints what it was given and what it returned, so a test can
 * compare the probe's arguments and return values with the program's own
 * word: six integer arguments, recursion, a call through a pointer, a tail
 * call, a longjmp out of a recursion, and three threads calling the same
 * function.
 */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noipa))

volatile long pr_sink;

/* Six integer arguments: every register of the convention (and the stack
 * on i386). */
NOINLINE long pr_add6(long a, long b, long c, long d, long e, long f)
{
    return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f;
}

/* Recursion that stays a call (not turned into a loop): each level returns
 * to the one above it, at the same return address. */
NOINLINE long pr_rec(long n)
{
    if (n == 0)
        return 1;
    long r = pr_rec(n - 1);
    pr_sink = r;
    return r * 3 + n;
}

/* Called through a pointer. */
NOINLINE long pr_viaptr(long x)
{
    return x * x + 1;
}

long (*volatile pr_fp)(long) = pr_viaptr;

/* pr_tail's last act is a jump to pr_tailee: both return at once. */
NOINLINE long pr_tailee(long x)
{
    pr_sink = x;
    return x * 7;
}

NOINLINE long pr_tail(long x)
{
    pr_sink = x;
    return pr_tailee(x + 1);
}

/* pr_deep recurses n levels, then longjmps back to pr_catch: its frames
 * never return. */
static jmp_buf pr_env;

NOINLINE long pr_deep(long n)
{
    if (n == 0)
        longjmp(pr_env, 7);
    long r = pr_deep(n - 1);
    pr_sink = r;
    return r + 1;
}

NOINLINE long pr_catch(long n)
{
    volatile long keep = n;
    int v = setjmp(pr_env);
    if (v)
        return v * 100 + keep;
    long r = pr_deep(n);
    pr_sink = r;
    return r;
}

static void *worker(void *p)
{
    long i = (long)p;
    long r = pr_add6(i, i + 1, i + 2, i + 3, i + 4, i + 5);
    printf("thread %ld: pr_add6(%ld,%ld,%ld,%ld,%ld,%ld)=%ld\n", i, i, i + 1, i + 2, i + 3,
           i + 4, i + 5, r);
    return NULL;
}

/* `probe spin`: one call, then a loop that computes a while between
 * syscalls that never sleep (reads of a non-blocking stdin) until a line
 * comes: a thread that runs on without sleeping and writes few events (a
 * syscall's few words), whose hit must reach a live probe all the same. */
static int spin(void)
{
    char buf[64];
    ssize_t n;

    printf("pr_add6(1,2,3,4,5,6)=%ld\n", pr_add6(1, 2, 3, 4, 5, 6));
    fflush(stdout);
    if (fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK) != 0)
        return 2;
    do {
        for (long i = 0; i < 2000000; i++)
            pr_sink++;
    } while ((n = read(0, buf, sizeof buf - 1)) < 0);
    buf[n] = 0;
    printf("got %s", buf);
    return 0;
}

/* `probe nothreads` stops before the threads (QEMU's execlog plugin,
 * a test's ground truth, does not survive them). */
int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "spin") == 0)
        return spin();
    long r = pr_add6(1, 2, 3, 4, 5, 6);
    printf("pr_add6(1,2,3,4,5,6)=%ld\n", r);
    r = pr_add6(-1, 100, -10000, 7, 0, 1234567);
    printf("pr_add6(-1,100,-10000,7,0,1234567)=%ld\n", r);
    for (long n = 0; n <= 4; n += 4)
        printf("pr_rec(%ld)=%ld\n", n, pr_rec(n));
    printf("pr_viaptr(9)=%ld\n", pr_fp(9));
    printf("pr_tail(5)=%ld\n", pr_tail(5));
    printf("pr_catch(3)=%ld\n", pr_catch(3));
    if (argc > 1)
        return 0;
    /* Three threads at once: their lines come in any order. */
    pthread_t t[3];
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, worker, (void *)(10 * (i + 1)));
    for (long i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    return 0;
}
