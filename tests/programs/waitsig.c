/* Says it is ready, then waits in a blocking syscall until a signal with
 * its default action (e.g. SIGTERM from outside) ends it. */
#include <stdio.h>
#include <unistd.h>

int main(void)
{
    puts("ready");
    fflush(stdout);
    for (;;)
        pause();
}
