/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * probe_strlen: calls strlen through a pointer with known strings and
 * prints each result, for `cannoli probe -p strlen:return` (glibc's strlen
 * is an indirect function on x86_64, i386, aarch64 and ppc64le: its symbol
 * is the resolver, and calls reach the implementation it picked).
 */
#include <stdio.h>
#include <string.h>

size_t (*volatile p_strlen)(const char *) = strlen;

int main(void)
{
    const char *words[] = {"a", "hello", "twelve chars", "",
                           "thirty-three characters long, yes"};
    for (int i = 0; i < 5; i++)
        printf("%zu\n", p_strlen(words[i]));
    return 0;
}
