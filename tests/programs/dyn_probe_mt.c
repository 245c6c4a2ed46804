/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * dyn_probe_mt: threads that call the dynamically linked C library while
 * the main thread, which mapped it, waits for them, for `cannoli probe -p
 * libc:FUNC` (the library's mapping event is in the main thread's stream,
 * which the client may see after the threads' hits). Each thread calls
 * labs() once through a pointer with a known argument; main prints the
 * results in thread order.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 8

long (*volatile p_labs)(long) = labs;
static long results[THREADS];

static long arg_of(long i)
{
    return -(i * 1000 + 7);
}

static void *work(void *arg)
{
    long i = (long)arg;
    results[i] = p_labs(arg_of(i));
    return NULL;
}

int main(void)
{
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, work, (void *)i) != 0) {
            fprintf(stderr, "dyn_probe_mt: pthread_create failed\n");
            return 1;
        }
    for (long i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (long i = 0; i < THREADS; i++)
        printf("labs(%ld)=%ld\n", arg_of(i), results[i]);
    return 0;
}
