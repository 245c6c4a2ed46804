/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * signals: signal delivery, for e2e/tests/processes.rs. Every signal
 * arrives at a point the program controls, so the instruction sequence is
 * the same on every run:
 *
 *   1. SIGSEGV: a load from FAULT_ADDR (unmapped); on_segv siglongjmps back;
 *   2. SIGALRM: a 20 ms one-shot ITIMER_REAL while SIGALRM is blocked, then
 *      sigsuspend with it unblocked, so on_alrm runs from inside
 *      sigsuspend, however long the timer takes;
 *   3. SIGUSR1: raise() (delivered on the return of its tgkill);
 *   4. SIGUSR2: raise(); on_usr2 writes a line and ends the process with
 *      _exit(EXIT_STATUS) from inside the handler.
 *
 * Prints one line per step (the handlers count with volatile sig_atomic_t);
 * the tests check the addresses of the handlers and FAULT_ADDR against
 * this program's symbol table and `fault_address`.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define EXIT_STATUS 7

/* The faulting address; opaque to the compiler. */
volatile unsigned long fault_address = 0x1238;

static sigjmp_buf segv_jmp;
static volatile sig_atomic_t segv_count, alrm_count, usr1_count;

void on_segv(int sig)
{
    segv_count++;
    siglongjmp(segv_jmp, 1);
}

void on_alrm(int sig)
{
    alrm_count++;
}

void on_usr1(int sig)
{
    usr1_count++;
}

void on_usr2(int sig)
{
    static const char msg[] = "signals: exiting from the SIGUSR2 handler\n";
    if (write(1, msg, sizeof msg - 1) < 0)
        _exit(1);
    _exit(EXIT_STATUS);
}

static void handle(int sig, void (*fn)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0) {
        perror("sigaction");
        _exit(1);
    }
}

int main(void)
{
    handle(SIGSEGV, on_segv);
    handle(SIGALRM, on_alrm);
    handle(SIGUSR1, on_usr1);
    handle(SIGUSR2, on_usr2);

    /* 1. SIGSEGV, twice, back through siglongjmp. */
    for (int i = 0; i < 2; i++) {
        if (sigsetjmp(segv_jmp, 1) == 0) {
            int v = *(volatile int *)fault_address;
            printf("signals: no fault (%d)\n", v);
        }
    }
    printf("signals: %d SIGSEGV handled\n", (int)segv_count);

    /* 2. SIGALRM from a timer, received in sigsuspend. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGALRM);
    sigprocmask(SIG_BLOCK, &block, &old);
    struct itimerval it = { .it_interval = { 0, 0 }, .it_value = { 0, 20000 } };
    if (setitimer(ITIMER_REAL, &it, NULL) != 0) {
        perror("setitimer");
        return 1;
    }
    sigset_t wait_mask = old;
    sigdelset(&wait_mask, SIGALRM);
    while (alrm_count == 0)
        sigsuspend(&wait_mask);
    sigprocmask(SIG_SETMASK, &old, NULL);
    printf("signals: %d SIGALRM handled\n", (int)alrm_count);

    /* 3. SIGUSR1. */
    raise(SIGUSR1);
    printf("signals: %d SIGUSR1 handled\n", (int)usr1_count);
    fflush(stdout);

    /* 4. SIGUSR2: its handler ends the process. */
    raise(SIGUSR2);
    printf("signals: still alive after SIGUSR2\n");
    return 1;
}
