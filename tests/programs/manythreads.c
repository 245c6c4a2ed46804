/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * manythreads: many guest threads alive at once, for the client's
 * descriptor limits (e2e/tests/manythreads.rs).
 *
 *   manythreads [THREADS] [WORK]      (defaults: 1000 threads, WORK = 2000)
 *
 * main creates THREADS threads (small stacks, so that a 32-bit guest has
 * room for them), each of which waits on a barrier of THREADS + 1 parties
 * (main is the last): no thread can exit before every one of them has
 * started, so all THREADS streams are open at once. Then each computes
 * WORK * (index % 7 + 1) iterations of arithmetic and stores its result;
 * main joins them in creation order and prints
 *
 *   manythreads: N threads, sum XXXXXXXX
 *
 * which is the same on every run (stdout). Exit status 0, or 1 if a thread
 * could not be created (stderr says which and why).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_THREADS 4096

static pthread_barrier_t barrier;
static long work = 2000;
static uint32_t result[MAX_THREADS];

static void *worker(void *arg)
{
    long index = (long)arg;
    uint32_t x = (uint32_t)index + 1;

    pthread_barrier_wait(&barrier);
    for (long i = 0; i < work * (index % 7 + 1); i++)
        x = x * 1103515245u + 12345u;
    result[index] = x;
    return NULL;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    pthread_t tids[MAX_THREADS];
    pthread_attr_t attr;
    uint32_t sum = 0;

    if (argc > 2)
        work = atol(argv[2]);
    if (n < 1 || n > MAX_THREADS) {
        fprintf(stderr, "manythreads: THREADS must be 1 to %d\n", MAX_THREADS);
        return 2;
    }
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_barrier_init(&barrier, NULL, (unsigned)n + 1);
    for (long i = 0; i < n; i++) {
        int e = pthread_create(&tids[i], &attr, worker, (void *)i);
        if (e != 0) {
            fprintf(stderr, "manythreads: thread %ld: %s\n", i, strerror(e));
            return 1;
        }
    }
    pthread_barrier_wait(&barrier);
    for (long i = 0; i < n; i++) {
        pthread_join(tids[i], NULL);
        sum += result[i];
    }
    printf("manythreads: %ld threads, sum %08x\n", n, (unsigned)sum);
    return 0;
}
