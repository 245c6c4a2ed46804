/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * storm: a signal storm over a deterministic loop, for e2e/tests/storm.rs.
 *
 * usage: storm SIGNALS [WORK [MIN_ITERATIONS [MAX_ITERATIONS]]]
 *
 * The storm is driven by count, not by time, so that it is the same storm
 * on a fast, slow or busy machine:
 *
 *   - a second thread ("killer", SIGUSR1 and SIGALRM blocked, so every
 *     signal goes to the main thread) tgkill()s the main thread with
 *     SIGUSR1 (handler on_usr1) exactly SIGNALS times, each time waiting
 *     until the handler has run before the next (so no two are merged into
 *     one pending signal), and every FORK_EVERY kills forks a child that
 *     exits at once: under QEMU linux-user a fork takes the exclusive lock,
 *     which kicks the main thread's vCPU (cpu_exit) wherever it is;
 *   - an ITIMER_REAL fires every 50 us (SIGALRM, handler on_alrm) on top,
 *     as often as the machine manages: those are counted, not required.
 *
 * Meanwhile the main thread runs storm_loop: calls of storm_tick with WORK
 * rounds of arithmetic between them, at least MIN_ITERATIONS times and
 * until the killer is done, but never more than MAX_ITERATIONS times (a
 * bound, so that a machine that delivers no signal at all still ends: the
 * program then says so and exits 2). Host signals thus reach QEMU while the
 * main vCPU is in translated code, in helpers, in the prologue/epilogue and
 * in syscalls. The program then stops the timer, blocks both signals (so
 * the counts are final) and prints:
 *
 *   storm: <N> iterations, <T> ticks, result <hex>
 *   storm: SIGUSR1 sent <S> handled <H1>              (H1 = S = SIGNALS)
 *   storm: SIGALRM handled <H2>                       (varies)
 *   storm: forks <F>                                  (SIGNALS / FORK_EVERY)
 *
 * N, and so T and the result, vary with the timing too. The tests find
 * storm_loop, storm_tick, on_usr1 and on_alrm by their symbols: they live
 * together in the section .text.storm (so one address range covers them),
 * and storm_tick's first instruction runs exactly once per iteration.
 * storm_loop is there too: the tests also check that each iteration
 * executes the same instruction sequence.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FORK_EVERY 100

#define STORM __attribute__((section(".text.storm"), noinline, noclone, used))

static volatile sig_atomic_t usr1_count, alrm_count;
/* storm_tick's own count of its calls. */
volatile unsigned long ticks;
/* Set by the killer once it has sent (and seen handled) all its signals. */
static volatile int killer_done;
static pid_t main_tid;
static unsigned long signals, sent, forks;

STORM void on_usr1(int sig)
{
    usr1_count++;
}

STORM void on_alrm(int sig)
{
    alrm_count++;
}

/* One iteration's traced part: its first instruction runs exactly once per
 * iteration. */
STORM unsigned long storm_tick(unsigned long x, unsigned long i)
{
    ticks++;
    return x * 2654435761UL + i;
}

/* The loop: at least min iterations, and on until the killer is done, but
 * at most max. Every iteration compares i with one volatile bound (max
 * until the killer is done, then min), so that every iteration but the
 * last runs the same instructions: the tests trace only .text.storm
 * (which keeps the trace small) and check that the loop's instructions
 * form the same sequence in every iteration, however many signals
 * interrupted it. Returns the iterations run in *iterations. */
static volatile unsigned long bound;
static unsigned long min_iterations;

STORM unsigned long storm_loop(unsigned long work, unsigned long *iterations)
{
    unsigned long x = 1, i;
    for (i = 0; i < bound; i++) {
        x = storm_tick(x, i);
        for (unsigned long k = 0; k < work; k++) {
            x ^= x >> 7;
            x += k * 0x9e3779b9UL;
            __asm__ volatile("" : "+r"(x));
        }
    }
    *iterations = i;
    return x;
}

static void *killer(void *arg)
{
    struct timespec pause = {0, 20000};
    pid_t pid = getpid();
    while (sent < signals) {
        if (syscall(SYS_tgkill, pid, main_tid, SIGUSR1) != 0) {
            perror("storm: tgkill");
            _exit(1);
        }
        sent++;
        /* The next signal only once this one was handled: every one counts. */
        while ((unsigned long)usr1_count < sent)
            nanosleep(&pause, NULL);
        if (sent % FORK_EVERY == 0) {
            pid_t child = fork();
            if (child == 0)
                _exit(0);
            if (child < 0 || waitpid(child, NULL, 0) != child) {
                perror("storm: fork");
                _exit(1);
            }
            forks++;
        }
        nanosleep(&pause, NULL);
    }
    killer_done = 1;
    bound = min_iterations;
    return NULL;
}

static void handle(int sig, void (*fn)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0) {
        perror("storm: sigaction");
        _exit(1);
    }
}

int main(int argc, char **argv)
{
    signals = argc > 1 ? strtoul(argv[1], NULL, 0) : 1000;
    unsigned long work = argc > 2 ? strtoul(argv[2], NULL, 0) : 4;
    min_iterations = argc > 3 ? strtoul(argv[3], NULL, 0) : 100000;
    bound = argc > 4 ? strtoul(argv[4], NULL, 0) : 1000000000UL;
    main_tid = (pid_t)syscall(SYS_gettid);
    handle(SIGUSR1, on_usr1);
    handle(SIGALRM, on_alrm);
    /* Sleeps of 20 us, not 20 us plus the default 50 us of slack. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);

    sigset_t both, old;
    sigemptyset(&both);
    sigaddset(&both, SIGUSR1);
    sigaddset(&both, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &both, &old);
    pthread_t t;
    if (pthread_create(&t, NULL, killer, NULL) != 0) {
        fprintf(stderr, "storm: pthread_create failed\n");
        return 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    struct itimerval on = {{0, 50}, {0, 50}}, off;
    memset(&off, 0, sizeof off);
    if (setitimer(ITIMER_REAL, &on, NULL) != 0) {
        perror("storm: setitimer");
        return 1;
    }
    unsigned long n;
    unsigned long r = storm_loop(work, &n);

    setitimer(ITIMER_REAL, &off, NULL);
    if (!killer_done) {
        /* The bound: no storm came. Say so; the killer is left behind. */
        fprintf(stderr, "storm: only %lu of %lu signals handled in %lu iterations\n",
                (unsigned long)usr1_count, signals, n);
        _exit(2);
    }
    pthread_join(t, NULL);
    pthread_sigmask(SIG_BLOCK, &both, NULL);

    printf("storm: %lu iterations, %lu ticks, result %#lx\n", n, ticks, r);
    printf("storm: SIGUSR1 sent %lu handled %d\n", sent, (int)usr1_count);
    printf("storm: SIGALRM handled %d\n", (int)alrm_count);
    printf("storm: forks %lu\n", forks);
    return 0;
}
